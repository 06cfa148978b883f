//! The REST API: building the channel, requests and their rate-limit buckets, messages,
//! components, interaction answers.

use crate::platform::{Answer, BOT, Call, PlatformClient, Verdict};

use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::channel::{Button, ChannelError, ChatRef};

use super::*;

/// One REST request.
pub(super) struct Req {
    method: reqwest::Method,
    /// Below `api_base`, e.g. `/channels/1/messages`.
    path: String,
    /// For errors and logs (no secrets), e.g. `POST /channels/1/messages`.
    label: String,
    /// The rate-limit bucket.
    pub(super) bucket: String,
    body: Option<Value>,
    /// An extra secret in the path (an interaction token).
    secret: Option<String>,
    /// The outbox keys besides the bucket's (default: the bot's).
    pub(super) keys: Vec<String>,
    /// The message an edit is of (pending edits of one message coalesce).
    pub(super) edit_of: Option<String>,
    /// A file to send with the message: the body goes as `payload_json` and the file as
    /// `files[0]` of a multipart request.
    pub(super) file: Option<crate::channel::OutgoingFile>,
}

impl Req {
    pub(super) fn new(method: reqwest::Method, path: String, body: Option<Value>) -> Self {
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
            file: None,
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
        if let Some(url) = &cfg.gateway_url
            && !(url.starts_with("ws://") || url.starts_with("wss://"))
        {
            return Err(other(format!(
                "gateway_url {url:?}: expected a ws:// or wss:// URL"
            )));
        }
        let (base, http) = platform::prepare(
            "api_base",
            &cfg.api_base,
            cfg.edit_interval,
            reqwest::Client::builder().user_agent(concat!(
                "DiscordBot (https://example.invalid/switchboard, ",
                env!("CARGO_PKG_VERSION"),
                ")"
            )),
        )
        .map_err(other)?;
        let cfg = DiscordConfig {
            token: token.to_owned(),
            ..cfg
        };
        let client = PlatformClient::new(
            cfg.name.clone(),
            &base,
            http,
            vec![cfg.token.clone()],
            RetryPolicy::configured(cfg.max_retries, cfg.max_retry_after, cfg.over_cap),
            limits(cfg.edit_interval),
        );
        Ok(Self {
            info: ChannelInfo::new(cfg.name.clone(), MAX_CHARS).edit_interval(cfg.edit_interval),
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

    pub(super) fn other(&self, reason: impl Into<String>) -> ChannelError {
        self.client.other(reason)
    }

    /// Notes `X-RateLimit-Remaining: 0` / `X-RateLimit-Reset-After` of an answer: the
    /// bucket is held in the outbox until it resets.
    pub(super) fn note_bucket(&self, bucket: &str, headers: &reqwest::header::HeaderMap) {
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
    pub(super) fn read(&self, req: &Req, answer: Answer) -> Verdict<Value> {
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
    pub(super) async fn call_on(
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
            match (&req.file, &req.body) {
                (Some(f), body) => {
                    let part =
                        reqwest::multipart::Part::stream(f.bytes.clone()).file_name(f.name.clone());
                    let part = part.mime_str(&f.mime).unwrap_or_else(|_| {
                        reqwest::multipart::Part::stream(f.bytes.clone()).file_name(f.name.clone())
                    });
                    let payload = body.clone().unwrap_or_else(|| json!({})).to_string();
                    let form = reqwest::multipart::Form::new()
                        .text("payload_json", payload)
                        .part("files[0]", part);
                    builder = builder.multipart(form);
                }
                (None, Some(body)) => builder = builder.json(body),
                (None, None) => {}
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
    pub(super) async fn call(&self, req: &Req) -> Result<Value, ChannelError> {
        Ok(self
            .call_on(req, CALL_TIMEOUT, false)
            .await?
            .unwrap_or(Value::Null))
    }

    /// One REST call, without retries, within `timeout`.
    pub(super) async fn call_once(
        &self,
        req: &Req,
        timeout: Duration,
    ) -> Result<Value, ChannelError> {
        Ok(self
            .call_on(req, timeout, true)
            .await?
            .unwrap_or(Value::Null))
    }

    pub(super) async fn get_me(&self) -> Result<(String, String), ChannelError> {
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
    pub(super) async fn gateway_url(&self) -> Result<String, ChannelError> {
        if let Some(url) = &self.cfg.gateway_url {
            return Ok(url.clone());
        }
        if let Some(url) = self.gateway.lock().clone() {
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
        *self.gateway.lock() = Some(url.clone());
        Ok(url)
    }

    /// Action rows of buttons (the first primary, the others secondary).
    pub(super) fn components(&self, buttons: &[Button]) -> Result<Value, ChannelError> {
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

    pub(super) fn target<'a>(&self, chat: &'a ChatRef) -> Result<&'a str, ChannelError> {
        let id = chat.thread.as_deref().unwrap_or(&chat.id);
        if valid_id(id) {
            Ok(id)
        } else {
            Err(self.other(format!("{id:?} is not a Discord channel id")))
        }
    }

    pub(super) fn bot_id(&self) -> Option<String> {
        self.bot_id.lock().clone()
    }

    /// An ephemeral follow-up (only the presser sees it) to an acknowledged interaction.
    pub(super) async fn follow_up(&self, press_id: &str, text: &str) -> Result<(), ChannelError> {
        // The dispatcher may get to the press before it is acknowledged: wait for that.
        let mut waited = Duration::ZERO;
        let entry = loop {
            let entry = self
                .press_tokens
                .lock()
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
    /// Acknowledges an interaction (DEFERRED_UPDATE_MESSAGE), once, within Discord's 3 s.
    pub(super) async fn ack_interaction(&self, id: &str, token: &str) -> Result<(), ChannelError> {
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
        if let Some(t) = self.press_tokens.lock().get_mut(id) {
            t.acked = true;
        }
        Ok(())
    }
}
