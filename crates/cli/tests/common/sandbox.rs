//! The world of the sandbox tests (`sandbox.rs`, `sandbox_agents.rs`): a workspace, the
//! places a process must not reach, a server started on them with the mock model, and a
//! command run as the agent's `run_command`.

use std::path::Path;

use serde_json::json;
use switchboard_protocol::{
    AutoApprove, BackendSpec, CreateSessionRequest, EventEnvelope, PermissionMode,
};
use switchboard_test_support::mock_llm::{MockLlm, MockReply};
use switchboard_test_support::process::ServerProcess;

use super::{TOKEN, agent_sandbox_rules, bin, client, until_run_ends};

/// The places a command must not reach, made by the test.
pub struct World {
    pub dir: tempfile::TempDir,
    pub llm: MockLlm,
    /// The events of the last run.
    pub events: std::sync::Mutex<Vec<switchboard_protocol::EventEnvelope>>,
}

impl World {
    pub async fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        for d in ["ws", "other", "home/.ssh", "data"] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        std::fs::write(dir.path().join("data/secret.txt"), "DATA-SECRET\n").unwrap();
        std::fs::write(dir.path().join("home/.ssh/id_test"), "SSH-KEY\n").unwrap();
        std::fs::write(dir.path().join("other/notes.txt"), "OTHER-WS\n").unwrap();
        World {
            dir,
            llm: MockLlm::start().await,
            events: Default::default(),
        }
    }

    pub fn path(&self, p: &str) -> String {
        self.dir.path().join(p).to_str().unwrap().to_string()
    }

    pub async fn serve(&self, extra: &[(&str, &str)]) -> ServerProcess {
        let data = self.path("data");
        let home = self.path("home");
        let mut env = vec![
            ("SWITCHBOARD_CONFIG", "/dev/null"),
            ("SWITCHBOARD_MODEL", "mock-model"),
            ("SWITCHBOARD_PROVIDER_MAX_RETRIES", "0"),
            ("SWITCHBOARD_CHECKPOINTS", "false"),
            ("SWITCHBOARD_LOCAL_MODEL_PORTS", "off"),
            ("HOME", home.as_str()),
        ];
        let url = self.llm.base_url();
        env.push(("SWITCHBOARD_OPENAI_BASE_URL", url.as_str()));
        env.extend_from_slice(extra);
        ServerProcess::start(&bin(), Path::new(&data), TOKEN, &env)
            .await
            .expect("server starts")
    }

    /// Runs `command` as the agent's `run_command` in a session on `ws`: the output the
    /// model was given.
    pub async fn run(
        &self,
        server: &ServerProcess,
        command: &str,
        sandbox: Option<bool>,
    ) -> String {
        let s = self.session(server, None).await;
        self.run_in(server, s, command, sandbox).await
    }

    /// A workspace-write session on `ws` that may run commands, with its own sandbox
    /// network if given.
    pub async fn session(
        &self,
        server: &ServerProcess,
        sandbox: Option<switchboard_protocol::SessionSandbox>,
    ) -> uuid::Uuid {
        client(server)
            .create_session(&CreateSessionRequest {
                cwd: Some(self.path("ws")),
                permission_mode: Some(PermissionMode::WorkspaceWrite),
                auto_approve: Some(AutoApprove::Tools(vec!["run_command".into()])),
                sandbox,
                ..CreateSessionRequest::default()
            })
            .await
            .unwrap()
            .id
    }

    /// Runs `command` in session `s`: the output the model was given.
    pub async fn run_in(
        &self,
        server: &ServerProcess,
        s: uuid::Uuid,
        command: &str,
        sandbox: Option<bool>,
    ) -> String {
        let c = client(server);
        let after = c.get_session(s).await.unwrap().session.last_event_id;
        self.llm.push(MockReply::tool_call(
            "call_1",
            "run_command",
            json!({"command": command, "timeout_secs": 20}),
        ));
        self.llm.push(MockReply::text(&["done"]));
        let mut events = c.subscribe(s, Some(after));
        let mut req = switchboard_protocol::SendMessageRequest::user(
            "go",
            switchboard_protocol::MessageType::Message,
        );
        req.sandbox = sandbox;
        let run = c.send_message(s, &req).await.unwrap().run_id;
        *self.events.lock().unwrap() = until_run_ends(&mut events, run).await;
        last_tool_output(&self.llm)
    }
}

/// The command output the model was last given.
pub fn last_tool_output(llm: &MockLlm) -> String {
    llm.requests()
        .into_iter()
        .rev()
        .find_map(|r| {
            let last = r.body["messages"].as_array()?.last()?.clone();
            (last["role"] == "tool").then(|| last["content"].as_str().unwrap_or("").to_string())
        })
        .unwrap_or_else(|| {
            panic!(
                "the model was not given the command's output: {:?}",
                llm.requests().last().map(|r| r.body.to_string())
            )
        })
}

impl World {
    /// Writes `switchboard.toml` with `[agents.test]`, the test agent logging to `agent.log`
    /// (granted to it in the sandbox), then `extra` lines of its `[agents.test.sandbox]`;
    /// returns the file's path, for `SWITCHBOARD_CONFIG`.
    pub fn agent_config(&self, extra: &str) -> String {
        let log = self.dir.path().join("agent.log");
        let config = self.dir.path().join("switchboard.toml");
        std::fs::write(
            &config,
            format!(
                "[agents.test]\ncommand = {:?}\nenv = {{ TEST_AGENT_LOG = {:?} }}\n{}{extra}",
                env!("CARGO_BIN_EXE_switchboard-test-agent"),
                log.to_string_lossy(),
                agent_sandbox_rules("test", &[&log]),
            ),
        )
        .unwrap();
        config.to_string_lossy().into_owned()
    }

    /// One turn of the test agent in a new workspace-write session on `ws`: its events.
    pub async fn acp_turn(&self, server: &ServerProcess, prompt: &str) -> Vec<EventEnvelope> {
        let c = client(server);
        let s = c
            .create_session(&CreateSessionRequest {
                cwd: Some(self.path("ws")),
                backend: Some(BackendSpec::Acp("test".into())),
                permission_mode: Some(PermissionMode::WorkspaceWrite),
                ..CreateSessionRequest::default()
            })
            .await
            .unwrap();
        let mut events = c.subscribe(s.id, None);
        let req = switchboard_protocol::SendMessageRequest::user(
            prompt,
            switchboard_protocol::MessageType::Message,
        );
        let run = c.send_message(s.id, &req).await.unwrap().run_id;
        until_run_ends(&mut events, run).await
    }
}
