//! The generic signed-webhook channel: any system that can send and receive signed HTTP
//! POSTs can be a chat platform for Switchboard.
//!
//! A webhook channel is named `webhook:<name>` (`webhook:ops`). Your system POSTs inbound
//! messages and button presses to the gateway's webhook route; the gateway POSTs what the
//! agent says to your `outbound_url`. Both directions carry JSON and are signed the same way.
//!
//! # Signing
//!
//! Every request carries two headers:
//!
//! ```text
//! X-Switchboard-Timestamp: <unix seconds, decimal>
//! X-Switchboard-Signature: sha256=<lowercase hex HMAC-SHA256(secret, "<timestamp>.<raw body>")>
//! ```
//!
//! The HMAC key is the shared secret's UTF-8 bytes; the signed message is the timestamp
//! exactly as sent in the header, one `.` and the raw request body bytes (sign and check
//! the bytes on the wire, not re-serialised JSON). To check a request:
//!
//! 1. both headers are present, the timestamp is decimal digits and the signature is
//!    `sha256=` followed by 64 hex digits — otherwise reject;
//! 2. recompute the HMAC and compare it with the received one in constant time
//!    (`hmac.compare_digest` in Python, `crypto.timingSafeEqual` in Node) — reject on mismatch;
//! 3. reject when the timestamp is more than the tolerance (300 s by default) from your
//!    clock; this stops replays of captured requests.
//!
//! For example (Python):
//!
//! ```text
//! ts = str(int(time.time()))
//! sig = "sha256=" + hmac.new(secret.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
//! ```
//!
//! Use a long random secret (e.g. 32 random bytes, hex-encoded) and keep it out of logs.
//! [`sign`] and [`verify`] implement both sides here.
//!
//! # Inbound (your system → gateway)
//!
//! A message:
//!
//! ```json
//! {"type": "message",
//!  "peer": {"id": "u1", "name": "Alice", "username": "alice"},
//!  "chat": {"id": "c1", "kind": "direct", "thread": null},
//!  "text": "hi",
//!  "message_id": "m1",
//!  "attachments": [{"kind": "image", "name": "a.png", "size": 1234}]}
//! ```
//!
//! * `peer.id`, `chat.id` and `message_id` are required, non-empty strings (integers are
//!   accepted and turned into strings), at most 512 bytes;
//! * `peer.name` defaults to `peer.id`; `peer.username` is optional;
//! * `chat.kind` is `direct`, `group` or `thread`; `chat.thread` is optional (string or null);
//! * `text` is required, at most 64 KiB (65 536 bytes), and may be empty only when
//!   `attachments` are given;
//! * `attachments` is optional (metadata only: `kind`, optional `name` and `size`);
//! * `reply_to` is optional: the id of the message it replies to (a reply to an approval
//!   prompt that reads `allow` or `deny [reason]` answers it);
//! * any other top-level fields are kept in the message's `meta`.
//!
//! Webhook messages are always treated as addressed to the bot (no mention needed in groups).
//!
//! A press of one of our buttons:
//!
//! ```json
//! {"type": "press", "press_id": "p1",
//!  "peer": {"id": "u1", "name": "Alice"},
//!  "chat": {"id": "c1", "kind": "group"},
//!  "message_id": "<the id you returned for the message carrying the button>",
//!  "data": "<the button's data, as we sent it>"}
//! ```
//!
//! `press_id` and `message_id` are required non-empty ids; `data` is a required string.
//!
//! A reaction on one of our messages (✅ / 👍 or ❌ / 👎 on an approval prompt answer it;
//! others are ignored):
//!
//! ```json
//! {"type": "reaction", "reaction_id": "r1",
//!  "peer": {"id": "u1", "name": "Alice"},
//!  "chat": {"id": "c1", "kind": "direct"},
//!  "message_id": "<the id you returned for the message reacted to>",
//!  "key": "👍"}
//! ```
//!
//! # Outbound (gateway → your `outbound_url`)
//!
//! ```json
//! {"type": "send", "chat": {"id": "c1", "kind": "direct"}, "text": "…",
//!  "buttons": [{"text": "Approve", "data": "a:1"}]}
//! {"type": "edit", "chat": {…}, "message_id": "…", "text": "…", "buttons": […]}
//! {"type": "press_answer", "press_id": "p1", "text": "Approved"}
//! {"type": "ping"}
//! ```
//!
//! `chat` is echoed as received (`thread` omitted when absent); `buttons` is always present
//! (empty: no buttons; on `edit`, empty removes them); `press_answer.text` may be null.
//! Answer any 2xx to accept. For `send`, answer `200 {"message_id": "…"}` with the id you
//! will use for that message in `edit` and in presses; without one the gateway makes up a
//! UUID. `429` with `Retry-After: <seconds>` (1 s when absent) makes the gateway wait and
//! retry, at most [`WebhookConfig::max_retries`] times (3) and only for waits up to
//! [`WebhookConfig::max_retry_after`] (60 s); any other status is a failure.
//! Redirects are not followed (a signed body goes only to the configured URL).
//!
//! # Receiving (for the gateway's route)
//!
//! Limit the body to [`MAX_INBOUND_BODY_BYTES`], call [`verify`] with the raw body bytes
//! and the channel's secret and tolerance, then [`parse_inbound`] with the channel name.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use axum::http::HeaderMap;
use bytes::Bytes;
use hmac::{Hmac, Mac};
use serde_json::{Map, Value, json};
use sha2::Sha256;
use subtle::ConstantTimeEq;
use tokio_util::sync::CancellationToken;

