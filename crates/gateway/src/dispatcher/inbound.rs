//! Inbound messages: the allow list and pairing, then the durable queue of a route.

use std::sync::Arc;

use crate::channel::{Channel, ChatKind, InboundMessage};
use crate::routing::routing_key;
use crate::store::{Pairing, Queued};

use super::*;
use switchboard_protocol::RejectionCause;
use switchboard_protocol::gateway::{DeliveryStatus, IgnoredWhy, InboundKind};

impl Gateway {
    pub(super) async fn on_message(&self, m: InboundMessage) -> Result<(), GatewayError> {
        let Some(channel) = self.channel(&m.channel) else {
            tracing::warn!(channel = %m.channel, "message from an unknown channel ignored");
            return Ok(());
        };
        let allowed = self.allowed(&m).await?;
        // An edit of a message already taken is noted, not acted on (nor marked seen: it
        // carries the edited message's id).
        if m.edited {
            if allowed {
                self.ignore(&m, InboundKind::Message, IgnoredWhy::Edited)
                    .await;
            }
            return Ok(());
        }
        // (Whether a group message is addressed to the bot is the channel's call: Telegram
        // filters unless `require_mention` is off.)
        let text = m.text.trim();
        let cmd = if allowed { command(text) } else { None };
        // A reply to a waiting prompt that reads as an answer decides it (as a message for
        // the agent, it would make the prompt yield).
        let answer = if allowed && cmd.is_none() {
            self.reply_answer(&m).await?
        } else {
            None
        };
        // Files are fetched when the batch goes to the agent (the worker), so that
        // acknowledging the message to the platform waits for no download.
        let for_agent = allowed
            && cmd.is_none()
            && answer.is_none()
            && !(text.is_empty() && m.attachments.is_empty());
        // A platform's redelivery (a crash before its offset was stored) or a replayed
        // webhook is taken once. A message for the agent is marked taken in the transaction
        // that queues it (`store_message`): a mark stored on its own, then a crash before the
        // message was queued, would make the redelivery look like a repeat and lose it.
        // Anything else is marked here, before it is acted on (a command acts at most once).
        let kind = match (&cmd, &answer) {
            (Some(_), _) => InboundKind::Command,
            (None, Some(_)) => InboundKind::Answer,
            (None, None) => InboundKind::Message,
        };
        if !for_agent && self.seen_before(&m).await? {
            self.ignore(&m, kind, IgnoredWhy::Duplicate).await;
            return Ok(());
        }
        if !allowed {
            self.ignore(&m, kind, IgnoredWhy::NotAllowed).await;
            return self.pairing(&channel, &m).await;
        }
        log_err(
            "noting a chat's last activity",
            self.inner.store.touch_chat(&m.channel, &m.chat).await,
        );
        let cfg = &self.inner.config;
        let threads = !cfg.chat_sessions.contains(&m.channel);
        let key = routing_key(cfg.dm_scope, threads, &m.channel, &m.peer, &m.chat);
        if for_agent {
            if !self.store_message(&m, &key, text).await? {
                tracing::info!(channel = %m.channel, message_id = %m.message_id, "message seen before; dropped");
                self.ignore(&m, kind, IgnoredWhy::Duplicate).await;
                return Ok(());
            }
            // Its ledger entry was written with it, `queued`.
            super::ledger::received(&m.channel);
            metrics::counter!("switchboard_gateway_messages_in_total", "channel" => m.channel.clone())
                .increment(1);
            // A pending approval yields to the new message: rejected, the run goes on, and
            // the message is taken when the run ends. Done in the background: the channel
            // waits for this call before it acknowledges the message to its platform.
            let gw = self.clone();
            let key2 = key.clone();
            self.spawn(async move {
                if let Ok(Some(route)) = gw.inner.store.route(&key2).await
                    && let Ok(Some(p)) = gw.inner.store.prompt_of_session(route.session_id).await
                {
                    gw.settle_prompt(
                        &p,
                        false,
                        RejectionCause::NewMessage,
                        NEW_MESSAGE_REASON,
                        None,
                    )
                    .await;
                }
            });
            self.kick(&key);
            return Ok(());
        }
        metrics::counter!("switchboard_gateway_messages_in_total", "channel" => m.channel.clone())
            .increment(1);
        if let Some((prompt, accept, reason)) = answer {
            let noted = self.note(&m, kind, DeliveryStatus::Received, None).await;
            let r = self
                .queue_answer(
                    &prompt,
                    &m,
                    crate::channel::AnswerVia::Words,
                    accept,
                    reason,
                )
                .await;
            let (status, why) = match &r {
                Ok(()) => (DeliveryStatus::Answered, None),
                Err(e) => (DeliveryStatus::Failed, Some(e.to_string())),
            };
            self.settle_note(&m.channel, noted, status, why.as_deref())
                .await;
            return r;
        }
        let Some(cmd) = cmd else {
            // Nothing to act on (no text, no file).
            self.ignore(&m, kind, IgnoredWhy::Empty).await;
            return Ok(());
        };
        let noted = self.note(&m, kind, DeliveryStatus::Received, None).await;
        {
            // A command that fails says so in the chat; it never blocks the channel.
            let done = self.on_command(&channel, &key, &m, cmd).await;
            let why = done
                .as_ref()
                .err()
                .map(|e| format!("the command failed: {e}"));
            let status = match why {
                None => DeliveryStatus::Answered,
                Some(_) => DeliveryStatus::Failed,
            };
            self.settle_note(&m.channel, noted, status, why.as_deref())
                .await;
            if let Err(e) = done {
                tracing::warn!(error = %e, "chat command failed");
                log_err(
                    "answering a failed command",
                    channel
                        .send(&m.chat, "That did not work; see the server log.", &[])
                        .await,
                );
            }
        }
        Ok(())
    }

