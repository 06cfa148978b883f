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

/// `POST /v1/sessions/{id}/share`: a file of the session's workspace, shared with the user
/// by the run that is executing (an external agent's `send_file` tool, through
/// `switchboard mcp --session`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ShareFileRequest {
    /// The file: relative to the session's workspace, or absolute inside it.
    #[schema(min_length = 1, max_length = 4096)]
    pub path: String,
    /// Shown with the file (a chat's caption).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 1024)]
    pub caption: Option<String>,
    /// The run it belongs to, when the caller knows it: refused (409 `run_mismatch`) if that
    /// is not the active run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<Uuid>,
}

/// The answer to a share: the run that shared it (its `FileShared` event is in the log) and
/// the stored file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SharedFile {
    pub run_id: Uuid,
    pub file: FileInfo,
}
