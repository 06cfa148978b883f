//! What changed in each workspace since its last checkpoint, from the operating system's
//! file notifications (`notify`: inotify on Linux), so a checkpoint of a large workspace
//! hashes only what changed instead of looking at every file.
//!
//! One watcher (one inotify instance) serves every workspace of the process; each workspace
//! watches its recorded directories one by one (ignored ones, like `target/` or
//! `node_modules/`, are not watched, so a build does not flood the queue).
//!
//! **Nothing may be missed**, so:
//! - a checkpoint first [`Watch::sync`]s: it creates a cookie file in a directory of its own
//!   on the same watcher and waits for that file's event. The kernel queues events in order,
//!   and the watcher hands them over in order, so every change made before the checkpoint
//!   began has been recorded by then (watchman's method).
//! - anything the watcher cannot describe exactly marks the workspace `everything`, and the
//!   next checkpoint looks at the whole workspace again: a queue overflow, a `.gitignore`
//!   or `.gitattributes` changed (the rules changed), a watched directory renamed (its watches would report the
//!   old path), a new `.git` below the root (another repository), too many changed paths,
//!   a watch that could not be added, a cookie that did not come back.

use std::collections::{HashMap, HashSet};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use notify::event::{EventKind, ModifyKind};
use notify::{PathOp, RecursiveMode, WatchPathConfig, Watcher as _};
use parking_lot::Mutex;
use tokio::sync::oneshot;

/// More changed paths than this since the last checkpoint: the next one looks at everything.
const MAX_CHANGED: usize = 20_000;
/// A cookie that does not come back within this: the next checkpoint looks at everything.
const SYNC_TIMEOUT: Duration = Duration::from_secs(2);

/// What changed in one workspace since its last checkpoint.
#[derive(Debug, Default)]
pub(super) struct Changes {
    /// The next checkpoint must look at the whole workspace.
    pub everything: bool,
    /// Paths (relative) that changed; `true` when a directory there must be walked whole
    /// (it was created or moved in), `false` when only the path itself changed.
    pub paths: HashMap<PathBuf, bool>,
}

/// One workspace's state in the watcher.
#[derive(Default)]
struct Workspace {
    changes: Changes,
    /// The directories watched (relative).
    watched: HashSet<PathBuf>,
}

#[derive(Default)]
struct Shared {
    workspaces: Mutex<HashMap<PathBuf, Workspace>>,
    cookies: Mutex<HashMap<u64, oneshot::Sender<()>>>,
}

/// The process's watcher: `None` inside when it could not start (every checkpoint then
/// looks at the whole workspace, as before there was a watcher).
pub(super) struct Watch {
    watcher: Mutex<Option<notify::RecommendedWatcher>>,
    shared: Arc<Shared>,
    cookie_dir: PathBuf,
    next_cookie: AtomicU64,
}

impl Watch {
    /// Starts the watcher, with its cookies in `cookie_dir` (created, emptied).
    pub(super) fn start(cookie_dir: &Path) -> Self {
        let shared = Arc::new(Shared::default());
        let watcher = Self::watcher(cookie_dir, &shared)
            .inspect_err(|e| {
                tracing::warn!(error = %e, "no file watcher: every checkpoint looks at the whole workspace");
            })
            .ok();
        Self {
            watcher: Mutex::new(watcher),
            shared,
            cookie_dir: cookie_dir.to_path_buf(),
            next_cookie: AtomicU64::new(0),
        }
    }

