//! ACP over the network: `GET /v1/acp` upgrades to a WebSocket that carries the same agent
//! as `switchboard acp`, one JSON-RPC message per text frame; and [`bridge`], the other end
//! for an editor that can only launch a command (`switchboard acp --url wss://…`): stdio
//! lines to frames and back.

use std::io;

use axum::Router;
use axum::extract::State;
use axum::extract::ws::{
    Message, WebSocket, WebSocketUpgrade, rejection::WebSocketUpgradeRejection,
};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::{SinkExt, StreamExt};
use switchboard_client::Client as Api;
use switchboard_http::{ApiError, BearerToken};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::{HubError, HubOptions};

/// Largest JSON-RPC message taken from a WebSocket (a prompt with an image inside).
const MAX_MESSAGE_BYTES: usize = 32 * 1024 * 1024;

#[derive(Clone)]
struct WsState {
    /// Where the hub reaches the API (the server itself), and with what token.
    api_url: String,
    token: String,
    opts: HubOptions,
    /// The connections over HTTP ([`crate::http`]).
    conns: std::sync::Arc<crate::http::Connections>,
}

/// The OpenAPI document of `/v1/acp` (merged into the server's `/openapi.json`).
#[derive(utoipa::OpenApi)]
#[openapi(
    paths(acp, acp_post, acp_delete),
    components(schemas(switchboard_protocol::ErrorBody))
)]
pub struct HubDoc;

/// `GET /v1/acp`, behind `token` (the console's cookie is turned into it in front of every
/// route). The agent behind it reaches the API at `api_url`.
pub fn router(api_url: impl Into<String>, token: impl Into<String>, opts: HubOptions) -> Router {
    let token = token.into();
    let state = WsState {
        api_url: api_url.into(),
        token: token.clone(),
        opts,
        conns: Default::default(),
    };
    Router::new()
        .route("/v1/acp", get(acp).post(acp_post).delete(acp_delete))
        .route_layer(axum::middleware::from_fn_with_state(
            BearerToken::new(token),
            switchboard_http::require_bearer,
        ))
        .with_state(state)
}

/// The Agent Client Protocol over a WebSocket: the connection upgrades (101) and then
/// carries JSON-RPC, one message per text frame, with Switchboard as the agent — the same
/// agent as `switchboard acp` (see the README's "Editors over ACP").
#[utoipa::path(get, path = "/v1/acp", tag = "hub", security(("bearer" = ["sessions:write"])),
    params(("agent" = Option<String>, Query, description = "The `[agents.NAME]` this connection's new sessions run (default: the server's default backend)"),
        ("Accept" = Option<String>, Header, description = "`text/event-stream` for an event stream of a connection over HTTP"),
        ("Acp-Connection-Id" = Option<String>, Header, description = "The connection whose stream this is (over HTTP)"),
        ("Acp-Session-Id" = Option<String>, Header, description = "The session whose stream this is (over HTTP; without it, the connection's)"),
        ("Last-Event-ID" = Option<String>, Header, description = "Resume the stream after this event")),
    responses(
        (status = 101, description = "Switching Protocols: the connection is a WebSocket carrying ACP"),
        (status = 200, description = "With `Accept: text/event-stream`: the stream (`text/event-stream`), each event one JSON-RPC message with its `id`"),
        (status = 400, description = "`missing_connection_id`", body = switchboard_protocol::ErrorBody),
        (status = 404, description = "`connection_not_found` or `session_not_found`", body = switchboard_protocol::ErrorBody),
        (status = 410, description = "`gone`: the events after `Last-Event-ID` are no longer kept", body = switchboard_protocol::ErrorBody),
        (status = 426, description = "`upgrade_required`: neither a WebSocket handshake nor an event stream", body = switchboard_protocol::ErrorBody)))]
