//! Switchboard's own state, out of every agent's reach.
//!
//! The data directory (token file, databases), the files store, the checkpoints' shadow
//! repositories and the configuration are what an agent must never read or change: the
//! token is the admin's key, and a shadow repository's git config names commands git runs.
//! A default workspace is often `$HOME`, which holds all of them. [`ProtectedPaths`] is the
//! one list every mechanism asks: the built-in file tools (in every permission mode), file
//! sharing (`send_file`, `POST /v1/sessions/{id}/share`), checkpoints (never recorded nor
//! restored) and the session's workspace itself (never inside one of them).
//!
//! Paths are compared canonically (symlinks resolved), so a link in the workspace that
//! points into the data directory is refused as the directory itself is.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

/// The stable code a refusal carries, in tool results and on the wire.
pub const FORBIDDEN_PATH: &str = "forbidden_path";

/// The paths no agent may reach. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct ProtectedPaths {
    /// Canonical (absolute, symlinks resolved as far as the path exists), deduplicated.
    paths: Arc<Vec<PathBuf>>,
}

impl ProtectedPaths {
    /// The list from `paths`: each made absolute and canonical as far as it exists (a path
    /// that does not exist yet — a token file not yet written — is kept under its
    /// canonical parent, so it is protected once created).
    pub fn new(paths: impl IntoIterator<Item = PathBuf>) -> Self {
        let mut out: Vec<PathBuf> = Vec::new();
        for p in paths {
            let c = canonical_as_far_as_exists(&p);
            if !out.contains(&c) {
                out.push(c);
            }
        }
        // A path below another protected one adds nothing.
        let all = out.clone();
        out.retain(|p| !all.iter().any(|q| q != p && p.starts_with(q)));
        Self {
            paths: Arc::new(out),
        }
    }

    /// Every protected path.
    pub fn iter(&self) -> impl Iterator<Item = &Path> {
        self.paths.iter().map(PathBuf::as_path)
    }

    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// The protected path that is `path` or holds it, if any. `path` should already be
    /// resolved (symlinks followed); it is compared as given and canonically, so a caller
    /// holding a lexical path is covered too.
    pub fn covering(&self, path: &Path) -> Option<&Path> {
        let canonical = canonical_as_far_as_exists(path);
        self.iter()
            .find(|p| path.starts_with(p) || canonical.starts_with(p))
    }

    /// The protected paths strictly inside `dir` (canonical), for what walks a directory:
    /// checkpoints leave them out, `remove` refuses to delete their parent, start-up warns
    /// about a workspace that holds them.
    pub fn inside(&self, dir: &Path) -> Vec<&Path> {
        let dir = canonical_as_far_as_exists(dir);
        self.iter()
            .filter(|p| p.starts_with(&dir) && *p != dir)
            .collect()
    }

    /// The refusal for `given` (what the agent asked for), covered by `by`.
    pub fn refusal(given: &str, by: &Path) -> String {
        format!(
            "{FORBIDDEN_PATH}: {given:?} is Switchboard's own state ({}); agents cannot read or change it",
            by.display()
        )
    }
}

/// `path` absolute and with symlinks resolved for the part that exists; the rest appended
/// as given (`..` in the missing part is resolved lexically).
fn canonical_as_far_as_exists(path: &Path) -> PathBuf {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    };
    let mut existing = absolute.as_path();
    let mut rest: Vec<Component<'_>> = Vec::new();
    loop {
        if let Ok(c) = std::fs::canonicalize(existing) {
            let mut out = c;
            for comp in rest.iter().rev() {
                match comp {
                    Component::ParentDir => {
                        out.pop();
                    }
                    Component::Normal(n) => out.push(n),
                    _ => {}
                }
            }
            return out;
        }
        match (existing.parent(), existing.components().next_back()) {
            (Some(parent), Some(last)) => {
                rest.push(last);
                existing = parent;
            }
            _ => return absolute,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn covers_links_missing_files_and_nested_paths() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let data = root.join("data");
        std::fs::create_dir(&data).unwrap();
        std::os::unix::fs::symlink(&data, root.join("link")).unwrap();
        let p = ProtectedPaths::new([
            data.clone(),
            data.join("files"),
            root.join("cfg/config.toml"),
        ]);
        // Nested paths collapse into the outer one.
        assert_eq!(p.iter().count(), 2);
        assert_eq!(p.covering(&data.join("token")), Some(data.as_path()));
        // Through a symlink.
        assert_eq!(p.covering(&root.join("link/token")), Some(data.as_path()));
        // A file that does not exist yet, in a directory that does not exist yet.
        assert!(p.covering(&root.join("cfg/config.toml")).is_some());
        assert!(p.covering(&root.join("cfg/other.toml")).is_none());
        assert!(p.covering(&root.join("data2")).is_none());
        assert_eq!(p.inside(&root).len(), 2);
        assert!(p.inside(&data).is_empty());
        assert!(ProtectedPaths::refusal("x", &data).starts_with("forbidden_path: "));
    }
}
