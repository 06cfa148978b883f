//! The WhatsApp channel, on Meta's WhatsApp Cloud API (Graph API): Meta pushes messages to
//! the webhook (`/v1/gateway/channels/{name}/webhook`), the bot answers through
//! `POST /{phone-number-id}/messages`.
//!
//! - **Webhook**: the subscription check (`GET` with `hub.mode`, `hub.verify_token`,
//!   `hub.challenge`) is answered with the challenge for the configured verify token only;
//!   every delivery must carry a right `X-Hub-Signature-256` (HMAC-SHA256 of the raw body
//!   with the app secret), else it is refused (401). A delivery may carry several messages
//!   and statuses: each message is stored before the delivery is answered 200 (a failure
//!   answers 503 and Meta delivers again; the gateway takes each message id once).
//! - **Messages**: text, images, documents, audio (voice notes), video and stickers (media
//!   fetched through the Graph API's media URL with the token), a reply's `context` (a
//!   reply to a prompt answers it), reactions (answers too), reply-button presses. A
//!   person's latest message is marked read (blue ticks) when the bot answers them.
//! - **Chats**: direct messages, and groups (Meta's Groups API: a message with a
//!   `group_id`; sent with `recipient_type: group`). In a group the bot answers a message
//!   that mentions its number (`@15550001111`) or quotes one of its messages
//!   (`require_mention`, default true). Groups take
//!   text, media and templates but no interactive messages: a prompt there says how to
//!   answer in words or by reaction.
//! - **Replies**: WhatsApp messages cannot be edited, so a reply comes in paragraphs as it
//!   streams, each at most 4,096 characters. Approval prompts carry up to three reply
//!   buttons (WhatsApp's limit; titles cut to 20 characters), their text cut to the
//!   interactive body's 1,024 characters (the whole text is sent first when longer). A
//!   press is answered by a short reply quoting the prompt ("Allowed"), since the prompt
//!   itself cannot change.
//! - **The 24-hour window** ([`window`]): outside it replies are held and sent when the
//!   person writes again, the configured template telling them once; a prompt fails (its
//!   approval fails closed).
//! - **Statuses** (`sent`, `delivered`, `read`, `failed`) are counted in
//!   `switchboard_gateway_whatsapp_statuses_total{channel,status}`; a failure is logged
//!   with Meta's code and title and shown as the channel's last error.
//! - **Rate limits**: 80 messages a second per number (Meta's default throughput) and about
//!   one a second to one person in the outbox; Meta's throttling answers (HTTP 429, error
//!   codes 4, 80007, 130429, 131056) are waited out by the kit's retry policy.
//!
//! The access token and the app secret are secrets: never logged, removed from errors.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::channel::{
    Attachment, Button, ButtonPress, Channel, ChannelContext, ChannelError, ChannelInfo, ChatKind,
    ChatRef, Fetched, Inbound, InboundHttpError, OutgoingFile,
};
use crate::health::ChannelHealth;
use crate::platform::{self, Limits, OverCap, PlatformClient, Rate, RetryPolicy};

mod graph;
mod webhook;
pub mod window;

/// The longest text message.
pub const MAX_CHARS: usize = 4096;
/// The Graph API.
pub const DEFAULT_API_BASE: &str = "https://graph.facebook.com/v21.0";
/// How long after a person's last message free-form messages may go to them.
pub const SERVICE_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// `[channels.whatsapp]`, checked.
#[derive(Clone)]
pub struct WhatsAppConfig {
    /// The channel's name (default `whatsapp`).
    pub name: String,
    /// The business phone number's id (not the number itself).
    pub phone_number_id: String,
    /// A system user's access token. Secret.
    pub access_token: String,
    /// The Meta app's secret, which signs deliveries. Secret.
    pub app_secret: String,
    /// What the webhook's subscription check must present.
    pub verify_token: String,
    /// The Graph API's base (for tests: a fake's).
    pub api_base: String,
    /// An approved template sent outside the 24-hour window, and its language (`en_US`).
    pub template: Option<(String, String)>,
    /// In groups, answer only when mentioned or replied to (default true).
    pub require_mention: bool,
    pub max_retries: u32,
    pub max_retry_after: Duration,
    pub over_cap: OverCap,
}

