//! (g) The streaming write path against a separate server process: a mock model streams
//! K chunks of 20 characters as fast as it can into one session of a real
//! `switchboard serve` (SQLite), M SSE subscribers read the run, and the server's CPU is
//! read from `/proc`; then resume from a log of 100,000 events.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use switchboard_test_support::mock_llm::{MockLlm, MockReply};

use crate::{Proc, TOKEN, http, median, read_frames, row, spawn_serve};

/// CPU time the process has used, in nanoseconds: the sum over its threads of
/// `/proc/PID/task/TID/schedstat` (nanosecond resolution; `/proc/PID/stat` counts 10 ms
/// ticks, too coarse for a run that costs a few tens of milliseconds). The server's
/// threads live as long as it does (tokio workers, SQLite connection threads).
pub(super) fn cpu_ns(pid: u32) -> Result<u64> {
    let mut total = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let path = task?.path().join("schedstat");
        // A thread that ended meanwhile has no file any more.
        let Ok(s) = std::fs::read_to_string(&path) else {
            continue;
        };
        total += s
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
            .context("schedstat")?;
    }
    Ok(total)
}

/// `utime + stime` of `/proc/PID/stat`, in nanoseconds (10 ms resolution): a cross-check of
/// [`cpu_ns`] that also counts threads that have ended.
fn stat_ns(pid: u32) -> Result<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name may hold spaces; fields after its closing parenthesis are fixed.
    let rest = s.rsplit_once(')').context("stat")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 =
        f.get(11).context("utime")?.parse::<u64>()? + f.get(12).context("stime")?.parse::<u64>()?;
    Ok(ticks * 10_000_000)
}

/// What one subscriber saw of a run.
struct Seen {
    first_event: Instant,
    first_delta: Instant,
    done: Instant,
    events: u64,
    text: String,
}

/// Follows a session's stream until the run ends, checking that ids are contiguous (no loss,
/// no duplicate); with `keep_text`, collects the text of every `TextDelta`.
async fn follow(resp: reqwest::Response, keep_text: bool) -> Result<Seen> {
    let mut resp = resp;
    let finder = memchr::memmem::Finder::new(b"\n\n");
    let mut buf: Vec<u8> = Vec::new();
    let mut last_id: Option<u64> = None;
    let (mut first_event, mut first_delta) = (None, None);
    let mut events = 0u64;
    let mut text = String::new();
    loop {
        let Some(chunk) = resp.chunk().await? else {
            bail!("stream ended before the run did");
        };
        let now = Instant::now();
        buf.extend_from_slice(&chunk);
        let mut start = 0;
        while let Some(end) = finder.find(&buf[start..]) {
            let frame = std::str::from_utf8(&buf[start..start + end])?;
            start += end + 2;
            let (id, kind, data) = crate::common::sse_fields(frame)?;
            let Some(id) = id else { continue }; // a ping
            if let Some(l) = last_id
                && id != l + 1
            {
                bail!("id {id} after {l}: an event was lost or repeated");
            }
            last_id = Some(id);
            match kind {
                "run_started" => {
                    first_event.get_or_insert(now);
                }
                "text_delta" => {
                    events += 1;
                    first_delta.get_or_insert(now);
                    if keep_text {
                        let v: serde_json::Value = serde_json::from_str(data)?;
                        text.push_str(
                            v["event"]["TextDelta"]["delta"]
                                .as_str()
                                .unwrap_or_default(),
                        );
                    }
                }
                "run_completed" => {
                    return Ok(Seen {
                        first_event: first_event.context("no run_started")?,
                        first_delta: first_delta.context("no text_delta")?,
                        done: now,
                        events,
                        text,
                    });
                }
                "run_error" => bail!("the run failed: {data}"),
                _ => {}
            }
        }
        buf.drain(..start);
    }
}

/// One measured run's figures.
pub struct RunFigures {
    /// Server CPU per chunk delivered to one subscriber (µs), schedstat and stat.
    pub cpu_per_chunk_us: f64,
    pub cpu_per_chunk_stat_us: f64,
    /// Chunks per second on one stream, first `TextDelta` to the run's end (subscriber 0).
    pub chunks_per_s: f64,
    /// POST sent → `run_started` read, and → first `TextDelta` read (ms, median subscriber).
    pub first_event_ms: f64,
    pub first_delta_ms: f64,
    /// `TextDelta` events the K chunks became.
    pub events: u64,
}

