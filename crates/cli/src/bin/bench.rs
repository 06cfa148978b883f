//! `switchboard-bench`: the speed targets of the foundation, measured over real TCP.
//!
//! (a) events appended durably per second with 1, 100 and 1,000 SSE subscribers reading;
//! (b) time to replay 100,000 stored events to a reconnecting client;
//! (c) time from process start to `/v1/health` answering (spawns the real binary);
//! (d) peak memory with 1,000 subscribers, one of them deliberately slow.
//!
//! Run: `cargo run --release --bin switchboard-bench -- [--runs 5]`. Results go to stdout
//! as Markdown rows for `docs/benchmarks.md`.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use switchboard_engine::{Backends, Engine, EngineConfig};
use switchboard_protocol::{AgentEvent, CreateSessionRequest};
use switchboard_server::ServerConfig;
use switchboard_store::SqliteStore;
use tokio::io::AsyncBufReadExt;
use uuid::Uuid;

const TOKEN: &str = "bench-token";

/// The bench appends events directly; sessions only need some backend to exist.
struct NoBackend;

#[async_trait::async_trait]
impl switchboard_engine::Backend for NoBackend {
    async fn run(
        &self,
        _ctx: switchboard_engine::RunContext,
    ) -> Result<switchboard_engine::RunSummary, switchboard_engine::BackendError> {
        Err(switchboard_engine::BackendError::new(
            "the bench runs no agent",
            false,
        ))
    }
}

struct Server {
    engine: Engine,
    url: String,
    _dir: tempfile::TempDir,
}

async fn server() -> Result<Server> {
    let dir = tempfile::tempdir()?;
    let store = SqliteStore::open_path(&dir.path().join("bench.db")).await?;
    let engine = Engine::start(
        Arc::new(store),
        Backends {
            builtin: Some(Arc::new(NoBackend)),
            ..Backends::default()
        },
        EngineConfig::default(),
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut cfg = ServerConfig::new(TOKEN);
    cfg.keepalive = Duration::from_secs(3600);
    let router = switchboard_server::router(engine.clone(), cfg);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    Ok(Server {
        engine,
        url,
        _dir: dir,
    })
}

async fn session(engine: &Engine) -> Result<Uuid> {
    Ok(engine
        .create_session(CreateSessionRequest::default())
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .id)
}

fn delta(i: u64) -> AgentEvent {
    AgentEvent::TextDelta {
        run_id: Uuid::nil(),
        delta: format!("token {i} "),
    }
}

/// Reads an SSE stream until `n` frames arrived; `pause` between chunks makes a slow reader.
async fn read_frames(
    http: reqwest::Client,
    url: String,
    n: u64,
    pause: Option<Duration>,
    counter: Arc<AtomicU64>,
) -> Result<()> {
    let mut resp = http.get(url).bearer_auth(TOKEN).send().await?;
    if !resp.status().is_success() {
        bail!("subscribe: HTTP {}", resp.status());
    }
    let mut frames = 0u64;
    // Frames end with "\n\n"; a SIMD search keeps the bench's own reading cheap, since it
    // shares the machine's cores with the server it measures.
    let finder = memchr::memmem::Finder::new(b"\n\n");
    let mut prev_newline = false;
    while frames < n {
        let Some(chunk) = resp.chunk().await? else {
            bail!("stream ended after {frames} frames")
        };
        if chunk.is_empty() {
            continue;
        }
        if prev_newline && chunk[0] == b'\n' {
            frames += 1;
        }
        frames += finder.find_iter(&chunk).count() as u64;
        prev_newline = chunk[chunk.len() - 1] == b'\n';
        if let Some(p) = pause {
            tokio::time::sleep(p).await;
        }
    }
    counter.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

fn http() -> Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .pool_max_idle_per_host(2000)
        .build()?)
}

