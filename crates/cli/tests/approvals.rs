#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! Tools and approval gates end to end: the real binary, the mock LLM proposing tool calls,
//! decisions over HTTP, commands really running in the workspace.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use switchboard_client::{Client, EventStream};
use switchboard_protocol::{
    AgentEvent, AutoApprove, CreateSessionRequest, DecisionAction, EventEnvelope, PermissionMode,
    RejectionCause, RunErrorCode,
};
use switchboard_test_support::mock_llm::{MockLlm, MockReply};
use uuid::Uuid;

async fn session(c: &Client, ws: &Path, mode: Option<PermissionMode>) -> Uuid {
    c.create_session(&CreateSessionRequest {
        cwd: Some(ws.to_string_lossy().into_owned()),
        permission_mode: mode,
        ..CreateSessionRequest::default()
    })
    .await
    .unwrap()
    .id
}

/// Reads until the run waits for approval; returns what was seen, the waiting event last.
async fn until_waiting(stream: &mut EventStream, run_id: Uuid) -> Vec<EventEnvelope> {
    use futures::StreamExt;
    let mut out = Vec::new();
    loop {
        let env = tokio::time::timeout(Duration::from_secs(30), stream.next())
            .await
            .expect("no approval request within 30 s")
            .expect("stream ended")
            .unwrap();
        let waiting = matches!(env.event, AgentEvent::WaitingForToolApproval { .. });
        assert!(
            !(env.event.is_terminal() && env.event.run_id() == run_id),
            "run ended without waiting: {:?}",
            env.event
        );
        out.push(env);
        if waiting {
            return out;
        }
    }
}

