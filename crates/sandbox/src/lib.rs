//! The sandbox every process an agent starts runs in: read-write only its workspace and a
//! private temporary directory, read-only the system and the toolchains on `PATH`, nothing
//! else (not the user's home, not Switchboard's data or configuration, not other
//! workspaces); no TCP unless the policy allows the network; no signals to processes outside
//! it; a cap on its processes.
//!
//! The confinement is Linux Landlock (through the `landlock` crate: no external binary, no
//! privilege), entered by a small launcher — `switchboard sandbox-exec POLICY -- PROGRAM
//! ARGS…` — that applies the [`Policy`] to itself and then executes the program, which
//! inherits it and cannot undo it. Through a launcher rather than in the forked child:
//! restricting a process between `fork` and `exec` needs `unsafe` code (and care about what
//! the child of a multi-threaded server may call), while the launcher is an ordinary
//! single-purpose process using safe APIs only.

mod confine;
mod limits;
mod ns;
mod proxy;
mod rules;

use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, LandlockStatus, NetPort, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, path_beneath_rules,
};
use serde::{Deserialize, Serialize};

pub use confine::{Confined, NetworkPolicy, Sandbox, Spec, needed_by};
pub use limits::PidsGroup;
pub use rules::{ProgramRules, known_dirs};

/// The newest Landlock ABI this crate asks for (the kernel's own, when older, is used).
const ABI_WANTED: ABI = ABI::V7;

/// The name of the launcher's subcommand of the `switchboard` binary.
pub const SUBCOMMAND: &str = "sandbox-exec";

/// Whether a sandboxed process may use TCP (Landlock's rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    /// No TCP at all, connecting or listening (loopback included).
    #[default]
    None,
    /// Whatever the server itself may reach.
    Full,
}

impl Network {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Full => "full",
        }
    }
}

/// What one sandboxed process may do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    /// Read, write, create, remove, run beneath these (the workspace, the private temporary
    /// directory).
    pub read_write: Vec<PathBuf>,
    /// Read and run beneath these (the system, the toolchains).
    pub read_only: Vec<PathBuf>,
    /// Read and write these device files (not create anything beside them).
    pub devices: Vec<PathBuf>,
    pub network: Network,
    /// TCP ports it may connect to even under `Network::None` (an allowlist's proxy).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub connect_ports: Vec<u16>,
    /// Refuse to run when Landlock cannot be enforced (else run unconfined and say so).
    pub required: bool,
    /// A cgroup to join before running (its `pids.max` caps the processes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<PathBuf>,
    /// `RLIMIT_NPROC`, where no cgroup caps the processes (on top of the user's tasks running now).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_processes: Option<u64>,
    /// `RLIMIT_CPU`, in seconds of CPU time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_secs: Option<u64>,
    /// `RLIMIT_AS`, in bytes of address space.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// Run inside namespaces made by this `bwrap` (see `ns`), Landlock on top.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bwrap: Option<PathBuf>,
    /// Under namespaces, a PID namespace too: its processes see only each other, and end
    /// when it does (so not for a command, whose background processes outlive it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub own_pids: bool,
    /// The environment variables the program gets (names, or prefixes ending in `*`), besides
    /// [`ENV_ALLOWED`]; `None`: all of the launcher's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_keep: Option<Vec<String>>,
}

/// The variables a sandboxed program gets from the server's environment by default: what
/// ordinary tools and toolchains need to run (locale, terminal, where toolchains live,
/// certificate bundles, the proxies of a network that is allowed) — no credentials.
/// `[sandbox] env` adds names.
pub const ENV_ALLOWED: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "TERM",
    "COLORTERM",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "TMPDIR",
    "PWD",
    "EDITOR",
    "PAGER",
    "GIT_TERMINAL_PROMPT",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "GOPATH",
    "GOROOT",
    "GOCACHE",
    "JAVA_HOME",
    "NVM_DIR",
    "NVM_BIN",
    "PYENV_ROOT",
    "PYENV_VERSION",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "UV_CACHE_DIR",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "CURL_CA_BUNDLE",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
];

