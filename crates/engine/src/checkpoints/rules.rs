//! Which files of a workspace a checkpoint records, decided as `git add --all` decides it,
//! and the walk that finds them.
//!
//! The patterns are the `ignore` crate's (gitignore syntax, `!` re-includes, `dir/` only
//! matching directories, the last matching line of a file winning); the order in which the
//! files are asked is git's (`dir.c`): the `.gitignore` of the path's own directory first,
//! then each directory above it up to the workspace's root, then `info/exclude` (the
//! checkpoint's own patterns). A path under an ignored directory is ignored whatever its
//! own patterns say, an entry named `.git` is never recorded, and a directory holding a
//! `.git` of its own is another repository (git records it as a gitlink).
//!
//! The full scan and the watched, incremental checkpoint both decide through this one type,
//! and a test checks both against git's own `add --all` ([`super::tests`]).

use std::collections::HashMap;
use std::fs::Metadata;
use std::path::{Path, PathBuf};

use ignore::gitignore::{Gitignore, GitignoreBuilder};

use super::CheckpointError;

/// The ignore rules of one workspace, with each directory's `.gitignore` read once.
pub(super) struct Rules {
    root: PathBuf,
    /// `info/exclude`: the checkpoint's own patterns.
    excludes: Gitignore,
    /// Each directory's `.gitignore` (relative directory → its patterns, `None` without one).
    dirs: HashMap<PathBuf, Option<Gitignore>>,
    /// Directories already decided (relative → ignored).
    decided: HashMap<PathBuf, bool>,
    /// Directories known to hold a `.gitattributes` or not.
    attributes: HashMap<PathBuf, bool>,
}

/// What a walk found.
#[derive(Debug, Default)]
pub(super) struct Walked {
    /// Files, symlinks and others recorded, relative, with their metadata (not followed).
    pub files: Vec<(PathBuf, Metadata)>,
    /// Directories walked (relative; the start included).
    pub dirs: Vec<PathBuf>,
    /// A directory below the root holds a `.git`: another repository.
    pub nested_repository: bool,
}

impl Rules {
    pub(super) fn new(root: &Path, patterns: &[String]) -> Result<Self, CheckpointError> {
        let mut excludes = GitignoreBuilder::new(root);
        for p in patterns {
            excludes
                .add_line(None, p)
                .map_err(|e| CheckpointError::Metadata(format!("exclude pattern {p:?}: {e}")))?;
        }
        let excludes = excludes
            .build()
            .map_err(|e| CheckpointError::Metadata(format!("exclude patterns: {e}")))?;
        Ok(Self {
            root: root.to_path_buf(),
            excludes,
            dirs: HashMap::new(),
            decided: HashMap::new(),
            attributes: HashMap::new(),
        })
    }

    pub(super) fn root(&self) -> &Path {
        &self.root
    }

    /// The `.gitignore` of `dir` (relative), read the first time. Like git, a `.gitignore`
    /// that is a symbolic link is not followed, and lines that do not parse are skipped.
    fn gitignore(&mut self, dir: &Path) -> Option<&Gitignore> {
        if !self.dirs.contains_key(dir) {
            let abs = self.root.join(dir);
            let file = abs.join(".gitignore");
            let parsed = std::fs::symlink_metadata(&file)
                .ok()
                .filter(Metadata::is_file)
                .and_then(|_| {
                    let mut b = GitignoreBuilder::new(&abs);
                    let _partial = b.add(&file);
                    b.build().ok()
                })
                .filter(|g| !g.is_empty());
            self.dirs.insert(dir.to_path_buf(), parsed);
        }
        self.dirs.get(dir).and_then(Option::as_ref)
    }

    /// What the patterns say of `rel` itself (its directories above not considered).
    fn own(&mut self, rel: &Path, is_dir: bool) -> bool {
        let abs = self.root.join(rel);
        let mut dir = rel.parent();
        while let Some(d) = dir {
            if let Some(g) = self.gitignore(d) {
                let m = g.matched(&abs, is_dir);
                if !m.is_none() {
                    return m.is_ignore();
                }
            }
            dir = d.parent();
        }
        self.excludes.matched(&abs, is_dir).is_ignore()
    }

    /// Whether the directory `rel` is left out (it or one above it is ignored).
    fn dir_ignored(&mut self, rel: &Path) -> bool {
        if rel.as_os_str().is_empty() {
            return false;
        }
        if let Some(&known) = self.decided.get(rel) {
            return known;
        }
        let above = rel.parent().is_some_and(|p| self.dir_ignored(p));
        let ignored = above || rel.file_name() == Some(".git".as_ref()) || self.own(rel, true);
        self.decided.insert(rel.to_path_buf(), ignored);
        ignored
    }

    /// Whether a `.gitattributes` in `rel`'s directory or one above it may change how git
    /// stores it (line endings, filters): then only git may hash it.
    pub(super) fn attributes_apply(&mut self, rel: &Path) -> bool {
        let mut dir = rel.parent();
        while let Some(d) = dir {
            let has = match self.attributes.get(d) {
                Some(&known) => known,
                None => {
                    let has =
                        std::fs::symlink_metadata(self.root.join(d).join(".gitattributes")).is_ok();
                    self.attributes.insert(d.to_path_buf(), has);
                    has
                }
            };
            if has {
                return true;
            }
            dir = d.parent();
        }
        false
    }

    /// Whether `rel` (a file when `!is_dir`) is left out of a checkpoint.
    pub(super) fn ignored(&mut self, rel: &Path, is_dir: bool) -> bool {
        if is_dir {
            return self.dir_ignored(rel);
        }
        if rel.file_name() == Some(".git".as_ref()) {
            return true;
        }
        rel.parent().is_some_and(|p| self.dir_ignored(p)) || self.own(rel, false)
    }

    /// Walks the directory `start` (relative; it is not itself checked) as `git add --all`
    /// would, calling `before_listing` with each level's directories before any of them is
    /// read (so a watch set there misses nothing made after), and stopping with
    /// [`CheckpointError::TooManyFiles`] past `max_files` files.
    pub(super) fn walk(
        &mut self,
        start: &Path,
        max_files: usize,
        before_listing: &mut dyn FnMut(&[PathBuf]) -> Result<(), CheckpointError>,
    ) -> Result<Walked, CheckpointError> {
        let mut out = Walked::default();
        let mut level = vec![start.to_path_buf()];
        while !level.is_empty() {
            before_listing(&level)?;
            let mut next = Vec::new();
            for dir in level {
                let Ok(entries) = std::fs::read_dir(self.root.join(&dir)) else {
                    // Gone since, or unreadable: git skips it as well.
                    out.dirs.push(dir);
                    continue;
                };
                for entry in entries.flatten() {
                    let name = entry.file_name();
                    if name == ".git" {
                        out.nested_repository |= !dir.as_os_str().is_empty();
                        continue;
                    }
                    let rel = dir.join(&name);
                    let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
                        continue;
                    };
                    if meta.is_dir() {
                        if !self.dir_ignored(&rel) {
                            next.push(rel);
                        }
                    } else if !self.ignored(&rel, false) {
                        out.files.push((rel, meta));
                        if out.files.len() > max_files {
                            return Err(CheckpointError::TooManyFiles { limit: max_files });
                        }
                    }
                }
                out.dirs.push(dir);
            }
            level = next;
        }
        Ok(out)
    }
}
