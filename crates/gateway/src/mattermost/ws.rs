//! The WebSocket (`/api/v4/websocket`): connecting with the token, `hello`, `posted` and
//! `reaction_added` events, pings; after each (re)connect the posts missed meanwhile.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_util::sync::CancellationToken;

use super::{MattermostChannel, Me};
use crate::channel::{ChannelContext, ChannelError, Inbound};
use crate::platform::{self, pause};
use crate::util::Backoff;

/// How often the bot pings; a connection silent for [`SILENT`] is dead.
const PING_EVERY: Duration = Duration::from_secs(30);
const SILENT: Duration = Duration::from_secs(75);
const HELLO_TIMEOUT: Duration = Duration::from_secs(30);
/// A connection that lasted this long resets the back-off.
const STABLE: Duration = Duration::from_secs(60);

/// How a connection ended.
enum End {
    Cancelled,
    Reconnect(String),
    /// The token was refused.
    Fatal(ChannelError),
}

impl MattermostChannel {
    /// Receives until cancelled (see the module docs); `Err` only when the token is refused.
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
            let me = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Ok(()),
                r = self.me() => r,
            };
            let me = match me {
                Ok(me) => me,
                Err(e @ ChannelError::Api { code: 401, .. }) => return Err(e),
                Err(e) => {
                    let wait = backoff.next_wait();
                    tracing::warn!(channel = %self.cfg.name, error = %e, ?wait, "cannot reach Mattermost; retrying");
                    self.client.retrying(&format!("error: {e}"), &e.to_string());
                    if !pause(wait, cancel).await {
                        return Ok(());
                    }
                    continue;
                }
            };
            self.client.connecting("connecting");
            let started = Instant::now();
            let end = self.connection(&me, ctx, cancel).await;
            match end {
                End::Cancelled => return Ok(()),
                End::Fatal(e) => return Err(e),
                End::Reconnect(reason) => {
                    let wait = if started.elapsed() >= STABLE {
                        backoff.reset();
                        Duration::from_millis(100)
                    } else {
                        backoff.next_wait()
                    };
                    tracing::info!(channel = %self.cfg.name, %reason, ?wait, "Mattermost connection ended; reconnecting");
                    self.client
                        .retrying(&format!("reconnecting: {reason}"), &reason);
                    if !pause(wait, cancel).await {
                        return Ok(());
                    }
                }
            }
        }
    }

    async fn connection(&self, me: &Me, ctx: &ChannelContext, cancel: &CancellationToken) -> End {
        let mut req = match self.ws_url.as_str().into_client_request() {
            Ok(r) => r,
            Err(e) => return End::Reconnect(format!("bad WebSocket URL: {e}")),
        };
        match format!("Bearer {}", self.cfg.token).parse() {
            Ok(v) => {
                req.headers_mut().insert("authorization", v);
            }
            Err(_) => return End::Reconnect("the token is not a header value".into()),
        }
        let connect = tokio::time::timeout(platform::CONNECT_TIMEOUT, platform::connect_ws(req));
        let ws = tokio::select! {
            biased;
            _ = cancel.cancelled() => return End::Cancelled,
            r = connect => match r {
                Ok(Ok((ws, _))) => ws,
                Ok(Err(tokio_tungstenite::tungstenite::Error::Http(r))) if r.status().as_u16() == 401 => {
                    return End::Fatal(self.client.api_error("GET /websocket", 401, "the token was refused"));
                }
                Ok(Err(e)) => return End::Reconnect(self.client.redact(&format!("cannot connect the WebSocket: {e}"))),
                Err(_) => return End::Reconnect("cannot connect the WebSocket: timed out".into()),
            },
        };
        let (mut tx, mut rx) = ws.split();
        let hello = async {
            loop {
                match rx.next().await {
                    Some(Ok(Message::Text(t))) => {
                        let v: Value = serde_json::from_str(t.as_str()).unwrap_or_default();
                        if v["event"] == "hello" {
                            return true;
                        }
                    }
                    Some(Ok(_)) => continue,
                    None | Some(Err(_)) => return false,
                }
            }
        };
        let greeted = tokio::select! {
            biased;
            _ = cancel.cancelled() => return End::Cancelled,
            r = tokio::time::timeout(HELLO_TIMEOUT, hello) => r.unwrap_or(false),
        };
        if !greeted {
            return End::Reconnect("no hello on the WebSocket".into());
        }
        self.client.connected("connected");
        let caught_up = tokio::select! {
            biased;
            _ = cancel.cancelled() => return End::Cancelled,
            r = self.catch_up(me, ctx) => r,
        };
        if let Err(reason) = caught_up {
            return End::Reconnect(reason);
        }
        let mut seq = 1u64;
        let mut heard = Instant::now();
        let mut ping = tokio::time::interval_at(Instant::now() + PING_EVERY, PING_EVERY);
        loop {
            let frame = tokio::select! {
                biased;
                _ = cancel.cancelled() => {
                    let _ = tx.send(Message::Close(None)).await;
                    return End::Cancelled;
                }
                _ = ping.tick() => {
                    if heard.elapsed() > SILENT {
                        return End::Reconnect("the WebSocket went silent".into());
                    }
                    seq += 1;
                    let ping = json!({"seq": seq, "action": "ping"}).to_string();
                    if let Err(e) = tx.send(Message::Text(ping.into())).await {
                        return End::Reconnect(format!("WebSocket send failed: {e}"));
                    }
                    continue;
                }
                f = rx.next() => f,
            };
            heard = Instant::now();
            let text = match frame {
                Some(Ok(Message::Text(t))) => t,
                Some(Ok(Message::Close(_))) | None => {
                    return End::Reconnect("the server closed the WebSocket".into());
                }
                Some(Ok(_)) => continue,
                Some(Err(e)) => return End::Reconnect(format!("WebSocket error: {e}")),
            };
            let Ok(event) = serde_json::from_str::<Value>(text.as_str()) else {
                continue;
            };
            if let Err(reason) = self.event(me, ctx, &event).await {
                return End::Reconnect(reason);
            }
        }
    }

    /// One event; `Err` when what it carries could not be stored (the reconnect reads it
    /// again).
    async fn event(&self, me: &Me, ctx: &ChannelContext, event: &Value) -> Result<(), String> {
        let data = &event["data"];
        match event["event"].as_str() {
            Some("posted") => {
                let Some(post) = data["post"]
                    .as_str()
                    .and_then(|p| serde_json::from_str::<Value>(p).ok())
                else {
                    return Ok(());
                };
                let kind = data["channel_type"].as_str().unwrap_or("O");
                // The server lists who a post mentions (by id).
                let mentions_me = data["mentions"]
                    .as_str()
                    .and_then(|m| serde_json::from_str::<Vec<String>>(m).ok())
                    .is_some_and(|ids| ids.contains(&me.id));
                self.take_post(
                    me,
                    ctx,
                    &post,
                    kind,
                    data["sender_name"].as_str(),
                    mentions_me,
                )
                .await
            }
            Some("reaction_added") => {
                let Some(reaction) = data["reaction"]
                    .as_str()
                    .and_then(|p| serde_json::from_str::<Value>(p).ok())
                else {
                    return Ok(());
                };
                let channel = event["broadcast"]["channel_id"]
                    .as_str()
                    .unwrap_or_default();
                if let Some(r) = self.map_reaction(me, &reaction, channel).await
                    && let Err(e) = ctx.sink.accept(Inbound::Reaction(r)).await
                {
                    tracing::warn!(channel = %self.cfg.name, error = %e, "could not store a reaction; it is lost");
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}
