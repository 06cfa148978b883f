//! The workspace root and path confinement.
//!
//! When confining, a path the model gives (relative to the root, or absolute) is resolved the
//! way the kernel would resolve it — following every symlink, including the final component
//! and dangling ones — and refused unless the result lies inside the canonical root:
//!
//! * an existing path is canonicalized and must start with the root;
//! * for a path that does not exist yet (`create`), its deepest existing ancestor is
//!   canonicalized and must lie inside the root, and the not-yet-existing remainder must not
//!   contain `..`; a dangling symlink on the way is followed by hand (its target resolved the
//!   same way), so writing through it cannot land outside either.
//!
//! The tools then operate on the resolved path, not on the one the model gave.
//!
//! **Remaining TOCTOU window:** the check and the use are separate system calls. A process
//! racing the tool (e.g. a background command the model started) can swap a directory on the
//! resolved path for a symlink to somewhere else between the check and the open, and the open
//! will follow it. Closing that window needs `openat2(2)` with `RESOLVE_BENEATH` (or an
//! `O_NOFOLLOW` walk from a root directory fd), which is only reachable through `unsafe`/libc
//! here, and `unsafe` is forbidden in this workspace. Note also that `run_command` can touch
//! anything the server user can, so confinement guards against mistakes by the model, not
//! against a hostile one.

use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};

use switchboard_engine::ProtectedPaths;

use super::ToolError;

/// How many symlinks one resolution may follow by hand before giving up (like `ELOOP`).
const MAX_LINKS: usize = 40;

/// The directory the tools work in.
#[derive(Debug, Clone)]
pub struct Workspace {
    /// Canonical (absolute, symlink-free).
    root: PathBuf,
    /// Refuse paths that resolve outside `root`.
    confine: bool,
    /// Refused in every mode, wherever they are.
    protected: ProtectedPaths,
    /// How `run_command` confines its commands here (none: it does not).
    sandbox: Option<std::sync::Arc<super::sandbox::Sandbox>>,
}

impl Workspace {
    /// Opens the workspace at `root`, which must exist and be a directory. With
    /// `confine == false` (full access) absolute paths anywhere are allowed; relative paths are
    /// always relative to the root.
    pub fn new(root: &Path, confine: bool) -> Result<Self, ToolError> {
        let canonical = std::fs::canonicalize(root).map_err(|source| ToolError::Root {
            path: root.to_path_buf(),
            source,
        })?;
        if !canonical.is_dir() {
            return Err(ToolError::RootNotDirectory(canonical));
        }
        Ok(Self {
            root: canonical,
            confine,
            protected: ProtectedPaths::default(),
            sandbox: None,
        })
    }

    /// The same, with commands run in `sandbox`.
    pub fn sandboxed(mut self, sandbox: Option<std::sync::Arc<super::sandbox::Sandbox>>) -> Self {
        self.sandbox = sandbox;
        self
    }

    /// How commands run here are confined, if they are.
    pub(crate) fn sandbox(&self) -> Option<&super::sandbox::Sandbox> {
        self.sandbox.as_deref()
    }

    /// Switchboard's own state, as paths.
    pub(crate) fn protected_paths(&self) -> Vec<PathBuf> {
        self.protected.iter().map(Path::to_path_buf).collect()
    }

    /// The same, refusing `protected` (Switchboard's own state) in every mode.
    pub fn protecting(mut self, protected: ProtectedPaths) -> Self {
        self.protected = protected;
        self
    }

    /// Whether `path` is (or lies in) Switchboard's own state.
    pub(crate) fn is_protected(&self, path: &Path) -> bool {
        self.protected.covering(path).is_some()
    }

