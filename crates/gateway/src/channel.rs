//! What a chat platform connection offers the dispatcher, and what it hands in.

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

pub use switchboard_protocol::gateway::{ChatKind, ChatRef, Peer};

/// Metadata of a file sent with a message (content is not fetched).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// The type the platform gives (the server sniffs its own from the content).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime: Option<String>,
    /// The platform's reference to fetch the content by ([`Channel::fetch`]): a Telegram
    /// `file_id`, a Slack `url_private`, a Discord attachment URL. `None`: not fetchable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// A file to send to a chat (one the agent shared).
#[derive(Debug, Clone, PartialEq)]
pub struct OutgoingFile {
    /// Where the server serves it: `/v1/sessions/{id}/files/{file_id}` (with the API token).
    pub path: String,
    pub name: String,
    /// As the server sniffed it.
    pub mime: String,
    pub bytes: bytes::Bytes,
    pub caption: Option<String>,
}

impl OutgoingFile {
    /// The file said in words, for a chat it cannot be sent to: its caption, then its
    /// name, type and size and where to get it.
    pub fn as_text(&self) -> String {
        let caption = self
            .caption
            .as_deref()
            .map(|c| format!("{c}\n"))
            .unwrap_or_default();
        format!(
            "{caption}[file: {} ({}, {} bytes); open the session in the console to download it]",
            self.name,
            self.mime,
            self.bytes.len()
        )
    }

    /// Whether platforms show it as a photo (what they re-encode and preview inline).
    pub fn is_photo(&self) -> bool {
        matches!(
            self.mime.as_str(),
            "image/png" | "image/jpeg" | "image/gif" | "image/webp"
        )
    }
}

/// An attachment's content, fetched from the platform.
#[derive(Debug, Clone, PartialEq)]
pub struct Fetched {
    pub bytes: bytes::Bytes,
    /// The name to store it under (the attachment's, or one made from its kind).
    pub name: String,
}

/// A message from a chat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InboundMessage {
    /// The channel's configured name (`telegram`, `webhook:ops` …).
    pub channel: String,
    pub peer: Peer,
    pub chat: ChatRef,
    pub text: String,
    /// The platform's id of the message.
    pub message_id: String,
    /// In groups: the bot was mentioned, or the message replies to the bot.
    #[serde(default)]
    pub addressed: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Attachment>,
    /// The platform's id of the message this one replies to, when it is a reply (a reply
    /// to an approval prompt answers it: `dispatcher/answers.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
    /// An edit of a message already sent (`message_id` is the edited message's): noted in
    /// the delivery ledger as ignored, not acted on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub edited: bool,
    /// Anything else the platform said (raw ids, entities …).
    #[serde(default)]
    pub meta: serde_json::Value,
}

/// How a person answered an approval prompt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnswerVia {
    /// One of the prompt's buttons: the press is acknowledged on the platform.
    #[default]
    Button,
    /// A reaction on the prompt (✅ / ❌ …).
    Reaction,
    /// Words: a reply to the prompt, or `/allow` / `/deny [reason]` in its conversation.
    Words,
}

/// A reaction someone put on a message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reaction {
    pub channel: String,
    /// The platform's id of the reaction itself.
    pub reaction_id: String,
    pub peer: Peer,
    pub chat: ChatRef,
    /// The message reacted to.
    pub message_id: String,
    /// The emoji (`✅`, `👍` …), as the platform gives it.
    pub key: String,
}

/// A press of one of our buttons.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ButtonPress {
    pub channel: String,
    /// The platform's id of the press (to answer it).
    pub press_id: String,
    pub peer: Peer,
    pub chat: ChatRef,
    /// The message that carries the button.
    pub message_id: String,
    /// The button's data, as we set it.
    pub data: String,
    /// A button, or an answer without one that the dispatcher made into a press.
    #[serde(default)]
    pub via: AnswerVia,
    /// The reason a denial in words gave (`/deny too risky`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Something a channel received.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Inbound {
    Message(InboundMessage),
    Press(ButtonPress),
    Reaction(Reaction),
}

