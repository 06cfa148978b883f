//! Runs, the follow-up queue, leases and the fences they put on writes.

use serde_json::json;
use uuid::Uuid;

use std::time::Duration;

use crate::{
    ApprovalRecord, Idempotency, Lease, MessageRecord, NewEvent, NewRun, RunFinish, RunOutcome,
    RunState, SessionRecord, Store, StoreError,
};

use super::*;

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
pub(super) async fn started_run(
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
