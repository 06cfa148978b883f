//! The A2A v1.0 JSON-RPC binding as a client: the Agent Card, unary calls, and the SSE
//! streams of `SendStreamingMessage` and `SubscribeToTask`.
//!
//! Written by hand on `reqwest` rather than taken from a crate: of the Rust A2A crates,
//! `ra2a` still calls the pre-1.0 methods (`message/send`), and `a2a-rust` (0.1) streams
//! only over the HTTP+JSON binding, which Switchboard's own A2A server does not serve. What
//! is needed here is small — four methods, proto3 JSON read as `serde_json::Value` — and the
//! SSE framing is the client crate's parser.

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use switchboard_client::sse::{DEFAULT_MAX_FRAME_BYTES, SseParser};

/// The protocol version sent in `A2A-Version` and looked for in the card.
pub const PROTOCOL_VERSION: &str = "1.0";
/// How long a fetched Agent Card is trusted before it is read again.
const CARD_TTL: Duration = Duration::from_secs(300);
/// The most a unary answer may weigh.
const MAX_BODY: usize = 16 * 1024 * 1024;
/// How long a response may be silent before it is taken as broken.
const READ_IDLE: Duration = Duration::from_secs(300);

/// Where and how a remote agent is reached.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct A2aAgent {
    /// The agent's base URL (its card is at `/.well-known/agent-card.json` under it), or
    /// the card's own URL.
    pub url: String,
    /// Sent as `Authorization: Bearer …` with every request, the card's included.
    pub token: Option<String>,
    /// More headers sent with every request (an API key header, say).
    pub headers: Vec<(String, String)>,
}

/// The credentials shown as `[redacted]`.
impl std::fmt::Debug for A2aAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("A2aAgent")
            .field("url", &self.url)
            .field("token", &self.token.as_ref().map(|_| "[redacted]"))
            .field("headers", &names)
            .finish()
    }
}

/// Why a call to the remote agent failed. Messages never carry the credentials.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("cannot reach {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("{url} answered HTTP {status}{hint}")]
    Status {
        url: String,
        status: u16,
        hint: &'static str,
    },
    #[error("{0}")]
    Protocol(String),
    /// The agent answered with a JSON-RPC error.
    #[error("the agent refused {method}: {message} (code {code})")]
    Rpc {
        method: &'static str,
        code: i64,
        message: String,
    },
}

impl WireError {
    /// Worth trying again later: the agent was unreachable or failed on its side.
    pub fn retryable(&self) -> bool {
        match self {
            Self::Unreachable { .. } => true,
            Self::Status { status, .. } => *status >= 500 || *status == 429,
            Self::Protocol(_) | Self::Rpc { .. } => false,
        }
    }
}

/// The JSON-RPC endpoint the card names, whether the agent streams, and when the card was
/// read.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub url: reqwest::Url,
    pub streaming: bool,
    read_at: Instant,
}

/// A client of one remote agent.
pub struct Remote {
    agent: A2aAgent,
    http: reqwest::Client,
    endpoint: parking_lot::Mutex<Option<Endpoint>>,
}

