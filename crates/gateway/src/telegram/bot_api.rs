//! The Bot API: building the channel, calling methods, learning who the bot is, keyboards.

use crate::platform::{self, Answer, BOT, Call, PlatformClient, Verdict};
use std::time::Duration;

use serde_json::{Value, json};

use crate::channel::{Button, ChannelError};

use super::*;

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
        let (base, http) = platform::prepare(
            "base_url",
            &cfg.base_url,
            cfg.edit_interval,
            reqwest::Client::builder(),
        )
        .map_err(other)?;
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
            RetryPolicy::configured(cfg.max_retries, cfg.max_retry_after, cfg.over_cap),
            limits(cfg.edit_interval),
        );
        Ok(Self {
            info: ChannelInfo::new(cfg.name.clone(), MAX_CHARS).edit_interval(cfg.edit_interval),
            cfg,
            client,
            me: tokio::sync::OnceCell::new(),
        })
    }

    /// The configuration (its `Debug` hides the token).
    pub fn config(&self) -> &TelegramConfig {
        &self.cfg
    }

    pub(super) fn other(&self, reason: impl Into<String>) -> ChannelError {
        self.client.other(reason)
    }

    /// One call. 429 is retried as the retry policy says (then
    /// [`ChannelError::RateLimited`]); 409 on `getUpdates` is [`ChannelError::Conflict`].
    /// `keys`: the outbox keys it counts against; `once`: no retries.
    pub(super) async fn call_on(
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
    pub(super) fn read(&self, method: &str, answer: Answer) -> Verdict<Value> {
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
    pub(super) async fn edit_call(
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
    pub(super) async fn call(&self, method: &str, params: &Value) -> Result<Value, ChannelError> {
        self.call_on(method, params, &[BOT.to_owned()], CALL_TIMEOUT, false)
            .await
    }

    /// One call, without retries.
    pub(super) async fn call_once(
        &self,
        method: &str,
        params: &Value,
        timeout: Duration,
    ) -> Result<Value, ChannelError> {
        self.call_on(method, params, &[], timeout, true).await
    }

    pub(super) async fn get_me(&self, once: bool) -> Result<BotIdentity, ChannelError> {
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

    pub(super) fn keyboard(&self, buttons: &[Button]) -> Result<Value, ChannelError> {
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

    pub(super) fn parse_id(&self, what: &str, id: &str) -> Result<i64, ChannelError> {
        id.trim()
            .parse()
            .map_err(|_| self.other(format!("{what} {id:?} is not a Telegram id")))
    }
}

/// A chat id as Telegram takes it: an integer, or `@channelusername`.
pub(super) fn chat_id_value(id: &str) -> Value {
    match id.trim().parse::<i64>() {
        Ok(n) => json!(n),
        Err(_) => json!(id),
    }
}
