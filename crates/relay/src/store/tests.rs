use super::*;

fn new(target: &str, id: &str) -> NewDelivery {
    NewDelivery {
        message_id: id.into(),
        bundle: "dev".into(),
        target: target.into(),
        sender: "a".into(),
        request_id: Some("r1".into()),
        envelope: "hello".into(),
        body_bytes: 5,
        sync: false,
        quiet_window_ms: Some(100),
        quiescence_timeout_ms: None,
        turn_timeout_ms: None,
        chain_id: "chain_t".into(),
        hop: 1,
    }
}

async fn enqueue(s: &RelayStore, d: NewDelivery, cap: usize) -> Vec<OutcomeEvent> {
    match s.record_send(None, &[(d, None)], cap, &[]).await.unwrap() {
        Recorded::Stored(ev) => ev,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_database_newer_than_the_binary_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("relay.db");
    RelayStore::open(&path).await.unwrap().close().await;
    let pool = SqlitePool::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    sqlx::query("INSERT INTO schema_migrations (version, applied_at) VALUES (99, 'x')")
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
    let err = RelayStore::open(&path).await.err().unwrap().to_string();
    assert!(
        err.contains("relay") && err.contains("newer than this binary"),
        "{err}"
    );
}

#[tokio::test]
async fn queue_is_bounded_ordered_and_recovers() {
    let d = tempfile::tempdir().unwrap();
    let s = RelayStore::open(&d.path().join("relay.db")).await.unwrap();
    assert!(enqueue(&s, new("b", "m1"), 2).await.is_empty());
    assert!(enqueue(&s, new("b", "m2"), 2).await.is_empty());
    let full = enqueue(&s, new("b", "m3"), 2).await;
    assert_eq!(full.len(), 1, "refused, with an outcome event");
    assert_eq!(full[0].reason_code.as_deref(), Some("runtime_queue_full"));
    assert!(full[0].seq > 0);
    assert!(enqueue(&s, new("c", "m4"), 2).await.is_empty());
    assert_eq!(s.queued_count("dev", "b").await.unwrap(), 2);
    let first = s.next_delivery("dev", "b").await.unwrap().unwrap();
    assert_eq!(first.message_id, "m1");
    assert_eq!(first.quiet_window_ms, Some(100));
    assert!(s.advance(first.id, "queued", "attempting").await.unwrap());
    assert!(
        !s.advance(first.id, "queued", "attempting").await.unwrap(),
        "a step is taken once"
    );
    assert!(
        s.advance(first.id, "attempting", "committing")
            .await
            .unwrap()
    );
    assert!(
        !s.advance(first.id, "queued", "attempting").await.unwrap(),
        "never back from committing"
    );
    let again = s.next_delivery("dev", "b").await.unwrap().unwrap();
    assert_eq!(
        (again.message_id.as_str(), again.state.as_str()),
        ("m1", "committing")
    );
    let c = s.next_delivery("dev", "c").await.unwrap().unwrap();
    assert!(s.advance(c.id, "queued", "attempting").await.unwrap());
    s.close().await;

    let s = RelayStore::open(&d.path().join("relay.db")).await.unwrap();
    assert_eq!(
        s.recover().await.unwrap(),
        1,
        "only the attempting row goes back"
    );
    let c = s.next_delivery("dev", "c").await.unwrap().unwrap();
    assert_eq!(c.state, "queued");
    let m1 = s.next_delivery("dev", "b").await.unwrap().unwrap();
    assert_eq!(m1.state, "committing");
    let ev = s
        .finish_delivery(&m1, Outcome::Failed, Some("x"), Some("y"))
        .await
        .unwrap()
        .unwrap();
    assert!(ev.seq > full[0].seq);
    assert!(
        s.finish_delivery(&m1, Outcome::Delivered, None, None)
            .await
            .unwrap()
            .is_none(),
        "a delivery closes once"
    );
    let done = s.delivery("dev", "m1").await.unwrap().unwrap();
    assert_eq!(done.envelope, "", "the text is forgotten once delivered");
    assert_eq!(done.outcome, Some(Outcome::Failed));
    assert_eq!(
        s.next_delivery("dev", "b")
            .await
            .unwrap()
            .unwrap()
            .message_id,
        "m2"
    );
    let evs = s.outcomes_after("dev", Some("a"), 0, 10).await.unwrap();
    assert_eq!(evs.len(), 2);
    assert_eq!(evs[1].seq, ev.seq);
    assert!(
        s.outcomes_after("dev", Some("zz"), 0, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        s.outcomes_after("dev", None, u64::MAX, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let mut targets = s.pending_targets().await.unwrap();
    targets.sort();
    assert_eq!(
        targets,
        vec![("dev".into(), "b".into()), ("dev".into(), "c".into())]
    );
}

#[tokio::test]
async fn request_ids_are_recorded_once() {
    let d = tempfile::tempdir().unwrap();
    let s = RelayStore::open(&d.path().join("relay.db")).await.unwrap();
    let key = |f: &str| RequestKey {
        sender: "a".into(),
        request_id: "r1".into(),
        fingerprint: f.into(),
    };
    let rows = vec![(new("b", "m1"), None), (new("c", "m2"), None)];
    assert_eq!(
        s.record_send(Some(&key("f1")), &rows, 10, &[])
            .await
            .unwrap(),
        Recorded::Stored(vec![])
    );
    let rows2 = vec![(new("b", "m3"), None)];
    assert_eq!(
        s.record_send(Some(&key("f1")), &rows2, 10, &[])
            .await
            .unwrap(),
        Recorded::Duplicate { same: true }
    );
    assert_eq!(
        s.record_send(Some(&key("f2")), &rows2, 10, &[])
            .await
            .unwrap(),
        Recorded::Duplicate { same: false }
    );
    assert!(
        s.delivery("dev", "m3").await.unwrap().is_none(),
        "nothing stored for a duplicate"
    );
    assert_eq!(
        s.request_deliveries("dev", "a", "r1").await.unwrap().len(),
        2
    );
}

#[tokio::test]
async fn startup_failures_are_bounded() {
    let d = tempfile::tempdir().unwrap();
    let s = RelayStore::open(&d.path().join("relay.db")).await.unwrap();
    for i in 0..30 {
        s.record_startup_failure("dev", "b", "startup_exited", &format!("try {i}"))
            .await
            .unwrap();
    }
    let (n, latest) = s.startup_failures("dev").await.unwrap();
    assert_eq!(n, STARTUP_FAILURE_HISTORY as u64);
    assert_eq!(latest.unwrap().reason, "try 29");
    assert_eq!(s.startup_failures("other").await.unwrap().0, 0);
    assert_eq!(s.bundle_state("dev").await.unwrap(), BundleState::Down);
    s.set_bundle_state("dev", BundleState::Up).await.unwrap();
    assert_eq!(s.bundle_state("dev").await.unwrap(), BundleState::Up);
}

#[tokio::test]
async fn budgets_are_checked_with_the_insert_and_chains_are_found() {
    let dir = tempfile::tempdir().unwrap();
    let s = RelayStore::open(&dir.path().join("relay.db"))
        .await
        .unwrap();
    let budget = |limit| Budget {
        sender: Some("a".into()),
        since: switchboard_db::text_time(chrono::Utc::now() - chrono::TimeDelta::minutes(1)),
        limit,
    };
    let mut d1 = new("b", "m1");
    d1.request_id = None;
    d1.chain_id = "chain_x".into();
    d1.hop = 3;
    let mut d2 = new("b", "m2");
    d2.request_id = None;
    for d in [d1, d2] {
        assert!(matches!(
            s.record_send(None, &[(d, None)], 10, &[budget(2)])
                .await
                .unwrap(),
            Recorded::Stored(_)
        ));
    }
    let mut d3 = new("b", "m3");
    d3.request_id = None;
    assert!(matches!(
        s.record_send(None, &[(d3.clone(), None)], 10, &[budget(5), budget(2)])
            .await
            .unwrap(),
        Recorded::OverBudget(1)
    ));
    assert!(
        s.delivery("dev", "m3").await.unwrap().is_none(),
        "nothing stored"
    );
    let other = Budget {
        sender: Some("z".into()),
        ..budget(2)
    };
    assert!(matches!(
        s.record_send(None, &[(d3, None)], 10, &[other])
            .await
            .unwrap(),
        Recorded::Stored(_)
    ));
    assert_eq!(
        s.chain_of("dev", "m1").await.unwrap(),
        Some(("chain_x".to_string(), 3))
    );
    assert_eq!(s.chain_of("dev", "nope").await.unwrap(), None);
    // Nothing was delivered to `b` yet.
    let since = switchboard_db::text_time(chrono::Utc::now() - chrono::TimeDelta::minutes(10));
    assert_eq!(s.last_received("dev", "b", &since).await.unwrap(), None);
}
