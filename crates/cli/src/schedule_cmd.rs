//! `switchboard schedule add | list | show | pause | resume | run | rm | redeliver`:
//! scheduled tasks on a running server.

use std::process::ExitCode;

use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use switchboard_protocol::schedules::{
    DeliveryStatus, Firing, FiringStatus, Missed, Overlap, Schedule, ScheduleApprovals,
    ScheduleSpec, UpdateScheduleRequest,
};
use switchboard_protocol::{AutoApprove, AutoApproveKeyword, BackendSpec, PermissionMode};
use uuid::Uuid;

use crate::commands::client;
use crate::config::Settings;

#[derive(Subcommand)]
pub enum ScheduleCommand {
    /// Add a schedule: `--cron "0 9 * * 1-5" --tz Europe/Berlin`, `--every 30m`,
    /// `--at 2026-12-24T09:00:00Z` or `--in 2h`, then the prompt.
    Add(Box<AddArgs>),
    /// List the schedules with their next firing.
    List {
        #[arg(long)]
        json: bool,
    },
    /// A schedule and its recent firings.
    Show {
        /// Id (or a prefix of it) or name.
        schedule: String,
        #[arg(long)]
        json: bool,
    },
    /// Stop firing until resumed.
    Pause { schedule: String },
    /// Fire again, from now on (what fell due while paused is not run).
    Resume { schedule: String },
    /// Fire now.
    Run { schedule: String },
    /// Delete a schedule and its history.
    Rm { schedule: String },
    /// Try a firing's failed deliveries again.
    Redeliver {
        schedule: String,
        /// The firing's id (or a prefix of it).
        firing: String,
    },
}

#[derive(Args)]
pub struct AddArgs {
    /// A five-field cron expression.
    #[arg(long, group = "when")]
    pub cron: Option<String>,
    /// The time zone of --cron (IANA, e.g. Europe/Berlin; default UTC).
    #[arg(long, requires = "cron")]
    pub tz: Option<String>,
    /// A fixed interval (30m, 1h 30m).
    #[arg(long, group = "when")]
    pub every: Option<String>,
    /// Once, at this RFC 3339 time.
    #[arg(long, group = "when")]
    pub at: Option<String>,
    /// Once, this long from now (2h).
    #[arg(long = "in", group = "when")]
    pub in_: Option<String>,
    #[arg(long)]
    pub name: Option<String>,
    /// Where the result goes (CHANNEL:CHAT[/THREAD], repeatable): telegram:42,
    /// slack:C123, discord:987 …
    #[arg(long = "to")]
    pub to: Vec<String>,
    /// Send each firing to this session instead of a new one.
    #[arg(long)]
    pub session: Option<Uuid>,
    /// The ACP agent of the new sessions (from the config; default: the built-in agent).
    #[arg(long)]
    pub agent: Option<String>,
    #[arg(long)]
    pub cwd: Option<String>,
    #[arg(long)]
    pub model: Option<String>,
    /// read-only, workspace-write or full-access.
    #[arg(long)]
    pub mode: Option<String>,
    /// Tools that run without asking (comma-separated, or `all`); every other call that
    /// asks is rejected. Without it, every call that asks is rejected.
    #[arg(long, conflicts_with = "ask")]
    pub auto_approve: Option<String>,
    /// Ask in the first --to chat (Allow / Deny buttons) instead of rejecting; a question
    /// nobody answers is rejected after --ask-timeout (default 10m).
    #[arg(long)]
    pub ask: bool,
    #[arg(long, requires = "ask")]
    pub ask_timeout: Option<String>,
    /// When the server was down at a due time: skip (default) or run_once.
    #[arg(long)]
    pub missed: Option<String>,
    /// When the previous firing still runs: skip (default) or queue.
    #[arg(long)]
    pub overlap: Option<String>,
    /// Create it paused.
    #[arg(long)]
    pub paused: bool,
    /// The prompt.
    #[arg(required = true, num_args = 1..)]
    pub prompt: Vec<String>,
}

fn word<T: serde::de::DeserializeOwned>(flag: &str, v: &str) -> Result<T> {
    serde_json::from_value(serde_json::Value::String(v.to_string()))
        .map_err(|_| anyhow::anyhow!("--{flag} {v:?} is not one of the accepted values"))
}

fn spec_of(a: AddArgs) -> Result<ScheduleSpec> {
    let auto_approve = a.auto_approve.as_deref().map(|v| {
        if v.trim() == "all" {
            AutoApprove::Keyword(AutoApproveKeyword::All)
        } else {
            AutoApprove::Tools(
                v.split(',')
                    .map(|t| t.trim().to_string())
                    .filter(|t| !t.is_empty())
                    .collect(),
            )
        }
    });
    Ok(ScheduleSpec {
        name: a.name,
        cron: a.cron,
        tz: a.tz,
        every: a.every,
        at: a.at,
        in_: a.in_,
        prompt: a.prompt.join(" "),
        session_id: a.session,
        backend: a.agent.map(BackendSpec::Acp),
        cwd: a.cwd,
        model: a.model,
        permission_mode: a
            .mode
            .as_deref()
            .map(|m| word::<PermissionMode>("mode", m))
            .transpose()?,
        deliver: a.to,
        approvals: if auto_approve.is_some() {
            ScheduleApprovals::AutoApprove
        } else if a.ask {
            ScheduleApprovals::Ask
        } else {
            ScheduleApprovals::Deny
        },
        auto_approve,
        ask_timeout: a.ask_timeout,
        missed: a
            .missed
            .as_deref()
            .map(|m| word::<Missed>("missed", m))
            .transpose()?
            .unwrap_or_default(),
        overlap: a
            .overlap
            .as_deref()
            .map(|m| word::<Overlap>("overlap", m))
            .transpose()?
            .unwrap_or_default(),
        paused: a.paused,
    })
}

