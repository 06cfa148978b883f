//! The Discord channel: a bot on the Discord Gateway (websocket) and REST API v10.
//!
//! - [`Channel::run`] asks `GET {api_base}/gateway/bot` where the Gateway is (unless
//!   [`DiscordConfig::gateway_url`] is set), connects to `{url}/?v=10&encoding=json`, waits
//!   for HELLO (op 10) and heartbeats (op 1 with the last sequence number) every
//!   `heartbeat_interval`, the first after `interval × random jitter`. A heartbeat that is
//!   not ACKed (op 11) by the time the next one is due means a zombie connection: it is
//!   closed and resumed. A heartbeat request from Discord (op 1) is answered at once.
//! - A new session IDENTIFYs (op 2) with the intents GUILDS, GUILD_MESSAGES,
//!   DIRECT_MESSAGES and MESSAGE_CONTENT. READY's `session_id`, `resume_gateway_url` and
//!   the bot's user id are kept in memory and in the channel state (keys [`SESSION_KEY`],
//!   [`RESUME_URL_KEY`], [`BOT_ID_KEY`]); the sequence number of the last dispatch handled
//!   is stored under [`SEQ_KEY`] once the sink has accepted it (and now and then for
//!   dispatches that carry nothing for us).
//! - After a dropped or closed connection, a RECONNECT (op 7) or a sink failure, the
//!   channel connects to `resume_gateway_url` and RESUMEs (op 6) with the last handled
//!   sequence number: Discord replays what came after it, so nothing is lost; dispatches
//!   at or below that number are skipped, so nothing is handed in twice. This also works
//!   across restarts while Discord keeps the session (the channel closes with code 4000 on
//!   shutdown, which keeps it resumable). INVALID_SESSION (op 9) `d:false`, and the close
//!   codes 4007/4009, start a new session after 1–5 s. The close codes 4004 (bad token) and
//!   4010–4014 (sharding, API version, intents) end `run` with an error. Failed connects
//!   back off 1 s doubling to 30 s; `cancel` stops everything.
//! - `MESSAGE_CREATE`: direct messages (no `guild_id`) always count; guild messages count
//!   when they mention the bot (`mentions`, `<@ID>`, `<@!ID>`), reply to it, or are in one
//!   of [`DiscordConfig::channels`] (or a thread under one). Messages of other guilds (when
//!   [`DiscordConfig::guilds`] is set), of bots and of webhooks are ignored. The mention is
//!   stripped. A message in a thread (learned from THREAD_CREATE/GUILD_CREATE, or a
//!   thread `channel_type`) is in a [`ChatKind::Thread`] chat with `thread = channel id`.
//!   (A message's `thread` field names a thread started *from* it; the message itself is
//!   in the parent channel, so that field does not make it a thread message.)
//! - `INTERACTION_CREATE` of type 3 (a button): once the sink has accepted the
//!   [`ButtonPress`], the interaction is acknowledged with `{"type":6}`
//!   (DEFERRED_UPDATE_MESSAGE) right away, well within Discord's 3 s; so
//!   [`Channel::answer_press`] has nothing left to do.
//! - Replies: [`Channel::send`] has no reply-to parameter, so the channel remembers, per
//!   chat, the id of the last inbound message not replied to yet; the first message sent
//!   to that chat after it carries `message_reference: {message_id, fail_if_not_exists:
//!   false}` (a reply to the user's message), later ones don't.
//! - REST: `POST /channels/{id}/messages` (`content`, buttons as action rows of up to 5
//!   buttons, the first primary), `PATCH /channels/{id}/messages/{mid}` (edits in one chat
//!   spaced by [`DiscordConfig::edit_interval`]); mentions in sent text never ping anyone
//!   (`allowed_mentions.parse = []`). 429 waits `retry_after` (or `Retry-After`; at most
//!   60 s) up to [`DiscordConfig::max_retries`] times, and a bucket that reports
//!   `X-RateLimit-Remaining: 0` is waited out before its next call.
//!
//! The bot token (and an interaction's token) is a secret: it is never logged, and it is
//! removed from every error text.

use crate::platform::{
    self, Answer, BOT, Call, Limits, OverCap, PlatformClient, REDACTED, Rate, RetryPolicy, Verdict,
    pause,
};
use crate::util::{Backoff, lock};
use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use futures::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_util::sync::CancellationToken;

use crate::channel::{
    Attachment, Button, ButtonPress, Channel, ChannelContext, ChannelError, ChatKind, ChatRef,
    Inbound, InboundMessage, Peer,
};

/// Discord's longest message content.
pub const MAX_CHARS: usize = 2000;
/// The public REST API.
pub const DEFAULT_API_BASE: &str = "https://discord.com/api/v10";
/// GUILDS | GUILD_MESSAGES | DIRECT_MESSAGES | MESSAGE_CONTENT.
pub const INTENTS: u64 = 1 | 512 | 4096 | 32768;
/// State keys of the resumable session.
pub const SESSION_KEY: &str = "session_id";
pub const RESUME_URL_KEY: &str = "resume_gateway_url";
pub const SEQ_KEY: &str = "seq";
pub const BOT_ID_KEY: &str = "bot_user_id";
/// `ctx.state` key of the known threads (thread id → parent channel id, JSON).
pub const THREADS_KEY: &str = "threads";

/// Longest `custom_id` of a button.
const MAX_CUSTOM_ID: usize = 100;
/// How long an interaction's token takes follow-ups (Discord's 15 minutes).
const INTERACTION_TOKEN_TTL: Duration = Duration::from_secs(15 * 60);
/// Message flag: only the interaction's user sees it.
const EPHEMERAL: u64 = 1 << 6;
/// Longest label of a button (longer ones are cut).
const MAX_LABEL: usize = 80;
/// Buttons per action row, and rows per message.
const ROW_LEN: usize = 5;
const MAX_ROWS: usize = 5;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long HELLO may take after the socket opened.
const HELLO_TIMEOUT: Duration = Duration::from_secs(20);
/// Discord gives 3 s to acknowledge an interaction.
const INTERACTION_TIMEOUT: Duration = Duration::from_secs(3);
/// A connection that lasted this long was fine: the next one starts without back-off.
const STABLE: Duration = Duration::from_secs(5);
/// Longest wait for a bucket to reset that is believed.
const MAX_BUCKET_WAIT: Duration = Duration::from_secs(60);
/// Dispatches that carry nothing for us store their sequence number at most this often.
const SEQ_STORE_INTERVAL: Duration = Duration::from_secs(10);
/// Close code that keeps the session resumable (1000/1001 would end it).
const CLOSE_RESUMABLE: u16 = 4000;

/// Discord's published limits: 50 requests a second per bot (the global limit); per route
/// the `X-RateLimit-*` buckets it reports (see `note_bucket`); edits in one chat at most one
/// per `edit_interval`.
fn limits(edit_interval: Duration) -> Limits {
    Limits::new()
        .with("bot", Rate::per(50, Duration::from_secs(1)))
        .with("edit", Rate::spaced(edit_interval))
}

/// The outbox key of a REST rate-limit bucket.
fn bucket_key(bucket: &str) -> String {
    format!("bucket:{bucket}")
}

