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

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::time::Instant;

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
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
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
        let listener = match TcpListener::bind("127.0.0.1:0").await {
            Ok(listener) => listener,
            Err(err) => panic!("fake Discord: cannot bind 127.0.0.1:0: {err}"),
        };
        let addr = match listener.local_addr() {
            Ok(addr) => addr,
            Err(err) => panic!("fake Discord: no local address: {err}"),
        };
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
            .fallback(not_found)
            .with_state(state.clone());
        let mut signal = shutdown_rx;
        tokio::spawn(async move {
            let stopped = async move {
                let _ = signal.wait_for(|stop| *stop).await;
            };
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(stopped)
                .await;
        });
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

    /// A direct message from `user_id` (channel `dm-{user_id}`); returns its message id.
    pub fn dm(&self, user_id: &str, username: &str, text: &str) -> String {
        let channel = format!("dm-{user_id}");
        let (id, d) = {
            let mut inner = self.state.lock();
            let id = inner.next_id();
            inner
                .user_messages
                .entry(channel.clone())
                .or_default()
                .push(id.clone());
            let d = json!({
                "id": id,
                "type": 0,
                "channel_id": channel,
                "author": user_json(user_id, username),
                "content": text,
                "timestamp": timestamp(),
                "edited_timestamp": null,
                "tts": false,
                "mention_everyone": false,
                "mentions": [],
                "mention_roles": [],
                "attachments": [],
                "embeds": [],
                "pinned": false,
                "flags": 0,
            });
            (id, d)
        };
        self.state.dispatch("MESSAGE_CREATE", d);
        id
    }

    /// A message in guild channel `channel`; `mention_bot` starts it with `<@BOT_ID> ` and
    /// lists the bot in `mentions`. Returns its message id.
    pub fn guild_message(
        &self,
        guild: &str,
        channel: &str,
        user_id: &str,
        username: &str,
        text: &str,
        mention_bot: bool,
    ) -> String {
        let (id, d) = {
            let mut inner = self.state.lock();
            let id = inner.next_id();
            inner
                .user_messages
                .entry(channel.to_owned())
                .or_default()
                .push(id.clone());
            inner
                .channel_guild
                .insert(channel.to_owned(), guild.to_owned());
            let (content, mentions) = if mention_bot {
                (
                    format!("<@{}> {text}", Self::BOT_ID),
                    json!([bot_user_json()]),
                )
            } else {
                (text.to_owned(), json!([]))
            };
            let d = json!({
                "id": id,
                "type": 0,
                "channel_id": channel,
                "guild_id": guild,
                "author": user_json(user_id, username),
                "member": {"roles": [], "joined_at": timestamp(), "deaf": false, "mute": false},
                "content": content,
                "timestamp": timestamp(),
                "edited_timestamp": null,
                "tts": false,
                "mention_everyone": false,
                "mentions": mentions,
                "mention_roles": [],
                "attachments": [],
                "embeds": [],
                "pinned": false,
                "flags": 0,
            });
            (id, d)
        };
        self.state.dispatch("MESSAGE_CREATE", d);
        id
    }

    /// A THREAD_CREATE: thread `thread_id` in `guild` under channel `parent`.
    pub fn thread_create(&self, guild: &str, parent: &str, thread_id: &str) {
        self.state
            .lock()
            .channel_guild
            .insert(thread_id.to_owned(), guild.to_owned());
        self.state.dispatch(
            "THREAD_CREATE",
            json!({
                "id": thread_id,
                "type": 11,
                "guild_id": guild,
                "parent_id": parent,
                "name": "a thread",
                "newly_created": true,
                "thread_metadata": {"archived": false, "auto_archive_duration": 1440, "locked": false},
            }),
        );
    }

    /// A press of the button `custom_id` under message `message_id` in `channel` by
    /// `user_id` (an INTERACTION_CREATE of type 3); returns the interaction id. In `dm-*`
    /// channels the presser is `user`, elsewhere `member.user` with the channel's guild.
    pub fn press(&self, channel: &str, message_id: &str, user_id: &str, custom_id: &str) -> String {
        let (id, d) = {
            let mut inner = self.state.lock();
            let id = inner.next_id();
            let token = format!("interaction-token-{id}");
            inner.interactions.insert(
                id.clone(),
                Interaction {
                    token: token.clone(),
                    created: Instant::now(),
                    answered: false,
                },
            );
            let message = inner
                .bot_messages
                .get(channel)
                .and_then(|m| m.iter().find(|m| m.id == message_id))
                .map(|m| message_json(channel, m))
                .unwrap_or_else(|| {
                    json!({"id": message_id, "channel_id": channel, "author": bot_user_json(),
                           "content": "", "components": [], "type": 0})
                });
            let user = user_json(user_id, &format!("user{user_id}"));
            let mut d = json!({
                "id": id,
                "application_id": APPLICATION_ID,
                "type": 3,
                "token": token,
                "version": 1,
                "channel_id": channel,
                "message": message,
                "data": {"custom_id": custom_id, "component_type": 2},
                "locale": "en-US",
            });
            if channel.starts_with("dm-") {
                d["user"] = user;
                d["channel"] = json!({"id": channel, "type": 1});
            } else {
                let guild = inner
                    .channel_guild
                    .get(channel)
                    .cloned()
                    .unwrap_or_else(|| "1".to_owned());
                d["guild_id"] = json!(guild);
                d["member"] = json!({"user": user, "roles": [], "permissions": "0"});
                d["channel"] = json!({"id": channel, "type": 0, "guild_id": guild});
            }
            (id, d)
        };
        self.state.dispatch("INTERACTION_CREATE", d);
        id
    }

    /// Queues a raw dispatch (`t`, `d`), for shapes the helpers above do not make.
    pub fn push_dispatch(&self, t: &str, d: Value) {
        self.state.dispatch(t, d);
    }

    /// Closes every open gateway socket abruptly (no close frame). The session stays
    /// resumable.
    pub fn drop_connection(&self) {
        {
            let mut inner = self.state.lock();
            inner.kill_through = inner.last_conn;
        }
        self.state.bump();
    }

    /// Closes every open gateway socket with close `code` (e.g. 4000, or 4004/4014).
    pub fn close_with(&self, code: u16) {
        {
            let mut inner = self.state.lock();
            inner.close_through = Some((inner.last_conn, code));
        }
        self.state.bump();
    }

    /// Sends a HEARTBEAT request (op 1) to every open socket.
    pub fn request_heartbeat(&self) {
        self.state.lock().server_ops.push(1);
        self.state.bump();
    }

    /// Sends RECONNECT (op 7) to every open socket.
    pub fn request_reconnect(&self) {
        self.state.lock().server_ops.push(7);
        self.state.bump();
    }

    /// Stops (or resumes) answering heartbeats with HEARTBEAT_ACK.
    pub fn withhold_acks(&self, on: bool) {
        self.state.lock().withhold_acks = on;
        self.state.bump();
    }

    /// The next RESUME gets INVALID_SESSION `d:false` and the session is forgotten.
    pub fn invalidate_session(&self) {
        self.state.lock().invalidate_next_resume = true;
    }

    /// The bot's messages in `channel` in the order sent, as they stand now.
    pub fn bot_messages(&self, channel: &str) -> Vec<DiscordMessage> {
        self.state
            .lock()
            .bot_messages
            .get(channel)
            .cloned()
            .unwrap_or_default()
    }

    /// IDENTIFYs received (with any token).
    pub fn identifies(&self) -> usize {
        self.state.lock().identifies
    }

    /// The `d` of every IDENTIFY received.
    pub fn identify_payloads(&self) -> Vec<Value> {
        self.state.lock().identify_payloads.clone()
    }

    /// RESUMEs received (also refused ones).
    pub fn resumes(&self) -> usize {
        self.state.lock().resumes
    }

    /// Heartbeats received.
    pub fn heartbeats(&self) -> usize {
        self.state.lock().heartbeats
    }

    /// Interaction callbacks accepted: (interaction id, body).
    pub fn callbacks(&self) -> Vec<(String, Value)> {
        self.state.lock().callbacks.clone()
    }

    /// Interaction follow-ups accepted: (interaction token, body).
    pub fn follow_ups(&self) -> Vec<(String, Value)> {
        self.state.lock().follow_ups.clone()
    }

    /// JSON bodies (`null` when none) of every REST call whose route (`METHOD /path`
    /// below `/api/v10`, e.g. `POST /channels/dm-42/messages`) starts with `route`, in
    /// order, refused ones too.
    pub fn calls(&self, route: &str) -> Vec<Value> {
        self.state.lock().calls.starting_with(route)
    }

    /// Every call in arrival order, refused ones too: when it came, its route, its params.
    /// For asserting on the exact sequence of posts and edits.
    pub fn timeline(&self) -> Vec<(std::time::Instant, String, Value)> {
        self.state.lock().calls.timeline()
    }

    /// The next `n` REST calls whose route starts with `route_prefix` answer 429 with
    /// `retry_after` seconds.
    pub fn rate_limit(&self, route_prefix: &str, n: usize, retry_after: f64) {
        self.state
            .lock()
            .rate_limits
            .push((route_prefix.to_owned(), n, retry_after));
    }

    /// Waits (up to `timeout`) until `f(self)` holds.
    ///
    /// # Panics
    /// When it does not hold in time, naming `what`.
    pub async fn wait_until(
        &self,
        timeout: Duration,
        what: &str,
        f: impl Fn(&FakeDiscord) -> bool,
    ) {
        let deadline = Instant::now() + timeout;
        loop {
            if f(self) {
                return;
            }
            if Instant::now() >= deadline {
                panic!("fake Discord: timed out after {timeout:?} waiting until {what}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
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

fn timestamp() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    format!("{secs}")
}

fn user_json(id: &str, username: &str) -> Value {
    json!({
        "id": id,
        "username": username,
        "global_name": null,
        "discriminator": "0",
        "avatar": null,
    })
}

fn bot_user_json() -> Value {
    json!({
        "id": FakeDiscord::BOT_ID,
        "username": FakeDiscord::BOT_USERNAME,
        "global_name": null,
        "discriminator": "0",
        "avatar": null,
        "bot": true,
    })
}

fn components_json(buttons: &[(String, String)]) -> Value {
    if buttons.is_empty() {
        return json!([]);
    }
    let rows: Vec<Value> = buttons
        .chunks(5)
        .map(|row| {
            let row: Vec<Value> = row
                .iter()
                .map(|(label, id)| json!({"type": 2, "style": 2, "label": label, "custom_id": id}))
                .collect();
            json!({"type": 1, "components": row})
        })
        .collect();
    Value::Array(rows)
}

fn message_json(channel: &str, m: &DiscordMessage) -> Value {
    let mut v = json!({
        "id": m.id,
        "type": if m.reply_to.is_some() { 19 } else { 0 },
        "channel_id": channel,
        "author": bot_user_json(),
        "content": m.content,
        "timestamp": timestamp(),
        "edited_timestamp": if m.edits > 0 { json!(timestamp()) } else { Value::Null },
        "tts": false,
        "mention_everyone": false,
        "mentions": [],
        "mention_roles": [],
        "attachments": [],
        "embeds": [],
        "pinned": false,
        "flags": 0,
        "components": components_json(&m.components),
    });
    if let Some(r) = &m.reply_to {
        v["message_reference"] = json!({"type": 0, "message_id": r, "channel_id": channel});
    }
    v
}

// ---- REST ----

fn error(status: StatusCode, code: u64, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"message": message, "code": code})),
    )
        .into_response()
}

