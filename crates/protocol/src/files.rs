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

/// The multipart form of an upload (documents the request body): the part named `file`;
/// other parts are skipped.
#[derive(Debug)]
#[allow(dead_code)]
pub struct UploadForm {
    /// The file (one part named `file`; its `filename` is the name kept).
    pub file: Vec<u8>,
}

/// Written by hand for the names of the other parts: a part's name travels in a header
/// (`Content-Disposition`), where control characters other than tab, CR and LF (which
/// clients escape) cannot be sent, so no form with such a name can be read (400).
impl utoipa::PartialSchema for UploadForm {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
        let file = ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Binary)))
            .description(Some(
                "The file (one part named `file`; its `filename` is the name kept)",
            ));
        crate::schema::t(
            ObjectBuilder::new()
                .schema_type(Type::Object)
                .required("file")
                .property("file", file)
                .property_names(Some(crate::schema::string(Some(
                    r"^[^\x00-\x08\x0b\x0c\x0e-\x1f\x7f]*$",
                )))),
        )
    }
}

impl ToSchema for UploadForm {}

/// `POST /v1/sessions/{id}/share`: a file of the session's workspace, shared with the user
/// by the run that is executing (an external agent's `send_file` tool, through
/// `switchboard mcp --session`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ShareFileRequest {
    /// The file: relative to the session's workspace, or absolute inside it. Not blank.
    #[schema(max_length = 4096, pattern = r"\S")]
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
