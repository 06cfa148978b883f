//! The conformance suite every [`Store`] implementation must pass.
//!
//! Each check creates its own sessions with fresh ids, so all checks can share one store.
//! An implementation's tests run them with [`conformance_suite!`](crate::conformance_suite)
//! — one `#[tokio::test]` per check, each on a fresh store; a failing check panics with
//! what broke. The list of checks is kept once, in that macro.

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
            files_round_trip_and_go_with_their_session,
            users_round_trip,
            tokens_round_trip_and_go_with_their_user,
            links_and_console_sessions_go_with_their_user,
            audit_appends_in_order_and_filters,
            sessions_belong_to_owners_and_are_shared,
            usage_is_reserved_settled_and_summed,
            budget_limits_hold_under_concurrency,
            budgets_round_trip,
            search_finds_ranked_marked_visible_hits_in_step_with_writes,
            fork_copies_the_history_up_to_a_point
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

use crate::{NewEvent, SessionRecord, Store, StoreError};

/// The lease length the checks use: long enough never to run out during a check.
const LEASE: Duration = Duration::from_secs(600);

mod events;
mod fork;
mod metering;
mod people;
mod records;
mod runs;
mod search;
mod sessions;

pub use events::*;
pub use fork::*;
pub use metering::*;
pub use people::*;
pub use records::*;
pub use runs::*;
pub use search::*;
pub use sessions::*;

pub(super) fn ts(n: u32) -> String {
    format!("2026-01-01T00:00:{:02}.000000Z", n % 60)
}

pub(super) fn check<T>(what: &str, r: Result<T, StoreError>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{what}: {e}"),
    }
}

pub(super) fn new_session_record(title: &str) -> SessionRecord {
    SessionRecord {
        id: Uuid::now_v7(),
        title: title.into(),
        cwd: "/tmp/ws".into(),
        config: json!({"backend": "builtin", "model": null}),
        created_at: ts(1),
        updated_at: ts(1),
        last_seq: 0,
        archived_at: None,
        owner: None,
    }
}

pub(super) async fn new_session(store: &dyn Store, title: &str) -> SessionRecord {
    let s = new_session_record(title);
    check("create_session", store.create_session(&s).await);
    s
}

pub(super) fn event(session_id: Uuid, seq: u64, run_id: Option<Uuid>) -> NewEvent {
    NewEvent {
        session_id,
        seq,
        run_id,
        kind: "text_delta".into(),
        payload: format!(r#"{{"TextDelta":{{"delta":"{seq}"}}}}"#),
        created_at: ts(seq as u32),
    }
}
