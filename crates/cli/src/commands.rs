//! Client commands: `sessions …` and `chat`.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use std::collections::BTreeMap;
use switchboard_client::{Client, RunEnd, RunStep};

use switchboard_protocol::{
    CreateSessionRequest, DecisionAction, MessageType, PermissionMode, SendMessageRequest,
    ToolCall, ToolDecision, ToolDecisionsRequest,
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
        /// List archived sessions instead.
        #[arg(long)]
        archived: bool,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Hide a session from the default list (its transcript stays).
    Archive { id: Uuid },
    /// Bring an archived session back to the list.
    Unarchive { id: Uuid },
    /// Rename a session.
    Rename { id: Uuid, title: String },
    /// A new session with this one's history up to a point, to try another direction
    /// (same agent, workspace and settings); prints it.
    Fork {
        id: Uuid,
        /// The last event (seq) to keep; not inside a run. Default: the end of the log.
        #[arg(long)]
        at: Option<u64>,
        /// Default: "Fork of" the session's title.
        #[arg(long)]
        title: Option<String>,
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
    #[arg(long, visible_alias = "mode", value_parser = parse_mode)]
    pub permission_mode: Option<PermissionMode>,
    /// An ACP agent from the config (`[agents.NAME]`) instead of the built-in agent.
    #[arg(long)]
    pub agent: Option<String>,
}

fn parse_mode(s: &str) -> Result<PermissionMode, String> {
    serde_json::from_value(serde_json::Value::String(s.into()))
        .map_err(|_| "expected read-only, workspace-write or full-access".to_string())
}

#[derive(Args)]
pub struct ApproveArgs {
    /// The session whose pending tool calls to answer.
    pub session: Uuid,
    /// Reject instead of accepting.
    #[arg(long)]
    pub deny: bool,
    /// Why (given to the model with a rejection).
    #[arg(long, requires = "deny")]
    pub reason: Option<String>,
    /// Answer instead of running: the text is the call's result (`custom_result`) — how an
    /// agent's question (`acp__elicitation`) is answered: the form's fields as a JSON
    /// object, or plain text for the one field it fits. Without --call, only the agent's
    /// questions are answered.
    #[arg(long, conflicts_with = "deny")]
    pub answer: Option<String>,
    /// Decide only this call (repeatable); the others stay pending. Default: all.
    #[arg(long = "call", value_name = "ID")]
    pub calls: Vec<String>,
}

#[derive(Args)]
pub struct ChatArgs {
    /// `[SESSION] MESSAGE`: the session id (optional) and the message.
    #[arg(num_args = 1..=2, value_names = ["SESSION", "MESSAGE"], required = true)]
    pub args: Vec<String>,
    /// Send as a follow-up (queued until the active run ends) instead of a new message.
    #[arg(long)]
    pub follow_up: bool,
    /// Accept every tool call that waits for approval.
    #[arg(long, conflicts_with = "no")]
    pub yes: bool,
    /// Reject every tool call that waits for approval.
    #[arg(long)]
    pub no: bool,
    #[command(flatten)]
    pub create: CreateArgs,
}

/// A client for `SWITCHBOARD_URL` with `SWITCHBOARD_TOKEN` or the token file.
/// The server the commands talk to: `SWITCHBOARD_URL`, else the default listen address.
pub fn server_url() -> String {
    std::env::var("SWITCHBOARD_URL")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "http://127.0.0.1:7070".into())
}

pub fn client(settings: &Settings) -> Result<Client> {
    let url = server_url();
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
        backend: a.agent.clone().map(switchboard_protocol::BackendSpec::Acp),
        ..CreateSessionRequest::default()
    }
}

