//! Usage, cost and budgets on the wire (docs/usage.md): what each model call used and cost,
//! reports grouped by day, session, person, chat, model, backend or schedule, and the
//! budgets that stop spending before it happens.
//!
//! Money is counted in **micro-dollars** (millionths of a US dollar) as integers, so that
//! totals add up exactly to the calls they sum; a limit in configuration may be written in
//! dollars (`limit_usd`) and is converted once.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

/// Micro-dollars in a dollar.
pub const MICROS_PER_DOLLAR: u64 = 1_000_000;

/// Dollars as micro-dollars (rounded to the nearest; negative and non-finite amounts are 0).
pub fn usd_to_micros(usd: f64) -> u64 {
    if usd.is_finite() && usd > 0.0 {
        (usd * MICROS_PER_DOLLAR as f64).round() as u64
    } else {
        0
    }
}

/// Micro-dollars written as dollars for people: `$0.012345`.
pub fn format_micros(micros: u64) -> String {
    format!(
        "${}.{:06}",
        micros / MICROS_PER_DOLLAR,
        micros % MICROS_PER_DOLLAR
    )
}

/// What a run is for besides its session, as the surface that sent its message says: the
/// chat it came from, the schedule that fired it, the relay bundle it belongs to. Usage is
/// attributed to these, and budgets of those scopes apply to the run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RunOrigin {
    /// The chat channel (`telegram`, `slack`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// The conversation within the channel (its routing key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<String>,
    /// The schedule whose firing sent the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    /// The relay bundle the session is a member of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle: Option<String>,
}

impl RunOrigin {
    /// `channel:conversation`, the chat a report groups by and a `chat` budget matches.
    pub fn chat(&self) -> Option<String> {
        match (&self.channel, &self.conversation) {
            (Some(c), Some(k)) => Some(format!("{c}:{k}")),
            (Some(c), None) => Some(c.clone()),
            _ => None,
        }
    }

    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}

/// A model's price in US dollars per million tokens (`[prices."provider/model"]`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    /// Input tokens not read from or written to the prompt cache.
    pub input: f64,
    pub output: f64,
    /// Input tokens read from the prompt cache (default: as `input`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read: Option<f64>,
    /// Input tokens written to the prompt cache (default: as `input`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<f64>,
}

/// Whose spending a budget limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BudgetScope {
    /// Everything the server spends.
    Global,
    /// A person (the user a run was started for).
    User,
    /// A chat (`channel:conversation`).
    Chat,
    Session,
    /// A backend (`builtin` or an ACP agent's name).
    Backend,
    Schedule,
    /// A relay bundle.
    Bundle,
}

impl BudgetScope {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Global => "global",
            Self::User => "user",
            Self::Chat => "chat",
            Self::Session => "session",
            Self::Backend => "backend",
            Self::Schedule => "schedule",
            Self::Bundle => "bundle",
        }
    }
}

/// The period a budget's limit is counted over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BudgetWindow {
    /// Each run on its own.
    Run,
    /// A calendar day in the budget's time zone.
    Day,
    /// A calendar month in the budget's time zone.
    Month,
}

impl BudgetWindow {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Run => "run",
            Self::Day => "day",
            Self::Month => "month",
        }
    }
}

/// What happens when a call would cross the limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AtLimit {
    /// The run ends with `budget_exhausted`.
    #[default]
    Stop,
    /// The run asks for one more window's worth, once per window: an approval (the call
    /// [`BUDGET_EXTENSION_TOOL`]) that an admin or operator decides in person. Refused or
    /// unanswered, the run ends as with `stop`.
    Ask,
}

/// The name of the approval a run at a budget's limit asks for (`at_limit = "ask"`); its
/// call ids start with [`BUDGET_CALL_PREFIX`].
pub const BUDGET_EXTENSION_TOOL: &str = "switchboard_budget_extension";

/// How the ids of budget extensions start.
pub const BUDGET_CALL_PREFIX: &str = "budget-";

/// A budget: a limit in dollars or tokens on what a scope spends in a window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BudgetSpec {
    /// Its name, unique: 1–64 of `a-z 0-9 . _ -`.
    #[schema(pattern = r"^[a-z0-9][a-z0-9._-]{0,63}$")]
    pub name: String,
    pub scope: BudgetScope,
    /// Only this one of the scope (a user's name, `channel:conversation`, a session id, a
    /// backend, a schedule, a bundle); absent: each one of the scope has the limit on its
    /// own. Ignored for `global`.
    #[serde(
        default,
        rename = "match",
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::nullable::or_default"
    )]
    #[schema(nullable)]
    pub match_: Option<String>,
    pub window: BudgetWindow,
    /// The IANA time zone the `day` and `month` windows follow (default `UTC`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::nullable::or_default"
    )]
    #[schema(nullable)]
    pub time_zone: Option<String>,
    /// The limit in US dollars (one of this or `limit_tokens`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::nullable::or_default"
    )]
    #[schema(nullable, minimum = 0)]
    pub limit_usd: Option<f64>,
    /// The limit in tokens (input, output and cache tokens together).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::nullable::or_default"
    )]
    #[schema(nullable)]
    pub limit_tokens: Option<u64>,
    #[serde(default, deserialize_with = "crate::nullable::or_default")]
    #[schema(nullable)]
    pub at_limit: AtLimit,
}

