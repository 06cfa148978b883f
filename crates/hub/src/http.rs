//! Remote ACP over HTTP on `/v1/acp`, beside the WebSocket: the streamable HTTP transport
//! of ACP's remote-transport RFD ("streamable-http-websocket-transport", the draft the
//! official SDKs implement as of their 2026 releases).
//!
//! - `POST` of `initialize` makes a connection: the answer is `200` with the JSON-RPC
//!   result and `Acp-Connection-Id`. Every other message is `POST`ed with that header (and
//!   `Acp-Session-Id` for a method of an open session) and answered `202`; the agent's
//!   answers and messages come on the streams.
//! - `GET` with `Accept: text/event-stream` and `Acp-Connection-Id` is the connection's
//!   stream; with `Acp-Session-Id` too, that session's. A session's stream carries its
//!   updates, the agent's requests about it and the answers to its methods; the answers to
//!   `session/new`, `load` and `resume` (which name the session first) and the rest come on
//!   the connection's.
//! - Each stream numbers its events (`id:`); a `GET` with `Last-Event-ID` resumes after
//!   it (Switchboard's addition: the RFD leaves resumption to a later version), from the
//!   last [`KEPT`] events of the stream; older is `410 gone` (`session/load` rebuilds).
//! - `DELETE` with `Acp-Connection-Id` ends the connection; a connection with no stream
//!   open and no request for [`IDLE`] ends by itself.
//!
//! Behind it is the same agent as `switchboard acp` ([`crate::serve`]) on a line transport,
//! acting with the token of the request that made the connection; every later request must
//! carry the same token.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;
use switchboard_client::Client as Api;
use switchboard_http::ApiError;
use tokio::sync::{Notify, mpsc, oneshot};

use crate::HubOptions;

pub(crate) const CONNECTION_ID: &str = "acp-connection-id";
pub(crate) const SESSION_ID: &str = "acp-session-id";
/// Events each stream keeps for `Last-Event-ID`.
pub(crate) const KEPT: usize = 4096;
/// At most this many bytes of events are kept a stream (the oldest go first).
pub(crate) const KEPT_BYTES: usize = 8 * 1024 * 1024;
/// A connection with no stream open and no request this long is ended.
pub(crate) const IDLE: Duration = Duration::from_secs(600);
/// How long `initialize` waits for the agent's answer.
const INITIALIZE_TIMEOUT: Duration = Duration::from_secs(30);
/// Messages taken from the client and not yet read by the agent.
const INBOX: usize = 256;

/// Methods of an open session: their POST names it in `Acp-Session-Id` (the RFD's list).
const SESSION_METHODS: [&str; 5] = [
    "session/set_mode",
    "session/set_config_option",
    "session/prompt",
    "session/cancel",
    "session/close",
];

/// One stream's events, numbered, the last [`KEPT`] kept.
#[derive(Default)]
struct Outbound {
    events: Mutex<OutboundState>,
    notify: Notify,
    /// A GET has opened it: until then a session's messages go on the connection's stream
    /// (a client opens a session's stream once it sees the session named there).
    subscribed: AtomicBool,
}

#[derive(Default)]
struct OutboundState {
    next: u64,
    kept: VecDeque<(u64, Arc<str>)>,
    /// Bytes of `kept`.
    bytes: usize,
    /// The session was closed or deleted: the stream ends once what it has is read.
    closed: bool,
    /// The newest event a stream has been given (a new stream without `Last-Event-ID`
    /// starts after it).
    sent: u64,
    /// Bumped by each new GET: an older one stops.
    generation: u64,
}

impl Outbound {
    fn push(&self, line: Arc<str>) {
        let mut s = self.events.lock();
        s.next += 1;
        let id = s.next;
        s.bytes += line.len();
        s.kept.push_back((id, line));
        while s.kept.len() > KEPT || (s.bytes > KEPT_BYTES && s.kept.len() > 1) {
            if let Some((_, old)) = s.kept.pop_front() {
                s.bytes -= old.len();
            }
        }
        drop(s);
        self.notify.notify_waiters();
    }

    /// No more events: a reader ends after the last.
    fn close(&self) {
        self.events.lock().closed = true;
        self.notify.notify_waiters();
    }
}

/// Where the answer to a request of a session goes, and whether it ends the session here
/// (`session/close`, `session/delete`: its stream is dropped once the answer is on it).
struct Route {
    session: String,
    ends: bool,
}

