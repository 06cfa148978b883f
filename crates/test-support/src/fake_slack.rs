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

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use serde_json::{Map, Value, json};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

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
}

struct Shared {
    inner: Mutex<Inner>,
    shutdown: watch::Receiver<bool>,
}

#[derive(Default)]
struct Inner {
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
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
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
        let listener = match TcpListener::bind("127.0.0.1:0").await {
            Ok(listener) => listener,
            Err(err) => panic!("fake Slack: cannot bind 127.0.0.1:0: {err}"),
        };
        let addr = match listener.local_addr() {
            Ok(addr) => addr,
            Err(err) => panic!("fake Slack: no local address: {err}"),
        };
        let (shutdown, shutdown_rx) = watch::channel(false);
        let state = Arc::new(Shared {
            inner: Mutex::new(Inner::default()),
            shutdown: shutdown_rx.clone(),
        });
        let app = Router::new()
            .route("/api/{method}", any(api))
            .route("/socket", get(socket))
            .with_state((state.clone(), addr));
        let mut signal = shutdown_rx;
        tokio::spawn(async move {
            let stopped = async move {
                let _ = signal.wait_for(|stop| *stop).await;
            };
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(stopped)
                .await;
        });
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

    /// A direct message from `user` (in DM channel `D{user}`); returns its ts.
    pub fn dm(&self, user: &str, text: &str) -> String {
        let mut inner = self.state.lock();
        let ts = inner.ts();
        let event = json!({
            "type": "message",
            "channel": format!("D{user}"),
            "user": user,
            "text": text,
            "ts": ts,
            "event_ts": ts,
            "channel_type": "im",
            "team": TEAM_ID,
            "client_msg_id": format!("cm-{ts}"),
        });
        let envelope = inner.event_envelope(event);
        inner.deliver(envelope);
        ts
    }

    /// A message of `user` in `channel` (in the thread `thread_ts`, if any); returns its ts.
    /// When it mentions the bot (`<@UBOT>`), an `app_mention` event follows the `message`
    /// event, as on Slack.
    pub fn channel_message(
        &self,
        channel: &str,
        user: &str,
        text: &str,
        thread_ts: Option<&str>,
    ) -> String {
        let mut inner = self.state.lock();
        let ts = inner.ts();
        let mut event = json!({
            "type": "message",
            "channel": channel,
            "user": user,
            "text": text,
            "ts": ts,
            "event_ts": ts,
            "channel_type": if channel.starts_with('G') { "group" } else { "channel" },
            "team": TEAM_ID,
            "client_msg_id": format!("cm-{ts}"),
        });
        if let Some(t) = thread_ts {
            event["thread_ts"] = json!(t);
            event["parent_user_id"] = json!(user);
        }
        let envelope = inner.event_envelope(event.clone());
        inner.deliver(envelope);
        if text.contains(&format!("<@{}", Self::BOT_USER_ID)) {
            event["type"] = json!("app_mention");
            if let Some(map) = event.as_object_mut() {
                map.remove("channel_type");
            }
            let envelope = inner.event_envelope(event);
            inner.deliver(envelope);
        }
        ts
    }

    /// A slash command (`/new`, `/stop` …) typed by `user` in `channel`, in a
    /// `slash_commands` envelope as Socket Mode delivers it; returns the envelope id.
    pub fn slash_command(&self, channel: &str, user: &str, command: &str, text: &str) -> String {
        let mut inner = self.state.lock();
        let n = inner.next();
        let payload = json!({
            "token": "verification-token",
            "team_id": TEAM_ID,
            "team_domain": "test",
            "channel_id": channel,
            "channel_name": if channel.starts_with('D') { "directmessage" } else { "general" },
            "user_id": user,
            "user_name": user.to_lowercase(),
            "command": command,
            "text": text,
            "api_app_id": APP_ID,
            "is_enterprise_install": "false",
            "response_url": format!("http://{}/commands/{n}", self.addr),
            "trigger_id": format!("{n}.1.slash{n}"),
        });
        let envelope = inner.envelope("slash_commands", payload);
        let id = envelope_id(&envelope);
        inner.deliver(envelope);
        id
    }

    /// Makes `users.info` know `user`.
    pub fn set_user(&self, user: &str, display_name: &str, real_name: &str) {
        self.state.lock().users.insert(
            user.to_owned(),
            (display_name.to_owned(), real_name.to_owned()),
        );
    }

