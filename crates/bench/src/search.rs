//! (q) Search (`--only q [--messages N]`): N stored transcript messages (default 1,000,000)
//! in 1,000 sessions on SQLite, written through the store as a run writes them (so the FTS5
//! index is built as it is in use), then `GET /v1/search` over real TCP with the server
//! token: a rare word, a common one, two words, a phrase, a prefix, and one session's hits.
//! And what indexing costs a reply of the streaming case (g): a K-chunk reply indexed as
//! the store's indexer does it, timed alone on a scratch database.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use switchboard_store::{MessageRecord, SqlStore, Store as _};
use uuid::Uuid;

use super::TOKEN;
use super::common::{http, serve_engine, session};
use super::streaming::cpu_ns;

/// A deterministic generator (xorshift64*), so every run stores the same text.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// In `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A vocabulary of `n` made-up words of 2–4 syllables (no two alike).
fn vocabulary(n: usize) -> Vec<String> {
    const SYL: [&str; 24] = [
        "ka", "lo", "mi", "ne", "po", "ru", "sa", "ti", "vo", "za", "ber", "con", "dal", "fen",
        "gor", "hul", "jin", "kel", "mar", "nor", "pel", "quo", "ril", "sto",
    ];
    let mut words = Vec::with_capacity(n);
    let mut seen = std::collections::HashSet::new();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    while words.len() < n {
        let len = 2 + rng.below(3) as usize;
        let w: String = (0..len).map(|_| SYL[rng.below(24) as usize]).collect();
        if seen.insert(w.clone()) {
            words.push(w);
        }
    }
    words
}

/// A word drawn with a Zipf-like skew: the first words of the vocabulary are common, the
/// tail rare (as in prose).
fn zipf<'a>(rng: &mut Rng, vocab: &'a [String]) -> &'a str {
    let u = (rng.below(1 << 20) as f64 + 1.0) / f64::from(1u32 << 20);
    let i = ((vocab.len() as f64).powf(u) - 1.0) as usize;
    &vocab[i.min(vocab.len() - 1)]
}

/// Message `i`'s text: 10–60 words; every 10,000th holds the phrase the bench looks for.
fn text(rng: &mut Rng, vocab: &[String], i: u64) -> String {
    let n = 10 + rng.below(51);
    let mut out = String::with_capacity(n as usize * 8);
    for k in 0..n {
        if k > 0 {
            out.push(' ');
        }
        out.push_str(zipf(rng, vocab));
    }
    if i % 10_000 == 7 {
        out.push_str(" so the migration failed on the orders table");
    }
    out
}

/// The figures of one query: its name and each request's milliseconds.
pub(super) struct QueryTimes {
    pub(super) what: String,
    pub(super) hits: usize,
    pub(super) ms: Vec<f64>,
}

/// The `q`th-quantile of `v` (nearest rank).
pub(super) fn quantile(v: &[f64], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len().max(1));
    v.get(rank - 1).copied().unwrap_or(f64::NAN)
}

