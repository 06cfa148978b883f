//! Files of sessions: the bytes stored once per content under a directory, described by a
//! row per upload in the store ([`FileRecord`]).
//!
//! Contract:
//! - **Content-addressed.** A file's bytes live at `ROOT/sha256/ab/abcdef…` (its SHA-256 in
//!   hex, split after two characters); the same content uploaded twice, to one session or
//!   two, is stored once. Files are 0600 and directories 0700: what users send is theirs.
//! - **Nothing half-stored.** An upload is written to `ROOT/tmp/` first while it is hashed,
//!   counted and checked; only a complete file within the limits and of an allowed type is
//!   moved into place (a rename: atomic), and only then is its row written. A refused or
//!   broken upload leaves nothing behind (its temporary file is removed, on error paths and
//!   when the request is dropped). A crash between the rename and the row leaves content
//!   that no row names, which the next [`Blobs::sweep`] removes.
//! - **Typed by content.** The type is sniffed from the first bytes (`infer`), never taken
//!   from the name or the client; content with no known signature is `text/plain` when it is
//!   UTF-8 without NUL bytes, else `application/octet-stream`. The type must match the
//!   allowlist ([`FileLimits::allowed_types`]).
//! - **Removed with the session.** When a session goes, the content no other row names goes
//!   too. Uploads and removals take one lock ([`Blobs`]), so a removal never deletes content
//!   an upload of the same bytes is about to name. (Instances sharing one directory on
//!   PostgreSQL do not share that lock; see `docs/files.md`.)

use std::path::{Path, PathBuf};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use sha2::{Digest, Sha256};
use switchboard_protocol::FileInfo;
use switchboard_store::FileRecord;
use tokio::io::AsyncWriteExt as _;
use uuid::Uuid;

use crate::error::EngineError;

/// What an upload and a message may carry.
#[derive(Debug, Clone)]
pub struct FileLimits {
    /// Bytes one file may have.
    pub max_file_bytes: u64,
    /// Bytes the attachments of one message may have together.
    pub max_message_bytes: u64,
    /// Files one message may carry.
    pub max_attachments: usize,
    /// Sniffed types accepted: `type/subtype`, or `type/*` for a whole family.
    pub allowed_types: Vec<String>,
}

/// 20 MB, the default of both size limits.
pub const DEFAULT_MAX_BYTES: u64 = 20 * 1024 * 1024;

/// The types accepted unless configured otherwise: images a model can look at (no SVG: it
/// can carry scripts), PDF, audio and video notes, plain text (logs, code, Markdown, JSON,
/// CSV all sniff as text) and archives of logs.
pub const DEFAULT_ALLOWED_TYPES: &[&str] = &[
    "image/png",
    "image/jpeg",
    "image/gif",
    "image/webp",
    "application/pdf",
    "text/plain",
    "audio/*",
    "video/mp4",
    "video/webm",
    "video/quicktime",
    "application/zip",
    "application/gzip",
];

impl Default for FileLimits {
    fn default() -> Self {
        Self {
            max_file_bytes: DEFAULT_MAX_BYTES,
            max_message_bytes: DEFAULT_MAX_BYTES,
            max_attachments: switchboard_protocol::DEFAULT_MAX_ATTACHMENTS,
            allowed_types: DEFAULT_ALLOWED_TYPES
                .iter()
                .map(|s| s.to_string())
                .collect(),
        }
    }
}

impl FileLimits {
    /// Whether a sniffed type is on the allowlist.
    pub fn allows(&self, mime: &str) -> bool {
        self.allowed_types
            .iter()
            .any(|a| match a.strip_suffix("/*") {
                Some(family) => mime
                    .split_once('/')
                    .is_some_and(|(f, _)| f.eq_ignore_ascii_case(family)),
                None => a.eq_ignore_ascii_case(mime),
            })
    }
}

/// How many leading bytes the type is sniffed from.
const SNIFF_BYTES: usize = 8192;

/// The type of content whose first bytes are `head`; `text` says whether all of it is UTF-8
/// without NUL bytes.
pub fn sniff(head: &[u8], text: bool) -> String {
    match infer::get(head) {
        Some(t) => t.mime_type().to_owned(),
        None if text => "text/plain".to_owned(),
        None => "application/octet-stream".to_owned(),
    }
}