use crate::channel::{
    Attachment, Button, ButtonPress, Channel, ChannelContext, ChannelError, ChannelInfo, ChatKind,
    ChatRef, Inbound, InboundMessage, Peer, Reaction,
};
use crate::platform::{self, Call, Limits, OverCap, PlatformClient, RetryPolicy, Verdict};

/// The header with the request's unix time in seconds (lower case, as `HeaderMap` keys are).
pub const TIMESTAMP_HEADER: &str = "x-switchboard-timestamp";
/// The header with `sha256=<hex HMAC>`.
pub const SIGNATURE_HEADER: &str = "x-switchboard-signature";
/// How far a request's timestamp may be from now by default.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);
/// The default longest text of one outbound message.
pub const DEFAULT_MAX_CHARS: usize = 4000;
/// The longest inbound `text` (and press `data`), in bytes.
pub const MAX_INBOUND_TEXT_BYTES: usize = 64 * 1024;
/// The longest inbound id, in bytes.
pub const MAX_ID_BYTES: usize = 512;
/// A body limit for the inbound route: above this a request cannot be valid anyway.
pub const MAX_INBOUND_BODY_BYTES: usize = 256 * 1024;

/// The wait after a 429 without a usable `Retry-After`.
const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);
/// Timeout of one POST.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How much of a receiver's response is read.
const MAX_RESPONSE_BYTES: usize = 1024 * 1024;
/// How much of a failed response's body goes into the error.
const ERROR_EXCERPT_CHARS: usize = 300;

type HmacSha256 = Hmac<Sha256>;

mod inbound;
mod signing;

pub use inbound::parse_inbound;
pub use signing::{VerifyError, sign, verify};

/// One webhook channel's settings.
#[derive(Clone)]
pub struct WebhookConfig {
    /// The bare name; the channel is called `webhook:<name>`. Letters, digits, `-`, `_`.
    pub name: String,
    /// The shared HMAC secret (never logged; redacted from `Debug`).
    pub secret: String,
    /// Where outbound messages are POSTed (`http` or `https`).
    pub outbound_url: String,
    /// How far a request's timestamp may be from now ([`DEFAULT_TOLERANCE`]).
    pub tolerance: Duration,
    /// Longest text of one outbound message ([`DEFAULT_MAX_CHARS`]).
    pub max_chars: usize,
    /// How often one POST is retried after 429 before giving up (default 3).
    pub max_retries: u32,
    /// The longest `Retry-After` waited out inside one POST (default 60 s).
    pub max_retry_after: Duration,
    /// What a longer one does (default: the POST fails as rate limited).
    pub over_cap: OverCap,
}

