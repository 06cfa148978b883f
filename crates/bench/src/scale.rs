//! (e) Several instances on one PostgreSQL database joined by a NATS bus.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use switchboard_engine::Engine;
use switchboard_protocol::AgentEvent;
use uuid::Uuid;

use super::TOKEN;
use super::common::{bench_nats, delta, http, serve_engine, session};

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
pub(super) async fn scale(store_url: &str, rate: u64, secs: u64) -> Result<(f64, f64, f64)> {
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
