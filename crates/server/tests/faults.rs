//! The write paths under a failing database: the API in front of an engine whose store is a
//! [`FaultyStore`] over a real SQLite file, served on real TCP.
//!
//! Each test breaks one store method (the N-th call, or every call from one on), drives
//! the path that writes through it, and checks three things: the caller is told clearly
//! (503 `store_unavailable` with `Retry-After`, or a retryable `RunError` in the log),
//! nothing is left half-written (no stored message that the caller was told failed, no
//! terminal event without the run's end, no approval left waiting, no tool run that was
//! not allowed), and the same path works again once the store does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use switchboard_engine::{
    Backend, BackendError, Backends, Decision, Engine, EngineConfig, RunContext, RunSummary,
    ToolClass,
};
use switchboard_protocol::{AgentEvent, ToolCall};
use switchboard_store::{RunState, SqlStore, Store};
use switchboard_test_support::faulty_store::{Action, Fault, FaultyStore};
use uuid::Uuid;

const TOKEN: &str = "faults-token";

/// A backend that does what the message says, so each test picks the writes a run makes:
/// `stream N` streams N deltas (5 ms apart), `tool` asks to run a command, `state` saves
/// backend state; every run ends with a `TextComplete`.
#[derive(Default)]
struct Scripted {
    /// Runs whose tool call ran (it runs only after an explicit accept).
    ran: Mutex<Vec<Uuid>>,
}

