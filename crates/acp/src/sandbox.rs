//! An ACP agent in the sandbox: started through the sandbox's kit with its session's
//! workspace read-write, so whatever it runs — its own shell, the MCP servers it starts — is
//! confined too (docs/sandbox.md).

use std::sync::Arc;

use switchboard_engine::RunContext;
use switchboard_protocol::{PermissionMode, SandboxStatus, SessionConfig};

use crate::{AcpBackend, conn};

/// How an agent's process is confined.
#[derive(Debug, Clone)]
pub struct AgentSandbox {
    pub sandbox: Arc<switchboard_sandbox::Sandbox>,
    /// Default `full`: an agent reaches its model.
    pub network: switchboard_sandbox::NetworkPolicy,
    /// Read-write besides the workspace: the agent's configuration and caches.
    pub read_write: Vec<std::path::PathBuf>,
}

impl AcpBackend {
    /// Starts this agent's processes in the sandbox (see [`AgentSandbox`]).
    pub fn with_sandbox(mut self, sandbox: AgentSandbox) -> Self {
        self.sandbox = Some(sandbox);
        self
    }

    /// How a process for `ctx` is confined: `None` when it is not (no sandbox, or a
    /// full-access session on a server that leaves those unconfined).
    pub(crate) fn confinement(&self, ctx: &RunContext) -> Option<conn::Confinement<'_>> {
        let s = self.sandbox.as_ref()?;
        s.sandbox
            .applies(
                ctx.config.permission_mode == PermissionMode::FullAccess,
                ctx.input.sandbox,
            )
            .then(|| conn::Confinement {
                sandbox: s,
                network: s.network.or_session(ctx.config.sandbox.as_ref()),
                hidden: ctx
                    .protected
                    .iter()
                    .map(std::path::Path::to_path_buf)
                    .collect(),
                connect_ports: self
                    .session_mcp
                    .as_ref()
                    .and_then(|m| m.url.get())
                    .and_then(|u| port_of(u))
                    .into_iter()
                    .collect(),
                read_only: self
                    .session_mcp
                    .iter()
                    .flat_map(|m| switchboard_sandbox::needed_by(&m.command.to_string_lossy(), &[]))
                    .chain(ctx.mcp_servers.iter().flat_map(|s| match &s.command {
                        Some(c) => switchboard_sandbox::needed_by(c, &s.args),
                        None => Vec::new(),
                    }))
                    .collect(),
            })
    }

    /// How the processes of a session configured as `config` are confined.
    pub(crate) fn status_of(&self, config: &SessionConfig) -> Option<SandboxStatus> {
        let s = self.sandbox.as_ref()?;
        Some(
            s.sandbox.status(
                s.sandbox
                    .applies(config.permission_mode == PermissionMode::FullAccess, None),
                &s.network.or_session(config.sandbox.as_ref()),
            ),
        )
    }
}

/// The port of a `http://host:port` URL.
fn port_of(url: &str) -> Option<u16> {
    let authority = url.split_once("://")?.1.split('/').next()?;
    authority.rsplit_once(':')?.1.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::port_of;

    #[test]
    fn ports() {
        assert_eq!(port_of("http://127.0.0.1:7070"), Some(7070));
        assert_eq!(port_of("http://[::1]:8080/x"), Some(8080));
        assert_eq!(port_of("http://host/x"), None);
    }
}