/// How to reach a Discord bot.
#[derive(Clone)]
pub struct DiscordConfig {
    /// The bot token (Developer Portal → Bot). Secret: never logged.
    pub token: String,
    /// The REST API (default `https://discord.com/api/v10`).
    pub api_base: String,
    /// The Gateway URL; `None` asks `GET /gateway/bot`.
    pub gateway_url: Option<String>,
    /// The channel's name (default `discord`).
    pub name: String,
    /// When not empty, only these guild ids count (DMs always do).
    pub guilds: Vec<String>,
    /// Guild channel ids where messages count without a mention.
    pub channels: Vec<String>,
    /// How often one REST call is retried after 429 before giving up (default 3).
    pub max_retries: u32,
    /// The longest `retry_after` waited out inside one call (default 60 s).
    pub max_retry_after: Duration,
    /// What a longer one does (default: the call fails as rate limited).
    pub over_cap: OverCap,
    /// Least time between two edits of messages in one chat (default 1 s).
    pub edit_interval: Duration,
}

impl DiscordConfig {
    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_retries: self.max_retries,
            max_retry_after: self.max_retry_after,
            over_cap: self.over_cap,
            ..RetryPolicy::default()
        }
    }

    /// The defaults, with `token`.
    pub fn new(token: impl Into<String>) -> Self {
        Self {
            token: token.into(),
            ..Self::default()
        }
    }
}

impl Default for DiscordConfig {
    /// The defaults, without a token.
    fn default() -> Self {
        Self {
            token: String::new(),
            api_base: DEFAULT_API_BASE.into(),
            gateway_url: None,
            name: "discord".into(),
            guilds: Vec::new(),
            channels: Vec::new(),
            max_retries: 3,
            max_retry_after: Duration::from_secs(60),
            over_cap: OverCap::Fail,
            edit_interval: Duration::from_secs(1),
        }
    }
}

impl fmt::Debug for DiscordConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DiscordConfig")
            .field("token", &REDACTED)
            .field("api_base", &self.api_base)
            .field("gateway_url", &self.gateway_url)
            .field("name", &self.name)
            .field("guilds", &self.guilds)
            .field("channels", &self.channels)
            .field("max_retries", &self.max_retries)
            .field("max_retry_after", &self.max_retry_after)
            .field("over_cap", &self.over_cap)
            .field("edit_interval", &self.edit_interval)
            .finish()
    }
}

/// A Discord bot connection; see the module docs.
pub struct DiscordChannel {
    cfg: DiscordConfig,
    /// The REST API, its retry policy and the bot's outbox (which also holds a bucket
    /// that reported no calls left until it resets).
    client: PlatformClient,
    /// Per chat id: the last inbound message not replied to yet.
    reply_to: Mutex<HashMap<String, String>>,
    /// Known thread channel ids → their parent channel id.
    threads: Mutex<HashMap<String, String>>,
    /// The bot's user id (from READY or the stored session).
    bot_id: Mutex<Option<String>>,
    /// The Gateway URL from `GET /gateway/bot`, asked once.
    gateway: Mutex<Option<String>>,
    /// Per press (interaction id): its application id and token, to send it an ephemeral
    /// follow-up. Memory only (a token is a credential, valid 15 minutes): after a restart
    /// a refused press is still refused, just without the private note.
    /// Also whether the press was acknowledged yet: a follow-up must come after that.
    press_tokens: Mutex<HashMap<String, PressToken>>,
}

impl fmt::Debug for DiscordChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DiscordChannel")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

/// What answering a press later takes (see `DiscordChannel::press_tokens`).
#[derive(Clone)]
struct PressToken {
    application_id: String,
    token: String,
    at: Instant,
    acked: bool,
}

/// An id as it may appear in a URL path (Discord's are numeric snowflakes).
fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
}

/// One REST request.
struct Req {
    method: reqwest::Method,
    /// Below `api_base`, e.g. `/channels/1/messages`.
    path: String,
    /// For errors and logs (no secrets), e.g. `POST /channels/1/messages`.
    label: String,
    /// The rate-limit bucket.
    bucket: String,
    body: Option<Value>,
    /// An extra secret in the path (an interaction token).
    secret: Option<String>,
    /// The outbox keys besides the bucket's (default: the bot's).
    keys: Vec<String>,
    /// The message an edit is of (pending edits of one message coalesce).
    edit_of: Option<String>,
}

impl Req {
    fn new(method: reqwest::Method, path: String, body: Option<Value>) -> Self {
        let label = format!("{method} {path}");
        Self {
            method,
            bucket: label.clone(),
            label,
            path,
            body,
            secret: None,
            keys: vec![BOT.to_owned()],
            edit_of: None,
        }
    }
}

impl DiscordChannel {
    /// Checks the configuration and builds the HTTP client (no network call).
    pub fn new(cfg: DiscordConfig) -> Result<Self, ChannelError> {
        let other = |reason: String| ChannelError::Other {
            channel: cfg.name.clone(),
            reason,
        };
        let token = cfg.token.trim();
        let token = token.strip_prefix("Bot ").unwrap_or(token).trim();
        if token.is_empty() {
            return Err(other("no bot token".into()));
        }
        if token
            .chars()
            .any(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
        {
            return Err(other(
                "not a bot token (expected the token from the Developer Portal's Bot page)".into(),
            ));
        }
        let base = cfg.api_base.trim().trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(other(format!(
                "api_base {base:?}: expected an http:// or https:// URL"
            )));
        }
        if let Some(url) = &cfg.gateway_url
            && !(url.starts_with("ws://") || url.starts_with("wss://"))
        {
            return Err(other(format!(
                "gateway_url {url:?}: expected a ws:// or wss:// URL"
            )));
        }
        if cfg.edit_interval > Duration::from_secs(3600) {
            return Err(other("edit_interval: at most one hour".into()));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!(
                "DiscordBot (https://example.invalid/switchboard, ",
                env!("CARGO_PKG_VERSION"),
                ")"
            ))
            .build()
            .map_err(|e| other(format!("HTTP client: {e}")))?;
        let cfg = DiscordConfig {
            token: token.to_owned(),
            ..cfg
        };
        let client = PlatformClient::new(
            cfg.name.clone(),
            &base,
            http,
            vec![cfg.token.clone()],
            cfg.retry_policy(),
            limits(cfg.edit_interval),
        );
        Ok(Self {
            cfg,
            client,
            reply_to: Mutex::new(HashMap::new()),
            threads: Mutex::new(HashMap::new()),
            bot_id: Mutex::new(None),
            gateway: Mutex::new(None),
            press_tokens: Mutex::new(HashMap::new()),
        })
    }

    /// The configuration (its `Debug` hides the token).
    pub fn config(&self) -> &DiscordConfig {
        &self.cfg
    }

    fn set_status(&self, status: impl Into<String>) {
        self.client.set_status(status);
    }

    fn other(&self, reason: impl Into<String>) -> ChannelError {
        self.client.other(reason)
    }

    /// Notes `X-RateLimit-Remaining: 0` / `X-RateLimit-Reset-After` of an answer: the
    /// bucket is held in the outbox until it resets.
    fn note_bucket(&self, bucket: &str, headers: &reqwest::header::HeaderMap) {
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let empty = header("x-ratelimit-remaining").is_some_and(|r| r.trim() == "0");
        let reset = header("x-ratelimit-reset-after")
            .and_then(|r| r.trim().parse::<f64>().ok())
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
            .map(|d| d.min(MAX_BUCKET_WAIT));
        let key = bucket_key(bucket);
        match (empty, reset) {
            (true, Some(d)) => self.client.outbox().hold(&key, d),
            _ => self.client.outbox().release(&key),
        }
    }

