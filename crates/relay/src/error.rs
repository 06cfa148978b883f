//! Relay errors: a stable code, a human message, a details object and an HTTP status.

use serde_json::{Value, json};

/// An error answered to a relay request (HTTP, CLI and MCP pass `code` through unchanged).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message} ({code})")]
pub struct RelayError {
    pub code: String,
    pub message: String,
    pub details: Value,
    pub status: u16,
}

impl RelayError {
    pub fn new(status: u16, code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
            details: json!({}),
            status,
        }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = details;
        self
    }

    /// 400 `validation_*`.
    pub fn validation(code: &str, message: impl Into<String>) -> Self {
        Self::new(400, format!("validation_{code}"), message)
    }

    /// 403 `authorization_forbidden`, naming the capability, the requester and the targets.
    pub fn forbidden(capability: &str, requester: &str, targets: &[String]) -> Self {
        let whom = if targets.is_empty() {
            String::new()
        } else {
            format!(" ({})", targets.join(", "))
        };
        Self::new(
            403,
            "authorization_forbidden",
            format!("`{requester}` may not {capability}{whom} under its policy"),
        )
        .with_details(json!({
            "capability": capability,
            "requester": requester,
            "targets": targets,
        }))
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "internal_error", message)
    }
}

impl From<crate::config::ConfigError> for RelayError {
    fn from(e: crate::config::ConfigError) -> Self {
        let status = match e {
            crate::config::ConfigError::NotFound(..) => 404,
            crate::config::ConfigError::Invalid { .. } => 422,
            crate::config::ConfigError::Io(..) => 500,
        };
        Self::new(status, e.code(), e.to_string())
    }
}

impl From<crate::store::StoreError> for RelayError {
    fn from(e: crate::store::StoreError) -> Self {
        tracing::error!(error = %e, "relay store");
        Self::internal(format!("relay store: {e}"))
    }
}

/// The relay's errors in the common error body, with the relay's fields beside
/// `error`, `code` and `request_id`: a [`switchboard_protocol::relay::RelayErrorBody`].
impl From<RelayError> for switchboard_http::ApiError {
    fn from(e: RelayError) -> Self {
        switchboard_http::ApiError::custom(e.status, e.code, e.message.clone())
            .with_field(
                "schema_version",
                json!(switchboard_protocol::relay::RELAY_SCHEMA_VERSION),
            )
            .with_field("message", Value::String(e.message))
            .with_field("details", e.details)
    }
}
