//! (u) usage and budgets (`--only u`): what metering adds to a model call — the reservation
//! against every budget that applies before it and the settlement after — with three
//! budgets in force (global, per user, per chat; one made over the API, so read from the
//! store each call), on a SQLite file and, with `SWITCHBOARD_BENCH_STORE_URL`, on
//! PostgreSQL; and how far 20 concurrent runs on two instances (two meters, each with its
//! own pool, on that PostgreSQL database) get past a nearly spent budget.
//! Each run: 1,000 calls one after another, each with a 5 ms pause for the model's reply
//! between its reservation and its settlement (p50 and p99 of the time metering adds, in
//! microseconds), and 20 rounds of the race.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use switchboard_engine::usage::{Attribution, Meter, UsageConfig};
use switchboard_protocol::Usage;
use switchboard_protocol::usage::{AtLimit, BudgetScope, BudgetSpec, BudgetWindow};
use switchboard_store::{SqlStore, Store};
use uuid::Uuid;

const CALLS: usize = 1000;

/// One run's figures.
pub struct Figures {
    /// Reserve + settle, µs: p50 and p99 on SQLite with no budget in force.
    pub unbudgeted: (f64, f64),
    /// … with three budgets.
    pub sqlite: (f64, f64),
    /// The same on PostgreSQL, when a database was given.
    pub postgres: Option<(f64, f64)>,
    /// The most any round's budget was passed by, in tokens (and the call's estimate).
    pub overspend: Option<(u64, u64)>,
}

fn spec(name: &str, scope: BudgetScope, limit_tokens: u64) -> BudgetSpec {
    BudgetSpec {
        name: name.into(),
        scope,
        match_: None,
        window: BudgetWindow::Day,
        time_zone: None,
        limit_usd: None,
        limit_tokens: Some(limit_tokens),
        at_limit: AtLimit::Stop,
    }
}

fn who() -> Attribution {
    Attribution {
        session_id: Some(Uuid::now_v7()),
        run_id: Some(Uuid::now_v7()),
        user: Some("bench".into()),
        chat: Some("telegram:1".into()),
        backend: "builtin".into(),
        ..Attribution::default()
    }
}

/// p50 and p99 of reserve + settle on `store`, µs; with three budgets in force, or none.
async fn latency(store: Arc<dyn Store>, budgets: bool) -> Result<(f64, f64)> {
    let config = UsageConfig {
        budgets: if budgets {
            vec![
                spec("global", BudgetScope::Global, u64::MAX / 4),
                spec("per-user", BudgetScope::User, u64::MAX / 4),
            ]
        } else {
            Vec::new()
        },
        ..UsageConfig::default()
    };
    let meter = Meter::new(store, &config).map_err(|e| anyhow!(e))?;
    if budgets {
        meter
            .put_budget(
                spec(
                    &format!("chat-{}", Uuid::now_v7().simple()),
                    BudgetScope::Chat,
                    u64::MAX / 4,
                ),
                "bench",
            )
            .await
            .map_err(|e| anyhow!("{e}"))?;
    }
    let who = who();
    let mut took = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let t = Instant::now();
        let ticket = meter
            .reserve(&who, "openai", "gpt-4o", 2_000, 4_096)
            .await
            .map_err(|e| anyhow!("{e}"))?;
        let reserving = t.elapsed();
        // The model's reply (a real one takes hundreds of milliseconds).
        tokio::time::sleep(Duration::from_millis(5)).await;
        let t = Instant::now();
        meter
            .settle(&ticket, Some(&Usage::tokens(1_900, 300)))
            .await?;
        took.push((reserving + t.elapsed()).as_secs_f64() * 1e6);
        // What the run does next (tools, the reply) before its next call: the settlement
        // lands meanwhile, as it would.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    took.sort_by(|a, b| a.total_cmp(b));
    Ok((took[CALLS / 2], took[CALLS * 99 / 100]))
}

/// 20 rounds: a budget with room for 5 calls' estimates, 20 runs racing on two meters.
/// The most tokens spent + held beyond the limit in any round.
async fn race(url: &str) -> Result<(u64, u64)> {
    let a: Arc<dyn Store> =
        Arc::new(SqlStore::open_postgres(switchboard_store::PostgresOptions::new(url)).await?);
    let b: Arc<dyn Store> =
        Arc::new(SqlStore::open_postgres(switchboard_store::PostgresOptions::new(url)).await?);
    const ESTIMATE: u64 = 1_000;
    let mut worst = 0u64;
    for _ in 0..20 {
        let name = format!("race-{}", Uuid::now_v7().simple());
        let config = UsageConfig {
            budgets: vec![spec(
                &name,
                BudgetScope::Global,
                5 * ESTIMATE + ESTIMATE / 2,
            )],
            ..UsageConfig::default()
        };
        let ma = Arc::new(Meter::new(a.clone(), &config).map_err(|e| anyhow!(e))?);
        let mb = Arc::new(Meter::new(b.clone(), &config).map_err(|e| anyhow!(e))?);
        let mut tasks = Vec::new();
        for i in 0..20 {
            let m = if i % 2 == 0 { ma.clone() } else { mb.clone() };
            tasks.push(tokio::spawn(async move {
                let who = who();
                match m
                    .reserve(&who, "openai", "m", ESTIMATE / 2, ESTIMATE / 2)
                    .await
                {
                    // Each uses all it held: the worst case for the limit.
                    Ok(t) => m
                        .settle(&t, Some(&Usage::tokens(ESTIMATE / 2, ESTIMATE / 2)))
                        .await
                        .map(|_| ()),
                    Err(_) => Ok(()),
                }
            }));
        }
        for t in tasks {
            let _ = t.await?;
        }
        ma.flush().await;
        mb.flush().await;
        let status = ma.status().await.map_err(|e| anyhow!("{e}"))?;
        let w = status
            .iter()
            .find(|s| s.budget.name == name)
            .and_then(|s| s.windows.first())
            .map(|w| w.spent_tokens + w.reserved_tokens)
            .unwrap_or(0);
        worst = worst.max(w.saturating_sub(5 * ESTIMATE + ESTIMATE / 2));
    }
    Ok((worst, ESTIMATE))
}

pub async fn usage(runs: usize) -> Result<Vec<Figures>> {
    let url = std::env::var("SWITCHBOARD_BENCH_STORE_URL").ok();
    let mut out = Vec::new();
    for _ in 0..runs {
        let dir = tempfile::tempdir()?;
        let sqlite: Arc<dyn Store> =
            Arc::new(SqlStore::open_path(&dir.path().join("usage.db")).await?);
        let unbudgeted = latency(sqlite.clone(), false).await?;
        let sqlite = latency(sqlite, true).await?;
        let (postgres, overspend) = match &url {
            Some(url) => {
                let pg: Arc<dyn Store> = Arc::new(
                    SqlStore::open_postgres(switchboard_store::PostgresOptions::new(url)).await?,
                );
                (Some(latency(pg, true).await?), Some(race(url).await?))
            }
            None => (None, None),
        };
        out.push(Figures {
            unbudgeted,
            sqlite,
            postgres,
            overspend,
        });
    }
    Ok(out)
}
