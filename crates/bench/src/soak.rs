//! (s) Soak (`--only soak [--minutes 10]`): one real `switchboard serve` (SQLite) for a
//! long while under everything at once — 100 sessions streaming replies back to back
//! (a mock model: 40 chunks, 25 ms apart), 10 SSE readers on each (1,000), and 50 chat
//! messages a second through a fake Telegram from 50 users.
//!
//! Checked, as the torture test's invariants: every reader sees its session's events with
//! contiguous ids and nothing twice, up to the session's last one; every message the API
//! accepted has one run start and one end in the stream; every chat message is confirmed to
//! Telegram and counted in by the gateway. Measured: the server's RSS (after warm-up, its
//! peak, at the end), delivery latency from the event's commit (its `timestamp`) to a
//! reader (p50, p99; every 16th event of each reader), runs and events delivered.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use switchboard_test_support::mock_llm::MockReply;
use tokio::sync::watch;

use crate::common::{ChatRig, proc_status, prom_sample, sse_fields, status_field};
use crate::{TOKEN, http};

/// What one soak measured.
pub struct SoakFigures {
    pub runs: u64,
    pub events_delivered: u64,
    pub chat_sent: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub rss_start_mib: f64,
    pub rss_peak_mib: f64,
    pub rss_end_mib: f64,
}

/// What a reader saw: contiguity is checked as it reads (a gap or repeat fails the soak).
#[derive(Default)]
struct ReaderState {
    last_id: AtomicU64,
    started: AtomicU64,
    ended: AtomicU64,
}

fn rss_mib(pid: u32) -> f64 {
    status_field(&proc_status(Some(pid)), "VmRSS:").map_or(0.0, |kib| kib as f64 / 1024.0)
}

/// The server's memory by kind and its thread count, for the per-minute report: where RSS
/// grows (anonymous memory: the heap; file: mapped database pages; threads: their stacks).
fn mem_breakdown(pid: u32) -> String {
    let status = proc_status(Some(pid));
    let field = |name: &str| status_field(&status, name);
    let mib =
        |name: &str| field(name).map_or("?".to_string(), |k| format!("{:.1}", k as f64 / 1024.0));
    format!(
        "anon {} MiB, file {} MiB, shmem {} MiB, {} threads",
        mib("RssAnon:"),
        mib("RssFile:"),
        mib("RssShmem:"),
        field("Threads:").map_or("?".to_string(), |t| t.to_string())
    )
}

