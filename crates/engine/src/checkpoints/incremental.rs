//! A watched checkpoint: the last recorded tree with only what changed applied, so its cost
//! follows the change, not the workspace's size (`git add --all` looks at every file and
//! reads and rewrites an index of all of them).
//!
//! The new tree is written by `git fast-import` from the last one: only the directories on
//! a changed path are rewritten, and the changed files' bytes go in the same pack. Where a
//! `.gitattributes` may convert a file (line endings, filters), git hashes it instead
//! (`hash-object --stdin-paths`, which converts as `git add` does). Which files
//! count is decided by [`Rules`], the same as the full scan's, and a test compares the two
//! ways on the same changes.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs::Metadata;
use std::path::{Path, PathBuf};

use super::CheckpointError;
use super::git::{EMPTY_TREE, Git, quote_path};
use super::rules::Rules;
use super::watch::Changes;

/// What to do with the last tree.
#[derive(Debug, Default)]
pub(super) struct Ops {
    /// Removed first: changed files and directories (re-added below when they exist).
    deletes: Vec<PathBuf>,
    /// Regular files for git to hash (a `.gitattributes` may convert them), with their mode
    /// and size.
    files: Vec<(PathBuf, u32, u64)>,
    /// Regular files read here (no `.gitattributes` applies): mode and bytes.
    blobs: Vec<(PathBuf, u32, Vec<u8>)>,
    /// Symbolic links, with their targets.
    links: Vec<(PathBuf, Vec<u8>)>,
}

impl Ops {
    pub(super) fn is_empty(&self) -> bool {
        self.deletes.is_empty()
            && self.files.is_empty()
            && self.blobs.is_empty()
            && self.links.is_empty()
    }
}

/// The operations that bring the last tree to the workspace's state, given what changed;
/// `None` when only a look at the whole workspace can tell (a new repository below the
/// root, a path git's batch commands cannot take). `large` (the files left out for size)
/// is kept up to date; `watch` is called with each new directory's levels before they are
/// read.
pub(super) fn plan(
    rules: &mut Rules,
    changes: Changes,
    large: &mut BTreeSet<String>,
    max_bytes: u64,
    watch: &mut dyn FnMut(&[PathBuf]),
) -> Result<Option<Ops>, CheckpointError> {
    let root = rules.root().to_path_buf();
    let mut ops = Ops::default();
    let mut walked: HashSet<PathBuf> = HashSet::new();
    let mut real_dirs: HashMap<PathBuf, bool> = HashMap::new();
    // Sorted, so a directory comes before what is under it.
    let sorted: BTreeMap<PathBuf, bool> = changes.paths.into_iter().collect();
    for (rel, &walk) in &sorted {
        let rel = rel.clone();
        if rel.ancestors().skip(1).any(|a| walked.contains(a)) {
            continue;
        }
        if rel.as_os_str().as_encoded_bytes().contains(&b'\n') {
            return Ok(None);
        }
        // Under something that is no longer a directory (a symbolic link now, or a file):
        // gone from the workspace as git sees it, whatever the link leads to. Only a
        // directory that changed itself can have become something else (its parent is
        // watched), so only those are looked at.
        let under_non_dir = rel.ancestors().skip(1).any(|a| {
            sorted.contains_key(a)
                && !*real_dirs.entry(a.to_path_buf()).or_insert_with(|| {
                    std::fs::symlink_metadata(root.join(a)).is_ok_and(|m| m.is_dir())
                })
        });
        let meta = if under_non_dir {
            None
        } else {
            std::fs::symlink_metadata(root.join(&rel)).ok()
        };
        let Some(meta) = meta else {
            forget_large(large, &rel);
            ops.deletes.push(rel);
            continue;
        };
        if meta.is_dir() {
            if !walk {
                // Only the directory's own metadata: git records none.
                continue;
            }
            forget_large(large, &rel);
            ops.deletes.push(rel.clone());
            if rules.ignored(&rel, true) {
                continue;
            }
            let found = rules.walk(&rel, usize::MAX, &mut |dirs| {
                watch(dirs);
                Ok(())
            })?;
            if found.nested_repository {
                return Ok(None);
            }
            for (file, meta) in found.files {
                if file.as_os_str().as_encoded_bytes().contains(&b'\n') {
                    return Ok(None);
                }
                record(&root, &mut ops, large, max_bytes, file, &meta);
            }
            walked.insert(rel);
        } else if rules.ignored(&rel, false) {
            ops.deletes.push(rel);
        } else {
            ops.deletes.push(rel.clone());
            record(&root, &mut ops, large, max_bytes, rel, &meta);
        }
    }
    // Files no `.gitattributes` converts are read here and handed to fast-import with the
    // trees, in one pack: no `hash-object` process, no loose object per file.
    let total: u64 = ops.files.iter().map(|(_, _, len)| len).sum();
    let converted = ops.files.iter().any(|(p, _, _)| rules.attributes_apply(p));
    if !converted && total <= MAX_INLINE {
        for (rel, mode, _) in std::mem::take(&mut ops.files) {
            match std::fs::read(root.join(&rel)) {
                Ok(bytes) => ops.blobs.push((rel, mode, bytes)),
                // Gone since: its delete stands (the watcher has recorded that too).
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                // Unreadable: `git add` decides (and says why).
                Err(_) => return Ok(None),
            }
        }
    }
    Ok(Some(ops))
}

