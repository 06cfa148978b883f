//! A mock LLM server on real TCP (`127.0.0.1:0`) speaking two wire formats from one queue of
//! scripted [`MockReply`]s.
//!
//! - OpenAI chat completions: `POST /v1/chat/completions` (and `/chat/completions`) answers in
//!   the real streaming wire format (`data: {chunk}` frames, a finishing chunk, an optional usage
//!   chunk, `data: [DONE]`), or as one `chat.completion` object when the request did not ask for
//!   `stream: true`.
//! - Anthropic Messages: `POST /v1/messages` (and `/messages`) answers in the real streaming
//!   wire format (`event:` + `data:` frames: `message_start`, `content_block_start`, `ping`,
//!   `content_block_delta` with `text_delta` or `input_json_delta`, `content_block_stop`,
//!   `message_delta` with `stop_reason` `end_turn` or `tool_use` and usage, `message_stop`), or
//!   as one `message` object without `stream: true`. A [`MockReply::Status`] answer carries an
//!   Anthropic error object (`{"type":"error","error":{"type":…,"message":…}}`) unless the
//!   scripted body is already JSON; a 429 also carries `retry-after: 0`.
//!
//! Both routes take the next reply from the same queue (first in, first out), so a test can
//! script either client the same way. `GET /v1/models` lists `mock-model`. Every request is
//! recorded with its path ([`MockLlm::requests`]). The server shuts down when the [`MockLlm`]
//! is dropped; open streams are broken.

mod anthropic_wire;
mod reply;
mod wire;

use parking_lot::{Mutex, MutexGuard};
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::stream::{self, BoxStream, StreamExt};
use serde_json::{Value, json};
use tokio::sync::watch;

pub use reply::{MockReply, MockToolCall};
use wire::{Frame, RequestInfo};

/// One request the mock received.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// Path of the request, e.g. `/v1/chat/completions`.
    pub path: String,
    /// Headers, names lower-case, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The body as JSON; `Null` when empty, a JSON string when it is not JSON.
    pub body: Value,
}

impl RecordedRequest {
    /// The images of the request's last user message as `(mime, base64)`, in either wire
    /// form: chat-completions `image_url` parts with a `data:` URL, or Messages `image`
    /// blocks with a base64 source.
    pub fn images(&self) -> Vec<(String, String)> {
        let last_user = self.body["messages"]
            .as_array()
            .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"));
        let Some(parts) = last_user.and_then(|m| m["content"].as_array()) else {
            return Vec::new();
        };
        parts
            .iter()
            .filter_map(|p| match p["type"].as_str()? {
                "image_url" => {
                    let url = p["image_url"]["url"].as_str()?;
                    let (mime, data) = url.strip_prefix("data:")?.split_once(";base64,")?;
                    Some((mime.to_owned(), data.to_owned()))
                }
                "image" if p["source"]["type"] == "base64" => Some((
                    p["source"]["media_type"].as_str()?.to_owned(),
                    p["source"]["data"].as_str()?.to_owned(),
                )),
                _ => None,
            })
            .collect()
    }

    /// The text of the request's last user message (its text parts joined).
    pub fn last_user_text(&self) -> String {
        let last_user = self.body["messages"]
            .as_array()
            .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"));
        match last_user.map(|m| &m["content"]) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(parts)) => parts
                .iter()
                .filter(|p| p["type"] == "text")
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            _ => String::new(),
        }
    }

    /// The value of header `name` (case-insensitive), if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The mock server; see the module docs.
pub struct MockLlm {
    addr: SocketAddr,
    state: Arc<Shared>,
    shutdown: watch::Sender<bool>,
}

struct Shared {
    inner: Mutex<Inner>,
    shutdown: watch::Receiver<bool>,
}

/// Picks the reply to a request from the request itself (see [`MockLlm::set_responder`]).
type Responder = Arc<dyn Fn(&RecordedRequest) -> MockReply + Send + Sync>;

