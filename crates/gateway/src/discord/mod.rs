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

use crate::health::ChannelHealth;
use crate::platform::{self, Limits, OverCap, PlatformClient, REDACTED, Rate, RetryPolicy};

use parking_lot::Mutex;
use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::channel::{
    Attachment, Button, ButtonPress, Channel, ChannelContext, ChannelError, ChannelInfo, ChatRef,
    Fetched, OutgoingFile,
};

mod gateway;
mod inbound;
mod rest;
mod wire;

use gateway::*;
use rest::*;
use wire::*;

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
/// The permissions the invite link asks for: View Channels (1 << 10), Send Messages
/// (1 << 11), Attach Files (1 << 15), Read Message History (1 << 16), Send Messages in
/// Threads (1 << 38).
const INVITE_PERMISSIONS: u64 = (1 << 10) | (1 << 11) | (1 << 15) | (1 << 16) | (1 << 38);

/// How long an interaction's token takes follow-ups (Discord's 15 minutes).
const INTERACTION_TOKEN_TTL: Duration = Duration::from_secs(15 * 60);
/// Message flag: only the interaction's user sees it.
const EPHEMERAL: u64 = 1 << 6;
/// Longest label of a button (longer ones are cut).
const MAX_LABEL: usize = 80;
/// Buttons per action row, and rows per message.
const ROW_LEN: usize = 5;
const MAX_ROWS: usize = 5;

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
    info: ChannelInfo,
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

#[async_trait]
impl Channel for DiscordChannel {
    fn info(&self) -> &ChannelInfo {
        &self.info
    }

    async fn run(
        &self,
        ctx: ChannelContext,
        cancel: CancellationToken,
    ) -> Result<(), ChannelError> {
        self.client.connecting("starting");
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
            Ok(()) => self.client.stopped(),
            Err(e) => {
                tracing::error!(channel = %self.cfg.name, error = %e, "stopped the Discord gateway connection");
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
        let target = self.target(chat)?;
        let mut body = json!({
            "content": text,
            "allowed_mentions": {"parse": [], "replied_user": true},
        });
        if !buttons.is_empty() {
            body["components"] = self.components(buttons)?;
        }
        let reply_to = self.reply_to.lock().get(&chat.id).cloned();
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
            let mut map = self.reply_to.lock();
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

    /// The file as an attachment of a message (multipart), the caption as its content.
    async fn send_file(&self, chat: &ChatRef, file: &OutgoingFile) -> Result<String, ChannelError> {
        let target = self.target(chat)?;
        let body = json!({
            "content": file.caption.clone().unwrap_or_default(),
            "allowed_mentions": {"parse": []},
            "attachments": [{"id": 0, "filename": file.name}],
        });
        let mut req = Req::new(
            reqwest::Method::POST,
            format!("/channels/{target}/messages"),
            Some(body),
        );
        req.bucket = format!("POST /channels/{target}/messages");
        req.keys = platform::send_keys(chat);
        req.file = Some(file.clone());
        let result = self.call(&req).await?;
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

    /// The attachment from Discord's CDN (no credentials), only on Discord's hosts.
    async fn fetch(&self, a: &Attachment, max_bytes: u64) -> Result<Fetched, String> {
        let url = a.source.as_deref().ok_or("no attachment URL")?;
        let url = crate::platform::file_url_allowed(
            url,
            self.client.base(),
            &["discordapp.com", "discordapp.net", "discord.com"],
        )?;
        crate::platform::client::check_declared(a, max_bytes)?;
        let bytes = self
            .client
            .download("attachment", |http| http.get(url.clone()), max_bytes)
            .await?;
        let name = a.name.clone().unwrap_or_else(|| format!("{}.bin", a.kind));
        Ok(Fetched { bytes, name })
    }

    async fn test(&self) -> Result<String, ChannelError> {
        let (id, username) = self.get_me().await?;
        Ok(format!("@{username} (id {id})"))
    }

    /// The OAuth2 link that adds the bot to a server (a bot's user id is its application's
    /// client id), asking for what the gateway uses: view channels, send messages (in
    /// threads too), attach files, read the history.
    async fn open_link(&self) -> Result<Option<String>, ChannelError> {
        let (id, _) = self.get_me().await?;
        Ok(Some(format!(
            "https://discord.com/oauth2/authorize?client_id={id}&scope=bot%20applications.commands&permissions={INVITE_PERMISSIONS}"
        )))
    }

    fn status(&self) -> String {
        self.client.status()
    }

    fn health(&self) -> ChannelHealth {
        self.client.health()
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod prop_tests;
