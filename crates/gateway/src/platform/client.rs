//! One HTTP client per channel, with one retry policy for every platform.
//!
//! [`PlatformClient::call`] makes one platform call: it takes the call's turn in the bot's
//! [`Outbox`], sends the request the channel builds, reads the answer, and lets the channel
//! say what the answer means ([`Verdict`]). What happens next is the [`RetryPolicy`]'s, the
//! same on every platform:
//!
//! - **Rate limited** (a 429, or a platform's own "slow down"): the wait it names (or
//!   [`RetryPolicy::default_retry_after`]) holds the call's keys in the outbox (all but the
//!   bot-wide one, unless it is the only one), so the bot's other calls on them wait too and
//!   then go paced, and the call is tried again — at most
//!   [`RetryPolicy::max_retries`] times. A wait longer than
//!   [`RetryPolicy::max_retry_after`] is not waited out inside one call when the policy is
//!   [`OverCap::Fail`] (the default: the caller gets [`ChannelError::RateLimited`] at once
//!   and its worker retries later); with [`OverCap::Wait`] it is.
//! - **Transient** (a connection error, a timeout, a 5xx): tried again after a back-off that
//!   doubles from [`RetryPolicy::backoff`], at most [`RetryPolicy::transient_retries`] times;
//!   then the last error.
//! - Anything else is the answer.
//!
//! Errors never carry a secret: every text the client builds goes through
//! [`PlatformClient::redact`], and request errors are reported without their URL.

use std::time::Duration;

use bytes::Bytes;
use reqwest::header::HeaderMap;
use reqwest::{RequestBuilder, StatusCode};

use super::outbox::{Limits, Outbox};
use crate::channel::ChannelError;
use crate::health::{ChannelHealth, Health};

tokio::task_local! {
    /// Platform calls made inside [`counting_attempts`].
    static ATTEMPTS: std::cell::Cell<u32>;
}

/// Runs `f`, counting the platform calls [`PlatformClient::call`] makes for it (every try:
/// a rate-limited or transient call tried again counts again), for the delivery ledger.
/// A channel whose calls do not go through the client (a platform SDK's own) counts none.
pub async fn counting_attempts<F: std::future::Future>(f: F) -> (F::Output, u32) {
    ATTEMPTS
        .scope(std::cell::Cell::new(0), async move {
            let out = f.await;
            (out, ATTEMPTS.with(|c| c.get()))
        })
        .await
}

fn counted_attempt() {
    let _ = ATTEMPTS.try_with(|c| c.set(c.get().saturating_add(1)));
}

/// What replaces a secret in error texts and logs.
pub const REDACTED: &str = "<redacted>";

/// Most bytes of an answer read (the rest is cut off).
const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// What to do with a rate limit whose wait is over [`RetryPolicy::max_retry_after`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OverCap {
    /// Fail the call with [`ChannelError::RateLimited`] (its caller retries later).
    #[default]
    Fail,
    /// Wait it out.
    Wait,
}

/// How one channel retries; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after a rate limit.
    pub max_retries: u32,
    /// The longest rate-limit wait waited out inside one call.
    pub max_retry_after: Duration,
    /// What a longer one does.
    pub over_cap: OverCap,
    /// The wait of a rate limit that names none.
    pub default_retry_after: Duration,
    /// Retries after a connection error, a timeout or a 5xx.
    pub transient_retries: u32,
    /// The first wait before such a retry (it doubles).
    pub backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 3,
            max_retry_after: Duration::from_secs(60),
            over_cap: OverCap::Fail,
            default_retry_after: Duration::from_secs(5),
            transient_retries: 2,
            backoff: Duration::from_millis(500),
        }
    }
}

impl RetryPolicy {
    /// The defaults, with what a channel's configuration sets: the rate-limit retries, the
    /// cap on a wait, and what a longer wait does.
    pub fn configured(max_retries: u32, max_retry_after: Duration, over_cap: OverCap) -> Self {
        Self {
            max_retries,
            max_retry_after,
            over_cap,
            ..Self::default()
        }
    }