    /// What a REST answer means.
    fn read(&self, req: &Req, answer: Answer) -> Verdict<Value> {
        let secret = req.secret.as_deref();
        let status = answer.status;
        self.note_bucket(&req.bucket, &answer.headers);
        let json = answer.json();
        if status.is_success() {
            return Verdict::Done(json.unwrap_or(Value::Null));
        }
        if status == reqwest::StatusCode::TOO_MANY_REQUESTS {
            let wait = json
                .as_ref()
                .and_then(|j| j.get("retry_after"))
                .and_then(Value::as_f64)
                .and_then(|s| Duration::try_from_secs_f64(s.max(0.0)).ok())
                .or_else(|| answer.retry_after());
            if json
                .as_ref()
                .and_then(|j| j.get("global"))
                .and_then(Value::as_bool)
                == Some(true)
            {
                let d = wait.unwrap_or(self.client.policy().default_retry_after);
                self.client.outbox().hold(BOT, d);
            }
            return Verdict::RateLimited(wait);
        }
        if status.is_server_error() {
            return Verdict::Transient(self.client.server_error(&req.label, status));
        }
        let message = json
            .as_ref()
            .and_then(|j| j.get("message"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let code = json
            .as_ref()
            .and_then(|j| j.get("code"))
            .and_then(Value::as_u64)
            .filter(|c| *c != 0);
        let description = match (message, code) {
            (Some(m), Some(c)) => format!("{m} (Discord code {c})"),
            (Some(m), None) => m,
            (None, _) => format!("HTTP {status}; the answer is not a Discord API error"),
        };
        Verdict::Failed(ChannelError::Api {
            channel: self.cfg.name.clone(),
            method: req.label.clone(),
            code: status.as_u16(),
            description: self.client.redact_also(&description, secret),
        })
    }

    /// One REST call, retried as the policy says (`once`: not at all, with `timeout`).
    /// `None` when it was an edit that a newer edit of the same message took the place of.
    async fn call_on(
        &self,
        req: &Req,
        timeout: Duration,
        once: bool,
    ) -> Result<Option<Value>, ChannelError> {
        let mut keys = req.keys.clone();
        if !once {
            keys.push(bucket_key(&req.bucket));
        }
        let call = Call {
            label: &req.label,
            keys: &keys,
            timeout,
            policy: once.then(|| self.client.policy().once()),
        };
        let build = |http: &reqwest::Client, base: &str| {
            let mut builder = http
                .request(req.method.clone(), format!("{base}{}", req.path))
                .header(
                    reqwest::header::AUTHORIZATION,
                    format!("Bot {}", self.cfg.token),
                );
            if let Some(body) = &req.body {
                builder = builder.json(body);
            }
            builder
        };
        let read = |answer| self.read(req, answer);
        match &req.edit_of {
            Some(message) => self.client.edit(call, message, build, read).await,
            None => self
                .client
                .call_also(call, req.secret.as_deref(), build, read)
                .await
                .map(Some),
        }
    }

    /// One REST call, retried as the policy says.
    async fn call(&self, req: &Req) -> Result<Value, ChannelError> {
        Ok(self
            .call_on(req, CALL_TIMEOUT, false)
            .await?
            .unwrap_or(Value::Null))
    }

    /// One REST call, without retries, within `timeout`.
    async fn call_once(&self, req: &Req, timeout: Duration) -> Result<Value, ChannelError> {
        Ok(self
            .call_on(req, timeout, true)
            .await?
            .unwrap_or(Value::Null))
    }

    async fn get_me(&self) -> Result<(String, String), ChannelError> {
        let me = self
            .call(&Req::new(reqwest::Method::GET, "/users/@me".into(), None))
            .await?;
        let id = me.get("id").and_then(Value::as_str);
        let username = me.get("username").and_then(Value::as_str);
        match (id, username) {
            (Some(id), Some(username)) => Ok((id.to_owned(), username.to_owned())),
            _ => Err(self.other("GET /users/@me: the answer has no id or username")),
        }
    }

    /// The Gateway URL: configured, or asked once from `GET /gateway/bot`.
    async fn gateway_url(&self) -> Result<String, ChannelError> {
        if let Some(url) = &self.cfg.gateway_url {
            return Ok(url.clone());
        }
        if let Some(url) = lock(&self.gateway).clone() {
            return Ok(url);
        }
        let answer = self
            .call(&Req::new(reqwest::Method::GET, "/gateway/bot".into(), None))
            .await?;
        let url = answer
            .get("url")
            .and_then(Value::as_str)
            .filter(|u| u.starts_with("ws://") || u.starts_with("wss://"))
            .ok_or_else(|| self.other("GET /gateway/bot: the answer has no ws:// or wss:// url"))?
            .to_owned();
        *lock(&self.gateway) = Some(url.clone());
        Ok(url)
    }

    /// Action rows of buttons (the first primary, the others secondary).
    fn components(&self, buttons: &[Button]) -> Result<Value, ChannelError> {
        if buttons.len() > ROW_LEN * MAX_ROWS {
            return Err(self.other(format!(
                "{} buttons: Discord allows at most {}",
                buttons.len(),
                ROW_LEN * MAX_ROWS
            )));
        }
        let mut rows = Vec::new();
        for (r, chunk) in buttons.chunks(ROW_LEN).enumerate() {
            let mut row = Vec::with_capacity(chunk.len());
            for (i, b) in chunk.iter().enumerate() {
                let len = b.data.chars().count();
                if len == 0 || len > MAX_CUSTOM_ID {
                    return Err(self.other(format!(
                        "button {:?}: custom_id must be 1 to {MAX_CUSTOM_ID} characters (is {len})",
                        b.text
                    )));
                }
                let label: String = b.text.chars().take(MAX_LABEL).collect();
                if label.trim().is_empty() {
                    return Err(self.other("a button without a label"));
                }
                let style = if r == 0 && i == 0 { 1 } else { 2 };
                row.push(json!({"type": 2, "style": style, "label": label, "custom_id": b.data}));
            }
            rows.push(json!({"type": 1, "components": row}));
        }
        Ok(Value::Array(rows))
    }

    fn target<'a>(&self, chat: &'a ChatRef) -> Result<&'a str, ChannelError> {
        let id = chat.thread.as_deref().unwrap_or(&chat.id);
        if valid_id(id) {
            Ok(id)
        } else {
            Err(self.other(format!("{id:?} is not a Discord channel id")))
        }
    }

    fn bot_id(&self) -> Option<String> {
        lock(&self.bot_id).clone()
    }

