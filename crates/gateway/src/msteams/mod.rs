//! The Microsoft Teams channel, through the Bot Framework: Teams posts activities to the
//! bot's messaging endpoint (`/v1/gateway/channels/teams/webhook`), each with a JWT the
//! channel checks ([`auth`]); the bot answers through the Bot Connector API at the
//! activity's `serviceUrl` with its own token ([`connector`]).
//!
//! - **Chats**: personal chats, group chats and channel threads (a channel's conversation id
//!   names its thread: `…;messageid=ROOT`). In group chats and channels Teams delivers only
//!   messages that @mention the bot; the mention is cut from the text.
//! - **Replies** stream by `updateActivity` (one edit every 1.5 s per conversation), 28,000
//!   characters a message; longer replies are split.
//! - **Approvals**: an Adaptive Card with `Action.Submit` buttons; a press comes back as a
//!   message activity whose `value` carries the button's data (its `replyToId` is the card).
//! - **Files**: in personal chats a file consent card; once accepted, the file is uploaded to
//!   the person's OneDrive (the upload URL Teams gives, in the background: the consent's
//!   invoke is answered at once) and a file card posted. In group
//!   chats and channels images go inline (up to 1 MB), other files as a note of their name
//!   and size. Files people share come in (the download URL Teams gives, or a pasted image
//!   fetched with the bot's token).
//! - **Rate limits**: Teams' per-thread limits (7 in a second, 8 in two, 60 in 30, 1,800 an
//!   hour) in the outbox;
//!   a 429 is waited out by its `Retry-After`.
//!
//! The app password is a secret: never logged, removed from errors. An app manifest to
//! install the bot is in `docs/teams-manifest.json`.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::channel::{
    Attachment, Button, ButtonPress, Channel, ChannelContext, ChannelError, ChannelInfo, ChatKind,
    ChatRef, Fetched, Inbound, InboundHttpError, OutgoingFile,
};
use crate::health::ChannelHealth;
use crate::platform::{self, Limits, OverCap, PlatformClient, Rate, RetryPolicy};

mod auth;
mod connector;
mod inbound;

/// The longest message text: Teams takes about 28 KB a message, and a character may take
/// up to four bytes.
pub const MAX_CHARS: usize = 7_000;
/// The Bot Framework's OpenID metadata.
pub const DEFAULT_OPENID_URL: &str =
    "https://login.botframework.com/v1/.well-known/openidconfiguration";
/// The largest image sent inline (Teams' limit for base64 images).
const MAX_INLINE: usize = 1024 * 1024;
/// Where the download URLs of files people share point (SharePoint / OneDrive, fetched
/// without a token).
const FILE_HOSTS: &[&str] = &["sharepoint.com", "sharepoint-df.com"];

/// `[channels.teams]`, checked.
#[derive(Clone)]
pub struct TeamsConfig {
    /// The channel's name (default `teams`).
    pub name: String,
    /// The bot's Microsoft App ID (its Entra application's client id).
    pub app_id: String,
    /// The app's client secret. Secret.
    pub app_password: String,
    /// Where the bot's token comes from (single-tenant bots: their tenant's endpoint).
    pub token_url: String,
    /// A single-tenant bot's tenant: activities from other tenants are refused.
    pub tenant_id: Option<String>,
    /// The Bot Framework's OpenID metadata (signing keys of inbound tokens).
    pub openid_url: String,
    pub edit_interval: Duration,
    pub max_retries: u32,
    pub max_retry_after: Duration,
    pub over_cap: OverCap,
}

impl std::fmt::Debug for TeamsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TeamsConfig")
            .field("name", &self.name)
            .field("app_id", &self.app_id)
            .field("token_url", &self.token_url)
            .field("app_password", &"[redacted]")
            .finish_non_exhaustive()
    }
}

impl TeamsConfig {
    /// `tenant`: `None` for a multi-tenant bot (the `botframework.com` tenant).
    pub fn new(
        app_id: impl Into<String>,
        app_password: impl Into<String>,
        tenant: Option<&str>,
    ) -> Self {
        Self {
            name: "teams".into(),
            app_id: app_id.into(),
            app_password: app_password.into(),
            token_url: format!(
                "https://login.microsoftonline.com/{}/oauth2/v2.0/token",
                tenant.unwrap_or("botframework.com")
            ),
            openid_url: DEFAULT_OPENID_URL.into(),
            tenant_id: tenant.map(str::to_string),
            edit_interval: Duration::from_millis(1500),
            max_retries: 3,
            max_retry_after: Duration::from_secs(60),
            over_cap: OverCap::Fail,
        }
    }
}

