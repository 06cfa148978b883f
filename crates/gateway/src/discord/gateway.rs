//! The Gateway websocket: connecting, identifying or resuming, heartbeats, dispatches.

use crate::platform::pause;
use crate::platform::wire::from_object;
use crate::util::Backoff;
use std::collections::HashMap;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_util::sync::CancellationToken;

use crate::channel::{ChannelContext, ChannelError, Inbound};

use super::*;

/// 1–5 s, as Discord asks before a new IDENTIFY after INVALID_SESSION.
pub(super) fn invalid_session_wait() -> Duration {
    Duration::from_millis(rand::random_range(1000..=5000))
}

pub(super) type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A session that can be resumed.
#[derive(Debug, Clone)]
pub(super) struct Session {
    id: String,
    resume_url: String,
}

/// How a connection ended.
pub(super) enum End {
    Cancelled,
    /// Connect again; resume when a session is known.
    Reconnect {
        established: bool,
        reason: String,
    },
    /// The session is gone: wait, then IDENTIFY afresh.
    Fresh {
        wait: Duration,
        reason: String,
    },
    Fatal(ChannelError),
}

/// The state of one `run`.
pub(super) struct Runner<'a> {
    pub(super) ch: &'a DiscordChannel,
    pub(super) ctx: &'a ChannelContext,
    pub(super) cancel: &'a CancellationToken,
    pub(super) session: Option<Session>,
    /// The last dispatch handled (handed in, or skipped): what RESUME asks after.
    pub(super) seq: Option<u64>,
    /// The last dispatch received (what heartbeats carry).
    pub(super) last_seq: Option<u64>,
    /// What the state holds under [`SEQ_KEY`], and when it was written.
    pub(super) stored_seq: Option<u64>,
    pub(super) stored_at: Instant,
}

#[derive(Debug, Deserialize)]
pub(super) struct GatewayPayload {
    pub(super) op: u64,
    #[serde(default)]
    pub(super) d: Value,
    #[serde(default)]
    pub(super) s: Option<u64>,
    #[serde(default)]
    pub(super) t: Option<String>,
}

impl GatewayPayload {
    /// A frame's text read as a payload: a JSON object (not an array taken field by
    /// position, see `platform::wire`), or why not.
    pub(super) fn parse(text: &str) -> Result<Self, String> {
        if !text.trim_start().starts_with('{') {
            return Err("a frame that is not a JSON object".into());
        }
        serde_json::from_str(text).map_err(|e| e.to_string())
    }
}

pub(super) fn text_frame(v: &Value) -> Message {
    Message::Text(v.to_string().into())
}

pub(super) fn close_frame(code: u16) -> Message {
    Message::Close(Some(CloseFrame {
        code: CloseCode::from(code),
        reason: "".into(),
    }))
}

/// `{url}/?v=10&encoding=json`.
pub(super) fn connect_url(url: &str) -> String {
    let base = url.split('?').next().unwrap_or(url).trim_end_matches('/');
    format!("{base}/?v=10&encoding=json")
}

