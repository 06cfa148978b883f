//! The one way Switchboard starts a process in the sandbox — the built-in agent's commands,
//! ACP agents, MCP servers over stdio, relay members: [`Sandbox::command`] makes the
//! launcher's command for a program under a [`Spec`] (its workspace, what else it may write,
//! its network), and the [`Confined`] it returns holds what the process needs while it runs
//! (its private temporary directory, its cgroup, its network proxy).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tokio::process::Command;

use crate::proxy::Proxy;
use crate::{Launcher, Network, PidsGroup, Policy, SandboxError};

/// What a sandboxed process may reach over the network.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "network", content = "hosts")]
pub enum NetworkPolicy {
    /// No TCP at all, connecting or listening (loopback included).
    #[default]
    None,
    /// Whatever the server itself may reach.
    Full,
    /// Only these hosts (`example.com`, or `*.example.com` for its subdomains), over HTTP(S)
    /// through a filtering proxy the process is pointed at (`HTTPS_PROXY`); nothing else.
    Allowlist(Vec<String>),
}

impl NetworkPolicy {
    /// `none`, `full` or `allowlist`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Full => "full",
            Self::Allowlist(_) => "allowlist",
        }
    }

    /// In words: `none`, `full`, `allowlist (a.com, b.org)`.
    pub fn describe(&self) -> String {
        match self {
            Self::Allowlist(hosts) => format!("allowlist ({})", hosts.join(", ")),
            other => other.name().to_owned(),
        }
    }
}

impl NetworkPolicy {
    /// A session's own network (`sandbox` of its configuration).
    pub fn from_session(s: &switchboard_protocol::SessionSandbox) -> NetworkPolicy {
        use switchboard_protocol::SandboxNetwork as N;
        match s.network {
            N::None => Self::None,
            N::Full => Self::Full,
            N::Allowlist => Self::Allowlist(s.allow_hosts.clone()),
        }
    }

    /// The session's own network if it has one, else this.
    pub fn or_session(&self, s: Option<&switchboard_protocol::SessionSandbox>) -> NetworkPolicy {
        s.map_or_else(|| self.clone(), Self::from_session)
    }
}

/// How processes are confined on this server (`[sandbox]`), and what this machine offers.
#[derive(Debug, Clone)]
pub struct Sandbox {
    pub launcher: Launcher,
    /// Refuse to start a process this machine cannot confine (else start it unconfined and
    /// say so).
    pub required: bool,
    /// The network of the built-in agent's commands.
    pub network: NetworkPolicy,
    /// The network of MCP servers over stdio (default full: reaching a service is most MCP
    /// servers' job).
    pub mcp_network: NetworkPolicy,
    /// Most processes (threads included) one confined process and its children may have.
    pub max_processes: u64,
    /// Most seconds of CPU time one process may use (`RLIMIT_CPU`).
    pub cpu_secs: Option<u64>,
    /// Most bytes of address space one process may map (`RLIMIT_AS`).
    pub memory_bytes: Option<u64>,
    /// Confine `full-access` sessions too (by default they are not: full access is the choice
    /// of running as the server's user).
    pub full_access: bool,
    /// Whether this machine can confine (Landlock is on); probed once by the binary.
    pub available: bool,
    /// Variables (names, or prefixes ending in `*`) sandboxed programs get from the server's
    /// environment besides [`crate::ENV_ALLOWED`] (`[sandbox] env`).
    pub env: Vec<String>,
    /// bubblewrap, to add namespaces (where it can make them here).
    pub bwrap: Option<PathBuf>,
    /// Cap processes with a cgroup per process (where one can be made here), else
    /// `RLIMIT_NPROC`.
    pub pids_cgroup: bool,
}

/// Where one process runs and what it may reach.
#[derive(Debug, Clone)]
pub struct Spec<'a> {
    /// Read-write: the session's workspace (and the process's working directory).
    pub workspace: &'a Path,
    /// Never granted, even beneath a directory that is (Switchboard's own state).
    pub hidden: &'a [PathBuf],
    /// Read-write besides the workspace (an ACP agent's own configuration directories).
    pub read_write: &'a [PathBuf],
    /// Read-only besides the system (what programs it starts are made of: see
    /// [`needed_by`]). The program's own are added.
    pub read_only: &'a [PathBuf],
    pub network: &'a NetworkPolicy,
    /// TCP ports on which it may connect even without the network (Switchboard's own API, for
    /// an agent's `switchboard mcp`).
    pub connect_ports: &'a [u16],
    /// Give it its temporary directory as `HOME` too (a command), or leave `HOME` as it is
    /// (an agent reading its configuration, granted by `read_write`).
    pub private_home: bool,
    /// Under namespaces, a PID namespace of its own: for a long-lived process (an agent, a
    /// member) whose processes end with it — not for a command, whose background processes
    /// outlive it.
    pub own_pids: bool,
    /// Its own variables (an agent's `env`, a member's): set, and kept by the launcher, which
    /// otherwise passes on only the allowed ones of the server's environment.
    pub env: &'a [(String, String)],
}