/// At most this many bytes of changed files are read into memory for one checkpoint;
/// beyond, git reads them itself.
const MAX_INLINE: u64 = 64 * 1024 * 1024;

fn forget_large(large: &mut BTreeSet<String>, rel: &Path) {
    large.retain(|l| !Path::new(l).starts_with(rel));
}

/// One file found that the rules keep: recorded, or left out for its size.
fn record(
    root: &Path,
    ops: &mut Ops,
    large: &mut BTreeSet<String>,
    max_bytes: u64,
    rel: PathBuf,
    meta: &Metadata,
) {
    let name = rel.to_string_lossy().into_owned();
    large.remove(&name);
    if meta.is_symlink() {
        if let Ok(target) = std::fs::read_link(root.join(&rel)) {
            ops.links
                .push((rel, target.into_os_string().into_encoded_bytes()));
        }
    } else if meta.is_file() {
        if meta.len() > max_bytes {
            large.insert(name);
        } else {
            ops.files.push((rel, mode(meta), meta.len()));
        }
    }
    // Anything else (a socket, a fifo): git records nothing, and the delete stands.
}

#[cfg(unix)]
fn mode(meta: &Metadata) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    // git's rule (`ce_mode_from_stat`): executable when the owner may execute it.
    if meta.permissions().mode() & 0o100 != 0 {
        0o100755
    } else {
        0o100644
    }
}

#[cfg(not(unix))]
fn mode(_meta: &Metadata) -> u32 {
    0o100644
}

/// Applies `ops` to the tree of the commit `base`: the new tree's id.
pub(super) async fn apply(git: &Git, base: &str, ops: &Ops) -> Result<String, CheckpointError> {
    let paths: Vec<&[u8]> = ops
        .files
        .iter()
        .map(|(p, _, _)| p.as_os_str().as_encoded_bytes())
        .collect();
    let ids = git.hash_objects(&paths).await?;
    let mut s: Vec<u8> = Vec::new();
    s.extend_from_slice(
        format!(
            "feature done\ncommit refs/switchboard-staging\ncommitter Switchboard <checkpoints@switchboard.invalid> 0 +0000\ndata 0\nfrom {base}\n"
        )
        .as_bytes(),
    );
    for d in &ops.deletes {
        s.extend_from_slice(b"D ");
        quote_path(&mut s, d.as_os_str().as_encoded_bytes());
        s.push(b'\n');
    }
    for ((p, mode, _), id) in ops.files.iter().zip(&ids) {
        s.extend_from_slice(format!("M {mode:o} {id} ").as_bytes());
        quote_path(&mut s, p.as_os_str().as_encoded_bytes());
        s.push(b'\n');
    }
    for (p, mode, bytes) in &ops.blobs {
        s.extend_from_slice(format!("M {mode:o} inline ").as_bytes());
        quote_path(&mut s, p.as_os_str().as_encoded_bytes());
        s.extend_from_slice(format!("\ndata {}\n", bytes.len()).as_bytes());
        s.extend_from_slice(bytes);
        s.push(b'\n');
    }
    for (p, target) in &ops.links {
        s.extend_from_slice(b"M 120000 inline ");
        quote_path(&mut s, p.as_os_str().as_encoded_bytes());
        s.extend_from_slice(format!("\ndata {}\n", target.len()).as_bytes());
        s.extend_from_slice(target);
        s.push(b'\n');
    }
    // The root tree of the commit being made, then the end.
    s.extend_from_slice(b"ls \"\"\n\ndone\n");
    let out = git.fast_import(&s).await?;
    // `040000 tree ID\t`, or `missing …` for a tree left empty.
    let line = out.lines().next().unwrap_or_default();
    if line.starts_with("missing") {
        return Ok(EMPTY_TREE.to_owned());
    }
    match line.split_whitespace().collect::<Vec<_>>().as_slice() {
        [_, "tree", id, ..] => Ok((*id).to_owned()),
        _ => Err(CheckpointError::Metadata(format!(
            "git fast-import answered {line:?} for the root tree"
        ))),
    }
}
