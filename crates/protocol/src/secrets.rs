//! Which environment variables are the server's secrets: what no process Switchboard
//! starts for an agent inherits (commands, ACP agents, MCP servers, tmux relay members,
//! git for checkpoints). One list, so that every spawner scrubs the same names.

use std::ffi::OsStr;

/// Provider keys the server reads besides its own `SWITCHBOARD_*` variables.
pub const PROVIDER_KEY_VARS: [&str; 2] = ["OPENAI_API_KEY", "ANTHROPIC_API_KEY"];

/// Whether `name` is one of the server's secrets: every `SWITCHBOARD_*` variable (the API
/// token among them, with which an agent could approve its own calls) and the providers'
/// keys.
pub fn is_server_secret(name: &OsStr) -> bool {
    name.as_encoded_bytes().starts_with(b"SWITCHBOARD_")
        || PROVIDER_KEY_VARS.iter().any(|s| name == *s)
}

/// The server's secrets in this process's environment, to remove from a child's.
pub fn server_secrets_in_env() -> Vec<std::ffi::OsString> {
    std::env::vars_os()
        .map(|(name, _)| name)
        .filter(|name| is_server_secret(name))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for s in [
            "SWITCHBOARD_TOKEN",
            "SWITCHBOARD_RELAY_TOKEN",
            "OPENAI_API_KEY",
        ] {
            assert!(is_server_secret(OsStr::new(s)), "{s}");
        }
        for s in ["PATH", "HOME", "OPENAI_API_KEYS", "MY_SWITCHBOARD_X"] {
            assert!(!is_server_secret(OsStr::new(s)), "{s}");
        }
    }
}
