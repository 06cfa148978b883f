//! Row types the store reads and writes.

use serde_json::Value;
use uuid::Uuid;

/// A session row. `config` is the JSON of the protocol's `SessionConfig`.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRecord {
    pub id: Uuid,
    pub title: String,
    pub cwd: String,
    pub config: Value,
    pub created_at: String,
    pub updated_at: String,
    pub last_seq: u64,
    /// When the session was archived (hidden from the default list); `None` when not.
    pub archived_at: Option<String>,
    /// The user it belongs to; `None`: the server token's built-in admin (and every
    /// session made before teams).
    pub owner: Option<String>,
}

/// What [`crate::Store::fork_session`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForkOutcome {
    /// The fork was made with this much of the source's history.
    Forked {
        events: u64,
        messages: u64,
        files: u64,
    },
    /// No session is the source.
    NoSource,
    /// The position is past the source's log (its last).
    BeyondEnd { last_seq: u64 },
    /// The source's events up to the position were pruned (`oldest`: the oldest kept):
    /// where its runs began and ended is not known any more.
    Pruned { oldest: Option<u64> },
    /// The position falls inside run `run_id`, whose events so far are `first..=last`
    /// (`running`: it has not ended, so `last` will grow).
    InsideRun {
        run_id: Uuid,
        first: u64,
        last: u64,
        running: bool,
    },
}

/// Changes to a session's title or archive state.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SessionUpdate {
    pub title: Option<String>,
    /// `Some(Some(t))` archives at `t`, `Some(None)` unarchives, `None` leaves it.
    pub archived_at: Option<Option<String>>,
    /// The whole new configuration (JSON), or `None` to leave it.
    pub config: Option<serde_json::Value>,
    /// The new `updated_at`.
    pub updated_at: String,
}

/// An event to append. `payload` is the JSON of the event, `created_at` RFC 3339.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub session_id: Uuid,
    pub seq: u64,
    pub run_id: Option<Uuid>,
    pub kind: String,
    pub payload: String,
    pub created_at: String,
}

/// An event read back from the log.
pub type StoredEvent = NewEvent;

/// Bounds of a session's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EventBounds {
    /// Smallest stored seq (None when the log is empty).
    pub oldest: Option<u64>,
    /// Largest stored seq (None when the log is empty).
    pub newest: Option<u64>,
    /// Highest seq ever assigned in the session, even if pruned since.
    pub last_seq: u64,
}

/// State of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunState {
    Queued,
    Running,
    Completed,
    Failed,
    Cancelled,
}

impl RunState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "queued" => Self::Queued,
            "running" => Self::Running,
            "completed" => Self::Completed,
            "failed" => Self::Failed,
            "cancelled" => Self::Cancelled,
            _ => return None,
        })
    }
}

/// A run to insert.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRun {
    pub id: Uuid,
    pub session_id: Uuid,
    /// JSON of what started the run (message content, model, context, overrides).
    pub input: Value,
    pub created_at: String,
    /// The client's `Idempotency-Key`: when a run of the session already has it (and was
    /// created at or after its `since`), that run is answered and nothing is inserted.
    pub idempotency: Option<Idempotency>,
}

/// An idempotency key and how far back a run holding it counts as the same request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Idempotency {
    pub key: String,
    /// RFC 3339, the format of `created_at`: a run created before it no longer holds the
    /// key (it is cleared and given to the new run).
    pub since: String,
}

/// A run row.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRecord {
    pub id: Uuid,
    pub session_id: Uuid,
    pub state: RunState,
    pub input: Value,
    pub error: Option<String>,
    pub stop_reason: Option<String>,
    pub created_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    Completed { stop_reason: String },
    Failed { error: String },
    Cancelled,
}

impl RunOutcome {
    /// The `(error, stop_reason)` columns of a finished run.
    pub fn columns(&self) -> (Option<&str>, Option<&str>) {
        match self {
            Self::Completed { stop_reason } => (None, Some(stop_reason.as_str())),
            Self::Failed { error } => (Some(error.as_str()), None),
            Self::Cancelled => (None, Some("cancelled")),
        }
    }

    pub fn state(&self) -> RunState {
        match self {
            Self::Completed { .. } => RunState::Completed,
            Self::Failed { .. } => RunState::Failed,
            Self::Cancelled => RunState::Cancelled,
        }
    }
}

/// A transcript message. `tool_calls` is a JSON array when present.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageRecord {
    pub id: Uuid,
    pub session_id: Uuid,
    pub run_id: Option<Uuid>,
    pub role: String,
    pub content: String,
    pub tool_calls: Option<Value>,
    pub tool_call_id: Option<String>,
    /// For a tool result: the tool failed or the call was rejected.
    pub is_error: bool,
    pub created_at: String,
}

/// What [`crate::Store::recent_messages`] reads: the newest messages, and whether the
/// session holds older ones that were left out.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RecentMessages {
    /// Oldest first.
    pub messages: Vec<MessageRecord>,
    /// The session has messages older than the first of `messages` (or, when `messages`
    /// is empty, any at all).
    pub earlier: bool,
}

/// Tool calls of a run that wait for a human decision.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalRecord {
    pub session_id: Uuid,
    pub run_id: Uuid,
    /// JSON array of the waiting calls.
    pub tool_calls: Value,
    pub created_at: String,
    /// When the approval is rejected unanswered (RFC 3339).
    pub expires_at: String,
}

/// A lease: one holder at a time may act under `name` (execute run X, poll channel Y) until
/// it expires. Every new holder gets a larger `token` (the fencing token); writes made under
/// a lease carry it, and the store refuses them once someone else holds a newer one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Lease {
    pub name: String,
    pub holder: String,
    pub token: u64,
}

impl Lease {
    /// The name of a run's lease.
    pub fn run_name(run_id: Uuid) -> String {
        format!("run:{run_id}")
    }

    /// The run this lease is for, if it is a run's.
    pub fn run_id(&self) -> Option<Uuid> {
        self.name
            .strip_prefix("run:")
            .and_then(|s| Uuid::parse_str(s).ok())
    }
}

/// A lease as stored, with whether it has run out (by the database's clock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseState {
    pub lease: Lease,
    pub expired: bool,
}

/// A run to close in the same transaction as a batch of events — its terminal event — so
/// that nobody ever sees the one without the other (see [`crate::Store::write_events`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RunFinish {
    pub run_id: Uuid,
    pub outcome: RunOutcome,
    /// When it ended (RFC 3339).
    pub at: String,
}

/// A file uploaded to a session (its content is stored outside the database, by `sha256`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRecord {
    pub id: Uuid,
    pub session_id: Uuid,
    pub name: String,
    /// Sniffed from the content.
    pub mime: String,
    pub size: u64,
    /// Lowercase hex.
    pub sha256: String,
    pub created_at: String,
}
