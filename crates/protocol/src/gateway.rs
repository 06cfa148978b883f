//! Wire types of the chat gateway's routes (`/v1/gateway/*`).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

/// The kind of conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChatKind {
    Direct,
    Group,
    Thread,
}

impl ChatKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Direct => "direct",
            Self::Group => "group",
            Self::Thread => "thread",
        }
    }
}

/// Where a conversation happens, and so where replies go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ChatRef {
    /// The platform's chat id (Telegram chat id, Slack channel …).
    pub id: String,
    pub kind: ChatKind,
    /// The thread or forum topic inside the chat, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<String>,
}

/// Who wrote a message or pressed a button.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Peer {
    /// The platform's stable id (Telegram user id, webhook sender id …).
    pub id: String,
    /// A name to show (`alice` in "alice: …").
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
}

/// Where a channel's connection to its platform stands.
///
/// - `configured`: not started (a channel of a gateway that has not run yet).
/// - `starting`: identifying the bot or opening the first connection.
/// - `connected`: receiving (polling, socket open, webhook registered, listening).
/// - `reconnecting`: the connection ended or an attempt failed; it is retried with back-off.
/// - `failing`: still retried, but [`FAILING_AFTER`] attempts in a row have failed.
/// - `failed`: stopped for a failure that retrying will not fix (a bad token, another
///   poller with the same token); needs the operator, then a restart.
/// - `stopped`: shut down.
/// - `standby`: another instance holds the gateway lease and runs the channels.
/// - `degraded`: connected, but deaf: nothing has arrived for longer than `[gateway]
///   deaf_after_secs` while the platform says it holds messages for the bot (Telegram's
///   `getWebhookInfo`); `reason` says what the platform reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ConnectionState {
    #[default]
    Configured,
    Starting,
    Connected,
    Reconnecting,
    Failing,
    Failed,
    Stopped,
    Standby,
    Degraded,
}

/// Failed attempts in a row after which a channel that is still retrying is `failing`
/// rather than `reconnecting`.
pub const FAILING_AFTER: u32 = 3;

impl ConnectionState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Configured => "configured",
            Self::Starting => "starting",
            Self::Connected => "connected",
            Self::Reconnecting => "reconnecting",
            Self::Failing => "failing",
            Self::Failed => "failed",
            Self::Stopped => "stopped",
            Self::Standby => "standby",
            Self::Degraded => "degraded",
        }
    }
}

/// One configured channel and how it is doing.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct ChannelStatus {
    pub name: String,
    /// Human-readable, as before `state` existed: `polling`, `socket: connected`,
    /// `error: …`, `standby` …
    pub status: String,
    /// Machine-readable: see [`ConnectionState`].
    #[serde(default)]
    pub state: ConnectionState,
    /// When the channel entered `state` (for `reconnecting` and `failing`: when the failures
    /// began). `null` when nothing happened yet (`configured`, `standby`).
    #[serde(default)]
    pub since: Option<DateTime<Utc>>,
    /// Why the channel is `reconnecting`, `failing` or `failed`: the last error, readable,
    /// never a token or secret. `null` in the other states.
    #[serde(default)]
    pub reason: Option<String>,
    /// The last error (a failed connection attempt, or a failed delivery of the signed
    /// webhook channel), kept after the channel recovered; never a token or secret.
    #[serde(default)]
    pub last_error: Option<String>,
    /// When `last_error` happened.
    #[serde(default)]
    pub last_error_at: Option<DateTime<Utc>>,
    /// When the channel last received anything from the platform (a message, a press, a
    /// reaction) since the server started; `null` before the first.
    #[serde(default)]
    pub last_received_at: Option<DateTime<Utc>>,
}

/// `GET /v1/gateway/status`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct GatewayStatus {
    /// `active` (this instance runs the channels) or `standby` (another instance holds the
    /// gateway lease; this one only stores what reaches it over HTTP).
    #[serde(default)]
    pub role: String,
    pub channels: Vec<ChannelStatus>,
    pub sessions: usize,
    pub active_runs: usize,
    pub queued_messages: usize,
    pub pending_approvals: usize,
}

/// Chat messages the session refused for good (a `4xx` that a retry cannot change: too many
/// files, too long, a type not allowed), set aside so that the chat's later messages run;
/// the chat was told. `GET /v1/gateway/parked`, the console's Channels page.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct ParkedBatch {
    /// `<routing key>:<first>-<last inbox id>`.
    pub id: String,
    pub routing_key: String,
    pub channel: String,
    pub chat: ChatRef,
    /// Who sent them.
    pub senders: Vec<Peer>,
    /// The messages' text as the agent would have got it.
    pub text: String,
    /// Files that came with them.
    pub files: usize,
    /// The session's answer: its code and message.
    pub code: String,
    pub error: String,
    pub parked_at: DateTime<Utc>,
}