    /// What a MESSAGE_CREATE means to the gateway; `None` to skip it.
    fn map_message(&self, m: ApiMessage, seq: Option<u64>) -> Option<InboundMessage> {
        if m.author.bot || m.webhook_id.is_some() || !matches!(m.kind, 0 | 19) {
            return None;
        }
        let bot_id = self.bot_id().unwrap_or_default();
        if m.author.id == bot_id {
            return None;
        }
        let (chat, addressed) = match &m.guild_id {
            None => (
                ChatRef {
                    id: m.channel_id.clone(),
                    kind: ChatKind::Direct,
                    thread: None,
                },
                true,
            ),
            Some(guild) => {
                if !self.cfg.guilds.is_empty() && !self.cfg.guilds.contains(guild) {
                    return None;
                }
                let mentioned = !bot_id.is_empty()
                    && (m.mentions.iter().any(|u| u.id == bot_id)
                        || m.content.contains(&format!("<@{bot_id}>"))
                        || m.content.contains(&format!("<@!{bot_id}>"))
                        || m.referenced_message
                            .as_ref()
                            .and_then(|r| r.author.as_ref())
                            .is_some_and(|a| a.id == bot_id));
                let parent = lock(&self.threads).get(&m.channel_id).cloned();
                let is_thread = parent.is_some() || matches!(m.channel_type, Some(10..=12));
                let configured = self.cfg.channels.contains(&m.channel_id)
                    || parent
                        .as_ref()
                        .is_some_and(|p| self.cfg.channels.contains(p));
                if !mentioned && !configured {
                    return None;
                }
                let chat = if is_thread {
                    ChatRef {
                        id: m.channel_id.clone(),
                        kind: ChatKind::Thread,
                        thread: Some(m.channel_id.clone()),
                    }
                } else {
                    ChatRef {
                        id: m.channel_id.clone(),
                        kind: ChatKind::Group,
                        thread: None,
                    }
                };
                (chat, mentioned)
            }
        };
        let attachments: Vec<Attachment> = m.attachments.iter().map(attachment).collect();
        if m.content.trim().is_empty() && attachments.is_empty() {
            // nothing to hand in (without the MESSAGE_CONTENT intent, content is empty)
            return None;
        }
        let text = strip_mention(&m.content, &bot_id);
        let mut meta = json!({"message_id": m.id, "channel_id": m.channel_id});
        if let Some(g) = &m.guild_id {
            meta["guild_id"] = json!(g);
        }
        if let Some(s) = seq {
            meta["seq"] = json!(s);
        }
        Some(InboundMessage {
            channel: self.cfg.name.clone(),
            peer: peer(&m.author),
            chat,
            text,
            message_id: m.id,
            addressed,
            attachments,
            meta,
        })
    }

    /// A button press (interaction type 3) and its token; `None` to skip it.
    fn map_press(&self, i: ApiInteraction) -> Option<(ButtonPress, String)> {
        if i.kind != 3 {
            return None;
        }
        if let Some(g) = &i.guild_id
            && !self.cfg.guilds.is_empty()
            && !self.cfg.guilds.contains(g)
        {
            return None;
        }
        let user = i.member.and_then(|m| m.user).or(i.user)?;
        if user.bot {
            return None;
        }
        let channel_id = i.channel_id?;
        let data = i.data?.custom_id?;
        let message_id = i.message?.id;
        let chat = match &i.guild_id {
            None => ChatRef {
                id: channel_id,
                kind: ChatKind::Direct,
                thread: None,
            },
            Some(_) if lock(&self.threads).contains_key(&channel_id) => ChatRef {
                id: channel_id.clone(),
                kind: ChatKind::Thread,
                thread: Some(channel_id),
            },
            Some(_) => ChatRef {
                id: channel_id,
                kind: ChatKind::Group,
                thread: None,
            },
        };
        if let Some(app) = i.application_id.filter(|a| valid_id(a)) {
            let mut tokens = lock(&self.press_tokens);
            tokens.retain(|_, t| t.at.elapsed() < INTERACTION_TOKEN_TTL);
            tokens.insert(
                i.id.clone(),
                PressToken {
                    application_id: app,
                    token: i.token.clone(),
                    at: Instant::now(),
                    acked: false,
                },
            );
        }
        Some((
            ButtonPress {
                channel: self.cfg.name.clone(),
                press_id: i.id,
                peer: peer(&user),
                chat,
                message_id,
                data,
            },
            i.token,
        ))
    }

    /// Acknowledges an interaction (DEFERRED_UPDATE_MESSAGE), once, within Discord's 3 s.
    /// An ephemeral follow-up (only the presser sees it) to an acknowledged interaction.
    async fn follow_up(&self, press_id: &str, text: &str) -> Result<(), ChannelError> {
        // The dispatcher may get to the press before it is acknowledged: wait for that.
        let mut waited = Duration::ZERO;
        let entry = loop {
            let entry = lock(&self.press_tokens)
                .get(press_id)
                .filter(|t| t.at.elapsed() < INTERACTION_TOKEN_TTL)
                .cloned();
            match entry {
                Some(t) if !t.acked && waited < INTERACTION_TIMEOUT => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    waited += Duration::from_millis(50);
                }
                other => break other,
            }
        };
        let Some(PressToken {
            application_id: app,
            token,
            ..
        }) = entry
        else {
            tracing::debug!(channel = %self.cfg.name, press = %press_id, "no interaction token for this press (expired, or before a restart); no private note");
            return Ok(());
        };
        if token.is_empty() || token.contains(['/', '?', '#']) {
            return Err(self.other("an interaction with a malformed token"));
        }
        let body = json!({
            "content": crate::text::truncate(text, MAX_CHARS),
            "flags": EPHEMERAL,
        });
        let mut req = Req::new(
            reqwest::Method::POST,
            format!("/webhooks/{app}/{token}"),
            Some(body),
        );
        req.label = format!("POST /webhooks/{app}");
        req.bucket = "POST /webhooks".into();
        req.secret = Some(token);
        self.call_once(&req, INTERACTION_TIMEOUT).await.map(|_| ())
    }

    async fn ack_interaction(&self, id: &str, token: &str) -> Result<(), ChannelError> {
        if !valid_id(id) || token.is_empty() || token.contains(['/', '?', '#']) {
            return Err(self.other("an interaction with a malformed id or token"));
        }
        let mut req = Req::new(
            reqwest::Method::POST,
            format!("/interactions/{id}/{token}/callback"),
            Some(json!({"type": 6})),
        );
        req.label = format!("POST /interactions/{id}/callback");
        req.bucket = "POST /interactions".into();
        req.secret = Some(token.to_owned());
        self.call_once(&req, INTERACTION_TIMEOUT).await?;
        if let Some(t) = lock(&self.press_tokens).get_mut(id) {
            t.acked = true;
        }
        Ok(())
    }

    fn note_threads(&self, t: &str, d: &Value) {
        let mut threads = lock(&self.threads);
        if threads.len() > 10_000 {
            threads.clear();
        }
        let mut add = |c: &Value| {
            if let (Some(id), Some(parent)) = (
                c.get("id").and_then(Value::as_str),
                c.get("parent_id").and_then(Value::as_str),
            ) && matches!(c.get("type").and_then(Value::as_u64), Some(10..=12))
            {
                threads.insert(id.to_owned(), parent.to_owned());
            }
        };
        match t {
            "THREAD_CREATE" | "THREAD_UPDATE" => add(d),
            "GUILD_CREATE" | "THREAD_LIST_SYNC" => {
                for c in d
                    .get("threads")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    add(c);
                }
            }
            "THREAD_DELETE" => {
                if let Some(id) = d.get("id").and_then(Value::as_str) {
                    threads.remove(id);
                }
            }
            _ => {}
        }
    }

    fn remember_inbound(&self, chat: &str, message_id: &str) {
        let mut map = lock(&self.reply_to);
        if map.len() > 4096 {
            map.clear();
        }
        map.insert(chat.to_owned(), message_id.to_owned());
    }
}

/// 1–5 s, as Discord asks before a new IDENTIFY after INVALID_SESSION.
fn invalid_session_wait() -> Duration {
    Duration::from_millis(rand::random_range(1000..=5000))
}

