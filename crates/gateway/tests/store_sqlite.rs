//! [`GatewayStore`] on SQLite (`gateway.db`): the shared cases of `store_suite`, plus reopening.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

#[macro_use]
mod store_suite;

use switchboard_gateway::GatewayStore;
use tempfile::TempDir;
use uuid::Uuid;

/// A store in a fresh directory, kept while the directory is.
async fn fresh() -> (TempDir, GatewayStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = GatewayStore::open(&dir.path().join("gateway.db"))
        .await
        .unwrap();
    assert_eq!(store.kind(), "sqlite");
    (dir, store)
}

store_suite!(fresh);

#[tokio::test]
async fn reopening_applies_nothing_and_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gateway.db");
    let session = Uuid::now_v7();
    {
        let s = GatewayStore::open(&path).await.unwrap();
        s.put_route(&store_suite::route("k", session, true))
            .await
            .unwrap();
        s.enqueue(&store_suite::queued("k", "hello", None))
            .await
            .unwrap();
        assert!(s.first_seen("telegram", "1", "1").await.unwrap());
    }
    for _ in 0..2 {
        let s = GatewayStore::open(&path).await.unwrap();
        assert_eq!(
            s.route("k").await.unwrap(),
            Some(store_suite::route("k", session, true))
        );
        assert_eq!(s.queued("k").await.unwrap().len(), 1);
        assert!(!s.first_seen("telegram", "1", "1").await.unwrap());
    }
}

#[tokio::test]
async fn open_can_be_spawned() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gateway.db");
    let store = tokio::spawn(async move { GatewayStore::open(&path).await })
        .await
        .unwrap()
        .unwrap();
    store.kv_set("a", "b").await.unwrap();
}

#[tokio::test]
async fn a_database_newer_than_the_binary_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gateway.db");
    drop(GatewayStore::open(&path).await.unwrap());
    // a later binary applied migration 99
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    sqlx::query("INSERT INTO schema_migrations (version, applied_at) VALUES (99, 'x')")
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
    let err = GatewayStore::open(&path).await.err().unwrap().to_string();
    assert!(
        err.contains("gateway") && err.contains("newer than this binary"),
        "{err}"
    );
}
