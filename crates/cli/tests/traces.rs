//! Traces over OTLP: with `OTEL_EXPORTER_OTLP_ENDPOINT` set, the server exports a span per
//! request and per run (with session and run ids, linked to the request) to a collector — here a fake one on
//! real TCP that decodes the OTLP/HTTP protobuf the exporter sends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use common::*;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message as _;
use switchboard_protocol::CreateSessionRequest;
use switchboard_test_support::mock_llm::{MockLlm, MockReply};

/// A span as the collector received it.
#[derive(Debug, Clone)]
struct Span {
    name: String,
    trace_id: Vec<u8>,
    span_id: Vec<u8>,
    parent: Vec<u8>,
    /// (trace id, span id) of each linked span.
    links: Vec<(Vec<u8>, Vec<u8>)>,
    attributes: HashMap<String, String>,
    service: String,
}

type Received = Arc<Mutex<Vec<Span>>>;

async fn collect(State(spans): State<Received>, body: Bytes) -> Bytes {
    let req = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
    for rs in req.resource_spans {
        let service = rs
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|a| a.key == "service.name")
            .and_then(|a| a.value.as_ref()?.value.as_ref())
            .map(|v| match v {
                AnyValue::StringValue(s) => s.clone(),
                other => format!("{other:?}"),
            })
            .unwrap_or_default();
        for ss in rs.scope_spans {
            for s in ss.spans {
                let attributes = s
                    .attributes
                    .iter()
                    .map(|a| {
                        let v = match a.value.as_ref().and_then(|v| v.value.as_ref()) {
                            Some(AnyValue::StringValue(s)) => s.clone(),
                            Some(AnyValue::IntValue(i)) => i.to_string(),
                            Some(other) => format!("{other:?}"),
                            None => String::new(),
                        };
                        (a.key.clone(), v)
                    })
                    .collect();
                spans.lock().unwrap().push(Span {
                    name: s.name,
                    trace_id: s.trace_id,
                    span_id: s.span_id,
                    parent: s.parent_span_id,
                    links: s
                        .links
                        .iter()
                        .map(|l| (l.trace_id.clone(), l.span_id.clone()))
                        .collect(),
                    attributes,
                    service: service.clone(),
                });
            }
        }
    }
    // An empty ExportTraceServiceResponse.
    Bytes::new()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_and_runs_are_exported_as_spans_over_otlp() {
    let spans: Received = Arc::default();
    let app = axum::Router::new()
        .route("/v1/traces", post(collect))
        .with_state(spans.clone());
    let (listener, addr) = switchboard_test_support::serve::bind("OTLP collector").await;
    let (_stop, stop_rx) = tokio::sync::watch::channel(false);
    switchboard_test_support::serve::spawn(listener, app, stop_rx);

    let llm = MockLlm::start().await;
    llm.push(MockReply::text(&["traced ", "reply"]));
    let dir = tempfile::tempdir().unwrap();
    let endpoint = format!("http://{addr}");
    let server = start(
        dir.path(),
        &llm.base_url(),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_SERVICE_NAME", "switchboard-under-test"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    )
    .await;
    let c = client(&server);
    let session = c
        .create_session(&CreateSessionRequest::default())
        .await
        .unwrap();
    let (mut events, run) = send(&c, session.id, "hello, traced").await;
    until_run_ends(&mut events, run).await;

    let (sid, rid) = (session.id.to_string(), run.to_string());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let (run_span, request_span) = loop {
        let got = spans.lock().unwrap().clone();
        let run_span = got
            .iter()
            .find(|s| s.name == "run" && s.attributes.get("run_id") == Some(&rid))
            .cloned();
        let request_span = got
            .iter()
            .find(|s| {
                s.name == "request"
                    && s.attributes.get("path").map(String::as_str)
                        == Some(&format!("/v1/sessions/{sid}/messages"))
            })
            .cloned();
        if let (Some(r), Some(q)) = (run_span, request_span) {
            break (r, q);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no run/request span exported; got {:?}; server said:\n{}",
            got.iter().map(|s| &s.name).collect::<Vec<_>>(),
            server.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(run_span.service, "switchboard-under-test");
    assert_eq!(run_span.attributes["session_id"], sid);
    assert_eq!(run_span.attributes["backend"], "builtin");
    assert_eq!(request_span.attributes["method"], "POST");
    assert_eq!(request_span.attributes["status"], "200");
    assert_eq!(request_span.attributes["session_id"], sid);
    assert!(!request_span.attributes["request_id"].is_empty());
    // A run outlives its request: a root span of its own, linked to the request that
    // started it (so a trace viewer goes from one to the other).
    assert!(run_span.parent.is_empty(), "the run span has no parent");
    assert_eq!(
        run_span.links,
        [(request_span.trace_id.clone(), request_span.span_id.clone())]
    );
}
