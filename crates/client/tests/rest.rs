//! The plain request methods of `Client` against a fake `/v1` server on real TCP.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use switchboard_client::protocol::{
    CreateSessionRequest, DecisionAction, MessageType, RunStatus, SendMessageRequest, ToolDecision,
    ToolDecisionsRequest,
};
use switchboard_client::{Client, ClientError};
use tokio::net::TcpListener;
use uuid::Uuid;

const SESSION: Uuid = Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0001);
const RUN: Uuid = Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0002);

#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path_and_query: String,
    authorization: Option<String>,
    body: Vec<u8>,
}

#[derive(Default)]
struct Fake {
    seen: Mutex<Vec<Seen>>,
    /// When set, every route answers this status and body instead.
    override_reply: Mutex<Option<(u16, &'static str)>>,
}

impl Fake {
    fn last(&self) -> Seen {
        self.seen.lock().unwrap().last().cloned().unwrap()
    }

    fn last_body(&self) -> Value {
        serde_json::from_slice(&self.last().body).unwrap()
    }
}

async fn record(State(fake): State<Arc<Fake>>, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20).await.unwrap();
    fake.seen.lock().unwrap().push(Seen {
        method: parts.method.to_string(),
        path_and_query: parts
            .uri
            .path_and_query()
            .map(ToString::to_string)
            .unwrap_or_default(),
        authorization: parts
            .headers
            .get(header::AUTHORIZATION)
            .map(|v| v.to_str().unwrap().to_owned()),
        body: body.to_vec(),
    });
    if let Some((status, body)) = *fake.override_reply.lock().unwrap() {
        return (
            StatusCode::from_u16(status).unwrap(),
            [("x-request-id", "hdr-1")],
            body,
        )
            .into_response();
    }
    next.run(Request::from_parts(parts, axum::body::Body::from(body)))
        .await
}

fn summary() -> Value {
    json!({
        "id": SESSION, "title": "T", "cwd": "/w",
        "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:01Z",
        "run_status": "idle", "last_event_id": 3
    })
}

fn error(status: StatusCode, code: &str) -> Response {
    (
        status,
        axum::Json(
            json!({"error": format!("{code} happened"), "code": code, "request_id": "req-1"}),
        ),
    )
        .into_response()
}

fn app(fake: Arc<Fake>) -> Router {
    let session = |nil_is_missing: bool| {
        move |axum::extract::Path(id): axum::extract::Path<Uuid>| async move {
            if nil_is_missing && id.is_nil() {
                return error(StatusCode::NOT_FOUND, "session_not_found");
            }
            axum::Json(json!({"session": summary(), "config": {
                "backend": "builtin", "model": null,
                "permission_mode": "workspace-write", "auto_approve": "all"
            }}))
            .into_response()
        }
    };
    Router::new()
        .route(
            "/v1/health",
            get(|| async {
                axum::Json(json!({"status": "ok", "version": "0.1.0", "uptime_seconds": 3}))
            }),
        )
        .route(
            "/v1/sessions",
            post(|| async { (StatusCode::CREATED, axum::Json(summary())) })
                .get(|| async { axum::Json(json!({"sessions": [summary()], "total": 1})) }),
        )
        .route(
            "/v1/sessions/{id}",
            get(session(true)).delete(|| async { StatusCode::NO_CONTENT }),
        )
        .route(
            "/v1/sessions/{id}/messages",
            post(|| async { axum::Json(json!({"run_id": RUN})) })
                .get(|| async { axum::Json(json!({"messages": [], "total": 0})) }),
        )
        .route(
            "/v1/sessions/{id}/transcript.md",
            get(|| async { ([(header::CONTENT_TYPE, "text/markdown")], "# T\n\nhi ✓\n") }),
        )
        .route(
            "/v1/sessions/{id}/tools/pending",
            get(|| async { axum::Json(json!({"run_id": null, "tool_calls": []})) }),
        )
        .route(
            "/v1/sessions/{id}/tools/decisions",
            post(|| async { error(StatusCode::CONFLICT, "run_mismatch") }),
        )
        .route(
            "/v1/sessions/{id}/cancel",
            post(|body: Bytes| async move {
                let req: Value = serde_json::from_slice(&body).unwrap();
                axum::Json(json!({"cancelled": true, "run_id": req["run_id"]}))
            }),
        )
        .layer(middleware::from_fn_with_state(fake.clone(), record))
}

async fn start(token: Option<&str>) -> (Client, Arc<Fake>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/", listener.local_addr().unwrap());
    let fake = Arc::new(Fake::default());
    let router = app(fake.clone());
    tokio::spawn(async move { axum::serve(listener, router).await });
    (Client::new(base, token.map(str::to_owned)).unwrap(), fake)
}

