//! Socket Mode: the websocket session, its envelopes and their acknowledgement, reconnecting.

use crate::platform::pause;
use crate::util::Backoff;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_util::sync::CancellationToken;

use crate::channel::{ChannelContext, ChannelError, ChannelState};

use super::*;

impl SlackChannel {
    pub(super) async fn run_socket(
        &self,
        ctx: &ChannelContext,
        cancel: &CancellationToken,
        app_token: &str,
    ) -> Result<(), ChannelError> {
        let Some(me) = self.identify(cancel).await? else {
            return Ok(());
        };
        tracing::info!(channel = %self.cfg.name, bot = %me.user, user_id = %me.user_id, team = %me.team, "slack bot identified; connecting over Socket Mode");
        let mut backoff = Backoff::default();
        let mut disconnects = Backoff::default();
        loop {
            if cancel.is_cancelled() {
                return Ok(());
            }
            let params = json!({});
            let r = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Ok(()),
                r = self.call_with("apps.connections.open", &params, app_token) => r,
            };
            let url = match r.and_then(|v| {
                v.get("url")
                    .and_then(Value::as_str)
                    .filter(|u| u.starts_with("wss://") || u.starts_with("ws://"))
                    .map(str::to_owned)
                    .ok_or_else(|| {
                        self.other("apps.connections.open: the answer has no websocket url")
                    })
            }) {
                Ok(url) => url,
                Err(e) if is_fatal(&e) => return Err(e),
                Err(e) => {
                    let wait = backoff.next_wait();
                    tracing::warn!(channel = %self.cfg.name, error = %e, ?wait, "cannot open a Socket Mode connection; retrying");
                    self.client
                        .retrying(&format!("socket: reconnecting ({e})"), &e.to_string());
                    if !pause(wait, cancel).await {
                        return Ok(());
                    }
                    continue;
                }
            };
            let session_started = std::time::Instant::now();
            let end = self
                .socket_session(&url, &me, ctx, cancel, &mut backoff)
                .await;
            // A connection that lasted is a normal refresh: the next disconnect is answered
            // at once again.
            if session_started.elapsed() > std::time::Duration::from_secs(300) {
                disconnects.reset();
            }
            match end {
                SessionEnd::Cancelled => return Ok(()),
                SessionEnd::Disconnect => {
                    // Reconnecting at once is what Slack asks for, but a socket that is
                    // disconnected again and again (Socket Mode turned off for the app:
                    // `link_disabled`) must not spin: the waits grow.
                    let wait = disconnects.next_wait();
                    tracing::info!(channel = %self.cfg.name, ?wait, "Slack asked to reconnect");
                    self.client.reconnecting(
                        "socket: reconnecting",
                        Some("Slack asked for a new connection"),
                    );
                    if !pause(
                        wait.saturating_sub(std::time::Duration::from_secs(1)),
                        cancel,
                    )
                    .await
                    {
                        return Ok(());
                    }
                }
                SessionEnd::Lost(reason) => {
                    let wait = backoff.next_wait();
                    tracing::warn!(channel = %self.cfg.name, %reason, ?wait, "Socket Mode connection lost; reconnecting");
                    self.client
                        .retrying(&format!("socket: reconnecting ({reason})"), &reason);
                    if !pause(wait, cancel).await {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// One websocket connection, until it ends.
    pub(super) async fn socket_session(
        &self,
        url: &str,
        me: &BotIdentity,
        ctx: &ChannelContext,
        cancel: &CancellationToken,
        backoff: &mut Backoff,
    ) -> SessionEnd {
        let connect = tokio::time::timeout(platform::CONNECT_TIMEOUT, platform::connect_ws(url));
        let ws = tokio::select! {
            biased;
            _ = cancel.cancelled() => return SessionEnd::Cancelled,
            r = connect => r,
        };
        let mut ws = match ws {
            Ok(Ok((ws, _))) => ws,
            Ok(Err(e)) => {
                return SessionEnd::Lost(format!(
                    "websocket: {}",
                    self.redact(&e.to_string()).replace(url, "<socket url>")
                ));
            }
            Err(_) => return SessionEnd::Lost("websocket: connect timed out".into()),
        };
        self.client.connecting("socket: connecting");
        let mut last_frame = Instant::now();
        let mut pinged = false;
        loop {
            let idle = self.cfg.socket_idle;
            let idle_at = last_frame + if pinged { idle * 2 } else { idle };
            let frame = tokio::select! {
                biased;
                _ = cancel.cancelled() => {
                    let _ = ws.close(None).await;
                    return SessionEnd::Cancelled;
                }
                _ = tokio::time::sleep_until(idle_at) => {
                    if pinged {
                        return SessionEnd::Lost(format!(
                            "no answer from Slack for {:?}, not even to a ping",
                            idle * 2
                        ));
                    }
                    pinged = true;
                    if ws.send(WsMessage::Ping(Vec::new().into())).await.is_err() {
                        return SessionEnd::Lost("websocket: cannot send a ping".into());
                    }
                    continue;
                }
                f = ws.next() => f,
            };
            last_frame = Instant::now();
            pinged = false;
            let text = match frame {
                None => return SessionEnd::Lost("websocket closed".into()),
                Some(Err(e)) => {
                    return SessionEnd::Lost(format!(
                        "websocket: {}",
                        self.redact(&e.to_string()).replace(url, "<socket url>")
                    ));
                }
                Some(Ok(WsMessage::Close(_))) => {
                    return SessionEnd::Lost("websocket closed by Slack".into());
                }
                Some(Ok(WsMessage::Text(t))) => t,
                Some(Ok(_)) => continue,
            };
            let (kind, envelope_id, payload) = match socket_frame(text.as_str()) {
                SocketFrame::NotJson(e) => {
                    tracing::warn!(channel = %self.cfg.name, error = %e, "a Socket Mode frame that is not JSON; ignoring it");
                    continue;
                }
                SocketFrame::Hello => {
                    backoff.reset();
                    self.client.connected("socket: connected");
                    tracing::info!(channel = %self.cfg.name, "Socket Mode connected");
                    continue;
                }
                SocketFrame::Disconnect => {
                    let _ = ws.close(None).await;
                    return SessionEnd::Disconnect;
                }
                SocketFrame::Other(kind) => {
                    tracing::debug!(channel = %self.cfg.name, kind, "Socket Mode frame ignored");
                    continue;
                }
                SocketFrame::NoEnvelopeId(kind) => {
                    tracing::warn!(channel = %self.cfg.name, kind, "an envelope without envelope_id; ignoring it");
                    continue;
                }
                SocketFrame::Envelope {
                    kind,
                    envelope_id,
                    payload,
                } => (kind, envelope_id, payload),
            };
            let envelope_id = envelope_id.as_str();
            let mapped = self
                .map_socket_payload(kind, &payload, me, Some(ctx.state.as_ref()))
                .await;
            if let Some(mapped) = mapped {
                if let Err(reason) = self.deliver(ctx, mapped).await {
                    tracing::warn!(channel = %self.cfg.name, envelope_id, %reason, "the gateway did not take an event; not acknowledging it (Slack delivers it again)");
                    self.client
                        .retrying("error: inbound not stored", crate::health::NOT_STORED);
                    continue;
                }
                self.client.connected("socket: connected");
            }
            let ack = json!({ "envelope_id": envelope_id }).to_string();
            if let Err(e) = ws.send(WsMessage::Text(ack.into())).await {
                return SessionEnd::Lost(format!("websocket: cannot acknowledge: {e}"));
            }
        }
    }
}

impl SlackChannel {
    /// What the payload of a Socket Mode envelope of `kind` means to the gateway.
    pub(super) async fn map_socket_payload(
        &self,
        kind: SocketKind,
        payload: &Value,
        me: &BotIdentity,
        state: Option<&dyn ChannelState>,
    ) -> Option<Mapped> {
        match kind {
            SocketKind::EventsApi => self.map_event_callback(payload, me, state).await,
            SocketKind::Interactive => self.map_interactive(payload),
            SocketKind::SlashCommands => self.map_slash_command(payload).await,
        }
    }
}

/// The Socket Mode envelopes that carry a payload to map (and acknowledge).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SocketKind {
    EventsApi,
    Interactive,
    SlashCommands,
}

/// What one Socket Mode text frame is.
#[derive(Debug, PartialEq)]
pub(super) enum SocketFrame {
    /// Not JSON (the parser's error): ignored.
    NotJson(String),
    /// The connection is ready.
    Hello,
    /// Slack asks to reconnect.
    Disconnect,
    /// A `type` without meaning here (or none): ignored.
    Other(String),
    /// A payload envelope without `envelope_id`: ignored, it cannot be acknowledged.
    NoEnvelopeId(&'static str),
    /// A payload to map, then acknowledge by `envelope_id`; a missing payload is null.
    Envelope {
        kind: SocketKind,
        envelope_id: String,
        payload: Value,
    },
}

/// Reads one Socket Mode text frame.
pub(super) fn socket_frame(text: &str) -> SocketFrame {
    let envelope: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return SocketFrame::NotJson(e.to_string()),
    };
    let (kind, name) = match envelope
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default()
    {
        "hello" => return SocketFrame::Hello,
        "disconnect" => return SocketFrame::Disconnect,
        "events_api" => (SocketKind::EventsApi, "events_api"),
        "interactive" => (SocketKind::Interactive, "interactive"),
        "slash_commands" => (SocketKind::SlashCommands, "slash_commands"),
        other => return SocketFrame::Other(other.to_owned()),
    };
    let Some(envelope_id) = envelope.get("envelope_id").and_then(Value::as_str) else {
        return SocketFrame::NoEnvelopeId(name);
    };
    SocketFrame::Envelope {
        kind,
        envelope_id: envelope_id.to_owned(),
        payload: envelope.get("payload").cloned().unwrap_or(Value::Null),
    }
}

/// Errors that retrying will not fix: bad or revoked tokens, missing scopes.
pub(super) fn is_fatal(e: &ChannelError) -> bool {
    match e {
        ChannelError::Api { description, .. } => {
            let code = description.split(' ').next().unwrap_or_default();
            matches!(
                code,
                "invalid_auth"
                    | "not_authed"
                    | "account_inactive"
                    | "token_revoked"
                    | "token_expired"
                    | "not_allowed_token_type"
                    | "missing_scope"
                    | "no_permission"
                    | "invalid_token"
            )
        }
        _ => false,
    }
}