    /// No retries at all (a call with a deadline of its own, or one whose loop retries).
    pub fn once(&self) -> Self {
        Self {
            max_retries: 0,
            transient_retries: 0,
            ..*self
        }
    }
}

/// What a platform answered.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Answer {
    /// The `Retry-After` header in seconds (fractions allowed), if it is one.
    pub fn retry_after(&self) -> Option<Duration> {
        self.headers
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .and_then(|s| Duration::try_from_secs_f64(s.max(0.0)).ok())
    }

    /// The body as JSON, if it is.
    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&self.body).ok()
    }
}

/// What an answer means, as the channel reads it.
#[derive(Debug)]
pub enum Verdict<T> {
    Done(T),
    /// Slow down: wait this long (`None`: the policy's default) and try again.
    RateLimited(Option<Duration>),
    /// Worth another try after a back-off (a 5xx).
    Transient(ChannelError),
    /// The final answer.
    Failed(ChannelError),
}

/// One call: what it is for logs and errors, which outbox keys it counts against, and its
/// timeout.
#[derive(Debug, Clone)]
pub struct Call<'a> {
    /// E.g. `sendMessage` or `POST /channels/1/messages` (no secrets).
    pub label: &'a str,
    pub keys: &'a [String],
    pub timeout: Duration,
    /// `None`: the client's policy.
    pub policy: Option<RetryPolicy>,
}

/// See the module docs.
#[derive(Debug)]
pub struct PlatformClient {
    channel: String,
    base: String,
    http: reqwest::Client,
    secrets: Vec<String>,
    health: Health,
    policy: RetryPolicy,
    outbox: Outbox,
}

impl PlatformClient {
    /// `base` is the API's URL (a trailing `/` is dropped); `secrets` are replaced in every
    /// error text.
    pub fn new(
        channel: impl Into<String>,
        base: &str,
        http: reqwest::Client,
        secrets: Vec<String>,
        policy: RetryPolicy,
        limits: Limits,
    ) -> Self {
        let channel: String = channel.into();
        Self {
            outbox: Outbox::new(limits).for_channel(&channel),
            channel,
            base: base.trim().trim_end_matches('/').to_owned(),
            http,
            secrets: secrets.into_iter().filter(|s| !s.is_empty()).collect(),
            health: Health::new(),
            policy,
        }
    }

