//! What the measurements share: an engine serving the API on a loopback port, sessions,
//! an SSE reader, a `switchboard serve` process, and a NATS server.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use switchboard_engine::{Backends, Engine, EngineConfig};
use switchboard_protocol::{AgentEvent, CreateSessionRequest};
use switchboard_server::ServerConfig;
use switchboard_store::SqlStore;
use tokio::io::AsyncBufReadExt;
use uuid::Uuid;

use super::TOKEN;

/// The bench appends events directly; sessions only need some backend to exist.
struct NoBackend;

#[async_trait::async_trait]
impl switchboard_engine::Backend for NoBackend {
    async fn run(
        &self,
        _ctx: switchboard_engine::RunContext,
    ) -> Result<switchboard_engine::RunSummary, switchboard_engine::BackendError> {
        Err(switchboard_engine::BackendError::new(
            switchboard_protocol::RunErrorCode::NotConfigured,
            "the bench runs no agent",
            false,
        ))
    }
}

pub(super) struct Server {
    pub(super) engine: Engine,
    pub(super) url: String,
    _dir: tempfile::TempDir,
}

/// An engine on `store` (joined to a NATS bus as `(url, instance)` when given), serving
/// the API on a free loopback port.
pub(super) async fn serve_engine(
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
        switchboard_bus::NatsBus::start(url, instance, TOKEN.as_bytes(), engine.clone()).await?;
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

pub(super) async fn server() -> Result<Server> {
    let dir = tempfile::tempdir()?;
    let store = SqlStore::open_path(&dir.path().join("bench.db")).await?;
    let (engine, url) = serve_engine(Arc::new(store), None).await?;
    Ok(Server {
        engine,
        url,
        _dir: dir,
    })
}

pub(super) async fn session(engine: &Engine) -> Result<Uuid> {
    Ok(engine
        .create_session(CreateSessionRequest::default())
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .id)
}

pub(super) fn delta(i: u64) -> AgentEvent {
    AgentEvent::TextDelta {
        run_id: Uuid::nil(),
        delta: format!("token {i} "),
    }
}

/// Reads an SSE stream until `n` frames arrived; `pause` between chunks makes a slow reader.
pub(super) async fn read_frames(
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

/// `/proc/<pid>/status` of `pid`, or of this process; empty where there is none.
pub(super) fn proc_status(pid: Option<u32>) -> String {
    let path = pid.map_or("/proc/self/status".to_string(), |p| {
        format!("/proc/{p}/status")
    });
    std::fs::read_to_string(path).unwrap_or_default()
}

/// A field of a `/proc/<pid>/status` text (`kB` fields in KiB, `Threads:` a count): read as
/// the server's `/metrics` reads it.
pub(super) use switchboard_server::routes::metrics::status_kib as status_field;

/// A sample's value in a Prometheus text document (`name` with its labels, as written).
pub(super) fn prom_sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))?
        .trim()
        .parse()
        .ok()
}

/// A new session through `POST /v1/sessions` of the server at `url`: its id.
pub(super) async fn create_session(http: &reqwest::Client, url: &str) -> Result<String> {
    let s: serde_json::Value = http
        .post(format!("{url}/v1/sessions"))
        .bearer_auth(super::TOKEN)
        .json(&serde_json::json!({}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    Ok(s["id"].as_str().context("session id")?.to_string())
}

pub(super) fn http() -> Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .pool_max_idle_per_host(2000)
        .build()?)
}

/// A `switchboard serve` process of the failover bench; killed when dropped.
pub(super) struct Proc {
    pub(super) child: tokio::process::Child,
    pub(super) url: String,
}

/// A `switchboard serve` process (the release build next to this binary) on a free
/// loopback port with `envs` on top of a minimal environment; killed when dropped.
pub(super) async fn spawn_serve(envs: &[(&str, &str)]) -> Result<Proc> {
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

/// A NATS server of the bench's own on a free port; killed when dropped.
pub(super) struct BenchNats {
    pub(super) url: String,
    _child: tokio::process::Child,
}

pub(super) async fn bench_nats() -> Result<BenchNats> {
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

/// `GET url` with the bench's token, its body as JSON.
pub(super) async fn get_json(http: &reqwest::Client, url: &str) -> Result<serde_json::Value> {
    Ok(http
        .get(url)
        .bearer_auth(super::TOKEN)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?)
}

/// One SSE frame's `id:`, `event:` and `data:` (the last of each).
pub(super) fn sse_fields(frame: &str) -> Result<(Option<u64>, &str, &str)> {
    let (mut id, mut kind, mut data) = (None, "", "");
    for line in frame.lines() {
        if let Some(v) = line.strip_prefix("id: ") {
            id = Some(v.parse::<u64>()?);
        } else if let Some(v) = line.strip_prefix("event: ") {
            kind = v;
        } else if let Some(v) = line.strip_prefix("data: ") {
            data = v;
        }
    }
    Ok((id, kind, data))
}

/// What the chat benches run a server against: the mock model with `reply` as its default,
/// a fake Telegram whose `users` (ids from `first_user`) are let in, a data directory.
pub(super) struct ChatRig {
    pub(super) mock: switchboard_test_support::mock_llm::MockLlm,
    pub(super) telegram: Arc<switchboard_test_support::fake_telegram::FakeTelegram>,
    pub(super) users: Vec<i64>,
    pub(super) dir: tempfile::TempDir,
}

impl ChatRig {
    pub(super) async fn start(
        reply: switchboard_test_support::mock_llm::MockReply,
        first_user: i64,
        users: i64,
    ) -> Result<Self> {
        let mock = switchboard_test_support::mock_llm::MockLlm::start().await;
        mock.set_default(reply);
        Ok(Self {
            mock,
            telegram: Arc::new(
                switchboard_test_support::fake_telegram::FakeTelegram::start().await,
            ),
            users: (first_user..first_user + users).collect(),
            dir: tempfile::tempdir()?,
        })
    }

    /// The environment of a `switchboard serve` using the rig (no checkpoints); `extra` on top.
    pub(super) async fn serve(&self, extra: &[(&str, &str)]) -> Result<Proc> {
        use switchboard_test_support::fake_telegram::FakeTelegram;
        let data = self.dir.path().join("data");
        let allowed = self
            .users
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let (base, tg) = (self.mock.base_url(), self.telegram.base_url());
        let mut env = vec![
            ("SWITCHBOARD_DATA_DIR", data.to_str().context("path")?),
            (
                "SWITCHBOARD_DEFAULT_CWD",
                self.dir.path().to_str().context("path")?,
            ),
            ("SWITCHBOARD_OPENAI_BASE_URL", &base),
            ("SWITCHBOARD_MODEL", "bench"),
            ("SWITCHBOARD_CHECKPOINTS", "false"),
            ("SWITCHBOARD_TELEGRAM_TOKEN", FakeTelegram::TOKEN),
            ("SWITCHBOARD_TELEGRAM_BASE_URL", &tg),
            ("SWITCHBOARD_TELEGRAM_ALLOWED_CHATS", &allowed),
        ];
        env.extend_from_slice(extra);
        spawn_serve(&env).await
    }
}