async fn acp(
    State(mut state): State<WsState>,
    extensions: axum::http::Extensions,
    headers: axum::http::HeaderMap,
    query: Result<
        axum::extract::Query<std::collections::HashMap<String, String>>,
        axum::extract::rejection::QueryRejection,
    >,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    if let Err(e) = caller(&mut state, &extensions, &headers) {
        return e.into_response();
    }
    if let Some(agent) = query.ok().and_then(|q| q.0.get("agent").cloned()) {
        state.opts.agent = Some(agent).filter(|a| !a.is_empty());
    }
    let upgrade = match upgrade {
        Ok(u) => u,
        Err(_) if wants_events(&headers) => return crate::http::stream(&state.conns, &headers),
        Err(e) => {
            return ApiError::custom(
                426,
                "upgrade_required",
                format!("GET /v1/acp is a WebSocket carrying ACP; this request is not a WebSocket handshake ({e})"),
            )
            .into_response();
        }
    };
    upgrade
        .max_message_size(MAX_MESSAGE_BYTES)
        .on_upgrade(move |socket| async move {
            let api = match Api::new(state.api_url.clone(), Some(state.token.clone())) {
                Ok(api) => api,
                Err(e) => {
                    tracing::error!(error = %e, "the ACP endpoint cannot reach the API");
                    return;
                }
            };
            tracing::info!("ACP connection over WebSocket");
            if let Err(e) = crate::serve(api, state.opts.clone(), transport(socket)).await {
                tracing::info!(error = %e, "ACP WebSocket connection ended");
            }
        })
}

/// The agent acts as the caller: a person's own token reaches what they may (their
/// sessions, their scopes), never more. The console's cookie and chat identities are
/// refused (ACP takes a bearer token).
/// The connection acts with the caller's own token ([`crate::bearer_token`]).
fn caller(
    state: &mut WsState,
    extensions: &axum::http::Extensions,
    headers: &axum::http::HeaderMap,
) -> Result<(), ApiError> {
    if let Some(token) = crate::bearer_token("ACP", extensions, headers)? {
        state.token = token;
    }
    Ok(())
}

fn wants_events(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get(axum::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"))
}

/// ACP over streamable HTTP: one JSON-RPC message. `initialize` makes a connection and is
/// answered at once (`Acp-Connection-Id`); every other message is taken (`202`) and
/// answered on the connection's or the session's event stream (`GET /v1/acp` with
/// `Accept: text/event-stream`). See docs/editors.md "Remote ACP over HTTP".
#[utoipa::path(post, path = "/v1/acp", tag = "hub", security(("bearer" = ["sessions:write"])),
    params(
        ("agent" = Option<String>, Query, description = "The `[agents.NAME]` this connection's new sessions run (with `initialize`)"),
        ("Acp-Connection-Id" = Option<String>, Header, description = "The connection (every message but `initialize`)"),
        ("Acp-Session-Id" = Option<String>, Header, description = "The session, for a method of an open session (`session/prompt`, `cancel`, `set_mode`, `set_config_option`, `close`)")),
    request_body(content = serde_json::Value, content_type = "application/json", description = "One JSON-RPC 2.0 message"),
    responses(
        (status = 200, description = "`initialize`'s answer (JSON-RPC), with the `Acp-Connection-Id` header"),
        (status = 202, description = "Taken: the answer comes on a stream"),
        (status = 400, description = "`invalid_json`, `invalid_message`, `batch_not_supported` (an array: the RFD's 501, which HTTP tooling reads as a server fault), `missing_connection_id` or `missing_session_id`", body = switchboard_protocol::ErrorBody),
        (status = 403, description = "`forbidden`: not a bearer token", body = switchboard_protocol::ErrorBody),
        (status = 404, description = "`connection_not_found` (ended, another caller's, or the server restarted) or `session_not_found` (not open on this connection)", body = switchboard_protocol::ErrorBody),
        (status = 415, description = "`unsupported_media_type`: not JSON", body = switchboard_protocol::ErrorBody),
        (status = 504, description = "`initialize_timeout`", body = switchboard_protocol::ErrorBody)))]
async fn acp_post(
    State(mut state): State<WsState>,
    extensions: axum::http::Extensions,
    headers: axum::http::HeaderMap,
    query: Result<
        axum::extract::Query<std::collections::HashMap<String, String>>,
        axum::extract::rejection::QueryRejection,
    >,
    body: bytes::Bytes,
) -> Response {
    if let Err(e) = caller(&mut state, &extensions, &headers) {
        return e.into_response();
    }
    if let Some(agent) = query.ok().and_then(|q| q.0.get("agent").cloned()) {
        state.opts.agent = Some(agent).filter(|a| !a.is_empty());
    }
    crate::http::post(
        state.conns,
        state.api_url,
        state.token,
        state.opts,
        headers,
        body,
    )
    .await
}