/// The name to keep for an upload: its last path component, without control characters, at
/// most 255 bytes (cut at a character boundary); `file` when nothing is left.
pub fn clean_name(name: &str) -> String {
    let last = name.rsplit(['/', '\\']).next().unwrap_or("");
    let mut out: String = last.chars().filter(|c| !c.is_control()).collect();
    let trimmed = out.trim();
    if trimmed.is_empty() || trimmed == "." || trimmed == ".." {
        return "file".to_owned();
    }
    out = trimmed.to_owned();
    if out.len() > 255 {
        let mut cut = 255;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
    }
    out
}

/// Checks that a byte stream is UTF-8 without NUL bytes, piece by piece (a character may be
/// cut between two pieces).
#[derive(Debug, Default)]
struct TextCheck {
    carry: Vec<u8>,
    failed: bool,
}

impl TextCheck {
    fn feed(&mut self, chunk: &[u8]) {
        if self.failed {
            return;
        }
        if chunk.contains(&0) {
            self.failed = true;
            return;
        }
        let mut buf = std::mem::take(&mut self.carry);
        buf.extend_from_slice(chunk);
        match std::str::from_utf8(&buf) {
            Ok(_) => {}
            // An incomplete character at the end: keep it for the next piece.
            Err(e) if e.error_len().is_none() && buf.len() - e.valid_up_to() < 4 => {
                self.carry = buf[e.valid_up_to()..].to_vec();
            }
            Err(_) => self.failed = true,
        }
    }

    fn is_text(&self) -> bool {
        !self.failed && self.carry.is_empty()
    }
}

/// A temporary file removed when dropped unless it was moved into place.
struct Temp {
    path: PathBuf,
    keep: bool,
}

impl Drop for Temp {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The content directory. See the module's contract.
#[derive(Debug)]
pub struct Blobs {
    root: PathBuf,
    /// Taken by an upload from moving its content into place until its row is written, and
    /// by a removal from reading which content is unnamed until it is deleted.
    lock: tokio::sync::Mutex<()>,
}

/// What an upload produced, before its row is written.
pub(crate) struct Stored {
    pub sha256: String,
    pub size: u64,
    pub mime: String,
}

fn io_error(what: &str, e: std::io::Error) -> EngineError {
    EngineError::Internal(format!("{what}: {e}"))
}

fn private_dir(path: &Path) -> std::io::Result<()> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt as _;
        b.mode(0o700);
    }
    b.create(path)
}

impl Blobs {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            lock: tokio::sync::Mutex::new(()),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the content with this hash lives (or would).
    pub fn path(&self, sha256: &str) -> PathBuf {
        let prefix = sha256.get(..2).unwrap_or("00");
        self.root.join("sha256").join(prefix).join(sha256)
    }