/// Teams limits a bot in one thread to 7 operations in any second, 8 in any 2 s, 60 in any
/// 30 s and 1,800 in an hour ("Rate limiting for bots"). A pacer of bursts of `b` and then
/// one per `e` makes at most `b + W/e` calls in a window `W`: 4 and 550 ms keep under the
/// 1, 2 and 30 s windows with room to spare (5.8, 7.6, 58.5); 40 and 2.05 s under the hour.
fn limits(edit_interval: Duration) -> Limits {
    Limits::new()
        .with(platform::BOT, Rate::per(50, Duration::from_secs(1)))
        .with(
            "thread",
            Rate {
                every: Duration::from_millis(550),
                burst: 4,
            },
        )
        .with(
            "threadhour",
            Rate {
                every: Duration::from_millis(2050),
                burst: 40,
            },
        )
        .with("edit", Rate::spaced(edit_interval))
}

fn service_key(conversation: &str) -> String {
    format!("service:{conversation}")
}

/// A file waiting for its consent card's answer.
struct Pending {
    chat: ChatRef,
    file: OutgoingFile,
}

/// The Teams channel (see the module docs).
pub struct TeamsChannel {
    cfg: TeamsConfig,
    info: ChannelInfo,
    client: PlatformClient,
    ctx: OnceLock<ChannelContext>,
    keys: Mutex<auth::KeyCache>,
    token: Mutex<Option<auth::BotToken>>,
    /// Service URLs by conversation id.
    services: Mutex<HashMap<String, String>>,
    /// Files offered by consent card, by the card's context id.
    pending: Mutex<HashMap<String, Pending>>,
    /// Accepted consents, uploaded by `run` (not while Teams waits for the invoke's answer).
    consents: tokio::sync::mpsc::UnboundedSender<Value>,
    consents_rx: Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<Value>>>,
}

impl TeamsChannel {
    /// Checks the configuration (no network call).
    pub fn new(cfg: TeamsConfig) -> Result<Self, ChannelError> {
        let other = |reason: String| ChannelError::Other {
            channel: cfg.name.clone(),
            reason,
        };
        if cfg.app_id.trim().is_empty() || cfg.app_password.trim().is_empty() {
            return Err(other("app_id and app_password are needed".into()));
        }
        for (field, url) in [
            ("token_url", &cfg.token_url),
            ("openid_url", &cfg.openid_url),
        ] {
            platform::prepare(field, url, cfg.edit_interval, reqwest::Client::builder())
                .map_err(other)?;
        }
        // No redirects: a file URL must not lead the fetch (or the bot's token) elsewhere.
        let (_, http) = platform::prepare(
            "openid_url",
            &cfg.openid_url,
            cfg.edit_interval,
            reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()),
        )
        .map_err(other)?;
        let client = PlatformClient::new(
            cfg.name.clone(),
            "https://smba.trafficmanager.net",
            http,
            vec![cfg.app_password.clone()],
            RetryPolicy::configured(cfg.max_retries, cfg.max_retry_after, cfg.over_cap),
            limits(cfg.edit_interval),
        );
        let (consents, consents_rx) = tokio::sync::mpsc::unbounded_channel();
        Ok(Self {
            consents,
            consents_rx: Mutex::new(Some(consents_rx)),
            info: ChannelInfo::new(cfg.name.clone(), MAX_CHARS).edit_interval(cfg.edit_interval),
            cfg,
            client,
            ctx: OnceLock::new(),
            keys: Mutex::new(auth::KeyCache::default()),
            token: Mutex::new(None),
            services: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
        })
    }

    fn other(&self, reason: impl Into<String>) -> ChannelError {
        self.client.other(reason)
    }

    /// Notes the service URL of a conversation (after its activity was verified).
    async fn note_service(&self, conversation: &str, url: &str) {
        let known = self
            .services
            .lock()
            .insert(conversation.to_string(), url.to_string());
        if known.as_deref() != Some(url)
            && let Some(ctx) = self.ctx.get()
            && let Err(e) = ctx.state.set(&service_key(conversation), url).await
        {
            tracing::warn!(channel = %self.cfg.name, error = %e, "storing a conversation's service URL");
        }
    }

    /// A file consent was answered: the file goes up and its card is posted (or the
    /// refusal is noted).
    async fn consented(&self, a: &Value) {
        let v = &a["value"];
        let id = v["context"]["id"].as_str().unwrap_or_default();
        let Some(p) = self.pending.lock().remove(id) else {
            tracing::info!(channel = %self.cfg.name, "a file consent for no file waiting (after a restart?)");
            return;
        };
        if v["action"] != "accept" {
            tracing::info!(channel = %self.cfg.name, file = %p.file.name, "the file was declined");
            return;
        }
        if let Err(e) = self
            .upload_consented(&p.chat, &p.file, &v["uploadInfo"])
            .await
        {
            tracing::warn!(channel = %self.cfg.name, error = %e, file = %p.file.name, "uploading a consented file");
            let text = format!(
                "Could not upload {}: {e}. Open the session in the console to download it.",
                p.file.name
            );
            if let Err(e) = self.send(&p.chat, &text, &[]).await {
                tracing::warn!(channel = %self.cfg.name, error = %e, "telling of a failed upload");
            }
        }
    }
}

