//! What caps a sandboxed command's resources: a cgroup of its own whose `pids.max` bounds
//! its processes (a fork bomb stops there, whoever the user is), and rlimits — CPU time,
//! address space, and `RLIMIT_NPROC` where no cgroup can be made (it binds every user but
//! root).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use nix::sys::resource::{Resource, setrlimit};

use crate::{Policy, SandboxError};

/// Seconds of CPU time past `cpu_secs` before a process ignoring SIGXCPU is killed.
const CPU_GRACE_SECS: u64 = 3;

/// Applies `p`'s cgroup and rlimits to this process.
pub(crate) fn apply(p: &Policy) -> Result<(), SandboxError> {
    let fail = |what: &str, e: &dyn std::fmt::Display| SandboxError::Limits(format!("{what}: {e}"));
    if let Some(cg) = &p.cgroup {
        std::fs::write(cg.join("cgroup.procs"), std::process::id().to_string())
            .map_err(|e| fail("joining its cgroup", &e))?;
    }
    for (resource, value, what) in [
        (Resource::RLIMIT_NPROC, p.max_processes, "RLIMIT_NPROC"),
        (Resource::RLIMIT_CPU, p.cpu_secs, "RLIMIT_CPU"),
        (Resource::RLIMIT_AS, p.memory_bytes, "RLIMIT_AS"),
    ] {
        if let Some(v) = value {
            // CPU time: SIGXCPU at the limit ("CPU time limit exceeded"), SIGKILL a few
            // seconds on for a process that ignores it.
            let hard = if resource == Resource::RLIMIT_CPU {
                v.saturating_add(CPU_GRACE_SECS)
            } else {
                v
            };
            setrlimit(resource, v, hard).map_err(|e| fail(what, &e))?;
        }
    }
    Ok(())
}

/// How many tasks (threads) the user of this process runs now: `RLIMIT_NPROC` counts them
/// all, so a cap of `max` more is this plus `max`.
pub(crate) fn tasks_of_user() -> u64 {
    let uid = nix::unistd::getuid().as_raw().to_string();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut n = 0;
    for e in dir.flatten() {
        if !e
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(e.path().join("status")) else {
            continue;
        };
        let real_uid = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().next());
        if real_uid == Some(uid.as_str()) {
            n += status
                .lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|t| t.trim().parse::<u64>().ok())
                .unwrap_or(1);
        }
    }
    n
}

/// Drops every capability this process has (it has some when it runs as root): what it
/// executes then has none, and cannot get them back. Without this, root's
/// `CAP_SYS_PTRACE` lets a sandboxed command read other processes' memory and environment
/// through `/proc` (the server's, with its token) despite Landlock.
pub(crate) fn drop_capabilities() -> Result<(), SandboxError> {
    use caps::CapSet;
    let fail = |what: &str, e: caps::errors::CapsError| {
        SandboxError::Limits(format!("dropping capabilities ({what}): {e}"))
    };
    let permitted = caps::read(None, CapSet::Permitted).map_err(|e| fail("reading", e))?;
    if permitted.is_empty() {
        return Ok(());
    }
    // The bounding set first (it takes CAP_SETPCAP, which goes with the rest below).
    if permitted.contains(&caps::Capability::CAP_SETPCAP) {
        for cap in caps::read(None, CapSet::Bounding).map_err(|e| fail("reading", e))? {
            caps::drop(None, CapSet::Bounding, cap).map_err(|e| fail("bounding", e))?;
        }
    }
    for (set, what) in [
        (CapSet::Ambient, "ambient"),
        (CapSet::Inheritable, "inheritable"),
        (CapSet::Effective, "effective"),
        (CapSet::Permitted, "permitted"),
    ] {
        caps::clear(None, set).map_err(|e| fail(what, e))?;
    }
    Ok(())
}