    /// Refuses `path` (resolved, or as joined) when it is protected or, for what acts on a
    /// whole tree (`remove`), when it holds a protected path.
    fn check_protected(&self, given: &str, path: &Path, tree: bool) -> Result<(), ToolError> {
        let by = self.protected.covering(path).or_else(|| {
            tree.then(|| self.protected.inside(path).first().copied())
                .flatten()
        });
        match by {
            Some(by) => Err(ToolError::Forbidden {
                path: given.to_owned(),
                by: by.to_path_buf(),
            }),
            None => Ok(()),
        }
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The path a tool should operate on for `given`, following symlinks; refused (when
    /// confining) if it resolves outside the root.
    pub(crate) fn resolve(&self, given: &str) -> Result<PathBuf, ToolError> {
        let joined = self.join(given)?;
        if !self.confine {
            // Full access reaches anything but Switchboard's own state, through any link.
            self.check_protected(given, &joined, false)?;
            if let Ok(resolved) = resolve_physical(&joined, 0) {
                self.check_protected(given, &resolved, false)?;
            }
            return Ok(joined);
        }
        let resolved = resolve_physical(&joined, 0).map_err(|e| match e {
            ResolveError::DotDotInMissing => ToolError::Path {
                path: given.to_owned(),
                message: "contains `..` below a directory that does not exist; refused".into(),
            },
            ResolveError::TooManyLinks => ToolError::Path {
                path: given.to_owned(),
                message: "too many levels of symbolic links".into(),
            },
            ResolveError::Io(e) => ToolError::Path {
                path: given.to_owned(),
                message: e.to_string(),
            },
        })?;
        if resolved.starts_with(&self.root) {
            self.check_protected(given, &resolved, false)?;
            Ok(resolved)
        } else {
            Err(self.outside(given))
        }
    }

    /// The directory entry `given` names, without following a symlink in its final component
    /// (so that `remove` deletes a link, not its target). Refuses the root itself, and (when
    /// confining) anything whose entry or whose fully resolved target lies outside the root.
    pub(crate) fn resolve_entry(&self, given: &str) -> Result<PathBuf, ToolError> {
        let joined = self.join(given)?;
        let root_refused = || ToolError::Path {
            path: given.to_owned(),
            message: format!(
                "is the workspace root ({}); refusing to remove it",
                self.root.display()
            ),
        };
        if !self.confine {
            let is_link = std::fs::symlink_metadata(&joined).is_ok_and(|m| m.is_symlink());
            if !is_link && std::fs::canonicalize(&joined).is_ok_and(|c| c == self.root) {
                return Err(root_refused());
            }
            // Removing a link is harmless; removing a directory that holds state is not.
            self.check_protected(given, &joined, !is_link)?;
            return Ok(joined);
        }
        let target = self.resolve(given)?;
        let entry = match (joined.parent(), joined.file_name()) {
            (Some(parent), Some(name)) => {
                let parent = std::fs::canonicalize(parent).map_err(|e| ToolError::Path {
                    path: given.to_owned(),
                    message: e.to_string(),
                })?;
                parent.join(name)
            }
            // `/`, `..`, `dir/..`: no final name to keep; the target is the entry.
            _ => target,
        };
        if !entry.starts_with(&self.root) {
            return Err(self.outside(given));
        }
        if entry == self.root {
            return Err(root_refused());
        }
        let is_link = std::fs::symlink_metadata(&entry).is_ok_and(|m| m.is_symlink());
        self.check_protected(given, &entry, !is_link)?;
        Ok(entry)
    }

    fn join(&self, given: &str) -> Result<PathBuf, ToolError> {
        if given.is_empty() {
            return Err(ToolError::Path {
                path: given.to_owned(),
                message: "empty path; use \".\" for the workspace root".into(),
            });
        }
        if given.contains('\0') {
            return Err(ToolError::Path {
                path: given.to_owned(),
                message: "contains a NUL byte".into(),
            });
        }
        Ok(self.root.join(given))
    }

    fn outside(&self, given: &str) -> ToolError {
        ToolError::Outside {
            path: given.to_owned(),
            root: self.root.clone(),
        }
    }
}

#[derive(Debug)]
enum ResolveError {
    DotDotInMissing,
    TooManyLinks,
    Io(io::Error),
}

/// Resolves the absolute `path` as the kernel would, following all symlinks (also dangling
/// ones), for a path that may not exist yet.
fn resolve_physical(path: &Path, links: usize) -> Result<PathBuf, ResolveError> {
    if links > MAX_LINKS {
        return Err(ResolveError::TooManyLinks);
    }
    let components: Vec<Component<'_>> = path.components().collect();
    // Find the longest prefix that exists (as an entry: a dangling link counts).
    let mut keep = components.len();
    loop {
        let prefix: PathBuf = components[..keep].iter().collect();
        match std::fs::symlink_metadata(&prefix) {
            Ok(_) => break,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                ) && keep > 1 =>
            {
                keep -= 1;
            }
            Err(e) => return Err(ResolveError::Io(e)),
        }
    }
    let existing: PathBuf = components[..keep].iter().collect();
    let mut rest: Vec<OsString> = Vec::new();
    for c in &components[keep..] {
        match c {
            Component::Normal(name) => rest.push(name.to_os_string()),
            Component::CurDir => {}
            Component::ParentDir => return Err(ResolveError::DotDotInMissing),
            // Cannot follow an existing prefix in an absolute path.
            Component::RootDir | Component::Prefix(_) => {
                return Err(ResolveError::Io(io::Error::other("malformed path")));
            }
        }
    }
    match std::fs::canonicalize(&existing) {
        Ok(mut resolved) => {
            resolved.extend(rest);
            Ok(resolved)
        }
        Err(e) => {
            // The existing prefix is a dangling symlink (or a symlink loop): follow it by hand.
            let is_link = std::fs::symlink_metadata(&existing).is_ok_and(|m| m.is_symlink());
            if !is_link || e.kind() != io::ErrorKind::NotFound {
                return Err(ResolveError::Io(e));
            }
            let target = std::fs::read_link(&existing).map_err(ResolveError::Io)?;
            let base = existing.parent().unwrap_or(Path::new("/"));
            let mut next = base.join(target);
            next.extend(rest);
            resolve_physical(&next, links + 1)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn dangling_symlink_is_followed() {
        let ws_dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let ws = Workspace::new(ws_dir.path(), true).unwrap();
        // A dangling link pointing outside: creating through it must be refused.
        std::os::unix::fs::symlink(outside.path().join("new.txt"), ws_dir.path().join("out"))
            .unwrap();
        assert!(matches!(ws.resolve("out"), Err(ToolError::Outside { .. })));
        // A dangling link pointing inside (relative) resolves to its target.
        std::os::unix::fs::symlink("sub/new.txt", ws_dir.path().join("in")).unwrap();
        assert_eq!(ws.resolve("in").unwrap(), ws.root().join("sub/new.txt"));
        // A link chain: loop → error, not a hang.
        std::os::unix::fs::symlink("loop2", ws_dir.path().join("loop1")).unwrap();
        std::os::unix::fs::symlink("loop1", ws_dir.path().join("loop2")).unwrap();
        assert!(ws.resolve("loop1/x").is_err());
    }

    #[test]
    fn missing_remainder_with_dotdot_is_refused() {
        let ws_dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(ws_dir.path(), true).unwrap();
        assert!(ws.resolve("missing/../x").is_err());
        assert_eq!(ws.resolve("a/./b").unwrap(), ws.root().join("a/b"));
        std::fs::create_dir(ws_dir.path().join("d")).unwrap();
        assert_eq!(ws.resolve("d/../x").unwrap(), ws.root().join("x"));
        assert!(matches!(
            ws.resolve("d/../../x"),
            Err(ToolError::Outside { .. })
        ));
    }

    #[test]
    fn entry_keeps_final_link_and_refuses_root() {
        let ws_dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(ws_dir.path(), true).unwrap();
        std::fs::create_dir(ws_dir.path().join("d")).unwrap();
        std::os::unix::fs::symlink("d", ws_dir.path().join("link")).unwrap();
        assert_eq!(ws.resolve_entry("link").unwrap(), ws.root().join("link"));
        for root in [".", "./", "d/..", ws.root().to_str().unwrap()] {
            assert!(ws.resolve_entry(root).is_err(), "{root}");
        }
        let full = Workspace::new(ws_dir.path(), false).unwrap();
        assert!(full.resolve_entry(".").is_err());
        assert_eq!(full.resolve_entry("link").unwrap(), ws.root().join("link"));
    }
}
