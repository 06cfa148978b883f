//! Wire types of scheduled tasks (`/v1/schedules/*`).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::{AutoApprove, BackendSpec, PermissionMode};

/// What to do with firings a downtime missed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Missed {
    /// Record each missed firing as skipped; run none (the default).
    #[default]
    Skip,
    /// Run one (the latest) and record the others as skipped.
    RunOnce,
}

/// What to do with a firing while the previous one still runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// Record it as skipped (the default).
    #[default]
    Skip,
    /// Run it when the previous one ends.
    Queue,
}

/// How a scheduled run's tool approvals are answered, with no one watching.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleApprovals {
    /// Every call that asks is rejected (the default: fail closed).
    #[default]
    Deny,
    /// The tools in `auto_approve` run; every other call that asks is rejected.
    AutoApprove,
    /// Asked in the first chat of `deliver`, with Allow / Deny buttons; a call nobody
    /// answers within `ask_timeout` is rejected.
    Ask,
}

/// What a schedule does and when: the body of `POST /v1/schedules`, and what `GET` returns
/// of it. Exactly one of `cron`, `every`, `at` and `in` is given.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSpec {
    /// A name to tell it by; defaults to the prompt's start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = r"\S")]
    pub name: Option<String>,
    /// A cron expression of five fields (`0 9 * * 1-5`), in `tz`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// The IANA time zone of `cron` (`Europe/Berlin`); UTC when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tz: Option<String>,
    /// A fixed interval (`30m`, `1h 30m`), the first firing one interval after creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<String>,
    /// One time, RFC 3339 (`2026-12-24T09:00:00Z`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// One time, this long after creation (`2h`).
    #[serde(default, rename = "in", skip_serializing_if = "Option::is_none")]
    pub in_: Option<String>,
    /// The message the agent gets at each firing. Not empty or blank.
    #[schema(pattern = r"\S")]
    pub prompt: String,
    /// Send each firing to this session (as a follow-up when it is busy); absent: a new
    /// session per firing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<Uuid>,
    /// For new sessions: the backend, workspace, model and permission mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<BackendSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^/")]
    pub cwd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<PermissionMode>,
    /// Where the result goes: `CHANNEL:CHAT` or `CHANNEL:CHAT/THREAD` of the gateway's
    /// channels (`telegram:42`, `slack:C123/1712.5`, `discord:987`); none: stored only.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "crate::nullable::or_default"
    )]
    #[schema(max_items = 16, nullable)]
    pub deliver: Vec<String>,
    #[serde(default, deserialize_with = "crate::nullable::or_default")]
    #[schema(nullable)]
    pub approvals: ScheduleApprovals,
    /// With `approvals = auto_approve`: the tools that run without asking (`"all"` or a list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_approve: Option<AutoApprove>,
    /// With `approvals = ask`: how long a question waits before its calls are rejected
    /// (`10m` by default, at least `10s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ask_timeout: Option<String>,
    #[serde(default, deserialize_with = "crate::nullable::or_default")]
    #[schema(nullable)]
    pub missed: Missed,
    #[serde(default, deserialize_with = "crate::nullable::or_default")]
    #[schema(nullable)]
    pub overlap: Overlap,
    /// Created paused: it fires only once resumed (or run by hand).
    #[serde(default, deserialize_with = "crate::nullable::or_default")]
    #[schema(nullable)]
    pub paused: bool,
}

/// `PATCH /v1/schedules/{id}`: the fields to change; absent ones are kept. Changing the
/// time (`cron`, `tz`, `every`, `at`, `in`) replaces the whole trigger and recomputes the
/// next firing.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateScheduleRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = r"\S")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tz: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    #[serde(default, rename = "in", skip_serializing_if = "Option::is_none")]
    pub in_: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = r"\S")]
    pub prompt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliver: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals: Option<ScheduleApprovals>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_approve: Option<AutoApprove>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ask_timeout: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missed: Option<Missed>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap: Option<Overlap>,
    /// Pause (`true`) or resume (`false`). Resuming computes the next firing from now: what
    /// fell due while paused is not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
}

impl UpdateScheduleRequest {
    /// Whether the request changes the trigger.
    pub fn changes_trigger(&self) -> bool {
        self.cron.is_some()
            || self.tz.is_some()
            || self.every.is_some()
            || self.at.is_some()
            || self.in_.is_some()
    }
}

/// A stored schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Schedule {
    pub id: Uuid,
    /// Its name (the spec's, or the prompt's start).
    pub name: String,
    /// The trigger in words (`cron 0 9 * * 1-5 (Europe/Berlin)`, `every 30m`, `at …`).
    pub trigger: String,
    pub spec: ScheduleSpec,
    pub paused: bool,
    /// When it fires next; absent when it will not (paused, or a one-shot that fired).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_due: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// `GET /v1/schedules`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ListSchedulesResponse {
    pub schedules: Vec<Schedule>,
}

/// Where a firing stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FiringStatus {
    /// Did not run (see `skip_reason`).
    Skipped,
    /// Waits for the schedule's previous firing to end (overlap `queue`).
    Queued,
    /// Its run is being started.
    Starting,
    Running,
    /// The run completed.
    Succeeded,
    /// The run ended with an error, or could not be started.
    Failed,
    /// The run was cancelled.
    Cancelled,
}

impl FiringStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Skipped => "skipped",
            Self::Queued => "queued",
            Self::Starting => "starting",
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "skipped" => Self::Skipped,
            "queued" => Self::Queued,
            "starting" => Self::Starting,
            "running" => Self::Running,
            "succeeded" => Self::Succeeded,
            "failed" => Self::Failed,
            "cancelled" => Self::Cancelled,
            _ => return None,
        })
    }

    /// Whether the firing's run has not ended yet (it counts for overlap).
    pub fn is_active(self) -> bool {
        matches!(self, Self::Queued | Self::Starting | Self::Running)
    }
}

/// Why a firing did not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// Its time passed while the server was down.
    Missed,
    /// The previous firing was still running (overlap `skip`).
    Overlap,
}

/// How the result reached one delivery target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryStatus {
    /// Not sent yet, or to be tried again at `next_attempt_at`.
    Pending,
    Delivered,
    /// Every attempt failed; `POST …/deliver` tries again.
    Failed,
}

/// The result's delivery to one target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Delivery {
    pub target: String,
    pub status: DeliveryStatus,
    pub attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The platform's id of the message sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered_at: Option<DateTime<Utc>>,
}

/// One due time of a schedule and what came of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Firing {
    pub id: Uuid,
    pub schedule_id: Uuid,
    /// When it was due (for a run by hand: when it was asked for).
    pub due_at: DateTime<Utc>,
    /// Run by hand (`POST /v1/schedules/{id}/run`).
    pub manual: bool,
    pub status: FiringStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_reason: Option<SkipReason>,
    /// For a skip that stands for several missed due times: how many more there were.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub more_skipped: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<Uuid>,
    /// The run's stop reason, or its error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// The agent's reply (its last text), as delivered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<String>,
    /// Tool calls rejected by the schedule's `approvals`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rejected_tools: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deliveries: Vec<Delivery>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// `GET /v1/schedules/{id}/firings`: newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ListFiringsResponse {
    pub firings: Vec<Firing>,
}
