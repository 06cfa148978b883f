//! The Mattermost channel, on Mattermost's REST API v4 and its WebSocket events, as a bot
//! account (System Console → Integrations → Bot Accounts) with its access token.
//!
//! - **Receiving**: the WebSocket (`/api/v4/websocket`, the token in `Authorization`)
//!   hands in `posted` and `reaction_added` events. After a reconnect (or a restart) the
//!   posts of the channels the bot has talked in since the last one taken are read with
//!   `GET /api/v4/channels/{id}/posts?since=` — the gateway takes each post id once, so
//!   nothing is lost or doubled. A cursor (the newest post's `create_at`) is kept in the
//!   channel state.
//! - **Conversations**: a direct message channel is one conversation; in a channel or a
//!   group message, a post that mentions the bot starts a thread (`root_id`) that is one
//!   conversation, and every later post in that thread goes to it without a mention.
//! - **Replies** stream by edits (`PUT /api/v4/posts/{id}/patch`), one a second per channel,
//!   in the conversation's thread; longer than a post (16,383 characters) they go on in new
//!   posts.
//! - **Approvals**: with [`MattermostConfig::action_url`] (where Mattermost reaches the
//!   gateway: `…/v1/gateway/channels/mattermost/webhook`) a prompt carries interactive
//!   message buttons; Mattermost posts a press there with the button's `context`, which
//!   holds an HMAC of the answer, the channel and the thread made with
//!   [`MattermostConfig::action_secret`]: a press without a right one is refused (401).
//!   Mattermost keeps the integration (URL and context) on the server, out of what clients
//!   see. Without an action URL a prompt is answered in words or by reaction (👍 / 👎,
//!   ✅ / ❌) on it.
//! - **Files**: attachments in (`GET /api/v4/files/{id}`), `send_file` out (`POST
//!   /api/v4/files`, then a post with its `file_ids`).
//! - **Rate limits**: Mattermost's own (System Console → Rate Limiting: 10 a second by
//!   default when enabled) in the outbox; a 429 is waited out by its `Retry-After` /
//!   `X-Ratelimit-Reset`.
//!
//! The token and the action secret are secrets: never logged, removed from errors.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::channel::{
    Attachment, Button, ButtonPress, Channel, ChannelContext, ChannelError, ChannelInfo, ChatKind,
    ChatRef, Fetched, Inbound, InboundHttpError, OutgoingFile, Peer,
};
use crate::health::ChannelHealth;
use crate::platform::{self, Limits, OverCap, PlatformClient, Rate, RetryPolicy};

mod catchup;
mod inbound;
mod rest;
mod ws;

/// The longest post (`PostMessageMaxRunesV2`), in characters.
pub const MAX_CHARS: usize = 16_383;
/// Mattermost's default rate limit when an administrator turns it on (10 a second).
pub const DEFAULT_PER_SECOND: u32 = 10;

/// `[channels.mattermost]`, checked.
#[derive(Clone)]
pub struct MattermostConfig {
    /// The channel's name (default `mattermost`).
    pub name: String,
    /// The server (`https://chat.example.com`).
    pub url: String,
    /// The bot account's access token. Secret.
    pub token: String,
    /// Where Mattermost posts button presses: this gateway's
    /// `…/v1/gateway/channels/{name}/webhook`, as the Mattermost server reaches it. `None`:
    /// no buttons (approvals in words or by reaction).
    pub action_url: Option<String>,
    /// The key that signs the buttons' context. Secret. Default: one made from the token.
    pub action_secret: String,
    pub edit_interval: Duration,
    /// Calls a second (the server's rate limit).
    pub per_second: u32,
    pub max_retries: u32,
    pub max_retry_after: Duration,
    pub over_cap: OverCap,
}

impl std::fmt::Debug for MattermostConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MattermostConfig")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("action_url", &self.action_url)
            .field("token", &"[redacted]")
            .field("action_secret", &"[redacted]")
            .finish_non_exhaustive()
    }
}

impl MattermostConfig {
    pub fn new(url: impl Into<String>, token: impl Into<String>) -> Self {
        Self {
            name: "mattermost".into(),
            url: url.into(),
            token: token.into(),
            action_url: None,
            action_secret: String::new(),
            edit_interval: Duration::from_secs(1),
            per_second: DEFAULT_PER_SECOND,
            max_retries: 3,
            max_retry_after: Duration::from_secs(60),
            over_cap: OverCap::Fail,
        }
    }
}

fn limits(per_second: u32, edit_interval: Duration) -> Limits {
    Limits::new()
        .with(
            platform::BOT,
            Rate::per(per_second.max(1), Duration::from_secs(1)),
        )
        .with("edit", Rate::spaced(edit_interval))
}

/// Who the bot is.
#[derive(Debug, Clone)]
pub(crate) struct Me {
    pub(crate) id: String,
    pub(crate) username: String,
}

