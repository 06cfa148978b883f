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

// --- search at scale (SQLite's own plan) ---------------------------------------------------

mod search_at_scale {
    use switchboard_store::search::{MATCH_END, MATCH_START, SearchHit, SearchQuery, parse_query};
    use switchboard_store::{MessageRecord, SessionRecord, SqlStore, Store};
    use uuid::Uuid;

    pub(super) fn q(
        text: &str,
        sessions: Option<Vec<Uuid>>,
        limit: u32,
        offset: u32,
    ) -> SearchQuery {
        SearchQuery {
            terms: parse_query(text).unwrap(),
            sessions,
            backend: None,
            from: None,
            to: None,
            visible_to: None,
            limit,
            offset,
        }
    }

    pub(super) async fn session(store: &SqlStore) -> Uuid {
        session_of(store, None).await
    }

    async fn session_of(store: &SqlStore, owner: Option<&str>) -> Uuid {
        let s = SessionRecord {
            id: Uuid::now_v7(),
            title: "scale".into(),
            cwd: "/".into(),
            config: serde_json::json!({}),
            created_at: "2026-01-01T00:00:00Z".into(),
            updated_at: "2026-01-01T00:00:00Z".into(),
            last_seq: 0,
            archived_at: None,
            owner: owner.map(str::to_string),
        };
        store.create_session(&s).await.unwrap();
        s.id
    }

    pub(super) async fn say(store: &SqlStore, session: Uuid, text: &str) -> Uuid {
        let m = MessageRecord {
            id: Uuid::now_v7(),
            session_id: session,
            run_id: None,
            role: "assistant".into(),
            content: text.into(),
            tool_calls: None,
            tool_call_id: None,
            is_error: false,
            created_at: "2026-01-01T00:00:01Z".into(),
        };
        store.append_message(&m, None).await.unwrap();
        m.id
    }

    pub(super) fn marked(h: &SearchHit, word: &str) -> bool {
        h.snippet
            .contains(&format!("{MATCH_START}{word}{MATCH_END}"))
    }

    /// 12,000 messages, each with `common`, one in 251 with `rare` too, in two sessions by
    /// turns: more than the newest 10,000 documents the store tries each term on, so
    /// `common` is a common term (it only filters) and `rare` is ranked.
    #[tokio::test]
    async fn common_words_filter_rare_ones_rank_and_sessions_are_asked_of_the_index() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqlStore::open_path(&dir.path().join("switchboard.db"))
            .await
            .unwrap();
        let (a, b) = (session_of(&store, Some("ann")).await, session(&store).await);
        let mut ids = Vec::new();
        let mut rare = std::collections::HashSet::new();
        for i in 0..12_000u32 {
            let s = if i % 2 == 0 { a } else { b };
            let text = if i % 251 == 0 {
                format!("common filler{i} rare note")
            } else {
                format!("common filler{i} words")
            };
            let id = say(&store, s, &text).await;
            if i % 251 == 0 {
                rare.insert(id);
            }
            ids.push((id, s));
        }

        // Only common words: the newest matches first, each passage marked.
        let hits = store.search(&q("common", None, 5, 0)).await.unwrap();
        let newest: Vec<Uuid> = ids.iter().rev().take(5).map(|(id, _)| *id).collect();
        assert_eq!(hits.iter().map(|h| h.id).collect::<Vec<_>>(), newest);
        assert!(hits.iter().all(|h| marked(h, "common")), "{hits:?}");
        assert!(hits[0].snippet.contains("filler11999"), "{:?}", hits[0]);

        // A common word and a rare one: every hit has both, all 48 over three pages.
        let mut seen = std::collections::HashSet::new();
        for offset in [0, 20, 40] {
            let page = store
                .search(&q("common rare", None, 20, offset))
                .await
                .unwrap();
            assert!(
                page.iter()
                    .all(|h| rare.contains(&h.id) && marked(h, "rare") && marked(h, "common")),
                "{page:?}"
            );
            seen.extend(page.iter().map(|h| h.id));
        }
        assert_eq!(seen, rare);