impl std::fmt::Debug for WhatsAppConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WhatsAppConfig")
            .field("name", &self.name)
            .field("phone_number_id", &self.phone_number_id)
            .field("api_base", &self.api_base)
            .field("access_token", &"[redacted]")
            .field("app_secret", &"[redacted]")
            .finish_non_exhaustive()
    }
}

impl WhatsAppConfig {
    pub fn new(
        phone_number_id: impl Into<String>,
        access_token: impl Into<String>,
        app_secret: impl Into<String>,
        verify_token: impl Into<String>,
    ) -> Self {
        Self {
            name: "whatsapp".into(),
            phone_number_id: phone_number_id.into(),
            access_token: access_token.into(),
            app_secret: app_secret.into(),
            verify_token: verify_token.into(),
            api_base: DEFAULT_API_BASE.into(),
            template: None,
            require_mention: true,
            max_retries: 3,
            max_retry_after: Duration::from_secs(60),
            over_cap: OverCap::Fail,
        }
    }
}

/// Meta's published throughput (80 messages a second per number), and about one a second
/// to one person.
fn limits() -> Limits {
    Limits::new()
        .with(platform::BOT, Rate::per(80, Duration::from_secs(1)))
        .with("person", Rate::spaced(Duration::from_secs(1)))
}

/// The WhatsApp channel (see the module docs).
pub struct WhatsAppChannel {
    inner: Arc<Wa>,
}

/// The channel's state, shared with its background work (read receipts, the template
/// after a 131047, held replies).
pub(crate) struct Wa {
    cfg: WhatsAppConfig,
    info: ChannelInfo,
    client: PlatformClient,
    /// Where deliveries go once `run` has started.
    ctx: OnceLock<ChannelContext>,
    /// Each chat's 24-hour window (see [`window`]).
    windows: Mutex<HashMap<String, window::Window>>,
    /// Each chat's lock on its held replies.
    held_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Whether a chat has held replies, as far as this process knows.
    held_known: Mutex<HashMap<String, bool>>,
    /// Texts sent lately, by message id.
    recent: Mutex<window::Recent>,
    /// The next reply's place in order (see [`Wa::next_seq`]).
    seq: std::sync::atomic::AtomicU64,
    /// Each person's latest message not marked read yet: marked when the bot answers.
    unread: Mutex<HashMap<String, String>>,
}

