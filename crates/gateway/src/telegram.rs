//! The Telegram channel: a bot that long-polls the Bot API.
//!
//! Every call is `POST {base_url}/bot{token}/{method}` with a JSON body; the answer is
//! `{"ok":true,"result":…}` or `{"ok":false,"error_code":N,"description":"…",
//! "parameters":{"retry_after":S}}`.
//!
//! - [`Channel::run`] calls `getMe` once (the bot's id and username, to tell whether a group
//!   message is addressed to it), then long-polls `getUpdates`. Each update is handed to the
//!   sink, and only once the sink has accepted it is `offset = update_id + 1` stored in the
//!   channel state (key `offset`) and so confirmed to Telegram: a restart neither loses nor
//!   repeats updates. A sink failure stops the batch; it is fetched again after a back-off.
//!   409 (another poller with this token) ends `run` with [`ChannelError::Conflict`]; 429
//!   waits `retry_after`; network errors back off (1 s doubling to 30 s) until cancelled.
//! - Group messages count only when they mention `@botusername` or reply to the bot (unless
//!   [`TelegramConfig::require_mention_in_groups`] is off); the mention is stripped from the
//!   text. Messages from bots are ignored. Forum topics and supergroup reply threads are
//!   [`ChatKind::Thread`] chats.
//! - Text is sent plain (no `parse_mode`), so agent output cannot break formatting. Buttons
//!   are one row of inline keyboard buttons (callback data at most 64 bytes).
//! - Edits in one chat are spaced by [`TelegramConfig::edit_interval`]; every method honours
//!   429 `retry_after` up to [`TelegramConfig::max_retries`] times.
//!
//! The bot token is a secret: it is never logged, and it is removed from every error text.

use crate::platform::{
    self, Answer, BOT, Call, Limits, OverCap, PlatformClient, REDACTED, Rate, RetryPolicy, Verdict,
    pause,
};
use crate::util::{BACKOFF_START, Backoff};
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::channel::{
    Attachment, Button, ButtonPress, Channel, ChannelContext, ChannelError, ChatKind, ChatRef,
    Inbound, InboundMessage, Peer,
};

/// Telegram's longest message text.
pub const MAX_CHARS: usize = 4096;
/// Telegram's longest `callback_data` (bytes).
pub const MAX_CALLBACK_DATA: usize = 64;
/// The public Bot API.
pub const DEFAULT_BASE_URL: &str = "https://api.telegram.org";
/// The state key of the polling offset.
pub const OFFSET_KEY: &str = "offset";

/// Timeout of a call other than `getUpdates`.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Extra time a `getUpdates` request gets beyond its long-poll timeout.
const POLL_GRACE: Duration = Duration::from_secs(15);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Telegram's published limits: about 30 messages a second per bot, about one a second in
/// one chat (short bursts pass), 20 a minute in a group; edits in one chat at most one per
/// `edit_interval`.
fn limits(edit_interval: Duration) -> Limits {
    Limits::new()
        .with("bot", Rate::per(30, Duration::from_secs(1)))
        .with("chat", Rate::per(20, Duration::from_secs(20)))
        .with("group", Rate::per(20, Duration::from_secs(60)))
        .with("edit", Rate::spaced(edit_interval))
}

/// How to reach a Telegram bot.
#[derive(Clone)]
pub struct TelegramConfig {
    /// The bot token from @BotFather (`<id>:<secret>`). Secret: never logged.
    pub token: String,
    /// The Bot API (default `https://api.telegram.org`).
    pub base_url: String,
    /// The channel's name (default `telegram`).
    pub name: String,
    /// In groups, only messages that mention the bot or reply to it count (default true).
    pub require_mention_in_groups: bool,
    /// `getUpdates` long-poll timeout in seconds (default 30).
    pub poll_timeout_secs: u64,
    /// How often one call is retried after 429 before giving up (default 3).
    pub max_retries: u32,
    /// The longest `retry_after` waited out inside one call (default 60 s).
    pub max_retry_after: Duration,
    /// What a longer one does (default: the call fails as rate limited).
    pub over_cap: OverCap,
    /// Least time between two edits of messages in one chat (default 1 s).
    pub edit_interval: Duration,
    /// Webhook mode instead of long polling: Telegram POSTs updates to `url` (public,
    /// HTTPS, ending in `/v1/gateway/channels/telegram/webhook`) with `secret_token` in the
    /// `X-Telegram-Bot-Api-Secret-Token` header.
    pub webhook: Option<TelegramWebhook>,
}

