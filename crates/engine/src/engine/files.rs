//! A session's files: upload, list, open, and the attachments of a message.

use bytes::Bytes;
use futures::Stream;
use switchboard_protocol::{AttachmentRef, FileInfo};

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
