//! `switchboard usage` and `switchboard budgets …`: what model calls cost, and the budgets
//! that limit them, on a running server (docs/usage.md).

use std::process::ExitCode;

use anyhow::{Context as _, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use switchboard_protocol::usage::{
    AtLimit, BudgetScope, BudgetSpec, BudgetWindow, UsageGroup, UsageQuery, UsageTotals,
    format_micros,
};

use crate::commands::client;
use crate::config::Settings;

/// How `switchboard usage` groups.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum By {
    Day,
    Session,
    User,
    Chat,
    Model,
    Backend,
    Schedule,
}

impl From<By> for UsageGroup {
    fn from(b: By) -> Self {
        match b {
            By::Day => UsageGroup::Day,
            By::Session => UsageGroup::Session,
            By::User => UsageGroup::User,
            By::Chat => UsageGroup::Chat,
            By::Model => UsageGroup::Model,
            By::Backend => UsageGroup::Backend,
            By::Schedule => UsageGroup::Schedule,
        }
    }
}

#[derive(Args)]
pub struct UsageArgs {
    /// From when: a date (2026-12-01), an RFC 3339 time, or how long ago (24h, 7d); default
    /// 30 days ago.
    #[arg(long)]
    since: Option<String>,
    /// Until when (a date or RFC 3339 time); default now.
    #[arg(long)]
    until: Option<String>,
    /// Group by day, session, user, chat, model, backend or schedule.
    #[arg(long, value_enum)]
    by: Option<By>,
    /// Only this session's calls.
    #[arg(long)]
    session: Option<uuid::Uuid>,
    /// The report as JSON (`GET /v1/usage`'s answer).
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
pub enum BudgetsCommand {
    /// Every budget with what its current window has spent.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Make or replace a budget: `switchboard budgets set team-daily --scope global
    /// --window day --usd 20` (`--tokens N` for a limit in tokens).
    Set {
        name: String,
        #[arg(long, value_parser = parse_scope)]
        scope: BudgetScope,
        /// Only this one of the scope (a user, `channel:conversation`, a session id, a
        /// backend, a schedule id, a bundle); none: each one on its own.
        #[arg(long = "match")]
        only: Option<String>,
        #[arg(long, value_parser = parse_window)]
        window: BudgetWindow,
        /// The IANA time zone of a day or month window (default UTC).
        #[arg(long)]
        time_zone: Option<String>,
        #[arg(long, conflicts_with = "tokens", required_unless_present = "tokens")]
        usd: Option<f64>,
        #[arg(long)]
        tokens: Option<u64>,
        /// At the limit, ask an admin or operator for one more window's worth (once)
        /// instead of stopping.
        #[arg(long)]
        ask: bool,
    },
    /// Remove a budget made over the API.
    Remove { name: String },
}

fn parse_scope(s: &str) -> Result<BudgetScope, String> {
    serde_json::from_value(serde_json::Value::String(s.to_string())).map_err(|_| {
        format!("{s:?}: one of global, user, chat, session, backend, schedule, bundle")
    })
}

fn parse_window(s: &str) -> Result<BudgetWindow, String> {
    serde_json::from_value(serde_json::Value::String(s.to_string()))
        .map_err(|_| format!("{s:?}: one of run, day, month"))
}

/// `--since`: a date, a time, or a duration ago.
fn since(s: &str) -> Result<String> {
    if chrono::DateTime::parse_from_rfc3339(s).is_ok()
        || chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok()
    {
        return Ok(s.to_string());
    }
    let d = humantime::parse_duration(s)
        .with_context(|| format!("--since {s:?}: a date, an RFC 3339 time or a duration (7d)"))?;
    let d = chrono::Duration::from_std(d).context("--since: too long ago")?;
    Ok(switchboard_engine::time_text(chrono::Utc::now() - d))
}

fn row(key: &str, t: &UsageTotals) -> String {
    let mut flags = String::new();
    if t.unpriced_calls > 0 {
        flags.push_str(&format!(" ({} unpriced)", t.unpriced_calls));
    }
    if t.unreported_calls > 0 {
        flags.push_str(&format!(" ({} unreported)", t.unreported_calls));
    }
    format!(
        "{:<38}  {:>7}  {:>12}  {:>10}  {:>14}{flags}",
        key,
        t.calls,
        t.input_tokens,
        t.output_tokens,
        format_micros(t.cost_microdollars)
    )
}

pub async fn usage(settings: &Settings, args: UsageArgs) -> Result<ExitCode> {
    let c = client(settings)?;
    let q = UsageQuery {
        from: args.since.as_deref().map(since).transpose()?,
        to: args.until,
        group_by: args.by.map(UsageGroup::from),
        session: args.session,
        ..UsageQuery::default()
    };
    let r = c.usage(&q).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<38}  {:>7}  {:>12}  {:>10}  {:>14}",
        r.group_by.map_or("PERIOD", |g| g.as_str()).to_uppercase(),
        "CALLS",
        "INPUT",
        "OUTPUT",
        "COST"
    );
    for g in &r.groups {
        println!("{}", row(g.key.as_deref().unwrap_or("-"), &g.totals));
    }
    let period = format!(
        "{} – {}",
        r.from.format("%Y-%m-%d %H:%M"),
        r.to.format("%Y-%m-%d %H:%M")
    );
    let label = if r.groups.is_empty() {
        period.clone()
    } else {
        "total".into()
    };
    println!("{}", row(&label, &r.total));
    if !r.unpriced_models.is_empty() {
        println!(
            "models without a price (counted in tokens only; add [prices.\"provider/model\"]): {}",
            r.unpriced_models.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn budgets(settings: &Settings, cmd: BudgetsCommand) -> Result<ExitCode> {
    let c = client(settings)?;
    match cmd {
        BudgetsCommand::List { json } => {
            let r = c.budgets().await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
                return Ok(ExitCode::SUCCESS);
            }
            println!(
                "{:<20}  {:<8}  {:<6}  {:<7}  {:>14}  {:<22}  SPENT (MOST FIRST)",
                "NAME", "SCOPE", "WINDOW", "SOURCE", "LIMIT", "RESETS"
            );
            for b in &r.budgets {
                let s = &b.budget;
                let limit = match (b.limit_microdollars, s.limit_tokens) {
                    (Some(m), _) => format_micros(m),
                    (None, Some(t)) => format!("{t} tokens"),
                    (None, None) => "-".into(),
                };
                let spent: Vec<String> = b
                    .windows
                    .iter()
                    .take(3)
                    .map(|w| {
                        let who = if w.subject.is_empty() {
                            "all"
                        } else {
                            &w.subject
                        };
                        if s.limit_tokens.is_some() {
                            format!("{who}: {} tokens", w.spent_tokens)
                        } else {
                            format!("{who}: {}", format_micros(w.spent_microdollars))
                        }
                    })
                    .collect();
                println!(
                    "{:<20}  {:<8}  {:<6}  {:<7}  {:>14}  {:<22}  {}",
                    s.name,
                    s.scope.as_str(),
                    s.window.as_str(),
                    format!("{:?}", b.source).to_lowercase(),
                    limit,
                    b.resets_at
                        .map(|t| t.format("%Y-%m-%d %H:%M UTC").to_string())
                        .unwrap_or_else(|| "each run".into()),
                    if spent.is_empty() {
                        "-".into()
                    } else {
                        spent.join(", ")
                    }
                );
            }
        }
        BudgetsCommand::Set {
            name,
            scope,
            only,
            window,
            time_zone,
            usd,
            tokens,
            ask,
        } => {
            if usd.is_none() && tokens.is_none() {
                bail!("give --usd or --tokens");
            }
            let spec = BudgetSpec {
                name,
                scope,
                match_: only,
                window,
                time_zone,
                limit_usd: usd,
                limit_tokens: tokens,
                at_limit: if ask { AtLimit::Ask } else { AtLimit::Stop },
            };
            let b = c.put_budget(&spec).await?;
            println!("budget {} set", b.budget.name);
        }
        BudgetsCommand::Remove { name } => {
            c.delete_budget(&name).await?;
            println!("budget {name} removed");
        }
    }
    Ok(ExitCode::SUCCESS)
}
