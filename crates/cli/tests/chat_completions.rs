#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! The OpenAI-compatible front door, driven by the official `openai` Python SDK (PyPI):
//! models, a streamed completion, the conversation continued by header and by metadata, a
//! denied tool call, and errors in OpenAI's shape raised as the SDK's exceptions. Then,
//! over plain HTTP: the other approval policies (`auto_approve`, `wait`) and a model naming
//! an ACP agent.

mod common;

use common::*;
use serde_json::json;
use switchboard_protocol::{AgentEvent, BackendSpec, DecisionAction};
use switchboard_test_support::mock_llm::{MockLlm, MockReply};
use switchboard_test_support::process::ServerProcess;
use uuid::Uuid;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_sdk_streams_continues_and_gets_its_errors() {
    let llm = MockLlm::start().await;
    llm.push(MockReply::text_slow(&["Hel", "lo ", "there"], 30));
    llm.push(MockReply::text(&["Again."]));
    llm.push(MockReply::text(&["Third."]));
    llm.push(MockReply::tool_call(
        "c1",
        "run_command",
        serde_json::json!({"command": "touch denied.txt"}),
    ));
    llm.push(MockReply::text(&["Not running it."]));
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let cwd = ws.path().to_string_lossy().to_string();
    let server = start(
        dir.path(),
        &llm.base_url(),
        &[("SWITCHBOARD_DEFAULT_CWD", cwd.as_str())],
    )
    .await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/openai_client.py");
    let url = server.url.clone();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .arg(script)
            .env("SB_URL", &url)
            .env("SB_TOKEN", TOKEN)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}\n{}", server.logs());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();

    assert_eq!(v["models"], serde_json::json!(["switchboard/builtin"]));
    assert_eq!(v["streamed"], "Hello there");
    assert_eq!(v["finish"], "stop");
    assert!(v["usage"].as_u64().unwrap() > 0, "{v}");
    assert!(
        v["chunks"].as_u64().unwrap() >= 4,
        "role, text, finish, usage: {v}"
    );
    assert_eq!(v["second"], "Again.");
    assert_eq!(v["second_finish"], "stop");
    assert_eq!(v["third"], "Third.");
    assert_eq!(v["denied"], "Not running it.");
    assert!(
        !ws.path().join("denied.txt").exists(),
        "a denied command ran"
    );
    assert_eq!(v["unknown_model"]["status"], 404);
    assert_eq!(v["unknown_model"]["code"], "model_not_found");
    assert_eq!(v["unknown_model"]["type"], "not_found_error");
    assert_eq!(v["bad_token"]["status"], 401);
    assert_eq!(v["bad_token"]["code"], "invalid_token");
    assert_eq!(v["unknown_session"]["code"], "session_not_found");

    // One session carried the three turns; the first had the client's context.
    let c = client(&server);
    let session: uuid::Uuid = v["session"].as_str().unwrap().parse().unwrap();
    let msgs = c.list_messages(session, None, None).await.unwrap().messages;
    let users: Vec<&str> = msgs
        .iter()
        .filter(|m| m.role == switchboard_protocol::Role::User)
        .map(|m| m.content.as_str())
        .collect();
    assert_eq!(users.len(), 3, "{users:?}");
    assert!(users[0].starts_with("say hello"), "{users:?}");
    assert_eq!(users[1], "and again");
    let first = llm.chat_requests()[0].body.to_string();
    assert!(first.contains("Be brief."), "{first}");
    assert!(first.contains("earlier answer"), "{first}");
    // The denied call was recorded as refused, in its own session.
    let denied: uuid::Uuid = v["denied_session"].as_str().unwrap().parse().unwrap();
    assert_ne!(denied, session);
    let transcript = c.transcript_markdown(denied).await.unwrap();
    assert!(
        transcript.contains("OpenAI-compatible endpoint"),
        "{transcript}"
    );
}

