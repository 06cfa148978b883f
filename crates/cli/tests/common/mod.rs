//! Helpers shared by the end-to-end tests: start the real binary, read SSE raw.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use switchboard_client::Client;
use switchboard_protocol::{AgentEvent, EventEnvelope};
use switchboard_test_support::process::ServerProcess;
use uuid::Uuid;

pub mod a2a_agent;
pub mod api;
pub mod browser;
pub mod chat;
pub mod mailserver;
pub mod nats;
pub mod sandbox;
pub mod synapse;

pub const TOKEN: &str = "test-token-0123456789";

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_switchboard"))
}

pub async fn start(data_dir: &Path, llm_url: &str, extra: &[(&str, &str)]) -> ServerProcess {
    let mut env: Vec<(&str, &str)> = vec![
        ("SWITCHBOARD_OPENAI_BASE_URL", llm_url),
        ("SWITCHBOARD_MODEL", "mock-model"),
        ("SWITCHBOARD_PROVIDER_MAX_RETRIES", "0"),
        ("SWITCHBOARD_DEFAULT_CWD", "/tmp"),
        ("SWITCHBOARD_CONFIG", "/dev/null"),
        // Sessions here mostly work in /tmp: no checkpoints of it (tests/checkpoints.rs
        // turns them on).
        ("SWITCHBOARD_CHECKPOINTS", "false"),
    ];
    env.extend_from_slice(extra);
    ServerProcess::start(&bin(), data_dir, TOKEN, &env)
        .await
        .expect("server starts")
}

