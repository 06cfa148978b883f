#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! [`SqlStore`] against a real PostgreSQL server: the conformance suite, plus what only
//! a server with several connections can get wrong (concurrent migrations and appenders).
//!
//! Needs `SWITCHBOARD_TEST_POSTGRES_URL`, a role allowed to create databases; from the
//! repository root:
//!
//! ```sh
//! eval "$(scripts/test-services)"
//! cargo test -p switchboard-store --test postgres_conformance
//! ```
//!
//! Every test creates a database of its own (`sb_test_<random>`) and drops it at the end, so
//! runs never see each other's data.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use sqlx::Row;
use switchboard_store::{
    MessageRecord, NewEvent, NewRun, PostgresOptions, SessionRecord, SqlStore, Store, StoreError,
};
use switchboard_test_support::postgres::TestDatabase;
use tokio::sync::Barrier;
use uuid::Uuid;

/// A fresh database for one test, dropped when the test ends, whether it passed or not.
struct TestDb(TestDatabase);

impl std::ops::Deref for TestDb {
    type Target = TestDatabase;
    fn deref(&self) -> &TestDatabase {
        &self.0
    }
}

impl TestDb {
    async fn create() -> Self {
        Self(TestDatabase::create("sb_test").await)
    }

    fn options(&self) -> PostgresOptions {
        PostgresOptions::new(&self.url)
    }

    async fn open(&self) -> SqlStore {
        SqlStore::open_postgres(self.options()).await.unwrap()
    }

    /// `(version, applied_at)` of every applied migration.
    async fn migrations(&self) -> Vec<(i64, String)> {
        let mut conn = self.connect().await;
        sqlx::query(
            "SELECT version, applied_at::text AS at FROM schema_migrations ORDER BY version",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get("version"), r.get("at")))
        .collect()
    }
}

fn session() -> SessionRecord {
    SessionRecord {
        id: Uuid::now_v7(),
        title: "pg".into(),
        cwd: "/tmp/ws".into(),
        config: json!({"backend": "builtin"}),
        created_at: "2026-01-01T00:00:00.000000Z".into(),
        updated_at: "2026-01-01T00:00:00.000000Z".into(),
        last_seq: 0,
        archived_at: None,
        owner: None,
    }
}

