//! Forking: a new session holding another's history up to a point of its log.

use serde_json::json;
use uuid::Uuid;

use super::{LEASE, check, new_session_record, ts};
use crate::search::SearchQuery;
use crate::{FileRecord, ForkOutcome, Lease, MessageRecord, NewEvent, NewRun, RunOutcome, Store};

fn ev(session: Uuid, seq: u64, run: Uuid, kind: &str, payload: String) -> NewEvent {
    NewEvent {
        session_id: session,
        seq,
        run_id: Some(run),
        kind: kind.into(),
        payload,
        created_at: ts(seq as u32),
    }
}

async fn say(store: &dyn Store, session: Uuid, run: Uuid, role: &str, text: &str, lease: &Lease) {
    let m = MessageRecord {
        id: Uuid::now_v7(),
        session_id: session,
        run_id: Some(run),
        role: role.into(),
        content: text.into(),
        tool_calls: None,
        tool_call_id: None,
        is_error: false,
        created_at: ts(1),
    };
    check(
        "append_message",
        store.append_message(&m, Some(lease)).await,
    );
}

async fn run(store: &dyn Store, session: Uuid, at: u32) -> (Uuid, Lease) {
    let run = check(
        "enqueue",
        store
            .enqueue_run(&NewRun {
                id: Uuid::now_v7(),
                session_id: session,
                input: json!({}),
                created_at: ts(at),
                idempotency: None,
            })
            .await,
    );
    let (run, lease) = check(
        "start",
        store.start_run(run.id, &ts(at), "here", LEASE).await,
    );
    (run.id, lease)
}

async fn finish(store: &dyn Store, run: Uuid, lease: &Lease, at: u32) {
    let done = RunOutcome::Completed {
        stop_reason: "end_turn".into(),
    };
    check(
        "finish",
        store.finish_run(run, &done, &ts(at), Some(lease)).await,
    );
}

async fn log(store: &dyn Store, e: NewEvent, lease: &Lease) {
    check(
        "append_events",
        store.append_events(&[e], std::slice::from_ref(lease)).await,
    );
}

fn fork_of(title: &str) -> crate::SessionRecord {
    new_session_record(title)
}