fn form_error(field: &str, code: &str, message: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        axum::Json(json!({
            "message": "Invalid Form Body",
            "code": 50035,
            "errors": {field: {"_errors": [{"code": code, "message": message}]}},
        })),
    )
        .into_response()
}

async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, 0, "404: Not Found")
}

async fn rest(
    State(state): State<Arc<Shared>>,
    method: Method,
    Path(path): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = format!("/{}", path.trim_start_matches('/'));
    let route = format!("{method} {path}");
    let body = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else {
        match serde_json::from_slice::<Value>(&body) {
            Ok(v) => v,
            Err(_) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    50109,
                    "The request body contains invalid JSON.",
                );
            }
        }
    };
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    // Interaction callbacks and follow-ups are authorized by the interaction's token.
    let is_callback = matches!(segments.first(), Some(&"interactions" | &"webhooks"));
    {
        let mut inner = state.lock();
        inner.calls.push(&route, body.clone());
        if let Some(limit) = inner
            .rate_limits
            .iter_mut()
            .find(|(prefix, left, _)| *left > 0 && route.starts_with(prefix.as_str()))
        {
            limit.1 -= 1;
            let retry_after = limit.2;
            let mut resp = (
                StatusCode::TOO_MANY_REQUESTS,
                axum::Json(json!({
                    "message": "You are being rate limited.",
                    "retry_after": retry_after,
                    "global": false,
                })),
            )
                .into_response();
            let h = resp.headers_mut();
            if let Ok(v) = format!("{}", retry_after.ceil()).parse() {
                h.insert(header::RETRY_AFTER, v);
            }
            if let Ok(v) = "user".parse() {
                h.insert("x-ratelimit-scope", v);
            }
            return resp;
        }
    }
    let authorized = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        == Some(format!("Bot {}", FakeDiscord::TOKEN).as_str());
    if !is_callback && !authorized {
        return error(StatusCode::UNAUTHORIZED, 0, "401: Unauthorized");
    }
    match (method.as_str(), segments.as_slice()) {
        ("GET", ["gateway", "bot"]) => axum::Json(json!({
            "url": state.ws_url(),
            "shards": 1,
            "session_start_limit": {"total": 1000, "remaining": 999, "reset_after": 14_400_000, "max_concurrency": 1},
        }))
        .into_response(),
        ("GET", ["users", "@me"]) => axum::Json(bot_user_json()).into_response(),
        ("POST", ["channels", channel, "messages"]) => create_message(&state, channel, &body),
        ("PATCH", ["channels", channel, "messages", id]) => edit_message(&state, channel, id, &body),
        ("POST", ["interactions", id, token, "callback"]) => callback(&state, id, token, &body),
        ("POST", ["webhooks", app, token]) => follow_up(&state, app, token, &body),
        _ => error(StatusCode::NOT_FOUND, 0, "404: Not Found"),
    }
}

