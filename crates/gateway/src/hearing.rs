//! Channels that say when they are deaf. A channel can be connected — its poll answers, its
//! socket is open, its webhook registered — and still receive nothing: a webhook URL that
//! no longer reaches this server, a proxy that drops the POSTs, a poller stuck in a loop.
//! The platform knows (Telegram's `getWebhookInfo` counts the updates it holds and says why
//! it could not deliver them); the connection's own health does not.
//!
//! [`Hearing`] notes when each channel last received anything (every inbound item passes
//! the gateway's sink), and its watch asks a connected channel that has been quiet for
//! longer than `[gateway] deaf_after_secs` what its platform holds ([`Channel::backlog`]):
//! updates waiting there make it `degraded`, with the platform's count and last error as
//! the reason, in `/v1/gateway/status`, the console and the
//! `switchboard_gateway_channel_degraded` gauge — until something arrives or the platform's
//! backlog is empty.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::channel::Channel;
use crate::health::ChannelHealth;
use switchboard_protocol::gateway::ConnectionState;

/// What the gateway knows of each channel's hearing.
#[derive(Debug, Default)]
pub struct Hearing {
    inner: Mutex<HashMap<String, Heard>>,
}

#[derive(Debug, Default, Clone)]
struct Heard {
    last: Option<DateTime<Utc>>,
    /// Why the channel is deaf, while it is.
    deaf: Option<String>,
}

impl Hearing {
    /// `channel` received something: it hears (a `degraded` state ends here).
    pub fn heard(&self, channel: &str) {
        let mut all = self.inner.lock();
        let h = all.entry(channel.to_string()).or_default();
        h.last = Some(Utc::now());
        if h.deaf.take().is_some() {
            tracing::info!(channel, "the channel receives again");
            degraded_gauge(channel, false);
        }
    }

    /// When `channel` last received anything.
    pub fn last(&self, channel: &str) -> Option<DateTime<Utc>> {
        self.inner.lock().get(channel).and_then(|h| h.last)
    }

    /// `health` as the status shows it: a connected channel that is deaf is `degraded`,
    /// with the reason.
    pub fn apply(&self, channel: &str, mut health: ChannelHealth) -> ChannelHealth {
        if health.state == ConnectionState::Connected
            && let Some(why) = self.inner.lock().get(channel).and_then(|h| h.deaf.clone())
        {
            health.state = ConnectionState::Degraded;
            health.reason = Some(why);
        }
        health
    }

    fn set_deaf(&self, channel: &str, why: Option<String>) {
        let mut all = self.inner.lock();
        let h = all.entry(channel.to_string()).or_default();
        match (&h.deaf, &why) {
            (None, Some(w)) => {
                tracing::warn!(channel, reason = %w, "the channel is connected but receives nothing")
            }
            (Some(_), None) => tracing::info!(
                channel,
                "the platform holds nothing for the channel any more"
            ),
            _ => {}
        }
        degraded_gauge(channel, why.is_some());
        h.deaf = why;
    }

    /// Checks `channels` every `deaf_after / 4` (at least a second, at most a minute) until
    /// `cancel`: see the module docs. `since_start` is when the gateway started (a channel
    /// that has received nothing yet has been quiet since then).
    pub async fn watch(
        self: Arc<Self>,
        channels: Vec<Arc<dyn Channel>>,
        deaf_after: Duration,
        cancel: CancellationToken,
    ) {
        let started = Utc::now();
        let every = (deaf_after / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
        for ch in &channels {
            degraded_gauge(ch.name(), false);
        }
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(every) => {}
            }
            for ch in &channels {
                let name = ch.name();
                let health = ch.health();
                let deaf = self
                    .inner
                    .lock()
                    .get(name)
                    .is_some_and(|h| h.deaf.is_some());
                if health.state != ConnectionState::Connected {
                    // Failing, reconnecting, stopped: the status says that instead.
                    if deaf {
                        self.set_deaf(name, None);
                    }
                    continue;
                }
                // Quiet since the last thing received, or since it connected.
                let quiet_since = [self.last(name), health.since, Some(started)]
                    .into_iter()
                    .flatten()
                    .max()
                    .unwrap_or(started);
                let quiet = (Utc::now() - quiet_since).to_std().unwrap_or_default();
                // A deaf channel is asked again every time: it may have been emptied (a
                // reconnect that dropped the pending updates) without anything arriving.
                if quiet < deaf_after && !deaf {
                    continue;
                }
                match ch.backlog().await {
                    None => {}
                    Some(Ok(b)) if b.pending > 0 => {
                        let mut why = format!(
                            "the platform holds {} update(s) for the bot, but nothing has arrived for {} s",
                            b.pending,
                            quiet.as_secs()
                        );
                        if let Some(e) = b.last_error {
                            why.push_str(&format!(" (its last delivery error: {e})"));
                        }
                        self.set_deaf(name, Some(why));
                    }
                    Some(Ok(_)) => self.set_deaf(name, None),
                    Some(Err(e)) => {
                        tracing::debug!(channel = name, error = %e, "could not ask the platform what it holds");
                    }
                }
            }
        }
    }
}

fn degraded_gauge(channel: &str, deaf: bool) {
    metrics::gauge!("switchboard_gateway_channel_degraded", "channel" => channel.to_owned())
        .set(if deaf { 1.0 } else { 0.0 });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connected() -> ChannelHealth {
        ChannelHealth {
            state: ConnectionState::Connected,
            status: "webhook".into(),
            since: Some(Utc::now()),
            reason: None,
            last_error: None,
        }
    }

    #[test]
    fn a_deaf_channel_is_degraded_until_it_hears() {
        let h = Hearing::default();
        assert_eq!(h.apply("tg", connected()).state, ConnectionState::Connected);
        h.set_deaf("tg", Some("3 pending".into()));
        let shown = h.apply("tg", connected());
        assert_eq!(shown.state, ConnectionState::Degraded);
        assert_eq!(shown.reason.as_deref(), Some("3 pending"));
        // Only a connected channel: one that is failing says so itself.
        let failing = ChannelHealth {
            state: ConnectionState::Failing,
            ..connected()
        };
        assert_eq!(h.apply("tg", failing).state, ConnectionState::Failing);
        assert_eq!(h.last("tg"), None);
        h.heard("tg");
        assert!(h.last("tg").is_some());
        assert_eq!(h.apply("tg", connected()).state, ConnectionState::Connected);
    }
}
