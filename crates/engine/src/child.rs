//! Processes Switchboard starts for an agent (ACP agents, MCP servers): what they must not
//! inherit.

use std::collections::BTreeMap;

/// Removes the server's secrets from `cmd`'s environment: every `SWITCHBOARD_*` variable
/// (with the API token an agent could approve its own requests) and the model providers'
/// keys — except those `keep` sets explicitly (the agent's own configured `env`).
pub fn scrub_server_secrets(cmd: &mut tokio::process::Command, keep: &BTreeMap<String, String>) {
    for key in switchboard_protocol::secrets::server_secrets_in_env() {
        if !keep.contains_key(key.to_string_lossy().as_ref()) {
            cmd.env_remove(&key);
        }
    }
}