fn peer(u: &ApiUser) -> Peer {
    let name = u
        .global_name
        .clone()
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| u.username.clone());
    Peer {
        id: u.id.clone(),
        name,
        username: Some(u.username.clone()).filter(|n| !n.is_empty()),
    }
}

fn attachment(a: &ApiAttachment) -> Attachment {
    let ct = a.content_type.as_deref().unwrap_or_default();
    let kind = if ct.starts_with("image/") {
        "photo"
    } else if ct.starts_with("video/") {
        "video"
    } else if ct.starts_with("audio/") {
        "audio"
    } else {
        "document"
    };
    Attachment {
        kind: kind.into(),
        name: a.filename.clone(),
        size: a.size,
    }
}

/// `text` without `<@BOTID>` / `<@!BOTID>`, tidied ("<@1>, hi" → "hi").
fn strip_mention(text: &str, bot_id: &str) -> String {
    if bot_id.is_empty() {
        return text.trim().to_owned();
    }
    let plain = format!("<@{bot_id}>");
    let nick = format!("<@!{bot_id}>");
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut found = false;
    loop {
        let next = [&plain, &nick]
            .iter()
            .filter_map(|p| rest.find(p.as_str()).map(|i| (i, p.len())))
            .min();
        let Some((i, len)) = next else { break };
        found = true;
        out.push_str(&rest[..i]);
        rest = &rest[i + len..];
        if (out.is_empty() || out.ends_with(char::is_whitespace))
            && rest.starts_with(char::is_whitespace)
        {
            rest = rest.trim_start_matches(char::is_whitespace);
        }
    }
    out.push_str(rest);
    let out = out.trim();
    if found && let Some(s) = out.strip_prefix([',', ':']) {
        return s.trim().to_owned();
    }
    out.to_owned()
}

// ---- the Gateway ----

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A session that can be resumed.
#[derive(Debug, Clone)]
struct Session {
    id: String,
    resume_url: String,
}

/// How a connection ended.
enum End {
    Cancelled,
    /// Connect again; resume when a session is known.
    Reconnect {
        established: bool,
        reason: String,
    },
    /// The session is gone: wait, then IDENTIFY afresh.
    Fresh {
        wait: Duration,
        reason: String,
    },
    Fatal(ChannelError),
}

/// The state of one `run`.
struct Runner<'a> {
    ch: &'a DiscordChannel,
    ctx: &'a ChannelContext,
    cancel: &'a CancellationToken,
    session: Option<Session>,
    /// The last dispatch handled (handed in, or skipped): what RESUME asks after.
    seq: Option<u64>,
    /// The last dispatch received (what heartbeats carry).
    last_seq: Option<u64>,
    /// What the state holds under [`SEQ_KEY`], and when it was written.
    stored_seq: Option<u64>,
    stored_at: Instant,
}

#[derive(Debug, Deserialize)]
struct GatewayPayload {
    op: u64,
    #[serde(default)]
    d: Value,
    #[serde(default)]
    s: Option<u64>,
    #[serde(default)]
    t: Option<String>,
}

fn text_frame(v: &Value) -> Message {
    Message::Text(v.to_string().into())
}

fn close_frame(code: u16) -> Message {
    Message::Close(Some(CloseFrame {
        code: CloseCode::from(code),
        reason: "".into(),
    }))
}

/// `{url}/?v=10&encoding=json`.
fn connect_url(url: &str) -> String {
    let base = url.split('?').next().unwrap_or(url).trim_end_matches('/');
    format!("{base}/?v=10&encoding=json")
}

