//! (w) A gateway that keeps up (`--only w [--minutes 5] [--rate 200] [--chats 100]
//! [--busy 20]`): one real `switchboard serve` (SQLite) with its Telegram channel polling a
//! fake Telegram that enforces the Bot API's bot-wide limit (30 messages a second, sends and
//! edits together; a call over it is answered 429 with `retry_after`, as Telegram does).
//! `rate` direct messages a second come from `chats` users, round robin; with `--busy N`,
//! N of those chats each send 5 messages a second (their runs are busy, so the gateway
//! batches) and the rest of the rate is spread over the others. The mock model answers each
//! run with a short reply (3 chunks, 10 ms apart).
//!
//! Checked, as the torture test checks: every message is in exactly one run (its unique
//! token in exactly one `run_started` content of its chat's session, the run the delivery
//! ledger names), its ledger entry is `answered` after one attempt, and nothing else ran.
//! Measured: from the moment the update was handed to the fake (the user's send) to the
//! commit of the run's `run_started` event (p50, p99), and to the ledger's `received_at`;
//! messages per run; sends and edits made, 429s answered; how long after the last message
//! the last reply was out.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use chrono::{DateTime, Utc};
use switchboard_test_support::fake_telegram::FakeTelegram;
use switchboard_test_support::mock_llm::MockReply;

use crate::common::{ChatRig, get_json, sse_fields};
use crate::{TOKEN, http};

/// What one gateway run measured.
pub struct GatewayFigures {
    pub sent: u64,
    pub runs: u64,
    pub update_to_run_ms: (f64, f64),
    pub update_to_ledger_ms: (f64, f64),
    pub max_batch: usize,
    pub sends: usize,
    pub edits: usize,
    pub refused: usize,
    pub drain_s: f64,
}

/// The token a message carries: `q{n}z`, never a substring of another one.
fn token(n: u64) -> String {
    format!("q{n}z")
}

/// Every token in a run's content.
fn tokens(content: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = content;
    while let Some(i) = rest.find('q') {
        rest = &rest[i..];
        let digits = rest[1..].bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 && rest.as_bytes().get(1 + digits) == Some(&b'z') {
            out.push(&rest[..digits + 2]);
            rest = &rest[digits + 2..];
        } else {
            rest = &rest[1..];
        }
    }
    out
}

fn quantile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms_between(a: DateTime<Utc>, b: DateTime<Utc>) -> f64 {
    (b - a).num_microseconds().unwrap_or(i64::MAX) as f64 / 1000.0
}

/// A session's `run_started` events up to `last`: run id → (commit time, content).
async fn run_starts(
    http: &reqwest::Client,
    url: &str,
    session: &str,
) -> Result<HashMap<String, (DateTime<Utc>, String)>> {
    let s = get_json(http, &format!("{url}/v1/sessions/{session}")).await?;
    let last = s["session"]["last_event_id"]
        .as_u64()
        .context("last_event_id")?;
    let mut resp = http
        .get(format!("{url}/v1/sessions/{session}/events?after=0"))
        .bearer_auth(TOKEN)
        .send()
        .await?
        .error_for_status()?;
    let mut out = HashMap::new();
    let mut buf: Vec<u8> = Vec::new();
    let finder = memchr::memmem::Finder::new(b"\n\n");
    let mut seen = 0u64;
    while seen < last {
        let Some(chunk) = resp.chunk().await? else {
            bail!("the stream of {session} ended at {seen} of {last}")
        };
        buf.extend_from_slice(&chunk);
        let mut start = 0;
        while let Some(end) = finder.find(&buf[start..]) {
            let frame = std::str::from_utf8(&buf[start..start + end])?;
            start += end + 2;
            let (id, kind, data) = sse_fields(frame)?;
            let Some(id) = id else { continue };
            seen = id;
            if kind == "run_started" {
                let e: switchboard_protocol::EventEnvelope = serde_json::from_str(data)?;
                if let switchboard_protocol::AgentEvent::RunStarted { run_id, content } = e.event {
                    out.insert(
                        run_id.to_string(),
                        (e.timestamp, content.unwrap_or_default()),
                    );
                }
            }
        }
        buf.drain(..start);
    }
    Ok(out)
}