/// The file `program` runs (found on `path` when it is a bare name), symlinks followed.
fn resolve(program: &str, path: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    let given = Path::new(program);
    let found = if given.components().count() > 1 {
        Some(given.to_path_buf())
    } else {
        path.and_then(|p| {
            std::env::split_paths(p)
                .map(|d| d.join(program))
                .find(|f| f.is_file())
        })
    }?;
    std::fs::canonicalize(found).ok().filter(|f| f.is_file())
}

/// What a program and its arguments are made of, to read: the program's own directories
/// (see [`Sandbox::command`]) and the directory of each argument that is an existing file
/// (`python3 /opt/tools/server.py`): for an agent's MCP servers, started by the agent.
pub fn needed_by(program: &str, args: &[String]) -> Vec<PathBuf> {
    let path = std::env::var_os("PATH");
    let mut dirs: Vec<PathBuf> = resolve(program, path.as_deref())
        .map(|f| program_dirs(&f))
        .unwrap_or_default();
    for a in args.iter().map(Path::new).filter(|a| a.is_absolute()) {
        if let Some(parent) = std::fs::canonicalize(a)
            .ok()
            .filter(|f| f.is_file())
            .and_then(|f| f.parent().map(Path::to_path_buf))
        {
            dirs.push(parent);
        }
    }
    dirs
}

/// What running the program at `file` needs to read besides the system: the directory it
/// lies in, and for a Node.js package the `node_modules` directory it was installed in (its
/// dependencies lie beside it).
fn program_dirs(file: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let mut modules = PathBuf::new();
    for c in file.components() {
        modules.push(c);
        if c.as_os_str() == "node_modules" {
            dirs.push(modules.clone());
            break;
        }
    }
    if let Some(parent) = file.parent() {
        dirs.push(parent.to_path_buf());
    }
    dirs
}

/// What a confined process holds while it runs. Dropped after it: its cgroup goes once
/// nothing runs in it (what the process left in the background keeps it, and its cap), and
/// its temporary directory with it; without a cgroup the directory goes at once; the proxy
/// of its allowlist stops.
#[derive(Debug)]
pub struct Confined {
    _tmp: Option<tempfile::TempDir>,
    _group: Option<PidsGroup>,
    _proxy: Option<Proxy>,
}

impl Sandbox {
    /// Whether a session's processes are confined: `requested` (a message's `sandbox: true`)
    /// always are; otherwise every mode but full access (`full_access_mode`), and that one too
    /// with [`Sandbox::full_access`]. A message cannot turn the sandbox off.
    pub fn applies(&self, full_access_mode: bool, requested: Option<bool>) -> bool {
        requested == Some(true) || !full_access_mode || self.full_access
    }

