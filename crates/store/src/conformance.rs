//! The conformance suite every [`Store`] implementation must pass.
//!
//! Each check creates its own sessions with fresh ids, so all checks can share one store.
//! An implementation's tests run them with [`conformance_suite!`](crate::conformance_suite)
//! — one `#[tokio::test]` per check, each on a fresh store — or all in a row with
//! [`run_all`]; a failing check panics with what broke.

/// One `#[tokio::test]` per check of the suite, each on the store (and its guard: a temporary
/// directory, a test database) that `$open().await` returns as `(guard, store)`.
#[macro_export]
macro_rules! conformance_suite {
    ($open:path) => {
        $crate::conformance_suite!(@cases $open;
            sessions_round_trip,
            list_sessions_pages,
            sessions_update_and_archive,
            events_append_and_read,
            events_duplicate_seq_is_conflict,
            events_last_seq_survives_pruning,
            runs_queue_and_states,
            idempotent_runs,
            one_running_run_per_session,
            messages_keep_order,
            recent_messages_are_bounded,
            delete_removes_everything,
            unknown_session_is_not_found,
            approvals_round_trip,
            backend_state_round_trip,
            leases_take_renew_release,
            run_lease_fences_writes,
            a_run_s_end_and_its_event_commit_together,
            files_round_trip_and_go_with_their_session
        );
    };
    (@cases $open:path; $($case:ident),* $(,)?) => {$(
        #[tokio::test]
        async fn $case() {
            let (_guard, store) = $open().await;
            $crate::conformance::$case(&store).await;
        }
    )*};
}

use serde_json::json;
use uuid::Uuid;

use std::time::Duration;

use crate::{
    ApprovalRecord, FileRecord, Idempotency, Lease, MessageRecord, NewEvent, NewRun,
    RecentMessages, RunFinish, RunOutcome, RunState, SessionRecord, SessionUpdate, Store,
    StoreError,
};

/// The lease length the checks use: long enough never to run out during a check.
const LEASE: Duration = Duration::from_secs(600);

/// Runs every check against `store`.
pub async fn run_all(store: &dyn Store) {
    sessions_round_trip(store).await;
    list_sessions_pages(store).await;
    sessions_update_and_archive(store).await;
    events_append_and_read(store).await;
    events_duplicate_seq_is_conflict(store).await;
    events_last_seq_survives_pruning(store).await;
    runs_queue_and_states(store).await;
    idempotent_runs(store).await;
    one_running_run_per_session(store).await;
    messages_keep_order(store).await;
    recent_messages_are_bounded(store).await;
    delete_removes_everything(store).await;
    unknown_session_is_not_found(store).await;
    approvals_round_trip(store).await;
    backend_state_round_trip(store).await;
    leases_take_renew_release(store).await;
    run_lease_fences_writes(store).await;
    a_run_s_end_and_its_event_commit_together(store).await;
    files_round_trip_and_go_with_their_session(store).await;
}

fn ts(n: u32) -> String {
    format!("2026-01-01T00:00:{:02}.000000Z", n % 60)
}

fn check<T>(what: &str, r: Result<T, StoreError>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{what}: {e}"),
    }
}

async fn new_session(store: &dyn Store, title: &str) -> SessionRecord {
    let s = SessionRecord {
        id: Uuid::now_v7(),
        title: title.into(),
        cwd: "/tmp/ws".into(),
        config: json!({"backend": "builtin", "model": null}),
        created_at: ts(1),
        updated_at: ts(1),
        last_seq: 0,
        archived_at: None,
    };
    check("create_session", store.create_session(&s).await);
    s
}

