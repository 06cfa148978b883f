//! Client commands: `sessions …` and `chat`.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use futures::StreamExt;
use switchboard_client::Client;
use switchboard_protocol::{
    AgentEvent, CreateSessionRequest, MessageType, PermissionMode, SendMessageRequest,
};
use uuid::Uuid;

use crate::config::Settings;
use crate::datadir;

#[derive(Subcommand)]
pub enum SessionsCommand {
    /// List sessions, newest first.
    List {
        #[arg(long, default_value_t = 50)]
        limit: u32,
        #[arg(long, default_value_t = 0)]
        offset: u32,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Create a session and print it.
    Create(CreateArgs),
    /// Show one session with its configuration (JSON).
    Show { id: Uuid },
    /// Delete a session with its transcript and events.
    Delete { id: Uuid },
}

#[derive(Args, Clone)]
pub struct CreateArgs {
    #[arg(long)]
    pub title: Option<String>,
    /// Workspace directory (absolute; default: the server's).
    #[arg(long)]
    pub cwd: Option<String>,
    #[arg(long)]
    pub model: Option<String>,
    /// read-only, workspace-write or full-access.
    #[arg(long, value_parser = parse_mode)]
    pub permission_mode: Option<PermissionMode>,
}

fn parse_mode(s: &str) -> Result<PermissionMode, String> {
    serde_json::from_value(serde_json::Value::String(s.into()))
        .map_err(|_| "expected read-only, workspace-write or full-access".to_string())
}

#[derive(Args)]
pub struct ChatArgs {
    /// `[SESSION] MESSAGE`: the session id (optional) and the message.
    #[arg(num_args = 1..=2, value_names = ["SESSION", "MESSAGE"], required = true)]
    pub args: Vec<String>,
    /// Send as a follow-up (queued until the active run ends) instead of a new message.
    #[arg(long)]
    pub follow_up: bool,
    #[command(flatten)]
    pub create: CreateArgs,
}

/// A client for `SWITCHBOARD_URL` with `SWITCHBOARD_TOKEN` or the token file.
pub fn client(settings: &Settings) -> Result<Client> {
    let url = std::env::var("SWITCHBOARD_URL")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "http://127.0.0.1:7070".into());
    let token = match &settings.token {
        Some(t) => Some(t.clone()),
        None => datadir::read_token(&settings.token_path())?,
    };
    if token.is_none() {
        bail!(
            "no token: set SWITCHBOARD_TOKEN or start `switchboard serve` once so it writes {}",
            settings.token_path().display()
        );
    }
    Client::new(url, token).map_err(|e| anyhow::anyhow!("{e}"))
}

fn print_json<T: serde::Serialize>(v: &T) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

fn create_request(a: &CreateArgs) -> CreateSessionRequest {
    CreateSessionRequest {
        title: a.title.clone(),
        cwd: a.cwd.clone(),
        model: a.model.clone(),
        permission_mode: a.permission_mode,
        ..CreateSessionRequest::default()
    }
}

pub async fn sessions(settings: &Settings, cmd: SessionsCommand) -> Result<()> {
    let c = client(settings)?;
    match cmd {
        SessionsCommand::List {
            limit,
            offset,
            json,
        } => {
            let list = c.list_sessions(Some(limit), Some(offset)).await?;
            if json {
                return print_json(&list);
            }
            println!("{:<36}  {:<8}  {:<20}  TITLE", "ID", "STATUS", "UPDATED");
            for s in &list.sessions {
                let status = serde_json::to_value(s.run_status)?
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                println!(
                    "{:<36}  {:<8}  {:<20}  {}",
                    s.id,
                    status,
                    s.updated_at.format("%Y-%m-%d %H:%M:%S"),
                    s.title
                );
            }
            println!("({} of {} sessions)", list.sessions.len(), list.total);
        }
        SessionsCommand::Create(a) => print_json(&c.create_session(&create_request(&a)).await?)?,
        SessionsCommand::Show { id } => print_json(&c.get_session(id).await?)?,
        SessionsCommand::Delete { id } => {
            c.delete_session(id).await?;
            println!("deleted {id}");
        }
    }
    Ok(())
}

pub async fn chat(settings: &Settings, args: ChatArgs) -> Result<ExitCode> {
    let c = client(settings)?;
    let (session, message) = match args.args.as_slice() {
        [m] => (None, m.clone()),
        [s, m] => (
            Some(Uuid::parse_str(s).with_context(|| format!("{s:?} is not a session id"))?),
            m.clone(),
        ),
        _ => bail!("usage: switchboard chat [SESSION] MESSAGE"),
    };
    let (id, after) = match session {
        Some(id) => (id, c.get_session(id).await?.session.last_event_id),
        None => {
            let s = c.create_session(&create_request(&args.create)).await?;
            eprintln!("session {}", s.id);
            (s.id, 0)
        }
    };
    // Subscribe from the current end of the log before sending, so nothing is missed.
    let mut events = c.subscribe(id, Some(after));
    let kind = if args.follow_up {
        MessageType::FollowUp
    } else {
        MessageType::Message
    };
    let run_id = c
        .send_message(id, &SendMessageRequest::user(message, kind))
        .await?
        .run_id;
    let mut stdout = std::io::stdout();
    let mut wrote_text = false;
    while let Some(item) = events.next().await {
        let env = match item {
            Ok(e) => e,
            Err(e) if e.is_transient() => continue,
            Err(e) => return Err(e.into()),
        };
        match env.event {
            AgentEvent::TextDelta { run_id: r, delta } if r == run_id => {
                stdout.write_all(delta.as_bytes())?;
                stdout.flush()?;
                wrote_text = true;
            }
            AgentEvent::RunCompleted {
                run_id: r,
                stop_reason,
                ..
            } if r == run_id => {
                if wrote_text {
                    println!();
                }
                if stop_reason == "cancelled" {
                    eprintln!("run cancelled");
                    return Ok(ExitCode::from(2));
                }
                return Ok(ExitCode::SUCCESS);
            }
            AgentEvent::RunError {
                run_id: r,
                error,
                retryable,
            } if r == run_id => {
                if wrote_text {
                    println!();
                }
                eprintln!(
                    "error: {error}{}",
                    if retryable { " (retryable)" } else { "" }
                );
                return Ok(ExitCode::FAILURE);
            }
            _ => {}
        }
    }
    bail!("the event stream ended before the run finished")
}