/// Telegram's webhook mode.
#[derive(Clone)]
pub struct TelegramWebhook {
    pub url: String,
    /// 1–256 characters of `A-Z a-z 0-9 _ -` (Telegram's rule).
    pub secret_token: String,
}

impl TelegramConfig {
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

impl Default for TelegramConfig {
    /// The defaults, without a token.
    fn default() -> Self {
        Self {
            token: String::new(),
            base_url: DEFAULT_BASE_URL.into(),
            name: "telegram".into(),
            require_mention_in_groups: true,
            poll_timeout_secs: 30,
            max_retries: 3,
            max_retry_after: Duration::from_secs(60),
            over_cap: OverCap::Fail,
            edit_interval: Duration::from_secs(1),
            webhook: None,
        }
    }
}

impl fmt::Debug for TelegramConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TelegramConfig")
            .field("token", &REDACTED)
            .field("base_url", &self.base_url)
            .field("name", &self.name)
            .field("require_mention_in_groups", &self.require_mention_in_groups)
            .field("poll_timeout_secs", &self.poll_timeout_secs)
            .field("max_retries", &self.max_retries)
            .field("max_retry_after", &self.max_retry_after)
            .field("over_cap", &self.over_cap)
            .field("edit_interval", &self.edit_interval)
            .finish()
    }
}

/// The bot itself, as `getMe` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct BotIdentity {
    id: i64,
    username: String,
}

/// A Telegram bot connection; see the module docs.
pub struct TelegramChannel {
    cfg: TelegramConfig,
    /// The Bot API, its retry policy and the bot's outbox.
    client: PlatformClient,
    /// The bot's identity, learned once (webhook mode needs it per update).
    me: tokio::sync::OnceCell<BotIdentity>,
}

impl fmt::Debug for TelegramChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TelegramChannel")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

