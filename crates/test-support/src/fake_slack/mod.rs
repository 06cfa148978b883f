//! A fake Slack (Web API and Socket Mode) on real TCP (`127.0.0.1:0`).
//!
//! Web API methods are at `/api/{method}` (GET or POST; parameters as a JSON body, a
//! form-encoded body or the query string; the token as `Authorization: Bearer …` or a
//! `token` parameter). Answers are `{"ok":true,…}` or `{"ok":false,"error":"…"}` with HTTP
//! 200, as on Slack; a rate-limited call answers HTTP 429 with `Retry-After`.
//!
//! - `auth.test`: the bot [`FakeSlack::BOT_USER_ID`] in team `Test Team`.
//! - `apps.connections.open` (app token only): a single-use `ws://127.0.0.1:PORT/socket?
//!   ticket=…` URL.
//! - `chat.postMessage` / `chat.update`: checked like Slack checks Block Kit (at most 50
//!   blocks, section text at most 3000 chars, header text at most 150, at most 25 elements
//!   per `actions` block, unique `action_id`s, button text at most 75) —
//!   `invalid_blocks` otherwise; `no_text` without text and blocks; `channel_not_found`
//!   for channel ids not starting with `C`, `D` or `G`; `message_not_found` for an
//!   unknown `ts`.
//! - `reactions.add`.
//! - `chat.postEphemeral` (`channel`, `user`, `text`, `thread_ts`): recorded
//!   ([`FakeSlack::ephemerals`]); `user_not_in_channel` for a DM channel of another user.
//! - `users.info` (`user`): the user set with [`FakeSlack::set_user`], else `user_not_found`.
//!
//! Only [`FakeSlack::BOT_TOKEN`] is accepted for Web API methods and only
//! [`FakeSlack::APP_TOKEN`] for `apps.connections.open` (the other one:
//! `not_allowed_token_type`; anything else: `invalid_auth`; none: `not_authed`).
//!
//! The Socket Mode websocket sends `hello`, then the envelopes the test injects
//! ([`FakeSlack::dm`], [`FakeSlack::channel_message`], [`FakeSlack::press`],
//! [`FakeSlack::slash_command`], [`FakeSlack::push_event`]), and records acknowledgements ([`FakeSlack::acked`]). Envelopes
//! are delivered only while a socket is connected (queued otherwise); envelopes a closed
//! connection left unacknowledged are delivered again on the next connection (same
//! `envelope_id`, `retry_attempt` + 1). As on Slack, a channel message that mentions the
//! bot comes twice: as a `message` event and as an `app_mention` event.
//!
//! The server shuts down when the [`FakeSlack`] is dropped.
//!
//! This file holds the state and the server's start; `web_api.rs` answers the Web API (and
//! checks Block Kit), `socket_mode.rs` the Socket Mode websocket, and `control.rs` is what a
//! test does with the fake.

use parking_lot::{Mutex, MutexGuard};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::routing::{any, get};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

mod control;
mod socket_mode;
#[cfg(test)]
mod tests;
mod web_api;

use socket_mode::socket;
use web_api::api;

const TEAM_ID: &str = "T0001";
const TEAM_NAME: &str = "Test Team";
const APP_ID: &str = "A0001";
const BOT_ID: &str = "BBOT";
const BOT_NAME: &str = "switchboard";
const MAX_BLOCKS: usize = 50;
const MAX_SECTION: usize = 3000;
const MAX_HEADER: usize = 150;
const MAX_ELEMENTS: usize = 25;
const MAX_BUTTON_TEXT: usize = 75;

/// One message the bot posted, as it stands now.
#[derive(Debug, Clone, PartialEq)]
pub struct SlackMessage {
    pub ts: String,
    pub thread_ts: Option<String>,
    /// The `text` (fallback) field.
    pub text: String,
    /// The Block Kit blocks (`[]` when none).
    pub blocks: Value,
    /// `(text, value)` of the buttons in `actions` blocks.
    pub buttons: Vec<(String, String)>,
    /// How many times `chat.update` changed it.
    pub updates: usize,
}

/// The fake server; see the module docs.
pub struct FakeSlack {
    addr: SocketAddr,
    state: Arc<Shared>,
    shutdown: watch::Sender<bool>,
}

enum Cmd {
    Send(Value),
    Disconnect,
    Drop,
    Freeze,
}

struct Shared {
    inner: Mutex<Inner>,
    shutdown: watch::Receiver<bool>,
}

