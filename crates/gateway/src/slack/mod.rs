//! The Slack channel: a Slack app's bot user, over Socket Mode or the Events API.
//!
//! Web API calls are `POST {api_base}/{method}` with `Authorization: Bearer <token>` and a
//! JSON body; the answer is `{"ok":true,…}` or `{"ok":false,"error":"invalid_auth"}` (HTTP
//! 200, surfaced as [`ChannelError::Api`] with `code: 200` and the error as description), or
//! HTTP 429 with `Retry-After` (handled by the [`crate::platform`] kit: waited out up to
//! [`SlackConfig::max_retry_after`], up to [`SlackConfig::max_retries`] times, then
//! [`ChannelError::RateLimited`]).
//!
//! # Receiving
//!
//! - **Socket Mode** (when [`SlackConfig::app_token`] is set): [`Channel::run`] learns the
//!   bot's user id (`auth.test`), then opens a websocket URL with `apps.connections.open`
//!   (app token) and reads envelopes `{"envelope_id","type","payload"}` of type
//!   `events_api`, `interactive` and `slash_commands`. Each one is acknowledged by sending
//!   `{"envelope_id":…}` back, and only after the sink has accepted what it carries (or it
//!   carries nothing for us): when the sink fails, the envelope stays unacknowledged and
//!   Slack delivers it again. `{"type":"disconnect"}` makes it reconnect at once (with a fresh
//!   `apps.connections.open`); a dropped socket reconnects after a back-off (1 s doubling to
//!   30 s) until cancelled.
//! - **Events API** (when [`SlackConfig::signing_secret`] is set and there is no app token):
//!   Slack POSTs to the gateway's webhook route, which hands the request to
//!   [`Channel::inbound_http`]. Requests are checked against `X-Slack-Signature: v0=<hex
//!   HMAC-SHA256(signing_secret, "v0:{X-Slack-Request-Timestamp}:{body}")>` (constant-time)
//!   and must be at most 5 minutes old. `url_verification` is answered through
//!   [`Channel::http_challenge`]. Interactive payloads (`block_actions`) arrive
//!   form-encoded as `payload=<json>`. While [`Channel::run`] runs, `inbound_http` hands an
//!   item to the sink itself (so that it can remember it as taken, see below) and returns
//!   `None`.
//!
//! Slack delivers at least once: an event that was not acknowledged in time comes again
//! (same `event_id`). Ids of taken events (and `channel:ts` of taken messages, as a message
//! in a channel comes both as `message` and as `app_mention`) are remembered in memory and
//! in the channel state (key [`SEEN_KEY`]), so a duplicate is acknowledged and dropped, also
//! after a restart.
//!
//! # Conversations
//!
//! - Direct messages (`channel_type: "im"`) are [`ChatKind::Direct`] chats.
//! - In channels, a top-level message counts only when it mentions the bot (`<@BOTID>`, the
//!   mention is stripped from the text). It starts a **thread chat**: `ChatRef { id:
//!   channel, kind: Thread, thread: Some(ts) }` — the bot answers in the message's thread.
//!   Later replies in a known thread need no mention; known threads are kept in the channel
//!   state (key `thread:{channel}:{thread_ts}`), so they survive restarts.
//! - Messages of bots (`bot_id`, or the bot itself), edits (`message_changed`) and other
//!   subtypes are ignored (except `file_share` and `thread_broadcast`, which are messages a
//!   person wrote).
//!
//! # Sending
//!
//! Replies are Block Kit built from the agent's Markdown ([`markdown_blocks`]), with the
//! plain text as `text` fallback; buttons are an `actions` block. Edits (`chat.update`) in
//! one channel are spaced by [`SlackConfig::edit_interval`].
//!
//! Tokens and the signing secret are secrets: `Debug` hides them and they are removed from
//! every error text; the websocket URL (it carries a connection ticket) is never logged.

use crate::health::ChannelHealth;
use crate::platform::{self, Limits, OverCap, PlatformClient, REDACTED, Rate, RetryPolicy};

use parking_lot::Mutex;
use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use tokio_util::sync::CancellationToken;

