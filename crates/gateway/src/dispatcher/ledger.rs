//! The delivery ledger as the dispatcher keeps it: what it notes of each inbound message,
//! what it records of each post, the counters on `/metrics`, and the pruning.
//!
//! The ledger only reports: an entry that cannot be written is logged and the message goes
//! on as it would without it (a queued message's entry is written in the transaction that
//! queues it, so those are never missing).

use std::future::Future;

use switchboard_protocol::gateway::{DeliveryStatus, IgnoredWhy, InboundKind, Outbound};

use crate::channel::{ChannelError, InboundMessage};
use crate::store::{FollowedRun, Noted, Retried};

use super::*;

/// How often old entries are pruned.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// A command still `received` this long after its last change was interrupted (commands
/// answer within seconds; `/search` and `/diff` within a minute).
const INTERRUPTED_AFTER: Duration = Duration::from_secs(600);

impl Gateway {
    /// Notes `m` in the ledger as ignored, and why; counts it.
    pub(super) async fn ignore(&self, m: &InboundMessage, kind: InboundKind, why: IgnoredWhy) {
        ignored(&m.channel, why, 1);
        self.note(m, kind, DeliveryStatus::Ignored, Some(why.as_str()))
            .await;
    }

    /// Notes `m` in the ledger as `status` (with why) and counts it; the entry's id.
    pub(super) async fn note(
        &self,
        m: &InboundMessage,
        kind: InboundKind,
        status: DeliveryStatus,
        reason: Option<&str>,
    ) -> Option<i64> {
        received(&m.channel);
        counted(&m.channel, status, 1);
        log_err(
            "noting a message in the delivery ledger",
            self.inner
                .store
                .note_delivery(&Noted {
                    channel: &m.channel,
                    chat: &m.chat,
                    peer: &m.peer,
                    message_id: &m.message_id,
                    kind,
                    text: m.text.trim(),
                    status,
                    reason,
                })
                .await,
        )
    }

    /// Sets a noted entry's status (a command or an answer handled).
    pub(super) async fn settle_note(
        &self,
        channel: &str,
        id: Option<i64>,
        status: DeliveryStatus,
        reason: Option<&str>,
    ) {
        let Some(id) = id else { return };
        counted(channel, status, 1);
        log_err(
            "settling a message in the delivery ledger",
            self.inner.store.set_delivery(id, status, reason, &[]).await,
        );
    }

    /// Queues a failed message for the agent again (`POST /v1/gateway/messages/{id}/retry`)
    /// and wakes its chat's worker.
    pub async fn retry_delivery(&self, id: i64) -> Result<Retried, GatewayError> {
        // The chat as it is now: one no longer let in is not talked to again.
        let Some(e) = self.inner.store.delivery(id).await? else {
            return Ok(Retried::Unknown);
        };
        if !self.allowed_in(&e.channel, &e.chat.id, &e.peer.id).await? {
            return Ok(Retried::NotAllowed);
        }
        let retried = self.inner.store.retry_delivery(id).await?;
        if let Retried::Queued(key) = &retried {
            tracing::info!(entry = id, routing_key = %key, "a failed chat message queued again");
            self.kick(key);
        }
        Ok(retried)
    }

    /// The configured channel a routing key (`<channel>:…`) belongs to, for the counters
    /// (a channel's name may hold a colon: `webhook:ops`).
    pub(super) fn channel_of_key(&self, key: &str) -> String {
        self.inner
            .channels
            .keys()
            .filter(|c| {
                key.strip_prefix(c.as_str())
                    .is_some_and(|r| r.starts_with(':'))
            })
            .max_by_key(|c| c.len())
            .cloned()
            .unwrap_or_else(|| "unknown".into())
    }

    /// A followed run ended: its messages are `status`, with what it posted.
    pub(super) async fn settle_run(
        &self,
        channel: &str,
        run: &FollowedRun,
        status: DeliveryStatus,
        reason: Option<&str>,
    ) -> Result<(), GatewayError> {
        let n = self
            .inner
            .store
            .settle_run(run.run_id, status, reason, &run.outbound)
            .await?;
        counted(channel, status, n);
        Ok(())
    }
}

/// An inbound message taken (whatever becomes of it).
pub(super) fn received(channel: &str) {
    metrics::counter!("switchboard_gateway_messages_received_total", "channel" => channel.to_owned())
        .increment(1);
}

/// `n` messages were ignored, for `why`.
pub(super) fn ignored(channel: &str, why: IgnoredWhy, n: u64) {
    if n == 0 {
        return;
    }
    if why == IgnoredWhy::Duplicate {
        metrics::counter!("switchboard_gateway_duplicates_suppressed_total", "channel" => channel.to_owned())
            .increment(n);
    }
    metrics::counter!("switchboard_gateway_messages_ignored_total", "channel" => channel.to_owned(), "reason" => why.as_str())
        .increment(n);
}

/// `n` messages reached `status` (answered or failed; ignored ones are counted by
/// [`ignored`], with why).
pub(super) fn counted(channel: &str, status: DeliveryStatus, n: u64) {
    if n == 0 {
        return;
    }
    let channel = channel.to_owned();
    match status {
        DeliveryStatus::Answered => {
            metrics::counter!("switchboard_gateway_messages_answered_total", "channel" => channel)
                .increment(n)
        }
        DeliveryStatus::Failed => {
            metrics::counter!("switchboard_gateway_messages_failed_total", "channel" => channel)
                .increment(n)
        }
        _ => {}
    }
}

/// Posts with `post` (a send that answers the platform's message id), counting its platform
/// calls: the result, and what the ledger records of it — `None` for a failure that is
/// tried again (only a post's last try is recorded).
pub(super) async fn posted(
    kind: &str,
    post: impl Future<Output = Result<String, ChannelError>>,
) -> (Result<String, ChannelError>, Option<Outbound>) {
    let (result, attempts) = crate::platform::counting_attempts(post).await;
    let record = |id: Option<String>, error: Option<String>| Outbound {
        kind: kind.to_owned(),
        id,
        attempts: attempts.max(1),
        error,
        at: chrono::Utc::now(),
    };
    let outbound = match &result {
        Ok(id) => Some(record(Some(id.clone()), None)),
        Err(e) if permanent(e) => Some(record(None, Some(e.to_string()))),
        Err(_) => None,
    };
    (result, outbound)
}

/// Forgets entries older than the retention, every hour from start; and fails commands
/// and answers left `received` by a process that stopped while handling them.
pub(super) async fn prune_loop(gw: Gateway) {
    loop {
        let stale =
            chrono::Utc::now() - chrono::Duration::from_std(INTERRUPTED_AFTER).unwrap_or_default();
        match gw.inner.store.fail_interrupted(stale).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                entries = n,
                "commands left unfinished by a stop marked failed in the delivery ledger"
            ),
            Err(e) => {
                tracing::warn!(error = %e, "marking interrupted commands in the delivery ledger")
            }
        }
        let before = chrono::Utc::now()
            - chrono::Duration::from_std(gw.inner.config.ledger_retention).unwrap_or_default();
        match gw.inner.store.prune_ledger(before).await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(entries = n, "delivery ledger pruned"),
            Err(e) => tracing::warn!(error = %e, "pruning the delivery ledger"),
        }
        tokio::select! {
            _ = gw.inner.cancel.cancelled() => return,
            _ = tokio::time::sleep(PRUNE_EVERY) => {}
        }
    }
}
