//! Socket Mode: the websocket that carries envelopes to the app and their acks back.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{APP_ID, Cmd, Shared};

pub(super) type AppState = (Arc<Shared>, SocketAddr);

pub(super) async fn socket(
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
                Some(Cmd::Freeze) => {
                    // Open, and nothing flows either way: not even a ping is read (so none
                    // is answered). Unread, the client's close goes unseen too: the session
                    // ends when the fake does.
                    let _ = shutdown.wait_for(|stop| *stop).await;
                    break;
                }
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