        // One session: only its messages, newest first; its rare ones all found.
        let hits = store
            .search(&q("common", Some(vec![b]), 3, 0))
            .await
            .unwrap();
        let newest_b: Vec<Uuid> = ids
            .iter()
            .rev()
            .filter(|(_, s)| *s == b)
            .take(3)
            .map(|(id, _)| *id)
            .collect();
        assert_eq!(hits.iter().map(|h| h.id).collect::<Vec<_>>(), newest_b);
        let in_b: std::collections::HashSet<Uuid> = ids
            .iter()
            .filter(|(id, s)| *s == b && rare.contains(id))
            .map(|(id, _)| *id)
            .collect();
        let hits = store
            .search(&q("rare common", Some(vec![b]), 100, 0))
            .await
            .unwrap();
        assert_eq!(
            hits.iter()
                .map(|h| h.id)
                .collect::<std::collections::HashSet<_>>(),
            in_b
        );
        // The other filters hold in both shapes: a person sees only their sessions' hits,
        // and dates and back-ends filter.
        let ann = |text: &str, limit| SearchQuery {
            visible_to: Some("ann".into()),
            ..q(text, None, limit, 0)
        };
        let hits = store.search(&ann("common", 3)).await.unwrap();
        let newest_a: Vec<Uuid> = ids
            .iter()
            .rev()
            .filter(|(_, s)| *s == a)
            .take(3)
            .map(|(id, _)| *id)
            .collect();
        assert_eq!(hits.iter().map(|h| h.id).collect::<Vec<_>>(), newest_a);
        let hits = store.search(&ann("rare common", 100)).await.unwrap();
        let rare_a: std::collections::HashSet<Uuid> = ids
            .iter()
            .filter(|(id, s)| *s == a && rare.contains(id))
            .map(|(id, _)| *id)
            .collect();
        assert_eq!(
            hits.iter()
                .map(|h| h.id)
                .collect::<std::collections::HashSet<_>>(),
            rare_a
        );
        let dated = |text: &str, from: Option<&str>, to: Option<&str>| SearchQuery {
            from: from.map(str::to_string),
            to: to.map(str::to_string),
            ..q(text, None, 100, 0)
        };
        for text in ["common", "common rare"] {
            let later = store
                .search(&dated(text, Some("2026-01-02T00:00:00Z"), None))
                .await
                .unwrap();
            assert!(later.is_empty(), "{text}: {later:?}");
            let before = store
                .search(&dated(text, None, Some("2026-01-02T00:00:00Z")))
                .await
                .unwrap();
            assert_eq!(
                before.len(),
                if text == "common" { 100 } else { 48 },
                "{text}"
            );
            let elsewhere = SearchQuery {
                backend: Some("acp:nowhere".into()),
                ..q(text, None, 100, 0)
            };
            assert!(store.search(&elsewhere).await.unwrap().is_empty(), "{text}");
        }

        // More sessions than the index is asked about: the join still filters.
        let mut many: Vec<Uuid> = (0..70).map(|_| Uuid::now_v7()).collect();
        many.push(b);
        let hits = store.search(&q("rare", Some(many), 100, 0)).await.unwrap();
        assert_eq!(
            hits.iter()
                .map(|h| h.id)
                .collect::<std::collections::HashSet<_>>(),
            in_b
        );
        // A phrase found once (ranked), and a prefix that is common (newest first).
        let hits = store
            .search(&q("\"common filler11998\"", None, 5, 0))
            .await
            .unwrap();
        assert_eq!(hits.len(), 1, "{hits:?}");
        assert!(marked(&hits[0], "common filler11998"), "{hits:?}");
        let hits = store
            .search(&q("comm*", Some(vec![a]), 2, 0))
            .await
            .unwrap();
        assert_eq!(hits.len(), 2);
        assert!(hits.iter().all(|h| h.session_id == a));
    }

    /// A database whose index was made before it knew sessions (migration 12) learns them.
    #[tokio::test]
    async fn an_index_from_before_migration_13_learns_each_documents_session() {
        use sqlx::Connection;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("switchboard.db");
        let store = SqlStore::open_path(&path).await.unwrap();
        let (a, b) = (session(&store).await, session(&store).await);
        say(&store, a, "the zebra in a").await;
        let in_b = say(&store, b, "the zebra in b").await;
        store.close().await;
        let mut c = sqlx::SqliteConnection::connect_with(&switchboard_db::sqlite_options(&path))
            .await
            .unwrap();
        sqlx::raw_sql(
            "CREATE VIRTUAL TABLE old USING fts5(body, tokenize = 'unicode61 remove_diacritics 0'); \
             INSERT INTO old (rowid, body) SELECT rowid, body FROM search; \
             DROP TABLE search; ALTER TABLE old RENAME TO search; \
             DROP TABLE search_pending; DELETE FROM schema_migrations WHERE version >= 13;",
        )
        .execute(&mut c)
        .await
        .unwrap();
        c.close().await.unwrap();
        let store = SqlStore::open_path(&path).await.unwrap();
        let hits = store
            .search(&q("zebra", Some(vec![b]), 10, 0))
            .await
            .unwrap();
        assert_eq!(hits.iter().map(|h| h.id).collect::<Vec<_>>(), vec![in_b]);
        assert_eq!(
            store.search(&q("zebra", None, 10, 0)).await.unwrap().len(),
            2
        );
    }
}

/// The index is written in batches, off the message's own transaction (src/sql/indexer.rs).
mod batched_index {
    use super::search_at_scale::{marked, q, say, session};
    use sqlx::Connection;
    use switchboard_store::search::{MATCH_END, MATCH_START};
    use switchboard_store::{MessageRecord, SqlStore, Store};
    use uuid::Uuid;

    async fn raw(path: &std::path::Path) -> sqlx::SqliteConnection {
        sqlx::SqliteConnection::connect_with(&switchboard_db::sqlite_options(path))
            .await
            .unwrap()
    }