#[async_trait]
impl Backend for Scripted {
    async fn run(&self, ctx: RunContext) -> Result<RunSummary, BackendError> {
        let h = &ctx.handle;
        let words: Vec<String> = ctx
            .input
            .content
            .split_whitespace()
            .map(str::to_string)
            .collect();
        match words.first().map(String::as_str) {
            Some("stream") => {
                let n: usize = words.get(1).and_then(|w| w.parse().ok()).unwrap_or(10);
                for i in 0..n {
                    if ctx.cancel.is_cancelled() {
                        break;
                    }
                    h.stream_text(format!("w{i} ")).await?;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            Some("tool") => {
                let call = ToolCall {
                    id: "call-1".into(),
                    name: "run_command".into(),
                    arguments: json!({"command": "rm -rf build"}),
                    metadata: None,
                };
                let decision = h.gate(&[(call.clone(), ToolClass::Execute)]).await?;
                if decision[0] == Decision::Run {
                    h.tool_started(&call).await?;
                    self.ran.lock().unwrap().push(ctx.run_id);
                    h.tool_finished(&call, "removed", false).await?;
                } else {
                    h.tool_not_run(&call, &decision[0]).await?;
                }
            }
            Some("state") => {
                h.save_backend_state(Some(&json!({"resume": ctx.run_id})))
                    .await?;
            }
            _ => {}
        }
        h.emit(AgentEvent::TextComplete {
            run_id: ctx.run_id,
            text: "done".into(),
        })
        .await?;
        Ok(RunSummary {
            stop_reason: "end_turn".into(),
            total_turns: 1,
            usage: Default::default(),
        })
    }
}

struct World {
    _dir: tempfile::TempDir,
    /// The real store, read directly to check what was kept.
    store: Arc<SqlStore>,
    faulty: FaultyStore,
    backend: Arc<Scripted>,
    engine: Engine,
    url: String,
    http: reqwest::Client,
}

impl World {
    async fn new() -> World {
        Self::with(EngineConfig::default()).await
    }

    async fn with(config: EngineConfig) -> World {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(
            SqlStore::open_path(&dir.path().join("switchboard.db"))
                .await
                .unwrap(),
        );
        let faulty = FaultyStore::new(store.clone());
        let backend = Arc::new(Scripted::default());
        let engine = Engine::start(
            Arc::new(faulty.clone()),
            Backends {
                builtin: Some(backend.clone()),
                ..Backends::default()
            },
            EngineConfig {
                default_cwd: dir.path().to_path_buf(),
                files_dir: dir.path().join("files"),
                ..config
            },
        )
        .await
        .unwrap();
        let router = switchboard_server::router(
            engine.clone(),
            switchboard_server::ServerConfig::new(TOKEN),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let _ = axum::serve(switchboard_server::listener(listener), router).await;
        });
        World {
            _dir: dir,
            store,
            faulty,
            backend,
            engine,
            url,
            http: reqwest::Client::new(),
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Answer {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(TOKEN);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_string());
        let text = resp.text().await.unwrap();
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Answer {
            status,
            retry_after,
            body,
        }
    }

    async fn post(&self, path: &str, body: Value) -> Answer {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    async fn get(&self, path: &str) -> Answer {
        self.call(reqwest::Method::GET, path, None).await
    }

    async fn session(&self) -> Uuid {
        let a = self.post("/v1/sessions", json!({})).await;
        assert_eq!(a.status, 201, "{:?}", a.body);
        a.body["id"].as_str().unwrap().parse().unwrap()
    }

    async fn send(&self, session: Uuid, kind: &str, text: &str) -> Answer {
        self.post(
            &format!("/v1/sessions/{session}/messages"),
            json!({"message": {"role": "user", "content": text}, "type": kind}),
        )
        .await
    }

    /// Sends a message that must be accepted; its run id.
    async fn run(&self, session: Uuid, text: &str) -> Uuid {
        let a = self.send(session, "message", text).await;
        assert_eq!(a.status, 200, "{:?}", a.body);
        a.body["run_id"].as_str().unwrap().parse().unwrap()
    }

    /// Waits (on the real store) until the run is over; its final state.
    async fn ended(&self, run: Uuid) -> RunState {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let r = self.store.get_run(run).await.unwrap().expect("run stored");
            if !matches!(r.state, RunState::Queued | RunState::Running) {
                return r.state;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "run {run} still {:?}",
                r.state
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until the session's log holds an event of `kind`.
    async fn until_event(&self, session: Uuid, kind: &str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while !self.events(session).await.iter().any(|e| e.0 == kind) {
            assert!(tokio::time::Instant::now() < deadline, "no {kind} event");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The log as (kind, payload), after checking it: seqs contiguous from 1 with no repeat,
    /// each ended run has exactly one terminal event and each terminal event's run has
    /// ended, and no tool ran unless accepted.
    async fn events(&self, session: Uuid) -> Vec<(String, Value)> {
        let evs = self.store.read_events(session, 0, 100_000).await.unwrap();
        let seqs: Vec<u64> = evs.iter().map(|e| e.seq).collect();
        assert_eq!(
            seqs,
            (1..=evs.len() as u64).collect::<Vec<_>>(),
            "seqs contiguous from 1"
        );
        let mut terminals: std::collections::HashMap<Uuid, usize> = Default::default();
        for e in &evs {
            if e.kind == "run_completed" || e.kind == "run_error" {
                *terminals.entry(e.run_id.unwrap()).or_default() += 1;
            }
        }
        for (run, n) in &terminals {
            assert_eq!(*n, 1, "run {run} has {n} terminal events");
            let r = self.store.get_run(*run).await.unwrap().unwrap();
            assert!(
                !matches!(r.state, RunState::Queued | RunState::Running),
                "run {run} has a terminal event but is {:?} in the store",
                r.state
            );
        }
        for run in self.backend.ran.lock().unwrap().iter() {
            assert!(
                evs.iter()
                    .any(|e| e.run_id == Some(*run) && e.kind == "waiting_for_tool_approval"),
                "a tool of run {run} ran without being asked about"
            );
        }
        evs.into_iter()
            .map(|e| (e.kind, serde_json::from_str(&e.payload).unwrap()))
            .collect()
    }

    /// Another engine on the same database file, as after a restart (alone on it, so it
    /// closes the runs left running at once); its own real store.
    async fn restarted(&self) -> (Engine, Arc<SqlStore>) {
        let store = Arc::new(
            SqlStore::open_path(&self._dir.path().join("switchboard.db"))
                .await
                .unwrap(),
        );
        let engine = Engine::start(
            store.clone(),
            Backends {
                builtin: Some(Arc::new(Scripted::default())),
                ..Backends::default()
            },
            EngineConfig {
                default_cwd: self._dir.path().to_path_buf(),
                files_dir: self._dir.path().join("files"),
                ..EngineConfig::default()
            },
        )
        .await
        .unwrap();
        (engine, store)
    }

    fn ran(&self, run: Uuid) -> bool {
        self.backend.ran.lock().unwrap().contains(&run)
    }
}

#[derive(Debug)]
struct Answer {
    status: u16,
    retry_after: Option<String>,
    body: Value,
}

impl Answer {
    /// A 503 `store_unavailable` that says when to retry and leaks nothing of the database.
    fn assert_store_unavailable(&self) {
        assert_eq!(self.status, 503, "{:?}", self.body);
        assert_eq!(self.body["code"], "store_unavailable", "{:?}", self.body);
        assert_eq!(self.retry_after.as_deref(), Some("2"));
        let msg = self.body["error"].as_str().unwrap();
        assert!(
            !msg.contains("injected"),
            "the database's error leaked: {msg}"
        );
        assert!(self.body["request_id"].is_string());
    }
}

fn run_error(events: &[(String, Value)], run: Uuid) -> Value {
    let errs: Vec<&Value> = events
        .iter()
        .filter(|(k, v)| k == "run_error" && v["RunError"]["run_id"] == run.to_string())
        .map(|(_, v)| &v["RunError"])
        .collect();
    assert_eq!(errs.len(), 1, "one RunError for {run}: {events:?}");
    errs[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_503_while_the_store_fails_and_200_after() {
    let w = World::new().await;
    assert_eq!(w.get("/v1/health").await.status, 200);
    w.faulty.set("ping", Fault::always(Action::Fail));
    let a = w.get("/v1/health").await;
    assert_eq!(a.status, 503);
    assert_eq!(a.body["status"], "degraded");
    assert_eq!(a.body["store"]["status"], "unavailable");
    // A store that hangs is as down as one that fails (the check is bounded).
    w.faulty.set("ping", Fault::always(Action::Hang));
    let started = std::time::Instant::now();
    assert_eq!(w.get("/v1/health").await.status, 503);
    assert!(started.elapsed() < Duration::from_secs(5));
    w.faulty.heal();
    let a = w.get("/v1/health").await;
    assert_eq!(a.status, 200);
    assert_eq!(a.body["store"]["status"], "ok");
}

/// Creating a session and sending a message: a failed write is a 503 and keeps nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_write_keeps_nothing_and_the_retry_works() {
    let w = World::new().await;
    // The session's insert.
    w.faulty.set("create_session", Fault::nth(0, Action::Fail));
    w.post("/v1/sessions", json!({"title": "lost"}))
        .await
        .assert_store_unavailable();
    assert_eq!(
        w.store.list_sessions(10, 0, false, None).await.unwrap().1,
        0
    );
    let s = w.session().await;
    assert_eq!(
        w.store.list_sessions(10, 0, false, None).await.unwrap().1,
        1
    );

    // The message's run, queued at the front before it starts.
    w.faulty
        .set("enqueue_run_front", Fault::nth(0, Action::Fail));
    w.send(s, "message", "stream 3")
        .await
        .assert_store_unavailable();
    assert!(w.store.next_queued_run(s).await.unwrap().is_none());
    assert!(w.events(s).await.is_empty(), "nothing was logged");

    // The run's start: the queued run is taken back, so it never runs later.
    w.faulty.set("start_run", Fault::nth(0, Action::Fail));
    w.send(s, "message", "stream 3")
        .await
        .assert_store_unavailable();
    assert!(
        w.store.next_queued_run(s).await.unwrap().is_none(),
        "a message the caller was told failed is not left queued"
    );
    assert!(w.events(s).await.is_empty());

    // Reading the session before anything is written.
    w.faulty.set("get_session", Fault::nth(0, Action::Fail));
    w.send(s, "message", "stream 3")
        .await
        .assert_store_unavailable();

    // Healed: the same message goes through, once.
    let run = w.run(s, "stream 3").await;
    assert_eq!(w.ended(run).await, RunState::Completed);
    let evs = w.events(s).await;
    let started: Vec<_> = evs.iter().filter(|e| e.0 == "run_started").collect();
    assert_eq!(started.len(), 1, "{evs:?}");
}

/// A follow-up whose announcement cannot be logged is not left queued: the caller was told
/// it failed, so it must not run later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_refused_by_the_store_never_runs() {
    let w = World::new().await;
    let s = w.session().await;
    let first = w.run(s, "tool").await;
    w.until_event(s, "waiting_for_tool_approval").await;

    // The queue's insert fails.
    w.faulty.set("enqueue_run", Fault::nth(0, Action::Fail));
    w.send(s, "follow_up", "stream 2")
        .await
        .assert_store_unavailable();
    // The insert works, the `FollowUpQueued` event does not.
    w.faulty.set("write_events", Fault::nth(0, Action::Fail));
    w.send(s, "follow_up", "stream 2")
        .await
        .assert_store_unavailable();
    assert!(
        w.store.next_queued_run(s).await.unwrap().is_none(),
        "nothing queued"
    );
    // Healed: a follow-up is queued and runs after the first run.
    let a = w.send(s, "follow_up", "stream 2").await;
    assert_eq!(a.status, 200, "{:?}", a.body);
    let follow: Uuid = a.body["run_id"].as_str().unwrap().parse().unwrap();
    let d = w
        .post(
            &format!("/v1/sessions/{s}/tools/decisions"),
            json!({"run_id": first, "decisions": {"call-1": {"action": "reject"}}}),
        )
        .await;
    assert_eq!(d.status, 200, "{:?}", d.body);
    assert_eq!(w.ended(first).await, RunState::Completed);
    assert_eq!(w.ended(follow).await, RunState::Completed);
    let evs = w.events(s).await;
    assert_eq!(
        evs.iter().filter(|e| e.0 == "run_started").count(),
        2,
        "the first run and one follow-up: {evs:?}"
    );
    assert!(!w.ran(first), "the rejected tool did not run");
}

/// Events that cannot be appended mid-run fail the run with a retryable error once the
/// store is back: one terminal event, the run's end stored with it, the text a prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_events_cannot_be_stored_fails_retryably() {
    let w = World::new().await;
    let s = w.session().await;
    let run = w.run(s, "stream 400").await;
    w.until_event(s, "text_delta").await;
    let before = w.faulty.calls("write_events");
    w.faulty.set("write_events", Fault::always(Action::Fail));
    // Healed once the stream has hit the fault (well within the end's retries, 0.2 + 0.4 s …).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while w.faulty.calls("write_events") == before {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stream never wrote"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    w.faulty.heal();
    assert_eq!(w.ended(run).await, RunState::Failed);
    let evs = w.events(s).await;
    let err = run_error(&evs, run);
    assert_eq!(err["retryable"], true, "{err}");
    assert!(
        !err["error"].as_str().unwrap().contains("injected"),
        "the database's error text stays in the log: {err}"
    );
    assert!(evs.iter().all(|e| e.0 != "run_completed"));
    assert!(
        evs.iter().all(|e| e.0 != "text_complete"),
        "a reply with a hole is not completed"
    );
    // The session takes the next message.
    let next = w.run(s, "stream 2").await;
    assert_eq!(w.ended(next).await, RunState::Completed);
    w.events(s).await;
}

/// A run's end that cannot be written even after retries stays open under a lease nobody
/// renews; once the store is back the reaper closes it with exactly one `RunError`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_end_that_cannot_be_written_is_closed_once_by_the_reaper() {
    let w = World::with(EngineConfig {
        run_lease_ttl: Duration::from_millis(800),
        ..EngineConfig::default()
    })
    .await;
    let s = w.session().await;
    let run = w.run(s, "tool").await;
    w.until_event(s, "waiting_for_tool_approval").await;
    w.faulty.set("write_events", Fault::always(Action::Fail));
    let d = w
        .post(
            &format!("/v1/sessions/{s}/tools/decisions"),
            json!({"run_id": run, "decisions": {"call-1": {"action": "reject"}}}),
        )
        .await;
    assert_eq!(
        d.status, 200,
        "the decision is taken in memory: {:?}",
        d.body
    );
    // The end's four attempts take 1.4 s; the store stays down past them.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let r = w.store.get_run(run).await.unwrap().unwrap();
    assert_eq!(
        r.state,
        RunState::Running,
        "not closed while the store fails"
    );
    assert!(w.events(s).await.iter().all(|e| e.0 != "run_error"));
    // The session is busy, and says so rather than 500.
    let busy = w.send(s, "message", "stream 1").await;
    assert_eq!(busy.status, 409, "{:?}", busy.body);
    w.faulty.heal();
    assert_eq!(w.ended(run).await, RunState::Failed);
    let evs = w.events(s).await;
    assert_eq!(run_error(&evs, run)["retryable"], true);
    assert!(!w.ran(run));
    let next = w.run(s, "stream 1").await;
    assert_eq!(w.ended(next).await, RunState::Completed);
    w.events(s).await;
}

/// Approvals: an approval that cannot be stored fails the run closed (no tool runs, nothing
/// left waiting); a decision that arrives while the store fails is a 503 and can be sent
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_fail_closed_when_the_store_fails() {
    let w = World::new().await;
    let s = w.session().await;
    w.faulty.set("put_approval", Fault::nth(0, Action::Fail));
    let run = w.run(s, "tool").await;
    assert_eq!(w.ended(run).await, RunState::Failed);
    let evs = w.events(s).await;
    assert_eq!(run_error(&evs, run)["retryable"], true);
    assert!(!w.ran(run), "no approval, no tool");
    assert!(evs.iter().all(|e| e.0 != "waiting_for_tool_approval"));
    let pending = w.get(&format!("/v1/sessions/{s}/tools/pending")).await;
    assert_eq!(pending.status, 200);
    assert_eq!(pending.body["tool_calls"], json!([]));
    assert!(w.store.list_approvals().await.unwrap().is_empty());

    // Decide while the store fails: 503, the approval still waits; decided again: runs.
    let run = w.run(s, "tool").await;
    w.until_event(s, "waiting_for_tool_approval").await;
    w.faulty.set("get_session", Fault::always(Action::Fail));
    let decide = json!({"run_id": run, "decisions": {"call-1": {"action": "accept"}}});
    w.post(&format!("/v1/sessions/{s}/tools/decisions"), decide.clone())
        .await
        .assert_store_unavailable();
    assert!(!w.ran(run));
    w.faulty.heal();
    let d = w
        .post(&format!("/v1/sessions/{s}/tools/decisions"), decide)
        .await;
    assert_eq!(d.status, 200, "{:?}", d.body);
    assert_eq!(w.ended(run).await, RunState::Completed);
    assert!(w.ran(run));
    w.events(s).await;
}

/// Backend state that cannot be saved fails the run, retryably; the next run saves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_state_that_cannot_be_saved_fails_the_run_retryably() {
    let w = World::new().await;
    let s = w.session().await;
    w.faulty
        .set("set_backend_state", Fault::nth(0, Action::Fail));
    let run = w.run(s, "state").await;
    assert_eq!(w.ended(run).await, RunState::Failed);
    assert_eq!(run_error(&w.events(s).await, run)["retryable"], true);
    assert_eq!(w.store.get_backend_state(s).await.unwrap(), None);
    let run = w.run(s, "state").await;
    assert_eq!(w.ended(run).await, RunState::Completed);
    assert_eq!(
        w.store.get_backend_state(s).await.unwrap(),
        Some(json!({"resume": run}))
    );
}

/// A lease that cannot be renewed past its time stops the run here (another instance
/// could take it over); the run gets one terminal event, written by the reaper once the
/// store answers, and a reaper whose takeover fails tries again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_that_cannot_be_renewed_stops_the_run_and_it_is_closed_once() {
    let w = World::with(EngineConfig {
        run_lease_ttl: Duration::from_millis(600),
        ..EngineConfig::default()
    })
    .await;
    let s = w.session().await;
    let run = w.run(s, "tool").await;
    w.until_event(s, "waiting_for_tool_approval").await;
    w.faulty.set("renew_lease", Fault::always(Action::Hang));
    w.faulty.set("take_over_lease", Fault::always(Action::Fail));
    // Stopped here once the lease ran out unrenewed: the approval is withdrawn (polled: a
    // loaded machine may take longer than the lease), so a decision finds nothing to decide.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let p = w.get(&format!("/v1/sessions/{s}/tools/pending")).await;
        if p.body["tool_calls"] == json!([]) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the run still waits after its lease could not be renewed: {p:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let d = w
        .post(
            &format!("/v1/sessions/{s}/tools/decisions"),
            json!({"run_id": run, "decisions": {"call-1": {"action": "accept"}}}),
        )
        .await;
    assert_eq!(d.status, 409, "{:?}", d.body);
    while w.faulty.calls("take_over_lease") == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the reaper never tried"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        w.store.get_run(run).await.unwrap().unwrap().state,
        RunState::Running,
        "nobody could close it yet"
    );
    w.faulty.heal();
    assert_eq!(w.ended(run).await, RunState::Failed);
    let evs = w.events(s).await;
    assert_eq!(run_error(&evs, run)["retryable"], true);
    assert!(!w.ran(run), "a tool whose run was stopped did not run");
    let next = w.run(s, "stream 2").await;
    assert_eq!(w.ended(next).await, RunState::Completed);
    w.events(s).await;
    drop(w.engine);
}

/// A message accepted just before the server died — its run started in the store, its
/// start not logged yet — is kept: the restart logs it (`RunStarted` with the text, once)
/// and puts it in the transcript before closing the run with a retryable error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_accepted_just_before_a_crash_is_kept() {
    // Stuck before the start was logged, and after it (before the transcript).
    for stuck in ["write_events", "append_message"] {
        let w = World::new().await;
        let s = w.session().await;
        // The run's first write of each kind never returns: as good as dead from there.
        w.faulty.set(stuck, Fault::always(Action::Hang));
        let text = format!("keep me ({stuck})");
        let run = w.run(s, &text).await;
        // The old engine is stuck in that write (it never returns): as good as dead.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while w.faulty.calls(stuck) == 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{stuck} never called"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let (_b, store) = w.restarted().await;
        let r = store.get_run(run).await.unwrap().unwrap();
        assert_eq!(r.state, RunState::Failed, "closed by the restart");
        let evs = store.read_events(s, 0, 1000).await.unwrap();
        let kinds: Vec<&str> = evs.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(kinds, ["run_started", "run_error"], "{stuck}: {kinds:?}");
        assert!(evs[0].payload.contains(&text), "{}", evs[0].payload);
        let (msgs, _) = store.list_messages(s, 100, 0).await.unwrap();
        let users: Vec<&str> = msgs
            .iter()
            .filter(|m| m.role == "user")
            .map(|m| m.content.as_str())
            .collect();
        assert_eq!(users, [text.as_str()], "{stuck}");
        let seqs: Vec<u64> = evs.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [1, 2]);
    }
}