impl Remote {
    pub fn new(agent: A2aAgent) -> Result<Self, WireError> {
        let mut headers = reqwest::header::HeaderMap::new();
        let bad = |what: &str| {
            WireError::Protocol(format!("the configured {what} is not a valid header"))
        };
        for (k, v) in &agent.headers {
            let name = reqwest::header::HeaderName::from_bytes(k.as_bytes()).map_err(|_| bad(k))?;
            let mut value = reqwest::header::HeaderValue::from_str(v).map_err(|_| bad(k))?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        if let Some(t) = &agent.token {
            let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {t}"))
                .map_err(|_| bad("token"))?;
            value.set_sensitive(true);
            headers.insert(reqwest::header::AUTHORIZATION, value);
        }
        headers.insert(
            "A2A-Version",
            reqwest::header::HeaderValue::from_static(PROTOCOL_VERSION),
        );
        let http = reqwest::Client::builder()
            .default_headers(headers)
            .connect_timeout(Duration::from_secs(10))
            // A task may stream for as long as it works: no overall timeout (a run's cancel
            // ends the wait), but a stream silent this long is taken as broken (SSE servers
            // send keep-alive comments far more often).
            .read_timeout(READ_IDLE)
            // The credentials go to the configured agent only: no redirect is followed (one
            // to another host would keep custom headers), and the card's interface must be
            // on the card's own origin.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| WireError::Protocol(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            agent,
            http,
            endpoint: parking_lot::Mutex::new(None),
        })
    }

    /// The card's URL: the configured one if it names a JSON document, else the well-known
    /// path under it.
    fn card_url(&self) -> Result<reqwest::Url, WireError> {
        let url = reqwest::Url::parse(&self.agent.url).map_err(|e| {
            WireError::Protocol(format!(
                "the agent's url {:?} does not parse: {e}",
                self.agent.url
            ))
        })?;
        if url.path().ends_with(".json") {
            return Ok(url);
        }
        let mut base = url;
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        base.join(".well-known/agent-card.json")
            .map_err(|e| WireError::Protocol(format!("the card's url: {e}")))
    }

    /// The JSON-RPC endpoint, from the card (read again after [`CARD_TTL`] or
    /// [`Remote::forget_endpoint`]).
    pub async fn endpoint(&self) -> Result<Endpoint, WireError> {
        if let Some(e) = self.endpoint.lock().as_ref()
            && e.read_at.elapsed() < CARD_TTL
        {
            return Ok(e.clone());
        }
        let card_url = self.card_url()?;
        let card = self.get_json(card_url.clone()).await?;
        let url = jsonrpc_interface(&card, &card_url)?;
        let streaming = card
            .get("capabilities")
            .and_then(|c| c.get("streaming"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let e = Endpoint {
            url,
            streaming,
            read_at: Instant::now(),
        };
        *self.endpoint.lock() = Some(e.clone());
        Ok(e)
    }

    /// Makes the next call read the card again (after a failure that may mean it moved).
    pub fn forget_endpoint(&self) {
        *self.endpoint.lock() = None;
    }

    async fn get_json(&self, url: reqwest::Url) -> Result<Value, WireError> {
        let resp = self
            .http
            .get(url.clone())
            .send()
            .await
            .map_err(|e| unreachable(&url, &e))?;
        let resp = check_status(&url, resp)?;
        read_json(&url, resp).await
    }

    /// A unary JSON-RPC call: its `result`, or the agent's error.
    pub async fn call(&self, method: &'static str, params: Value) -> Result<Value, WireError> {
        let url = self.endpoint().await?.url;
        let resp = self
            .http
            .post(url.clone())
            .json(&request(method, params))
            .send()
            .await
            .map_err(|e| unreachable(&url, &e))?;
        let resp = check_status(&url, resp)?;
        let body = read_json(&url, resp).await?;
        result_of(method, body)
    }

    /// A streaming JSON-RPC call: each event's `result` (a `StreamResponse`) as it arrives.
    /// An agent that answers with plain JSON instead gives that one result.
    pub async fn stream(
        &self,
        method: &'static str,
        params: Value,
    ) -> Result<futures::stream::BoxStream<'static, Result<Value, WireError>>, WireError> {
        let url = self.endpoint().await?.url;
        let resp = self
            .http
            .post(url.clone())
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .json(&request(method, params))
            .send()
            .await
            .map_err(|e| unreachable(&url, &e))?;
        let resp = check_status(&url, resp)?;
        let is_sse = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !is_sse {
            let body = read_json(&url, resp).await?;
            let one = result_of(method, body);
            return Ok(futures::stream::once(async move { one }).boxed());
        }
        let bytes = resp.bytes_stream();
        let state = (bytes, SseParser::new(DEFAULT_MAX_FRAME_BYTES), url);
        Ok(
            futures::stream::unfold(Some(state), move |state| async move {
                let (mut bytes, mut parser, url) = state?;
                loop {
                    if let Some(frame) = parser.next_frame() {
                        let item = serde_json::from_str::<Value>(&frame.data)
                            .map_err(|e| {
                                WireError::Protocol(format!("an event from {url} is not JSON: {e}"))
                            })
                            .and_then(|v| result_of(method, v));
                        let done = item.is_err();
                        return Some((item, (!done).then_some((bytes, parser, url))));
                    }
                    match bytes.next().await {
                        Some(Ok(chunk)) => {
                            if let Err(e) = parser.feed(&chunk) {
                                return Some((
                                    Err(WireError::Protocol(format!("{url}: {e}"))),
                                    None,
                                ));
                            }
                        }
                        Some(Err(e)) => return Some((Err(unreachable(&url, &e)), None)),
                        None => return None,
                    }
                }
            })
            .boxed(),
        )
    }
}

fn request(method: &str, params: Value) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": uuid::Uuid::new_v4().to_string(),
        "method": method,
        "params": params,
    })
}

/// The `result` of a JSON-RPC response, or its error.
fn result_of(method: &'static str, mut body: Value) -> Result<Value, WireError> {
    if let Some(err) = body.get("error").filter(|e| !e.is_null()) {
        return Err(WireError::Rpc {
            method,
            code: err.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: err
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("no message")
                .chars()
                .take(500)
                .collect(),
        });
    }
    match body.get_mut("result") {
        Some(r) => Ok(r.take()),
        None => Err(WireError::Protocol(format!(
            "the answer to {method} has neither result nor error"
        ))),
    }
}

fn unreachable(url: &reqwest::Url, e: &reqwest::Error) -> WireError {
    // The innermost cause ("Connection refused"): reqwest's own text repeats the URL, whose
    // query could carry a key.
    let mut cause: &dyn std::error::Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    let mut reason = cause.to_string();
    if e.is_timeout() {
        reason = "timed out".into();
    }
    WireError::Unreachable {
        url: origin(url),
        reason,
    }
}

