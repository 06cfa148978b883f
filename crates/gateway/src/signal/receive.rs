//! Receiving: the daemon's Server-Sent Events (`GET /api/v1/events`), resumed after the
//! last event taken (`Last-Event-ID`), reconnected with a back-off.

use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use switchboard_client::sse::SseParser;
use tokio_util::sync::CancellationToken;

use super::SignalChannel;
use crate::channel::{ChannelContext, ChannelError};
use crate::platform::{self, pause};
use crate::util::Backoff;

/// The id of the last event taken.
const EVENT_KEY: &str = "last_event_id";
/// signal-cli sends a keep-alive comment every 15 s: a stream silent for longer is dead.
const SILENT: Duration = Duration::from_secs(45);
/// A stream that lasted this long resets the back-off.
const STABLE: Duration = Duration::from_secs(60);
/// The largest event taken (an envelope with its attachment list).
const MAX_EVENT: usize = 1024 * 1024;

enum End {
    Cancelled,
    Reconnect(String),
}

impl SignalChannel {
    pub(super) async fn receive(
        &self,
        ctx: &ChannelContext,
        cancel: &CancellationToken,
    ) -> Result<(), ChannelError> {
        let mut backoff = Backoff::default();
        loop {
            if cancel.is_cancelled() {
                return Ok(());
            }
            if self.own_uuid.lock().is_none() {
                self.learn_uuid().await;
            }
            self.client.connecting("connecting");
            let started = std::time::Instant::now();
            match self.stream(ctx, cancel).await {
                End::Cancelled => return Ok(()),
                End::Reconnect(reason) => {
                    let wait = if started.elapsed() >= STABLE {
                        backoff.reset();
                        Duration::from_millis(100)
                    } else {
                        backoff.next_wait()
                    };
                    tracing::info!(channel = %self.cfg.name, %reason, ?wait, "signal-cli event stream ended; reconnecting");
                    self.client
                        .retrying(&format!("reconnecting: {reason}"), &reason);
                    if !pause(wait, cancel).await {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// The bot's ACI, for mentions (`getUserStatus` of its own number); best effort.
    async fn learn_uuid(&self) {
        let r = self
            .rpc(
                "getUserStatus",
                json!({"recipient": [self.cfg.account]}),
                &[platform::BOT.to_owned()],
            )
            .await;
        if let Ok(list) = r
            && let Some(uuid) = list[0]["uuid"].as_str()
        {
            *self.own_uuid.lock() = Some(uuid.to_string());
        }
    }

    async fn stream(&self, ctx: &ChannelContext, cancel: &CancellationToken) -> End {
        let mut url = format!("{}/api/v1/events", self.client.base());
        if let Some(a) = &self.cfg.account_param {
            url.push_str("?account=");
            url.push_str(&a.replace('+', "%2B"));
        }
        let last = ctx.state.get(EVENT_KEY).await.filter(|v| !v.is_empty());
        let mut req = self
            .client
            .http()
            .get(&url)
            .header("accept", "text/event-stream");
        if let Some(id) = &last {
            req = req.header("last-event-id", id.as_str());
        }
        let resp = tokio::select! {
            biased;
            _ = cancel.cancelled() => return End::Cancelled,
            r = tokio::time::timeout(platform::CONNECT_TIMEOUT, req.send()) => r,
        };
        let resp = match resp {
            Ok(Ok(r)) if r.status().is_success() => r,
            Ok(Ok(r)) => {
                return End::Reconnect(format!("GET /api/v1/events answered HTTP {}", r.status()));
            }
            Ok(Err(e)) => {
                return End::Reconnect(format!(
                    "cannot reach signal-cli: {}",
                    platform::client::describe(e)
                ));
            }
            Err(_) => return End::Reconnect("cannot reach signal-cli: timed out".into()),
        };
        self.client.connected("connected");
        let mut body = resp.bytes_stream();
        let mut parser = SseParser::new(MAX_EVENT);
        loop {
            let chunk = tokio::select! {
                biased;
                _ = cancel.cancelled() => return End::Cancelled,
                c = tokio::time::timeout(SILENT, body.next()) => c,
            };
            let bytes = match chunk {
                Err(_) => return End::Reconnect("the event stream went silent".into()),
                Ok(None) => return End::Reconnect("signal-cli closed the event stream".into()),
                Ok(Some(Err(e))) => {
                    return End::Reconnect(format!(
                        "event stream: {}",
                        platform::client::describe(e)
                    ));
                }
                Ok(Some(Ok(b))) => b,
            };
            if let Err(e) = parser.feed(&bytes) {
                return End::Reconnect(format!("event stream: {e}"));
            }
            while let Some(frame) = parser.next_frame() {
                if frame.event.as_deref().is_some_and(|e| e != "receive") {
                    continue;
                }
                let Ok(event) = serde_json::from_str::<Value>(&frame.data) else {
                    tracing::warn!(channel = %self.cfg.name, "an event that is not JSON; skipped");
                    continue;
                };
                if let Some(item) = self.map_envelope(&event)
                    && let Err(e) = ctx.sink.accept(item).await
                {
                    // Not taken: reconnect after the last event that was (the daemon
                    // sends this one again).
                    return End::Reconnect(format!("could not store a message: {e}"));
                }
                if let Some(id) = frame.id
                    && let Err(e) = ctx.state.set(EVENT_KEY, &id).await
                {
                    tracing::warn!(channel = %self.cfg.name, error = %e, "storing the last event id");
                }
            }
        }
    }
}
