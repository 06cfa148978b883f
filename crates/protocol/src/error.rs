//! The error body every endpoint answers with, and the stable codes clients branch on.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `{"error": "<human message>", "code": "<snake_case_code>", "request_id": "<id>"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    /// Human-readable message; never contains secrets or internal details.
    pub error: String,
    /// Stable snake_case code (see [`ErrorCode`]).
    pub code: String,
    /// Id of the request, also logged by the server.
    pub request_id: String,
}

/// Stable error codes. The string form is part of the contract: tests and clients match on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The body is not valid JSON, or a field has the wrong type (400).
    InvalidJson,
    /// A field has a value that is not allowed (400).
    ValidationFailed,
    /// A header or query parameter is malformed (400).
    InvalidHeader,
    /// A query parameter is malformed (400).
    InvalidQuery,
    /// The `Authorization` header is missing (401).
    Unauthorized,
    /// The bearer token is wrong (401).
    InvalidToken,
    /// Authenticated but not allowed (403).
    Forbidden,
    /// The path is Switchboard's own state (data directory, token, configuration, files
    /// store, checkpoints), out of every agent's reach (403).
    ForbiddenPath,
    /// A browser request (cookie, console page) whose `Host` is not this server's (403):
    /// DNS-rebinding protection.
    HostNotAllowed,
    /// A request whose `Origin` is not this server's own (403): cross-site protection.
    OriginNotAllowed,
    /// No session with that id (404).
    SessionNotFound,
    /// No such route (404).
    NotFound,
    /// No file with that id in this session (404).
    FileNotFound,
    /// No checkpoint with that id in this session (404).
    CheckpointNotFound,
    /// No pending pairing request with that code on that channel: wrong, already decided
    /// or expired (404).
    PairingNotFound,
    /// Method not allowed on this route (405).
    MethodNotAllowed,
    /// A `message` arrived while a run is active (409).
    SessionAlreadyRunning,
    /// `steering` arrived while no run is active (409).
    SessionNotRunning,
    /// The `run_id` given is not the session's active run (409).
    RunMismatch,
    /// No tool call is waiting for a decision (409).
    NoPendingApproval,
    /// The body is larger than the server accepts (413).
    PayloadTooLarge,
    /// An uploaded file is larger than the per-file limit (413).
    FileTooLarge,
    /// A message's attachments together are larger than the per-message limit (413).
    AttachmentsTooLarge,
    /// The body's content type is not JSON (415).
    UnsupportedMediaType,
    /// An uploaded file's content (sniffed, not its name) is not an allowed type (415).
    UnsupportedFileType,
    /// The session's workspace cannot be checkpointed here: not a directory, too many files,
    /// no `git`, or its checkpoints live on another instance (422).
    CheckpointsUnavailable,
    /// Semantically invalid request, e.g. an unknown backend (422).
    UnprocessableEntity,
    /// A message names a file that is not one of its session's (422).
    UnknownFile,
    /// `sandbox: true` asked for a sandbox this server does not have (422).
    SandboxUnsupported,
    /// The settings cannot be saved: the configuration is not a file that can be written (409).
    SettingsReadOnly,
    /// The setting is an environment variable's: only the variable can change it (409).
    SetByEnvironment,
    /// What the request would create exists already (a user of that name) (409).
    Conflict,
    /// A password sign-in failed: unknown user or wrong password, not told apart (401).
    InvalidCredentials,
    /// A personal API token that has expired or was revoked (401).
    TokenRevoked,
    /// A provider's key or a platform's token was refused, or the service did not answer (422).
    CheckFailed,
    /// Too many requests (429).
    RateLimited,
    /// Something failed inside the server; details are in its log, not here (500).
    Internal,
    /// The server is shutting down or a dependency is unavailable (503).
    Unavailable,
    /// The database did not answer or failed the write (503, with `Retry-After`). Nothing of
    /// the request was kept: retrying it is safe.
    StoreUnavailable,
    /// The token already holds as many event streams as allowed (429).
    TooManyStreams,
}

