//! Bundle files (`BUNDLE.toml`) and `policies.toml`, parsed and validated.
//!
//! Unknown keys are rejected with the key named (serde's `deny_unknown_fields`, whose
//! message the TOML parser places at the line and column of the key).

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use switchboard_protocol::relay::TransportKind;

/// The supported `format-version` of both files.
pub const FORMAT_VERSION: i64 = 1;
/// The file name (without `.toml`) that is never a bundle.
pub const POLICIES: &str = "policies";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("bundle `{0}` not found (no {0}.toml in {1})")]
    NotFound(String, PathBuf),
    #[error("{file}: {message}")]
    Invalid { file: String, message: String },
    #[error("reading {0}: {1}")]
    Io(PathBuf, std::io::Error),
}

impl ConfigError {
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotFound(..) => "bundle_not_found",
            Self::Invalid { .. } => "bundle_invalid",
            Self::Io(..) => "bundle_unreadable",
        }
    }
}

/// What a policy allows for one capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Never.
    None,
    /// Only the requester itself (a member listing or looking at itself).
    #[serde(rename = "self")]
    SelfOnly,
    /// Any member of the bundle.
    All,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    pub id: String,
    pub list: Scope,
    pub send: Scope,
    pub look: Scope,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Principal {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub policy: Option<String>,
}

/// `policies.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoliciesFile {
    #[serde(rename = "format-version")]
    pub format_version: Option<i64>,
    #[serde(default)]
    pub default: Option<String>,
    #[serde(default)]
    pub policies: Vec<Policy>,
    #[serde(default)]
    pub principals: Vec<Principal>,
}

/// The policies in force: the built-in ones (`peer` and `operator`, both `all` for every
/// capability) overridden or extended by `policies.toml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policies {
    pub default: String,
    pub policies: BTreeMap<String, Policy>,
    pub principals: BTreeMap<String, Principal>,
}

impl Default for Policies {
    fn default() -> Self {
        let mut policies = BTreeMap::new();
        for id in ["peer", "operator"] {
            policies.insert(
                id.to_string(),
                Policy {
                    id: id.to_string(),
                    list: Scope::All,
                    send: Scope::All,
                    look: Scope::All,
                },
            );
        }
        Self {
            default: "peer".into(),
            policies,
            principals: BTreeMap::new(),
        }
    }
}

impl Policies {
    pub fn get(&self, id: &str) -> Option<&Policy> {
        self.policies.get(id)
    }

