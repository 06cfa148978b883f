//! The `git` commands of a shadow repository (see the module above for why the binary).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use switchboard_protocol::FileStat;
use tokio::io::AsyncWriteExt as _;

/// No git command of a checkpoint may take longer than this.
const TIMEOUT: Duration = Duration::from_secs(120);

/// git's empty tree: the "before" of a first checkpoint.
pub(super) const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

/// A git command that failed.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("git could not be run ({0}); checkpoints need git installed")]
    Spawn(String),
    #[error("git {command} failed: {stderr}")]
    Failed { command: String, stderr: String },
    #[error("git {0} took longer than {secs} s", secs = TIMEOUT.as_secs())]
    Timeout(String),
    #[error("shadow repository: {0}")]
    Io(String),
}

/// One shadow repository and the work tree it records.
#[derive(Clone)]
pub(super) struct Git {
    bin: PathBuf,
    git_dir: PathBuf,
    work_tree: PathBuf,
}

impl Git {
    pub(super) fn new(bin: &Path, git_dir: &Path, work_tree: &Path) -> Self {
        Self {
            bin: bin.to_path_buf(),
            git_dir: git_dir.to_path_buf(),
            work_tree: work_tree.to_path_buf(),
        }
    }

    pub(super) fn work_tree(&self) -> &Path {
        &self.work_tree
    }