/// The Mattermost channel (see the module docs).
pub struct MattermostChannel {
    cfg: MattermostConfig,
    info: ChannelInfo,
    client: PlatformClient,
    /// The WebSocket's URL.
    ws_url: String,
    me: Mutex<Option<Me>>,
    /// Channel types (`D`, `G`, `O`, `P`) by id, as seen.
    kinds: Mutex<HashMap<String, String>>,
    /// Threads the bot takes part in: `channel:root`.
    threads: Mutex<HashSet<String>>,
    /// Each channel's cursor, as stored.
    cursors: Mutex<HashMap<String, catchup::Cursor>>,
    /// Usernames by user id (for reactions, which carry only the id).
    names: Mutex<HashMap<String, String>>,
    /// The state, once `run` has started.
    ctx: std::sync::OnceLock<ChannelContext>,
}

/// Whether `id` looks like a Mattermost id (26 lowercase letters and digits): what goes
/// into a path.
fn valid_id(id: &str) -> bool {
    id.len() == 26
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
}

impl MattermostChannel {
    /// Checks the configuration and builds the HTTP client (no network call).
    pub fn new(cfg: MattermostConfig) -> Result<Self, ChannelError> {
        let other = |reason: String| ChannelError::Other {
            channel: cfg.name.clone(),
            reason,
        };
        if cfg.token.trim().is_empty() {
            return Err(other("token is missing".into()));
        }
        if let Some(u) = &cfg.action_url
            && !(u.starts_with("http://") || u.starts_with("https://"))
        {
            return Err(other(format!(
                "action_url {u:?}: expected an http:// or https:// URL"
            )));
        }
        let (base, http) = platform::prepare(
            "url",
            &cfg.url,
            cfg.edit_interval,
            reqwest::Client::builder(),
        )
        .map_err(other)?;
        let mut cfg = cfg;
        cfg.token = cfg.token.trim().to_string();
        if cfg.action_secret.is_empty() {
            cfg.action_secret = inbound::derived_secret(&cfg.token);
        }
        let ws_url = format!(
            "{}/api/v4/websocket",
            base.replacen("https://", "wss://", 1)
                .replacen("http://", "ws://", 1)
        );
        let client = PlatformClient::new(
            cfg.name.clone(),
            &format!("{base}/api/v4"),
            http,
            vec![cfg.token.clone(), cfg.action_secret.clone()],
            RetryPolicy::configured(cfg.max_retries, cfg.max_retry_after, cfg.over_cap),
            limits(cfg.per_second, cfg.edit_interval),
        );
        let mut info =
            ChannelInfo::new(cfg.name.clone(), MAX_CHARS).edit_interval(cfg.edit_interval);
        if cfg.action_url.is_none() {
            info = info.without_buttons(true);
        } else {
            info.reactions = true;
        }
        Ok(Self {
            info,
            cfg,
            client,
            ws_url,
            me: Mutex::new(None),
            kinds: Mutex::new(HashMap::new()),
            threads: Mutex::new(HashSet::new()),
            names: Mutex::new(HashMap::new()),
            cursors: Mutex::new(HashMap::new()),
            ctx: std::sync::OnceLock::new(),
        })
    }

    fn other(&self, reason: impl Into<String>) -> ChannelError {
        self.client.other(reason)
    }

    /// The channel id of `chat`, checked (it goes into paths).
    fn channel_id<'a>(&self, chat: &'a ChatRef) -> Result<&'a str, ChannelError> {
        if valid_id(&chat.id) {
            Ok(&chat.id)
        } else {
            Err(self.other(format!("{:?} is not a Mattermost channel id", chat.id)))
        }
    }

    /// The bot, asked once.
    async fn me(&self) -> Result<Me, ChannelError> {
        if let Some(me) = self.me.lock().clone() {
            return Ok(me);
        }
        let me = self.get_me().await?;
        *self.me.lock() = Some(me.clone());
        Ok(me)
    }
}

#[async_trait]
impl Channel for MattermostChannel {
    fn info(&self) -> &ChannelInfo {
        &self.info
    }