/// Ends an ACP connection over HTTP.
#[utoipa::path(delete, path = "/v1/acp", tag = "hub", security(("bearer" = ["sessions:write"])),
    params(("Acp-Connection-Id" = String, Header, description = "The connection")),
    responses(
        (status = 202, description = "Ended"),
        (status = 400, description = "`missing_connection_id`", body = switchboard_protocol::ErrorBody),
        (status = 404, description = "`connection_not_found`", body = switchboard_protocol::ErrorBody)))]
async fn acp_delete(State(state): State<WsState>, headers: axum::http::HeaderMap) -> Response {
    crate::http::delete(&state.conns, &headers)
}

/// A WebSocket as the protocol crate's line transport: each text frame is one message.
fn transport(
    socket: WebSocket,
) -> agent_client_protocol::Lines<
    impl futures::Sink<String, Error = io::Error> + Send + 'static,
    impl futures::Stream<Item = io::Result<String>> + Send + 'static,
> {
    let (sink, stream) = socket.split();
    let sink = sink.sink_map_err(io::Error::other).with(|line: String| {
        futures::future::ready(Ok::<_, io::Error>(Message::Text(line.into())))
    });
    let stream = stream
        .take_while(|m| futures::future::ready(!matches!(m, Ok(Message::Close(_)))))
        .filter_map(|m| {
            futures::future::ready(match m {
                Ok(Message::Text(t)) => Some(Ok(t.to_string())),
                Ok(Message::Binary(b)) => Some(
                    String::from_utf8(b.to_vec())
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
                ),
                Ok(_) => None,
                Err(e) => Some(Err(io::Error::other(e))),
            })
        });
    agent_client_protocol::Lines::new(Box::pin(sink), Box::pin(stream))
}

/// `switchboard acp --url ws(s)://HOST/v1/acp`: this process's stdin lines become text
/// frames and text frames become stdout lines, until either side closes.
pub async fn bridge(url: &str, token: Option<&str>) -> Result<(), HubError> {
    use tokio_tungstenite::tungstenite::{Message as T, client::IntoClientRequest};
    let mut request = url
        .into_client_request()
        .map_err(|e| HubError::Protocol(format!("{url}: {e}")))?;
    if let Some(t) = token {
        let value = format!("Bearer {t}")
            .parse()
            .map_err(|_| HubError::Protocol("the token is not a valid header value".into()))?;
        request.headers_mut().insert("authorization", value);
    }
    let (socket, _) = tokio_tungstenite::connect_async(request)
        .await
        .map_err(|e| HubError::Protocol(format!("connecting to {url}: {e}")))?;
    let (mut tx, mut rx) = socket.split();
    let up = async {
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        while let Some(line) = lines
            .next_line()
            .await
            .map_err(|e| HubError::Protocol(format!("reading stdin: {e}")))?
        {
            if line.trim().is_empty() {
                continue;
            }
            tx.send(T::Text(line.into()))
                .await
                .map_err(|e| HubError::Protocol(format!("sending: {e}")))?;
        }
        let _ = tx.send(T::Close(None)).await;
        Ok::<(), HubError>(())
    };
    let down = async {
        let mut out = tokio::io::stdout();
        while let Some(msg) = rx.next().await {
            let text = match msg.map_err(|e| HubError::Protocol(format!("receiving: {e}")))? {
                T::Text(t) => t.to_string(),
                T::Binary(b) => String::from_utf8_lossy(&b).into_owned(),
                T::Close(_) => break,
                _ => continue,
            };
            let mut line = text.replace('\n', " ");
            line.push('\n');
            out.write_all(line.as_bytes())
                .await
                .map_err(|e| HubError::Protocol(format!("writing stdout: {e}")))?;
            out.flush()
                .await
                .map_err(|e| HubError::Protocol(format!("writing stdout: {e}")))?;
        }
        Ok::<(), HubError>(())
    };
    // Stdin closing sends a Close; the answers still on their way are written until the
    // server closes its side. The server closing ends the bridge at once.
    tokio::pin!(up, down);
    tokio::select! {
        r = &mut down => r,
        r = &mut up => {
            r?;
            down.await
        }
    }
}