pub async fn fork_copies_the_history_up_to_a_point(store: &dyn Store) {
    let word = format!("w{}", Uuid::now_v7().simple());
    let source = new_session_record("source");
    check("create", store.create_session(&source).await);
    let s = source.id;

    // Run 1 (log 1..=3): a question, a file, an answer naming the file.
    let (r1, l1) = run(store, s, 1).await;
    log(store, ev(s, 1, r1, "run_started", "{}".into()), &l1).await;
    say(store, s, r1, "user", &format!("what about {word}?"), &l1).await;
    let file = FileRecord {
        id: Uuid::now_v7(),
        session_id: s,
        name: format!("{word}.txt"),
        mime: "text/plain".into(),
        size: 3,
        sha256: "ab".repeat(32),
        created_at: ts(2),
    };
    check("put_file", store.put_file(&file).await);
    let named = format!(r#"{{"FileShared":{{"file_id":"{}"}}}}"#, file.id);
    log(store, ev(s, 2, r1, "file_shared", named), &l1).await;
    log(store, ev(s, 3, r1, "run_completed", "{}".into()), &l1).await;
    say(
        store,
        s,
        r1,
        "assistant",
        &format!("{word} is settled, see file {}", file.id),
        &l1,
    )
    .await;
    finish(store, r1, &l1, 3).await;

    // Run 2 (log 4..=5), finished.
    let (r2, l2) = run(store, s, 4).await;
    log(store, ev(s, 4, r2, "run_started", "{}".into()), &l2).await;
    say(store, s, r2, "user", &format!("and later {word}"), &l2).await;
    log(store, ev(s, 5, r2, "run_completed", "{}".into()), &l2).await;
    finish(store, r2, &l2, 5).await;

    // At the end of run 1: its three events, its two messages, the file under a new id.
    let fork = fork_of("fork");
    let done = check("fork", store.fork_session(s, 3, &fork).await);
    assert_eq!(
        done,
        ForkOutcome::Forked {
            events: 3,
            messages: 2,
            files: 1
        }
    );
    let got = check("get", store.get_session(fork.id).await).unwrap_or_else(|| panic!("no fork"));
    assert_eq!(got.last_seq, 3, "the fork's log goes on after the cut");
    assert_eq!(got.title, "fork");
    let (msgs, total) = check("messages", store.list_messages(fork.id, 100, 0).await);
    assert_eq!(total, 2);
    let files = check("files", store.list_files(fork.id).await);
    assert_eq!(files.len(), 1);
    let copy = &files[0];
    assert_ne!(
        copy.id, file.id,
        "a file id is the file's everywhere: the copy has its own"
    );
    assert_eq!(
        (copy.name.as_str(), copy.sha256.as_str()),
        (file.name.as_str(), file.sha256.as_str())
    );
    assert_eq!(msgs[0].content, format!("what about {word}?"));
    assert_eq!(
        msgs[1].content,
        format!("{word} is settled, see file {}", copy.id),
        "renamed in messages"
    );
    assert!(
        msgs.iter()
            .all(|m| m.session_id == fork.id && m.run_id.is_some())
    );
    let events = check("read", store.read_events(fork.id, 0, 100).await);
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert!(
        events[1].payload.contains(&copy.id.to_string()),
        "renamed in events: {}",
        events[1].payload
    );
    assert!(!events[1].payload.contains(&file.id.to_string()));
    // Searchable on its own: the two messages and the file, none of run 2's.
    let q = SearchQuery {
        sessions: Some(vec![fork.id]),
        ..super::search::query(&word)
    };
    let hits = check("search", store.search(&q).await);
    assert_eq!(hits.len(), 3, "{hits:?}");
    assert!(hits.iter().all(|h| h.session_id == fork.id));

    // From the very start: an empty session.
    let empty = fork_of("empty");
    assert_eq!(
        check("fork at 0", store.fork_session(s, 0, &empty).await),
        ForkOutcome::Forked {
            events: 0,
            messages: 0,
            files: 0
        }
    );

    // Inside run 2 (4..=5): refused, nothing written.
    let inside = fork_of("inside");
    assert_eq!(
        check("fork at 4", store.fork_session(s, 4, &inside).await),
        ForkOutcome::InsideRun {
            run_id: r2,
            first: 4,
            last: 5,
            running: false
        }
    );
    assert!(
        check("get", store.get_session(inside.id).await).is_none(),
        "a refused fork leaves nothing"
    );
    // Past the log, from nothing.
    assert_eq!(
        check(
            "fork at 9",
            store.fork_session(s, 9, &fork_of("past")).await
        ),
        ForkOutcome::BeyondEnd { last_seq: 5 }
    );
    assert_eq!(
        check(
            "fork of none",
            store
                .fork_session(Uuid::now_v7(), 0, &fork_of("none"))
                .await
        ),
        ForkOutcome::NoSource
    );
    // At the end of a run still going: refused too (its end is not in the log yet).
    let (r3, l3) = run(store, s, 6).await;
    log(store, ev(s, 6, r3, "run_started", "{}".into()), &l3).await;
    assert_eq!(
        check(
            "fork at 6",
            store.fork_session(s, 6, &fork_of("running")).await
        ),
        ForkOutcome::InsideRun {
            run_id: r3,
            first: 6,
            last: 6,
            running: true
        }
    );

    // A follow-up queued during that run writes its `follow_up_queued` then: not a run of
    // its own there — a cut at it is still inside the running run, and after its end
    // inside it too until the end.
    let queued = check(
        "enqueue",
        store
            .enqueue_run(&NewRun {
                id: Uuid::now_v7(),
                session_id: s,
                input: json!({}),
                created_at: ts(7),
                idempotency: None,
            })
            .await,
    );
    log(
        store,
        ev(s, 7, queued.id, "follow_up_queued", "{}".into()),
        &l3,
    )
    .await;
    assert_eq!(
        check(
            "fork at 7",
            store.fork_session(s, 7, &fork_of("queued")).await
        ),
        ForkOutcome::InsideRun {
            run_id: r3,
            first: 6,
            last: 6,
            running: true
        }
    );
    log(store, ev(s, 8, r3, "run_completed", "{}".into()), &l3).await;
    finish(store, r3, &l3, 8).await;
    assert_eq!(
        check(
            "fork at 7, ended",
            store.fork_session(s, 7, &fork_of("split")).await
        ),
        ForkOutcome::InsideRun {
            run_id: r3,
            first: 6,
            last: 8,
            running: false
        }
    );
    assert!(matches!(
        check(
            "fork at 8",
            store.fork_session(s, 8, &fork_of("after")).await
        ),
        ForkOutcome::Forked { events: 8, .. }
    ));
    // Pruned history: a point in it is refused, the end still forks.
    check("prune", store.prune_events_before(&ts(3)).await);
    assert_eq!(
        check(
            "fork at 1",
            store.fork_session(s, 1, &fork_of("pruned")).await
        ),
        ForkOutcome::Pruned { oldest: Some(3) }
    );
    assert!(matches!(
        check(
            "fork at the end",
            store.fork_session(s, 8, &fork_of("end")).await
        ),
        ForkOutcome::Forked { events: 6, .. }
    ));

    // The fork stands on its own: deleting the source leaves it whole.
    check("delete", store.delete_session(s).await);
    let (_, total) = check("messages", store.list_messages(fork.id, 100, 0).await);
    assert_eq!(total, 2);
    // (Its events 1 and 2 went with the pruning above, as any session's of that age.)
    assert_eq!(
        check("read", store.read_events(fork.id, 0, 100).await).len(),
        1
    );
    assert_eq!(check("search", store.search(&q).await).len(), 3);
}