impl WebhookConfig {
    /// Settings with the default tolerance and message length.
    pub fn new(
        name: impl Into<String>,
        secret: impl Into<String>,
        outbound_url: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            secret: secret.into(),
            outbound_url: outbound_url.into(),
            tolerance: DEFAULT_TOLERANCE,
            max_chars: DEFAULT_MAX_CHARS,
            max_retries: 3,
            max_retry_after: Duration::from_secs(60),
            over_cap: OverCap::Fail,
        }
    }

    /// The channel name, `webhook:<name>`.
    pub fn channel_name(&self) -> String {
        format!("webhook:{}", self.name)
    }
}

impl std::fmt::Debug for WebhookConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookConfig")
            .field("name", &self.name)
            .field("secret", &"[redacted]")
            .field("outbound_url", &redact_url_str(&self.outbound_url))
            .field("tolerance", &self.tolerance)
            .field("max_chars", &self.max_chars)
            .finish()
    }
}

// ---------------------------------------------------------------------------------------
// The channel
// ---------------------------------------------------------------------------------------

/// `scheme://host[:port]/path` — no credentials, query or fragment (they may hold tokens).
fn redact_url(url: &reqwest::Url) -> String {
    let host = url.host_str().unwrap_or("");
    match url.port() {
        Some(port) => format!("{}://{host}:{port}{}", url.scheme(), url.path()),
        None => format!("{}://{host}{}", url.scheme(), url.path()),
    }
}

fn redact_url_str(url: &str) -> String {
    reqwest::Url::parse(url)
        .map(|u| redact_url(&u))
        .unwrap_or_else(|_| "[unparsable url]".into())
}

fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    text.trim().chars().take(ERROR_EXCERPT_CHARS).collect()
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A webhook connection: receives through the gateway's HTTP route (see [`verify`] and
/// [`parse_inbound`]), sends by POSTing signed JSON to the configured URL.
pub struct WebhookChannel {
    info: ChannelInfo,
    cfg: WebhookConfig,
    channel_name: String,
    url: reqwest::Url,
    url_shown: String,
    /// Posts, with the retry policy (no rates of its own: the receiver says with 429).
    client: PlatformClient,
    running: AtomicBool,
    last_error: Mutex<Option<String>>,
    /// `connected` while it runs; the last failed delivery.
    health: crate::health::Health,
}

impl std::fmt::Debug for WebhookChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookChannel")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

/// What a POST got back.
struct Reply {
    status: u16,
    body: Bytes,
}