/// Sends `per_s` messages a second from `users`, round robin, until `stop`; records when
/// each token was handed to the fake.
fn generator(
    telegram: Arc<FakeTelegram>,
    users: Vec<i64>,
    per_s: f64,
    first: u64,
    stride: u64,
    sent_at: Arc<parking_lot::Mutex<HashMap<String, DateTime<Utc>>>>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<u64> {
    tokio::spawn(async move {
        if users.is_empty() || per_s <= 0.0 {
            return 0;
        }
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / per_s));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let mut i = 0u64;
        while !stop.load(Ordering::Relaxed) {
            tick.tick().await;
            let user = users[(i % users.len() as u64) as usize];
            let t = token(first + i * stride);
            sent_at.lock().insert(t.clone(), Utc::now());
            telegram.dm(user, "bench", &format!("message {t}"));
            i += 1;
        }
        i
    })
}

pub(super) async fn gateway(
    duration: Duration,
    rate: f64,
    chats: i64,
    busy: usize,
) -> Result<GatewayFigures> {
    let rig = ChatRig::start(
        MockReply::Text {
            chunks: vec!["Noted, ".into(), "thank ".into(), "you.".into()],
            delay_ms: 10,
        },
        2001,
        chats,
    )
    .await?;
    let (telegram, users) = (rig.telegram.clone(), rig.users.clone());
    // The Bot API's documented bot-wide limit: about 30 messages a second.
    telegram.bot_flood_control(30, Duration::from_secs(1));
    let proc = rig.serve(&[]).await?;
    let url = proc.url.clone();
    let http = http()?;
    let stop = Arc::new(AtomicBool::new(false));
    let sent_at: Arc<parking_lot::Mutex<HashMap<String, DateTime<Utc>>>> = Arc::default();
    // Busy chats: 5 messages a second each, odd tokens; the others share the rest, even.
    let busy = busy.min(users.len());
    let busy_rate = (busy as f64 * 5.0).min(rate);
    let gens = [
        generator(
            telegram.clone(),
            users[..busy].to_vec(),
            busy_rate,
            1,
            2,
            sent_at.clone(),
            stop.clone(),
        ),
        generator(
            telegram.clone(),
            users[busy..].to_vec(),
            rate - busy_rate,
            0,
            2,
            sent_at.clone(),
            stop.clone(),
        ),
    ];
    let started = Instant::now();
    let mut last_report = Instant::now();
    while started.elapsed() < duration {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if last_report.elapsed() >= Duration::from_secs(30) {
            last_report = Instant::now();
            let status: serde_json::Value =
                get_json(&http, &format!("{url}/v1/gateway/status")).await?;
            eprintln!(
                "gateway: {:.0} s, {} sent, {} queued, {} runs active, {} updates unconfirmed, {} refused 429",
                started.elapsed().as_secs_f64(),
                sent_at.lock().len(),
                status["queued_messages"],
                status["active_runs"],
                telegram.pending_updates(),
                telegram.refused("sendMessage") + telegram.refused("editMessageText")
            );
        }
    }
    stop.store(true, Ordering::SeqCst);
    let mut sent = 0;
    for g in gens {
        sent += g.await?;
    }
    let stopped = Instant::now();
    // Drain: every update taken, nothing queued, no run followed.
    let deadline = stopped + Duration::from_secs(600);
    loop {
        let status: serde_json::Value =
            get_json(&http, &format!("{url}/v1/gateway/status")).await?;
        if telegram.pending_updates() == 0
            && status["queued_messages"] == 0
            && status["active_runs"] == 0
        {
            break;
        }
        if Instant::now() > deadline {
            bail!("not drained 10 minutes after the last message: {status}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let drain_s = stopped.elapsed().as_secs_f64();
    // The ledger, newest first, page by page.
    let mut entries = Vec::new();
    let mut before: Option<i64> = None;
    loop {
        let mut q = format!("{url}/v1/gateway/messages?limit=200");
        if let Some(b) = before {
            q.push_str(&format!("&before={b}"));
        }
        let page: switchboard_protocol::gateway::DeliveryPage =
            serde_json::from_value(get_json(&http, &q).await?)?;
        entries.extend(page.messages);
        match page.next {
            Some(n) => before = Some(n),
            None => break,
        }
    }
    let sent_at = std::mem::take(&mut *sent_at.lock());
    if sent_at.len() as u64 != sent || entries.len() as u64 != sent {
        bail!(
            "{sent} sent ({} tokens), {} in the ledger",
            sent_at.len(),
            entries.len()
        );
    }
    // Each session's runs, once.
    let mut starts: HashMap<String, (DateTime<Utc>, String)> = HashMap::new();
    let sessions: std::collections::BTreeSet<String> = entries
        .iter()
        .filter_map(|e| e.session_id.map(|s| s.to_string()))
        .collect();
    for s in &sessions {
        starts.extend(run_starts(&http, &url, s).await?);
    }
    // Every token in exactly one run; that run is the ledger's.
    let mut run_of: HashMap<&str, &str> = HashMap::new();
    let mut max_batch = 0;
    for (run, (_, content)) in &starts {
        let ts = tokens(content);
        max_batch = max_batch.max(ts.len());
        for t in ts {
            if !sent_at.contains_key(t) {
                bail!("run {run} carries {t}, which was never sent");
            }
            if let Some(other) = run_of.insert(t, run) {
                bail!("{t} ran twice: in {other} and {run}");
            }
        }
    }
    let mut to_run = Vec::with_capacity(entries.len());
    let mut to_ledger = Vec::with_capacity(entries.len());
    for e in &entries {
        let t = tokens(&e.text)
            .first()
            .copied()
            .context("a ledger entry without its token")?;
        let at = sent_at[t];
        if e.status != switchboard_protocol::gateway::DeliveryStatus::Answered || e.attempts != 1 {
            bail!("{t}: {:?} after {} attempts", e.status, e.attempts);
        }
        let run = e.run_id.context("answered without a run")?.to_string();
        if run_of.get(t) != Some(&run.as_str()) {
            bail!(
                "{t}: the ledger says run {run} (content {:?}), the log says {:?}",
                starts.get(&run).map(|s| &s.1),
                run_of.get(t)
            );
        }
        to_run.push(ms_between(at, starts[&run].0));
        to_ledger.push(ms_between(at, e.received_at));
    }
    if run_of.len() != sent_at.len() {
        bail!(
            "{} of {} messages reached a run",
            run_of.len(),
            sent_at.len()
        );
    }
    to_run.sort_by(f64::total_cmp);
    to_ledger.sort_by(f64::total_cmp);
    let sends = telegram.calls("sendMessage").len();
    let edits = telegram.calls("editMessageText").len();
    let refused = telegram.refused("sendMessage") + telegram.refused("editMessageText");
    drop(proc);
    Ok(GatewayFigures {
        sent,
        runs: starts.len() as u64,
        update_to_run_ms: (quantile(&to_run, 0.5), quantile(&to_run, 0.99)),
        update_to_ledger_ms: (quantile(&to_ledger, 0.5), quantile(&to_ledger, 0.99)),
        max_batch,
        sends,
        edits,
        refused,
        drain_s,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn tokens_are_found_whole() {
        assert_eq!(
            super::tokens("message q12z\nmessage q1z and q3 qz q45zq7z"),
            vec!["q12z", "q1z", "q45z", "q7z"]
        );
    }
}
