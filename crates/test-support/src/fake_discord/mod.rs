//! A fake Discord (REST API v10 and the Gateway) on real TCP (`127.0.0.1:0`).
//!
//! REST, under `/api/v10` (`Authorization: Bot <TOKEN>`, anything else: 401
//! `{"message":"401: Unauthorized","code":0}`; errors are Discord's `{"message","code"}`
//! bodies; 429 answers `{"message","retry_after":S,"global":false}` with `Retry-After`):
//!
//! - `GET /gateway/bot`: `{"url":"ws://127.0.0.1:PORT/gateway",…}`.
//! - `GET /users/@me`: the bot user [`FakeDiscord::BOT_ID`].
//! - `POST /channels/{id}/messages` (`content` ≤ 2,000 characters, `components` with action
//!   rows of at most 5 buttons, `message_reference`): the Message object.
//! - `PATCH /channels/{id}/messages/{mid}`: 404 `Unknown Message` (10008) for a message the
//!   bot did not send there; `content` and `components` replace what is given.
//! - `POST /interactions/{id}/{token}/callback` (no bot token, the interaction's token in
//!   the path): 204; 404 `Unknown interaction` (10062) after 3 s or for a wrong token, 400
//!   (40060) when already acknowledged.
//! - `POST /webhooks/{application_id}/{token}` (an acknowledged interaction's follow-up,
//!   e.g. an ephemeral one with `flags: 64`): the message; 404 `Unknown Webhook` (10015)
//!   for an unknown token or application, or after 15 minutes.
//!
//! The Gateway (`ws://127.0.0.1:PORT/gateway/?v=10&encoding=json`): HELLO with a short
//! `heartbeat_interval`, HEARTBEAT → HEARTBEAT_ACK (unless [`FakeDiscord::withhold_acks`]),
//! IDENTIFY → a new session and READY (`session_id`, `resume_gateway_url` = its own URL,
//! `user.id` = [`FakeDiscord::BOT_ID`]), RESUME → the dispatches after the given `seq`, then
//! RESUMED (or INVALID_SESSION `d:false` for an unknown session, or after
//! [`FakeDiscord::invalidate_session`]). A wrong token closes the socket with 4004.
//!
//! Dispatches ([`FakeDiscord::dm`], [`FakeDiscord::guild_message`], [`FakeDiscord::press`],
//! [`FakeDiscord::push_dispatch`]) go into the current session's log with increasing `s`;
//! a connected, identified socket gets them at once, and ones injected while no socket is
//! connected come with the RESUME replay, as on Discord. Ones injected before the first
//! IDENTIFY come after READY. When a session is invalidated, what it had not delivered is
//! lost, as on Discord.
//!
//! Every REST call is recorded ([`FakeDiscord::calls`]). The server shuts down when the
//! [`FakeDiscord`] is dropped.
//!
//! This file holds the state and the server's start; `rest.rs` answers the REST API,
//! `gateway.rs` the Gateway websocket, `control.rs` is what a test does with the fake, and
//! `wire.rs` renders Discord's JSON objects.

use parking_lot::{Mutex, MutexGuard};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{any, get};
use serde_json::Value;
use tokio::sync::watch;
use tokio::time::Instant;

mod control;
mod gateway;
mod rest;
mod wire;

use gateway::gateway;
use rest::{not_found, rest};

/// Longest message content, as on Discord (characters).
const MAX_CONTENT: usize = 2000;
/// Longest `custom_id`, as on Discord.
const MAX_CUSTOM_ID: usize = 100;
/// Longest button label, as on Discord.
const MAX_LABEL: usize = 80;
/// How long an interaction can be acknowledged, as on Discord.
const INTERACTION_WINDOW: Duration = Duration::from_secs(3);
/// The default `heartbeat_interval` of HELLO.
const DEFAULT_HEARTBEAT: Duration = Duration::from_millis(500);
/// The application id of the bot.
const APPLICATION_ID: &str = "800";

/// One message the bot sent, as it stands now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscordMessage {
    pub id: String,
    pub content: String,
    /// `(label, custom_id)` of the buttons, row after row.
    pub components: Vec<(String, String)>,
    /// The message it replies to (`message_reference.message_id`).
    pub reply_to: Option<String>,
    /// How many times it was edited.
    pub edits: usize,
}

/// The fake server; see the module docs.
pub struct FakeDiscord {
    addr: SocketAddr,
    state: Arc<Shared>,
    shutdown: watch::Sender<bool>,
}

struct Shared {
    inner: Mutex<Inner>,
    /// Bumped on every change a socket must look at (a dispatch, a drop …).
    version: watch::Sender<u64>,
    shutdown: watch::Receiver<bool>,
    addr: SocketAddr,
}

/// One dispatch of a session's log.
struct Entry {
    seq: u64,
    t: String,
    d: Value,
    /// READY and RESUMED go to one connection only, and are never replayed.
    only_for: Option<u64>,
}

struct Session {
    id: String,
    log: Vec<Entry>,
    next_seq: u64,
}

impl Session {
    fn push(&mut self, t: &str, d: Value, only_for: Option<u64>) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.log.push(Entry {
            seq,
            t: t.to_owned(),
            d,
            only_for,
        });
    }
}