impl WebhookChannel {
    /// Checks the settings (name, non-empty secret, an `http(s)` URL, `max_chars` > 0)
    /// and builds the HTTP client.
    pub fn new(cfg: WebhookConfig) -> Result<Self, ChannelError> {
        let channel_name = cfg.channel_name();
        let other = |reason: String| ChannelError::Other {
            channel: channel_name.clone(),
            reason,
        };
        if !valid_name(&cfg.name) {
            return Err(other(format!(
                "webhook name {:?} must be 1–64 letters, digits, '-' or '_' (the bare name, without \"webhook:\")",
                cfg.name
            )));
        }
        if cfg.secret.is_empty() {
            return Err(other("the webhook secret is empty".into()));
        }
        let url = reqwest::Url::parse(&cfg.outbound_url)
            .map_err(|e| other(format!("outbound_url is not a valid URL: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(other(format!(
                "outbound_url must be an http:// or https:// URL with a host (got {})",
                redact_url(&url)
            )));
        }
        if cfg.max_chars == 0 {
            return Err(other("max_chars must be at least 1".into()));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            // A signed body must not be forwarded to wherever a redirect points.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("switchboard-gateway/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| other(format!("cannot build the HTTP client: {e}")))?;
        let url_shown = redact_url(&url);
        let mut secrets = vec![cfg.secret.clone()];
        secrets.extend(url.password().map(str::to_owned));
        secrets.extend(url.query().map(str::to_owned));
        let policy = RetryPolicy {
            default_retry_after: DEFAULT_RETRY_AFTER,
            // A receiver's 5xx is its answer to this delivery (with its text in the error);
            // the gateway's worker decides whether to deliver again.
            transient_retries: 0,
            ..RetryPolicy::configured(cfg.max_retries, cfg.max_retry_after, cfg.over_cap)
        };
        let client = PlatformClient::new(
            channel_name.clone(),
            url.as_str(),
            http,
            secrets,
            policy,
            Limits::new(),
        );
        Ok(Self {
            info: ChannelInfo::new(channel_name.clone(), cfg.max_chars),
            cfg,
            channel_name,
            url,
            url_shown,
            client,
            running: AtomicBool::new(false),
            last_error: Mutex::new(None),
            health: crate::health::Health::new(),
        })
    }

    /// The settings this channel was built with.
    pub fn config(&self) -> &WebhookConfig {
        &self.cfg
    }

    fn record(&self, result: Result<(), &ChannelError>) {
        let mut last = self.last_error.lock();
        *last = result.err().map(ToString::to_string);
        if let Some(e) = last.as_deref() {
            self.health.error(format!("delivery failed: {e}"));
        }
    }

    /// POSTs `payload` signed, retrying after 429s; a 2xx reply or an error.
    async fn post(&self, method: &str, payload: &Value) -> Result<Reply, ChannelError> {
        let result = self.post_inner(method, payload).await;
        self.record(result.as_ref().map(|_| ()));
        result
    }

    async fn post_inner(&self, method: &str, payload: &Value) -> Result<Reply, ChannelError> {
        let body = Bytes::from(
            serde_json::to_vec(payload).map_err(|e| ChannelError::Other {
                channel: self.channel_name.clone(),
                reason: format!("cannot encode the {method} request: {e}"),
            })?,
        );
        let label = format!("{method} to {}", self.url_shown);
        let call = Call {
            label: &label,
            keys: &[platform::BOT.to_owned()],
            timeout: CALL_TIMEOUT,
            policy: None,
        };
        self.client
            .call(
                call,
                |http, _| {
                    // Signed again on every try: the timestamp is part of the signature.
                    let timestamp = chrono::Utc::now().timestamp();
                    let signature = sign(&self.cfg.secret, timestamp, &body);
                    http.post(self.url.clone())
                        .header(reqwest::header::CONTENT_TYPE, "application/json")
                        .header(TIMESTAMP_HEADER, timestamp.to_string())
                        .header(SIGNATURE_HEADER, signature)
                        .body(body.clone())
                },
                |answer| {
                    let status = answer.status;
                    if status == reqwest::StatusCode::TOO_MANY_REQUESTS {
                        return Verdict::RateLimited(answer.retry_after());
                    }
                    let received = &answer.body[..answer.body.len().min(MAX_RESPONSE_BYTES)];
                    if !status.is_success() {
                        // The receiver's words, never a secret of this channel's (an echo
                        // of the URL's query, say): they end up in logs and the ledger.
                        let mut description = self.client.redact(&excerpt(received));
                        if description.is_empty() {
                            description = format!("HTTP {status}");
                        }
                        let err = ChannelError::Api {
                            channel: self.channel_name.clone(),
                            method: method.to_string(),
                            code: status.as_u16(),
                            description,
                        };
                        return if status.is_server_error() {
                            Verdict::Transient(err)
                        } else {
                            Verdict::Failed(err)
                        };
                    }
                    Verdict::Done(Reply {
                        status: status.as_u16(),
                        body: Bytes::copy_from_slice(received),
                    })
                },
            )
            .await
    }
}

