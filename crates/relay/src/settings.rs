//! The relay's settings: the `[relay]` section of the configuration file (read by the
//! binary, handed over as it is) and its `SWITCHBOARD_RELAY_*` environment variables, turned
//! into [`RelayOptions`].

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use switchboard_settings::{Host, SettingsError, StartError, env, env_parse};

use crate::{Limits, MemberMcp, Relay, RelayOptions};

/// `[relay]`: bundles of agents.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelaySection {
    /// Where `BUNDLE.toml` and `policies.toml` live (default: `bundles/` beside the config
    /// file).
    pub bundles_dir: Option<PathBuf>,
    /// Write message bodies into the audit log (default false).
    pub audit_bodies: Option<bool>,
    /// Unfinished messages one member may have waiting (default 100).
    pub queue_capacity: Option<usize>,
    /// How long a tmux pane may take to become quiescent (default 30).
    pub quiescence_timeout_secs: Option<u64>,
    /// How long a sync send to an ACP or session member waits for its turn (default 600).
    pub turn_timeout_secs: Option<u64>,
    /// Hops a chain of replies may have (default 8; 0: no limit).
    pub max_hops: Option<u32>,
    /// A member's send continues the chain of the message it last received within this
    /// many seconds (default 600).
    pub reply_window_secs: Option<u64>,
    /// Sends (deliveries) one member may make per minute / per day (defaults 30 / 500; 0:
    /// no budget).
    pub member_sends_per_minute: Option<u64>,
    pub member_sends_per_day: Option<u64>,
    /// Sends a whole bundle may make per minute / per day (defaults 120 / 2000; 0: none).
    pub bundle_sends_per_minute: Option<u64>,
    pub bundle_sends_per_day: Option<u64>,
}

/// The relay's effective settings.
#[derive(Debug, Clone)]
pub struct RelaySettings {
    pub bundles_dir: PathBuf,
    pub audit_bodies: bool,
    pub queue_capacity: usize,
    pub quiescence_timeout_secs: u64,
    pub turn_timeout_secs: u64,
    pub limits: Limits,
}

impl RelaySettings {
    /// The section, each key overridden by its environment variable, with the defaults;
    /// `default_bundles_dir` when neither names the bundles directory.
    pub fn read(file: &RelaySection, default_bundles_dir: PathBuf) -> Result<Self, SettingsError> {
        let d = Limits::default();
        Ok(Self {
            bundles_dir: env("SWITCHBOARD_BUNDLES_DIR")
                .map(PathBuf::from)
                .or(file.bundles_dir.clone())
                .unwrap_or(default_bundles_dir),
            audit_bodies: env_parse("SWITCHBOARD_RELAY_AUDIT_BODIES")?
                .or(file.audit_bodies)
                .unwrap_or(false),
            queue_capacity: env_parse("SWITCHBOARD_RELAY_QUEUE_CAPACITY")?
                .or(file.queue_capacity)
                .unwrap_or(100)
                .max(1),
            quiescence_timeout_secs: env_parse("SWITCHBOARD_RELAY_QUIESCENCE_TIMEOUT_SECS")?
                .or(file.quiescence_timeout_secs)
                .unwrap_or(30)
                .max(1),
            turn_timeout_secs: env_parse("SWITCHBOARD_RELAY_TURN_TIMEOUT_SECS")?
                .or(file.turn_timeout_secs)
                .unwrap_or(600)
                .max(1),
            limits: Limits {
                max_hops: env_parse("SWITCHBOARD_RELAY_MAX_HOPS")?
                    .or(file.max_hops)
                    .unwrap_or(d.max_hops),
                reply_window: env_parse("SWITCHBOARD_RELAY_REPLY_WINDOW_SECS")?
                    .or(file.reply_window_secs)
                    .map(Duration::from_secs)
                    .unwrap_or(d.reply_window),
                member_per_minute: env_parse("SWITCHBOARD_RELAY_MEMBER_SENDS_PER_MINUTE")?
                    .or(file.member_sends_per_minute)
                    .unwrap_or(d.member_per_minute),
                member_per_day: env_parse("SWITCHBOARD_RELAY_MEMBER_SENDS_PER_DAY")?
                    .or(file.member_sends_per_day)
                    .unwrap_or(d.member_per_day),
                bundle_per_minute: env_parse("SWITCHBOARD_RELAY_BUNDLE_SENDS_PER_MINUTE")?
                    .or(file.bundle_sends_per_minute)
                    .unwrap_or(d.bundle_per_minute),
                bundle_per_day: env_parse("SWITCHBOARD_RELAY_BUNDLE_SENDS_PER_DAY")?
                    .or(file.bundle_sends_per_day)
                    .unwrap_or(d.bundle_per_day),
            },
        })
    }

    /// The relay's options: its state under `data_dir` (`relay.db`, `audit/`), tmux sockets
    /// under `runtime_dir`, `known_agents` the names of `[agents.*]`.
    pub fn options(
        &self,
        data_dir: PathBuf,
        runtime_dir: PathBuf,
        known_agents: Vec<String>,
    ) -> RelayOptions {
        let mut o = RelayOptions::new(self.bundles_dir.clone(), data_dir, runtime_dir);
        o.known_agents = known_agents;
        o.audit_bodies = self.audit_bodies;
        o.queue_capacity = self.queue_capacity;
        o.quiescence_timeout = Duration::from_secs(self.quiescence_timeout_secs);
        o.turn_timeout = Duration::from_secs(self.turn_timeout_secs);
        o.limits = self.limits.clone();
        o
    }

    /// Starts the relay for `host`: its state in `relay/` of the data directory, tmux
    /// sockets in `SWITCHBOARD_RUNTIME_DIR` (else `run/` of the data directory). Members are
    /// told how to reach the server (`SWITCHBOARD_URL`, the data directory and the
    /// configuration file, never the token itself), and session and ACP members get the
    /// relay's MCP server (this executable's `switchboard mcp`) with a member token.
    pub async fn start(&self, host: &Host) -> Result<Relay, StartError> {
        // A path, not necessarily UTF-8.
        let runtime_dir = std::env::var_os("SWITCHBOARD_RUNTIME_DIR")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| host.data_dir.join("run"));
        let mut opts = self.options(
            host.data_dir.join("relay"),
            runtime_dir,
            host.agents.clone(),
        );
        opts.member_env = vec![
            ("SWITCHBOARD_URL".into(), host.server_url.clone()),
            (
                "SWITCHBOARD_DATA_DIR".into(),
                host.data_dir.display().to_string(),
            ),
        ];
        if let Some(p) = &host.config_path {
            opts.member_env
                .push(("SWITCHBOARD_CONFIG".into(), p.display().to_string()));
        }
        opts.sandbox = host.sandbox.clone();
        opts.protected = host.protected.clone();
        opts.member_mcp = std::env::current_exe().ok().map(|command| MemberMcp {
            command,
            url: host.server_url.clone(),
            key: host.token.clone(),
        });
        let client = switchboard_client::Client::new(&host.server_url, Some(host.token.clone()))
            .map_err(|e| StartError::new("relay", e))?;
        tracing::debug!(bundles = %self.bundles_dir.display(), "relay");
        Relay::start(opts, client)
            .await
            .map_err(|e| StartError::new("relay", e))
    }
}
