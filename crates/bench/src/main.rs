//! `switchboard-bench`: the speed targets of the foundation, measured over real TCP.
//!
//! (a) events appended durably per second with 1, 100 and 1,000 SSE subscribers reading;
//! (b) time to replay 100,000 stored events to a reconnecting client;
//! (c) time from process start to `/v1/health` answering (spawns the real binary);
//! (d) peak memory with 1,000 subscribers, one of them deliberately slow;
//! (e) several instances (`--only e`): three engines on one PostgreSQL database joined by a
//!     NATS bus: events appended per second across the three, and cross-instance delivery
//!     latency (append on one, SSE subscriber on another) at a steady 10,000 events/s.
//!     Needs `SWITCHBOARD_BENCH_STORE_URL=postgres://…/a_database_for_the_bench` and
//!     `nats-server` on the PATH (the bench starts its own).
//!
//! (f) failover (`--only f`): two real `switchboard serve` processes on that database and a
//!     NATS bus, default lease (10 s); the one executing a run and holding the gateway lease
//!     is SIGKILLed: time until the survivor has closed the run, and until it runs the
//!     chat channels. Same `SWITCHBOARD_BENCH_STORE_URL`.
//!
//! (g) streaming (`--only g`): a mock model streams K chunks of 20 characters into one
//!     session of a separate `switchboard serve` process while M SSE subscribers read it:
//!     the server's CPU per delivered chunk (from `/proc`), chunks/s on one stream, time to
//!     the first event and the first `TextDelta`, loss and duplicate checks; and resume of
//!     1,000 and 100,000 events from a log written before the server started.
//!
//! Run: `cargo run --release --bin switchboard-bench -- [--runs 5] [--only a|b|c|d|e|f|g|g-resume] [--grid KxM]`.
//! Results go to stdout as Markdown rows for `docs/benchmarks.md`.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod streaming;

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

/// An engine on `store` (joined to a NATS bus as `(url, instance)` when given), serving
/// the API on a free loopback port.
async fn serve_engine(
    store: Arc<dyn switchboard_store::Store>,
    bus: Option<(&str, &str)>,
) -> Result<(Engine, String)> {
    let engine = Engine::start(
        store,
        Backends {
            builtin: Some(Arc::new(NoBackend)),
            ..Backends::default()
        },
        EngineConfig {
            instance_id: bus.map_or_else(|| "bench".to_string(), |(_, i)| i.to_string()),
            exclusive: bus.is_none(),
            ..EngineConfig::default()
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    if let Some((url, instance)) = bus {
        switchboard_bus::NatsBus::start(url, instance, engine.clone()).await?;
    }
    let mut cfg = ServerConfig::new(TOKEN);
    cfg.keepalive = Duration::from_secs(3600);
    let router = switchboard_server::router(engine.clone(), cfg);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(switchboard_server::listener(listener), router).await;
    });
    Ok((engine, url))
}

