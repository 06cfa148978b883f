//! A fake signal-cli daemon (`signal-cli -a ACCOUNT daemon --http --receive-mode manual`)
//! on real TCP (`127.0.0.1:0`), written from signal-cli-jsonrpc(5), signal-cli(1) and the
//! daemon's source (HttpServerHandler, SignalJsonRpcCommandHandler, ReceiveCommand):
//! `POST /api/v1/rpc` (single JSON-RPC 2.0 requests, `Content-Type: application/json` or
//! 415; errors answered 200 with an `error` object; methods `version`, `listGroups`,
//! `getUserStatus`, `receive` with `timeout` (seconds) and `maxMessages` answering a list of
//! `{"account", "envelope"}`, `send` with `recipient` / `groupId`, `message`, `attachments`
//! as RFC 2397 data URIs whose `filename=` is URL-decoded, `editTimestamp`; `getAttachment`
//! answering `{"data": BASE64}`) and `GET /api/v1/check`.
//!
//! In manual receive mode messages wait on Signal's servers until a `receive` call takes
//! them: here, in a queue; a call waits up to its timeout for one. Errors are signal-cli's:
//! `-32601` for an unknown method, `-1` for a bad request, and `-5` "Failed to send message
//! due to rate limiting" with the results' `retryAfterSeconds` in `data.response` — while
//! [`FakeSignal::rate_limit`]'s bucket is empty or [`FakeSignal::throttle`] says so.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use parking_lot::Mutex;
use serde_json::{Value, json};

/// One message the bot sent, as it stands now.
#[derive(Debug, Clone, PartialEq)]
pub struct SignalSent {
    pub timestamp: u64,
    /// The recipient's uuid or number, or the group id.
    pub to: String,
    pub text: String,
    /// Texts of its edits, in order.
    pub edits: Vec<String>,
    /// (file name, content) of its attachments.
    pub attachments: Vec<(String, Vec<u8>)>,
}

#[derive(Default)]
struct Inner {
    sent: Vec<SignalSent>,
    /// Attachments people sent: id → bytes.
    files: std::collections::HashMap<String, Vec<u8>>,
    /// Messages waiting for a `receive` call.
    queue: VecDeque<Value>,
    /// `receive` calls under way.
    receiving: u32,
    last_ts: u64,
    throttle: u32,
    limited: u32,
    bucket: Option<crate::gcra::Gcra>,
    send_times: Vec<Instant>,
    receives: u32,
}

struct Shared {
    inner: Mutex<Inner>,
    arrived: tokio::sync::Notify,
}

/// The fake daemon; see the module docs.
pub struct FakeSignal {
    addr: SocketAddr,
    state: Arc<Shared>,
    shutdown: tokio::sync::watch::Sender<bool>,
}

impl Drop for FakeSignal {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

impl Inner {
    /// A message timestamp, strictly increasing (Signal's message ids).
    fn ts(&mut self) -> u64 {
        self.last_ts = now_ms().max(self.last_ts + 1);
        self.last_ts
    }
}

/// Someone who writes to the bot.
#[derive(Debug, Clone)]
pub struct SignalUser {
    pub number: String,
    pub uuid: String,
    pub name: String,
}

impl SignalUser {
    pub fn new(number: &str, uuid: &str, name: &str) -> Self {
        Self {
            number: number.into(),
            uuid: uuid.into(),
            name: name.into(),
        }
    }
}

impl FakeSignal {
    pub const ACCOUNT: &'static str = "+15550100199";
    pub const ACCOUNT_UUID: &'static str = "0b0b0b0b-0000-4000-8000-00000000b0a7";

    pub async fn start() -> FakeSignal {
        let state = Arc::new(Shared {
            inner: Mutex::new(Inner::default()),
            arrived: tokio::sync::Notify::new(),
        });
        let app = Router::new()
            .route("/api/v1/rpc", post(rpc))
            .route("/api/v1/check", get(|| async { StatusCode::OK }))
            .with_state(state.clone());
        let (listener, addr) = crate::serve::bind("fake signal-cli").await;
        let (shutdown, stop) = tokio::sync::watch::channel(false);
        crate::serve::spawn(listener, app, stop);
        FakeSignal {
            addr,
            state,
            shutdown,
        }
    }

    /// The daemon's `--http` address.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Delivers an envelope from `from` with `data_message` (its `timestamp` filled in);
    /// returns the message's timestamp.
    pub fn deliver(&self, from: &SignalUser, mut data_message: Value) -> u64 {
        let mut s = self.state.inner.lock();
        let ts = s.ts();
        data_message["timestamp"] = json!(ts);
        let event = json!({"account": Self::ACCOUNT, "envelope": {
            "source": from.number, "sourceNumber": from.number, "sourceUuid": from.uuid,
            "sourceName": from.name, "sourceDevice": 1, "timestamp": ts,
            "serverReceivedTimestamp": ts, "serverDeliveredTimestamp": ts,
            "dataMessage": data_message}});
        s.queue.push_back(event);
        drop(s);
        self.state.arrived.notify_waiters();
        ts
    }