use crate::channel::{
    Attachment, Button, ButtonPress, Channel, ChannelContext, ChannelError, ChannelInfo, ChatKind,
    ChatRef, Fetched, Inbound, InboundHttpError, OutgoingFile,
};

mod blocks;
mod events_api;
mod inbound;
mod socket_mode;
mod web_api;

use blocks::*;
pub use blocks::{markdown_blocks, mrkdwn};
use events_api::*;
use inbound::*;
use socket_mode::*;

/// The public Web API.
pub const DEFAULT_API_BASE: &str = "https://slack.com/api";
/// Longest text of one `section` block (Slack's limit).
pub const MAX_CHARS: usize = 3000;
/// Longest reply text of one message: Slack shows about this much before it folds a message
/// behind "Show more" (a message's text is cut into sections of [`MAX_CHARS`]).
pub const MESSAGE_CHARS: usize = 4000;
/// How long a user whose name Slack did not give is shown by id before `users.info` is
/// asked again.
const NAME_RETRY: Duration = Duration::from_secs(600);
/// Most blocks in one message (Slack's limit).
pub const MAX_BLOCKS: usize = 50;
/// Longest `header` block text (Slack's limit).
pub const MAX_HEADER_CHARS: usize = 150;
/// Longest button text (Slack's limit).
pub const MAX_BUTTON_TEXT: usize = 75;
/// Longest button data (`action_id`, Slack's limit), in bytes.
pub const MAX_BUTTON_DATA: usize = 255;
/// Most elements of one `actions` block (Slack's limit).
pub const MAX_ACTIONS: usize = 25;
/// The state key of the recently taken event ids (one per line).
pub const SEEN_KEY: &str = "seen_events";
/// How far an Events API request's timestamp may be from now.
pub const SIGNATURE_TOLERANCE: Duration = Duration::from_secs(300);
/// The header with the Events API request's unix time.
pub const TIMESTAMP_HEADER: &str = "x-slack-request-timestamp";
/// The header with `v0=<hex HMAC>`.
pub const SIGNATURE_HEADER: &str = "x-slack-signature";

const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Taken event ids remembered in memory, and in the channel state.
const SEEN_MEMORY: usize = 2000;
const SEEN_PERSISTED: usize = 500;
/// Known threads remembered in memory (the state keeps all).
const THREADS_MEMORY: usize = 10_000;

/// Slack's published limits: `chat.postMessage` about one a second per channel (short
/// bursts pass), `chat.update` in Tier 3 (about 50 a minute per workspace), edits in one
/// channel at most one per `edit_interval`.
fn limits(edit_interval: Duration) -> Limits {
    let per_second = Rate::per(20, Duration::from_secs(20));
    Limits::new()
        .with("chat", per_second)
        .with("group", per_second)
        .with("update", Rate::per(50, Duration::from_secs(60)))
        .with("edit", Rate::spaced(edit_interval))
}

type HmacSha256 = Hmac<Sha256>;

/// How to reach a Slack app.
#[derive(Clone)]
pub struct SlackConfig {
    /// The bot token (`xoxb-…`). Secret: never logged.
    pub bot_token: String,
    /// The app-level token (`xapp-…`, scope `connections:write`): receive over Socket Mode.
    pub app_token: Option<String>,
    /// The signing secret: receive over the Events API (used when there is no app token).
    pub signing_secret: Option<String>,
    /// The Web API (default `https://slack.com/api`).
    pub api_base: String,
    /// The channel's name (default `slack`).
    pub name: String,
    /// How often one call is retried after 429 before giving up (default 3).
    pub max_retries: u32,
    /// The longest `Retry-After` waited out inside one call (default 60 s).
    pub max_retry_after: Duration,
    /// What a longer one does (default: the call fails as rate limited).
    pub over_cap: OverCap,
    /// Least time between two edits of messages in one Slack channel (default 1 s).
    pub edit_interval: Duration,
    /// Socket Mode's liveness: after this long without a frame the socket is pinged, and
    /// after twice this without one it is dropped and opened again (default 60 s). A socket
    /// can stay open while nothing flows (a proxy or NAT that forgot it): this is how the
    /// channel finds out.
    pub socket_idle: Duration,
}

