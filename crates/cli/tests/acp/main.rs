#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! ACP agents as session backends, end to end: the real server drives the scriptable test
//! agent (`switchboard-test-agent`, the agent side of the same ACP crate) over stdio.

#[path = "../common/mod.rs"]
mod common;
mod lifecycle;
mod question;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use switchboard_client::Client;
use switchboard_protocol::{
    AgentEvent, BackendSpec, CreateSessionRequest, DecisionAction, EventEnvelope, MessageType,
    PermissionMode, SendMessageRequest, SteeringDelivery,
};
use switchboard_test_support::mock_llm::MockLlm;
use switchboard_test_support::process::ServerProcess;
use uuid::Uuid;

fn agent_bin() -> &'static str {
    env!("CARGO_BIN_EXE_switchboard-test-agent")
}

/// A test world: a data dir, a workspace, a log file for the agent, a config naming agents.
struct World {
    dir: tempfile::TempDir,
    ws: tempfile::TempDir,
    log: PathBuf,
    config: PathBuf,
    llm: MockLlm,
}

impl World {
    /// `agents`: name → extra env for the test agent (`command` is the test agent).
    async fn new(agents: &[(&str, &[(&str, &str)])]) -> World {
        let dir = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let log = dir.path().join("agent.log");
        let state = dir.path().join("agent-state");
        std::fs::create_dir_all(&state).unwrap();
        let mut toml = String::new();
        for (name, env) in agents {
            let mut envs: BTreeMap<String, String> = BTreeMap::new();
            envs.insert("TEST_AGENT_LOG".into(), log.to_string_lossy().into());
            envs.insert(
                "TEST_AGENT_STATE_DIR".into(),
                state.to_string_lossy().into(),
            );
            for (k, v) in *env {
                envs.insert((*k).into(), (*v).into());
            }
            let env_line: Vec<String> = envs.iter().map(|(k, v)| format!("{k} = {v:?}")).collect();
            // Its log and state, outside its workspace, granted to it in the sandbox.
            let paths: Vec<&Path> = envs
                .values()
                .map(Path::new)
                .filter(|p| p.is_absolute())
                .collect();
            toml.push_str(&format!(
                "[agents.{name}]\ncommand = {:?}\nenv = {{ {} }}\n{}\n",
                agent_bin(),
                env_line.join(", "),
                common::agent_sandbox_rules(name, &paths),
            ));
        }
        let config = dir.path().join("switchboard.toml");
        std::fs::write(&config, toml).unwrap();
        World {
            dir,
            ws,
            log,
            config,
            llm: MockLlm::start().await,
        }
    }

