//! `switchboard checkpoints | diff | undo | restore`: what runs changed in a session's
//! workspace, and putting it back.

use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use switchboard_protocol::{CheckpointKind, DiffQuery};
use uuid::Uuid;

use crate::commands::client;
use crate::config::Settings;

#[derive(Args)]
pub struct CheckpointsArgs {
    pub session: Uuid,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct DiffArgs {
    pub session: Uuid,
    /// What this run changed (default: the last run that changed files).
    #[arg(long, conflicts_with_all = ["from", "to"])]
    pub run: Option<Uuid>,
    /// From this checkpoint …
    #[arg(long)]
    pub from: Option<String>,
    /// … to this one (default: the latest).
    #[arg(long, requires = "from")]
    pub to: Option<String>,
    /// Per-file counts instead of the diff.
    #[arg(long)]
    pub stat: bool,
}

#[derive(Args)]
pub struct UndoArgs {
    pub session: Uuid,
}

#[derive(Args)]
pub struct RestoreArgs {
    pub session: Uuid,
    pub checkpoint: String,
}

fn kind(k: CheckpointKind) -> &'static str {
    match k {
        CheckpointKind::BeforeRun => "before run",
        CheckpointKind::AfterRun => "after run",
        CheckpointKind::BeforeRestore => "before restore",
        CheckpointKind::Restored => "restored",
    }
}

use switchboard_protocol::change_summary as summary;

pub async fn checkpoints(settings: &Settings, a: CheckpointsArgs) -> Result<ExitCode> {
    let list = client(settings)?.checkpoints(a.session).await?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(ExitCode::SUCCESS);
    }
    if list.checkpoints.is_empty() {
        println!("no checkpoints yet");
    }
    for c in &list.checkpoints {
        let run = c.run_id.map(|r| format!(" run {r}")).unwrap_or_default();
        println!(
            "{}  {}  {:<14}{run}  {}",
            &c.id[..12.min(c.id.len())],
            c.created_at.format("%Y-%m-%d %H:%M:%S"),
            kind(c.kind),
            summary(c.files, c.insertions, c.deletions),
        );
        for s in &c.skipped {
            println!("              skipped (too large): {s}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn diff(settings: &Settings, a: DiffArgs) -> Result<ExitCode> {
    let c = client(settings)?;
    let q = DiffQuery {
        run: a.run,
        from: a.from,
        to: a.to,
        stat: None,
    };
    if a.stat {
        let stat = c.diff_stat(a.session, &q).await?;
        for f in &stat.files {
            if f.binary {
                println!("{:>6} {:>6}  {} (binary)", "-", "-", f.path);
            } else {
                println!(
                    "{:>+6} {:>6}  {}",
                    f.insertions,
                    format!("-{}", f.deletions),
                    f.path
                );
            }
        }
        let files = u32::try_from(stat.files.len()).unwrap_or(u32::MAX);
        println!("{}", summary(files, stat.insertions, stat.deletions));
    } else {
        let text = c.diff(a.session, &q).await?;
        if text.is_empty() {
            eprintln!("no changes");
        }
        print!("{text}");
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn undo(settings: &Settings, a: UndoArgs) -> Result<ExitCode> {
    let c = client(settings)?;
    let list = c.checkpoints(a.session).await?.checkpoints;
    let Some(last) = switchboard_protocol::last_change(&list) else {
        eprintln!(
            "no run of session {} changed files: nothing to undo",
            a.session
        );
        return Ok(ExitCode::FAILURE);
    };
    let Some(target) = &last.parent else {
        eprintln!("the last change has no checkpoint before it");
        return Ok(ExitCode::FAILURE);
    };
    let r = c.restore(a.session, target).await?;
    let run = last
        .run_id
        .map(|r| format!(" of run {r}"))
        .unwrap_or_default();
    println!(
        "undid the changes{run}: {}",
        summary(r.files, r.insertions, r.deletions)
    );
    println!("to redo: switchboard restore {} {}", a.session, r.backup);
    Ok(ExitCode::SUCCESS)
}

pub async fn restore(settings: &Settings, a: RestoreArgs) -> Result<ExitCode> {
    let c = client(settings)?;
    let mut id = a.checkpoint.clone();
    // A prefix as `checkpoints` prints it.
    if id.len() < 40 {
        let list = c.checkpoints(a.session).await?.checkpoints;
        let matches: Vec<_> = list.iter().filter(|c| c.id.starts_with(&id)).collect();
        match matches.as_slice() {
            [one] => id = one.id.clone(),
            [] => anyhow::bail!("no checkpoint {id} in session {}", a.session),
            _ => anyhow::bail!("{id} names several checkpoints; give more of it"),
        }
    }
    let r = c.restore(a.session, &id).await?;
    println!(
        "restored {}: {}",
        &r.restored[..12.min(r.restored.len())],
        summary(r.files, r.insertions, r.deletions)
    );
    println!("to go back: switchboard restore {} {}", a.session, r.backup);
    Ok(ExitCode::SUCCESS)
}