impl SlackConfig {
    /// The defaults, with `bot_token` (set `app_token` or `signing_secret` too).
    pub fn new(bot_token: impl Into<String>) -> Self {
        Self {
            bot_token: bot_token.into(),
            ..Self::default()
        }
    }
}

impl Default for SlackConfig {
    /// The defaults, without tokens.
    fn default() -> Self {
        Self {
            bot_token: String::new(),
            app_token: None,
            signing_secret: None,
            api_base: DEFAULT_API_BASE.into(),
            name: "slack".into(),
            max_retries: 3,
            max_retry_after: Duration::from_secs(60),
            over_cap: OverCap::Fail,
            edit_interval: Duration::from_secs(1),
            socket_idle: Duration::from_secs(60),
        }
    }
}

impl fmt::Debug for SlackConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlackConfig")
            .field("bot_token", &REDACTED)
            .field("app_token", &self.app_token.as_ref().map(|_| REDACTED))
            .field(
                "signing_secret",
                &self.signing_secret.as_ref().map(|_| REDACTED),
            )
            .field("api_base", &self.api_base)
            .field("name", &self.name)
            .field("max_retries", &self.max_retries)
            .field("max_retry_after", &self.max_retry_after)
            .field("over_cap", &self.over_cap)
            .field("edit_interval", &self.edit_interval)
            .field("socket_idle", &self.socket_idle)
            .finish()
    }
}

/// `<@U…>`: a mention of a Slack user, e.g. to write who pressed a button into the edited
/// message ("Approved by <@U123>"). Slack shows it as the user's name and notifies them.
pub fn mention(user_id: &str) -> String {
    format!("<@{user_id}>")
}

/// The `X-Slack-Signature` value of an Events API request: `v0=<hex HMAC-SHA256(secret,
/// "v0:{timestamp}:{body}")>`.
pub fn signature(signing_secret: &str, timestamp: &str, body: &[u8]) -> String {
    let digest = mac_bytes(signing_secret, timestamp, body).unwrap_or_default();
    format!("v0={}", hex::encode(digest))
}

fn mac_bytes(secret: &str, timestamp: &str, body: &[u8]) -> Option<Vec<u8>> {
    // HMAC takes keys of any length; `None` only keeps this panic-free.
    let mut mac = <HmacSha256 as Mac>::new_from_slice(secret.as_bytes()).ok()?;
    mac.update(b"v0:");
    mac.update(timestamp.as_bytes());
    mac.update(b":");
    mac.update(body);
    Some(mac.finalize().into_bytes().to_vec())
}

/// The bot itself, as `auth.test` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct BotIdentity {
    user_id: String,
    user: String,
    team: String,
}

/// What a payload means to the gateway, and what to remember once it is taken.
struct Mapped {
    item: Inbound,
    /// Dedup keys (`event:…`, `msg:{channel}:{ts}`, `press:…`).
    keys: Vec<String>,
    /// `thread:{channel}:{ts}` of a thread this message starts (or joins by mention).
    thread: Option<String>,
}

/// Remembered taken event keys (bounded, oldest dropped first).
#[derive(Default)]
struct Seen {
    order: VecDeque<String>,
    set: HashSet<String>,
}

impl Seen {
    fn contains_any(&self, keys: &[String]) -> bool {
        keys.iter().any(|k| self.set.contains(k))
    }

