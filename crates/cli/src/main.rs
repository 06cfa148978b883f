//! The `switchboard` binary: thin wiring of the library crates.

mod checkpoint_cmd;
mod commands;
mod config;
mod datadir;
mod doctor;
mod gateway_cmd;
mod heap;
mod hub_cmd;
mod live;
mod local_model;
mod relay_cmd;
mod sandbox_cmd;
mod schedule_cmd;
mod search_cmd;
mod serve;
mod setup;
mod team_cmd;
mod telemetry;
mod usage_cmd;
mod workspace;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// jemalloc for the whole process (see crates/cli/Cargo.toml and docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Switchboard: a self-hosted gateway for AI agents.
#[derive(Parser)]
#[command(name = "switchboard", version, about, long_about = None, propagate_version = true)]
struct Cli {
    /// Configuration file (default: $XDG_CONFIG_HOME/switchboard/switchboard.toml).
    #[arg(long, global = true, env = "SWITCHBOARD_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Set up a model provider (and a chat channel) step by step, checking each answer;
    /// writes the configuration file and, mode 0600, the secrets file beside it. With flags
    /// and `--yes`, asks nothing.
    Setup(setup::SetupArgs),
    /// Run the server: the /v1 HTTP + SSE API on one port.
    Serve {
        /// Address to listen on, e.g. 127.0.0.1:7070 (port 0 picks a free one).
        #[arg(long, env = "SWITCHBOARD_LISTEN")]
        listen: Option<String>,
        /// Data directory holding the database and the token file.
        #[arg(long, env = "SWITCHBOARD_DATA_DIR")]
        data_dir: Option<PathBuf>,
        /// Store URL: sqlite://PATH or postgres://user:password@host/db (default: SQLite in
        /// the data directory).
        #[arg(long, env = "SWITCHBOARD_STORE_URL")]
        store: Option<String>,
        /// Event bus joining several instances: nats://host:4222 (default: none).
        #[arg(long, env = "SWITCHBOARD_BUS_URL")]
        bus: Option<String>,
    },
    /// List, create, show or delete sessions on a running server.
    #[command(subcommand)]
    Sessions(commands::SessionsCommand),
    /// Send a message and stream the reply (creates a session when none is given).
    Chat(commands::ChatArgs),
    /// Run the chat gateway on its own, against a Switchboard server.
    Gateway {
        /// The server's URL.
        #[arg(long, env = "SWITCHBOARD_URL")]
        server: String,
        /// Address for the gateway API and inbound webhooks.
        #[arg(long, default_value = "127.0.0.1:7071")]
        listen: String,
        #[arg(long, env = "SWITCHBOARD_DATA_DIR")]
        data_dir: Option<PathBuf>,
    },
    /// Chat channels.
    #[command(subcommand)]
    Channels(gateway_cmd::ChannelsCommand),
    /// Unknown chats that asked to pair: list, approve or refuse their requests.
    #[command(subcommand)]
    Pairing(gateway_cmd::PairingCommand),
    /// Answer the tool calls a session waits on (accept all, or --deny).
    Approve(commands::ApproveArgs),
    /// Search every session's transcript and file names (words, "phrases", prefix*).
    Search(search_cmd::SearchArgs),
    /// A session's workspace checkpoints (one before and after each run that changed files).
    Checkpoints(checkpoint_cmd::CheckpointsArgs),
    /// What a run changed in the workspace (default: the last run that changed files).
    Diff(checkpoint_cmd::DiffArgs),
    /// Put the workspace back to before the last run that changed files.
    Undo(checkpoint_cmd::UndoArgs),
    /// Put the workspace back to a checkpoint (a prefix of its id will do).
    Restore(checkpoint_cmd::RestoreArgs),
    /// Bundles of agents that message each other: up, down, list, send, look, check.
    #[command(subcommand)]
    Relay(relay_cmd::RelayCommand),
    /// MCP server (stdio): for an agent in a bundle the tools list, send and look; for the
    /// agent of a session (`--session`, passed to ACP agents by Switchboard) send_file; with
    /// `--hub`, Switchboard's sessions as tools for any MCP client.
    Mcp(relay_cmd::McpArgs),
    /// Scheduled tasks: prompts that run on a schedule and report to a chat.
    #[command(subcommand)]
    Schedule(schedule_cmd::ScheduleCommand),
    /// A team's people: add, list, set-role, passwd, remove, link, unlink (docs/teams.md).
    #[command(subcommand)]
    Users(team_cmd::UsersCommand),
    /// Personal API tokens with scopes: create, list, revoke, scopes.
    #[command(subcommand)]
    Tokens(team_cmd::TokensCommand),
    /// The audit log: sign-ins, tokens, roles, approvals, settings changes.
    Audit(team_cmd::AuditArgs),
    /// What model calls used and cost: `switchboard usage --by model --since 7d` (docs/usage.md).
    Usage(usage_cmd::UsageArgs),
    /// Budgets that stop spending before it happens: list, set, remove.
    #[command(subcommand)]
    Budgets(usage_cmd::BudgetsCommand),
    /// Switchboard as an ACP agent on stdio, for editors: their sessions are Switchboard
    /// sessions, with every backend, the durable log and the approvals.
    Acp(hub_cmd::AcpArgs),
    /// Check configuration, data directory, store and provider, with a verdict for each.
    Doctor {
        /// Data directory to check.
        #[arg(long, env = "SWITCHBOARD_DATA_DIR")]
        data_dir: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    // The sandbox's launcher: before anything else (no runtime, no threads, no logging), it
    // confines itself and becomes the command.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args
        .get(1)
        .is_some_and(|a| a == switchboard_sandbox::SUBCOMMAND)
    {
        return sandbox_cmd::exec(&args[2..]);
    }
    let cli = Cli::parse();
    telemetry::init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Setup(args) => setup::run(cli.config, args).await,
            Command::Serve {
                listen,
                data_dir,
                store,
                bus,
            } => {
                let mut settings = config::Settings::load(
                    cli.config.as_deref(),
                    data_dir.as_deref(),
                    listen.as_deref(),
                )?;
                if store.is_some() {
                    settings.store_url = store;
                }
                if bus.is_some() {
                    settings.bus_url = bus;
                }
                serve::run(settings).await.map(|_| ExitCode::SUCCESS)
            }
            Command::Sessions(cmd) => {
                let settings = config::Settings::load(cli.config.as_deref(), None, None)?;
                commands::sessions(&settings, cmd)
                    .await
                    .map(|_| ExitCode::SUCCESS)
            }
            Command::Chat(args) => {
                let settings = config::Settings::load(cli.config.as_deref(), None, None)?;
                commands::chat(&settings, args).await
            }
            Command::Gateway {
                server,
                listen,
                data_dir,
            } => {
                let settings =
                    config::Settings::load(cli.config.as_deref(), data_dir.as_deref(), None)?;
                gateway_cmd::run_standalone(&settings, &server, &listen).await
            }
            Command::Channels(cmd) => {
                let settings = config::Settings::load(cli.config.as_deref(), None, None)?;
                gateway_cmd::channels(&settings, cmd).await
            }
            Command::Pairing(cmd) => {
                let settings = config::Settings::load(cli.config.as_deref(), None, None)?;
                gateway_cmd::pairing(&settings, cmd).await
            }
            Command::Approve(args) => {
                let settings = config::Settings::load(cli.config.as_deref(), None, None)?;
                commands::approve(&settings, args).await
            }
            Command::Search(args) => {
                let settings = config::Settings::load(cli.config.as_deref(), None, None)?;
                search_cmd::search(&settings, args).await
            }
            Command::Checkpoints(a) => {
                let settings = config::Settings::load(cli.config.as_deref(), None, None)?;
                checkpoint_cmd::checkpoints(&settings, a).await
            }
            Command::Diff(a) => {
                let settings = config::Settings::load(cli.config.as_deref(), None, None)?;
                checkpoint_cmd::diff(&settings, a).await
            }
            Command::Undo(a) => {
                let settings = config::Settings::load(cli.config.as_deref(), None, None)?;
                checkpoint_cmd::undo(&settings, a).await
            }
            Command::Restore(a) => {
                let settings = config::Settings::load(cli.config.as_deref(), None, None)?;
                checkpoint_cmd::restore(&settings, a).await
            }
            Command::Relay(cmd) => match relay_cmd::member_client(&cmd)? {
                // A hosted member needs no configuration file (in the sandbox it cannot
                // read the server's).
                Some(c) => relay_cmd::relay_with(c, cmd).await,
                None => {
                    let settings = config::Settings::load(cli.config.as_deref(), None, None)?;
                    relay_cmd::relay(&settings, cmd).await
                }
            },
            Command::Mcp(args) => relay_cmd::mcp(cli.config.as_deref(), args).await,
            Command::Schedule(cmd) => {
                let settings = config::Settings::load(cli.config.as_deref(), None, None)?;
                schedule_cmd::schedule(&settings, cmd).await
            }
            Command::Users(cmd) => {
                let settings = config::Settings::load(cli.config.as_deref(), None, None)?;
                team_cmd::users(&settings, cmd).await
            }
            Command::Tokens(cmd) => {
                let settings = config::Settings::load(cli.config.as_deref(), None, None)?;
                team_cmd::tokens(&settings, cmd).await
            }
            Command::Audit(args) => {
                let settings = config::Settings::load(cli.config.as_deref(), None, None)?;
                team_cmd::audit(&settings, args).await
            }
            Command::Usage(args) => {
                let settings = config::Settings::load(cli.config.as_deref(), None, None)?;
                usage_cmd::usage(&settings, args).await
            }
            Command::Budgets(cmd) => {
                let settings = config::Settings::load(cli.config.as_deref(), None, None)?;
                usage_cmd::budgets(&settings, cmd).await
            }
            Command::Acp(args) => {
                let settings = config::Settings::load(cli.config.as_deref(), None, None)?;
                hub_cmd::acp(&settings, args).await
            }
            Command::Doctor { data_dir } => {
                doctor::run(cli.config.as_deref(), data_dir.as_deref()).await
            }
        }
    });
    drop(runtime);
    telemetry::shutdown();
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