impl TelegramChannel {
    /// Checks the configuration and builds the HTTP client (no network call).
    pub fn new(cfg: TelegramConfig) -> Result<Self, ChannelError> {
        let other = |reason: String| ChannelError::Other {
            channel: cfg.name.clone(),
            reason,
        };
        let token = cfg.token.trim();
        if token.is_empty() {
            return Err(other("no bot token".into()));
        }
        if !token.contains(':')
            || token
                .chars()
                .any(|c| !(c.is_ascii_alphanumeric() || matches!(c, ':' | '_' | '-')))
        {
            return Err(other(
                "not a bot token (expected `<id>:<secret>` from @BotFather)".into(),
            ));
        }
        let base = cfg.base_url.trim().trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(other(format!(
                "base_url {base:?}: expected an http:// or https:// URL"
            )));
        }
        if cfg.edit_interval > Duration::from_secs(3600) {
            return Err(other("edit_interval: at most one hour".into()));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|e| other(format!("HTTP client: {e}")))?;
        let cfg = TelegramConfig {
            token: token.to_owned(),
            ..cfg
        };
        let mut secrets = vec![cfg.token.clone()];
        if let Some((_, secret)) = cfg.token.split_once(':')
            && secret.len() >= 8
        {
            secrets.push(secret.to_owned());
        }
        let client = PlatformClient::new(
            cfg.name.clone(),
            &base,
            http,
            secrets,
            cfg.retry_policy(),
            limits(cfg.edit_interval),
        );
        Ok(Self {
            cfg,
            client,
            me: tokio::sync::OnceCell::new(),
        })
    }

    /// The configuration (its `Debug` hides the token).
    pub fn config(&self) -> &TelegramConfig {
        &self.cfg
    }

    fn set_status(&self, status: impl Into<String>) {
        self.client.set_status(status);
    }

    fn other(&self, reason: impl Into<String>) -> ChannelError {
        self.client.other(reason)
    }

    /// One call. 429 is retried as the retry policy says (then
    /// [`ChannelError::RateLimited`]); 409 on `getUpdates` is [`ChannelError::Conflict`].
    /// `keys`: the outbox keys it counts against; `once`: no retries.
    async fn call_on(
        &self,
        method: &str,
        params: &Value,
        keys: &[String],
        timeout: Duration,
        once: bool,
    ) -> Result<Value, ChannelError> {
        let policy = once.then(|| self.client.policy().once());
        let call = Call {
            label: method,
            keys,
            timeout,
            policy,
        };
        self.client
            .call(
                call,
                |http, base| {
                    http.post(format!("{base}/bot{}/{method}", self.cfg.token))
                        .json(params)
                },
                |answer| self.read(method, answer),
            )
            .await
    }

    /// What a Bot API answer means.
    fn read(&self, method: &str, answer: Answer) -> Verdict<Value> {
        let status = answer.status;
        let parsed = match serde_json::from_slice::<ApiAnswer>(&answer.body) {
            Ok(parsed) => parsed,
            Err(_) if status.is_server_error() => {
                return Verdict::Transient(self.client.server_error(method, status));
            }
            Err(_) => {
                return Verdict::Failed(self.client.api_error(
                    method,
                    status.as_u16(),
                    &format!("HTTP {status}; the answer is not a Bot API response"),
                ));
            }
        };
        if parsed.ok {
            return Verdict::Done(parsed.result.unwrap_or(Value::Null));
        }
        let code = parsed
            .error_code
            .and_then(|c| u16::try_from(c).ok())
            .unwrap_or(status.as_u16());
        if code == 429 {
            return Verdict::RateLimited(
                parsed
                    .parameters
                    .and_then(|p| p.retry_after)
                    .map(Duration::from_secs),
            );
        }
        let description = parsed
            .description
            .as_deref()
            .unwrap_or(status.canonical_reason().unwrap_or("error"));
        if code == 409 && method == "getUpdates" {
            tracing::error!(
                channel = %self.cfg.name,
                description = %self.client.redact(description),
                "getUpdates answered 409: another poller is running with this bot token (or a webhook is set)"
            );
            return Verdict::Failed(ChannelError::Conflict {
                channel: self.cfg.name.clone(),
            });
        }
        if status.is_server_error() || code >= 500 {
            return Verdict::Transient(self.client.api_error(method, code, description));
        }
        Verdict::Failed(self.client.api_error(method, code, description))
    }

    /// An edit in `chat` of `message_id`; `None` when a newer edit of it took its place.
    async fn edit_call(
        &self,
        chat: &str,
        message_id: &str,
        params: &Value,
    ) -> Result<Option<Value>, ChannelError> {
        let method = "editMessageText";
        let call = Call {
            label: method,
            keys: &platform::edit_keys(chat),
            timeout: CALL_TIMEOUT,
            policy: None,
        };
        self.client
            .edit(
                call,
                &platform::message_key(chat, message_id),
                |http, base| {
                    http.post(format!("{base}/bot{}/{method}", self.cfg.token))
                        .json(params)
                },
                |answer| self.read(method, answer),
            )
            .await
    }

    /// One call that is not a message in a chat, with the policy's retries.
    async fn call(&self, method: &str, params: &Value) -> Result<Value, ChannelError> {
        self.call_on(method, params, &[BOT.to_owned()], CALL_TIMEOUT, false)
            .await
    }

    /// One call, without retries.
    async fn call_once(
        &self,
        method: &str,
        params: &Value,
        timeout: Duration,
    ) -> Result<Value, ChannelError> {
        self.call_on(method, params, &[], timeout, true).await
    }

    async fn get_me(&self, once: bool) -> Result<BotIdentity, ChannelError> {
        let result = if once {
            self.call_once("getMe", &json!({}), CALL_TIMEOUT).await?
        } else {
            self.call("getMe", &json!({})).await?
        };
        let me: ApiUser = serde_json::from_value(result)
            .map_err(|e| self.other(format!("getMe: unexpected result: {e}")))?;
        let username = me
            .username
            .filter(|u| !u.is_empty())
            .ok_or_else(|| self.other("getMe: the bot has no username"))?;
        Ok(BotIdentity {
            id: me.id,
            username,
        })
    }

    fn keyboard(&self, buttons: &[Button]) -> Result<Value, ChannelError> {
        let mut row = Vec::with_capacity(buttons.len());
        for b in buttons {
            if b.data.is_empty() || b.data.len() > MAX_CALLBACK_DATA {
                return Err(self.other(format!(
                    "button {:?}: callback data must be 1 to {MAX_CALLBACK_DATA} bytes (is {})",
                    b.text,
                    b.data.len()
                )));
            }
            row.push(json!({"text": b.text, "callback_data": b.data}));
        }
        let rows = if row.is_empty() {
            Vec::new()
        } else {
            vec![Value::Array(row)]
        };
        Ok(json!({ "inline_keyboard": rows }))
    }

    fn parse_id(&self, what: &str, id: &str) -> Result<i64, ChannelError> {
        id.trim()
            .parse()
            .map_err(|_| self.other(format!("{what} {id:?} is not a Telegram id")))
    }

    async fn run_inner(
        &self,
        ctx: &ChannelContext,
        cancel: &CancellationToken,
    ) -> Result<(), ChannelError> {
        let mut backoff = Backoff::default();
        let me = loop {
            let r = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Ok(()),
                r = self.get_me(true) => r,
            };
            match r {
                Ok(me) => break me,
                Err(ChannelError::RateLimited {
                    retry_after_secs, ..
                }) => {
                    if !pause(Duration::from_secs(retry_after_secs), cancel).await {
                        return Ok(());
                    }
                }
                Err(e) if is_fatal(&e) => return Err(e),
                Err(e) => {
                    let wait = backoff.next_wait();
                    tracing::warn!(channel = %self.cfg.name, error = %e, ?wait, "getMe failed; retrying");
                    self.set_status(format!("error: {e}"));
                    if !pause(wait, cancel).await {
                        return Ok(());
                    }
                }
            }
        };
        tracing::info!(channel = %self.cfg.name, bot = %me.username, id = me.id, "telegram bot identified; polling");
        let mut offset: Option<i64> = match ctx.state.get(OFFSET_KEY).await {
            None => None,
            Some(s) => match s.trim().parse() {
                Ok(o) => Some(o),
                Err(_) => {
                    tracing::warn!(channel = %self.cfg.name, stored = %s, "stored offset is not a number; ignoring it");
                    None
                }
            },
        };
        self.set_status("polling");
        let poll_timeout = Duration::from_secs(self.cfg.poll_timeout_secs);
        loop {
            if cancel.is_cancelled() {
                return Ok(());
            }
            let mut params = json!({
                "timeout": self.cfg.poll_timeout_secs,
                "allowed_updates": ["message", "callback_query"],
            });
            if let Some(o) = offset {
                params["offset"] = json!(o);
            }
            let r = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Ok(()),
                r = self.call_once("getUpdates", &params, poll_timeout + POLL_GRACE) => r,
            };
            let updates = match r {
                Ok(Value::Array(updates)) => updates,
                Ok(other) => {
                    let e = self.other(format!(
                        "getUpdates: expected an array of updates, got {}",
                        kind_of(&other)
                    ));
                    let wait = backoff.next_wait();
                    tracing::warn!(channel = %self.cfg.name, error = %e, ?wait, "polling failed; retrying");
                    self.set_status(format!("error: {e}"));
                    if !pause(wait, cancel).await {
                        return Ok(());
                    }
                    continue;
                }
                Err(ChannelError::RateLimited {
                    retry_after_secs, ..
                }) => {
                    tracing::info!(channel = %self.cfg.name, retry_after_secs, "getUpdates rate limited; waiting");
                    if !pause(Duration::from_secs(retry_after_secs), cancel).await {
                        return Ok(());
                    }
                    continue;
                }
                Err(e) if is_fatal(&e) => return Err(e),
                Err(e) => {
                    let wait = backoff.next_wait();
                    tracing::warn!(channel = %self.cfg.name, error = %e, ?wait, "polling failed; retrying");
                    self.set_status(format!("error: {e}"));
                    if !pause(wait, cancel).await {
                        return Ok(());
                    }
                    continue;
                }
            };
            self.set_status("polling");
            if updates.is_empty() && self.cfg.poll_timeout_secs == 0 {
                // short polling: don't spin
                if !pause(BACKOFF_START, cancel).await {
                    return Ok(());
                }
                continue;
            }
            let mut sink_failed = false;
            for raw in updates {
                let Some(update_id) = raw.get("update_id").and_then(Value::as_i64) else {
                    tracing::warn!(channel = %self.cfg.name, "an update without update_id; ignoring it");
                    continue;
                };
                if offset.is_some_and(|o| update_id < o) {
                    continue;
                }
                match self.map_update(raw, &me) {
                    Some(item) => {
                        if let Err(reason) = ctx.sink.accept(item).await {
                            tracing::warn!(channel = %self.cfg.name, update_id, %reason, "the gateway did not take an update; fetching it again later");
                            self.set_status(format!("error: inbound not stored: {reason}"));
                            sink_failed = true;
                            break;
                        }
                    }
                    None => {
                        tracing::debug!(channel = %self.cfg.name, update_id, "update skipped");
                    }
                }
                let next = update_id.saturating_add(1);
                offset = Some(next);
                if let Err(reason) = ctx.state.set(OFFSET_KEY, &next.to_string()).await {
                    tracing::warn!(channel = %self.cfg.name, update_id, %reason, "cannot store the polling offset");
                }
            }
            if sink_failed {
                if !pause(backoff.next_wait(), cancel).await {
                    return Ok(());
                }
            } else {
                backoff.reset();
            }
        }
    }

    /// What an update means to the gateway; `None` to skip it.
    fn map_update(&self, raw: Value, me: &BotIdentity) -> Option<Inbound> {
        let update: ApiUpdate = match serde_json::from_value(raw) {
            Ok(u) => u,
            Err(e) => {
                tracing::warn!(channel = %self.cfg.name, error = %e, "an update of unexpected shape; ignoring it");
                return None;
            }
        };
        if let Some(m) = update.message {
            return self
                .map_message(m, update.update_id, me)
                .map(Inbound::Message);
        }
        if let Some(q) = update.callback_query {
            return self.map_press(q).map(Inbound::Press);
        }
        None
    }

    fn map_message(
        &self,
        m: ApiMessage,
        update_id: i64,
        me: &BotIdentity,
    ) -> Option<InboundMessage> {
        let from = m.from.as_ref()?;
        if from.is_bot {
            return None;
        }
        let chat = chat_ref(&m)?;
        let attachments = attachments(&m);
        let (raw_text, entities) = match (&m.text, &m.caption) {
            (Some(t), _) => (t.as_str(), &m.entities),
            (None, Some(c)) => (c.as_str(), &m.caption_entities),
            (None, None) if !attachments.is_empty() => ("", &m.entities),
            (None, None) => return None,
        };
        let (text, mentioned) = strip_mention(raw_text, &me.username);
        let addressed = match chat.kind {
            ChatKind::Direct => true,
            ChatKind::Group | ChatKind::Thread => {
                mentioned
                    || mentions_in_entities(raw_text, entities.as_deref(), me)
                    || replies_to_bot(&m, me)
            }
        };
        if chat.kind != ChatKind::Direct && self.cfg.require_mention_in_groups && !addressed {
            return None;
        }
        Some(InboundMessage {
            channel: self.cfg.name.clone(),
            peer: peer(from),
            chat,
            text,
            message_id: m.message_id.to_string(),
            addressed,
            attachments,
            meta: json!({ "update_id": update_id }),
        })
    }

    fn map_press(&self, q: ApiCallbackQuery) -> Option<ButtonPress> {
        let message = q.message?;
        let data = q.data?;
        Some(ButtonPress {
            channel: self.cfg.name.clone(),
            press_id: q.id,
            peer: peer(&q.from),
            chat: chat_ref(&message)?,
            message_id: message.message_id.to_string(),
            data,
        })
    }
}

