//! Crash torture: many sessions at work at once — messages, follow-ups, steering, approvals
//! allowed, denied and left to time out, SSE readers resuming with `Last-Event-ID`, chat
//! messages through a fake Telegram — while the server is SIGKILLed at random instants and
//! restarted, again and again.
//!
//! After every kill (on the database as the crash left it) and at the end, the invariants:
//! per-session seqs contiguous from 1 with no repeat; no run with two terminal events, and
//! none whose terminal event is stored without its end. At the end also: every message the
//! API accepted (2xx) and every chat message the gateway confirmed to Telegram is in the
//! log and its run ended; every run has exactly one terminal event; no tool ran that was
//! not allowed; every reader's stream equals the log.
//!
//! Seeded: `TORTURE_SEED` replays a run (the seed is printed first, so a failure shows it);
//! `TORTURE_KILLS` sets the number of kills (default 20).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{TOKEN, start};
use futures::StreamExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use switchboard_store::{RunState, SqlStore, Store};
use switchboard_test_support::fake_telegram::FakeTelegram;
use switchboard_test_support::mock_llm::{MockLlm, MockReply, MockToolCall, RecordedRequest};
use uuid::Uuid;

const SESSIONS: usize = 4;

/// An event as stored: seq, run, kind, payload.
type Stored = (u64, Option<Uuid>, String, Value);
/// The chat with Telegram user 42 (the allowed DM).
const CHAT_USER: i64 = 42;

/// What the drivers were told was accepted, and what they allowed.
#[derive(Default)]
struct Ledger {
    /// Messages and follow-ups answered 2xx: (session, run, text).
    runs: Vec<(Uuid, Uuid, String)>,
    /// Steering answered 2xx: (session, run, text).
    steering: Vec<(Uuid, Uuid, String)>,
    /// Tool calls an `accept` was sent for (whatever the answer: it may have landed).
    allowed: HashSet<String>,
    /// Tool calls rejected.
    rejected: HashSet<String>,
    /// Chat messages sent to the fake Telegram: (update id, text).
    chat: Vec<(i64, String)>,
}

/// The mock model: "please run" asks to run a command that leaves a marker named after the
/// call; a tool result or any other message is answered with text streamed in pieces.
fn responder(req: &RecordedRequest) -> MockReply {
    let last_role = req.body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .map(|m| m["role"].as_str().unwrap_or_default().to_string())
        .unwrap_or_default();
    if last_role == "user" && req.last_user_text().contains("please run") {
        let id = format!("call{}", Uuid::new_v4().simple());
        return MockReply::ToolCalls {
            text: Some("running it".into()),
            calls: vec![MockToolCall::new(
                id.clone(),
                "run_command",
                json!({"command": format!("touch ran-{id}")}),
            )],
            delay_ms: 10,
        };
    }
    MockReply::Text {
        chunks: (0..8).map(|i| format!("piece{i} ")).collect(),
        delay_ms: 30,
    }
}

struct Shared {
    url: String,
    http: reqwest::Client,
    ledger: Mutex<Ledger>,
    stop: AtomicBool,
}

impl Shared {
    async fn post(&self, path: &str, body: Value) -> Option<(u16, Value)> {
        let resp = self
            .http
            .post(format!("{}{path}", self.url))
            .bearer_auth(TOKEN)
            .json(&body)
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .ok()?;
        let status = resp.status().as_u16();
        let body = resp.json().await.unwrap_or(Value::Null);
        Some((status, body))
    }

    async fn get(&self, path: &str) -> Option<(u16, Value)> {
        let resp = self
            .http
            .get(format!("{}{path}", self.url))
            .bearer_auth(TOKEN)
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .ok()?;
        let status = resp.status().as_u16();
        Some((status, resp.json().await.unwrap_or(Value::Null)))
    }
}

