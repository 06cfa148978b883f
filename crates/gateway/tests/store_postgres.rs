//! [`GatewayStore`] on PostgreSQL: the shared cases of `store_suite`, plus what only several
//! instances sharing one database can get wrong (concurrent migrations, redeliveries taken
//! twice, prompts settled twice, inbox ids committed out of order) and the schema of its own.
//!
//! Needs `SWITCHBOARD_TEST_POSTGRES_URL`, a role allowed to create databases; from the
//! repository root:
//!
//! ```sh
//! eval "$(scripts/test-services)"
//! cargo test -p switchboard-gateway --test store_postgres
//! ```
//!
//! Every test creates a database of its own (`sb_gw_<random>`) and drops it at the end, so
//! runs never see each other's data.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

#[macro_use]
mod store_suite;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use sqlx::Row;
use switchboard_gateway::GatewayStore;
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
        Self(TestDatabase::create("sb_gw").await)
    }

    async fn open(&self) -> GatewayStore {
        let store = GatewayStore::open_postgres(&self.url).await.unwrap();
        assert_eq!(store.kind(), "postgres");
        store
    }

    /// `(version, applied_at)` of each of the gateway's migrations.
    async fn applied(&self) -> Vec<(i64, String)> {
        let mut conn = self.connect().await;
        sqlx::query("SELECT version, applied_at FROM gateway.schema_migrations ORDER BY version")
            .fetch_all(&mut conn)
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get("version"), r.get("applied_at")))
            .collect()
    }

    /// The versions in the gateway's `schema_migrations`.
    async fn migrations(&self) -> Vec<i64> {
        let mut conn = self.connect().await;
        sqlx::query_scalar("SELECT version FROM gateway.schema_migrations ORDER BY version")
            .fetch_all(&mut conn)
            .await
            .unwrap()
    }
}

/// A store on a fresh database, kept while the database is.
async fn fresh() -> (TestDb, GatewayStore) {
    let db = TestDb::create().await;
    let store = db.open().await;
    (db, store)
}

store_suite!(fresh);

const TABLES: [&str; 14] = [
    "allowed",
    "approvals",
    "chat_activity",
    "chat_sessions",
    "contexts",
    "inbox",
    "kv",
    "ledger",
    "pairing",
    "presses",
    "routes",
    "runs",
    "schema_migrations",
    "seen",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_opens_of_a_fresh_database_all_migrate() {
    let db = TestDb::create().await;
    let barrier = Arc::new(Barrier::new(4));
    let opens: Vec<_> = (0..4)
        .map(|_| {
            let (url, barrier) = (db.url.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                GatewayStore::open_postgres(&url).await
            })
        })
        .collect();
    let mut stores = Vec::new();
    for open in opens {
        stores.push(open.await.unwrap().unwrap_or_else(|e| panic!("open: {e}")));
    }
    assert_eq!(
        db.migrations().await,
        [1, 2, 3, 4, 5, 6, 7, 8, 9],
        "each migration applied exactly once"
    );
    // Every one of them works on the same tables.
    for (i, s) in stores.iter().enumerate() {
        s.kv_set(&format!("k{i}"), "v").await.unwrap();
    }
    for s in &stores {
        for i in 0..stores.len() {
            assert_eq!(
                s.kv_get(&format!("k{i}")).await.unwrap().as_deref(),
                Some("v")
            );
        }
    }
}

#[tokio::test]
async fn reopening_applies_nothing_and_keeps_everything() {
    let db = TestDb::create().await;
    let session = Uuid::now_v7();
    {
        let s = db.open().await;
        s.put_route(&store_suite::route("k", session, true))
            .await
            .unwrap();
        s.enqueue(&store_suite::queued("k", "hello", None))
            .await
            .unwrap();
        assert!(s.first_seen("telegram", "1", "1").await.unwrap());
    }
    let first = db.applied().await;
    for _ in 0..2 {
        let s = db.open().await;
        assert_eq!(
            s.route("k").await.unwrap(),
            Some(store_suite::route("k", session, true))
        );
        assert_eq!(s.queued("k").await.unwrap().len(), 1);
        assert!(!s.first_seen("telegram", "1", "1").await.unwrap());
    }
    let again = db.applied().await;
    assert_eq!(again, first, "a second open is a no-op");
}