    /// A git command on this repository, isolated from the server's environment and from
    /// the user's git configuration.
    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.bin);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("GIT_") {
                cmd.env_remove(&key);
            }
        }
        cmd.env("GIT_DIR", &self.git_dir)
            .env("GIT_WORK_TREE", &self.work_tree)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            // Nor the user's default ignore and attributes files (`~/.config/git/…`).
            .env("XDG_CONFIG_HOME", "/dev/null")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_AUTHOR_NAME", "Switchboard")
            .env("GIT_AUTHOR_EMAIL", "checkpoints@switchboard.invalid")
            .env("GIT_COMMITTER_NAME", "Switchboard")
            .env("GIT_COMMITTER_EMAIL", "checkpoints@switchboard.invalid")
            .env("LC_ALL", "C")
            .current_dir(&self.work_tree)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    /// Runs `args` (feeding `input` on stdin when given) and returns stdout.
    async fn run_with(&self, args: &[&str], input: Option<&[u8]>) -> Result<Vec<u8>, GitError> {
        // The command's name, after any `-c key=value`.
        let name = match args {
            ["-c", _, name, ..] => name,
            [name, ..] => name,
            [] => "",
        }
        .to_string();
        let mut cmd = self.command(args);
        if input.is_some() {
            cmd.stdin(Stdio::piped());
        }
        let mut child = cmd.spawn().map_err(|e| GitError::Spawn(e.to_string()))?;
        let stdin = child.stdin.take();
        // Fed while the output is read: a command that answers line by line (`hash-object
        // --stdin-paths`) would otherwise fill its output pipe and wait for us forever.
        let feed = async {
            if let (Some(input), Some(mut stdin)) = (input, stdin) {
                stdin
                    .write_all(input)
                    .await
                    .map_err(|e| GitError::Io(format!("writing to git {name}: {e}")))?;
            }
            Ok::<(), GitError>(())
        };
        let run = async { tokio::join!(feed, child.wait_with_output()) };
        let (fed, out) = tokio::time::timeout(TIMEOUT, run)
            .await
            .map_err(|_| GitError::Timeout(name.clone()))?;
        let out = out.map_err(|e| GitError::Spawn(e.to_string()))?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            return Err(GitError::Failed {
                command: name,
                stderr: stderr.trim().chars().take(2000).collect(),
            });
        }
        // A command that failed says why above; one that succeeded without reading all of
        // its input did not do what was asked.
        fed?;
        Ok(out.stdout)
    }

    pub(super) async fn run(&self, args: &[&str]) -> Result<Vec<u8>, GitError> {
        self.run_with(args, None).await
    }

    async fn run_text(&self, args: &[&str]) -> Result<String, GitError> {
        let out = self.run(args).await?;
        Ok(String::from_utf8_lossy(&out).trim().to_owned())
    }

    /// Creates the repository if needed and clears what a killed process may have left:
    /// stale lock files.
    pub(super) async fn init(&self, _root: &Path) -> Result<(), GitError> {
        let io = |e: std::io::Error| GitError::Io(format!("{}: {e}", self.git_dir.display()));
        if !self.git_dir.join("HEAD").exists() {
            tokio::fs::create_dir_all(&self.git_dir).await.map_err(io)?;
            let mut cmd = self.command(&["init", "--quiet", "--bare"]);
            cmd.env_remove("GIT_WORK_TREE").current_dir(&self.git_dir);
            let out = cmd
                .output()
                .await
                .map_err(|e| GitError::Spawn(e.to_string()))?;
            if !out.status.success() {
                return Err(GitError::Failed {
                    command: "init".into(),
                    stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
                });
            }
            for (key, value) in [
                ("core.bare", "false"),
                ("core.autocrlf", "false"),
                ("core.symlinks", "true"),
                ("core.fileMode", "true"),
                ("core.untrackedCache", "true"),
                ("core.fsmonitor", "false"),
                ("core.hooksPath", "/dev/null"),
                ("gc.auto", "0"),
                ("advice.addEmbeddedRepo", "false"),
            ] {
                self.run(&["config", key, value]).await?;
            }
        }
        remove_locks(&self.git_dir).await;
        Ok(())
    }

    /// Packs loose objects and the small packs of watched checkpoints together (`repack
    /// --geometric`, which keeps every object, referenced or not), so later commands open a
    /// few packs instead of a file per object: a look at every file writes each new file as
    /// a loose object, and each watched checkpoint adds a pack.
    pub(super) async fn repack(&self) -> Result<(), GitError> {
        self.run(&["repack", "-d", "-q", "--geometric=2"])
            .await
            .map(drop)
    }

    /// How many packs the repository has.
    pub(super) fn packs(&self) -> usize {
        std::fs::read_dir(self.git_dir.join("objects/pack")).map_or(0, |d| {
            d.flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "pack"))
                .count()
        })
    }

    /// `info/exclude` = the patterns, one a line.
    pub(super) async fn write_excludes(&self, patterns: &[String]) -> Result<(), GitError> {
        let dir = self.git_dir.join("info");
        let io = |e: std::io::Error| GitError::Io(format!("{}: {e}", dir.display()));
        tokio::fs::create_dir_all(&dir).await.map_err(io)?;
        let mut text = String::from("# written by Switchboard at every checkpoint\n");
        for p in patterns {
            text.push_str(p);
            text.push('\n');
        }
        tokio::fs::write(dir.join("exclude"), text)
            .await
            .map_err(io)
    }

    /// A command that reads the index; an index that does not read (a crash while it was
    /// replaced cannot do this, but a full disk can) is rebuilt from scratch once.
    async fn with_index_retry(&self, args: &[&str]) -> Result<Vec<u8>, GitError> {
        match self.run(args).await {
            Err(GitError::Failed { stderr, .. }) if stderr.contains("index file") => {
                tracing::warn!(git_dir = %self.git_dir.display(), error = %stderr, "the shadow index does not read: rebuilding it");
                let _ = tokio::fs::remove_file(self.git_dir.join("index")).await;
                self.run(args).await
            }
            other => other,
        }
    }

    /// Drops `paths` from the index (they stay in the work tree).
    pub(super) async fn forget(&self, paths: &[String]) -> Result<(), GitError> {
        let mut input = Vec::new();
        for p in paths {
            input.extend_from_slice(p.as_bytes());
            input.push(0);
        }
        self.run_with(
            &["update-index", "-z", "--force-remove", "--stdin"],
            Some(&input),
        )
        .await
        .map(drop)
    }

    /// Drops everything under each of `paths` (relative, files or directories) from the
    /// index; the work tree is not touched.
    pub(super) async fn forget_trees(&self, paths: &[String]) -> Result<(), GitError> {
        for p in paths {
            let spec = format!(":(literal){p}");
            self.with_index_retry(&[
                "rm",
                "-r",
                "--cached",
                "--force",
                "--quiet",
                "--ignore-unmatch",
                "--",
                &spec,
            ])
            .await?;
        }
        Ok(())
    }

    pub(super) async fn add_all(&self) -> Result<(), GitError> {
        self.with_index_retry(&["add", "--all", "--", "."])
            .await
            .map(drop)
    }

    /// Drops from the index every recorded file the ignore rules now leave out (a file
    /// recorded before a `.gitignore` named it): what is recorded is exactly what is not
    /// ignored, as the watched checkpoints assume.
    pub(super) async fn untrack_ignored(&self) -> Result<(), GitError> {
        let out = self
            .run(&[
                "ls-files",
                "-z",
                "--cached",
                "--ignored",
                "--exclude-standard",
            ])
            .await?;
        if out.is_empty() {
            return Ok(());
        }
        self.run_with(
            &["update-index", "-z", "--force-remove", "--stdin"],
            Some(&out),
        )
        .await
        .map(drop)
    }

    /// Writes the files `paths` (relative to the work tree) as blobs, converted as `git
    /// add` converts them (`.gitattributes`): their ids, in order.
    pub(super) async fn hash_objects(&self, paths: &[&[u8]]) -> Result<Vec<String>, GitError> {
        if paths.is_empty() {
            return Ok(Vec::new());
        }
        let mut input = Vec::new();
        for p in paths {
            quote_path(&mut input, p);
            input.push(b'\n');
        }
        let out = self
            .run_with(&["hash-object", "-w", "--stdin-paths"], Some(&input))
            .await?;
        let ids: Vec<String> = String::from_utf8_lossy(&out)
            .lines()
            .map(str::to_owned)
            .collect();
        if ids.len() != paths.len() {
            return Err(GitError::Io(format!(
                "git hash-object answered {} ids for {} files",
                ids.len(),
                paths.len()
            )));
        }
        Ok(ids)
    }

    /// Runs `git fast-import` on `stream` and returns what it printed. Objects are stored
    /// without compression (zlib level 0): a checkpoint's pack is larger (some hundred KB
    /// for 100 files in 100 directories) but written a quarter faster, on the run's path.
    pub(super) async fn fast_import(&self, stream: &[u8]) -> Result<String, GitError> {
        let out = self
            .run_with(
                &[
                    "-c",
                    "core.compression=0",
                    "fast-import",
                    "--quiet",
                    "--done",
                    "--force",
                ],
                Some(stream),
            )
            .await?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    pub(super) async fn write_tree(&self) -> Result<String, GitError> {
        self.run_text(&["write-tree"]).await
    }

    pub(super) async fn tree_of(&self, commit: &str) -> Result<String, GitError> {
        self.run_text(&[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{commit}^{{tree}}"),
        ])
        .await
    }

    /// The newest checkpoint under `prefix`.
    pub(super) async fn latest(&self, prefix: &str) -> Result<Option<String>, GitError> {
        let out = self
            .run_text(&[
                "for-each-ref",
                "--sort=-refname",
                "--count=1",
                "--format=%(objectname)",
                prefix,
            ])
            .await?;
        Ok((!out.is_empty()).then_some(out))
    }

    /// Every checkpoint under `prefix`, oldest first: (id, parent, message).
    pub(super) async fn refs(
        &self,
        prefix: &str,
    ) -> Result<Vec<(String, Option<String>, String)>, GitError> {
        let out = self
            .run(&[
                "for-each-ref",
                "--sort=refname",
                "--format=%(objectname)%00%(parent)%00%(contents)%00",
                prefix,
            ])
            .await?;
        let fields = split_z(&out);
        let mut rows = Vec::new();
        for chunk in fields.chunks(3) {
            if let [id, parent, message] = chunk {
                let id = id.trim().to_owned();
                let parent = parent.trim();
                rows.push((
                    id,
                    (!parent.is_empty()).then(|| parent.to_owned()),
                    message.clone(),
                ));
            }
        }
        Ok(rows)
    }

    pub(super) async fn commit_tree(
        &self,
        tree: &str,
        parent: Option<&str>,
        message: &str,
    ) -> Result<String, GitError> {
        let mut args = vec!["commit-tree", tree];
        if let Some(p) = parent {
            args.extend(["-p", p]);
        }
        args.extend(["-m", message]);
        self.run_text(&args).await
    }

    pub(super) async fn update_ref(&self, name: &str, id: &str) -> Result<(), GitError> {
        self.run(&["update-ref", name, id]).await.map(drop)
    }

    /// Per-file line counts between two trees or commits (`from` may be absent: the empty
    /// tree).
    pub(super) async fn numstat(&self, from: &str, to: &str) -> Result<Vec<FileStat>, GitError> {
        let out = self
            .run(&[
                "diff-tree",
                "-r",
                "-z",
                "--no-renames",
                "--numstat",
                from,
                to,
            ])
            .await?;
        // `ADDED\tDELETED\tPATH\0`, `-\t-\tPATH\0` for a binary file.
        let mut files = Vec::new();
        for entry in split_z(&out) {
            let mut parts = entry.splitn(3, '\t');
            let (Some(a), Some(d), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
                continue;
            };
            let binary = a == "-" && d == "-";
            files.push(FileStat {
                path: path.to_owned(),
                insertions: a.parse().unwrap_or(0),
                deletions: d.parse().unwrap_or(0),
                binary,
            });
        }
        Ok(files)
    }

    /// The unified diff between two commits, cut at `max_bytes`.
    pub(super) async fn diff(
        &self,
        from: &str,
        to: &str,
        max_bytes: usize,
    ) -> Result<String, GitError> {
        let from = if from.is_empty() { EMPTY_TREE } else { from };
        let out = self
            .run(&[
                "diff-tree",
                "-r",
                "-p",
                "--no-renames",
                "--no-color",
                "--no-ext-diff",
                "--no-textconv",
                from,
                to,
            ])
            .await?;
        let text = String::from_utf8_lossy(&out);
        if text.len() <= max_bytes {
            return Ok(text.into_owned());
        }
        let mut cut = max_bytes;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        let cut = text[..cut].rfind('\n').map(|i| i + 1).unwrap_or(cut);
        Ok(format!(
            "{}\n[diff cut at {} KB of {} KB: ask for ?stat=1, or a smaller range]\n",
            &text[..cut],
            cut / 1024,
            text.len() / 1024
        ))
    }

    /// Sets the work tree's recorded files to `id`'s: changed ones rewritten (content and
    /// mode), ones `id` lacks removed; files outside the index are not touched.
    pub(super) async fn read_tree_into_work_tree(&self, id: &str) -> Result<(), GitError> {
        self.run(&["read-tree", "-u", "--reset", id])
            .await
            .map(drop)
    }
}