    /// Ephemeral messages posted: (channel, user, text, thread_ts).
    pub fn ephemerals(&self) -> Vec<(String, String, String, Option<String>)> {
        self.state.lock().ephemerals.clone()
    }

    /// Delivers `event` (any Events API event object) in an `events_api` envelope; returns
    /// the envelope id. For shapes the helpers above do not make (bot messages, edits).
    pub fn push_event(&self, event: Value) -> String {
        let mut inner = self.state.lock();
        let envelope = inner.event_envelope(event);
        let id = envelope_id(&envelope);
        inner.deliver(envelope);
        id
    }

    /// A press of the button with `value` under the bot message `message_ts` in `channel` by
    /// `user` (a `block_actions` payload in an `interactive` envelope); returns the envelope
    /// id. The payload's `message` is the bot message as it stands now (a minimal one if the
    /// fake does not know it).
    pub fn press(&self, channel: &str, message_ts: &str, user: &str, value: &str) -> String {
        let mut inner = self.state.lock();
        let n = inner.next();
        let message = match inner.message(channel, message_ts) {
            Some(m) => {
                let mut msg = json!({
                    "type": "message",
                    "user": Self::BOT_USER_ID,
                    "bot_id": BOT_ID,
                    "text": m.text,
                    "ts": m.ts,
                    "blocks": m.blocks,
                });
                if let Some(t) = &m.thread_ts {
                    msg["thread_ts"] = json!(t);
                }
                msg
            }
            None => {
                json!({"type": "message", "user": Self::BOT_USER_ID, "bot_id": BOT_ID, "text": "", "ts": message_ts})
            }
        };
        let button = inner.message(channel, message_ts).and_then(|m| {
            m.blocks.as_array()?.iter().find_map(|b| {
                b.get("elements")?
                    .as_array()?
                    .iter()
                    .find(|e| e.get("value").and_then(Value::as_str) == Some(value))
                    .map(|e| (b.get("block_id").cloned(), e.clone()))
            })
        });
        let (block_id, action_id, text) = match &button {
            Some((block_id, e)) => (
                block_id.clone().unwrap_or(Value::Null),
                e.get("action_id").cloned().unwrap_or(json!(value)),
                e.get("text").cloned().unwrap_or(Value::Null),
            ),
            None => (
                json!("actions"),
                json!(value),
                json!({"type": "plain_text", "text": value}),
            ),
        };
        let payload = json!({
            "type": "block_actions",
            "user": {"id": user, "username": user.to_lowercase(), "name": user.to_lowercase(), "team_id": TEAM_ID},
            "api_app_id": APP_ID,
            "token": "verification-token",
            "container": {"type": "message", "message_ts": message_ts, "channel_id": channel, "is_ephemeral": false},
            "trigger_id": format!("{n}.1.trigger{n}"),
            "team": {"id": TEAM_ID, "domain": "test"},
            "channel": {"id": channel, "name": "general"},
            "message": message,
            "response_url": format!("http://{}/actions/{n}", self.addr),
            "actions": [{
                "action_id": action_id,
                "block_id": block_id,
                "text": text,
                "value": value,
                "type": "button",
                "action_ts": format!("{}.{n:06}", now()),
            }],
        });
        let envelope = inner.envelope("interactive", payload);
        let id = envelope_id(&envelope);
        inner.deliver(envelope);
        id
    }

    /// Delivers the last injected envelope again: same payload (same `event_id`), new
    /// envelope id, `retry_attempt` + 1.
    pub fn redeliver_last(&self) {
        let mut inner = self.state.lock();
        let Some(mut envelope) = inner.last.clone() else {
            return;
        };
        let n = inner.next();
        envelope["envelope_id"] = json!(format!("env-{n:06}"));
        let attempt = envelope["retry_attempt"].as_u64().unwrap_or_default() + 1;
        envelope["retry_attempt"] = json!(attempt);
        envelope["retry_reason"] = json!("timeout");
        inner.deliver(envelope);
    }

    /// Sends `{"type":"disconnect"}` on the connected socket (which then takes no more
    /// envelopes; it stays open until the client closes it).
    pub fn disconnect(&self) {
        let mut inner = self.state.lock();
        if let Some((_, tx)) = inner.current.take() {
            let _ = tx.send(Cmd::Disconnect);
        }
    }