/// The engine's store keeps `runs`, `approvals` and a `schema_migrations` of its own in the
/// same database (in `public`): the gateway's tables must neither collide with nor touch them.
#[tokio::test]
async fn the_tables_live_in_the_gateway_schema_beside_the_engines() {
    let db = TestDb::create().await;
    let mut conn = db.connect().await;
    sqlx::raw_sql(
        "CREATE TABLE runs (id UUID PRIMARY KEY, session_id UUID NOT NULL, state TEXT NOT NULL);
         CREATE TABLE approvals (session_id UUID PRIMARY KEY, calls TEXT NOT NULL);
         CREATE TABLE schema_migrations (version BIGINT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now());
         INSERT INTO schema_migrations (version) VALUES (1), (2), (3), (4), (5);",
    )
    .execute(&mut conn)
    .await
    .unwrap();

    let s = db.open().await;
    let run = store_suite::followed("tg:1");
    s.put_run(&run).await.unwrap();
    let prompt = store_suite::prompt("p1", Uuid::now_v7());
    s.put_prompt(&prompt).await.unwrap();
    assert_eq!(s.run("tg:1").await.unwrap(), Some(run.clone()));
    assert_eq!(s.prompts().await.unwrap(), vec![prompt]);

    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = 'gateway' ORDER BY table_name",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert_eq!(tables, TABLES);
    let public: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = 'public' ORDER BY table_name",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert_eq!(public, ["approvals", "runs", "schema_migrations"]);
    // The engine's rows are untouched, the gateway's are where they belong.
    let engine_migrations: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM public.schema_migrations ORDER BY version")
            .fetch_all(&mut conn)
            .await
            .unwrap();
    assert_eq!(engine_migrations, [1, 2, 3, 4, 5]);
    let engine_runs: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM public.runs")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(engine_runs, 0);
    let run_id: String =
        sqlx::query_scalar("SELECT run_id FROM gateway.runs WHERE routing_key = 'tg:1'")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert_eq!(run_id, run.run_id.to_string());
    assert_eq!(db.migrations().await, [1, 2, 3, 4, 5, 6, 7, 8, 9]);
}

/// Runs `work(store, task)` in `tasks` tasks spread over `stores`, all released at once.
async fn race<T, F, Fut>(stores: &[GatewayStore], tasks: usize, work: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(GatewayStore, usize) -> Fut,
    Fut: std::future::Future<Output = T> + Send + 'static,
{
    let barrier = Arc::new(Barrier::new(tasks));
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let barrier = barrier.clone();
            let fut = work(stores[t % stores.len()].clone(), t);
            tokio::spawn(async move {
                barrier.wait().await;
                fut.await
            })
        })
        .collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

/// An update redelivered to another instance (a webhook retried against the other one, two
/// pollers) is taken once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_seen_from_two_stores_is_true_exactly_once() {
    let db = TestDb::create().await;
    let stores = [db.open().await, db.open().await];
    const N: usize = 200;
    let results = race(&stores, 4, |s, _| async move {
        let mut firsts = Vec::new();
        for i in 0..N {
            firsts.push(
                s.first_seen("telegram", "100", &i.to_string())
                    .await
                    .unwrap(),
            );
        }
        firsts
    })
    .await;
    for i in 0..N {
        let winners = results.iter().filter(|r| r[i]).count();
        assert_eq!(winners, 1, "message {i}: {winners} instances took it");
    }
    // And afterwards nobody does.
    for s in &stores {
        assert!(!s.first_seen("telegram", "100", "0").await.unwrap());
    }
}

/// A chat message handed to two instances is queued by exactly one: the mark that drops a
/// repeat is taken in the transaction that queues the message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn take_inbound_from_two_stores_queues_once() {
    let db = TestDb::create().await;
    let stores = [db.open().await, db.open().await];
    const N: usize = 100;
    let results = race(&stores, 4, |s, _| async move {
        let mut taken = Vec::new();
        for i in 0..N {
            let q = store_suite::queued("route", &i.to_string(), None);
            taken.push(s.take_inbound(&q, &i.to_string()).await.unwrap().is_some());
        }
        taken
    })
    .await;
    for i in 0..N {
        let winners = results.iter().filter(|r| r[i]).count();
        assert_eq!(winners, 1, "message {i}: {winners} instances queued it");
    }
    let texts: Vec<String> = stores[0]
        .queued("route")
        .await
        .unwrap()
        .into_iter()
        .map(|q| q.text)
        .collect();
    let mut sorted = texts.clone();
    sorted.sort_by_key(|t| t.parse::<usize>().unwrap());
    assert_eq!(texts.len(), N, "every message queued once");
    assert_eq!(texts, sorted, "each racer's messages in id order");
}

