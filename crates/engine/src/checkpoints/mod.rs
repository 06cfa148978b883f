//! Workspace checkpoints: the state of a session's workspace before and after each run, in a
//! shadow repository outside the workspace, so a user can see what a run changed and put the
//! workspace back — whatever the backend (the built-in agent, Claude Code or Gemini over ACP),
//! without its cooperation.
//!
//! **Why the `git` binary** (and not `gix`): a checkpoint must apply exactly git's
//! `.gitignore` rules and be fast on a large unchanged tree, which takes git's index with its
//! stat cache and untracked cache; `gix` has no `add` of a work tree yet. The binary is
//! driven with plumbing commands only (`add`, `write-tree`, `commit-tree`, `update-ref`,
//! `for-each-ref`, `diff-tree`, `read-tree`), with every `GIT_*` variable of the server's
//! environment removed and the system and global configuration ignored, so nothing of the
//! user's git set-up reaches it.
//!
//! Invariants:
//! - **The user's repository is never touched.** The shadow repository lives under
//!   `[checkpoints] dir` (default `DATA_DIR/checkpoints`), one per workspace (named by a hash
//!   of its canonical path), with its own index. Git never descends into a `.git` directory,
//!   so the user's HEAD, index, stash and hooks stay as they are.
//! - **What is recorded**: every file git would add (the workspace's `.gitignore` files
//!   apply), minus `[checkpoints] exclude` patterns and `.switchboard/` (Switchboard's own
//!   inbox), minus files over the size limit, which are named in the checkpoint's `skipped`.
//!   A workspace with more files than the limit, or that is not a directory, gets no
//!   checkpoint ([`CheckpointError`]); the engine turns that into a `Notice`, never a failed
//!   run.
//! - **One checkpoint per state change.** A session's checkpoints are commits chained by
//!   parent, under `refs/switchboard/<session>/<uuid v7>` (so listing is in order). A new
//!   one is only made when the tree differs from the session's latest, which is why a run
//!   that changed nothing leaves no checkpoint.
//! - **Crash safety.** Git writes objects, the index and refs through lock files and
//!   renames; a process killed mid-checkpoint leaves at worst a stale `*.lock`, removed the
//!   first time this process uses the repository (only this process uses it: the data
//!   directory is the instance's own), and an index that does not read is rebuilt.
//! - **Serialized per workspace** within the process (a lock per shadow repository).

mod git;
mod incremental;
mod rules;
mod watch;

use parking_lot::Mutex as SyncMutex;
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use switchboard_protocol::{Checkpoint, CheckpointKind, DiffStat, FileStat, RestoreResponse};
use tokio::sync::Mutex;
use uuid::Uuid;

use git::Git;
pub use git::GitError;
use rules::Rules;
use watch::Watch;

/// At most this many workspaces are watched at once (the least recently checkpointed one
/// is dropped: its next checkpoint looks at every file again).
const MAX_WATCHED: usize = 64;
/// More packs than this (a watched checkpoint adds one): repacked in the background.
const MAX_PACKS: usize = 16;

/// `[checkpoints]`.
#[derive(Debug, Clone)]
pub struct CheckpointConfig {
    /// Off: no checkpoints are taken (the API answers `checkpoints_unavailable`).
    pub enabled: bool,
    /// Where the shadow repositories live.
    pub dir: PathBuf,
    /// Extra gitignore-style patterns left out of every checkpoint.
    pub exclude: Vec<String>,
    /// A workspace with more files than this gets no checkpoint.
    pub max_files: usize,
    /// Files larger than this are left out (and named in `skipped`).
    pub max_file_bytes: u64,
    /// The `git` binary.
    pub git: PathBuf,
    /// Watch each workspace for changes, so a checkpoint hashes only what changed (off:
    /// every checkpoint looks at every file).
    pub watch: bool,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            dir: std::env::temp_dir().join("switchboard-checkpoints"),
            exclude: Vec::new(),
            max_files: 500_000,
            max_file_bytes: 10 * 1024 * 1024,
            git: PathBuf::from("git"),
            watch: true,
        }
    }
}