    /// Drops the connected socket without a close frame.
    pub fn drop_socket(&self) {
        let mut inner = self.state.lock();
        if let Some((_, tx)) = inner.current.take() {
            let _ = tx.send(Cmd::Drop);
        }
    }

    /// The bot's messages in `channel`, in the order posted.
    pub fn bot_messages(&self, channel: &str) -> Vec<SlackMessage> {
        self.state
            .lock()
            .messages
            .get(channel)
            .cloned()
            .unwrap_or_default()
    }

    /// Envelope ids acknowledged so far, in order.
    pub fn acked(&self) -> Vec<String> {
        self.state.lock().acked.clone()
    }

    /// Raw params of every call to `method` (also refused ones), in order.
    pub fn calls(&self, method: &str) -> Vec<Value> {
        self.state.lock().calls.of(method)
    }

    /// Every call in arrival order, refused ones too: when it came, its method, its params.
    /// For asserting on the exact sequence of posts and edits.
    pub fn timeline(&self) -> Vec<(std::time::Instant, String, Value)> {
        self.state.lock().calls.timeline()
    }

    /// `(channel, timestamp, name)` of every reaction added.
    pub fn reactions(&self) -> Vec<(String, String, String)> {
        self.state.lock().reactions.clone()
    }

    /// The next `n` calls to `method` answer HTTP 429 with `Retry-After: retry_after`.
    pub fn rate_limit(&self, method: &str, n: usize, retry_after: u64) {
        self.state
            .lock()
            .rate_limits
            .insert(method.to_owned(), (n, retry_after));
    }

    /// Websocket connections opened so far.
    pub fn connections(&self) -> usize {
        self.state.lock().connections
    }

    /// Whether a socket is connected (and takes envelopes).
    pub fn connected(&self) -> bool {
        self.state.lock().current.is_some()
    }

