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
//! - **Replies**: WhatsApp messages cannot be edited, so a reply comes in paragraphs as it
//!   streams, each at most 4,096 characters. Approval prompts carry up to three reply
//!   buttons (WhatsApp's limit; titles cut to 20 characters), their text cut to the
//!   interactive body's 1,024 characters (the whole text is sent first when longer).
//! - **The 24-hour window**: free-form messages may only go to someone who wrote in the
//!   last 24 hours. Outside it, with [`WhatsAppConfig::template`] set that template goes
//!   instead, once until the person writes again (it should say "write to me to see the
//!   answer"); an approval prompt is never replaced by it (its approval fails closed).
//!   Otherwise the send fails with a clear error in the log.
//! - **Statuses** (`sent`, `delivered`, `read`, `failed`) are counted in
//!   `switchboard_gateway_whatsapp_statuses_total{channel,status}`; a failure is logged
//!   with Meta's code and title.
//! - **Rate limits**: 80 messages a second per number (Meta's default throughput) and about
//!   one a second to one person in the outbox; Meta's throttling answers (HTTP 429, error
//!   codes 4, 80007, 130429, 131056) are waited out by the kit's retry policy.
//!
//! The access token and the app secret are secrets: never logged, removed from errors.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::channel::{
    Attachment, Button, ButtonPress, Channel, ChannelContext, ChannelError, ChannelInfo, ChatRef,
    Fetched, Inbound, InboundHttpError, OutgoingFile,
};
use crate::health::ChannelHealth;
use crate::platform::{self, Limits, OverCap, PlatformClient, Rate, RetryPolicy};

mod graph;
mod webhook;

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
    cfg: WhatsAppConfig,
    info: ChannelInfo,
    client: PlatformClient,
    /// Where deliveries go once `run` has started.
    ctx: OnceLock<ChannelContext>,
    /// When each person last wrote (their 24-hour window).
    last_inbound: Mutex<HashMap<String, std::time::Instant>>,
    /// Each person's latest message not marked read yet: marked when the bot answers.
    unread: Mutex<HashMap<String, String>>,
    /// People sent the template since they last wrote (one template per closed window).
    templated: Mutex<std::collections::HashSet<String>>,
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
            info,
            cfg,
            client,
            ctx: OnceLock::new(),
            last_inbound: Mutex::new(HashMap::new()),
            unread: Mutex::new(HashMap::new()),
            templated: Mutex::new(std::collections::HashSet::new()),
        })
    }

    /// Whether `to` wrote in the last 24 hours (as far as this process saw, or the
    /// channel state says).
    async fn in_window(&self, to: &str) -> bool {
        if let Some(at) = self.last_inbound.lock().get(to) {
            return at.elapsed() < SERVICE_WINDOW;
        }
        let Some(ctx) = self.ctx.get() else {
            return true; // not started: let Meta decide
        };
        match ctx
            .state
            .get(&window_key(to))
            .await
            .and_then(|t| t.parse::<i64>().ok())
        {
            Some(at) => chrono::Utc::now().timestamp() - at < SERVICE_WINDOW.as_secs() as i64,
            None => false,
        }
    }

    /// Notes that `from` wrote now (their window opens).
    async fn opened(&self, from: &str) {
        self.last_inbound
            .lock()
            .insert(from.to_string(), std::time::Instant::now());
        self.templated.lock().remove(from);
        if let Some(ctx) = self.ctx.get()
            && let Err(e) = ctx
                .state
                .set(
                    &window_key(from),
                    &chrono::Utc::now().timestamp().to_string(),
                )
                .await
        {
            tracing::warn!(channel = %self.cfg.name, error = %e, "storing a WhatsApp window");
        }
    }
}

fn window_key(wa_id: &str) -> String {
    format!("window:{wa_id}")
}

#[async_trait]
impl Channel for WhatsAppChannel {
    fn info(&self) -> &ChannelInfo {
        &self.info
    }

    /// Deliveries come over HTTP: this keeps the context for them until cancelled.
    async fn run(
        &self,
        ctx: ChannelContext,
        cancel: CancellationToken,
    ) -> Result<(), ChannelError> {
        let _ = self.ctx.set(ctx);
        self.client.connected("webhook");
        cancel.cancelled().await;
        self.client.stopped();
        Ok(())
    }

    async fn send(
        &self,
        chat: &ChatRef,
        text: &str,
        buttons: &[Button],
    ) -> Result<String, ChannelError> {
        if !self.in_window(&chat.id).await {
            return self.outside_window(chat, !buttons.is_empty()).await;
        }
        if let Some(id) = self.unread.lock().remove(&chat.id) {
            self.mark_read(id);
        }
        if buttons.is_empty() {
            return self.send_text(chat, text).await;
        }
        self.send_buttons(chat, text, buttons).await
    }

    /// WhatsApp messages cannot be edited: nothing is sent (the dispatcher streams in
    /// paragraphs here, and a settled prompt's buttons stay; a late press is answered
    /// "no longer pending").
    async fn edit(
        &self,
        _chat: &ChatRef,
        _message_id: &str,
        _text: &str,
        _buttons: &[Button],
    ) -> Result<(), ChannelError> {
        Ok(())
    }

    /// A press is a message of its own on WhatsApp: nothing to acknowledge.
    async fn answer_press(
        &self,
        _press: &ButtonPress,
        _text: Option<&str>,
    ) -> Result<(), ChannelError> {
        Ok(())
    }