    /// A direct message.
    pub fn dm(&self, from: &SignalUser, text: &str) -> u64 {
        self.deliver(
            from,
            json!({"message": text, "expiresInSeconds": 0, "viewOnce": false}),
        )
    }

    /// A message quoting `quote` (a message of the bot's).
    pub fn reply(&self, from: &SignalUser, quote: u64, text: &str) -> u64 {
        self.deliver(from, json!({"message": text, "quote": {"id": quote,
            "authorNumber": Self::ACCOUNT, "authorUuid": Self::ACCOUNT_UUID, "text": "", "attachments": []}}))
    }

    /// A message in group `group`, mentioning the bot first when `mention`.
    pub fn group_message(&self, from: &SignalUser, group: &str, text: &str, mention: bool) -> u64 {
        let mut data = json!({"message": text, "groupInfo": {"groupId": group, "groupName": "Team", "revision": 1, "type": "DELIVER"}});
        if mention {
            data["message"] = json!(format!("\u{fffc} {text}"));
            data["mentions"] = json!([{"name": "Switchboard", "number": Self::ACCOUNT,
                "uuid": Self::ACCOUNT_UUID, "start": 0, "length": 1}]);
        }
        self.deliver(from, data)
    }

    /// A reaction on the bot's message `target` (in `group`, if it is there: a group's
    /// reactions carry its `groupInfo`).
    pub fn react(&self, from: &SignalUser, group: Option<&str>, target: u64, emoji: &str) -> u64 {
        let mut data = json!({"reaction": {"emoji": emoji, "targetAuthorNumber": Self::ACCOUNT,
            "targetAuthorUuid": Self::ACCOUNT_UUID, "targetSentTimestamp": target, "isRemove": false}});
        if let Some(g) = group {
            data["groupInfo"] =
                json!({"groupId": g, "groupName": "Team", "revision": 1, "type": "DELIVER"});
        }
        self.deliver(from, data)
    }

    /// A message in `group` quoting the bot's message `quote`.
    pub fn group_reply(&self, from: &SignalUser, group: &str, quote: u64, text: &str) -> u64 {
        self.deliver(
            from,
            json!({"message": text,
            "groupInfo": {"groupId": group, "groupName": "Team", "revision": 1, "type": "DELIVER"},
            "quote": {"id": quote, "authorNumber": Self::ACCOUNT, "authorUuid": Self::ACCOUNT_UUID,
                "text": "", "attachments": []}}),
        )
    }

    /// A message with a file.
    pub fn send_file(
        &self,
        from: &SignalUser,
        name: &str,
        mime: &str,
        bytes: &[u8],
        text: &str,
    ) -> u64 {
        let id = {
            let mut s = self.state.inner.lock();
            let id = format!("att{}.bin", s.files.len() + 1);
            s.files.insert(id.clone(), bytes.to_vec());
            id
        };
        self.deliver(
            from,
            json!({"message": text, "attachments": [{"contentType": mime,
            "filename": name, "id": id, "size": bytes.len()}]}),
        )
    }

    /// What the bot sent to `to` (a uuid, number or group id), oldest first.
    pub fn sent_to(&self, to: &str) -> Vec<SignalSent> {
        self.state
            .inner
            .lock()
            .sent
            .iter()
            .filter(|m| m.to == to)
            .cloned()
            .collect()
    }

    /// Answers the next `n` sends "rate limited" (`retryAfterSeconds: 1`).
    pub fn throttle(&self, n: u32) {
        self.state.inner.lock().throttle = n;
    }

    /// Limits sends to `per_sec` a second in bursts of `burst` (answered -5 beyond).
    pub fn rate_limit(&self, per_sec: u32, burst: u32) {
        self.state.inner.lock().bucket = Some(crate::gcra::Gcra::per_second(per_sec, burst));
    }

    /// How many sends were answered "rate limited".
    pub fn limited(&self) -> u32 {
        self.state.inner.lock().limited
    }

    /// How many `receive` calls were made.
    pub fn receives(&self) -> u32 {
        self.state.inner.lock().receives
    }

