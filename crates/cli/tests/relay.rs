#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! The relay end to end: the real server, real tmux (its own socket per test), members that
//! are small shell programs, a session member on the mock LLM, an ACP member on the test
//! agent, and the MCP server driven by the official Python MCP client.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};
use switchboard_client::Client;
use switchboard_protocol::relay::{
    BundleHealth, BundleState, Delivery, HostingResult, Outcome, SendRequest, SendStatus,
};
use switchboard_test_support::mock_llm::MockLlm;
use switchboard_test_support::process::ServerProcess;

/// A member program: prints a prompt, appends every line it reads to `log`.
fn echo_member(log: &Path) -> String {
    format!(
        "bash -c 'printf \"> \"; while IFS= read -r l; do printf \"%s\\n\" \"$l\" >> {}; printf \"> \"; done'",
        log.display()
    )
}

/// One test's world: bundles dir, workspace and logs (`dir`), the server's data directory and
/// configuration (`state`, apart: a tmux member in the sandbox is granted `dir` for its
/// logs, never the server's state), the mock LLM.
struct World {
    dir: tempfile::TempDir,
    state: tempfile::TempDir,
    llm: MockLlm,
}

impl World {
    async fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("bundles")).unwrap();
        std::fs::create_dir_all(dir.path().join("ws")).unwrap();
        World {
            dir,
            state: tempfile::tempdir().unwrap(),
            llm: MockLlm::start().await,
        }
    }

    fn path(&self, p: &str) -> PathBuf {
        match p.strip_prefix("data") {
            Some(rest) => self
                .state
                .path()
                .join("data")
                .join(rest.trim_start_matches('/')),
            None => self.dir.path().join(p),
        }
    }

    /// Writes a bundle; its tmux members (sandboxed, as by default) are granted this test's
    /// directory, where they keep their logs.
    fn bundle(&self, name: &str, text: &str) {
        let grant = format!(
            "[members.tmux]\nsandbox = {{ read_write = [{:?}] }}\n",
            self.dir.path().to_string_lossy()
        );
        let text = if text.contains("sandbox") {
            text.to_string()
        } else {
            text.replace("[members.tmux]\n", &grant)
        };
        std::fs::write(self.path("bundles").join(format!("{name}.toml")), text).unwrap();
    }

    fn config(&self, extra: &str) -> PathBuf {
        let p = self.state.path().join("switchboard.toml");
        std::fs::write(&p, extra).unwrap();
        p
    }

    async fn server(&self) -> ServerProcess {
        self.server_with(&[]).await
    }

    async fn server_with(&self, extra: &[(&str, &str)]) -> ServerProcess {
        let bundles = self.path("bundles").to_string_lossy().to_string();
        let config = self
            .state
            .path()
            .join("switchboard.toml")
            .to_string_lossy()
            .to_string();
        if !Path::new(&config).exists() {
            std::fs::write(&config, "").unwrap();
        }
        let mut env = vec![
            ("SWITCHBOARD_BUNDLES_DIR", bundles.as_str()),
            ("SWITCHBOARD_CONFIG", config.as_str()),
        ];
        env.extend_from_slice(extra);
        start(&self.path("data"), &self.llm.base_url(), &env).await
    }

    fn socket(&self, bundle: &str) -> PathBuf {
        self.path("data/run").join(format!("relay-{bundle}.sock"))
    }

    fn tmux(&self, bundle: &str, args: &[&str]) -> std::process::Output {
        std::process::Command::new("tmux")
            .arg("-S")
            .arg(self.socket(bundle))
            .arg("-f")
            .arg("/dev/null")
            .args(args)
            .output()
            .unwrap()
    }
}

impl Drop for World {
    fn drop(&mut self) {
        // Never leave a tmux server behind, whatever the test did.
        if let Ok(rd) = std::fs::read_dir(self.path("data/run")) {
            for e in rd.flatten() {
                let _ = std::process::Command::new("tmux")
                    .arg("-S")
                    .arg(e.path())
                    .arg("kill-server")
                    .output();
            }
        }
    }
}

fn send_req(sender: &str, targets: &[&str], message: &str, delivery: Delivery) -> SendRequest {
    SendRequest {
        sender: sender.into(),
        message: message.into(),
        targets: targets.iter().map(|t| t.to_string()).collect(),
        delivery,
        ..SendRequest::default()
    }
}

async fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

/// Raw HTTP, to check status codes and error bodies exactly.
async fn raw(
    server: &ServerProcess,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .request(method, format!("{}{path}", server.url))
        .bearer_auth(TOKEN);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let v = resp.json::<Value>().await.unwrap_or(Value::Null);
    (status, v)
}

const SHORT: &str = "quiet_window_ms = 300\nprompt_regex = '^> '";