/// Whether `name` is among `keep` (names, or prefixes ending in `*`) or [`ENV_ALLOWED`].
pub fn env_allowed(name: &str, keep: &[String]) -> bool {
    let matches = |pattern: &str| match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == pattern,
    };
    ENV_ALLOWED.iter().any(|p| matches(p)) || keep.iter().any(|p| matches(p))
}

/// The system directories ordinary tools read (and run programs from).
/// (Not `/run` or `/var`: their sockets and services are not a command's business; only the
/// resolver's files, for a network that is allowed.)
const SYSTEM: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/proc",
    "/sys",
    "/run/systemd/resolve",
];

/// Toolchain managers' directories (beside a home directory on `PATH`), read-only.
const TOOLCHAIN_ROOTS: &[&str] = &[
    ".rustup",
    ".pyenv",
    ".rbenv",
    ".nodenv",
    ".nvm",
    ".volta",
    ".bun",
    ".deno",
    ".asdf",
    ".sdkman",
    ".local/share/mise",
    ".local/share/fnm",
];

/// The home directory a `PATH` entry such as `~/.pyenv/shims` or `~/.local/bin` lies in:
/// the parent of its first hidden component.
fn toolchain_home(dir: &Path) -> Option<PathBuf> {
    let mut home = PathBuf::new();
    for c in dir.components() {
        if let std::path::Component::Normal(name) = c
            && name.to_string_lossy().starts_with('.')
        {
            return Some(home);
        }
        home.push(c);
    }
    None
}

/// The device files a shell and ordinary tools write or read. (Not `/dev/stdin` and the like:
/// they lead through `/proc` to this process's own pipes, which are no place to grant.)
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/pts",
    "/dev/ptmx",
    "/dev/shm",
];

impl Policy {
    /// The usual policy of a command: read-write `workspace` and `tmp`, read-only the system
    /// and the directories of `path` (a `PATH` value) — except any beneath `hidden`
    /// (Switchboard's own state, which stays out of reach even when it sits among them).
    pub fn for_workspace(
        workspace: &Path,
        tmp: &Path,
        path: Option<&std::ffi::OsStr>,
        hidden: &[PathBuf],
        network: Network,
    ) -> Policy {
        let mut read_only: Vec<PathBuf> = SYSTEM.iter().map(PathBuf::from).collect();
        let dirs: Vec<PathBuf> = path
            .map(|p| {
                std::env::split_paths(p)
                    .filter(|d| d.is_absolute())
                    .collect()
            })
            .unwrap_or_default();
        let grant = |dir: PathBuf, read_only: &mut Vec<PathBuf>| {
            if !read_only.iter().any(|r| dir.starts_with(r))
                && !hidden
                    .iter()
                    .any(|h| dir.starts_with(h) || h.starts_with(&dir))
            {
                read_only.push(dir);
            }
        };
        for dir in &dirs {
            grant(dir.clone(), &mut read_only);
        }
        // A toolchain manager's shims run programs from its own directory (`~/.pyenv/shims`
        // runs `~/.pyenv/libexec/pyenv`, `~/.cargo/bin/cargo` is rustup reading
        // `~/.rustup`): the managers' directories beside a PATH entry's are granted too —
        // these only, never the home directory itself (`~/.cargo`, with its credentials,
        // stays out).
        for home in dirs.iter().filter_map(|d| toolchain_home(d)) {
            for name in TOOLCHAIN_ROOTS {
                let root = home.join(name);
                if root.is_dir() {
                    grant(root, &mut read_only);
                }
            }
        }
        Policy {
            read_write: vec![workspace.to_path_buf(), tmp.to_path_buf()],
            read_only,
            devices: DEVICES.iter().map(PathBuf::from).collect(),
            network,
            connect_ports: Vec::new(),
            required: false,
            cgroup: None,
            max_processes: None,
            cpu_secs: None,
            memory_bytes: None,
            bwrap: None,
            own_pids: false,
            env_keep: None,
        }
    }