impl BudgetSpec {
    /// The limit in micro-dollars, when it is one in dollars.
    pub fn limit_micros(&self) -> Option<u64> {
        self.limit_usd.map(usd_to_micros)
    }

    /// What is wrong with it, in words; `None` when it is well-formed. (The time zone is
    /// checked where time zones are known: the engine.)
    pub fn problem(&self) -> Option<String> {
        let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c);
        if self.name.is_empty()
            || self.name.len() > 64
            || !self.name.chars().all(ok_char)
            || !self.name.starts_with(|c: char| c.is_ascii_alphanumeric())
        {
            return Some(format!(
                "budget name {:?}: 1 to 64 of a-z 0-9 . _ -, starting with a letter or digit",
                self.name
            ));
        }
        match (self.limit_usd, self.limit_tokens) {
            (Some(_), Some(_)) | (None, None) => {
                return Some(format!(
                    "budget {}: give exactly one of limit_usd and limit_tokens",
                    self.name
                ));
            }
            (Some(usd), None) if !usd.is_finite() || usd < 0.0 => {
                return Some(format!(
                    "budget {}: limit_usd must be a number of dollars, 0 or more",
                    self.name
                ));
            }
            _ => {}
        }
        if self.match_.as_deref().is_some_and(|m| m.trim().is_empty()) {
            return Some(format!("budget {}: match must not be blank", self.name));
        }
        None
    }
}

/// A budget that stopped a run (`RunError.budget` with code `budget_exhausted`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BudgetHit {
    /// The budget's name.
    pub budget: String,
    pub scope: BudgetScope,
    /// Which one of the scope (empty for `global`).
    pub subject: String,
    pub window: BudgetWindow,
    /// When its window starts afresh (absent for `run`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resets_at: Option<DateTime<Utc>>,
}

impl std::fmt::Display for BudgetHit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "budget {}", self.budget)?;
        if !self.subject.is_empty() {
            write!(f, " ({} {})", self.scope.as_str(), self.subject)?;
        }
        match self.resets_at {
            Some(t) => write!(f, " is spent until {}", t.format("%Y-%m-%d %H:%M UTC")),
            None => write!(f, " is spent for this run"),
        }
    }
}

/// How `GET /v1/usage` groups the calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum UsageGroup {
    /// The UTC day of the call.
    Day,
    Session,
    User,
    /// `channel:conversation`.
    Chat,
    /// `provider/model`.
    Model,
    Backend,
    Schedule,
}

impl UsageGroup {
    pub const ALL: [UsageGroup; 7] = [
        Self::Day,
        Self::Session,
        Self::User,
        Self::Chat,
        Self::Model,
        Self::Backend,
        Self::Schedule,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Day => "day",
            Self::Session => "session",
            Self::User => "user",
            Self::Chat => "chat",
            Self::Model => "model",
            Self::Backend => "backend",
            Self::Schedule => "schedule",
        }
    }
}

/// Query of `GET /v1/usage` and `GET /v1/usage/calls`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct UsageQuery {
    /// Calls from this time on (RFC 3339 or a date, `2026-12-01`); default 30 days ago.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Calls before this time (RFC 3339 or a date, which means its start); default now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// How to group the totals; none: the total only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_by: Option<UsageGroup>,
    /// Only this session's calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<Uuid>,
    /// Only this chat's calls (`channel:conversation`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat: Option<String>,
    /// Only this person's calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// `/v1/usage/calls`: at most this many calls, newest first (default 100, at most 1,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
}

/// Sums of calls. `cost_microdollars` sums the calls whose cost is known; `unpriced_calls`
/// and `unreported_calls` say how many are not in it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UsageTotals {
    pub calls: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub cost_microdollars: u64,
    /// Calls of a model without a price: counted in tokens only.
    pub unpriced_calls: u64,
    /// Calls whose backend reported no usage (or that a crash cut off): neither tokens nor
    /// cost are known.
    pub unreported_calls: u64,
}