async fn server() -> Result<Server> {
    let dir = tempfile::tempdir()?;
    let store = SqliteStore::open_path(&dir.path().join("bench.db")).await?;
    let (engine, url) = serve_engine(Arc::new(store), None).await?;
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

/// A NATS server of the bench's own on a free port; killed when dropped.
struct BenchNats {
    url: String,
    _child: tokio::process::Child,
}

async fn bench_nats() -> Result<BenchNats> {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        l.local_addr()?.port()
    };
    let bin = ["/usr/sbin/nats-server", "/usr/bin/nats-server"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .unwrap_or("nats-server");
    let child = tokio::process::Command::new(bin)
        .args(["-a", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("starting nats-server")?;
    let start = Instant::now();
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        if start.elapsed() > Duration::from_secs(10) {
            bail!("nats-server did not start");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(BenchNats {
        url: format!("nats://127.0.0.1:{port}"),
        _child: child,
    })
}

/// One instance: an engine on the shared PostgreSQL store, on the bus, serving HTTP.
async fn scale_instance(store_url: &str, bus: &str, name: &str) -> Result<(Engine, String)> {
    serve_engine(
        switchboard_store::open_url(store_url).await?,
        Some((bus, name)),
    )
    .await
}

/// (e) Three instances: (events/s appended across them, p50 ms, p99 ms cross-instance
/// delivery at `rate` events/s for `secs` seconds).
async fn scale(store_url: &str, rate: u64, secs: u64) -> Result<(f64, f64, f64)> {
    let nats = bench_nats().await?;
    let mut inst = Vec::new();
    for name in ["bench-a", "bench-b", "bench-c"] {
        inst.push(scale_instance(store_url, &nats.url, name).await?);
    }
    // Throughput: 64 appenders per instance, each instance on a session of its own.
    let per = 20_000u64;
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (engine, _) in &inst {
        let id = session(engine).await?;
        for a in 0..64u64 {
            let log = engine.log().clone();
            tasks.push(tokio::spawn(async move {
                let mut i = a;
                while i < per {
                    log.append(id, &delta(i))
                        .await
                        .map_err(|e| anyhow::anyhow!("{e}"))?;
                    i += 64;
                }
                anyhow::Ok(())
            }));
        }
    }
    for t in tasks {
        t.await??;
    }
    let throughput = (per * inst.len() as u64) as f64 / start.elapsed().as_secs_f64();

    // Latency: append on A at a steady rate, read the SSE stream on B; every event carries
    // the instant it was appended (one process, one clock).
    let (a, _) = &inst[0];
    let (_, b_url) = &inst[1];
    let id = session(a).await?;
    let base = Instant::now();
    let total = rate * secs;
    let reader = {
        let url = format!("{b_url}/v1/sessions/{id}/events");
        let http = http()?;
        tokio::spawn(async move {
            let mut resp = http.get(url).bearer_auth(TOKEN).send().await?;
            let mut buf = Vec::<u8>::new();
            let mut lat = Vec::with_capacity(total as usize);
            while (lat.len() as u64) < total {
                let Some(chunk) = resp.chunk().await? else {
                    bail!("stream ended");
                };
                let now = base.elapsed().as_nanos() as u64;
                buf.extend_from_slice(&chunk);
                while let Some(pos) = memchr::memmem::find(&buf, b"\n\n") {
                    let frame: Vec<u8> = buf.drain(..pos + 2).collect();
                    // `data: {... "delta":"t=<nanos> "...}`
                    if let Some(p) = memchr::memmem::find(&frame, b"t=") {
                        let digits: String = frame[p + 2..]
                            .iter()
                            .take_while(|c| c.is_ascii_digit())
                            .map(|&c| c as char)
                            .collect();
                        if let Ok(sent) = digits.parse::<u64>() {
                            lat.push(now.saturating_sub(sent) as f64 / 1e6);
                        }
                    }
                }
            }
            anyhow::Ok(lat)
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // 10 events every millisecond, each batch appended by its own task (as many runs would).
    let per_tick = (rate / 1000).max(1);
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut sent = 0u64;
    let mut pending = Vec::new();
    while sent < total {
        tick.tick().await;
        for _ in 0..per_tick {
            let log = a.log().clone();
            let stamp = base.elapsed().as_nanos() as u64;
            pending.push(tokio::spawn(async move {
                log.append(
                    id,
                    &AgentEvent::TextDelta {
                        run_id: Uuid::nil(),
                        delta: format!("t={stamp} "),
                    },
                )
                .await
            }));
            sent += 1;
        }
        if pending.len() > 4096 {
            for p in pending.drain(..) {
                p.await?.map_err(|e| anyhow::anyhow!("{e}"))?;
            }
        }
    }
    for p in pending {
        p.await?.map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let mut lat = tokio::time::timeout(Duration::from_secs(60), reader)
        .await
        .context("the subscriber on B did not get every event")???;
    lat.sort_by(|x, y| x.total_cmp(y));
    let pct = |q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)];
    Ok((throughput, pct(0.50), pct(0.99)))
}

/// A `switchboard serve` process of the failover bench; killed when dropped.
struct Proc {
    child: tokio::process::Child,
    url: String,
}

/// A `switchboard serve` process (the release build next to this binary) on a free
/// loopback port with `envs` on top of a minimal environment; killed when dropped.
async fn spawn_serve(envs: &[(&str, &str)]) -> Result<Proc> {
    let bin = std::env::current_exe()?.with_file_name("switchboard");
    let mut cmd = tokio::process::Command::new(&bin);
    cmd.arg("serve")
        .env("SWITCHBOARD_LISTEN", "127.0.0.1:0")
        .env("SWITCHBOARD_CONFIG", "/dev/null")
        .env("SWITCHBOARD_LOG", "warn")
        .env("SWITCHBOARD_TOKEN", TOKEN);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("{} (build it with `cargo build --release`)", bin.display()))?;
    let stdout = child.stdout.take().context("stdout")?;
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let url = loop {
        let line = lines.next_line().await?.context("server exited")?;
        if let Some(u) = line.strip_prefix("listening on ") {
            break u.to_string();
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok(Proc { child, url })
}

/// An instance of the failover bench: on the shared database and bus, with a model and a
/// Telegram API that accept connections and never answer (the run stays running, the
/// poller stays connected).
async fn spawn_instance(
    store_url: &str,
    bus: &str,
    name: &str,
    hang: &str,
    dir: &std::path::Path,
) -> Result<Proc> {
    let data = dir.join(name);
    spawn_serve(&[
        ("SWITCHBOARD_DATA_DIR", data.to_str().context("path")?),
        ("SWITCHBOARD_STORE_URL", store_url),
        ("SWITCHBOARD_BUS_URL", bus),
        ("SWITCHBOARD_INSTANCE_ID", name),
        ("SWITCHBOARD_OPENAI_BASE_URL", hang),
        ("SWITCHBOARD_MODEL", "bench"),
        ("SWITCHBOARD_TELEGRAM_TOKEN", "123:bench"),
        ("SWITCHBOARD_TELEGRAM_BASE_URL", hang),
    ])
    .await
}

async fn gateway_role(http: &reqwest::Client, p: &Proc) -> String {
    let status: Option<serde_json::Value> = match http
        .get(format!("{}/v1/gateway/status", p.url))
        .bearer_auth(TOKEN)
        .send()
        .await
    {
        Ok(r) => r.json().await.ok(),
        Err(_) => None,
    };
    status
        .and_then(|s| s["role"].as_str().map(str::to_string))
        .unwrap_or_default()
}

async fn wait_for(what: &str, limit: Duration, mut f: impl AsyncFnMut() -> bool) -> Result<()> {
    let start = Instant::now();
    while !f().await {
        if start.elapsed() > limit {
            bail!("{what}: not within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// (f) One failover: (seconds until the run is closed, seconds until the poller runs on
/// the survivor) after SIGKILL.
async fn failover_once(store_url: &str, bus: &str, hang: &str, i: usize) -> Result<(f64, f64)> {
    let dir = tempfile::tempdir()?;
    let http = http()?;
    let (na, nb) = (format!("fa-{i}"), format!("fb-{i}"));
    let mut a = spawn_instance(store_url, bus, &na, hang, dir.path()).await?;
    wait_for("A runs the gateway", Duration::from_secs(30), async || {
        gateway_role(&http, &a).await == "active"
    })
    .await?;
    let mut b = spawn_instance(store_url, bus, &nb, hang, dir.path()).await?;
    wait_for("B stands by", Duration::from_secs(10), async || {
        gateway_role(&http, &b).await == "standby"
    })
    .await?;
    let ca = switchboard_client::Client::new(a.url.clone(), Some(TOKEN.into()))?;
    let cb = switchboard_client::Client::new(b.url.clone(), Some(TOKEN.into()))?;
    let id = ca
        .create_session(&CreateSessionRequest::default())
        .await?
        .id;
    let run = ca
        .send_message(
            id,
            &switchboard_protocol::SendMessageRequest::user(
                "hang",
                switchboard_protocol::MessageType::Message,
            ),
        )
        .await?
        .run_id;
    wait_for("B sees the run", Duration::from_secs(10), async || {
        cb.get_session(id)
            .await
            .is_ok_and(|s| s.session.active_run_id == Some(run))
    })
    .await?;
    let killed = Instant::now();
    a.child.kill().await?;
    let (mut run_s, mut poll_s) = (None, None);
    while run_s.is_none() || poll_s.is_none() {
        if killed.elapsed() > Duration::from_secs(60) {
            bail!("no failover within 60 s");
        }
        if run_s.is_none()
            && cb
                .get_session(id)
                .await
                .is_ok_and(|s| s.session.active_run_id.is_none())
        {
            run_s = Some(killed.elapsed().as_secs_f64());
        }
        if poll_s.is_none() && gateway_role(&http, &b).await == "active" {
            poll_s = Some(killed.elapsed().as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A graceful stop gives the gateway lease back for the next round.
    if let Some(pid) = b.child.id() {
        let _ = tokio::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .await;
    }
    let _ = tokio::time::timeout(Duration::from_secs(15), b.child.wait()).await;
    Ok((run_s.unwrap_or(f64::NAN), poll_s.unwrap_or(f64::NAN)))
}

async fn failover(store_url: &str, runs: usize) -> Result<(Vec<f64>, Vec<f64>)> {
    let nats = bench_nats().await?;
    let hang = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let hang_url = format!("http://{}", hang.local_addr()?);
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = hang.accept().await {
            held.push(sock);
        }
    });
    let (mut r, mut p) = (Vec::new(), Vec::new());
    for i in 0..runs {
        let (a, b) = failover_once(store_url, &nats.url, &hang_url, i).await?;
        r.push(a);
        p.push(b);
    }
    Ok((r, p))
}

/// One table row: `what`, the median and every run, with `d` decimals.
fn row(what: &str, v: &[f64], d: usize) {
    println!("| {what} | {:.d$} | {} |", median(v.to_vec()), fmt(v, d));
}

/// Every run's figure with `d` decimals, for the "all runs" column.
fn fmt(v: &[f64], d: usize) -> String {
    v.iter()
        .map(|x| format!("{x:.d$}"))
        .collect::<Vec<_>>()
        .join(", ")
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
            row(
                &format!(
                    "(a) append {n} events ({appenders} appenders), {subs} subscribers: events/s"
                ),
                &rates,
                0,
            );
            row(
                &format!(
                    "(a) … all {subs} subscribers ({appenders} appenders) have every event after (s)"
                ),
                &catch,
                3,
            );
        }
    }
    if want("b") {
        let t = replay(100_000, runs).await?;
        row(
            "(b) replay 100,000 events to a reconnecting client (s)",
            &t,
            3,
        );
    }
    if want("c") {
        let t: Vec<f64> = start_to_healthy(runs * 2)
            .await?
            .iter()
            .map(|s| s * 1000.0)
            .collect();
        row("(c) process start to /v1/health 200 (ms)", &t, 1);
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
    if want("g") || only.as_deref() == Some("g-resume") {
        if want("g") {
            // `--grid 10000x1`: one (K, M) case only.
            let grid = args
                .iter()
                .position(|a| a == "--grid")
                .and_then(|i| args.get(i + 1))
                .and_then(|v| v.split_once('x'))
                .and_then(|(k, m)| Some((k.parse().ok()?, m.parse().ok()?)));
            streaming::streaming(runs, grid).await?;
            if grid.is_some() {
                return Ok(());
            }
        }
        let (tail, all) = streaming::resume(100_000, runs.max(5)).await?;
        row(
            "(g) resume the last 1,000 of 100,000 events, separate server process (ms)",
            &tail,
            2,
        );
        row(
            "(g) resume all 100,000 events, separate server process (s)",
            &all,
            3,
        );
    }
    if only.as_deref() == Some("f") {
        let url = std::env::var("SWITCHBOARD_BENCH_STORE_URL").context(
            "(f) needs SWITCHBOARD_BENCH_STORE_URL=postgres://…/a_database_for_the_bench",
        )?;
        let (run, poll) = failover(&url, runs).await?;
        row(
            "(f) SIGKILL of the instance running a run: run closed on the survivor after (s)",
            &run,
            2,
        );
        row(
            "(f) … and of the instance polling Telegram: survivor polling after (s)",
            &poll,
            2,
        );
    }
    if want("e") && only.as_deref() == Some("e") {
        let url = std::env::var("SWITCHBOARD_BENCH_STORE_URL").context(
            "(e) needs SWITCHBOARD_BENCH_STORE_URL=postgres://…/a_database_for_the_bench",
        )?;
        let (mut tput, mut p50, mut p99) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..runs {
            let (t, a, b) = scale(&url, 10_000, 5).await?;
            tput.push(t);
            p50.push(a);
            p99.push(b);
        }
        row(
            "(e) 3 instances (PostgreSQL + NATS), 64 appenders each: events/s in all",
            &tput,
            0,
        );
        row(
            "(e) append on A, SSE on B at 10,000 events/s: p50 delivery (ms)",
            &p50,
            2,
        );
        row("(e) … p99 delivery (ms)", &p99, 2);
    }
    Ok(())
}