    /// The policy of a principal (its own, else the default).
    pub fn principal_policy<'a>(&'a self, p: &'a Principal) -> &'a str {
        p.policy.as_deref().unwrap_or(&self.default)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TmuxTransport {
    pub command: String,
    #[serde(default)]
    pub prompt_regex: Option<String>,
    #[serde(default)]
    pub quiet_window_ms: Option<u64>,
    /// Extra environment for the member's process.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// How the member's process is confined (docs/sandbox.md): `enabled`, `network`
    /// (default full), `allow_hosts`, `read_write`.
    #[serde(default)]
    pub sandbox: switchboard_sandbox::ProgramRules,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcpTransport {
    /// An agent from `[agents.NAME]` of `switchboard.toml`.
    pub agent: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionTransport {
    /// `builtin` (the default) or an agent from `[agents.NAME]`.
    #[serde(default)]
    pub backend: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    /// `read-only`, `workspace-write` or `full-access`; the server's default when absent.
    #[serde(default)]
    pub permission_mode: Option<switchboard_protocol::PermissionMode>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMember {
    id: String,
    #[serde(default)]
    name: Option<String>,
    directory: PathBuf,
    #[serde(default)]
    policy: Option<String>,
    #[serde(default)]
    tmux: Option<TmuxTransport>,
    #[serde(default)]
    acp: Option<AcpTransport>,
    #[serde(default)]
    session: Option<SessionTransport>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBundle {
    #[serde(rename = "format-version")]
    format_version: Option<i64>,
    /// A chat told (once per chain or budget window) when a loop guard stops a send:
    /// `CHANNEL:CHAT` on the gateway (`telegram:111222333`, `slack:C0123`).
    #[serde(default)]
    notify: Option<String>,
    #[serde(default)]
    members: Vec<RawMember>,
}

/// How a member is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    Tmux(TmuxTransport),
    Acp(AcpTransport),
    Session(SessionTransport),
}

impl Transport {
    pub fn kind(&self) -> TransportKind {
        match self {
            Self::Tmux(_) => TransportKind::Tmux,
            Self::Acp(_) => TransportKind::Acp,
            Self::Session(_) => TransportKind::Session,
        }
    }
}

/// One validated member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub id: String,
    pub name: String,
    /// Absolute (relative paths in the file are taken from the bundles directory).
    pub directory: PathBuf,
    pub policy: String,
    pub transport: Transport,
}

/// One validated bundle with the policies in force for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bundle {
    pub name: String,
    pub members: Vec<Member>,
    pub policies: Policies,
    /// The owner's chat for loop-guard refusals: `(channel, chat)` on the gateway.
    pub notify: Option<(String, String)>,
}

impl Bundle {
    pub fn member(&self, id: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.id == id)
    }
}

/// Member ids, bundle names and principal ids: a letter, then letters, digits, `_` or `-`,
/// at most 31 characters in all (a member id is also a tmux session name).
pub fn valid_id(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic())
        && s.len() <= 31
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Where bundle files live, and what they may refer to.
#[derive(Debug, Clone)]
pub struct BundleDir {
    pub dir: PathBuf,
    /// Agent names from `[agents.*]`, which `acp` members and `session.backend` may name.
    pub known_agents: Vec<String>,
}

impl BundleDir {
    pub fn new(dir: impl Into<PathBuf>, known_agents: Vec<String>) -> Self {
        Self {
            dir: dir.into(),
            known_agents,
        }
    }

    /// The policies in force (built-in ones when `policies.toml` does not exist).
    pub fn policies(&self) -> Result<Policies, ConfigError> {
        let path = self.dir.join(format!("{POLICIES}.toml"));
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Policies::default()),
            Err(e) => return Err(ConfigError::Io(path, e)),
        };
        parse_policies(&text).map_err(|message| ConfigError::Invalid {
            file: format!("{POLICIES}.toml"),
            message,
        })
    }

    /// Names of the bundle files in the directory, sorted (none when it does not exist).
    pub fn names(&self) -> Result<Vec<String>, ConfigError> {
        let rd = match std::fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(ConfigError::Io(self.dir.clone(), e)),
        };
        let mut out = Vec::new();
        for entry in rd.flatten() {
            let path = entry.path();
            if path.extension().and_then(|e| e.to_str()) != Some("toml") {
                continue;
            }
            if let Some(stem) = path.file_stem().and_then(|s| s.to_str())
                && stem != POLICIES
            {
                out.push(stem.to_string());
            }
        }
        out.sort();
        Ok(out)
    }

    /// Loads and validates one bundle, the way start-up does.
    pub fn load(&self, name: &str) -> Result<Bundle, ConfigError> {
        if name == POLICIES {
            return Err(ConfigError::Invalid {
                file: format!("{name}.toml"),
                message: "`policies` is reserved for policies.toml and is never a bundle".into(),
            });
        }
        if !valid_id(name) {
            return Err(ConfigError::NotFound(name.to_string(), self.dir.clone()));
        }
        let path = self.dir.join(format!("{name}.toml"));
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ConfigError::NotFound(name.to_string(), self.dir.clone()));
            }
            Err(e) => return Err(ConfigError::Io(path, e)),
        };
        let policies = self.policies()?;
        parse_bundle(name, &text, &self.dir, &policies, &self.known_agents).map_err(|message| {
            ConfigError::Invalid {
                file: format!("{name}.toml"),
                message,
            }
        })
    }
}

fn check_version(v: Option<i64>) -> Result<(), String> {
    match v {
        Some(FORMAT_VERSION) => Ok(()),
        Some(other) => Err(format!(
            "format-version = {other} is not supported (expected {FORMAT_VERSION})"
        )),
        None => Err(format!(
            "format-version is missing (add `format-version = {FORMAT_VERSION}` at the top)"
        )),
    }
}

