use switchboard_protocol::ErrorCode;
use switchboard_store::StoreError;
use thiserror::Error;
use uuid::Uuid;

/// Why an engine operation was refused or failed. [`EngineError::code`] maps each to the
/// stable wire code.
#[derive(Debug, Error)]
pub enum EngineError {
    #[error("session {0} not found")]
    SessionNotFound(Uuid),
    #[error("session {0} already has an active run")]
    SessionAlreadyRunning(Uuid),
    #[error("session {0} has no active run")]
    SessionNotRunning(Uuid),
    #[error("run {given} is not the active run of this session{}", active.map(|a| format!(" (active: {a})")).unwrap_or_default())]
    RunMismatch { given: Uuid, active: Option<Uuid> },
    #[error("no tool call is waiting for a decision")]
    NoPendingApproval,
    #[error("invalid {field}: {message}")]
    Validation { field: String, message: String },
    #[error("{0}")]
    Unprocessable(String),
    #[error(
        "sandbox: true was asked for, but this server has no sandbox; send the message without it (or with sandbox: false) to run unsandboxed"
    )]
    SandboxUnsupported,
    #[error("the file is larger than the {} accepted per file", mb(*limit))]
    FileTooLarge { limit: u64 },
    #[error("the message's attachments are larger than the {} accepted per message together", mb(*limit))]
    AttachmentsTooLarge { limit: u64 },
    #[error("files of type {0} are not accepted (the type is read from the content, not the name)")]
    UnsupportedFileType(String),
    /// `path` is Switchboard's own state ([`crate::protected`]).
    #[error("{}", crate::ProtectedPaths::refusal(given, by))]
    ForbiddenPath {
        given: String,
        by: std::path::PathBuf,
    },
    #[error("Idempotency-Key must be 1 to 255 visible ASCII characters (a UUID is a good one)")]
    InvalidIdempotencyKey,
    #[error("session has no file {0}")]
    FileNotFound(Uuid),
    #[error("message.attachments: {0} is not a file of this session (upload it first)")]
    UnknownFile(Uuid),
    #[error("the engine is shutting down")]
    ShuttingDown,
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Checkpoint(#[from] crate::checkpoints::CheckpointError),
    /// The instance that executes the run answered with an error.
    #[error("{message}")]
    Remote { code: ErrorCode, message: String },
    /// The instance that executes the run could not be reached.
    #[error("the instance running this session ({instance}) did not answer: {reason}")]
    OwnerUnreachable { instance: String, reason: String },
    /// The caller may not do this (an approval rule names others); the message says why.
    #[error("{0}")]
    Forbidden(String),
    /// What is asked clashes with what is (a budget of the configuration file changed over
    /// the API).
    #[error("{0}")]
    Conflict(String),
    #[error("internal error: {0}")]
    Internal(String),
}

/// Bytes as a size people read: `20 MB`, `512 KB`, `100 bytes`.
fn mb(bytes: u64) -> String {
    if bytes >= 1024 * 1024 && bytes.is_multiple_of(1024 * 1024) {
        format!("{} MB", bytes / (1024 * 1024))
    } else if bytes >= 1024 && bytes.is_multiple_of(1024) {
        format!("{} KB", bytes / 1024)
    } else {
        format!("{bytes} bytes")
    }
}

impl EngineError {
    pub fn validation(field: &str, message: impl Into<String>) -> Self {
        Self::Validation {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The stable wire code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::SessionNotFound(_) => ErrorCode::SessionNotFound,
            Self::SessionAlreadyRunning(_) => ErrorCode::SessionAlreadyRunning,
            Self::SessionNotRunning(_) => ErrorCode::SessionNotRunning,
            Self::RunMismatch { .. } => ErrorCode::RunMismatch,
            Self::NoPendingApproval => ErrorCode::NoPendingApproval,
            Self::Validation { .. } => ErrorCode::ValidationFailed,
            Self::Unprocessable(_) => ErrorCode::UnprocessableEntity,
            Self::SandboxUnsupported => ErrorCode::SandboxUnsupported,
            Self::FileTooLarge { .. } => ErrorCode::FileTooLarge,
            Self::AttachmentsTooLarge { .. } => ErrorCode::AttachmentsTooLarge,
            Self::UnsupportedFileType(_) => ErrorCode::UnsupportedFileType,
            Self::FileNotFound(_) => ErrorCode::FileNotFound,
            Self::ForbiddenPath { .. } => ErrorCode::ForbiddenPath,
            Self::Forbidden(_) => ErrorCode::Forbidden,
            Self::Conflict(_) => ErrorCode::Conflict,
            Self::InvalidIdempotencyKey => ErrorCode::InvalidHeader,
            Self::UnknownFile(_) => ErrorCode::UnknownFile,
            Self::ShuttingDown => ErrorCode::Unavailable,
            Self::Remote { code, .. } => *code,
            Self::OwnerUnreachable { .. } => ErrorCode::Unavailable,
            Self::Store(StoreError::NotFound(_)) => ErrorCode::NotFound,
            // The run was taken over by another instance: not running here any more.
            Self::Store(StoreError::Fenced(_)) => ErrorCode::SessionNotRunning,
            Self::Store(StoreError::Conflict(_)) => ErrorCode::Internal,
            // The database failed or did not answer: the client may retry (503 with
            // `Retry-After`); what failed is in the log, not in the answer.
            Self::Store(StoreError::Database(_)) => ErrorCode::StoreUnavailable,
            Self::Store(_) | Self::Internal(_) => ErrorCode::Internal,
            Self::Checkpoint(e) => {
                use crate::checkpoints::CheckpointError as C;
                match e {
                    C::NotFound(_) => ErrorCode::CheckpointNotFound,
                    C::Metadata(_) => ErrorCode::Internal,
                    C::Disabled
                    | C::NotADirectory(_)
                    | C::TooManyFiles { .. }
                    | C::NoCheckpoints
                    | C::Protected(_)
                    | C::Git(_) => ErrorCode::CheckpointsUnavailable,
                }
            }
        }
    }
}

impl switchboard_protocol::Coded for EngineError {
    fn code(&self) -> ErrorCode {
        EngineError::code(self)
    }
}