    /// Waits (up to `timeout`) until `f(self)` holds.
    ///
    /// # Panics
    /// When it does not hold in time, naming `what`.
    pub async fn wait_until(&self, timeout: Duration, what: &str, f: impl Fn(&FakeSlack) -> bool) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if f(self) {
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!("fake Slack: timed out after {timeout:?} waiting until {what}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
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

// ---- Socket Mode ----

type AppState = (Arc<Shared>, SocketAddr);

async fn socket(
    State((state, _)): State<AppState>,
    RawQuery(query): RawQuery,
    ws: WebSocketUpgrade,
) -> Response {
    let ticket = query
        .unwrap_or_default()
        .split('&')
        .find_map(|p| p.strip_prefix("ticket=").map(str::to_owned))
        .unwrap_or_default();
    {
        let mut inner = state.lock();
        let Some(pos) = inner.tickets.iter().position(|t| *t == ticket) else {
            return (StatusCode::UNAUTHORIZED, "invalid ticket").into_response();
        };
        inner.tickets.remove(pos);
    }
    ws.on_upgrade(move |socket| session(socket, state))
}

fn text(v: &Value) -> Message {
    Message::Text(v.to_string().into())
}

async fn session(mut socket: WebSocket, state: Arc<Shared>) {
    let hello = json!({
        "type": "hello",
        "num_connections": 1,
        "debug_info": {"host": "fake-slack", "approximate_connection_time": 18060},
        "connection_info": {"app_id": APP_ID},
    });
    if socket.send(text(&hello)).await.is_err() {
        return;
    }
    let (tx, mut rx) = mpsc::unbounded_channel::<Cmd>();
    let conn = {
        let mut inner = state.lock();
        inner.connections += 1;
        let conn = inner.connections;
        inner.current = Some((conn, tx));
        // what earlier connections left unacknowledged, then what waited for a connection
        let mut again: Vec<Value> = inner
            .unacked
            .iter()
            .filter(|(_, c, _)| *c != conn)
            .map(|(_, _, e)| e.clone())
            .collect();
        for e in &mut again {
            let attempt = e["retry_attempt"].as_u64().unwrap_or_default() + 1;
            e["retry_attempt"] = json!(attempt);
            e["retry_reason"] = json!("timeout");
        }
        let queued: Vec<Value> = inner.queued.drain(..).collect();
        for e in again.into_iter().chain(queued) {
            inner.send_or_queue(e);
        }
        conn
    };
    let mut shutdown = state.shutdown.clone();
    let mut open = true;
    loop {
        tokio::select! {
            cmd = rx.recv(), if open => match cmd {
                Some(Cmd::Send(envelope)) => {
                    if socket.send(text(&envelope)).await.is_err() {
                        break;
                    }
                }
                Some(Cmd::Disconnect) => {
                    open = false;
                    let msg = json!({
                        "type": "disconnect",
                        "reason": "refresh_requested",
                        "debug_info": {"host": "fake-slack"},
                    });
                    if socket.send(text(&msg)).await.is_err() {
                        break;
                    }
                }
                Some(Cmd::Drop) | None => break,
            },
            msg = socket.recv() => match msg {
                Some(Ok(Message::Text(t))) => {
                    if let Ok(v) = serde_json::from_str::<Value>(t.as_str())
                        && let Some(id) = v.get("envelope_id").and_then(Value::as_str)
                    {
                        let mut inner = state.lock();
                        inner.unacked.retain(|(e, _, _)| e != id);
                        inner.acked.push(id.to_owned());
                    }
                }
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break,
                Some(Ok(_)) => {}
            },
            _ = async { let _ = shutdown.wait_for(|stop| *stop).await; } => break,
        }
    }
    let mut inner = state.lock();
    if inner.current.as_ref().is_some_and(|(c, _)| *c == conn) {
        inner.current = None;
    }
    // dropping `socket` closes the TCP connection
}

// ---- Web API ----

fn ok(mut fields: Value) -> Response {
    fields["ok"] = json!(true);
    axum::Json(fields).into_response()
}

fn fail(error: &str) -> Response {
    axum::Json(json!({"ok": false, "error": error})).into_response()
}

/// The parameters: a JSON body, a form body, or the query string.
fn params(
    headers: &HeaderMap,
    query: Option<&str>,
    body: &[u8],
) -> Result<Map<String, Value>, String> {
    let json_body = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/json"));
    let mut map = Map::new();
    if json_body && !body.iter().all(u8::is_ascii_whitespace) {
        return match serde_json::from_slice::<Value>(body) {
            Ok(Value::Object(m)) => Ok(m),
            _ => Err("invalid_json".into()),
        };
    }
    let form = std::str::from_utf8(body).map_err(|_| "invalid_form_data".to_owned())?;
    let pairs = form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .chain(form_urlencoded::parse(form.as_bytes()));
    for (k, v) in pairs {
        map.insert(k.into_owned(), Value::String(v.into_owned()));
    }
    Ok(map)
}

async fn api(
    State((state, addr)): State<AppState>,
    Path(method): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let params = match params(&headers, query.as_deref(), &body) {
        Ok(p) => p,
        Err(e) => return fail(&e),
    };
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned)
        .or_else(|| {
            params
                .get("token")
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
    let mut inner = state.lock();
    inner.calls.push(&method, Value::Object(params.clone()));
    if let Some((left, retry_after)) = inner.rate_limits.get_mut(&method)
        && *left > 0
    {
        *left -= 1;
        let retry_after = *retry_after;
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, retry_after.to_string())],
            axum::Json(json!({"ok": false, "error": "ratelimited"})),
        )
            .into_response();
    }
    let wanted = if method == "apps.connections.open" {
        FakeSlack::APP_TOKEN
    } else {
        FakeSlack::BOT_TOKEN
    };
    match token.as_deref() {
        None | Some("") => return fail("not_authed"),
        Some(t) if t == wanted => {}
        Some(t) if t == FakeSlack::APP_TOKEN || t == FakeSlack::BOT_TOKEN => {
            return fail("not_allowed_token_type");
        }
        Some(_) => return fail("invalid_auth"),
    }
    match method.as_str() {
        "auth.test" => ok(json!({
            "url": "https://test.slack.com/",
            "team": TEAM_NAME,
            "user": BOT_NAME,
            "team_id": TEAM_ID,
            "user_id": FakeSlack::BOT_USER_ID,
            "bot_id": BOT_ID,
            "is_enterprise_install": false,
        })),
        "apps.connections.open" => {
            let n = inner.next();
            let ticket = format!("ticket-{n}");
            inner.tickets.push(ticket.clone());
            ok(json!({"url": format!("ws://{addr}/socket?ticket={ticket}&app_id={APP_ID}")}))
        }
        "chat.postMessage" => post_message(&mut inner, &params),
        "chat.update" => update_message(&mut inner, &params),
        "chat.postEphemeral" => {
            let (Some(channel), Some(user), Some(text)) = (
                str_param(&params, "channel"),
                str_param(&params, "user"),
                str_param(&params, "text"),
            ) else {
                return fail("invalid_arguments");
            };
            if !channel_ok(channel) {
                return fail("channel_not_found");
            }
            // A DM channel `D{user}` has only that user (and the bot) in it.
            if channel.starts_with('D') && channel != format!("D{user}") {
                return fail("user_not_in_channel");
            }
            let thread = str_param(&params, "thread_ts").map(str::to_owned);
            inner
                .ephemerals
                .push((channel.to_owned(), user.to_owned(), text.to_owned(), thread));
            let ts = inner.ts();
            ok(json!({"message_ts": ts}))
        }
        "users.info" => {
            let Some(user) = str_param(&params, "user") else {
                return fail("user_not_found");
            };
            match inner.users.get(user) {
                Some((display, real)) => ok(json!({"user": {
                    "id": user, "team_id": TEAM_ID, "name": user.to_lowercase(), "real_name": real,
                    "is_bot": false, "profile": {"display_name": display, "real_name": real},
                }})),
                None => fail("user_not_found"),
            }
        }
        "reactions.add" => {
            let (Some(channel), Some(ts), Some(name)) = (
                str_param(&params, "channel"),
                str_param(&params, "timestamp"),
                str_param(&params, "name"),
            ) else {
                return fail("invalid_arguments");
            };
            let r = (channel.to_owned(), ts.to_owned(), name.to_owned());
            if inner.message(channel, ts).is_none() && !channel_ok(channel) {
                return fail("channel_not_found");
            }
            if inner.reactions.contains(&r) {
                return fail("already_reacted");
            }
            inner.reactions.push(r);
            ok(json!({}))
        }
        _ => fail("unknown_method"),
    }
}

fn str_param<'a>(params: &'a Map<String, Value>, name: &str) -> Option<&'a str> {
    params
        .get(name)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn channel_ok(channel: &str) -> bool {
    channel.len() > 1 && ["C", "D", "G"].iter().any(|p| channel.starts_with(p))
}

