//! The delivery ledger's cases: an entry follows its message (queued with it, in a run with
//! the run, settled at the run's end, failed with a parked batch), ignored messages say
//! why, a failed one is retried once, and old entries are pruned.

use chrono::Utc;
use switchboard_gateway::store::{Noted, Retried};
use switchboard_protocol::gateway::{
    DeliveryEntry, DeliveryQuery, DeliveryStatus, InboundKind, Outbound, ParkedBatch,
};

use super::*;

async fn all(s: &GatewayStore, q: DeliveryQuery) -> Vec<DeliveryEntry> {
    s.deliveries(&q).await.unwrap().0
}

fn reply(id: &str) -> Outbound {
    Outbound {
        kind: "reply".into(),
        id: Some(id.into()),
        attempts: 2,
        error: None,
        at: chrono::DateTime::parse_from_rfc3339("2030-01-01T00:00:00.000001Z")
            .unwrap()
            .with_timezone(&Utc),
    }
}

pub async fn the_ledger_follows_a_message_from_queued_to_answered(s: &GatewayStore) {
    let mut q = queued("k", "hello ledger", None);
    q.attachments = vec![switchboard_gateway::Attachment {
        kind: "photo".into(),
        name: None,
        size: Some(10),
        mime: None,
        source: Some("f1".into()),
    }];
    let first = s.take_inbound(&q, "m1").await.unwrap().unwrap();
    let e = &all(s, DeliveryQuery::default()).await[0];
    assert_eq!(
        (
            e.status,
            e.kind,
            e.text.as_str(),
            e.message_id.as_str(),
            e.files
        ),
        (
            DeliveryStatus::Queued,
            InboundKind::Message,
            "hello ledger",
            "m1",
            1
        )
    );
    assert_eq!(
        (e.chat.clone(), e.peer.clone()),
        (q.chat.clone(), q.peer.clone())
    );
    assert_eq!((e.attempts, e.run_id, e.outbound.len()), (0, None, 0));
    // A later message is not in the run.
    s.take_inbound(&queued("k", "later", None), "m2")
        .await
        .unwrap()
        .unwrap();
    let run = followed("k");
    s.start_run(&run, first).await.unwrap();
    let entries = all(s, DeliveryQuery::default()).await;
    assert_eq!(entries[0].status, DeliveryStatus::Queued, "{entries:#?}");
    let e = &entries[1];
    assert_eq!(
        (e.status, e.run_id, e.session_id, e.attempts),
        (
            DeliveryStatus::InRun,
            Some(run.run_id),
            Some(run.session_id),
            1
        )
    );
    // Settled, with what was posted: counted once; settling again (a run followed again
    // after a crash) writes what it has, and counts nothing.
    let posted = vec![reply("7")];
    assert_eq!(
        s.settle_run(run.run_id, DeliveryStatus::Answered, None, &posted)
            .await
            .unwrap(),
        1
    );
    let posted = vec![reply("7"), reply("8")];
    assert_eq!(
        s.settle_run(run.run_id, DeliveryStatus::Answered, None, &posted)
            .await
            .unwrap(),
        0
    );
    let e = s.delivery(e.id).await.unwrap().unwrap();
    assert_eq!((e.status, e.outbound), (DeliveryStatus::Answered, posted));
    assert!(e.updated_at >= e.received_at);
    // Another run's settling leaves it alone.
    assert_eq!(
        s.settle_run(Uuid::now_v7(), DeliveryStatus::Failed, Some("x"), &[])
            .await
            .unwrap(),
        0
    );
}