#[derive(Default)]
struct Inner {
    /// Files users shared, by their `url_private` path (served to the bot token only).
    files: HashMap<String, Vec<u8>>,
    /// Uploads started by the bot: file id → (name, announced length, bytes once POSTed).
    pending_uploads: HashMap<String, (String, usize, Option<Vec<u8>>)>,
    /// Uploads completed into a channel, in order.
    uploads: Vec<Upload>,
    /// The connected socket (connection number, command sender).
    current: Option<(usize, mpsc::UnboundedSender<Cmd>)>,
    /// Envelopes waiting for a connection.
    queued: VecDeque<Value>,
    /// Envelopes sent and not acknowledged, by envelope id, with the connection number.
    unacked: Vec<(String, usize, Value)>,
    /// The last envelope injected.
    last: Option<Value>,
    acked: Vec<String>,
    connections: usize,
    tickets: Vec<String>,
    next_id: u64,
    /// Posted messages per channel, in order.
    messages: HashMap<String, Vec<SlackMessage>>,
    calls: crate::call_log::CallLog,
    reactions: Vec<(String, String, String)>,
    /// Ephemeral messages: (channel, user, text, thread_ts).
    ephemerals: Vec<(String, String, String, Option<String>)>,
    /// Known users: id → (display name, real name).
    users: HashMap<String, (String, String)>,
    /// method → (calls still to refuse, retry_after).
    rate_limits: HashMap<String, (usize, u64)>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock()
    }
}

impl Inner {
    fn next(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// A fresh, increasing message ts (`seconds.micros`).
    fn ts(&mut self) -> String {
        let n = self.next();
        format!("{}.{:06}", 1_700_000_000 + n / 1_000_000, n % 1_000_000)
    }

    /// Sends `envelope` on the connected socket, or queues it.
    fn deliver(&mut self, envelope: Value) {
        self.last = Some(envelope.clone());
        self.send_or_queue(envelope);
    }

    fn send_or_queue(&mut self, envelope: Value) {
        match &self.current {
            Some((conn, tx)) => {
                let id = envelope_id(&envelope);
                let conn = *conn;
                if tx.send(Cmd::Send(envelope.clone())).is_ok() {
                    self.unacked.retain(|(e, _, _)| *e != id);
                    self.unacked.push((id, conn, envelope));
                } else {
                    self.current = None;
                    self.queued.push_back(envelope);
                }
            }
            None => self.queued.push_back(envelope),
        }
    }

    fn envelope(&mut self, kind: &str, payload: Value) -> Value {
        let n = self.next();
        json!({
            "envelope_id": format!("env-{n:06}"),
            "type": kind,
            "accepts_response_payload": false,
            "retry_attempt": 0,
            "retry_reason": "",
            "payload": payload,
        })
    }

    fn event_envelope(&mut self, event: Value) -> Value {
        let n = self.next();
        let payload = json!({
            "token": "verification-token",
            "team_id": TEAM_ID,
            "api_app_id": APP_ID,
            "event": event,
            "type": "event_callback",
            "event_id": format!("Ev{n:08}"),
            "event_time": now(),
            "authorizations": [{"team_id": TEAM_ID, "user_id": FakeSlack::BOT_USER_ID, "is_bot": true}],
            "is_ext_shared_channel": false,
        });
        self.envelope("events_api", payload)
    }

    fn message(&self, channel: &str, ts: &str) -> Option<&SlackMessage> {
        self.messages.get(channel)?.iter().find(|m| m.ts == ts)
    }
}

fn envelope_id(envelope: &Value) -> String {
    envelope
        .get("envelope_id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// A file the bot uploaded and completed into a channel.
#[derive(Debug, Clone, PartialEq)]
pub struct Upload {
    pub file_id: String,
    pub channel: String,
    pub thread_ts: Option<String>,
    pub name: String,
    pub title: String,
    pub comment: Option<String>,
    pub content: Vec<u8>,
}

impl FakeSlack {
    /// The only bot token accepted (Web API methods).
    pub const BOT_TOKEN: &'static str = "xoxb-1-test-bot-token";
    /// The only app-level token accepted (`apps.connections.open`).
    pub const APP_TOKEN: &'static str = "xapp-1-test-app-token";
    /// The bot's user id.
    pub const BOT_USER_ID: &'static str = "UBOT";

    /// Starts the server on `127.0.0.1:0`.
    ///
    /// # Panics
    /// When no local port can be bound (test-only code: the test cannot go on anyway).
    pub async fn start() -> FakeSlack {
        let (listener, addr) = crate::serve::bind("fake Slack").await;
        let (shutdown, shutdown_rx) = watch::channel(false);
        let state = Arc::new(Shared {
            inner: Mutex::new(Inner::default()),
            shutdown: shutdown_rx.clone(),
        });
        let app = Router::new()
            .route("/api/{method}", any(api))
            .route("/socket", get(socket))
            .route("/files-pri/{*path}", get(web_api::file))
            .route("/upload/{id}", axum::routing::post(web_api::upload))
            .with_state((state.clone(), addr));
        crate::serve::spawn(listener, app, shutdown_rx);
        FakeSlack {
            addr,
            state,
            shutdown,
        }
    }

    /// `http://127.0.0.1:PORT/api`, the Web API base.
    pub fn api_base(&self) -> String {
        format!("http://{}/api", self.addr)
    }
}

impl Drop for FakeSlack {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

impl std::fmt::Debug for FakeSlack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeSlack")
            .field("addr", &self.addr)
            .finish()
    }
}