/// Parses and validates `policies.toml`.
pub fn parse_policies(text: &str) -> Result<Policies, String> {
    let raw: PoliciesFile = toml::from_str(text).map_err(|e| e.to_string())?;
    check_version(raw.format_version)?;
    let mut out = Policies::default();
    let mut seen = HashSet::new();
    for p in raw.policies {
        if !valid_id(&p.id) {
            return Err(format!(
                "policy id `{}` is not valid (a letter, then letters, digits, _ or -, at most 31)",
                p.id
            ));
        }
        if !seen.insert(p.id.clone()) {
            return Err(format!("policy `{}` is defined twice", p.id));
        }
        out.policies.insert(p.id.clone(), p);
    }
    if let Some(d) = raw.default {
        if !out.policies.contains_key(&d) {
            return Err(format!("default = \"{d}\" names no policy"));
        }
        out.default = d;
    }
    for p in raw.principals {
        if !valid_id(&p.id) {
            return Err(format!(
                "principal id `{}` is not valid (a letter, then letters, digits, _ or -, at most 31)",
                p.id
            ));
        }
        if let Some(pol) = &p.policy
            && !out.policies.contains_key(pol)
        {
            return Err(format!(
                "principal `{}`: policy \"{pol}\" names no policy",
                p.id
            ));
        }
        if out.principals.insert(p.id.clone(), p.clone()).is_some() {
            return Err(format!("principal `{}` is defined twice", p.id));
        }
    }
    Ok(out)
}

/// Parses and validates one bundle file.
pub fn parse_bundle(
    name: &str,
    text: &str,
    base: &Path,
    policies: &Policies,
    known_agents: &[String],
) -> Result<Bundle, String> {
    let raw: RawBundle = toml::from_str(text).map_err(|e| e.to_string())?;
    check_version(raw.format_version)?;
    if raw.members.is_empty() {
        return Err("the bundle has no members (add [[members]])".into());
    }
    let mut ids = HashSet::new();
    let mut names = HashSet::new();
    let mut members = Vec::new();
    for m in raw.members {
        let at = format!("member `{}`", m.id);
        if !valid_id(&m.id) {
            return Err(format!(
                "member id `{}` is not valid: a letter first, then letters, digits, _ or -, at most 31 characters",
                m.id
            ));
        }
        if !ids.insert(m.id.clone()) {
            return Err(format!("{at} is defined twice"));
        }
        if policies.principals.contains_key(&m.id) {
            return Err(format!(
                "{at}: the id is also a principal in policies.toml; requesters must be unambiguous"
            ));
        }
        let display = match m.name {
            Some(n) if n.trim().is_empty() => return Err(format!("{at}: name is empty")),
            Some(n) => n,
            None => m.id.clone(),
        };
        if !names.insert(display.clone()) {
            return Err(format!(
                "{at}: display name \"{display}\" is used by another member"
            ));
        }
        if m.directory.as_os_str().is_empty() {
            return Err(format!("{at}: directory is empty"));
        }
        let directory = if m.directory.is_absolute() {
            m.directory
        } else {
            base.join(m.directory)
        };
        let policy = m.policy.unwrap_or_else(|| policies.default.clone());
        if policies.get(&policy).is_none() {
            return Err(format!(
                "{at}: policy \"{policy}\" is not defined (built-in: peer, operator; others in policies.toml)"
            ));
        }
        let transport = match (m.tmux, m.acp, m.session) {
            (Some(t), None, None) => {
                if t.command.trim().is_empty() {
                    return Err(format!("{at}: [members.tmux] command is empty"));
                }
                if let Some(r) = &t.prompt_regex {
                    regex::Regex::new(r)
                        .map_err(|e| format!("{at}: prompt_regex does not compile: {e}"))?;
                }
                if t.quiet_window_ms == Some(0) {
                    return Err(format!("{at}: quiet_window_ms must be above 0"));
                }
                for k in t.env.keys() {
                    if k.is_empty() || k.contains('=') {
                        return Err(format!("{at}: env key \"{k}\" is not a variable name"));
                    }
                }
                if let Err(e) = t.sandbox.network() {
                    return Err(format!("{at}: [members.tmux.sandbox] {e}"));
                }
                Transport::Tmux(t)
            }
            (None, Some(a), None) => {
                if !known_agents.iter().any(|k| k == &a.agent) {
                    return Err(format!(
                        "{at}: [members.acp] agent \"{}\" is not configured (known agents: {})",
                        a.agent,
                        list_or_none(known_agents)
                    ));
                }
                Transport::Acp(a)
            }
            (None, None, Some(s)) => {
                if let Some(b) = &s.backend
                    && b != "builtin"
                    && !known_agents.iter().any(|k| k == b)
                {
                    return Err(format!(
                        "{at}: [members.session] backend \"{b}\" is neither \"builtin\" nor a configured agent (known agents: {})",
                        list_or_none(known_agents)
                    ));
                }
                Transport::Session(s)
            }
            (None, None, None) => {
                return Err(format!(
                    "{at}: no transport; add exactly one of [members.tmux], [members.acp], [members.session]"
                ));
            }
            _ => {
                return Err(format!(
                    "{at}: more than one transport; keep exactly one of [members.tmux], [members.acp], [members.session]"
                ));
            }
        };
        members.push(Member {
            id: m.id,
            name: display,
            directory,
            policy,
            transport,
        });
    }
    let notify = match raw.notify.as_deref().map(str::trim) {
        None => None,
        Some(t) => match t.rsplit_once(':') {
            Some((channel, chat)) if !channel.trim().is_empty() && !chat.trim().is_empty() => {
                Some((channel.trim().to_string(), chat.trim().to_string()))
            }
            _ => {
                return Err(format!(
                    "notify = {t:?} is not CHANNEL:CHAT (e.g. \"telegram:111222333\")"
                ));
            }
        },
    };
    Ok(Bundle {
        name: name.to_string(),
        members,
        policies: policies.clone(),
        notify,
    })
}

