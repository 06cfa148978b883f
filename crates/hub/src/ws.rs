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
}

/// The OpenAPI document of `/v1/acp` (merged into the server's `/openapi.json`).
#[derive(utoipa::OpenApi)]
#[openapi(paths(acp), components(schemas(switchboard_protocol::ErrorBody)))]
pub struct HubDoc;

/// `GET /v1/acp`, behind `token` (the console's cookie is turned into it in front of every
/// route). The agent behind it reaches the API at `api_url`.
pub fn router(api_url: impl Into<String>, token: impl Into<String>, opts: HubOptions) -> Router {
    let token = token.into();
    let state = WsState {
        api_url: api_url.into(),
        token: token.clone(),
        opts,
    };
    Router::new()
        .route("/v1/acp", get(acp))
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
    params(("agent" = Option<String>, Query, description = "The `[agents.NAME]` this connection's new sessions run (default: the server's default backend)")),
    responses(
        (status = 101, description = "Switching Protocols: the connection is a WebSocket carrying ACP"),
        (status = 426, description = "`upgrade_required`: not a WebSocket handshake", body = switchboard_protocol::ErrorBody)))]
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
    // The agent acts as the caller: a person's own token reaches what they may (their
    // sessions, their scopes), never more.
    use switchboard_protocol::people::{Credential, Principal};
    match extensions.get::<Principal>().map(|p| p.credential) {
        Some(Credential::Token) => match switchboard_http::bearer_value(&headers) {
            Ok(t) => state.token = t.to_string(),
            Err(e) => return e.into_response(),
        },
        Some(Credential::Console | Credential::Chat) => {
            return ApiError::custom(
                403,
                "forbidden",
                "ACP takes a bearer token: the server's, or a personal token (`switchboard tokens create`)",
            )
            .into_response();
        }
        Some(Credential::ServerToken) | None => {}
    }
    if let Some(agent) = query.ok().and_then(|q| q.0.get("agent").cloned()) {
        state.opts.agent = Some(agent).filter(|a| !a.is_empty());
    }
    let upgrade = match upgrade {
        Ok(u) => u,
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
