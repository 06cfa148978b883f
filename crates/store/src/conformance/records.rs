//! What a session keeps besides its log: the transcript, approvals, backend state, files.

use serde_json::json;
use uuid::Uuid;

use crate::{ApprovalRecord, FileRecord, MessageRecord, RecentMessages, Store, StoreError};

use super::*;

pub async fn messages_keep_order(store: &dyn Store) {
    let s = new_session(store, "messages").await;
    let run_id = Some(Uuid::now_v7());
    let mut written = Vec::new();
    for (i, role) in ["user", "assistant", "tool", "assistant"]
        .iter()
        .enumerate()
    {
        let m = MessageRecord {
            id: Uuid::now_v7(),
            session_id: s.id,
            run_id,
            role: (*role).into(),
            content: format!("message {i}"),
            tool_calls: (i == 1).then(|| json!([{"id": "c1", "name": "view", "arguments": {}}])),
            tool_call_id: (i == 2).then(|| "c1".to_string()),
            is_error: i == 2,
            created_at: ts(i as u32),
        };
        check("append message", store.append_message(&m, None).await);
        written.push(m);
    }
    let (all, total) = check("list", store.list_messages(s.id, 100, 0).await);
    assert_eq!(total, 4);
    assert_eq!(all, written, "messages read back in order, unchanged");
    let (page, _) = check("list", store.list_messages(s.id, 2, 1).await);
    assert_eq!(page, written[1..3].to_vec());
}

pub async fn recent_messages_are_bounded(store: &dyn Store) {
    let s = new_session(store, "recent").await;
    let other = new_session(store, "other").await;
    let mut written = Vec::new();
    // Sizes 10, 20, …, 100: content only, but the second carries a tool call (its JSON
    // counts too).
    for i in 0..10u32 {
        let calls = json!([{"id": "c", "name": "view", "arguments": {}}]);
        let m = MessageRecord {
            id: Uuid::now_v7(),
            session_id: s.id,
            run_id: None,
            role: if i % 2 == 0 { "user" } else { "assistant" }.into(),
            content: "x".repeat(10 * (i as usize + 1)),
            tool_calls: (i == 8).then_some(calls),
            tool_call_id: None,
            is_error: false,
            created_at: ts(i),
        };
        check("append", store.append_message(&m, None).await);
        let mut noise = m.clone();
        noise.id = Uuid::now_v7();
        noise.session_id = other.id;
        check("append other", store.append_message(&noise, None).await);
        written.push(m);
    }
    let calls_len = written[8]
        .tool_calls
        .as_ref()
        .map_or(0, |c| c.to_string().len() as u64);
    let sid = s.id;
    let recent = |n, chars| async move {
        let r = check("recent", store.recent_messages(sid, n, chars).await);
        (r.messages, r.earlier)
    };
    assert_eq!(
        recent(100, u64::MAX).await,
        (written.clone(), false),
        "everything, in order, nothing earlier"
    );
    assert_eq!(recent(10, u64::MAX).await, (written.clone(), false));
    assert_eq!(recent(3, u64::MAX).await, (written[7..].to_vec(), true));
    // Newest first: 100 (< 150, kept), then 90 + calls (100 < 150, kept), then 80
    // (190 + calls ≥ 150: not kept).
    assert_eq!(recent(100, 150).await, (written[8..].to_vec(), true));
    assert_eq!(
        recent(100, 191 + calls_len).await,
        (written[7..].to_vec(), true),
        "80 fits when the newer ones add up to less than the budget"
    );
    // The newest is always there, however small the budget.
    assert_eq!(recent(100, 1).await, (written[9..].to_vec(), true));
    assert_eq!(recent(0, u64::MAX).await, (vec![], true));
    assert_eq!(
        check(
            "unknown",
            store.recent_messages(Uuid::now_v7(), 10, 100).await
        ),
        RecentMessages::default(),
        "an unknown session: nothing, and nothing earlier"
    );

    // A longer session, read in pages from the newest (16, 32, 64 …): the cuts fall inside
    // and across pages alike. 40 messages of 10 chars each.
    let long = new_session(store, "recent long").await;
    let mut written = Vec::new();
    for i in 0..40u32 {
        let m = MessageRecord {
            id: Uuid::now_v7(),
            session_id: long.id,
            run_id: None,
            role: if i % 2 == 0 { "user" } else { "assistant" }.into(),
            content: format!("{i:0>10}"),
            tool_calls: None,
            tool_call_id: None,
            is_error: false,
            created_at: ts(i),
        };
        check("append long", store.append_message(&m, None).await);
        written.push(m);
    }
    let lid = long.id;
    let recent = |n, chars| async move {
        let r = check("recent long", store.recent_messages(lid, n, chars).await);
        (r.messages, r.earlier)
    };
    assert_eq!(recent(100, u64::MAX).await, (written.clone(), false));
    assert_eq!(recent(40, u64::MAX).await, (written.clone(), false));
    assert_eq!(recent(39, u64::MAX).await, (written[1..].to_vec(), true));
    assert_eq!(recent(16, u64::MAX).await, (written[24..].to_vec(), true));
    assert_eq!(recent(17, u64::MAX).await, (written[23..].to_vec(), true));
    // Newer ones add up to 0, 10, …, 250 < 255: 26 kept, in the second page.
    assert_eq!(recent(100, 255).await, (written[14..].to_vec(), true));
    assert_eq!(
        recent(100, 160).await,
        (written[24..].to_vec(), true),
        "16: one page"
    );
    assert_eq!(recent(100, 390).await, (written[1..].to_vec(), true));
    assert_eq!(recent(100, 391).await, (written.clone(), false));
}