/// Two presses of one prompt's buttons, handled on two instances: one settles it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn take_prompt_races_have_exactly_one_winner() {
    let db = TestDb::create().await;
    let stores = [db.open().await, db.open().await];
    const N: usize = 100;
    for i in 0..N {
        stores[i % 2]
            .put_prompt(&store_suite::prompt(&format!("p{i}"), Uuid::now_v7()))
            .await
            .unwrap();
    }
    assert_eq!(stores[0].prompts().await.unwrap().len(), N);
    let results = race(&stores, 4, |s, _| async move {
        let mut won = Vec::new();
        for i in 0..N {
            won.push(s.take_prompt(&format!("p{i}")).await.unwrap());
        }
        won
    })
    .await;
    for i in 0..N {
        let winners = results.iter().filter(|r| r[i]).count();
        assert_eq!(winners, 1, "prompt p{i}: {winners} takers won");
    }
    assert!(stores[1].prompts().await.unwrap().is_empty());
}

/// Prompts for one session stored from two instances at once: no error, and one prompt left
/// (the last one stored), as on SQLite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_prompts_of_one_session_leave_one() {
    let db = TestDb::create().await;
    let stores = [db.open().await, db.open().await];
    let session = Uuid::now_v7();
    const EACH: usize = 30;
    race(&stores, 4, |s, t| async move {
        for i in 0..EACH {
            s.put_prompt(&store_suite::prompt(&format!("t{t}-{i}"), session))
                .await
                .unwrap_or_else(|e| panic!("task {t}, prompt {i}: {e}"));
        }
    })
    .await;
    let left = stores[0].prompts().await.unwrap();
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0].session_id, session);
    assert!(left[0].id.ends_with(&format!("-{}", EACH - 1)), "{left:?}");
}

/// Instances queue messages on one route while a worker drains it (`queued`, then
/// `dequeue(upto)` the highest id it read): every message is read exactly once — none is
/// deleted unread because its id committed after a higher one was read — and in id order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_enqueues_and_a_draining_worker_lose_nothing() {
    let db = TestDb::create().await;
    let stores = [db.open().await, db.open().await, db.open().await];
    const WRITERS: usize = 4;
    const EACH: usize = 100;
    let done = Arc::new(tokio::sync::Semaphore::new(0));
    let worker = {
        let (s, done) = (stores[2].clone(), done.clone());
        tokio::spawn(async move {
            let mut read: Vec<(i64, String)> = Vec::new();
            loop {
                let finished = done.available_permits() == WRITERS;
                let batch = s.queued("route").await.unwrap();
                if let Some(last) = batch.last() {
                    s.dequeue("route", last.id).await.unwrap();
                } else if finished {
                    return read;
                }
                read.extend(batch.into_iter().map(|q| (q.id, q.text)));
            }
        })
    };
    let ids = race(&stores[..2], WRITERS, |s, t| {
        let done = done.clone();
        async move {
            let mut ids = Vec::new();
            for i in 0..EACH {
                ids.push(
                    s.enqueue(&store_suite::queued("route", &format!("{t}/{i}"), None))
                        .await
                        .unwrap(),
                );
            }
            done.add_permits(1);
            ids
        }
    })
    .await;
    let read = tokio::time::timeout(Duration::from_secs(60), worker)
        .await
        .expect("the worker drains the route")
        .unwrap();

    let all_ids: BTreeSet<i64> = ids.iter().flatten().copied().collect();
    assert_eq!(all_ids.len(), WRITERS * EACH, "ids are distinct");
    assert!(read.windows(2).all(|w| w[0].0 < w[1].0), "read in id order");
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (_, text) in &read {
        *seen.entry(text.clone()).or_default() += 1;
    }
    let lost: Vec<_> = (0..WRITERS)
        .flat_map(|t| (0..EACH).map(move |i| format!("{t}/{i}")))
        .filter(|m| !seen.contains_key(m))
        .collect();
    assert!(lost.is_empty(), "deleted unread: {lost:?}");
    assert!(seen.values().all(|&n| n == 1), "read twice: {seen:?}");
    // Each writer's messages in its own order.
    for t in 0..WRITERS {
        let mine: Vec<_> = read
            .iter()
            .filter(|(_, m)| m.starts_with(&format!("{t}/")))
            .map(|(_, m)| m.clone())
            .collect();
        assert_eq!(
            mine,
            (0..EACH).map(|i| format!("{t}/{i}")).collect::<Vec<_>>()
        );
    }
}

#[tokio::test]
async fn a_bad_url_is_an_error() {
    assert!(GatewayStore::open_postgres("not a url").await.is_err());
    let unreachable = GatewayStore::open_postgres("postgres://sb:pw@127.0.0.1:1/nowhere").await;
    assert!(unreachable.is_err());
}
