#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! Several instances, one service: three `switchboard serve` processes sharing one
//! PostgreSQL database and one NATS server (a real `nats-server`, started by the test).

mod common;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use futures::StreamExt;
use switchboard_protocol::{
    AgentEvent, CreateSessionRequest, EventEnvelope, MessageType, SendMessageRequest,
};
use switchboard_test_support::mock_llm::{MockLlm, MockReply};
use switchboard_test_support::process::ServerProcess;

fn nats_bin() -> PathBuf {
    for p in ["/usr/sbin/nats-server", "/usr/bin/nats-server"] {
        if std::path::Path::new(p).exists() {
            return PathBuf::from(p);
        }
    }
    panic!("nats-server is missing (scripts/test installs the Debian package)");
}

/// A `nats-server` on a fixed loopback port, restartable; killed on drop.
struct Nats {
    port: u16,
    child: Option<tokio::process::Child>,
}

impl Nats {
    async fn start() -> Nats {
        let mut n = Nats {
            port: free_port(),
            child: None,
        };
        n.up().await;
        n
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    async fn up(&mut self) {
        let child = tokio::process::Command::new(nats_bin())
            .args(["-a", "127.0.0.1", "-p", &self.port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let start = Instant::now();
        while tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .is_err()
        {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "nats-server did not start"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn down(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill().await;
            let _ = c.wait().await;
        }
    }
}

async fn instance(
    dir: &std::path::Path,
    name: &str,
    llm: &MockLlm,
    db: &Db,
    nats: &Nats,
) -> ServerProcess {
    let url = nats.url();
    start(
        &dir.join(name),
        &llm.base_url(),
        &[
            ("SWITCHBOARD_STORE_URL", db.url.as_str()),
            ("SWITCHBOARD_BUS_URL", url.as_str()),
            ("SWITCHBOARD_INSTANCE_ID", name),
        ],
    )
    .await
}

async fn health(server: &ServerProcess) -> serde_json::Value {
    reqwest::get(format!("{}/v1/health", server.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Reads `stream` until the run ends; returns the events and when each arrived.
async fn until_end(
    stream: &mut switchboard_client::EventStream,
    run: uuid::Uuid,
) -> Vec<(EventEnvelope, Instant)> {
    let mut out = Vec::new();
    loop {
        let env = tokio::time::timeout(Duration::from_secs(30), stream.next())
            .await
            .expect("nothing for 30 s")
            .expect("stream ended")
            .unwrap();
        let end = env.event.is_terminal() && env.event.run_id() == run;
        out.push((env, Instant::now()));
        if end {
            return out;
        }
    }
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
    let chunks: Vec<String> = (0..20).map(|i| format!("c{i} ")).collect();
    let chunks: Vec<&str> = chunks.iter().map(String::as_str).collect();
    llm.push(MockReply::text_slow(&chunks, 20));
    let a = instance(dir.path(), "a", &llm, &db, &nats).await;
    let b = instance(dir.path(), "b", &llm, &db, &nats).await;
    let c = instance(dir.path(), "c", &llm, &db, &nats).await;
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
    let run = client(&c)
        .send_message(
            session.id,
            &SendMessageRequest::user("hello from C", MessageType::Message),
        )
        .await
        .unwrap()
        .run_id;
    let events = until_end(&mut on_b, run).await;
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
    let run = client(&c)
        .send_message(
            session.id,
            &SendMessageRequest::user("again", MessageType::Message),
        )
        .await
        .unwrap()
        .run_id;
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
    let rest = until_end(&mut on_b, run).await;
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