/// Stores `messages` messages, then times `runs` requests of each query. Returns how long
/// storing took (s; 0 when `keep` already held them) and each query's times. With `keep`,
/// the database is that directory's `bench.db`, kept for the next run (filling a million
/// messages takes minutes).
pub(super) async fn search(
    messages: u64,
    runs: usize,
    keep: Option<&std::path::Path>,
) -> Result<(f64, Vec<QueryTimes>)> {
    let temp = tempfile::tempdir()?;
    let dir = keep.unwrap_or(temp.path());
    std::fs::create_dir_all(dir)?;
    let filled = dir.join("bench.db").exists();
    let sql = SqlStore::open_path(&dir.join("bench.db")).await?;
    let store: Arc<dyn switchboard_store::Store> = Arc::new(sql.clone());
    let (engine, url) = serve_engine(store.clone(), None).await?;
    let vocab = Arc::new(vocabulary(20_000));
    if filled {
        let one = store.list_sessions(4, 0, false, None).await?.0;
        let one = one
            .last()
            .map(|s| s.id)
            .context("the kept database has no session")?;
        return Ok((0.0, queries(&url, &vocab, one, runs).await?));
    }
    let mut sessions = Vec::new();
    for _ in 0..1000 {
        sessions.push(session(&engine).await?);
    }
    let sessions = Arc::new(sessions);
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..16u64 {
        let (store, vocab, sessions, next) =
            (store.clone(), vocab.clone(), sessions.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng(0x1234_5678 + w);
            let now = chrono::Utc::now().to_rfc3339();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= messages {
                    return Ok::<_, anyhow::Error>(());
                }
                let m = MessageRecord {
                    id: Uuid::new_v4(),
                    session_id: sessions[(i % sessions.len() as u64) as usize],
                    run_id: None,
                    role: if i % 2 == 0 { "user" } else { "assistant" }.to_string(),
                    content: text(&mut rng, &vocab, i),
                    tool_calls: None,
                    tool_call_id: None,
                    is_error: false,
                    created_at: now.clone(),
                };
                store.append_message(&m, None).await?;
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    // Stored means searchable without a search's catching up: what is pending is indexed.
    sql.index_now().await?;
    let stored = start.elapsed().as_secs_f64();
    eprintln!("(q) {messages} messages stored in {stored:.1} s");

    Ok((stored, queries(&url, &vocab, sessions[3], runs).await?))
}

/// Times `runs` requests of each kind of query (after 3 that warm the page cache).
async fn queries(url: &str, vocab: &[String], one: Uuid, runs: usize) -> Result<Vec<QueryTimes>> {
    let queries: Vec<(String, String)> = vec![
        ("a rare word".into(), format!("q={}", vocab[15_000])),
        ("a common word".into(), format!("q={}", vocab[0])),
        (
            "two words".into(),
            format!("q={}+{}", vocab[40], vocab[300]),
        ),
        (
            "a common word and a rarer one".into(),
            format!("q={}+{}", vocab[0], vocab[1_000]),
        ),
        ("a phrase".into(), "q=%22migration+failed%22".into()),
        ("a prefix".into(), "q=migra*".into()),
        (
            "a common word in one session".into(),
            format!("q={}&session={one}", vocab[0]),
        ),
    ];
    let http = http()?;
    let mut out = Vec::new();
    for (what, query) in queries {
        let mut ms = Vec::with_capacity(runs);
        let mut hits = 0;
        for i in 0..runs + 3 {
            let t = Instant::now();
            let resp = http
                .get(format!("{url}/v1/search?{query}&limit=20"))
                .bearer_auth(TOKEN)
                .send()
                .await?;
            if !resp.status().is_success() {
                bail!("search {query}: HTTP {}", resp.status());
            }
            let body: serde_json::Value = resp.json().await?;
            let took = t.elapsed().as_secs_f64() * 1000.0;
            hits = body["hits"].as_array().map_or(0, Vec::len);
            // The first requests warm SQLite's page cache.
            if i >= 3 {
                ms.push(took);
            }
        }
        if hits == 0 {
            bail!("search {query}: no hits");
        }
        out.push(QueryTimes { what, hits, ms });
    }
    Ok(out)
}

/// CPU (µs) of indexing one streamed reply of `chunks` chunks of 20 characters (the text
/// case (g) streams), as the store does it: the replies written through the store (untimed),
/// then their indexing timed, `batch` replies a transaction (what the indexer takes at once
/// when that many came within its linger; 1 for a lone reply). `runs` figures, each the mean
/// over 200 replies, merges included.
pub(super) async fn index_cost(chunks: usize, batch: usize, runs: usize) -> Result<Vec<f64>> {
    let dir = tempfile::tempdir()?;
    let store = SqlStore::open_path(&dir.path().join("index.db")).await?;
    let s = switchboard_store::SessionRecord {
        id: Uuid::now_v7(),
        title: "index".into(),
        cwd: "/".into(),
        config: serde_json::json!({}),
        created_at: "2026-12-07T00:00:00Z".into(),
        updated_at: "2026-12-07T00:00:00Z".into(),
        last_seq: 0,
        archived_at: None,
        owner: None,
    };
    store.create_session(&s).await?;
    let s = s.id;
    // What the mock model of (g) streams: each chunk a number of its own.
    let reply: String = (0..chunks).map(|i| format!("{i:019} ")).collect();
    let mut per_reply = Vec::new();
    let pid = std::process::id();
    // The sum over live threads drops when one ends during a run (the search phase's
    // blocking threads retiring): such a run is measured again.
    'runs: for _ in 0..runs * 3 {
        if per_reply.len() == runs {
            break;
        }
        let (mut spent, mut batches) = (0u64, 0);
        for _ in 0..3 * 200 / batch {
            if batches == 200 / batch {
                break;
            }
            for _ in 0..batch {
                store.append_message(&reply_record(s, &reply), None).await?;
            }
            let cpu0 = cpu_ns(pid)?;
            let n = store.index_now().await?;
            let Some(d) = cpu_ns(pid)?.checked_sub(cpu0) else {
                continue 'runs;
            };
            // The store's own indexer (half a second after a write) took some of the batch
            // outside the timed call: not counted.
            if n == batch as u64 {
                spent += d;
                batches += 1;
            }
        }
        if batches < 200 / batch {
            bail!("the store's indexer took most batches before they were timed");
        }
        per_reply.push(spent as f64 / 1000.0 / (batches * batch) as f64);
    }
    Ok(per_reply)
}

fn reply_record(session: Uuid, text: &str) -> MessageRecord {
    MessageRecord {
        id: Uuid::now_v7(),
        session_id: session,
        run_id: None,
        role: "assistant".into(),
        content: text.into(),
        tool_calls: None,
        tool_call_id: None,
        is_error: false,
        created_at: "2026-12-07T00:00:00Z".into(),
    }
}
