//! What the store keeps of usage and budgets (docs/usage.md): one row per model call, and
//! per budget window what has been spent and what calls under way hold.
//!
//! The contract that makes a budget hold is here, not in the engine: a call's reservation
//! is taken in one transaction against every window that applies, each only while the
//! window's spent + reserved + this estimate stays within its limit (plus what an approver
//! added), so concurrent runs and several instances cannot together pass a limit; settling
//! swaps the reservation for what the call really used; a call cut off (a crash, a run that
//! ended without settling) is *lost* and its reservation counts as spent — not knowing
//! what a call cost never lets more through.

use async_trait::async_trait;
use uuid::Uuid;

use crate::Result;

/// One metered model call as stored.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CallRecord {
    pub id: Uuid,
    /// When it was reserved (the stores' time text).
    pub at: String,
    pub session_id: Option<Uuid>,
    pub run_id: Option<Uuid>,
    pub user_name: Option<String>,
    /// `channel:conversation`.
    pub chat: Option<String>,
    pub schedule: Option<String>,
    pub bundle: Option<String>,
    pub backend: String,
    pub provider: String,
    pub model: String,
    /// `reserved`, `settled` or `lost`.
    pub state: String,
    /// Whether the backend reported the call's usage.
    pub reported: bool,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    /// `None`: the model has no price, or the usage is not known.
    pub cost_microdollars: Option<u64>,
    /// What was held against the budgets while it ran.
    pub reserved_microdollars: u64,
    pub reserved_tokens: u64,
}

/// What a settled call used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CallUsage {
    /// `false`: the backend reported nothing; the reservation counts as spent.
    pub reported: bool,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub cost_microdollars: Option<u64>,
}

impl CallUsage {
    /// What the call counts for against a budget: its tokens and cost, or — not reported —
    /// the reservation it held.
    pub fn spent(&self, reserved_micros: u64, reserved_tokens: u64) -> (u64, u64) {
        if self.reported {
            (
                self.cost_microdollars.unwrap_or(0),
                self.input_tokens + self.output_tokens,
            )
        } else {
            (reserved_micros, reserved_tokens)
        }
    }
}

/// A budget window a call is counted in, with the budget's limit (one of the two).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowClaim {
    pub budget: String,
    /// Which one of the budget's scope (empty for `global`).
    pub subject: String,
    /// The window's key (`2026-12-05`, `2026-12`, `run:ID`).
    pub window: String,
    pub limit_microdollars: Option<u64>,
    pub limit_tokens: Option<u64>,
}

/// A budget window as stored.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WindowRecord {
    pub budget: String,
    pub subject: String,
    pub window: String,
    pub spent_microdollars: u64,
    pub spent_tokens: u64,
    pub reserved_microdollars: u64,
    pub reserved_tokens: u64,
    pub extra_microdollars: u64,
    pub extra_tokens: u64,
}

/// The answer to a reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reservation {
    /// Reserved in every window; they are as they stand after it, in the claims' order.
    Granted(Vec<WindowRecord>),
    /// The first window that had no room, as it stands; nothing was written.
    Refused(WindowRecord),
}

/// Which calls to read or sum: all given filters hold.
#[derive(Debug, Clone, Default)]
pub struct CallFilter {
    /// `at >= from` (the stores' time text).
    pub from: String,
    /// `at < to`.
    pub to: String,
    pub session_id: Option<Uuid>,
    pub user_name: Option<String>,
    pub chat: Option<String>,
}

/// What the calls are summed by: a column of the call (`None`: not grouped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKey {
    /// The UTC date of `at`.
    Day,
    Session,
    User,
    Chat,
    /// `provider/model`.
    Model,
    Backend,
    Schedule,
    Bundle,
}

/// Sums of calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CallTotals {
    pub calls: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    /// Of the calls with a known cost.
    pub cost_microdollars: u64,
    /// Reported calls without a cost (no price).
    pub unpriced_calls: u64,
    /// Calls without reported usage (reserved, lost, or not reported).
    pub unreported_calls: u64,
}

/// A budget made over the API, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetRecord {
    pub name: String,
    /// The budget's spec as JSON text (the engine reads it).
    pub spec: String,
    pub created_at: String,
    pub created_by: String,
}

/// Usage and budgets. Part of every [`Store`](crate::Store).
#[async_trait]
pub trait Metering: Send + Sync {
    /// Stores `call` (state `reserved`, holding `reserved_*`) and reserves that much in
    /// each of `claims`' windows — all or nothing, in one transaction, each only while its
    /// spent + reserved + the estimate stays within its limit plus its extra.
    async fn reserve_call(&self, call: &CallRecord, claims: &[WindowClaim]) -> Result<Reservation>;
    /// Records what a reserved call used: its windows give its reservation back and count
    /// what it spent ([`CallUsage::spent`]). Returns the windows as they stand after;
    /// `None` if the call is not reserved (settled already, lost, unknown).
    async fn settle_call(&self, id: Uuid, usage: &CallUsage) -> Result<Option<Vec<WindowRecord>>>;
    /// Every call of `run_id` still reserved becomes `lost`: its reservation counts as
    /// spent. How many there were.
    async fn lose_calls(&self, run_id: Uuid) -> Result<u64>;
    /// Stores a call that was not reserved (an agent's own report after the fact) as
    /// settled, and counts it in `claims`' windows whatever their limits.
    async fn record_call(&self, call: &CallRecord, claims: &[WindowClaim]) -> Result<()>;
    /// Calls newest first (then by id), at most `limit`.
    async fn list_calls(&self, filter: &CallFilter, limit: u32) -> Result<Vec<CallRecord>>;
    /// Sums of the calls, grouped by `keys` (none: one row); each row with its keys' values
    /// in order (`None` where the call has none).
    async fn call_totals(
        &self,
        filter: &CallFilter,
        keys: &[CallKey],
    ) -> Result<Vec<(Vec<Option<String>>, CallTotals)>>;
    /// The `(provider, model)` pairs of calls reported without a cost, by name.
    async fn unpriced_models(&self, filter: &CallFilter) -> Result<Vec<(String, String)>>;
    /// The windows of `budget` with key `window`, most spent first.
    async fn budget_windows(&self, budget: &str, window: &str) -> Result<Vec<WindowRecord>>;
    /// Creates a window with what was spent in it before its budget existed; a window that
    /// exists is left as it is. Whether it was created.
    async fn seed_window(&self, window: &WindowRecord) -> Result<bool>;
    /// Adds to a window's extra allowance (creating the window).
    async fn extend_window(
        &self,
        budget: &str,
        subject: &str,
        window: &str,
        microdollars: u64,
        tokens: u64,
    ) -> Result<()>;

    /// Inserts or replaces a budget made over the API. With `fresh_windows` its windows are
    /// removed in the same transaction: its scope or window changed, so what they counted
    /// is no longer what it counts (the caller seeds the new ones).
    async fn put_budget(&self, budget: &BudgetRecord, fresh_windows: bool) -> Result<()>;
    /// Removes one, with its windows; false if there was none.
    async fn delete_budget(&self, name: &str) -> Result<bool>;
    /// Every budget made over the API, by name.
    async fn list_budgets(&self) -> Result<Vec<BudgetRecord>>;
}
