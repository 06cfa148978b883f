//! Sessions: create, list, update, archive, delete.

use serde_json::json;
use uuid::Uuid;

use crate::{NewRun, SessionUpdate, Store, StoreError};

use super::*;

pub async fn sessions_round_trip(store: &dyn Store) {
    let s = new_session(store, "round trip").await;
    let got = check("get_session", store.get_session(s.id).await);
    assert_eq!(got.as_ref(), Some(&s), "a session reads back as written");
    check("touch", store.touch_session(s.id, &ts(9)).await);
    let got = check("get_session", store.get_session(s.id).await);
    assert_eq!(
        got.map(|g| g.updated_at),
        Some(ts(9)),
        "touch sets updated_at"
    );
    let dup = store.create_session(&s).await;
    assert!(
        matches!(dup, Err(StoreError::Conflict(_))),
        "duplicate id is a conflict: {dup:?}"
    );
}

pub async fn list_sessions_pages(store: &dyn Store) {
    let (_, before) = check("list", store.list_sessions(1, 0, false, None).await);
    for i in 0..3 {
        new_session(store, &format!("page {i}")).await;
    }
    let (page, total) = check("list", store.list_sessions(2, 0, false, None).await);
    assert_eq!(total, before + 3, "total counts every session");
    assert_eq!(page.len(), 2, "limit is respected");
    let (rest, _) = check("list", store.list_sessions(1000, 2, false, None).await);
    assert_eq!(rest.len() as u64, total - 2, "offset skips");
}

pub async fn sessions_update_and_archive(store: &dyn Store) {
    let s = new_session(store, "to archive").await;
    let (_, archived_before) = check("list", store.list_sessions(1000, 0, true, None).await);
    let (_, live_before) = check("list", store.list_sessions(1000, 0, false, None).await);
    let upd = SessionUpdate {
        title: Some("renamed".into()),
        archived_at: Some(Some(ts(9))),
        config: Some(serde_json::json!({"permission_mode": "read-only"})),
        updated_at: ts(9),
    };
    assert!(check("update", store.update_session(s.id, &upd).await));
    let Some(got) = check("get", store.get_session(s.id).await) else {
        panic!("the updated session exists");
    };
    assert_eq!(got.title, "renamed");
    assert_eq!(got.archived_at.as_deref(), Some(ts(9).as_str()));
    assert_eq!(got.updated_at, ts(9));
    assert_eq!(
        got.config["permission_mode"], "read-only",
        "the config is replaced"
    );
    let (archived, n) = check("list", store.list_sessions(1000, 0, true, None).await);
    assert_eq!(n, archived_before + 1, "archived sessions are listed apart");
    assert!(archived.iter().any(|r| r.id == s.id));
    let (live, m) = check("list", store.list_sessions(1000, 0, false, None).await);
    assert_eq!(m, live_before - 1);
    assert!(live.iter().all(|r| r.id != s.id));
    // Unarchive, title untouched.
    let upd = SessionUpdate {
        title: None,
        archived_at: Some(None),
        config: None,
        updated_at: ts(10),
    };
    assert!(check("update", store.update_session(s.id, &upd).await));
    let Some(got) = check("get", store.get_session(s.id).await) else {
        panic!("the unarchived session exists");
    };
    assert_eq!((got.title.as_str(), got.archived_at), ("renamed", None));
    assert_eq!(
        got.config["permission_mode"], "read-only",
        "no config leaves it"
    );
    assert!(!check(
        "update unknown",
        store.update_session(Uuid::now_v7(), &upd).await
    ));
}

pub async fn delete_removes_everything(store: &dyn Store) {
    let s = new_session(store, "delete").await;
    check(
        "append",
        store.append_events(&[event(s.id, 1, None)], &[]).await,
    );
    let run = NewRun {
        id: Uuid::now_v7(),
        session_id: s.id,
        input: json!({}),
        created_at: ts(1),
        idempotency: None,
    };
    check("enqueue", store.enqueue_run(&run).await);
    assert!(check("delete", store.delete_session(s.id).await));
    assert!(check("get", store.get_session(s.id).await).is_none());
    assert!(check("read", store.read_events(s.id, 0, 10).await).is_empty());
    assert!(check("run", store.get_run(run.id).await).is_none());
    assert!(
        !check("delete again", store.delete_session(s.id).await),
        "second delete says false"
    );
}

pub async fn unknown_session_is_not_found(store: &dyn Store) {
    let ghost = Uuid::now_v7();
    assert!(check("get", store.get_session(ghost).await).is_none());
    assert!(check("no run, no instance", store.workspace_instance(ghost).await).is_none());
    let r = store
        .enqueue_run(&NewRun {
            id: Uuid::now_v7(),
            session_id: ghost,
            input: json!({}),
            created_at: ts(1),
            idempotency: None,
        })
        .await;
    assert!(
        matches!(r, Err(StoreError::NotFound(_))),
        "run for unknown session: {r:?}"
    );
    let r = store.append_events(&[event(ghost, 1, None)], &[]).await;
    assert!(
        matches!(r, Err(StoreError::NotFound(_))),
        "event for unknown session: {r:?}"
    );
    let b = check("bounds", store.event_bounds(ghost).await);
    assert_eq!(b, crate::EventBounds::default());
}