    /// The channel's name.
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// The API's URL, without a trailing `/`.
    pub fn base(&self) -> &str {
        &self.base
    }

    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }

    pub fn outbox(&self) -> &Outbox {
        &self.outbox
    }

    /// The human-readable status (`polling`, `error: …`).
    pub fn status(&self) -> String {
        self.health.status()
    }

    /// How the channel's connection is doing (see [`crate::health`]).
    pub fn health(&self) -> ChannelHealth {
        self.health.snapshot()
    }

    /// An attempt to connect begins: `starting` (see [`Health::connecting`]).
    pub fn connecting(&self, status: &str) {
        self.health.connecting(self.redact(status));
    }

    /// Receiving.
    pub fn connected(&self, status: &str) {
        self.health.connected(self.redact(status));
    }

    /// An ordinary reconnect (the platform asked for it): not a failure.
    pub fn reconnecting(&self, status: &str, reason: Option<&str>) {
        self.health
            .reconnecting(self.redact(status), reason.map(|r| self.redact(r)));
    }

    /// An attempt failed and is retried; `reason` is the error (redacted here).
    pub fn retrying(&self, status: &str, reason: &str) {
        self.health
            .retrying(self.redact(status), self.redact(reason));
    }

    /// Stopped for a failure that retrying will not fix.
    pub fn failed(&self, status: &str, reason: &str) {
        self.health.failed(self.redact(status), self.redact(reason));
    }

    /// Records an error that is not the connection's (a message the platform could not
    /// deliver): shown as the channel's last error, its state unchanged.
    pub fn note_error(&self, reason: &str) {
        self.health.error(self.redact(reason));
    }

    /// Shut down.
    pub fn stopped(&self) {
        self.health.stopped();
    }

    /// `text` without any of the secrets.
    pub fn redact(&self, text: &str) -> String {
        self.redact_also(text, None)
    }

    /// `text` without any of the secrets, nor `also` (a per-call secret).
    pub fn redact_also(&self, text: &str, also: Option<&str>) -> String {
        let mut out = text.to_owned();
        for s in self.secrets.iter().map(String::as_str).chain(also) {
            if !s.is_empty() {
                out = out.replace(s, REDACTED);
            }
        }
        out
    }

    /// [`ChannelError::Other`] of this channel.
    pub fn other(&self, reason: impl Into<String>) -> ChannelError {
        ChannelError::Other {
            channel: self.channel.clone(),
            reason: reason.into(),
        }
    }

    /// [`ChannelError::Api`] of this channel, its description redacted.
    pub fn api_error(&self, label: &str, code: u16, description: &str) -> ChannelError {
        ChannelError::Api {
            channel: self.channel.clone(),
            method: label.to_owned(),
            code,
            description: self.redact(description),
        }
    }

    /// [`ChannelError::Unreachable`] for an answer that is a 5xx.
    pub fn server_error(&self, label: &str, status: StatusCode) -> ChannelError {
        ChannelError::Unreachable {
            channel: self.channel.clone(),
            reason: format!("{label}: HTTP {status}"),
        }
    }

    /// [`ChannelError::Unreachable`] for a request that failed: its cause chain, without the
    /// URL or any secret.
    pub fn unreachable(
        &self,
        label: &str,
        err: reqwest::Error,
        also: Option<&str>,
    ) -> ChannelError {
        ChannelError::Unreachable {
            channel: self.channel.clone(),
            reason: self.redact_also(&format!("{label}: {}", describe(err)), also),
        }
    }

    /// Makes one call; see the module docs. `build` makes the request (again for each try:
    /// a signature may depend on the time) from the client and the base URL; `read` says
    /// what the answer means.
    pub async fn call<T>(
        &self,
        call: Call<'_>,
        build: impl Fn(&reqwest::Client, &str) -> RequestBuilder,
        read: impl Fn(Answer) -> Verdict<T>,
    ) -> Result<T, ChannelError> {
        self.call_also(call, None, build, read).await
    }

    /// [`Self::call`] with a per-call secret (`also`) redacted from its errors.
    pub async fn call_also<T>(
        &self,
        call: Call<'_>,
        also: Option<&str>,
        build: impl Fn(&reqwest::Client, &str) -> RequestBuilder,
        read: impl Fn(Answer) -> Verdict<T>,
    ) -> Result<T, ChannelError> {
        self.run(call, also, None, build, read)
            .await?
            .ok_or_else(|| self.other("a call without an edit was superseded"))
    }

    /// An edit of `message` (see [`super::message_key`]): [`Self::call`], except that a newer
    /// edit of the same message asked while this one waits for its turn takes its place —
    /// then this one does not go out and answers `None`.
    pub async fn edit<T>(
        &self,
        call: Call<'_>,
        message: &str,
        build: impl Fn(&reqwest::Client, &str) -> RequestBuilder,
        read: impl Fn(Answer) -> Verdict<T>,
    ) -> Result<Option<T>, ChannelError> {
        self.run(call, None, Some(message), build, read).await
    }

    async fn run<T>(
        &self,
        call: Call<'_>,
        also: Option<&str>,
        mut coalesce: Option<&str>,
        build: impl Fn(&reqwest::Client, &str) -> RequestBuilder,
        read: impl Fn(Answer) -> Verdict<T>,
    ) -> Result<Option<T>, ChannelError> {
        let policy = call.policy.unwrap_or(self.policy);
        let mut limited = 0u32;
        let mut transient = 0u32;
        let mut backoff = policy.backoff;
        loop {
            match coalesce.take() {
                Some(message) => {
                    if !self.outbox.edit_turn(message, call.keys).await {
                        tracing::debug!(channel = %self.channel, call = call.label, "edit superseded by a newer one");
                        return Ok(None);
                    }
                }
                None => self.outbox.turn(call.keys).await,
            }
            counted_attempt();
            let verdict = match self.send(&call, also, &build).await {
                Ok(answer) => read(answer),
                Err(e) => Verdict::Transient(e),
            };
            match verdict {
                Verdict::Done(v) => {
                    metrics::counter!("switchboard_gateway_calls_total", "channel" => self.channel.clone())
                        .increment(1);
                    return Ok(Some(v));
                }
                Verdict::Failed(e) => return Err(e),
                Verdict::Transient(e) => {
                    if transient >= policy.transient_retries {
                        return Err(e);
                    }
                    transient += 1;
                    tracing::info!(channel = %self.channel, call = call.label, error = %e, wait = ?backoff, retry = transient, "call failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = backoff.saturating_mul(2);
                }
                Verdict::RateLimited(wait) => {
                    metrics::counter!("switchboard_gateway_rate_limited_total", "channel" => self.channel.clone())
                        .increment(1);
                    let wait = wait.unwrap_or(policy.default_retry_after);
                    let retry_after_secs = wait.as_secs_f64().ceil() as u64;
                    let over_cap = wait > policy.max_retry_after;
                    if limited >= policy.max_retries
                        || (over_cap && policy.over_cap == OverCap::Fail)
                    {
                        tracing::warn!(channel = %self.channel, call = call.label, ?wait, retries = limited, "rate limited; giving up");
                        return Err(ChannelError::RateLimited {
                            channel: self.channel.clone(),
                            retry_after_secs,
                        });
                    }
                    limited += 1;
                    tracing::info!(channel = %self.channel, call = call.label, ?wait, retry = limited, "rate limited; waiting");
                    let held: Vec<&String> = match call.keys {
                        [only] => vec![only],
                        keys => keys.iter().filter(|k| k.as_str() != super::BOT).collect(),
                    };
                    if held.is_empty() {
                        tokio::time::sleep(wait).await;
                    }
                    for key in held {
                        self.outbox.hold(key, wait);
                    }
                }
            }
        }
    }

    async fn send(
        &self,
        call: &Call<'_>,
        also: Option<&str>,
        build: &impl Fn(&reqwest::Client, &str) -> RequestBuilder,
    ) -> Result<Answer, ChannelError> {
        let mut resp = build(&self.http, &self.base)
            .timeout(call.timeout)
            .send()
            .await
            .map_err(|e| self.unreachable(call.label, e, also))?;
        let status = resp.status();
        let headers = std::mem::take(resp.headers_mut());
        let mut body = Vec::new();
        loop {
            match resp.chunk().await {
                Ok(Some(chunk)) => {
                    let room = MAX_ANSWER_BYTES.saturating_sub(body.len());
                    body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                    if body.len() >= MAX_ANSWER_BYTES {
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => return Err(self.unreachable(call.label, e, also)),
            }
        }
        Ok(Answer {
            status,
            headers,
            body: Bytes::from(body),
        })
    }
}

/// Why a file over `max_bytes` was not taken, for the user.
pub fn too_large(max_bytes: u64) -> String {
    format!(
        "the file is larger than the {} MB accepted",
        max_bytes / (1024 * 1024)
    )
}

/// Refuses an attachment whose size the platform declared over `max_bytes`, before any
/// download.
pub fn check_declared(a: &crate::channel::Attachment, max_bytes: u64) -> Result<(), String> {
    match a.size {
        Some(n) if n > max_bytes => Err(too_large(max_bytes)),
        _ => Ok(()),
    }
}

/// How long one file download may take.
const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(120);

impl PlatformClient {
    /// GETs a file (`build` makes the request, with whatever authentication the platform
    /// wants), at most `max_bytes`: refused from its declared length or as soon as more
    /// arrives, never held whole. Connection errors and 5xx are retried like every call's,
    /// a 429 waited out by its `Retry-After` (up to the policy's cap); downloads take no
    /// turn in the outbox (the platforms publish no rate limit for them).
    /// The error is a reason a user may read, secrets redacted.
    pub async fn download(
        &self,
        label: &str,
        build: impl Fn(&reqwest::Client) -> RequestBuilder,
        max_bytes: u64,
    ) -> Result<Bytes, String> {
        use futures::StreamExt as _;
        let too_large = || too_large(max_bytes);
        let mut backoff = self.policy.backoff;
        let mut tries = 0;
        let mut limited = 0;
        loop {
            let failure = match build(&self.http).timeout(DOWNLOAD_TIMEOUT).send().await {
                Err(e) => self.redact(&format!("{label}: {}", describe(e))),
                Ok(resp) if resp.status() == StatusCode::TOO_MANY_REQUESTS => {
                    // Told to slow down: waited out like any call's 429, up to the cap.
                    let wait = Answer {
                        status: resp.status(),
                        headers: resp.headers().clone(),
                        body: Bytes::new(),
                    }
                    .retry_after()
                    .unwrap_or(self.policy.default_retry_after);
                    if limited >= self.policy.max_retries || wait > self.policy.max_retry_after {
                        return Err(format!(
                            "{label}: the platform is rate limiting; retry after {} s",
                            wait.as_secs_f64().ceil()
                        ));
                    }
                    limited += 1;
                    metrics::counter!("switchboard_gateway_rate_limited_total", "channel" => self.channel.clone())
                        .increment(1);
                    tracing::info!(channel = %self.channel, call = label, ?wait, retry = limited, "download rate limited; waiting");
                    tokio::time::sleep(wait).await;
                    continue;
                }
                Ok(resp) if resp.status().is_server_error() => {
                    format!(
                        "{label}: the platform answered HTTP {}",
                        resp.status().as_u16()
                    )
                }
                Ok(resp) if !resp.status().is_success() => {
                    return Err(format!(
                        "{label}: the platform answered HTTP {}",
                        resp.status().as_u16()
                    ));
                }
                Ok(resp) => {
                    if resp.content_length().is_some_and(|n| n > max_bytes) {
                        return Err(too_large());
                    }
                    let mut body = Vec::new();
                    let mut stream = resp.bytes_stream();
                    let mut broke = None;
                    while let Some(chunk) = stream.next().await {
                        match chunk {
                            Ok(c) => {
                                if (body.len() + c.len()) as u64 > max_bytes {
                                    return Err(too_large());
                                }
                                body.extend_from_slice(&c);
                            }
                            Err(e) => {
                                broke = Some(self.redact(&format!("{label}: {}", describe(e))));
                                break;
                            }
                        }
                    }
                    match broke {
                        None => return Ok(Bytes::from(body)),
                        Some(reason) => reason,
                    }
                }
            };
            if tries >= self.policy.transient_retries {
                return Err(failure);
            }
            tries += 1;
            tracing::info!(channel = %self.channel, call = label, error = %failure, retry = tries, "download failed; retrying");
            tokio::time::sleep(backoff).await;
            backoff = backoff.saturating_mul(2);
        }
    }
}

/// A request error's cause chain, without the URL (it may hold a token).
pub fn describe(err: reqwest::Error) -> String {
    let timeout = err.is_timeout();
    let err = err.without_url();
    let mut said = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(s) = source {
        let part = s.to_string();
        if !said.contains(&part) {
            said.push_str(": ");
            said.push_str(&part);
        }
        source = s.source();
    }
    if timeout && !said.contains("timed out") {
        said.push_str(" (timed out)");
    }
    said
}

/// Sleeps `d` unless `cancel` fires first; false when cancelled.
pub async fn pause(d: Duration, cancel: &tokio_util::sync::CancellationToken) -> bool {
    tokio::select! {
        biased;
        _ = cancel.cancelled() => false,
        _ = tokio::time::sleep(d) => true,
    }
}