/// A button under a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Button {
    pub text: String,
    /// Handed back in [`ButtonPress::data`]; short (Telegram allows 64 bytes).
    pub data: String,
}

/// Why a platform call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ChannelError {
    /// Not reachable (connect error, timeout).
    #[error("{channel}: unreachable: {reason}")]
    Unreachable { channel: String, reason: String },
    /// The platform refused (bad token, unknown chat …); `code` is its error code.
    #[error("{channel}: {method} failed: {description}")]
    Api {
        channel: String,
        method: String,
        code: u16,
        description: String,
    },
    /// Told to slow down more often than the retry budget allows.
    #[error("{channel}: rate limited; retry after {retry_after_secs} s")]
    RateLimited {
        channel: String,
        retry_after_secs: u64,
    },
    /// Another process polls with the same token.
    #[error("{channel}: another poller is running with this bot token (getUpdates answered 409)")]
    Conflict { channel: String },
    #[error("{channel}: {reason}")]
    Other { channel: String, reason: String },
}

/// Where a channel hands what it receives. `accept` returns once the item is stored
/// durably; only then may the channel acknowledge it to the platform (advance an offset).
#[async_trait]
pub trait InboundSink: Send + Sync {
    async fn accept(&self, item: Inbound) -> Result<(), String>;
}

/// Small durable key-value state a channel keeps (a polling offset, a session id).
#[async_trait]
pub trait ChannelState: Send + Sync {
    /// The value, or `None` when there is none or it could not be read.
    async fn get(&self, key: &str) -> Option<String>;
    async fn set(&self, key: &str, value: &str) -> Result<(), String>;
    /// The value, telling "none" from "could not be read" (for a read-modify-write that
    /// must not overwrite what it could not read).
    async fn try_get(&self, key: &str) -> Result<Option<String>, String> {
        Ok(self.get(key).await)
    }
}

/// Everything a channel gets to run.
#[derive(Clone)]
pub struct ChannelContext {
    pub sink: Arc<dyn InboundSink>,
    pub state: Arc<dyn ChannelState>,
}

/// What the dispatcher needs to know of a channel to show replies in it: one value, built
/// by the channel when it is made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelInfo {
    /// The configured name: `telegram`, `webhook:ops` …
    pub name: String,
    /// Longest text of one message.
    pub max_chars: usize,
    /// Whether sent messages can be edited (streaming by edits).
    pub can_edit: bool,
    /// How often one chat's messages may be edited. The dispatcher shows a streaming reply
    /// at this pace, each edit with all the text there is by then; [`Channel::edit`] itself
    /// also waits for its chat's turn.
    pub edit_interval: std::time::Duration,
    /// Whether messages can carry buttons. Without them an approval prompt says how to
    /// answer in words (and by reaction, with [`ChannelInfo::reactions`]).
    pub buttons: bool,
    /// Whether people can react to a message and the channel hands reactions in
    /// ([`Inbound::Reaction`]).
    pub reactions: bool,
    /// A reply is sent whole when the run ends (or stops for an approval), not in pieces as
    /// it streams: for platforms where each message is a notification that stays (email).
    pub whole_replies: bool,
}

impl ChannelInfo {
    /// A channel that edits, at one edit a second per chat.
    pub fn new(name: impl Into<String>, max_chars: usize) -> Self {
        Self {
            name: name.into(),
            max_chars,
            can_edit: true,
            edit_interval: std::time::Duration::from_secs(1),
            buttons: true,
            reactions: false,
            whole_replies: false,
        }
    }

    /// A platform whose messages cannot be edited and where each one stays (email): the
    /// reply is sent whole at the end of the run ([`ChannelInfo::whole_replies`]).
    pub fn whole_replies(mut self) -> Self {
        self.can_edit = false;
        self.whole_replies = true;
        self
    }

    /// A platform without buttons (approvals are answered in words); `reactions`: and
    /// whether it hands reactions in.
    pub fn without_buttons(mut self, reactions: bool) -> Self {
        self.buttons = false;
        self.reactions = reactions;
        self
    }

