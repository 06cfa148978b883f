//! The settings kit: what every surface (the gateway, the scheduler, the relay) and the
//! binary read their configuration with. A surface owns its section of `switchboard.toml`
//! (serde types the binary parses and hands over as they are) and its `SWITCHBOARD_*`
//! environment variables; this crate gives them one way to read an override, a typed value
//! and a list, and one error that names the key at fault.

use std::str::FromStr;

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
}
