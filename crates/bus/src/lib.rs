//! Event fan-out between Switchboard instances over NATS.
//!
//! Every instance publishes the batches it commits on `switchboard.events.<session id>`
//! (plain core NATS: fast, at most once) with its instance id in a header, and subscribes
//! to `switchboard.events.*`, injecting the other instances' batches into its own event
//! log. Core NATS may drop messages (a slow consumer, a reconnect); that is fine here,
//! because the store is the truth: a subscription that sees a seq gap, or a quiet bus,
//! reads the store (see `switchboard_engine::EventBus`).
//!
//! Every message — event batches, control requests and their answers — is signed under the
//! cluster's bus secret ([`sign`]); what is not is dropped and counted.

pub mod sign;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use switchboard_engine::{ControlReply, Engine, EventBus, LogEvent, RunControl};
use tokio::sync::mpsc;
use uuid::Uuid;

/// Subject prefix of event batches.
pub const SUBJECT_PREFIX: &str = "switchboard.events";
/// Subject prefix of control requests: `switchboard.control.<instance>` reaches the instance
/// that executes a run (NATS request/reply).
pub const CONTROL_PREFIX: &str = "switchboard.control";
/// How long a forwarded control request waits for the owner's answer.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(5);

/// An instance id as one NATS subject token (no dots, spaces or wildcards), one-to-one:
/// letters, digits and `-` stay, `_` becomes `__`, anything else `_` and its UTF-8 bytes
/// in hex (`a.b` → `a_2eb`).
fn subject_token(instance: &str) -> String {
    let mut out = String::with_capacity(instance.len());
    for c in instance.chars() {
        if c.is_ascii_alphanumeric() || c == '-' {
            out.push(c);
        } else if c == '_' {
            out.push_str("__");
        } else {
            let mut buf = [0u8; 4];
            out.push('_');
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("{b:02x}"));
            }
        }
    }
    out
}

use sign::Signer;
/// Batches waiting to be published; beyond this they are dropped (subscribers elsewhere
/// catch up from the store).
const PUBLISH_QUEUE: usize = 8192;

#[derive(Debug, thiserror::Error)]
pub enum BusError {
    #[error("NATS URL {0:?}: expected nats://host:port")]
    Url(String),
    #[error("connecting to NATS at {url}: {message}")]
    Connect { url: String, message: String },
    #[error("subscribing to {SUBJECT_PREFIX}.*: {0}")]
    Subscribe(String),
}

/// One event on the wire (the stored form: the payload stays the event's JSON).
#[derive(Debug, Serialize, Deserialize)]
struct WireEvent {
    seq: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    run_id: Option<Uuid>,
    kind: String,
    payload: String,
    created_at: String,
}

/// The NATS bus of one instance.
pub struct NatsBus {
    client: async_nats::Client,
    queue: mpsc::Sender<(Uuid, Bytes)>,
    signer: Signer,
    /// This instance's id, signed into what it sends.
    instance: String,
}

impl std::fmt::Debug for NatsBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsBus").finish_non_exhaustive()
    }
}