/// The server's live async tasks and open descriptors, from its `/metrics`: a count that
/// only grows is spawned work that never ends.
async fn runtime_gauges(http: &reqwest::Client, url: &str) -> String {
    let text = match http
        .get(format!("{url}/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .await
    {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    };
    let gauge = |name| prom_sample(&text, name).map_or("?".to_string(), |v| format!("{v:.0}"));
    let mib = |name| {
        prom_sample(&text, name).map_or("?".to_string(), |v| format!("{:.1}", v / 1048576.0))
    };
    format!(
        "{} tasks, {} fds, heap allocated {} / active {} / resident {} / metadata {} / dirty {} / muzzy {} MiB",
        gauge("switchboard_runtime_alive_tasks"),
        gauge("process_open_fds"),
        mib("switchboard_heap_allocated_bytes"),
        mib("switchboard_heap_active_bytes"),
        mib("switchboard_heap_resident_bytes"),
        mib("switchboard_heap_metadata_bytes"),
        mib("switchboard_heap_dirty_bytes"),
        mib("switchboard_heap_muzzy_bytes")
    )
}

/// Milliseconds from the frame's `"timestamp":"…"` (the commit, server clock) to now.
fn latency_ms(data: &str) -> Option<f64> {
    let at = data.find("\"timestamp\":\"")? + 13;
    let ts = data.get(at..at + data[at..].find('"')?)?;
    let t = chrono::DateTime::parse_from_rfc3339(ts).ok()?;
    let ms = (chrono::Utc::now() - t.with_timezone(&chrono::Utc)).num_microseconds()?;
    Some(ms as f64 / 1000.0)
}

/// Reads one session's stream until `stop` and the session's last id is reached; every
/// 16th event's latency goes to `lat`. Errors on a gap or a repeat.
async fn read(
    resp: reqwest::Response,
    state: Arc<ReaderState>,
    ended_tx: Option<watch::Sender<u64>>,
    lat: Arc<parking_lot::Mutex<Vec<f64>>>,
) -> Result<()> {
    let mut resp = resp;
    let finder = memchr::memmem::Finder::new(b"\n\n");
    let mut buf: Vec<u8> = Vec::new();
    let mut n = 0u64;
    let mut mine = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        buf.extend_from_slice(&chunk);
        let mut start = 0;
        while let Some(end) = finder.find(&buf[start..]) {
            let frame = std::str::from_utf8(&buf[start..start + end])?;
            start += end + 2;
            let (id, kind, data) = sse_fields(frame)?;
            let Some(id) = id else { continue };
            let last = state.last_id.load(Ordering::Relaxed);
            if id != last + 1 {
                bail!("id {id} after {last}: an event was lost or repeated");
            }
            state.last_id.store(id, Ordering::Relaxed);
            n += 1;
            if n.is_multiple_of(16)
                && let Some(ms) = latency_ms(data)
            {
                mine.push(ms);
            }
            match kind {
                "run_started" => {
                    state.started.fetch_add(1, Ordering::Relaxed);
                }
                "run_completed" | "run_error" => {
                    let e = state.ended.fetch_add(1, Ordering::Relaxed) + 1;
                    if let Some(tx) = &ended_tx {
                        let _ = tx.send(e);
                    }
                }
                _ => {}
            }
        }
        buf.drain(..start);
        if mine.len() >= 8 {
            lat.lock().append(&mut mine);
        }
    }
    lat.lock().append(&mut mine);
    Ok(())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

pub(super) async fn soak(
    duration: Duration,
    sessions: usize,
    readers_per: usize,
    chats: i64,
    chat_per_s: u32,
    history_chars: Option<u64>,
) -> Result<SoakFigures> {
    let rig = ChatRig::start(
        MockReply::Text {
            chunks: (0..40).map(|i| format!("token{i:02} ")).collect(),
            delay_ms: 25,
        },
        1001,
        chats,
    )
    .await?;
    let (telegram, users) = (rig.telegram.clone(), rig.users.clone());
    let history = history_chars.map(|n| n.to_string());
    let mut env = vec![
        // The readers plus the gateway's own followers share the one token.
        ("SWITCHBOARD_MAX_STREAMS_PER_TOKEN", "4096"),
        ("SWITCHBOARD_TELEGRAM_POLL_TIMEOUT_SECS", "1"),
    ];
    if let Some(h) = &history {
        env.push(("SWITCHBOARD_HISTORY_MAX_CHARS", h));
    }
    let proc = rig.serve(&env).await?;
    let pid = proc.child.id().context("server pid")?;
    let url = proc.url.clone();
    let http = http()?;
    let lat: Arc<parking_lot::Mutex<Vec<f64>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));

    // Sessions, each with its readers (reader 0 tells its driver when a run ended).
    let mut ids = Vec::with_capacity(sessions);
    let mut readers = Vec::new();
    let mut states = Vec::new();
    let mut ended_rx = Vec::new();
    for _ in 0..sessions {
        let id = crate::common::create_session(&http, &url).await?;
        let (tx, rx) = watch::channel(0u64);
        let mut tx = Some(tx);
        let mut session_states = Vec::new();
        for _ in 0..readers_per {
            let resp = http
                .get(format!("{url}/v1/sessions/{id}/events"))
                .bearer_auth(TOKEN)
                .send()
                .await?
                .error_for_status()?;
            let state = Arc::new(ReaderState::default());
            session_states.push(state.clone());
            readers.push(tokio::spawn(read(resp, state, tx.take(), lat.clone())));
        }
        states.push(session_states);
        ended_rx.push(rx);
        ids.push(id);
    }

    // RSS every second.
    let samples: Arc<parking_lot::Mutex<Vec<(Instant, f64)>>> = Arc::default();
    let sampler = {
        let (samples, stop) = (samples.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                samples.lock().push((Instant::now(), rss_mib(pid)));
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    };
    let started = Instant::now();
    let accepted = Arc::new(AtomicU64::new(0));
    // Drivers: a message, wait for its run's end (as reader 0 saw it), the next.
    let mut drivers = Vec::new();
    for (id, mut rx) in ids.iter().cloned().zip(ended_rx) {
        let (http, url, stop, accepted) =
            (http.clone(), url.clone(), stop.clone(), accepted.clone());
        drivers.push(tokio::spawn(async move {
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let r = http
                    .post(format!("{url}/v1/sessions/{id}/messages"))
                    .bearer_auth(TOKEN)
                    .json(&serde_json::json!({"message": {"role": "user", "content": format!("go {sent}")}, "type": "message"}))
                    .send()
                    .await?;
                if !r.status().is_success() {
                    bail!("message refused: {} {}", r.status(), r.text().await?);
                }
                sent += 1;
                accepted.fetch_add(1, Ordering::Relaxed);
                rx.wait_for(|e| *e >= sent).await?;
            }
            Ok::<u64, anyhow::Error>(sent)
        }));
    }
    // Chat: `chat_per_s` messages a second, round robin over the users.
    let chat = {
        let (telegram, stop, users) = (telegram.clone(), stop.clone(), users.clone());
        tokio::spawn(async move {
            let every = Duration::from_secs_f64(1.0 / f64::from(chat_per_s.max(1)));
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let user = users[(n % users.len() as u64) as usize];
                telegram.dm(user, "soak", &format!("chat message {n}"));
                n += 1;
            }
            n
        })
    };
    let mut last_report = Instant::now();
    while started.elapsed() < duration {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if last_report.elapsed() >= Duration::from_secs(60) {
            last_report = Instant::now();
            let rss = samples.lock().last().map_or(0.0, |s| s.1);
            eprintln!(
                "soak: {:.0} s, {} runs accepted, RSS {rss:.1} MiB ({}, {})",
                started.elapsed().as_secs_f64(),
                accepted.load(Ordering::Relaxed),
                mem_breakdown(pid),
                runtime_gauges(&http, &url).await
            );
        }
        if readers.iter().any(|r| r.is_finished()) {
            bail!("a reader stopped early (an error or the server closed its stream)");
        }
    }
    stop.store(true, Ordering::SeqCst);
    let mut runs = 0;
    for d in drivers {
        runs += d.await??;
    }
    let chat_sent = chat.await?;
    sampler.await?;
    // Drain: every chat message confirmed and counted in; every reader at its session's end.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let metrics = http
            .get(format!("{url}/metrics"))
            .bearer_auth(TOKEN)
            .send()
            .await?
            .text()
            .await?;
        let counted = metrics
            .lines()
            .find_map(|l| {
                l.strip_prefix("switchboard_gateway_messages_in_total{channel=\"telegram\"} ")
            })
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0) as u64;
        if telegram.pending_updates() == 0 && counted == chat_sent {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "chat: {chat_sent} sent, {counted} counted in, {} unconfirmed",
                telegram.pending_updates()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mut delivered = 0u64;
    for (id, session_states) in ids.iter().zip(&states) {
        let s: serde_json::Value = http
            .get(format!("{url}/v1/sessions/{id}"))
            .bearer_auth(TOKEN)
            .send()
            .await?
            .json()
            .await?;
        let last = s["session"]["last_event_id"]
            .as_u64()
            .context("last_event_id")?;
        for st in session_states {
            while st.last_id.load(Ordering::Relaxed) < last {
                if Instant::now() > deadline {
                    bail!(
                        "a reader of {id} stopped at {} of {last}",
                        st.last_id.load(Ordering::Relaxed)
                    );
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let (started, ended) = (
                st.started.load(Ordering::Relaxed),
                st.ended.load(Ordering::Relaxed),
            );
            if started != ended {
                bail!("session {id}: {started} runs started, {ended} ended");
            }
            delivered += last;
        }
        let started_here = session_states[0].started.load(Ordering::Relaxed);
        if started_here == 0 {
            bail!("session {id} ran nothing");
        }
    }
    let total_started: u64 = states
        .iter()
        .map(|s| s[0].started.load(Ordering::Relaxed))
        .sum();
    if total_started != runs {
        bail!("{runs} messages accepted, {total_started} runs started");
    }
    let samples = samples.lock().clone();
    let warm = started + duration / 10;
    let after: Vec<f64> = samples
        .iter()
        .filter(|s| s.0 >= warm)
        .map(|s| s.1)
        .collect();
    let mut lat = std::mem::take(&mut *lat.lock());
    lat.sort_by(|a, b| a.total_cmp(b));
    drop(proc);
    Ok(SoakFigures {
        runs,
        events_delivered: delivered,
        chat_sent,
        p50_ms: percentile(&lat, 0.5),
        p99_ms: percentile(&lat, 0.99),
        rss_start_mib: after.first().copied().unwrap_or(f64::NAN),
        rss_peak_mib: after.iter().copied().fold(0.0, f64::max),
        rss_end_mib: after.last().copied().unwrap_or(f64::NAN),
    })
}