/// The `blocks` parameter (an array, or a JSON-encoded array in a form), checked.
fn blocks_param(params: &Map<String, Value>) -> Result<Option<Value>, &'static str> {
    let blocks = match params.get("blocks") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(s)) => {
            serde_json::from_str::<Value>(s).map_err(|_| "invalid_blocks_format")?
        }
        Some(v) => v.clone(),
    };
    let list = blocks.as_array().ok_or("invalid_blocks_format")?;
    if list.len() > MAX_BLOCKS {
        return Err("invalid_blocks");
    }
    let len = |v: Option<&Value>| v.and_then(Value::as_str).map(|s| s.chars().count());
    for b in list {
        match b.get("type").and_then(Value::as_str) {
            Some("section") => {
                let n = len(b.pointer("/text/text")).ok_or("invalid_blocks")?;
                if n == 0 || n > MAX_SECTION {
                    return Err("invalid_blocks");
                }
            }
            Some("header") => {
                let n = len(b.pointer("/text/text")).ok_or("invalid_blocks")?;
                if n == 0 || n > MAX_HEADER || b.pointer("/text/type") != Some(&json!("plain_text"))
                {
                    return Err("invalid_blocks");
                }
            }
            Some("divider") => {}
            Some("actions") => {
                let elements = b
                    .get("elements")
                    .and_then(Value::as_array)
                    .ok_or("invalid_blocks")?;
                if elements.is_empty() || elements.len() > MAX_ELEMENTS {
                    return Err("invalid_blocks");
                }
                for e in elements {
                    let n = len(e.pointer("/text/text")).ok_or("invalid_blocks")?;
                    let id = len(e.get("action_id")).unwrap_or(0);
                    if n == 0 || n > MAX_BUTTON_TEXT || id == 0 || id > 255 {
                        return Err("invalid_blocks");
                    }
                }
                let mut ids: Vec<&str> = elements
                    .iter()
                    .filter_map(|e| e.get("action_id").and_then(Value::as_str))
                    .collect();
                ids.sort_unstable();
                ids.dedup();
                if ids.len() != elements.len() {
                    return Err("invalid_blocks");
                }
            }
            _ => return Err("invalid_blocks"),
        }
    }
    // action ids are unique across the message, too
    let mut all: Vec<&str> = list
        .iter()
        .filter_map(|b| b.get("elements").and_then(Value::as_array))
        .flatten()
        .filter_map(|e| e.get("action_id").and_then(Value::as_str))
        .collect();
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    if all.len() != n {
        return Err("invalid_blocks");
    }
    Ok(Some(blocks))
}