/// `nats://user:password@host:port` → `nats://user:***@host:port`.
fn redact(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.rsplit_once('@') {
            Some((auth, host)) => match auth.split_once(':') {
                Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
                None => url.to_string(),
            },
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

impl NatsBus {
    /// Connects (retrying in the background if NATS is not up yet), subscribes, and
    /// attaches itself to `engine`'s log: from then on its committed batches are published,
    /// other instances' batches are injected into it, and control requests for runs that
    /// execute here (steering, cancel, approval decisions) are answered.
    pub async fn start(
        url: &str,
        instance_id: &str,
        secret: &[u8],
        engine: Engine,
    ) -> Result<Arc<NatsBus>, BusError> {
        let signer = Signer::new(secret);
        let log = engine.log().clone();
        if !(url.starts_with("nats://") || url.starts_with("tls://")) {
            return Err(BusError::Url(redact(url)));
        }
        let client = async_nats::ConnectOptions::new()
            .name(format!("switchboard {instance_id}"))
            .retry_on_initial_connect()
            .connection_timeout(Duration::from_secs(5))
            .connect(url)
            .await
            .map_err(|e| BusError::Connect {
                url: redact(url),
                message: e.to_string(),
            })?;
        let mut sub = client
            .subscribe(format!("{SUBJECT_PREFIX}.*"))
            .await
            .map_err(|e| BusError::Subscribe(e.to_string()))?;
        let mut control = client
            .subscribe(format!("{CONTROL_PREFIX}.{}", subject_token(instance_id)))
            .await
            .map_err(|e| BusError::Subscribe(e.to_string()))?;
        let (queue, mut rx) = mpsc::channel::<(Uuid, Bytes)>(PUBLISH_QUEUE);
        let bus = Arc::new(NatsBus {
            client: client.clone(),
            queue,
            signer: signer.clone(),
            instance: instance_id.to_string(),
        });
        // Control requests: each answered on its own task (a decision must not wait behind
        // a slow steer).
        let responder = client.clone();
        let (control_signer, me) = (signer.clone(), instance_id.to_string());
        tokio::spawn(async move {
            while let Some(msg) = control.next().await {
                let Some(reply_to) = msg.reply.clone() else {
                    continue;
                };
                if let Err(r) =
                    control_signer.verify(msg.subject.as_str(), msg.headers.as_ref(), &msg.payload)
                {
                    // No answer: a forger learns nothing.
                    sign::count(r, msg.subject.as_str());
                    continue;
                }
                let (engine, responder) = (engine.clone(), responder.clone());
                let (signer, me) = (control_signer.clone(), me.clone());
                tokio::spawn(async move {
                    let reply = match serde_json::from_slice::<RunControl>(&msg.payload) {
                        Ok(request) => engine.handle_control(request).await,
                        Err(e) => ControlReply::Error {
                            code: switchboard_engine::protocol::ErrorCode::ValidationFailed,
                            message: format!("control request did not parse: {e}"),
                        },
                    };
                    match serde_json::to_vec(&reply) {
                        Ok(body) => {
                            let headers = signer.headers(reply_to.as_str(), &me, &body);
                            if let Err(e) = responder
                                .publish_with_headers(reply_to, headers, body.into())
                                .await
                            {
                                tracing::warn!(error = %e, "answering a control request");
                            }
                        }
                        Err(e) => tracing::warn!(error = %e, "encoding a control reply"),
                    }
                });
            }
            tracing::warn!("the NATS control subscription ended");
        });
        // Publisher: one task, so batches of a session leave in commit order.
        let publisher = client.clone();
        let (me, publish_signer) = (instance_id.to_string(), signer.clone());
        tokio::spawn(async move {
            while let Some((session, payload)) = rx.recv().await {
                let subject = format!("{SUBJECT_PREFIX}.{session}");
                let headers = publish_signer.headers(&subject, &me, &payload);
                if let Err(e) = publisher
                    .publish_with_headers(subject, headers, payload)
                    .await
                {
                    tracing::debug!(error = %e, "publishing an event batch");
                }
            }
        });
        // Receiver: other instances' batches into the local log.
        let me = instance_id.to_string();
        let inject_into = log.clone();
        tokio::spawn(async move {
            while let Some(msg) = sub.next().await {
                let from =
                    match signer.verify(msg.subject.as_str(), msg.headers.as_ref(), &msg.payload) {
                        Ok(from) => from,
                        Err(r) => {
                            sign::count(r, msg.subject.as_str());
                            continue;
                        }
                    };
                if from == me {
                    continue;
                }
                let Some(session) = msg
                    .subject
                    .as_str()
                    .strip_prefix(SUBJECT_PREFIX)
                    .and_then(|s| s.strip_prefix('.'))
                    .and_then(|s| Uuid::parse_str(s).ok())
                else {
                    continue;
                };
                match serde_json::from_slice::<Vec<WireEvent>>(&msg.payload) {
                    Ok(events) => inject_into.inject(
                        session,
                        events
                            .into_iter()
                            .map(|e| LogEvent {
                                session_id: session,
                                seq: e.seq,
                                run_id: e.run_id,
                                kind: e.kind,
                                payload: e.payload,
                                created_at: e.created_at,
                            })
                            .collect(),
                    ),
                    Err(e) => {
                        tracing::warn!(error = %e, "an event batch from the bus did not parse")
                    }
                }
            }
            tracing::warn!("the NATS subscription ended");
        });
        log.attach_bus(bus.clone());
        tracing::info!(url = %redact(url), instance = instance_id, "event bus connected");
        Ok(bus)
    }
}

/// Connects once, without retrying, and returns the server's version: for
/// `switchboard doctor`.
pub async fn probe(url: &str) -> Result<String, BusError> {
    if !(url.starts_with("nats://") || url.starts_with("tls://")) {
        return Err(BusError::Url(redact(url)));
    }
    let failed = |message: String| BusError::Connect {
        url: redact(url),
        message,
    };
    let connect = async_nats::ConnectOptions::new()
        .name("switchboard doctor")
        .connection_timeout(Duration::from_secs(3))
        .connect(url);
    let client = tokio::time::timeout(Duration::from_secs(5), connect)
        .await
        .map_err(|_| failed("no answer within 5 s".into()))?
        .map_err(|e| failed(e.to_string()))?;
    client.flush().await.map_err(|e| failed(e.to_string()))?;
    Ok(client.server_info().version)
}

impl EventBus for NatsBus {
    fn publish(&self, session_id: Uuid, events: &[LogEvent]) {
        let wire: Vec<WireEvent> = events
            .iter()
            .map(|e| WireEvent {
                seq: e.seq,
                run_id: e.run_id,
                kind: e.kind.clone(),
                payload: e.payload.clone(),
                created_at: e.created_at.clone(),
            })
            .collect();
        let Ok(bytes) = serde_json::to_vec(&wire) else {
            return;
        };
        if self
            .queue
            .try_send((session_id, Bytes::from(bytes)))
            .is_err()
        {
            tracing::debug!(%session_id, "event bus queue full; a batch goes by the store");
        }
    }

    fn kind(&self) -> &'static str {
        "nats"
    }

    fn connected(&self) -> bool {
        matches!(
            self.client.connection_state(),
            async_nats::connection::State::Connected
        )
    }

    fn control<'a>(
        &'a self,
        instance: &'a str,
        request: RunControl,
    ) -> BoxFuture<'a, Result<ControlReply, String>> {
        Box::pin(async move {
            let body = serde_json::to_vec(&request).map_err(|e| e.to_string())?;
            let subject = format!("{CONTROL_PREFIX}.{}", subject_token(instance));
            let headers = self.signer.headers(&subject, &self.instance, &body);
            let answer = tokio::time::timeout(
                CONTROL_TIMEOUT,
                self.client
                    .request_with_headers(subject, headers, body.into()),
            )
            .await
            .map_err(|_| format!("no answer within {} s", CONTROL_TIMEOUT.as_secs()))?
            .map_err(|e| e.to_string())?;
            // Only the instance holding the secret may answer.
            if let Err(r) = self.signer.verify(
                answer.subject.as_str(),
                answer.headers.as_ref(),
                &answer.payload,
            ) {
                sign::count(r, answer.subject.as_str());
                return Err(format!(
                    "the answer was not signed by the cluster ({})",
                    r.as_str()
                ));
            }
            serde_json::from_slice(&answer.payload).map_err(|e| format!("bad answer: {e}"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_ids_become_one_subject_token() {
        assert_eq!(
            subject_token("web-1.example.com-42"),
            "web-1_2eexample_2ecom-42"
        );
        assert_eq!(subject_token("a b*>"), "a_20b_2a_3e");
        assert_eq!(subject_token("a_b"), "a__b");
        assert_ne!(subject_token("a.b"), subject_token("a_b"));
        assert_ne!(subject_token("a_2eb"), subject_token("a.b"));
    }

    #[test]
    fn urls_are_redacted() {
        assert_eq!(
            redact("nats://sb:secret@nats.internal:4222"),
            "nats://sb:***@nats.internal:4222"
        );
        assert_eq!(redact("nats://127.0.0.1:4222"), "nats://127.0.0.1:4222");
    }
}