pub async fn ignored_messages_say_why_and_name_their_original(s: &GatewayStore) {
    let taken = s
        .take_inbound(&queued("k", "once", None), "m1")
        .await
        .unwrap()
        .unwrap();
    let _ = taken;
    let original = all(s, DeliveryQuery::default()).await[0].id;
    let (c, p) = (chat("100", ChatKind::Thread), peer("alice"));
    let note = |status, reason, message_id| Noted {
        channel: "telegram",
        chat: &c,
        peer: &p,
        message_id,
        kind: InboundKind::Message,
        text: "once",
        status,
        reason,
    };
    let dup = s
        .note_delivery(&note(DeliveryStatus::Ignored, Some("duplicate"), "m1"))
        .await
        .unwrap();
    let dup2 = s
        .note_delivery(&note(DeliveryStatus::Ignored, Some("duplicate"), "m1"))
        .await
        .unwrap();
    for id in [dup, dup2] {
        let e = s.delivery(id).await.unwrap().unwrap();
        assert_eq!(
            (e.status, e.reason.as_deref(), e.duplicate_of),
            (DeliveryStatus::Ignored, Some("duplicate"), Some(original)),
            "a repeat names the first entry, not another repeat"
        );
    }
    let other_chat = chat("200", ChatKind::Direct);
    s.note_delivery(&Noted {
        chat: &other_chat,
        ..note(DeliveryStatus::Ignored, Some("not_allowed"), "m9")
    })
    .await
    .unwrap();
    let cmd = s
        .note_delivery(&Noted {
            kind: InboundKind::Command,
            ..note(DeliveryStatus::Received, None, "m3")
        })
        .await
        .unwrap();
    s.set_delivery(cmd, DeliveryStatus::Answered, None, &[reply("5")])
        .await
        .unwrap();
    let e = s.delivery(cmd).await.unwrap().unwrap();
    assert_eq!(
        (e.kind, e.status, e.outbound.len(), e.duplicate_of),
        (InboundKind::Command, DeliveryStatus::Answered, 1, None)
    );
    // Filters.
    let q = |channel: Option<&str>, chat: Option<&str>, status| DeliveryQuery {
        channel: channel.map(Into::into),
        chat: chat.map(Into::into),
        status,
        ..Default::default()
    };
    assert_eq!(all(s, q(None, None, None)).await.len(), 5);
    assert_eq!(all(s, q(Some("slack"), None, None)).await.len(), 0);
    assert_eq!(all(s, q(None, Some("200"), None)).await.len(), 1);
    assert_eq!(
        all(
            s,
            q(Some("telegram"), Some("100"), Some(DeliveryStatus::Ignored))
        )
        .await
        .len(),
        2
    );
    // Pages, newest first.
    let (page, next) = s
        .deliveries(&DeliveryQuery {
            limit: Some(2),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(page.len(), 2);
    assert!(page[0].id > page[1].id);
    let (rest, last) = s
        .deliveries(&DeliveryQuery {
            before: next,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!((rest.len(), last), (3, None));
    assert!(rest[0].id < page[1].id);
}

pub async fn a_failed_message_is_retried_once(s: &GatewayStore) {
    let q = queued("k", "refused text", None);
    let id = s.take_inbound(&q, "m1").await.unwrap().unwrap();
    let parked = ParkedBatch {
        id: format!("k:{id}-{id}"),
        routing_key: "k".into(),
        channel: "telegram".into(),
        chat: q.chat.clone(),
        senders: vec![q.peer.clone()],
        text: q.text.clone(),
        files: 0,
        code: "payload_too_large".into(),
        error: "too long".into(),
        parked_at: Utc::now(),
    };
    s.park("k", id, &parked).await.unwrap();
    let e = all(s, DeliveryQuery::default()).await.remove(0);
    assert_eq!(
        (e.status, e.reason.as_deref(), e.attempts),
        (
            DeliveryStatus::Failed,
            Some("the session refused it: too long"),
            1
        )
    );
    assert!(s.queued("k").await.unwrap().is_empty());
    assert_eq!(
        s.retry_delivery(e.id).await.unwrap(),
        Retried::Queued("k".into())
    );
    let back = s.queued("k").await.unwrap();
    assert_eq!(back.len(), 1);
    assert_eq!(
        (back[0].text.as_str(), &back[0].peer, &back[0].chat),
        ("refused text", &q.peer, &q.chat)
    );
    let again = s.delivery(e.id).await.unwrap().unwrap();
    assert_eq!((again.status, again.reason), (DeliveryStatus::Queued, None));
    // Queued on the new inbox row: the run takes it.
    assert_eq!(
        s.retry_delivery(e.id).await.unwrap(),
        Retried::NotFailed(DeliveryStatus::Queued)
    );
    let run = followed("k");
    s.start_run(&run, back[0].id).await.unwrap();
    let e = s.delivery(e.id).await.unwrap().unwrap();
    assert_eq!((e.status, e.attempts), (DeliveryStatus::InRun, 2));
    assert_eq!(s.retry_delivery(987_654).await.unwrap(), Retried::Unknown);
    let (c, p) = (chat("100", ChatKind::Thread), peer("alice"));
    let ignored = s
        .note_delivery(&Noted {
            channel: "telegram",
            chat: &c,
            peer: &p,
            message_id: "m5",
            kind: InboundKind::Message,
            text: "x",
            status: DeliveryStatus::Ignored,
            reason: Some("not_allowed"),
        })
        .await
        .unwrap();
    assert_eq!(
        s.retry_delivery(ignored).await.unwrap(),
        Retried::NotFailed(DeliveryStatus::Ignored)
    );
}

pub async fn stopped_and_interrupted_messages_do_not_stay_pending(s: &GatewayStore) {
    // `/stop` drops the queue: its entries are ignored, and a later run does not take them.
    let a = s
        .take_inbound(&queued("k", "a", None), "m1")
        .await
        .unwrap()
        .unwrap();
    let b = s
        .take_inbound(&queued("k", "b", None), "m2")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(s.dequeue("k", b).await.unwrap(), 2);
    let c = s
        .take_inbound(&queued("k", "c", None), "m3")
        .await
        .unwrap()
        .unwrap();
    assert!(a < b && b < c);
    s.start_run(&followed("k"), c).await.unwrap();
    let entries = all(s, DeliveryQuery::default()).await;
    let states: Vec<_> = entries
        .iter()
        .map(|e| (e.text.as_str(), e.status, e.reason.as_deref()))
        .collect();
    assert_eq!(
        states,
        [
            ("c", DeliveryStatus::InRun, None),
            ("b", DeliveryStatus::Ignored, Some("stopped")),
            ("a", DeliveryStatus::Ignored, Some("stopped")),
        ]
    );
    // A command left `received` by a stop fails once it is old enough.
    let (ch, p) = (chat("100", ChatKind::Thread), peer("alice"));
    let cmd = s
        .note_delivery(&Noted {
            channel: "telegram",
            chat: &ch,
            peer: &p,
            message_id: "m9",
            kind: InboundKind::Command,
            text: "/diff",
            status: DeliveryStatus::Received,
            reason: None,
        })
        .await
        .unwrap();
    let minute = chrono::Duration::minutes(1);
    assert_eq!(s.fail_interrupted(Utc::now() - minute).await.unwrap(), 0);
    assert_eq!(s.fail_interrupted(Utc::now() + minute).await.unwrap(), 1);
    let e = s.delivery(cmd).await.unwrap().unwrap();
    assert_eq!(e.status, DeliveryStatus::Failed);
    assert!(e.reason.unwrap().starts_with("interrupted"));
    // A stranger's long text is kept to its start; a queued message's whole.
    let long = "x".repeat(2000);
    let id = s
        .note_delivery(&Noted {
            channel: "telegram",
            chat: &ch,
            peer: &p,
            message_id: "m10",
            kind: InboundKind::Message,
            text: &long,
            status: DeliveryStatus::Ignored,
            reason: Some("not_allowed"),
        })
        .await
        .unwrap();
    assert_eq!(
        s.delivery(id).await.unwrap().unwrap().text.chars().count(),
        501
    );
    s.take_inbound(&queued("k", &long, None), "m11")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(all(s, DeliveryQuery::default()).await[0].text, long);
}

pub async fn old_ledger_entries_are_pruned(s: &GatewayStore) {
    s.take_inbound(&queued("k", "a", None), "m1")
        .await
        .unwrap()
        .unwrap();
    let hour = chrono::Duration::hours(1);
    assert_eq!(s.prune_ledger(Utc::now() - hour).await.unwrap(), 0);
    assert_eq!(all(s, DeliveryQuery::default()).await.len(), 1);
    assert_eq!(s.prune_ledger(Utc::now() + hour).await.unwrap(), 1);
    assert!(all(s, DeliveryQuery::default()).await.is_empty());
    // More than one batch.
    for i in 0..1005 {
        s.take_inbound(&queued("k", "b", None), &format!("n{i}"))
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(s.prune_ledger(Utc::now() + hour).await.unwrap(), 1005);
    assert!(all(s, DeliveryQuery::default()).await.is_empty());
}