impl Runner<'_> {
    fn name(&self) -> &str {
        &self.ch.cfg.name
    }

    async fn load(&mut self) {
        let state = &self.ctx.state;
        let get = |key: &'static str| async move {
            state.get(key).await.filter(|v| !v.trim().is_empty())
        };
        let session = get(SESSION_KEY).await;
        let url = get(RESUME_URL_KEY).await;
        let seq = get(SEQ_KEY)
            .await
            .and_then(|s| s.trim().parse::<u64>().ok());
        let bot = get(BOT_ID_KEY).await;
        if let Some(threads) = get(THREADS_KEY)
            .await
            .and_then(|v| serde_json::from_str::<HashMap<String, String>>(&v).ok())
        {
            self.ch.threads.lock().extend(threads);
        }
        if let (Some(id), Some(resume_url), Some(seq), Some(bot)) = (session, url, seq, bot)
            && (resume_url.starts_with("ws://") || resume_url.starts_with("wss://"))
        {
            tracing::info!(channel = %self.name(), seq, "resuming the stored Discord session");
            *self.ch.bot_id.lock() = Some(bot);
            self.session = Some(Session { id, resume_url });
            self.seq = Some(seq);
            self.last_seq = Some(seq);
            self.stored_seq = Some(seq);
        }
    }

    async fn store(&self, key: &str, value: &str) {
        if let Err(reason) = self.ctx.state.set(key, value).await {
            tracing::warn!(channel = %self.name(), key, %reason, "cannot store the Discord session state");
        }
    }

    async fn store_seq(&mut self) {
        if let Some(seq) = self.seq
            && self.stored_seq != Some(seq)
        {
            self.store(SEQ_KEY, &seq.to_string()).await;
            self.stored_seq = Some(seq);
            self.stored_at = Instant::now();
        }
    }

    async fn forget_session(&mut self) {
        self.session = None;
        self.seq = None;
        self.last_seq = None;
        self.stored_seq = None;
        self.store(SESSION_KEY, "").await;
        self.store(SEQ_KEY, "").await;
    }

    pub(super) async fn run(&mut self) -> Result<(), ChannelError> {
        self.load().await;
        let mut backoff = Backoff::default();
        let mut fresh_backoff = Backoff::default();
        let mut failed_resumes = 0u32;
        loop {
            if self.cancel.is_cancelled() {
                return Ok(());
            }
            let url = match &self.session {
                Some(s) => s.resume_url.clone(),
                None => {
                    let r = tokio::select! {
                        biased;
                        _ = self.cancel.cancelled() => return Ok(()),
                        r = self.ch.gateway_url() => r,
                    };
                    match r {
                        Ok(url) => url,
                        Err(e) if is_fatal(&e) => return Err(e),
                        Err(e) => {
                            let wait = match &e {
                                ChannelError::RateLimited {
                                    retry_after_secs, ..
                                } => Duration::from_secs(*retry_after_secs),
                                _ => backoff.next_wait(),
                            };
                            tracing::warn!(channel = %self.name(), error = %e, ?wait, "cannot find the Discord gateway; retrying");
                            self.ch
                                .client
                                .retrying(&format!("error: {e}"), &e.to_string());
                            if !pause(wait, self.cancel).await {
                                return Ok(());
                            }
                            continue;
                        }
                    }
                }
            };
            self.ch.client.connecting(if self.session.is_some() {
                "resuming"
            } else {
                "connecting"
            });
            let started = Instant::now();
            let end = self.connection(&url).await;
            self.store_seq().await;
            match end {
                End::Cancelled => return Ok(()),
                End::Fatal(e) => return Err(e),
                End::Reconnect {
                    established,
                    reason,
                } => {
                    // A stored resume URL that cannot be reached again and again: forget the
                    // session and start over at the URL the API gives.
                    if !established && self.session.is_some() {
                        failed_resumes += 1;
                        if failed_resumes >= 5 {
                            tracing::warn!(channel = %self.name(), "cannot reach the resume URL; identifying afresh");
                            self.forget_session().await;
                            failed_resumes = 0;
                        }
                    } else if established {
                        failed_resumes = 0;
                    }
                    let wait = if established && started.elapsed() >= STABLE {
                        backoff.reset();
                        Duration::ZERO
                    } else {
                        backoff.next_wait()
                    };
                    tracing::info!(channel = %self.name(), %reason, ?wait, "Discord gateway connection ended; reconnecting");
                    let status = format!("reconnecting: {reason}");
                    if established {
                        self.ch.client.reconnecting(&status, Some(&reason));
                    } else {
                        // Never got to receive: a failed attempt.
                        self.ch.client.retrying(&status, &reason);
                    }
                    if !pause(wait, self.cancel).await {
                        return Ok(());
                    }
                }
                End::Fresh { wait, reason } => {
                    // Each IDENTIFY counts against Discord's daily budget: sessions that keep
                    // ending are answered with growing waits, not a fixed 1–5 s.
                    let wait = if started.elapsed() >= STABLE {
                        fresh_backoff.reset();
                        wait
                    } else {
                        wait.max(fresh_backoff.next_wait())
                    };
                    tracing::info!(channel = %self.name(), %reason, ?wait, "Discord session ended; identifying afresh");
                    self.forget_session().await;
                    self.ch
                        .client
                        .reconnecting(&format!("reconnecting: {reason}"), Some(&reason));
                    if !pause(wait, self.cancel).await {
                        return Ok(());
                    }
                }
            }
        }
    }

    fn fatal(&self, code: u16, description: impl Into<String>) -> End {
        End::Fatal(ChannelError::Api {
            channel: self.name().to_owned(),
            method: "gateway".into(),
            code,
            description: description.into(),
        })
    }

    /// What a close code from Discord means.
    fn closed(&self, code: Option<u16>, reason: &str, established: bool) -> End {
        let reason = self.ch.client.redact(reason);
        match code {
            Some(4004) => self.fatal(
                4004,
                "authentication failed: the bot token is wrong (close code 4004)",
            ),
            Some(c @ 4010..=4014) => {
                let what = match c {
                    4010 => "invalid shard",
                    4011 => "sharding required",
                    4012 => "invalid API version",
                    4013 => "invalid intents",
                    _ => {
                        "disallowed intents: enable the Message Content intent in the Developer Portal"
                    }
                };
                self.fatal(
                    c,
                    format!("{what} (close code {c}) {reason}")
                        .trim_end()
                        .to_owned(),
                )
            }
            Some(c @ (4007 | 4009)) => End::Fresh {
                wait: Duration::ZERO,
                reason: format!("session not resumable (close code {c})"),
            },
            Some(c) => End::Reconnect {
                established,
                reason: format!("closed by Discord (code {c}) {reason}")
                    .trim_end()
                    .to_owned(),
            },
            None => End::Reconnect {
                established,
                reason: "closed by Discord".into(),
            },
        }
    }

    async fn connection(&mut self, url: &str) -> End {
        let url = connect_url(url);
        let connect = tokio::time::timeout(platform::CONNECT_TIMEOUT, platform::connect_ws(&url));
        let ws: Ws = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => return End::Cancelled,
            r = connect => match r {
                Ok(Ok((ws, _))) => ws,
                Ok(Err(e)) => return End::Reconnect {
                    established: false,
                    reason: self.ch.client.redact(&format!("cannot connect to the gateway: {e}")),
                },
                Err(_) => return End::Reconnect {
                    established: false,
                    reason: "cannot connect to the gateway: timed out".into(),
                },
            },
        };
        let (mut tx, mut rx) = ws.split();
        // HELLO
        let hello = async {
            loop {
                match rx.next().await {
                    Some(Ok(Message::Text(t))) => {
                        return Ok(GatewayPayload::parse(t.as_str()).ok());
                    }
                    Some(Ok(Message::Close(frame))) => {
                        return Err(frame.map(|f| (u16::from(f.code), f.reason.to_string())));
                    }
                    Some(Ok(_)) => continue,
                    None | Some(Err(_)) => return Err(None),
                }
            }
        };
        let hello = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => return End::Cancelled,
            r = tokio::time::timeout(HELLO_TIMEOUT, hello) => r,
        };
        let interval = match hello {
            Ok(Ok(Some(p))) if p.op == 10 => {
                p.d.get("heartbeat_interval")
                    .and_then(Value::as_u64)
                    .map(|ms| Duration::from_millis(ms.clamp(50, 600_000)))
            }
            Ok(Err(Some((code, reason)))) => return self.closed(Some(code), &reason, false),
            _ => None,
        };
        let Some(interval) = interval else {
            return End::Reconnect {
                established: false,
                reason: "no HELLO from the gateway".into(),
            };
        };
        let opening = match &self.session {
            Some(s) => json!({"op": 6, "d": {
                "token": self.ch.cfg.token,
                "session_id": s.id,
                "seq": self.seq,
            }}),
            None => {
                self.seq = None;
                self.last_seq = None;
                json!({"op": 2, "d": {
                    "token": self.ch.cfg.token,
                    "intents": INTENTS,
                    "properties": {
                        "os": std::env::consts::OS,
                        "browser": "switchboard",
                        "device": "switchboard",
                    },
                }})
            }
        };
        if let Err(e) = tx.send(text_frame(&opening)).await {
            return End::Reconnect {
                established: false,
                reason: format!("gateway send failed: {e}"),
            };
        }
        let mut next_beat = Instant::now() + interval.mul_f64(rand::random::<f64>());
        let mut awaiting_ack = false;
        let mut established = false;
        loop {
            let msg = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => {
                    let _ = tx.send(close_frame(CLOSE_RESUMABLE)).await;
                    return End::Cancelled;
                }
                _ = tokio::time::sleep_until(next_beat) => {
                    if awaiting_ack {
                        // A frame already waiting (the ACK, if the loop was busy) is read
                        // first: only a connection that really sent nothing is a zombie.
                        if let Some(ready) = futures::FutureExt::now_or_never(rx.next()) {
                            ready
                        } else {
                            tracing::warn!(channel = %self.name(), "no heartbeat ACK from the Discord gateway; reconnecting");
                            let _ = tx.send(close_frame(CLOSE_RESUMABLE)).await;
                            return End::Reconnect { established, reason: "no heartbeat ACK".into() };
                        }
                    } else {
                        if let Err(e) = tx.send(text_frame(&json!({"op": 1, "d": self.last_seq}))).await {
                            return End::Reconnect { established, reason: format!("gateway send failed: {e}") };
                        }
                        awaiting_ack = true;
                        next_beat += interval;
                        let now = Instant::now();
                        if next_beat <= now {
                            next_beat = now + interval;
                        }
                        if self.stored_at.elapsed() >= SEQ_STORE_INTERVAL {
                            self.store_seq().await;
                        }
                        continue;
                    }
                }
                msg = rx.next() => msg,
            };
            let text = match msg {
                None => {
                    return End::Reconnect {
                        established,
                        reason: "the gateway connection closed".into(),
                    };
                }
                Some(Err(e)) => {
                    return End::Reconnect {
                        established,
                        reason: self
                            .ch
                            .client
                            .redact(&format!("gateway connection failed: {e}")),
                    };
                }
                Some(Ok(Message::Close(frame))) => {
                    let (code, reason) = match frame {
                        Some(f) => (Some(u16::from(f.code)), f.reason.to_string()),
                        None => (None, String::new()),
                    };
                    return self.closed(code, &reason, established);
                }
                Some(Ok(Message::Text(t))) => t,
                Some(Ok(_)) => continue,
            };
            let payload = match GatewayPayload::parse(text.as_str()) {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(channel = %self.name(), error = %e, "a gateway payload of unexpected shape; ignoring it");
                    continue;
                }
            };
            match payload.op {
                0 => {
                    if let Some(s) = payload.s {
                        self.last_seq = Some(self.last_seq.map_or(s, |l| l.max(s)));
                    }
                    let t = payload.t.unwrap_or_default();
                    match self.dispatch(&t, payload.d, payload.s).await {
                        Ok(true) => {
                            established = true;
                            self.ch.client.connected("connected");
                        }
                        Ok(false) => {}
                        Err(end) => {
                            let _ = tx.send(close_frame(CLOSE_RESUMABLE)).await;
                            return end;
                        }
                    }
                }
                1 => {
                    if let Err(e) = tx
                        .send(text_frame(&json!({"op": 1, "d": self.last_seq})))
                        .await
                    {
                        return End::Reconnect {
                            established,
                            reason: format!("gateway send failed: {e}"),
                        };
                    }
                    awaiting_ack = true;
                }
                7 => {
                    let _ = tx.send(close_frame(CLOSE_RESUMABLE)).await;
                    return End::Reconnect {
                        established,
                        reason: "Discord asked to reconnect".into(),
                    };
                }
                9 => {
                    let _ = tx.send(close_frame(CLOSE_RESUMABLE)).await;
                    if payload.d.as_bool() == Some(true) && self.session.is_some() {
                        return End::Reconnect {
                            established,
                            reason: "invalid session (resumable)".into(),
                        };
                    }
                    return End::Fresh {
                        wait: invalid_session_wait(),
                        reason: "invalid session".into(),
                    };
                }
                11 => awaiting_ack = false,
                _ => {}
            }
        }
    }

    /// Handles one dispatch; `Ok(true)` when the session is (re)established.
    async fn dispatch(&mut self, t: &str, d: Value, s: Option<u64>) -> Result<bool, End> {
        let duplicate = matches!((s, self.seq), (Some(s), Some(h)) if s <= h);
        let mut accepted = false;
        match t {
            "READY" => {
                let ready: ApiReady = from_object(d).map_err(|e| End::Reconnect {
                    established: false,
                    reason: format!("READY of unexpected shape: {e}"),
                })?;
                if !(ready.resume_gateway_url.starts_with("ws://")
                    || ready.resume_gateway_url.starts_with("wss://"))
                {
                    return Err(End::Reconnect {
                        established: false,
                        reason: "READY without a ws:// or wss:// resume_gateway_url".into(),
                    });
                }
                tracing::info!(channel = %self.name(), bot = %ready.user.username, id = %ready.user.id, "Discord gateway ready");
                *self.ch.bot_id.lock() = Some(ready.user.id.clone());
                self.store(BOT_ID_KEY, &ready.user.id).await;
                self.store(SESSION_KEY, &ready.session_id).await;
                self.store(RESUME_URL_KEY, &ready.resume_gateway_url).await;
                self.session = Some(Session {
                    id: ready.session_id,
                    resume_url: ready.resume_gateway_url,
                });
                self.seq = s;
                self.store_seq().await;
                return Ok(true);
            }
            "RESUMED" => {
                tracing::info!(channel = %self.name(), "Discord session resumed");
                return Ok(true);
            }
            "MESSAGE_CREATE" if !duplicate => match from_object::<ApiMessage>(d) {
                Ok(m) => {
                    if let Some(msg) = self.ch.map_message(m, s) {
                        let chat = msg.chat.id.clone();
                        let id = msg.message_id.clone();
                        self.accept(Inbound::Message(msg), s).await?;
                        self.ch.remember_inbound(&chat, &id);
                        accepted = true;
                    }
                }
                Err(e) => {
                    tracing::warn!(channel = %self.name(), error = %e, "a MESSAGE_CREATE of unexpected shape; ignoring it");
                }
            },
            "INTERACTION_CREATE" if !duplicate => match from_object::<ApiInteraction>(d) {
                Ok(i) => {
                    if let Some((press, token)) = self.ch.map_press(i) {
                        let id = press.press_id.clone();
                        self.accept(Inbound::Press(press), s).await?;
                        accepted = true;
                        if let Err(e) = self.ch.ack_interaction(&id, &token).await {
                            tracing::warn!(channel = %self.name(), interaction = %id, error = %e, "cannot acknowledge a button press");
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(channel = %self.name(), error = %e, "an INTERACTION_CREATE of unexpected shape; ignoring it");
                }
            },
            _ => {
                let before = self.ch.threads.lock().clone();
                self.ch.note_threads(t, &d);
                // Known threads are kept in the channel's state: after a RESUME (a restart)
                // Discord does not send them again, and a thread must stay a thread chat.
                let after = self.ch.threads.lock().clone();
                if after != before {
                    let v = serde_json::to_string(&after).unwrap_or_default();
                    if let Err(e) = self.ctx.state.set(THREADS_KEY, &v).await {
                        tracing::warn!(channel = %self.name(), error = %e, "cannot store known threads");
                    }
                }
            }
        }
        if let Some(s) = s
            && !duplicate
        {
            self.seq = Some(s);
        }
        if accepted {
            self.store_seq().await;
        }
        Ok(false)
    }

    async fn accept(&mut self, item: Inbound, s: Option<u64>) -> Result<(), End> {
        match self.ctx.sink.accept(item).await {
            Ok(()) => Ok(()),
            Err(reason) => {
                tracing::warn!(channel = %self.name(), seq = ?s, %reason, "the gateway did not take a Discord event; resuming to get it again");
                Err(End::Reconnect {
                    established: false,
                    reason: crate::health::NOT_STORED.to_string(),
                })
            }
        }
    }
}

/// Errors that retrying will not fix: a bad token, no access.
pub(super) fn is_fatal(e: &ChannelError) -> bool {
    matches!(e, ChannelError::Api { code, .. } if matches!(code, 401 | 403 | 404))
}