/// The tool results the model received in its `n`th request (OpenAI format).
fn tool_results_sent(llm: &MockLlm, n: usize) -> Vec<(String, String)> {
    let reqs = llm.chat_requests();
    reqs[n].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap().to_string(),
                m["content"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn completed(events: &[EventEnvelope], call: &str) -> Option<(String, bool)> {
    events.iter().find_map(|e| match &e.event {
        AgentEvent::ToolExecutionCompleted {
            tool_call_id,
            result,
            is_error,
            ..
        } if tool_call_id == call => Some((result.clone(), *is_error)),
        _ => None,
    })
}

fn cause(events: &[EventEnvelope], call: &str) -> Option<RejectionCause> {
    events.iter().find_map(|e| match &e.event {
        AgentEvent::ToolRejected {
            tool_call_id,
            cause,
            ..
        } if tool_call_id == call => Some(*cause),
        _ => None,
    })
}

fn rejected(events: &[EventEnvelope], call: &str) -> Option<String> {
    events.iter().find_map(|e| match &e.event {
        AgentEvent::ToolRejected {
            tool_call_id,
            reason,
            ..
        } if tool_call_id == call => Some(reason.clone()),
        _ => None,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_command_runs_in_the_workspace_and_its_output_reaches_the_model() {
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &llm.base_url(), &[]).await;
    let c = client(&server);
    let id = session(&c, ws.path(), None).await;
    llm.push(MockReply::tool_call(
        "call_1",
        "run_command",
        json!({"command": "echo hello-from-bash > out.txt && cat out.txt && pwd"}),
    ));
    llm.push(MockReply::text(&["The command said ", "hello."]));
    let (mut events, run) = send(&c, id, "run it").await;
    let seen = until_waiting(&mut events, run).await;
    assert_eq!(
        kinds(&seen)[kinds(&seen).len() - 2..],
        ["tool_calls_proposed", "waiting_for_tool_approval"]
    );
    // Nothing ran yet.
    assert!(!ws.path().join("out.txt").exists());
    let pending = c.pending_tools(id).await.unwrap();
    assert_eq!(pending.run_id, Some(run));
    assert_eq!(pending.tool_calls.len(), 1);
    assert_eq!(pending.tool_calls[0].id, "call_1");
    let preview = pending.tool_calls[0].metadata.as_ref().unwrap()["preview"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(preview.contains("echo hello-from-bash"), "{preview}");
    let answer = c
        .decide_tools(id, &decide(run, "call_1", DecisionAction::Accept, None))
        .await
        .unwrap();
    assert!(answer.accepted);
    let rest = until_run_ends(&mut events, run).await;
    let k = kinds(&rest);
    let started = k
        .iter()
        .position(|k| *k == "tool_execution_started")
        .unwrap();
    let done = k
        .iter()
        .position(|k| *k == "tool_execution_completed")
        .unwrap();
    assert!(started < done);
    assert_eq!(*k.last().unwrap(), "run_completed");
    let (result, is_error) = completed(&rest, "call_1").unwrap();
    assert!(!is_error, "{result}");
    assert!(result.contains("hello-from-bash"), "{result}");
    let real_ws = ws.path().canonicalize().unwrap();
    assert!(
        result.contains(&real_ws.to_string_lossy().to_string()),
        "ran in the workspace: {result}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("out.txt")).unwrap(),
        "hello-from-bash\n"
    );
    assert_eq!(text_of(&rest), "The command said hello.");
    // The model got the output as the call's result.
    let sent = tool_results_sent(&llm, 1);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].0, "call_1");
    assert!(sent[0].1.contains("hello-from-bash"));
    // The model saw the tools.
    let tools: Vec<String> = llm.chat_requests()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    for t in ["run_command", "view", "create", "str_replace", "remove"] {
        assert!(tools.contains(&t.to_string()), "{tools:?}");
    }
    // Transcript: user, assistant with the call, tool result, assistant text.
    let msgs = c.list_messages(id, None, None).await.unwrap().messages;
    let roles: Vec<&str> = msgs.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
    assert_eq!(msgs[1].tool_calls[0].name, "run_command");
    assert_eq!(msgs[2].tool_call_id.as_deref(), Some("call_1"));
    assert!(msgs[2].content.contains("hello-from-bash"));
    let md = c.transcript_markdown(id).await.unwrap();
    assert!(md.contains("```sh\necho hello-from-bash"), "{md}");
    assert!(
        md.contains("## Tool result: `run_command` (`call_1`)"),
        "{md}"
    );
    assert!(md.contains("The command said hello."), "{md}");
    // Nothing waits any more.
    let err = c
        .decide_tools(id, &decide(run, "call_1", DecisionAction::Accept, None))
        .await
        .unwrap_err();
    assert_eq!(
        (err.status(), err.code()),
        (Some(409), Some("no_pending_approval"))
    );
    let none = c.pending_tools(id).await.unwrap();
    assert_eq!(none.run_id, None);
    assert!(none.tool_calls.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_with_reason_custom_result_and_wrong_decisions() {
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &llm.base_url(), &[]).await;
    let c = client(&server);
    let id = session(&c, ws.path(), None).await;

    // Reject with a reason.
    llm.push(MockReply::tool_call(
        "c1",
        "run_command",
        json!({"command": "touch nope"}),
    ));
    llm.push(MockReply::text(&["ok, I will not."]));
    let (mut events, run) = send(&c, id, "touch it").await;
    until_waiting(&mut events, run).await;
    // A decision for another run is refused; so is an unknown call id and a bad body.
    let err = c
        .decide_tools(
            id,
            &decide(Uuid::now_v7(), "c1", DecisionAction::Accept, None),
        )
        .await
        .unwrap_err();
    assert_eq!(
        (err.status(), err.code()),
        (Some(409), Some("run_mismatch"))
    );
    let err = c
        .decide_tools(id, &decide(run, "c9", DecisionAction::Accept, None))
        .await
        .unwrap_err();
    assert_eq!(
        (err.status(), err.code()),
        (Some(400), Some("validation_failed"))
    );
    assert!(
        err.to_string().contains("c1"),
        "names the pending ids: {err}"
    );
    let err = c
        .decide_tools(id, &decide(run, "c1", DecisionAction::CustomResult, None))
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(400), "custom_result needs content");
    let raw = reqwest::Client::new()
        .post(format!("{}/v1/sessions/{id}/tools/decisions", server.url))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body(r#"{"run_id": "x", "decisions": {}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), 400);
    // Still pending after all that.
    assert_eq!(c.pending_tools(id).await.unwrap().tool_calls.len(), 1);
    c.decide_tools(
        id,
        &decide(run, "c1", DecisionAction::Reject, Some("not now")),
    )
    .await
    .unwrap();
    let rest = until_run_ends(&mut events, run).await;
    let reason = rejected(&rest, "c1").unwrap();
    assert!(reason.contains("not now"), "{reason}");
    assert_eq!(cause(&rest, "c1"), Some(RejectionCause::User));
    assert!(completed(&rest, "c1").is_none());
    assert!(
        !ws.path().join("nope").exists(),
        "a rejected command never runs"
    );
    assert_eq!(*kinds(&rest).last().unwrap(), "run_completed");
    let sent = tool_results_sent(&llm, 1);
    assert!(sent[0].1.contains("not now"), "{:?}", sent);

    // custom_result: the model gets the given content as the tool's result.
    llm.push(MockReply::tool_call(
        "c2",
        "run_command",
        json!({"command": "date"}),
    ));
    llm.push(MockReply::text(&["thanks"]));
    let (mut events, run) = send(&c, id, "what day?").await;
    until_waiting(&mut events, run).await;
    c.decide_tools(
        id,
        &decide(
            run,
            "c2",
            DecisionAction::CustomResult,
            Some("Tuesday, says the user"),
        ),
    )
    .await
    .unwrap();
    let rest = until_run_ends(&mut events, run).await;
    assert_eq!(
        completed(&rest, "c2"),
        Some(("Tuesday, says the user".to_string(), false))
    );
    assert!(!kinds(&rest).contains(&"tool_execution_started"), "not run");
    let sent = tool_results_sent(&llm, 3);
    assert!(
        sent.contains(&("c2".to_string(), "Tuesday, says the user".to_string())),
        "{sent:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_approval_is_rejected_after_the_timeout_and_the_model_goes_on() {
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let server = start(
        dir.path(),
        &llm.base_url(),
        &[("SWITCHBOARD_APPROVAL_TIMEOUT_SECS", "1")],
    )
    .await;
    let c = client(&server);
    let id = session(&c, ws.path(), None).await;
    llm.push(MockReply::tool_call(
        "c1",
        "run_command",
        json!({"command": "touch late"}),
    ));
    llm.push(MockReply::text(&["Nobody answered, so I stopped."]));
    let (mut events, run) = send(&c, id, "go").await;
    let all = until_run_ends(&mut events, run).await;
    let reason = rejected(&all, "c1").unwrap();
    assert!(reason.contains("timed out"), "{reason}");
    assert_eq!(cause(&all, "c1"), Some(RejectionCause::Timeout));
    assert_eq!(*kinds(&all).last().unwrap(), "run_completed");
    assert!(!ws.path().join("late").exists());
    let sent = tool_results_sent(&llm, 1);
    assert!(sent[0].1.contains("timed out"), "{sent:?}");
    // The reason is in the durable log.
    let msgs = c.list_messages(id, None, None).await.unwrap().messages;
    assert!(
        msgs.iter()
            .any(|m| m.is_error && m.content.contains("timed out"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permission_modes_and_auto_approve_settle_calls_without_asking() {
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("readme.txt"), "line one\nline two\n").unwrap();
    let server = start(dir.path(), &llm.base_url(), &[]).await;
    let c = client(&server);

    // read-only: view runs, create is refused without asking.
    let ro = session(&c, ws.path(), Some(PermissionMode::ReadOnly)).await;
    assert_eq!(
        c.get_session(ro).await.unwrap().config.permission_mode,
        PermissionMode::ReadOnly
    );
    llm.push(MockReply::tool_calls(vec![
        switchboard_test_support::mock_llm::MockToolCall::new(
            "v1",
            "view",
            json!({"path": "readme.txt"}),
        ),
        switchboard_test_support::mock_llm::MockToolCall::new(
            "w1",
            "create",
            json!({"path": "new.txt", "file_text": "x"}),
        ),
        switchboard_test_support::mock_llm::MockToolCall::new(
            "x1",
            "run_command",
            json!({"command": "touch ran"}),
        ),
    ]));
    llm.push(MockReply::text(&["done"]));
    let (mut events, run) = send(&c, ro, "look").await;
    let all = until_run_ends(&mut events, run).await;
    assert!(!kinds(&all).contains(&"waiting_for_tool_approval"));
    let (viewed, err) = completed(&all, "v1").unwrap();
    assert!(!err && viewed.contains("line two"), "{viewed}");
    assert!(rejected(&all, "w1").unwrap().contains("read-only"));
    assert!(rejected(&all, "x1").unwrap().contains("read-only"));
    assert_eq!(cause(&all, "x1"), Some(RejectionCause::Policy));
    assert!(!ws.path().join("new.txt").exists());
    assert!(!ws.path().join("ran").exists());

    // workspace-write: file tools run, run_command asks.
    let ww = session(&c, ws.path(), Some(PermissionMode::WorkspaceWrite)).await;
    llm.push(MockReply::tool_call(
        "w2",
        "create",
        json!({"path": "sub/new.txt", "file_text": "hi\n"}),
    ));
    llm.push(MockReply::tool_call(
        "x2",
        "run_command",
        json!({"command": "touch ran"}),
    ));
    llm.push(MockReply::text(&["done"]));
    let (mut events, run) = send(&c, ww, "write").await;
    let seen = until_waiting(&mut events, run).await;
    assert!(
        completed(&seen, "w2").is_some(),
        "create ran without asking"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("sub/new.txt")).unwrap(),
        "hi\n"
    );
    match &seen.last().unwrap().event {
        AgentEvent::WaitingForToolApproval { tool_call_ids, .. } => {
            assert_eq!(tool_call_ids, &vec!["x2".to_string()])
        }
        other => panic!("{other:?}"),
    }
    c.decide_tools(ww, &decide(run, "x2", DecisionAction::Reject, None))
        .await
        .unwrap();
    until_run_ends(&mut events, run).await;
    assert!(!ws.path().join("ran").exists());

    // One step with a write and a command: the write runs at once, before the wait.
    llm.push(MockReply::tool_calls(vec![
        switchboard_test_support::mock_llm::MockToolCall::new(
            "w5",
            "create",
            json!({"path": "early.txt", "file_text": "early"}),
        ),
        switchboard_test_support::mock_llm::MockToolCall::new(
            "x5",
            "run_command",
            json!({"command": "touch late"}),
        ),
    ]));
    llm.push(MockReply::text(&["done"]));
    let (mut events, run) = send(&c, ww, "both").await;
    let seen = until_waiting(&mut events, run).await;
    assert!(
        completed(&seen, "w5").is_some(),
        "allowed call ran before the wait"
    );
    assert!(ws.path().join("early.txt").exists());
    c.decide_tools(ww, &decide(run, "x5", DecisionAction::Reject, None))
        .await
        .unwrap();
    until_run_ends(&mut events, run).await;

    // workspace-write with auto_approve listing run_command: no question.
    let auto = c
        .create_session(&CreateSessionRequest {
            cwd: Some(ws.path().to_string_lossy().into_owned()),
            auto_approve: Some(AutoApprove::Tools(vec!["run_command".into()])),
            ..CreateSessionRequest::default()
        })
        .await
        .unwrap()
        .id;
    llm.push(MockReply::tool_call(
        "x3",
        "run_command",
        json!({"command": "touch auto"}),
    ));
    llm.push(MockReply::text(&["done"]));
    let (mut events, run) = send(&c, auto, "run").await;
    let all = until_run_ends(&mut events, run).await;
    assert!(!kinds(&all).contains(&"waiting_for_tool_approval"));
    assert!(ws.path().join("auto").exists());

    // full-access: nothing asks; and paths outside the workspace are allowed.
    let fa = session(&c, ws.path(), Some(PermissionMode::FullAccess)).await;
    llm.push(MockReply::tool_call(
        "x4",
        "run_command",
        json!({"command": "touch full"}),
    ));
    llm.push(MockReply::text(&["done"]));
    let (mut events, run) = send(&c, fa, "run").await;
    let all = until_run_ends(&mut events, run).await;
    assert!(!kinds(&all).contains(&"waiting_for_tool_approval"));
    assert!(ws.path().join("full").exists());

    // Confinement in workspace-write: a path outside is a tool error, the run goes on.
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "s3cret").unwrap();
    llm.push(MockReply::tool_calls(vec![
        switchboard_test_support::mock_llm::MockToolCall::new(
            "o1",
            "view",
            json!({"path": "../x"}),
        ),
        switchboard_test_support::mock_llm::MockToolCall::new(
            "o2",
            "view",
            json!({"path": outside.path().join("secret.txt")}),
        ),
    ]));
    llm.push(MockReply::text(&["could not"]));
    let (mut events, run) = send(&c, ww, "peek").await;
    let all = until_run_ends(&mut events, run).await;
    for call in ["o1", "o2"] {
        let (out, is_error) = completed(&all, call).unwrap();
        assert!(is_error, "{out}");
        assert!(out.contains("outside the workspace"), "{out}");
        assert!(!out.contains("s3cret"));
    }
    assert_eq!(*kinds(&all).last().unwrap(), "run_completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_kills_a_running_command_and_rejects_a_waiting_one() {
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &llm.base_url(), &[]).await;
    let c = client(&server);

    // A running command.
    let fa = session(&c, ws.path(), Some(PermissionMode::FullAccess)).await;
    llm.push(MockReply::tool_call(
        "s1",
        "run_command",
        json!({"command": "echo started; sleep 30; touch finished"}),
    ));
    let (mut events, run) = send(&c, fa, "sleep").await;
    use futures::StreamExt;
    loop {
        let env = tokio::time::timeout(Duration::from_secs(30), events.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if matches!(env.event, AgentEvent::ToolExecutionStarted { .. }) {
            break;
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t0 = std::time::Instant::now();
    c.cancel(fa, run).await.unwrap();
    let rest = until_run_ends(&mut events, run).await;
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "cancel took {:?}",
        t0.elapsed()
    );
    match &rest.last().unwrap().event {
        AgentEvent::RunCompleted { stop_reason, .. } => {
            assert_eq!(*stop_reason, switchboard_protocol::StopReason::Cancelled)
        }
        other => panic!("{other:?}"),
    }
    let (out, is_error) = completed(&rest, "s1").unwrap();
    assert!(
        is_error && out.contains("started") && out.contains("cancelled"),
        "{out}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!ws.path().join("finished").exists());

    // A call waiting for approval.
    let ww = session(&c, ws.path(), None).await;
    llm.push(MockReply::tool_call(
        "s2",
        "run_command",
        json!({"command": "touch x"}),
    ));
    let (mut events, run) = send(&c, ww, "wait").await;
    until_waiting(&mut events, run).await;
    c.cancel(ww, run).await.unwrap();
    let rest = until_run_ends(&mut events, run).await;
    assert!(rejected(&rest, "s2").unwrap().contains("cancelled"));
    assert_eq!(cause(&rest, "s2"), Some(RejectionCause::Cancelled));
    assert!(c.pending_tools(ww).await.unwrap().run_id.is_none());
    assert!(!ws.path().join("x").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_rejects_a_pending_approval_and_closes_the_run() {
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let mut server = start(dir.path(), &llm.base_url(), &[]).await;
    let c = client(&server);
    let id = session(&c, ws.path(), None).await;
    llm.push(MockReply::tool_call(
        "r1",
        "run_command",
        json!({"command": "touch never"}),
    ));
    let (mut events, run) = send(&c, id, "go").await;
    let seen = until_waiting(&mut events, run).await;
    let last_seen = seen.last().unwrap().id;
    drop(events);
    server.kill().await;

    let server = start(dir.path(), &llm.base_url(), &[]).await;
    let c = client(&server);
    let pending = c.pending_tools(id).await.unwrap();
    assert!(pending.run_id.is_none(), "nothing hangs after a restart");
    let mut sse = RawSse::connect(&server.url, id, Some(last_seen)).await;
    let (_, name, env) = sse.next().await.unwrap();
    assert_eq!(name, "tool_rejected");
    match env.event {
        AgentEvent::ToolRejected {
            reason,
            tool_call_id,
            cause,
            ..
        } => {
            assert_eq!(tool_call_id, "r1");
            assert_eq!(cause, RejectionCause::Restart);
            assert!(reason.contains("interrupted by restart"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    let (_, name, env) = sse.next().await.unwrap();
    assert_eq!(name, "run_error");
    assert!(matches!(
        env.event,
        AgentEvent::RunError {
            retryable: true,
            code: RunErrorCode::Interrupted,
            ..
        }
    ));
    assert!(!ws.path().join("never").exists());
    // The session is usable, and the model sees the interrupted call answered.
    llm.push(MockReply::text(&["fresh start"]));
    let (mut events, run) = send(&c, id, "again").await;
    let all = until_run_ends(&mut events, run).await;
    assert_eq!(text_of(&all), "fresh start");
    let sent = tool_results_sent(&llm, 1);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].0, "r1");
    assert!(sent[0].1.contains("interrupted by restart"), "{sent:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_anthropic_provider_runs_a_tool_use_round_trip() {
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("notes.md"), "alpha\nbeta\n").unwrap();
    let anthropic_url = llm.anthropic_base_url();
    let server = start(
        dir.path(),
        &llm.base_url(),
        &[
            ("SWITCHBOARD_PROVIDER", "anthropic"),
            ("SWITCHBOARD_ANTHROPIC_BASE_URL", &anthropic_url),
            ("SWITCHBOARD_ANTHROPIC_API_KEY", "sk-ant-test-KEY-77"),
            ("SWITCHBOARD_MODEL", "claude-test"),
        ],
    )
    .await;
    let c = client(&server);
    let id = session(&c, ws.path(), None).await;
    llm.push(MockReply::tool_call(
        "toolu_1",
        "view",
        json!({"path": "notes.md"}),
    ));
    llm.push(MockReply::text(&["It says ", "alpha and beta."]));
    let (mut events, run) = send(&c, id, "read notes").await;
    let all = until_run_ends(&mut events, run).await;
    let (out, is_error) = completed(&all, "toolu_1").unwrap();
    assert!(!is_error && out.contains("beta"), "{out}");
    assert_eq!(text_of(&all), "It says alpha and beta.");
    let reqs = llm.message_requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].header("x-api-key"), Some("sk-ant-test-KEY-77"));
    assert_eq!(reqs[0].body["model"], "claude-test");
    assert!(reqs[0].body["system"].as_str().is_some());
    let tools: Vec<&str> = reqs[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(tools.contains(&"view"));
    // The second request carries the tool_use and its tool_result.
    let msgs = reqs[1].body["messages"].as_array().unwrap();
    let blocks: Vec<Value> = msgs
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .collect();
    assert!(
        blocks
            .iter()
            .any(|b| b["type"] == "tool_use" && b["id"] == "toolu_1")
    );
    assert!(blocks.iter().any(|b| b["type"] == "tool_result"
        && b["tool_use_id"] == "toolu_1"
        && b["content"].as_str().is_some_and(|s| s.contains("beta"))));
    assert!(
        llm.chat_requests().is_empty(),
        "the OpenAI endpoint was not used"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_answers_approvals_with_yes_no_and_approve() {
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &llm.base_url(), &[]).await;
    let c = client(&server);
    let ws_s = ws.path().to_string_lossy().into_owned();

    // --yes accepts.
    llm.push(MockReply::tool_call(
        "y1",
        "run_command",
        json!({"command": "touch yes-file"}),
    ));
    llm.push(MockReply::text(&["made it"]));
    let url = server.url.clone();
    let wsc = ws_s.clone();
    let out = tokio::task::spawn_blocking(move || {
        common::api::cli_command(
            &url,
            TOKEN,
            &["chat", "--yes", "--cwd", &wsc, "make a file"],
        )
        .output()
        .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "made it");
    assert!(
        stderr.contains("touch yes-file"),
        "the call is shown: {stderr}"
    );
    assert!(ws.path().join("yes-file").exists());

    // --no rejects, with --mode picking the permission mode.
    llm.push(MockReply::tool_call(
        "n1",
        "run_command",
        json!({"command": "touch no-file"}),
    ));
    llm.push(MockReply::text(&["fine"]));
    let url = server.url.clone();
    let wsc = ws_s.clone();
    let out = tokio::task::spawn_blocking(move || {
        common::api::cli_command(
            &url,
            TOKEN,
            &[
                "chat",
                "--no",
                "--mode",
                "workspace-write",
                "--cwd",
                &wsc,
                "make another",
            ],
        )
        .output()
        .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("not run"), "{stderr}");
    assert!(!ws.path().join("no-file").exists());

    // Without a terminal or a flag, chat waits; `approve --deny --reason` from elsewhere.
    let id = session(&c, ws.path(), None).await;
    llm.push(MockReply::tool_call(
        "a1",
        "run_command",
        json!({"command": "touch other"}),
    ));
    llm.push(MockReply::text(&["understood"]));
    let url = server.url.clone();
    let sid = id.to_string();
    let chat = tokio::task::spawn_blocking(move || {
        common::api::cli_command(&url, TOKEN, &["chat", &sid, "try"])
            .output()
            .unwrap()
    });
    let mut waited = false;
    for _ in 0..300 {
        if c.pending_tools(id).await.unwrap().run_id.is_some() {
            waited = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(waited);
    let url = server.url.clone();
    let sid = id.to_string();
    let approve = tokio::task::spawn_blocking(move || {
        common::api::cli_command(
            &url,
            TOKEN,
            &["approve", &sid, "--deny", "--reason", "use the other dir"],
        )
        .output()
        .unwrap()
    })
    .await
    .unwrap();
    assert!(
        approve.status.success(),
        "{}",
        String::from_utf8_lossy(&approve.stderr)
    );
    let shown = String::from_utf8_lossy(&approve.stdout).to_string();
    assert!(
        shown.contains("rejected: run_command (a1)\n    touch other"),
        "{shown}"
    );
    let out = chat.await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("switchboard approve"),
        "tells how to answer: {stderr}"
    );
    assert!(stderr.contains("use the other dir"), "{stderr}");
    assert!(!ws.path().join("other").exists());
    // approve with nothing pending fails clearly.
    let url = server.url.clone();
    let sid = id.to_string();
    let none = tokio::task::spawn_blocking(move || {
        common::api::cli_command(&url, TOKEN, &["approve", &sid])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(!none.status.success());
    assert!(String::from_utf8_lossy(&none.stderr).contains("nothing waits"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_call_ids_from_the_model_are_made_unique_and_decided_apart() {
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &llm.base_url(), &[]).await;
    let c = client(&server);
    let id = session(&c, ws.path(), None).await;
    llm.push(MockReply::tool_calls(vec![
        switchboard_test_support::mock_llm::MockToolCall::new(
            "dup",
            "run_command",
            json!({"command": "touch first"}),
        ),
        switchboard_test_support::mock_llm::MockToolCall::new(
            "dup",
            "run_command",
            json!({"command": "touch second"}),
        ),
    ]));
    llm.push(MockReply::text(&["ok"]));
    let (mut events, run) = send(&c, id, "two").await;
    until_waiting(&mut events, run).await;
    let pending = c.pending_tools(id).await.unwrap().tool_calls;
    assert_eq!(pending.len(), 2);
    assert_ne!(pending[0].id, pending[1].id, "ids are unique");
    let first = pending
        .iter()
        .find(|p| p.arguments["command"] == "touch first")
        .unwrap();
    let second = pending
        .iter()
        .find(|p| p.arguments["command"] == "touch second")
        .unwrap();
    c.decide_tools(id, &decide(run, &first.id, DecisionAction::Accept, None))
        .await
        .unwrap();
    // Still waiting for the other one.
    assert_eq!(c.pending_tools(id).await.unwrap().tool_calls.len(), 1);
    c.decide_tools(id, &decide(run, &second.id, DecisionAction::Reject, None))
        .await
        .unwrap();
    until_run_ends(&mut events, run).await;
    assert!(ws.path().join("first").exists());
    assert!(!ws.path().join("second").exists());
    // The model got one result per call, under the ids it was sent back with.
    let sent = tool_results_sent(&llm, 1);
    assert_eq!(sent.len(), 2);
    let assistant_ids: Vec<String> = llm.chat_requests()[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
        .map(|t| t["id"].as_str().unwrap().to_string())
        .collect();
    let mut result_ids: Vec<String> = sent.iter().map(|(i, _)| i.clone()).collect();
    let mut want = assistant_ids.clone();
    result_ids.sort();
    want.sort();
    assert_eq!(result_ids, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_cut_by_a_crash_gets_an_error_result_and_the_session_goes_on() {
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let mut server = start(dir.path(), &llm.base_url(), &[]).await;
    let c = client(&server);
    let id = session(&c, ws.path(), Some(PermissionMode::FullAccess)).await;
    llm.push(MockReply::tool_call(
        "k1",
        "run_command",
        json!({"command": "sleep 30"}),
    ));
    let (mut events, _run) = send(&c, id, "sleep").await;
    use futures::StreamExt;
    let started_at = loop {
        let env = tokio::time::timeout(Duration::from_secs(30), events.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if matches!(env.event, AgentEvent::ToolExecutionStarted { .. }) {
            break env.id;
        }
    };
    drop(events);
    server.kill().await;
    let server = start(dir.path(), &llm.base_url(), &[]).await;
    let c = client(&server);
    let mut sse = RawSse::connect(&server.url, id, Some(started_at)).await;
    let (_, name, env) = sse.next().await.unwrap();
    assert_eq!(name, "tool_execution_completed");
    match env.event {
        AgentEvent::ToolExecutionCompleted {
            tool_call_id,
            is_error,
            result,
            ..
        } => {
            assert_eq!(tool_call_id, "k1");
            assert!(
                is_error && result.contains("interrupted by restart"),
                "{result}"
            );
        }
        other => panic!("{other:?}"),
    }
    let (_, name, _) = sse.next().await.unwrap();
    assert_eq!(name, "run_error");
    llm.push(MockReply::text(&["back"]));
    let (mut events, run) = send(&c, id, "again").await;
    let all = until_run_ends(&mut events, run).await;
    assert_eq!(text_of(&all), "back");
    let sent = tool_results_sent(&llm, 1);
    assert_eq!(
        sent.len(),
        1,
        "one result for the interrupted call: {sent:?}"
    );
    assert_eq!(sent[0].0, "k1");
}

/// The next `(event, data)` frame of a `GET /v1/approvals/events` stream.
async fn approval_frame(sse: &mut RawSse) -> (String, Value) {
    let frame = sse.next_frame().await.expect("the approvals stream ended");
    (frame.name, serde_json::from_str(&frame.data).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approvals_inbox_lists_and_streams_every_waiting_approval() {
    use switchboard_test_support::mock_llm::MockToolCall;
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let server = start(
        dir.path(),
        &llm.base_url(),
        &[("SWITCHBOARD_APPROVAL_TIMEOUT_SECS", "600")],
    )
    .await;
    let c = client(&server);
    assert!(c.waiting_approvals().await.unwrap().approvals.is_empty());
    let mut frames = RawSse::open(&server.url, "/v1/approvals/events", None).await;
    let (kind, data) = approval_frame(&mut frames).await;
    assert_eq!(kind, "snapshot");
    assert_eq!(data, json!({"approvals": []}));

    // Session A waits on two calls.
    let a = session(&c, ws.path(), None).await;
    c.update_session(
        a,
        &switchboard_protocol::UpdateSessionRequest {
            title: Some("Session A".into()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    llm.push(MockReply::tool_calls(vec![
        MockToolCall::new("a1", "run_command", json!({"command": "echo one"})),
        MockToolCall::new("a2", "run_command", json!({"command": "echo two"})),
    ]));
    let (mut a_events, a_run) = send(&c, a, "go A").await;
    until_waiting(&mut a_events, a_run).await;
    let (kind, data) = approval_frame(&mut frames).await;
    assert_eq!(kind, "approval_requested", "{data}");
    assert_eq!(data["session_id"], a.to_string());
    assert_eq!(data["run_id"], a_run.to_string());
    assert_eq!(data["session_title"], "Session A");
    assert_eq!(data["backend"], "builtin");
    assert_eq!(data["tool_calls"].as_array().unwrap().len(), 2);
    assert_eq!(data["tool_calls"][0]["arguments"]["command"], "echo one");

    // Session B waits on one call, later: it comes first in the list.
    let b = session(&c, ws.path(), None).await;
    llm.push(MockReply::tool_call(
        "b1",
        "run_command",
        json!({"command": "echo three"}),
    ));
    let (mut b_events, b_run) = send(&c, b, "go B").await;
    until_waiting(&mut b_events, b_run).await;
    let (kind, data) = approval_frame(&mut frames).await;
    assert_eq!(kind, "approval_requested", "{data}");
    assert_eq!(data["session_id"], b.to_string());
    let list = c.waiting_approvals().await.unwrap().approvals;
    assert_eq!(
        list.iter().map(|w| w.session_id).collect::<Vec<_>>(),
        [b, a],
        "newest first"
    );
    let w = &list[0];
    assert!(w.expires_at > w.created_at, "{w:?}");
    let expires = chrono::DateTime::parse_from_rfc3339(&w.expires_at).unwrap();
    let created = chrono::DateTime::parse_from_rfc3339(&w.created_at).unwrap();
    assert_eq!((expires - created).num_seconds(), 600);

    // One of A's calls decided: A is updated, with the other call only.
    c.decide_tools(a, &decide(a_run, "a1", DecisionAction::Accept, None))
        .await
        .unwrap();
    let (kind, data) = approval_frame(&mut frames).await;
    assert_eq!(kind, "approval_updated", "{data}");
    let ids: Vec<&str> = data["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["a2"]);
    assert_eq!(
        c.waiting_approvals().await.unwrap().approvals[1]
            .tool_calls
            .len(),
        1
    );

    // The last one decided: A is resolved, and its run goes on.
    llm.push(MockReply::text(&["A done."]));
    c.decide_tools(a, &decide(a_run, "a2", DecisionAction::Reject, Some("no")))
        .await
        .unwrap();
    let (kind, data) = approval_frame(&mut frames).await;
    assert_eq!(kind, "approval_resolved", "{data}");
    assert_eq!(data, json!({"session_id": a, "run_id": a_run}));
    until_run_ends(&mut a_events, a_run).await;

    // A second stream starts with the snapshot of what still waits.
    let mut second = RawSse::open(&server.url, "/v1/approvals/events", None).await;
    let (kind, data) = approval_frame(&mut second).await;
    assert_eq!(kind, "snapshot");
    assert_eq!(data["approvals"].as_array().unwrap().len(), 1);
    assert_eq!(data["approvals"][0]["session_id"], b.to_string());

    // Cancelling B's run resolves its approval on both streams.
    c.cancel(b, b_run).await.unwrap();
    for f in [&mut frames, &mut second] {
        let (kind, data) = approval_frame(f).await;
        assert_eq!(kind, "approval_resolved", "{data}");
        assert_eq!(data["session_id"], b.to_string());
    }
    assert!(c.waiting_approvals().await.unwrap().approvals.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_approve_changed_mid_run_applies_to_the_run_under_way() {
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &llm.base_url(), &[]).await;
    let c = client(&server);
    let id = session(&c, ws.path(), Some(PermissionMode::WorkspaceWrite)).await;
    llm.push(MockReply::tool_call(
        "c1",
        "run_command",
        json!({"command": "echo first"}),
    ));
    llm.push(MockReply::tool_call(
        "c2",
        "run_command",
        json!({"command": "echo second"}),
    ));
    llm.push(MockReply::text(&["Both ran."]));
    let (mut events, run) = send(&c, id, "two commands").await;
    until_waiting(&mut events, run).await;
    // "Always allow run_command here": the session's list, then the waiting call.
    c.update_session(
        id,
        &switchboard_protocol::UpdateSessionRequest {
            auto_approve: Some(AutoApprove::Tools(vec!["run_command".into()])),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    c.decide_tools(id, &decide(run, "c1", DecisionAction::Accept, None))
        .await
        .unwrap();
    let all = until_run_ends(&mut events, run).await;
    assert!(completed(&all, "c2").unwrap().0.starts_with("second"));
    let asked: Vec<_> = all
        .iter()
        .filter_map(|e| match &e.event {
            AgentEvent::WaitingForToolApproval { tool_call_ids, .. } => Some(tool_call_ids.clone()),
            _ => None,
        })
        .collect();
    assert!(asked.is_empty(), "c2 was asked about: {asked:?}");
    // Narrowing applies the same way: the next run of the session asks again.
    c.update_session(
        id,
        &switchboard_protocol::UpdateSessionRequest {
            auto_approve: Some(AutoApprove::Keyword(
                switchboard_protocol::AutoApproveKeyword::None,
            )),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    llm.push(MockReply::tool_call(
        "c3",
        "run_command",
        json!({"command": "echo third"}),
    ));
    llm.push(MockReply::text(&["Asked."]));
    let (mut events, run) = send(&c, id, "again").await;
    until_waiting(&mut events, run).await;
    c.cancel(id, run).await.unwrap();
    until_run_ends(&mut events, run).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn who_decided_is_carried_by_the_calls_events() {
    use switchboard_test_support::mock_llm::MockToolCall;
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &llm.base_url(), &[]).await;
    let c = client(&server);
    let id = session(&c, ws.path(), None).await;
    llm.push(MockReply::tool_calls(vec![
        MockToolCall::new("w1", "run_command", json!({"command": "echo allowed"})),
        MockToolCall::new("w2", "run_command", json!({"command": "echo denied"})),
    ]));
    llm.push(MockReply::text(&["Done."]));
    let (mut events, run) = send(&c, id, "two").await;
    until_waiting(&mut events, run).await;
    let url = format!("{}/v1/sessions/{id}/tools/decisions", server.url);
    let post = |body: Value| {
        let url = url.clone();
        async move {
            let r = reqwest::Client::new()
                .post(url)
                .bearer_auth(TOKEN)
                .json(&body)
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    for bad in ["", "two\nlines", &"x".repeat(101)] {
        let (status, body) =
            post(json!({"run_id": run, "decisions": {"w1": {"action": "accept", "by": bad}}}))
                .await;
        assert_eq!(
            (status, body["code"].as_str()),
            (400, Some("validation_failed")),
            "{bad:?}: {body}"
        );
        assert!(body.to_string().contains("decisions.w1.by"), "{body}");
    }
    let (status, body) = post(json!({"run_id": run, "decisions": {
        "w1": {"action": "accept", "by": "Alice (telegram)"},
        "w2": {"action": "reject", "content": "not that one", "by": "Bob (slack)"},
    }}))
    .await;
    assert_eq!(status, 200, "{body}");
    let all = until_run_ends(&mut events, run).await;
    let by: Vec<(String, Option<String>)> = all
        .iter()
        .filter_map(|e| match &e.event {
            AgentEvent::ToolExecutionStarted {
                tool_call_id,
                decided_by,
                ..
            }
            | AgentEvent::ToolRejected {
                tool_call_id,
                decided_by,
                ..
            } => Some((tool_call_id.clone(), decided_by.clone())),
            _ => None,
        })
        .collect();
    assert!(
        by.contains(&("w1".into(), Some("Alice (telegram)".into()))),
        "{by:?}"
    );
    assert!(
        by.contains(&("w2".into(), Some("Bob (slack)".into()))),
        "{by:?}"
    );
}