fn check_status(
    url: &reqwest::Url,
    resp: reqwest::Response,
) -> Result<reqwest::Response, WireError> {
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    let hint = match status.as_u16() {
        401 | 403 => ": check the agent's token or headers",
        404 => ": check the agent's url",
        _ => "",
    };
    Err(WireError::Status {
        url: origin(url),
        status: status.as_u16(),
        hint,
    })
}

async fn read_json(url: &reqwest::Url, resp: reqwest::Response) -> Result<Value, WireError> {
    let mut body = Vec::new();
    let mut bytes = resp.bytes_stream();
    while let Some(chunk) = bytes.next().await {
        let chunk = chunk.map_err(|e| unreachable(url, &e))?;
        if body.len() + chunk.len() > MAX_BODY {
            return Err(WireError::Protocol(format!(
                "{} answered more than {} MB",
                origin(url),
                MAX_BODY >> 20
            )));
        }
        body.extend_from_slice(&chunk);
    }
    serde_json::from_slice(&body).map_err(|e| {
        WireError::Protocol(format!(
            "{} answered something other than JSON: {e}",
            origin(url)
        ))
    })
}

/// A URL without its query or credentials: what messages show of it.
fn origin(url: &reqwest::Url) -> String {
    let mut shown = url.clone();
    shown.set_query(None);
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.to_string()
}

/// The card's JSON-RPC interface of protocol 1.x, its URL resolved against the card's.
fn jsonrpc_interface(card: &Value, card_url: &reqwest::Url) -> Result<reqwest::Url, WireError> {
    let interfaces = card
        .get("supportedInterfaces")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let found = interfaces.iter().find(|i| {
        let binding = i
            .get("protocolBinding")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let version = i
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or("1.0");
        binding.eq_ignore_ascii_case("JSONRPC") && version.starts_with("1.")
    });
    let Some(url) = found.and_then(|i| i.get("url")).and_then(Value::as_str) else {
        let offered: Vec<String> = interfaces
            .iter()
            .map(|i| {
                format!(
                    "{} {}",
                    i.get("protocolBinding")
                        .and_then(Value::as_str)
                        .unwrap_or("?"),
                    i.get("protocolVersion")
                        .and_then(Value::as_str)
                        .unwrap_or("?")
                )
            })
            .collect();
        return Err(WireError::Protocol(format!(
            "the Agent Card at {} offers no A2A 1.x JSON-RPC interface (it offers: [{}])",
            origin(card_url),
            offered.join(", ")
        )));
    };
    let joined = card_url
        .join(url)
        .map_err(|e| WireError::Protocol(format!("the card's interface url {url:?}: {e}")))?;
    if joined.origin() != card_url.origin() {
        // The credentials would go there too: only the configured agent gets them.
        return Err(WireError::Protocol(format!(
            "the Agent Card at {} names its JSON-RPC interface on another origin ({}); \
             configure that URL as the agent's `a2a` if it is to be trusted with the credentials",
            origin(card_url),
            origin(&joined)
        )));
    }
    Ok(joined)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_card_names_the_jsonrpc_interface() {
        let card_url = reqwest::Url::parse("http://h:1/a/.well-known/agent-card.json").unwrap();
        let card = json!({"supportedInterfaces": [
            {"url": "http://h:1/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
            {"url": "http://h:1/old", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
            {"url": "/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        ]});
        assert_eq!(
            jsonrpc_interface(&card, &card_url).unwrap().as_str(),
            "http://h:1/rpc"
        );
        let rest_only = json!({"supportedInterfaces": [
            {"url": "http://h:1/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
        ]});
        let e = jsonrpc_interface(&rest_only, &card_url)
            .unwrap_err()
            .to_string();
        assert!(e.contains("HTTP+JSON 1.0"), "{e}");
    }

    #[test]
    fn the_card_url_is_under_the_base_unless_given() {
        let at = |u: &str| {
            Remote::new(A2aAgent {
                url: u.into(),
                ..A2aAgent::default()
            })
            .unwrap()
            .card_url()
            .unwrap()
            .to_string()
        };
        assert_eq!(at("http://h/x"), "http://h/x/.well-known/agent-card.json");
        assert_eq!(at("http://h/"), "http://h/.well-known/agent-card.json");
        assert_eq!(at("http://h/card.json"), "http://h/card.json");
    }

    #[test]
    fn errors_and_results_are_read_from_the_envelope() {
        let e = result_of("CancelTask", json!({"jsonrpc": "2.0", "id": "1", "error": {"code": -32001, "message": "Task not found"}}))
            .unwrap_err();
        assert!(matches!(e, WireError::Rpc { code: -32001, .. }), "{e}");
        assert_eq!(
            result_of(
                "GetTask",
                json!({"jsonrpc": "2.0", "id": "1", "result": {"id": "t"}})
            )
            .unwrap(),
            json!({"id": "t"})
        );
        let shown = origin(&reqwest::Url::parse("http://u:p@h/rpc?key=secret").unwrap());
        assert!(
            !shown.contains("secret") && !shown.contains("u:p"),
            "{shown}"
        );
    }
}
