//! A session's files: upload, list, open, and the attachments of a message.

use bytes::Bytes;
use futures::Stream;
use switchboard_protocol::{AttachmentRef, FileInfo, ShareFileRequest, SharedFile};

use super::*;
use crate::files::info;

impl Engine {
    /// Stores an upload to the session (see [`crate::files`] for what is checked and how it
    /// is kept). The session is checked before the body is read.
    pub async fn upload_file<S, E>(
        &self,
        session_id: Uuid,
        name: &str,
        body: S,
    ) -> Result<FileInfo, EngineError>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        self.record(session_id).await?;
        let file = crate::files::store_upload(
            self.inner.store.as_ref(),
            &self.inner.blobs,
            &self.inner.config.files,
            session_id,
            name,
            body,
        )
        .await?;
        tracing::info!(%session_id, file_id = %file.file_id, mime = %file.mime, size = file.size, "file uploaded");
        Ok(file)
    }

    /// The session's files, oldest first.
    pub async fn files(&self, session_id: Uuid) -> Result<Vec<FileInfo>, EngineError> {
        self.record(session_id).await?;
        Ok(self
            .inner
            .store
            .list_files(session_id)
            .await?
            .iter()
            .map(info)
            .collect())
    }

    /// A file of the session and its content, open for reading.
    pub async fn open_file(
        &self,
        session_id: Uuid,
        file_id: Uuid,
    ) -> Result<(FileInfo, tokio::fs::File), EngineError> {
        self.record(session_id).await?;
        let record = self
            .inner
            .store
            .get_file(session_id, file_id)
            .await?
            .ok_or(EngineError::FileNotFound(file_id))?;
        let path = self.inner.blobs.path(&record.sha256);
        let file = tokio::fs::File::open(&path).await.map_err(|e| {
            tracing::error!(%session_id, %file_id, path = %path.display(), error = %e, "a stored file's content is missing");
            EngineError::Internal(format!("the content of file {file_id} cannot be read"))
        })?;
        Ok((info(&record), file))
    }

    /// Shares a file of the workspace from the session's active run (an external agent's
    /// `send_file`): it is stored as a file of the session and a `FileShared` event in the
    /// run tells the surfaces to deliver it. The run may execute on another instance, whose
    /// machine has the workspace: the request is forwarded there, as steering is.
    pub async fn share_file(
        &self,
        session_id: Uuid,
        req: ShareFileRequest,
    ) -> Result<SharedFile, EngineError> {
        // The session first: a schema-valid share of an unknown session is its 404.
        self.record(session_id).await?;
        if req.path.chars().count() > 4096 {
            return Err(EngineError::validation(
                "path",
                "must be at most 4096 characters, naming a file of the workspace",
            ));
        }
        if req
            .caption
            .as_ref()
            .is_some_and(|c| c.chars().count() > 1024)
        {
            return Err(EngineError::validation(
                "caption",
                "must be at most 1024 characters",
            ));
        }
        let control = RunControl::Share {
            session_id,
            request: req,
        };
        match self.apply_or_forward(session_id, control).await? {
            ControlReply::Shared { response } => Ok(response),
            other => Err(super::control::unexpected(other)),
        }
    }

    /// [`Self::share_file`] when the run executes here.
    pub(super) async fn share_local(
        &self,
        session_id: Uuid,
        req: ShareFileRequest,
    ) -> Result<SharedFile, EngineError> {
        let active = {
            let map = self.inner.active.lock();
            map.get(&session_id).map(|a| (a.run_id, a.lease.clone()))
        };
        let Some((run_id, lease)) = active else {
            return Err(EngineError::SessionNotRunning(session_id));
        };
        if let Some(given) = req.run_id
            && given != run_id
        {
            return Err(EngineError::RunMismatch {
                given,
                active: Some(run_id),
            });
        }
        let session = self.record(session_id).await?;
        let path = crate::files::confine_existing(std::path::Path::new(&session.cwd), &req.path)?;
        let file = crate::files::share(
            crate::files::ShareTarget {
                store: self.inner.store.as_ref(),
                blobs: &self.inner.blobs,
                limits: &self.inner.config.files,
                log: &self.inner.log,
                session_id,
                run_id,
                fence: Some(&lease),
                protected: &self.inner.config.protected,
            },
            &path,
            req.caption,
        )
        .await?;
        Ok(SharedFile { run_id, file })
    }

    /// The session token for `session_id` (see [`crate::tokens`]).
    pub fn session_token(&self, session_id: Uuid) -> String {
        self.inner.tokens.mint(session_id)
    }

    /// Whether `token` is this process's session token for `session_id`.
    pub fn verify_session_token(&self, session_id: Uuid, token: &str) -> bool {
        self.inner.tokens.verify(session_id, token)
    }

    /// The files a message names, checked: each one the session's, at most
    /// `max_attachments`, together within `max_message_bytes`.
    pub(super) async fn attachments(
        &self,
        session_id: Uuid,
        refs: &[AttachmentRef],
    ) -> Result<Vec<FileInfo>, EngineError> {
        let limits = &self.inner.config.files;
        if refs.len() > limits.max_attachments {
            return Err(EngineError::validation(
                "message.attachments",
                format!("at most {} files per message", limits.max_attachments),
            ));
        }
        let mut files: Vec<FileInfo> = Vec::with_capacity(refs.len());
        for r in refs {
            if files.iter().any(|f| f.file_id == r.file_id) {
                continue;
            }
            let record = self
                .inner
                .store
                .get_file(session_id, r.file_id)
                .await?
                .ok_or(EngineError::UnknownFile(r.file_id))?;
            files.push(info(&record));
        }
        let total: u64 = files.iter().map(|f| f.size).sum();
        if total > limits.max_message_bytes {
            return Err(EngineError::AttachmentsTooLarge {
                limit: limits.max_message_bytes,
            });
        }
        Ok(files)
    }

    /// After the session's rows are gone: removes the content no other session names.
    pub(super) async fn remove_unused_content(&self, hashes: Vec<String>) {
        let store = &self.inner.store;
        self.inner
            .blobs
            .remove_unused(hashes, |sha| async move {
                Ok(store.content_in_use(&sha).await?)
            })
            .await;
    }
}
