//! Search: ranked, marked, permission-filtered hits over messages and file names, in step
//! with writes and deletes.

use uuid::Uuid;

use super::{check, new_session_record, ts};
use crate::search::{HitKind, MATCH_END, MATCH_START, SearchQuery, parse_query};
use crate::{FileRecord, MessageRecord, SessionRecord, Store};

/// A word no other check writes.
fn unique() -> String {
    format!("w{}", Uuid::now_v7().simple())
}

pub(super) fn query(q: &str) -> SearchQuery {
    SearchQuery {
        terms: parse_query(q).unwrap_or_default(),
        sessions: None,
        backend: None,
        from: None,
        to: None,
        visible_to: None,
        limit: 20,
        offset: 0,
    }
}

async fn message(store: &dyn Store, session: Uuid, n: u32, role: &str, text: &str) -> Uuid {
    let m = MessageRecord {
        id: Uuid::now_v7(),
        session_id: session,
        run_id: None,
        role: role.into(),
        content: text.into(),
        tool_calls: None,
        tool_call_id: None,
        is_error: false,
        created_at: ts(n),
    };
    check("append_message", store.append_message(&m, None).await);
    m.id
}

async fn session(
    store: &dyn Store,
    owner: Option<&str>,
    backend: serde_json::Value,
) -> SessionRecord {
    let s = SessionRecord {
        owner: owner.map(str::to_string),
        config: serde_json::json!({"backend": backend}),
        ..new_session_record("search")
    };
    check("create_session", store.create_session(&s).await);
    s
}

