//! Files a session carries: uploaded by a client, attached to a message, read by the agent.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

/// A stored file of a session (the answer of `POST /v1/sessions/{id}/files`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FileInfo {
    pub file_id: Uuid,
    /// The name it was uploaded with (its last path component; at most 255 bytes).
    pub name: String,
    /// The type sniffed from its content (never taken from the name or the client).
    #[schema(example = "image/png")]
    pub mime: String,
    /// Bytes.
    pub size: u64,
    /// SHA-256 of the content, lowercase hex: files are stored by it.
    #[schema(pattern = "^[0-9a-f]{64}$")]
    pub sha256: String,
    pub created_at: DateTime<Utc>,
}

/// `GET /v1/sessions/{id}/files`: the session's files, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ListFilesResponse {
    pub files: Vec<FileInfo>,
}

/// A file attached to a message, by the id its upload returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AttachmentRef {
    pub file_id: Uuid,
}

/// The multipart form of an upload (documents the request body).
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub struct UploadForm {
    /// The file (one part named `file`; its `filename` is the name kept).
    #[schema(value_type = String, format = Binary)]
    pub file: Vec<u8>,
}