/// Errors that retrying will not fix: a bad token, a conflict.
fn is_fatal(e: &ChannelError) -> bool {
    match e {
        ChannelError::Conflict { .. } => true,
        ChannelError::Api { code, .. } => matches!(code, 401 | 403 | 404),
        _ => false,
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn peer(u: &ApiUser) -> Peer {
    let name = match u.last_name.as_deref().filter(|l| !l.is_empty()) {
        Some(last) => format!("{} {last}", u.first_name),
        None => u.first_name.clone(),
    };
    Peer {
        id: u.id.to_string(),
        name,
        username: u.username.clone().filter(|n| !n.is_empty()),
    }
}

/// Where a message is: private → direct; group/supergroup → group, or thread when it
/// belongs to a forum topic or a supergroup reply thread. `None` for channels.
fn chat_ref(m: &ApiMessage) -> Option<ChatRef> {
    let thread = m.message_thread_id.map(|t| t.to_string());
    let (kind, thread) = match m.chat.kind.as_str() {
        "private" => (
            ChatKind::Direct,
            thread.filter(|_| m.is_topic_message == Some(true)),
        ),
        // Only forum topics are threads: in other supergroups a reply carries a
        // `message_thread_id` too, and must stay in the group's session.
        "group" | "supergroup" => match thread.filter(|_| m.is_topic_message == Some(true)) {
            Some(t) => (ChatKind::Thread, Some(t)),
            None => (ChatKind::Group, None),
        },
        _ => return None,
    };
    Some(ChatRef {
        id: m.chat.id.to_string(),
        kind,
        thread,
    })
}

fn replies_to_bot(m: &ApiMessage, me: &BotIdentity) -> bool {
    m.reply_to_message.as_ref().is_some_and(|r| {
        // in a forum topic, a message that replies to nothing "replies" to the topic's
        // creation message: that is no reply to the bot
        r.forum_topic_created.is_none() && r.from.as_ref().is_some_and(|f| f.id == me.id)
    })
}

/// A `mention` entity naming the bot, or a `text_mention` of it.
fn mentions_in_entities(text: &str, entities: Option<&[ApiEntity]>, me: &BotIdentity) -> bool {
    let Some(entities) = entities else {
        return false;
    };
    let target = format!("@{}", me.username);
    let utf16: Vec<u16> = text.encode_utf16().collect();
    entities.iter().any(|e| match e.kind.as_str() {
        "mention" => {
            let end = e.offset.saturating_add(e.length);
            utf16
                .get(e.offset..end)
                .map(String::from_utf16_lossy)
                .is_some_and(|s| s.eq_ignore_ascii_case(&target))
        }
        "text_mention" => e.user.as_ref().is_some_and(|u| u.id == me.id),
        _ => false,
    })
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// `text` without `@username` mentions (case-insensitive, whole names only, also
/// `/command@username`), tidied; and whether there was one.
fn strip_mention(text: &str, username: &str) -> (String, bool) {
    if username.is_empty() {
        return (text.trim().to_owned(), false);
    }
    let target = format!("@{}", username.to_ascii_lowercase());
    // ASCII lower-casing keeps byte offsets
    let lower = text.to_ascii_lowercase();
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut found = false;
    let mut rest = 0usize;
    let mut search = 0usize;
    while let Some(pos) = lower[search..].find(&target) {
        let start = search + pos;
        let end = start + target.len();
        search = end;
        if bytes.get(end).copied().is_some_and(is_name_byte) {
            continue;
        }
        let word_start = text[..start].rfind(char::is_whitespace).map_or(0, |i| {
            i + text[i..].chars().next().map_or(1, char::len_utf8)
        });
        let after_name = start > 0 && is_name_byte(bytes[start - 1]);
        let command = text[word_start..start].starts_with('/');
        if after_name && !command {
            continue;
        }
        found = true;
        out.push_str(&text[rest..start]);
        rest = end;
        // "a @bot b" → "a b"
        if (out.is_empty() || out.ends_with(char::is_whitespace))
            && text[rest..].starts_with(char::is_whitespace)
        {
            rest += text[rest..].chars().next().map_or(1, char::len_utf8);
        }
        // "@bot, hi" / "@bot: hi" → "hi"
        if out.trim().is_empty() && (text[rest..].starts_with(',') || text[rest..].starts_with(':'))
        {
            rest += 1;
        }
    }
    if !found {
        return (text.trim().to_owned(), false);
    }
    out.push_str(&text[rest..]);
    (out.trim().to_owned(), true)
}

fn attachments(m: &ApiMessage) -> Vec<Attachment> {
    let mut out = Vec::new();
    if let Some(p) = m.photo.as_ref().and_then(|sizes| {
        sizes
            .iter()
            .max_by_key(|p| (p.width.unwrap_or(0) * p.height.unwrap_or(0), p.file_size))
    }) {
        out.push(Attachment {
            kind: "photo".into(),
            name: None,
            size: p.file_size,
        });
    }
    for (kind, f) in [
        ("document", &m.document),
        ("voice", &m.voice),
        ("audio", &m.audio),
        ("video", &m.video),
    ] {
        if let Some(f) = f {
            out.push(Attachment {
                kind: kind.into(),
                name: f.file_name.clone(),
                size: f.file_size,
            });
        }
    }
    out
}

#[async_trait]
impl Channel for TelegramChannel {
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
        if let Some(hook) = &self.cfg.webhook {
            // Webhook mode: tell Telegram where to POST, then updates arrive over HTTP.
            let me = self.get_me(false).await?;
            let _ = self.me.set(me);
            self.call(
                "setWebhook",
                &json!({
                    "url": hook.url,
                    "secret_token": hook.secret_token,
                    "allowed_updates": ["message", "callback_query"],
                }),
            )
            .await?;
            self.set_status("webhook");
            cancel.cancelled().await;
            self.set_status("stopped");
            return Ok(());
        }
        let r = self.run_inner(&ctx, &cancel).await;
        match &r {
            Ok(()) => self.set_status("stopped"),
            Err(ChannelError::Conflict { .. }) => {
                tracing::error!(channel = %self.cfg.name, "another poller is running with this bot token; stopped polling");
                self.set_status("conflict: another poller is running");
            }
            Err(e) => {
                tracing::error!(channel = %self.cfg.name, error = %e, "stopped polling");
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
        let mut params = json!({
            "chat_id": chat_id_value(&chat.id),
            "text": text,
        });
        if let Some(thread) = &chat.thread {
            params["message_thread_id"] = json!(self.parse_id("thread", thread)?);
        }
        if !buttons.is_empty() {
            params["reply_markup"] = self.keyboard(buttons)?;
        }
        let result = self
            .call_on(
                "sendMessage",
                &params,
                &platform::send_keys(chat),
                CALL_TIMEOUT,
                false,
            )
            .await?;
        result
            .get("message_id")
            .and_then(Value::as_i64)
            .map(|id| id.to_string())
            .ok_or_else(|| self.other("sendMessage: the result has no message_id"))
    }

    async fn edit(
        &self,
        chat: &ChatRef,
        message_id: &str,
        text: &str,
        buttons: &[Button],
    ) -> Result<(), ChannelError> {
        let params = json!({
            "chat_id": chat_id_value(&chat.id),
            "message_id": self.parse_id("message", message_id)?,
            "text": text,
            "reply_markup": self.keyboard(buttons)?,
        });
        match self.edit_call(&chat.id, message_id, &params).await {
            Ok(_) => Ok(()),
            Err(ChannelError::Api {
                code: 400,
                description,
                ..
            }) if description.contains("message is not modified") => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn answer_press(
        &self,
        press: &ButtonPress,
        text: Option<&str>,
    ) -> Result<(), ChannelError> {
        let mut params = json!({ "callback_query_id": press.press_id });
        if let Some(t) = text.filter(|t| !t.is_empty()) {
            params["text"] = json!(t);
        }
        self.call("answerCallbackQuery", &params).await.map(|_| ())
    }

    async fn tell_presser(&self, press: &ButtonPress, text: &str) -> Result<(), ChannelError> {
        // An alert the presser must dismiss, not a toast that is easily missed.
        let params = json!({
            "callback_query_id": press.press_id,
            "text": crate::text::truncate(text, 200),
            "show_alert": true,
        });
        self.call("answerCallbackQuery", &params).await.map(|_| ())
    }

    async fn test(&self) -> Result<String, ChannelError> {
        let me = self.get_me(false).await?;
        Ok(format!("@{} (id {})", me.username, me.id))
    }

    async fn inbound_http(
        &self,
        headers: &axum::http::HeaderMap,
        body: &[u8],
    ) -> Result<Option<Inbound>, crate::channel::InboundHttpError> {
        use crate::channel::InboundHttpError;
        use subtle::ConstantTimeEq;
        let Some(hook) = &self.cfg.webhook else {
            return Err(InboundHttpError::NotSupported);
        };
        let given = headers
            .get("x-telegram-bot-api-secret-token")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        if hook.secret_token.is_empty()
            || !bool::from(given.as_bytes().ct_eq(hook.secret_token.as_bytes()))
        {
            return Err(InboundHttpError::Unauthorized);
        }
        let raw: Value =
            serde_json::from_slice(body).map_err(|e| InboundHttpError::Malformed(e.to_string()))?;
        let me = match self.me.get() {
            Some(me) => me.clone(),
            None => {
                let me = self
                    .get_me(false)
                    .await
                    .map_err(|e| InboundHttpError::Malformed(format!("getMe: {e}")))?;
                let _ = self.me.set(me.clone());
                me
            }
        };
        Ok(self.map_update(raw, &me))
    }

    fn status(&self) -> String {
        self.client.status()
    }
}

/// A chat id as Telegram takes it: an integer, or `@channelusername`.
fn chat_id_value(id: &str) -> Value {
    match id.trim().parse::<i64>() {
        Ok(n) => json!(n),
        Err(_) => json!(id),
    }
}

// ---- the Bot API's wire types (only the fields used) ----

#[derive(Debug, Deserialize)]
struct ApiAnswer {
    ok: bool,
    #[serde(default)]
    result: Option<Value>,
    #[serde(default)]
    error_code: Option<i64>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    parameters: Option<ApiParameters>,
}

#[derive(Debug, Deserialize)]
struct ApiParameters {
    #[serde(default)]
    retry_after: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct ApiUpdate {
    update_id: i64,
    #[serde(default)]
    message: Option<ApiMessage>,
    #[serde(default)]
    callback_query: Option<ApiCallbackQuery>,
}

#[derive(Debug, Deserialize)]
struct ApiUser {
    id: i64,
    #[serde(default)]
    is_bot: bool,
    #[serde(default)]
    first_name: String,
    #[serde(default)]
    last_name: Option<String>,
    #[serde(default)]
    username: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ApiChat {
    id: i64,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Debug, Deserialize)]
struct ApiEntity {
    #[serde(rename = "type")]
    kind: String,
    offset: usize,
    length: usize,
    #[serde(default)]
    user: Option<ApiUser>,
}

#[derive(Debug, Deserialize)]
struct ApiPhotoSize {
    #[serde(default)]
    width: Option<u64>,
    #[serde(default)]
    height: Option<u64>,
    #[serde(default)]
    file_size: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct ApiFile {
    #[serde(default)]
    file_name: Option<String>,
    #[serde(default)]
    file_size: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct ApiMessage {
    message_id: i64,
    #[serde(default)]
    from: Option<ApiUser>,
    chat: ApiChat,
    #[serde(default)]
    message_thread_id: Option<i64>,
    #[serde(default)]
    is_topic_message: Option<bool>,
    #[serde(default)]
    reply_to_message: Option<Box<ApiMessage>>,
    #[serde(default)]
    forum_topic_created: Option<Value>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    entities: Option<Vec<ApiEntity>>,
    #[serde(default)]
    caption: Option<String>,
    #[serde(default)]
    caption_entities: Option<Vec<ApiEntity>>,
    #[serde(default)]
    photo: Option<Vec<ApiPhotoSize>>,
    #[serde(default)]
    document: Option<ApiFile>,
    #[serde(default)]
    voice: Option<ApiFile>,
    #[serde(default)]
    audio: Option<ApiFile>,
    #[serde(default)]
    video: Option<ApiFile>,
}

#[derive(Debug, Deserialize)]
struct ApiCallbackQuery {
    id: String,
    from: ApiUser,
    #[serde(default)]
    message: Option<ApiMessage>,
    #[serde(default)]
    data: Option<String>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    const BOT: &str = "switchboard_test_bot";

    #[test]
    fn strips_mentions() {
        assert_eq!(
            strip_mention("@switchboard_test_bot hello", BOT),
            ("hello".into(), true)
        );
        assert_eq!(
            strip_mention("hey @Switchboard_Test_Bot what's up", BOT),
            ("hey what's up".into(), true)
        );
        assert_eq!(
            strip_mention("@switchboard_test_bot: do it", BOT),
            ("do it".into(), true)
        );
        assert_eq!(
            strip_mention("/status@switchboard_test_bot now", BOT),
            ("/status now".into(), true)
        );
        assert_eq!(
            strip_mention("ask @switchboard_test_bot2 instead", BOT),
            ("ask @switchboard_test_bot2 instead".into(), false)
        );
        assert_eq!(
            strip_mention("mail me@switchboard_test_bot", BOT),
            ("mail me@switchboard_test_bot".into(), false)
        );
        assert_eq!(
            strip_mention("ünï @switchboard_test_bot", BOT),
            ("ünï".into(), true)
        );
        assert_eq!(strip_mention("  plain  ", BOT), ("plain".into(), false));
    }

    #[test]
    fn entity_mentions_use_utf16() {
        let me = BotIdentity {
            id: 999,
            username: BOT.into(),
        };
        let text = "🙂 @switchboard_test_bot";
        let e = vec![ApiEntity {
            kind: "mention".into(),
            offset: 3,
            length: 21,
            user: None,
        }];
        assert!(mentions_in_entities(text, Some(&e), &me));
        let e = vec![ApiEntity {
            kind: "mention".into(),
            offset: 2,
            length: 21,
            user: None,
        }];
        assert!(!mentions_in_entities(text, Some(&e), &me));
    }

    #[test]
    fn debug_hides_the_token() {
        let cfg = TelegramConfig::new("123456:SECRET-SECRET");
        let s = format!("{cfg:?}");
        assert!(!s.contains("SECRET"), "{s}");
        let ch = TelegramChannel::new(cfg).unwrap();
        assert!(!format!("{ch:?}").contains("SECRET"));
        assert_eq!(
            ch.client.redact("http://x/bot123456:SECRET-SECRET/getMe"),
            "http://x/bot<redacted>/getMe"
        );
    }

    #[test]
    fn rejects_bad_config() {
        assert!(TelegramChannel::new(TelegramConfig::new("")).is_err());
        assert!(TelegramChannel::new(TelegramConfig::new("no-colon")).is_err());
        assert!(TelegramChannel::new(TelegramConfig::new("1:a/b")).is_err());
        let mut cfg = TelegramConfig::new("1:abc");
        cfg.base_url = "ftp://x".into();
        assert!(TelegramChannel::new(cfg).is_err());
    }
}