    /// Streams `body` into a temporary file, hashing, counting and checking it, then moves
    /// it into place, and calls `record` (which writes the row) while no removal can run.
    pub(crate) async fn put<S, E, F, Fut>(
        &self,
        limits: &FileLimits,
        mut body: S,
        record: F,
    ) -> Result<FileInfo, EngineError>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
        F: FnOnce(Stored) -> Fut,
        Fut: std::future::Future<Output = Result<FileInfo, EngineError>>,
    {
        let tmp_dir = self.root.join("tmp");
        private_dir(&tmp_dir).map_err(|e| io_error("creating the files directory", e))?;
        let mut temp = Temp {
            path: tmp_dir.join(Uuid::new_v4().to_string()),
            keep: false,
        };
        let mut file = tokio::fs::File::from_std(
            open_private(&temp.path).map_err(|e| io_error("creating a temporary file", e))?,
        );
        let mut hasher = Sha256::new();
        let mut size: u64 = 0;
        let mut head: Vec<u8> = Vec::with_capacity(SNIFF_BYTES);
        let mut text = TextCheck::default();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| {
                EngineError::validation("file", format!("the upload broke off: {e}"))
            })?;
            size += chunk.len() as u64;
            if size > limits.max_file_bytes {
                return Err(EngineError::FileTooLarge {
                    limit: limits.max_file_bytes,
                });
            }
            if head.len() < SNIFF_BYTES {
                let take = (SNIFF_BYTES - head.len()).min(chunk.len());
                head.extend_from_slice(&chunk[..take]);
            }
            text.feed(&chunk);
            hasher.update(&chunk);
            file.write_all(&chunk)
                .await
                .map_err(|e| io_error("writing an upload", e))?;
        }
        let mime = sniff(&head, text.is_text());
        if !limits.allows(&mime) {
            return Err(EngineError::UnsupportedFileType(mime));
        }
        file.sync_all()
            .await
            .map_err(|e| io_error("writing an upload", e))?;
        drop(file);
        let sha256 = hex(&hasher.finalize());
        let target = self.path(&sha256);
        let _guard = self.lock.lock().await;
        if tokio::fs::metadata(&target).await.is_err() {
            if let Some(parent) = target.parent() {
                private_dir(parent).map_err(|e| io_error("creating the files directory", e))?;
            }
            tokio::fs::rename(&temp.path, &target)
                .await
                .map_err(|e| io_error("storing an upload", e))?;
            temp.keep = true;
        }
        record(Stored { sha256, size, mime }).await
    }

    /// Removes the content of `hashes` that `in_use` says no row names any more.
    pub(crate) async fn remove_unused<F, Fut>(&self, hashes: Vec<String>, in_use: F)
    where
        F: Fn(String) -> Fut,
        Fut: std::future::Future<Output = Result<bool, EngineError>>,
    {
        let _guard = self.lock.lock().await;
        for sha in hashes {
            match in_use(sha.clone()).await {
                Ok(false) => {
                    if let Err(e) = tokio::fs::remove_file(self.path(&sha)).await
                        && e.kind() != std::io::ErrorKind::NotFound
                    {
                        tracing::warn!(sha256 = %sha, error = %e, "removing a file's content failed");
                    }
                }
                Ok(true) => {}
                Err(e) => {
                    tracing::warn!(sha256 = %sha, error = %e, "could not tell whether a file's content is still used; kept");
                }
            }
        }
    }

    /// Removes temporary files left by a crash mid-upload (at start, before any upload).
    pub fn sweep_temp(&self) {
        if let Ok(dir) = std::fs::read_dir(self.root.join("tmp")) {
            for entry in dir.flatten() {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

fn open_private(path: &Path) -> std::io::Result<std::fs::File> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        o.mode(0o600);
    }
    o.open(path)
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Where an attached file's copy goes in the workspace, relative to it:
/// `.switchboard/inbox/<first 8 hex digits of its hash>-<name>` (the same content always gets
/// the same path; two files of one name but different content do not collide).
pub fn inbox_path(file: &FileInfo) -> String {
    let short = file.sha256.get(..8).unwrap_or("00000000");
    format!(".switchboard/inbox/{short}-{}", clean_name(&file.name))
}

impl Blobs {
    /// Copies each file into the workspace `cwd` at its [`inbox_path`] (kept if present).
    /// Files are 0600, the inbox directory 0700.
    pub(crate) async fn copy_to_inbox(&self, cwd: &Path, files: &[FileInfo]) -> Result<(), String> {
        for f in files {
            let target = cwd.join(inbox_path(f));
            if tokio::fs::metadata(&target).await.is_ok() {
                continue;
            }
            if let Some(parent) = target.parent() {
                private_dir(parent).map_err(|e| format!("creating {}: {e}", parent.display()))?;
            }
            let tmp = target.with_extension(format!("part-{}", Uuid::new_v4().simple()));
            let mut out = tokio::fs::File::from_std(
                open_private(&tmp).map_err(|e| format!("writing {}: {e}", tmp.display()))?,
            );
            let mut src = tokio::fs::File::open(self.path(&f.sha256))
                .await
                .map_err(|e| format!("reading the stored {}: {e}", f.name))?;
            let copied = tokio::io::copy(&mut src, &mut out).await;
            drop(out);
            match copied {
                Ok(_) => tokio::fs::rename(&tmp, &target)
                    .await
                    .map_err(|e| format!("writing {}: {e}", target.display()))?,
                Err(e) => {
                    let _ = tokio::fs::remove_file(&tmp).await;
                    return Err(format!("copying {}: {e}", f.name));
                }
            }
        }
        Ok(())
    }
}

/// Stores `body` as a file of the session: the content by [`Blobs::put`], then its row.
pub(crate) async fn store_upload<S, E>(
    store: &dyn switchboard_store::Store,
    blobs: &Blobs,
    limits: &FileLimits,
    session_id: Uuid,
    name: &str,
    body: S,
) -> Result<FileInfo, EngineError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let name = clean_name(name);
    blobs
        .put(limits, body, |stored| async move {
            let record = FileRecord {
                id: Uuid::now_v7(),
                session_id,
                name,
                mime: stored.mime,
                size: stored.size,
                sha256: stored.sha256,
                created_at: crate::time::now_rfc3339(),
            };
            store.put_file(&record).await.map_err(|e| match e {
                switchboard_store::StoreError::NotFound(_) => {
                    EngineError::SessionNotFound(session_id)
                }
                e => e.into(),
            })?;
            Ok(info(&record))
        })
        .await
}

/// Where a shared file goes: the run that shares it and what storing it takes.
pub(crate) struct ShareTarget<'a> {
    pub store: &'a dyn switchboard_store::Store,
    pub blobs: &'a Blobs,
    pub limits: &'a FileLimits,
    pub log: &'a crate::EventLog,
    pub session_id: Uuid,
    pub run_id: Uuid,
    /// The run's lease: the event is written under it, so a run another instance took
    /// over cannot share any more.
    pub fence: Option<&'a switchboard_store::Lease>,
    /// Switchboard's own state, never shared whatever path led to it.
    pub protected: &'a crate::ProtectedPaths,
}