    fn watcher(
        cookie_dir: &Path,
        shared: &Arc<Shared>,
    ) -> Result<notify::RecommendedWatcher, String> {
        let _ = std::fs::remove_dir_all(cookie_dir);
        std::fs::create_dir_all(cookie_dir)
            .map_err(|e| format!("{}: {e}", cookie_dir.display()))?;
        let cookie_dir = std::fs::canonicalize(cookie_dir).map_err(|e| e.to_string())?;
        let handler_shared = shared.clone();
        let handler_cookies = cookie_dir.clone();
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                handle(&handler_shared, &handler_cookies, event);
            })
            .map_err(|e| e.to_string())?;
        watcher
            .watch(&cookie_dir, RecursiveMode::NonRecursive)
            .map_err(|e| e.to_string())?;
        Ok(watcher)
    }

    /// Whether there is a watcher.
    pub(super) fn available(&self) -> bool {
        self.watcher.lock().is_some()
    }

    /// Starts following `root` (canonical) afresh: what was watched is dropped, and the next
    /// checkpoint is told to look at everything until [`Self::add`] and [`Self::take`] say
    /// otherwise.
    /// False (and nothing followed) when `root` lies inside a followed workspace or holds
    /// one: the kernel keeps one watch per directory, so two workspaces cannot share one.
    pub(super) fn reset(&self, root: &Path) -> bool {
        let old = {
            let mut all = self.shared.workspaces.lock();
            if all
                .keys()
                .any(|r| r != root && (r.starts_with(root) || root.starts_with(r)))
            {
                return false;
            }
            all.insert(root.to_path_buf(), Workspace::default())
        };
        if let Some(old) = old {
            self.unwatch(root, old.watched);
        }
        true
    }

    /// Stops following `root`.
    pub(super) fn forget(&self, root: &Path) {
        // The map's lock is let go before the watcher is called: its thread takes that lock
        // to record events, and `unwatch` waits for that thread.
        let old = self.shared.workspaces.lock().remove(root);
        if let Some(old) = old {
            self.unwatch(root, old.watched);
        }
    }

    fn unwatch(&self, root: &Path, dirs: HashSet<PathBuf>) {
        if let Some(w) = self.watcher.lock().as_mut() {
            // One at a time: a batch stops at its first failure, and a directory deleted
            // or renamed since has lost its watch already (not an error worth a word).
            for d in dirs {
                let _ = w.unwatch(&root.join(d));
            }
        }
    }

    /// Watches the directories `dirs` (relative) of `root`. False when that failed (the
    /// kernel's limit on watches, a directory gone): the workspace is then marked
    /// `everything`, and the caller stops following it.
    pub(super) fn add(&self, root: &Path, dirs: &[PathBuf]) -> bool {
        let ops = dirs
            .iter()
            .map(|d| {
                PathOp::Watch(
                    root.join(d),
                    WatchPathConfig::new(RecursiveMode::NonRecursive),
                )
            })
            .collect();
        let done = match self.watcher.lock().as_mut() {
            Some(w) => w.update_paths(ops),
            None => return false,
        };
        let mut all = self.shared.workspaces.lock();
        let Some(ws) = all.get_mut(root) else {
            // Dropped meanwhile (another workspace's checkpoint made room): not followed.
            drop(all);
            self.unwatch(root, dirs.iter().cloned().collect());
            return false;
        };
        // All of them, even when the batch failed part-way: those it did watch must be
        // unwatched later.
        ws.watched.extend(dirs.iter().cloned());
        match done {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(workspace = %root.display(), error = %e.source, "a workspace directory could not be watched; its checkpoints look at every file");
                ws.changes.everything = true;
                false
            }
        }
    }

    /// Waits until every change made before this call has been recorded (see the module).
    /// False when the watcher did not answer in time.
    pub(super) async fn sync(&self) -> bool {
        if !self.available() {
            return false;
        }
        let n = self.next_cookie.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.shared.cookies.lock().insert(n, tx);
        let path = self.cookie_dir.join(n.to_string());
        let made = tokio::fs::write(&path, b"").await.is_ok();
        let answered = made
            && tokio::time::timeout(SYNC_TIMEOUT, rx)
                .await
                .is_ok_and(|r| r.is_ok());
        self.shared.cookies.lock().remove(&n);
        let _ = tokio::fs::remove_file(&path).await;
        answered
    }

    /// What changed in `root` since the last call (or since [`Self::reset`]); `None` when
    /// `root` is not followed.
    pub(super) fn take(&self, root: &Path) -> Option<Changes> {
        let mut all = self.shared.workspaces.lock();
        all.get_mut(root).map(|ws| std::mem::take(&mut ws.changes))
    }

    /// The workspaces followed.
    #[cfg(test)]
    pub(super) fn followed(&self) -> usize {
        self.shared.workspaces.lock().len()
    }
}

/// Records one notification (on the watcher's thread).
fn handle(shared: &Shared, cookie_dir: &Path, event: notify::Result<notify::Event>) {
    let event = match event {
        Ok(event) => event,
        Err(e) => {
            tracing::warn!(error = %e, "the file watcher failed; the next checkpoints look at everything");
            for ws in shared.workspaces.lock().values_mut() {
                ws.changes.everything = true;
            }
            return;
        }
    };
    if event.need_rescan() {
        for ws in shared.workspaces.lock().values_mut() {
            ws.changes.everything = true;
        }
    }
    if matches!(event.kind, EventKind::Access(_)) {
        return;
    }
    let mut workspaces = shared.workspaces.lock();
    for path in &event.paths {
        if path.parent() == Some(cookie_dir) {
            if let EventKind::Create(_) = event.kind
                && let Some(n) = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .and_then(|n| n.parse().ok())
                && let Some(tx) = shared.cookies.lock().remove(&n)
            {
                let _ = tx.send(());
            }
            continue;
        }
        let Some((root, ws)) = path
            .ancestors()
            .find_map(|a| workspaces.get_key_value(a).map(|(root, _)| root.clone()))
            .and_then(|root| workspaces.get_mut(&root).map(|ws| (root, ws)))
        else {
            continue;
        };
        let Ok(rel) = path.strip_prefix(&root) else {
            continue;
        };
        record(ws, rel, &event.kind);
    }
}

/// Records that `rel` changed in `ws` (see the module for what marks `everything`).
fn record(ws: &mut Workspace, rel: &Path, kind: &EventKind) {
    if ws.changes.everything {
        return;
    }
    let depth = rel.components().count();
    let names_git = rel
        .components()
        .any(|c| matches!(c, Component::Normal(n) if n == ".git"));
    if names_git {
        // The root's own `.git` is never recorded (and not watched); one below the root
        // makes its directory another repository.
        if rel.components().next() == Some(Component::Normal(".git".as_ref())) {
            return;
        }
        ws.changes.everything = true;
        return;
    }
    let renamed = matches!(kind, EventKind::Modify(ModifyKind::Name(_)));
    if depth == 0
        || rel.file_name() == Some(".gitignore".as_ref())
        || rel.file_name() == Some(".gitattributes".as_ref())
        || (renamed && ws.watched.contains(rel))
    {
        ws.changes.everything = true;
        return;
    }
    if matches!(kind, EventKind::Remove(_)) {
        // A directory deleted: the kernel dropped its watch (and those below).
        ws.watched.retain(|d| !d.starts_with(rel));
    }
    let walk = !matches!(
        kind,
        EventKind::Modify(ModifyKind::Data(_) | ModifyKind::Metadata(_)) | EventKind::Remove(_)
    );
    *ws.changes.paths.entry(rel.to_path_buf()).or_default() |= walk;
    if ws.changes.paths.len() > MAX_CHANGED {
        ws.changes.everything = true;
        ws.changes.paths.clear();
    }
}
