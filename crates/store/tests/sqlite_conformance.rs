#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
use switchboard_store::{SqlStore, Store};

/// A store in a fresh directory, kept while the directory is.
async fn fresh() -> (tempfile::TempDir, SqlStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqlStore::open_path(&dir.path().join("switchboard.db"))
        .await
        .unwrap();
    (dir, store)
}

// The conformance suite: one test per check, each on a fresh store.
switchboard_store::conformance_suite!(fresh);

#[tokio::test]
async fn data_survives_reopen_and_migrations_are_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("switchboard.db");
    let id = {
        let store = SqlStore::open_path(&path).await.unwrap();
        let s = switchboard_store::SessionRecord {
            id: uuid::Uuid::now_v7(),
            title: "persist".into(),
            cwd: "/".into(),
            config: serde_json::json!({}),
            created_at: "2026-01-01T00:00:00Z".into(),
            updated_at: "2026-01-01T00:00:00Z".into(),
            last_seq: 0,
            archived_at: None,
            owner: None,
        };
        store.create_session(&s).await.unwrap();
        store.close().await;
        s.id
    };
    let store = SqlStore::open_path(&path).await.unwrap();
    assert_eq!(
        store.get_session(id).await.unwrap().unwrap().title,
        "persist"
    );
}

#[tokio::test]
async fn a_file_that_is_not_a_database_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("switchboard.db");
    std::fs::write(
        &path,
        b"this is not sqlite, just some text that is long enough to matter....",
    )
    .unwrap();
    let err = SqlStore::open_path(&path).await.unwrap_err();
    assert!(
        matches!(err, switchboard_store::StoreError::Open(_)),
        "{err:?}"
    );
}

/// Opening a store can be spawned onto another task (its future is `Send`).
#[tokio::test]
async fn open_can_be_spawned() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spawned.db");
    let store = tokio::spawn(async move { SqlStore::open_path(&path).await })
        .await
        .unwrap()
        .unwrap();
    store.close().await;
}

#[tokio::test]
async fn a_database_newer_than_the_binary_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("switchboard.db");
    SqlStore::open_path(&path).await.unwrap().close().await;
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    sqlx::query("INSERT INTO schema_migrations (version, applied_at) VALUES (99, 'x')")
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
    let err = SqlStore::open_path(&path).await.err().unwrap().to_string();
    assert!(err.contains("newer than this binary"), "{err}");
}

/// Many sends with idempotency keys at once, on one SQLite file: none fails, and each key
/// gets one run. (Reading the key's run before the first write made the transaction a
/// reader upgraded to a writer, which SQLite refuses at once with `database is locked` when
/// another writer committed in between: a chat message answered 503.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_idempotent_enqueues_neither_fail_nor_double() {
    let (_dir, store) = fresh().await;
    let store = std::sync::Arc::new(store);
    let s = switchboard_store::SessionRecord {
        id: uuid::Uuid::now_v7(),
        title: "busy".into(),
        cwd: "/".into(),
        config: serde_json::json!({}),
        created_at: "2026-01-01T00:00:00Z".into(),
        updated_at: "2026-01-01T00:00:00Z".into(),
        last_seq: 0,
        archived_at: None,
        owner: None,
    };
    store.create_session(&s).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..48 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            store
                .enqueue_run(&switchboard_store::NewRun {
                    id: uuid::Uuid::now_v7(),
                    session_id: s.id,
                    input: serde_json::json!({"content": "x"}),
                    created_at: "2026-01-01T00:00:01.000000Z".into(),
                    idempotency: Some(switchboard_store::Idempotency {
                        key: format!("k{}", i % 8),
                        since: "2026-01-01T00:00:00.000000Z".into(),
                    }),
                })
                .await
        }));
    }
    let mut ids = std::collections::HashSet::new();
    for t in tasks {
        ids.insert(t.await.unwrap().unwrap_or_else(|e| panic!("{e}")).id);
    }
    assert_eq!(ids.len(), 8, "one run per key");
}