/// The `(label, custom_id)` of `components`, or the refusal.
fn parse_components(v: Option<&Value>) -> Result<Vec<(String, String)>, Box<Response>> {
    let rows = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(rows)) => rows,
        Some(_) => {
            return Err(Box::new(form_error(
                "components",
                "ARRAY_TYPE_CONVERT",
                "Must be an array.",
            )));
        }
    };
    if rows.len() > 5 {
        return Err(Box::new(form_error(
            "components",
            "BASE_TYPE_MAX_LENGTH",
            "Must be 5 or fewer in length.",
        )));
    }
    let mut out = Vec::new();
    for row in rows {
        if row.get("type").and_then(Value::as_u64) != Some(1) {
            return Err(Box::new(form_error(
                "components",
                "UNION_TYPE_CHOICES",
                "Value of field \"type\" must be one of (1,).",
            )));
        }
        let Some(buttons) = row.get("components").and_then(Value::as_array) else {
            return Err(Box::new(form_error(
                "components",
                "BASE_TYPE_REQUIRED",
                "This field is required",
            )));
        };
        if buttons.is_empty() || buttons.len() > 5 {
            return Err(Box::new(form_error(
                "components",
                "BASE_TYPE_BAD_LENGTH",
                "Must be between 1 and 5 in length.",
            )));
        }
        for b in buttons {
            let style = b.get("style").and_then(Value::as_u64).unwrap_or(0);
            let label = b.get("label").and_then(Value::as_str).unwrap_or_default();
            let custom_id = b
                .get("custom_id")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if b.get("type").and_then(Value::as_u64) != Some(2) || !(1..=4).contains(&style) {
                return Err(Box::new(form_error(
                    "components",
                    "COMPONENT_TYPE_INVALID",
                    "The specified component type is invalid in this context",
                )));
            }
            if custom_id.is_empty() || custom_id.chars().count() > MAX_CUSTOM_ID {
                return Err(Box::new(form_error(
                    "custom_id",
                    "BASE_TYPE_BAD_LENGTH",
                    "Must be between 1 and 100 in length.",
                )));
            }
            if label.chars().count() > MAX_LABEL {
                return Err(Box::new(form_error(
                    "label",
                    "BASE_TYPE_MAX_LENGTH",
                    "Must be 80 or fewer in length.",
                )));
            }
            out.push((label.to_owned(), custom_id.to_owned()));
        }
    }
    Ok(out)
}