/// A path as git's line-based input reads it (`fast-import`, `hash-object --stdin-paths`):
/// C-quoted when it holds a quote, a backslash or a control byte (`hash-object` drops a
/// trailing carriage return from an unquoted line), as is otherwise.
pub(super) fn quote_path(out: &mut Vec<u8>, bytes: &[u8]) {
    if !bytes
        .iter()
        .any(|&b| b == b'"' || b == b'\\' || b < 0x20 || b == 0x7f)
    {
        out.extend_from_slice(bytes);
        return;
    }
    out.push(b'"');
    for &b in bytes {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b if b < 0x20 || b == 0x7f => out.extend_from_slice(format!("\\{b:03o}").as_bytes()),
            b => out.push(b),
        }
    }
    out.push(b'"');
}

/// NUL-separated fields (the last may end with a NUL too).
fn split_z(out: &[u8]) -> Vec<String> {
    let mut v: Vec<String> = out
        .split(|b| *b == 0)
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect();
    if v.last().is_some_and(|s| s.trim().is_empty()) {
        v.pop();
    }
    v
}

/// Removes lock files a killed git left (`index.lock`, `*.lock` under `refs/`, …).
async fn remove_locks(git_dir: &Path) {
    let mut dirs = vec![git_dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(mut entries) = tokio::fs::read_dir(&dir).await else {
            continue;
        };
        while let Ok(Some(e)) = entries.next_entry().await {
            let path = e.path();
            let Ok(kind) = e.file_type().await else {
                continue;
            };
            if kind.is_dir() {
                if dir == git_dir && e.file_name() == "objects" {
                    continue;
                }
                dirs.push(path);
            } else if path.extension().is_some_and(|x| x == "lock") {
                tracing::warn!(path = %path.display(), "removing a stale lock of the shadow repository");
                let _ = tokio::fs::remove_file(&path).await;
            }
        }
    }
}
