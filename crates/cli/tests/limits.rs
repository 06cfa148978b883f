//! Abuse at the edges, against the real binary on real TCP: a client that trickles its
//! headers is cut off, oversized headers are refused, event streams are capped per token,
//! and writes are rate-limited per token when configured — each with a clear answer, and
//! the server goes on serving.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::{TOKEN, start};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn addr(url: &str) -> String {
    url.trim_start_matches("http://").to_string()
}

async fn health(url: &str) -> u16 {
    reqwest::get(format!("{url}/v1/health"))
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// Reads until the server closes the connection (or `limit` passes); what it sent.
async fn read_to_close(tcp: &mut TcpStream, limit: Duration) -> Option<String> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, tcp.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(String::from_utf8_lossy(&out).into_owned()),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_or_oversized_headers_are_cut_off_and_the_server_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(
        dir.path(),
        "http://127.0.0.1:9/v1",
        &[("SWITCHBOARD_HEADER_TIMEOUT_SECS", "1")],
    )
    .await;

    // Slowloris: a header line every 300 ms, never the blank line that ends them.
    let mut slow = TcpStream::connect(addr(&server.url)).await.unwrap();
    let started = Instant::now();
    slow.write_all(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let trickle = tokio::spawn(async move {
        for i in 0..20 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            if slow
                .write_all(format!("X-Slow-{i}: y\r\n").as_bytes())
                .await
                .is_err()
            {
                break;
            }
        }
        read_to_close(&mut slow, Duration::from_secs(5)).await
    });
    // Meanwhile others are served.
    assert_eq!(health(&server.url).await, 200);
    let closed = trickle.await.unwrap();
    assert!(
        closed.is_some(),
        "a client trickling headers was never cut off"
    );
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(4),
        "cut off after {took:?}, the header timeout is 1 s"
    );

    // 100 KB of headers: refused, and the connection closed.
    let mut big = TcpStream::connect(addr(&server.url)).await.unwrap();
    let filler = "a".repeat(100 * 1024);
    big.write_all(
        format!("GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Big: {filler}\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap_or(());
    let answer = read_to_close(&mut big, Duration::from_secs(5))
        .await
        .expect("closed");
    assert!(
        answer.starts_with("HTTP/1.1 431"),
        "oversized headers answered {:?}",
        answer.lines().next()
    );
    // Headers of a usual size still pass, and the server serves on.
    let ok = reqwest::Client::new()
        .get(format!("{}/v1/sessions", server.url))
        .bearer_auth(TOKEN)
        .header("x-medium", "b".repeat(4000))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    assert_eq!(health(&server.url).await, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_streams_are_capped_per_token_and_writes_rate_limited() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(
        dir.path(),
        "http://127.0.0.1:9/v1",
        &[
            ("SWITCHBOARD_MAX_STREAMS_PER_TOKEN", "2"),
            ("SWITCHBOARD_WRITE_REQUESTS_PER_MINUTE", "3"),
            // The test's only token is the server's own: counted too.
            ("SWITCHBOARD_WRITE_LIMIT_LOCAL_TOKEN", "true"),
            ("SWITCHBOARD_KEEPALIVE_SECS", "1"),
        ],
    )
    .await;
    let http = reqwest::Client::new();
    let post = |path: &str| {
        http.post(format!("{}{path}", server.url))
            .bearer_auth(TOKEN)
            .json(&json!({}))
            .send()
    };
    // Three writes a minute: the fourth is refused with when to retry; reads go on.
    let mut ids = Vec::new();
    for _ in 0..3 {
        let r = post("/v1/sessions").await.unwrap();
        assert_eq!(r.status(), 201);
        ids.push(
            r.json::<Value>().await.unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    let refused = post("/v1/sessions").await.unwrap();
    assert_eq!(refused.status(), 429);
    let wait: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=20).contains(&wait), "Retry-After {wait}");
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["code"], "rate_limited");
    let list = http
        .get(format!("{}/v1/sessions", server.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(list.status(), 200);
    assert_eq!(list.json::<Value>().await.unwrap()["total"], 3);

    // Two streams per token: the third is refused until one closes.
    let open = |id: String| {
        http.get(format!("{}/v1/sessions/{id}/events", server.url))
            .bearer_auth(TOKEN)
            .send()
    };
    let first = open(ids[0].clone()).await.unwrap();
    assert_eq!(first.status(), 200);
    let second = open(ids[1].clone()).await.unwrap();
    assert_eq!(second.status(), 200);
    let third = open(ids[2].clone()).await.unwrap();
    assert_eq!(third.status(), 429);
    assert!(third.headers().contains_key("retry-after"));
    assert_eq!(
        third.json::<Value>().await.unwrap()["code"],
        "too_many_streams"
    );
    // A token that is not the server's gets no stream and takes no slot.
    let stranger = http
        .get(format!("{}/v1/sessions/{}/events", server.url, ids[0]))
        .bearer_auth("not-the-token")
        .send()
        .await
        .unwrap();
    assert_eq!(stranger.status(), 401);
    drop(first);
    // The server notices the closed stream at its next keep-alive (1 s here).
    let deadline = Instant::now() + Duration::from_secs(10);
    let again = loop {
        let r = open(ids[2].clone()).await.unwrap();
        if r.status() == 200 {
            break r;
        }
        assert_eq!(r.status(), 429);
        assert!(
            Instant::now() < deadline,
            "the closed stream's slot never came back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    drop((second, again));
    assert_eq!(health(&server.url).await, 200);
}

/// One cap per token over every long answer: the session event streams, the relay's event
/// stream and streamed chat completions all count (the last two used to be free: a client
/// could hold any number of them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_stream_counts_against_the_token_s_cap() {
    let dir = tempfile::tempdir().unwrap();
    let bundles = dir.path().join("bundles");
    std::fs::create_dir_all(&bundles).unwrap();
    std::fs::write(
        bundles.join("dev.toml"),
        "format-version = 1\n[[members]]\nid = \"a\"\ndirectory = \"/tmp\"\n[members.session]\nbackend = \"builtin\"\n",
    )
    .unwrap();
    let llm = switchboard_test_support::mock_llm::MockLlm::start().await;
    llm.set_default(switchboard_test_support::mock_llm::MockReply::text_slow(
        &["slow", " answer"],
        3000,
    ));
    let server = start(
        dir.path(),
        &llm.base_url(),
        &[
            ("SWITCHBOARD_MAX_STREAMS_PER_TOKEN", "2"),
            ("SWITCHBOARD_KEEPALIVE_SECS", "1"),
            ("SWITCHBOARD_BUNDLES_DIR", bundles.to_str().unwrap()),
        ],
    )
    .await;
    let http = reqwest::Client::new();
    let relay_events = || {
        http.get(format!("{}/v1/relay/bundles/dev/events", server.url))
            .bearer_auth(TOKEN)
            .send()
    };
    let completion = || {
        http.post(format!("{}/v1/chat/completions", server.url))
            .bearer_auth(TOKEN)
            .json(&json!({
                "model": "switchboard/builtin",
                "stream": true,
                "messages": [{"role": "user", "content": "hi"}],
            }))
            .send()
    };
    let one = relay_events().await.unwrap();
    assert_eq!(one.status(), 200);
    let two = completion().await.unwrap();
    assert_eq!(two.status(), 200);
    // The third of any kind is refused, in each route's own error shape.
    let three = relay_events().await.unwrap();
    assert_eq!(three.status(), 429);
    assert_eq!(
        three.json::<Value>().await.unwrap()["code"],
        "too_many_streams"
    );
    let four = completion().await.unwrap();
    assert_eq!(four.status(), 429);
    assert_eq!(
        four.json::<Value>().await.unwrap()["error"]["code"],
        "too_many_streams"
    );
    drop((one, two));
    assert_eq!(health(&server.url).await, 200);
}

/// A body that stops coming ends its request (`[server] body_timeout_secs`): a client that
/// sends headers and a trickle of body cannot hold a connection and a handler forever.
/// And at most `[server] max_connections` connections are served at once: the next waits
/// until one closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_body_times_out_and_connections_are_capped() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(
        dir.path(),
        "http://127.0.0.1:9/v1",
        &[
            ("SWITCHBOARD_BODY_TIMEOUT_SECS", "1"),
            ("SWITCHBOARD_HEADER_TIMEOUT_SECS", "30"),
            ("SWITCHBOARD_MAX_CONNECTIONS", "16"),
        ],
    )
    .await;
    // Headers, ten bytes of a hundred promised, then nothing.
    let mut stalled = TcpStream::connect(addr(&server.url)).await.unwrap();
    let started = Instant::now();
    stalled
        .write_all(
            format!(
                "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\
                 Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"title\":"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let answer = read_to_close(&mut stalled, Duration::from_secs(6)).await;
    assert!(answer.is_some(), "the stalled body held the connection");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(health(&server.url).await, 200);

    // Sixteen idle connections (headers never sent) take every slot …
    let mut idle = Vec::new();
    for _ in 0..16 {
        idle.push(TcpStream::connect(addr(&server.url)).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let waiting = tokio::time::timeout(Duration::from_secs(2), health(&server.url)).await;
    assert!(waiting.is_err(), "a 17th connection was served at once");
    // … and one closing lets the next in.
    drop(idle.pop());
    let served = tokio::time::timeout(Duration::from_secs(5), health(&server.url)).await;
    assert_eq!(served.ok(), Some(200));
    drop(idle);
}
