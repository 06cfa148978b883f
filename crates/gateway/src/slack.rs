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

use crate::platform::{
    self, Answer, BOT, Call, Limits, OverCap, PlatformClient, REDACTED, Rate, RetryPolicy, Verdict,
    pause,
};
use crate::util::{Backoff, lock};
use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use futures::{SinkExt, StreamExt};
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use subtle::ConstantTimeEq;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_util::sync::CancellationToken;

use crate::channel::{
    Attachment, Button, ButtonPress, Channel, ChannelContext, ChannelError, ChannelState, ChatKind,
    ChatRef, Inbound, InboundHttpError, InboundMessage, Peer,
};

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
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// After this long without a frame the socket is pinged; after twice this, it is dropped.
const SOCKET_IDLE: Duration = Duration::from_secs(60);
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
}

impl SlackConfig {
    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_retries: self.max_retries,
            max_retry_after: self.max_retry_after,
            over_cap: self.over_cap,
            ..RetryPolicy::default()
        }
    }

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

impl SlackChannel {
    /// Checks the configuration and builds the HTTP client (no network call).
    pub fn new(cfg: SlackConfig) -> Result<Self, ChannelError> {
        let other = |reason: String| ChannelError::Other {
            channel: cfg.name.clone(),
            reason,
        };
        let bot_token = cfg.bot_token.trim().to_owned();
        if bot_token.is_empty() {
            return Err(other("no bot token".into()));
        }
        if !bot_token.starts_with("xoxb-") || !header_safe(&bot_token) {
            return Err(other(
                "not a bot token (expected `xoxb-…` from OAuth & Permissions)".into(),
            ));
        }
        let app_token = cfg
            .app_token
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned);
        if let Some(t) = &app_token
            && (!t.starts_with("xapp-") || !header_safe(t))
        {
            return Err(other(
                "not an app-level token (expected `xapp-…` with connections:write)".into(),
            ));
        }
        let signing_secret = cfg
            .signing_secret
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned);
        if app_token.is_none() && signing_secret.is_none() {
            return Err(other(
                "set app_token (Socket Mode) or signing_secret (Events API) to receive messages"
                    .into(),
            ));
        }
        let base = cfg.api_base.trim().trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(other(format!(
                "api_base {base:?}: expected an http:// or https:// URL"
            )));
        }
        if cfg.edit_interval > Duration::from_secs(3600) {
            return Err(other("edit_interval: at most one hour".into()));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|e| other(format!("HTTP client: {e}")))?;
        let cfg = SlackConfig {
            bot_token,
            app_token,
            signing_secret,
            ..cfg
        };
        let secrets = [
            Some(cfg.bot_token.clone()),
            cfg.app_token.clone(),
            cfg.signing_secret.clone(),
        ]
        .into_iter()
        .flatten()
        .collect();
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
            seen: Mutex::new(Seen::default()),
            threads: Mutex::new(HashSet::new()),
            ctx: Mutex::new(None),
            names: Mutex::new(HashMap::new()),
        })
    }

    /// The name to show for `user`: the profile's display name, else the real name, from
    /// `users.info` (needs the `users:read` scope), cached. `None` when Slack does not say
    /// (the caller shows the id).
    async fn display_name(&self, user: &str) -> Option<String> {
        match lock(&self.names).get(user) {
            Some((Some(n), _)) => return Some(n.clone()),
            Some((None, at)) if at.elapsed() < NAME_RETRY => return None,
            _ => {}
        }
        let name = match self.call("users.info", &json!({ "user": user })).await {
            Ok(info) => [
                &["user", "profile", "display_name"][..],
                &["user", "profile", "real_name"],
                &["user", "real_name"],
                &["user", "name"],
            ]
            .iter()
            .find_map(|path| str_at(&info, path).filter(|n| !n.trim().is_empty())),
            Err(e) => {
                tracing::debug!(channel = %self.cfg.name, user, error = %e, "users.info failed; showing the user id");
                None
            }
        };
        let mut names = lock(&self.names);
        if names.len() > 10_000 {
            names.clear();
        }
        names.insert(user.to_owned(), (name.clone(), std::time::Instant::now()));
        name
    }

    /// The configuration (its `Debug` hides the secrets).
    pub fn config(&self) -> &SlackConfig {
        &self.cfg
    }

    /// Events API mode: a signing secret and no app token.
    fn events_api(&self) -> bool {
        self.cfg.app_token.is_none() && self.cfg.signing_secret.is_some()
    }

    fn set_status(&self, status: impl Into<String>) {
        self.client.set_status(status);
    }

    /// `text` without any of the secrets.
    fn redact(&self, text: &str) -> String {
        self.client.redact(text)
    }

    fn other(&self, reason: impl Into<String>) -> ChannelError {
        self.client.other(reason)
    }

    /// What a Web API answer means: 429 (or `ok: false, error: ratelimited`) is a rate
    /// limit; `ok: false` is [`ChannelError::Api`].
    fn read(&self, method: &str, answer: Answer) -> Verdict<Value> {
        let status = answer.status;
        if status == reqwest::StatusCode::TOO_MANY_REQUESTS {
            return Verdict::RateLimited(answer.retry_after());
        }
        let parsed = match answer.json() {
            Some(v @ Value::Object(_)) if v.get("ok").is_some_and(Value::is_boolean) => v,
            _ if status.is_server_error() => {
                return Verdict::Transient(self.client.server_error(method, status));
            }
            _ => {
                return Verdict::Failed(self.client.api_error(
                    method,
                    status.as_u16(),
                    &format!("HTTP {status}; the answer is not a Web API response"),
                ));
            }
        };
        if parsed.get("ok").and_then(Value::as_bool) == Some(true) {
            return Verdict::Done(parsed);
        }
        let mut description = parsed
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("unknown_error")
            .to_owned();
        if description == "ratelimited" {
            return Verdict::RateLimited(None);
        }
        if let Some(needed) = parsed.get("needed").and_then(Value::as_str) {
            description.push_str(&format!(" (needed: {needed})"));
        }
        Verdict::Failed(self.client.api_error(method, status.as_u16(), &description))
    }

    /// One Web API call with `token` on the outbox `keys`, retried as the policy says.
    /// `edit_of`: the message this call edits (pending edits of it coalesce; `None` when a
    /// newer one took its place).
    async fn call_on(
        &self,
        method: &str,
        params: &Value,
        token: &str,
        keys: &[String],
        edit_of: Option<&str>,
    ) -> Result<Option<Value>, ChannelError> {
        let call = Call {
            label: method,
            keys,
            timeout: CALL_TIMEOUT,
            policy: None,
        };
        let build = |http: &reqwest::Client, base: &str| {
            http.post(format!("{base}/{method}"))
                .bearer_auth(token)
                .json(params)
        };
        let read = |answer| self.read(method, answer);
        match edit_of {
            Some(message) => self.client.edit(call, message, build, read).await,
            None => self.client.call(call, build, read).await.map(Some),
        }
    }

    /// One call with the bot token that is not a message in a channel.
    async fn call(&self, method: &str, params: &Value) -> Result<Value, ChannelError> {
        self.call_with(method, params, &self.cfg.bot_token).await
    }

    async fn call_with(
        &self,
        method: &str,
        params: &Value,
        token: &str,
    ) -> Result<Value, ChannelError> {
        let answer = self
            .call_on(method, params, token, &[BOT.to_owned()], None)
            .await?;
        Ok(answer.unwrap_or(Value::Null))
    }

    async fn auth_test(&self) -> Result<BotIdentity, ChannelError> {
        let v = self.call("auth.test", &json!({})).await?;
        let s = |k: &str| {
            v.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let user_id = s("user_id");
        if user_id.is_empty() {
            return Err(self.other("auth.test: the answer has no user_id"));
        }
        Ok(BotIdentity {
            user_id,
            user: s("user"),
            team: s("team"),
        })
    }

    /// The bot's identity, learned once.
    async fn identity(&self) -> Result<BotIdentity, ChannelError> {
        self.me.get_or_try_init(|| self.auth_test()).await.cloned()
    }

    /// Learns the bot identity, retrying transient failures; `None` when cancelled.
    async fn identify(
        &self,
        cancel: &CancellationToken,
    ) -> Result<Option<BotIdentity>, ChannelError> {
        let mut backoff = Backoff::default();
        loop {
            let r = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Ok(None),
                r = self.identity() => r,
            };
            match r {
                Ok(me) => return Ok(Some(me)),
                Err(e) if is_fatal(&e) => return Err(e),
                Err(e) => {
                    let wait = backoff.next_wait();
                    tracing::warn!(channel = %self.cfg.name, error = %e, ?wait, "auth.test failed; retrying");
                    self.set_status(format!("error: {e}"));
                    if !pause(wait, cancel).await {
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// Loads the taken event ids a previous run stored.
    async fn load_seen(&self, state: &dyn ChannelState) {
        if let Some(stored) = state.get(SEEN_KEY).await {
            let mut seen = lock(&self.seen);
            for key in stored.lines().map(str::trim).filter(|k| !k.is_empty()) {
                seen.insert(key.to_owned());
            }
        }
    }

    fn is_seen(&self, keys: &[String]) -> bool {
        lock(&self.seen).contains_any(keys)
    }

    /// Remembers a taken item's keys (memory and state).
    async fn remember_taken(&self, state: Option<&dyn ChannelState>, keys: &[String]) {
        let persisted = {
            let mut seen = lock(&self.seen);
            for k in keys {
                seen.insert(k.clone());
            }
            seen.persisted()
        };
        if let Some(state) = state
            && let Err(reason) = state.set(SEEN_KEY, &persisted).await
        {
            tracing::warn!(channel = %self.cfg.name, %reason, "cannot store the taken event ids");
        }
    }

    /// Remembers a thread the bot takes part in (memory and state).
    async fn remember_thread(&self, state: Option<&dyn ChannelState>, key: &str) {
        {
            let mut threads = lock(&self.threads);
            if threads.len() >= THREADS_MEMORY {
                threads.clear();
            }
            threads.insert(key.to_owned());
        }
        if let Some(state) = state
            && let Err(reason) = state.set(key, "1").await
        {
            tracing::warn!(channel = %self.cfg.name, %reason, "cannot store a thread");
        }
    }

    async fn thread_known(&self, state: Option<&dyn ChannelState>, key: &str) -> bool {
        if lock(&self.threads).contains(key) {
            return true;
        }
        let Some(state) = state else {
            return false;
        };
        if state.get(key).await.is_some() {
            lock(&self.threads).insert(key.to_owned());
            return true;
        }
        false
    }

    /// Hands `mapped` to the sink unless it was taken before, then remembers it. `Err`: the
    /// sink refused it (don't acknowledge it to Slack).
    async fn deliver(&self, ctx: &ChannelContext, mapped: Mapped) -> Result<(), String> {
        if self.is_seen(&mapped.keys) {
            tracing::debug!(channel = %self.cfg.name, keys = ?mapped.keys, "duplicate delivery; ignoring it");
            return Ok(());
        }
        let state = Some(ctx.state.as_ref());
        if let Some(thread) = &mapped.thread {
            self.remember_thread(state, thread).await;
        }
        ctx.sink.accept(mapped.item).await?;
        self.remember_taken(state, &mapped.keys).await;
        Ok(())
    }

    // ---- Socket Mode ----

    async fn run_socket(
        &self,
        ctx: &ChannelContext,
        cancel: &CancellationToken,
        app_token: &str,
    ) -> Result<(), ChannelError> {
        let Some(me) = self.identify(cancel).await? else {
            return Ok(());
        };
        tracing::info!(channel = %self.cfg.name, bot = %me.user, user_id = %me.user_id, team = %me.team, "slack bot identified; connecting over Socket Mode");
        let mut backoff = Backoff::default();
        let mut disconnects = Backoff::default();
        loop {
            if cancel.is_cancelled() {
                return Ok(());
            }
            let params = json!({});
            let r = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Ok(()),
                r = self.call_with("apps.connections.open", &params, app_token) => r,
            };
            let url = match r.and_then(|v| {
                v.get("url")
                    .and_then(Value::as_str)
                    .filter(|u| u.starts_with("wss://") || u.starts_with("ws://"))
                    .map(str::to_owned)
                    .ok_or_else(|| {
                        self.other("apps.connections.open: the answer has no websocket url")
                    })
            }) {
                Ok(url) => url,
                Err(e) if is_fatal(&e) => return Err(e),
                Err(e) => {
                    let wait = backoff.next_wait();
                    tracing::warn!(channel = %self.cfg.name, error = %e, ?wait, "cannot open a Socket Mode connection; retrying");
                    self.set_status(format!("socket: reconnecting ({e})"));
                    if !pause(wait, cancel).await {
                        return Ok(());
                    }
                    continue;
                }
            };
            let session_started = std::time::Instant::now();
            let end = self
                .socket_session(&url, &me, ctx, cancel, &mut backoff)
                .await;
            // A connection that lasted is a normal refresh: the next disconnect is answered
            // at once again.
            if session_started.elapsed() > std::time::Duration::from_secs(300) {
                disconnects.reset();
            }
            match end {
                SessionEnd::Cancelled => return Ok(()),
                SessionEnd::Disconnect => {
                    // Reconnecting at once is what Slack asks for, but a socket that is
                    // disconnected again and again (Socket Mode turned off for the app:
                    // `link_disabled`) must not spin: the waits grow.
                    let wait = disconnects.next_wait();
                    tracing::info!(channel = %self.cfg.name, ?wait, "Slack asked to reconnect");
                    self.set_status("socket: reconnecting");
                    if !pause(
                        wait.saturating_sub(std::time::Duration::from_secs(1)),
                        cancel,
                    )
                    .await
                    {
                        return Ok(());
                    }
                }
                SessionEnd::Lost(reason) => {
                    let wait = backoff.next_wait();
                    tracing::warn!(channel = %self.cfg.name, %reason, ?wait, "Socket Mode connection lost; reconnecting");
                    self.set_status(format!("socket: reconnecting ({reason})"));
                    if !pause(wait, cancel).await {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// One websocket connection, until it ends.
    async fn socket_session(
        &self,
        url: &str,
        me: &BotIdentity,
        ctx: &ChannelContext,
        cancel: &CancellationToken,
        backoff: &mut Backoff,
    ) -> SessionEnd {
        let connect = tokio::time::timeout(CONNECT_TIMEOUT, tokio_tungstenite::connect_async(url));
        let ws = tokio::select! {
            biased;
            _ = cancel.cancelled() => return SessionEnd::Cancelled,
            r = connect => r,
        };
        let mut ws = match ws {
            Ok(Ok((ws, _))) => ws,
            Ok(Err(e)) => {
                return SessionEnd::Lost(format!(
                    "websocket: {}",
                    self.redact(&e.to_string()).replace(url, "<socket url>")
                ));
            }
            Err(_) => return SessionEnd::Lost("websocket: connect timed out".into()),
        };
        self.set_status("socket: connecting");
        let mut last_frame = Instant::now();
        let mut pinged = false;
        loop {
            let idle_at = last_frame + if pinged { SOCKET_IDLE * 2 } else { SOCKET_IDLE };
            let frame = tokio::select! {
                biased;
                _ = cancel.cancelled() => {
                    let _ = ws.close(None).await;
                    return SessionEnd::Cancelled;
                }
                _ = tokio::time::sleep_until(idle_at) => {
                    if pinged {
                        return SessionEnd::Lost("no answer from Slack for 2 minutes".into());
                    }
                    pinged = true;
                    if ws.send(WsMessage::Ping(Vec::new().into())).await.is_err() {
                        return SessionEnd::Lost("websocket: cannot send a ping".into());
                    }
                    continue;
                }
                f = ws.next() => f,
            };
            last_frame = Instant::now();
            pinged = false;
            let text = match frame {
                None => return SessionEnd::Lost("websocket closed".into()),
                Some(Err(e)) => {
                    return SessionEnd::Lost(format!(
                        "websocket: {}",
                        self.redact(&e.to_string()).replace(url, "<socket url>")
                    ));
                }
                Some(Ok(WsMessage::Close(_))) => {
                    return SessionEnd::Lost("websocket closed by Slack".into());
                }
                Some(Ok(WsMessage::Text(t))) => t,
                Some(Ok(_)) => continue,
            };
            let envelope: Value = match serde_json::from_str(text.as_str()) {
                Ok(v) => v,
                Err(e) => {
                    tracing::warn!(channel = %self.cfg.name, error = %e, "a Socket Mode frame that is not JSON; ignoring it");
                    continue;
                }
            };
            let kind = envelope
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or_default();
            match kind {
                "hello" => {
                    backoff.reset();
                    self.set_status("socket: connected");
                    tracing::info!(channel = %self.cfg.name, "Socket Mode connected");
                    continue;
                }
                "disconnect" => {
                    let _ = ws.close(None).await;
                    return SessionEnd::Disconnect;
                }
                "events_api" | "interactive" | "slash_commands" => {}
                other => {
                    tracing::debug!(channel = %self.cfg.name, kind = other, "Socket Mode frame ignored");
                    continue;
                }
            }
            let Some(envelope_id) = envelope.get("envelope_id").and_then(Value::as_str) else {
                tracing::warn!(channel = %self.cfg.name, kind, "an envelope without envelope_id; ignoring it");
                continue;
            };
            let payload = envelope.get("payload").unwrap_or(&Value::Null);
            let mapped = match kind {
                "events_api" => {
                    self.map_event_callback(payload, me, Some(ctx.state.as_ref()))
                        .await
                }
                "interactive" => self.map_interactive(payload),
                _ => self.map_slash_command(payload).await,
            };
            if let Some(mapped) = mapped {
                if let Err(reason) = self.deliver(ctx, mapped).await {
                    tracing::warn!(channel = %self.cfg.name, envelope_id, %reason, "the gateway did not take an event; not acknowledging it (Slack delivers it again)");
                    self.set_status(format!("error: inbound not stored: {reason}"));
                    continue;
                }
                self.set_status("socket: connected");
            }
            let ack = json!({ "envelope_id": envelope_id }).to_string();
            if let Err(e) = ws.send(WsMessage::Text(ack.into())).await {
                return SessionEnd::Lost(format!("websocket: cannot acknowledge: {e}"));
            }
        }
    }

    // ---- mapping Slack payloads ----

    /// An `event_callback` (Socket Mode `events_api` payload, or Events API body).
    async fn map_event_callback(
        &self,
        payload: &Value,
        me: &BotIdentity,
        state: Option<&dyn ChannelState>,
    ) -> Option<Mapped> {
        let event = payload.get("event")?;
        let event_id = payload.get("event_id").and_then(Value::as_str);
        match event.get("type").and_then(Value::as_str) {
            Some("message" | "app_mention") => self.map_message(event, event_id, me, state).await,
            other => {
                tracing::debug!(channel = %self.cfg.name, kind = ?other, "event ignored");
                None
            }
        }
    }

    async fn map_message(
        &self,
        event: &Value,
        event_id: Option<&str>,
        me: &BotIdentity,
        state: Option<&dyn ChannelState>,
    ) -> Option<Mapped> {
        let s = |k: &str| event.get(k).and_then(Value::as_str);
        if event.get("bot_id").is_some_and(|b| !b.is_null()) {
            return None;
        }
        match s("subtype") {
            None | Some("file_share" | "thread_broadcast") => {}
            Some(_) => return None,
        }
        let user = s("user").filter(|u| !u.is_empty())?;
        if user == me.user_id {
            return None;
        }
        let channel = s("channel").filter(|c| !c.is_empty())?;
        let ts = s("ts").filter(|t| !t.is_empty())?;
        let (text, mentioned) = strip_mention(s("text").unwrap_or_default(), &me.user_id);
        let attachments = files(event);
        if text.is_empty() && attachments.is_empty() {
            return None;
        }
        let direct = match s("channel_type") {
            Some(t) => t == "im",
            None => channel.starts_with('D'),
        };
        let thread_ts = s("thread_ts").filter(|t| !t.is_empty() && *t != ts);
        let (chat, thread_key) = if direct {
            (
                ChatRef {
                    id: channel.to_owned(),
                    kind: ChatKind::Direct,
                    thread: None,
                },
                None,
            )
        } else {
            let root = thread_ts.unwrap_or(ts);
            let key = thread_key(channel, root);
            let known = match thread_ts {
                None => false,
                Some(_) => mentioned || self.thread_known(state, &key).await,
            };
            if !(mentioned || known) {
                return None;
            }
            (
                ChatRef {
                    id: channel.to_owned(),
                    kind: ChatKind::Thread,
                    thread: Some(root.to_owned()),
                },
                Some(key),
            )
        };
        let profile = event.get("user_profile");
        let from_event = ["display_name", "real_name"].iter().find_map(|k| {
            profile
                .and_then(|p| p.get(*k))
                .and_then(Value::as_str)
                .filter(|n| !n.trim().is_empty())
                .map(str::to_owned)
        });
        let name = match from_event {
            Some(n) => n,
            None => self
                .display_name(user)
                .await
                .unwrap_or_else(|| user.to_owned()),
        };
        let username = profile
            .and_then(|p| p.get("name"))
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .map(str::to_owned);
        let mut keys = vec![format!("msg:{channel}:{ts}")];
        if let Some(id) = event_id {
            keys.push(format!("event:{id}"));
        }
        Some(Mapped {
            item: Inbound::Message(InboundMessage {
                channel: self.cfg.name.clone(),
                peer: Peer {
                    id: user.to_owned(),
                    name,
                    username,
                },
                chat,
                text,
                message_id: ts.to_owned(),
                addressed: true,
                attachments,
                meta: json!({
                    "event_id": event_id,
                    "ts": ts,
                    "thread_ts": thread_ts,
                    "mentioned": mentioned,
                    "team": event.get("team"),
                }),
            }),
            keys,
            thread: thread_key,
        })
    }

    /// A `block_actions` payload: a press of one of our buttons.
    fn map_interactive(&self, payload: &Value) -> Option<Mapped> {
        if payload.get("type").and_then(Value::as_str) != Some("block_actions") {
            tracing::debug!(channel = %self.cfg.name, kind = ?payload.get("type"), "interactive payload ignored");
            return None;
        }
        let action = payload.get("actions")?.as_array()?.first()?;
        let data = str_at(action, &["value"]).or_else(|| str_at(action, &["action_id"]))?;
        let user_id = str_at(payload, &["user", "id"])?;
        let channel = str_at(payload, &["channel", "id"])
            .or_else(|| str_at(payload, &["container", "channel_id"]))?;
        let message_ts = str_at(payload, &["container", "message_ts"])
            .or_else(|| str_at(payload, &["message", "ts"]))?;
        let press_id = str_at(payload, &["trigger_id"]).unwrap_or_else(|| {
            format!(
                "{message_ts}:{}",
                str_at(action, &["action_ts"]).unwrap_or_default()
            )
        });
        let thread = str_at(payload, &["message", "thread_ts"]);
        let chat = if channel.starts_with('D') {
            ChatRef {
                id: channel,
                kind: ChatKind::Direct,
                thread: None,
            }
        } else {
            match thread {
                Some(t) => ChatRef {
                    id: channel,
                    kind: ChatKind::Thread,
                    thread: Some(t),
                },
                None => ChatRef {
                    id: channel,
                    kind: ChatKind::Group,
                    thread: None,
                },
            }
        };
        // Shown as "Allowed by <@U…>": Slack renders the mention as the person's name.
        let name = mention(&user_id);
        Some(Mapped {
            keys: vec![format!("press:{press_id}")],
            item: Inbound::Press(ButtonPress {
                channel: self.cfg.name.clone(),
                press_id,
                peer: Peer {
                    id: user_id,
                    name,
                    username: str_at(payload, &["user", "username"]),
                },
                chat,
                message_id: message_ts,
                data,
            }),
            thread: None,
        })
    }

    /// A slash command (Socket Mode): a message `"/cmd text"` in the chat it was typed in.
    async fn map_slash_command(&self, payload: &Value) -> Option<Mapped> {
        let s = |k: &str| {
            payload
                .get(k)
                .and_then(Value::as_str)
                .filter(|v| !v.is_empty())
        };
        let command = s("command")?;
        let user = s("user_id")?;
        let channel = s("channel_id")?;
        let trigger = s("trigger_id")?;
        let text = format!("{command} {}", s("text").unwrap_or_default())
            .trim()
            .to_owned();
        let kind = if channel.starts_with('D') {
            ChatKind::Direct
        } else {
            ChatKind::Group
        };
        let name = match self.display_name(user).await {
            Some(n) => n,
            None => s("user_name").unwrap_or(user).to_owned(),
        };
        Some(Mapped {
            keys: vec![format!("press:{trigger}")],
            item: Inbound::Message(InboundMessage {
                channel: self.cfg.name.clone(),
                peer: Peer {
                    id: user.to_owned(),
                    name,
                    username: s("user_name").map(str::to_owned),
                },
                chat: ChatRef {
                    id: channel.to_owned(),
                    kind,
                    thread: None,
                },
                text,
                message_id: trigger.to_owned(),
                addressed: true,
                attachments: Vec::new(),
                meta: json!({ "slash_command": command }),
            }),
            thread: None,
        })
    }

    // ---- Events API ----

    /// Checks an Events API request's signature and age.
    fn verify(&self, headers: &axum::http::HeaderMap, body: &[u8]) -> bool {
        let Some(secret) = &self.cfg.signing_secret else {
            return false;
        };
        let header = |name: &str| {
            let mut values = headers.get_all(name).iter();
            match (values.next(), values.next()) {
                (Some(v), None) => v.to_str().ok().map(str::trim),
                _ => None,
            }
        };
        let (Some(ts), Some(sig)) = (header(TIMESTAMP_HEADER), header(SIGNATURE_HEADER)) else {
            return false;
        };
        if ts.is_empty() || ts.len() > 18 || !ts.bytes().all(|b| b.is_ascii_digit()) {
            return false;
        }
        let Some(given) = sig
            .strip_prefix("v0=")
            .filter(|h| h.len() == 64)
            .and_then(|h| hex::decode(h).ok())
        else {
            return false;
        };
        let Some(expected) = mac_bytes(secret, ts, body) else {
            return false;
        };
        if !bool::from(expected.as_slice().ct_eq(given.as_slice())) {
            return false;
        }
        let Ok(ts) = ts.parse::<u64>() else {
            return false;
        };
        now_secs().abs_diff(ts) <= SIGNATURE_TOLERANCE.as_secs()
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

fn thread_key(channel: &str, ts: &str) -> String {
    format!("thread:{channel}:{ts}")
}

/// Errors that retrying will not fix: bad or revoked tokens, missing scopes.
fn is_fatal(e: &ChannelError) -> bool {
    match e {
        ChannelError::Api { description, .. } => {
            let code = description.split(' ').next().unwrap_or_default();
            matches!(
                code,
                "invalid_auth"
                    | "not_authed"
                    | "account_inactive"
                    | "token_revoked"
                    | "token_expired"
                    | "not_allowed_token_type"
                    | "missing_scope"
                    | "no_permission"
                    | "invalid_token"
            )
        }
        _ => false,
    }
}

fn files(event: &Value) -> Vec<Attachment> {
    event
        .get("files")
        .and_then(Value::as_array)
        .map(|files| {
            files
                .iter()
                .map(|f| Attachment {
                    kind: f
                        .get("filetype")
                        .and_then(Value::as_str)
                        .filter(|k| !k.is_empty())
                        .unwrap_or("file")
                        .to_owned(),
                    name: f.get("name").and_then(Value::as_str).map(str::to_owned),
                    size: f.get("size").and_then(Value::as_u64),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `text` without mentions of `user_id` (`<@U…>` or `<@U…|name>`), tidied; and whether
/// there was one.
fn strip_mention(text: &str, user_id: &str) -> (String, bool) {
    if user_id.is_empty() {
        return (text.trim().to_owned(), false);
    }
    let open = format!("<@{user_id}");
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut found = false;
    while let Some(pos) = rest.find(&open) {
        let after = &rest[pos + open.len()..];
        let end = match after.chars().next() {
            Some('>') => Some(1),
            Some('|') => after.find('>').map(|i| i + 1),
            _ => None,
        };
        let Some(end) = end else {
            out.push_str(&rest[..pos + open.len()]);
            rest = after;
            continue;
        };
        found = true;
        out.push_str(&rest[..pos]);
        rest = &after[end..];
        // "a <@U> b" → "a b"
        if (out.is_empty() || out.ends_with(char::is_whitespace))
            && rest.starts_with(char::is_whitespace)
        {
            rest = rest.trim_start_matches(char::is_whitespace);
        }
        // "<@U>, hi" / "<@U>: hi" → "hi"
        if out.trim().is_empty() && (rest.starts_with(',') || rest.starts_with(':')) {
            rest = rest[1..].trim_start();
        }
    }
    out.push_str(rest);
    (out.trim().to_owned(), found)
}

/// The value of field `name` of a form-encoded body.
fn form_field(body: &[u8], name: &str) -> Option<String> {
    form_urlencoded::parse(body)
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// An Events API body: JSON, or form-encoded `payload=<json>` (interactive payloads).
/// The non-empty string at `path` in `v`.
fn str_at(v: &Value, path: &[&str]) -> Option<String> {
    let mut cur = v;
    for p in path {
        cur = cur.get(*p)?;
    }
    cur.as_str().filter(|s| !s.is_empty()).map(str::to_owned)
}

fn parse_http_body(headers: &axum::http::HeaderMap, body: &[u8]) -> Result<Value, String> {
    let form = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/x-www-form-urlencoded"))
        || body.starts_with(b"payload=");
    if form {
        if let Some(payload) = form_field(body, "payload") {
            return serde_json::from_str(&payload).map_err(|e| format!("payload: {e}"));
        }
        // A slash command: its fields are the form itself.
        if form_field(body, "command").is_some() {
            let mut fields = serde_json::Map::new();
            fields.insert("type".into(), json!("slash_command"));
            for k in [
                "command",
                "text",
                "user_id",
                "user_name",
                "channel_id",
                "channel_name",
                "team_id",
                "trigger_id",
                "response_url",
            ] {
                if let Some(v) = form_field(body, k) {
                    fields.insert(k.into(), json!(v));
                }
            }
            return Ok(Value::Object(fields));
        }
        return Err("a form without `payload` or `command`".into());
    }
    serde_json::from_slice(body).map_err(|e| e.to_string())
}

// ---- Block Kit ----

/// Escapes what Slack's text fields treat specially: `&`, `<`, `>`.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn count(s: &str) -> usize {
    s.chars().count()
}

/// Markdown inline syntax as Slack mrkdwn: `**b**`/`__b__` → `*b*`, `*i*` → `_i_`, `~~s~~` →
/// `~s~`, `[text](url)` → `<url|text>`, `<https://…>` kept as a link, code spans kept; `&`,
/// `<`, `>` escaped (so agent text cannot ping `<!channel>`), except in user mentions
/// (`<@U123>`, see [`mention`]) and channel links (`<#C123>`).
pub fn mrkdwn(line: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::with_capacity(line.len());
    inline(&chars, &mut out);
    out
}

/// Where `pat` next occurs in `chars` from `from`, with a non-space char before it.
fn find_closing(chars: &[char], from: usize, pat: &[char]) -> Option<usize> {
    let mut j = from;
    while j + pat.len() <= chars.len() {
        if chars[j..j + pat.len()] == *pat && j > from && !chars[j - 1].is_whitespace() {
            return Some(j);
        }
        j += 1;
    }
    None
}

fn inline(chars: &[char], out: &mut String) {
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match c {
            '`' => {
                let mut n = 0;
                while chars.get(i + n) == Some(&'`') {
                    n += 1;
                }
                let ticks = vec!['`'; n];
                let close = (i + n..chars.len().saturating_sub(n - 1))
                    .find(|&j| chars[j..j + n] == *ticks && chars.get(j + n) != Some(&'`'));
                match close {
                    Some(j) if j > i + n => {
                        let code: String = chars[i + n..j].iter().collect();
                        out.push('`');
                        out.push_str(&escape(code.trim()));
                        out.push('`');
                        i = j + n;
                    }
                    _ => {
                        out.extend(&ticks);
                        i += n;
                    }
                }
            }
            '*' | '_' | '~' if next == Some(c) => {
                let pat = [c, c];
                let start = i + 2;
                match find_closing(chars, start, &pat) {
                    Some(j) if chars.get(start).is_some_and(|s| !s.is_whitespace()) => {
                        let mark = if c == '~' { '~' } else { '*' };
                        out.push(mark);
                        inline(&chars[start..j], out);
                        out.push(mark);
                        i = j + 2;
                    }
                    _ => {
                        out.push(c);
                        out.push(c);
                        i += 2;
                    }
                }
            }
            '*' => {
                let start = i + 1;
                let close = (start + 1..chars.len()).find(|&j| {
                    chars[j] == '*'
                        && chars.get(j + 1) != Some(&'*')
                        && chars[j - 1] != '*'
                        && !chars[j - 1].is_whitespace()
                });
                match close {
                    Some(j) if chars.get(start).is_some_and(|s| !s.is_whitespace()) => {
                        out.push('_');
                        inline(&chars[start..j], out);
                        out.push('_');
                        i = j + 1;
                    }
                    _ => {
                        out.push('*');
                        i += 1;
                    }
                }
            }
            '[' => {
                if let Some((text_end, url_end)) = link_at(chars, i) {
                    let text: String = chars[i + 1..text_end].iter().collect();
                    let url: String = chars[text_end + 2..url_end].iter().collect();
                    let mut label = String::new();
                    inline(&text.chars().collect::<Vec<_>>(), &mut label);
                    out.push('<');
                    out.push_str(&escape(&url).replace('|', "%7C"));
                    out.push('|');
                    out.push_str(&label.replace('|', "¦"));
                    out.push('>');
                    i = url_end + 1;
                } else {
                    out.push('[');
                    i += 1;
                }
            }
            '<' => {
                let close = chars[i + 1..].iter().position(|&ch| ch == '>');
                let auto = close.map(|n| chars[i + 1..i + 1 + n].iter().collect::<String>());
                match auto {
                    Some(tag) if is_user_tag(&tag) => {
                        out.push('<');
                        out.push_str(&tag);
                        out.push('>');
                        i += tag.chars().count() + 2;
                    }
                    Some(url) if is_url(&url) => {
                        out.push('<');
                        out.push_str(&escape(&url).replace('|', "%7C"));
                        out.push('>');
                        i += url.chars().count() + 2;
                    }
                    _ => {
                        out.push_str("&lt;");
                        i += 1;
                    }
                }
            }
            '>' => {
                out.push_str("&gt;");
                i += 1;
            }
            '&' => {
                out.push_str("&amp;");
                i += 1;
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
}

/// `@U123` / `@W123|name` / `#C123`: a Slack user mention or channel link (kept as it
/// is; `<!channel>`-style broadcasts are not).
fn is_user_tag(s: &str) -> bool {
    let Some(rest) = s.strip_prefix('@').or_else(|| s.strip_prefix('#')) else {
        return false;
    };
    let (id, label) = rest.split_once('|').unwrap_or((rest, ""));
    id.len() >= 2
        && id
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
        && !label.contains(['<', '>', '&'])
}

/// Escapes `&`, `<`, `>`, keeping user mentions and channel links (see [`is_user_tag`]).
fn escape_keep_mentions(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find('<') {
        out.push_str(&escape(&rest[..pos]));
        let after = &rest[pos + 1..];
        match after.find('>') {
            Some(end) if is_user_tag(&after[..end]) => {
                out.push('<');
                out.push_str(&after[..end]);
                out.push('>');
                rest = &after[end + 1..];
            }
            _ => {
                out.push_str("&lt;");
                rest = after;
            }
        }
    }
    out.push_str(&escape(rest));
    out
}

fn is_url(s: &str) -> bool {
    (s.starts_with("https://") || s.starts_with("http://") || s.starts_with("mailto:"))
        && s.len() > 8
        && !s.chars().any(char::is_whitespace)
}

/// `[text](url)` at `i`: the index of `]` and of the closing `)`.
fn link_at(chars: &[char], i: usize) -> Option<(usize, usize)> {
    let text_end = i + 1 + chars[i + 1..].iter().position(|&c| c == ']')?;
    if chars.get(text_end + 1) != Some(&'(') || text_end == i + 1 {
        return None;
    }
    let url_start = text_end + 2;
    let url_end = url_start + chars[url_start..].iter().position(|&c| c == ')')?;
    let url: String = chars[url_start..url_end].iter().collect();
    is_url(&url).then_some((text_end, url_end))
}

/// `text` of a header (plain text): inline Markdown marks removed.
fn plain(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '['
            && let Some((text_end, url_end)) = link_at(&chars, i)
        {
            out.extend(&chars[i + 1..text_end]);
            i = url_end + 1;
            continue;
        }
        let c = chars[i];
        let double = matches!(c, '*' | '_' | '~') && chars.get(i + 1) == Some(&c);
        if double {
            i += 2;
            continue;
        }
        if c != '`' {
            out.push(c);
        }
        i += 1;
    }
    out.trim().to_owned()
}

fn section(text: &str) -> Value {
    json!({"type": "section", "text": {"type": "mrkdwn", "text": text}})
}

/// Sections of `text` (mrkdwn), split to at most [`MAX_CHARS`] each (code fences repaired).
fn push_sections(blocks: &mut Vec<Value>, text: &str) {
    if text.trim().is_empty() {
        return;
    }
    if count(text) <= MAX_CHARS {
        blocks.push(section(text));
        return;
    }
    for chunk in crate::text::split_message(text, MAX_CHARS) {
        blocks.push(section(&chunk));
    }
}

fn is_fence(line: &str) -> bool {
    let indent = line.len() - line.trim_start_matches(' ').len();
    indent <= 3 && line.trim_start_matches(' ').starts_with("```")
}

fn heading(line: &str) -> Option<&str> {
    let t = line.trim_start();
    let hashes = t.len() - t.trim_start_matches('#').len();
    if !(1..=6).contains(&hashes) {
        return None;
    }
    let rest = &t[hashes..];
    if !rest.is_empty() && !rest.starts_with(' ') {
        return None;
    }
    Some(rest.trim().trim_end_matches('#').trim())
}

fn is_rule(line: &str) -> bool {
    let t: String = line.chars().filter(|c| !c.is_whitespace()).collect();
    t.len() >= 3
        && (t.chars().all(|c| c == '-')
            || t.chars().all(|c| c == '*')
            || t.chars().all(|c| c == '_'))
}

/// One line of a paragraph as mrkdwn: list bullets as "•", quotes kept.
fn paragraph_line(line: &str) -> String {
    let trimmed = line.trim_start();
    let indent = &line[..line.len() - trimmed.len()];
    for bullet in ["- ", "* ", "+ "] {
        if let Some(rest) = trimmed.strip_prefix(bullet) {
            let rest = rest.trim_start();
            // task lists
            let rest = rest
                .strip_prefix("[ ] ")
                .map(|r| format!("☐ {r}"))
                .or_else(|| {
                    rest.strip_prefix("[x] ")
                        .or_else(|| rest.strip_prefix("[X] "))
                        .map(|r| format!("☑ {r}"))
                })
                .unwrap_or_else(|| rest.to_owned());
            return format!("{indent}• {}", mrkdwn(&rest));
        }
    }
    if let Some(rest) = trimmed.strip_prefix('>') {
        return format!("> {}", mrkdwn(rest.trim_start()));
    }
    format!("{indent}{}", mrkdwn(trimmed.trim_end()))
}

/// Block Kit blocks for `markdown` (the agent's reply) and `buttons`:
///
/// - `# heading` → a `header` block (a bold section when longer than 150 chars);
/// - paragraphs (and lists, bullets as "•", and quotes) → `section` blocks with `mrkdwn`
///   (see [`mrkdwn`]);
/// - fenced code → a section with ```` ``` ```` … ```` ``` ```` (the info string dropped);
/// - `---` → a `divider`;
/// - sections longer than 3000 chars are split; when there would be more than 50 blocks,
///   neighbouring sections are merged, and what still does not fit is cut ("…");
/// - buttons → an `actions` block of `button`s (`action_id` and `value` = the data; the
///   first one `style: primary`).
///
/// Fails when a button's data is empty or longer than 255 bytes.
pub fn markdown_blocks(markdown: &str, buttons: &[Button]) -> Result<Vec<Value>, String> {
    let actions = actions_blocks(buttons)?;
    let mut blocks: Vec<Value> = Vec::new();
    let mut para: Vec<String> = Vec::new();
    let mut code: Option<Vec<&str>> = None;
    let flush = |blocks: &mut Vec<Value>, para: &mut Vec<String>| {
        if !para.is_empty() {
            push_sections(blocks, &para.join("\n"));
            para.clear();
        }
    };
    for line in markdown.lines() {
        if let Some(lines) = &mut code {
            if is_fence(line) && line.trim().trim_start_matches('`').is_empty() {
                push_sections(&mut blocks, &code_text(lines));
                code = None;
            } else {
                lines.push(line);
            }
            continue;
        }
        if is_fence(line) {
            flush(&mut blocks, &mut para);
            code = Some(Vec::new());
            continue;
        }
        if line.trim().is_empty() {
            flush(&mut blocks, &mut para);
            continue;
        }
        if let Some(h) = heading(line) {
            flush(&mut blocks, &mut para);
            let text = plain(h);
            if text.is_empty() {
                continue;
            }
            if count(&text) <= MAX_HEADER_CHARS {
                blocks.push(json!({
                    "type": "header",
                    "text": {"type": "plain_text", "text": text, "emoji": true},
                }));
            } else {
                push_sections(&mut blocks, &format!("*{}*", mrkdwn(h)));
            }
            continue;
        }
        if is_rule(line) {
            flush(&mut blocks, &mut para);
            blocks.push(json!({"type": "divider"}));
            continue;
        }
        para.push(paragraph_line(line));
    }
    if let Some(lines) = &code {
        push_sections(&mut blocks, &code_text(lines));
    }
    flush(&mut blocks, &mut para);
    let room = MAX_BLOCKS.saturating_sub(actions.len()).max(1);
    if blocks.len() > room {
        blocks = merge_sections(blocks);
    }
    if blocks.len() > room {
        let rest: Vec<String> = blocks
            .drain(room - 1..)
            .filter_map(|b| block_text(&b))
            .collect();
        let rest = crate::text::truncate(&rest.join("\n\n"), MAX_CHARS);
        blocks.push(section(&rest));
    }
    blocks.extend(actions);
    Ok(blocks)
}

fn code_text(lines: &[&str]) -> String {
    let body = escape(&lines.join("\n"));
    let body = if body.trim().is_empty() {
        " ".into()
    } else {
        body
    };
    format!("```\n{body}\n```")
}

/// The text a block shows (for merging and cutting).
fn block_text(b: &Value) -> Option<String> {
    let text = b.get("text")?.get("text")?.as_str()?;
    match b.get("type").and_then(Value::as_str) {
        Some("header") => Some(format!("*{}*", escape(text))),
        _ => Some(text.to_owned()),
    }
}

/// Neighbouring sections (and headers, as bold lines) merged while they fit in one.
fn merge_sections(blocks: Vec<Value>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let mut current: Option<String> = None;
    for b in blocks {
        let Some(text) = block_text(&b) else {
            if let Some(t) = current.take() {
                out.push(section(&t));
            }
            out.push(b);
            continue;
        };
        current = match current.take() {
            Some(cur) if count(&cur) + 2 + count(&text) <= MAX_CHARS => {
                Some(format!("{cur}\n\n{text}"))
            }
            Some(cur) => {
                out.push(section(&cur));
                Some(text)
            }
            None => Some(text),
        };
    }
    if let Some(t) = current {
        out.push(section(&t));
    }
    out
}

fn actions_blocks(buttons: &[Button]) -> Result<Vec<Value>, String> {
    let mut used = HashSet::new();
    let mut elements = Vec::with_capacity(buttons.len());
    for (i, b) in buttons.iter().enumerate() {
        if b.data.is_empty() || b.data.len() > MAX_BUTTON_DATA {
            return Err(format!(
                "button {:?}: data must be 1 to {MAX_BUTTON_DATA} bytes (is {})",
                b.text,
                b.data.len()
            ));
        }
        // action ids must be unique in a message
        let mut action_id = b.data.clone();
        let mut n = 1;
        while !used.insert(action_id.clone()) {
            n += 1;
            action_id = format!("{}#{n}", b.data);
        }
        let text = if b.text.trim().is_empty() {
            b.data.clone()
        } else {
            b.text.clone()
        };
        let mut e = json!({
            "type": "button",
            "text": {"type": "plain_text", "text": crate::text::truncate(&text, MAX_BUTTON_TEXT), "emoji": true},
            "action_id": action_id,
            "value": b.data,
        });
        if i == 0 {
            e["style"] = json!("primary");
        }
        elements.push(e);
    }
    Ok(elements
        .chunks(MAX_ACTIONS)
        .enumerate()
        .map(|(i, row)| {
            json!({"type": "actions", "block_id": format!("switchboard_actions_{i}"), "elements": row})
        })
        .collect())
}

/// Longest `text` field Slack keeps (it truncates longer ones).
const TEXT_FIELD_CHARS: usize = 40_000;

/// The `text` fallback (notifications, clients without blocks): the reply, escaped, cut to
/// what Slack keeps.
fn fallback_text(text: &str) -> String {
    crate::text::truncate(&escape_keep_mentions(text), TEXT_FIELD_CHARS)
}

#[async_trait]
impl Channel for SlackChannel {
    fn name(&self) -> &str {
        &self.cfg.name
    }

    fn max_chars(&self) -> usize {
        MESSAGE_CHARS
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
        self.load_seen(ctx.state.as_ref()).await;
        let r = match self.cfg.app_token.clone() {
            Some(app_token) => self.run_socket(&ctx, &cancel, &app_token).await,
            None => {
                // Events API: events arrive over HTTP (`inbound_http`).
                *lock(&self.ctx) = Some(ctx.clone());
                let r = match self.identify(&cancel).await {
                    Ok(Some(me)) => {
                        tracing::info!(channel = %self.cfg.name, bot = %me.user, user_id = %me.user_id, team = %me.team, "slack bot identified; receiving over the Events API");
                        self.set_status("events api");
                        cancel.cancelled().await;
                        Ok(())
                    }
                    Ok(None) => Ok(()),
                    Err(e) => Err(e),
                };
                *lock(&self.ctx) = None;
                r
            }
        };
        match &r {
            Ok(()) => self.set_status("stopped"),
            Err(e) => {
                tracing::error!(channel = %self.cfg.name, error = %e, "stopped receiving");
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
        let ctx = lock(&self.ctx).clone();
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
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn strips_mentions() {
        assert_eq!(
            strip_mention("<@UBOT> hello", "UBOT"),
            ("hello".into(), true)
        );
        assert_eq!(
            strip_mention("hey <@UBOT|switchboard> what's up", "UBOT"),
            ("hey what's up".into(), true)
        );
        assert_eq!(
            strip_mention("<@UBOT>: do it", "UBOT"),
            ("do it".into(), true)
        );
        assert_eq!(
            strip_mention("ask <@UBOT2> instead", "UBOT"),
            ("ask <@UBOT2> instead".into(), false)
        );
        assert_eq!(strip_mention("  plain ", "UBOT"), ("plain".into(), false));
    }

    #[test]
    fn inline_markdown_to_mrkdwn() {
        assert_eq!(mrkdwn("a **bold** b"), "a *bold* b");
        assert_eq!(mrkdwn("an *italic* word"), "an _italic_ word");
        assert_eq!(mrkdwn("~~gone~~"), "~gone~");
        assert_eq!(
            mrkdwn("see [the docs](https://x.y/a?b=1&c=2)"),
            "see <https://x.y/a?b=1&amp;c=2|the docs>"
        );
        assert_eq!(mrkdwn("<https://x.y>"), "<https://x.y>");
        assert_eq!(
            mrkdwn("<!channel> a<b & c>d"),
            "&lt;!channel&gt; a&lt;b &amp; c&gt;d"
        );
        assert_eq!(mrkdwn("run `a **b** <c>`"), "run `a **b** &lt;c&gt;`");
        assert_eq!(mrkdwn("2 * 3 * 4"), "2 * 3 * 4");
        assert_eq!(mrkdwn("by <@U123> in <#C1|x>"), "by <@U123> in <#C1|x>");
        assert_eq!(mrkdwn("<@here>"), "&lt;@here&gt;");
        assert_eq!(
            escape_keep_mentions("<!here> & <@U1> <b>"),
            "&lt;!here&gt; &amp; <@U1> &lt;b&gt;"
        );
        assert_eq!(mrkdwn("[not a link](nope)"), "[not a link](nope)");
        assert_eq!(mrkdwn("**unclosed"), "**unclosed");
    }

    #[test]
    fn debug_and_errors_hide_secrets() {
        let mut cfg = SlackConfig::new("xoxb-SECRET-BOT");
        cfg.app_token = Some("xapp-SECRET-APP".into());
        cfg.signing_secret = Some("SECRETSIGN".into());
        let s = format!("{cfg:?}");
        assert!(!s.contains("SECRET"), "{s}");
        let ch = SlackChannel::new(cfg).unwrap();
        assert!(!format!("{ch:?}").contains("SECRET"));
        assert_eq!(
            ch.redact("a xoxb-SECRET-BOT b xapp-SECRET-APP c SECRETSIGN"),
            "a <redacted> b <redacted> c <redacted>"
        );
    }

    #[test]
    fn rejects_bad_config() {
        let with_app = |t: &str| {
            let mut c = SlackConfig::new(t);
            c.app_token = Some("xapp-1".into());
            c
        };
        assert!(SlackChannel::new(with_app("")).is_err());
        assert!(SlackChannel::new(with_app("xoxp-user")).is_err());
        assert!(SlackChannel::new(with_app("xoxb-a b")).is_err());
        assert!(SlackChannel::new(SlackConfig::new("xoxb-1")).is_err());
        let mut c = with_app("xoxb-1");
        c.app_token = Some("xoxb-1".into());
        assert!(SlackChannel::new(c).is_err());
        let mut c = with_app("xoxb-1");
        c.api_base = "ftp://x".into();
        assert!(SlackChannel::new(c).is_err());
        assert!(SlackChannel::new(with_app("xoxb-1")).is_ok());
    }

    #[test]
    fn backoff_doubles_to_30s() {
        let mut b = Backoff::default();
        let waits: Vec<u64> = (0..7).map(|_| b.next_wait().as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30]);
    }

    #[test]
    fn signature_matches_slacks_example() {
        // The example from Slack's "Verifying requests from Slack" guide.
        let body = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        assert_eq!(
            signature("8f742231b10e8888abcd99yyyzzz85a5", "1531420618", body),
            "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
        );
    }

    /// wss:// goes through rustls (its process-default crypto provider must resolve): a TLS
    /// handshake against a plain TCP peer fails with an error, not a panic.
    #[tokio::test]
    async fn wss_uses_rustls_without_panicking() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            if let Ok((mut sock, _)) = listener.accept().await {
                use tokio::io::AsyncWriteExt;
                let _ = sock.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
            }
        });
        let r = tokio_tungstenite::connect_async(format!("wss://127.0.0.1:{}/socket", addr.port()))
            .await;
        let err = r.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            err.to_lowercase().contains("tls")
                || err.contains("InvalidContentType")
                || err.contains("corrupt"),
            "{err}"
        );
    }

    #[test]
    fn mention_helper() {
        assert_eq!(mention("U123"), "<@U123>");
    }
}