struct Inner {
    queue: VecDeque<MockReply>,
    default: MockReply,
    responder: Option<Responder>,
    requests: Vec<RecordedRequest>,
    /// What `/audio/transcriptions` answers (`None`: HTTP 500).
    transcript: Option<String>,
    transcriptions: Vec<Transcription>,
}

/// One call of the speech-to-text endpoint, as the mock received it.
#[derive(Debug, Clone, PartialEq)]
pub struct Transcription {
    pub model: String,
    pub file_name: String,
    pub content: Vec<u8>,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
}

impl Shared {
    /// The state, even if a panicking test thread poisoned the lock.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock()
    }
}

impl MockLlm {
    /// Starts the server on `127.0.0.1:0`.
    ///
    /// # Panics
    /// When no local port can be bound (test-only code: the test cannot go on anyway).
    pub async fn start() -> MockLlm {
        Self::start_on(0).await
    }

    /// Starts the server on `127.0.0.1:port` (a model server's usual port, say).
    ///
    /// # Panics
    /// When the port cannot be bound.
    pub async fn start_on(port: u16) -> MockLlm {
        let (listener, addr) = crate::serve::bind_port("mock LLM", port).await;
        let (shutdown, shutdown_rx) = watch::channel(false);
        let state = Arc::new(Shared {
            inner: Mutex::new(Inner {
                queue: VecDeque::new(),
                default: MockReply::default_text(),
                responder: None,
                requests: Vec::new(),
                transcript: Some("this is the mock transcript".into()),
                transcriptions: Vec::new(),
            }),
            shutdown: shutdown_rx.clone(),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/chat/completions", post(chat))
            .route("/v1/messages", post(messages))
            .route("/messages", post(messages))
            .route("/v1/audio/transcriptions", post(transcriptions))
            .route("/audio/transcriptions", post(transcriptions))
            .route("/v1/models", get(models))
            .route("/models", get(models))
            .fallback(not_found)
            // Real providers take requests of tens of MB (images inline, base64).
            .layer(axum::extract::DefaultBodyLimit::max(64 * 1024 * 1024))
            .with_state(state.clone());
        crate::serve::spawn(listener, app, shutdown_rx);
        MockLlm {
            addr,
            state,
            shutdown,
        }
    }

    /// What the speech-to-text endpoint answers from now on (`None`: HTTP 500).
    pub fn set_transcript(&self, text: Option<&str>) {
        self.state.lock().transcript = text.map(str::to_owned);
    }

    /// The calls of the speech-to-text endpoint so far.
    pub fn transcriptions(&self) -> Vec<Transcription> {
        self.state.lock().transcriptions.clone()
    }

    /// `http://127.0.0.1:PORT/v1`, the base URL an OpenAI client is configured with (an
    /// Anthropic client may use it too, or [`MockLlm::anthropic_base_url`]).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// `http://127.0.0.1:PORT`, the base URL an Anthropic client is configured with (it adds
    /// `/v1/messages`).
    pub fn anthropic_base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Queues `reply` for the next request (first in, first out).
    pub fn push(&self, reply: MockReply) {
        self.state.lock().queue.push_back(reply);
    }

    /// What to answer when the queue is empty (initially `"Hello from mock"` in 3 pieces).
    pub fn set_default(&self, reply: MockReply) {
        self.state.lock().default = reply;
    }

    /// Answers each request the queue has no reply for with `f(request)` instead of the
    /// default: for tests whose many concurrent sessions each need the reply that fits
    /// their own conversation (a queue shared by all of them would hand replies out in
    /// arrival order).
    pub fn set_responder(&self, f: impl Fn(&RecordedRequest) -> MockReply + Send + Sync + 'static) {
        self.state.lock().responder = Some(Arc::new(f));
    }

    /// Every request so far, in arrival order (chat completions, models, unknown paths).
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state.lock().requests.clone()
    }

    /// The chat-completions requests so far.
    pub fn chat_requests(&self) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.path.ends_with("/chat/completions"))
            .collect()
    }

    /// The Anthropic Messages requests so far.
    pub fn message_requests(&self) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.path.ends_with("/messages"))
            .collect()
    }

    /// Replies still queued.
    pub fn queued(&self) -> usize {
        self.state.lock().queue.len()
    }
}

