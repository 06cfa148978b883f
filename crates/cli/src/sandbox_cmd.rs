//! `switchboard sandbox-exec POLICY -- PROGRAM ARGS…`: the sandbox's launcher (not in
//! `--help`: Switchboard runs it, people do not). It confines itself to the policy and
//! becomes the program. And what `serve` and `doctor` say of the sandbox.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::ExitCode;
use std::sync::Arc;

use switchboard_sandbox::{Launcher, Mechanisms, Policy, Sandbox};

use crate::config::{SandboxMode, Settings};

/// Exit status when the sandbox could not be set up (as a shell's "cannot execute").
const CANNOT_CONFINE: u8 = 126;

/// Runs the launcher with the arguments after `sandbox-exec`.
pub fn exec(args: &[OsString]) -> ExitCode {
    let fail = |message: String| {
        eprintln!("switchboard sandbox: {message}");
        ExitCode::from(CANNOT_CONFINE)
    };
    let [policy, sep, program, rest @ ..] = args else {
        return fail("usage: switchboard sandbox-exec POLICY -- PROGRAM [ARGS…]".into());
    };
    if sep != "--" {
        return fail("usage: switchboard sandbox-exec POLICY -- PROGRAM [ARGS…]".into());
    }
    let policy = match policy.to_str().map(Policy::from_arg) {
        Some(Ok(p)) => p,
        Some(Err(e)) => return fail(e.to_string()),
        None => return fail("the policy is not UTF-8".into()),
    };
    // Under namespaces, two stages: the limits, then bubblewrap running this launcher again
    // with the Landlock part.
    if let Some(bwrap) = &policy.bwrap {
        if let Err(e) = policy.apply_limits() {
            return fail(e.to_string());
        }
        let exe = match std::env::current_exe() {
            Ok(exe) => exe,
            Err(e) => return fail(format!("the path of this binary: {e}")),
        };
        let err = policy.namespaces_command(bwrap, &exe, program, rest).exec();
        return fail(format!("cannot run {}: {err}", bwrap.display()));
    }
    if let Err(e) = policy.enter() {
        return fail(e.to_string());
    }
    let err = std::process::Command::new(program)
        .args(rest)
        .env_clear()
        .envs(policy.environment())
        .exec();
    eprintln!(
        "switchboard sandbox: cannot run {}: {err}",
        program.to_string_lossy()
    );
    ExitCode::from(127)
}

/// What this machine offers; `SWITCHBOARD_SANDBOX_MECHANISMS=none` pretends it offers
/// nothing (to see what `auto` and `required` do on such a machine).
/// Asked once per process.
pub fn mechanisms() -> Mechanisms {
    static FOUND: std::sync::OnceLock<Mechanisms> = std::sync::OnceLock::new();
    FOUND
        .get_or_init(|| {
            if switchboard_settings::env("SWITCHBOARD_SANDBOX_MECHANISMS").as_deref()
                == Some("none")
            {
                return Mechanisms {
                    landlock_abi: None,
                    pids_cgroup: None,
                    bwrap: None,
                };
            }
            let mut found = switchboard_sandbox::probe();
            // Landlock alone (processes capped by RLIMIT_NPROC), to compare.
            if switchboard_settings::env("SWITCHBOARD_SANDBOX_MECHANISMS").as_deref()
                == Some("landlock")
            {
                found.bwrap = None;
                found.pids_cgroup = None;
            }
            found
        })
        .clone()
}

/// The server's sandbox, from `[sandbox]` and what this machine offers.
pub fn settings(settings: &Settings, found: &Mechanisms) -> Option<Arc<Sandbox>> {
    let c = &settings.sandbox;
    if c.mode == SandboxMode::Off {
        return None;
    }
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            tracing::warn!(error = %e, "the path of this binary is unknown: commands cannot be sandboxed");
            return None;
        }
    };
    Some(Arc::new(Sandbox {
        launcher: Launcher::new(exe),
        required: c.mode == SandboxMode::Required,
        network: c.network.clone(),
        mcp_network: c.mcp_network.clone(),
        max_processes: c.max_processes,
        cpu_secs: c.cpu_secs,
        memory_bytes: c.memory_bytes,
        full_access: c.full_access,
        available: found.available(),
        env: c.env.clone(),
        bwrap: found.bwrap.clone(),
        pids_cgroup: found.pids_cgroup.is_some(),
    }))
}

/// One line: the mode, what it uses here, and for whom.
pub fn describe(settings: &Settings, found: &Mechanisms) -> String {
    let c = &settings.sandbox;
    let whom = if c.full_access {
        "every session's commands"
    } else {
        "commands of sessions not in full-access mode"
    };
    match (c.mode, found.available()) {
        (SandboxMode::Off, _) => {
            "off ([sandbox] mode = \"off\"): commands run as the server's user".into()
        }
        (mode, true) => format!(
            "{} — {whom}, network {}, at most {} processes; {}",
            mode.as_str(),
            c.network.describe(),
            c.max_processes,
            found.describe()
        ),
        (SandboxMode::Required, false) => format!(
            "required, but this machine cannot sandbox ({}): every command is refused",
            found.describe()
        ),
        (_, false) => format!(
            "auto, but this machine cannot sandbox ({}): commands run as the server's user",
            found.describe()
        ),
    }
}

/// How the ACP agent `a` is confined: `None` when the sandbox is off, or off for it.
pub fn agent_sandbox(
    sandbox: Option<&Arc<Sandbox>>,
    a: &crate::config::AgentSection,
) -> Option<switchboard_acp::AgentSandbox> {
    let sandbox = sandbox?;
    if a.sandbox.enabled == Some(false) {
        return None;
    }
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let words: Vec<&str> = std::iter::once(a.command.as_str())
        .chain(a.args.iter().map(String::as_str))
        .collect();
    Some(switchboard_acp::AgentSandbox {
        sandbox: sandbox.clone(),
        // Checked when the configuration was read.
        network: a.sandbox.network().unwrap_or_default(),
        read_write: a.sandbox.read_write(&words, home.as_deref()),
    })
}