    fn insert(&mut self, key: String) {
        if self.set.insert(key.clone()) {
            self.order.push_back(key);
        }
        while self.order.len() > SEEN_MEMORY {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
    }

    fn persisted(&self) -> String {
        let skip = self.order.len().saturating_sub(SEEN_PERSISTED);
        self.order
            .iter()
            .skip(skip)
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// How a websocket session ended.
enum SessionEnd {
    Cancelled,
    /// Slack asked to reconnect.
    Disconnect,
    Lost(String),
}

/// A Slack app connection; see the module docs.
pub struct SlackChannel {
    info: ChannelInfo,
    cfg: SlackConfig,
    /// The Web API, its retry policy and the bot's outbox.
    client: PlatformClient,
    me: tokio::sync::OnceCell<BotIdentity>,
    seen: Mutex<Seen>,
    /// Known threads (`thread:{channel}:{ts}`), a cache of the channel state.
    threads: Mutex<HashSet<String>>,
    /// The context `run` got (Events API mode hands items to its sink).
    ctx: Mutex<Option<ChannelContext>>,
    /// Display names by user id, from `users.info` (a cache: names change rarely, and a
    /// stale one only shows in a title or a batch line). `None`: Slack did not say (no
    /// `users:read` scope, an unknown user); asked again after [`NAME_RETRY`].
    names: Mutex<HashMap<String, (Option<String>, std::time::Instant)>>,
}

impl fmt::Debug for SlackChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlackChannel")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

/// A token may go into an HTTP header: visible ASCII only.
fn header_safe(token: &str) -> bool {
    !token.is_empty() && token.bytes().all(|b| b.is_ascii_graphic())
}

#[async_trait]
impl Channel for SlackChannel {
    fn info(&self) -> &ChannelInfo {
        &self.info
    }

    async fn run(
        &self,
        ctx: ChannelContext,
        cancel: CancellationToken,
    ) -> Result<(), ChannelError> {
        self.client.connecting("starting");
        self.load_seen(ctx.state.as_ref()).await;
        let r = match self.cfg.app_token.clone() {
            Some(app_token) => self.run_socket(&ctx, &cancel, &app_token).await,
            None => {
                // Events API: events arrive over HTTP (`inbound_http`).
                *self.ctx.lock() = Some(ctx.clone());
                let r = match self.identify(&cancel).await {
                    Ok(Some(me)) => {
                        tracing::info!(channel = %self.cfg.name, bot = %me.user, user_id = %me.user_id, team = %me.team, "slack bot identified; receiving over the Events API");
                        self.client.connected("events api");
                        cancel.cancelled().await;
                        Ok(())
                    }
                    Ok(None) => Ok(()),
                    Err(e) => Err(e),
                };
                *self.ctx.lock() = None;
                r
            }
        };
        match &r {
            Ok(()) => self.client.stopped(),
            Err(e) => {
                tracing::error!(channel = %self.cfg.name, error = %e, "stopped receiving");
                self.client.failed(&format!("error: {e}"), &e.to_string());
            }
        }
        r
    }

    async fn send(
        &self,
        chat: &ChatRef,
        text: &str,
        buttons: &[Button],
    ) -> Result<String, ChannelError> {
        let blocks = markdown_blocks(text, buttons).map_err(|e| self.other(e))?;
        let mut params = json!({
            "channel": chat.id,
            "text": fallback_text(text),
            "blocks": blocks,
            "unfurl_links": false,
            "unfurl_media": false,
        });
        if chat.kind != ChatKind::Direct
            && let Some(thread) = chat.thread.as_deref().filter(|t| !t.is_empty())
        {
            params["thread_ts"] = json!(thread);
        }
        let answer = self
            .call_on(
                "chat.postMessage",
                &params,
                &self.cfg.bot_token,
                &platform::send_keys(chat),
                None,
            )
            .await?
            .unwrap_or(Value::Null);
        answer
            .get("ts")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| self.other("chat.postMessage: the answer has no ts"))
    }

    async fn edit(
        &self,
        chat: &ChatRef,
        message_id: &str,
        text: &str,
        buttons: &[Button],
    ) -> Result<(), ChannelError> {
        let blocks = markdown_blocks(text, buttons).map_err(|e| self.other(e))?;
        let params = json!({
            "channel": chat.id,
            "ts": message_id,
            "text": fallback_text(text),
            "blocks": blocks,
        });
        let mut keys = platform::edit_keys(&chat.id);
        keys.push("update".into());
        self.call_on(
            "chat.update",
            &params,
            &self.cfg.bot_token,
            &keys,
            Some(&platform::message_key(&chat.id, message_id)),
        )
        .await
        .map(|_| ())
    }

    async fn answer_press(
        &self,
        press: &ButtonPress,
        text: Option<&str>,
    ) -> Result<(), ChannelError> {
        // The envelope ACK (Socket Mode) or the 200 (Events API) already answered the
        // press; Slack shows no toast. The dispatcher edits the message instead.
        tracing::debug!(channel = %self.cfg.name, press_id = %press.press_id, text = ?text, "button press answered by its acknowledgement");
        Ok(())
    }

    async fn tell_presser(&self, press: &ButtonPress, text: &str) -> Result<(), ChannelError> {
        // Only `user` sees it, where they pressed (in the thread, if the prompt is in one).
        let mut params = json!({
            "channel": press.chat.id,
            "user": press.peer.id,
            "text": fallback_text(text),
        });
        if let Some(thread) = &press.chat.thread {
            params["thread_ts"] = json!(thread);
        }
        self.call("chat.postEphemeral", &params).await.map(|_| ())
    }

    /// Slack's upload flow: `files.getUploadURLExternal`, the bytes POSTed to the URL it
    /// gives (on Slack's hosts only), then `files.completeUploadExternal` into the channel
    /// and thread, the caption as its comment. Returns the file's id.
    async fn send_file(&self, chat: &ChatRef, file: &OutgoingFile) -> Result<String, ChannelError> {
        let length = file.bytes.len().to_string();
        let start = self
            .form_call(
                "files.getUploadURLExternal",
                &[
                    ("filename", file.name.as_str()),
                    ("length", length.as_str()),
                ],
                &platform::send_keys(chat),
            )
            .await?;
        let (Some(url), Some(id)) = (
            start.get("upload_url").and_then(Value::as_str),
            start.get("file_id").and_then(Value::as_str),
        ) else {
            return Err(self.other("files.getUploadURLExternal: no upload_url or file_id"));
        };
        let url = crate::platform::file_url_allowed(url, self.client.base(), &["slack.com"])
            .map_err(|e| self.other(e))?;
        let sent = self
            .client
            .http()
            .post(url)
            .body(file.bytes.clone())
            .timeout(std::time::Duration::from_secs(120))
            .send()
            .await
            .map_err(|e| {
                self.other(format!(
                    "uploading {}: {}",
                    file.name,
                    crate::platform::client::describe(e)
                ))
            })?;
        if !sent.status().is_success() {
            return Err(self.other(format!(
                "uploading {}: HTTP {}",
                file.name,
                sent.status().as_u16()
            )));
        }
        let files = json!([{ "id": id, "title": file.name }]).to_string();
        let mut form: Vec<(&str, &str)> = vec![("files", &files), ("channel_id", &chat.id)];
        if chat.kind != ChatKind::Direct
            && let Some(thread) = chat.thread.as_deref().filter(|t| !t.is_empty())
        {
            form.push(("thread_ts", thread));
        }
        if let Some(c) = &file.caption {
            form.push(("initial_comment", c));
        }
        self.form_call(
            "files.completeUploadExternal",
            &form,
            &platform::send_keys(chat),
        )
        .await?;
        Ok(id.to_owned())
    }

    /// The file's `url_private` with the bot token (which Slack requires), only on Slack's
    /// own hosts.
    async fn fetch(&self, a: &Attachment, max_bytes: u64) -> Result<Fetched, String> {
        let url = a.source.as_deref().ok_or("no file URL")?;
        let url = crate::platform::file_url_allowed(
            url,
            self.client.base(),
            &["slack.com", "slack-edge.com"],
        )?;
        crate::platform::client::check_declared(a, max_bytes)?;
        let token = &self.cfg.bot_token;
        let bytes = self
            .client
            .download(
                "url_private",
                |http| http.get(url.clone()).bearer_auth(token),
                max_bytes,
            )
            .await?;
        // Without the token's scope Slack answers its sign-in page (HTML) with 200.
        if bytes.starts_with(b"<!DOCTYPE html") || bytes.starts_with(b"<html") {
            return Err(
                "Slack answered a sign-in page: the bot token lacks the files:read scope".into(),
            );
        }
        let name = a.name.clone().unwrap_or_else(|| format!("{}.bin", a.kind));
        Ok(Fetched { bytes, name })
    }

    async fn test(&self) -> Result<String, ChannelError> {
        let me = self.auth_test().await?;
        // The app-level token too: a wrong xapp- token would otherwise pass here and fail
        // only when serving.
        let socket = match &self.cfg.app_token {
            Some(app_token) => {
                self.call_with("apps.connections.open", &json!({}), app_token)
                    .await?;
                "; Socket Mode token ok"
            }
            None => "; Events API",
        };
        Ok(format!(
            "@{} in {} (bot id {}){socket}",
            me.user, me.team, me.user_id
        ))
    }

    fn status(&self) -> String {
        self.client.status()
    }

    fn health(&self) -> ChannelHealth {
        self.client.health()
    }

    fn http_answer(&self, headers: &axum::http::HeaderMap, body: &[u8]) -> Option<String> {
        // A slash command's answer would be posted in the chat: an empty 200 shows nothing
        // (the dispatcher answers with a message of its own).
        let slash = parse_http_body(headers, body)
            .is_ok_and(|v| v.get("type").and_then(Value::as_str) == Some("slash_command"));
        slash.then(String::new)
    }

    async fn inbound_http(
        &self,
        headers: &axum::http::HeaderMap,
        body: &[u8],
    ) -> Result<Option<Inbound>, InboundHttpError> {
        if !self.events_api() {
            return Err(InboundHttpError::NotSupported);
        }
        if !self.verify(headers, body) {
            return Err(InboundHttpError::Unauthorized);
        }
        let payload = parse_http_body(headers, body).map_err(InboundHttpError::Malformed)?;
        let ctx = self.ctx.lock().clone();
        let state = ctx.as_ref().map(|c| c.state.as_ref());
        let mapped = match payload.get("type").and_then(Value::as_str) {
            Some("event_callback") => {
                let me = self
                    .identity()
                    .await
                    .map_err(|e| InboundHttpError::Malformed(format!("auth.test: {e}")))?;
                self.map_event_callback(&payload, &me, state).await
            }
            Some("block_actions") => self.map_interactive(&payload),
            Some("slash_command") => self.map_slash_command(&payload).await,
            _ => None,
        };
        let Some(mapped) = mapped else {
            return Ok(None);
        };
        if self.is_seen(&mapped.keys) {
            tracing::debug!(channel = %self.cfg.name, keys = ?mapped.keys, "duplicate delivery; ignoring it");
            return Ok(None);
        }
        if let Some(thread) = &mapped.thread {
            self.remember_thread(state, thread).await;
        }
        let Some(ctx) = ctx.as_ref() else {
            // not running: the route hands it to the gateway
            return Ok(Some(mapped.item));
        };
        match ctx.sink.accept(mapped.item.clone()).await {
            Ok(()) => {
                self.remember_taken(state, &mapped.keys).await;
                Ok(None)
            }
            Err(reason) => {
                // let the route try once more; if that fails too, it answers 503 and
                // Slack retries
                tracing::warn!(channel = %self.cfg.name, %reason, "the gateway did not take an event");
                Ok(Some(mapped.item))
            }
        }
    }

    fn http_challenge(&self, headers: &axum::http::HeaderMap, body: &[u8]) -> Option<String> {
        // Only in Events API mode, and only for a correctly signed request: Slack signs the
        // verification too, and an unsigned echo endpoint helps nobody.
        if self.cfg.app_token.is_some() || self.cfg.signing_secret.is_none() {
            return None;
        }
        if !self.verify(headers, body) {
            return None;
        }
        let v: Value = serde_json::from_slice(body).ok()?;
        if v.get("type").and_then(Value::as_str) != Some("url_verification") {
            return None;
        }
        v.get("challenge")
            .and_then(Value::as_str)
            .map(str::to_owned)
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod prop_tests;