    /// The launcher's environment as the program gets it: only the allowed variables
    /// (`env_keep`), or all of them.
    pub fn environment(&self) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
        std::env::vars_os()
            .filter(|(k, _)| match (&self.env_keep, k.to_str()) {
                (None, _) => true,
                (Some(keep), Some(k)) => env_allowed(k, keep),
                (Some(_), None) => false,
            })
            .collect()
    }

    /// The launcher's argument.
    pub fn to_arg(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    pub fn from_arg(arg: &str) -> Result<Policy, SandboxError> {
        serde_json::from_str(arg).map_err(|e| SandboxError::Policy(e.to_string()))
    }

    /// Confines the calling thread (and what it executes from now on) to this policy: the
    /// process limits, the cgroup, then Landlock. For the launcher, right before `exec`.
    pub fn enter(&self) -> Result<Enforcement, SandboxError> {
        self.apply_limits()?;
        limits::drop_capabilities()?;
        let status = self.restrict()?;
        let enforcement = match status {
            RulesetStatus::FullyEnforced => Enforcement::Full,
            RulesetStatus::PartiallyEnforced => Enforcement::Partial,
            RulesetStatus::NotEnforced => Enforcement::None,
        };
        if self.required && enforcement == Enforcement::None {
            return Err(SandboxError::Unavailable(
                "Landlock is not available in this kernel".into(),
            ));
        }
        Ok(enforcement)
    }

    /// The process limits and the cgroup, alone (the first stage under namespaces).
    pub fn apply_limits(&self) -> Result<(), SandboxError> {
        limits::apply(self)
    }

    fn restrict(&self) -> Result<RulesetStatus, SandboxError> {
        let fail = |e: landlock::RulesetError| SandboxError::Landlock(e.to_string());
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(AccessFs::from_all(ABI_WANTED))
            .map_err(fail)?
            // Signals and abstract sockets stay inside the sandbox: a command cannot kill
            // or talk to the server (or anything else of this user) that way.
            .scope(Scope::from_all(ABI_WANTED))
            .map_err(fail)?;
        if self.network == Network::None {
            ruleset = ruleset
                .handle_access(AccessNet::from_all(ABI_WANTED))
                .map_err(fail)?;
        }
        let read = AccessFs::from_read(ABI_WANTED);
        let all = AccessFs::from_all(ABI_WANTED);
        let device = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::ReadDir;
        let existing = |paths: &[PathBuf]| -> Vec<PathBuf> {
            paths.iter().filter(|p| p.exists()).cloned().collect()
        };
        let status = ruleset
            .create()
            .map_err(fail)?
            .add_rules(path_beneath_rules(existing(&self.read_only), read))
            .map_err(fail)?
            .add_rules(path_beneath_rules(existing(&self.devices), device))
            .map_err(fail)?
            .add_rules(path_beneath_rules(existing(&self.read_write), all))
            .map_err(fail)?
            .add_rules(
                self.connect_ports
                    .iter()
                    .filter(|_| self.network == Network::None)
                    .map(|p| {
                        Ok::<_, landlock::RulesetError>(NetPort::new(*p, AccessNet::ConnectTcp))
                    }),
            )
            .map_err(fail)?
            .restrict_self()
            .map_err(fail)?;
        Ok(status.ruleset)
    }
}

/// How much of a policy the kernel enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enforcement {
    Full,
    /// The kernel's Landlock is older than what was asked: its own rights are enforced.
    Partial,
    None,
}

/// What this machine offers for sandboxing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mechanisms {
    /// The kernel's Landlock ABI, if Landlock is on.
    pub landlock_abi: Option<i32>,
    /// Where a cgroup per command can be made to cap its processes.
    pub pids_cgroup: Option<PathBuf>,
    /// bubblewrap, where it can make namespaces here.
    pub bwrap: Option<PathBuf>,
}

impl Mechanisms {
    /// Whether a command can be confined here.
    pub fn available(&self) -> bool {
        self.landlock_abi.is_some()
    }