    pub fn edit_interval(mut self, every: std::time::Duration) -> Self {
        self.edit_interval = every;
        self
    }
}

/// What a platform holds for the bot and has not delivered ([`Channel::backlog`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backlog {
    /// Updates waiting on the platform's side.
    pub pending: u64,
    /// The platform's last error delivering them (no secret in it), if it reports one.
    pub last_error: Option<String>,
}

/// A chat platform connection.
///
/// (A gateway wraps each channel to note its chats' activity — `dispatcher/activity.rs`: a
/// method added here must be forwarded there.)
#[async_trait]
pub trait Channel: Send + Sync + 'static {
    /// Its name, message size and edit pace.
    fn info(&self) -> &ChannelInfo;
    /// [`ChannelInfo::name`].
    fn name(&self) -> &str {
        &self.info().name
    }
    /// [`ChannelInfo::max_chars`].
    fn max_chars(&self) -> usize {
        self.info().max_chars
    }
    /// [`ChannelInfo::can_edit`].
    fn can_edit(&self) -> bool {
        self.info().can_edit
    }
    /// [`ChannelInfo::edit_interval`].
    fn edit_interval(&self) -> std::time::Duration {
        self.info().edit_interval
    }
    /// Receives until `cancel` fires, handing everything to `ctx.sink`. Returns an error
    /// only for a failure that retrying will not fix; transient errors are retried inside.
    async fn run(&self, ctx: ChannelContext, cancel: CancellationToken)
    -> Result<(), ChannelError>;
    /// Posts a message (with buttons, if any); returns its id.
    async fn send(
        &self,
        chat: &ChatRef,
        text: &str,
        buttons: &[Button],
    ) -> Result<String, ChannelError>;
    /// Replaces a message's text and buttons (none removes them).
    async fn edit(
        &self,
        chat: &ChatRef,
        message_id: &str,
        text: &str,
        buttons: &[Button],
    ) -> Result<(), ChannelError>;
    /// Acknowledges a button press (a short toast where the platform shows one).
    async fn answer_press(
        &self,
        press: &ButtonPress,
        text: Option<&str>,
    ) -> Result<(), ChannelError>;
    /// Tells the person who pressed a button something only they see — why their press was
    /// refused: Telegram's callback answer as an alert, Slack's ephemeral message, Discord's
    /// ephemeral follow-up. The default answers the press with the text.
    async fn tell_presser(&self, press: &ButtonPress, text: &str) -> Result<(), ChannelError> {
        self.answer_press(press, Some(text)).await
    }
    /// Tells one person in a chat something, as privately as the platform allows — why
    /// their answer to a prompt in words or by reaction was refused. The default posts it
    /// in the chat, addressed to them by name.
    async fn tell(&self, chat: &ChatRef, peer: &Peer, text: &str) -> Result<(), ChannelError> {
        self.send(chat, &format!("{}: {text}", peer.name), &[])
            .await
            .map(drop)
    }
    /// Whether a message to `chat` can carry buttons: [`ChannelInfo::buttons`], unless the
    /// platform has chats without them (WhatsApp's groups). Without, an approval prompt
    /// says how to answer in words — and, on a channel with buttons elsewhere, still comes
    /// with its buttons, so that the channel knows it is a prompt; it must not show them.
    fn buttons_in(&self, chat: &ChatRef) -> bool {
        let _ = chat;
        self.info().buttons
    }
    /// Checks the connection; returns the bot's identity (e.g. `@switchboard_bot (id 42)`).
    async fn test(&self) -> Result<String, ChannelError>;
    /// Where a person starts talking to the bot (a link to open a direct message with it, or
    /// to invite it to a server), when the platform has one; asks the platform who the bot is.
    async fn open_link(&self) -> Result<Option<String>, ChannelError> {
        Ok(None)
    }
    /// Sends a file to a chat (into its thread), with its caption; returns the message id.
    /// The default, for channels without file uploads, posts the caption and the file's
    /// name and size as text.
    async fn send_file(&self, chat: &ChatRef, file: &OutgoingFile) -> Result<String, ChannelError> {
        self.send(chat, &file.as_text(), &[]).await
    }
    /// Fetches an attachment's content from the platform (its [`Attachment::source`]), at
    /// most `max_bytes`: a larger file is refused as soon as that shows (its declared size,
    /// or the bytes as they arrive), never held whole. The error is a reason a user may read
    /// (no secrets). The default: this channel has no files.
    async fn fetch(&self, attachment: &Attachment, max_bytes: u64) -> Result<Fetched, String> {
        let _ = (attachment, max_bytes);
        Err("this channel does not fetch files".into())
    }
    /// What the platform itself says is waiting for the bot, where it says so (Telegram's
    /// `getWebhookInfo`): the gateway's deafness watch asks it of a connected channel that
    /// has received nothing for a while ([`crate::hearing`]). The default: the platform has
    /// no such view.
    async fn backlog(&self) -> Option<Result<Backlog, ChannelError>> {
        None
    }
    /// The human-readable connection status for `/v1/gateway/status` (`connected`,
    /// `polling`, an error …).
    fn status(&self) -> String {
        "configured".into()
    }

    /// How the connection is doing, machine-readable (`connected`, `reconnecting` with the
    /// reason …); see [`crate::health`]. The default: `configured`, with [`Channel::status`].
    fn health(&self) -> crate::health::ChannelHealth {
        crate::health::ChannelHealth::configured(self.status())
    }

    /// For platforms that push updates over HTTP (Telegram's webhook mode): checks the
    /// request (`Err` is answered 401) and returns what it carries (`None`: nothing for
    /// us). Served at `POST /v1/gateway/channels/{name}/webhook`.
    async fn inbound_http(
        &self,
        _headers: &axum::http::HeaderMap,
        _body: &[u8],
    ) -> Result<Option<Inbound>, InboundHttpError> {
        Err(InboundHttpError::NotSupported)
    }

    /// For platforms that push several updates in one request (WhatsApp's deliveries):
    /// every item it carries, in order. The default: [`Channel::inbound_http`]'s one.
    async fn inbound_http_all(
        &self,
        headers: &axum::http::HeaderMap,
        body: &[u8],
    ) -> Result<Vec<Inbound>, InboundHttpError> {
        Ok(self
            .inbound_http(headers, body)
            .await?
            .into_iter()
            .collect())
    }

    /// For platforms that check their webhook with a `GET` before pushing to it (Meta's
    /// `hub.challenge`): the text to answer with, given the query string. Served at
    /// `GET /v1/gateway/channels/{name}/webhook`.
    fn http_subscribe(
        &self,
        _query: &std::collections::HashMap<String, String>,
    ) -> Result<String, InboundHttpError> {
        Err(InboundHttpError::NotSupported)
    }

    /// For platforms that check an HTTP endpoint with a challenge before pushing to it
    /// (Slack's `url_verification`): the text to answer `body` with, or `None` when `body`
    /// is no such challenge. The webhook route calls this before [`Channel::inbound_http`]
    /// and, on `Some`, answers 200 with that text (`text/plain`) and nothing else. The
    /// challenge is only echoed, so it needs no signature check.
    fn http_challenge(&self, _headers: &axum::http::HeaderMap, _body: &[u8]) -> Option<String> {
        None
    }

    /// For a push that [`Channel::inbound_http`] took: the body to answer it with, when the
    /// platform shows the answer (Slack posts a slash command's answer in the chat, so that
    /// one is empty). `None`: the gateway's usual `{"ok": true}`.
    fn http_answer(&self, _headers: &axum::http::HeaderMap, _body: &[u8]) -> Option<String> {
        None
    }
}

/// Why an HTTP push from a platform was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InboundHttpError {
    #[error("this channel does not receive updates over HTTP")]
    NotSupported,
    #[error("missing or wrong secret token")]
    Unauthorized,
    #[error("malformed update: {0}")]
    Malformed(String),
}
