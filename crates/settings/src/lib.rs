//! The settings kit: what every surface (the gateway, the scheduler, the relay) and the
//! binary read their configuration with. A surface owns its section of `switchboard.toml`
//! (serde types the binary parses and hands over as they are) and its `SWITCHBOARD_*`
//! environment variables; this crate gives them one way to read an override, a typed value
//! and a list, and one error that names the key at fault.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

/// A setting that is wrong, in words that name its key (`[gateway] run_timeout_secs: …`,
/// `SWITCHBOARD_TELEGRAM_TOKEN: …`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SettingsError(String);

impl SettingsError {
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

/// What the binary hands every surface it starts (the `start` of each surface's
/// `settings` module): how to reach the API, the token a surface calls it with, and the
/// shared places a surface keeps its own state beside. The binary builds one after it
/// listens; a surface needs nothing else of it.
#[derive(Clone)]
pub struct Host {
    /// The API's base URL, as this machine reaches it (`http://127.0.0.1:PORT`).
    pub server_url: String,
    /// The bearer a surface calls the API with.
    pub token: String,
    pub data_dir: PathBuf,
    /// The engine's store URL (a surface's own store is a schema of a PostgreSQL one, or a
    /// file beside SQLite's), and the same with its password hidden, for messages.
    pub store_url: String,
    pub store_url_redacted: String,
    /// The configuration file, when one was read (members of the relay are told of it).
    pub config_path: Option<PathBuf>,
    /// This instance, as a lease's holder, and the length of the leases it takes.
    pub instance_id: String,
    pub lease: Duration,
    /// The names of `[agents.*]`.
    pub agents: Vec<String>,
    /// How processes started for agents are confined (`None`: `[sandbox] mode = "off"`).
    pub sandbox: Option<std::sync::Arc<switchboard_sandbox::Sandbox>>,
    /// Switchboard's own state (data directory, token, configuration …), never granted to a
    /// sandboxed process.
    pub protected: Vec<PathBuf>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("server_url", &self.server_url)
            .field("token", &"[redacted]")
            .field("data_dir", &self.data_dir)
            .field("store_url", &self.store_url_redacted)
            .field("instance_id", &self.instance_id)
            .finish_non_exhaustive()
    }
}

/// A surface that could not start: which one, and why.
#[derive(Debug, thiserror::Error)]
#[error("starting the {surface}: {message}")]
pub struct StartError {
    pub surface: &'static str,
    pub message: String,
}

impl StartError {
    pub fn new(surface: &'static str, message: impl std::fmt::Display) -> Self {
        Self {
            surface,
            message: message.to_string(),
        }
    }
}

/// An environment variable, unless unset or empty.
pub fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// An environment variable read as a `T`; an unreadable value names the variable.
pub fn env_parse<T: FromStr>(name: &str) -> Result<Option<T>, SettingsError> {
    match env(name) {
        Some(v) => v
            .parse()
            .map(Some)
            .map_err(|_| SettingsError(format!("{name}={v:?} is not a valid value"))),
        None => Ok(None),
    }
}

/// A comma-separated list, items trimmed, empty ones dropped.
pub fn csv(v: &str) -> Vec<String> {
    v.split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn lists_and_values() {
        assert_eq!(csv(" a, ,b ,"), vec!["a", "b"]);
        // A variable nothing sets.
        assert_eq!(
            env_parse::<u64>("SWITCHBOARD_SETTINGS_KIT_UNSET").unwrap(),
            None
        );
    }

    #[test]
    fn a_host_hides_its_token() {
        let host = Host {
            server_url: "http://127.0.0.1:1".into(),
            token: "sekrit-token".into(),
            data_dir: PathBuf::from("/d"),
            store_url: "postgres://u:pw@h/db".into(),
            store_url_redacted: "postgres://u:***@h/db".into(),
            config_path: None,
            instance_id: "i".into(),
            lease: Duration::from_secs(1),
            agents: Vec::new(),
            sandbox: None,
            protected: Vec::new(),
        };
        let shown = format!("{host:?}");
        assert!(
            !shown.contains("sekrit") && !shown.contains(":pw@"),
            "{shown}"
        );
    }
}