#[tokio::test]
async fn tmux_bundle_send_look_broadcast_copy_mode_timeout_and_down() {
    let w = World::new().await;
    let (lb, lr, lt) = (
        w.path("builder.log"),
        w.path("reviewer.log"),
        w.path("tester.log"),
    );
    let ws = w.path("ws");
    w.bundle(
        "dev",
        &format!(
            r#"format-version = 1
[[members]]
id = "builder"
name = "Builder"
directory = "{ws}"
[members.tmux]
command = "{b}"
{SHORT}

[[members]]
id = "reviewer"
name = "Reviewer"
directory = "{ws}"
[members.tmux]
command = "{r}"
{SHORT}

[[members]]
id = "tester"
directory = "{ws}"
[members.tmux]
command = "{t}"
{SHORT}

[[members]]
id = "noisy"
directory = "{ws}"
[members.tmux]
command = "bash -c 'while true; do date +%s%N; sleep 0.1; done'"
quiet_window_ms = 300
"#,
            ws = ws.display(),
            b = echo_member(&lb).replace('"', "\\\""),
            r = echo_member(&lr).replace('"', "\\\""),
            t = echo_member(&lt).replace('"', "\\\""),
        ),
    );
    let server = w.server().await;
    let c = client(&server);

    // `relay check` validates the file the way start-up does.
    let out = std::process::Command::new(bin())
        .args(["relay", "check", "--json"])
        .env("SWITCHBOARD_BUNDLES_DIR", w.path("bundles"))
        .env("SWITCHBOARD_CONFIG", "/dev/null")
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["bundles"], json!(["dev"]));

    // A tmux session the relay did not create, on the bundle's own tmux server.
    std::fs::create_dir_all(w.path("data/run")).unwrap();
    let o = w.tmux("dev", &["new-session", "-d", "-s", "foreign", "sleep 600"]);
    assert!(o.status.success(), "{o:?}");

    let list = c.relay_list("dev", Some("builder")).await.unwrap();
    assert_eq!(list.state, BundleState::Down);
    assert_eq!(list.reason_code.as_deref(), Some("bundle_down"));
    // Sending to a bundle that is down fails at once, with the reason.
    let r = c
        .relay_send(
            "dev",
            &send_req("builder", &["reviewer"], "hi", Delivery::Async),
        )
        .await
        .unwrap();
    assert_eq!(r.status, SendStatus::Failure);
    assert_eq!(r.results[0].reason_code.as_deref(), Some("bundle_down"));

    let up = c.relay_up("dev").await.unwrap();
    assert_eq!(up.result, HostingResult::Hosted, "{up:?}");
    assert!(up.members.iter().all(|m| m.result == "started"), "{up:?}");
    let again = c.relay_up("dev").await.unwrap();
    assert_eq!(again.result, HostingResult::Skipped);
    assert_eq!(again.reason_code.as_deref(), Some("already_up"));
    assert!(again.members.iter().all(|m| m.result == "already_running"));

    let list = c.relay_list("dev", Some("builder")).await.unwrap();
    assert_eq!(list.state, BundleState::Up);
    assert_eq!(list.health, BundleHealth::Healthy, "{list:?}");
    assert_eq!(list.members.len(), 4);
    assert!(list.members.iter().all(|m| m.ready));
    assert_eq!(list.members[0].name, "Builder");

    // Sync, multi-line, with quotes, $VARS, backslashes and a long line: arrives intact.
    let long = "x".repeat(3000);
    let body = format!("first line \"quoted\" $HOME \\back\nsecond line\n{long}\nlast");
    let r = c
        .relay_send(
            "dev",
            &send_req("builder", &["reviewer"], &body, Delivery::Sync),
        )
        .await
        .unwrap();
    assert_eq!(r.status, SendStatus::Success, "{r:?}");
    let mid = r.results[0].message_id.clone();
    assert_eq!(r.results[0].outcome, Outcome::Delivered);
    wait_for(
        "the reviewer to read the message",
        Duration::from_secs(10),
        || read(&lr).contains(&format!("[end of message {mid}")),
    )
    .await;
    let got = read(&lr);
    assert!(got.contains("From: Builder (builder)"), "{got}");
    assert!(got.contains("To: Reviewer (reviewer)"), "{got}");
    assert!(
        got.contains(&format!("[relay message {mid} in bundle dev")),
        "{got}"
    );
    // Every line indented under the envelope (no line can pass for the envelope's own).
    assert!(
        got.contains(&switchboard_protocol::text::indent_all(&body, "  ")),
        "the body arrives byte for byte, indented:\n{got}"
    );
    assert!(read(&lb).is_empty(), "the sender got nothing");

    // Async: queued at once, delivered in the background, outcome stored and pushed.
    let r = c
        .relay_send(
            "dev",
            &send_req("builder", &["tester"], "async hello", Delivery::Async),
        )
        .await
        .unwrap();
    assert_eq!(r.status, SendStatus::Accepted, "{r:?}");
    assert_eq!(r.results[0].outcome, Outcome::Queued);
    let mid = r.results[0].message_id.clone();
    let start = Instant::now();
    loop {
        let m = c.relay_message("dev", &mid).await.unwrap();
        if m.outcome == Outcome::Delivered {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(15), "{m:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(read(&lt).contains("async hello"));
    // The outcome reaches the sender on its event stream (replayed from the store).
    let resp = reqwest::Client::new()
        .get(format!(
            "{}/v1/relay/bundles/dev/events?as=builder",
            server.url
        ))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut stream = resp.bytes_stream();
    let mut text = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !text.contains(&mid) {
        use futures::StreamExt;
        let chunk = tokio::time::timeout_at(deadline.into(), stream.next())
            .await
            .expect("outcome event")
            .unwrap()
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(text.contains("event: relay.outcome"), "{text}");
    assert!(text.contains("\"outcome\":\"delivered\""), "{text}");
    drop(stream);

    // Broadcast: everyone but the sender (the noisy pane never settles: timeout).
    let mut req = send_req("reviewer", &[], "to all", Delivery::Sync);
    req.broadcast = true;
    req.quiescence_timeout_ms = Some(2000);
    let r = c.relay_send("dev", &req).await.unwrap();
    assert_eq!(r.status, SendStatus::Partial, "{r:?}");
    let mut targets: Vec<&str> = r.results.iter().map(|t| t.target.as_str()).collect();
    targets.sort();
    assert_eq!(targets, vec!["builder", "noisy", "tester"]);
    for t in &r.results {
        if t.target == "noisy" {
            assert_eq!(t.outcome, Outcome::Timeout, "{t:?}");
            assert_eq!(t.reason_code.as_deref(), Some("quiescence_output_changing"));
        } else {
            assert_eq!(t.outcome, Outcome::Delivered, "{t:?}");
        }
    }
    wait_for(
        "builder and tester to read the broadcast",
        Duration::from_secs(10),
        || read(&lb).contains("to all") && read(&lt).contains("to all"),
    )
    .await;
    assert!(
        read(&lb).contains("To: Builder (builder), tester, noisy"),
        "{}",
        read(&lb)
    );

    // Look: the last lines of a pane.
    let look = c
        .relay_look("dev", "reviewer", "builder", Some(5))
        .await
        .unwrap();
    assert!(look.lines.len() <= 5 && !look.lines.is_empty(), "{look:?}");
    assert!(look.fresh);
    let look = c
        .relay_look("dev", "reviewer", "builder", None)
        .await
        .unwrap();
    assert!(look.lines.iter().any(|l| l.contains("to all")), "{look:?}");

    // A human in copy mode holds delivery until they leave it.
    let o = w.tmux("dev", &["copy-mode", "-t", "=tester:"]);
    assert!(o.status.success(), "{o:?}");
    let c2 = c.clone();
    let pending = tokio::spawn(async move {
        let mut req = send_req("builder", &["tester"], "after copy mode", Delivery::Sync);
        req.quiescence_timeout_ms = Some(20_000);
        let t = Instant::now();
        (c2.relay_send("dev", &req).await.unwrap(), t.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert!(
        !read(&lt).contains("after copy mode"),
        "pasted into copy mode"
    );
    let o = w.tmux("dev", &["send-keys", "-t", "=tester:", "-X", "cancel"]);
    assert!(o.status.success(), "{o:?}");
    let (r, took) = pending.await.unwrap();
    assert_eq!(r.status, SendStatus::Success, "{r:?}");
    assert!(took >= Duration::from_millis(1900), "{took:?}");
    wait_for(
        "tester to read after copy mode",
        Duration::from_secs(10),
        || read(&lt).contains("after copy mode"),
    )
    .await;

    // The audit log: requests, outcomes, looks; never a body.
    let audit = c.relay_audit("dev", Some(1000), None).await.unwrap();
    let events: Vec<&str> = audit
        .entries
        .iter()
        .filter_map(|e| e["event"].as_str())
        .collect();
    for want in [
        "relay.up",
        "relay.send.request",
        "relay.send.outcome",
        "relay.look",
    ] {
        assert!(events.contains(&want), "{want} missing in {events:?}");
    }
    let all = serde_json::to_string(&audit.entries).unwrap();
    assert!(
        !all.contains("async hello") && !all.contains("second line"),
        "{all}"
    );
    let req_entry = audit
        .entries
        .iter()
        .find(|e| e["event"] == "relay.send.request" && e["bytes"].as_u64().unwrap() > 3000)
        .expect("the multi-line request, with its size");
    assert_eq!(req_entry["requester"], "builder");
    assert_eq!(req_entry["targets"], json!(["reviewer"]));

    // Down stops what the relay started and leaves the foreign session alone.
    let down = c.relay_down("dev").await.unwrap();
    assert_eq!(down.result, HostingResult::Unhosted, "{down:?}");
    let o = w.tmux("dev", &["list-sessions", "-F", "#{session_name}"]);
    let names = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(names.trim(), "foreign", "{o:?}");
    let again = c.relay_down("dev").await.unwrap();
    assert_eq!(again.result, HostingResult::Skipped);
    assert_eq!(again.reason_code.as_deref(), Some("already_down"));
    let list = c.relay_list("dev", None).await.unwrap();
    assert!(list.members.iter().all(|m| !m.ready));
}

#[tokio::test]
async fn validation_codes_and_policies() {
    let w = World::new().await;
    let ws = w.path("ws");
    std::fs::write(
        w.path("bundles/policies.toml"),
        r#"format-version = 1
default = "peer"
[[policies]]
id = "mute"
list = "self"
send = "none"
look = "self"
[[policies]]
id = "watcher"
list = "all"
send = "self"
look = "all"
[[principals]]
id = "alice"
name = "Alice"
policy = "operator"
[[principals]]
id = "eve"
policy = "mute"
"#,
    )
    .unwrap();
    let member = |id: &str, policy: &str| {
        format!(
            "[[members]]\nid = \"{id}\"\ndirectory = \"{}\"\npolicy = \"{policy}\"\n[members.tmux]\ncommand = \"{}\"\n{SHORT}\n\n",
            ws.display(),
            echo_member(&w.path(&format!("{id}.log"))).replace('"', "\\\"")
        )
    };
    w.bundle(
        "team",
        &format!(
            "format-version = 1\n{}{}{}[[members]]\nid = \"helper\"\ndirectory = \"{}\"\n[members.session]\nbackend = \"builtin\"\n\n[[members]]\nid = \"n\"\ndirectory = \"{}\"\n[members.tmux]\ncommand = \"bash -c 'while true; do date +%s%N; sleep 0.1; done'\"\nquiet_window_ms = 300\n",
            member("a", "peer"),
            member("m", "mute"),
            member("w", "watcher"),
            ws.display(),
            ws.display()
        ),
    );
    w.bundle("broken", "format-version = 1\n[[members]]\nid = \"x\"\ndirectory = \"/\"\ncolour = 1\n[members.tmux]\ncommand = \"x\"\n");
    let server = w
        .server_with(&[("SWITCHBOARD_RELAY_QUEUE_CAPACITY", "2")])
        .await;
    let c = client(&server);
    let bundles = c.relay_bundles().await.unwrap();
    assert_eq!(bundles.bundles.len(), 1);
    assert_eq!(bundles.invalid.len(), 1);
    assert!(bundles.invalid[0].error.contains("colour"), "{bundles:?}");
    assert_eq!(
        c.relay_up("team").await.unwrap().result,
        HostingResult::Hosted
    );

    let send = |body: Value| {
        raw(
            &server,
            reqwest::Method::POST,
            "/v1/relay/bundles/team/send",
            Some(body),
        )
    };
    let cases: Vec<(Value, u16, &str)> = vec![
        (
            json!({"sender":"a","message":"  ","targets":["w"]}),
            400,
            "validation_invalid_arguments",
        ),
        (
            json!({"sender":"a","message":"hi"}),
            400,
            "validation_empty_targets",
        ),
        (
            json!({"sender":"a","message":"hi","targets":["w"],"broadcast":true}),
            400,
            "validation_conflicting_targets",
        ),
        (
            json!({"sender":"a","message":"hi","targets":["w"],"quiet_window_ms":0}),
            400,
            "validation_invalid_timeout",
        ),
        (
            json!({"sender":"a","message":"hi","targets":["w"],"turn_timeout_ms":0}),
            400,
            "validation_invalid_timeout",
        ),
        (
            json!({"sender":"a","message":"hi","targets":["w"],"quiet_window_ms":500,"quiescence_timeout_ms":400}),
            400,
            "validation_conflicting_timeout_fields",
        ),
        (
            json!({"sender":"a","message":"hi","targets":["w"],"turn_timeout_ms":500}),
            400,
            "validation_invalid_timeout_field_for_transport",
        ),
        (
            json!({"sender":"a","message":"hi","targets":["helper"],"quiescence_timeout_ms":500}),
            400,
            "validation_invalid_timeout_field_for_transport",
        ),
        (
            json!({"sender":"zed","message":"hi","targets":["w"]}),
            400,
            "validation_unknown_sender",
        ),
        (
            json!({"sender":"a","message":"hi","targets":["w","nobody"]}),
            400,
            "validation_unknown_target",
        ),
        (
            json!({"sender":"a","message":"hi","to":["w"]}),
            400,
            "validation_invalid_arguments",
        ),
        (
            json!({"sender":"a","message":"hi","targets":["w"],"delivery":"later"}),
            400,
            "validation_invalid_arguments",
        ),
        (
            json!({"sender":"m","message":"hi","targets":["a"]}),
            403,
            "authorization_forbidden",
        ),
        (
            json!({"sender":"w","message":"hi","targets":["a","w"]}),
            403,
            "authorization_forbidden",
        ),
        (
            json!({"sender":"eve","message":"hi","targets":["a"]}),
            403,
            "authorization_forbidden",
        ),
        (
            json!({"sender":"m","message":"hi","broadcast":true}),
            403,
            "authorization_forbidden",
        ),
        (
            json!({"sender":"a","message":"hi \u{1b}[201~ rm -rf /\r","targets":["w"]}),
            400,
            "validation_invalid_arguments",
        ),
        (
            json!({"sender":"a","message":"stop\u{3}","targets":["w"]}),
            400,
            "validation_invalid_arguments",
        ),
        (
            json!({"sender":"a","message":"hi","targets":["w"],"quiescence_timeout_ms":3600001}),
            400,
            "validation_invalid_timeout",
        ),
        (
            json!({"sender":"a","message":"hi","targets":["w"],"quiet_window_ms":9223372036854775808u64}),
            400,
            "validation_invalid_timeout",
        ),
        // The member's own quiet window (300 ms) cannot fit in a 200 ms timeout.
        (
            json!({"sender":"a","message":"hi","targets":["w"],"quiescence_timeout_ms":200}),
            400,
            "validation_conflicting_timeout_fields",
        ),
    ];
    for (body, status, code) in cases {
        let (s, v) = send(body.clone()).await;
        assert_eq!(
            (s, v["code"].as_str().unwrap_or("")),
            (status, code),
            "{body} → {v}"
        );
        assert!(!v["message"].as_str().unwrap_or("").is_empty(), "{v}");
        assert!(v["details"].is_object(), "{v}");
    }
    // A forbidden send names the capability, the requester and the targets it may not reach.
    let (_, v) = send(json!({"sender":"w","message":"hi","targets":["a","w"]})).await;
    assert_eq!(
        v["details"],
        json!({"capability":"send","requester":"w","targets":["a"]})
    );
    // Malformed JSON.
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/relay/bundles/team/send", server.url))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["code"], "validation_invalid_arguments");

    // Look and list.
    let look = |q: &str| {
        let path = format!("/v1/relay/bundles/team/look?{q}");
        let server = &server;
        async move { raw(server, reqwest::Method::GET, &path, None).await }
    };
    for (q, status, code) in [
        (
            "requester=a&target=w&lines=0",
            400,
            "validation_invalid_lines",
        ),
        (
            "requester=a&target=w&lines=1001",
            400,
            "validation_invalid_lines",
        ),
        (
            "requester=a&target=w&lines=ten",
            400,
            "validation_invalid_lines",
        ),
        ("requester=zed&target=w", 400, "validation_unknown_sender"),
        ("requester=a&target=zed", 400, "validation_unknown_target"),
        ("requester=m&target=a", 403, "authorization_forbidden"),
        ("requester=eve&target=a", 403, "authorization_forbidden"),
    ] {
        let (s, v) = look(q).await;
        assert_eq!(
            (s, v["code"].as_str().unwrap_or("")),
            (status, code),
            "{q} → {v}"
        );
    }
    let (s, v) = look("requester=m&target=m&lines=3").await;
    assert_eq!(s, 200, "{v}");
    let (s, v) = look("requester=alice&target=w&lines=1000").await;
    assert_eq!(s, 200, "{v}");
    // list: `self` sees itself only; `none`… eve's `mute` policy lists self (nothing: she is
    // not a member); unknown requester is refused.
    let mute = c.relay_list("team", Some("m")).await.unwrap();
    assert_eq!(
        mute.members
            .iter()
            .map(|m| m.id.as_str())
            .collect::<Vec<_>>(),
        vec!["m"]
    );
    assert_eq!(
        c.relay_list("team", Some("w")).await.unwrap().members.len(),
        5
    );
    assert_eq!(
        c.relay_list("team", Some("eve"))
            .await
            .unwrap()
            .members
            .len(),
        0
    );
    let e = c.relay_list("team", Some("zed")).await.unwrap_err();
    assert_eq!(e.code(), "validation_unknown_sender");
    // Principals may send; "watcher" may send to itself only.
    let r = c
        .relay_send(
            "team",
            &send_req("alice", &["a"], "from alice", Delivery::Sync),
        )
        .await
        .unwrap();
    assert_eq!(r.status, SendStatus::Success, "{r:?}");
    assert!(read(&w.path("a.log")).contains("From: Alice (alice)"));
    // A message with Windows line ends arrives with plain newlines.
    let r = c
        .relay_send(
            "team",
            &send_req("alice", &["a"], "one\r\ntwo", Delivery::Sync),
        )
        .await
        .unwrap();
    assert_eq!(r.status, SendStatus::Success, "{r:?}");

    // Retries with the same request id deliver once; the same id for another message is
    // refused.
    let mut req = send_req("a", &["w"], "only once", Delivery::Sync);
    req.request_id = Some("req-1".into());
    let first = c.relay_send("team", &req).await.unwrap();
    assert_eq!(first.status, SendStatus::Success, "{first:?}");
    let again = c.relay_send("team", &req).await.unwrap();
    assert_eq!(again.results[0].message_id, first.results[0].message_id);
    assert_eq!(again.results[0].outcome, Outcome::Delivered);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(read(&w.path("w.log")).matches("only once").count(), 1);
    req.message = "something else".into();
    let e = c.relay_send("team", &req).await.unwrap_err();
    assert_eq!(e.code(), "request_id_reused");

    // A bounded queue: the noisy member never settles, so messages wait; the third is
    // refused, and the refusal reaches the sender's event stream.
    let mut sent = Vec::new();
    for i in 0..3 {
        let mut req = send_req("a", &["n"], &format!("wait {i}"), Delivery::Async);
        req.quiescence_timeout_ms = Some(60_000);
        sent.push(c.relay_send("team", &req).await.unwrap());
    }
    assert_eq!(sent[0].status, SendStatus::Accepted);
    assert_eq!(sent[1].status, SendStatus::Accepted);
    assert_eq!(sent[2].status, SendStatus::Failure, "{:?}", sent[2]);
    assert_eq!(
        sent[2].results[0].reason_code.as_deref(),
        Some("runtime_queue_full")
    );
    let refused_id = sent[2].results[0].message_id.clone();
    let events = |last: Option<u64>| {
        let url = format!("{}/v1/relay/bundles/team/events?as=a", server.url);
        async move {
            let mut req = reqwest::Client::new().get(url).bearer_auth(TOKEN);
            if let Some(l) = last {
                req = req.header("last-event-id", l.to_string());
            }
            let resp = req.send().await.unwrap();
            assert_eq!(resp.status(), 200);
            // Read what is replayed, until a pause.
            let mut stream = resp.bytes_stream();
            let mut text = String::new();
            use futures::StreamExt;
            while let Ok(Some(Ok(chunk))) =
                tokio::time::timeout(Duration::from_millis(700), stream.next()).await
            {
                text.push_str(&String::from_utf8_lossy(&chunk));
            }
            text
        }
    };
    let ids_of = |text: &str| -> Vec<u64> {
        text.lines()
            .filter_map(|l| l.strip_prefix("id: "))
            .map(|v| v.parse().unwrap())
            .collect()
    };
    let all = events(None).await;
    assert!(all.contains(&refused_id), "{all}");
    let seen = ids_of(&all);
    assert!(seen.len() >= 2, "{all}");
    assert!(seen.windows(2).all(|p| p[0] < p[1]), "{all}");
    // Resuming after the first id replays the rest only.
    let rest = events(Some(seen[0])).await;
    assert_eq!(ids_of(&rest), seen[1..].to_vec(), "{rest}");
    // Other senders' outcomes are not in a's stream.
    assert!(!all.contains("\"sender\":\"alice\""), "{all}");

    let (s, v) = raw(
        &server,
        reqwest::Method::GET,
        "/v1/relay/bundles/nope",
        None,
    )
    .await;
    assert_eq!((s, v["code"].as_str()), (404, Some("bundle_not_found")));
    let (s, v) = raw(
        &server,
        reqwest::Method::GET,
        "/v1/relay/bundles/broken?as=x",
        None,
    )
    .await;
    assert_eq!(
        (s, v["code"].as_str()),
        (422, Some("bundle_invalid")),
        "{v}"
    );
    let (s, v) = raw(
        &server,
        reqwest::Method::GET,
        "/v1/relay/bundles/team?as=a&colour=1",
        None,
    )
    .await;
    assert_eq!(
        (s, v["code"].as_str()),
        (400, Some("validation_invalid_arguments")),
        "{v}"
    );
    // Without the token: refused.
    let resp = reqwest::get(format!("{}/v1/relay/bundles", server.url))
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    // Still serving.
    assert!(c.health().await.is_ok());
    c.relay_down("team").await.unwrap();
}

#[tokio::test]
async fn session_and_acp_members() {
    let w = World::new().await;
    let ws = w.path("ws");
    let agent_log = w.path("agent.log");
    w.config(&format!(
        "[agents.tester]\ncommand = {:?}\nenv = {{ TEST_AGENT_LOG = {:?} }}\n{}",
        env!("CARGO_BIN_EXE_switchboard-test-agent"),
        agent_log.display().to_string(),
        common::agent_sandbox_rules("tester", &[Path::new(&agent_log)]),
    ));
    w.bundle(
        "mixed",
        &format!(
            r#"format-version = 1
[[members]]
id = "helper"
name = "Helper"
directory = "{ws}"
[members.session]
backend = "builtin"

[[members]]
id = "tester"
directory = "{ws}"
[members.acp]
agent = "tester"
"#,
            ws = ws.display()
        ),
    );
    std::fs::write(
        w.path("bundles/policies.toml"),
        "format-version = 1\n[[principals]]\nid = \"alice\"\nname = \"Alice\"\npolicy = \"operator\"\n",
    )
    .unwrap();
    let server = w.server().await;
    let c = client(&server);
    let up = c.relay_up("mixed").await.unwrap();
    assert_eq!(up.result, HostingResult::Hosted, "{up:?}");
    let list = c.relay_list("mixed", Some("alice")).await.unwrap();
    assert!(list.members.iter().all(|m| m.ready), "{list:?}");
    let helper_session: uuid::Uuid = list.members[0]
        .session_id
        .as_ref()
        .unwrap()
        .parse()
        .unwrap();
    let tester_session: uuid::Uuid = list.members[1]
        .session_id
        .as_ref()
        .unwrap()
        .parse()
        .unwrap();

    // Session member: the envelope becomes a message; sync waits for the turn.
    let r = c
        .relay_send(
            "mixed",
            &send_req("alice", &["helper"], "please summarize", Delivery::Sync),
        )
        .await
        .unwrap();
    assert_eq!(r.status, SendStatus::Success, "{r:?}");
    let msgs = c.list_messages(helper_session, None, None).await.unwrap();
    let user = msgs
        .messages
        .iter()
        .find(|m| m.role == switchboard_protocol::Role::User)
        .unwrap();
    assert!(
        user.content.contains("From: Alice (alice)") && user.content.contains("please summarize"),
        "{}",
        user.content
    );
    let look = c
        .relay_look("mixed", "alice", "helper", Some(10))
        .await
        .unwrap();
    assert!(
        look.entries.iter().any(|e| e.role == "assistant"),
        "{look:?}"
    );
    assert!(look.fresh);

    // ACP member: the envelope becomes a session/prompt …
    let r = c
        .relay_send(
            "mixed",
            &send_req("helper", &["tester"], "hello tester", Delivery::Sync),
        )
        .await
        .unwrap();
    assert_eq!(r.status, SendStatus::Success, "{r:?}");
    let log = read(&agent_log);
    assert!(
        log.contains("From: Helper (helper)") && log.contains("hello tester"),
        "{log}"
    );
    // … and its permission requests become Switchboard approvals.
    let r = c
        .relay_send(
            "mixed",
            &send_req("alice", &["tester"], "[tool] go", Delivery::Async),
        )
        .await
        .unwrap();
    assert_eq!(r.status, SendStatus::Accepted, "{r:?}");
    let start = Instant::now();
    loop {
        let p = c.pending_tools(tester_session).await.unwrap();
        if !p.tool_calls.is_empty() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no approval appeared"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let look = c
        .relay_look("mixed", "helper", "tester", None)
        .await
        .unwrap();
    assert!(!look.fresh, "the member is in a turn: {look:?}");
    c.relay_down("mixed").await.unwrap();
}

/// A bundle member that is a remote A2A agent (one built with the official A2A Python SDK):
/// a session member whose backend is the `[agents.NAME]` with `a2a`.
#[tokio::test]
async fn a_remote_a2a_agent_is_a_member() {
    let w = World::new().await;
    let agent = common::a2a_agent::SdkAgent::start().await;
    let ws = w.path("ws");
    w.config(&agent.config("remote"));
    w.bundle(
        "delegates",
        &format!(
            "format-version = 1\n[[members]]\nid = \"remote\"\nname = \"Remote\"\ndirectory = \"{}\"\n[members.session]\nbackend = \"remote\"\n",
            ws.display()
        ),
    );
    std::fs::write(
        w.path("bundles/policies.toml"),
        "format-version = 1\n[[principals]]\nid = \"alice\"\nname = \"Alice\"\npolicy = \"operator\"\n",
    )
    .unwrap();
    let server = w.server().await;
    let c = client(&server);
    let up = c.relay_up("delegates").await.unwrap();
    assert_eq!(up.result, HostingResult::Hosted, "{up:?}");
    let r = c
        .relay_send(
            "delegates",
            &send_req("alice", &["remote"], "please echo me", Delivery::Sync),
        )
        .await
        .unwrap();
    assert_eq!(r.status, SendStatus::Success, "{r:?}");
    let got = agent
        .wait_for(|v| {
            v["text"]
                .as_str()
                .is_some_and(|t| t.contains("please echo me"))
        })
        .await;
    let text = got["text"].as_str().unwrap();
    assert!(text.contains("From: Alice (alice)"), "{text}");
    let look = c
        .relay_look("delegates", "alice", "remote", Some(10))
        .await
        .unwrap();
    assert!(
        look.entries
            .iter()
            .any(|e| e.role == "assistant" && e.content.contains("echo: ")),
        "{look:?}"
    );
    c.relay_down("delegates").await.unwrap();
}

#[tokio::test]
async fn async_messages_survive_a_restart_and_arrive_once() {
    let w = World::new().await;
    let ws = w.path("ws");
    let flag = w.path("flag");
    let log = w.path("slow.log");
    // Busy (output changing) until the flag file exists, then an echo member.
    let cmd = format!(
        "bash -c 'while [ ! -f {f} ]; do date +%s%N; sleep 0.1; done; clear; printf \"> \"; while IFS= read -r l; do printf \"%s\\n\" \"$l\" >> {l}; printf \"> \"; done'",
        f = flag.display(),
        l = log.display()
    );
    w.bundle(
        "dev",
        &format!(
            "format-version = 1\n[[members]]\nid = \"a\"\ndirectory = \"{ws}\"\n[members.tmux]\ncommand = \"bash -c 'sleep 600'\"\n\n[[members]]\nid = \"slow\"\ndirectory = \"{ws}\"\n[members.tmux]\ncommand = \"{}\"\nquiet_window_ms = 300\n",
            cmd.replace('"', "\\\""),
            ws = ws.display()
        ),
    );
    let mut server = w.server().await;
    let c = client(&server);
    c.relay_up("dev").await.unwrap();
    let mut ids = Vec::new();
    for i in 0..3 {
        let mut req = send_req(
            "a",
            &["slow"],
            &format!("queued message {i}"),
            Delivery::Async,
        );
        req.quiescence_timeout_ms = Some(120_000);
        let r = c.relay_send("dev", &req).await.unwrap();
        assert_eq!(r.status, SendStatus::Accepted);
        ids.push(r.results[0].message_id.clone());
    }
    assert_eq!(
        c.relay_list("dev", None).await.unwrap().members[1].queued,
        3
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.kill().await;

    let server = w.server().await;
    let c = client(&server);
    assert_eq!(
        c.relay_message("dev", &ids[0]).await.unwrap().outcome,
        Outcome::Queued
    );
    std::fs::write(&flag, "").unwrap();
    let start = Instant::now();
    for id in &ids {
        loop {
            let m = c.relay_message("dev", id).await.unwrap();
            if m.outcome != Outcome::Queued {
                assert_eq!(m.outcome, Outcome::Delivered, "{m:?}");
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(30), "{m:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    wait_for("all three to be read", Duration::from_secs(10), || {
        read(&log).contains("queued message 2")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let got = read(&log);
    for i in 0..3 {
        assert_eq!(
            got.matches(&format!("queued message {i}")).count(),
            1,
            "{got}"
        );
    }
    // In order.
    let p: Vec<usize> = (0..3)
        .map(|i| got.find(&format!("queued message {i}")).unwrap())
        .collect();
    assert!(p[0] < p[1] && p[1] < p[2], "{got}");
    c.relay_down("dev").await.unwrap();
}

#[tokio::test]
async fn mcp_server_speaks_to_the_official_python_client() {
    let w = World::new().await;
    let ws = w.path("ws");
    let lr = w.path("reviewer.log");
    w.bundle(
        "dev",
        &format!(
            "format-version = 1\n[[members]]\nid = \"builder\"\ndirectory = \"{ws}\"\n[members.tmux]\ncommand = \"bash -c 'sleep 600'\"\n\n[[members]]\nid = \"reviewer\"\ndirectory = \"{ws}\"\n[members.tmux]\ncommand = \"{}\"\n{SHORT}\n",
            echo_member(&lr).replace('"', "\\\""),
            ws = ws.display()
        ),
    );
    let server = w.server().await;
    let c: Client = client(&server);
    c.relay_up("dev").await.unwrap();
    let script = w.path("client.py");
    std::fs::write(
        &script,
        r#"
import asyncio, json, os, sys
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

async def main():
    params = StdioServerParameters(command=sys.argv[1], args=["mcp", "--bundle", "dev", "--member", "builder"], env=dict(os.environ))
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            tools = await s.list_tools()
            out = {"tools": sorted(t.name for t in tools.tools)}
            res = await s.call_tool("list", {})
            out["list"] = json.loads(res.content[0].text)
            res = await s.call_tool("send", {"to": ["reviewer"], "message": "hello via mcp", "sync": True})
            out["send"] = json.loads(res.content[0].text)
            res = await s.call_tool("look", {"target": "reviewer", "lines": 20})
            out["look"] = json.loads(res.content[0].text)
            res = await s.call_tool("send", {"to": ["nobody"], "message": "x"})
            out["error"] = {"is_error": getattr(res, "is_error", None) or getattr(res, "isError", False), "body": json.loads(res.content[0].text)}
            print(json.dumps(out))

asyncio.run(main())
"#,
    )
    .unwrap();
    let data = w.path("data");
    let out = tokio::process::Command::new("python3")
        .arg(&script)
        .arg(bin())
        .env("SWITCHBOARD_URL", &server.url)
        .env("SWITCHBOARD_TOKEN", TOKEN)
        .env("SWITCHBOARD_DATA_DIR", &data)
        .env("SWITCHBOARD_CONFIG", "/dev/null")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "python MCP client failed (is the `mcp` package installed? .ci/run installs it): {stderr}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["tools"], json!(["list", "look", "send"]));
    assert_eq!(v["list"]["bundle"], "dev");
    assert_eq!(v["list"]["members"].as_array().unwrap().len(), 2);
    assert_eq!(v["send"]["status"], "success", "{v}");
    assert_eq!(v["send"]["sender"], "builder");
    assert!(read(&lr).contains("hello via mcp"));
    assert!(
        v["look"]["lines"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l.as_str().unwrap().contains("hello via mcp")),
        "{v}"
    );
    assert_eq!(v["error"]["is_error"], true);
    assert_eq!(v["error"]["body"]["code"], "validation_unknown_target");

    // The CLI: the message from stdin, --sync, --json.
    let mut child = tokio::process::Command::new(bin())
        .args([
            "relay", "send", "dev", "--from", "builder", "--to", "reviewer", "--sync", "--json",
        ])
        .env("SWITCHBOARD_URL", &server.url)
        .env("SWITCHBOARD_TOKEN", TOKEN)
        .env("SWITCHBOARD_CONFIG", "/dev/null")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use tokio::io::AsyncWriteExt;
        let mut stdin = child.stdin.take().unwrap();
        stdin
            .write_all(b"piped line one\npiped line two\n")
            .await
            .unwrap();
    }
    let out = child.wait_with_output().await.unwrap();
    assert!(out.status.success(), "{out:?}");
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["status"], "success", "{r}");
    assert!(
        r["request_id"].is_string(),
        "the CLI sends a request id: {r}"
    );
    assert!(read(&lr).contains("  piped line one\n  piped line two"));
    c.relay_down("dev").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_members_reach_each_other_through_the_injected_relay_mcp_server() {
    use switchboard_test_support::mock_llm::MockReply;
    let w = World::new().await;
    let ws = w.path("ws");
    w.bundle(
        "pair",
        &format!(
            r#"format-version = 1
[[members]]
id = "a"
directory = "{ws}"
[members.session]
backend = "builtin"
permission_mode = "full-access"

[[members]]
id = "b"
directory = "{ws}"
[members.session]
backend = "builtin"
"#,
            ws = ws.display()
        ),
    );
    std::fs::write(
        w.path("bundles/policies.toml"),
        "format-version = 1\n[[principals]]\nid = \"alice\"\nname = \"Alice\"\npolicy = \"operator\"\n",
    )
    .unwrap();
    // a's model calls the relay's `send` tool; every other answer is plain text.
    w.llm.push(MockReply::tool_call(
        "m1",
        "mcp__relay__send",
        json!({"to": ["b"], "message": "hello b, from a", "sync": false}),
    ));
    w.llm.set_default(MockReply::text(&["ok"]));
    let server = w.server().await;
    let c = client(&server);
    c.relay_up("pair").await.unwrap();
    let list = c.relay_list("pair", Some("alice")).await.unwrap();
    let session_of = |i: usize| -> uuid::Uuid {
        list.members[i]
            .session_id
            .as_ref()
            .unwrap()
            .parse()
            .unwrap()
    };
    let (a, b) = (session_of(0), session_of(1));
    // The member's session has the relay server, its token redacted.
    let cfg = c.get_session(a).await.unwrap().config;
    assert_eq!(cfg.mcp_servers.len(), 1, "{cfg:?}");
    assert_eq!(cfg.mcp_servers[0].name, "relay");
    assert_eq!(
        cfg.mcp_servers[0].args,
        ["mcp", "--bundle", "pair", "--member", "a"]
    );
    assert_eq!(
        cfg.mcp_servers[0].env["SWITCHBOARD_RELAY_TOKEN"],
        "[redacted]"
    );

    let r = c
        .relay_send(
            "pair",
            &send_req("alice", &["a"], "tell b hello", Delivery::Async),
        )
        .await
        .unwrap();
    assert_eq!(r.status, SendStatus::Accepted, "{r:?}");
    // b gets a's message, sent by a's agent through the relay MCP tool.
    let deadline = Instant::now() + Duration::from_secs(60);
    let got = loop {
        let msgs = c.list_messages(b, None, None).await.unwrap();
        if let Some(m) = msgs.messages.iter().find(|m| {
            m.role == switchboard_protocol::Role::User && m.content.contains("hello b, from a")
        }) {
            break m.content.clone();
        }
        assert!(
            Instant::now() < deadline,
            "b never got a's message: {}\n{:?}",
            server.logs(),
            w.llm
                .chat_requests()
                .iter()
                .map(|r| r.body.to_string())
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        got.contains("From: a\n"),
        "the envelope names a as the sender: {got}"
    );

    // A member token acts only as its member, and only on the relay's member routes.
    let token = switchboard_relay::member_token::mint(TOKEN, "pair", "a").unwrap();
    let http = reqwest::Client::new();
    let as_b = http
        .post(format!("{}/v1/relay/bundles/pair/send", server.url))
        .bearer_auth(&token)
        .json(&json!({"sender": "b", "targets": ["a"], "message": "forged"}))
        .send()
        .await
        .unwrap();
    assert_eq!(as_b.status(), 403);
    let own = http
        .get(format!("{}/v1/relay/bundles/pair?as=a", server.url))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(own.status(), 200);
    // A member reads the outcomes of messages it sent or received, and no other: alice's
    // message to a is a's to read, not b's (not even that it exists).
    let to_a = &r.results[0].message_id;
    let b_token = switchboard_relay::member_token::mint(TOKEN, "pair", "b").unwrap();
    for (tok, status) in [(&token, 200), (&b_token, 404)] {
        let got = http
            .get(format!(
                "{}/v1/relay/bundles/pair/messages/{to_a}",
                server.url
            ))
            .bearer_auth(tok)
            .send()
            .await
            .unwrap();
        assert_eq!(got.status().as_u16(), status);
    }
    for (path, status) in [
        ("/v1/relay/bundles", 403),
        ("/v1/relay/bundles/other?as=a", 401),
        ("/v1/sessions", 401),
    ] {
        let r = http
            .get(format!("{}{path}", server.url))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), status, "{path}");
    }
    c.relay_down("pair").await.unwrap();
}

/// Two agents scripted to answer each other forever (tmux members that run
/// `switchboard relay send` back on every message they get) stop at the hop limit: the
/// chain carries on by itself (each reply continues the chain of the message just
/// received), the ninth send is refused with `relay_hop_limit`, and the audit log has it.
/// A member's per-minute budget then refuses with `relay_budget_exhausted`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_answering_each_other_forever_stop_at_the_hop_limit() {
    let w = World::new().await;
    let script = w.path("answer.sh");
    std::fs::write(
        &script,
        r#"other=$1; log=$2; bin=$3
printf '> '
while IFS= read -r l; do
  case "$l" in
    "[end of message"*)
      if out=$("$bin" relay send dev --from "$SWITCHBOARD_RELAY_MEMBER" --to "$other" "pong from $SWITCHBOARD_RELAY_MEMBER" 2>&1); then
        echo "sent" >> "$log"
      else
        echo "refused: $out" >> "$log"
      fi ;;
  esac
  printf '> '
done
"#,
    )
    .unwrap();
    let member = |id: &str, other: &str| {
        format!(
            "[[members]]\nid = \"{id}\"\ndirectory = \"{ws}\"\n[members.tmux]\ncommand = \"bash {script} {other} {log} {bin}\"\n{SHORT}\n\n",
            ws = w.path("ws").display(),
            script = script.display(),
            log = w.path(&format!("{id}.log")).display(),
            bin = bin().display(),
        )
    };
    w.bundle(
        "dev",
        &format!(
            "format-version = 1\nnotify = \"telegram:42\"\n{}{}",
            member("ping", "pong"),
            member("pong", "ping")
        ),
    );
    // The bundle's owner is told through the gateway, on a fake Telegram.
    let tg = switchboard_test_support::fake_telegram::FakeTelegram::start().await;
    let tg_url = tg.base_url();
    let server = w
        .server_with(&[
            (
                "SWITCHBOARD_TELEGRAM_TOKEN",
                switchboard_test_support::fake_telegram::FakeTelegram::TOKEN,
            ),
            ("SWITCHBOARD_TELEGRAM_BASE_URL", tg_url.as_str()),
            ("SWITCHBOARD_TELEGRAM_ALLOWED_CHATS", "42"),
            ("SWITCHBOARD_TELEGRAM_POLL_TIMEOUT_SECS", "1"),
        ])
        .await;
    let c = client(&server);
    assert_eq!(
        c.relay_up("dev").await.unwrap().result,
        HostingResult::Hosted
    );
    let first = c
        .relay_send("dev", &send_req("ping", &["pong"], "ping", Delivery::Async))
        .await
        .unwrap();
    assert_eq!(first.hop, Some(1));
    let chain = first.chain_id.clone().unwrap();
    let logs = || read(&w.path("ping.log")) + &read(&w.path("pong.log"));
    wait_for("the loop to hit the limit", Duration::from_secs(90), || {
        logs().contains("refused")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let all = logs();
    assert_eq!(all.matches("sent").count(), 7, "hops 2..=8 sent: {all}");
    assert_eq!(all.matches("refused").count(), 1, "{all}");
    assert!(all.contains("relay_hop_limit"), "{all}");
    let audit = c.relay_audit("dev", Some(500), None).await.unwrap().entries;
    let sends = audit
        .iter()
        .filter(|e| e["event"] == "relay.send.request")
        .count();
    assert_eq!(sends, 8, "eight messages in the chain");
    let refused: Vec<&Value> = audit
        .iter()
        .filter(|e| e["event"] == "relay.send.refused")
        .collect();
    assert_eq!(refused.len(), 1, "{audit:?}");
    assert_eq!(refused[0]["code"], "relay_hop_limit");
    assert_eq!(refused[0]["details"]["chain_id"], chain.as_str());
    assert_eq!(refused[0]["details"]["hop"], 9);
    // The envelope showed where the chain stood.
    let look = c
        .relay_look("dev", "ping", "pong", Some(200))
        .await
        .unwrap();
    assert!(
        look.lines.iter().any(
            |l| l.contains(&format!("Chain: {chain} (hop 8 of at most 8)"))
                || l.contains(&format!("Chain: {chain} (hop 7 of at most 8)"))
        ),
        "{:?}",
        look.lines
    );
    // A reply that names its message continues that chain; an unknown one is refused.
    let named = c
        .relay_send(
            "dev",
            &SendRequest {
                in_reply_to: Some(first.results[0].message_id.clone()),
                ..send_req("pong", &["ping"], "late answer", Delivery::Async)
            },
        )
        .await;
    // (hop 2 of the chain: allowed — but the script answers it, and that chain goes on.)
    assert_eq!(named.as_ref().unwrap().hop, Some(2), "{named:?}");
    let unknown = c
        .relay_send(
            "dev",
            &SendRequest {
                in_reply_to: Some("msg_nope".into()),
                ..send_req("pong", &["ping"], "x", Delivery::Async)
            },
        )
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), "message_not_found");
    // The late answer set the chain going again, and it was stopped again: the owner was
    // told once per chain.
    wait_for("the second stop", Duration::from_secs(90), || {
        logs().matches("refused").count() == 2
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let told: Vec<_> = tg
        .bot_messages(42)
        .into_iter()
        .filter(|m| m.text.contains("relay_hop_limit"))
        .collect();
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(told[0].text.contains("bundle dev"), "{}", told[0].text);
    c.relay_down("dev").await.unwrap();
}

/// Send budgets: a member may send so many per minute; the next send is refused with
/// `relay_budget_exhausted` and nothing of it is stored.
#[tokio::test]
async fn a_member_s_send_budget_refuses_with_its_code() {
    let w = World::new().await;
    let log = w.path("b.log");
    w.bundle(
        "dev",
        &format!(
            "format-version = 1\n[[members]]\nid = \"a\"\ndirectory = \"{ws}\"\n[members.tmux]\ncommand = \"{e}\"\n{SHORT}\n\n[[members]]\nid = \"b\"\ndirectory = \"{ws}\"\n[members.tmux]\ncommand = \"{e}\"\n{SHORT}\n",
            ws = w.path("ws").display(),
            e = echo_member(&log).replace('"', "\\\""),
        ),
    );
    let server = w
        .server_with(&[("SWITCHBOARD_RELAY_MEMBER_SENDS_PER_MINUTE", "3")])
        .await;
    let c = client(&server);
    c.relay_up("dev").await.unwrap();
    for i in 0..3 {
        c.relay_send(
            "dev",
            &send_req("a", &["b"], &format!("m{i}"), Delivery::Async),
        )
        .await
        .unwrap();
    }
    let e = c
        .relay_send(
            "dev",
            &send_req("a", &["b"], "one too many", Delivery::Async),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), "relay_budget_exhausted");
    assert_eq!(e.details()["scope"], "member");
    assert_eq!(e.details()["window"], "minute");
    assert_eq!(e.details()["limit"], 3);
    // Another member has a budget of its own.
    c.relay_send("dev", &send_req("b", &["a"], "fine", Delivery::Async))
        .await
        .unwrap();
    wait_for("the three messages", Duration::from_secs(30), || {
        read(&log).contains("m2")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!read(&log).contains("one too many"));
    c.relay_down("dev").await.unwrap();
}

/// A tmux member gets the same scrubbed environment as ACP agents and MCP servers: no
/// provider key, no server token (its shell could print them to anyone who reads the pane).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tmux_members_get_no_provider_keys_nor_the_server_token() {
    let w = World::new().await;
    let out = w.path("member.env");
    w.bundle(
        "dev",
        &format!(
            "format-version = 1\n[[members]]\nid = \"a\"\ndirectory = \"{ws}\"\n[members.tmux]\ncommand = \"bash -c 'env > {out}.tmp; mv {out}.tmp {out}; sleep 600'\"\n{SHORT}\n",
            ws = w.path("ws").display(),
            out = out.display(),
        ),
    );
    let server = w
        .server_with(&[
            ("OPENAI_API_KEY", "sk-openai-must-not-leak"),
            ("ANTHROPIC_API_KEY", "sk-ant-must-not-leak"),
        ])
        .await;
    let c = client(&server);
    c.relay_up("dev").await.unwrap();
    wait_for("the member's environment", Duration::from_secs(30), || {
        out.exists()
    })
    .await;
    let env = read(&out);
    assert!(env.contains("PATH="), "{env}");
    for secret in ["sk-openai-must-not-leak", "sk-ant-must-not-leak", TOKEN] {
        assert!(!env.contains(secret), "{secret} reached the member: {env}");
    }
    c.relay_down("dev").await.unwrap();
}

/// A tmux member starts in the sandbox with its directory read-write: what the server keeps
/// (here a secret in its state directory) it cannot read, while `switchboard relay send`
/// still works with its own token; a member with `sandbox = { enabled = false }` reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tmux_member_runs_in_the_sandbox_unless_exempted() {
    let w = World::new().await;
    let secret = w.state.path().join("secret.txt");
    std::fs::write(&secret, "STATE-SECRET\n").unwrap();
    std::fs::create_dir_all(w.path("ws/a")).unwrap();
    std::fs::create_dir_all(w.path("ws/b")).unwrap();
    let member = |id: &str, rules: &str| {
        format!(
            "[[members]]\nid = \"{id}\"\ndirectory = \"{dir}\"\n[members.tmux]\ncommand = \"bash -c 'cat {secret} > out.txt 2>&1; echo done >> out.txt; sleep 600'\"\n{SHORT}\n{rules}\n",
            dir = w.path(&format!("ws/{id}")).display(),
            secret = secret.display(),
        )
    };
    w.bundle(
        "dev",
        &format!(
            "format-version = 1\n{}{}",
            member("a", "[members.tmux.sandbox]\nnetwork = \"full\"\n"),
            member("b", "[members.tmux.sandbox]\nenabled = false\n"),
        ),
    );
    let server = w.server().await;
    let c = client(&server);
    c.relay_up("dev").await.unwrap();
    let out = |id: &str| read(&w.path(&format!("ws/{id}/out.txt")));
    wait_for("both members' output", Duration::from_secs(30), || {
        out("a").contains("done") && out("b").contains("done")
    })
    .await;
    // Refused by Landlock, or not there at all under bubblewrap's fresh /tmp.
    assert!(
        !out("a").contains("STATE-SECRET")
            && (out("a").contains("Permission denied") || out("a").contains("No such file")),
        "{}",
        out("a")
    );
    assert!(out("b").contains("STATE-SECRET"), "{}", out("b"));
    c.relay_down("dev").await.unwrap();
}

/// A relay bundle is budgeted like anything else: its session members' runs are the
/// bundle's (`origin.bundle`), and a budget on the bundle stops them before the model is
/// called — the send fails with the budget's words.
#[tokio::test]
async fn a_bundle_s_budget_stops_its_session_members() {
    let w = World::new().await;
    let ws = w.path("ws");
    // $8 a million output tokens: one call's reservation (4,096 out) is over $0.03.
    w.config(
        "[prices.\"openai/mock-model\"]\ninput = 2.0\noutput = 8.0\n\n[[budgets]]\nname = \"crew\"\nscope = \"bundle\"\nmatch = \"crew\"\nwindow = \"day\"\nlimit_usd = 0.03\n",
    );
    w.bundle(
        "crew",
        &format!(
            "format-version = 1\n[[members]]\nid = \"helper\"\ndirectory = \"{}\"\n[members.session]\nbackend = \"builtin\"\n",
            ws.display()
        ),
    );
    std::fs::write(
        w.path("bundles/policies.toml"),
        "format-version = 1\n[[principals]]\nid = \"alice\"\nname = \"Alice\"\npolicy = \"operator\"\n",
    )
    .unwrap();
    let server = w.server().await;
    let c = client(&server);
    let up = c.relay_up("crew").await.unwrap();
    assert_eq!(up.result, HostingResult::Hosted, "{up:?}");
    let r = c
        .relay_send(
            "crew",
            &send_req("alice", &["helper"], "please summarize", Delivery::Sync),
        )
        .await
        .unwrap();
    assert_eq!(r.status, SendStatus::Failure, "{r:?}");
    let reason = r.results[0].reason.clone().unwrap_or_default();
    assert!(reason.contains("budget crew"), "{r:?}");
    assert!(w.llm.chat_requests().is_empty(), "the model was not called");
    c.relay_down("crew").await.unwrap();
}