/// One ACP connection over HTTP.
pub(crate) struct Connection {
    /// The token it acts with: every request on it must carry the same.
    token: String,
    /// Taken when the connection ends: the agent's input closes and it stops.
    inbox: Mutex<Option<mpsc::Sender<String>>>,
    ended: AtomicBool,
    main: Outbound,
    sessions: Mutex<HashMap<String, Arc<Outbound>>>,
    /// Requests of an open session, by JSON-RPC id: their answers go on its stream.
    routes: Mutex<HashMap<String, Route>>,
    /// `initialize`'s answer, awaited by its POST.
    init: Mutex<Option<(String, oneshot::Sender<String>)>>,
    /// Streams open, and when anything last came.
    open_streams: Mutex<usize>,
    touched: Mutex<Instant>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

fn id_key(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::Null => None,
        other => Some(other.to_string()),
    }
}

fn session_of(v: Option<&serde_json::Value>) -> Option<String> {
    v?.get("sessionId")?.as_str().map(str::to_owned)
}

impl Connection {
    fn session(&self, id: &str) -> Arc<Outbound> {
        self.sessions
            .lock()
            .entry(id.to_owned())
            .or_default()
            .clone()
    }

    /// The stream of session `id` once a client reads it, else none (the connection's).
    fn read_session(&self, id: &str) -> Option<Arc<Outbound>> {
        self.sessions
            .lock()
            .get(id)
            .filter(|o| o.subscribed.load(Ordering::Acquire))
            .cloned()
    }

    /// Every stream ends (their GETs return) and the agent's input closes.
    fn finish(&self) {
        self.ended.store(true, Ordering::Release);
        self.inbox.lock().take();
        self.main.notify.notify_waiters();
        for o in self.sessions.lock().values() {
            o.notify.notify_waiters();
        }
    }

    /// Where one of the agent's messages goes (the RFD's routing).
    fn route(&self, line: String) {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(&line) else {
            self.main.push(line.into());
            return;
        };
        let is_response = msg.get("method").is_none() && msg.get("id").is_some();
        if is_response {
            let key = msg.get("id").and_then(id_key);
            if let Some(key) = &key {
                let mut init = self.init.lock();
                if init.as_ref().is_some_and(|(k, _)| k == key)
                    && let Some((_, tx)) = init.take()
                {
                    let _ = tx.send(line);
                    return;
                }
            }
            if let Some(established) = session_of(msg.get("result")) {
                // session/new (and any answer naming a session): the client opens its
                // stream on seeing it, here.
                self.session(&established);
                self.main.push(line.into());
                return;
            }
            let routed = key.and_then(|k| self.routes.lock().remove(&k));
            let stream = routed.as_ref().and_then(|r| self.read_session(&r.session));
            match &stream {
                Some(stream) => stream.push(line.into()),
                None => self.main.push(line.into()),
            }
            // (A refused close or delete leaves the session open here.)
            if let Some(r) = routed.filter(|r| r.ends && msg.get("result").is_some())
                && let Some(out) = self.sessions.lock().remove(&r.session)
            {
                out.close();
            }
            return;
        }
        let stream = session_of(msg.get("params")).and_then(|s| self.read_session(&s));
        match stream {
            Some(stream) => stream.push(line.into()),
            None => self.main.push(line.into()),
        }
    }

    fn touch(&self) {
        *self.touched.lock() = Instant::now();
    }
}

/// The open connections of this server.
#[derive(Default)]
pub(crate) struct Connections {
    by_id: Mutex<HashMap<String, Arc<Connection>>>,
}

impl Connections {
    fn get(&self, headers: &HeaderMap) -> Result<Arc<Connection>, ApiError> {
        let id = header_str(headers, CONNECTION_ID).ok_or_else(|| {
            ApiError::custom(
                400,
                "missing_connection_id",
                "send the `Acp-Connection-Id` that `initialize` answered with",
            )
        })?;
        let conn = self.by_id.lock().get(id).cloned();
        // Another caller's connection is not there for this one.
        match conn {
            Some(c) if switchboard_http::check_bearer(headers, &c.token).is_ok() => {
                c.touch();
                Ok(c)
            }
            _ => Err(ApiError::custom(
                404,
                "connection_not_found",
                "no ACP connection of that id (it ended, or the server restarted): initialize again",
            )),
        }
    }

    fn end(&self, id: &str) {
        let Some(conn) = self.by_id.lock().remove(id) else {
            return;
        };
        conn.finish();
        // The agent stops once its input closes; one that does not within a few seconds
        // is stopped (its sessions are closed all the same: see `serve`).
        if let Some(task) = conn.task.lock().take() {
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(5)).await;
                task.abort();
            });
        }
    }
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
}