/// `POST /v1/chat/completions` with `body`, continuing `session` if given.
async fn complete(
    server: &ServerProcess,
    body: serde_json::Value,
    session: Option<Uuid>,
) -> reqwest::Response {
    let mut req = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", server.url))
        .bearer_auth(TOKEN)
        // A policy that waited by mistake fails the test instead of hanging it.
        .timeout(std::time::Duration::from_secs(60))
        .json(&body);
    if let Some(id) = session {
        req = req.header("X-Switchboard-Session", id.to_string());
    }
    req.send().await.unwrap()
}

/// The session an answer names in its `X-Switchboard-Session` header.
fn session_of(resp: &reqwest::Response) -> Uuid {
    resp.headers()["x-switchboard-session"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// An unstreamed completion's text, after checking that it finished normally and names
/// the session of its header.
async fn completed_text(resp: reqwest::Response) -> (Uuid, String) {
    assert_eq!(resp.status(), 200);
    let session = session_of(&resp);
    let v: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(v["object"], "chat.completion", "{v}");
    assert_eq!(v["session_id"], session.to_string(), "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    let text = v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    (session, text)
}

/// Every event of the session's log so far (up to the end of its last run).
async fn log_of(server: &ServerProcess, id: Uuid) -> Vec<switchboard_protocol::EventEnvelope> {
    let c = client(server);
    let mut events = c.subscribe(id, Some(0));
    until(&mut events, "the end of the run", |e| e.is_terminal()).await
}

fn user(text: &str) -> serde_json::Value {
    json!([{"role": "user", "content": text}])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_approve_runs_tool_calls_without_a_human() {
    let llm = MockLlm::start().await;
    llm.push(MockReply::tool_call(
        "c1",
        "run_command",
        json!({"command": "touch approved.txt"}),
    ));
    llm.push(MockReply::text(&["Ran it."]));
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let cwd = ws.path().to_string_lossy().to_string();
    let config = test_agent_config(dir.path());
    let config = config.to_string_lossy();
    let server = start(
        &dir.path().join("data"),
        &llm.base_url(),
        &[
            ("SWITCHBOARD_DEFAULT_CWD", cwd.as_str()),
            ("SWITCHBOARD_CONFIG", &config),
            ("SWITCHBOARD_CHAT_COMPLETIONS_APPROVALS", "auto_approve"),
        ],
    )
    .await;

    // The built-in agent: the command (which workspace-write asks about) runs unasked.
    let body = json!({"model": "switchboard/builtin", "messages": user("make the file")});
    let (session, text) = completed_text(complete(&server, body, None).await).await;
    assert_eq!(text, "Ran it.");
    assert!(ws.path().join("approved.txt").exists(), "the command ran");
    let log = log_of(&server, session).await;
    assert!(
        !kinds(&log).contains(&"waiting_for_tool_approval"),
        "nobody was asked: {:?}",
        kinds(&log)
    );
    let reqs = llm.chat_requests();
    assert_eq!(reqs.len(), 2);
    let second = reqs[1].body.to_string();
    assert!(second.contains("c1"), "the result went back: {second}");

    // An ACP agent's permission request is answered the same way.
    let body = json!({"model": "switchboard/agent/test", "messages": user("[tool]")});
    let (session, text) = completed_text(complete(&server, body, None).await).await;
    assert_eq!(text, "The tool ran.");
    let log = log_of(&server, session).await;
    assert!(
        !kinds(&log).contains(&"waiting_for_tool_approval"),
        "{:?}",
        kinds(&log)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_leaves_the_approval_to_another_surface() {
    let llm = MockLlm::start().await;
    llm.push(MockReply::tool_call(
        "c1",
        "run_command",
        json!({"command": "touch waited.txt"}),
    ));
    llm.push(MockReply::text(&["Ran it ", "after all."]));
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let cwd = ws.path().to_string_lossy().to_string();
    let server = start(
        dir.path(),
        &llm.base_url(),
        &[
            ("SWITCHBOARD_DEFAULT_CWD", cwd.as_str()),
            ("SWITCHBOARD_CHAT_COMPLETIONS_APPROVALS", "wait"),
        ],
    )
    .await;
    let c = client(&server);

    // Streamed, so the session is known (from the header) while the completion is pending.
    let body = json!({
        "model": "switchboard/builtin",
        "stream": true,
        "messages": user("make the file"),
    });
    let resp = complete(&server, body, None).await;
    assert_eq!(resp.status(), 200);
    let session = session_of(&resp);
    let answer = tokio::spawn(resp.text());

    let mut events = c.subscribe(session, Some(0));
    let seen = until(&mut events, "the approval wait", |e| {
        matches!(e, AgentEvent::WaitingForToolApproval { .. })
    })
    .await;
    let run = seen.last().unwrap().event.run_id();
    // Nobody on the door answers it: the completion stays open and the command waits.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(
        !answer.is_finished(),
        "the completion waits for the approval"
    );
    assert!(!ws.path().join("waited.txt").exists());
    let pending = c.pending_tools(session).await.unwrap();
    assert_eq!(pending.run_id, Some(run));
    assert_eq!(pending.tool_calls[0].id, "c1");

    // Approved over HTTP (as from the console or the phone): the call runs and the
    // completion ends with the reply that followed it.
    c.decide_tools(session, &decide(run, "c1", DecisionAction::Accept, None))
        .await
        .unwrap();
    let raw = tokio::time::timeout(std::time::Duration::from_secs(30), answer)
        .await
        .expect("the completion ends once the approval is decided")
        .unwrap()
        .unwrap();
    assert!(ws.path().join("waited.txt").exists(), "the command ran");
    let datas: Vec<&str> = raw
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    assert_eq!(datas.last(), Some(&"[DONE]"), "{raw}");
    let chunks: Vec<serde_json::Value> = datas[..datas.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "Ran it after all.", "{raw}");
    let finish: Vec<&str> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["finish_reason"].as_str())
        .collect();
    assert_eq!(finish, ["stop"], "{raw}");
    let log = log_of(&server, session).await;
    assert!(
        kinds(&log).contains(&"waiting_for_tool_approval"),
        "{:?}",
        kinds(&log)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_names_an_acp_agent() {
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = test_agent_config(dir.path());
    let config = config.to_string_lossy();
    let server = start(
        &dir.path().join("data"),
        &llm.base_url(),
        &[("SWITCHBOARD_CONFIG", &config)],
    )
    .await;
    let c = client(&server);

    let models: serde_json::Value = reqwest::Client::new()
        .get(format!("{}/v1/models", server.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&"switchboard/agent/test"), "{models}");
    assert!(ids.contains(&"switchboard/builtin"), "{models}");

    // The test agent answers, in a session whose backend it is.
    let body = json!({"model": "switchboard/agent/test", "messages": user("hello")});
    let (session, text) = completed_text(complete(&server, body, None).await).await;
    assert_eq!(text, "Hello from the test agent");
    let detail = c.get_session(session).await.unwrap();
    assert_eq!(detail.config.backend, BackendSpec::Acp("test".into()));
    assert!(
        llm.chat_requests().is_empty(),
        "the built-in model was not used"
    );

    // Continued by header: the same agent session got both prompts.
    let body = json!({"model": "switchboard/agent/test", "messages": user("[count]")});
    let (again, text) = completed_text(complete(&server, body, Some(session)).await).await;
    assert_eq!(again, session);
    assert_eq!(text, "seen 2 prompts");

    // An agent that is not configured is no model.
    let body = json!({"model": "switchboard/agent/nope", "messages": user("hello")});
    let resp = complete(&server, body, None).await;
    assert_eq!(resp.status(), 404);
    let v: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["code"], "model_not_found", "{v}");
}