pub async fn search_finds_ranked_marked_visible_hits_in_step_with_writes(store: &dyn Store) {
    let w = unique();
    let a = session(store, Some("ann"), serde_json::json!("builtin")).await;
    let b = session(store, Some("bob"), serde_json::json!({"acp": "claude"})).await;

    // Ranked: the message that says it most comes first.
    let twice = message(
        store,
        a.id,
        1,
        "assistant",
        &format!("the {w} migration failed, so rerun the {w} migration"),
    )
    .await;
    let once = message(
        store,
        a.id,
        2,
        "user",
        &format!("is the {w} migration on postgres fine now or not yet"),
    )
    .await;
    let other = message(
        store,
        b.id,
        3,
        "assistant",
        &format!("{w} has nothing else"),
    )
    .await;
    let hits = check(
        "search",
        store.search(&query(&format!("{w} migration"))).await,
    );
    let ids: Vec<Uuid> = hits.iter().map(|h| h.id).collect();
    assert_eq!(
        ids,
        vec![twice, once],
        "every term is required; more matches rank first"
    );
    let first = &hits[0];
    assert_eq!(first.session_id, a.id);
    assert_eq!(first.kind, HitKind::Message);
    assert_eq!(first.role.as_deref(), Some("assistant"));
    assert_eq!(first.created_at, ts(1));
    assert!(
        first
            .snippet
            .contains(&format!("{MATCH_START}{w}{MATCH_END}")),
        "the match is marked in the passage: {:?}",
        first.snippet
    );

    // A phrase, in order and side by side; a prefix.
    let hits = check(
        "phrase",
        store.search(&query(&format!("\"rerun the {w}\""))).await,
    );
    assert_eq!(hits.iter().map(|h| h.id).collect::<Vec<_>>(), vec![twice]);
    let hits = check(
        "phrase out of order",
        store.search(&query(&format!("\"{w} rerun\""))).await,
    );
    assert!(hits.is_empty(), "{hits:?}");
    let stem = &w[..w.len() - 6];
    let hits = check(
        "prefix",
        store.search(&query(&format!("{stem}* postgr*"))).await,
    );
    assert_eq!(hits.iter().map(|h| h.id).collect::<Vec<_>>(), vec![once]);

    // File names are found too.
    let file = FileRecord {
        id: Uuid::now_v7(),
        session_id: b.id,
        name: format!("report-{w}.csv"),
        mime: "text/csv".into(),
        size: 3,
        sha256: format!("{:064x}", 7),
        created_at: ts(4),
    };
    check("put_file", store.put_file(&file).await);
    let hits = check("file", store.search(&query(&format!("{w} csv"))).await);
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!((hits[0].kind, hits[0].id), (HitKind::File, file.id));

    // Only what the caller sees; only one session, backend, time.
    let only_ann = SearchQuery {
        visible_to: Some("ann".into()),
        ..query(&w)
    };
    let hits = check("visible", store.search(&only_ann).await);
    assert!(
        hits.iter().all(|h| h.session_id == a.id) && hits.len() == 2,
        "{hits:?}"
    );
    check(
        "share",
        store.set_session_shares(b.id, &["ann".into()]).await,
    );
    let hits = check("shared", store.search(&only_ann).await);
    assert_eq!(hits.len(), 4, "a shared session's hits are seen: {hits:?}");
    let in_b = SearchQuery {
        sessions: Some(vec![b.id]),
        ..query(&w)
    };
    assert_eq!(check("session", store.search(&in_b).await).len(), 2);
    // Several sessions: the hits of those, and of no other; none of an empty list.
    let everywhere = check("everywhere", store.search(&query(&w)).await);
    let in_a_b = SearchQuery {
        sessions: Some(vec![a.id, b.id]),
        ..query(&w)
    };
    let hits = check("sessions", store.search(&in_a_b).await);
    assert_eq!(
        hits.len(),
        everywhere
            .iter()
            .filter(|h| h.session_id == a.id || h.session_id == b.id)
            .count(),
        "{hits:?}"
    );
    assert!(
        hits.len() >= 4
            && hits
                .iter()
                .all(|h| h.session_id == a.id || h.session_id == b.id)
    );
    let in_none = SearchQuery {
        sessions: Some(Vec::new()),
        ..query(&w)
    };
    assert!(check("no sessions", store.search(&in_none).await).is_empty());
    let claude = SearchQuery {
        backend: Some("claude".into()),
        ..query(&w)
    };
    let hits = check("backend", store.search(&claude).await);
    assert!(
        hits.iter().all(|h| h.session_id == b.id) && hits.len() == 2,
        "{hits:?}"
    );
    let builtin = SearchQuery {
        backend: Some("builtin".into()),
        ..query(&w)
    };
    assert_eq!(check("builtin", store.search(&builtin).await).len(), 2);
    let late = SearchQuery {
        from: Some(ts(2)),
        to: Some(ts(4)),
        ..query(&w)
    };
    let hits = check("from/to", store.search(&late).await);
    assert_eq!(
        hits.iter().map(|h| h.id).collect::<Vec<_>>().len(),
        2,
        "from is inclusive, to exclusive: {hits:?}"
    );
    let paged = SearchQuery {
        limit: 1,
        offset: 1,
        ..query(&format!("{w} migration"))
    };
    assert_eq!(
        check("page", store.search(&paged).await)
            .iter()
            .map(|h| h.id)
            .collect::<Vec<_>>(),
        vec![once],
        "a page goes on where the last one stopped"
    );

    // A message links to where the log was when it was written.
    check(
        "append_events",
        store
            .append_events(
                &[super::event(a.id, 1, None), super::event(a.id, 2, None)],
                &[],
            )
            .await,
    );
    let later = message(
        store,
        a.id,
        5,
        "assistant",
        &format!("{w} after two events"),
    )
    .await;
    let hits = check("seq", store.search(&query(&format!("{w} after"))).await);
    assert_eq!((hits[0].id, hits[0].seq), (later, Some(2)));

    // Deleting the session takes its messages and files out of the index.
    check("delete", store.delete_session(b.id).await);
    let hits = check("after delete", store.search(&query(&w)).await);
    assert!(hits.iter().all(|h| h.session_id == a.id), "{hits:?}");
    assert!(!hits.iter().any(|h| h.id == other || h.id == file.id));
    assert!(check("no words", store.search(&query("  ")).await).is_empty());
}
