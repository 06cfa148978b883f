//! The Gateway websocket: HELLO, heartbeats, IDENTIFY/READY, RESUME and dispatches.

use std::sync::Arc;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{RawQuery, State};
use axum::response::Response;
use serde_json::{Value, json};

use super::wire::bot_user_json;
use super::{APPLICATION_ID, DEFAULT_HEARTBEAT, FakeDiscord, Session, Shared};

pub(super) async fn gateway(
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