    /// In words, for `doctor` and the start-up line.
    pub fn describe(&self) -> String {
        let fs = match self.landlock_abi {
            Some(abi) => format!(
                "Landlock ABI {abi} (files; {})",
                if abi >= 4 {
                    "TCP too"
                } else {
                    "no TCP rules: the network stays open"
                }
            ),
            None => "no Landlock in this kernel".into(),
        };
        let pids = match &self.pids_cgroup {
            Some(p) => format!("processes capped by a cgroup under {}", p.display()),
            None => "processes capped by RLIMIT_NPROC (which does not bind root: no cap for root)"
                .into(),
        };
        let ns = match &self.bwrap {
            Some(b) => format!(
                "namespaces (mount, PID, IPC, network) by {}",
                ns::version(b).unwrap_or_else(|| b.display().to_string())
            ),
            None => "no namespaces (bubblewrap is not installed, or cannot make them here)".into(),
        };
        format!("{fs}; {pids}; {ns}")
    }
}

/// Asks the kernel what it offers. Landlock is tried on a thread of its own that ends at
/// once (a restriction binds only the thread that makes it), so this process stays free.
pub fn probe() -> Mechanisms {
    let landlock_abi = std::thread::spawn(|| {
        let status = Ruleset::default()
            .handle_access(AccessFs::Execute)
            .ok()?
            .create()
            .ok()?
            .restrict_self()
            .ok()?;
        match status.landlock {
            LandlockStatus::Available {
                effective_abi,
                kernel_abi,
            } => Some(kernel_abi.unwrap_or(effective_abi as i32)),
            _ => None,
        }
    })
    .join()
    .ok()
    .flatten();
    Mechanisms {
        landlock_abi,
        pids_cgroup: limits::pids_root(),
        // Namespaces go on top of Landlock, never instead of it.
        bwrap: landlock_abi.and_then(|_| ns::probe()),
    }
}

/// What went wrong setting a sandbox up.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("the sandbox policy is not valid: {0}")]
    Policy(String),
    #[error("the sandbox could not be entered (Landlock): {0}")]
    Landlock(String),
    #[error("the sandbox's limits could not be set: {0}")]
    Limits(String),
    #[error("{0}: no such program (not a file, nor on PATH)")]
    NotFound(String),
    #[error("the sandbox could not be set up: {0}")]
    Setup(String),
    #[error("no sandbox is available here: {0}")]
    Unavailable(String),
}

/// Starts programs through the launcher: `EXE sandbox-exec POLICY -- PROGRAM ARGS…`.
#[derive(Debug, Clone)]
pub struct Launcher {
    exe: PathBuf,
}

impl Launcher {
    /// The launcher is the binary at `exe` (the `switchboard` binary).
    pub fn new(exe: PathBuf) -> Launcher {
        Launcher { exe }
    }

    /// A command that runs `program` under `policy` (add its arguments with `.arg`).
    pub fn command(&self, policy: &Policy, program: &str) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.exe);
        cmd.arg(SUBCOMMAND)
            .arg(policy.to_arg())
            .arg("--")
            .arg(program);
        cmd
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_policy_goes_through_its_argument_and_keeps_state_out_of_path() {
        let p = Policy::for_workspace(
            Path::new("/w"),
            Path::new("/t"),
            Some(std::ffi::OsStr::new(
                "/usr/bin:/home/me/.cargo/bin:/srv/sb/data/bin:relative",
            )),
            &[PathBuf::from("/srv/sb/data")],
            Network::None,
        );
        assert!(p.read_only.contains(&PathBuf::from("/home/me/.cargo/bin")));
        assert!(!p.read_only.contains(&PathBuf::from("/home/me/.cargo")));
        assert!(!p.read_only.contains(&PathBuf::from("/home/me")));
        assert_eq!(
            toolchain_home(Path::new("/root/.pyenv/shims")),
            Some(PathBuf::from("/root"))
        );
        assert_eq!(toolchain_home(Path::new("/usr/bin")), None);
        assert!(!p.read_only.iter().any(|r| r.starts_with("/srv/sb")));
        assert!(!p.read_only.contains(&PathBuf::from("relative")));
        assert_eq!(Policy::from_arg(&p.to_arg()).unwrap(), p);
        assert!(Policy::from_arg("{").is_err());
    }
}
