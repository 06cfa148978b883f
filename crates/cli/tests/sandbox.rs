//! The sandbox around the built-in agent's commands, with this machine's real mechanisms
//! (Landlock, a pids cgroup or RLIMIT_NPROC): a command the model asks for runs through a
//! real `serve` and the mock model reads its output. What it must not reach — a secret in
//! the data directory, a key in a home directory, another workspace, a place outside to write,
//! a TCP server on loopback — it cannot, while ordinary work (files, git, python3, a pipeline)
//! still works; the same commands reach everything with the sandbox off (so these tests fail
//! without it). A fork bomb stops at the process cap with the server answering; `sandbox:
//! true` is accepted and confines; `required` with nothing to confine with refuses clearly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{TOKEN, agent_sandbox_rules, bin, client, text_of, until_run_ends};
use serde_json::json;
use switchboard_protocol::{AutoApprove, BackendSpec, CreateSessionRequest, PermissionMode};
use switchboard_test_support::mock_llm::{MockLlm, MockReply};
use switchboard_test_support::process::ServerProcess;

/// The places a command must not reach, made by the test.
struct World {
    dir: tempfile::TempDir,
    llm: MockLlm,
    /// The events of the last run.
    events: std::sync::Mutex<Vec<switchboard_protocol::EventEnvelope>>,
}