/// One session's driver: random messages, follow-ups, steering and decisions until told to
/// stop. Requests that fail (the server is down) are not recorded: only 2xx counts.
async fn drive(shared: Arc<Shared>, session: Uuid, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut n = 0u32;
    while !shared.stop.load(Ordering::SeqCst) {
        n += 1;
        let roll: u32 = rng.random_range(0..100);
        let path = format!("/v1/sessions/{session}/messages");
        if roll < 45 {
            let kind = if roll < 25 { "message" } else { "follow_up" };
            let text = if rng.random_bool(0.4) {
                format!("s{session} m{n}: please run it")
            } else {
                format!("s{session} m{n}: hello")
            };
            let body = json!({"message": {"role": "user", "content": text}, "type": kind});
            if let Some((200, b)) = shared.post(&path, body).await {
                let run: Uuid = b["run_id"].as_str().unwrap().parse().unwrap();
                shared
                    .ledger
                    .lock()
                    .unwrap()
                    .runs
                    .push((session, run, text));
            }
        } else if roll < 55 {
            let text = format!("s{session} m{n}: steer");
            let body = json!({"message": {"role": "user", "content": text}, "type": "steering"});
            if let Some((200, b)) = shared.post(&path, body).await {
                let run: Uuid = b["run_id"].as_str().unwrap().parse().unwrap();
                shared
                    .ledger
                    .lock()
                    .unwrap()
                    .steering
                    .push((session, run, text));
            }
        } else if let Some((200, p)) = shared
            .get(&format!("/v1/sessions/{session}/tools/pending"))
            .await
            && let Some(run) = p["run_id"].as_str()
        {
            let calls: Vec<String> = p["tool_calls"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["id"].as_str().unwrap().to_string())
                .collect();
            // Allow, deny, or leave it to time out (fails closed).
            let action = match rng.random_range(0..10) {
                0..=3 => Some("accept"),
                4..=7 => Some("reject"),
                _ => None,
            };
            if let Some(action) = action {
                {
                    let mut l = shared.ledger.lock().unwrap();
                    for c in &calls {
                        if action == "accept" {
                            l.allowed.insert(c.clone());
                        } else {
                            l.rejected.insert(c.clone());
                        }
                    }
                }
                let decisions: serde_json::Map<String, Value> = calls
                    .iter()
                    .map(|c| (c.clone(), json!({"action": action})))
                    .collect();
                let _ = shared
                    .post(
                        &format!("/v1/sessions/{session}/tools/decisions"),
                        json!({"run_id": run, "decisions": decisions}),
                    )
                    .await;
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(30..250))).await;
    }
}

/// One reader per session: follows the stream with the client, which resumes with
/// `Last-Event-ID` across every restart; keeps what it saw.
fn read(client: switchboard_client::Client, session: Uuid) -> Arc<Mutex<Vec<(u64, Value)>>> {
    let seen: Arc<Mutex<Vec<(u64, Value)>>> = Arc::default();
    let out = seen.clone();
    tokio::spawn(async move {
        let mut stream = client.subscribe(session, None);
        while let Some(item) = stream.next().await {
            if let Ok(env) = item {
                let event = serde_json::to_value(&env.event).unwrap();
                out.lock().unwrap().push((env.id, event));
            }
        }
    });
    seen
}

/// The checks that hold on the database at any instant, even right after a crash: seqs
/// contiguous from 1 with no repeat; at most one terminal event per run; a terminal event
/// only for a run whose end is stored. Returns each session's log.
async fn check_stored(db: &Path) -> BTreeMap<Uuid, Vec<Stored>> {
    let store = SqlStore::open_path(db).await.unwrap();
    let (sessions, _) = store.list_sessions(1000, 0, false, None).await.unwrap();
    let mut logs = BTreeMap::new();
    for s in sessions {
        let evs = store.read_events(s.id, 0, 1_000_000).await.unwrap();
        let seqs: Vec<u64> = evs.iter().map(|e| e.seq).collect();
        assert_eq!(
            seqs,
            (1..=evs.len() as u64).collect::<Vec<_>>(),
            "session {}: seqs contiguous from 1",
            s.id
        );
        let mut terminal: HashMap<Uuid, u32> = HashMap::new();
        for e in &evs {
            if e.kind == "run_completed" || e.kind == "run_error" {
                let run = e.run_id.unwrap();
                *terminal.entry(run).or_default() += 1;
                let r = store.get_run(run).await.unwrap().expect("run of an event");
                assert!(
                    !matches!(r.state, RunState::Queued | RunState::Running),
                    "run {run} has a terminal event but is {:?}",
                    r.state
                );
            }
        }
        for (run, n) in terminal {
            assert_eq!(n, 1, "run {run}: {n} terminal events");
        }
        logs.insert(
            s.id,
            evs.into_iter()
                .map(|e| {
                    (
                        e.seq,
                        e.run_id,
                        e.kind,
                        serde_json::from_str(&e.payload).unwrap(),
                    )
                })
                .collect(),
        );
    }
    store.close().await;
    logs
}