    /// The launcher's command running `program` under `spec` (add its arguments with
    /// `.arg`); its working directory is not set. Needs a Tokio runtime (an allowlist's
    /// proxy runs on it).
    pub fn command(
        &self,
        spec: &Spec<'_>,
        program: &str,
    ) -> Result<(Command, Confined), SandboxError> {
        let tmp = tempfile::Builder::new()
            .prefix("switchboard-sandbox-")
            .tempdir()
            .map_err(|e| SandboxError::Setup(format!("making its temporary directory: {e}")))?;
        let path = std::env::var_os("PATH");
        let tcp = match spec.network {
            NetworkPolicy::Full => Network::Full,
            NetworkPolicy::None | NetworkPolicy::Allowlist(_) => Network::None,
        };
        let mut policy = Policy::for_workspace(
            spec.workspace,
            tmp.path(),
            path.as_deref(),
            spec.hidden,
            tcp,
        );
        let found = resolve(program, path.as_deref())
            .ok_or_else(|| SandboxError::NotFound(program.to_owned()))?;
        let needed = program_dirs(&found)
            .into_iter()
            .chain(spec.read_only.iter().cloned());
        for dir in needed {
            if !policy.read_only.iter().any(|r| dir.starts_with(r))
                && !spec
                    .hidden
                    .iter()
                    .any(|h| dir.starts_with(h) || h.starts_with(&dir))
            {
                policy.read_only.push(dir);
            }
        }
        for dir in spec.read_write {
            if !spec
                .hidden
                .iter()
                .any(|h| dir.starts_with(h) || h.starts_with(dir))
            {
                policy.read_write.push(dir.clone());
            }
        }
        policy.required = self.required;
        policy.cpu_secs = self.cpu_secs;
        policy.memory_bytes = self.memory_bytes;
        policy.connect_ports = spec.connect_ports.to_vec();
        policy.bwrap = self.bwrap.clone();
        policy.own_pids = spec.own_pids;
        let proxy = match spec.network {
            NetworkPolicy::Allowlist(hosts) => {
                let proxy = Proxy::start(hosts.clone())?;
                policy.connect_ports.push(proxy.port());
                Some(proxy)
            }
            _ => None,
        };
        let mut group = if self.pids_cgroup {
            PidsGroup::create(self.max_processes)
        } else {
            None
        };
        match &group {
            Some(g) => policy.cgroup = Some(g.path().to_path_buf()),
            // Without a cgroup, the rlimit: it counts every task of the user, so the cap is on
            // top of those running now. (The kernel exempts root from it.)
            None => {
                policy.max_processes = Some(crate::limits::tasks_of_user() + self.max_processes)
            }
        }
        let mut keep = self.env.clone();
        keep.extend(spec.env.iter().map(|(k, _)| k.clone()));
        policy.env_keep = Some(keep);
        let mut cmd = self.launcher.command(&policy, program);
        cmd.envs(spec.env.iter().map(|(k, v)| (k, v)));
        cmd.env("TMPDIR", tmp.path());
        if spec.private_home {
            cmd.env("HOME", tmp.path());
        }
        if let Some(proxy) = &proxy {
            let url = format!("http://127.0.0.1:{}", proxy.port());
            for var in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
                cmd.env(var, &url).env(var.to_ascii_lowercase(), &url);
            }
            cmd.env_remove("NO_PROXY").env_remove("no_proxy");
        }
        // With a cgroup, the directory lives as long as it.
        let tmp = match group.as_mut() {
            Some(g) => {
                g.remove_with(tmp.keep());
                None
            }
            None => Some(tmp),
        };
        Ok((
            cmd,
            Confined {
                _tmp: tmp,
                _group: group,
                _proxy: proxy,
            },
        ))
    }

    /// How a session's processes are confined: `applies` is [`Sandbox::applies`] for it,
    /// `network` its network.
    pub fn status(
        &self,
        applies: bool,
        network: &NetworkPolicy,
    ) -> switchboard_protocol::SandboxStatus {
        use switchboard_protocol::SandboxNetwork as N;
        let (wire, hosts) = match network {
            NetworkPolicy::None => (N::None, Vec::new()),
            NetworkPolicy::Full => (N::Full, Vec::new()),
            NetworkPolicy::Allowlist(h) => (N::Allowlist, h.clone()),
        };
        let (confined, detail) = if !applies {
            (
                false,
                "full-access sessions run as the server's user ([sandbox] full_access = false); a message with sandbox: true is confined".to_owned(),
            )
        } else if !self.available && self.required {
            (
                false,
                "the sandbox is required but this machine cannot sandbox (no Landlock): processes are refused".to_owned(),
            )
        } else if !self.available {
            (
                false,
                "this machine cannot sandbox (no Landlock): processes run as the server's user"
                    .to_owned(),
            )
        } else {
            (
                true,
                format!(
                    "Landlock: the workspace read-write, the system read-only; network {}; at most {} processes",
                    network.describe(),
                    self.max_processes
                ),
            )
        };
        switchboard_protocol::SandboxStatus {
            confined,
            network: wire,
            allow_hosts: hosts,
            detail,
        }
    }

    /// What a command is told of its sandbox, to tell a refusal by it from another.
    pub fn told(&self, workspace: &Path, network: &NetworkPolicy) -> String {
        format!(
            "this command ran in the sandbox: it may write only in the workspace ({}) and its temporary directory ($TMPDIR), read the system and the toolchains on PATH, not the user's home or other directories{}. A \"Permission denied\" or \"Operation not permitted\" outside those comes from the sandbox: ask the user to widen it for this session rather than retrying",
            workspace.display(),
            match network {
                NetworkPolicy::None => ", and it has no network".to_owned(),
                NetworkPolicy::Full => String::new(),
                NetworkPolicy::Allowlist(hosts) => format!(
                    ", and it reaches only {} over HTTP(S), through the proxy in $HTTPS_PROXY",
                    hosts.join(", ")
                ),
            }
        )
    }
}