    /// Waits until no `receive` call is under way (one that started before, say, the
    /// server was killed has run out): a message delivered then waits for the next one.
    pub async fn wait_not_receiving(&self) {
        while self.state.inner.lock().receiving > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn rpc_error(id: &Value, code: i64, message: &str, data: Value) -> Response {
    axum::Json(json!({"jsonrpc": "2.0", "error": {"code": code, "message": message, "data": data}, "id": id}))
        .into_response()
}

async fn rpc(State(state): State<Arc<Shared>>, headers: HeaderMap, body: String) -> Response {
    let json_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !json_type {
        return StatusCode::UNSUPPORTED_MEDIA_TYPE.into_response();
    }
    let Ok(req) = serde_json::from_str::<Value>(&body) else {
        return rpc_error(&Value::Null, -32700, "Parse error", Value::Null);
    };
    let id = req["id"].clone();
    let p = &req["params"];
    let ok = |result: Value| {
        axum::Json(json!({"jsonrpc": "2.0", "result": result, "id": id})).into_response()
    };
    match req["method"].as_str().unwrap_or_default() {
        "version" => ok(json!({"version": "0.13.22"})),
        "listGroups" => ok(json!([])),
        "getUserStatus" => ok(
            json!([{"recipient": FakeSignal::ACCOUNT, "number": FakeSignal::ACCOUNT,
            "uuid": FakeSignal::ACCOUNT_UUID, "isRegistered": true}]),
        ),
        "getAttachment" => {
            let file = state
                .inner
                .lock()
                .files
                .get(p["id"].as_str().unwrap_or_default())
                .cloned();
            match file {
                Some(b) => ok(json!({"data": base64::engine::general_purpose::STANDARD.encode(b)})),
                None => rpc_error(&id, -1, "Attachment file not found", Value::Null),
            }
        }
        "send" => send(&state, &id, p),
        "receive" => {
            let timeout = p["timeout"].as_f64().unwrap_or(3.0).clamp(0.0, 60.0);
            let max = p["maxMessages"].as_u64().unwrap_or(u64::MAX) as usize;
            ok(receive(&state, Duration::from_secs_f64(timeout), max).await)
        }
        _ => rpc_error(&id, -32601, "Method not implemented", Value::Null),
    }
}

fn send(state: &Shared, id: &Value, p: &Value) -> Response {
    let to = match (p["recipient"].as_array(), p["groupId"].as_str()) {
        (Some(r), None) if r.len() == 1 => r[0].as_str().unwrap_or_default().to_string(),
        (None, Some(g)) => g.to_string(),
        _ => return rpc_error(id, -1, "No recipients given", Value::Null),
    };
    let mut s = state.inner.lock();
    let now = Instant::now();
    let limited = if s.throttle > 0 {
        s.throttle -= 1;
        true
    } else if let Some(b) = s.bucket.as_mut() {
        b.take().is_some()
    } else {
        false
    };
    let ts = s.ts();
    if limited {
        s.limited += 1;
        return rpc_error(
            id,
            -5,
            "Failed to send message due to rate limiting",
            json!({"response": {"timestamp": ts, "results": [{"recipientAddress": {"uuid": to, "number": null},
                "type": "RATE_LIMIT_FAILURE", "retryAfterSeconds": 1}]}}),
        );
    }
    s.send_times.push(now);
    let text = p["message"].as_str().unwrap_or_default().to_string();
    if let Some(target) = p["editTimestamp"].as_u64() {
        let Some(m) = s
            .sent
            .iter_mut()
            .find(|m| m.timestamp == target && m.to == to)
        else {
            return rpc_error(id, -1, "Edit target not found", Value::Null);
        };
        m.text = text.clone();
        m.edits.push(text);
    } else {
        let mut attachments = Vec::new();
        for a in p["attachments"].as_array().into_iter().flatten() {
            // data:<mime>;filename=<name>;base64,<data>
            let uri = a.as_str().unwrap_or_default();
            let Some((head, data)) = uri.strip_prefix("data:").and_then(|u| u.split_once(','))
            else {
                return rpc_error(id, -1, "Attachment not found", Value::Null);
            };
            // signal-cli's DataURI reads each parameter through Java's URLDecoder.
            let Some(name) = head
                .split(';')
                .find_map(|part| part.strip_prefix("filename="))
                .map(|n| {
                    form_urlencoded::parse(format!("n={n}").as_bytes())
                        .next()
                        .map(|(_, v)| v.into_owned())
                        .unwrap_or_default()
                })
            else {
                return rpc_error(id, -1, "Invalid data URI", Value::Null);
            };
            let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(data) else {
                return rpc_error(id, -1, "Invalid data URI", Value::Null);
            };
            attachments.push((name, bytes));
        }
        s.sent.push(SignalSent {
            timestamp: ts,
            to: to.clone(),
            text,
            edits: Vec::new(),
            attachments,
        });
    }
    axum::Json(
        json!({"jsonrpc": "2.0", "result": {"timestamp": ts, "results": [
        {"recipientAddress": {"uuid": to, "number": null}, "type": "SUCCESS"}]}, "id": id}),
    )
    .into_response()
}

/// Takes up to `max` waiting messages, waiting up to `timeout` for the first.
async fn receive(state: &Shared, timeout: Duration, max: usize) -> Value {
    /// Counts the call as under way until it ends (or its client goes and it is dropped).
    struct Receiving<'a>(&'a Shared);
    impl Drop for Receiving<'_> {
        fn drop(&mut self) {
            self.0.inner.lock().receiving -= 1;
        }
    }
    {
        let mut s = state.inner.lock();
        s.receives += 1;
        s.receiving += 1;
    }
    let _under_way = Receiving(state);
    let deadline = tokio::time::Instant::now() + timeout;
    let taken = loop {
        let arrived = state.arrived.notified();
        {
            let mut s = state.inner.lock();
            if !s.queue.is_empty() {
                let n = s.queue.len().min(max);
                break s.queue.drain(..n).collect::<Vec<_>>();
            }
        }
        if tokio::time::timeout_at(deadline, arrived).await.is_err() {
            break Vec::new();
        }
    };
    Value::Array(taken)
}
