//! `switchboard relay …` and `switchboard mcp`: the relay from the command line, and the
//! MCP server that lets an agent in a bundle list, message and look at its peers.

use std::io::Read;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use serde::Serialize;
use switchboard_client::{Client, RelayClientError};
use switchboard_protocol::relay::{
    Delivery, HostingResult, SendRequest, SendStatus, TransportKind,
};
use switchboard_relay::mcp::{McpInfo, McpSend, McpTools, RelayCallError, RelayOps, SessionOps};

use crate::commands::{client, server_url};
use crate::config::Settings;

#[derive(Subcommand)]
pub enum RelayCommand {
    /// Start every member of a bundle (what is already running is left alone).
    Up(BundleArg),
    /// Stop a bundle's members (only tmux sessions Switchboard started).
    Down(BundleArg),
    /// Bundles with their state and health.
    Bundles(JsonArg),
    /// A bundle's members with readiness, as MEMBER sees them.
    List {
        bundle: String,
        /// The member or principal asking (default: you, the token holder, who sees all).
        #[arg(long = "as")]
        as_member: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Send a message to members of a bundle (message from the argument or stdin).
    Send(SendArgs),
    /// The last lines of a member's pane (or transcript).
    Look {
        bundle: String,
        /// The member or principal asking.
        #[arg(long = "as")]
        as_member: String,
        target: String,
        /// How many lines (1–1000, default 120).
        #[arg(long)]
        lines: Option<u32>,
        #[arg(long)]
        json: bool,
    },
    /// The bundle's audit log, newest last.
    Audit {
        bundle: String,
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Only events starting with this (e.g. relay.send).
        #[arg(long)]
        event: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Validate bundle files the way start-up does (all of them when none is named).
    Check {
        bundle: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args)]
pub struct BundleArg {
    bundle: String,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct JsonArg {
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct SendArgs {
    bundle: String,
    /// The sending member (or principal).
    #[arg(long)]
    from: String,
    /// A target member; repeat for several.
    #[arg(long = "to", required_unless_present = "broadcast")]
    to: Vec<String>,
    /// Every member but the sender.
    #[arg(long, conflicts_with = "to")]
    broadcast: bool,
    /// Wait for each delivery's outcome instead of queueing.
    #[arg(long)]
    sync: bool,
    /// An id for this request: sending again with the same id does not deliver twice.
    #[arg(long)]
    request_id: Option<String>,
    /// tmux targets: how long the pane must stay unchanged.
    #[arg(long)]
    quiet_window_ms: Option<u64>,
    /// tmux targets: how long to wait for quiescence.
    #[arg(long)]
    quiescence_timeout_ms: Option<u64>,
    /// ACP and session targets: how long --sync waits for the member's turn.
    #[arg(long)]
    turn_timeout_ms: Option<u64>,
    /// The relayed message this answers (`msg_…`): it continues that message's chain.
    #[arg(long)]
    in_reply_to: Option<String>,
    #[arg(long)]
    json: bool,
    /// The message; read from stdin when absent.
    message: Option<String>,
}

#[derive(Args)]
pub struct McpArgs {
    /// The bundle the agent belongs to (with --member: the relay tools).
    #[arg(long, env = "SWITCHBOARD_RELAY_BUNDLE", requires = "member")]
    bundle: Option<String>,
    /// The agent's member id in the bundle.
    #[arg(long, env = "SWITCHBOARD_RELAY_MEMBER", requires = "bundle")]
    member: Option<String>,
    /// The session the agent works for (the session tools: `send_file`, `search_sessions`). Switchboard passes
    /// this to the ACP agents it starts, with the session's own token in
    /// SWITCHBOARD_SESSION_TOKEN.
    #[arg(long, env = "SWITCHBOARD_SESSION")]
    session: Option<uuid::Uuid>,
    /// Switchboard's sessions as tools, for an MCP client (a desktop assistant, an IDE):
    /// list and start sessions, send a message and wait for the reply, read a transcript,
    /// see and decide approvals — with this command's server and token (SWITCHBOARD_URL,
    /// SWITCHBOARD_TOKEN). The same tools as `/v1/mcp`.
    #[arg(long, conflicts_with_all = ["bundle", "member", "session"])]
    hub: bool,
}

fn print_json<T: Serialize>(v: &T) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

/// Prints a relay error (as JSON with --json) and gives the exit code.
fn fail(e: &RelayClientError, json: bool) -> Result<ExitCode> {
    if json {
        print_json(&serde_json::json!({
            "code": e.code(),
            "message": e.message(),
            "details": e.details(),
        }))?;
    } else {
        eprintln!("error: {} ({})", e.message(), e.code());
    }
    Ok(ExitCode::FAILURE)
}

/// The client of the relay commands: a hosted member (a tmux pane, a member's session)
/// has its own token in SWITCHBOARD_RELAY_TOKEN — this member of this bundle only — and
/// uses it; elsewhere the API token, as for the other commands.
/// The client of a hosted member (`SWITCHBOARD_RELAY_TOKEN` set) for `cmd`, which needs no
/// configuration: `None` elsewhere, and for `check` (which reads the bundles directory).
pub fn member_client(cmd: &RelayCommand) -> Result<Option<Client>> {
    if matches!(cmd, RelayCommand::Check { .. }) {
        return Ok(None);
    }
    member_token_client()
}

/// The client of a hosted member, with its own token, if it has one.
fn member_token_client() -> Result<Option<Client>> {
    match std::env::var("SWITCHBOARD_RELAY_TOKEN")
        .ok()
        .filter(|t| !t.is_empty())
    {
        Some(t) => Client::new(server_url(), Some(t))
            .map(Some)
            .map_err(|e| anyhow::anyhow!("{e}")),
        None => Ok(None),
    }
}

pub async fn relay(settings: &Settings, cmd: RelayCommand) -> Result<ExitCode> {
    if let RelayCommand::Check { bundle, json } = cmd {
        return check(settings, bundle.as_deref(), json);
    }
    let c = match member_client(&cmd)? {
        Some(c) => c,
        None => client(settings)?,
    };
    relay_with(c, cmd).await
}

/// A relay command but `check`, through `c`.
pub async fn relay_with(c: Client, cmd: RelayCommand) -> Result<ExitCode> {
    match cmd {
        RelayCommand::Check { .. } => Ok(ExitCode::SUCCESS),
        RelayCommand::Up(a) => hosting(c.relay_up(&a.bundle).await, a.json),
        RelayCommand::Down(a) => hosting(c.relay_down(&a.bundle).await, a.json),
        RelayCommand::Bundles(a) => match c.relay_bundles().await {
            Err(e) => fail(&e, a.json),
            Ok(r) if a.json => print_json(&r).map(|_| ExitCode::SUCCESS),
            Ok(r) => {
                if r.bundles.is_empty() && r.invalid.is_empty() {
                    println!("no bundles (put BUNDLE.toml files in the bundles directory)");
                }
                for b in &r.bundles {
                    println!(
                        "{:<20} {:<5} {:<9} {}/{} ready{}",
                        b.name,
                        json_word(&b.state),
                        json_word(&b.health),
                        b.ready,
                        b.members,
                        b.reason_code
                            .as_deref()
                            .map(|c| format!(" ({c})"))
                            .unwrap_or_default()
                    );
                }
                for i in &r.invalid {
                    println!("{:<20} invalid   {}", i.file, i.error);
                }
                Ok(ExitCode::SUCCESS)
            }
        },
        RelayCommand::List {
            bundle,
            as_member,
            json,
        } => match c.relay_list(&bundle, as_member.as_deref()).await {
            Err(e) => fail(&e, json),
            Ok(r) if json => print_json(&r).map(|_| ExitCode::SUCCESS),
            Ok(r) => {
                println!(
                    "bundle {}: {}, {}{}",
                    r.bundle,
                    json_word(&r.state),
                    json_word(&r.health),
                    r.reason_code
                        .as_deref()
                        .map(|c| format!(" ({c})"))
                        .unwrap_or_default()
                );
                for m in &r.members {
                    println!(
                        "  {:<16} {:<20} {:<8} {}{}",
                        m.id,
                        m.name,
                        transport(m.transport),
                        if m.ready { "ready" } else { "not ready" },
                        m.reason_code
                            .as_deref()
                            .map(|c| format!(" ({c})"))
                            .unwrap_or_default()
                    );
                }
                if let Some(f) = &r.startup_failures.latest {
                    println!(
                        "  {} startup failure(s); latest: {} {} at {}: {}",
                        r.startup_failures.count, f.member, f.code, f.at, f.reason
                    );
                }
                Ok(ExitCode::SUCCESS)
            }
        },
        RelayCommand::Send(a) => send(&c, a).await,
        RelayCommand::Look {
            bundle,
            as_member,
            target,
            lines,
            json,
        } => match c.relay_look(&bundle, &as_member, &target, lines).await {
            Err(e) => fail(&e, json),
            Ok(r) if json => print_json(&r).map(|_| ExitCode::SUCCESS),
            Ok(r) => {
                for l in &r.lines {
                    println!("{l}");
                }
                for e in &r.entries {
                    println!("[{} {}]\n{}\n", e.at, e.role, e.content);
                }
                if !r.fresh {
                    eprintln!(
                        "({target} is in a turn; its newest output is not in the transcript yet)"
                    );
                }
                Ok(ExitCode::SUCCESS)
            }
        },
        RelayCommand::Audit {
            bundle,
            limit,
            event,
            json,
        } => match c.relay_audit(&bundle, Some(limit), event.as_deref()).await {
            Err(e) => fail(&e, json),
            Ok(r) if json => print_json(&r).map(|_| ExitCode::SUCCESS),
            Ok(r) => {
                for e in &r.entries {
                    println!("{e}");
                }
                Ok(ExitCode::SUCCESS)
            }
        },
    }
}

fn json_word<T: Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

fn transport(t: TransportKind) -> &'static str {
    t.as_str()
}

fn hosting(
    r: Result<switchboard_protocol::relay::HostingResponse, RelayClientError>,
    json: bool,
) -> Result<ExitCode> {
    let r = match r {
        Err(e) => return fail(&e, json),
        Ok(r) => r,
    };
    if json {
        print_json(&r)?;
    } else {
        let what = match r.result {
            HostingResult::Hosted => "hosted".to_string(),
            HostingResult::Unhosted => "unhosted".to_string(),
            HostingResult::Skipped => format!(
                "skipped ({})",
                r.reason_code.as_deref().unwrap_or("nothing to do")
            ),
        };
        println!("bundle {}: {what}", r.bundle);
        for m in &r.members {
            match (&m.code, &m.reason) {
                (Some(c), Some(reason)) => println!("  {:<16} {} ({c}: {reason})", m.id, m.result),
                _ => println!("  {:<16} {}", m.id, m.result),
            }
        }
    }
    let failed = r.members.iter().any(|m| m.result == "failed");
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

async fn send(c: &Client, a: SendArgs) -> Result<ExitCode> {
    let message = match a.message {
        Some(m) => m,
        None => {
            if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
                bail!("no message: give it as an argument or pipe it on stdin");
            }
            let mut bytes = Vec::new();
            std::io::stdin()
                .read_to_end(&mut bytes)
                .context("reading the message from stdin")?;
            // Not UTF-8 (say, a diff of a Latin-1 file): keep what can be read.
            String::from_utf8_lossy(&bytes).into_owned()
        }
    };
    let req = SendRequest {
        // An id by default, so that a retry after a lost answer cannot deliver twice.
        request_id: Some(
            a.request_id
                .unwrap_or_else(|| uuid::Uuid::now_v7().to_string()),
        ),
        sender: a.from,
        message,
        targets: a.to,
        broadcast: a.broadcast,
        delivery: if a.sync {
            Delivery::Sync
        } else {
            Delivery::Async
        },
        quiet_window_ms: a.quiet_window_ms,
        quiescence_timeout_ms: a.quiescence_timeout_ms,
        turn_timeout_ms: a.turn_timeout_ms,
        in_reply_to: a.in_reply_to,
        ..SendRequest::default()
    };
    let r = match c.relay_send(&a.bundle, &req).await {
        Err(e) => return fail(&e, a.json),
        Ok(r) => r,
    };
    if a.json {
        print_json(&r)?;
    } else {
        for t in &r.results {
            let why = match (&t.reason_code, &t.reason) {
                (Some(c), Some(r)) => format!(" ({c}: {r})"),
                (Some(c), None) => format!(" ({c})"),
                _ => String::new(),
            };
            println!(
                "{:<16} {:<9} {}{why}",
                t.target,
                json_word(&t.outcome),
                t.message_id
            );
        }
    }
    Ok(match r.status {
        SendStatus::Success | SendStatus::Accepted => ExitCode::SUCCESS,
        SendStatus::Partial | SendStatus::Failure => ExitCode::FAILURE,
    })
}

fn check(settings: &Settings, bundle: Option<&str>, json: bool) -> Result<ExitCode> {
    let dir = switchboard_relay::BundleDir::new(
        settings.relay.bundles_dir.clone(),
        settings.agents.keys().cloned().collect(),
    );
    let names = match bundle {
        Some(b) => vec![b.to_string()],
        None => dir.names().map_err(|e| anyhow::anyhow!("{e}"))?,
    };
    let mut ok_names = Vec::new();
    let mut invalid = Vec::new();
    if let Err(e) = dir.policies() {
        invalid.push(switchboard_protocol::relay::InvalidBundle {
            file: "policies.toml".into(),
            error: e.to_string(),
        });
    }
    for n in &names {
        match dir.load(n) {
            Ok(_) => ok_names.push(n.clone()),
            Err(e) => {
                let file = format!("{n}.toml");
                if !invalid
                    .iter()
                    .any(|i| i.file == file && i.error == e.to_string())
                {
                    invalid.push(switchboard_protocol::relay::InvalidBundle {
                        file,
                        error: e.to_string(),
                    });
                }
            }
        }
    }
    let ok = invalid.is_empty();
    if json {
        print_json(&switchboard_protocol::relay::CheckResponse {
            schema_version: switchboard_protocol::relay::RELAY_SCHEMA_VERSION,
            ok,
            bundles: ok_names,
            invalid,
        })?;
    } else {
        if names.is_empty() {
            println!(
                "no bundle files in {}",
                settings.relay.bundles_dir.display()
            );
        }
        for n in &ok_names {
            println!("ok       {n}.toml");
        }
        for i in &invalid {
            println!("invalid  {}", i.error);
        }
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The MCP tools' calls, made over the relay's HTTP API as one member.
struct HttpOps {
    client: Client,
    bundle: String,
    member: String,
}

fn call_error(e: RelayClientError) -> RelayCallError {
    RelayCallError {
        code: e.code().to_string(),
        message: e.message(),
        details: e.details(),
    }
}

fn to_value<T: Serialize>(v: &T) -> Result<serde_json::Value, RelayCallError> {
    serde_json::to_value(v).map_err(|e| RelayCallError {
        code: "internal_error".into(),
        message: e.to_string(),
        details: serde_json::json!({}),
    })
}

#[async_trait::async_trait]
impl RelayOps for HttpOps {
    async fn list(&self) -> Result<serde_json::Value, RelayCallError> {
        let r = self
            .client
            .relay_list(&self.bundle, Some(&self.member))
            .await
            .map_err(call_error)?;
        to_value(&r)
    }

    async fn send(&self, req: McpSend) -> Result<serde_json::Value, RelayCallError> {
        let body = SendRequest {
            request_id: Some(uuid::Uuid::now_v7().to_string()),
            sender: self.member.clone(),
            message: req.message,
            targets: req.targets,
            broadcast: req.broadcast,
            delivery: if req.sync {
                Delivery::Sync
            } else {
                Delivery::Async
            },
            in_reply_to: req.in_reply_to,
            ..SendRequest::default()
        };
        let r = self
            .client
            .relay_send(&self.bundle, &body)
            .await
            .map_err(call_error)?;
        to_value(&r)
    }

    async fn look(
        &self,
        target: String,
        lines: Option<u32>,
    ) -> Result<serde_json::Value, RelayCallError> {
        let r = self
            .client
            .relay_look(&self.bundle, &self.member, &target, lines)
            .await
            .map_err(call_error)?;
        to_value(&r)
    }
}

/// The session tools' calls, made over the HTTP API with the session's own token.
struct SessionHttpOps {
    client: Client,
    session: uuid::Uuid,
}

#[async_trait::async_trait]
impl SessionOps for SessionHttpOps {
    async fn search(
        &self,
        query: String,
        limit: Option<u32>,
    ) -> Result<serde_json::Value, RelayCallError> {
        let params = switchboard_protocol::search::SearchParams {
            q: query,
            limit,
            ..Default::default()
        };
        let found = self
            .client
            .session_search(self.session, &params)
            .await
            .map_err(session_call_error)?;
        to_value(&found)
    }

    async fn send_file(
        &self,
        path: String,
        caption: Option<String>,
    ) -> Result<serde_json::Value, RelayCallError> {
        let req = switchboard_protocol::ShareFileRequest {
            path,
            caption,
            run_id: None,
        };
        let shared = self
            .client
            .share_file(self.session, &req)
            .await
            .map_err(session_call_error)?;
        to_value(&shared)
    }
}

/// The server's refusal as the MCP tool's error (its code, message and status).
fn session_call_error(e: switchboard_client::ClientError) -> RelayCallError {
    match e {
        switchboard_client::ClientError::Api {
            status,
            code,
            message,
            ..
        } => RelayCallError {
            code,
            message,
            details: serde_json::json!({"status": status}),
        },
        other => RelayCallError {
            code: "unavailable".into(),
            message: other.to_string(),
            details: serde_json::json!({}),
        },
    }
}

/// `switchboard mcp`: an MCP server on stdin/stdout with the relay tools for one member of
/// one bundle, the session tools for one session, or both.
///
/// A member's own token (see [`member_client`]), else the API token of the configuration at
/// `config`: an MCP server started with its own tokens (by an agent, in the sandbox, where
/// the server's configuration cannot be read) reads no configuration.
pub async fn mcp(config: Option<&std::path::Path>, a: McpArgs) -> Result<ExitCode> {
    if a.hub {
        let client = client(&Settings::load(config, None, None)?)?;
        switchboard_hub::mcp::serve_stdio(client)
            .await
            .map_err(|e| anyhow::anyhow!("MCP server: {e}"))?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut tools = McpTools::default();
    if let (Some(bundle), Some(member)) = (a.bundle, a.member) {
        if !switchboard_relay::config::valid_id(&bundle)
            || !switchboard_relay::config::valid_id(&member)
        {
            bail!("--bundle and --member must be ids (a letter, then letters, digits, _ or -)");
        }
        let client = match member_token_client()? {
            Some(c) => c,
            None => client(&Settings::load(config, None, None)?)?,
        };
        let ops = HttpOps {
            client,
            bundle: bundle.clone(),
            member: member.clone(),
        };
        tools.relay = Some((Arc::new(ops), McpInfo { bundle, member }));
    }
    if let Some(session) = a.session {
        // The session's own token, never the server's: what this process can do is share
        // files into that session's running turn, nothing more.
        let token = std::env::var("SWITCHBOARD_SESSION_TOKEN")
            .ok()
            .filter(|t| !t.is_empty());
        let Some(token) = token else {
            bail!(
                "--session needs SWITCHBOARD_SESSION_TOKEN (Switchboard sets it for the agents it starts)"
            );
        };
        let client = Client::new(server_url(), Some(token)).map_err(|e| anyhow::anyhow!("{e}"))?;
        tools.session = Some(Arc::new(SessionHttpOps { client, session }));
    }
    if tools.relay.is_none() && tools.session.is_none() {
        bail!(
            "give --bundle and --member (relay tools), --session (session tools), or both; or --hub (Switchboard's sessions as tools)"
        );
    }
    switchboard_relay::mcp::serve_stdio(tools)
        .await
        .map_err(|e| anyhow::anyhow!("MCP server: {e}"))?;
    Ok(ExitCode::SUCCESS)
}
