//! Receiving: signal-cli's JSON-RPC `receive` (the daemon started with `--receive-mode
//! manual`), called again and again. Messages wait on Signal's servers until a call takes
//! them, so none arrive while Switchboard is away; each one a call returns is stored before
//! the next call (a failed store is retried in place, never dropped).
//!
//! (signal-cli's event stream, `GET /api/v1/events`, hands each message to whichever
//! streams are open and forgets it: one written to a stream whose reader died is lost, and a
//! dead stream shows only when a keep-alive fails, up to half a minute later. A call that
//! waits at most [`POLL`] narrows that to the messages of one unread answer.)

use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::SignalChannel;
use crate::channel::{ChannelContext, ChannelError, Inbound};
use crate::platform::{self, pause};
use crate::util::Backoff;

/// How long one `receive` waits for a message (seconds), and how many it takes at most.
const POLL: f64 = 2.0;
const MAX_MESSAGES: u32 = 20;

impl SignalChannel {
    pub(super) async fn receive(
        &self,
        ctx: &ChannelContext,
        cancel: &CancellationToken,
    ) -> Result<(), ChannelError> {
        self.learn_uuid().await;
        let mut backoff = Backoff::default();
        let mut connected = false;
        let keys = [platform::BOT.to_owned()];
        loop {
            let r = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Ok(()),
                r = self.rpc("receive", json!({"timeout": POLL, "maxMessages": MAX_MESSAGES}), &keys) => r,
            };
            let events = match r {
                Ok(v) => v,
                Err(e) => {
                    connected = false;
                    let wait = backoff.next_wait();
                    tracing::warn!(channel = %self.cfg.name, error = %e, ?wait, "receiving from signal-cli failed; retrying");
                    self.client.retrying(&format!("error: {e}"), &e.to_string());
                    if !pause(wait, cancel).await {
                        return Ok(());
                    }
                    continue;
                }
            };
            if !connected {
                connected = true;
                backoff.reset();
                self.client.connected("receiving");
            }
            for event in events.as_array().into_iter().flatten() {
                if let Some(item) = self.map_envelope(event)
                    && !self.store(ctx, item, cancel).await
                {
                    return Ok(());
                }
            }
        }
    }

    /// Hands `item` in, retrying until it is stored; `false` when cancelled first.
    async fn store(&self, ctx: &ChannelContext, item: Inbound, cancel: &CancellationToken) -> bool {
        let mut backoff = Backoff::default();
        loop {
            match ctx.sink.accept(item.clone()).await {
                Ok(()) => return true,
                Err(e) => {
                    let wait = backoff.next_wait();
                    tracing::warn!(channel = %self.cfg.name, error = %e, ?wait, "could not store a Signal message; retrying");
                    if !pause(wait, cancel).await {
                        tracing::error!(channel = %self.cfg.name, "shutting down with a Signal message not stored");
                        return false;
                    }
                }
            }
        }
    }

    /// The bot's ACI, for mentions (`getUserStatus` of its own number, once); best effort:
    /// mentions by number work without it.
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
}
