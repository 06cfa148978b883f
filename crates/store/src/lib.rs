//! Durable state of Switchboard.
//!
//! This crate owns the [`Store`] trait — sessions, runs (with their state; a queued run is a
//! stored follow-up), the append-only event log, the transcript and pending tool approvals —
//! and [`SqlStore`], which keeps them in a SQLite file (the embedded default) or a PostgreSQL
//! database, each operation written once for both. Migrations are embedded in the binary.
//! `conformance` (built for tests, or with the `conformance` feature) is one test-suite that
//! any `Store` must pass, so every back-end is held to the same contract.
//!
//! It does not know about HTTP, agents or fan-out: the engine decides *what* to store and when.

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
mod error;
pub mod metering;
mod migrate;
pub mod people;
mod records;
pub mod search;
mod sql;

use std::time::Duration;

use async_trait::async_trait;
use uuid::Uuid;

pub use error::StoreError;
pub use metering::{
    BudgetRecord, CallFilter, CallKey, CallRecord, CallTotals, CallUsage, Metering, Reservation,
    WindowClaim, WindowRecord,
};
pub use people::{
    AuditFilter, AuditRecord, ConsoleSessionRecord, LinkRecord, NewAudit, People, TokenRecord,
    UserRecord,
};
pub use records::*;
pub use sql::{PostgresOptions, SqlStore, SqliteOptions};

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Everything Switchboard keeps (a team's users, tokens and audit log through [`People`];
/// usage and budgets through [`Metering`]).
/// Implementations must be safe to share between tasks.
#[async_trait]
pub trait Store: People + Metering + Send + Sync + 'static {
    // --- sessions ---------------------------------------------------------------------------

    /// Makes `fork` (its record as given, `last_seq` set to `at`) a copy of session
    /// `source`'s history up to log position `at`: its events, the transcript messages
    /// recorded by then, and its files from before then (under new ids, the copied events
    /// and messages rewritten to name them), all indexed for search, in one transaction.
    /// Refused when `at` is past the log or falls inside a run ([`ForkOutcome`]); then nothing
    /// is written.
    async fn fork_session(
        &self,
        source: Uuid,
        at: u64,
        fork: &SessionRecord,
    ) -> Result<ForkOutcome>;
    /// Inserts a session. Fails with [`StoreError::Conflict`] if the id exists.
    async fn create_session(&self, session: &SessionRecord) -> Result<()>;
    async fn get_session(&self, id: Uuid) -> Result<Option<SessionRecord>>;
    /// Newest first, archived sessions or the others; returns the page and how many of that
    /// kind there are. With `visible_to`, only that user's own sessions and those shared
    /// with them or with everyone ([`People::set_session_shares`]).
    async fn list_sessions(
        &self,
        limit: u32,
        offset: u32,
        archived: bool,
        visible_to: Option<&str>,
    ) -> Result<(Vec<SessionRecord>, u64)>;
    /// Changes the title and/or archive state. `false` if the session does not exist.
    async fn update_session(&self, id: Uuid, update: &SessionUpdate) -> Result<bool>;
    /// Deletes the session with its runs, events and messages. `false` if it did not exist.
    async fn delete_session(&self, id: Uuid) -> Result<bool>;
    /// Sets `updated_at`.
    async fn touch_session(&self, id: Uuid, at: &str) -> Result<()>;

    // --- event log --------------------------------------------------------------------------

    /// Appends events atomically (all or none), in order, and raises each session's
    /// `last_seq`. A `(session_id, seq)` that exists already is a [`StoreError::Conflict`].
    /// Each of `fences` must be a current lease (same holder and token), checked in the
    /// same transaction; otherwise nothing is written and the answer is
    /// [`StoreError::Fenced`].
    async fn append_events(&self, events: &[NewEvent], fences: &[Lease]) -> Result<()> {
        self.write_events(events, fences, &[]).await
    }
    /// [`Store::append_events`], and in the same transaction closes each of `finishes` (as
    /// [`Store::finish_run`] does, lease included). A run that is not active fails the
    /// whole write with [`StoreError::RunNotActive`].
    async fn write_events(
        &self,
        events: &[NewEvent],
        fences: &[Lease],
        finishes: &[RunFinish],
    ) -> Result<()>;
    /// Events with `seq > after`, ascending, at most `limit`.
    async fn read_events(
        &self,
        session_id: Uuid,
        after: u64,
        limit: u32,
    ) -> Result<Vec<StoredEvent>>;
    /// Oldest and newest stored seq, and the highest seq ever assigned.
    async fn event_bounds(&self, session_id: Uuid) -> Result<EventBounds>;
    /// Deletes events created before `cutoff` (RFC 3339); returns how many went.
    async fn prune_events_before(&self, cutoff: &str) -> Result<u64>;

    // --- runs and the follow-up queue -------------------------------------------------------

    /// Inserts a run in state `queued` at the back of its session's queue. With an
    /// idempotency key that a run of the session already holds (created since
    /// `idempotency.since`), nothing is inserted and that run is returned: callers tell
    /// the two apart by its id.
    async fn enqueue_run(&self, run: &NewRun) -> Result<RunRecord>;
    /// Inserts a run in state `queued` at the front of its session's queue (idempotency as
    /// [`Store::enqueue_run`]).
    async fn enqueue_run_front(&self, run: &NewRun) -> Result<RunRecord>;
    /// The run of `session_id` holding idempotency key `key`, created since `since`.
    async fn run_by_idempotency_key(
        &self,
        session_id: Uuid,
        key: &str,
        since: &str,
    ) -> Result<Option<RunRecord>>;
    async fn get_run(&self, id: Uuid) -> Result<Option<RunRecord>>;
    /// Moves a queued run to `running` and, in the same transaction, gives `holder` the
    /// run's lease ([`Lease::run_name`]) for `ttl`. [`StoreError::Conflict`] if the session
    /// has a running run already or the run is not queued.
    async fn start_run(
        &self,
        id: Uuid,
        at: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<(RunRecord, Lease)>;
    /// The instance that started the session's most recent run (`start_run`'s holder), if
    /// any run has been started: where its workspace checkpoints live.
    async fn workspace_instance(&self, session_id: Uuid) -> Result<Option<String>>;
    /// Moves a run to a final state (`completed`, `failed`, `cancelled`) and drops its lease.
    /// With a `fence`, only while that lease is current ([`StoreError::Fenced`] otherwise).
    async fn finish_run(
        &self,
        id: Uuid,
        outcome: &RunOutcome,
        at: &str,
        fence: Option<&Lease>,
    ) -> Result<()>;
    /// Cancels a run only if it is still queued (not started meanwhile, here or by another
    /// instance); whether it was.
    async fn cancel_queued_run(&self, id: Uuid, at: &str) -> Result<bool>;
    /// The session's running run, if any.
    async fn active_run(&self, session_id: Uuid) -> Result<Option<RunRecord>>;
    /// The front of the session's follow-up queue.
    async fn next_queued_run(&self, session_id: Uuid) -> Result<Option<RunRecord>>;
    /// Every run in the given state (e.g. `running` ones after a crash).
    async fn runs_in_state(&self, state: RunState) -> Result<Vec<RunRecord>>;

    // --- search -----------------------------------------------------------------------------

    /// The messages (text, tool calls, tool results) and file names that hold every term of
    /// `q`, best first, with the matching passage marked ([`search::SearchHit`]). The index is
    /// kept in step with every write and delete by the store itself.
    async fn search(&self, q: &search::SearchQuery) -> Result<Vec<search::SearchHit>>;

    // --- transcript -------------------------------------------------------------------------

    /// Appends a message at the end of its session's transcript; with a `fence`, only while
    /// that lease is current ([`StoreError::Fenced`] otherwise).
    async fn append_message(&self, message: &MessageRecord, fence: Option<&Lease>) -> Result<()>;
    /// Oldest first; returns the page and the total count.
    async fn list_messages(
        &self,
        session_id: Uuid,
        limit: u32,
        offset: u32,
    ) -> Result<(Vec<MessageRecord>, u64)>;
    /// The session's most recent messages, oldest first: at most `max_messages`, and of
    /// those only as many of the newest as fit in `max_chars` (content plus tool calls'
    /// JSON, counted from the newest; the newest one is always included). What a run gives
    /// its agent as the conversation so far: bounded however long the session grows.
    /// `earlier` says whether older messages were left out.
    async fn recent_messages(
        &self,
        session_id: Uuid,
        max_messages: u32,
        max_chars: u64,
    ) -> Result<RecentMessages>;

    // --- approvals --------------------------------------------------------------------------

    /// Stores the pending approval of a session, replacing any previous one; with a
    /// `fence`, only while that lease is current.
    async fn put_approval(&self, approval: &ApprovalRecord, fence: Option<&Lease>) -> Result<()>;
    /// The pending approval of a session, if any.
    async fn get_approval(&self, session_id: Uuid) -> Result<Option<ApprovalRecord>>;
    /// Removes the session's pending approval if it belongs to `run_id`; whether one was.
    async fn delete_approval(&self, session_id: Uuid, run_id: Uuid) -> Result<bool>;
    /// Every pending approval (for recovery after a restart).
    async fn list_approvals(&self) -> Result<Vec<ApprovalRecord>>;

    // --- backend state ----------------------------------------------------------------------

    /// The JSON a session's backend stored to resume later, if any.
    async fn get_backend_state(&self, session_id: Uuid) -> Result<Option<serde_json::Value>>;
    /// Replaces the session's backend state (`None` clears it); with a `fence`, only while
    /// that lease is current.
    async fn set_backend_state(
        &self,
        session_id: Uuid,
        state: Option<&serde_json::Value>,
        fence: Option<&Lease>,
    ) -> Result<()>;

    // --- files ------------------------------------------------------------------------------

    /// Stores a file's row. [`StoreError::NotFound`] if the session does not exist.
    async fn put_file(&self, file: &FileRecord) -> Result<()>;
    /// A file of the session (`None` if it has none with that id).
    async fn get_file(&self, session_id: Uuid, id: Uuid) -> Result<Option<FileRecord>>;
    /// The session's files, oldest first.
    async fn list_files(&self, session_id: Uuid) -> Result<Vec<FileRecord>>;
    /// Whether any file row (of any session) names this content.
    async fn content_in_use(&self, sha256: &str) -> Result<bool>;

    // --- leases -----------------------------------------------------------------------------

    /// Takes the lease `name` for `holder` for `ttl` when nobody holds it, it has expired or
    /// `holder` holds it already; the token grows every time. `None` when someone else holds
    /// it. Expiry is judged by the database's clock.
    async fn acquire_lease(&self, name: &str, holder: &str, ttl: Duration)
    -> Result<Option<Lease>>;
    /// Takes over a lease that has expired, if it is still expired and still at the token
    /// seen (someone else may have taken it over or the holder renewed it meanwhile). The
    /// token grows, so the old holder's fenced writes are refused from now on.
    async fn take_over_lease(
        &self,
        expired: &Lease,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>>;
    /// Extends a lease by `ttl` from now, if it is still current; `false` if not (expired
    /// and taken over, or released).
    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<bool>;
    /// Gives a lease up if it is still current; whether it was.
    async fn release_lease(&self, lease: &Lease) -> Result<bool>;
    /// The lease `name`, if anyone holds (or held) it.
    async fn get_lease(&self, name: &str) -> Result<Option<LeaseState>>;
    /// Expired leases whose name starts with `prefix`.
    async fn expired_leases(&self, prefix: &str) -> Result<Vec<Lease>>;

    // --- the store itself -------------------------------------------------------------------

    /// `sqlite` or `postgres`.
    fn kind(&self) -> &'static str;
    /// A round trip to the database that writes (for health checks): fails when the
    /// database answers reads but takes no writes.
    async fn ping(&self) -> Result<()>;
    /// Closes the connections, waiting for those in use.
    async fn close(&self);
}

/// Opens the store a URL names: `sqlite://PATH` (or a plain path) or `postgres://…` /
/// `postgresql://…`.
pub async fn open_url(url: &str) -> Result<std::sync::Arc<dyn Store>> {
    if switchboard_db::is_postgres_url(url) {
        Ok(std::sync::Arc::new(
            SqlStore::open_postgres(PostgresOptions::new(url)).await?,
        ))
    } else {
        let path = url.strip_prefix("sqlite://").unwrap_or(url);
        if path.is_empty() || url.contains("://") && !url.starts_with("sqlite://") {
            return Err(StoreError::Open(format!(
                "store URL {url:?}: expected sqlite://PATH or postgres://…"
            )));
        }
        Ok(std::sync::Arc::new(
            SqlStore::open_sqlite(SqliteOptions::new(std::path::Path::new(path))).await?,
        ))
    }
}
