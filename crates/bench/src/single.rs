//! (a)–(d) One instance: append throughput with subscribers, replay, process start to
//! healthy, and memory with a slow subscriber.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tokio::io::AsyncBufReadExt;

use super::common::{delta, http, read_frames, server, session};

/// (a) Appends `n` events from `appenders` concurrent tasks while `subs` subscribers read.
/// Returns (append events/s, seconds until every subscriber had everything).
pub(super) async fn append_throughput(subs: usize, n: u64, appenders: u64) -> Result<(f64, f64)> {
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
pub(super) async fn replay(n: u64, runs: usize) -> Result<Vec<f64>> {
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
pub(super) async fn start_to_healthy(runs: usize) -> Result<Vec<f64>> {
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
    crate::common::status_field(&crate::common::proc_status(None), field).unwrap_or(0)
}

/// (d) 1,000 subscribers, one reading 64 KiB every 50 ms; returns peak RSS (MiB) after
/// connecting, after `n` events, and how long the slow one took to catch up.
pub(super) async fn slow_subscriber_memory(n: u64) -> Result<(f64, f64, f64, f64)> {
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
