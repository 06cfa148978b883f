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
//! (h) checkpoints (`--only h`): one workspace checkpoint of a 10,000- and a 100,000-file
//!     workspace, unchanged and with 100 files changed, watched and with every file looked
//!     at (needs `git`).
//!
//! (s) soak (`--only soak [--minutes 10] [--history-chars N] [--sessions 1000] [--readers 2]
//!     [--chat-rate 100] [--chats 100]`): one `switchboard serve` under that many sessions
//!     streaming back to back, their SSE readers and chat messages/s through a fake
//!     Telegram for the whole time: no loss (contiguous ids, every run ended, every chat
//!     message confirmed and counted), RSS after warm-up / peak / end, p50 and p99 delivery
//!     latency from commit to reader.
//!
//! (x) sandbox set-up (`--only x`): a command started directly, through the sandbox's
//!     launcher, and with a cgroup of its own (needs the `switchboard` binary beside this one).
//!
//! (t) who is calling (`--only t`): a request with the server token and with a person's API
//! token (looked up in the store each time), in microseconds.
//!
//! (u) usage and budgets (`--only u`): a model call's reservation and settlement against
//! three budgets, p50/p99, on SQLite and PostgreSQL; 20 runs on two instances racing one
//! nearly spent budget (with `SWITCHBOARD_BENCH_STORE_URL`).
//!
//! (q) search (`--only q [--messages N] [--keep DIR]`): `GET /v1/search` over N stored messages (default
//!     1,000,000) on SQLite, p50/p95 per kind of query; and the CPU the search index adds to
//!     a streamed reply of case (g).
//!
//! (w) gateway (`--only w [--minutes 5] [--rate 200] [--chats 100] [--busy N]`): inbound chat
//!     messages through a fake Telegram with the Bot API's bot-wide limit; every message in
//!     exactly one run, update → run start p50/p99, 429s (see `gateway.rs`).
//!
//! Run: `cargo run --release --bin switchboard-bench -- [--runs 5] [--only a|b|c|d|e|f|g|g-resume|h|idle|q|t|u|w|x|soak] [--grid KxM] [--minutes M] [--history-chars N]`.
//! Results go to stdout as Markdown rows for `docs/benchmarks.md`.
//!
//! This file reads the arguments and prints the table; `single.rs` measures (a)–(d),
//! `scale.rs` (e), `failover.rs` (f) and `streaming.rs` (g), on what `common.rs` sets up.

use anyhow::{Context, Result};

mod auth;
mod checkpoints;
mod common;
mod failover;
mod gateway;
mod idle;
mod sandbox;
mod scale;
mod search;
mod single;
mod soak;
mod streaming;
mod usage;

const TOKEN: &str = "bench-token";

use common::{Proc, http, read_frames, spawn_serve};
use failover::failover;
use scale::scale;
use single::{append_throughput, replay, slow_subscriber_memory, start_to_healthy};

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