fn content_of(body: &Value) -> Result<Option<String>, Box<Response>> {
    match body.get("content") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.chars().count() > MAX_CONTENT => Err(Box::new(form_error(
            "content",
            "BASE_TYPE_MAX_LENGTH",
            "Must be 2000 or fewer in length.",
        ))),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(Box::new(form_error(
            "content",
            "STRING_TYPE_CONVERT",
            "Could not interpret value as string.",
        ))),
    }
}

fn create_message(state: &Shared, channel: &str, body: &Value) -> Response {
    let content = match content_of(body) {
        Ok(c) => c.unwrap_or_default(),
        Err(r) => return *r,
    };
    let components = match parse_components(body.get("components")) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    if content.trim().is_empty() && components.is_empty() {
        return error(
            StatusCode::BAD_REQUEST,
            50006,
            "Cannot send an empty message",
        );
    }
    let mut inner = state.lock();
    let reply_to = match body.get("message_reference") {
        None | Some(Value::Null) => None,
        Some(r) => {
            let id = r
                .get("message_id")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let known = inner
                .user_messages
                .get(channel)
                .is_some_and(|m| m.contains(&id))
                || inner
                    .bot_messages
                    .get(channel)
                    .is_some_and(|m| m.iter().any(|m| m.id == id));
            let fail = r
                .get("fail_if_not_exists")
                .and_then(Value::as_bool)
                .unwrap_or(true);
            match (known, fail) {
                (true, _) => Some(id),
                (false, false) => None,
                (false, true) => {
                    return form_error(
                        "message_reference",
                        "MESSAGE_REFERENCE_UNKNOWN_MESSAGE",
                        "Unknown message",
                    );
                }
            }
        }
    };
    let id = inner.next_id();
    let m = DiscordMessage {
        id,
        content,
        components,
        reply_to,
        edits: 0,
    };
    let json = message_json(channel, &m);
    inner
        .bot_messages
        .entry(channel.to_owned())
        .or_default()
        .push(m);
    axum::Json(json).into_response()
}