/// `POST /v1/acp`: one JSON-RPC message.
pub(crate) async fn post(
    conns: Arc<Connections>,
    api_url: String,
    token: String,
    opts: HubOptions,
    headers: HeaderMap,
    body: bytes::Bytes,
) -> Response {
    let json = header_str(&headers, header::CONTENT_TYPE.as_str())
        .is_some_and(|v| v.to_ascii_lowercase().starts_with("application/json"));
    if !json {
        return ApiError::custom(
            415,
            "unsupported_media_type",
            "POST /v1/acp takes one JSON-RPC message: `Content-Type: application/json`",
        )
        .into_response();
    }
    let msg: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return ApiError::custom(400, "invalid_json", format!("not JSON: {e}")).into_response();
        }
    };
    if msg.is_array() {
        return ApiError::custom(
            400,
            "batch_not_supported",
            "one JSON-RPC message per POST (batches are not supported)",
        )
        .into_response();
    }
    if !msg.is_object() {
        return ApiError::custom(400, "invalid_message", "not a JSON-RPC message (an object)")
            .into_response();
    }
    let method = msg
        .get("method")
        .and_then(|m| m.as_str())
        .map(str::to_owned);
    let id = msg.get("id").and_then(id_key);
    if method.as_deref() == Some("initialize") && id.is_some() {
        return initialize(conns, api_url, token, opts, body, id.unwrap_or_default()).await;
    }
    let conn = match conns.get(&headers) {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    let session = header_str(&headers, SESSION_ID).map(str::to_owned);
    if method
        .as_deref()
        .is_some_and(|m| SESSION_METHODS.contains(&m))
        && session.is_none()
    {
        return ApiError::custom(
            400,
            "missing_session_id",
            format!(
                "{} needs the `Acp-Session-Id` header",
                method.unwrap_or_default()
            ),
        )
        .into_response();
    }
    if let Some(s) = &session
        && !conn.sessions.lock().contains_key(s)
    {
        return ApiError::custom(
            404,
            "session_not_found",
            format!("session {s} is not open on this connection"),
        )
        .into_response();
    }
    match (method.as_deref(), &id, session_of(msg.get("params"))) {
        // They open a session here: its stream is ready for the client's GET (which may
        // come first), and their answers come on the connection's stream.
        (Some("session/load" | "session/resume"), _, Some(s)) => {
            conn.session(&s);
        }
        (Some(m), Some(id), Some(s)) => {
            let ends = matches!(m, "session/close" | "session/delete");
            conn.routes
                .lock()
                .insert(id.clone(), Route { session: s, ends });
        }
        _ => {}
    }
    let line = String::from_utf8_lossy(&body).replace('\n', " ");
    let inbox = conn.inbox.lock().clone();
    let sent = match inbox {
        Some(tx) => tx.send(line).await.is_ok(),
        None => false,
    };
    if !sent {
        conns.end(header_str(&headers, CONNECTION_ID).unwrap_or_default());
        return ApiError::custom(
            404,
            "connection_not_found",
            "the ACP connection ended: initialize again",
        )
        .into_response();
    }
    StatusCode::ACCEPTED.into_response()
}

async fn initialize(
    conns: Arc<Connections>,
    api_url: String,
    token: String,
    opts: HubOptions,
    body: bytes::Bytes,
    id: String,
) -> Response {
    let api = match Api::new(api_url, Some(token.clone())) {
        Ok(api) => api,
        Err(e) => return ApiError::custom(500, "internal", e.to_string()).into_response(),
    };
    let (inbox, rx) = mpsc::channel::<String>(INBOX);
    let (init_tx, init_rx) = oneshot::channel();
    let conn = Arc::new(Connection {
        token,
        inbox: Mutex::new(Some(inbox)),
        ended: AtomicBool::new(false),
        main: Outbound::default(),
        sessions: Mutex::new(HashMap::new()),
        routes: Mutex::new(HashMap::new()),
        init: Mutex::new(Some((id, init_tx))),
        open_streams: Mutex::new(0),
        touched: Mutex::new(Instant::now()),
        task: Mutex::new(None),
    });
    let conn_id = uuid::Uuid::new_v4().simple().to_string();
    let out = conn.clone();
    let sink = futures::sink::unfold((), move |(), line: String| {
        out.route(line);
        futures::future::ready(Ok::<(), io::Error>(()))
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|line| (Ok::<String, io::Error>(line), rx))
    });
    let transport = agent_client_protocol::Lines::new(Box::pin(sink), Box::pin(stream));
    let (registry, cid) = (conns.clone(), conn_id.clone());
    let task = tokio::spawn(async move {
        if let Err(e) = crate::serve(api, opts, transport).await {
            tracing::info!(error = %e, "ACP HTTP connection ended");
        }
        registry.end(&cid);
    });
    *conn.task.lock() = Some(task);
    conns.by_id.lock().insert(conn_id.clone(), conn.clone());
    reap_when_idle(conns.clone(), conn_id.clone(), conn.clone());
    let inbox = conn.inbox.lock().clone();
    if let Some(tx) = inbox {
        let _ = tx
            .send(String::from_utf8_lossy(&body).replace('\n', " "))
            .await;
    }
    match tokio::time::timeout(INITIALIZE_TIMEOUT, init_rx).await {
        Ok(Ok(answer)) => {
            let mut resp = ([(header::CONTENT_TYPE, "application/json")], answer).into_response();
            if let Ok(v) = HeaderValue::from_str(&conn_id) {
                resp.headers_mut().insert(CONNECTION_ID, v);
            }
            tracing::info!(connection = %conn_id, "ACP connection over HTTP");
            resp
        }
        _ => {
            conns.end(&conn_id);
            ApiError::custom(
                504,
                "initialize_timeout",
                "the agent did not answer initialize",
            )
            .into_response()
        }
    }
}

