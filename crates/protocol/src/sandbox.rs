//! The sandbox on the wire: a session's own network policy (`sandbox` of `POST` and
//! `PATCH /v1/sessions…`) and how its processes are confined (`sandbox` of
//! `GET /v1/sessions/{id}`). See docs/sandbox.md.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Most hosts of one allowlist.
pub const MAX_ALLOW_HOSTS: usize = 64;

/// What a sandboxed process may reach over the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum SandboxNetwork {
    /// No TCP at all (loopback included).
    None,
    /// Whatever the server may reach.
    Full,
    /// Only `allow_hosts`, over HTTP(S) through the sandbox's filtering proxy.
    Allowlist,
}

/// A session's own sandbox network, in place of the server's (`[sandbox] network`, or the
/// agent's `[agents.NAME.sandbox] network`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionSandbox {
    pub network: SandboxNetwork,
    /// With `allowlist` (and only then): `example.com`, or `*.example.com` for its
    /// subdomains. At most 64.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "crate::nullable::or_default"
    )]
    #[schema(max_items = 64, nullable)]
    pub allow_hosts: Vec<String>,
}

impl SessionSandbox {
    /// What is wrong with it, if anything (for a 422).
    pub fn problem(&self) -> Option<String> {
        match self.network {
            SandboxNetwork::Allowlist if self.allow_hosts.is_empty() => {
                Some("network allowlist needs allow_hosts".into())
            }
            SandboxNetwork::Allowlist => {
                if self.allow_hosts.len() > MAX_ALLOW_HOSTS {
                    return Some(format!("allow_hosts: at most {MAX_ALLOW_HOSTS}"));
                }
                self.allow_hosts
                    .iter()
                    .find(|h| !valid_host(h))
                    .map(|h| format!("allow_hosts: {h:?} is not a host name (example.com, or *.example.com for its subdomains)"))
            }
            _ if !self.allow_hosts.is_empty() => {
                Some("allow_hosts goes with network allowlist only".into())
            }
            _ => None,
        }
    }
}

/// `example.com` or `*.example.com`: letters, digits, `-` and `.`, at most 253 characters.
pub fn valid_host(h: &str) -> bool {
    let name = h.strip_prefix("*.").unwrap_or(h);
    !name.is_empty()
        && name.len() <= 253
        && !name.starts_with('.')
        && !name.ends_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
}

/// How a session's processes are confined, as its next run's would be.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SandboxStatus {
    /// Whether the processes its agent starts run in the sandbox.
    pub confined: bool,
    pub network: SandboxNetwork,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_hosts: Vec<String>,
    /// In words: what confines them, or why they are not.
    pub detail: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems() {
        let s = |network, hosts: &[&str]| SessionSandbox {
            network,
            allow_hosts: hosts.iter().map(|h| h.to_string()).collect(),
        };
        assert_eq!(s(SandboxNetwork::None, &[]).problem(), None);
        assert_eq!(
            s(SandboxNetwork::Allowlist, &["a.com", "*.b.org"]).problem(),
            None
        );
        assert!(s(SandboxNetwork::Allowlist, &[]).problem().is_some());
        assert!(
            s(SandboxNetwork::Allowlist, &["a.com/x"])
                .problem()
                .is_some()
        );
        assert!(s(SandboxNetwork::Allowlist, &["*"]).problem().is_some());
        assert!(s(SandboxNetwork::Full, &["a.com"]).problem().is_some());
    }
}