/// The number after `name` on the command line, if any.
fn num_arg(args: &[String], name: &str) -> Option<f64> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
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
    if only.as_deref() == Some("idle") {
        println!("| measurement | median of {runs} | all runs |\n|---|---|---|");
        let mut figures = Vec::new();
        for _ in 0..runs {
            figures.push(idle::idle().await?);
        }
        let col = |f: &dyn Fn(&idle::IdleFigures) -> f64| figures.iter().map(f).collect::<Vec<_>>();
        row(
            "(i) RSS added by 10,000 idle sessions, each subscribed once (MiB)",
            &col(&|f| f.rss_added_mib),
            1,
        );
        row(
            "(i) GET /v1/sessions, first page of 50 of 10,100, p50 (ms)",
            &col(&|f| f.first_page_ms.0),
            2,
        );
        row(
            "(i) GET /v1/sessions, first page of 50 of 10,100, p95 (ms)",
            &col(&|f| f.first_page_ms.1),
            2,
        );
        row(
            "(i) GET /v1/sessions, last page (offset 10,000), p50 (ms)",
            &col(&|f| f.last_page_ms.0),
            2,
        );
        row(
            "(i) GET /v1/sessions, last page (offset 10,000), p95 (ms)",
            &col(&|f| f.last_page_ms.1),
            2,
        );
        return Ok(());
    }
    if only.as_deref() == Some("w") {
        let num = |name: &str| num_arg(&args, name);
        let minutes = num("--minutes").unwrap_or(5.0);
        let rate = num("--rate").unwrap_or(200.0);
        let chats = num("--chats").map_or(100, |n| n as i64);
        let busy = num("--busy").map_or(0, |n| n as usize);
        let f = gateway::gateway(
            std::time::Duration::from_secs_f64(minutes * 60.0),
            rate,
            chats,
            busy,
        )
        .await?;
        println!(
            "| (w) gateway, {minutes} min: {rate} messages/s from {chats} Telegram chats ({busy} of them at 5/s) | | |\n|---|---|---|"
        );
        println!(
            "| (w) messages sent; each in exactly one run, answered after one attempt | {} | |",
            f.sent
        );
        println!(
            "| (w) runs; most messages in one run | {}; {} | |",
            f.runs, f.max_batch
        );
        println!(
            "| (w) platform update → run started, p50 / p99 (ms) | {:.1} / {:.1} | |",
            f.update_to_run_ms.0, f.update_to_run_ms.1
        );
        println!(
            "| (w) platform update → in the ledger, p50 / p99 (ms) | {:.1} / {:.1} | |",
            f.update_to_ledger_ms.0, f.update_to_ledger_ms.1
        );
        println!(
            "| (w) sendMessage / editMessageText calls; answered 429 | {} / {}; {} | |",
            f.sends, f.edits, f.refused
        );
        println!(
            "| (w) last message → every reply out (s) | {:.1} | |",
            f.drain_s
        );
        return Ok(());
    }
    if only.as_deref() == Some("soak") {
        let num = |name: &str| num_arg(&args, name);
        let minutes = num("--minutes").unwrap_or(10.0);
        // `[sessions] history_max_chars` of the server (its default when not given).
        let history_chars = num("--history-chars").map(|n| n as u64);
        // The defaults are issue 47's team-scale load: 1,000 sessions streaming at once,
        // 2,000 readers, 100 chat messages a second from 100 chats.
        let sessions = num("--sessions").map_or(1000, |n| n as usize);
        let readers = num("--readers").map_or(2, |n| n as usize);
        let chat_rate = num("--chat-rate").map_or(100, |n| n as u32);
        let chats = num("--chats").map_or(100, |n| n as i64);
        let f = soak::soak(
            std::time::Duration::from_secs_f64(minutes * 60.0),
            sessions,
            readers,
            chats,
            chat_rate,
            history_chars,
        )
        .await?;
        println!(
            "| (s) soak, {minutes} min: {sessions} sessions streaming, {} SSE readers, {chat_rate} chat messages/s from {chats} chats | | |\n|---|---|---|",
            sessions * readers
        );
        println!(
            "| (s) runs completed (no loss: contiguous ids, one end per start) | {} | |",
            f.runs
        );
        println!(
            "| (s) events delivered to readers | {} | |",
            f.events_delivered
        );
        println!(
            "| (s) chat messages sent, all confirmed and counted in | {} | |",
            f.chat_sent
        );
        println!(
            "| (s) delivery latency commit → reader, p50 (ms) | {:.1} | |",
            f.p50_ms
        );
        println!(
            "| (s) delivery latency commit → reader, p99 (ms) | {:.1} | |",
            f.p99_ms
        );
        println!(
            "| (s) server RSS after warm-up / peak / end (MiB) | {:.1} / {:.1} / {:.1} | |",
            f.rss_start_mib, f.rss_peak_mib, f.rss_end_mib
        );
        return Ok(());
    }
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
    if only.as_deref() == Some("q") {
        let messages: u64 = args
            .iter()
            .position(|a| a == "--messages")
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(1_000_000);
        let keep = args
            .iter()
            .position(|a| a == "--keep")
            .and_then(|i| args.get(i + 1))
            .map(std::path::PathBuf::from);
        let (stored, queries) = search::search(messages, runs.max(20), keep.as_deref()).await?;
        println!("| (q) {messages} messages in 1,000 sessions stored (s) | {stored:.1} | |");
        for q in queries {
            println!(
                "| (q) search, {} ({} hits): p50 / p95 (ms) | {:.2} / {:.2} | {} requests |",
                q.what,
                q.hits,
                search::quantile(&q.ms, 0.5),
                search::quantile(&q.ms, 0.95),
                q.ms.len()
            );
        }
        for (k, batch) in [(100, 1), (2000, 1), (2000, 10), (10_000, 1)] {
            let us = search::index_cost(k, batch, runs).await?;
            row(
                &format!("(q) indexing a K={k} reply, {batch} a batch (µs CPU)"),
                &us,
                1,
            );
        }
        return Ok(());
    }
    if want("t") {
        let f = auth::auth(runs).await?;
        row(
            "(t) GET /v1/sessions/{id} with the server token (µs per request)",
            &f.server_token,
            0,
        );
        row(
            "(t) … with a person's API token, looked up in the store (µs)",
            &f.personal_token,
            0,
        );
    }
    if want("u") {
        let f = usage::usage(runs).await?;
        let col = |pick: &dyn Fn(&usage::Figures) -> Option<f64>| -> Vec<f64> {
            f.iter().filter_map(pick).collect()
        };
        row(
            "(u) what metering adds to a model call, no budget in force, SQLite, p50 (µs)",
            &col(&|x| Some(x.unbudgeted.0)),
            0,
        );
        row(
            "(u) … no budget, SQLite, p99 (µs)",
            &col(&|x| Some(x.unbudgeted.1)),
            0,
        );
        row(
            "(u) … three budgets (reservation + settlement), SQLite, p50 (µs)",
            &col(&|x| Some(x.sqlite.0)),
            0,
        );
        row(
            "(u) … three budgets, SQLite, p99 (µs)",
            &col(&|x| Some(x.sqlite.1)),
            0,
        );
        if f.iter().any(|x| x.postgres.is_some()) {
            row(
                "(u) … three budgets, PostgreSQL, p50 (µs)",
                &col(&|x| x.postgres.map(|p| p.0)),
                0,
            );
            row(
                "(u) … three budgets, PostgreSQL, p99 (µs)",
                &col(&|x| x.postgres.map(|p| p.1)),
                0,
            );
            row(
                "(u) 20 runs on two instances racing a budget with room for 5: most tokens past the limit in 20 rounds (one call's estimate is 1,000)",
                &col(&|x| x.overspend.map(|o| o.0 as f64)),
                0,
            );
        }
    }
    if want("x") {
        let f = sandbox::sandbox(runs).await?;
        row(
            "(x) `bash -c true`, started directly (ms per command)",
            &f.direct,
            2,
        );
        row(
            "(x) as run_command starts it in the sandbox: Landlock, rlimits (ms)",
            &f.landlock,
            2,
        );
        row(
            "(x) … with a cgroup of its own capping processes (ms)",
            &f.cgroup,
            2,
        );
        if f.bwrap.is_empty() {
            println!("(x) bubblewrap: not installed here, no figure");
        } else {
            row(
                "(x) … with bubblewrap's namespaces on top (ms)",
                &f.bwrap,
                2,
            );
        }
    }
    if want("h") {
        for (files, name) in [(10_000, "10,000"), (100_000, "100,000")] {
            for watch in [true, false] {
                let how = if watch {
                    "watched"
                } else {
                    "every file looked at"
                };
                let f = checkpoints::checkpoints(runs.max(5), files, watch).await?;
                println!(
                    "(h) {name} files, {how}: the first checkpoint took {:.0} ms",
                    f.first
                );
                row(
                    &format!("(h) checkpoint of an unchanged {name}-file workspace, {how} (ms)"),
                    &f.unchanged,
                    1,
                );
                row(
                    &format!("(h) checkpoint of that workspace with 100 files changed, {how} (ms)"),
                    &f.changed,
                    1,
                );
                let total: Vec<f64> = f
                    .unchanged
                    .iter()
                    .zip(&f.changed)
                    .map(|(a, b)| a + b)
                    .collect();
                row(
                    &format!(
                        "(h) both checkpoints of a run changing 100 files, {name} files, {how} (ms)"
                    ),
                    &total,
                    1,
                );
            }
        }
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