/// (a) Appends `n` events from `appenders` concurrent tasks while `subs` subscribers read.
/// Returns (append events/s, seconds until every subscriber had everything).
async fn append_throughput(subs: usize, n: u64, appenders: u64) -> Result<(f64, f64)> {
    let s = server().await?;
    let id = session(&s.engine).await?;
    let http = http()?;
    let done = Arc::new(AtomicU64::new(0));
    let url = format!("{}/v1/sessions/{id}/events", s.url);
    let mut readers = Vec::new();
    for _ in 0..subs {
        readers.push(tokio::spawn(read_frames(
            http.clone(),
            url.clone(),
            n,
            None,
            done.clone(),
        )));
    }
    tokio::time::sleep(Duration::from_millis(200 + subs as u64)).await;
    let start = Instant::now();
    let mut tasks = Vec::new();
    for a in 0..appenders {
        let log = s.engine.log().clone();
        tasks.push(tokio::spawn(async move {
            let mut i = a;
            while i < n {
                log.append(id, &delta(i)).await?;
                i += appenders;
            }
            Ok::<_, switchboard_engine::EngineError>(())
        }));
    }
    for t in tasks {
        t.await?.map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let appended = start.elapsed().as_secs_f64();
    for r in readers {
        r.await??;
    }
    let caught_up = start.elapsed().as_secs_f64();
    Ok((n as f64 / appended, caught_up))
}

/// (b) Stores 100,000 events, then times a client reading them all from `after=0`.
async fn replay(n: u64, runs: usize) -> Result<Vec<f64>> {
    let s = server().await?;
    let id = session(&s.engine).await?;
    let batch: Vec<_> = (0..1000).map(delta).collect();
    for _ in 0..n / 1000 {
        s.engine
            .log()
            .append_many(id, &batch)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let http = http()?;
    let mut times = Vec::new();
    for _ in 0..runs {
        let start = Instant::now();
        read_frames(
            http.clone(),
            format!("{}/v1/sessions/{id}/events?after=0", s.url),
            n,
            None,
            Arc::default(),
        )
        .await?;
        times.push(start.elapsed().as_secs_f64());
    }
    Ok(times)
}

/// (c) Spawns `switchboard serve` and times it until `/v1/health` answers 200.
async fn start_to_healthy(runs: usize) -> Result<Vec<f64>> {
    let bin = std::env::current_exe()?.with_file_name("switchboard");
    if !bin.exists() {
        bail!(
            "{} not found; build it with `cargo build --release`",
            bin.display()
        );
    }
    let http = http()?;
    let mut times = Vec::new();
    for _ in 0..runs {
        let dir = tempfile::tempdir()?;
        let start = Instant::now();
        let mut child = tokio::process::Command::new(&bin)
            .arg("serve")
            .env("SWITCHBOARD_LISTEN", "127.0.0.1:0")
            .env("SWITCHBOARD_DATA_DIR", dir.path())
            .env("SWITCHBOARD_CONFIG", "/dev/null")
            .env("SWITCHBOARD_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let stdout = child.stdout.take().context("stdout")?;
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let url = loop {
            let line = lines.next_line().await?.context("server exited")?;
            if let Some(u) = line.strip_prefix("listening on ") {
                break u.to_string();
            }
        };
        loop {
            if let Ok(r) = http.get(format!("{url}/v1/health")).send().await
                && r.status().is_success()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        times.push(start.elapsed().as_secs_f64());
        child.kill().await?;
    }
    Ok(times)
}

fn vm_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with(field)).map(str::to_string))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// (d) 1,000 subscribers, one reading 64 KiB every 50 ms; returns peak RSS (MiB) after
/// connecting, after `n` events, and how long the slow one took to catch up.
async fn slow_subscriber_memory(n: u64) -> Result<(f64, f64, f64, f64)> {
    let s = server().await?;
    let id = session(&s.engine).await?;
    let http = http()?;
    let url = format!("{}/v1/sessions/{id}/events", s.url);
    let done = Arc::new(AtomicU64::new(0));
    let slow = tokio::spawn(read_frames(
        http.clone(),
        url.clone(),
        n,
        Some(Duration::from_millis(50)),
        done.clone(),
    ));
    let mut fast = Vec::new();
    for _ in 0..999 {
        fast.push(tokio::spawn(read_frames(
            http.clone(),
            url.clone(),
            n,
            None,
            done.clone(),
        )));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let connected = vm_kib("VmRSS:") as f64 / 1024.0;
    let start = Instant::now();
    let batch: Vec<_> = (0..100).map(delta).collect();
    for _ in 0..n / 100 {
        s.engine
            .log()
            .append_many(id, &batch)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    for f in fast {
        f.await??;
    }
    let after_fast = vm_kib("VmHWM:") as f64 / 1024.0;
    slow.await??;
    let slow_done = start.elapsed().as_secs_f64();
    Ok((
        connected,
        after_fast,
        vm_kib("VmHWM:") as f64 / 1024.0,
        slow_done,
    ))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let runs = args
        .iter()
        .position(|a| a == "--runs")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(5usize);
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let want = |k: &str| only.as_deref().is_none_or(|o| o == k);
    println!("| measurement | median of {runs} | all runs |\n|---|---|---|");
    if want("a") {
        // (subscribers, events, concurrent appenders). Appenders each await their commit, so
        // their number bounds a group commit; 256 is what a busy server with many runs
        // streaming at once looks like, 64 a quieter one.
        for (subs, n, appenders) in [
            (1usize, 100_000u64, 64u64),
            (100, 50_000, 64),
            (100, 50_000, 256),
            (1000, 10_000, 64),
        ] {
            let mut rates = Vec::new();
            let mut catch = Vec::new();
            for _ in 0..runs {
                let (rate, caught) = append_throughput(subs, n, appenders).await?;
                rates.push(rate);
                catch.push(caught);
            }
            let all: Vec<String> = rates.iter().map(|r| format!("{r:.0}")).collect();
            println!(
                "| (a) append {n} events ({appenders} appenders), {subs} subscribers: events/s | {:.0} | {} |",
                median(rates.clone()),
                all.join(", ")
            );
            println!(
                "| (a) … all {subs} subscribers ({appenders} appenders) have every event after (s) | {:.3} | {} |",
                median(catch.clone()),
                catch
                    .iter()
                    .map(|c| format!("{c:.3}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    if want("b") {
        let t = replay(100_000, runs).await?;
        println!(
            "| (b) replay 100,000 events to a reconnecting client (s) | {:.3} | {} |",
            median(t.clone()),
            t.iter()
                .map(|c| format!("{c:.3}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if want("c") {
        let t = start_to_healthy(runs * 2).await?;
        println!(
            "| (c) process start to /v1/health 200 (ms) | {:.1} | {} |",
            median(t.clone()) * 1000.0,
            t.iter()
                .map(|c| format!("{:.1}", c * 1000.0))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if want("d") {
        let (connected, after_fast, peak, slow) = slow_subscriber_memory(20_000).await?;
        println!("| (d) RSS with 1,000 subscribers connected (MiB) | {connected:.1} | |");
        println!(
            "| (d) peak RSS after 20,000 events, fast readers done (MiB) | {after_fast:.1} | |"
        );
        println!("| (d) peak RSS once the slow reader caught up (MiB) | {peak:.1} | |");
        println!("| (d) slow reader (64 KiB chunk / 50 ms) caught up after (s) | {slow:.1} | |");
    }
    Ok(())
}
