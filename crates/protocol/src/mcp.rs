//! MCP servers given to a session's agent (`[mcp.servers.NAME]`, or `mcp_servers` in
//! `POST /v1/sessions`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One MCP server: a command speaking MCP on stdio, or a streamable-HTTP URL.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServerSpec {
    /// Letters, digits, `_` and `-` (1–64): the built-in agent names its tools
    /// `mcp__NAME__TOOL`.
    #[schema(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    pub name: String,
    /// stdio: the program, started in the session's workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Environment of the program (shown redacted by the API).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// streamable HTTP: the server's URL (`http://` or `https://`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// HTTP headers sent to it (shown redacted by the API).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

/// Most MCP servers one session may have.
pub const MAX_MCP_SERVERS: usize = 16;

impl McpServerSpec {
    /// Why it cannot be used, if it cannot: the name, exactly one of `command` and `url`.
    pub fn problem(&self) -> Option<String> {
        let n = &self.name;
        if n.is_empty()
            || n.len() > 64
            || !n
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Some(format!(
                "name {n:?}: use 1 to 64 letters, digits, '_' or '-'"
            ));
        }
        match (&self.command, &self.url) {
            (Some(c), None) if c.trim().is_empty() => Some(format!("{n}: empty command")),
            (Some(_), None) if !self.headers.is_empty() => {
                Some(format!("{n}: headers are for url servers"))
            }
            (Some(_), None) => None,
            (None, Some(u)) if !(u.starts_with("http://") || u.starts_with("https://")) => {
                Some(format!("{n}: url must start with http:// or https://"))
            }
            (None, Some(_)) if !self.args.is_empty() || !self.env.is_empty() => {
                Some(format!("{n}: args and env are for command servers"))
            }
            (None, Some(_)) => None,
            _ => Some(format!("{n}: give exactly one of command and url")),
        }
    }

    /// The same with the values of `env` and `headers` hidden (they may hold secrets).
    pub fn redacted(&self) -> Self {
        let hide = |m: &BTreeMap<String, String>| {
            m.keys()
                .map(|k| (k.clone(), "[redacted]".to_owned()))
                .collect()
        };
        Self {
            env: hide(&self.env),
            headers: hide(&self.headers),
            ..self.clone()
        }
    }
}
