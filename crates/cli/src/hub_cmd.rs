//! `switchboard acp`: Switchboard as an ACP agent on stdio, for editors that launch an
//! agent command (Zed's `agent_servers`, JetBrains, Neovim's ACP plugins).

use std::process::ExitCode;

use anyhow::Result;
use clap::Args;

use crate::commands;
use crate::config::Settings;

#[derive(Args)]
pub struct AcpArgs {
    /// The `[agents.NAME]` new sessions run (default: the server's default backend; an
    /// editor may name one per session in `_meta.switchboard.agent`).
    #[arg(long)]
    pub agent: Option<String>,
    /// Reach a remote server's `/v1/acp` WebSocket instead (ws:// or wss://): this process
    /// only bridges stdio to it.
    #[arg(long)]
    pub url: Option<String>,
}

pub async fn acp(settings: &Settings, args: AcpArgs) -> Result<ExitCode> {
    if let Some(url) = &args.url {
        let token = match &settings.token {
            Some(t) => Some(t.clone()),
            None => crate::datadir::read_token(&settings.token_path())?,
        };
        let url = match &args.agent {
            Some(a) => {
                let sep = if url.contains('?') { '&' } else { '?' };
                format!("{url}{sep}agent={a}")
            }
            None => url.clone(),
        };
        switchboard_hub::ws::bridge(&url, token.as_deref()).await?;
        return Ok(ExitCode::SUCCESS);
    }
    let client = commands::client(settings)?;
    let opts = switchboard_hub::HubOptions { agent: args.agent };
    switchboard_hub::serve_stdio(client, opts).await?;
    Ok(ExitCode::SUCCESS)
}