pub async fn sessions(settings: &Settings, cmd: SessionsCommand) -> Result<()> {
    let c = client(settings)?;
    match cmd {
        SessionsCommand::List {
            limit,
            offset,
            archived,
            json,
        } => {
            let list = if archived {
                c.list_archived_sessions(Some(limit), Some(offset)).await?
            } else {
                c.list_sessions(Some(limit), Some(offset)).await?
            };
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
        SessionsCommand::Archive { id } | SessionsCommand::Unarchive { id } => {
            let archive = matches!(cmd, SessionsCommand::Archive { .. });
            let req = switchboard_protocol::UpdateSessionRequest {
                title: None,
                archived: Some(archive),
                ..Default::default()
            };
            c.update_session(id, &req).await?;
            println!("{} {id}", if archive { "archived" } else { "unarchived" });
        }
        SessionsCommand::Rename { id, title } => {
            let req = switchboard_protocol::UpdateSessionRequest {
                title: Some(title),
                archived: None,
                ..Default::default()
            };
            print_json(&c.update_session(id, &req).await?)?;
        }
        SessionsCommand::Fork { id, at, title } => {
            let q = switchboard_protocol::ForkSessionQuery { at, title };
            print_json(&c.fork_session(id, &q).await?)?;
        }
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
        Some(id) => {
            let detail = c.get_session(id).await?;
            if let Some(m) = args.create.permission_mode
                && m != detail.config.permission_mode
            {
                bail!(
                    "the permission mode is chosen when a session is created; session {id} is {}",
                    mode_name(detail.config.permission_mode)
                );
            }
            (id, detail.session.last_event_id)
        }
        None => {
            let s = c.create_session(&create_request(&args.create)).await?;
            eprintln!("session {}", s.id);
            (s.id, 0)
        }
    };
    let kind = if args.follow_up {
        MessageType::FollowUp
    } else {
        MessageType::Message
    };
    let run_id = c
        .send_message(id, &SendMessageRequest::user(message, kind))
        .await?
        .run_id;
    // Followed from the end of the log before the send, so nothing is missed.
    let mut steps = c.follow_run(id, run_id, Some(after));
    let mut stdout = std::io::stdout();
    let mut wrote_text = false;
    let interactive = std::io::IsTerminal::is_terminal(&std::io::stdin());
    while let Some(step) = steps.next().await {
        let end_line = |wrote: &mut bool| {
            if std::mem::take(wrote) {
                println!();
            }
        };
        match step?.kind {
            RunStep::Text(delta) => {
                stdout.write_all(delta.as_bytes())?;
                stdout.flush()?;
                wrote_text = true;
            }
            RunStep::ToolsProposed(_) => end_line(&mut wrote_text),
            RunStep::ToolsWaiting(calls) => {
                end_line(&mut wrote_text);
                // Decide exactly the calls the server waits on; one the proposal did not
                // show (it should not happen) is shown by id and rejected unless --yes.
                let calls: Vec<ToolCall> = calls
                    .into_iter()
                    .map(|mut c| {
                        if c.name.is_empty() {
                            c.name = "(unknown)".into();
                        }
                        c
                    })
                    .collect();
                let waiting: Vec<&ToolCall> = calls.iter().collect();
                let answer = if args.yes {
                    Some(Answer::All(DecisionAction::Accept))
                } else if args.no {
                    Some(Answer::All(DecisionAction::Reject))
                } else if interactive {
                    Some(Answer::Each(ask_each(&waiting).await?))
                } else {
                    for call in &waiting {
                        eprintln!("? {}", describe(call));
                    }
                    eprintln!(
                        "waiting for approval: answer with `switchboard approve {id}` (or --deny), or rerun chat with --yes/--no"
                    );
                    None
                };
                if let Some(answer) = answer {
                    let decisions = answer.decisions(&waiting, "rejected with --no");
                    match c
                        .decide_tools(id, &ToolDecisionsRequest { run_id, decisions })
                        .await
                    {
                        Ok(_) => {}
                        // Someone else answered first (another terminal, a chat), or the
                        // approval timed out meanwhile.
                        Err(e) if e.code() == Some("no_pending_approval") => {
                            eprintln!("(no longer waiting: decided elsewhere or timed out)")
                        }
                        Err(e) if e.code() == Some("run_mismatch") => {
                            eprintln!("(another run waits now: {e})")
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            RunStep::ToolStarted { call, .. } => {
                end_line(&mut wrote_text);
                // A call the follower did not see proposed is known by its id only.
                if call.arguments.is_null() && call.metadata.is_none() {
                    eprintln!("→ {}", safe(&call.id));
                } else {
                    eprintln!("→ {}", preview(&call));
                }
            }
            RunStep::ToolFinished {
                result, is_error, ..
            } => {
                let lines = result.lines().count();
                let last = result.lines().last().unwrap_or("").trim();
                let mark = if is_error { "✗" } else { "✓" };
                eprintln!(
                    "  {mark} {lines} line(s){}",
                    if last.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", clip(last, 100))
                    }
                );
            }
            RunStep::Notice(message) => {
                end_line(&mut wrote_text);
                eprintln!("note: {}", safe(&message));
            }
            RunStep::Plan(entries) => {
                end_line(&mut wrote_text);
                eprintln!("plan:");
                for e in entries {
                    let mark = match e.status.as_str() {
                        "completed" => "[x]",
                        "in_progress" => "[~]",
                        _ => "[ ]",
                    };
                    eprintln!("  {mark} {}", safe(&e.content));
                }
            }
            RunStep::Thought(delta) => {
                eprint!("{}", safe(&delta));
            }
            RunStep::ToolRejected { reason, .. } => {
                end_line(&mut wrote_text);
                eprintln!("  ✗ not run: {}", safe(&reason));
            }
            RunStep::Ended(RunEnd::Completed { stop_reason, .. }) => {
                if wrote_text {
                    println!();
                }
                if stop_reason == switchboard_protocol::StopReason::Cancelled {
                    eprintln!("run cancelled");
                    return Ok(ExitCode::from(2));
                }
                return Ok(ExitCode::SUCCESS);
            }
            RunStep::Ended(RunEnd::Failed {
                code,
                error,
                retryable,
            }) => {
                if wrote_text {
                    println!();
                }
                eprintln!(
                    "error: {error}{}",
                    if retryable { " (retryable)" } else { "" }
                );
                if code == switchboard_protocol::RunErrorCode::NotConfigured {
                    eprintln!(
                        "choose a model in the console's Settings: {}/#/settings",
                        server_url().trim_end_matches('/')
                    );
                }
                return Ok(ExitCode::FAILURE);
            }
            RunStep::Ended(RunEnd::SessionGone) => {
                end_line(&mut wrote_text);
                bail!("session {id} was deleted before the run finished")
            }
            _ => {}
        }
    }
    bail!("the event stream ended before the run finished")
}

fn mode_name(m: PermissionMode) -> String {
    serde_json::to_value(m)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

fn clip(s: &str, max: usize) -> String {
    if s.chars().count() > max {
        format!("{}…", s.chars().take(max).collect::<String>())
    } else {
        s.to_string()
    }
}

/// Text from the model or a tool made safe for a terminal: control characters (escape
/// sequences that could repaint the screen, carriage returns that could hide a line) are
/// shown escaped. Newlines and tabs stay.
pub fn safe(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() && c != '\n' && c != '\t' {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// One line saying what a call would do: the agent's preview when it gave one, else the
/// name and arguments; terminal-safe.
pub fn preview(call: &ToolCall) -> String {
    let text = match call
        .metadata
        .as_ref()
        .and_then(|m| m.get("preview"))
        .and_then(|p| p.as_str())
    {
        Some(p) => clip(p, 200),
        None => clip(&format!("{} {}", call.name, call.arguments), 200),
    };
    safe(&text).replace('\n', "⏎")
}

/// Everything a call will do, for a person deciding on it: the whole command (every line)
/// or the whole arguments, terminal-safe, so nothing hides behind a short preview.
pub fn describe(call: &ToolCall) -> String {
    const MAX: usize = 8000;
    let body = match (call.name.as_str(), call.arguments.get("command")) {
        ("run_command", Some(serde_json::Value::String(cmd))) => cmd.clone(),
        _ => serde_json::to_string_pretty(&call.arguments).unwrap_or_default(),
    };
    let body = if body.chars().count() > MAX {
        format!(
            "{}\n[… {} more characters not shown; deny if unsure]",
            body.chars().take(MAX).collect::<String>(),
            body.chars().count() - MAX
        )
    } else {
        body
    };
    let indented: Vec<String> = safe(&body).lines().map(|l| format!("    {l}")).collect();
    format!(
        "{} ({})\n{}",
        safe(&call.name),
        safe(&call.id),
        indented.join("\n")
    )
}

enum Answer {
    All(DecisionAction),
    Each(Vec<(String, DecisionAction)>),
}

impl Answer {
    fn decisions(&self, calls: &[&ToolCall], reason: &str) -> BTreeMap<String, ToolDecision> {
        let decision = |action: DecisionAction| ToolDecision {
            action,
            content: (action == DecisionAction::Reject).then(|| reason.to_string()),
            by: Some("the terminal (switchboard chat)".to_string()),
            cause: None,
        };
        match self {
            Answer::All(a) => calls.iter().map(|c| (c.id.clone(), decision(*a))).collect(),
            Answer::Each(v) => v
                .iter()
                .map(|(id, a)| {
                    let mut d = decision(*a);
                    if *a == DecisionAction::Reject {
                        d.content = Some("rejected at the terminal".into());
                    }
                    (id.clone(), d)
                })
                .collect(),
        }
    }
}

/// Asks about each call on the terminal: `y` allows, anything else denies.
async fn ask_each(calls: &[&ToolCall]) -> Result<Vec<(String, DecisionAction)>> {
    let mut out = Vec::new();
    for call in calls {
        let prompt = format!("? {}\n  allow? [y/N] ", describe(call));
        let line = tokio::task::spawn_blocking(move || {
            eprint!("{prompt}");
            let _ = std::io::stderr().flush();
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).map(|_| line)
        })
        .await
        .context("reading the answer")??;
        let yes = matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes");
        out.push((
            call.id.clone(),
            if yes {
                DecisionAction::Accept
            } else {
                DecisionAction::Reject
            },
        ));
    }
    Ok(out)
}

/// `switchboard approve SESSION [--deny [--reason TEXT] | --answer TEXT]`: answers every
/// pending call.
pub async fn approve(settings: &Settings, args: ApproveArgs) -> Result<ExitCode> {
    let c = client(settings)?;
    let pending = c.pending_tools(args.session).await?;
    let Some(run_id) = pending.run_id else {
        eprintln!("nothing waits for approval in session {}", args.session);
        return Ok(ExitCode::FAILURE);
    };
    let action = if args.deny {
        DecisionAction::Reject
    } else if args.answer.is_some() {
        DecisionAction::CustomResult
    } else {
        DecisionAction::Accept
    };
    let content = args.answer.clone().or_else(|| args.reason.clone());
    for id in &args.calls {
        if !pending.tool_calls.iter().any(|c| &c.id == id) {
            let ids: Vec<&str> = pending.tool_calls.iter().map(|c| c.id.as_str()).collect();
            bail!("no pending call {id:?}; pending: {}", ids.join(", "));
        }
    }
    // An answer without --call goes to the agent's questions only: a tool call given it
    // would get a made-up result.
    let answering = args.answer.is_some() && args.calls.is_empty();
    let chosen: Vec<&ToolCall> = pending
        .tool_calls
        .iter()
        .filter(|c| args.calls.is_empty() || args.calls.contains(&c.id))
        .filter(|c| !answering || c.is_question())
        .collect();
    if answering && chosen.is_empty() {
        bail!(
            "no question of the agent waits in session {}; --answer gives a call's result only with --call ID",
            args.session
        );
    }
    let decisions = chosen
        .iter()
        .map(|call| {
            (
                call.id.clone(),
                ToolDecision {
                    action,
                    content: content.clone(),
                    by: Some("the CLI (switchboard approve)".to_string()),
                    cause: None,
                },
            )
        })
        .collect();
    c.decide_tools(args.session, &ToolDecisionsRequest { run_id, decisions })
        .await?;
    let verb = if args.deny { "rejected" } else { "accepted" };
    for call in &chosen {
        println!("{verb}: {}", describe(call));
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(args: serde_json::Value) -> ToolCall {
        ToolCall {
            id: "c1".into(),
            name: "run_command".into(),
            arguments: args,
            metadata: Some(json!({"preview": "run_command: ls"})),
        }
    }

    #[test]
    fn the_decision_shows_every_line_and_no_terminal_tricks() {
        let sneaky = call(json!({"command": "ls\nrm -rf ~ \u{1b}[2K\r? run_command: ls"}));
        let shown = describe(&sneaky);
        assert!(shown.contains("rm -rf ~"), "{shown}");
        assert!(
            !shown.contains('\u{1b}') && !shown.contains('\r'),
            "{shown:?}"
        );
        assert!(shown.contains("\\u{1b}[2K\\r"), "{shown}");
        // The one-line preview escapes too and keeps to one line.
        let p = preview(&call(json!({})));
        assert_eq!(p, "run_command: ls");
        let mut multi = sneaky.clone();
        multi.metadata = Some(json!({"preview": "a\nb\u{7}"}));
        assert_eq!(preview(&multi), "a⏎b\\u{7}");
    }
}
