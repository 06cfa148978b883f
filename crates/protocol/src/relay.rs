//! Relay bodies (`/v1/relay/*`): bundles, members, send, look, audit, delivery outcomes.
//!
//! Every relay response carries `schema_version` ([`RELAY_SCHEMA_VERSION`]). Errors are
//! [`RelayErrorBody`]: a stable `code`, a human `message` and a `details` object (for
//! `authorization_forbidden`: the capability, the requester and the targets).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Version of the relay request and response shapes.
pub const RELAY_SCHEMA_VERSION: u32 = 1;

fn schema_version() -> u32 {
    RELAY_SCHEMA_VERSION
}

fn schema_version_or_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    crate::nullable::or_else(d, schema_version)
}

/// How a member is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TransportKind {
    Tmux,
    Acp,
    Session,
}

impl TransportKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tmux => "tmux",
            Self::Acp => "acp",
            Self::Session => "session",
        }
    }
}

/// Whether a bundle's members are started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BundleState {
    Up,
    Down,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BundleHealth {
    Healthy,
    Degraded,
}

/// A recorded failure to start a member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct StartupFailure {
    pub member: String,
    pub code: String,
    pub reason: String,
    pub at: DateTime<Utc>,
}

/// Startup failures of a bundle: how many are recorded (bounded history) and the newest.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub struct StartupFailures {
    pub count: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest: Option<StartupFailure>,
}

/// One bundle in `GET /v1/relay/bundles`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BundleSummary {
    pub name: String,
    pub state: BundleState,
    pub health: BundleHealth,
    /// Why the bundle is degraded (`bundle_down`, `members_not_ready`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason_code: Option<String>,
    pub members: usize,
    pub ready: usize,
}

/// `GET /v1/relay/bundles`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BundlesResponse {
    #[serde(default = "schema_version")]
    pub schema_version: u32,
    pub bundles: Vec<BundleSummary>,
    /// Bundle files that do not validate: the file name and the error.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub invalid: Vec<InvalidBundle>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct InvalidBundle {
    pub file: String,
    pub error: String,
}

/// A member as `list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct MemberInfo {
    pub id: String,
    /// Display name (the id when none is configured).
    pub name: String,
    pub transport: TransportKind,
    /// Whether a message could be delivered now (process or session alive).
    pub ready: bool,
    /// Why it is not ready (`bundle_down`, `not_started`, `exited`, `session_missing` …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason_code: Option<String>,
    pub policy: String,
    /// Messages waiting in this member's delivery queue.
    pub queued: u64,
    /// For session and ACP members: the Switchboard session behind them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// `GET /v1/relay/bundles/{bundle}?as=MEMBER`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ListResponse {
    #[serde(default = "schema_version")]
    pub schema_version: u32,
    pub bundle: String,
    pub state: BundleState,
    pub health: BundleHealth,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason_code: Option<String>,
    pub members: Vec<MemberInfo>,
    pub startup_failures: StartupFailures,
}

/// What `up` or `down` did to a bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum HostingResult {
    /// `up` started something.
    Hosted,
    /// `down` stopped something.
    Unhosted,
    /// Nothing to do; `reason_code` says why (`already_up`, `already_down`).
    Skipped,
}

/// What `up` or `down` did to one member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct MemberChange {
    pub id: String,
    /// `started`, `already_running`, `stopped`, `not_running`, `failed`.
    pub result: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `POST /v1/relay/bundles/{bundle}/up` and `/down`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct HostingResponse {
    #[serde(default = "schema_version")]
    pub schema_version: u32,
    pub bundle: String,
    pub result: HostingResult,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason_code: Option<String>,
    pub members: Vec<MemberChange>,
}

/// Whether `send` waits for the delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// Wait for each target's outcome.
    Sync,
    /// Queue and answer at once with `queued`.
    #[default]
    Async,
}

/// `POST /v1/relay/bundles/{bundle}/send`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SendRequest {
    #[serde(
        default = "schema_version",
        deserialize_with = "schema_version_or_null"
    )]
    #[schema(nullable, minimum = 1, maximum = 1)]
    pub schema_version: u32,
    /// The caller's id for this request (echoed back; a retry with the same id and sender is
    /// answered from the first delivery instead of sending twice).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// A member id or a principal id (not empty or blank).
    #[schema(pattern = r"\S")]
    pub sender: String,
    /// Not empty or blank.
    #[schema(pattern = r"\S")]
    pub message: String,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "crate::nullable::or_default"
    )]
    #[schema(nullable)]
    pub targets: Vec<String>,
    /// Every member but the sender.
    #[serde(
        default,
        skip_serializing_if = "std::ops::Not::not",
        deserialize_with = "crate::nullable::or_default"
    )]
    #[schema(nullable)]
    pub broadcast: bool,
    #[serde(default, deserialize_with = "crate::nullable::or_default")]
    #[schema(nullable)]
    pub delivery: Delivery,
    /// tmux targets: how long the pane must stay unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quiet_window_ms: Option<u64>,
    /// tmux targets: how long to wait for quiescence before `timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quiescence_timeout_ms: Option<u64>,
    /// ACP and session targets: how long a sync send waits for the member's turn to end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_timeout_ms: Option<u64>,
    /// The relayed message this one answers: it continues that message's chain, one hop
    /// further. Without it, a member's send continues the chain of the last message
    /// delivered to it within the reply window; anything else starts a new chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = r"\S")]
    pub in_reply_to: Option<String>,
}