fn edit_message(state: &Shared, channel: &str, id: &str, body: &Value) -> Response {
    let content = match content_of(body) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    let components = match body.get("components") {
        None => None,
        Some(v) => match parse_components(Some(v)) {
            Ok(c) => Some(c),
            Err(r) => return *r,
        },
    };
    let mut inner = state.lock();
    let Some(m) = inner
        .bot_messages
        .get_mut(channel)
        .and_then(|m| m.iter_mut().find(|m| m.id == id))
    else {
        return error(StatusCode::NOT_FOUND, 10008, "Unknown Message");
    };
    if let Some(c) = content {
        m.content = c;
    }
    if let Some(c) = components {
        m.components = c;
    }
    if m.content.trim().is_empty() && m.components.is_empty() {
        return error(
            StatusCode::BAD_REQUEST,
            50006,
            "Cannot send an empty message",
        );
    }
    m.edits += 1;
    let json = message_json(channel, m);
    axum::Json(json).into_response()
}

fn callback(state: &Shared, id: &str, token: &str, body: &Value) -> Response {
    let mut inner = state.lock();
    let Some(i) = inner
        .interactions
        .get_mut(id)
        .filter(|i| i.token == token && i.created.elapsed() <= INTERACTION_WINDOW)
    else {
        return error(StatusCode::NOT_FOUND, 10062, "Unknown interaction");
    };
    if i.answered {
        return error(
            StatusCode::BAD_REQUEST,
            40060,
            "Interaction has already been acknowledged.",
        );
    }
    if !matches!(
        body.get("type").and_then(Value::as_u64),
        Some(1 | 4 | 5 | 6 | 7 | 9 | 10 | 12)
    ) {
        return form_error(
            "type",
            "BASE_TYPE_CHOICES",
            "Value must be one of {1, 4, 5, 6, 7, 9, 10, 12}.",
        );
    }
    i.answered = true;
    inner.callbacks.push((id.to_owned(), body.clone()));
    StatusCode::NO_CONTENT.into_response()
}