impl ErrorCode {
    /// The snake_case string used on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidJson => "invalid_json",
            Self::ValidationFailed => "validation_failed",
            Self::InvalidHeader => "invalid_header",
            Self::InvalidQuery => "invalid_query",
            Self::Unauthorized => "unauthorized",
            Self::InvalidToken => "invalid_token",
            Self::Forbidden => "forbidden",
            Self::ForbiddenPath => "forbidden_path",
            Self::HostNotAllowed => "host_not_allowed",
            Self::OriginNotAllowed => "origin_not_allowed",
            Self::SessionNotFound => "session_not_found",
            Self::NotFound => "not_found",
            Self::FileNotFound => "file_not_found",
            Self::CheckpointNotFound => "checkpoint_not_found",
            Self::PairingNotFound => "pairing_not_found",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::SessionAlreadyRunning => "session_already_running",
            Self::SessionNotRunning => "session_not_running",
            Self::RunMismatch => "run_mismatch",
            Self::NoPendingApproval => "no_pending_approval",
            Self::PayloadTooLarge => "payload_too_large",
            Self::FileTooLarge => "file_too_large",
            Self::AttachmentsTooLarge => "attachments_too_large",
            Self::UnsupportedMediaType => "unsupported_media_type",
            Self::UnsupportedFileType => "unsupported_file_type",
            Self::UnprocessableEntity => "unprocessable_entity",
            Self::CheckpointsUnavailable => "checkpoints_unavailable",
            Self::UnknownFile => "unknown_file",
            Self::SandboxUnsupported => "sandbox_unsupported",
            Self::SettingsReadOnly => "settings_read_only",
            Self::SetByEnvironment => "set_by_environment",
            Self::Conflict => "conflict",
            Self::InvalidCredentials => "invalid_credentials",
            Self::TokenRevoked => "token_revoked",
            Self::CheckFailed => "check_failed",
            Self::RateLimited => "rate_limited",
            Self::Internal => "internal",
            Self::Unavailable => "unavailable",
            Self::StoreUnavailable => "store_unavailable",
            Self::TooManyStreams => "too_many_streams",
        }
    }

    /// The HTTP status that goes with the code.
    pub fn http_status(self) -> u16 {
        match self {
            Self::InvalidJson
            | Self::ValidationFailed
            | Self::InvalidHeader
            | Self::InvalidQuery => 400,
            Self::Unauthorized
            | Self::InvalidToken
            | Self::InvalidCredentials
            | Self::TokenRevoked => 401,
            Self::Forbidden
            | Self::ForbiddenPath
            | Self::HostNotAllowed
            | Self::OriginNotAllowed => 403,
            Self::SessionNotFound
            | Self::NotFound
            | Self::FileNotFound
            | Self::CheckpointNotFound
            | Self::PairingNotFound => 404,
            Self::MethodNotAllowed => 405,
            Self::SessionAlreadyRunning
            | Self::SessionNotRunning
            | Self::RunMismatch
            | Self::NoPendingApproval
            | Self::SettingsReadOnly
            | Self::SetByEnvironment
            | Self::Conflict => 409,
            Self::PayloadTooLarge | Self::FileTooLarge | Self::AttachmentsTooLarge => 413,
            Self::UnsupportedMediaType | Self::UnsupportedFileType => 415,
            Self::UnprocessableEntity
            | Self::SandboxUnsupported
            | Self::UnknownFile
            | Self::CheckpointsUnavailable
            | Self::CheckFailed => 422,
            Self::RateLimited | Self::TooManyStreams => 429,
            Self::Internal => 500,
            Self::Unavailable | Self::StoreUnavailable => 503,
        }
    }
}

/// An error that knows its stable code (the engine's errors): the HTTP kit turns any such
/// error into its error answer, so handlers use `?`.
pub trait Coded: std::fmt::Display {
    fn code(&self) -> ErrorCode;
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a JSON value is, for error messages: "null", "a boolean", "a number", "a string",
/// "an array" or "an object" ("`path` must be a string, not an array").
pub fn json_kind(v: &serde_json::Value) -> &'static str {
    use serde_json::Value;
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_name_matches_as_str() {
        for code in [
            ErrorCode::InvalidJson,
            ErrorCode::SessionAlreadyRunning,
            ErrorCode::RunMismatch,
            ErrorCode::PayloadTooLarge,
            ErrorCode::NoPendingApproval,
            ErrorCode::SandboxUnsupported,
            ErrorCode::StoreUnavailable,
            ErrorCode::TooManyStreams,
            ErrorCode::PairingNotFound,
            ErrorCode::SettingsReadOnly,
            ErrorCode::SetByEnvironment,
            ErrorCode::CheckFailed,
            ErrorCode::Conflict,
            ErrorCode::InvalidCredentials,
            ErrorCode::TokenRevoked,
        ] {
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
        }
    }
}