#[async_trait]
impl Channel for WebhookChannel {
    fn info(&self) -> &ChannelInfo {
        &self.info
    }

    /// Inbound arrives over the gateway's HTTP route, so this only waits for `cancel`.
    async fn run(
        &self,
        _ctx: ChannelContext,
        cancel: CancellationToken,
    ) -> Result<(), ChannelError> {
        self.running.store(true, Ordering::SeqCst);
        self.health.connected("listening");
        cancel.cancelled().await;
        self.running.store(false, Ordering::SeqCst);
        self.health.configured("configured");
        Ok(())
    }

    async fn send(
        &self,
        chat: &ChatRef,
        text: &str,
        buttons: &[Button],
    ) -> Result<String, ChannelError> {
        let payload = json!({"type": "send", "chat": chat, "text": text, "buttons": buttons});
        let reply = self.post("send", &payload).await?;
        let given = serde_json::from_slice::<Value>(&reply.body)
            .ok()
            .and_then(|v| match v.get("message_id") {
                Some(Value::String(s)) if !s.trim().is_empty() && s.len() <= MAX_ID_BYTES => {
                    Some(s.clone())
                }
                Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Some(n.to_string()),
                _ => None,
            });
        Ok(given.unwrap_or_else(|| uuid::Uuid::new_v4().to_string()))
    }

    /// `{"type": "file", "chat", "name", "mime", "size", "url", "caption"}`: the file is not
    /// pushed; `url` is its path on the Switchboard server, fetched with the API token.
    async fn send_file(
        &self,
        chat: &ChatRef,
        file: &crate::channel::OutgoingFile,
    ) -> Result<String, ChannelError> {
        let payload = json!({
            "type": "file",
            "chat": chat,
            "name": file.name,
            "mime": file.mime,
            "size": file.bytes.len(),
            "url": file.path,
            "caption": file.caption,
        });
        self.post("file", &payload).await?;
        Ok(uuid::Uuid::new_v4().to_string())
    }

    async fn edit(
        &self,
        chat: &ChatRef,
        message_id: &str,
        text: &str,
        buttons: &[Button],
    ) -> Result<(), ChannelError> {
        let payload = json!({
            "type": "edit",
            "chat": chat,
            "message_id": message_id,
            "text": text,
            "buttons": buttons,
        });
        self.post("edit", &payload).await.map(|_| ())
    }

    async fn answer_press(
        &self,
        press: &ButtonPress,
        text: Option<&str>,
    ) -> Result<(), ChannelError> {
        let payload = json!({"type": "press_answer", "press_id": press.press_id, "text": text});
        self.post("press_answer", &payload).await.map(|_| ())
    }

    async fn test(&self) -> Result<String, ChannelError> {
        let reply = self.post("ping", &json!({"type": "ping"})).await?;
        Ok(format!(
            "{} → {} answered {}",
            self.channel_name, self.url_shown, reply.status
        ))
    }

    fn status(&self) -> String {
        let last = self.last_error.lock().clone();
        let base = if self.running.load(Ordering::SeqCst) {
            "listening"
        } else {
            "configured"
        };
        match last {
            Some(err) => format!("{base}; last delivery failed: {err}"),
            None => base.to_string(),
        }
    }

    /// `connected` while it runs (it receives over the gateway's HTTP route), else
    /// `configured`; a failed delivery is the last error.
    fn health(&self) -> crate::health::ChannelHealth {
        crate::health::ChannelHealth {
            status: self.status(),
            ..self.health.snapshot()
        }
    }
}

#[cfg(test)]
mod prop_tests;
