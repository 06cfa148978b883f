//! Switchboard's own state and the default workspace.
//!
//! What no agent may reach ([`protected_paths`]): the data directory (token file,
//! databases, files store, checkpoints by default), the files store and checkpoints where
//! configured elsewhere, the configuration (its file, and the default configuration
//! directory), and a SQLite store outside the data directory. The engine refuses them to
//! every built-in file tool, to file sharing and as a workspace, and leaves them out of
//! checkpoints.
//!
//! The default workspace is the current directory, unless it holds any of that — the
//! common case of starting from `$HOME` — when it is `~/switchboard-workspace` instead.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use switchboard_engine::ProtectedPaths;

use crate::config::{Settings, default_config_path};

/// Where the default workspace goes when the current directory holds Switchboard's state.
const FALLBACK_WORKSPACE: &str = "switchboard-workspace";

/// Switchboard's own state, for these settings.
pub fn protected_paths(settings: &Settings) -> ProtectedPaths {
    let mut paths = vec![
        settings.data_dir.clone(),
        settings.token_path(),
        settings.files_dir.clone(),
        settings.checkpoints.dir.clone(),
    ];
    if let Some(dir) = default_config_path().parent() {
        paths.push(dir.to_path_buf());
    }
    // A file (or one not written yet), not `/dev/null` standing for "no file".
    if let Some(p) = settings
        .config_path
        .as_ref()
        .filter(|p| std::fs::metadata(p).map_or(true, |m| m.is_file()))
    {
        paths.push(p.clone());
    }
    // The secrets file, wherever it is (beside a configuration file elsewhere, or
    // SWITCHBOARD_SECRETS_FILE): its keys are not the agent's to read.
    paths.push(crate::config::secrets_path(settings.config_path.as_deref()));
    if let Some(db) = settings
        .store_url
        .as_deref()
        .and_then(|u| {
            u.strip_prefix("sqlite://")
                .or_else(|| u.strip_prefix("sqlite:"))
        })
        .map(|rest| rest.split('?').next().unwrap_or(rest))
        .filter(|p| !p.is_empty() && *p != ":memory:")
    {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            paths.push(PathBuf::from(format!("{db}{suffix}")));
        }
    }
    ProtectedPaths::new(paths)
}

/// The workspace sessions get when they name none, and why it is that one (for the
/// start-up lines).
pub fn default_workspace(
    settings: &Settings,
    protected: &ProtectedPaths,
) -> Result<(PathBuf, String)> {
    let cwd = std::env::current_dir().context("reading the current directory")?;
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from);
    choose_workspace(settings.default_cwd.as_deref(), &cwd, home, protected)
}

/// [`default_workspace`] for a given current and home directory.
fn choose_workspace(
    configured: Option<&Path>,
    cwd: &Path,
    home: Option<PathBuf>,
    protected: &ProtectedPaths,
) -> Result<(PathBuf, String)> {
    if let Some(p) = configured {
        if let Some(by) = protected.covering(p) {
            anyhow::bail!(
                "[sessions] default_cwd {} lies in Switchboard's own state ({}); choose a workspace outside it",
                p.display(),
                by.display()
            );
        }
        return Ok((p.to_path_buf(), "[sessions] default_cwd".into()));
    }
    if protected.inside(cwd).is_empty() && protected.covering(cwd).is_none() {
        return Ok((cwd.to_path_buf(), "the current directory".into()));
    }
    let base = home.unwrap_or_else(std::env::temp_dir);
    let fallback = base.join(FALLBACK_WORKSPACE);
    if !fallback.is_dir() {
        std::fs::create_dir_all(&fallback)
            .with_context(|| format!("creating the workspace {}", fallback.display()))?;
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&fallback, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("setting permissions of {}", fallback.display()))?;
    }
    Ok((
        fallback,
        format!(
            "the current directory {} holds Switchboard's own state; set [sessions] default_cwd to choose another",
            cwd.display()
        ),
    ))
}

/// A warning when `workspace` holds Switchboard's own state: the file tools refuse it, but
/// an approved `run_command` (or an ACP agent's own shell) runs with the server's rights.
pub fn warning(workspace: &Path, protected: &ProtectedPaths) -> Option<String> {
    let inside = protected.inside(workspace);
    if inside.is_empty() {
        return None;
    }
    let names: Vec<String> = inside.iter().map(|p| p.display().to_string()).collect();
    Some(format!(
        "the workspace {} holds Switchboard's own state ({}): the agent's file tools refuse it, but an approved command runs with this server's rights and can read it; choose a workspace that does not ([sessions] default_cwd)",
        workspace.display(),
        names.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workspace_holding_the_state_is_named() {
        let home = tempfile::tempdir().unwrap();
        let data = home.path().join(".local/share/switchboard");
        std::fs::create_dir_all(&data).unwrap();
        let protected = ProtectedPaths::new([data.clone()]);
        let w = warning(home.path(), &protected).unwrap();
        assert!(w.contains(".local/share/switchboard"), "{w}");
        assert!(warning(&data.join("x"), &protected).is_none());
        let elsewhere = tempfile::tempdir().unwrap();
        assert!(warning(elsewhere.path(), &protected).is_none());
    }

    #[test]
    fn started_from_home_the_default_workspace_moves_out_of_it() {
        let home = tempfile::tempdir().unwrap();
        let h = home.path().canonicalize().unwrap();
        let data = h.join(".local/share/switchboard");
        std::fs::create_dir_all(&data).unwrap();
        let protected = ProtectedPaths::new([data.clone()]);
        // From $HOME: ~/switchboard-workspace, made 0700.
        let (ws, why) = choose_workspace(None, &h, Some(h.clone()), &protected).unwrap();
        assert_eq!(ws, h.join("switchboard-workspace"));
        assert!(why.contains("holds Switchboard's own state"), "{why}");
        assert_eq!(crate::datadir::mode_of(&ws), Some(0o700));
        assert!(warning(&ws, &protected).is_none());
        // From a project: the project.
        let project = h.join("code/app");
        std::fs::create_dir_all(&project).unwrap();
        let (ws, why) = choose_workspace(None, &project, Some(h.clone()), &protected).unwrap();
        assert_eq!(
            (ws, why.as_str()),
            (project.clone(), "the current directory")
        );
        // Configured: kept (warned about elsewhere), unless it lies in the state.
        let (ws, _) = choose_workspace(Some(&h), &project, Some(h.clone()), &protected).unwrap();
        assert_eq!(ws, h);
        assert!(choose_workspace(Some(&data), &project, None, &protected).is_err());
    }
}