/// An event whose payload says who wrote it.
fn event(session_id: Uuid, seq: u64, writer: &str) -> NewEvent {
    NewEvent {
        session_id,
        seq,
        run_id: None,
        kind: "text_delta".into(),
        payload: format!(r#"{{"TextDelta":{{"delta":"{writer}"}}}}"#),
        created_at: "2026-01-01T00:00:00.000000Z".into(),
    }
}

fn writer_of(ev: &NewEvent) -> String {
    let v: serde_json::Value = serde_json::from_str(&ev.payload).unwrap();
    v["TextDelta"]["delta"].as_str().unwrap().to_string()
}

/// A store on a fresh database, dropped with its guard.
async fn fresh() -> (TestDb, SqlStore) {
    let db = TestDb::create().await;
    let store = db.open().await;
    (db, store)
}

// The conformance suite: one test per check, each on a database of its own.
switchboard_store::conformance_suite!(fresh);

#[tokio::test]
async fn migrations_apply_once_and_data_survives_reopen() {
    let db = TestDb::create().await;
    let s = session();
    {
        let store = db.open().await;
        store.create_session(&s).await.unwrap();
        store.close().await;
    }
    let first = db.migrations().await;
    assert_eq!(
        first.iter().map(|m| m.0).collect::<Vec<_>>(),
        (1..=14).collect::<Vec<i64>>()
    );
    // Opening again applies nothing: same rows, same timestamps.
    for _ in 0..2 {
        let store = db.open().await;
        assert_eq!(store.get_session(s.id).await.unwrap(), Some(s.clone()));
        store.close().await;
    }
    assert_eq!(db.migrations().await, first, "a second open is a no-op");
}

#[tokio::test]
async fn a_schema_newer_than_the_binary_is_refused() {
    let db = TestDb::create().await;
    db.open().await.close().await;
    let mut conn = db.connect().await;
    sqlx::query("INSERT INTO schema_migrations (version) VALUES (9999)")
        .execute(&mut conn)
        .await
        .unwrap();
    let err = SqlStore::open_postgres(db.options()).await.unwrap_err();
    assert!(
        matches!(&err, StoreError::Open(m) if m.contains("9999")),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_opens_of_a_fresh_database_all_succeed() {
    let db = TestDb::create().await;
    let barrier = Arc::new(Barrier::new(4));
    let opens: Vec<_> = (0..4)
        .map(|_| {
            let (opts, barrier) = (db.options(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                SqlStore::open_postgres(opts).await
            })
        })
        .collect();
    for open in opens {
        let store = open.await.unwrap().unwrap_or_else(|e| panic!("open: {e}"));
        store.close().await;
    }
    assert_eq!(
        db.migrations()
            .await
            .iter()
            .map(|m| m.0)
            .collect::<Vec<_>>(),
        (1..=14).collect::<Vec<i64>>(),
        "each migration applied exactly once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appenders_get_exactly_one_winner_per_seq() {
    let db = TestDb::create().await;
    // Two handles: two pools, so two connections that really race.
    let stores = [db.open().await, db.open().await];
    let s = session();
    stores[0].create_session(&s).await.unwrap();
    let sid = s.id;

    // Phase 1: both append every seq 1..=N, one event at a time.
    const N: u64 = 200;
    let barrier = Arc::new(Barrier::new(2));
    let tasks: Vec<_> = stores
        .iter()
        .zip(["a", "b"])
        .map(|(store, who)| {
            let (store, barrier) = (store.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let mut results = Vec::new();
                for seq in 1..=N {
                    results.push(store.append_events(&[event(sid, seq, who)], &[]).await);
                }
                results
            })
        })
        .collect();
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.unwrap());
    }
    let stored = stores[0].read_events(sid, 0, 10_000).await.unwrap();
    assert_eq!(
        stored.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=N).collect::<Vec<_>>()
    );
    let mut wins = [0, 0];
    for (i, ev) in stored.iter().enumerate() {
        let (ra, rb) = (&results[0][i], &results[1][i]);
        let winner = match (ra, rb) {
            (Ok(()), Err(StoreError::Conflict(_))) => "a",
            (Err(StoreError::Conflict(_)), Ok(())) => "b",
            other => panic!(
                "seq {}: expected one Ok and one Conflict, got {other:?}",
                ev.seq
            ),
        };
        assert_eq!(
            writer_of(ev),
            winner,
            "seq {} holds the winner's event",
            ev.seq
        );
        wins[usize::from(winner == "b")] += 1;
    }
    eprintln!("phase 1: a won {} seqs, b won {}", wins[0], wins[1]);

    // Phase 2: the same batches of 100 (two INSERT chunks each) from both sides, one side in
    // reverse order: each batch is all one writer's or all the other's, never a mix, and the
    // opposite orders do not deadlock.
    const BATCHES: u64 = 10;
    let batch = |k: u64, who: &str| -> Vec<NewEvent> {
        let seqs = (N + 1 + k * 100)..=(N + (k + 1) * 100);
        let mut evs: Vec<_> = seqs.map(|seq| event(sid, seq, who)).collect();
        if who == "b" {
            evs.reverse();
        }
        evs
    };
    let tasks: Vec<_> = stores
        .iter()
        .zip(["a", "b"])
        .map(|(store, who)| {
            let (store, barrier) = (store.clone(), barrier.clone());
            let batches: Vec<_> = (0..BATCHES).map(|k| batch(k, who)).collect();
            tokio::spawn(async move {
                barrier.wait().await;
                let mut results = Vec::new();
                for b in &batches {
                    results.push(store.append_events(b, &[]).await);
                }
                results
            })
        })
        .collect();
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.unwrap());
    }
    for k in 0..BATCHES {
        let k = k as usize;
        let winner = match (&results[0][k], &results[1][k]) {
            (Ok(()), Err(StoreError::Conflict(_))) => "a",
            (Err(StoreError::Conflict(_)), Ok(())) => "b",
            other => panic!("batch {k}: expected one Ok and one Conflict, got {other:?}"),
        };
        let from = N + k as u64 * 100;
        let evs = stores[1].read_events(sid, from, 100).await.unwrap();
        assert_eq!(evs.len(), 100, "batch {k} is complete");
        assert!(
            evs.iter().all(|e| writer_of(e) == winner),
            "batch {k} is all {winner}'s (atomic)"
        );
    }

    // Phase 3: disjoint seqs, one side ascending, the other descending: all succeed, and
    // last_seq ends at the highest even though lower seqs commit last.
    let top = N + BATCHES * 100 + 200;
    let tasks: Vec<_> = stores
        .iter()
        .zip(["a", "b"])
        .map(|(store, who)| {
            let (store, barrier) = (store.clone(), barrier.clone());
            let seqs: Vec<u64> = if who == "a" {
                (top - 199..=top).step_by(2).collect()
            } else {
                let mut down: Vec<u64> = (top - 198..=top).step_by(2).collect();
                down.reverse();
                down
            };
            tokio::spawn(async move {
                barrier.wait().await;
                for seq in seqs {
                    store
                        .append_events(&[event(sid, seq, who)], &[])
                        .await
                        .unwrap_or_else(|e| panic!("seq {seq}: {e}"));
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    for store in &stores {
        let b = store.event_bounds(sid).await.unwrap();
        assert_eq!((b.oldest, b.newest, b.last_seq), (Some(1), Some(top), top));
        let got = store.get_session(sid).await.unwrap().unwrap();
        assert_eq!(got.last_seq, top, "last_seq never goes back");
        assert_eq!(
            store.read_events(sid, 0, 100_000).await.unwrap().len() as u64,
            top
        );
    }
    for store in stores {
        store.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_get_distinct_queue_and_transcript_positions() {
    let db = TestDb::create().await;
    let stores = [db.open().await, db.open().await];
    let s = session();
    stores[0].create_session(&s).await.unwrap();
    let sid = s.id;
    const EACH: usize = 50;
    let barrier = Arc::new(Barrier::new(2));
    let tasks: Vec<_> = stores
        .iter()
        .enumerate()
        .map(|(w, store)| {
            let (store, barrier) = (store.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                for i in 0..EACH {
                    let m = MessageRecord {
                        id: Uuid::now_v7(),
                        session_id: sid,
                        run_id: None,
                        role: "user".into(),
                        content: format!("{w}/{i}"),
                        tool_calls: None,
                        tool_call_id: None,
                        is_error: false,
                        created_at: "2026-01-01T00:00:00Z".into(),
                    };
                    store.append_message(&m, None).await.unwrap();
                    let run = NewRun {
                        id: Uuid::now_v7(),
                        session_id: sid,
                        input: json!({"content": format!("{w}/{i}")}),
                        created_at: "2026-01-01T00:00:00Z".into(),
                        idempotency: None,
                    };
                    if i % 5 == 0 {
                        store.enqueue_run_front(&run).await.unwrap();
                    } else {
                        store.enqueue_run(&run).await.unwrap();
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let (msgs, total) = stores[0].list_messages(sid, 1000, 0).await.unwrap();
    assert_eq!((msgs.len(), total), (2 * EACH, 2 * EACH as u64));
    // Each writer's messages keep their own order.
    for w in 0..2 {
        let mine: Vec<_> = msgs
            .iter()
            .filter(|m| m.content.starts_with(&format!("{w}/")))
            .map(|m| m.content.clone())
            .collect();
        assert_eq!(
            mine,
            (0..EACH).map(|i| format!("{w}/{i}")).collect::<Vec<_>>()
        );
    }
    let mut conn = db.connect().await;
    let row = sqlx::query(
        "SELECT COUNT(*) AS n, COUNT(DISTINCT queue_pos) AS d FROM runs WHERE session_id = $1",
    )
    .bind(sid)
    .fetch_one(&mut conn)
    .await
    .unwrap();
    let (n, d): (i64, i64) = (row.get("n"), row.get("d"));
    assert_eq!(
        (n, d),
        (2 * EACH as i64, 2 * EACH as i64),
        "no queue position twice"
    );
    for store in stores {
        store.close().await;
    }
}

/// Two instances race to take over the same expired leases: each lease gets exactly one
/// new holder, and after it the loser's token (and the old holder's) is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_takeovers_of_an_expired_lease_have_one_winner() {
    let db = TestDb::create().await;
    let (a, b) = (Arc::new(db.open().await), Arc::new(db.open().await));
    let names: Vec<String> = (0..20).map(|i| format!("poller:race-{i}")).collect();
    let mut dead = Vec::new();
    for n in &names {
        let l = a.acquire_lease(n, "dead", Duration::ZERO).await.unwrap();
        dead.push(l.unwrap());
    }
    let barrier = Arc::new(Barrier::new(2));
    let race = |store: Arc<SqlStore>, who: &'static str| {
        let (dead, barrier) = (dead.clone(), barrier.clone());
        tokio::spawn(async move {
            barrier.wait().await;
            let mut won = Vec::new();
            for l in &dead {
                if let Some(new) = store
                    .take_over_lease(l, who, Duration::from_secs(60))
                    .await
                    .unwrap()
                {
                    won.push(new);
                }
            }
            won
        })
    };
    let (wa, wb) = tokio::join!(race(a.clone(), "a"), race(b.clone(), "b"));
    let (wa, wb) = (wa.unwrap(), wb.unwrap());
    assert_eq!(wa.len() + wb.len(), names.len(), "{wa:?} {wb:?}");
    for won in wa.iter().chain(&wb) {
        assert_eq!(won.token, 2);
        let now = a.get_lease(&won.name).await.unwrap().unwrap();
        assert_eq!(now.lease, *won, "the store agrees with the winner");
        assert!(!now.expired);
    }
    for l in &dead {
        assert!(!b.renew_lease(l, Duration::from_secs(60)).await.unwrap());
    }
}

#[tokio::test]
async fn an_unreachable_server_is_an_open_error_without_the_password() {
    let mut opts = PostgresOptions::new("postgres://sb:s3cret-pw@127.0.0.1:1/nowhere");
    opts.connect_timeout = Duration::from_secs(2);
    assert!(!format!("{opts:?}").contains("s3cret-pw"), "{opts:?}");
    let err = SqlStore::open_postgres(opts).await.unwrap_err();
    let StoreError::Open(msg) = &err else {
        panic!("expected an Open error, got {err:?}");
    };
    assert!(!msg.contains("s3cret-pw"), "{msg}");
    assert!(msg.contains("127.0.0.1:1"), "{msg}");
}