impl World {
    async fn new() -> World {
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

    fn path(&self, p: &str) -> String {
        self.dir.path().join(p).to_str().unwrap().to_string()
    }

    async fn serve(&self, extra: &[(&str, &str)]) -> ServerProcess {
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
    async fn run(&self, server: &ServerProcess, command: &str, sandbox: Option<bool>) -> String {
        let s = self.session(server, None).await;
        self.run_in(server, s, command, sandbox).await
    }

    /// A workspace-write session on `ws` that may run commands, with its own sandbox
    /// network if given.
    async fn session(
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
    async fn run_in(
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
fn last_tool_output(llm: &MockLlm) -> String {
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

/// Tries every way out, each printing LEAK-n when it gets through, then ordinary work.
fn escape_attempts(w: &World, port: u16, server_pid: u32) -> String {
    format!(
        "tr '\\0' '\\n' < /proc/{server_pid}/environ | grep -q SWITCHBOARD_TOKEN && echo LEAK-7; \
         cat {secret} && echo LEAK-1; cat {key} && echo LEAK-2; cat {other}/notes.txt && echo LEAK-3; \
         echo x > {other}/new.txt && echo LEAK-4; echo x > /tmp/sb-escape-$$ && echo LEAK-5 && rm -f /tmp/sb-escape-$$; \
         (exec 3<>/dev/tcp/127.0.0.1/{port}) && echo LEAK-6; \
         echo inside > made.txt && git init -q && git add made.txt \
         && git -c user.name=t -c user.email=t@e commit -qm one && echo GIT-OK; \
         python3 -c 'print(6*7)'; echo to-stdout > /dev/stdout; printf 'a\\nb\\nc\\n' | sort -r | head -n 1 | tr a-z A-Z",
        secret = w.path("data/secret.txt"),
        key = w.path("home/.ssh/id_test"),
        other = w.path("other"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxed_command_reaches_its_workspace_only_and_the_same_leaks_without_it() {
    let w = World::new().await;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = w.serve(&[]).await;
    let logs = server
        .wait_for_log("sandbox: ", Duration::from_secs(10))
        .await;
    assert!(logs.contains("sandbox: auto"), "{logs}");
    let pid = server.pid().unwrap();
    let out = w.run(&server, &escape_attempts(&w, port, pid), None).await;
    assert!(!out.contains("LEAK"), "{out}");
    assert!(
        !out.contains("DATA-SECRET") && !out.contains("SSH-KEY"),
        "{out}"
    );
    assert!(
        out.contains("GIT-OK")
            && out.contains("42")
            && out.contains("to-stdout")
            && out.contains("\nC\n"),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(w.dir.path().join("ws/made.txt")).unwrap(),
        "inside\n"
    );
    assert!(!w.dir.path().join("other/new.txt").exists());
    // A refusal tells the agent where it comes from.
    let out = w
        .run(&server, &format!("cat {}", w.path("data/secret.txt")), None)
        .await;
    assert!(out.contains("ran in the sandbox"), "{out}");
    // And the people watching the run are told, in its log.
    let notices: Vec<String> = w
        .events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match &e.event {
            switchboard_protocol::AgentEvent::Notice { message, .. } => Some(message.clone()),
            _ => None,
        })
        .collect();
    assert!(
        notices.iter().any(|n| n.contains("inside the sandbox")),
        "{notices:?}"
    );
    drop(server);

    // The same commands with the sandbox off get through: what the test checks is the
    // sandbox's doing.
    std::fs::remove_dir_all(w.dir.path().join("ws/.git")).unwrap();
    let server = w.serve(&[("SWITCHBOARD_SANDBOX", "off")]).await;
    let pid = server.pid().unwrap();
    let out = w.run(&server, &escape_attempts(&w, port, pid), None).await;
    for leak in [
        "LEAK-1", "LEAK-2", "LEAK-3", "LEAK-4", "LEAK-5", "LEAK-6", "LEAK-7",
    ] {
        assert!(out.contains(leak), "{leak} without the sandbox: {out}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_network_is_open_when_the_policy_says_full() {
    let w = World::new().await;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = w.serve(&[("SWITCHBOARD_SANDBOX_NETWORK", "full")]).await;
    let out = w
        .run(
            &server,
            &format!(
                "(exec 3<>/dev/tcp/127.0.0.1/{port}) && echo CONNECTED; cat {} || echo STILL-CONFINED",
                w.path("data/secret.txt")
            ),
            None,
        )
        .await;
    assert!(
        out.contains("CONNECTED") && out.contains("STILL-CONFINED"),
        "{out}"
    );
}

/// Capped by a cgroup where one can be made (as here; else by `RLIMIT_NPROC`, which the
/// kernel does not apply to root).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_bomb_stops_at_the_process_cap_and_the_server_keeps_answering() {
    let w = World::new().await;
    let server = w
        .serve(&[("SWITCHBOARD_SANDBOX_MAX_PROCESSES", "64")])
        .await;
    let health = format!("{}/v1/health", server.url);
    let bomb = {
        let w = &w;
        let server = &server;
        async move {
            w.run(
                server,
                "bomb() { bomb | bomb & }; bomb; sleep 3; echo BOMB-DONE",
                None,
            )
            .await
        }
    };
    let probe = async {
        let http = reqwest::Client::new();
        let mut slowest = Duration::ZERO;
        tokio::time::sleep(Duration::from_millis(500)).await;
        for _ in 0..10 {
            let t = Instant::now();
            let r = http
                .get(&health)
                .timeout(Duration::from_secs(5))
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success());
            slowest = slowest.max(t.elapsed());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        slowest
    };
    let (out, slowest) = tokio::join!(bomb, probe);
    assert!(slowest < Duration::from_secs(2), "health took {slowest:?}");
    assert!(out.contains("exit code") || out.contains("killed"), "{out}");
    assert!(
        out.contains("Resource temporarily unavailable") || out.contains("retry"),
        "the bomb's forks were refused: {out}"
    );
    // Nothing of it is left running.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let left = std::process::Command::new("pgrep")
        .args(["-f", "bomb"])
        .output()
        .unwrap();
    let pids = String::from_utf8_lossy(&left.stdout);
    assert!(pids.lines().count() <= 1, "left running: {pids}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_true_is_accepted_and_confines_and_refused_where_there_is_none() {
    let w = World::new().await;
    let server = w.serve(&[("SWITCHBOARD_SANDBOX", "auto")]).await;
    // In full-access mode commands are not confined by default; `sandbox: true` confines.
    let c = client(&server);
    let s = c
        .create_session(&CreateSessionRequest {
            cwd: Some(w.path("ws")),
            permission_mode: Some(PermissionMode::FullAccess),
            ..CreateSessionRequest::default()
        })
        .await
        .unwrap();
    for (sandbox, leaks) in [(Some(true), false), (None, true)] {
        w.llm.push(MockReply::tool_call(
            "call_1",
            "run_command",
            json!({"command": format!("cat {} && echo LEAK", w.path("data/secret.txt"))}),
        ));
        w.llm.push(MockReply::text(&["done"]));
        let mut req = switchboard_protocol::SendMessageRequest::user(
            "go",
            switchboard_protocol::MessageType::Message,
        );
        req.sandbox = sandbox;
        let after = c.get_session(s.id).await.unwrap().session.last_event_id;
        let mut events = c.subscribe(s.id, Some(after));
        let run = c.send_message(s.id, &req).await.unwrap().run_id;
        until_run_ends(&mut events, run).await;
        let out = last_tool_output(&w.llm);
        assert_eq!(out.contains("LEAK"), leaks, "sandbox {sandbox:?}: {out}");
    }
    drop(server);
    // With the sandbox off, a message asking for one is refused, never run without.
    let server = w.serve(&[("SWITCHBOARD_SANDBOX", "off")]).await;
    let c = client(&server);
    let s = c
        .create_session(&CreateSessionRequest::default())
        .await
        .unwrap();
    let mut req = switchboard_protocol::SendMessageRequest::user(
        "go",
        switchboard_protocol::MessageType::Message,
    );
    req.sandbox = Some(true);
    let err = c.send_message(s.id, &req).await.unwrap_err().to_string();
    assert!(err.contains("sandbox_unsupported"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_without_a_mechanism_refuses_every_command_clearly() {
    let w = World::new().await;
    let server = w
        .serve(&[
            ("SWITCHBOARD_SANDBOX", "required"),
            ("SWITCHBOARD_SANDBOX_MECHANISMS", "none"),
        ])
        .await;
    let logs = server
        .wait_for_log("sandbox: ", Duration::from_secs(10))
        .await;
    assert!(
        logs.contains("required, but this machine cannot sandbox"),
        "{logs}"
    );
    let out = w.run(&server, "echo RAN", None).await;
    assert!(!out.contains("RAN\n"), "{out}");
    assert!(out.contains("the sandbox is required"), "{out}");
    // `auto` on such a machine runs, and says so.
    drop(server);
    let server = w.serve(&[("SWITCHBOARD_SANDBOX_MECHANISMS", "none")]).await;
    let out = w.run(&server, "echo RAN", None).await;
    assert!(
        out.contains("RAN") && out.contains("cannot sandbox"),
        "{out}"
    );
}

/// What a command leaves running in the background (its output redirected, as the tool's
/// description says) keeps running, confined and capped; its cgroup goes once it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_process_outlives_its_command_and_its_cgroup_goes_after_it() {
    let w = World::new().await;
    let server = w.serve(&[]).await;
    let out = w
        .run(
            &server,
            &format!(
                "nohup sleep 4.731 > /dev/null 2>&1 & echo started; cat {} || true",
                w.path("data/secret.txt")
            ),
            None,
        )
        .await;
    assert!(
        out.contains("started") && !out.contains("DATA-SECRET"),
        "{out}"
    );
    let running = || {
        std::process::Command::new("pgrep")
            .args(["-f", "sleep 4.731"])
            .output()
            .map(|o| !o.stdout.is_empty())
            .unwrap_or(false)
    };
    assert!(
        running(),
        "the background process was killed with its command"
    );
    // The server's cgroups (where this machine lets it make them) are gone after it.
    let pid = server.pid().unwrap();
    let mine = || {
        std::fs::read_dir("/sys/fs/cgroup/pids")
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter(|e| {
                        e.file_name()
                            .to_string_lossy()
                            .starts_with(&format!("switchboard-{pid}-"))
                    })
                    .count()
            })
            .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while running() || mine() > 0 {
        assert!(Instant::now() < deadline, "left: {} cgroups", mine());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// An ACP agent is started in the sandbox with its session's workspace: what it reads itself
/// (as its own file tools and shell would) is its workspace and what its rules grant — its
/// log here — not Switchboard's data, a key in the home directory or another workspace.
/// With `[agents.NAME.sandbox] enabled = false` it reads them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_agent_in_the_sandbox_reads_its_workspace_only() {
    let w = World::new().await;
    std::fs::write(w.dir.path().join("ws/mine.txt"), "MINE\n").unwrap();
    let log = w.dir.path().join("agent.log");
    let config = w.dir.path().join("switchboard.toml");
    let prompt = format!(
        "[read:{}] [read:{}] [read:{}] [read:{}]",
        w.path("ws/mine.txt"),
        w.path("data/secret.txt"),
        w.path("home/.ssh/id_test"),
        w.path("other/notes.txt"),
    );
    for enabled in [true, false] {
        let mut toml = format!(
            "[agents.test]\ncommand = {:?}\nenv = {{ TEST_AGENT_LOG = {:?} }}\n",
            env!("CARGO_BIN_EXE_switchboard-test-agent"),
            log.to_string_lossy(),
        );
        toml.push_str(&agent_sandbox_rules("test", &[&log]));
        toml.push_str(&format!("enabled = {enabled}\n"));
        std::fs::write(&config, toml).unwrap();
        let server = w
            .serve(&[("SWITCHBOARD_CONFIG", config.to_str().unwrap())])
            .await;
        let c = client(&server);
        let s = c
            .create_session(&CreateSessionRequest {
                cwd: Some(w.path("ws")),
                backend: Some(BackendSpec::Acp("test".into())),
                permission_mode: Some(PermissionMode::WorkspaceWrite),
                ..CreateSessionRequest::default()
            })
            .await
            .unwrap();
        let mut events = c.subscribe(s.id, None);
        let req = switchboard_protocol::SendMessageRequest::user(
            &prompt,
            switchboard_protocol::MessageType::Message,
        );
        let run = c.send_message(s.id, &req).await.unwrap().run_id;
        let text = text_of(&until_run_ends(&mut events, run).await);
        assert!(text.contains("mine.txt: MINE"), "{text}");
        for (secret, file) in [
            ("DATA-SECRET", "secret.txt"),
            ("SSH-KEY", "id_test"),
            ("OTHER-WS", "notes.txt"),
        ] {
            if enabled {
                assert!(!text.contains(secret), "{text}");
                assert!(
                    text.contains(&format!("could not read {}", w.path(""))) && text.contains(file),
                    "{text}"
                );
            } else {
                assert!(text.contains(secret), "without the sandbox: {text}");
            }
        }
        // Its log, granted by its rule, was written.
        assert!(
            std::fs::read_to_string(&log).unwrap().contains("prompt"),
            "log"
        );
    }
}

/// Under `network = "allowlist"` a command reaches the hosts on the list through the
/// sandbox's proxy (`HTTPS_PROXY`/`HTTP_PROXY`), and nothing else: another host is refused
/// by the proxy, a direct connection by the sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_allowlist_lets_one_host_through_and_refuses_another() {
    let w = World::new().await;
    // One HTTP server on loopback, under two names: `localhost` is on the list, `127.0.0.1`
    // is not (the proxy goes by the name asked for).
    let app =
        axum::Router::new().route("/", axum::routing::get(|| async { "HELLO-FROM-UPSTREAM" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let server = w
        .serve(&[
            ("SWITCHBOARD_SANDBOX_NETWORK", "allowlist"),
            ("SWITCHBOARD_SANDBOX_ALLOW_HOSTS", "localhost"),
        ])
        .await;
    let out = w
        .run(
            &server,
            &format!(
                "curl -sS http://localhost:{port}/ && echo; \
                 curl -sS http://127.0.0.1:{port}/ && echo; \
                 curl -sS --noproxy '*' http://127.0.0.1:{port}/ || echo DIRECT-REFUSED"
            ),
            None,
        )
        .await;
    assert_eq!(out.matches("HELLO-FROM-UPSTREAM").count(), 1, "{out}");
    assert!(
        out.contains("127.0.0.1 is not on this sandbox's network allowlist"),
        "{out}"
    );
    assert!(out.contains("DIRECT-REFUSED"), "{out}");
    drop(server);
    // The same with the sandbox off: all three get through.
    let server = w.serve(&[("SWITCHBOARD_SANDBOX", "off")]).await;
    let out = w
        .run(
            &server,
            &format!(
                "curl -sS http://localhost:{port}/ && echo; curl -sS http://127.0.0.1:{port}/ && echo; \
                 curl -sS --noproxy '*' http://127.0.0.1:{port}/ || echo DIRECT-REFUSED"
            ),
            None,
        )
        .await;
    assert_eq!(out.matches("HELLO-FROM-UPSTREAM").count(), 3, "{out}");
}

/// A session's own network (`sandbox` of `POST /v1/sessions`, changed by `PATCH`) replaces
/// the server's for its commands, and `GET /v1/sessions/{id}` shows how it is confined; a
/// policy that makes no sense is a 422.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_s_own_network_replaces_the_server_s_and_is_shown() {
    use switchboard_protocol::{SandboxNetwork, SessionSandbox, UpdateSessionRequest};
    let w = World::new().await;
    let app =
        axum::Router::new().route("/", axum::routing::get(|| async { "HELLO-FROM-UPSTREAM" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let server = w.serve(&[]).await;
    let c = client(&server);
    let allow = SessionSandbox {
        network: SandboxNetwork::Allowlist,
        allow_hosts: vec!["localhost".into()],
    };
    let s = w.session(&server, Some(allow.clone())).await;
    let detail = c.get_session(s).await.unwrap();
    assert_eq!(detail.config.sandbox, Some(allow));
    let status = detail.sandbox.expect("a sandbox status");
    assert!(status.confined, "{status:?}");
    assert_eq!(status.network, SandboxNetwork::Allowlist);
    assert_eq!(status.allow_hosts, vec!["localhost".to_string()]);
    let curl = format!("curl -sS http://localhost:{port}/ || echo NO-WAY-OUT");
    let out = w.run_in(&server, s, &curl, None).await;
    assert!(out.contains("HELLO-FROM-UPSTREAM"), "{out}");
    // Back to no network.
    c.update_session(
        s,
        &UpdateSessionRequest {
            sandbox: Some(SessionSandbox {
                network: SandboxNetwork::None,
                allow_hosts: vec![],
            }),
            ..UpdateSessionRequest::default()
        },
    )
    .await
    .unwrap();
    let status = c.get_session(s).await.unwrap().sandbox.unwrap();
    assert_eq!(status.network, SandboxNetwork::None);
    let out = w.run_in(&server, s, &curl, None).await;
    assert!(
        out.contains("NO-WAY-OUT") && !out.contains("HELLO"),
        "{out}"
    );
    // A session of the server's default: its network is the server's, none.
    let plain = w.session(&server, None).await;
    let status = c.get_session(plain).await.unwrap().sandbox.unwrap();
    assert!(
        status.confined && status.network == SandboxNetwork::None,
        "{status:?}"
    );
    // A full-access session's commands are not confined (by default), and it says so.
    let full = c
        .create_session(&CreateSessionRequest {
            permission_mode: Some(PermissionMode::FullAccess),
            ..CreateSessionRequest::default()
        })
        .await
        .unwrap()
        .id;
    let status = c.get_session(full).await.unwrap().sandbox.unwrap();
    assert!(
        !status.confined && status.detail.contains("full-access"),
        "{status:?}"
    );
    // Nonsense is refused, clearly (400 `validation_failed` naming the field).
    let http = reqwest::Client::new();
    for (body, want) in [
        (json!({"sandbox": {"network": "allowlist"}}), "allow_hosts"),
        (
            json!({"sandbox": {"network": "full", "allow_hosts": ["a.com"]}}),
            "allowlist only",
        ),
        (
            json!({"sandbox": {"network": "allowlist", "allow_hosts": ["a.com/x"]}}),
            "not a host name",
        ),
        (json!({"sandbox": {"network": "some"}}), "network"),
    ] {
        let r = http
            .post(format!("{}/v1/sessions", server.url))
            .bearer_auth(TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status();
        let text = r.text().await.unwrap();
        // A field that is not valid: 400 `validation_failed`, as for every field; a value
        // that is not one of the enum's: the JSON extractor's answer.
        assert!(status == 400 || status == 422, "{body}: {status} {text}");
        if status == 400 {
            assert!(text.contains("validation_failed"), "{text}");
        }
        assert!(text.contains(want), "{body}: {text}");
    }
}

/// Where bubblewrap is installed (scripts/test installs it), namespaces go on top of
/// Landlock: a command sees a fresh `/tmp` (not the host's files there) and only loopback;
/// an ACP agent also gets a PID namespace of its own. With Landlock alone
/// (`SWITCHBOARD_SANDBOX_MECHANISMS=landlock`) the host's `/tmp` is visible (not readable)
/// and its network interfaces are all there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_go_on_top_where_bubblewrap_is_installed() {
    let w = World::new().await;
    let host_tmp = tempfile::NamedTempFile::new().unwrap();
    let probe = format!(
        "test -e {} && echo HOST-TMP-VISIBLE; grep -c : /proc/net/dev; echo made > \"$TMPDIR/x\" && cat \"$TMPDIR/x\"",
        host_tmp.path().display()
    );
    let server = w.serve(&[]).await;
    let logs = server
        .wait_for_log("sandbox: ", Duration::from_secs(10))
        .await;
    assert!(
        logs.contains("namespaces (mount, PID, IPC, network) by bubblewrap"),
        "bubblewrap is installed by scripts/test: {logs}"
    );
    let out = w.run(&server, &probe, None).await;
    assert!(!out.contains("HOST-TMP-VISIBLE"), "{out}");
    // Loopback only: one interface line under the two header lines.
    assert!(out.contains("\n1\n") || out.starts_with("1\n"), "{out}");
    assert!(out.contains("made"), "{out}");
    drop(server);
    let server = w
        .serve(&[("SWITCHBOARD_SANDBOX_MECHANISMS", "landlock")])
        .await;
    let out = w.run(&server, &probe, None).await;
    assert!(out.contains("HOST-TMP-VISIBLE"), "{out}");
    assert!(out.contains("made"), "{out}");
    drop(server);

    // An ACP agent: its PID 1 is its own namespace's.
    let log = w.dir.path().join("agent.log");
    let config = w.dir.path().join("switchboard.toml");
    std::fs::write(
        &config,
        format!(
            "[agents.test]\ncommand = {:?}\nenv = {{ TEST_AGENT_LOG = {:?} }}\n{}",
            env!("CARGO_BIN_EXE_switchboard-test-agent"),
            log.to_string_lossy(),
            agent_sandbox_rules("test", &[&log]),
        ),
    )
    .unwrap();
    let server = w
        .serve(&[("SWITCHBOARD_CONFIG", config.to_str().unwrap())])
        .await;
    let c = client(&server);
    let s = c
        .create_session(&CreateSessionRequest {
            cwd: Some(w.path("ws")),
            backend: Some(BackendSpec::Acp("test".into())),
            ..CreateSessionRequest::default()
        })
        .await
        .unwrap();
    let mut events = c.subscribe(s.id, None);
    let req = switchboard_protocol::SendMessageRequest::user(
        "[read:/proc/1/cmdline]",
        switchboard_protocol::MessageType::Message,
    );
    let run = c.send_message(s.id, &req).await.unwrap().run_id;
    let text = text_of(&until_run_ends(&mut events, run).await);
    let pid1 = text
        .split("read /proc/1/cmdline: ")
        .nth(1)
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        pid1.contains("bwrap") && pid1.contains("--unshare-pid"),
        "{text}"
    );
}

/// A sandboxed command gets the allowed variables of the server's environment only (PATH,
/// locale, toolchains … and `[sandbox] env`), not whatever else the server was started
/// with (a cloud key here); with the sandbox off it gets them all (but the server's own
/// secrets, scrubbed either way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxed_command_gets_only_the_allowed_environment() {
    let w = World::new().await;
    let show = "echo \"cloud=${AWS_SECRET_ACCESS_KEY:-unset} extra=${MY_TOOL_OPTS:-unset} lang=${LANG:-unset} path=${PATH:+set}\"";
    let env = [
        ("AWS_SECRET_ACCESS_KEY", "aws-must-not-leak"),
        ("MY_TOOL_OPTS", "wanted"),
        ("LANG", "C.UTF-8"),
        ("SWITCHBOARD_SANDBOX_ENV", "MY_TOOL_*"),
    ];
    let server = w.serve(&env).await;
    let out = w.run(&server, show, None).await;
    assert!(
        out.contains("cloud=unset extra=wanted lang=C.UTF-8 path=set"),
        "{out}"
    );
    drop(server);
    let mut off = env.to_vec();
    off.push(("SWITCHBOARD_SANDBOX", "off"));
    let server = w.serve(&off).await;
    let out = w.run(&server, show, None).await;
    assert!(out.contains("cloud=aws-must-not-leak"), "{out}");
}