/// Ends the connection once it has had no stream open and no request for [`IDLE`].
fn reap_when_idle(conns: Arc<Connections>, id: String, conn: Arc<Connection>) {
    let weak = Arc::downgrade(&conn);
    drop(conn);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(IDLE / 10).await;
            let Some(conn) = weak.upgrade() else { return };
            if *conn.open_streams.lock() == 0 && conn.touched.lock().elapsed() >= IDLE {
                tracing::info!(connection = %id, "ACP HTTP connection idle: ended");
                conns.end(&id);
                return;
            }
        }
    });
}

/// `GET /v1/acp` with `Accept: text/event-stream`: a connection's or a session's stream.
pub(crate) fn stream(conns: &Connections, headers: &HeaderMap) -> Response {
    let conn = match conns.get(headers) {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    let out = match header_str(headers, SESSION_ID) {
        // A client may open a session's stream before the request that opens the session.
        Some(s) => conn.session(s),
        None => {
            // The connection's own stream, as an Arc for the body below.
            return events(conn.clone(), None, headers);
        }
    };
    events(conn, Some(out), headers)
}

fn events(conn: Arc<Connection>, session: Option<Arc<Outbound>>, headers: &HeaderMap) -> Response {
    let last = header_str(headers, "last-event-id").and_then(|v| v.trim().parse::<u64>().ok());
    let (start, generation) = {
        let out = session.as_deref().unwrap_or(&conn.main);
        let mut s = out.events.lock();
        let oldest = s.kept.front().map(|(id, _)| *id).unwrap_or(s.next + 1);
        if let Some(last) = last
            && last.saturating_add(1) < oldest
            && last < s.next
        {
            return ApiError::custom(
                410,
                "gone",
                format!("events after {last} are no longer kept (the last {KEPT} are): session/load the session again"),
            )
            .into_response();
        }
        s.generation += 1;
        out.subscribed.store(true, Ordering::Release);
        let start = (last.unwrap_or(s.sent), s.generation);
        drop(s);
        // The stream this one replaces stops.
        out.notify.notify_waiters();
        start
    };
    *conn.open_streams.lock() += 1;
    let guard = StreamGuard(conn.clone());
    let body = futures::stream::unfold(
        (guard, session, start),
        move |(guard, session, mut after)| async move {
            loop {
                let next = {
                    let out = session.as_deref().unwrap_or(&guard.0.main);
                    let notified = out.notify.notified();
                    let found = {
                        let mut s = out.events.lock();
                        if s.generation != generation || guard.0.ended.load(Ordering::Acquire) {
                            // A newer GET of this stream took over.
                            return None;
                        }
                        let found = s.kept.iter().find(|(id, _)| *id > after).cloned();
                        if let Some((id, _)) = &found {
                            s.sent = s.sent.max(*id);
                        } else if s.closed {
                            // The session ended here and everything was read.
                            return None;
                        }
                        found
                    };
                    if found.is_none() {
                        notified.await;
                    }
                    found
                };
                if let Some((id, line)) = next {
                    after = id;
                    let event = Event::default().id(id.to_string()).data(&*line);
                    return Some((Ok::<Event, Infallible>(event), (guard, session, after)));
                }
            }
        },
    );
    Sse::new(body)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// Counts a stream open while its body lives.
struct StreamGuard(Arc<Connection>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let mut n = self.0.open_streams.lock();
        *n = n.saturating_sub(1);
        drop(n);
        self.0.touch();
    }
}

/// `DELETE /v1/acp`: ends the connection.
pub(crate) fn delete(conns: &Connections, headers: &HeaderMap) -> Response {
    match conns.get(headers) {
        Ok(_) => {
            conns.end(header_str(headers, CONNECTION_ID).unwrap_or_default());
            StatusCode::ACCEPTED.into_response()
        }
        Err(e) => e.into_response(),
    }
}
