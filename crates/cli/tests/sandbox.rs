//! The sandbox around the built-in agent's commands, with this machine's real mechanisms
//! (Landlock, a pids cgroup or RLIMIT_NPROC): a command the model asks for runs through a
//! real `serve` and the mock model reads its output. What it must not reach — a secret in
//! the data directory, a key in a home directory, another workspace, a place outside to write,
//! a TCP server on loopback — it cannot, while ordinary work (files, git, python3, a pipeline)
//! still works; the same commands reach everything with the sandbox off (so these tests fail
//! without it). A fork bomb stops at the process cap with the server answering; `sandbox:
//! true` is accepted and confines; `required` with nothing to confine with refuses clearly;
//! the environment is filtered; CPU time and memory are limited when configured. ACP agents,
//! the network allowlist, a session's own network and namespaces: `sandbox_agents.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::sandbox::{World, last_tool_output};
use common::{client, until_run_ends};
use serde_json::json;
use switchboard_protocol::{CreateSessionRequest, PermissionMode};
use switchboard_test_support::mock_llm::MockReply;

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

/// `cpu_secs` and `memory_mb` bound each process: a busy loop is stopped at its CPU time, an
/// allocation beyond the address space fails — and both run freely without them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_time_and_memory_are_limited_when_configured() {
    let w = World::new().await;
    let spin = "python3 -c 'while True: pass'; echo \"spin-status=$?\"; \
                python3 -c 'b = bytearray(1536 * 1024 * 1024); print(\"ALLOCATED\", len(b) > 0)' 2>&1 | tail -n 1";
    let server = w
        .serve(&[
            ("SWITCHBOARD_SANDBOX_CPU_SECS", "1"),
            ("SWITCHBOARD_SANDBOX_MEMORY_MB", "768"),
        ])
        .await;
    let t = Instant::now();
    let out = w.run(&server, spin, None).await;
    // SIGXCPU (128 + 24) at one second of CPU time, well before the command's timeout.
    assert!(out.contains("spin-status=152"), "{out}");
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    assert!(
        out.contains("MemoryError") && !out.contains("ALLOCATED"),
        "{out}"
    );
    drop(server);
    // Without limits: the loop runs to the command's timeout (2 s here), the allocation works.
    let server = w.serve(&[]).await;
    let out = w
        .run(
            &server,
            &spin.replace(
                "while True: pass",
                "import time; t = time.time()\nwhile time.time() - t < 2: pass",
            ),
            None,
        )
        .await;
    assert!(
        out.contains("spin-status=0") && out.contains("ALLOCATED True"),
        "{out}"
    );
}
