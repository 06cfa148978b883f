//! The sandbox beyond the built-in agent's commands, with this machine's real mechanisms: an
//! ACP agent started in it (reading its workspace only; refused when the sandbox is required
//! and cannot be had), the network allowlist through the sandbox's proxy, a session's own
//! network shown and changed over the API, and bubblewrap's namespaces on top of Landlock.
//! Each shows the leak with the sandbox off (or Landlock alone) too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::sandbox::World;
use common::{TOKEN, client, text_of};
use serde_json::json;
use switchboard_protocol::{CreateSessionRequest, PermissionMode};

/// An ACP agent is started in the sandbox with its session's workspace: what it reads itself
/// (as its own file tools and shell would) is its workspace and what its rules grant — its
/// log here — not Switchboard's data, a key in the home directory or another workspace.
/// With `[agents.NAME.sandbox] enabled = false` it reads them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_agent_in_the_sandbox_reads_its_workspace_only() {
    let w = World::new().await;
    std::fs::write(w.dir.path().join("ws/mine.txt"), "MINE\n").unwrap();
    let log = w.dir.path().join("agent.log");
    let prompt = format!(
        "[read:{}] [read:{}] [read:{}] [read:{}]",
        w.path("ws/mine.txt"),
        w.path("data/secret.txt"),
        w.path("home/.ssh/id_test"),
        w.path("other/notes.txt"),
    );
    for enabled in [true, false] {
        let config = w.agent_config(&format!("enabled = {enabled}\n"));
        let server = w.serve(&[("SWITCHBOARD_CONFIG", config.as_str())]).await;
        let text = text_of(&w.acp_turn(&server, &prompt).await);
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
    // Nonsense is refused, clearly: 422 `unprocessable_entity` naming the field for a policy
    // the schema cannot rule out (the API fuzz sends such bodies), the JSON extractor's
    // answer for a network that is not one.
    let http = reqwest::Client::new();
    for (body, want, status) in [
        (
            json!({"sandbox": {"network": "allowlist"}}),
            "allow_hosts",
            Some(422),
        ),
        (
            json!({"sandbox": {"network": "allowlist", "allow_hosts": []}}),
            "allow_hosts",
            Some(422),
        ),
        (
            json!({"sandbox": {"network": "full", "allow_hosts": ["a.com"]}}),
            "allowlist only",
            Some(422),
        ),
        (
            json!({"sandbox": {"network": "allowlist", "allow_hosts": ["a.com/x"]}}),
            "not a host name",
            Some(422),
        ),
        (json!({"sandbox": {"network": "some"}}), "network", None),
    ] {
        let r = http
            .post(format!("{}/v1/sessions", server.url))
            .bearer_auth(TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap();
        let got = r.status().as_u16();
        let text = r.text().await.unwrap();
        match status {
            Some(s) => assert!(
                got == s && text.contains("unprocessable_entity") && text.contains("sandbox: "),
                "{body}: {got} {text}"
            ),
            None => assert!(got == 400 || got == 422, "{body}: {got} {text}"),
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

    // An ACP agent — its program under /tmp, which the fresh /tmp would hide were it not
    // bound in again: its PID 1 is its own namespace's.
    let bin = w.dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let agent = bin.join("agent-in-tmp");
    std::fs::copy(env!("CARGO_BIN_EXE_switchboard-test-agent"), &agent).unwrap();
    let config = w.agent_config("");
    let toml = std::fs::read_to_string(&config).unwrap().replace(
        &format!("{:?}", env!("CARGO_BIN_EXE_switchboard-test-agent")),
        &format!("{:?}", agent.to_string_lossy()),
    );
    std::fs::write(&config, toml).unwrap();
    let server = w.serve(&[("SWITCHBOARD_CONFIG", config.as_str())]).await;
    let text = text_of(&w.acp_turn(&server, "[read:/proc/1/cmdline]").await);
    let pid1 = text
        .split("read /proc/1/cmdline: ")
        .nth(1)
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        pid1.contains("bwrap") && pid1.contains("--unshare-pid"),
        "{text}"
    );
}

/// `mode = "required"` on a machine that cannot confine refuses to start an ACP agent, with
/// the reason in the run's error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_without_a_mechanism_refuses_to_start_an_acp_agent() {
    let w = World::new().await;
    let config = w.agent_config("");
    let server = w
        .serve(&[
            ("SWITCHBOARD_CONFIG", config.as_str()),
            ("SWITCHBOARD_SANDBOX", "required"),
            ("SWITCHBOARD_SANDBOX_MECHANISMS", "none"),
        ])
        .await;
    let all = w.acp_turn(&server, "hello").await;
    let error = all
        .iter()
        .find_map(|e| match &e.event {
            switchboard_protocol::AgentEvent::RunError { error, .. } => Some(error.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no run error: {all:?}"));
    assert!(error.contains("the sandbox is required"), "{error}");
    assert!(text_of(&all).is_empty(), "the agent never ran");
}
