//! The WebSocket of the fake: `hello`, the events of the bot's channels with their `seq`,
//! the `ping` action.

use std::sync::Arc;

use axum::extract::State;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{FakeMattermost, Shared};

pub(super) async fn upgrade(
    State(state): State<Arc<Shared>>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Response {
    let auth = headers.get("authorization").and_then(|v| v.to_str().ok());
    if auth != Some(&format!("Bearer {}", FakeMattermost::TOKEN)) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    {
        let mut s = state.inner.lock();
        if s.ws_down {
            return StatusCode::SERVICE_UNAVAILABLE.into_response();
        }
        s.ws_connections += 1;
    }
    ws.on_upgrade(move |socket| connection(state, socket))
}

async fn connection(state: Arc<Shared>, mut socket: WebSocket) {
    let mut events = state.events.subscribe();
    let mut kick = state.kick.subscribe();
    kick.mark_unchanged();
    let mut seq = 0u64;
    let hello = json!({"event": "hello", "data": {"server_version": "9.11.0.9.11.0.fake.true"},
        "broadcast": {"omit_users": null, "user_id": FakeMattermost::BOT_ID, "channel_id": "", "team_id": ""}, "seq": seq});
    if socket
        .send(Message::Text(hello.to_string().into()))
        .await
        .is_err()
    {
        return;
    }
    loop {
        tokio::select! {
            _ = kick.changed() => {
                let _ = socket.send(Message::Close(None)).await;
                return;
            }
            e = events.recv() => {
                let Ok(mut event) = e else { return };
                let channel = event["broadcast"]["channel_id"].as_str().unwrap_or_default().to_string();
                let member = state.inner.lock().channels.get(&channel)
                    .is_some_and(|c| c.members.iter().any(|m| m == FakeMattermost::BOT_ID));
                if !member {
                    continue;
                }
                seq += 1;
                event["seq"] = json!(seq);
                if socket.send(Message::Text(event.to_string().into())).await.is_err() {
                    return;
                }
            }
            m = socket.recv() => {
                let text = match m {
                    Some(Ok(Message::Text(t))) => t,
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                    Some(Ok(_)) => continue,
                };
                let v: Value = serde_json::from_str(text.as_str()).unwrap_or_default();
                if v["action"] == "ping" {
                    let pong = json!({"status": "OK", "data": {"text": "pong", "version": "9.11.0"}, "seq_reply": v["seq"]});
                    if socket.send(Message::Text(pong.to_string().into())).await.is_err() {
                        return;
                    }
                }
            }
        }
    }
}