/// A schedule by id, id prefix or name.
async fn resolve(c: &switchboard_client::Client, what: &str) -> Result<Schedule> {
    let all = c.list_schedules().await?.schedules;
    if let Some(s) = all
        .iter()
        .find(|s| s.id.to_string() == what || s.name == what)
    {
        return Ok(s.clone());
    }
    let hits: Vec<&Schedule> = all
        .iter()
        .filter(|s| s.id.to_string().starts_with(what))
        .collect();
    match hits.as_slice() {
        [one] => Ok((*one).clone()),
        [] => bail!("no schedule {what:?} (see `switchboard schedule list`)"),
        _ => bail!("{what:?} names several schedules; give more of the id"),
    }
}

fn when(t: Option<chrono::DateTime<chrono::Utc>>) -> String {
    t.map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|| "—".into())
}

fn print_schedule(s: &Schedule) {
    let state = if s.paused { "paused" } else { "active" };
    println!(
        "{}  {:<24} {:<32} {state:<7} next {}",
        &s.id.to_string()[..8],
        s.name,
        s.trigger,
        when(s.next_due)
    );
}

fn firing_line(f: &Firing) -> String {
    let mut line = format!(
        "{}  due {}  {}",
        &f.id.to_string()[..8],
        when(Some(f.due_at)),
        f.status.as_str()
    );
    if f.manual {
        line.push_str(" (by hand)");
    }
    if let Some(r) = f.skip_reason {
        line.push_str(&format!(" ({r:?})").to_lowercase());
    }
    if f.more_skipped > 0 {
        line.push_str(&format!(" and {} more", f.more_skipped));
    }
    if let Some(o) = &f.outcome
        && f.status != FiringStatus::Succeeded
    {
        line.push_str(&format!(": {o}"));
    }
    for d in &f.deliveries {
        let st = match d.status {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Delivered => "delivered",
            DeliveryStatus::Failed => "failed",
        };
        line.push_str(&format!("  → {} {st}", d.target));
        if let Some(e) = &d.error
            && d.status != DeliveryStatus::Delivered
        {
            line.push_str(&format!(" ({e})"));
        }
    }
    line
}

async fn pause(c: &switchboard_client::Client, what: &str, paused: bool) -> Result<()> {
    let s = resolve(c, what).await?;
    let s = c
        .update_schedule(
            s.id,
            &UpdateScheduleRequest {
                paused: Some(paused),
                ..Default::default()
            },
        )
        .await?;
    print_schedule(&s);
    Ok(())
}

pub async fn schedule(settings: &Settings, cmd: ScheduleCommand) -> Result<ExitCode> {
    let c = client(settings)?;
    match cmd {
        ScheduleCommand::Add(a) => {
            let s = c.create_schedule(&spec_of(*a)?).await?;
            println!("added {} ({})", s.id, s.name);
            println!("{}; next firing {}", s.trigger, when(s.next_due));
        }
        ScheduleCommand::List { json } => {
            let list = c.list_schedules().await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else if list.schedules.is_empty() {
                println!("no schedules (add one with `switchboard schedule add`)");
            } else {
                list.schedules.iter().for_each(print_schedule);
            }
        }
        ScheduleCommand::Show { schedule, json } => {
            let s = resolve(&c, &schedule).await?;
            let firings = c.list_firings(s.id).await?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(
                        &serde_json::json!({"schedule": s, "firings": firings.firings})
                    )?
                );
                return Ok(ExitCode::SUCCESS);
            }
            print_schedule(&s);
            println!("prompt: {}", s.spec.prompt);
            if !s.spec.deliver.is_empty() {
                println!("to: {}", s.spec.deliver.join(", "));
            }
            if firings.firings.is_empty() {
                println!("no firings yet");
            }
            for f in firings.firings.iter().take(20) {
                println!("  {}", firing_line(f));
            }
        }
        ScheduleCommand::Pause { schedule } => pause(&c, &schedule, true).await?,
        ScheduleCommand::Resume { schedule } => pause(&c, &schedule, false).await?,
        ScheduleCommand::Run { schedule } => {
            let s = resolve(&c, &schedule).await?;
            let f = c.run_schedule(s.id).await?;
            println!("firing {} {}", f.id, f.status.as_str());
        }
        ScheduleCommand::Rm { schedule } => {
            let s = resolve(&c, &schedule).await?;
            c.delete_schedule(s.id).await?;
            println!("deleted {} ({})", s.id, s.name);
        }
        ScheduleCommand::Redeliver { schedule, firing } => {
            let s = resolve(&c, &schedule).await?;
            let all = c.list_firings(s.id).await?.firings;
            let hits: Vec<&Firing> = all
                .iter()
                .filter(|f| f.id.to_string().starts_with(&firing))
                .collect();
            let [f] = hits.as_slice() else {
                bail!("{firing:?} names {} firings of {}", hits.len(), s.name);
            };
            let f = c.redeliver_firing(s.id, f.id).await?;
            println!("{}", firing_line(&f));
        }
    }
    Ok(ExitCode::SUCCESS)
}