    async fn run(
        &self,
        ctx: ChannelContext,
        cancel: CancellationToken,
    ) -> Result<(), ChannelError> {
        let _ = self.ctx.set(ctx.clone());
        self.client.connecting("starting");
        let r = self.receive(&ctx, &cancel).await;
        match &r {
            Ok(()) => self.client.stopped(),
            Err(e) => {
                tracing::error!(channel = %self.cfg.name, error = %e, "stopped the Mattermost connection");
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
        let channel = self.channel_id(chat)?;
        let mut body = json!({"channel_id": channel, "message": text});
        if let Some(root) = &chat.thread {
            body["root_id"] = json!(root);
        }
        if !buttons.is_empty() {
            body["props"] = self.button_props(chat, buttons);
        }
        let post = self.create_post(chat, &body).await?;
        post["id"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| self.other("POST /posts: the answer has no id"))
    }

    async fn edit(
        &self,
        chat: &ChatRef,
        message_id: &str,
        text: &str,
        buttons: &[Button],
    ) -> Result<(), ChannelError> {
        self.channel_id(chat)?;
        if !valid_id(message_id) {
            return Err(self.other(format!("{message_id:?} is not a Mattermost post id")));
        }
        // A patch replaces `props` whole: `from_bot` (set by the server on the post) is kept,
        // so other bots still know this post for a bot's.
        let mut props = if buttons.is_empty() {
            json!({"attachments": []})
        } else {
            self.button_props(chat, buttons)
        };
        props["from_bot"] = json!("true");
        self.patch_post(chat, message_id, &json!({"message": text, "props": props}))
            .await
    }

    /// Mattermost shows the press's effect by the prompt's edit: nothing to acknowledge.
    async fn answer_press(
        &self,
        _press: &ButtonPress,
        _text: Option<&str>,
    ) -> Result<(), ChannelError> {
        Ok(())
    }

    async fn tell_presser(&self, press: &ButtonPress, text: &str) -> Result<(), ChannelError> {
        self.tell(&press.chat, &press.peer, text).await
    }

    /// An ephemeral post (only they see it) where the bot may make one; else a post in the
    /// conversation addressed to them.
    async fn tell(&self, chat: &ChatRef, peer: &Peer, text: &str) -> Result<(), ChannelError> {
        match self.ephemeral(chat, &peer.id, text).await {
            Ok(()) => Ok(()),
            Err(ChannelError::Api { code: 403, .. }) => {
                let name = peer.username.as_deref().unwrap_or(&peer.name);
                self.send(chat, &format!("@{name}: {text}"), &[])
                    .await
                    .map(drop)
            }
            Err(e) => Err(e),
        }
    }

    async fn test(&self) -> Result<String, ChannelError> {
        let me = self.get_me().await?;
        Ok(format!("@{} (id {})", me.username, me.id))
    }

    /// Where a person opens a direct message with the bot: `{url}/messages/@{bot}` (the
    /// server picks the team).
    async fn open_link(&self) -> Result<Option<String>, ChannelError> {
        let me = self.me().await?;
        Ok(Some(format!(
            "{}/messages/@{}",
            self.cfg.url.trim_end_matches('/'),
            me.username
        )))
    }

    async fn send_file(&self, chat: &ChatRef, file: &OutgoingFile) -> Result<String, ChannelError> {
        let channel = self.channel_id(chat)?;
        let id = self.upload(channel, file).await?;
        let mut body = json!({
            "channel_id": channel,
            "message": file.caption.clone().unwrap_or_default(),
            "file_ids": [id],
        });
        if let Some(root) = &chat.thread {
            body["root_id"] = json!(root);
        }
        let post = self.create_post(chat, &body).await?;
        post["id"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| self.other("POST /posts: the answer has no id"))
    }

    async fn fetch(&self, a: &Attachment, max_bytes: u64) -> Result<Fetched, String> {
        platform::client::check_declared(a, max_bytes)?;
        let id = a
            .source
            .as_deref()
            .filter(|id| valid_id(id))
            .ok_or("this attachment cannot be fetched")?;
        let bytes = self
            .client
            .download(
                "GET /files",
                |http| {
                    http.get(format!("{}/files/{id}", self.client.base()))
                        .bearer_auth(&self.cfg.token)
                },
                max_bytes,
            )
            .await?;
        let name = a.name.clone().unwrap_or_else(|| format!("{}.bin", a.kind));
        Ok(Fetched { bytes, name })
    }

    fn status(&self) -> String {
        self.client.status()
    }

    fn health(&self) -> ChannelHealth {
        self.client.health()
    }

    /// A button press, posted by the Mattermost server to the action URL.
    async fn inbound_http(
        &self,
        _headers: &axum::http::HeaderMap,
        body: &[u8],
    ) -> Result<Option<Inbound>, InboundHttpError> {
        let raw: Value =
            serde_json::from_slice(body).map_err(|e| InboundHttpError::Malformed(e.to_string()))?;
        self.map_press(&raw).map(|p| Some(Inbound::Press(p)))
    }

    /// Mattermost reads the answer as an integration response: an empty one changes
    /// nothing (the prompt is edited when the answer is taken).
    fn http_answer(&self, _headers: &axum::http::HeaderMap, _body: &[u8]) -> Option<String> {
        Some("{}".into())
    }
}

/// How a chat is written to, by the channel type Mattermost gives.
pub(crate) fn chat_kind(channel_type: &str) -> ChatKind {
    match channel_type {
        "D" => ChatKind::Direct,
        _ => ChatKind::Group,
    }
}

#[cfg(test)]
mod tests;