struct StreamServer {
    proc: Proc,
    mock: MockLlm,
    _dir: tempfile::TempDir,
}

async fn stream_server() -> Result<StreamServer> {
    let mock = MockLlm::start().await;
    let dir = tempfile::tempdir()?;
    let base = mock.base_url();
    let data = dir.path().join("data");
    let proc = spawn_serve(&[
        ("SWITCHBOARD_DATA_DIR", data.to_str().context("path")?),
        (
            "SWITCHBOARD_DEFAULT_CWD",
            dir.path().to_str().context("path")?,
        ),
        ("SWITCHBOARD_OPENAI_BASE_URL", &base),
        ("SWITCHBOARD_MODEL", "bench"),
    ])
    .await?;
    Ok(StreamServer {
        proc,
        mock,
        _dir: dir,
    })
}

async fn one_run(
    s: &StreamServer,
    http: &reqwest::Client,
    k: usize,
    m: usize,
) -> Result<RunFigures> {
    let chunks: Vec<String> = (0..k).map(|i| format!("{i:019} ")).collect();
    let expected: String = chunks.concat();
    s.mock.set_default(MockReply::Text {
        chunks,
        delay_ms: 0,
    });
    let url = &s.proc.url;
    let id = crate::common::create_session(http, url).await?;
    // Every subscriber connected (the server subscribed it) before the POST.
    let mut streams = Vec::with_capacity(m);
    for _ in 0..m {
        let r = http
            .get(format!("{url}/v1/sessions/{id}/events"))
            .bearer_auth(TOKEN)
            .send()
            .await?
            .error_for_status()?;
        streams.push(r);
    }
    let readers: Vec<_> = streams
        .into_iter()
        .enumerate()
        .map(|(i, r)| tokio::spawn(follow(r, i == 0)))
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let pid = s.proc.child.id().context("server pid")?;
    let (cpu0, stat0) = (cpu_ns(pid)?, stat_ns(pid)?);
    let t0 = Instant::now();
    http.post(format!("{url}/v1/sessions/{id}/messages"))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({"message": {"role": "user", "content": "go"}}))
        .send()
        .await?
        .error_for_status()?;
    let mut seen = Vec::with_capacity(m);
    for r in readers {
        seen.push(r.await??);
    }
    // The server may still be closing the run's books; its CPU so far is what the stream
    // cost (the terminal event was the last thing read).
    let (cpu1, stat1) = (cpu_ns(pid)?, stat_ns(pid)?);
    let first = &seen[0];
    if first.text != expected {
        bail!(
            "subscriber 0 got {} characters of text, {} were sent (or out of order)",
            first.text.len(),
            expected.len()
        );
    }
    if let Some(s) = seen.iter().find(|s| s.events != first.events) {
        bail!(
            "a subscriber saw {} text events, another {}",
            s.events,
            first.events
        );
    }
    let delivered_chunks = (k * m) as f64;
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    Ok(RunFigures {
        cpu_per_chunk_us: (cpu1 - cpu0) as f64 / 1000.0 / delivered_chunks,
        cpu_per_chunk_stat_us: (stat1 - stat0) as f64 / 1000.0 / delivered_chunks,
        chunks_per_s: k as f64 / (first.done - first.first_delta).as_secs_f64().max(1e-6),
        first_event_ms: median(seen.iter().map(|s| ms(s.first_event - t0)).collect()),
        first_delta_ms: median(seen.iter().map(|s| ms(s.first_delta - t0)).collect()),
        events: first.events,
    })
}