/// Why a checkpoint, a diff or a restore could not be done.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("checkpoints are turned off on this server")]
    Disabled,
    #[error("the workspace {0} is not a directory")]
    NotADirectory(PathBuf),
    #[error(
        "the workspace has more than {limit} files (raise [checkpoints] max_files, or exclude some)"
    )]
    TooManyFiles { limit: usize },
    #[error("no checkpoint {0} in this session")]
    NotFound(String),
    #[error("this session has no checkpoints here (they live on the instance that ran it)")]
    NoCheckpoints,
    #[error("{0}")]
    Git(#[from] GitError),
    #[error("checkpoint metadata: {0}")]
    Metadata(String),
    #[error("the workspace {0} lies in Switchboard's own state; it is never checkpointed")]
    Protected(PathBuf),
}

/// What [`Checkpoints::take`] produced.
#[derive(Debug, Clone)]
pub struct Taken {
    /// The session's checkpoint for the workspace's current state (new, or the latest when
    /// nothing changed).
    pub id: String,
    /// Whether it is new.
    pub created: bool,
    /// Changes since the session's previous checkpoint (zero when not created).
    pub files: u32,
    pub insertions: u64,
    pub deletions: u64,
}

/// What a checkpoint's commit message holds (JSON), besides the tree and the parent.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Meta {
    v: u32,
    session: Uuid,
    kind: CheckpointKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    run_id: Option<Uuid>,
    created_at: chrono::DateTime<chrono::Utc>,
    files: u32,
    insertions: u64,
    deletions: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    skipped: Vec<String>,
}

/// Always left out: Switchboard's own files in the workspace (the inbox of attachments).
const BUILTIN_EXCLUDES: &[&str] = &["/.switchboard/"];

/// What this process knows of one workspace between its checkpoints (under its lock).
#[derive(Default)]
struct Workspace {
    /// The last state recorded, by any session: a commit and its tree.
    base: Option<(String, String)>,
    /// The files that state leaves out for their size.
    large: BTreeSet<String>,
    /// Each session's latest checkpoint here, and its tree.
    latest: HashMap<Uuid, (String, String)>,
    /// A repack is due once this checkpoint is done.
    repack: bool,
}

/// The checkpoints of every workspace this process works in.
pub struct Checkpoints {
    config: CheckpointConfig,
    /// One lock per shadow repository, over what is known of its workspace.
    locks: SyncMutex<HashMap<PathBuf, Arc<Mutex<Workspace>>>>,
    /// The file watcher, started with the first checkpoint (`None` inside: no watching).
    watch: OnceLock<Option<Arc<Watch>>>,
    /// The workspaces watched, the most recently checkpointed last.
    watched: SyncMutex<VecDeque<PathBuf>>,
    /// Checkpoints that looked at every file (tests check which way a checkpoint went).
    #[cfg(test)]
    full_looks: std::sync::atomic::AtomicUsize,
    /// Shadow repositories already opened (stale locks removed) by this process.
    opened: SyncMutex<HashSet<PathBuf>>,
    /// Switchboard's own state (these shadow repositories among it): never recorded, never
    /// restored, whatever workspace holds it.
    protected: crate::ProtectedPaths,
}

fn ref_prefix(session: Uuid) -> String {
    format!("refs/switchboard/{session}/")
}

