//! `Client::subscribe` against a scripted fake SSE server on real TCP.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::stream::{self, BoxStream, StreamExt};
use switchboard_client::protocol::AgentEvent;
use switchboard_client::{Client, ClientError, EventStream};
use tokio::net::TcpListener;
use uuid::Uuid;

const SESSION: Uuid = Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0001);

/// How one scripted connection ends after its chunks.
#[derive(Clone, Copy, Debug)]
enum End {
    /// Ends the body cleanly.
    Close,
    /// Aborts the body: the TCP connection is torn down mid-response.
    Abort,
    /// Keeps the connection open, sending `: ping` every 50 ms.
    Hang,
}

#[derive(Clone, Debug)]
enum Plan {
    Stream { chunks: Vec<Vec<u8>>, end: End },
    Status { status: u16, body: String },
}

#[derive(Clone, Debug)]
struct Seen {
    last_event_id: Option<String>,
    authorization: Option<String>,
}

#[derive(Default)]
struct Fake {
    plans: Mutex<VecDeque<Plan>>,
    seen: Mutex<Vec<Seen>>,
    /// Response bodies dropped by the server (the client went away or the body ended).
    bodies_dropped: Arc<AtomicUsize>,
}

impl Fake {
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    async fn wait_for_connections(&self, n: usize) -> Vec<Seen> {
        for _ in 0..500 {
            let seen = self.seen();
            if seen.len() >= n {
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("expected {n} connections, saw {:?}", self.seen());
    }
}

struct DropCounter(Arc<AtomicUsize>);

impl Drop for DropCounter {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

async fn events(State(fake): State<Arc<Fake>>, headers: HeaderMap) -> Response {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    fake.seen.lock().unwrap().push(Seen {
        last_event_id: header("last-event-id"),
        authorization: header("authorization"),
    });
    let plan = fake
        .plans
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or(Plan::Stream {
            chunks: Vec::new(),
            end: End::Hang,
        });
    match plan {
        Plan::Status { status, body } => {
            let ctype = if body.starts_with('{') {
                "application/json"
            } else {
                "text/plain"
            };
            (
                StatusCode::from_u16(status).unwrap(),
                [(header::CONTENT_TYPE, ctype)],
                body,
            )
                .into_response()
        }
        Plan::Stream { chunks, end } => {
            let guard = DropCounter(fake.bodies_dropped.clone());
            let head = stream::iter(chunks).then(|chunk| async move {
                tokio::time::sleep(Duration::from_millis(2)).await;
                Ok::<Bytes, io::Error>(Bytes::from(chunk))
            });
            let tail: BoxStream<'static, Result<Bytes, io::Error>> = match end {
                End::Close => stream::empty().boxed(),
                End::Abort => stream::once(async {
                    // let what was written reach the client before the connection dies
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    Err(io::Error::other("scripted abort"))
                })
                .boxed(),
                End::Hang => stream::unfold((), |()| async {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Some((Ok(Bytes::from_static(b": ping\n\n")), ()))
                })
                .boxed(),
            };
            let body = head.chain(tail).map(move |item| {
                let _alive = &guard;
                item
            });
            (
                [(header::CONTENT_TYPE, "text/event-stream")],
                Body::from_stream(body),
            )
                .into_response()
        }
    }
}

async fn serve_on(listener: TcpListener, plans: Vec<Plan>) -> Arc<Fake> {
    let fake = Arc::new(Fake {
        plans: Mutex::new(plans.into()),
        ..Fake::default()
    });
    let app = Router::new()
        .route("/v1/sessions/{id}/events", get(events))
        .with_state(fake.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    fake
}

async fn start(plans: Vec<Plan>) -> (Client, Arc<Fake>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/", listener.local_addr().unwrap());
    let fake = serve_on(listener, plans).await;
    (Client::new(base, Some("tok".into())).unwrap(), fake)
}

fn envelope_json(id: u64) -> String {
    serde_json::json!({
        "id": id,
        "session_id": SESSION,
        "run_id": SESSION,
        "timestamp": "2026-01-01T00:00:00Z",
        "event": {"TextDelta": {"run_id": SESSION, "delta": format!("d{id}")}},
    })
    .to_string()
}

fn frame(id: u64) -> Vec<u8> {
    format!(
        "id: {id}\nevent: text_delta\ndata: {}\n\n",
        envelope_json(id)
    )
    .into_bytes()
}

fn frames(ids: std::ops::RangeInclusive<u64>) -> Vec<Vec<u8>> {
    ids.map(frame).collect()
}

async fn next(
    stream: &mut EventStream,
) -> Option<Result<switchboard_client::protocol::EventEnvelope, ClientError>> {
    tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("timed out waiting for the event stream")
}

async fn next_id(stream: &mut EventStream) -> u64 {
    match next(stream).await {
        Some(Ok(env)) => {
            let AgentEvent::TextDelta { delta, .. } = &env.event else {
                panic!("unexpected event {env:?}");
            };
            assert_eq!(delta, &format!("d{}", env.id));
            env.id
        }
        other => panic!("expected an event, got {other:?}"),
    }
}

async fn assert_quiet(stream: &mut EventStream) {
    let more = tokio::time::timeout(Duration::from_millis(300), stream.next()).await;
    assert!(more.is_err(), "expected nothing more, got {more:?}");
}

#[tokio::test]
async fn resumes_after_abrupt_close_without_duplicates() {
    let (client, fake) = start(vec![
        Plan::Stream {
            chunks: frames(1..=5),
            end: End::Abort,
        },
        Plan::Stream {
            chunks: frames(4..=8),
            end: End::Close,
        },
    ])
    .await;
    let mut stream = client.subscribe(SESSION, None);
    let mut ids = Vec::new();
    for _ in 0..8 {
        ids.push(next_id(&mut stream).await);
    }
    assert_eq!(ids, (1..=8).collect::<Vec<_>>());
    assert_eq!(stream.last_event_id(), 8);

    // the second connection resumed after 5; the third (after the clean end) after 8
    let seen = fake.wait_for_connections(3).await;
    let ids: Vec<_> = seen.iter().map(|s| s.last_event_id.as_deref()).collect();
    assert_eq!(ids, [None, Some("5"), Some("8")]);
    assert!(
        seen.iter()
            .all(|s| s.authorization.as_deref() == Some("Bearer tok"))
    );
    assert_quiet(&mut stream).await;
}

#[tokio::test]
async fn after_is_sent_and_older_events_are_dropped() {
    let (client, fake) = start(vec![Plan::Stream {
        chunks: frames(2..=5),
        end: End::Hang,
    }])
    .await;
    let mut stream = client.subscribe(SESSION, Some(3));
    assert_eq!(stream.last_event_id(), 3);
    assert_eq!(next_id(&mut stream).await, 4);
    assert_eq!(next_id(&mut stream).await, 5);
    assert_eq!(fake.seen()[0].last_event_id.as_deref(), Some("3"));
    assert_quiet(&mut stream).await;
}

#[tokio::test]
async fn unauthorized_ends_the_stream_with_the_api_error() {
    let body = r#"{"error":"bad token","code":"invalid_token","request_id":"req-7"}"#;
    let (client, fake) = start(vec![Plan::Status {
        status: 401,
        body: body.into(),
    }])
    .await;
    let mut stream = client.subscribe(SESSION, None);
    match next(&mut stream).await {
        Some(Err(err @ ClientError::Api { .. })) => {
            assert_eq!(err.code(), Some("invalid_token"));
            assert_eq!(err.status(), Some(401));
            let ClientError::Api {
                message,
                request_id,
                ..
            } = err
            else {
                unreachable!()
            };
            assert_eq!(message, "bad token");
            assert_eq!(request_id, "req-7");
        }
        other => panic!("expected an Api error, got {other:?}"),
    }
    assert!(next(&mut stream).await.is_none());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(fake.seen().len(), 1, "must not reconnect after a 401");
}

#[tokio::test]
async fn not_found_with_plain_body_ends_the_stream() {
    let (client, _fake) = start(vec![Plan::Status {
        status: 404,
        body: "no such session".into(),
    }])
    .await;
    let mut stream = client.subscribe(SESSION, None);
    match next(&mut stream).await {
        Some(Err(ClientError::Api {
            status,
            code,
            message,
            ..
        })) => {
            assert_eq!(
                (status, code.as_str(), message.as_str()),
                (404, "http_404", "no such session")
            );
        }
        other => panic!("expected an Api error, got {other:?}"),
    }
    assert!(next(&mut stream).await.is_none());
}

#[tokio::test]
async fn transient_statuses_are_retried_silently() {
    let busy = r#"{"error":"slow down","code":"rate_limited","request_id":"r"}"#;
    let (client, fake) = start(vec![
        Plan::Status {
            status: 503,
            body: "unavailable".into(),
        },
        Plan::Status {
            status: 429,
            body: busy.into(),
        },
        Plan::Stream {
            chunks: frames(1..=2),
            end: End::Hang,
        },
    ])
    .await;
    let mut stream = client.subscribe(SESSION, None);
    assert_eq!(next_id(&mut stream).await, 1);
    assert_eq!(next_id(&mut stream).await, 2);
    assert_eq!(fake.seen().len(), 3);
}

#[tokio::test]
async fn split_frames_keepalives_gap_and_bad_data() {
    let env2 = envelope_json(2);
    let (left, right) = env2.split_at(env2.find(',').unwrap() + 1);
    let body = [
        ": ping\n\n".to_owned(),
        "event: gap_detected\ndata: {\"requested_after_id\":0,\"oldest_available_id\":1,\"newest_available_id\":4}\n\n".to_owned(),
        format!("id: 1\r\nevent: text_delta\r\ndata: {}\r\n\r\n", envelope_json(1)),
        ": ping\r\n\r\n".to_owned(),
        // the JSON split over two data lines: they join with "\n", still valid JSON
        format!("id: 2\nevent: text_delta\ndata: {left}\ndata: {right}\n\n"),
        "id: 3\nevent: text_delta\ndata: {not json\n\n".to_owned(),
        String::from_utf8(frame(4)).unwrap(),
    ]
    .concat();
    let chunks: Vec<Vec<u8>> = body.as_bytes().chunks(7).map(<[u8]>::to_vec).collect();
    let (client, _fake) = start(vec![Plan::Stream {
        chunks,
        end: End::Hang,
    }])
    .await;
    let mut stream = client.subscribe(SESSION, None);
    assert_eq!(next_id(&mut stream).await, 1);
    assert_eq!(next_id(&mut stream).await, 2);
    assert!(matches!(
        next(&mut stream).await,
        Some(Err(ClientError::Decode(_)))
    ));
    assert_eq!(next_id(&mut stream).await, 4);
    assert_eq!(stream.last_event_id(), 4);
    assert_quiet(&mut stream).await;
}

#[tokio::test]
async fn connection_refused_is_retried_until_the_server_is_up() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let client = Client::new(format!("http://{addr}"), None).unwrap();
    let mut stream = client.subscribe(SESSION, None);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let listener = TcpListener::bind(addr).await.unwrap();
    let fake = serve_on(
        listener,
        vec![Plan::Stream {
            chunks: frames(1..=1),
            end: End::Hang,
        }],
    )
    .await;
    assert_eq!(next_id(&mut stream).await, 1);
    assert_eq!(fake.seen()[0].authorization, None);
}

#[tokio::test]
async fn dropping_the_stream_closes_the_connection() {
    let (client, fake) = start(vec![Plan::Stream {
        chunks: frames(1..=1),
        end: End::Hang,
    }])
    .await;
    let mut stream = client.subscribe(SESSION, None);
    assert_eq!(next_id(&mut stream).await, 1);
    assert_eq!(fake.bodies_dropped.load(Ordering::SeqCst), 0);
    drop(stream);
    for _ in 0..500 {
        if fake.bodies_dropped.load(Ordering::SeqCst) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        fake.bodies_dropped.load(Ordering::SeqCst),
        1,
        "the server still streams"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(fake.seen().len(), 1, "no reconnect after drop");
}

// ---- `Client::follow_run`: one run's events as typed steps ----

const RUN: Uuid = Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_00aa);
const OTHER: Uuid = Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_00bb);

fn event_frame(id: u64, run: Uuid, event: serde_json::Value) -> Vec<u8> {
    let env = serde_json::json!({
        "id": id,
        "session_id": SESSION,
        "run_id": run,
        "timestamp": "2026-01-01T00:00:00Z",
        "event": event,
    });
    format!("id: {id}\nevent: x\ndata: {env}\n\n").into_bytes()
}

async fn step(f: &mut switchboard_client::RunFollower) -> switchboard_client::Step {
    match tokio::time::timeout(Duration::from_secs(10), f.next())
        .await
        .expect("timed out waiting for a step")
    {
        Some(Ok(step)) => step,
        other => panic!("expected a step, got {other:?}"),
    }
}

#[tokio::test]
async fn follow_run_yields_one_runs_typed_steps_and_stops_at_its_end() {
    use serde_json::json;
    use switchboard_client::protocol::{RejectionCause, StopReason};
    use switchboard_client::{RunEnd, RunStep};
    let call = json!({"id": "c1", "name": "run_command", "arguments": {"command": "ls"}});
    let first = vec![
        event_frame(1, OTHER, json!({"RunStarted": {"run_id": OTHER}})),
        event_frame(
            2,
            RUN,
            json!({"RunStarted": {"run_id": RUN, "content": "go"}}),
        ),
        event_frame(
            3,
            RUN,
            json!({"TextDelta": {"run_id": RUN, "delta": "Hel"}}),
        ),
        // Another run's text, and an event this client cannot read: neither is a step.
        event_frame(
            4,
            OTHER,
            json!({"TextDelta": {"run_id": OTHER, "delta": "not mine"}}),
        ),
        b"id: 5\nevent: x\ndata: {not json\n\n".to_vec(),
        event_frame(
            6,
            RUN,
            json!({"ToolCallsProposed": {"run_id": RUN, "tool_calls": [call]}}),
        ),
    ];
    // The connection dies mid-run; the follower resumes after 6 without a repeat.
    let second = vec![
        event_frame(
            7,
            RUN,
            json!({"WaitingForToolApproval": {"run_id": RUN, "tool_call_ids": ["c1", "c9"]}}),
        ),
        event_frame(
            8,
            RUN,
            json!({"ToolRejected": {"run_id": RUN, "tool_call_id": "c1", "reason": "no decision within 1 s", "cause": "timeout"}}),
        ),
        event_frame(
            9,
            RUN,
            json!({"RunCompleted": {"run_id": RUN, "total_turns": 1, "total_usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}, "stop_reason": "cancelled"}}),
        ),
        event_frame(
            10,
            RUN,
            json!({"TextDelta": {"run_id": RUN, "delta": "after the end"}}),
        ),
    ];
    let (client, fake) = start(vec![
        Plan::Stream {
            chunks: first,
            end: End::Abort,
        },
        Plan::Stream {
            chunks: second,
            end: End::Hang,
        },
    ])
    .await;
    let mut f = client.follow_run(SESSION, RUN, None);
    let s = step(&mut f).await;
    assert_eq!(
        (s.seq, s.kind),
        (
            2,
            RunStep::Started {
                content: Some("go".into())
            }
        )
    );
    assert_eq!(step(&mut f).await.kind, RunStep::Text("Hel".into()));
    match step(&mut f).await.kind {
        RunStep::ToolsProposed(calls) => assert_eq!(calls[0].name, "run_command"),
        other => panic!("{other:?}"),
    }
    // The wait names the calls: the proposed one whole, the unseen one by id.
    match step(&mut f).await.kind {
        RunStep::ToolsWaiting(calls) => {
            assert_eq!(calls.len(), 2);
            assert_eq!(
                (calls[0].id.as_str(), calls[0].name.as_str()),
                ("c1", "run_command")
            );
            assert_eq!((calls[1].id.as_str(), calls[1].name.as_str()), ("c9", ""));
        }
        other => panic!("{other:?}"),
    }
    match step(&mut f).await.kind {
        RunStep::ToolRejected { call, cause, .. } => {
            assert_eq!(call.name, "run_command");
            assert_eq!(cause, RejectionCause::Timeout);
        }
        other => panic!("{other:?}"),
    }
    let end = step(&mut f).await;
    assert_eq!(end.seq, 9);
    assert!(matches!(
        end.kind,
        RunStep::Ended(RunEnd::Completed {
            stop_reason: StopReason::Cancelled,
            total_turns: 1,
            ..
        })
    ));
    assert_eq!(f.cursor(), 9);
    // Nothing after the end.
    assert!(f.next().await.is_none());
    let seen = fake.wait_for_connections(2).await;
    assert_eq!(seen[1].last_event_id.as_deref(), Some("6"));
}

#[tokio::test]
async fn follow_run_ends_as_session_gone_when_the_session_is_deleted() {
    use switchboard_client::{RunEnd, RunStep};
    let (client, _fake) = start(vec![Plan::Status {
        status: 404,
        body: r#"{"error":"no such session","code":"session_not_found"}"#.into(),
    }])
    .await;
    let mut f = client.follow_run(SESSION, RUN, Some(3));
    assert_eq!(step(&mut f).await.kind, RunStep::Ended(RunEnd::SessionGone));
    assert!(f.next().await.is_none());
}

#[tokio::test]
async fn follow_run_passes_on_a_refusal_then_ends() {
    let (client, _fake) = start(vec![Plan::Status {
        status: 401,
        body: r#"{"error":"bad token","code":"unauthorized"}"#.into(),
    }])
    .await;
    let mut f = client.follow_run(SESSION, RUN, None);
    match f.next().await {
        Some(Err(e)) => assert_eq!(e.status(), Some(401)),
        other => panic!("{other:?}"),
    }
    assert!(f.next().await.is_none());
}
