#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! Several instances, one service: three `switchboard serve` processes sharing one
//! PostgreSQL database and one NATS server (a real `nats-server`, started by the test).

mod common;

use std::time::{Duration, Instant};

use common::nats::Nats;
use common::*;
use futures::StreamExt;
use switchboard_protocol::{
    AgentEvent, CreateSessionRequest, DecisionAction, EventEnvelope, MessageType, PermissionMode,
    SendMessageRequest,
};
use switchboard_test_support::mock_llm::{MockLlm, MockReply};
use switchboard_test_support::process::ServerProcess;

/// Run leases in these tests: short, so that failover is quick.
const LEASE_MS: &str = "2000";

async fn instance(
    dir: &std::path::Path,
    name: &str,
    llm: &MockLlm,
    db: &Db,
    nats: &Nats,
) -> ServerProcess {
    instance_with(dir, name, llm, db, nats, &[]).await
}

async fn instance_with(
    dir: &std::path::Path,
    name: &str,
    llm: &MockLlm,
    db: &Db,
    nats: &Nats,
    extra: &[(&str, &str)],
) -> ServerProcess {
    let url = nats.url();
    let mut env = vec![
        ("SWITCHBOARD_STORE_URL", db.url.as_str()),
        ("SWITCHBOARD_BUS_URL", url.as_str()),
        ("SWITCHBOARD_INSTANCE_ID", name),
        ("SWITCHBOARD_LEASE_MS", LEASE_MS),
    ];
    env.extend_from_slice(extra);
    start(&dir.join(name), &llm.base_url(), &env).await
}

/// Instances `a`, `b` and `c`.
async fn three(
    dir: &std::path::Path,
    llm: &MockLlm,
    db: &Db,
    nats: &Nats,
) -> (ServerProcess, ServerProcess, ServerProcess) {
    (
        instance(dir, "a", llm, db, nats).await,
        instance(dir, "b", llm, db, nats).await,
        instance(dir, "c", llm, db, nats).await,
    )
}

/// `n` chunks of model text: `<prefix>0 `, `<prefix>1 ` …
fn numbered(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i} ")).collect()
}