impl UsageTotals {
    pub fn add(&mut self, o: &UsageTotals) {
        self.calls += o.calls;
        self.input_tokens += o.input_tokens;
        self.output_tokens += o.output_tokens;
        self.cache_read_tokens += o.cache_read_tokens;
        self.cache_write_tokens += o.cache_write_tokens;
        self.cost_microdollars += o.cost_microdollars;
        self.unpriced_calls += o.unpriced_calls;
        self.unreported_calls += o.unreported_calls;
    }

    /// Every token counted: input (cache included) and output.
    pub fn tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }
}

/// One group of `GET /v1/usage`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UsageGroupTotals {
    /// The group's key (a day, a session id, a user, …); absent for calls without one (a
    /// run no person started, a session outside any chat).
    pub key: Option<String>,
    /// For `day`: the models of the day, each with its totals (what the console stacks).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub by_model: Vec<UsageModelTotals>,
    #[serde(flatten)]
    pub totals: UsageTotals,
}

/// A model's part of a day (`provider/model`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UsageModelTotals {
    pub key: Option<String>,
    #[serde(flatten)]
    pub totals: UsageTotals,
}

/// `GET /v1/usage`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UsageReportResponse {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_by: Option<UsageGroup>,
    /// Every call of the period: the groups add up to it exactly.
    pub total: UsageTotals,
    /// Largest cost first (`day`: in date order).
    pub groups: Vec<UsageGroupTotals>,
    /// Models used in the period that have no price (`provider/model`).
    pub unpriced_models: Vec<String>,
}

/// One metered model call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UsageCall {
    pub id: Uuid,
    pub at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle: Option<String>,
    pub backend: String,
    pub provider: String,
    pub model: String,
    /// `settled` (its usage recorded), `reserved` (under way) or `lost` (cut off by a crash:
    /// its reservation counts against the budgets).
    pub state: String,
    /// Whether the backend reported its usage.
    pub reported: bool,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    /// Absent when the model has no price or the usage is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_microdollars: Option<u64>,
    /// What it held against the budgets while it ran: its estimate (input, and the most
    /// output it could have).
    pub reserved_tokens: u64,
    pub reserved_microdollars: u64,
}

/// `GET /v1/usage/calls`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UsageCallsResponse {
    pub calls: Vec<UsageCall>,
}

/// Where a budget comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BudgetSource {
    /// `[[budgets]]` in `switchboard.toml`: changed there.
    Config,
    /// Made over `/v1/budgets`.
    Api,
}

/// A window of a budget that has seen spending.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BudgetWindowState {
    /// Which one of the scope (empty for `global`).
    pub subject: String,
    /// The window's key: its first day (`2026-12-05`), month (`2026-12`) or `run:ID`.
    pub window: String,
    pub spent_microdollars: u64,
    pub spent_tokens: u64,
    /// Held by calls under way.
    pub reserved_microdollars: u64,
    pub reserved_tokens: u64,
    /// Allowed beyond the limit by an approver (`at_limit = "ask"`).
    pub extra_microdollars: u64,
    pub extra_tokens: u64,
}

/// A budget and its current windows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BudgetStatus {
    pub budget: BudgetSpec,
    pub source: BudgetSource,
    /// The limit in micro-dollars, for a limit in dollars.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_microdollars: Option<u64>,
    /// When the current window starts afresh (absent for `run`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resets_at: Option<DateTime<Utc>>,
    /// The current window of each subject that has spent in it, most spent first.
    pub windows: Vec<BudgetWindowState>,
}

/// `GET /v1/budgets`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BudgetsResponse {
    pub budgets: Vec<BudgetStatus>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dollars_become_whole_micros() {
        assert_eq!(usd_to_micros(1.0), 1_000_000);
        assert_eq!(usd_to_micros(0.000_001), 1);
        assert_eq!(usd_to_micros(0.1 + 0.2), 300_000);
        assert_eq!(usd_to_micros(-3.0), 0);
        assert_eq!(usd_to_micros(f64::NAN), 0);
        assert_eq!(format_micros(1_234_567), "$1.234567");
        assert_eq!(format_micros(5), "$0.000005");
    }

    #[test]
    fn a_budget_names_one_limit() {
        let b = |usd: Option<f64>, tokens: Option<u64>| BudgetSpec {
            name: "daily".into(),
            scope: BudgetScope::Global,
            match_: None,
            window: BudgetWindow::Day,
            time_zone: None,
            limit_usd: usd,
            limit_tokens: tokens,
            at_limit: AtLimit::Stop,
        };
        assert!(b(Some(1.0), None).problem().is_none());
        assert!(b(None, Some(10)).problem().is_none());
        assert!(b(None, None).problem().is_some());
        assert!(b(Some(1.0), Some(1)).problem().is_some());
        assert!(b(Some(-1.0), None).problem().is_some());
        let mut bad = b(Some(1.0), None);
        bad.name = "Daily Budget".into();
        assert!(bad.problem().is_some());
    }
}