fn event(session_id: Uuid, seq: u64, run_id: Option<Uuid>) -> NewEvent {
    NewEvent {
        session_id,
        seq,
        run_id,
        kind: "text_delta".into(),
        payload: format!(r#"{{"TextDelta":{{"delta":"{seq}"}}}}"#),
        created_at: ts(seq as u32),
    }
}

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
    let (_, before) = check("list", store.list_sessions(1, 0, false).await);
    for i in 0..3 {
        new_session(store, &format!("page {i}")).await;
    }
    let (page, total) = check("list", store.list_sessions(2, 0, false).await);
    assert_eq!(total, before + 3, "total counts every session");
    assert_eq!(page.len(), 2, "limit is respected");
    let (rest, _) = check("list", store.list_sessions(1000, 2, false).await);
    assert_eq!(rest.len() as u64, total - 2, "offset skips");
}

pub async fn sessions_update_and_archive(store: &dyn Store) {
    let s = new_session(store, "to archive").await;
    let (_, archived_before) = check("list", store.list_sessions(1000, 0, true).await);
    let (_, live_before) = check("list", store.list_sessions(1000, 0, false).await);
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
    let (archived, n) = check("list", store.list_sessions(1000, 0, true).await);
    assert_eq!(n, archived_before + 1, "archived sessions are listed apart");
    assert!(archived.iter().any(|r| r.id == s.id));
    let (live, m) = check("list", store.list_sessions(1000, 0, false).await);
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

pub async fn events_append_and_read(store: &dyn Store) {
    let s = new_session(store, "events").await;
    let run = Some(Uuid::now_v7());
    let batch: Vec<_> = (1..=10).map(|i| event(s.id, i, run)).collect();
    check("append", store.append_events(&batch[..4], &[]).await);
    check("append", store.append_events(&batch[4..], &[]).await);
    let all = check("read", store.read_events(s.id, 0, 100).await);
    assert_eq!(all, batch, "events read back in order, unchanged");
    let tail = check("read", store.read_events(s.id, 7, 100).await);
    assert_eq!(
        tail.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![8, 9, 10]
    );
    let limited = check("read", store.read_events(s.id, 2, 3).await);
    assert_eq!(
        limited.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![3, 4, 5]
    );
    let b = check("bounds", store.event_bounds(s.id).await);
    assert_eq!((b.oldest, b.newest, b.last_seq), (Some(1), Some(10), 10));
    let got = check("get", store.get_session(s.id).await);
    assert_eq!(got.map(|g| g.last_seq), Some(10), "append raises last_seq");
}

pub async fn events_duplicate_seq_is_conflict(store: &dyn Store) {
    let s = new_session(store, "dup events").await;
    check(
        "append",
        store.append_events(&[event(s.id, 1, None)], &[]).await,
    );
    let r = store
        .append_events(&[event(s.id, 2, None), event(s.id, 1, None)], &[])
        .await;
    assert!(
        matches!(r, Err(StoreError::Conflict(_))),
        "reused seq is refused: {r:?}"
    );
    let all = check("read", store.read_events(s.id, 0, 100).await);
    assert_eq!(
        all.len(),
        1,
        "a failed batch leaves nothing behind (atomic)"
    );
}

pub async fn events_last_seq_survives_pruning(store: &dyn Store) {
    let s = new_session(store, "prune").await;
    let mut evs: Vec<_> = (1..=5).map(|i| event(s.id, i, None)).collect();
    for e in &mut evs {
        e.created_at = "2000-01-01T00:00:00.000000Z".into();
    }
    check("append", store.append_events(&evs, &[]).await);
    let n = check(
        "prune",
        store.prune_events_before("2001-01-01T00:00:00Z").await,
    );
    assert!(n >= 5, "old events are pruned");
    let b = check("bounds", store.event_bounds(s.id).await);
    assert_eq!(
        (b.oldest, b.newest, b.last_seq),
        (None, None, 5),
        "last_seq is kept"
    );
}

/// A run enqueued with an idempotency key answers every repeat of the key in its session
/// (front or back of the queue alike) within the window, and nothing more is inserted;
/// another session, or the same key after the window, makes a new run.
pub async fn idempotent_runs(store: &dyn Store) {
    let s = new_session(store, "idempotent").await;
    let other = new_session(store, "idempotent other").await;
    let mk = |session: Uuid, n: u32, key: &str, since: u32| NewRun {
        id: Uuid::now_v7(),
        session_id: session,
        input: json!({"content": format!("m{n}")}),
        created_at: ts(n),
        idempotency: Some(Idempotency {
            key: key.into(),
            since: ts(since),
        }),
    };
    let first = mk(s.id, 10, "chat:42:7", 0);
    let a = check("enqueue", store.enqueue_run(&first).await);
    assert_eq!(a.id, first.id);
    for repeat in [mk(s.id, 11, "chat:42:7", 0), mk(s.id, 12, "chat:42:7", 5)] {
        let again = check("repeat", store.enqueue_run_front(&repeat).await);
        assert_eq!(again.id, first.id, "the repeat answers the first run");
        assert_eq!(again.input, json!({"content": "m10"}));
        assert!(check("get", store.get_run(repeat.id).await).is_none());
    }
    let found = check(
        "by key",
        store
            .run_by_idempotency_key(s.id, "chat:42:7", &ts(0))
            .await,
    );
    assert_eq!(found.map(|r| r.id), Some(first.id));
    assert!(
        check(
            "by key, window passed",
            store
                .run_by_idempotency_key(s.id, "chat:42:7", &ts(11))
                .await
        )
        .is_none()
    );
    assert!(
        check(
            "other key",
            store
                .run_by_idempotency_key(s.id, "chat:42:8", &ts(0))
                .await
        )
        .is_none()
    );
    // Another session has keys of its own.
    let elsewhere = mk(other.id, 13, "chat:42:7", 0);
    assert_eq!(
        check("other session", store.enqueue_run(&elsewhere).await).id,
        elsewhere.id
    );
    // Past the window the key goes to a new run.
    let later = mk(s.id, 20, "chat:42:7", 15);
    assert_eq!(
        check("after the window", store.enqueue_run(&later).await).id,
        later.id
    );
    let found = check(
        "by key",
        store
            .run_by_idempotency_key(s.id, "chat:42:7", &ts(0))
            .await,
    );
    assert_eq!(found.map(|r| r.id), Some(later.id));
    // Runs without a key are never matched.
    let plain = NewRun {
        idempotency: None,
        ..mk(s.id, 21, "", 0)
    };
    assert_eq!(
        check("no key", store.enqueue_run(&plain).await).id,
        plain.id
    );
}

pub async fn runs_queue_and_states(store: &dyn Store) {
    let s = new_session(store, "runs").await;
    let mk = |n: u32| NewRun {
        id: Uuid::now_v7(),
        session_id: s.id,
        input: json!({"content": format!("m{n}")}),
        created_at: ts(n),
        idempotency: None,
    };
    let a = check("enqueue", store.enqueue_run(&mk(1)).await);
    let b = check("enqueue", store.enqueue_run(&mk(2)).await);
    let front = check("enqueue front", store.enqueue_run_front(&mk(3)).await);
    assert_eq!(a.state, RunState::Queued);
    let next = check("next", store.next_queued_run(s.id).await);
    assert_eq!(
        next.map(|r| r.id),
        Some(front.id),
        "front of the queue comes first"
    );
    let (started, lease) = check(
        "start",
        store.start_run(front.id, &ts(4), "here", LEASE).await,
    );
    assert_eq!(lease.name, Lease::run_name(front.id));
    assert_eq!(lease.run_id(), Some(front.id));
    assert_eq!(started.state, RunState::Running);
    assert_eq!(started.started_at, Some(ts(4)));
    let active = check("active", store.active_run(s.id).await);
    assert_eq!(active.map(|r| r.id), Some(front.id));
    let next = check("next", store.next_queued_run(s.id).await);
    assert_eq!(next.map(|r| r.id), Some(a.id), "then FIFO");
    check(
        "finish",
        store
            .finish_run(
                front.id,
                &RunOutcome::Completed {
                    stop_reason: "end_turn".into(),
                },
                &ts(5),
                None,
            )
            .await,
    );
    let done = check("get", store.get_run(front.id).await);
    let done = done.unwrap_or_else(|| panic!("run disappeared"));
    assert_eq!(done.state, RunState::Completed);
    assert_eq!(done.stop_reason.as_deref(), Some("end_turn"));
    assert_eq!(done.finished_at, Some(ts(5)));
    let again = store
        .finish_run(front.id, &RunOutcome::Cancelled, &ts(6), None)
        .await;
    assert!(
        matches!(again, Err(StoreError::Conflict(_))),
        "a finished run stays finished"
    );
    check("start", store.start_run(a.id, &ts(7), "here", LEASE).await);
    check(
        "fail",
        store
            .finish_run(
                a.id,
                &RunOutcome::Failed {
                    error: "boom".into(),
                },
                &ts(8),
                None,
            )
            .await,
    );
    let failed = check("get", store.get_run(a.id).await);
    assert_eq!(failed.as_ref().map(|r| r.state), Some(RunState::Failed));
    assert_eq!(failed.and_then(|r| r.error).as_deref(), Some("boom"));
    let queued = check("in state", store.runs_in_state(RunState::Queued).await);
    assert!(
        queued.iter().any(|r| r.id == b.id),
        "queued runs are listed"
    );
    assert_eq!(
        queued
            .iter()
            .find(|r| r.id == b.id)
            .map(|r| r.input.clone()),
        Some(json!({"content": "m2"})),
        "input survives"
    );
    assert!(check(
        "cancel queued",
        store.cancel_queued_run(b.id, &ts(9)).await
    ));
    let cancelled = check("get", store.get_run(b.id).await);
    assert_eq!(cancelled.map(|r| r.state), Some(RunState::Cancelled));
    assert!(
        !check("cancel again", store.cancel_queued_run(b.id, &ts(9)).await),
        "only a queued run"
    );
}

pub async fn one_running_run_per_session(store: &dyn Store) {
    let s = new_session(store, "one running").await;
    let mk = || NewRun {
        id: Uuid::now_v7(),
        session_id: s.id,
        input: json!({}),
        created_at: ts(1),
        idempotency: None,
    };
    let a = check("enqueue", store.enqueue_run(&mk()).await);
    let b = check("enqueue", store.enqueue_run(&mk()).await);
    check("start", store.start_run(a.id, &ts(2), "here", LEASE).await);
    let second = store.start_run(b.id, &ts(3), "here", LEASE).await;
    assert!(
        matches!(second, Err(StoreError::Conflict(_))),
        "second running run refused: {second:?}"
    );
    let twice = store.start_run(a.id, &ts(3), "here", LEASE).await;
    assert!(
        matches!(twice, Err(StoreError::Conflict(_))),
        "a running run cannot start again"
    );
    let running = check("in state", store.runs_in_state(RunState::Running).await);
    assert!(running.iter().any(|r| r.id == a.id));
    assert!(!running.iter().any(|r| r.id == b.id));
}

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

pub async fn leases_take_renew_release(store: &dyn Store) {
    let name = format!("poller:{}", Uuid::now_v7());
    let a = check("acquire", store.acquire_lease(&name, "a", LEASE).await);
    let a = a.unwrap_or_else(|| panic!("a free lease is taken"));
    assert_eq!((a.holder.as_str(), a.token), ("a", 1));
    let b = check("acquire", store.acquire_lease(&name, "b", LEASE).await);
    assert_eq!(b, None, "a held lease is not given to another holder");
    assert!(check("renew", store.renew_lease(&a, LEASE).await));
    let again = check("acquire", store.acquire_lease(&name, "a", LEASE).await);
    let again = again.unwrap_or_else(|| panic!("the holder may take its lease again"));
    assert_eq!(again.token, 2, "every acquisition is a new token");
    assert!(
        !check("renew", store.renew_lease(&a, LEASE).await),
        "the old token cannot renew"
    );
    let state = check("get", store.get_lease(&name).await);
    assert_eq!(
        state.map(|s| (s.lease, s.expired)),
        Some((again.clone(), false))
    );
    assert!(
        check("expired", store.expired_leases("poller:").await)
            .iter()
            .all(|l| l.name != name)
    );
    // Shorten it to nothing: it runs out, another holder takes it over with a newer token.
    assert!(check(
        "renew",
        store.renew_lease(&again, Duration::ZERO).await
    ));
    let expired = check("expired", store.expired_leases("poller:").await);
    let seen = expired
        .into_iter()
        .find(|l| l.name == name)
        .unwrap_or_else(|| panic!("an expired lease is listed"));
    assert!(
        check("expired", store.expired_leases("run:").await)
            .iter()
            .all(|l| l.name != name),
        "only names with the prefix"
    );
    let taken = check("take over", store.take_over_lease(&seen, "b", LEASE).await);
    let taken = taken.unwrap_or_else(|| panic!("an expired lease can be taken over"));
    assert_eq!((taken.holder.as_str(), taken.token), ("b", 3));
    let twice = check("take over", store.take_over_lease(&seen, "c", LEASE).await);
    assert_eq!(twice, None, "only one taker wins");
    assert!(!check("release", store.release_lease(&again).await));
    assert!(check("release", store.release_lease(&taken).await));
    assert_eq!(check("get", store.get_lease(&name).await), None);
}

/// A session with one run, started by `holder` under a lease of `ttl`.
async fn started_run(
    store: &dyn Store,
    title: &str,
    holder: &str,
    ttl: Duration,
) -> (SessionRecord, crate::RunRecord, Lease) {
    let s = new_session(store, title).await;
    let run = check(
        "enqueue",
        store
            .enqueue_run(&NewRun {
                id: Uuid::now_v7(),
                session_id: s.id,
                input: json!({}),
                created_at: ts(1),
                idempotency: None,
            })
            .await,
    );
    let (run, lease) = check("start", store.start_run(run.id, &ts(2), holder, ttl).await);
    (s, run, lease)
}

pub async fn run_lease_fences_writes(store: &dyn Store) {
    // The lease runs out at once (ttl 0), as if its holder were paused.
    let (s, run, old) = started_run(store, "fenced", "paused", Duration::ZERO).await;
    // The instance that started it is where the session's workspace is.
    assert_eq!(
        check("workspace instance", store.workspace_instance(s.id).await).as_deref(),
        Some("paused")
    );
    let ev = |seq: u64| NewEvent {
        run_id: Some(run.id),
        ..event(s.id, seq, None)
    };
    check(
        "fenced append",
        store
            .append_events(&[ev(1)], std::slice::from_ref(&old))
            .await,
    );
    // The lease ran out at once (ttl 0): another instance takes the run over.
    let expired = check("expired", store.expired_leases("run:").await);
    assert!(expired.contains(&old), "{expired:?}");
    let new = check(
        "take over",
        store.take_over_lease(&old, "survivor", LEASE).await,
    );
    let new = new.unwrap_or_else(|| panic!("the expired run lease is taken over"));
    let stale = store
        .append_events(&[ev(2)], std::slice::from_ref(&old))
        .await;
    assert!(
        matches!(stale, Err(StoreError::Fenced(_))),
        "a stale token's events are refused: {stale:?}"
    );
    let msg = MessageRecord {
        id: Uuid::now_v7(),
        session_id: s.id,
        run_id: Some(run.id),
        role: "assistant".into(),
        content: "late".into(),
        tool_calls: None,
        tool_call_id: None,
        is_error: false,
        created_at: ts(3),
    };
    let stale = store.append_message(&msg, Some(&old)).await;
    assert!(matches!(stale, Err(StoreError::Fenced(_))), "{stale:?}");
    let stale = store
        .finish_run(run.id, &RunOutcome::Cancelled, &ts(3), Some(&old))
        .await;
    assert!(matches!(stale, Err(StoreError::Fenced(_))), "{stale:?}");
    let approval = ApprovalRecord {
        session_id: s.id,
        run_id: run.id,
        tool_calls: json!([]),
        created_at: ts(3),
        expires_at: ts(9),
    };
    let stale = store.put_approval(&approval, Some(&old)).await;
    assert!(matches!(stale, Err(StoreError::Fenced(_))), "{stale:?}");
    assert_eq!(check("approval", store.get_approval(s.id).await), None);
    let stale = store
        .set_backend_state(s.id, Some(&json!({"zombie": true})), Some(&old))
        .await;
    assert!(matches!(stale, Err(StoreError::Fenced(_))), "{stale:?}");
    assert_eq!(check("state", store.get_backend_state(s.id).await), None);
    check(
        "current approval",
        store.put_approval(&approval, Some(&new)).await,
    );
    check(
        "current state",
        store
            .set_backend_state(s.id, Some(&json!({"ok": true})), Some(&new))
            .await,
    );
    // A running run is not a queued one: cancelling "if still queued" leaves it alone.
    assert!(!check(
        "cancel queued",
        store.cancel_queued_run(run.id, &ts(3)).await
    ));
    assert_eq!(
        check("get", store.get_run(run.id).await).map(|r| r.state),
        Some(RunState::Running)
    );
    assert_eq!(
        check("read", store.read_events(s.id, 0, 10).await).len(),
        1,
        "nothing of the refused batch was written"
    );
    assert_eq!(
        check("messages", store.list_messages(s.id, 10, 0).await).1,
        0
    );
    check(
        "current append",
        store
            .append_events(&[ev(2)], std::slice::from_ref(&new))
            .await,
    );
    check(
        "current finish",
        store
            .finish_run(
                run.id,
                &RunOutcome::Failed {
                    error: "interrupted".into(),
                },
                &ts(4),
                Some(&new),
            )
            .await,
    );
    assert_eq!(
        check("get", store.get_lease(&Lease::run_name(run.id)).await),
        None,
        "a finished run's lease is gone"
    );
}

pub async fn a_run_s_end_and_its_event_commit_together(store: &dyn Store) {
    let (s, run, lease) = started_run(store, "ends", "here", LEASE).await;
    let end = RunFinish {
        run_id: run.id,
        outcome: RunOutcome::Completed {
            stop_reason: "end_turn".into(),
        },
        at: ts(3),
    };
    let terminal = |seq: u64| NewEvent {
        run_id: Some(run.id),
        ..event(s.id, seq, None)
    };
    check(
        "write",
        store
            .write_events(
                &[terminal(1)],
                std::slice::from_ref(&lease),
                std::slice::from_ref(&end),
            )
            .await,
    );
    let done = check("get", store.get_run(run.id).await);
    assert_eq!(done.map(|r| r.state), Some(RunState::Completed));
    assert_eq!(check("read", store.read_events(s.id, 0, 10).await).len(), 1);
    assert_eq!(
        check("lease", store.get_lease(&Lease::run_name(run.id)).await),
        None,
        "the lease went with the run"
    );
    // Closing it again fails the whole write: its event is not stored either.
    let again = store.write_events(&[terminal(2)], &[], &[end]).await;
    assert!(
        matches!(again, Err(StoreError::RunNotActive(id)) if id == run.id),
        "{again:?}"
    );
    assert_eq!(
        check("read", store.read_events(s.id, 0, 10).await).len(),
        1,
        "all or nothing"
    );
    assert_eq!(check("bounds", store.event_bounds(s.id).await).last_seq, 1);
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
