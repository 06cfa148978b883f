#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! `GET /metrics`: Prometheus text behind the token; the counters move with a run, an
//! approval and an event stream.

mod common;

use common::*;
use futures::StreamExt;
use serde_json::json;
use switchboard_protocol::{AgentEvent, CreateSessionRequest, DecisionAction};
use switchboard_test_support::mock_llm::{MockLlm, MockReply};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_move_with_runs_approvals_and_streams() {
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &llm.base_url(), &[]).await;
    let c = client(&server);
    let r = reqwest::get(format!("{}/metrics", server.url))
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "behind the token");

    let before = scrape(&server.url).await;
    assert_eq!(
        sample(
            &before,
            "switchboard_runs_started_total{backend=\"builtin\"}"
        ),
        None
    );
    let s = c
        .create_session(&CreateSessionRequest::default())
        .await
        .unwrap();
    llm.push(MockReply::tool_call(
        "c1",
        "run_command",
        json!({"command": "echo hi"}),
    ));
    llm.push(MockReply::text(&["done"]));
    let (mut events, run) = send(&c, s.id, "run it").await;
    until(&mut events, "the approval", |e| {
        matches!(e, AgentEvent::WaitingForToolApproval { .. })
    })
    .await;
    let waiting = scrape(&server.url).await;
    assert_eq!(sample(&waiting, "switchboard_approvals_waiting"), Some(1.0));
    assert!(
        sample(&waiting, "switchboard_sse_subscribers").unwrap() >= 1.0,
        "{waiting}"
    );
    c.decide_tools(s.id, &decide(run, "c1", DecisionAction::Accept, None))
        .await
        .unwrap();
    until_run_ends(&mut events, run).await;
    drop(events);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;

    let after = scrape(&server.url).await;
    assert_eq!(
        sample(
            &after,
            "switchboard_runs_started_total{backend=\"builtin\"}"
        ),
        Some(1.0),
        "{after}"
    );
    assert_eq!(
        sample(
            &after,
            "switchboard_runs_finished_total{outcome=\"completed\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &after,
            "switchboard_run_duration_seconds_count{backend=\"builtin\"}"
        ),
        Some(1.0)
    );
    assert!(sample(&after, "switchboard_events_appended_total").unwrap() >= 6.0);
    assert_eq!(sample(&after, "switchboard_approvals_waiting"), Some(0.0));
    assert_eq!(
        sample(
            &after,
            "switchboard_approval_wait_seconds_count{result=\"decided\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(&after, "switchboard_sse_subscribers"),
        Some(0.0),
        "{after}"
    );
    assert!(after.contains("# HELP switchboard_runs_started_total"));
    assert!(after.contains("# HELP switchboard_heap_allocated_bytes"));
    let heap = |name| sample(&after, name).unwrap_or(0.0);
    assert!(
        heap("switchboard_heap_allocated_bytes") <= heap("switchboard_heap_active_bytes")
            && heap("switchboard_heap_active_bytes") <= heap("switchboard_heap_resident_bytes"),
        "allocated <= active <= resident: {after}"
    );
    // Freed pages kept for reuse: there is always some after a run (a gauge at 0 is fine
    // for muzzy, which jemalloc's defaults do not use).
    assert!(
        sample(&after, "switchboard_heap_muzzy_bytes").is_some(),
        "{after}"
    );
    // The process's own gauges, sampled at the scrape.
    for gauge in [
        "process_resident_memory_bytes",
        "process_open_fds",
        "switchboard_runtime_alive_tasks",
        // The allocator's (jemalloc's) heap, read at the scrape too.
        "switchboard_heap_allocated_bytes",
        "switchboard_heap_active_bytes",
        "switchboard_heap_resident_bytes",
        "switchboard_heap_metadata_bytes",
        "switchboard_heap_dirty_bytes",
    ] {
        assert!(
            sample(&after, gauge).unwrap_or(0.0) > 0.0,
            "{gauge}: {after}"
        );
    }

    // A cancelled run counts as such.
    llm.push(MockReply::text_slow(&["a ", "b ", "c ", "d "], 500));
    let (mut events, run) = send(&c, s.id, "slow").await;
    events.next().await;
    c.cancel(s.id, run).await.unwrap();
    until_run_ends(&mut events, run).await;
    let last = scrape(&server.url).await;
    assert_eq!(
        sample(
            &last,
            "switchboard_runs_finished_total{outcome=\"cancelled\"}"
        ),
        Some(1.0),
        "{last}"
    );
}

/// `SWITCHBOARD_LOG_FORMAT=json`: every log line the server writes is one JSON object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_are_one_object_per_line() {
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = start(
        dir.path(),
        &llm.base_url(),
        &[("SWITCHBOARD_LOG_FORMAT", "json")],
    )
    .await;
    // Something to log: a request for a session that does not exist is fine, a start is
    // enough.
    let _ = reqwest::get(format!("{}/v1/health", server.url))
        .await
        .unwrap();
    let logs = server.logs();
    // stdout (the address, the sign-in link) is for people; the log (stderr) is JSON.
    let mut json = 0;
    for l in logs.lines().filter(|l| !l.trim().is_empty()) {
        if l.starts_with('{') {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
            assert!(v["level"].is_string() && v["timestamp"].is_string(), "{l}");
            json += 1;
        } else {
            assert!(
                !["  INFO ", "  WARN ", " ERROR ", " DEBUG "]
                    .iter()
                    .any(|lvl| l.contains(lvl)),
                "a text log line: {l}"
            );
        }
    }
    assert!(json > 0, "no JSON log line: {logs}");
}

/// `[metrics] listen`: a second address serving `/metrics` alone, without the token, while
/// the main listener keeps it behind the token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_listen_serves_metrics_alone_without_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(
        dir.path(),
        "http://127.0.0.1:9/v1",
        &[("SWITCHBOARD_METRICS_LISTEN", "127.0.0.1:0")],
    )
    .await;
    let logs = server.logs();
    let url = logs
        .lines()
        .find_map(|l| l.strip_prefix("metrics on "))
        .expect("the metrics address is printed")
        .trim()
        .to_string();
    let http = reqwest::Client::new();
    // Something to count: an event stream opened (and left open).
    let c = client(&server);
    let session = c
        .create_session(&CreateSessionRequest::default())
        .await
        .unwrap();
    let stream = http
        .get(format!("{}/v1/sessions/{}/events", server.url, session.id))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let open = http.get(&url).send().await.unwrap();
    assert_eq!(open.status(), 200);
    let text = open.text().await.unwrap();
    assert_eq!(
        sample(&text, "switchboard_sse_subscribers"),
        Some(1.0),
        "{text}"
    );
    // Nothing else is served there: not the API, not the console.
    let base = url.trim_end_matches("/metrics");
    for path in ["/v1/sessions", "/v1/health", "/"] {
        let r = http.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(r.status(), 404, "{path}");
    }
    // The main listener still wants the token.
    let r = http
        .get(format!("{}/metrics", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(
        sample(&scrape(&server.url).await, "switchboard_sse_subscribers"),
        Some(1.0)
    );
    drop(stream);
}