/// Whether `id` looks like a checkpoint id (a full commit id): checked before it goes near
/// a git command line.
fn valid_id(id: &str) -> bool {
    id.len() == 40
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `path` as one anchored gitignore pattern matching exactly it.
fn exact_pattern(path: &str) -> String {
    let mut out = String::from("/");
    for c in path.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\' | '!' | '#') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

impl Checkpoints {
    pub fn new(config: CheckpointConfig) -> Self {
        Self {
            config,
            locks: SyncMutex::new(HashMap::new()),
            watch: OnceLock::new(),
            watched: SyncMutex::new(VecDeque::new()),
            #[cfg(test)]
            full_looks: std::sync::atomic::AtomicUsize::new(0),
            opened: SyncMutex::new(HashSet::new()),
            protected: crate::ProtectedPaths::default(),
        }
    }

    /// The same, leaving out `protected` (and refusing a workspace inside it). The
    /// repositories' own directory is always protected.
    pub fn protecting(mut self, protected: crate::ProtectedPaths) -> Self {
        let mut all: Vec<PathBuf> = protected.iter().map(Path::to_path_buf).collect();
        all.push(self.config.dir.clone());
        self.protected = crate::ProtectedPaths::new(all);
        self
    }

    pub fn enabled(&self) -> bool {
        self.config.enabled
    }

    /// The workspace's shadow repository (created on first use) and its lock.
    async fn open(
        &self,
        workspace: &Path,
    ) -> Result<(Git, Arc<Mutex<Workspace>>), CheckpointError> {
        if !self.config.enabled {
            return Err(CheckpointError::Disabled);
        }
        let root = tokio::fs::canonicalize(workspace)
            .await
            .map_err(|_| CheckpointError::NotADirectory(workspace.to_path_buf()))?;
        if !tokio::fs::metadata(&root).await.is_ok_and(|m| m.is_dir()) {
            return Err(CheckpointError::NotADirectory(root));
        }
        if self.protected.covering(&root).is_some() {
            return Err(CheckpointError::Protected(root));
        }
        let hash = Sha256::digest(root.as_os_str().as_encoded_bytes());
        let name: String = hash[..16].iter().map(|b| format!("{b:02x}")).collect();
        let git_dir = self.config.dir.join(name);
        let lock = {
            let mut locks = self.locks.lock();
            locks.entry(git_dir.clone()).or_default().clone()
        };
        let git = Git::new(&self.config.git, &git_dir, &root);
        let fresh = {
            let opened = self.opened.lock();
            !opened.contains(&git_dir)
        };
        if fresh {
            let _guard = lock.lock().await;
            git.init(&root).await?;
            self.opened.lock().insert(git_dir);
        }
        Ok((git, lock))
    }

    /// Records the workspace's current state as a checkpoint of `session` (unless it equals
    /// the session's latest, which is then returned).
    pub async fn take(
        &self,
        session: Uuid,
        workspace: &Path,
        kind: CheckpointKind,
        run_id: Option<Uuid>,
    ) -> Result<Taken, CheckpointError> {
        let (git, lock) = self.open(workspace).await?;
        let mut ws = lock.lock_owned().await;
        let taken = self
            .take_locked(&git, &mut ws, session, kind, run_id, false)
            .await;
        repack(git, ws);
        taken
    }

    /// [`Self::take_once`]; after a failure the next checkpoint looks at every file (the
    /// changes the watcher reported were used up).
    async fn take_locked(
        &self,
        git: &Git,
        ws: &mut Workspace,
        session: Uuid,
        kind: CheckpointKind,
        run_id: Option<Uuid>,
        look_at_all: bool,
    ) -> Result<Taken, CheckpointError> {
        let taken = self
            .take_once(git, ws, session, kind, run_id, look_at_all)
            .await;
        if taken.is_err() {
            ws.base = None;
            ws.latest.clear();
        }
        taken
    }

    async fn take_once(
        &self,
        git: &Git,
        ws: &mut Workspace,
        session: Uuid,
        kind: CheckpointKind,
        run_id: Option<Uuid>,
        look_at_all: bool,
    ) -> Result<Taken, CheckpointError> {
        let tree = self.stage(git, ws, look_at_all).await?;
        let skipped: Vec<String> = ws.large.iter().cloned().collect();
        let latest = match ws.latest.get(&session) {
            Some(known) => Some(known.clone()),
            None => match git.latest(&ref_prefix(session)).await? {
                Some(id) => {
                    let tree = git.tree_of(&id).await?;
                    Some((id, tree))
                }
                None => None,
            },
        };
        if let Some((id, latest_tree)) = &latest
            && *latest_tree == tree
        {
            ws.latest.insert(session, (id.clone(), tree.clone()));
            ws.base = Some((id.clone(), tree));
            return Ok(Taken {
                id: id.clone(),
                created: false,
                files: 0,
                insertions: 0,
                deletions: 0,
            });
        }
        let parent = latest.map(|(id, _)| id);
        let (files, insertions, deletions) = match &parent {
            Some(parent) => totals(&git.numstat(parent, &tree).await?),
            None => (0, 0, 0),
        };
        let meta = Meta {
            v: 1,
            session,
            kind,
            run_id,
            created_at: chrono::Utc::now(),
            files,
            insertions,
            deletions,
            skipped,
        };
        let message =
            serde_json::to_string(&meta).map_err(|e| CheckpointError::Metadata(e.to_string()))?;
        let id = git.commit_tree(&tree, parent.as_deref(), &message).await?;
        git.update_ref(
            &format!("{}{}", ref_prefix(session), Uuid::now_v7().simple()),
            &id,
        )
        .await?;
        ws.latest.insert(session, (id.clone(), tree.clone()));
        ws.base = Some((id.clone(), tree));
        Ok(Taken {
            id,
            created: true,
            files,
            insertions,
            deletions,
        })
    }

    /// The watcher, started the first time (`None` when turned off or it could not start).
    fn watcher(&self) -> Option<Arc<Watch>> {
        self.watch
            .get_or_init(|| {
                self.config
                    .watch
                    .then(|| Arc::new(Watch::start(&self.config.dir.join(".watch-cookies"))))
            })
            .as_ref()
            .filter(|w| w.available())
            .cloned()
    }

    /// The tree of the workspace's current state: from what changed since the last
    /// checkpoint when the watcher can tell (and `look_at_all` is not asked), else from a
    /// look at every file, which also brings the shadow index up to date.
    async fn stage(
        &self,
        git: &Git,
        ws: &mut Workspace,
        look_at_all: bool,
    ) -> Result<String, CheckpointError> {
        let root = git.work_tree().to_path_buf();
        let (excludes, own) = self.excludes(&root);
        if let (Some(watch), Some((base, base_tree)), false) =
            (self.watcher(), ws.base.clone(), look_at_all)
            && watch.sync().await
            && let Some(changes) = watch.take(&root)
            && !changes.everything
        {
            self.touch(&watch, &root);
            if changes.paths.is_empty() {
                return Ok(base_tree);
            }
            let (max_bytes, w, r) = (self.config.max_file_bytes, watch.clone(), root.clone());
            let mut large = ws.large.clone();
            let patterns = excludes.clone();
            let planned = tokio::task::spawn_blocking(move || {
                let mut rules = Rules::new(&r, &patterns)?;
                let ops =
                    incremental::plan(&mut rules, changes, &mut large, max_bytes, &mut |dirs| {
                        w.add(&r, dirs);
                    })?;
                Ok::<_, CheckpointError>((ops, large))
            })
            .await
            .map_err(|e| CheckpointError::Metadata(format!("planning the checkpoint: {e}")))?;
            match planned {
                Ok((Some(ops), large)) => {
                    let applied = if ops.is_empty() {
                        Ok(base_tree)
                    } else {
                        incremental::apply(git, &base, &ops).await
                    };
                    match applied {
                        Ok(tree) => {
                            ws.large = large;
                            ws.repack |= git.packs() > MAX_PACKS;
                            return Ok(tree);
                        }
                        Err(e) => {
                            tracing::warn!(workspace = %root.display(), error = %e, "the watched checkpoint failed; looking at every file");
                        }
                    }
                }
                Ok((None, _)) => {}
                Err(e) => {
                    tracing::warn!(workspace = %root.display(), error = %e, "the watched checkpoint failed; looking at every file");
                }
            }
        }
        self.stage_all(git, ws, excludes, &own).await
    }

    /// The patterns left out of every checkpoint of `root`, and Switchboard's own state
    /// inside it (relative).
    fn excludes(&self, root: &Path) -> (Vec<String>, Vec<String>) {
        let mut excludes: Vec<String> = BUILTIN_EXCLUDES.iter().map(|s| (*s).to_owned()).collect();
        excludes.extend(self.config.exclude.iter().cloned());
        // Switchboard's own state inside the workspace (a data directory under `$HOME`):
        // never recorded. A shadow repository made before it was protected may hold it:
        // dropped from the index.
        let own: Vec<String> = self
            .protected
            .inside(root)
            .iter()
            .filter_map(|p| p.strip_prefix(root).ok())
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        excludes.extend(own.iter().map(|p| exact_pattern(p)));
        (excludes, own)
    }

    /// `root` was just checkpointed: watched ones beyond [`MAX_WATCHED`] are dropped, the
    /// least recent first.
    fn touch(&self, watch: &Watch, root: &Path) {
        let dropped: Vec<PathBuf> = {
            let mut watched = self.watched.lock();
            watched.retain(|r| r != root);
            watched.push_back(root.to_path_buf());
            let over = watched.len().saturating_sub(MAX_WATCHED);
            watched.drain(..over).collect()
        };
        for r in dropped {
            watch.forget(&r);
        }
    }

    /// Brings the shadow index to the workspace's state by looking at every file (the
    /// excludes written, oversized files left out and remembered, everything else added),
    /// and starts watching the workspace afresh: its tree.
    async fn stage_all(
        &self,
        git: &Git,
        ws: &mut Workspace,
        mut excludes: Vec<String>,
        own: &[String],
    ) -> Result<String, CheckpointError> {
        #[cfg(test)]
        self.full_looks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let root = git.work_tree().to_path_buf();
        git.write_excludes(&excludes).await?;
        if !own.is_empty() {
            git.forget_trees(own).await?;
        }
        // Watched from before the look, so a change made meanwhile is not lost. A workspace
        // inside another one watched (or holding one) is looked at whole each time.
        let watch = self.watcher().filter(|w| w.reset(&root));
        if let Some(w) = &watch {
            self.touch(w, &root);
        }
        let patterns = excludes.clone();
        let (max_files, max_bytes) = (self.config.max_files, self.config.max_file_bytes);
        let (r, w) = (root.clone(), watch.clone());
        let scanned = tokio::task::spawn_blocking(move || {
            scan(&r, &patterns, max_files, max_bytes, w.as_deref())
        })
        .await
        .map_err(|e| CheckpointError::Metadata(format!("scanning the workspace: {e}")));
        let (large, nested) = match scanned.and_then(|s| s) {
            Ok(found) => found,
            Err(e) => {
                if let Some(w) = &watch {
                    w.forget(&root);
                }
                return Err(e);
            }
        };
        if nested && let Some(w) = &watch {
            // Another repository below the root is recorded by its commit, which only a
            // look at it tells: this workspace is looked at whole every time.
            w.forget(&root);
        }
        if !large.is_empty() {
            excludes.extend(large.iter().map(|p| exact_pattern(p)));
            git.write_excludes(&excludes).await?;
            // A file that grew past the limit may be in the index from before.
            git.forget(&large).await?;
        }
        git.add_all().await?;
        git.untrack_ignored().await?;
        let tree = git.write_tree().await?;
        ws.large = large.into_iter().collect();
        ws.repack = true;
        Ok(tree)
    }

    /// Waits for the workspace's background repack, if one is going on (the benchmark waits
    /// for the first checkpoint's).
    pub async fn settle(&self, workspace: &Path) -> Result<(), CheckpointError> {
        let (_, lock) = self.open(workspace).await?;
        drop(lock.lock().await);
        Ok(())
    }

    /// The session's checkpoints in this workspace, oldest first.
    pub async fn list(
        &self,
        session: Uuid,
        workspace: &Path,
    ) -> Result<Vec<Checkpoint>, CheckpointError> {
        let (git, _lock) = self.open(workspace).await?;
        let mut out = Vec::new();
        for (id, parent, message) in git.refs(&ref_prefix(session)).await? {
            let meta: Meta = serde_json::from_str(message.trim())
                .map_err(|e| CheckpointError::Metadata(format!("checkpoint {id}: {e}")))?;
            out.push(Checkpoint {
                id,
                kind: meta.kind,
                run_id: meta.run_id,
                parent,
                created_at: meta.created_at,
                files: meta.files,
                insertions: meta.insertions,
                deletions: meta.deletions,
                skipped: meta.skipped,
            });
        }
        Ok(out)
    }

    /// `from` and `to` checked to be checkpoints of the session.
    async fn check_ids(
        &self,
        session: Uuid,
        workspace: &Path,
        ids: &[&str],
    ) -> Result<Git, CheckpointError> {
        for id in ids {
            if !valid_id(id) {
                return Err(CheckpointError::NotFound((*id).to_owned()));
            }
        }
        let known: HashSet<String> = self
            .list(session, workspace)
            .await?
            .into_iter()
            .map(|c| c.id)
            .collect();
        for id in ids {
            if !known.contains(*id) {
                return Err(CheckpointError::NotFound((*id).to_owned()));
            }
        }
        let (git, _lock) = self.open(workspace).await?;
        Ok(git)
    }

    /// The unified diff from one checkpoint of the session to another (binary files are
    /// named, not dumped), at most `max_bytes` of it (cut at a line, with a note).
    pub async fn diff(
        &self,
        session: Uuid,
        workspace: &Path,
        from: &str,
        to: &str,
        max_bytes: usize,
    ) -> Result<String, CheckpointError> {
        let git = self.check_ids(session, workspace, &[from, to]).await?;
        Ok(git.diff(from, to, max_bytes).await?)
    }

    /// Per-file counts from one checkpoint of the session to another.
    pub async fn stat(
        &self,
        session: Uuid,
        workspace: &Path,
        from: &str,
        to: &str,
    ) -> Result<DiffStat, CheckpointError> {
        let git = self.check_ids(session, workspace, &[from, to]).await?;
        let files = git.numstat(from, to).await?;
        let (_, insertions, deletions) = totals(&files);
        Ok(DiffStat {
            from: from.to_owned(),
            to: to.to_owned(),
            files,
            insertions,
            deletions,
        })
    }

    /// Puts the workspace back to checkpoint `id`: the current state is checkpointed first
    /// (the `backup`, to undo this), then every recorded file is set to its content and mode
    /// at `id` and recorded files that did not exist then are removed. Ignored, excluded and
    /// oversized files are left alone. The caller makes sure no run is going on.
    pub async fn restore(
        &self,
        session: Uuid,
        workspace: &Path,
        id: &str,
    ) -> Result<RestoreResponse, CheckpointError> {
        let git = self.check_ids(session, workspace, &[id]).await?;
        let (_, lock) = self.open(workspace).await?;
        let mut ws = lock.lock_owned().await;
        let backup = self
            // A look at every file: `read-tree` below goes by the index, which watched
            // checkpoints do not keep up to date.
            .take_locked(
                &git,
                &mut ws,
                session,
                CheckpointKind::BeforeRestore,
                None,
                true,
            )
            .await?;
        let changes = git.numstat(&backup.id, id).await?;
        git.read_tree_into_work_tree(id).await?;
        let restored = self
            .take_locked(
                &git,
                &mut ws,
                session,
                CheckpointKind::Restored,
                None,
                false,
            )
            .await?;
        repack(git, ws);
        let (files, insertions, deletions) = totals(&changes);
        tracing::info!(%session, checkpoint = %id, backup = %backup.id, files, "workspace restored");
        Ok(RestoreResponse {
            restored: restored.id,
            backup: backup.id,
            files,
            insertions,
            deletions,
        })
    }
}

/// Walks the workspace as git will see it (see [`Rules`]), watching each directory before
/// it is read when `watch` is given, and stopping as soon as there are more than
/// `max_files` files: the oversized files, as relative paths, sorted, and whether another
/// repository lies below the root.
fn scan(
    root: &Path,
    patterns: &[String],
    max_files: usize,
    max_bytes: u64,
    watch: Option<&Watch>,
) -> Result<(Vec<String>, bool), CheckpointError> {
    let mut rules = Rules::new(root, patterns)?;
    let mut watching = watch.is_some();
    let found = rules.walk(Path::new(""), max_files, &mut |dirs| {
        if watching && let Some(w) = watch {
            watching = w.add(root, dirs);
        }
        Ok(())
    })?;
    let mut large: Vec<String> = found
        .files
        .iter()
        .filter(|(_, m)| m.is_file() && m.len() > max_bytes)
        .map(|(p, _)| p.to_string_lossy().into_owned())
        .collect();
    large.sort();
    Ok((large, found.nested_repository))
}

/// Repacks in the background when one is due, holding the workspace's lock until done: the
/// next checkpoint of the workspace waits for it (git's `prune-packed` removes emptied
/// object directories, which a command writing an object at that moment can trip on).
fn repack(git: Git, mut ws: tokio::sync::OwnedMutexGuard<Workspace>) {
    if !std::mem::take(&mut ws.repack) {
        return;
    }
    tokio::spawn(async move {
        if let Err(e) = git.repack().await {
            tracing::warn!(workspace = %git.work_tree().display(), error = %e, "could not repack the shadow repository");
        }
        drop(ws);
    });
}

/// Files changed, lines added, lines removed.
fn totals(files: &[FileStat]) -> (u32, u64, u64) {
    (
        u32::try_from(files.len()).unwrap_or(u32::MAX),
        files.iter().map(|f| f.insertions).sum(),
        files.iter().map(|f| f.deletions).sum(),
    )
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod watch_tests;
