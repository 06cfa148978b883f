//! `switchboard gateway`, `switchboard channels test`, `switchboard pairing list|approve|refuse`.

use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::Subcommand;

use crate::config::Settings;
use crate::serve;

#[derive(Subcommand)]
pub enum ChannelsCommand {
    /// Check each configured channel (or one): prints the bot identity or the exact failure.
    Test {
        /// `telegram`, `slack`, `discord`, `matrix`, `email`, `whatsapp`, `mattermost`, `signal`, `teams` or `webhook:NAME`; default: all configured.
        name: Option<String>,
    },
}

#[derive(Subcommand)]
pub enum PairingCommand {
    /// The pending requests: channel, code, who asked, when the code expires.
    List,
    /// Allow the chat that asked for CODE (shown to the person who wrote to the bot).
    Approve { channel: String, code: String },
    /// Refuse the request with CODE: it is deleted and the person is told.
    Refuse { channel: String, code: String },
}

fn gateway_settings(settings: &Settings) -> Result<&crate::config::GatewaySettings> {
    settings.gateway.as_ref().context(
        "no chat channel is configured: set SWITCHBOARD_TELEGRAM_TOKEN, SWITCHBOARD_SLACK_BOT_TOKEN or SWITCHBOARD_DISCORD_TOKEN, or add [channels.telegram|slack|discord] / [channels.webhook.NAME] to switchboard.toml",
    )
}

pub async fn channels(settings: &Settings, cmd: ChannelsCommand) -> Result<ExitCode> {
    let ChannelsCommand::Test { name } = cmd;
    let g = gateway_settings(settings)?;
    let channels = g.channels()?;
    let mut failed = false;
    let mut tested = 0;
    for ch in channels {
        if name.as_deref().is_some_and(|n| n != ch.name()) {
            continue;
        }
        tested += 1;
        match ch.test().await {
            Ok(identity) => println!("{}: ok — {identity}", ch.name()),
            Err(e) => {
                failed = true;
                println!("{}: FAILED — {e}", ch.name());
            }
        }
    }
    if tested == 0 {
        bail!(
            "no channel named {:?} is configured",
            name.unwrap_or_default()
        );
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// `switchboard pairing …`: the same functions as `/v1/gateway/pairing*`
/// ([`switchboard_gateway::pairing`]), on the gateway's store.
pub async fn pairing(settings: &Settings, cmd: PairingCommand) -> Result<ExitCode> {
    use switchboard_gateway::pairing;
    let store = crate::serve::open_gateway_store(settings).await?;
    let (decided, channel, code) = match cmd {
        PairingCommand::List => {
            let pending = pairing::pending(&store).await?;
            if pending.is_empty() {
                println!("no pending pairing requests");
            }
            for p in pending {
                println!(
                    "{} {}  {} ({}), chat {}, expires {}",
                    p.channel, p.code, p.peer.name, p.peer.id, p.chat.id, p.expires_at
                );
            }
            return Ok(ExitCode::SUCCESS);
        }
        PairingCommand::Approve { channel, code } => (
            pairing::approve(&store, &channel, &code)
                .await?
                .map(|p| ("paired", p)),
            channel,
            code,
        ),
        PairingCommand::Refuse { channel, code } => {
            // The person is told through the channel, when it is configured here.
            let channels = match settings.gateway.as_ref() {
                Some(g) => g.channels()?,
                None => Vec::new(),
            };
            let chat = channels.iter().find(|c| c.name() == channel);
            (
                pairing::refuse(&store, chat.map(|c| c.as_ref()), &channel, &code)
                    .await?
                    .map(|p| ("refused", p)),
                channel,
                code,
            )
        }
    };
    match decided {
        Some((what, p)) => {
            println!(
                "{what}: {} ({}) on {channel}, chat {}",
                p.peer.name, p.peer.id, p.chat.id
            );
            Ok(ExitCode::SUCCESS)
        }
        None => {
            eprintln!("no pending pairing with code {code:?} on {channel} (wrong or expired code)");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// `switchboard gateway --server URL`: the gateway as its own process, with its own HTTP
/// listener for the gateway API and inbound webhooks.
pub async fn run_standalone(settings: &Settings, server: &str, listen: &str) -> Result<ExitCode> {
    let g = gateway_settings(settings)?;
    let token = settings
        .token
        .clone()
        .or(crate::datadir::read_token(&settings.token_path())?)
        .context("no token for the server: set SWITCHBOARD_TOKEN")?;
    crate::datadir::ensure_data_dir(&settings.data_dir)?;
    // On a shared PostgreSQL store, the instances elect the one running the channels
    // through the engine's leases.
    let leases = if switchboard_db::is_postgres_url(&settings.store_url()) {
        let store = switchboard_store::open_url(&settings.store_url())
            .await
            .with_context(|| format!("opening {}", settings.store_url_redacted()))?;
        Some(serve::StoreLeases(store))
    } else {
        None
    };
    let host = serve::host(settings, server.to_string(), token.clone());
    let gw = serve::gateway_settings(settings, g)
        .start(&host, leases)
        .await?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let addr = listener.local_addr()?;
    println!("gateway listening on http://{addr} for server {server}");
    let router = switchboard_gateway::api::router(gw.slot.clone(), token);
    switchboard_http::serve(listener, router, settings.conn_limits, async move {
        crate::serve::shutdown_signal().await;
        gw.shutdown().await;
    })
    .await
    .context("serving HTTP")?;
    Ok(ExitCode::SUCCESS)
}