/// `POST /webhooks/{application_id}/{token}`: a follow-up message of an acknowledged
/// interaction, within its 15 minutes (10015 `Unknown Webhook` otherwise).
fn follow_up(state: &Shared, app: &str, token: &str, body: &Value) -> Response {
    let mut inner = state.lock();
    let known = inner
        .interactions
        .values()
        .any(|i| i.token == token && i.answered && i.created.elapsed() <= INTERACTION_WINDOW);
    if app != APPLICATION_ID || !known {
        return error(StatusCode::NOT_FOUND, 10015, "Unknown Webhook");
    }
    let content = body
        .get("content")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if content.is_empty() || content.chars().count() > 2000 {
        return form_error(
            "content",
            "BASE_TYPE_BAD_LENGTH",
            "Must be between 1 and 2000 in length.",
        );
    }
    inner.follow_ups.push((token.to_owned(), body.clone()));
    let n = inner.next_id();
    axum::Json(json!({"id": n, "content": content, "flags": body.get("flags")})).into_response()
}

// ---- the Gateway ----

async fn gateway(
    State(state): State<Arc<Shared>>,
    RawQuery(query): RawQuery,
    ws: WebSocketUpgrade,
) -> Response {
    let query = query.unwrap_or_default();
    let ok =
        query.split('&').any(|p| p == "v=10") && query.split('&').any(|p| p == "encoding=json");
    ws.on_upgrade(move |socket| connection(state, socket, ok))
}

fn payload(op: u8, d: Value) -> Message {
    Message::Text(
        json!({"op": op, "d": d, "s": null, "t": null})
            .to_string()
            .into(),
    )
}

fn close(code: u16, reason: &str) -> Message {
    Message::Close(Some(CloseFrame {
        code,
        reason: reason.into(),
    }))
}