pub async fn approvals_round_trip(store: &dyn Store) {
    let s = new_session(store, "approvals").await;
    assert!(check("get none", store.get_approval(s.id).await).is_none());
    let run_a = Uuid::now_v7();
    let a = ApprovalRecord {
        session_id: s.id,
        run_id: run_a,
        tool_calls: json!([{"id": "c1", "name": "run_command", "arguments": {"command": "ls"}}]),
        created_at: ts(1),
        expires_at: ts(2),
    };
    check("put", store.put_approval(&a, None).await);
    assert_eq!(
        check("get", store.get_approval(s.id).await),
        Some(a.clone())
    );
    // One per session: a newer one replaces it.
    let b = ApprovalRecord {
        run_id: Uuid::now_v7(),
        tool_calls: json!([]),
        ..a.clone()
    };
    check("put again", store.put_approval(&b, None).await);
    assert_eq!(
        check("get", store.get_approval(s.id).await),
        Some(b.clone())
    );
    assert!(check("list", store.list_approvals().await).contains(&b));
    // Deleting needs the right run.
    assert!(!check(
        "delete other run",
        store.delete_approval(s.id, run_a).await
    ));
    assert!(check("delete", store.delete_approval(s.id, b.run_id).await));
    assert!(check("get gone", store.get_approval(s.id).await).is_none());
    let ghost = ApprovalRecord {
        session_id: Uuid::now_v7(),
        ..a.clone()
    };
    assert!(matches!(
        store.put_approval(&ghost, None).await,
        Err(StoreError::NotFound(_))
    ));
    check("put", store.put_approval(&a, None).await);
    check("delete session", store.delete_session(s.id).await);
    assert!(check("gone with session", store.get_approval(s.id).await).is_none());
}

pub async fn backend_state_round_trip(store: &dyn Store) {
    let s = new_session(store, "backend state").await;
    assert_eq!(
        check("get empty", store.get_backend_state(s.id).await),
        None
    );
    let v = json!({"acp_session_id": "sess-1", "agent": "claude"});
    check("set", store.set_backend_state(s.id, Some(&v), None).await);
    assert_eq!(check("get", store.get_backend_state(s.id).await), Some(v));
    check("clear", store.set_backend_state(s.id, None, None).await);
    assert_eq!(
        check("get cleared", store.get_backend_state(s.id).await),
        None
    );
    let ghost = Uuid::now_v7();
    assert!(matches!(
        store.set_backend_state(ghost, Some(&json!({})), None).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        store.get_backend_state(ghost).await,
        Err(StoreError::NotFound(_))
    ));
}

pub async fn files_round_trip_and_go_with_their_session(store: &dyn Store) {
    let a = new_session(store, "files a").await;
    let b = new_session(store, "files b").await;
    // the same content in two sessions (content-addressed: one hash, two rows)
    let sha = format!("{:064x}", a.id.as_u128());
    let file = |session_id: Uuid, n: u32, name: &str| FileRecord {
        id: Uuid::now_v7(),
        session_id,
        name: name.into(),
        mime: "image/png".into(),
        size: 5_000_000_000 + u64::from(n),
        sha256: sha.clone(),
        created_at: ts(n),
    };
    let first = file(a.id, 1, "shot é.png");
    let second = file(a.id, 2, "second.png");
    let other = file(b.id, 3, "other.png");
    for f in [&second, &first, &other] {
        check("put_file", store.put_file(f).await);
    }
    assert_eq!(
        check("get_file", store.get_file(a.id, first.id).await),
        Some(first.clone()),
        "a file reads back as written (large sizes and UTF-8 names included)"
    );
    assert_eq!(
        check(
            "get_file of another session",
            store.get_file(b.id, first.id).await
        ),
        None,
        "a file is only found in its own session"
    );
    assert_eq!(
        check("list_files", store.list_files(a.id).await),
        vec![first.clone(), second.clone()],
        "oldest first"
    );
    let missing = file(Uuid::now_v7(), 4, "x");
    assert!(
        matches!(store.put_file(&missing).await, Err(StoreError::NotFound(_))),
        "a file of a missing session is NotFound"
    );
    assert!(check("in use", store.content_in_use(&sha).await));
    check("delete a", store.delete_session(a.id).await);
    assert!(check("list after delete", store.list_files(a.id).await).is_empty());
    assert!(
        check("in use by b", store.content_in_use(&sha).await),
        "still named by the other session"
    );
    check("delete b", store.delete_session(b.id).await);
    assert!(
        !check("in use after both", store.content_in_use(&sha).await),
        "named by no row once both sessions are gone"
    );
}
