//! Slack's Web API: building the channel, calling methods, learning who the bot is.

use crate::platform::{Answer, BOT, Call, PlatformClient, Verdict, pause};
use crate::util::Backoff;
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::channel::ChannelError;

use super::*;

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
        let (base, http) = platform::prepare(
            "api_base",
            &cfg.api_base,
            cfg.edit_interval,
            reqwest::Client::builder(),
        )
        .map_err(other)?;
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
            RetryPolicy::configured(cfg.max_retries, cfg.max_retry_after, cfg.over_cap),
            limits(cfg.edit_interval),
        );
        Ok(Self {
            info: ChannelInfo::new(cfg.name.clone(), MESSAGE_CHARS)
                .edit_interval(cfg.edit_interval),
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
    pub(super) async fn display_name(&self, user: &str) -> Option<String> {
        match self.names.lock().get(user) {
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
        let mut names = self.names.lock();
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
    pub(super) fn events_api(&self) -> bool {
        self.cfg.app_token.is_none() && self.cfg.signing_secret.is_some()
    }

    /// `text` without any of the secrets.
    pub(super) fn redact(&self, text: &str) -> String {
        self.client.redact(text)
    }

    pub(super) fn other(&self, reason: impl Into<String>) -> ChannelError {
        self.client.other(reason)
    }

    /// What a Web API answer means: 429 (or `ok: false, error: ratelimited`) is a rate
    /// limit; `ok: false` is [`ChannelError::Api`].
    pub(super) fn read(&self, method: &str, answer: Answer) -> Verdict<Value> {
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
    pub(super) async fn call_on(
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

    /// A Web API call with form parameters (the file methods take no JSON), with the bot
    /// token, on the outbox `keys`.
    pub(super) async fn form_call(
        &self,
        method: &str,
        form: &[(&str, &str)],
        keys: &[String],
    ) -> Result<Value, ChannelError> {
        let call = Call {
            label: method,
            keys,
            timeout: CALL_TIMEOUT,
            policy: None,
        };
        let token = &self.cfg.bot_token;
        self.client
            .call(
                call,
                |http, base| {
                    http.post(format!("{base}/{method}"))
                        .bearer_auth(token)
                        .form(form)
                },
                |answer| self.read(method, answer),
            )
            .await
    }

    /// One call with the bot token that is not a message in a channel.
    pub(super) async fn call(&self, method: &str, params: &Value) -> Result<Value, ChannelError> {
        self.call_with(method, params, &self.cfg.bot_token).await
    }

    pub(super) async fn call_with(
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

    pub(super) async fn auth_test(&self) -> Result<BotIdentity, ChannelError> {
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
    pub(super) async fn identity(&self) -> Result<BotIdentity, ChannelError> {
        self.me.get_or_try_init(|| self.auth_test()).await.cloned()
    }

    /// Learns the bot identity, retrying transient failures; `None` when cancelled.
    pub(super) async fn identify(
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
                    self.client.retrying(&format!("error: {e}"), &e.to_string());
                    if !pause(wait, cancel).await {
                        return Ok(None);
                    }
                }
            }
        }
    }
}