#[async_trait]
impl Channel for TeamsChannel {
    fn info(&self) -> &ChannelInfo {
        &self.info
    }

    /// Activities come over HTTP: this keeps the context for them until cancelled.
    async fn run(
        &self,
        ctx: ChannelContext,
        cancel: CancellationToken,
    ) -> Result<(), ChannelError> {
        let _ = self.ctx.set(ctx);
        self.client.connected("webhook");
        // Accepted file consents are uploaded here, one at a time: the invoke that brings
        // one is answered at once (Teams waits only seconds for it), whatever the file's size.
        let rx = self.consents_rx.lock().take();
        match rx {
            Some(mut rx) => {
                loop {
                    tokio::select! {
                        _ = cancel.cancelled() => break,
                        Some(a) = rx.recv() => self.consented(&a).await,
                    }
                }
                // For a later run (the receiver is this channel's only one).
                *self.consents_rx.lock() = Some(rx);
            }
            None => cancel.cancelled().await,
        }
        self.client.stopped();
        Ok(())
    }

    async fn send(
        &self,
        chat: &ChatRef,
        text: &str,
        buttons: &[Button],
    ) -> Result<String, ChannelError> {
        let activity = if buttons.is_empty() {
            json!({"type": "message", "text": text, "textFormat": "markdown"})
        } else {
            json!({"type": "message", "attachments": [connector::card(text, buttons)]})
        };
        self.post(chat, activity).await
    }

    async fn edit(
        &self,
        chat: &ChatRef,
        message_id: &str,
        text: &str,
        buttons: &[Button],
    ) -> Result<(), ChannelError> {
        let activity = if buttons.is_empty() {
            json!({"type": "message", "id": message_id, "text": text, "textFormat": "markdown", "attachments": []})
        } else {
            json!({"type": "message", "id": message_id, "attachments": [connector::card(text, buttons)]})
        };
        self.connector(
            reqwest::Method::PUT,
            chat,
            Some(message_id),
            &activity,
            true,
        )
        .await
        .map(drop)
    }

    /// A card's submit shows nothing by itself: the card's update says what happened.
    async fn answer_press(
        &self,
        _press: &ButtonPress,
        _text: Option<&str>,
    ) -> Result<(), ChannelError> {
        Ok(())
    }

    /// Teams has no message only one person sees: said in the chat, to them.
    async fn tell_presser(&self, press: &ButtonPress, text: &str) -> Result<(), ChannelError> {
        self.tell(&press.chat, &press.peer, text).await
    }

    /// The bot's token is issued (the app id and password are right).
    async fn test(&self) -> Result<String, ChannelError> {
        self.bot_token().await?;
        Ok(format!("app {} (token issued)", self.cfg.app_id))
    }

    /// A chat with the bot (Teams' deep link; the app must be installed).
    async fn open_link(&self) -> Result<Option<String>, ChannelError> {
        Ok(Some(format!(
            "https://teams.microsoft.com/l/chat/0/0?users=28:{}",
            self.cfg.app_id
        )))
    }

    async fn send_file(&self, chat: &ChatRef, file: &OutgoingFile) -> Result<String, ChannelError> {
        if chat.kind == ChatKind::Direct {
            let id = uuid::Uuid::new_v4().to_string();
            let card = json!({
                "contentType": "application/vnd.microsoft.teams.card.file.consent",
                "name": file.name,
                "content": {
                    "description": file.caption.clone().unwrap_or_else(|| format!("{} from the agent", file.name)),
                    "sizeInBytes": file.bytes.len(),
                    "acceptContext": {"id": id},
                    "declineContext": {"id": id},
                },
            });
            let sent = self
                .post(chat, json!({"type": "message", "attachments": [card]}))
                .await?;
            let mut pending = self.pending.lock();
            if pending.len() > 1000 {
                pending.clear();
            }
            pending.insert(
                id,
                Pending {
                    chat: chat.clone(),
                    file: file.clone(),
                },
            );
            return Ok(sent);
        }
        if file.mime.starts_with("image/") && file.bytes.len() <= MAX_INLINE {
            let uri = format!(
                "data:{};base64,{}",
                file.mime,
                base64::engine::general_purpose::STANDARD.encode(&file.bytes)
            );
            let mut activity = json!({"type": "message", "attachments": [
                {"contentType": file.mime, "contentUrl": uri, "name": file.name}]});
            if let Some(c) = &file.caption {
                activity["text"] = json!(c);
            }
            return self.post(chat, activity).await;
        }
        self.send(chat, &file.as_text(), &[]).await
    }