fn buttons_of(blocks: &Value) -> Vec<(String, String)> {
    blocks
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("actions"))
        .filter_map(|b| b.get("elements").and_then(Value::as_array))
        .flatten()
        .filter(|e| e.get("type").and_then(Value::as_str) == Some("button"))
        .map(|e| {
            let s = |p: &str| {
                e.pointer(p)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            (s("/text/text"), s("/value"))
        })
        .collect()
}

fn post_message(inner: &mut Inner, params: &Map<String, Value>) -> Response {
    let Some(channel) = str_param(params, "channel") else {
        return fail("channel_not_found");
    };
    if !channel_ok(channel) {
        return fail("channel_not_found");
    }
    let blocks = match blocks_param(params) {
        Ok(b) => b,
        Err(e) => return fail(e),
    };
    let text = str_param(params, "text").unwrap_or_default().to_owned();
    if text.trim().is_empty() && blocks.is_none() {
        return fail("no_text");
    }
    if text.chars().count() > 40_000 {
        return fail("msg_too_long");
    }
    let ts = inner.ts();
    let blocks = blocks.unwrap_or_else(|| json!([]));
    let msg = SlackMessage {
        ts: ts.clone(),
        thread_ts: str_param(params, "thread_ts").map(str::to_owned),
        text: text.clone(),
        buttons: buttons_of(&blocks),
        blocks: blocks.clone(),
        updates: 0,
    };
    let mut message = json!({
        "type": "message",
        "user": FakeSlack::BOT_USER_ID,
        "bot_id": BOT_ID,
        "text": text,
        "ts": ts,
        "blocks": blocks,
    });
    if let Some(t) = &msg.thread_ts {
        message["thread_ts"] = json!(t);
    }
    let channel = channel.to_owned();
    inner.messages.entry(channel.clone()).or_default().push(msg);
    ok(json!({"channel": channel, "ts": ts, "message": message}))
}

fn update_message(inner: &mut Inner, params: &Map<String, Value>) -> Response {
    let (Some(channel), Some(ts)) = (str_param(params, "channel"), str_param(params, "ts")) else {
        return fail("message_not_found");
    };
    if !channel_ok(channel) {
        return fail("channel_not_found");
    }
    let blocks = match blocks_param(params) {
        Ok(b) => b,
        Err(e) => return fail(e),
    };
    let text = str_param(params, "text").map(str::to_owned);
    if text.as_deref().is_none_or(|t| t.trim().is_empty()) && blocks.is_none() {
        return fail("no_text");
    }
    let Some(msg) = inner
        .messages
        .get_mut(channel)
        .and_then(|m| m.iter_mut().find(|m| m.ts == ts))
    else {
        return fail("message_not_found");
    };
    if let Some(text) = text {
        msg.text = text;
    }
    if let Some(blocks) = blocks {
        msg.buttons = buttons_of(&blocks);
        msg.blocks = blocks;
    }
    msg.updates += 1;
    let (channel, ts, text) = (channel.to_owned(), msg.ts.clone(), msg.text.clone());
    ok(json!({"channel": channel, "ts": ts, "text": text}))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn form_params_decode() {
        let headers = HeaderMap::new();
        let p = params(&headers, Some("channel=C1"), b"text=a%20b+c").unwrap();
        assert_eq!(p["channel"], "C1");
        assert_eq!(p["text"], "a b c");
    }

    #[test]
    fn blocks_are_checked() {
        let mut p = Map::new();
        p.insert(
            "blocks".into(),
            json!([{"type": "section", "text": {"type": "mrkdwn", "text": "x".repeat(3001)}}]),
        );
        assert_eq!(blocks_param(&p), Err("invalid_blocks"));
        let many: Vec<Value> = (0..51).map(|_| json!({"type": "divider"})).collect();
        p.insert("blocks".into(), json!(many));
        assert_eq!(blocks_param(&p), Err("invalid_blocks"));
        p.insert("blocks".into(), json!([{"type": "divider"}]));
        assert!(blocks_param(&p).unwrap().is_some());
    }
}