/// What the gateway's own database says of a chat message (for a failure's report): whether
/// it was marked taken (`seen`), whether it waits in the inbox, and the stored offset.
async fn gateway_knows(dir: &Path, message_id: i64) -> String {
    use sqlx::Connection as _;
    let path = dir.join("gateway.db");
    let Ok(mut db) = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display())).await
    else {
        return "cannot be opened".into();
    };
    let seen: Option<String> =
        sqlx::query_scalar("SELECT seen_at FROM seen WHERE chat_id = $1 AND message_id = $2")
            .bind(CHAT_USER.to_string())
            .bind(message_id.to_string())
            .fetch_optional(&mut db)
            .await
            .ok()
            .flatten();
    let inbox: i64 = sqlx::query_scalar("SELECT count(*) FROM inbox")
        .fetch_one(&mut db)
        .await
        .unwrap_or(-1);
    let offset: Option<String> =
        sqlx::query_scalar("SELECT value FROM kv WHERE key LIKE '%:offset'")
            .fetch_optional(&mut db)
            .await
            .ok()
            .flatten();
    format!("message {message_id} seen at {seen:?}; {inbox} queued in the inbox; offset {offset:?}")
}

fn seed() -> u64 {
    std::env::var("TORTURE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_at_random_instants_loses_nothing_and_runs_nothing_unallowed() {
    let seed = seed();
    // Shown with the failure (the harness prints a failed test's output).
    println!("torture seed: {seed} (TORTURE_SEED={seed} replays it)");
    let kills: usize = std::env::var("TORTURE_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let mut rng = StdRng::seed_from_u64(seed);

    let llm = MockLlm::start().await;
    llm.set_responder(responder);
    let telegram = Arc::new(FakeTelegram::start().await);
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let db: PathBuf = dir.path().join("switchboard.db");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let listen = format!("127.0.0.1:{port}");
    let ws_path = ws.path().to_string_lossy().to_string();
    let tg_url = telegram.base_url();
    let env: Vec<(&str, &str)> = vec![
        ("SWITCHBOARD_LISTEN", &listen),
        ("SWITCHBOARD_DEFAULT_CWD", &ws_path),
        ("SWITCHBOARD_APPROVAL_TIMEOUT_SECS", "2"),
        ("SWITCHBOARD_TELEGRAM_TOKEN", FakeTelegram::TOKEN),
        ("SWITCHBOARD_TELEGRAM_BASE_URL", &tg_url),
        ("SWITCHBOARD_TELEGRAM_ALLOWED_CHATS", "42"),
        ("SWITCHBOARD_TELEGRAM_POLL_TIMEOUT_SECS", "1"),
    ];
    let mut server = start(dir.path(), &llm.base_url(), &env).await;
    let shared = Arc::new(Shared {
        url: server.url.clone(),
        http: reqwest::Client::new(),
        ledger: Mutex::default(),
        stop: AtomicBool::new(false),
    });
    let client = common::client(&server);
    let mut sessions = Vec::new();
    let mut readers = Vec::new();
    let mut drivers = Vec::new();
    for i in 0..SESSIONS {
        let (status, s) = shared
            .post("/v1/sessions", json!({"title": format!("torture {i}")}))
            .await
            .unwrap();
        assert_eq!(status, 201);
        let id: Uuid = s["id"].as_str().unwrap().parse().unwrap();
        sessions.push(id);
        readers.push((id, read(client.clone(), id)));
        drivers.push(tokio::spawn(drive(
            shared.clone(),
            id,
            seed ^ (i as u64 + 1),
        )));
    }
    let chat = {
        let shared = shared.clone();
        let telegram = telegram.clone();
        let mut rng = StdRng::seed_from_u64(seed ^ 0xC4A7);
        tokio::spawn(async move {
            let mut n = 0;
            while !shared.stop.load(Ordering::SeqCst) {
                n += 1;
                let text = format!("chat{n} from the phone");
                let id = telegram.dm(CHAT_USER, "alice", &text);
                shared.ledger.lock().unwrap().chat.push((id, text));
                tokio::time::sleep(Duration::from_millis(rng.random_range(200..900))).await;
            }
        })
    };

    // Lines of every server's log that say an inbound chat message was dropped (a
    // failure's report shows them; each server's log is read before it is killed).
    let mut dropped: Vec<String> = Vec::new();
    let drops = |logs: String| -> Vec<String> {
        logs.lines()
            .filter(|l| l.contains("dropped"))
            .map(str::to_string)
            .collect()
    };
    for k in 0..kills {
        tokio::time::sleep(Duration::from_millis(rng.random_range(150..1200))).await;
        dropped.extend(drops(server.logs()));
        server.kill().await;
        check_stored(&db).await;
        server = start(dir.path(), &llm.base_url(), &env).await;
        println!("kill {}/{kills} survived", k + 1);
    }

    // Quiet down: no new work; every run ends (approvals left alone time out).
    shared.stop.store(true, Ordering::SeqCst);
    for d in drivers {
        d.await.unwrap();
    }
    chat.await.unwrap();
    // Queued follow-ups may each wait out an approval (2 s): the time scales with them.
    let queued = shared.ledger.lock().unwrap().runs.len() as u64;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60 + 3 * queued);
    loop {
        let mut busy = telegram.pending_updates() > 0;
        for s in &sessions {
            match shared.get(&format!("/v1/sessions/{s}")).await {
                Some((200, v)) => busy |= v["session"]["run_status"] != "idle",
                _ => busy = true,
            }
        }
        match shared.get("/v1/sessions?limit=100").await {
            Some((200, list)) => {
                for s in list["sessions"].as_array().unwrap() {
                    busy |= s["run_status"] != "idle";
                }
            }
            _ => busy = true,
        }
        if !busy {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still busy long after the last kill"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Queued follow-ups may still be starting one after another, and confirmed chat
    // messages reaching their session: wait until the ledger's runs and chats all ended
    // (or the deadline; the assertions below then say what is missing).
    let ended = |logs: &BTreeMap<Uuid, Vec<Stored>>, run: Uuid| {
        logs.values().flatten().any(|(_, r, kind, _)| {
            *r == Some(run) && (kind == "run_completed" || kind == "run_error")
        })
    };
    let chat_run = |logs: &BTreeMap<Uuid, Vec<Stored>>, text: &str| {
        logs.values()
            .flatten()
            .find(|(_, _, kind, p)| kind == "run_started" && p.to_string().contains(text))
            .and_then(|e| e.1)
    };
    let logs = loop {
        let logs = check_stored(&db).await;
        let done = {
            let l = shared.ledger.lock().unwrap();
            l.runs.iter().all(|(_, r, _)| ended(&logs, *r))
                && l.chat
                    .iter()
                    .all(|(_, t)| chat_run(&logs, t).is_some_and(|r| ended(&logs, r)))
        };
        if done || tokio::time::Instant::now() > deadline {
            break logs;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };

    let ledger = std::mem::take(&mut *shared.ledger.lock().unwrap());
    // Every accepted message is in the log and its run ended.
    for (s, run, text) in &ledger.runs {
        let log = &logs[s];
        let mentioned = log.iter().any(|(_, r, kind, payload)| {
            *r == Some(*run)
                && matches!(kind.as_str(), "run_started" | "follow_up_queued")
                && payload.to_string().contains(text.as_str())
        });
        assert!(
            mentioned,
            "accepted message {text:?} (run {run}) is not in the log"
        );
    }
    for (s, run, text) in &ledger.steering {
        assert!(
            logs[s].iter().any(|(_, r, kind, payload)| *r == Some(*run)
                && kind == "steering_received"
                && payload.to_string().contains(text.as_str())),
            "accepted steering {text:?} is not in the log"
        );
    }
    // Every run that started has exactly one terminal event (check_stored: at most one).
    for (s, log) in &logs {
        let started: HashSet<Uuid> = log
            .iter()
            .filter(|e| e.2 == "run_started")
            .filter_map(|e| e.1)
            .collect();
        for run in started {
            assert!(
                log.iter()
                    .any(|e| e.1 == Some(run) && (e.2 == "run_completed" || e.2 == "run_error")),
                "session {s}: run {run} started and never ended"
            );
        }
    }
    // Chat: every message Telegram was told we have (no update pending) is in a run's
    // prompt, and that run ended.
    assert_eq!(telegram.pending_updates(), 0);
    for (id, text) in &ledger.chat {
        let Some(run) = chat_run(&logs, text) else {
            let store = SqlStore::open_path(&db).await.unwrap();
            let mut found = Vec::new();
            for (s, log) in &logs {
                for e in log {
                    if e.3.to_string().contains(text.as_str()) {
                        found.push(format!("{s} event {} {} run {:?}", e.0, e.2, e.1));
                    }
                }
                let (msgs, _) = store.list_messages(*s, u32::MAX, 0).await.unwrap();
                for m in msgs {
                    if m.content.contains(text.as_str()) {
                        found.push(format!("{s} message {} run {:?}", m.role, m.run_id));
                    }
                }
            }
            let gateway = gateway_knows(dir.path(), *id).await;
            dropped.extend(drops(server.logs()));
            panic!(
                "chat message {text:?} never reached an agent; seen in: {found:#?}; gateway.db: {gateway}; dropped by the gateway: {dropped:#?}"
            );
        };
        assert!(
            ended(&logs, run),
            "the run of chat message {text:?} never ended"
        );
    }
    for (_, run, text) in &ledger.runs {
        assert!(ended(&logs, *run), "accepted run of {text:?} never ended");
    }
    // No tool ran that was not allowed.
    let mut ran = Vec::new();
    for entry in std::fs::read_dir(ws.path()).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().to_string();
        if let Some(call) = name.strip_prefix("ran-") {
            ran.push(call.to_string());
        }
    }
    for call in &ran {
        assert!(
            ledger.allowed.contains(call),
            "tool call {call} ran without an accept"
        );
        assert!(!ledger.rejected.contains(call), "rejected call {call} ran");
    }
    // Every reader saw exactly the log: same seqs, same events, nothing twice.
    for (s, seen) in &readers {
        let log = &logs[s];
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while seen.lock().unwrap().len() < log.len() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "reader of {s} saw {} of {} events",
                seen.lock().unwrap().len(),
                log.len()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let seen = seen.lock().unwrap().clone();
        let want: Vec<(u64, Value)> = log.iter().map(|e| (e.0, e.3.clone())).collect();
        assert_eq!(seen, want, "reader of {s}: stream differs from the log");
    }
    let runs = ledger.runs.len();
    println!(
        "torture: {kills} kills; {runs} accepted runs, {} steering, {} chat messages, {} tools allowed ({} ran), {} rejected",
        ledger.steering.len(),
        ledger.chat.len(),
        ledger.allowed.len(),
        ran.len(),
        ledger.rejected.len()
    );
    assert!(
        runs >= 20,
        "the drivers did too little to prove anything: {runs} runs"
    );
    server.stop().await;
}