/// What a socket does after a client payload.
enum Step {
    Continue,
    Send(Vec<Message>),
    Close(u16, &'static str),
}

async fn connection(state: Arc<Shared>, mut socket: WebSocket, query_ok: bool) {
    if !query_ok {
        let _ = socket.send(close(4012, "Invalid API version")).await;
        return;
    }
    let (conn, interval, mut ops_seen) = {
        let mut inner = state.lock();
        inner.last_conn += 1;
        (
            inner.last_conn,
            inner.heartbeat_interval.unwrap_or(DEFAULT_HEARTBEAT),
            inner.server_ops.len(),
        )
    };
    let interval_ms = u64::try_from(interval.as_millis()).unwrap_or(u64::MAX);
    if socket
        .send(payload(10, json!({"heartbeat_interval": interval_ms})))
        .await
        .is_err()
    {
        return;
    }
    let mut version = state.version.subscribe();
    let mut shutdown = state.shutdown.clone();
    // The last seq sent on this socket, once it holds the session.
    let mut sent: Option<u64> = None;
    loop {
        version.borrow_and_update();
        let (close_code, out) = {
            let inner = state.lock();
            if conn <= inner.kill_through {
                return; // dropped without a close frame
            }
            let close_code = inner
                .close_through
                .filter(|(through, _)| conn <= *through)
                .map(|(_, code)| code);
            let mut out: Vec<String> = inner.server_ops[ops_seen..]
                .iter()
                .map(|op| json!({"op": op, "d": null, "s": null, "t": null}).to_string())
                .collect();
            ops_seen = inner.server_ops.len();
            if let (Some(after), Some(session)) = (sent, &inner.session)
                && inner.active_conn == Some(conn)
                && close_code.is_none()
            {
                for e in session.log.iter().filter(|e| e.seq > after) {
                    if e.only_for.is_none_or(|c| c == conn) {
                        out.push(json!({"op": 0, "s": e.seq, "t": e.t, "d": e.d}).to_string());
                    }
                    sent = Some(e.seq);
                }
            }
            (close_code, out)
        };
        if let Some(code) = close_code {
            let _ = socket.send(close(code, "closed by the test")).await;
            return;
        }
        for text in out {
            if socket.send(Message::Text(text.into())).await.is_err() {
                return;
            }
        }
        let msg = tokio::select! {
            msg = socket.recv() => msg,
            _ = version.changed() => continue,
            _ = shutdown.wait_for(|stop| *stop) => return,
        };
        let text = match msg {
            None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return,
            Some(Ok(Message::Text(t))) => t,
            Some(Ok(_)) => continue,
        };
        let step = match serde_json::from_str::<Value>(text.as_str()) {
            Ok(v) => client_payload(&state, conn, &v, &mut sent),
            Err(_) => Step::Close(4002, "Error while decoding payload."),
        };
        match step {
            Step::Continue => {}
            Step::Send(msgs) => {
                for m in msgs {
                    if socket.send(m).await.is_err() {
                        return;
                    }
                }
            }
            Step::Close(code, reason) => {
                let _ = socket.send(close(code, reason)).await;
                return;
            }
        }
    }
}

fn client_payload(state: &Shared, conn: u64, v: &Value, sent: &mut Option<u64>) -> Step {
    let d = v.get("d").cloned().unwrap_or(Value::Null);
    let token_ok = || d.get("token").and_then(Value::as_str) == Some(FakeDiscord::TOKEN);
    let step = match v.get("op").and_then(Value::as_u64) {
        Some(1) => {
            let mut inner = state.lock();
            inner.heartbeats += 1;
            if inner.withhold_acks {
                Step::Continue
            } else {
                Step::Send(vec![payload(11, Value::Null)])
            }
        }
        Some(2) => {
            let mut inner = state.lock();
            inner.identifies += 1;
            inner.identify_payloads.push(d.clone());
            if sent.is_some() {
                return Step::Close(4005, "Already authenticated.");
            }
            if !token_ok() {
                return Step::Close(4004, "Authentication failed.");
            }
            if !d.get("intents").is_some_and(Value::is_u64) {
                return Step::Close(4013, "Invalid intent(s).");
            }
            inner.sessions_made += 1;
            let id = format!("fake-session-{}", inner.sessions_made);
            let mut session = Session {
                id: id.clone(),
                log: Vec::new(),
                next_seq: 1,
            };
            session.push(
                "READY",
                json!({
                    "v": 10,
                    "user": bot_user_json(),
                    "guilds": [],
                    "session_id": id,
                    "resume_gateway_url": state.ws_url(),
                    "application": {"id": APPLICATION_ID, "flags": 0},
                }),
                Some(conn),
            );
            for (t, d) in std::mem::take(&mut inner.pending) {
                session.push(&t, d, None);
            }
            inner.session = Some(session);
            inner.active_conn = Some(conn);
            *sent = Some(0);
            Step::Continue
        }
        Some(6) => {
            let mut inner = state.lock();
            inner.resumes += 1;
            if sent.is_some() {
                return Step::Close(4005, "Already authenticated.");
            }
            if !token_ok() {
                return Step::Close(4004, "Authentication failed.");
            }
            let invalidate = std::mem::take(&mut inner.invalidate_next_resume);
            let session_id = d
                .get("session_id")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let known = inner.session.as_ref().is_some_and(|s| s.id == session_id);
            if invalidate || !known {
                if invalidate {
                    inner.session = None;
                }
                return Step::Send(vec![payload(9, json!(false))]);
            }
            let seq = d.get("seq").and_then(Value::as_u64).unwrap_or(0);
            if let Some(session) = &mut inner.session {
                session.push("RESUMED", json!({}), Some(conn));
            }
            inner.active_conn = Some(conn);
            *sent = Some(seq);
            Step::Continue
        }
        Some(_) => Step::Close(4001, "Unknown opcode."),
        None => Step::Close(4002, "Error while decoding payload."),
    };
    state.bump();
    step
}