    /// Marks a message taken; true (and logged) when it was taken before. A message without
    /// an id is always new.
    async fn seen_before(&self, m: &InboundMessage) -> Result<bool, GatewayError> {
        if m.message_id.is_empty()
            || self
                .inner
                .store
                .first_seen(&m.channel, &m.chat.id, &m.message_id)
                .await?
        {
            return Ok(false);
        }
        tracing::info!(channel = %m.channel, message_id = %m.message_id, "message seen before; dropped");
        Ok(true)
    }

    /// Queues a message for the agent with its chat's pending caller context, marking it
    /// taken in the same transaction (see [`GatewayStore::take_inbound`]); false when it was
    /// taken before. A message that cannot be stored is not marked either: the platform's
    /// redelivery is taken.
    pub(super) async fn store_message(
        &self,
        m: &InboundMessage,
        key: &str,
        text: &str,
    ) -> Result<bool, GatewayError> {
        let taken = self
            .inner
            .store
            .take_inbound(
                &Queued {
                    id: 0,
                    routing_key: key.to_string(),
                    channel: m.channel.clone(),
                    peer: m.peer.clone(),
                    chat: m.chat.clone(),
                    text: text.to_string(),
                    context: None,
                    attachments: m.attachments.clone(),
                },
                &m.message_id,
            )
            .await?;
        Ok(taken.is_some())
    }

    /// Allowed: an open channel, a configured chat, or a chat paired before.
    pub(super) async fn allowed(&self, m: &InboundMessage) -> Result<bool, GatewayError> {
        self.allowed_in(&m.channel, &m.chat.id, &m.peer.id).await
    }

    /// Whether `peer` may talk to the agent in `chat` of `channel` (see [`Self::allowed`]).
    pub(super) async fn allowed_in(
        &self,
        channel: &str,
        chat: &str,
        peer: &str,
    ) -> Result<bool, GatewayError> {
        let cfg = &self.inner.config;
        if cfg.open_channels.iter().any(|c| c == channel) {
            return Ok(true);
        }
        if cfg
            .allowed_chats
            .get(channel)
            .is_some_and(|l| l.iter().any(|c| c == chat))
        {
            return Ok(true);
        }
        if cfg
            .allowed_peers
            .get(channel)
            .is_some_and(|l| l.iter().any(|p| p == peer))
        {
            return Ok(true);
        }
        Ok(self.inner.store.is_allowed(channel, chat).await?)
    }

    /// An unknown direct message gets a pairing code (once per code); anything else from
    /// an unknown chat is ignored and logged.
    pub(super) async fn pairing(
        &self,
        channel: &Arc<dyn Channel>,
        m: &InboundMessage,
    ) -> Result<(), GatewayError> {
        if m.chat.kind != ChatKind::Direct {
            tracing::info!(channel = %m.channel, chat = %m.chat.id, "message from a chat that is not allowed; ignored");
            return Ok(());
        }
        if self
            .inner
            .store
            .pairing_of(&m.channel, &m.peer.id)
            .await?
            .is_some()
        {
            tracing::info!(channel = %m.channel, peer = %m.peer.id, "unpaired peer wrote again; ignored");
            return Ok(());
        }
        let code = pairing_code();
        let expires = chrono::Utc::now()
            + chrono::Duration::from_std(self.inner.config.pairing_ttl).unwrap_or_default();
        self.inner
            .store
            .put_pairing(&Pairing {
                code: code.clone(),
                channel: m.channel.clone(),
                peer: m.peer.clone(),
                chat: m.chat.clone(),
                expires_at: expires.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            })
            .await?;
        tracing::warn!(channel = %m.channel, peer = %m.peer.id, name = %m.peer.name, %code, "pairing requested; approve in the web console or with `switchboard pairing approve {} {code}`", m.channel);
        let text = format!(
            "This bot does not know you yet. Ask its owner to approve the code {code} in the web console, or to run:\n\nswitchboard pairing approve {} {code}\n\n(the code is valid for {} minutes)",
            m.channel,
            self.inner.config.pairing_ttl.as_secs() / 60
        );
        log_err(
            "sending a pairing code",
            channel.send(&m.chat, &text, &[]).await,
        );
        Ok(())
    }
}

pub(super) fn pairing_code() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZ23456789";
    let mut rng = rand::rng();
    (0..8)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}