#[tokio::test]
async fn every_endpoint_round_trips() {
    let (client, fake) = start(Some("secret")).await;

    let health = client.health().await.unwrap();
    assert_eq!((health.status.as_str(), health.uptime_seconds), ("ok", 3));
    assert_eq!(fake.last().authorization.as_deref(), Some("Bearer secret"));

    let req = CreateSessionRequest {
        title: Some("T".into()),
        ..Default::default()
    };
    let created = client.create_session(&req).await.unwrap();
    assert_eq!(
        (created.id, created.run_status, created.last_event_id),
        (SESSION, RunStatus::Idle, 3)
    );
    let seen = fake.last();
    assert_eq!(
        (seen.method.as_str(), seen.path_and_query.as_str()),
        ("POST", "/v1/sessions")
    );
    assert_eq!(fake.last_body(), json!({"title": "T"}));

    let list = client.list_sessions(Some(10), Some(20)).await.unwrap();
    assert_eq!((list.sessions.len(), list.total), (1, 1));
    assert_eq!(
        fake.last().path_and_query,
        "/v1/sessions?limit=10&offset=20"
    );
    client.list_sessions(None, None).await.unwrap();
    assert_eq!(fake.last().path_and_query, "/v1/sessions");
    client.list_sessions(Some(5), None).await.unwrap();
    assert_eq!(fake.last().path_and_query, "/v1/sessions?limit=5");

    let detail = client.get_session(SESSION).await.unwrap();
    assert_eq!(detail.session.id, SESSION);
    assert_eq!(
        fake.last().path_and_query,
        format!("/v1/sessions/{SESSION}")
    );

    client.delete_session(SESSION).await.unwrap();
    assert_eq!(fake.last().method, "DELETE");

    let msg = SendMessageRequest::user("hello", MessageType::FollowUp);
    assert_eq!(
        client.send_message(SESSION, &msg).await.unwrap().run_id,
        RUN
    );
    assert_eq!(
        fake.last_body(),
        json!({"message": {"role": "user", "content": "hello"}, "type": "follow_up"})
    );

    let msgs = client.list_messages(SESSION, None, Some(2)).await.unwrap();
    assert_eq!(msgs.total, 0);
    assert_eq!(
        fake.last().path_and_query,
        format!("/v1/sessions/{SESSION}/messages?offset=2")
    );

    assert_eq!(
        client.transcript_markdown(SESSION).await.unwrap(),
        "# T\n\nhi ✓\n"
    );

    let pending = client.pending_tools(SESSION).await.unwrap();
    assert!(pending.run_id.is_none() && pending.tool_calls.is_empty());

    let cancelled = client.cancel(SESSION, RUN).await.unwrap();
    assert!(cancelled.cancelled);
    assert_eq!(cancelled.run_id, RUN);
    assert_eq!(fake.last_body(), json!({"run_id": RUN}));
    assert_eq!(
        fake.last().path_and_query,
        format!("/v1/sessions/{SESSION}/cancel")
    );
}

#[tokio::test]
async fn json_errors_keep_the_server_code() {
    let (client, fake) = start(Some("secret")).await;
    let err = client.get_session(Uuid::nil()).await.unwrap_err();
    assert_eq!(
        err,
        ClientError::Api {
            status: 404,
            code: "session_not_found".into(),
            message: "session_not_found happened".into(),
            request_id: "req-1".into(),
        }
    );
    assert!(!err.is_transient());

    let decisions = BTreeMap::from([(
        "call-1".to_owned(),
        ToolDecision {
            action: DecisionAction::Accept,
            content: None,
            by: None,
            cause: None,
        },
    )]);
    let req = ToolDecisionsRequest {
        run_id: RUN,
        decisions,
    };
    let err = client.decide_tools(SESSION, &req).await.unwrap_err();
    assert_eq!(
        (err.status(), err.code()),
        (Some(409), Some("run_mismatch"))
    );
    assert_eq!(
        fake.last_body(),
        json!({"run_id": RUN, "decisions": {"call-1": {"action": "accept"}}})
    );
}

#[tokio::test]
async fn non_json_errors_and_bad_bodies() {
    let (client, fake) = start(None).await;
    *fake.override_reply.lock().unwrap() = Some((502, "<html>bad gateway</html>"));
    let err = client.health().await.unwrap_err();
    assert_eq!(
        err,
        ClientError::Api {
            status: 502,
            code: "http_502".into(),
            message: "<html>bad gateway</html>".into(),
            request_id: "hdr-1".into(),
        }
    );
    assert!(err.is_transient());
    assert_eq!(fake.last().authorization, None);

    *fake.override_reply.lock().unwrap() = Some((200, "not json"));
    assert!(matches!(client.health().await, Err(ClientError::Decode(_))));
    *fake.override_reply.lock().unwrap() = Some((200, r#"{"status":"ok"}"#));
    assert!(matches!(
        client.list_sessions(None, None).await,
        Err(ClientError::Decode(_))
    ));
}

#[tokio::test]
async fn transport_errors_are_transient() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let client = Client::new(format!("http://{addr}"), None).unwrap();
    let err = client.health().await.unwrap_err();
    assert!(matches!(err, ClientError::Transport(_)), "{err:?}");
    assert!(err.is_transient());
    assert_eq!((err.code(), err.status()), (None, None));
}

#[test]
fn base_urls() {
    let client = Client::new("http://127.0.0.1:7070/", None).unwrap();
    assert_eq!(client.base_url(), "http://127.0.0.1:7070");
    let client = Client::new("https://example.invalid/prefix//", Some("t".into())).unwrap();
    assert_eq!(client.base_url(), "https://example.invalid/prefix");
    assert!(
        !format!("{client:?}").contains("\"t\""),
        "token must not be printed"
    );
    for bad in [
        "",
        "not a url",
        "ftp://host",
        "http://host/?q=1",
        "127.0.0.1:7070",
    ] {
        assert!(
            matches!(Client::new(bad, None), Err(ClientError::InvalidUrl(_))),
            "{bad:?} should be rejected"
        );
    }
}