impl Default for SendRequest {
    fn default() -> Self {
        Self {
            schema_version: RELAY_SCHEMA_VERSION,
            request_id: None,
            sender: String::new(),
            message: String::new(),
            targets: Vec::new(),
            broadcast: false,
            delivery: Delivery::default(),
            quiet_window_ms: None,
            quiescence_timeout_ms: None,
            turn_timeout_ms: None,
            in_reply_to: None,
        }
    }
}

/// The outcome of one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Delivered,
    Queued,
    Timeout,
    Failed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Delivered => "delivered",
            Self::Queued => "queued",
            Self::Timeout => "timeout",
            Self::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "delivered" => Some(Self::Delivered),
            "queued" => Some(Self::Queued),
            "timeout" => Some(Self::Timeout),
            "failed" => Some(Self::Failed),
            _ => None,
        }
    }
}

/// One target's result in a [`SendResponse`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TargetResult {
    pub target: String,
    pub message_id: String,
    pub outcome: Outcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason_code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The overall status of a send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SendStatus {
    /// Every target delivered.
    Success,
    /// Some targets failed or timed out, others were delivered or queued.
    Partial,
    /// Every target failed or timed out.
    Failure,
    /// Nothing failed, and some targets are still queued (async; or a sync wait that ran
    /// out before the delivery).
    Accepted,
}

/// Answer to [`SendRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SendResponse {
    #[serde(default = "schema_version")]
    pub schema_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    pub bundle: String,
    pub sender: String,
    pub status: SendStatus,
    pub results: Vec<TargetResult>,
    /// The chain the message belongs to (every reply to a reply … shares it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain_id: Option<String>,
    /// Its hop in the chain: 1 for a message that starts one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hop: Option<u32>,
}

/// One entry of a session or ACP member's transcript in a `look`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LookEntry {
    pub role: String,
    pub content: String,
    pub at: DateTime<Utc>,
}

/// `GET /v1/relay/bundles/{bundle}/look?requester=&target=&lines=`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LookResponse {
    #[serde(default = "schema_version")]
    pub schema_version: u32,
    pub bundle: String,
    pub target: String,
    pub transport: TransportKind,
    /// tmux: the pane's last lines.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lines: Vec<String>,
    /// ACP and session members: the last transcript entries, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entries: Vec<LookEntry>,
    /// tmux: always true (captured now). ACP and session: false while the member is in a
    /// turn (its newest output is not in the transcript yet).
    pub fresh: bool,
    /// Age of the newest entry in milliseconds (0 for a tmux capture).
    pub age_ms: u64,
    pub captured_at: DateTime<Utc>,
}

/// `GET /v1/relay/bundles/{bundle}/audit`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AuditResponse {
    #[serde(default = "schema_version")]
    pub schema_version: u32,
    pub bundle: String,
    /// Newest last.
    #[schema(value_type = Vec<Object>)]
    pub entries: Vec<serde_json::Value>,
}

/// A delivery's final outcome, pushed to its sender (`GET …/events?as=SENDER`, SSE event
/// `relay.outcome`) and kept with the message (`GET …/messages/{id}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct OutcomeEvent {
    /// Position in the bundle's outcome stream (the SSE `id`).
    pub seq: u64,
    pub bundle: String,
    pub message_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    pub sender: String,
    pub target: String,
    pub outcome: Outcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason_code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub at: DateTime<Utc>,
}

/// `switchboard relay check --json`: bundle files validated the way start-up does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CheckResponse {
    #[serde(default = "schema_version")]
    pub schema_version: u32,
    pub ok: bool,
    pub bundles: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub invalid: Vec<InvalidBundle>,
}

/// A relay error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RelayErrorBody {
    #[serde(default = "schema_version")]
    pub schema_version: u32,
    pub code: String,
    pub message: String,
    #[schema(value_type = Object)]
    pub details: serde_json::Value,
    /// The same text as `message`, so the body is also a `/v1` [`crate::ErrorBody`].
    pub error: String,
    pub request_id: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_request_rejects_unknown_fields_and_defaults_to_async() {
        let r: SendRequest =
            serde_json::from_str(r#"{"sender":"a","message":"hi","targets":["b"]}"#).unwrap();
        assert_eq!(r.delivery, Delivery::Async);
        assert_eq!(r.schema_version, 1);
        let e = serde_json::from_str::<SendRequest>(r#"{"sender":"a","message":"hi","to":["b"]}"#)
            .unwrap_err();
        assert!(e.to_string().contains("unknown field `to`"), "{e}");
    }

    #[test]
    fn send_request_reads_null_as_absent() {
        let nulls: SendRequest = serde_json::from_str(
            r#"{"schema_version":null,"request_id":null,"sender":"a","message":"hi",
                "targets":null,"broadcast":null,"delivery":null,"quiet_window_ms":null,
                "quiescence_timeout_ms":null,"turn_timeout_ms":null}"#,
        )
        .unwrap();
        let bare: SendRequest = serde_json::from_str(r#"{"sender":"a","message":"hi"}"#).unwrap();
        assert_eq!(nulls, bare);
        assert_eq!(bare.schema_version, RELAY_SCHEMA_VERSION);
    }
}