struct Interaction {
    token: String,
    created: Instant,
    answered: bool,
}

#[derive(Default)]
struct Inner {
    /// Attachments users posted, by their CDN path (`/attachments/…`).
    attachments: HashMap<String, Vec<u8>>,
    /// Files the bot posted with its messages, in order.
    uploads: Vec<Upload>,
    /// Interaction follow-ups: (interaction token, body).
    follow_ups: Vec<(String, Value)>,
    heartbeat_interval: Option<Duration>,
    next_id: u64,
    session: Option<Session>,
    sessions_made: u64,
    /// Dispatches injected before the first IDENTIFY.
    pending: Vec<(String, Value)>,
    /// The connection the session streams to.
    active_conn: Option<u64>,
    last_conn: u64,
    /// Connections with an id up to this one are dropped without a close frame.
    kill_through: u64,
    /// Connections with an id up to `.0` are closed with code `.1`.
    close_through: Option<(u64, u16)>,
    /// Ops the server sent to the open sockets (1 = HEARTBEAT request, 7 = RECONNECT), in
    /// order; each socket sends those queued after it opened.
    server_ops: Vec<u8>,
    withhold_acks: bool,
    invalidate_next_resume: bool,
    identifies: usize,
    resumes: usize,
    heartbeats: usize,
    identify_payloads: Vec<Value>,
    bot_messages: HashMap<String, Vec<DiscordMessage>>,
    /// Ids of users' messages per channel.
    user_messages: HashMap<String, Vec<String>>,
    channel_guild: HashMap<String, String>,
    interactions: HashMap<String, Interaction>,
    callbacks: Vec<(String, Value)>,
    calls: crate::call_log::CallLog,
    /// (route prefix, calls still to refuse, retry_after).
    rate_limits: Vec<(String, usize, f64)>,
}

impl Inner {
    fn next_id(&mut self) -> String {
        self.next_id += 1;
        (1_100_000_000_000_000_000u64 + self.next_id).to_string()
    }
}

impl Shared {
    /// The state, even if a panicking test thread poisoned the lock.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock()
    }

    fn bump(&self) {
        self.version.send_modify(|v| *v += 1);
    }

    fn dispatch(&self, t: &str, d: Value) {
        {
            let mut inner = self.lock();
            match &mut inner.session {
                Some(session) => session.push(t, d, None),
                None => inner.pending.push((t.to_owned(), d)),
            }
        }
        self.bump();
    }

    fn ws_url(&self) -> String {
        format!("ws://{}/gateway", self.addr)
    }
}

/// A file the bot posted with a message (`files[n]` of a multipart create).
#[derive(Debug, Clone, PartialEq)]
pub struct Upload {
    pub channel: String,
    pub name: String,
    pub mime: String,
    pub content: Vec<u8>,
    /// The message's `content` (the caption).
    pub content_text: String,
}

impl FakeDiscord {
    /// The only bot token the fake accepts.
    pub const TOKEN: &'static str = "FAKE-DISCORD-BOT-TOKEN.abcdef.0123456789";
    /// The bot's user id.
    pub const BOT_ID: &'static str = "900";
    /// The bot's username.
    pub const BOT_USERNAME: &'static str = "switchboard_test_bot";

    /// Starts the server on `127.0.0.1:0`, with a HELLO `heartbeat_interval` of 500 ms.
    ///
    /// # Panics
    /// When no local port can be bound (test-only code: the test cannot go on anyway).
    pub async fn start() -> FakeDiscord {
        Self::start_with(DEFAULT_HEARTBEAT).await
    }

    /// Starts the server with HELLO's `heartbeat_interval` = `heartbeat`.
    ///
    /// # Panics
    /// When no local port can be bound.
    pub async fn start_with(heartbeat: Duration) -> FakeDiscord {
        let (listener, addr) = crate::serve::bind("fake Discord").await;
        let (shutdown, shutdown_rx) = watch::channel(false);
        let (version, _) = watch::channel(0u64);
        let state = Arc::new(Shared {
            inner: Mutex::new(Inner {
                heartbeat_interval: Some(heartbeat),
                ..Inner::default()
            }),
            version,
            shutdown: shutdown_rx.clone(),
            addr,
        });
        let app = Router::new()
            .route("/api/v10/{*path}", any(rest))
            .route("/gateway", get(gateway))
            .route("/gateway/", get(gateway))
            .route("/attachments/{*path}", get(rest::attachment))
            .fallback(not_found)
            .with_state(state.clone());
        crate::serve::spawn(listener, app, shutdown_rx);
        FakeDiscord {
            addr,
            state,
            shutdown,
        }
    }

    /// `http://127.0.0.1:PORT/api/v10`.
    pub fn api_base(&self) -> String {
        format!("http://{}/api/v10", self.addr)
    }

    /// `ws://127.0.0.1:PORT/gateway` (what `GET /gateway/bot` answers).
    pub fn gateway_url(&self) -> String {
        self.state.ws_url()
    }
}

impl Drop for FakeDiscord {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

impl std::fmt::Debug for FakeDiscord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeDiscord")
            .field("addr", &self.addr)
            .finish()
    }
}