/// Shares the file at `path` (already confined by the caller) from the run: stores it as a
/// file of the session (the upload limits and allowed types apply) and emits `FileShared`,
/// which surfaces deliver. The one way both the built-in `send_file` and an external agent's
/// (`POST /v1/sessions/{id}/share`) share a file.
pub(crate) async fn share(
    to: ShareTarget<'_>,
    path: &Path,
    caption: Option<String>,
) -> Result<FileInfo, EngineError> {
    if let Some(by) = to.protected.covering(path) {
        return Err(EngineError::ForbiddenPath {
            given: path.display().to_string(),
            by: by.to_path_buf(),
        });
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".into());
    let file = tokio::fs::File::open(path)
        .await
        .map_err(|e| EngineError::validation("path", format!("cannot read it: {e}")))?;
    let body = tokio_util::io::ReaderStream::new(file);
    let info = store_upload(to.store, to.blobs, to.limits, to.session_id, &name, body).await?;
    to.log
        .append_fenced(
            to.session_id,
            &switchboard_protocol::AgentEvent::FileShared {
                run_id: to.run_id,
                file: info.clone(),
                caption: caption.filter(|c| !c.trim().is_empty()),
            },
            to.fence,
        )
        .await?;
    tracing::info!(session_id = %to.session_id, run_id = %to.run_id, file_id = %info.file_id, mime = %info.mime, size = info.size, "file shared");
    Ok(info)
}

/// `given` (relative to `root`, or absolute) as the existing regular file it names, every
/// symlink followed; refused unless it lies inside `root`. For files an external agent
/// shares: the built-in agent's tools confine through their own `Workspace`, whose rule for
/// an existing path is this one.
pub fn confine_existing(root: &Path, given: &str) -> Result<PathBuf, EngineError> {
    if given.trim().is_empty() {
        return Err(EngineError::validation("path", "must not be empty"));
    }
    let root = std::fs::canonicalize(root).map_err(|e| {
        EngineError::Unprocessable(format!(
            "the session's workspace {} cannot be read: {e}",
            root.display()
        ))
    })?;
    // Well-formed, but not a file this workspace has: 422, as for any name the server does
    // not have (a schema cannot say which files exist).
    let resolved = std::fs::canonicalize(root.join(given))
        .map_err(|e| EngineError::Unprocessable(format!("path: {given}: {e}")))?;
    if !resolved.starts_with(&root) {
        return Err(EngineError::Unprocessable(format!(
            "path: {given} is outside the session's workspace"
        )));
    }
    if !resolved.is_file() {
        return Err(EngineError::Unprocessable(format!(
            "path: {given} is not a regular file"
        )));
    }
    Ok(resolved)
}

/// A stored row as the wire shows it.
pub(crate) fn info(r: &FileRecord) -> FileInfo {
    FileInfo {
        file_id: r.id,
        name: r.name.clone(),
        mime: r.mime.clone(),
        size: r.size,
        sha256: r.sha256.clone(),
        created_at: crate::time::parse_ts(&r.created_at),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_path_must_be_an_existing_file_inside_the_workspace() {
        let ws = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        std::fs::create_dir(ws.path().join("sub")).unwrap();
        std::fs::write(ws.path().join("sub/a.txt"), "a").unwrap();
        std::fs::write(out.path().join("b.txt"), "b").unwrap();
        std::os::unix::fs::symlink(out.path().join("b.txt"), ws.path().join("link")).unwrap();
        std::os::unix::fs::symlink(ws.path().join("sub/a.txt"), ws.path().join("inner")).unwrap();
        let root = std::fs::canonicalize(ws.path()).unwrap();
        let ok = |given: &str| confine_existing(ws.path(), given).unwrap();
        assert_eq!(ok("sub/a.txt"), root.join("sub/a.txt"));
        assert_eq!(ok("./sub/../sub/a.txt"), root.join("sub/a.txt"));
        assert_eq!(ok("inner"), root.join("sub/a.txt"));
        assert_eq!(
            ok(&root.join("sub/a.txt").to_string_lossy()),
            root.join("sub/a.txt")
        );
        // A well-formed path the workspace does not have is 422; a blank one is malformed.
        let refused = |given: &str| {
            let e = confine_existing(ws.path(), given).unwrap_err();
            let code = if given.trim().is_empty() {
                "validation_failed"
            } else {
                "unprocessable_entity"
            };
            assert_eq!(e.code().as_str(), code, "{given}: {e}");
            e.to_string()
        };
        assert!(refused("link").contains("outside"));
        let up = format!(
            "../{}/b.txt",
            out.path().file_name().unwrap().to_string_lossy()
        );
        assert!(refused(&up).contains("outside"));
        assert!(refused(&out.path().join("b.txt").to_string_lossy()).contains("outside"));
        assert!(refused("sub").contains("not a regular file"));
        assert!(refused("missing.txt").contains("missing.txt"));
        assert!(refused("  ").contains("empty"));
    }

    #[test]
    fn text_is_utf8_without_nul_even_cut_mid_character() {
        let s = "héllo wörld ✓".as_bytes();
        for cut in 0..s.len() {
            let mut t = TextCheck::default();
            t.feed(&s[..cut]);
            t.feed(&s[cut..]);
            assert!(t.is_text(), "cut at {cut}");
        }
        let mut t = TextCheck::default();
        t.feed(b"abc\0def");
        assert!(!t.is_text());
        let mut t = TextCheck::default();
        t.feed(&[0xff, 0xfe, b'a']);
        assert!(!t.is_text());
        let mut t = TextCheck::default();
        t.feed(&s[..2]); // ends inside "é"
        assert!(!t.is_text(), "a file that ends mid-character is not text");
    }

    #[test]
    fn types_come_from_content_not_names() {
        let png = [
            0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0x0d,
        ];
        assert_eq!(sniff(&png, false), "image/png");
        let elf = [
            0x7f, b'E', b'L', b'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0,
        ];
        assert_ne!(sniff(&elf, false), "image/png");
        assert_eq!(sniff(b"just a log line\n", true), "text/plain");
        assert_eq!(sniff(&[1, 2, 3, 4], false), "application/octet-stream");
        let l = FileLimits::default();
        assert!(l.allows("image/png") && l.allows("audio/ogg") && l.allows("text/plain"));
        assert!(!l.allows(&sniff(&elf, false)));
        assert!(!l.allows("application/octet-stream") && !l.allows("image/svg+xml"));
    }

    #[test]
    fn names_keep_only_their_last_component() {
        assert_eq!(clean_name("../../etc/passwd"), "passwd");
        assert_eq!(clean_name("C:\\Users\\me\\shot.png"), "shot.png");
        assert_eq!(clean_name("a\u{0}b\nc.txt"), "abc.txt");
        assert_eq!(clean_name(".."), "file");
        assert_eq!(clean_name(""), "file");
        let long = "é".repeat(200);
        let cut = clean_name(&long);
        assert!(cut.len() <= 255 && cut.chars().all(|c| c == 'é'));
    }
}