impl Runner<'_> {
    fn name(&self) -> &str {
        &self.ch.cfg.name
    }

    async fn load(&mut self) {
        let state = &self.ctx.state;
        let get = |key: &'static str| async move {
            state.get(key).await.filter(|v| !v.trim().is_empty())
        };
        let session = get(SESSION_KEY).await;
        let url = get(RESUME_URL_KEY).await;
        let seq = get(SEQ_KEY)
            .await
            .and_then(|s| s.trim().parse::<u64>().ok());
        let bot = get(BOT_ID_KEY).await;
        if let Some(threads) = get(THREADS_KEY)
            .await
            .and_then(|v| serde_json::from_str::<HashMap<String, String>>(&v).ok())
        {
            lock(&self.ch.threads).extend(threads);
        }
        if let (Some(id), Some(resume_url), Some(seq), Some(bot)) = (session, url, seq, bot)
            && (resume_url.starts_with("ws://") || resume_url.starts_with("wss://"))
        {
            tracing::info!(channel = %self.name(), seq, "resuming the stored Discord session");
            *lock(&self.ch.bot_id) = Some(bot);
            self.session = Some(Session { id, resume_url });
            self.seq = Some(seq);
            self.last_seq = Some(seq);
            self.stored_seq = Some(seq);
        }
    }

    async fn store(&self, key: &str, value: &str) {
        if let Err(reason) = self.ctx.state.set(key, value).await {
            tracing::warn!(channel = %self.name(), key, %reason, "cannot store the Discord session state");
        }
    }

    async fn store_seq(&mut self) {
        if let Some(seq) = self.seq
            && self.stored_seq != Some(seq)
        {
            self.store(SEQ_KEY, &seq.to_string()).await;
            self.stored_seq = Some(seq);
            self.stored_at = Instant::now();
        }
    }

    async fn forget_session(&mut self) {
        self.session = None;
        self.seq = None;
        self.last_seq = None;
        self.stored_seq = None;
        self.store(SESSION_KEY, "").await;
        self.store(SEQ_KEY, "").await;
    }

    async fn run(&mut self) -> Result<(), ChannelError> {
        self.load().await;
        let mut backoff = Backoff::default();
        let mut fresh_backoff = Backoff::default();
        let mut failed_resumes = 0u32;
        loop {
            if self.cancel.is_cancelled() {
                return Ok(());
            }
            let url = match &self.session {
                Some(s) => s.resume_url.clone(),
                None => {
                    let r = tokio::select! {
                        biased;
                        _ = self.cancel.cancelled() => return Ok(()),
                        r = self.ch.gateway_url() => r,
                    };
                    match r {
                        Ok(url) => url,
                        Err(e) if is_fatal(&e) => return Err(e),
                        Err(e) => {
                            let wait = match &e {
                                ChannelError::RateLimited {
                                    retry_after_secs, ..
                                } => Duration::from_secs(*retry_after_secs),
                                _ => backoff.next_wait(),
                            };
                            tracing::warn!(channel = %self.name(), error = %e, ?wait, "cannot find the Discord gateway; retrying");
                            self.ch.set_status(format!("error: {e}"));
                            if !pause(wait, self.cancel).await {
                                return Ok(());
                            }
                            continue;
                        }
                    }
                }
            };
            self.ch.set_status(if self.session.is_some() {
                "resuming"
            } else {
                "connecting"
            });
            let started = Instant::now();
            let end = self.connection(&url).await;
            self.store_seq().await;
            match end {
                End::Cancelled => return Ok(()),
                End::Fatal(e) => return Err(e),
                End::Reconnect {
                    established,
                    reason,
                } => {
                    // A stored resume URL that cannot be reached again and again: forget the
                    // session and start over at the URL the API gives.
                    if !established && self.session.is_some() {
                        failed_resumes += 1;
                        if failed_resumes >= 5 {
                            tracing::warn!(channel = %self.name(), "cannot reach the resume URL; identifying afresh");
                            self.forget_session().await;
                            failed_resumes = 0;
                        }
                    } else if established {
                        failed_resumes = 0;
                    }
                    let wait = if established && started.elapsed() >= STABLE {
                        backoff.reset();
                        Duration::ZERO
                    } else {
                        backoff.next_wait()
                    };
                    tracing::info!(channel = %self.name(), %reason, ?wait, "Discord gateway connection ended; reconnecting");
                    self.ch.set_status(format!("reconnecting: {reason}"));
                    if !pause(wait, self.cancel).await {
                        return Ok(());
                    }
                }
                End::Fresh { wait, reason } => {
                    // Each IDENTIFY counts against Discord's daily budget: sessions that keep
                    // ending are answered with growing waits, not a fixed 1–5 s.
                    let wait = if started.elapsed() >= STABLE {
                        fresh_backoff.reset();
                        wait
                    } else {
                        wait.max(fresh_backoff.next_wait())
                    };
                    tracing::info!(channel = %self.name(), %reason, ?wait, "Discord session ended; identifying afresh");
                    self.forget_session().await;
                    self.ch.set_status(format!("reconnecting: {reason}"));
                    if !pause(wait, self.cancel).await {
                        return Ok(());
                    }
                }
            }
        }
    }

    fn fatal(&self, code: u16, description: impl Into<String>) -> End {
        End::Fatal(ChannelError::Api {
            channel: self.name().to_owned(),
            method: "gateway".into(),
            code,
            description: description.into(),
        })
    }

    /// What a close code from Discord means.
    fn closed(&self, code: Option<u16>, reason: &str, established: bool) -> End {
        let reason = self.ch.client.redact(reason);
        match code {
            Some(4004) => self.fatal(
                4004,
                "authentication failed: the bot token is wrong (close code 4004)",
            ),
            Some(c @ 4010..=4014) => {
                let what = match c {
                    4010 => "invalid shard",
                    4011 => "sharding required",
                    4012 => "invalid API version",
                    4013 => "invalid intents",
                    _ => {
                        "disallowed intents: enable the Message Content intent in the Developer Portal"
                    }
                };
                self.fatal(
                    c,
                    format!("{what} (close code {c}) {reason}")
                        .trim_end()
                        .to_owned(),
                )
            }
            Some(c @ (4007 | 4009)) => End::Fresh {
                wait: Duration::ZERO,
                reason: format!("session not resumable (close code {c})"),
            },
            Some(c) => End::Reconnect {
                established,
                reason: format!("closed by Discord (code {c}) {reason}")
                    .trim_end()
                    .to_owned(),
            },
            None => End::Reconnect {
                established,
                reason: "closed by Discord".into(),
            },
        }
    }

    async fn connection(&mut self, url: &str) -> End {
        let url = connect_url(url);
        let connect = tokio::time::timeout(CONNECT_TIMEOUT, tokio_tungstenite::connect_async(url));
        let ws: Ws = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => return End::Cancelled,
            r = connect => match r {
                Ok(Ok((ws, _))) => ws,
                Ok(Err(e)) => return End::Reconnect {
                    established: false,
                    reason: self.ch.client.redact(&format!("cannot connect to the gateway: {e}")),
                },
                Err(_) => return End::Reconnect {
                    established: false,
                    reason: "cannot connect to the gateway: timed out".into(),
                },
            },
        };
        let (mut tx, mut rx) = ws.split();
        // HELLO
        let hello = async {
            loop {
                match rx.next().await {
                    Some(Ok(Message::Text(t))) => {
                        return Ok(serde_json::from_str::<GatewayPayload>(t.as_str()).ok());
                    }
                    Some(Ok(Message::Close(frame))) => {
                        return Err(frame.map(|f| (u16::from(f.code), f.reason.to_string())));
                    }
                    Some(Ok(_)) => continue,
                    None | Some(Err(_)) => return Err(None),
                }
            }
        };
        let hello = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => return End::Cancelled,
            r = tokio::time::timeout(HELLO_TIMEOUT, hello) => r,
        };
        let interval = match hello {
            Ok(Ok(Some(p))) if p.op == 10 => {
                p.d.get("heartbeat_interval")
                    .and_then(Value::as_u64)
                    .map(|ms| Duration::from_millis(ms.clamp(50, 600_000)))
            }
            Ok(Err(Some((code, reason)))) => return self.closed(Some(code), &reason, false),
            _ => None,
        };
        let Some(interval) = interval else {
            return End::Reconnect {
                established: false,
                reason: "no HELLO from the gateway".into(),
            };
        };
        let opening = match &self.session {
            Some(s) => json!({"op": 6, "d": {
                "token": self.ch.cfg.token,
                "session_id": s.id,
                "seq": self.seq,
            }}),
            None => {
                self.seq = None;
                self.last_seq = None;
                json!({"op": 2, "d": {
                    "token": self.ch.cfg.token,
                    "intents": INTENTS,
                    "properties": {
                        "os": std::env::consts::OS,
                        "browser": "switchboard",
                        "device": "switchboard",
                    },
                }})
            }
        };
        if let Err(e) = tx.send(text_frame(&opening)).await {
            return End::Reconnect {
                established: false,
                reason: format!("gateway send failed: {e}"),
            };
        }
        let mut next_beat = Instant::now() + interval.mul_f64(rand::random::<f64>());
        let mut awaiting_ack = false;
        let mut established = false;
        loop {
            let msg = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => {
                    let _ = tx.send(close_frame(CLOSE_RESUMABLE)).await;
                    return End::Cancelled;
                }
                _ = tokio::time::sleep_until(next_beat) => {
                    if awaiting_ack {
                        // A frame already waiting (the ACK, if the loop was busy) is read
                        // first: only a connection that really sent nothing is a zombie.
                        if let Some(ready) = futures::FutureExt::now_or_never(rx.next()) {
                            ready
                        } else {
                            tracing::warn!(channel = %self.name(), "no heartbeat ACK from the Discord gateway; reconnecting");
                            let _ = tx.send(close_frame(CLOSE_RESUMABLE)).await;
                            return End::Reconnect { established, reason: "no heartbeat ACK".into() };
                        }
                    } else {
                        if let Err(e) = tx.send(text_frame(&json!({"op": 1, "d": self.last_seq}))).await {
                            return End::Reconnect { established, reason: format!("gateway send failed: {e}") };
                        }
                        awaiting_ack = true;
                        next_beat += interval;
                        let now = Instant::now();
                        if next_beat <= now {
                            next_beat = now + interval;
                        }
                        if self.stored_at.elapsed() >= SEQ_STORE_INTERVAL {
                            self.store_seq().await;
                        }
                        continue;
                    }
                }
                msg = rx.next() => msg,
            };
            let text = match msg {
                None => {
                    return End::Reconnect {
                        established,
                        reason: "the gateway connection closed".into(),
                    };
                }
                Some(Err(e)) => {
                    return End::Reconnect {
                        established,
                        reason: self
                            .ch
                            .client
                            .redact(&format!("gateway connection failed: {e}")),
                    };
                }
                Some(Ok(Message::Close(frame))) => {
                    let (code, reason) = match frame {
                        Some(f) => (Some(u16::from(f.code)), f.reason.to_string()),
                        None => (None, String::new()),
                    };
                    return self.closed(code, &reason, established);
                }
                Some(Ok(Message::Text(t))) => t,
                Some(Ok(_)) => continue,
            };
            let payload = match serde_json::from_str::<GatewayPayload>(text.as_str()) {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(channel = %self.name(), error = %e, "a gateway payload of unexpected shape; ignoring it");
                    continue;
                }
            };
            match payload.op {
                0 => {
                    if let Some(s) = payload.s {
                        self.last_seq = Some(self.last_seq.map_or(s, |l| l.max(s)));
                    }
                    let t = payload.t.unwrap_or_default();
                    match self.dispatch(&t, payload.d, payload.s).await {
                        Ok(true) => {
                            established = true;
                            self.ch.set_status("connected");
                        }
                        Ok(false) => {}
                        Err(end) => {
                            let _ = tx.send(close_frame(CLOSE_RESUMABLE)).await;
                            return end;
                        }
                    }
                }
                1 => {
                    if let Err(e) = tx
                        .send(text_frame(&json!({"op": 1, "d": self.last_seq})))
                        .await
                    {
                        return End::Reconnect {
                            established,
                            reason: format!("gateway send failed: {e}"),
                        };
                    }
                    awaiting_ack = true;
                }
                7 => {
                    let _ = tx.send(close_frame(CLOSE_RESUMABLE)).await;
                    return End::Reconnect {
                        established,
                        reason: "Discord asked to reconnect".into(),
                    };
                }
                9 => {
                    let _ = tx.send(close_frame(CLOSE_RESUMABLE)).await;
                    if payload.d.as_bool() == Some(true) && self.session.is_some() {
                        return End::Reconnect {
                            established,
                            reason: "invalid session (resumable)".into(),
                        };
                    }
                    return End::Fresh {
                        wait: invalid_session_wait(),
                        reason: "invalid session".into(),
                    };
                }
                11 => awaiting_ack = false,
                _ => {}
            }
        }
    }

    /// Handles one dispatch; `Ok(true)` when the session is (re)established.
    async fn dispatch(&mut self, t: &str, d: Value, s: Option<u64>) -> Result<bool, End> {
        let duplicate = matches!((s, self.seq), (Some(s), Some(h)) if s <= h);
        let mut accepted = false;
        match t {
            "READY" => {
                let ready: ApiReady = serde_json::from_value(d).map_err(|e| End::Reconnect {
                    established: false,
                    reason: format!("READY of unexpected shape: {e}"),
                })?;
                if !(ready.resume_gateway_url.starts_with("ws://")
                    || ready.resume_gateway_url.starts_with("wss://"))
                {
                    return Err(End::Reconnect {
                        established: false,
                        reason: "READY without a ws:// or wss:// resume_gateway_url".into(),
                    });
                }
                tracing::info!(channel = %self.name(), bot = %ready.user.username, id = %ready.user.id, "Discord gateway ready");
                *lock(&self.ch.bot_id) = Some(ready.user.id.clone());
                self.store(BOT_ID_KEY, &ready.user.id).await;
                self.store(SESSION_KEY, &ready.session_id).await;
                self.store(RESUME_URL_KEY, &ready.resume_gateway_url).await;
                self.session = Some(Session {
                    id: ready.session_id,
                    resume_url: ready.resume_gateway_url,
                });
                self.seq = s;
                self.store_seq().await;
                return Ok(true);
            }
            "RESUMED" => {
                tracing::info!(channel = %self.name(), "Discord session resumed");
                return Ok(true);
            }
            "MESSAGE_CREATE" if !duplicate => match serde_json::from_value::<ApiMessage>(d) {
                Ok(m) => {
                    if let Some(msg) = self.ch.map_message(m, s) {
                        let chat = msg.chat.id.clone();
                        let id = msg.message_id.clone();
                        self.accept(Inbound::Message(msg), s).await?;
                        self.ch.remember_inbound(&chat, &id);
                        accepted = true;
                    }
                }
                Err(e) => {
                    tracing::warn!(channel = %self.name(), error = %e, "a MESSAGE_CREATE of unexpected shape; ignoring it");
                }
            },
            "INTERACTION_CREATE" if !duplicate => {
                match serde_json::from_value::<ApiInteraction>(d) {
                    Ok(i) => {
                        if let Some((press, token)) = self.ch.map_press(i) {
                            let id = press.press_id.clone();
                            self.accept(Inbound::Press(press), s).await?;
                            accepted = true;
                            if let Err(e) = self.ch.ack_interaction(&id, &token).await {
                                tracing::warn!(channel = %self.name(), interaction = %id, error = %e, "cannot acknowledge a button press");
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!(channel = %self.name(), error = %e, "an INTERACTION_CREATE of unexpected shape; ignoring it");
                    }
                }
            }
            _ => {
                let before = lock(&self.ch.threads).clone();
                self.ch.note_threads(t, &d);
                // Known threads are kept in the channel's state: after a RESUME (a restart)
                // Discord does not send them again, and a thread must stay a thread chat.
                let after = lock(&self.ch.threads).clone();
                if after != before {
                    let v = serde_json::to_string(&after).unwrap_or_default();
                    if let Err(e) = self.ctx.state.set(THREADS_KEY, &v).await {
                        tracing::warn!(channel = %self.name(), error = %e, "cannot store known threads");
                    }
                }
            }
        }
        if let Some(s) = s
            && !duplicate
        {
            self.seq = Some(s);
        }
        if accepted {
            self.store_seq().await;
        }
        Ok(false)
    }

    async fn accept(&mut self, item: Inbound, s: Option<u64>) -> Result<(), End> {
        match self.ctx.sink.accept(item).await {
            Ok(()) => Ok(()),
            Err(reason) => {
                tracing::warn!(channel = %self.name(), seq = ?s, %reason, "the gateway did not take a Discord event; resuming to get it again");
                self.ch
                    .set_status(format!("error: inbound not stored: {reason}"));
                Err(End::Reconnect {
                    established: false,
                    reason: format!("inbound not stored: {reason}"),
                })
            }
        }
    }
}

/// Errors that retrying will not fix: a bad token, no access.
fn is_fatal(e: &ChannelError) -> bool {
    matches!(e, ChannelError::Api { code, .. } if matches!(code, 401 | 403 | 404))
}

#[async_trait]
impl Channel for DiscordChannel {
    fn name(&self) -> &str {
        &self.cfg.name
    }

    fn max_chars(&self) -> usize {
        MAX_CHARS
    }

    fn can_edit(&self) -> bool {
        true
    }

    fn edit_interval(&self) -> Duration {
        self.cfg.edit_interval
    }

    async fn run(
        &self,
        ctx: ChannelContext,
        cancel: CancellationToken,
    ) -> Result<(), ChannelError> {
        self.set_status("starting");
        let mut runner = Runner {
            ch: self,
            ctx: &ctx,
            cancel: &cancel,
            session: None,
            seq: None,
            last_seq: None,
            stored_seq: None,
            stored_at: Instant::now(),
        };
        let r = runner.run().await;
        match &r {
            Ok(()) => self.set_status("stopped"),
            Err(e) => {
                tracing::error!(channel = %self.cfg.name, error = %e, "stopped the Discord gateway connection");
                self.set_status(format!("error: {e}"));
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
        let target = self.target(chat)?;
        let mut body = json!({
            "content": text,
            "allowed_mentions": {"parse": [], "replied_user": true},
        });
        if !buttons.is_empty() {
            body["components"] = self.components(buttons)?;
        }
        let reply_to = lock(&self.reply_to).get(&chat.id).cloned();
        if let Some(mid) = &reply_to {
            body["message_reference"] = json!({"message_id": mid, "fail_if_not_exists": false});
        }
        let mut req = Req::new(
            reqwest::Method::POST,
            format!("/channels/{target}/messages"),
            Some(body),
        );
        req.bucket = format!("POST /channels/{target}/messages");
        req.keys = platform::send_keys(chat);
        let result = self.call(&req).await?;
        if let Some(mid) = reply_to {
            let mut map = lock(&self.reply_to);
            if map.get(&chat.id) == Some(&mid) {
                map.remove(&chat.id);
            }
        }
        result
            .get("id")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| self.other("POST /channels/…/messages: the answer has no id"))
    }

    async fn edit(
        &self,
        chat: &ChatRef,
        message_id: &str,
        text: &str,
        buttons: &[Button],
    ) -> Result<(), ChannelError> {
        let target = self.target(chat)?;
        if !valid_id(message_id) {
            return Err(self.other(format!("{message_id:?} is not a Discord message id")));
        }
        let body = json!({
            "content": text,
            "components": self.components(buttons)?,
            "allowed_mentions": {"parse": []},
        });
        let mut req = Req::new(
            reqwest::Method::PATCH,
            format!("/channels/{target}/messages/{message_id}"),
            Some(body),
        );
        req.bucket = format!("PATCH /channels/{target}/messages");
        req.keys = platform::edit_keys(&chat.id);
        req.edit_of = Some(platform::message_key(&chat.id, message_id));
        self.call(&req).await.map(|_| ())
    }

    async fn answer_press(
        &self,
        press: &ButtonPress,
        text: Option<&str>,
    ) -> Result<(), ChannelError> {
        // Acknowledged (DEFERRED_UPDATE_MESSAGE) when it arrived; Discord shows no toast.
        tracing::debug!(channel = %self.cfg.name, press = %press.press_id, has_text = text.is_some(), "button press already acknowledged");
        Ok(())
    }

    async fn tell_presser(&self, press: &ButtonPress, text: &str) -> Result<(), ChannelError> {
        self.follow_up(&press.press_id, text).await
    }

    async fn test(&self) -> Result<String, ChannelError> {
        let (id, username) = self.get_me().await?;
        Ok(format!("@{username} (id {id})"))
    }

    fn status(&self) -> String {
        self.client.status()
    }
}

// ---- Discord's wire types (only the fields used) ----

#[derive(Debug, Deserialize)]
struct ApiUser {
    id: String,
    #[serde(default)]
    username: String,
    #[serde(default)]
    global_name: Option<String>,
    #[serde(default)]
    bot: bool,
}

#[derive(Debug, Deserialize)]
struct ApiReady {
    session_id: String,
    resume_gateway_url: String,
    user: ApiUser,
}

#[derive(Debug, Deserialize)]
struct ApiAttachment {
    #[serde(default)]
    filename: Option<String>,
    #[serde(default)]
    size: Option<u64>,
    #[serde(default)]
    content_type: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ApiReferenced {
    #[serde(default)]
    author: Option<ApiUser>,
}

#[derive(Debug, Deserialize)]
struct ApiMessage {
    id: String,
    channel_id: String,
    #[serde(default)]
    guild_id: Option<String>,
    author: ApiUser,
    #[serde(default)]
    content: String,
    #[serde(default)]
    mentions: Vec<ApiUser>,
    #[serde(default, rename = "type")]
    kind: u64,
    #[serde(default)]
    attachments: Vec<ApiAttachment>,
    #[serde(default)]
    webhook_id: Option<String>,
    #[serde(default)]
    referenced_message: Option<ApiReferenced>,
    #[serde(default)]
    channel_type: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct ApiMember {
    #[serde(default)]
    user: Option<ApiUser>,
}

#[derive(Debug, Deserialize)]
struct ApiMessageId {
    id: String,
}

#[derive(Debug, Deserialize)]
struct ApiComponentData {
    #[serde(default)]
    custom_id: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ApiInteraction {
    id: String,
    #[serde(rename = "type")]
    kind: u64,
    token: String,
    #[serde(default)]
    application_id: Option<String>,
    #[serde(default)]
    channel_id: Option<String>,
    #[serde(default)]
    guild_id: Option<String>,
    #[serde(default)]
    member: Option<ApiMember>,
    #[serde(default)]
    user: Option<ApiUser>,
    #[serde(default)]
    message: Option<ApiMessageId>,
    #[serde(default)]
    data: Option<ApiComponentData>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn strips_mentions() {
        assert_eq!(strip_mention("<@900> hello", "900"), "hello");
        assert_eq!(strip_mention("<@!900>, do it", "900"), "do it");
        assert_eq!(
            strip_mention("hey <@900> what's up", "900"),
            "hey what's up"
        );
        assert_eq!(
            strip_mention("ask <@9001> instead", "900"),
            "ask <@9001> instead"
        );
        assert_eq!(strip_mention("  plain  ", "900"), "plain");
        assert_eq!(strip_mention("<@900>", "900"), "");
    }

    #[test]
    fn debug_hides_the_token() {
        let cfg = DiscordConfig::new("MTIz.SECRET.SECRET");
        let s = format!("{cfg:?}");
        assert!(!s.contains("SECRET"), "{s}");
        let ch = DiscordChannel::new(cfg).unwrap();
        assert!(!format!("{ch:?}").contains("SECRET"));
        assert_eq!(
            ch.client
                .redact_also("x MTIz.SECRET.SECRET y tok", Some("tok")),
            "x <redacted> y <redacted>"
        );
    }

    #[test]
    fn rejects_bad_config() {
        assert!(DiscordChannel::new(DiscordConfig::new("")).is_err());
        assert!(DiscordChannel::new(DiscordConfig::new("a/b")).is_err());
        let mut cfg = DiscordConfig::new("abc");
        cfg.api_base = "ftp://x".into();
        assert!(DiscordChannel::new(cfg).is_err());
        let mut cfg = DiscordConfig::new("abc");
        cfg.gateway_url = Some("http://x".into());
        assert!(DiscordChannel::new(cfg).is_err());
    }

    #[test]
    fn connect_urls() {
        assert_eq!(
            connect_url("wss://gateway.discord.gg"),
            "wss://gateway.discord.gg/?v=10&encoding=json"
        );
        assert_eq!(
            connect_url("ws://127.0.0.1:1/gateway/"),
            "ws://127.0.0.1:1/gateway/?v=10&encoding=json"
        );
    }

    #[test]
    fn buttons_make_rows() {
        let ch = DiscordChannel::new(DiscordConfig::new("abc")).unwrap();
        let buttons: Vec<Button> = (0..7)
            .map(|i| Button {
                text: format!("b{i}"),
                data: format!("d{i}"),
            })
            .collect();
        let rows = ch.components(&buttons).unwrap();
        assert_eq!(rows.as_array().unwrap().len(), 2);
        assert_eq!(rows[0]["components"][0]["style"], 1);
        assert_eq!(rows[0]["components"][1]["style"], 2);
        assert_eq!(rows[1]["components"].as_array().unwrap().len(), 2);
        assert!(
            ch.components(&[Button {
                text: "x".into(),
                data: String::new()
            }])
            .is_err()
        );
    }

    #[test]
    fn backoff_doubles_to_30s() {
        let mut b = Backoff::default();
        let waits: Vec<u64> = (0..7).map(|_| b.next_wait().as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30]);
    }
}