impl Drop for MockLlm {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

impl std::fmt::Debug for MockLlm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockLlm").field("addr", &self.addr).finish()
    }
}

fn record(state: &Shared, uri: &Uri, headers: &HeaderMap, body: &[u8]) -> RecordedRequest {
    let body = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
    };
    let headers = headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let request = RecordedRequest {
        path: uri.path().to_owned(),
        headers,
        body,
    };
    state.lock().requests.push(request.clone());
    request
}

async fn chat(
    State(state): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request = record(&state, &uri, &headers, &body);
    let reply = next_reply(&state, &request);
    let body = request.body;
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let info = RequestInfo::from_body(&body, created);
    let shutdown = state.shutdown.clone();
    match reply {
        MockReply::Status { status, body } => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let ctype = if serde_json::from_str::<Value>(&body).is_ok() {
                "application/json"
            } else {
                "text/plain; charset=utf-8"
            };
            (status, [(header::CONTENT_TYPE, ctype)], body).into_response()
        }
        MockReply::Malformed => {
            let frames = vec![
                Frame {
                    delay: Duration::ZERO,
                    bytes: Bytes::from_static(b"data: {not json\n\n"),
                },
                Frame {
                    delay: Duration::ZERO,
                    bytes: Bytes::from_static(wire::DONE_FRAME),
                },
            ];
            event_stream(frames, End::Close, shutdown)
        }
        MockReply::CutOff { chunks } => {
            event_stream(wire::cut_off_frames(&info, &chunks), End::Abort, shutdown)
        }
        MockReply::Hang => event_stream(Vec::new(), End::Hang, shutdown),
        MockReply::StreamError { message } => event_stream(
            wire::stream_error_frames(&info, &message),
            End::Close,
            shutdown,
        ),
        reply if info.stream => match wire::stream_frames(&info, &reply) {
            Some(frames) => event_stream(frames, End::Close, shutdown),
            None => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        },
        reply => match wire::completion(&info, &reply) {
            Some(completion) => axum::Json(completion).into_response(),
            None => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        },
    }
}

/// The next queued reply, or the default.
fn next_reply(state: &Shared, request: &RecordedRequest) -> MockReply {
    let responder = {
        let mut inner = state.lock();
        if let Some(reply) = inner.queue.pop_front() {
            return reply;
        }
        match inner.responder.clone() {
            Some(r) => r,
            None => return inner.default.clone(),
        }
    };
    // Outside the lock: the responder may take its time.
    responder(request)
}

/// `POST /v1/messages`: the Anthropic Messages API.
async fn messages(
    State(state): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request = record(&state, &uri, &headers, &body);
    let reply = next_reply(&state, &request);
    let body = request.body;
    let info = anthropic_wire::MessagesRequest::from_body(&body);
    let shutdown = state.shutdown.clone();
    match reply {
        MockReply::Status { status, body } => {
            let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let body = anthropic_wire::error_body(code.as_u16(), &body);
            let mut response =
                (code, [(header::CONTENT_TYPE, "application/json")], body).into_response();
            if code == StatusCode::TOO_MANY_REQUESTS {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, header::HeaderValue::from_static("0"));
            }
            response
        }
        MockReply::Malformed => {
            event_stream(anthropic_wire::malformed_frames(), End::Close, shutdown)
        }
        MockReply::CutOff { chunks } => event_stream(
            anthropic_wire::cut_off_frames(&info, &chunks),
            End::Abort,
            shutdown,
        ),
        MockReply::Hang => event_stream(Vec::new(), End::Hang, shutdown),
        MockReply::StreamError { message } => event_stream(
            anthropic_wire::stream_error_frames(&info, &message),
            End::Close,
            shutdown,
        ),
        reply if info.stream => match anthropic_wire::stream_frames(&info, &reply) {
            Some(frames) => event_stream(frames, End::Close, shutdown),
            None => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        },
        reply => match anthropic_wire::message(&info, &reply) {
            Some(message) => axum::Json(message).into_response(),
            None => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        },
    }
}