/// (g) for every (K, M), `runs` times each, printed as rows.
/// The whole grid, or only `grid` (`--grid KxM`, say to profile one case).
pub async fn streaming(runs: usize, grid: Option<(usize, usize)>) -> Result<()> {
    let s = stream_server().await?;
    let http = http()?;
    // Warm up: connections, the model client, SQLite's cache.
    one_run(&s, &http, 200, 1).await?;
    let all = [
        (2000usize, 1usize),
        (2000, 10),
        (2000, 100),
        (2000, 1000),
        (10_000, 1),
        (10_000, 10),
        (10_000, 100),
        (10_000, 1000),
    ];
    let cases: Vec<(usize, usize)> = match grid {
        Some(g) => vec![g],
        None => all.to_vec(),
    };
    for (k, m) in cases {
        let mut f = Vec::new();
        for _ in 0..runs {
            f.push(one_run(&s, &http, k, m).await?);
        }
        let col = |g: fn(&RunFigures) -> f64| f.iter().map(g).collect::<Vec<f64>>();
        let rows: [(&str, Vec<f64>, usize); 6] = [
            (
                "server CPU per chunk delivered (µs)",
                col(|r| r.cpu_per_chunk_us),
                2,
            ),
            (
                "… the same from /proc/PID/stat, 10 ms ticks (µs)",
                col(|r| r.cpu_per_chunk_stat_us),
                2,
            ),
            ("chunks/s on one stream", col(|r| r.chunks_per_s), 0),
            ("POST → first event (ms)", col(|r| r.first_event_ms), 1),
            ("POST → first TextDelta (ms)", col(|r| r.first_delta_ms), 1),
            (
                "TextDelta events the chunks were stored as",
                col(|r| r.events as f64),
                0,
            ),
        ];
        for (what, v, d) in rows {
            row(&format!("(g) K={k}, M={m}: {what}"), &v, d);
        }
    }
    Ok(())
}

/// (g) resume: a log of `n` events written before the server starts; times a client that
/// resumes 1,000 events before the end (`Last-Event-ID`) and one that reads all from 0.
pub async fn resume(n: u64, runs: usize) -> Result<(Vec<f64>, Vec<f64>)> {
    use switchboard_store::{NewEvent, SessionRecord, SqlStore, Store};
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data)?;
    let id = uuid::Uuid::now_v7();
    {
        let store = SqlStore::open_path(&data.join("switchboard.db")).await?;
        let now = switchboard_engine::now_rfc3339();
        store
            .create_session(&SessionRecord {
                id,
                title: "resume bench".into(),
                cwd: dir.path().display().to_string(),
                config: serde_json::json!({}),
                created_at: now.clone(),
                updated_at: now.clone(),
                last_seq: 0,
                archived_at: None,
                owner: None,
            })
            .await?;
        let run_id = uuid::Uuid::now_v7();
        let mut seq = 0;
        while seq < n {
            let batch: Vec<NewEvent> = (0..1000.min(n - seq))
                .map(|_| {
                    seq += 1;
                    let ev = switchboard_protocol::AgentEvent::TextDelta {
                        run_id,
                        delta: format!("{seq:019} "),
                    };
                    NewEvent {
                        session_id: id,
                        seq,
                        run_id: Some(run_id),
                        kind: ev.kind().into(),
                        payload: serde_json::to_string(&ev).unwrap_or_default(),
                        created_at: now.clone(),
                    }
                })
                .collect();
            store.append_events(&batch, &[]).await?;
        }
        store.close().await;
    }
    let proc = spawn_serve(&[
        ("SWITCHBOARD_DATA_DIR", data.to_str().context("path")?),
        (
            "SWITCHBOARD_DEFAULT_CWD",
            dir.path().to_str().context("path")?,
        ),
    ])
    .await?;
    let http = http()?;
    let url = format!("{}/v1/sessions/{id}/events", proc.url);
    // Seconds to read `count` events after `after`.
    let timed = async |after: u64, count: u64| -> Result<f64> {
        let start = Instant::now();
        let url = format!("{url}?after={after}");
        read_frames(http.clone(), url, count, None, Arc::default()).await?;
        Ok(start.elapsed().as_secs_f64())
    };
    // Warm up the connection and the page cache.
    timed(n - 1000, 1000).await?;
    let (mut tail, mut all) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        tail.push(timed(n - 1000, 1000).await? * 1000.0);
    }
    for _ in 0..runs {
        all.push(timed(0, n).await?);
    }
    Ok((tail, all))
}