async fn health(server: &ServerProcess) -> serde_json::Value {
    reqwest::get(format!("{}/v1/health", server.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

fn check_contiguous(events: &[(EventEnvelope, Instant)], from: u64) {
    let ids: Vec<u64> = events.iter().map(|(e, _)| e.id).collect();
    let want: Vec<u64> = (from..from + ids.len() as u64).collect();
    assert_eq!(ids, want, "every event once, in order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_one_session_every_event_once_and_in_order() {
    let db = Db::create().await;
    let mut nats = Nats::start().await;
    let dir = tempfile::tempdir().unwrap();
    let llm = MockLlm::start().await;
    let chunks = numbered("c", 20);
    let chunks: Vec<&str> = chunks.iter().map(String::as_str).collect();
    llm.push(MockReply::text_slow(&chunks, 20));
    let (a, b, c) = three(dir.path(), &llm, &db, &nats).await;
    for s in [&a, &b, &c] {
        let h = health(s).await;
        assert_eq!(h["store"]["kind"], "postgres", "{h}");
        assert_eq!(h["bus"]["kind"], "nats", "{h}");
        assert_eq!(h["bus"]["status"], "ok", "{h}");
    }

    // Created on A, followed on B, sent on C.
    let session = client(&a)
        .create_session(&CreateSessionRequest::default())
        .await
        .unwrap();
    let mut on_b = client(&b).subscribe(session.id, None);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let sent = Instant::now();
    let run = send(&c, session.id, "hello from C", MessageType::Message).await;
    let events = until_timed(&mut on_b, "end of the run", |e| {
        e.is_terminal() && e.run_id() == run
    })
    .await;
    check_contiguous(&events, 1);
    assert!(
        matches!(&events[0].0.event, AgentEvent::RunStarted { content: Some(m), .. } if m == "hello from C")
    );
    let text: String = events
        .iter()
        .filter_map(|(e, _)| match &e.event {
            AgentEvent::TextDelta { delta, .. } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, chunks.concat());
    assert!(matches!(
        events.last().unwrap().0.event,
        AgentEvent::RunCompleted { .. }
    ));
    // The bus carried them: the first event reached B long before the 1 s store poll.
    let first_after = events[0].1.duration_since(sent);
    assert!(first_after < Duration::from_millis(900), "{first_after:?}");
    let last_id = events.last().unwrap().0.id;

    // NATS restarted mid-stream: B catches up from the store, nothing lost or repeated.
    llm.push(MockReply::text_slow(&chunks, 100));
    let run = send(&c, session.id, "again", MessageType::Message).await;
    let mut seen = Vec::new();
    loop {
        let env = tokio::time::timeout(Duration::from_secs(30), on_b.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let delta = matches!(env.event, AgentEvent::TextDelta { .. });
        seen.push((env, Instant::now()));
        if delta {
            break;
        }
    }
    nats.down().await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    nats.up().await;
    let rest = until_timed(&mut on_b, "end of the run", |e| {
        e.is_terminal() && e.run_id() == run
    })
    .await;
    seen.extend(rest);
    check_contiguous(&seen, last_id + 1);
    let text: String = seen
        .iter()
        .filter_map(|(e, _)| match &e.event {
            AgentEvent::TextDelta { delta, .. } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, chunks.concat());
    // The bus reconnects by itself.
    let start = Instant::now();
    loop {
        if health(&b).await["bus"]["status"] == "ok" && health(&c).await["bus"]["status"] == "ok" {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the bus did not reconnect"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop((a, b, c));
    db.drop_now().await;
}

/// Sends `text` to the session through `server`; the run id.
async fn send(
    server: &ServerProcess,
    session: uuid::Uuid,
    text: &str,
    kind: MessageType,
) -> uuid::Uuid {
    client(server)
        .send_message(session, &SendMessageRequest::user(text, kind))
        .await
        .unwrap()
        .run_id
}

fn signal(server: &ServerProcess, sig: &str) {
    let pid = server.pid().expect("the instance runs");
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

/// An instance dies (SIGKILL) mid-run: a survivor closes the run as interrupted within the
/// lease, the follow-up queued for the session runs on a survivor, and a client whose
/// stream was on the dead instance resumes on a survivor with no gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_instance_s_run_is_closed_and_its_follow_up_runs_on_a_survivor() {
    let db = Db::create().await;
    let nats = Nats::start().await;
    let dir = tempfile::tempdir().unwrap();
    let llm = MockLlm::start().await;
    let chunks = numbered("c", 80);
    let chunks: Vec<&str> = chunks.iter().map(String::as_str).collect();
    llm.push(MockReply::text_slow(&chunks, 250));
    llm.push(MockReply::text(&["after ", "the crash"]));
    let (a, b, mut c) = three(dir.path(), &llm, &db, &nats).await;

    let session = client(&a)
        .create_session(&CreateSessionRequest::default())
        .await
        .unwrap();
    let mut on_a = client(&a).subscribe(session.id, None);
    let mut on_c = client(&c).subscribe(session.id, None);
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The run executes on C, the instance that accepted it.
    let run = send(&c, session.id, "long job", MessageType::Message).await;
    let seen_on_c = until_timed(&mut on_c, "text", |e| {
        matches!(e, AgentEvent::TextDelta { .. })
    })
    .await;
    // Other instances see it running, and a follow-up sent to B waits for it.
    let summary = client(&b).get_session(session.id).await.unwrap().session;
    assert_eq!(summary.active_run_id, Some(run), "B sees C's run");
    let follow_up = send(&b, session.id, "and then this", MessageType::FollowUp).await;
    let busy = client(&a)
        .send_message(
            session.id,
            &SendMessageRequest::user("not now", MessageType::Message),
        )
        .await
        .unwrap_err();
    assert!(
        busy.to_string().contains("session_already_running")
            || busy.to_string().contains("active run"),
        "{busy}"
    );

    let killed = Instant::now();
    c.kill().await;
    // The dead instance's stream ends; A's goes on: the run is closed as interrupted within
    // the lease (2 s) plus the reaper's period, then the follow-up runs on A or B.
    let closed = until_timed(&mut on_a, "the run's end", |e| {
        e.is_terminal() && e.run_id() == run
    })
    .await;
    let failover = closed.last().unwrap().1.duration_since(killed);
    match &closed.last().unwrap().0.event {
        AgentEvent::RunError {
            error, retryable, ..
        } => {
            assert!(*retryable);
            assert!(
                error.contains("interrupted") && error.contains("instance c"),
                "{error}"
            );
        }
        other => panic!("expected RunError, got {other:?}"),
    }
    assert!(
        failover < Duration::from_millis(2000 * 2 + 1000),
        "closed {failover:?} after the kill"
    );
    eprintln!("run failover after SIGKILL: {failover:?}");
    let next = until_timed(&mut on_a, "the follow-up's end", |e| {
        e.is_terminal() && e.run_id() == follow_up
    })
    .await;
    assert!(next.iter().any(|(e, _)| matches!(&e.event,
        AgentEvent::RunStarted { run_id, .. } if *run_id == follow_up)));
    assert!(matches!(
        next.last().unwrap().0.event,
        AgentEvent::RunCompleted { .. }
    ));
    let text: String = next
        .iter()
        .filter_map(|(e, _)| match &e.event {
            AgentEvent::TextDelta { delta, .. } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "after the crash");

    // The client that followed C reconnects to B from the last id it saw: no gap, no repeat.
    let mut last = seen_on_c.last().unwrap().0.id;
    while let Ok(Some(Ok(env))) =
        tokio::time::timeout(Duration::from_millis(200), on_c.next()).await
    {
        assert_eq!(env.id, last + 1);
        last = env.id;
    }
    let mut resumed = client(&b).subscribe(session.id, Some(last));
    let rest = until_timed(&mut resumed, "the follow-up's end", |e| {
        e.is_terminal() && e.run_id() == follow_up
    })
    .await;
    check_contiguous(&rest, last + 1);
    let all = client(&b).get_session(session.id).await.unwrap().session;
    assert_eq!(all.active_run_id, None);
    assert_eq!(rest.last().unwrap().0.id, all.last_event_id);
    // One survivor took the dead instance's run lease over, and says so in its metrics.
    let takeovers = |text: &str| {
        sample(text, "switchboard_lease_takeovers_total{lease=\"run\"}").unwrap_or(0.0)
    };
    let (on_a, on_b) = (scrape(&a.url).await, scrape(&b.url).await);
    assert_eq!(takeovers(&on_a) + takeovers(&on_b), 1.0, "{on_a}\n{on_b}");
    drop((a, b, c));
    db.drop_now().await;
}

/// A paused instance (SIGSTOP) loses its run to a survivor; when it wakes up (SIGCONT) its
/// late writes carry a stale fencing token and are refused: the log has nothing of the run
/// after the survivor closed it. The woken instance goes on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_instance_s_stale_writes_are_refused() {
    let db = Db::create().await;
    let nats = Nats::start().await;
    let dir = tempfile::tempdir().unwrap();
    let llm = MockLlm::start().await;
    let chunks = numbered("p", 60);
    let chunks: Vec<&str> = chunks.iter().map(String::as_str).collect();
    llm.push(MockReply::text_slow(&chunks, 100));
    let (a, b, c) = three(dir.path(), &llm, &db, &nats).await;
    let session = client(&a)
        .create_session(&CreateSessionRequest::default())
        .await
        .unwrap();
    let mut on_a = client(&a).subscribe(session.id, None);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let run = send(&c, session.id, "pause me", MessageType::Message).await;
    until_timed(&mut on_a, "text", |e| {
        matches!(e, AgentEvent::TextDelta { .. })
    })
    .await;
    signal(&c, "-STOP");
    let closed = until_timed(&mut on_a, "the run's end", |e| {
        e.is_terminal() && e.run_id() == run
    })
    .await;
    let closed_at = closed.last().unwrap().0.id;
    assert!(
        matches!(
            &closed.last().unwrap().0.event,
            AgentEvent::RunError {
                retryable: true,
                ..
            }
        ),
        "{:?}",
        closed.last()
    );
    // The mock model kept streaming into C's socket meanwhile: C has chunks to write.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    signal(&c, "-CONT");
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let mut after = client(&b).subscribe(session.id, Some(closed_at));
    let mut log = Vec::new();
    while let Ok(Some(Ok(env))) =
        tokio::time::timeout(Duration::from_millis(1000), after.next()).await
    {
        log.push(env);
    }
    assert!(
        log.iter().all(|e| e.event.run_id() != run),
        "nothing of the taken-over run after it was closed: {log:?}"
    );
    // Nor in the transcript: the run's question is there, no late answer from C.
    let messages = client(&b)
        .list_messages(session.id, Some(100), None)
        .await
        .unwrap()
        .messages;
    let of_run: Vec<_> = messages.iter().filter(|m| m.run_id == Some(run)).collect();
    assert_eq!(of_run.len(), 1, "{of_run:?}");
    assert_eq!(of_run[0].content, "pause me");
    let logs = c.logs();
    assert!(
        logs.contains("is no longer current") || logs.contains("run lease lost"),
        "C noticed it lost the run:\n{logs}"
    );
    // C serves on, and runs new work under a new lease.
    llm.push(MockReply::text(&["awake"]));
    let mut on_b = client(&b).subscribe(session.id, Some(closed_at));
    let again = send(&c, session.id, "again", MessageType::Message).await;
    let events = until_timed(&mut on_b, "end of the run", |e| {
        e.is_terminal() && e.run_id() == again
    })
    .await;
    assert!(matches!(
        events.last().unwrap().0.event,
        AgentEvent::RunCompleted { .. }
    ));
    drop((a, b, c));
    db.drop_now().await;
}

/// Steering, approval decisions, pending calls and cancel work whichever instance receives
/// them: they are forwarded over the bus to the instance that executes the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steering_approvals_and_cancel_reach_the_run_from_any_instance() {
    let db = Db::create().await;
    let nats = Nats::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let llm = MockLlm::start().await;
    llm.push(MockReply::tool_call(
        "call_1",
        "run_command",
        serde_json::json!({"command": "echo approved-elsewhere"}),
    ));
    llm.push(MockReply::text(&["done"]));
    // Checkpoints on: C runs the session, so its workspace's checkpoints are C's.
    let on = [("SWITCHBOARD_CHECKPOINTS", "true")];
    let a = instance_with(dir.path(), "a", &llm, &db, &nats, &on).await;
    let b = instance_with(dir.path(), "b", &llm, &db, &nats, &on).await;
    let c = instance_with(dir.path(), "c", &llm, &db, &nats, &on).await;
    let session = client(&a)
        .create_session(&CreateSessionRequest {
            cwd: Some(ws.path().to_string_lossy().into_owned()),
            permission_mode: Some(PermissionMode::WorkspaceWrite),
            ..CreateSessionRequest::default()
        })
        .await
        .unwrap();
    let mut on_a = client(&a).subscribe(session.id, None);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let run = send(&c, session.id, "run it", MessageType::Message).await;
    until_timed(&mut on_a, "the approval request", |e| {
        matches!(e, AgentEvent::WaitingForToolApproval { .. })
    })
    .await;
    // B sees the pending call (C holds it), and A's steering reaches C's run.
    let pending = client(&b).pending_tools(session.id).await.unwrap();
    assert_eq!(pending.run_id, Some(run));
    assert_eq!(pending.tool_calls.len(), 1);
    assert_eq!(pending.tool_calls[0].id, "call_1");
    let summary = client(&a).get_session(session.id).await.unwrap().session;
    assert_eq!(summary.pending_approvals, 1);
    let steered = client(&a)
        .send_message(
            session.id,
            &SendMessageRequest::user("mind the tests", MessageType::Steering),
        )
        .await
        .unwrap();
    assert_eq!(steered.run_id, run);
    // A file shared through B comes from C's run (C's machine has the workspace).
    std::fs::write(ws.path().join("shared.txt"), "from the workspace\n").unwrap();
    let shared = client(&b)
        .share_file(
            session.id,
            &switchboard_protocol::ShareFileRequest {
                path: "shared.txt".into(),
                caption: Some("look".into()),
                run_id: Some(run),
            },
        )
        .await
        .unwrap();
    assert_eq!(shared.run_id, run);
    assert_eq!(shared.file.name, "shared.txt");
    // A wrong run id is refused by C with the usual code, relayed as is.
    let wrong = client(&b)
        .decide_tools(
            session.id,
            &decide(uuid::Uuid::now_v7(), "call_1", DecisionAction::Accept, None),
        )
        .await
        .unwrap_err();
    assert!(
        wrong.to_string().contains("run_mismatch")
            || wrong.to_string().contains("not the active run"),
        "{wrong}"
    );
    let accepted = client(&b)
        .decide_tools(
            session.id,
            &decide(run, "call_1", DecisionAction::Accept, None),
        )
        .await
        .unwrap();
    assert!(accepted.accepted);
    let rest = until_timed(&mut on_a, "the run's end", |e| {
        e.is_terminal() && e.run_id() == run
    })
    .await;
    assert!(rest.iter().any(|(e, _)| matches!(&e.event,
        AgentEvent::SteeringReceived { content, .. } if content == "mind the tests")));
    assert!(rest.iter().any(|(e, _)| matches!(&e.event,
        AgentEvent::FileShared { file, caption, .. } if file.file_id == shared.file.file_id && caption.as_deref() == Some("look"))));
    assert!(rest.iter().any(|(e, _)| matches!(&e.event,
        AgentEvent::ToolExecutionCompleted { result, is_error: false, .. } if result.contains("approved-elsewhere"))));
    assert!(matches!(
        rest.last().unwrap().0.event,
        AgentEvent::RunCompleted { .. }
    ));

    // The run changed the workspace (shared.txt appeared during it): its checkpoints are
    // on C's machine, and A and B reach them through C.
    let cps = client(&a)
        .checkpoints(session.id)
        .await
        .unwrap()
        .checkpoints;
    assert_eq!(cps.len(), 2, "{cps:?}");
    assert_eq!(cps[1].run_id, Some(run));
    let diff = client(&b)
        .diff(
            session.id,
            &switchboard_protocol::DiffQuery {
                run: Some(run),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(diff.contains("+from the workspace"), "{diff}");
    let restored = client(&a).restore(session.id, &cps[0].id).await.unwrap();
    assert_eq!(restored.files, 1);
    assert!(!ws.path().join("shared.txt").exists());

    // Cancel from A of a run executing on C.
    let chunks = numbered("x", 100);
    let chunks: Vec<&str> = chunks.iter().map(String::as_str).collect();
    llm.push(MockReply::text_slow(&chunks, 100));
    let run = send(&c, session.id, "long", MessageType::Message).await;
    until_timed(&mut on_a, "text", |e| {
        matches!(e, AgentEvent::TextDelta { .. })
    })
    .await;
    client(&a).cancel(session.id, run).await.unwrap();
    let end = until_timed(&mut on_a, "the cancelled run's end", |e| {
        e.is_terminal() && e.run_id() == run
    })
    .await;
    assert!(matches!(
        &end.last().unwrap().0.event,
        AgentEvent::RunCompleted { stop_reason, .. }
            if *stop_reason == switchboard_protocol::StopReason::Cancelled
    ));
    drop((a, b, c));
    db.drop_now().await;
}

async fn gateway_role(server: &ServerProcess) -> String {
    let status: serde_json::Value = reqwest::Client::new()
        .get(format!("{}/v1/gateway/status", server.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    status["role"].as_str().unwrap_or_default().to_string()
}

/// The last user message of each request the model got (what each run was asked).
fn asked(llm: &MockLlm) -> Vec<String> {
    llm.chat_requests()
        .iter()
        .filter_map(|r| {
            r.body["messages"]
                .as_array()?
                .iter()
                .rev()
                .find(|m| m["role"] == "user")
                .and_then(|m| m["content"].as_str())
                .map(str::to_string)
        })
        .collect()
}

/// The Telegram poller is held by one instance under the gateway lease. Killed (SIGKILL)
/// right after taking a message, a standby instance takes the poller over within the lease:
/// every update is handled, none twice (the shared store has the polling offset and the
/// messages already taken).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_poller_is_taken_over_and_no_update_is_lost_or_handled_twice() {
    use switchboard_test_support::fake_telegram::FakeTelegram;
    const ALICE: i64 = 42;
    let db = Db::create().await;
    let nats = Nats::start().await;
    let dir = tempfile::tempdir().unwrap();
    let llm = MockLlm::start().await;
    llm.set_default(MockReply::text(&["noted"]));
    let tg = FakeTelegram::start().await;
    let base = tg.base_url();
    let env = [
        ("SWITCHBOARD_TELEGRAM_TOKEN", FakeTelegram::TOKEN),
        ("SWITCHBOARD_TELEGRAM_BASE_URL", base.as_str()),
        ("SWITCHBOARD_TELEGRAM_ALLOWED_CHATS", "42"),
        ("SWITCHBOARD_TELEGRAM_POLL_TIMEOUT_SECS", "1"),
    ];
    let mut a = instance_with(dir.path(), "a", &llm, &db, &nats, &env).await;
    let start = Instant::now();
    while gateway_role(&a).await != "active" {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "A never took the gateway"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let b = instance_with(dir.path(), "b", &llm, &db, &nats, &env).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(gateway_role(&b).await, "standby", "one poller at a time");

    // A handles the first messages.
    for i in 0..3 {
        tg.dm(ALICE, "Alice", &format!("m{i}"));
        let want = format!("m{i}");
        let start = Instant::now();
        while !asked(&llm).iter().any(|t| t.contains(&want)) {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "{want} never reached the model"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tg.wait_until(Duration::from_secs(20), "a reply", |tg| {
            tg.bot_messages(ALICE).len() > i
        })
        .await;
    }
    // m3 is taken by A (it reaches the model), and A dies before its next poll could
    // confirm it to Telegram.
    tg.dm(ALICE, "Alice", "m3");
    let start = Instant::now();
    while !asked(&llm).iter().any(|t| t.contains("m3")) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "m3 never reached the model"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let killed = Instant::now();
    a.kill().await;
    for i in 4..8 {
        tg.dm(ALICE, "Alice", &format!("m{i}"));
    }
    while gateway_role(&b).await != "active" {
        assert!(
            killed.elapsed() < Duration::from_secs(15),
            "B did not take the poller over"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took_over = killed.elapsed();
    eprintln!("poller failover after SIGKILL: {took_over:?}");
    assert_eq!(
        sample(
            &scrape(&b.url).await,
            "switchboard_lease_takeovers_total{lease=\"gateway\"}"
        ),
        Some(1.0),
        "B counts the gateway lease it took"
    );
    assert!(
        took_over < Duration::from_millis(2000 * 2 + 1000),
        "{took_over:?}"
    );
    let start = Instant::now();
    loop {
        let asked = asked(&llm);
        if (4..8).all(|i| asked.iter().any(|t| t.contains(&format!("m{i}")))) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "messages sent while no one polled were lost: {asked:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tg.wait_until(Duration::from_secs(20), "every update confirmed", |tg| {
        tg.pending_updates() == 0
    })
    .await;
    // Settle, then count: each message reached the model in exactly one run's question.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let asked = asked(&llm);
    for i in 0..8 {
        let marker = format!("m{i}");
        let n: usize = asked
            .iter()
            .map(|t| {
                t.lines()
                    .filter(|l| l.trim_end().ends_with(&marker))
                    .count()
            })
            .sum();
        assert_eq!(n, 1, "{marker} handled {n} times: {asked:?}");
    }
    drop((a, b));
    db.drop_now().await;
}

/// `switchboard doctor` checks the configured store and bus.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_checks_the_store_and_the_bus() {
    let db = Db::create().await;
    let nats = Nats::start().await;
    let dir = tempfile::tempdir().unwrap();
    let doctor = |bus: String| {
        let out = std::process::Command::new(bin())
            .arg("doctor")
            .env("SWITCHBOARD_CONFIG", "/dev/null")
            .env("SWITCHBOARD_DATA_DIR", dir.path())
            .env("SWITCHBOARD_MODEL", "mock-model")
            .env("SWITCHBOARD_STORE_URL", &db.url)
            .env("SWITCHBOARD_BUS_URL", bus)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let good = doctor(nats.url());
    assert!(
        good.contains("[ok  ] store: postgres://switchboard:***@"),
        "{good}"
    );
    assert!(good.contains("[ok  ] bus: nats://127.0.0.1:"), "{good}");
    assert!(good.contains("reachable (NATS 2."), "{good}");
    let bad = doctor(format!("nats://127.0.0.1:{}", free_port()));
    assert!(
        bad.contains("[FAIL] bus: connecting to NATS at nats://127.0.0.1:"),
        "{bad}"
    );
    let wrong = doctor("http://127.0.0.1:4222".into());
    assert!(wrong.contains("[FAIL] bus: NATS URL"), "{wrong}");
    drop(nats);
    db.drop_now().await;
}

/// Two instances on one PostgreSQL, both running the scheduler on one test clock: every due
/// time fires exactly once, whichever instance claims it; when the instance working on a
/// firing is killed, the other carries the firing on once its lease runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_fire_each_scheduled_time_once() {
    use switchboard_protocol::schedules::{FiringStatus, ScheduleSpec};
    let db = Db::create().await;
    let nats = Nats::start().await;
    let llm = MockLlm::start().await;
    llm.set_default(MockReply::text(&["done"]));
    let dir = tempfile::tempdir().unwrap();
    let clock_file = dir.path().join("clock");
    let t0: chrono::DateTime<chrono::Utc> = "2026-12-07T08:00:00Z".parse().unwrap();
    let set_clock = |t: chrono::DateTime<chrono::Utc>| {
        let tmp = clock_file.with_extension("tmp");
        std::fs::write(&tmp, t.to_rfc3339()).unwrap();
        std::fs::rename(&tmp, &clock_file).unwrap();
    };
    set_clock(t0);
    let clock = clock_file.display().to_string();
    let extra = [
        ("SWITCHBOARD_SCHEDULER_CLOCK_FILE", clock.as_str()),
        ("SWITCHBOARD_SCHEDULER_TICK_MS", "50"),
    ];
    let a = instance_with(dir.path(), "a", &llm, &db, &nats, &extra).await;
    let b = instance_with(dir.path(), "b", &llm, &db, &nats, &extra).await;
    let ca = client(&a);
    let cb = client(&b);
    let s = ca
        .create_schedule(&ScheduleSpec {
            every: Some("10m".into()),
            prompt: "tick".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    for n in 1..=4i64 {
        set_clock(t0 + chrono::TimeDelta::minutes(10 * n) + chrono::TimeDelta::seconds(1));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let f = cb.list_firings(s.id).await.unwrap().firings;
            if f.len() as i64 == n && f.iter().all(|f| f.status == FiringStatus::Succeeded) {
                break;
            }
            assert!(f.len() as i64 <= n, "a due time fired twice: {f:?}");
            assert!(Instant::now() < deadline, "firing {n} did not end: {f:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let f = ca.list_firings(s.id).await.unwrap().firings;
    assert_eq!(f.len(), 4, "{f:?}");
    let mut due: Vec<_> = f.iter().map(|f| f.due_at).collect();
    due.dedup();
    assert_eq!(due.len(), 4, "each due time once: {f:?}");
    assert_eq!(llm.chat_requests().len(), 4, "four runs in all");

    // A firing whose instance dies mid-run is carried on by the other.
    llm.push(MockReply::Text {
        chunks: numbered("slow", 200),
        delay_ms: 20,
    });
    let f = ca.run_schedule(s.id).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let all = ca.list_firings(s.id).await.unwrap().firings;
        if all
            .iter()
            .any(|x| x.id == f.id && x.status == FiringStatus::Running)
        {
            break;
        }
        assert!(Instant::now() < deadline, "the manual firing never ran");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut a = a;
    a.kill().await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let done = loop {
        let all = cb.list_firings(s.id).await.unwrap().firings;
        if let Some(x) = all
            .into_iter()
            .find(|x| x.id == f.id && x.finished_at.is_some())
        {
            break x;
        }
        assert!(
            Instant::now() < deadline,
            "the other instance did not carry the firing on"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // The run itself died with its instance (or was carried on by the engine's lease): the
    // firing ends either way, once, with the run's outcome.
    assert!(
        matches!(done.status, FiringStatus::Succeeded | FiringStatus::Failed),
        "{done:?}"
    );
    assert_eq!(
        cb.list_firings(s.id).await.unwrap().firings.len(),
        5,
        "no firing added by the takeover"
    );
}

/// A raw NATS connection of the test's own: what any process that can reach the NATS server
/// can do (the text protocol, by hand).
struct Raw {
    read: tokio::io::BufReader<tokio::net::tcp::OwnedReadHalf>,
    write: tokio::net::tcp::OwnedWriteHalf,
}

impl Raw {
    async fn connect(nats: &Nats) -> Raw {
        use tokio::io::AsyncWriteExt as _;
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", nats.port))
            .await
            .unwrap();
        let (r, mut w) = tcp.into_split();
        w.write_all(
            b"CONNECT {\"verbose\":false,\"headers\":true}\r\nSUB _INBOX.forger 1\r\nPING\r\n",
        )
        .await
        .unwrap();
        let mut raw = Raw {
            read: tokio::io::BufReader::new(r),
            write: w,
        };
        raw.line_until("PONG").await;
        raw
    }

    async fn line_until(&mut self, want: &str) -> Vec<String> {
        use tokio::io::AsyncBufReadExt as _;
        let mut seen = Vec::new();
        loop {
            let mut line = String::new();
            self.read.read_line(&mut line).await.unwrap();
            let line = line.trim_end().to_string();
            if line.starts_with(want) {
                return seen;
            }
            seen.push(line);
        }
    }

    async fn publish(&mut self, subject: &str, reply: &str, payload: &str) {
        use tokio::io::AsyncWriteExt as _;
        let msg = format!(
            "PUB {subject} {reply} {}\r\n{payload}\r\nPING\r\n",
            payload.len()
        );
        self.write.write_all(msg.as_bytes()).await.unwrap();
    }
}

/// The bus is not a back door: a process that can publish on the NATS subjects but does not
/// hold the cluster's secret can neither decide a waiting approval (nor cancel, steer …)
/// nor inject events into anyone's stream. What it sends is dropped, unanswered, and
/// counted (`switchboard_bus_rejected_total`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsigned_bus_messages_are_dropped_and_counted() {
    let llm = MockLlm::start().await;
    let db = Db::create().await;
    let nats = Nats::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let a = instance(dir.path(), "a", &llm, &db, &nats).await;
    let c = client(&a);
    let s = c
        .create_session(&CreateSessionRequest {
            cwd: Some(ws.path().display().to_string()),
            ..CreateSessionRequest::default()
        })
        .await
        .unwrap();
    llm.push(MockReply::tool_call(
        "call_1",
        "run_command",
        serde_json::json!({"command": "touch pwned.txt"}),
    ));
    llm.push(MockReply::text(&["done"]));
    let mut events = c.subscribe(s.id, None);
    let run = send(&a, s.id, "do it", MessageType::Message).await;
    until(&mut events, "the approval wait", |e| {
        matches!(e, AgentEvent::WaitingForToolApproval { .. })
    })
    .await;
    let mut forger = Raw::connect(&nats).await;
    // A decision, as another instance would forward it.
    let decide = serde_json::json!({
        "op": "decide",
        "session_id": s.id,
        "request": {"run_id": run, "decisions": {"call_1": {"action": "accept"}}},
    })
    .to_string();
    forger
        .publish("switchboard.control.a", "_INBOX.forger", &decide)
        .await;
    // An event batch, as another instance would publish it: the next seq, a forged reply.
    let last = c.get_session(s.id).await.unwrap().session.last_event_id;
    let forged = serde_json::json!([{
        "seq": last + 1,
        "run_id": run,
        "kind": "text_delta",
        "payload": serde_json::json!({"TextDelta": {"run_id": run, "delta": "FORGED"}}).to_string(),
        "created_at": "2026-12-05T00:00:00.000000Z",
    }])
    .to_string();
    forger
        .publish(&format!("switchboard.events.{}", s.id), "", &forged)
        .await;
    let seen = forger.line_until("PONG").await;
    forger.line_until("PONG").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let pending = c.pending_tools(s.id).await.unwrap();
    assert_eq!(pending.run_id, Some(run), "the call still waits");
    assert!(!ws.path().join("pwned.txt").exists());
    assert!(
        !seen.iter().any(|l| l.starts_with("MSG _INBOX.forger")),
        "no answer to a forger: {seen:?}"
    );
    let text = scrape(&a.url).await;
    let rejected =
        sample(&text, "switchboard_bus_rejected_total{reason=\"unsigned\"}").unwrap_or(0.0);
    assert!(rejected >= 2.0, "{rejected}");
    // The live stream never showed the forged text; a real decision still works.
    c.decide_tools(s.id, &decide_one(run, "call_1"))
        .await
        .unwrap();
    let rest = until_run_ends(&mut events, run).await;
    assert!(!text_of(&rest).contains("FORGED"), "{rest:?}");
    assert!(ws.path().join("pwned.txt").exists());
}

fn decide_one(run: uuid::Uuid, call: &str) -> switchboard_protocol::ToolDecisionsRequest {
    decide(run, call, DecisionAction::Accept, None)
}