/// The OpenAI speech-to-text endpoint: a multipart form with `file` and `model`; answers
/// `{"text": …}` (the transcript set by [`MockLlm::set_transcript`]).
async fn transcriptions(
    State(state): State<Arc<Shared>>,
    headers: HeaderMap,
    mut form: axum::extract::Multipart,
) -> Response {
    let mut t = Transcription {
        model: String::new(),
        file_name: String::new(),
        content: Vec::new(),
        authorization: headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
    };
    while let Ok(Some(field)) = form.next_field().await {
        match field.name().unwrap_or_default() {
            "model" => t.model = field.text().await.unwrap_or_default(),
            "file" => {
                t.file_name = field.file_name().unwrap_or_default().to_owned();
                t.content = field.bytes().await.map(|b| b.to_vec()).unwrap_or_default();
            }
            _ => {}
        }
    }
    if t.model.is_empty() || t.content.is_empty() {
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": {"message": "file and model are required"}})),
        )
            .into_response();
    }
    let answer = {
        let mut inner = state.lock();
        inner.transcriptions.push(t);
        inner.transcript.clone()
    };
    match answer {
        Some(text) => axum::Json(json!({ "text": text })).into_response(),
        None => (StatusCode::INTERNAL_SERVER_ERROR, "boom").into_response(),
    }
}

async fn models(State(state): State<Arc<Shared>>, uri: Uri, headers: HeaderMap) -> Response {
    record(&state, &uri, &headers, &[]);
    axum::Json(json!({"object": "list", "data": [{"id": "mock-model", "object": "model"}]}))
        .into_response()
}

async fn not_found(
    State(state): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    record(&state, &uri, &headers, &body);
    let error = json!({"error": {"message": format!("unknown path {}", uri.path()), "type": "invalid_request_error"}});
    (StatusCode::NOT_FOUND, axum::Json(error)).into_response()
}

/// How a streamed body ends after its frames.
#[derive(Debug, Clone, Copy)]
enum End {
    Close,
    /// Break the connection (no final chunk of the chunked encoding).
    Abort,
    /// Send nothing more until the mock shuts down.
    Hang,
}

/// A `text/event-stream` response sending `frames` (each after its delay), then ending as told.
/// Whatever it is doing, the body breaks off when the mock shuts down.
fn event_stream(frames: Vec<Frame>, end: End, shutdown: watch::Receiver<bool>) -> Response {
    let head = stream::iter(frames).then(|frame| async move {
        if !frame.delay.is_zero() {
            tokio::time::sleep(frame.delay).await;
        }
        Ok::<Bytes, io::Error>(frame.bytes)
    });
    let tail: BoxStream<'static, io::Result<Bytes>> = match end {
        End::Close => stream::empty().boxed(),
        End::Abort => stream::once(async {
            // let the frames already written reach the client before the connection dies
            tokio::time::sleep(Duration::from_millis(20)).await;
            Err(io::Error::other("mock LLM: stream cut off"))
        })
        .boxed(),
        End::Hang => stream::pending().boxed(),
    };
    let body = until_shutdown(head.chain(tail).boxed(), shutdown);
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(body),
    )
        .into_response()
}

/// `body`, broken off with an error as soon as the shutdown signal fires.
fn until_shutdown(
    body: BoxStream<'static, io::Result<Bytes>>,
    shutdown: watch::Receiver<bool>,
) -> impl futures::Stream<Item = io::Result<Bytes>> + Send + 'static {
    stream::unfold(Some((body, shutdown)), |state| async move {
        let (mut body, mut shutdown) = state?;
        let next = tokio::select! {
            item = body.next() => Some(item),
            _ = shutdown.wait_for(|stop| *stop) => None,
        };
        match next {
            Some(item) => item.map(|item| (item, Some((body, shutdown)))),
            None => Some((Err(io::Error::other("mock LLM shut down")), None)),
        }
    })
}