/// `GET /v1/gateway/parked`: the oldest first.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct ParkedBatchesResponse {
    pub parked: Vec<ParkedBatch>,
}

/// A chat bound to a session.
///
/// A test message to this chat is `POST /v1/gateway/send` with `channel` = `channel`,
/// `target` = `chat.id`, `thread` = `chat.thread` and `kind` = `chat.kind`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct GatewaySession {
    pub routing_key: String,
    pub session_id: uuid::Uuid,
    pub channel: String,
    /// Where the replies go (the chat of the latest message).
    pub chat: ChatRef,
    /// An explicit binding (`[gateway.bindings]`), not a session the gateway created.
    pub bound: bool,
    /// Who wrote the latest message the agent got (in a direct chat: the person).
    #[serde(default)]
    pub peer: Option<Peer>,
    /// The latest message in or out of this chat (a message from it, a reply, an
    /// approval prompt, a notification); `null` when none was recorded yet.
    #[serde(default)]
    pub last_activity: Option<DateTime<Utc>>,
}

/// `GET /v1/gateway/sessions`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct GatewaySessionsResponse {
    pub sessions: Vec<GatewaySession>,
}

/// `POST /v1/gateway/send`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GatewaySendRequest {
    /// A configured channel's name (the served document lists them).
    #[schema(pattern = r"\S")]
    pub channel: String,
    /// The chat id on that channel.
    #[schema(pattern = r"\S")]
    pub target: String,
    /// Not empty or blank.
    #[schema(pattern = r"\S")]
    pub text: String,
    /// Attached once, as high-priority caller context, to the next message from that chat
    /// (within the context TTL).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub context: Option<serde_json::Value>,
    /// For a thread chat: the thread id.
    #[serde(default)]
    pub thread: Option<String>,
    /// The kind of chat, as in a [`GatewaySession`]'s `chat.kind`; default: `thread` when
    /// `thread` is given, else `direct`. `thread` needs `thread`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<ChatKind>,
}

/// `POST /v1/gateway/approvals`: ask a chat to decide tool calls of a run the gateway does
/// not follow itself (a scheduled run). The chat gets one prompt with Allow / Deny buttons;
/// a press decides the calls through `/v1`. Asking again for the same calls answers the
/// prompt already posted.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GatewayAskRequest {
    /// A configured channel's name (the served document lists them).
    #[schema(pattern = r"\S")]
    pub channel: String,
    /// The chat id on that channel.
    #[schema(pattern = r"\S")]
    pub target: String,
    /// For a thread chat: the thread id.
    #[serde(default)]
    pub thread: Option<String>,
    pub session_id: Uuid,
    pub run_id: Uuid,
    /// The waiting calls to ask about (all of them must wait).
    #[schema(min_items = 1)]
    pub tool_call_ids: Vec<String>,
    /// A line shown above the calls (`⏰ nightly check asks:`).
    #[serde(default)]
    pub title: Option<String>,
}

/// Answer to [`GatewayAskRequest`].
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct GatewayAskResponse {
    /// The prompt's id, for `POST /v1/gateway/approvals/{id}/expire`.
    pub prompt_id: String,
    /// The platform's id of the prompt's message.
    pub message_id: String,
}

/// `POST /v1/gateway/approvals/{id}/expire`: reject a prompt's calls because nobody
/// answered, and say so in its message.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GatewayExpireRequest {
    /// Why (shown in the chat and given to the agent).
    #[schema(pattern = r"\S")]
    pub reason: String,
}

/// Answer to [`GatewayExpireRequest`]: whether the calls were rejected now (false: the run
/// no longer waited for them).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct GatewayExpireResponse {
    pub rejected: bool,
}

/// Answer to [`GatewaySendRequest`]: the platform's id of the message sent.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct GatewaySendResponse {
    pub message_id: String,
}

/// An inbound update taken (stored for the dispatcher).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct Accepted {
    pub ok: bool,
}

/// A pending pairing request: someone unknown wrote to the bot in a direct message and got
/// `code`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct PairingRequest {
    pub channel: String,
    /// The code the person was given (8 characters, upper case).
    pub code: String,
    /// Who asked.
    pub peer: Peer,
    /// The chat that is allowed once the request is approved.
    pub chat: ChatRef,
    /// When the code stops being valid.
    pub expires_at: DateTime<Utc>,
}