    /// WhatsApp has no message only one person sees: the refusal goes to the presser's own
    /// chat with the bot.
    async fn tell_presser(&self, press: &ButtonPress, text: &str) -> Result<(), ChannelError> {
        self.send(&press.chat, text, &[]).await.map(drop)
    }

    async fn test(&self) -> Result<String, ChannelError> {
        Ok(match self.number().await? {
            (Some(name), number) => format!("{name} ({number})"),
            (None, number) => number,
        })
    }

    async fn open_link(&self) -> Result<Option<String>, ChannelError> {
        let (_, number) = self.number().await?;
        let digits: String = number.chars().filter(char::is_ascii_digit).collect();
        Ok(Some(format!("https://wa.me/{digits}")))
    }

    async fn send_file(&self, chat: &ChatRef, file: &OutgoingFile) -> Result<String, ChannelError> {
        if !self.in_window(&chat.id).await {
            return self.outside_window(chat, false).await;
        }
        let media = self.upload(file).await?;
        self.send_media(chat, file, &media).await
    }

    async fn fetch(&self, attachment: &Attachment, max_bytes: u64) -> Result<Fetched, String> {
        platform::client::check_declared(attachment, max_bytes)?;
        let media = attachment
            .source
            .as_deref()
            .ok_or("this attachment cannot be fetched")?;
        let bytes = self.download(media, max_bytes).await?;
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
        self.client.status()
    }

    fn health(&self) -> ChannelHealth {
        self.client.health()
    }

    fn http_subscribe(&self, query: &HashMap<String, String>) -> Result<String, InboundHttpError> {
        webhook::challenge(&self.cfg.verify_token, query).ok_or(InboundHttpError::Unauthorized)
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
        if !webhook::signed(&self.cfg.app_secret, sig, body) {
            return Err(InboundHttpError::Unauthorized);
        }
        let raw: serde_json::Value =
            serde_json::from_slice(body).map_err(|e| InboundHttpError::Malformed(e.to_string()))?;
        let delivery = webhook::read(&self.cfg.name, &self.cfg.phone_number_id, &raw)
            .map_err(InboundHttpError::Malformed)?;
        for s in &delivery.statuses {
            metrics::counter!("switchboard_gateway_whatsapp_statuses_total", "channel" => self.cfg.name.clone(), "status" => s.status.clone())
                .increment(1);
            if let Some((code, title)) = &s.error {
                tracing::warn!(channel = %self.cfg.name, message = %s.message_id, recipient = %s.recipient, code, title = %title, "WhatsApp could not deliver a message");
            }
        }
        for item in &delivery.items {
            let (from, id) = match item {
                Inbound::Message(m) => (m.peer.id.as_str(), Some(m.message_id.clone())),
                Inbound::Press(p) => (p.peer.id.as_str(), Some(p.press_id.clone())),
                Inbound::Reaction(r) => (r.peer.id.as_str(), None),
            };
            self.opened(from).await;
            // Marked read when the bot answers (not before the message is even stored).
            if let Some(id) = id {
                self.unread.lock().insert(from.to_string(), id);
            }
        }
        Ok(delivery.items)
    }
}

impl WhatsAppChannel {
    fn other(&self, reason: impl Into<String>) -> ChannelError {
        self.client.other(reason)
    }

    /// Outside the 24-hour window: the template — once until the person writes again, and
    /// never in place of an approval prompt (a prompt nobody saw must not be answerable: it
    /// fails, and the approval fails closed) — else an error that says why (permanent: the
    /// reply is dropped with a warning, not retried).
    async fn outside_window(&self, chat: &ChatRef, prompt: bool) -> Result<String, ChannelError> {
        let closed = |why: &str| {
            self.client.api_error(
                "messages",
                400,
                &format!(
                    "{} has not written in the last 24 hours: WhatsApp only takes a template message then ({why})",
                    chat.id
                ),
            )
        };
        match &self.cfg.template {
            _ if prompt => Err(closed("an approval prompt is not replaced by a template")),
            Some(_) if self.templated.lock().contains(&chat.id) => {
                Err(closed("the template was sent already"))
            }
            Some((name, language)) => {
                let id = self.send_template(chat, name, language).await?;
                self.templated.lock().insert(chat.id.clone());
                Ok(id)
            }
            None => Err(closed("set [channels.whatsapp] template")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::ChatKind;

    #[tokio::test]
    async fn outside_the_window_a_prompt_is_never_replaced_by_the_template() {
        let mut cfg = WhatsAppConfig::new("106540352242922", "token", "secret", "verify");
        cfg.template = Some(("new_reply".into(), "en_US".into()));
        // Nothing reachable: a prompt must fail before any call is made.
        cfg.api_base = "http://127.0.0.1:9".into();
        let ch = WhatsAppChannel::new(cfg).unwrap();
        let chat = ChatRef {
            id: "4915112345".into(),
            kind: ChatKind::Direct,
            thread: None,
        };
        let e = ch.outside_window(&chat, true).await.unwrap_err();
        assert!(
            matches!(&e, ChannelError::Api { code: 400, description, .. } if description.contains("not replaced by a template")),
            "{e:?}"
        );
        // After a template went out, the next send outside the window is refused.
        ch.templated.lock().insert(chat.id.clone());
        let e = ch.outside_window(&chat, false).await.unwrap_err();
        assert!(e.to_string().contains("sent already"), "{e}");
        // Writing again opens the window and allows a new template later.
        ch.opened(&chat.id).await;
        assert!(!ch.templated.lock().contains(&chat.id));
        assert!(ch.in_window(&chat.id).await);
    }
}