/// The directory under which this process may make cgroups that cap processes (the `pids`
/// hierarchy of cgroup v1, or a cgroup v2 directory with the `pids` controller delegated),
/// found once.
pub(crate) fn pids_root() -> Option<PathBuf> {
    static ROOT: OnceLock<Option<PathBuf>> = OnceLock::new();
    ROOT.get_or_init(|| {
        let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let mut candidates = Vec::new();
        for line in own.lines() {
            let mut parts = line.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            let rel = path.trim_start_matches('/');
            if controllers.split(',').any(|c| c == "pids") {
                candidates.push(Path::new("/sys/fs/cgroup/pids").join(rel));
            } else if controllers.is_empty() {
                candidates.push(Path::new("/sys/fs/cgroup").join(rel));
                candidates.push(Path::new("/sys/fs/cgroup/unified").join(rel));
            }
        }
        // Usable when a cgroup made there takes a `pids.max`.
        candidates.into_iter().find(|root| {
            let probe = root.join(format!("switchboard-probe-{}", std::process::id()));
            let ok = std::fs::create_dir(&probe).is_ok()
                && std::fs::write(probe.join("pids.max"), "64").is_ok();
            let _ = std::fs::remove_dir(&probe);
            ok
        })
    })
    .clone()
}

/// A cgroup of one command, capping its processes — and whatever the command leaves running
/// in the background, which keeps the cgroup (and the cap) until it ends. Dropped when the
/// command has ended: removed at once when empty, else once what runs in it has ended (a
/// janitor thread tries every few seconds), and with it the paths given to
/// [`PidsGroup::remove_with`].
#[derive(Debug)]
pub struct PidsGroup {
    dir: PathBuf,
    with: Vec<PathBuf>,
}

impl PidsGroup {
    /// A new cgroup allowing `max` processes, where this machine lets one be made.
    pub fn create(max: u64) -> Option<PidsGroup> {
        static N: AtomicU64 = AtomicU64::new(0);
        let root = pids_root()?;
        let dir = root.join(format!(
            "switchboard-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&dir).ok()?;
        let group = PidsGroup {
            dir,
            with: Vec::new(),
        };
        std::fs::write(group.dir.join("pids.max"), max.to_string()).ok()?;
        Some(group)
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Removes `path` (a directory) when the cgroup goes: the command's temporary directory,
    /// which what it left running may still use.
    pub fn remove_with(&mut self, path: PathBuf) {
        self.with.push(path);
    }
}

/// Removes `dir` (a cgroup) and then `with`; `false` while the cgroup still has processes.
fn remove(dir: &Path, with: &[PathBuf]) -> bool {
    match std::fs::remove_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(_) => return false,
    }
    for p in with {
        let _ = std::fs::remove_dir_all(p);
    }
    true
}

impl Drop for PidsGroup {
    fn drop(&mut self) {
        if !remove(&self.dir, &self.with) {
            later(self.dir.clone(), std::mem::take(&mut self.with));
        }
    }
}

/// Cgroups to remove once their processes have ended, tried every few seconds by one thread.
fn later(dir: PathBuf, with: Vec<PathBuf>) {
    type Pending = std::sync::Mutex<Vec<(PathBuf, Vec<PathBuf>)>>;
    static PENDING: OnceLock<std::sync::Arc<Pending>> = OnceLock::new();
    let pending = PENDING.get_or_init(|| {
        let pending: std::sync::Arc<Pending> = std::sync::Arc::default();
        let mine = pending.clone();
        let started = std::thread::Builder::new()
            .name("sandbox-janitor".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(std::time::Duration::from_secs(3));
                    if let Ok(mut list) = mine.lock() {
                        list.retain(|(dir, with)| !remove(dir, with));
                    }
                }
            });
        if let Err(e) = started {
            tracing::warn!(error = %e, "the sandbox's janitor thread did not start: cgroups of finished commands stay");
        }
        pending
    });
    if let Ok(mut list) = pending.lock() {
        list.push((dir, with));
    }
}