fn list_or_none(v: &[String]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

#[cfg(test)]
#[path = "config_prop_tests.rs"]
mod prop_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Bundle, String> {
        parse_bundle(
            "dev",
            text,
            Path::new("/b"),
            &Policies::default(),
            &["claude".to_string()],
        )
    }

    const GOOD: &str = r#"
format-version = 1
[[members]]
id = "builder"
name = "Builder"
directory = "/src/app-builder"
policy = "peer"
[members.tmux]
command = "claude"
prompt_regex = "^> "
quiet_window_ms = 750

[[members]]
id = "tester"
directory = "work"
[members.acp]
agent = "claude"

[[members]]
id = "helper"
directory = "/src"
[members.session]
backend = "builtin"
model = "m"
"#;

    #[test]
    fn the_documented_shape_parses() {
        let b = parse(GOOD).unwrap();
        assert_eq!(b.members.len(), 3);
        assert_eq!(b.members[0].name, "Builder");
        assert_eq!(b.members[1].name, "tester");
        assert_eq!(b.members[1].directory, PathBuf::from("/b/work"));
        assert_eq!(b.members[1].policy, "peer");
        assert_eq!(b.members[2].transport.kind(), TransportKind::Session);
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = parse(&GOOD.replace("quiet_window_ms = 750", "quiet_windw_ms = 750")).unwrap_err();
        assert!(e.contains("quiet_windw_ms"), "{e}");
        let e = parse(&format!("{GOOD}\ncolour = 1")).unwrap_err();
        assert!(e.contains("colour"), "{e}");
        let e = parse_policies("format-version = 1\n[[policies]]\nid='x'\nlist='all'\nsend='all'\nlook='all'\nsee='all'").unwrap_err();
        assert!(e.contains("see"), "{e}");
    }

    #[test]
    fn bad_bundles_are_refused_precisely() {
        let cases: &[(&str, &str)] = &[
            ("format-version = 1\n", "no members"),
            (
                "[[members]]\nid='a'\ndirectory='/'\n[members.tmux]\ncommand='x'",
                "format-version is missing",
            ),
            (
                "format-version = 2\n[[members]]\nid='a'\ndirectory='/'\n[members.tmux]\ncommand='x'",
                "not supported",
            ),
            (
                "format-version = 1\n[[members]]\nid='1a'\ndirectory='/'\n[members.tmux]\ncommand='x'",
                "not valid",
            ),
            (
                "format-version = 1\n[[members]]\nid='abcdefghijabcdefghijabcdefghijab'\ndirectory='/'\n[members.tmux]\ncommand='x'",
                "not valid",
            ),
            (
                "format-version = 1\n[[members]]\nid='a'\ndirectory='/'",
                "no transport",
            ),
            (
                "format-version = 1\n[[members]]\nid='a'\ndirectory='/'\n[members.tmux]\ncommand='x'\n[members.session]\n",
                "more than one transport",
            ),
            (
                "format-version = 1\n[[members]]\nid='a'\ndirectory='/'\n[members.tmux]\ncommand='x'\n[[members]]\nid='a'\ndirectory='/'\n[members.tmux]\ncommand='x'",
                "defined twice",
            ),
            (
                "format-version = 1\n[[members]]\nid='a'\nname='X'\ndirectory='/'\n[members.tmux]\ncommand='x'\n[[members]]\nid='b'\nname='X'\ndirectory='/'\n[members.tmux]\ncommand='x'",
                "display name",
            ),
            (
                "format-version = 1\n[[members]]\nid='a'\ndirectory='/'\n[members.tmux]\ncommand='x'\nprompt_regex='('",
                "prompt_regex",
            ),
            (
                "format-version = 1\n[[members]]\nid='a'\ndirectory='/'\n[members.acp]\nagent='gemini'",
                "not configured",
            ),
            (
                "format-version = 1\n[[members]]\nid='a'\ndirectory='/'\n[members.session]\nbackend='gpt'",
                "neither",
            ),
            (
                "format-version = 1\n[[members]]\nid='a'\ndirectory='/'\npolicy='boss'\n[members.tmux]\ncommand='x'",
                "policy \"boss\"",
            ),
            (
                "format-version = 1\n[[members]]\nid='a'\ndirectory='/'\n[members.tmux]\ncommand=' '",
                "command is empty",
            ),
            (
                "format-version = 1\n[[members]]\nid='a'\ndirectory='/'\n[members.tmux]\ncommand='x'\nquiet_window_ms=0",
                "above 0",
            ),
        ];
        for (text, want) in cases {
            let e = parse(text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn policies_file_overrides_and_extends_builtins() {
        let p = parse_policies(
            r#"
format-version = 1
default = "quiet"
[[policies]]
id = "quiet"
list = "self"
send = "none"
look = "none"
[[principals]]
id = "alice"
name = "Alice"
policy = "operator"
"#,
        )
        .unwrap();
        assert_eq!(p.default, "quiet");
        assert!(p.get("peer").is_some());
        assert_eq!(p.get("quiet").unwrap().send, Scope::None);
        assert_eq!(p.principal_policy(&p.principals["alice"]), "operator");
        let e = parse_policies("format-version = 1\ndefault='nope'").unwrap_err();
        assert!(e.contains("names no policy"), "{e}");
        let e = parse_policies(
            "format-version = 1\n[[policies]]\nid='x'\nlist='some'\nsend='all'\nlook='all'",
        )
        .unwrap_err();
        assert!(e.contains("some"), "{e}");
        // A member may not share an id with a principal.
        let e = parse_bundle(
            "dev",
            "format-version = 1\n[[members]]\nid='alice'\ndirectory='/'\n[members.tmux]\ncommand='x'",
            Path::new("/"),
            &p,
            &[],
        )
        .unwrap_err();
        assert!(e.contains("principal"), "{e}");
    }

    #[test]
    fn bundle_dir_lists_and_loads_files() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("dev.toml"), GOOD).unwrap();
        std::fs::write(d.path().join("policies.toml"), "format-version = 1\n").unwrap();
        std::fs::write(d.path().join("notes.txt"), "x").unwrap();
        let bd = BundleDir::new(d.path(), vec!["claude".into()]);
        assert_eq!(bd.names().unwrap(), vec!["dev".to_string()]);
        assert_eq!(bd.load("dev").unwrap().members.len(), 3);
        assert!(matches!(bd.load("nope"), Err(ConfigError::NotFound(..))));
        assert!(matches!(
            bd.load("policies"),
            Err(ConfigError::Invalid { .. })
        ));
        assert!(matches!(bd.load("../etc"), Err(ConfigError::NotFound(..))));
        let empty = BundleDir::new(d.path().join("missing"), vec![]);
        assert!(empty.names().unwrap().is_empty());
    }
}