    async fn server(&self, extra: &[(&str, &str)]) -> ServerProcess {
        let config = self.config.to_string_lossy().to_string();
        let mut env: Vec<(&str, &str)> = vec![("SWITCHBOARD_CONFIG", config.as_str())];
        env.extend_from_slice(extra);
        start(&self.dir.path().join("data"), &self.llm.base_url(), &env).await
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    async fn session(&self, c: &Client, agent: &str, mode: Option<PermissionMode>) -> Uuid {
        c.create_session(&CreateSessionRequest {
            cwd: Some(self.ws.path().to_string_lossy().into_owned()),
            backend: Some(BackendSpec::Acp(agent.into())),
            permission_mode: mode,
            ..CreateSessionRequest::default()
        })
        .await
        .unwrap()
        .id
    }
}

fn stop_reason(events: &[EventEnvelope]) -> String {
    match &events.last().unwrap().event {
        // The backend's own words where it gave them (`end_turn`), else the outcome.
        AgentEvent::RunCompleted {
            stop_reason,
            backend_stop_reason,
            ..
        } => backend_stop_reason
            .clone()
            .unwrap_or_else(|| stop_reason.to_string()),
        other => panic!("expected RunCompleted, got {other:?}"),
    }
}

fn run_error(events: &[EventEnvelope]) -> String {
    match &events.last().unwrap().event {
        AgentEvent::RunError { error, .. } => error.clone(),
        other => panic!("expected RunError, got {other:?}"),
    }
}

/// Waits until the agent's log has a line containing `needle`.
async fn logged(w: &World, needle: &str) {
    for _ in 0..200 {
        if w.log().contains(needle) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("agent log lacks {needle:?}:\n{}", w.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_session_streams_the_agents_reply_thoughts_and_plan() {
    let w = World::new(&[("tester", &[])]).await;
    let server = w.server(&[]).await;
    let c = client(&server);
    // An unknown agent is refused up front, naming the configured ones.
    let err = c
        .create_session(&CreateSessionRequest {
            backend: Some(BackendSpec::Acp("nope".into())),
            ..CreateSessionRequest::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(422));
    assert!(err.to_string().contains("tester"), "{err}");

    let id = w.session(&c, "tester", None).await;
    let (mut events, run) = send(&c, id, "hi").await;
    let all = until_run_ends(&mut events, run).await;
    assert_eq!(text_of(&all), "Hello from the test agent");
    assert_eq!(stop_reason(&all), "end_turn");
    logged(&w, "initialize").await;
    assert!(w.log().contains("new_session "), "{}", w.log());
    // The agent ran in the workspace, without the server's secrets, and its stderr went to
    // the server log.
    let ws = w.ws.path().canonicalize().unwrap();
    assert!(
        w.log().contains(&format!("cwd={} ", ws.display())),
        "{}",
        w.log()
    );
    assert!(w.log().contains("token=unset openai=unset"), "{}", w.log());
    assert!(
        server.logs().contains("test agent starting"),
        "{}",
        server.logs()
    );

    let (mut events, run) = send(&c, id, "[think] [plan] go").await;
    let all = until_run_ends(&mut events, run).await;
    assert!(all.iter().any(
        |e| matches!(&e.event, AgentEvent::ThoughtDelta { delta, .. } if delta == "pondering")
    ));
    let plan = all
        .iter()
        .find_map(|e| match &e.event {
            AgentEvent::PlanUpdated { entries, .. } => Some(entries.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(plan.len(), 2);
    assert_eq!(plan[0].content, "read the code");
    assert_eq!(plan[0].status, "in_progress");
    assert!(
        !text_of(&all).contains("pondering"),
        "thoughts are not reply text"
    );
    // One process served both turns.
    assert_eq!(w.log().matches("initialize").count(), 1, "{}", w.log());
    let msgs = c.list_messages(id, None, None).await.unwrap().messages;
    let roles: Vec<&str> = msgs.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant"]);
    assert_eq!(msgs[1].content, "Hello from the test agent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permission_requests_become_approvals_answerable_over_http() {
    let w = World::new(&[("tester", &[])]).await;
    let server = w.server(&[]).await;
    let c = client(&server);
    let id = w.session(&c, "tester", None).await;

    // Accept → the agent gets allow-once and finishes.
    let (mut events, run) = send(&c, id, "[tool]").await;
    let seen = until(&mut events, "the event", |e| {
        matches!(e, AgentEvent::WaitingForToolApproval { .. })
    })
    .await;
    let proposed = seen
        .iter()
        .find_map(|e| match &e.event {
            AgentEvent::ToolCallsProposed { tool_calls, .. } => Some(tool_calls.clone()),
            _ => None,
        })
        .unwrap();
    // Named by kind (what auto_approve matches); the agent's title is only shown.
    assert_eq!(proposed[0].name, "acp__execute");
    assert_eq!(
        proposed[0].metadata.as_ref().unwrap()["title"],
        "Run echo hi"
    );
    assert_eq!(proposed[0].arguments["command"], "echo hi");
    let preview = proposed[0].metadata.as_ref().unwrap()["preview"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(preview, "execute: Run echo hi");
    let pending = c.pending_tools(id).await.unwrap();
    assert_eq!(pending.run_id, Some(run));
    let call_id = pending.tool_calls[0].id.clone();
    c.decide_tools(id, &decide(run, &call_id, DecisionAction::Accept, None))
        .await
        .unwrap();
    let rest = until_run_ends(&mut events, run).await;
    logged(&w, "permission_outcome allow-once").await;
    assert!(rest.iter().any(|e| matches!(&e.event, AgentEvent::ToolExecutionCompleted { result, is_error: false, .. } if result == "hi")));
    assert_eq!(text_of(&rest), "The tool ran.");
    assert_eq!(stop_reason(&rest), "end_turn");

    // Reject → reject-once.
    let (mut events, run) = send(&c, id, "[tool]").await;
    until(&mut events, "the event", |e| {
        matches!(e, AgentEvent::WaitingForToolApproval { .. })
    })
    .await;
    let call_id = c.pending_tools(id).await.unwrap().tool_calls[0].id.clone();
    c.decide_tools(id, &decide(run, &call_id, DecisionAction::Reject, None))
        .await
        .unwrap();
    let rest = until_run_ends(&mut events, run).await;
    logged(&w, "permission_outcome reject-once").await;
    assert_eq!(text_of(&rest), "The tool was rejected.");
    assert!(
        rest.iter()
            .any(|e| matches!(&e.event, AgentEvent::ToolRejected { .. }))
    );

    // Policy first: full-access allows without asking; read-only refuses an edit.
    let fa = w
        .session(&c, "tester", Some(PermissionMode::FullAccess))
        .await;
    let (mut events, run) = send(&c, fa, "[tool]").await;
    let all = until_run_ends(&mut events, run).await;
    assert!(!kinds(&all).contains(&"waiting_for_tool_approval"));
    assert_eq!(text_of(&all), "The tool ran.");
    let before = w.log().matches("permission_outcome reject-once").count();
    let ro = w
        .session(&c, "tester", Some(PermissionMode::ReadOnly))
        .await;
    let (mut events, run) = send(&c, ro, "[edit]").await;
    let all = until_run_ends(&mut events, run).await;
    assert!(!kinds(&all).contains(&"waiting_for_tool_approval"));
    assert!(all.iter().any(|e| matches!(&e.event, AgentEvent::ToolRejected { reason, .. } if reason.contains("read-only"))));
    assert_eq!(text_of(&all), "The edit was rejected.");
    assert_eq!(
        w.log().matches("permission_outcome reject-once").count(),
        before + 1
    );
    // A rejected call never shows as started.
    assert!(!kinds(&all).contains(&"tool_execution_started"));
    // workspace-write: an edit inside the workspace runs, one outside asks.
    let ww = w.session(&c, "tester", None).await;
    let (mut events, run) = send(&c, ww, "[edit]").await;
    let all = until_run_ends(&mut events, run).await;
    assert!(!kinds(&all).contains(&"waiting_for_tool_approval"));
    assert_eq!(text_of(&all), "The edit ran.");
    let (mut events, run) = send(&c, ww, "[edit-outside]").await;
    until(&mut events, "the event", |e| {
        matches!(e, AgentEvent::WaitingForToolApproval { .. })
    })
    .await;
    let call_id = c.pending_tools(ww).await.unwrap().tool_calls[0].id.clone();
    c.decide_tools(ww, &decide(run, &call_id, DecisionAction::Reject, None))
        .await
        .unwrap();
    until_run_ends(&mut events, run).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_permission_is_rejected_after_the_timeout() {
    let w = World::new(&[("tester", &[])]).await;
    let server = w
        .server(&[("SWITCHBOARD_APPROVAL_TIMEOUT_SECS", "1")])
        .await;
    let c = client(&server);
    let id = w.session(&c, "tester", None).await;
    let (mut events, run) = send(&c, id, "[tool]").await;
    let rest = until_run_ends(&mut events, run).await;
    assert!(rest.iter().any(|e| matches!(&e.event, AgentEvent::ToolRejected { reason, .. } if reason.contains("timed out"))));
    logged(&w, "permission_outcome reject-once").await;
    assert_eq!(text_of(&rest), "The tool was rejected.");
}

fn pid_alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

/// Pids (as this test sees them) of the agent's processes running in this world's workspace
/// — in the sandbox, the agent's own pid is its namespace's, so they are found by their
/// program and working directory: the agent, and bubblewrap around it where installed.
fn agent_pids(w: &World) -> Vec<u32> {
    let ws = std::fs::canonicalize(w.ws.path()).unwrap();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline).contains("switchboard-test-agent")
                && std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|c| c == ws)
                && pid_alive(*pid)
        })
        .collect()
}

async fn gone(pids: &[u32]) {
    assert!(!pids.is_empty(), "no agent process was found");
    for _ in 0..100 {
        if !pids.iter().any(|p| pid_alive(*p)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("agent processes {pids:?} still run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_ignores_cancel_is_stopped_and_resumed_next_time() {
    let w = World::new(&[("tester", &[])]).await;
    let server = w.server(&[]).await;
    let c = client(&server);
    let id = w.session(&c, "tester", None).await;
    let (mut events, run) = send(&c, id, "[stubborn]").await;
    until(&mut events, "the event", |e| {
        matches!(e, AgentEvent::TextDelta { .. })
    })
    .await;
    let pids = agent_pids(&w);
    c.cancel(id, run).await.unwrap();
    let rest = until_run_ends(&mut events, run).await;
    assert_eq!(stop_reason(&rest), "cancelled");
    gone(&pids).await;
    // The next turn has a fresh process that resumed the ACP session, and nothing of the
    // old turn leaks into it.
    let (mut events, run) = send(&c, id, "[count]").await;
    let all = until_run_ends(&mut events, run).await;
    assert_eq!(text_of(&all), "seen 2 prompts");
    assert!(w.log().contains("load_session "), "{}", w.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_dying_while_its_permission_waits_ends_the_run_at_once() {
    let w = World::new(&[("tester", &[])]).await;
    let server = w.server(&[]).await;
    let c = client(&server);
    let id = w.session(&c, "tester", None).await;
    let t0 = std::time::Instant::now();
    let (mut events, run) = send(&c, id, "[tool-crash]").await;
    let all = until_run_ends(&mut events, run).await;
    assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());
    let err = run_error(&all);
    assert!(err.contains("exited"), "{err}");
    // The approval is gone: nothing can be decided for a dead agent.
    assert!(c.pending_tools(id).await.unwrap().run_id.is_none());
    // A JSON-RPC error from the agent is a clear RunError too.
    let (mut events, run) = send(&c, id, "[error]").await;
    let all = until_run_ends(&mut events, run).await;
    let err = run_error(&all);
    assert!(
        err.contains("scripted failure") && err.contains("tester"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_session_mid_turn_stops_its_agent() {
    let w = World::new(&[("tester", &[])]).await;
    let server = w.server(&[]).await;
    let c = client(&server);
    let id = w.session(&c, "tester", None).await;
    let (mut events, _run) = send(&c, id, "[slow]").await;
    until(&mut events, "the event", |e| {
        matches!(e, AgentEvent::TextDelta { .. })
    })
    .await;
    let pids = agent_pids(&w);
    c.delete_session(id).await.unwrap();
    gone(&pids).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_mid_turn_sends_session_cancel_and_answers_permissions_cancelled() {
    let w = World::new(&[("tester", &[])]).await;
    let server = w.server(&[]).await;
    let c = client(&server);
    let id = w.session(&c, "tester", None).await;

    // While a permission request waits.
    let (mut events, run) = send(&c, id, "[tool]").await;
    until(&mut events, "the event", |e| {
        matches!(e, AgentEvent::WaitingForToolApproval { .. })
    })
    .await;
    c.cancel(id, run).await.unwrap();
    let rest = until_run_ends(&mut events, run).await;
    assert_eq!(stop_reason(&rest), "cancelled");
    logged(&w, "cancel ").await;
    logged(&w, "permission_outcome cancelled").await;
    // As the protocol asks: session/cancel first, then the answer `cancelled`.
    let log = w.log();
    let cancel_at = log.find("\ncancel ").unwrap();
    let answer_at = log.find("permission_outcome cancelled").unwrap();
    assert!(cancel_at < answer_at, "{log}");
    assert!(c.pending_tools(id).await.unwrap().run_id.is_none());

    // While the agent streams.
    let (mut events, run) = send(&c, id, "[slow]").await;
    until(&mut events, "the event", |e| {
        matches!(e, AgentEvent::TextDelta { .. })
    })
    .await;
    let t0 = std::time::Instant::now();
    c.cancel(id, run).await.unwrap();
    let rest = until_run_ends(&mut events, run).await;
    assert_eq!(stop_reason(&rest), "cancelled");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    // The session goes on with the same agent.
    let (mut events, run) = send(&c, id, "hi").await;
    let all = until_run_ends(&mut events, run).await;
    assert_eq!(text_of(&all), "Hello from the test agent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_agent_is_a_run_error_and_the_next_message_respawns_it() {
    let w = World::new(&[("tester", &[])]).await;
    let server = w.server(&[]).await;
    let c = client(&server);
    let id = w.session(&c, "tester", None).await;
    let (mut events, run) = send(&c, id, "[crash]").await;
    let all = until_run_ends(&mut events, run).await;
    let err = run_error(&all);
    assert!(err.contains("tester") && err.contains("exited"), "{err}");
    assert!(matches!(
        all.last().unwrap().event,
        AgentEvent::RunError {
            retryable: true,
            ..
        }
    ));
    let (mut events, run) = send(&c, id, "[count]").await;
    let all = until_run_ends(&mut events, run).await;
    assert_eq!(stop_reason(&all), "end_turn");
    assert_eq!(
        w.log().matches("initialize").count(),
        2,
        "respawned: {}",
        w.log()
    );
    // The respawned agent resumed the session it had stored.
    assert!(w.log().contains("load_session "), "{}", w.log());
    assert_eq!(text_of(&all), "seen 2 prompts");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_the_session_resumes_through_session_load_or_says_it_cannot() {
    let lost = tempfile::tempdir().unwrap();
    let lost_dir = lost.path().to_string_lossy().to_string();
    let w = World::new(&[
        ("loader", &[]),
        ("forgetful", &[("TEST_AGENT_NO_LOAD", "1")]),
        ("amnesiac", &[("TEST_AGENT_STATE_DIR", lost_dir.as_str())]),
    ])
    .await;
    let mut server = w.server(&[]).await;
    let c = client(&server);
    let a = w.session(&c, "loader", None).await;
    let b = w.session(&c, "forgetful", None).await;
    let d = w.session(&c, "amnesiac", None).await;
    for id in [a, b, d] {
        let (mut events, run) = send(&c, id, "[count]").await;
        let all = until_run_ends(&mut events, run).await;
        assert_eq!(text_of(&all), "seen 1 prompts");
    }
    server.stop().await;
    // The amnesiac agent loses what it stored: its session/load will fail.
    for f in std::fs::read_dir(lost.path()).unwrap() {
        std::fs::remove_file(f.unwrap().path()).unwrap();
    }

    let server = w.server(&[]).await;
    let c = client(&server);
    let (mut events, run) = send(&c, a, "[count]").await;
    let all = until_run_ends(&mut events, run).await;
    assert_eq!(
        text_of(&all),
        "seen 2 prompts",
        "the agent kept its session"
    );
    assert!(w.log().contains("load_session "), "{}", w.log());
    assert!(!kinds(&all).contains(&"notice"));

    let (mut events, run) = send(&c, b, "[count]").await;
    let all = until_run_ends(&mut events, run).await;
    assert_eq!(text_of(&all), "seen 1 prompts", "a new ACP session");
    let notice = all
        .iter()
        .find_map(|e| match &e.event {
            AgentEvent::Notice { message, .. } => Some(message.clone()),
            _ => None,
        })
        .expect("the user is told");
    assert!(
        notice.contains("forgetful") && notice.contains("new session"),
        "{notice}"
    );

    let (mut events, run) = send(&c, d, "[count]").await;
    let all = until_run_ends(&mut events, run).await;
    assert_eq!(text_of(&all), "seen 1 prompts");
    let notice = all
        .iter()
        .find_map(|e| match &e.event {
            AgentEvent::Notice { message, .. } => Some(message.clone()),
            _ => None,
        })
        .expect("the user is told");
    assert!(notice.contains("could not resume"), "{notice}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misconfigured_agents_are_clear_run_errors() {
    let w = World::new(&[
        ("quitter", &[("TEST_AGENT_EXIT_AT_ONCE", "1")]),
        ("grumpy", &[("TEST_AGENT_FAIL_INIT", "1")]),
    ])
    .await;
    // An agent whose command does not exist.
    let mut toml = std::fs::read_to_string(&w.config).unwrap();
    toml.push_str("[agents.ghost]\ncommand = \"/nonexistent/agent-binary\"\n");
    std::fs::write(&w.config, toml).unwrap();
    let server = w.server(&[]).await;
    let c = client(&server);
    for (agent, want) in [
        (
            "ghost",
            vec!["ghost", "cannot start", "/nonexistent/agent-binary"],
        ),
        ("quitter", vec!["quitter", "exited during initialize"]),
        (
            "grumpy",
            vec![
                "grumpy",
                "initialize failed",
                "test agent refuses to initialize",
            ],
        ),
    ] {
        let id = w.session(&c, agent, None).await;
        let (mut events, run) = send(&c, id, "hi").await;
        let all = until_run_ends(&mut events, run).await;
        let err = run_error(&all);
        for w in want {
            assert!(err.contains(w), "{agent}: {err:?} lacks {w:?}");
        }
    }
    // The server is fine.
    assert!(c.health().await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steering_during_a_prompt_goes_with_the_next_prompt_and_follow_ups_queue() {
    let w = World::new(&[("tester", &[])]).await;
    let server = w.server(&[]).await;
    let c = client(&server);
    let id = w.session(&c, "tester", None).await;
    let (mut events, run) = send(&c, id, "[slow]").await;
    until(&mut events, "the event", |e| {
        matches!(e, AgentEvent::TextDelta { .. })
    })
    .await;
    let steer = c
        .send_message(
            id,
            &SendMessageRequest::user("[count] also this", MessageType::Steering),
        )
        .await
        .unwrap();
    assert_eq!(steer.run_id, run);
    assert_eq!(steer.steering, Some(SteeringDelivery::NextPrompt));
    let follow = c
        .send_message(id, &SendMessageRequest::user("hi", MessageType::FollowUp))
        .await
        .unwrap();
    let all = until_run_ends(&mut events, run).await;
    assert_eq!(stop_reason(&all), "end_turn");
    // Two prompts in the one run: the slow one, then the steering.
    assert!(
        text_of(&all).ends_with("seen 2 prompts"),
        "{}",
        text_of(&all)
    );
    assert!(w.log().contains("also this"), "{}", w.log());
    let rest = until_run_ends(&mut events, follow.run_id).await;
    assert_eq!(text_of(&rest), "Hello from the test agent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_chats_with_an_acp_agent() {
    let w = World::new(&[("tester", &[])]).await;
    let server = w.server(&[]).await;
    let url = server.url.clone();
    let ws = w.ws.path().to_string_lossy().to_string();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(bin())
            .args(["chat", "--agent", "tester", "--yes", "--cwd", &ws, "[tool]"])
            .env("SWITCHBOARD_URL", &url)
            .env("SWITCHBOARD_TOKEN", TOKEN)
            .env("SWITCHBOARD_CONFIG", "/dev/null")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "The tool ran.");
    assert!(stderr.contains("Run echo hi"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attached_files_reach_an_acp_agent_as_its_capabilities_allow() {
    let w = World::new(&[
        ("plain", &[]),
        (
            "rich",
            &[("TEST_AGENT_PROMPT_CAPS", "image,embedded_context")],
        ),
    ])
    .await;
    let server = w.server(&[]).await;
    let c = client(&server);
    let mut pdf = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj << /Type /Catalog >> endobj\n".to_vec();
    pdf.extend(std::iter::repeat_n(b'x', 3000));
    let mut png = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];
    png.extend_from_slice(&[0, 0, 0, 0x0d, b'I', b'H', b'D', b'R']);
    png.extend(std::iter::repeat_n(7u8, 500));
    for agent in ["rich", "plain"] {
        let id = w.session(&c, agent, None).await;
        let report = c.upload_file(id, "report.pdf", pdf.clone()).await.unwrap();
        assert_eq!(report.mime, "application/pdf");
        let shot = c.upload_file(id, "shot.png", png.clone()).await.unwrap();
        let mut req =
            SendMessageRequest::user(format!("read these ({agent})"), MessageType::Message);
        req.message.attachments = [&report, &shot]
            .iter()
            .map(|f| switchboard_protocol::AttachmentRef { file_id: f.file_id })
            .collect();
        let mut events = c.subscribe(id, Some(0));
        let run = c.send_message(id, &req).await.unwrap().run_id;
        let evs = until_run_ends(&mut events, run).await;
        assert_eq!(stop_reason(&evs), "end_turn", "{agent}");
        let inbox = w.ws.path().join(".switchboard/inbox");
        let url = |f: &switchboard_protocol::FileInfo| {
            format!("file://{}/{}-{}", inbox.display(), &f.sha256[..8], f.name)
        };
        if agent == "rich" {
            logged(
                &w,
                &format!(
                    "block resource mime=application/pdf uri={} bytes={}",
                    url(&report),
                    pdf.len()
                ),
            )
            .await;
            logged(
                &w,
                &format!(
                    "block image mime=image/png uri={} bytes={}",
                    url(&shot),
                    png.len()
                ),
            )
            .await;
        } else {
            logged(
                &w,
                &format!(
                    "block resource_link mime=application/pdf uri={} bytes={}",
                    url(&report),
                    pdf.len()
                ),
            )
            .await;
            logged(
                &w,
                &format!(
                    "block resource_link mime=image/png uri={} bytes={}",
                    url(&shot),
                    png.len()
                ),
            )
            .await;
        }
        // the links point at real copies in the workspace
        assert_eq!(
            std::fs::read(inbox.join(format!("{}-report.pdf", &report.sha256[..8]))).unwrap(),
            pdf
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_agent_sends_files_through_switchboards_mcp_server_with_its_session_token() {
    let w = World::new(&[("plain", &[])]).await;
    let server = w.server(&[]).await;
    let c = client(&server);
    let mut pdf = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj << /Type /Catalog >> endobj\n".to_vec();
    pdf.extend(std::iter::repeat_n(b'y', 2000));
    std::fs::write(w.ws.path().join("report.pdf"), &pdf).unwrap();
    // A file outside the workspace, and a link inside pointing at it.
    let outside = w.dir.path().join("secret.txt");
    std::fs::write(&outside, "not for sharing").unwrap();
    std::os::unix::fs::symlink(&outside, w.ws.path().join("escape.txt")).unwrap();
    let id = w.session(&c, "plain", None).await;

    // The agent, a real MCP client, spawns the server it was given and calls send_file.
    let (mut events, run) = send(&c, id, "please [share:report.pdf]").await;
    let evs = until_run_ends(&mut events, run).await;
    assert_eq!(stop_reason(&evs), "end_turn");
    logged(&w, "switchboard(stdio)").await;
    logged(&w, "mcp send_file ok").await;
    let shared: Vec<_> = evs
        .iter()
        .filter_map(|e| match &e.event {
            AgentEvent::FileShared {
                run_id,
                file,
                caption,
            } => Some((*run_id, file.clone(), caption.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(shared.len(), 1, "{:?}", kinds(&evs));
    let (shared_run, file, caption) = &shared[0];
    assert_eq!(*shared_run, run);
    assert_eq!(file.name, "report.pdf");
    assert_eq!(file.mime, "application/pdf");
    assert_eq!(caption.as_deref(), Some("from the test agent"));
    let (bytes, mime) = c.download_file(id, file.file_id).await.unwrap();
    assert_eq!(bytes.as_ref(), pdf.as_slice());
    assert_eq!(mime, "application/pdf");
    // Only the session tools: this session is in no relay bundle.
    let text = text_of(&evs);
    assert!(text.contains("sent report.pdf"), "{text}");
    assert!(text.contains("[tools search_sessions,send_file]"), "{text}");

    // search_sessions with the session token: what was said, found again.
    let (mut events, run) = send(&c, id, "[recall:share report]").await;
    let evs = until_run_ends(&mut events, run).await;
    let text = text_of(&evs);
    assert!(
        text.starts_with("recall error=false") && text.contains(&id.to_string()),
        "{text}"
    );

    // Confined to the workspace: a link out of it is refused, and nothing is shared.
    let (mut events, run) = send(&c, id, "[share:escape.txt]").await;
    let evs = until_run_ends(&mut events, run).await;
    let text = text_of(&evs);
    assert!(text.contains("send_file failed"), "{text}");
    assert!(text.contains("outside the session's workspace"), "{text}");
    assert!(
        !evs.iter()
            .any(|e| matches!(e.event, AgentEvent::FileShared { .. })),
        "{:?}",
        kinds(&evs)
    );
    assert_eq!(c.list_files(id).await.unwrap().files.len(), 1);

    // The session token opens that one route of that one session, nothing else.
    let other = w.session(&c, "plain", None).await;
    let (mut events, run) = send(&c, id, &format!("[probe-token:{other}]")).await;
    until_run_ends(&mut events, run).await;
    logged(&w, "probe list=401 other_share=401").await;

    // With no run to share from, the server's token gets a clear 409.
    let err = c
        .share_file(
            id,
            &switchboard_protocol::ShareFileRequest {
                path: "report.pdf".into(),
                caption: None,
                run_id: None,
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("session_not_running"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_an_acp_agent_writes_by_itself_is_checkpointed_and_undone() {
    let w = World::new(&[("plain", &[])]).await;
    let server = w.server(&[("SWITCHBOARD_CHECKPOINTS", "true")]).await;
    let c = client(&server);
    std::fs::write(w.ws.path().join("keep.txt"), "kept\n").unwrap();
    let id = w.session(&c, "plain", None).await;
    let (mut events, run) = send(&c, id, "[write:made.txt]").await;
    let evs = until_run_ends(&mut events, run).await;
    assert_eq!(stop_reason(&evs), "end_turn");
    let changed = evs.iter().find_map(|e| match &e.event {
        AgentEvent::WorkspaceChanged {
            files, insertions, ..
        } => Some((*files, *insertions)),
        _ => None,
    });
    assert_eq!(changed, Some((1, 1)), "{:?}", kinds(&evs));
    let diff = c
        .diff(
            id,
            &switchboard_protocol::DiffQuery {
                run: Some(run),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(
        diff.contains("+++ b/made.txt\n@@ -0,0 +1 @@\n+written by the test agent"),
        "{diff}"
    );
    let list = c.checkpoints(id).await.unwrap().checkpoints;
    c.restore(id, list[0].id.as_str()).await.unwrap();
    assert!(!w.ws.path().join("made.txt").exists());
    assert_eq!(
        std::fs::read_to_string(w.ws.path().join("keep.txt")).unwrap(),
        "kept\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_agent_gets_the_session_s_mcp_servers_in_session_new() {
    let w = World::new(&[("plain", &[])]).await;
    let server = w.server(&[]).await;
    let c = client(&server);
    let calc = switchboard_protocol::McpServerSpec {
        name: "calc".into(),
        command: Some("python3".into()),
        args: vec![concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp_test_server.py").into()],
        ..Default::default()
    };
    let id = c
        .create_session(&CreateSessionRequest {
            cwd: Some(w.ws.path().to_string_lossy().into_owned()),
            backend: Some(BackendSpec::Acp("plain".into())),
            mcp_servers: Some(vec![calc]),
            ..CreateSessionRequest::default()
        })
        .await
        .unwrap()
        .id;
    let (mut events, run) = send(&c, id, "[calc]").await;
    let evs = until_run_ends(&mut events, run).await;
    assert_eq!(stop_reason(&evs), "end_turn");
    logged(&w, "switchboard(stdio),calc(stdio)").await;
    let text = text_of(&evs);
    assert!(text.starts_with("calc says 42"), "{text}");
}