/// `GET /v1/gateway/pairing`: the pending requests, oldest first.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
pub struct PairingRequestsResponse {
    pub requests: Vec<PairingRequest>,
}

/// `POST /v1/gateway/pairing/approve` and `POST /v1/gateway/pairing/refuse`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PairingDecision {
    /// A configured channel's name (the served document lists them).
    #[schema(pattern = r"\S")]
    pub channel: String,
    /// As the person was given it (case and surrounding spaces do not matter).
    #[schema(pattern = r"\S")]
    pub code: String,
}

/// What became of an inbound chat message, in the delivery ledger.
///
/// - `received`: taken, being handled (a command or an approval answer).
/// - `ignored`: not acted on; `reason` says why: `not_allowed` (a chat that is not allowed;
///   a direct message got a pairing code), `duplicate` (a platform's redelivery or a replayed
///   webhook of the message in `duplicate_of`), `edited` (an edit of a message already
///   taken), `empty`, `stopped` (dropped from the queue by `/stop`).
/// - `queued`: waiting for its chat's run.
/// - `in_run`: sent to the agent as part of run `run_id`.
/// - `answered`: the run completed (or the command was answered); `outbound` lists what
///   was posted.
/// - `failed`: `reason` says why (the run failed, the session refused the message, the
///   reply could not be posted); `POST /v1/gateway/messages/{id}/retry` queues it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryStatus {
    Received,
    Ignored,
    Queued,
    InRun,
    Answered,
    Failed,
}

impl DeliveryStatus {
    pub const ALL: [Self; 6] = [
        Self::Received,
        Self::Ignored,
        Self::Queued,
        Self::InRun,
        Self::Answered,
        Self::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Received => "received",
            Self::Ignored => "ignored",
            Self::Queued => "queued",
            Self::InRun => "in_run",
            Self::Answered => "answered",
            Self::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// Why an inbound message was `ignored` (its entry's `reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IgnoredWhy {
    /// A chat nobody let in.
    NotAllowed,
    /// A platform's redelivery or a replayed webhook of a message already taken.
    Duplicate,
    /// An edit of a message already taken.
    Edited,
    /// Nothing in it (no text, no file).
    Empty,
    /// Dropped from the queue by `/stop`.
    Stopped,
}

impl IgnoredWhy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotAllowed => "not_allowed",
            Self::Duplicate => "duplicate",
            Self::Edited => "edited",
            Self::Empty => "empty",
            Self::Stopped => "stopped",
        }
    }
}

/// What kind of inbound message an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum InboundKind {
    /// For the agent.
    Message,
    /// A chat command (`/new`, `/search` …).
    Command,
    /// An answer to an approval prompt in words.
    Answer,
}

/// Something posted to a chat for an inbound message: a page of the reply, a file, an
/// approval prompt or a notice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Outbound {
    /// `reply`, `file`, `prompt` or `notice`.
    pub kind: String,
    /// The platform's message id; absent when it was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Platform calls made to post it (a rate limit or a transient error is tried again).
    pub attempts: u32,
    /// Why the platform refused it, for good.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub at: DateTime<Utc>,
}

/// One inbound chat message in the delivery ledger, and what became of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DeliveryEntry {
    pub id: i64,
    pub channel: String,
    pub chat: ChatRef,
    pub peer: Peer,
    /// The platform's id of the message (empty when it gave none).
    pub message_id: String,
    pub kind: InboundKind,
    pub text: String,
    /// Files that came with it.
    pub files: usize,
    pub status: DeliveryStatus,
    /// Why it was ignored or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A duplicate: the entry it repeats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duplicate_of: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<Uuid>,
    /// What was posted for it, in order.
    pub outbound: Vec<Outbound>,
    /// Times it was sent to the agent (a retry adds one).
    pub attempts: u32,
    pub received_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// The query of `GET /v1/gateway/messages`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DeliveryQuery {
    /// Only this channel (its configured name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(max_length = 200)]
    pub channel: Option<String>,
    /// Only this chat (the platform's chat id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(max_length = 500)]
    pub chat: Option<String>,
    /// Only entries with this status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(inline)]
    pub status: Option<DeliveryStatus>,
    /// Entries per page (default 50, at most 200).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
    /// Only entries older than this one (the `next` of the previous page).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 1, maximum = 9007199254740991_i64)]
    pub before: Option<i64>,
}

/// `GET /v1/gateway/messages`: the newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DeliveryPage {
    pub messages: Vec<DeliveryEntry>,
    /// `before` for the next (older) page; absent on the last one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<i64>,
}
