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
//!   409 (another poller with this token, or the poll of a killed process that Telegram
//!   still holds open) is waited out with back-off, the status saying so; 429
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

use crate::health::ChannelHealth;
use crate::platform::{self, Limits, OverCap, PlatformClient, REDACTED, Rate, RetryPolicy};
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::channel::{
    Attachment, Button, ButtonPress, Channel, ChannelContext, ChannelError, ChannelInfo, ChatRef,
    Fetched, Inbound, OutgoingFile,
};

mod bot_api;
mod inbound;
mod polling;
mod wire;

use bot_api::*;
#[cfg(test)]
use inbound::*;
use wire::*;

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
/// How long one file upload may take.
const FILE_TIMEOUT: Duration = Duration::from_secs(120);
/// Extra time a `getUpdates` request gets beyond its long-poll timeout.
const POLL_GRACE: Duration = Duration::from_secs(15);

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
    info: ChannelInfo,
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

#[async_trait]
impl Channel for TelegramChannel {
    fn info(&self) -> &ChannelInfo {
        &self.info
    }

    async fn run(
        &self,
        ctx: ChannelContext,
        cancel: CancellationToken,
    ) -> Result<(), ChannelError> {
        self.client.connecting("starting");
        if let Some(hook) = &self.cfg.webhook {
            // Webhook mode: tell Telegram where to POST, then updates arrive over HTTP.
            let registered = async {
                let me = self.get_me(false).await?;
                let _ = self.me.set(me);
                self.call(
                    "setWebhook",
                    &json!({
                        "url": hook.url,
                        "secret_token": hook.secret_token,
                        "allowed_updates": ["message", "edited_message", "callback_query"],
                    }),
                )
                .await
            }
            .await;
            if let Err(e) = registered {
                tracing::error!(channel = %self.cfg.name, error = %e, "cannot register the webhook");
                self.client.failed(&format!("error: {e}"), &e.to_string());
                return Err(e);
            }
            self.client.connected("webhook");
            cancel.cancelled().await;
            self.client.stopped();
            return Ok(());
        }
        let r = self.run_inner(&ctx, &cancel).await;
        match &r {
            Ok(()) => self.client.stopped(),
            Err(e) => {
                tracing::error!(channel = %self.cfg.name, error = %e, "stopped polling");
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

    /// `sendPhoto` for images, else `sendDocument` (multipart), into the chat's topic.
    async fn send_file(&self, chat: &ChatRef, file: &OutgoingFile) -> Result<String, ChannelError> {
        let (method, field) = if file.is_photo() {
            ("sendPhoto", "photo")
        } else {
            ("sendDocument", "document")
        };
        let thread = match &chat.thread {
            Some(t) => Some(self.parse_id("thread", t)?),
            None => None,
        };
        let keys = platform::send_keys(chat);
        let call = platform::Call {
            label: method,
            keys: &keys,
            timeout: FILE_TIMEOUT,
            policy: None,
        };
        let result = self
            .client
            .call(
                call,
                |http, base| {
                    let part = reqwest::multipart::Part::stream(file.bytes.clone())
                        .file_name(file.name.clone());
                    let part = match part.mime_str(&file.mime) {
                        Ok(p) => p,
                        Err(_) => reqwest::multipart::Part::stream(file.bytes.clone())
                            .file_name(file.name.clone()),
                    };
                    let mut form = reqwest::multipart::Form::new()
                        .text("chat_id", chat.id.clone())
                        .part(field, part);
                    if let Some(t) = thread {
                        form = form.text("message_thread_id", t.to_string());
                    }
                    if let Some(c) = &file.caption {
                        // Telegram's caption limit.
                        form = form.text("caption", c.chars().take(1024).collect::<String>());
                    }
                    http.post(format!("{base}/bot{}/{method}", self.cfg.token))
                        .multipart(form)
                },
                |answer| self.read(method, answer),
            )
            .await?;
        result
            .get("message_id")
            .and_then(Value::as_i64)
            .map(|id| id.to_string())
            .ok_or_else(|| self.other(format!("{method}: the result has no message_id")))
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

    /// `getWebhookInfo`: the updates Telegram holds for the bot (not yet delivered to the
    /// webhook, or not yet fetched by `getUpdates`) and its last error delivering them.
    async fn backlog(&self) -> Option<Result<crate::channel::Backlog, ChannelError>> {
        Some(self.call("getWebhookInfo", &json!({})).await.map(|info| {
            crate::channel::Backlog {
                pending: info["pending_update_count"].as_u64().unwrap_or(0),
                last_error: info["last_error_message"]
                    .as_str()
                    .filter(|e| !e.is_empty())
                    .map(|e| crate::text::truncate(e, 200)),
            }
        }))
    }

    /// `https://t.me/USERNAME`: opens a direct message with the bot.
    async fn open_link(&self) -> Result<Option<String>, ChannelError> {
        let me = self.get_me(false).await?;
        Ok(Some(format!("https://t.me/{}", me.username)))
    }

    /// `getFile`, then the file from `{base}/file/bot<token>/<file_path>` (the Bot API
    /// serves files up to 20 MB).
    async fn fetch(&self, a: &Attachment, max_bytes: u64) -> Result<Fetched, String> {
        let file_id = a.source.as_deref().ok_or("no file id")?;
        crate::platform::client::check_declared(a, max_bytes)?;
        let file = self
            .call("getFile", &serde_json::json!({ "file_id": file_id }))
            .await
            .map_err(|e| e.to_string())?;
        let path = file
            .get("file_path")
            .and_then(serde_json::Value::as_str)
            .filter(|p| !p.is_empty() && !p.contains(".."))
            .ok_or("Telegram gave no file path (the file may be over its 20 MB limit)")?
            .to_owned();
        let token = &self.cfg.token;
        let bytes = self
            .client
            .download(
                "file",
                |http| http.get(format!("{}/file/bot{token}/{path}", self.client.base())),
                max_bytes,
            )
            .await?;
        let name = a.name.clone().unwrap_or_else(|| {
            let ext = path.rsplit_once('.').map(|(_, e)| e).unwrap_or("bin");
            format!("{}.{ext}", a.kind)
        });
        Ok(Fetched { bytes, name })
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

    fn health(&self) -> ChannelHealth {
        self.client.health()
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod prop_tests;