impl WhatsAppChannel {
    pub fn new(cfg: WhatsAppConfig) -> Result<Self, ChannelError> {
        let other = |reason: String| ChannelError::Other {
            channel: cfg.name.clone(),
            reason,
        };
        for (field, value) in [
            ("phone_number_id", &cfg.phone_number_id),
            ("access_token", &cfg.access_token),
            ("app_secret", &cfg.app_secret),
            ("verify_token", &cfg.verify_token),
        ] {
            if value.trim().is_empty() {
                return Err(other(format!("{field} is missing")));
            }
        }
        if !cfg.phone_number_id.chars().all(|c| c.is_ascii_digit()) {
            return Err(other(
                "phone_number_id: the number's id from the app's WhatsApp setup (digits), not the phone number".into(),
            ));
        }
        let (base, http) = platform::prepare(
            "api_base",
            &cfg.api_base,
            Duration::from_secs(1),
            reqwest::Client::builder(),
        )
        .map_err(other)?;
        let client = PlatformClient::new(
            cfg.name.clone(),
            &base,
            http,
            vec![cfg.access_token.clone(), cfg.app_secret.clone()],
            RetryPolicy::configured(cfg.max_retries, cfg.max_retry_after, cfg.over_cap),
            limits(),
        );
        let mut info = ChannelInfo::new(cfg.name.clone(), MAX_CHARS);
        info.can_edit = false;
        info.reactions = true;
        Ok(Self {
            inner: Arc::new(Wa {
                info,
                cfg,
                client,
                ctx: OnceLock::new(),
                windows: Mutex::new(HashMap::new()),
                held_locks: Mutex::new(HashMap::new()),
                held_known: Mutex::new(HashMap::new()),
                recent: Mutex::new(window::Recent::default()),
                seq: std::sync::atomic::AtomicU64::new(0),
                unread: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// What a delivery's statuses say: counted, a failure logged and shown; a 131047
    /// closes the window, holds the refused text and sends the template (in the
    /// background: the delivery is answered first).
    fn statuses(&self, statuses: &[webhook::Status]) {
        for s in statuses {
            metrics::counter!("switchboard_gateway_whatsapp_statuses_total", "channel" => self.inner.cfg.name.clone(), "status" => s.status.clone())
                .increment(1);
            let Some((code, title)) = &s.error else {
                continue;
            };
            tracing::warn!(channel = %self.inner.cfg.name, message = %s.message_id, recipient = %s.recipient, code, title = %title, "WhatsApp could not deliver a message");
            self.inner.client.note_error(&format!(
                "WhatsApp could not deliver message {} to {}: {title} (code {code})",
                s.message_id, s.recipient
            ));
            if *code == window::RE_ENGAGEMENT {
                let wa = self.inner.clone();
                let s = s.clone();
                tokio::spawn(async move {
                    // The status may come before the send's own answer has been read (and
                    // the text remembered under its id): wait a little for it.
                    let mut held = None;
                    for _ in 0..40 {
                        held = wa.recent.lock().take(&s.message_id);
                        if held.is_some() {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    if !wa.closed(&s.recipient, s.timestamp).await {
                        // Someone wrote since: the window is open again, the text goes now.
                        if let Some(held) = held {
                            if let Err(e) = wa.hold(&s.recipient, held).await {
                                tracing::warn!(channel = %wa.cfg.name, error = %e, "WhatsApp: holding a refused reply");
                            }
                            wa.release(&s.chat()).await;
                        }
                        return;
                    }
                    if let Some(held) = held
                        && let Err(e) = wa.hold(&s.recipient, held).await
                    {
                        tracing::warn!(channel = %wa.cfg.name, error = %e, "WhatsApp: holding a refused reply");
                    }
                    wa.template(&s.chat()).await;
                });
            }
        }
    }
}

#[async_trait]
impl Channel for WhatsAppChannel {
    fn info(&self) -> &ChannelInfo {
        &self.inner.info
    }

    /// Deliveries come over HTTP: this keeps the context for them until cancelled.
    async fn run(
        &self,
        ctx: ChannelContext,
        cancel: CancellationToken,
    ) -> Result<(), ChannelError> {
        let _ = self.inner.ctx.set(ctx);
        self.inner.client.connected("webhook");
        cancel.cancelled().await;
        self.inner.client.stopped();
        Ok(())
    }

    async fn send(
        &self,
        chat: &ChatRef,
        text: &str,
        buttons: &[Button],
    ) -> Result<String, ChannelError> {
        if !self.inner.in_window(&chat.id).await {
            return self
                .inner
                .outside_window(chat, text, !buttons.is_empty())
                .await;
        }
        if let Some(id) = self.inner.unread.lock().remove(&chat.id) {
            graph::mark_read(self.inner.clone(), id);
        }
        // Replies held while the window was closed go before this one.
        self.inner.release(chat).await;
        if !buttons.is_empty() && !self.buttons_in(chat) {
            // A prompt in a group (no buttons there): its text says how to answer. Not
            // remembered for a 131047: a prompt is never held.
            return self.inner.send_text(chat, text).await;
        }
        if buttons.is_empty() {
            let seq = self.inner.next_seq();
            let id = self.inner.send_text(chat, text).await?;
            let held = window::Held {
                seq,
                text: text.to_string(),
            };
            self.inner.recent.lock().push(id.clone(), held);
            return Ok(id);
        }
        self.inner.send_buttons(chat, text, buttons).await
    }

    /// Groups take no interactive messages.
    fn buttons_in(&self, chat: &ChatRef) -> bool {
        chat.kind == ChatKind::Direct
    }

    /// WhatsApp messages cannot be edited: nothing is sent (the dispatcher streams in
    /// paragraphs here; a settled prompt's buttons stay, a late press is answered "no
    /// longer pending", and the decision was said by [`Channel::answer_press`]).
    async fn edit(
        &self,
        _chat: &ChatRef,
        _message_id: &str,
        _text: &str,
        _buttons: &[Button],
    ) -> Result<(), ChannelError> {
        Ok(())
    }

    /// A press is a message of its own and the prompt cannot change: the answer ("Allowed",
    /// "Unknown button") is a short reply quoting the prompt.
    async fn answer_press(
        &self,
        press: &ButtonPress,
        text: Option<&str>,
    ) -> Result<(), ChannelError> {
        let Some(text) = text.filter(|t| !t.trim().is_empty()) else {
            return Ok(());
        };
        if !self.inner.in_window(&press.chat.id).await {
            return Ok(()); // a press opened it; only a stale one gets here
        }
        self.inner
            .send_reply(&press.chat, text, &press.message_id)
            .await
            .map(drop)
    }

    /// WhatsApp has no message only one person sees: the refusal goes to the presser's own
    /// chat with the bot.
    async fn tell_presser(&self, press: &ButtonPress, text: &str) -> Result<(), ChannelError> {
        self.send(&press.chat, text, &[]).await.map(drop)
    }

    async fn test(&self) -> Result<String, ChannelError> {
        Ok(match self.inner.number().await? {
            (Some(name), number) => format!("{name} ({number})"),
            (None, number) => number,
        })
    }

    async fn open_link(&self) -> Result<Option<String>, ChannelError> {
        let (_, number) = self.inner.number().await?;
        let digits: String = number.chars().filter(char::is_ascii_digit).collect();
        Ok(Some(format!("https://wa.me/{digits}")))
    }

    async fn send_file(&self, chat: &ChatRef, file: &OutgoingFile) -> Result<String, ChannelError> {
        if !self.inner.in_window(&chat.id).await {
            let text = file.as_text();
            return self.inner.outside_window(chat, &text, false).await;
        }
        let media = self.inner.upload(file).await?;
        self.inner.send_media(chat, file, &media).await
    }

    async fn fetch(&self, attachment: &Attachment, max_bytes: u64) -> Result<Fetched, String> {
        platform::client::check_declared(attachment, max_bytes)?;
        let media = attachment
            .source
            .as_deref()
            .ok_or("this attachment cannot be fetched")?;
        let bytes = self.inner.download(media, max_bytes).await?;
        let name = attachment.name.clone().unwrap_or_else(|| {
            let ext = attachment
                .mime
                .as_deref()
                .and_then(|m| m.split(['/', ';']).nth(1))
                .unwrap_or("bin");
            format!("{}.{ext}", attachment.kind)
        });
        Ok(Fetched { bytes, name })
    }

    fn status(&self) -> String {
        self.inner.client.status()
    }

    fn health(&self) -> ChannelHealth {
        self.inner.client.health()
    }

    fn http_subscribe(&self, query: &HashMap<String, String>) -> Result<String, InboundHttpError> {
        webhook::challenge(&self.inner.cfg.verify_token, query)
            .ok_or(InboundHttpError::Unauthorized)
    }

    async fn inbound_http(
        &self,
        headers: &axum::http::HeaderMap,
        body: &[u8],
    ) -> Result<Option<Inbound>, InboundHttpError> {
        Ok(self
            .inbound_http_all(headers, body)
            .await?
            .into_iter()
            .next())
    }

    async fn inbound_http_all(
        &self,
        headers: &axum::http::HeaderMap,
        body: &[u8],
    ) -> Result<Vec<Inbound>, InboundHttpError> {
        let sig = headers
            .get("x-hub-signature-256")
            .and_then(|v| v.to_str().ok());
        if !webhook::signed(&self.inner.cfg.app_secret, sig, body) {
            return Err(InboundHttpError::Unauthorized);
        }
        let raw: serde_json::Value =
            serde_json::from_slice(body).map_err(|e| InboundHttpError::Malformed(e.to_string()))?;
        let delivery = webhook::read(&self.inner.cfg, &raw).map_err(InboundHttpError::Malformed)?;
        self.statuses(&delivery.statuses);
        for (chat, at) in &delivery.opened {
            let reopened = self.inner.opened(&chat.id, *at).await;
            if reopened || self.inner.has_held(&chat.id).await {
                // Open again after a closed window (or replies still held): they go.
                let wa = self.inner.clone();
                let chat = chat.clone();
                tokio::spawn(async move { wa.release(&chat).await });
            }
        }
        // Marked read when the bot answers (not before the message is even stored).
        let mut unread = self.inner.unread.lock();
        for (chat, id) in delivery.unread {
            unread.insert(chat, id);
        }
        drop(unread);
        Ok(delivery.items)
    }
}