    /// A shared file from its download URL (pre-authenticated; SharePoint's hosts, or the
    /// conversation's service host), or a pasted image with the bot's token — only from a
    /// conversation's own service host: the token goes nowhere else.
    async fn fetch(&self, a: &Attachment, max_bytes: u64) -> Result<Fetched, String> {
        platform::client::check_declared(a, max_bytes)?;
        let (how, url) = a
            .source
            .as_deref()
            .and_then(|s| s.split_once(' '))
            .ok_or("this attachment cannot be fetched")?;
        let services: Vec<String> = self.services.lock().values().cloned().collect();
        let hosts: &[&str] = if how == "token" { &[] } else { FILE_HOSTS };
        let url = services
            .iter()
            .find_map(|s| platform::file_url_allowed(url, s, hosts).ok())
            .map_or_else(|| platform::file_url_allowed(url, "", hosts), Ok)?;
        let token = match how {
            "token" => Some(self.bot_token().await.map_err(|e| e.to_string())?),
            _ => None,
        };
        let bytes = self
            .client
            .download(
                "file",
                |http| {
                    let r = http.get(url.clone());
                    match &token {
                        Some(t) => r.bearer_auth(t),
                        None => r,
                    }
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

    /// An activity: refused (401) without a valid Bot Framework token for its service URL.
    async fn inbound_http(
        &self,
        headers: &axum::http::HeaderMap,
        body: &[u8],
    ) -> Result<Option<Inbound>, InboundHttpError> {
        let a: Value =
            serde_json::from_slice(body).map_err(|e| InboundHttpError::Malformed(e.to_string()))?;
        let service = a["serviceUrl"].as_str().unwrap_or_default();
        let auth = headers.get("authorization").and_then(|v| v.to_str().ok());
        // Teams only: Web Chat and Direct Line activities are signed with the same keys, and
        // there the client says who it is.
        let channel_id = a["channelId"].as_str().unwrap_or_default();
        let verified = match channel_id {
            "msteams" => self.verify(auth, service, channel_id).await,
            other => Err(format!("from channel {other:?}, not msteams")),
        };
        if let Err(why) = verified {
            tracing::warn!(channel = %self.cfg.name, %why, "activity refused");
            return Err(InboundHttpError::Unauthorized);
        }
        if let Some(tenant) = &self.cfg.tenant_id
            && a["channelData"]["tenant"]["id"].as_str() != Some(tenant.as_str())
        {
            tracing::warn!(channel = %self.cfg.name, "activity from another tenant refused");
            return Err(InboundHttpError::Unauthorized);
        }
        let conversation = a["conversation"]["id"].as_str().unwrap_or_default();
        let conversation = conversation
            .split_once(";messageid=")
            .map_or(conversation, |(c, _)| c);
        let local_test = is_loopback(service) && is_loopback(&self.cfg.openid_url);
        if conversation.is_empty() || !(service.starts_with("https://") || local_test) {
            return Err(InboundHttpError::Malformed(
                "no conversation, or a service URL that is not https".into(),
            ));
        }
        self.note_service(conversation, service).await;
        match (a["type"].as_str(), a["name"].as_str()) {
            (Some("message"), _) => Ok(self.map_message(&a)),
            (Some("invoke"), Some("fileConsent/invoke")) => {
                if self.consents.send(a).is_err() {
                    tracing::warn!(channel = %self.cfg.name, "a file consent came while the channel is stopped");
                }
                Ok(None)
            }
            _ => Ok(None),
        }
    }
}

/// `http://127.0.0.1…` / `http://localhost…`: a local test Connector.
fn is_loopback(url: &str) -> bool {
    reqwest::Url::parse(url).is_ok_and(|u| {
        matches!(
            u.host_str(),
            Some("127.0.0.1") | Some("localhost") | Some("[::1]")
        )
    })
}

#[cfg(test)]
mod tests;