/// Runs `switchboard channels test NAME` with `env` (and a fresh data directory, no
/// configuration file): what a person checks a channel's settings with.
pub async fn channels_test(name: &str, env: Vec<(String, String)>) -> std::process::Output {
    let name = name.to_string();
    tokio::task::spawn_blocking(move || {
        let data = tempfile::tempdir().unwrap();
        std::process::Command::new(bin())
            .args(["channels", "test", &name])
            .envs(env)
            .env("SWITCHBOARD_DATA_DIR", data.path())
            .env("SWITCHBOARD_CONFIG", "/dev/null")
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

/// Writes `dir/switchboard.toml`, whose `[agents.test]` is the scriptable test agent
/// (`switchboard-test-agent`) keeping its state and log (`agent.log`) under `dir`; returns
/// its path, for `SWITCHBOARD_CONFIG`.
/// Every surface mounted: a configuration in `dir` with the chat gateway and a signed
/// webhook channel (`ops`), and an empty bundles directory; the environment that points
/// `serve` at them.
pub fn every_surface(dir: &Path) -> Vec<(&'static str, String)> {
    let config = dir.join("switchboard.toml");
    std::fs::write(
        &config,
        "[gateway]\nenabled = true\n\n[channels.webhook.ops]\nsecret = \"every-surface-secret-0123456789\"\nurl = \"http://127.0.0.1:9/\"\n",
    )
    .unwrap();
    std::fs::create_dir_all(dir.join("bundles")).unwrap();
    vec![
        ("SWITCHBOARD_CONFIG", config.to_string_lossy().into_owned()),
        (
            "SWITCHBOARD_BUNDLES_DIR",
            dir.join("bundles").to_string_lossy().into_owned(),
        ),
    ]
}

pub fn test_agent_config(dir: &Path) -> PathBuf {
    let state = dir.join("agent-state");
    std::fs::create_dir_all(&state).unwrap();
    let log = dir.join("agent.log");
    let config = dir.join("switchboard.toml");
    std::fs::write(
        &config,
        format!(
            "[agents.test]\ncommand = {:?}\nenv = {{ TEST_AGENT_LOG = {:?}, TEST_AGENT_STATE_DIR = {:?} }}\n{}",
            env!("CARGO_BIN_EXE_switchboard-test-agent"),
            log.to_string_lossy(),
            state.to_string_lossy(),
            agent_sandbox_rules("test", &[&log, &state]),
        ),
    )
    .unwrap();
    config
}

/// `[agents.NAME.sandbox]` granting the test agent its log and state (outside its
/// workspace, where the sandbox would refuse them); a log file is made first (a rule names
/// what exists).
pub fn agent_sandbox_rules(name: &str, paths: &[&Path]) -> String {
    for p in paths {
        if p.extension().is_some_and(|e| e == "log") && !p.exists() {
            std::fs::write(p, "").unwrap();
        }
    }
    let list: Vec<String> = paths
        .iter()
        .map(|p| format!("{:?}", p.to_string_lossy()))
        .collect();
    format!(
        "[agents.{name}.sandbox]\nread_write = [{}]\n",
        list.join(", ")
    )
}

pub fn client(server: &ServerProcess) -> Client {
    Client::new(server.url.clone(), Some(TOKEN.to_string())).unwrap()
}

/// A raw SSE connection: yields `(id, event name, data)` and lets the test drop it at will.
pub struct RawSse {
    resp: reqwest::Response,
    buf: String,
}

/// One raw SSE frame: its `id:` (if any), `event:` and `data:` lines.
pub struct SseFrame {
    pub id: Option<u64>,
    pub name: String,
    pub data: String,
}

impl RawSse {
    /// A session's event stream, resumed after `last_event_id` if given.
    pub async fn connect(base: &str, session: Uuid, last_event_id: Option<u64>) -> RawSse {
        Self::open(
            base,
            &format!("/v1/sessions/{session}/events"),
            last_event_id,
        )
        .await
    }

    /// Any SSE route of the API (`path` from `/v1`), checked to answer 200 `text/event-stream`.
    pub async fn open(base: &str, path: &str, last_event_id: Option<u64>) -> RawSse {
        let mut req = reqwest::Client::new()
            .get(format!("{base}{path}"))
            .bearer_auth(TOKEN);
        if let Some(id) = last_event_id {
            req = req.header("Last-Event-ID", id.to_string());
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 200);
        assert!(
            resp.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/event-stream")
        );
        RawSse {
            resp,
            buf: String::new(),
        }
    }

    /// An event stream already opened (checked to be 200 `text/event-stream` by the caller).
    pub fn from_response(resp: reqwest::Response) -> RawSse {
        RawSse {
            resp,
            buf: String::new(),
        }
    }

    /// Next frame with a `data:` line (keep-alive comments are skipped), or
    /// None at EOF. Panics after 30 s without data.
    pub async fn next_frame(&mut self) -> Option<SseFrame> {
        loop {
            if let Some(pos) = self.buf.find("\n\n") {
                let frame: String = self.buf.drain(..pos + 2).collect();
                let mut id = None;
                let mut name = None;
                let mut data = None;
                for line in frame.lines() {
                    if let Some(v) = line.strip_prefix("id: ") {
                        id = Some(v.parse::<u64>().unwrap());
                    } else if let Some(v) = line.strip_prefix("event: ") {
                        name = Some(v.to_string());
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        data = Some(v.to_string());
                    }
                }
                if let Some(data) = data {
                    // No `event:` line: SSE's default type.
                    let name = name.unwrap_or_else(|| "message".to_owned());
                    return Some(SseFrame { id, name, data });
                }
                continue;
            }
            match tokio::time::timeout(Duration::from_secs(30), self.resp.chunk()).await {
                Ok(Ok(Some(bytes))) => self.buf.push_str(&String::from_utf8_lossy(&bytes)),
                Ok(Ok(None)) | Ok(Err(_)) => return None,
                Err(_) => panic!("no SSE data for 30 s"),
            }
        }
    }

    /// Next event frame (with an id; control frames are skipped), or None at EOF.
    pub async fn next(&mut self) -> Option<(u64, String, EventEnvelope)> {
        loop {
            let frame = self.next_frame().await?;
            let Some(id) = frame.id else { continue };
            let env: EventEnvelope = serde_json::from_str(&frame.data).unwrap();
            assert_eq!(env.id, id, "SSE id matches data.id");
            assert_eq!(
                env.event.kind(),
                frame.name,
                "event: line matches the variant"
            );
            return Some((id, frame.name, env));
        }
    }
}

/// Reads `stream` until `pred` holds for an event (transient stream errors are skipped:
/// the client resumes); returns everything read with when it arrived, that one last.
/// Panics naming `what` after 30 s without an event.
pub async fn until_timed(
    stream: &mut switchboard_client::EventStream,
    what: &str,
    pred: impl Fn(&AgentEvent) -> bool,
) -> Vec<(EventEnvelope, std::time::Instant)> {
    let mut out: Vec<(EventEnvelope, std::time::Instant)> = Vec::new();
    loop {
        let item = tokio::time::timeout(Duration::from_secs(30), stream.next())
            .await
            .unwrap_or_else(|_| {
                let seen: Vec<_> = out.iter().map(|(e, _)| described(&e.event)).collect();
                panic!("no {what} within 30 s; saw {seen:?}")
            })
            .expect("stream ended");
        let env = match item {
            Ok(e) => e,
            Err(e) if e.is_transient() => continue,
            Err(e) => panic!("stream error {e}"),
        };
        let hit = pred(&env.event);
        out.push((env, std::time::Instant::now()));
        if hit {
            return out;
        }
    }
}

/// An event's kind, with what a notice or a failed tool said (for a test's failure message).
fn described(event: &AgentEvent) -> String {
    match event {
        AgentEvent::Notice { message, .. } => format!("notice: {message}"),
        AgentEvent::ToolExecutionCompleted {
            result,
            is_error: true,
            ..
        } => format!("tool_execution_completed (error: {result})"),
        other => other.kind().to_string(),
    }
}

/// [`until_timed`] without the times.
pub async fn until(
    stream: &mut switchboard_client::EventStream,
    what: &str,
    pred: impl Fn(&AgentEvent) -> bool,
) -> Vec<EventEnvelope> {
    until_timed(stream, what, pred)
        .await
        .into_iter()
        .map(|(e, _)| e)
        .collect()
}

/// Reads the client stream until the given run ends; returns every envelope seen.
pub async fn until_run_ends(
    stream: &mut switchboard_client::EventStream,
    run_id: Uuid,
) -> Vec<EventEnvelope> {
    until(stream, "end of the run", |e| {
        e.is_terminal() && e.run_id() == run_id
    })
    .await
}

/// Subscribes from the current end of the session's log, then sends `text` as a message:
/// the stream and the run.
pub async fn send(c: &Client, id: Uuid, text: &str) -> (switchboard_client::EventStream, Uuid) {
    use switchboard_protocol::{MessageType, SendMessageRequest};
    let after = c.get_session(id).await.unwrap().session.last_event_id;
    let events = c.subscribe(id, Some(after));
    let run = c
        .send_message(id, &SendMessageRequest::user(text, MessageType::Message))
        .await
        .unwrap()
        .run_id;
    (events, run)
}

/// A decision on the pending call `id` of `run_id` (`content`: the reason or the result).
pub fn decide(
    run_id: Uuid,
    id: &str,
    action: switchboard_protocol::DecisionAction,
    content: Option<&str>,
) -> switchboard_protocol::ToolDecisionsRequest {
    let decisions = [(
        id.to_string(),
        switchboard_protocol::ToolDecision {
            action,
            content: content.map(str::to_string),
            by: None,
            cause: None,
        },
    )]
    .into_iter()
    .collect();
    switchboard_protocol::ToolDecisionsRequest { run_id, decisions }
}

pub fn kinds(events: &[EventEnvelope]) -> Vec<&'static str> {
    events.iter().map(|e| e.event.kind()).collect()
}

pub fn text_of(events: &[EventEnvelope]) -> String {
    events
        .iter()
        .filter_map(|e| match &e.event {
            AgentEvent::TextDelta { delta, .. } => Some(delta.as_str()),
            _ => None,
        })
        .collect()
}

/// A free TCP port on 127.0.0.1 (for tests that restart a server on the same address).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

// --- PostgreSQL for the tests that need it ------------------------------------------------

use sqlx::Connection;

const URL_VAR: &str = "SWITCHBOARD_TEST_POSTGRES_URL";

/// A fresh database on the test server; dropped at the end.
pub struct Db {
    pub admin: String,
    pub name: String,
    pub url: String,
}

impl Db {
    pub async fn create() -> Db {
        let admin = std::env::var(URL_VAR).unwrap_or_else(|_| {
            panic!("{URL_VAR} is not set: run the tests with scripts/test (it starts PostgreSQL)")
        });
        let name = format!("sb_cli_{}", uuid::Uuid::new_v4().simple());
        let mut conn = sqlx::PgConnection::connect(&admin).await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(&*format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await
            .unwrap();
        conn.close().await.ok();
        let base = admin.rsplit_once('/').unwrap().0;
        let url = format!("{base}/{name}");
        Db { admin, name, url }
    }

    pub async fn drop_now(&self) {
        let mut conn = sqlx::PgConnection::connect(&self.admin).await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(&*format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        )))
        .execute(&mut conn)
        .await
        .unwrap();
    }
}

/// The value of the sample `name{labels}` (exactly as rendered), if present.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

pub async fn scrape(url: &str) -> String {
    let r = reqwest::Client::new()
        .get(format!("{url}/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    r.text().await.unwrap()
}