    /// (pending documents, documents in the index)
    async fn counts(c: &mut sqlx::SqliteConnection) -> (i64, i64) {
        sqlx::query_as(
            "SELECT (SELECT COUNT(*) FROM search_pending), (SELECT COUNT(*) FROM search)",
        )
        .fetch_one(c)
        .await
        .unwrap()
    }

    /// Polls until nothing is pending (the indexer's linger is half a second).
    async fn until_indexed(c: &mut sqlx::SqliteConnection) -> (i64, i64) {
        for _ in 0..100 {
            let n = counts(c).await;
            if n.0 == 0 {
                return n;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("still pending after 5 s: {:?}", counts(c).await);
    }

    #[tokio::test]
    async fn written_documents_are_indexed_in_the_background_and_searches_never_miss_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("switchboard.db");
        let store = SqlStore::open_path(&path).await.unwrap();
        let mut c = raw(&path).await;
        let a = session(&store).await;
        // The message's transaction only names it: it is pending until the indexer's linger
        // (half a second) has passed, unless this machine stalled that long.
        let first = say(&store, a, "the heron lands").await;
        let (pending, indexed) = counts(&mut c).await;
        assert_eq!(pending + indexed, 1);
        // A search right away indexes what is pending first.
        let hits = store.search(&q("heron", None, 10, 0)).await.unwrap();
        assert_eq!(hits.iter().map(|h| h.id).collect::<Vec<_>>(), vec![first]);
        assert_eq!(counts(&mut c).await, (0, 1));
        // With no search, the indexer takes a burst of writes as one batch.
        let mut ids = Vec::new();
        for i in 0..20 {
            ids.push(say(&store, a, &format!("heron number{i}")).await);
        }
        assert_eq!(until_indexed(&mut c).await, (0, 21));
        let hits = store.search(&q("number7", None, 10, 0)).await.unwrap();
        assert_eq!(hits.iter().map(|h| h.id).collect::<Vec<_>>(), vec![ids[7]]);
        // A session's documents, pending or not, go with it.
        let b = session(&store).await;
        say(&store, b, "the heron of b").await;
        say(&store, b, "the egret of b").await;
        assert!(store.delete_session(b).await.unwrap());
        assert_eq!(counts(&mut c).await, (0, 21));
        assert!(
            store
                .search(&q("egret", None, 10, 0))
                .await
                .unwrap()
                .is_empty()
        );
    }

    /// What a process wrote and did not live to index is indexed when the store opens again.
    #[tokio::test]
    async fn documents_left_pending_by_a_crash_are_indexed_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("switchboard.db");
        let store = SqlStore::open_path(&path).await.unwrap();
        let (a, b) = (session(&store).await, session(&store).await);
        let in_a = say(&store, a, "the osprey in a").await;
        let in_b = say(&store, b, "the osprey in b").await;
        store.close().await;
        // As a process killed before its indexer ran leaves it.
        let mut c = raw(&path).await;
        sqlx::raw_sql(
            "DELETE FROM search; INSERT INTO search_pending (doc) SELECT doc FROM search_docs;",
        )
        .execute(&mut c)
        .await
        .unwrap();
        assert_eq!(counts(&mut c).await, (2, 0));
        let store = SqlStore::open_path(&path).await.unwrap();
        assert_eq!(until_indexed(&mut c).await, (0, 2));
        // Indexed with each one's session.
        let hits = store
            .search(&q("osprey", Some(vec![b]), 10, 0))
            .await
            .unwrap();
        assert_eq!(hits.iter().map(|h| h.id).collect::<Vec<_>>(), vec![in_b]);
        let hits = store
            .search(&q("osprey", Some(vec![a]), 10, 0))
            .await
            .unwrap();
        assert_eq!(hits.iter().map(|h| h.id).collect::<Vec<_>>(), vec![in_a]);
        c.close().await.unwrap();
    }

    /// The indexed text: the content, then the tool calls; the passage marks in it are
    /// spaces, so a passage marks only matches.
    #[tokio::test]
    async fn tool_calls_are_indexed_and_stored_marks_are_spaces() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqlStore::open_path(&dir.path().join("switchboard.db"))
            .await
            .unwrap();
        let a = session(&store).await;
        let m = MessageRecord {
            id: Uuid::now_v7(),
            session_id: a,
            run_id: None,
            role: "assistant".into(),
            content: format!("look {MATCH_START}here{MATCH_END} first"),
            tool_calls: Some(
                serde_json::json!([{"name": "grep", "arguments": {"pattern": "kingfisher"}}]),
            ),
            tool_call_id: None,
            is_error: false,
            created_at: "2026-01-01T00:00:01Z".into(),
        };
        store.append_message(&m, None).await.unwrap();
        let hits = store.search(&q("kingfisher", None, 10, 0)).await.unwrap();
        assert_eq!(hits.len(), 1);
        assert!(marked(&hits[0], "kingfisher"), "{hits:?}");
        let hits = store.search(&q("here", None, 10, 0)).await.unwrap();
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].snippet.matches(MATCH_START).count(), 1, "{hits:?}");
        assert!(marked(&hits[0], "here"), "{hits:?}");
    }
}
