//! What one configured program — an ACP agent (`[agents.NAME.sandbox]`), a relay member in
//! tmux (`[members.tmux.sandbox]`) — is given in the sandbox: the same table in both files,
//! read here, and the directories well-known agents keep their state in.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::NetworkPolicy;

/// `sandbox = { … }` of a configured program.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ProgramRules {
    /// Default true (where `[sandbox]` is not off).
    pub enabled: Option<bool>,
    /// `full` (the default: an agent reaches its model), `none` or `allowlist`.
    pub network: Option<String>,
    #[serde(default)]
    pub allow_hosts: Vec<String>,
    /// Read-write besides the workspace: the program's own configuration and caches (`~/`
    /// for the home directory). Known agents' directories are granted without this.
    #[serde(default)]
    pub read_write: Vec<PathBuf>,
}

impl ProgramRules {
    /// Its network (default `full`), or what is wrong with it.
    pub fn network(&self) -> Result<NetworkPolicy, String> {
        NetworkPolicy::parse(self.network.as_deref(), &self.allow_hosts, "full")
    }

    /// Read-write for a program run as `words` (its command and arguments): the known
    /// agents' directories its words name, then `read_write`, beneath `home`.
    pub fn read_write(&self, words: &[&str], home: Option<&Path>) -> Vec<PathBuf> {
        let mut out = Vec::new();
        if let Some(home) = home {
            out.extend(known_dirs(words, home));
        }
        out.extend(self.read_write.iter().map(|p| expand_home(p, home)));
        out
    }
}

impl NetworkPolicy {
    /// A `network` value (`none`, `full`, `allowlist` with `hosts`; absent: `default`).
    pub fn parse(value: Option<&str>, hosts: &[String], default: &str) -> Result<Self, String> {
        match value.unwrap_or(default) {
            "none" => Ok(Self::None),
            "full" => Ok(Self::Full),
            "allowlist" => {
                let hosts: Vec<String> = hosts
                    .iter()
                    .map(|h| h.trim().to_owned())
                    .filter(|h| !h.is_empty())
                    .collect();
                if hosts.is_empty() {
                    return Err("network = \"allowlist\" needs the hosts it allows: allow_hosts = [\"example.com\", \"*.example.org\"]".into());
                }
                if let Some(bad) = hosts
                    .iter()
                    .find(|h| !switchboard_protocol::sandbox::valid_host(h))
                {
                    return Err(format!(
                        "allow_hosts entry {bad:?} is not a host name (example.com, or *.example.com for its subdomains)"
                    ));
                }
                Ok(Self::Allowlist(hosts))
            }
            other => Err(format!(
                "network = {other:?}: expected none, full or allowlist"
            )),
        }
    }
}

/// Directories well-known agents keep their configuration, sessions and caches in (beneath
/// the home directory), granted read-write to a program whose command or arguments name
/// the agent (`claude`, `npx …claude-code-acp`).
const KNOWN_AGENT_DIRS: &[(&str, &[&str])] = &[
    ("claude", &[".claude", ".claude.json", ".config/claude"]),
    ("gemini", &[".gemini"]),
    ("codex", &[".codex"]),
    (
        "goose",
        &[".config/goose", ".local/share/goose", ".local/state/goose"],
    ),
    (
        "opencode",
        &[
            ".config/opencode",
            ".local/share/opencode",
            ".local/state/opencode",
        ],
    ),
    ("qwen", &[".qwen"]),
    ("npx", &[".npm"]),
    ("bunx", &[".bun/install/cache"]),
    ("uvx", &[".cache/uv", ".local/share/uv"]),
];

/// The known agents' directories `words` name, beneath `home`.
pub fn known_dirs(words: &[&str], home: &Path) -> Vec<PathBuf> {
    let words: Vec<String> = words.iter().map(|w| w.to_ascii_lowercase()).collect();
    KNOWN_AGENT_DIRS
        .iter()
        .filter(|(word, _)| words.iter().any(|w| w.contains(word)))
        .flat_map(|(_, dirs)| dirs.iter().map(|d| home.join(d)))
        .collect()
}

/// `~/x` beneath `home`.
fn expand_home(path: &Path, home: Option<&Path>) -> PathBuf {
    match (path.strip_prefix("~"), home) {
        (Ok(rest), Some(home)) => home.join(rest),
        _ => path.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dirs_and_rules() {
        let home = Path::new("/home/me");
        let dirs = known_dirs(&["npx", "@zed-industries/claude-code-acp"], home);
        assert!(dirs.contains(&home.join(".claude")) && dirs.contains(&home.join(".npm")));
        assert!(known_dirs(&["my-agent"], home).is_empty());
        let rules = ProgramRules {
            read_write: vec![PathBuf::from("~/.cache/x"), PathBuf::from("/srv/y")],
            ..ProgramRules::default()
        };
        assert_eq!(
            rules.read_write(&["x"], Some(home)),
            vec![home.join(".cache/x"), PathBuf::from("/srv/y")]
        );
        assert_eq!(rules.network(), Ok(NetworkPolicy::Full));
        let bad = ProgramRules {
            network: Some("allowlist".into()),
            ..ProgramRules::default()
        };
        assert!(bad.network().is_err());
    }
}
