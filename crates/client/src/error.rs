//! The one error type of the client, and how HTTP answers and transport failures map onto it.

use switchboard_protocol::ErrorBody;

/// Longest error-body text kept in [`ClientError::Api::message`] when the body is not the
/// server's JSON error shape.
const MAX_RAW_MESSAGE_CHARS: usize = 500;

/// Most bytes of an error body read before giving up on the rest.
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// Everything that can go wrong talking to a Switchboard server.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum ClientError {
    /// The server answered with a non-2xx status.
    ///
    /// When the body is the server's `{"error","code","request_id"}` shape its fields are used;
    /// otherwise `code` is `http_<status>` and `message` is the body text (at most 500 chars).
    #[error("server answered {status} {code}: {message} (request id {request_id:?})")]
    Api {
        status: u16,
        code: String,
        message: String,
        request_id: String,
    },
    /// The request never got an answer: connection refused or reset, timeout, TLS failure...
    #[error("transport error: {0}")]
    Transport(String),
    /// The answer (or an SSE event) did not parse.
    #[error("could not decode the server's answer: {0}")]
    Decode(String),
    /// The base URL (or a URL built from it) is not usable.
    #[error("invalid URL: {0}")]
    InvalidUrl(String),
}

impl ClientError {
    /// The stable error code of an [`ClientError::Api`] error.
    pub fn code(&self) -> Option<&str> {
        match self {
            Self::Api { code, .. } => Some(code),
            _ => None,
        }
    }

    /// The server's message of an [`ClientError::Api`] error.
    pub fn message(&self) -> Option<&str> {
        match self {
            Self::Api { message, .. } => Some(message),
            _ => None,
        }
    }

    /// The HTTP status of an [`ClientError::Api`] error.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Whether trying again later may work: transport failures, 5xx and 429.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Transport(_) => true,
            Self::Api { status, .. } => *status >= 500 || *status == 429,
            Self::Decode(_) | Self::InvalidUrl(_) => false,
        }
    }

    /// Maps a reqwest failure (sending, or reading a body) to a client error.
    pub(crate) fn from_reqwest(err: &reqwest::Error) -> Self {
        let text = error_chain(err);
        if err.is_builder() {
            Self::InvalidUrl(text)
        } else if err.is_decode() {
            Self::Decode(text)
        } else {
            Self::Transport(text)
        }
    }

    /// Builds the error for a non-2xx answer, consuming its body.
    pub(crate) async fn from_response(resp: reqwest::Response) -> Self {
        let status = resp.status().as_u16();
        let header_request_id = resp
            .headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let body = match read_capped(resp, MAX_ERROR_BODY_BYTES).await {
            Ok(body) => body,
            Err(err) => {
                return Self::Api {
                    status,
                    code: format!("http_{status}"),
                    message: format!("(error body unreadable: {})", error_chain(&err)),
                    request_id: header_request_id,
                };
            }
        };
        Self::from_status_and_body(status, &body, header_request_id)
    }

    /// The pure part of [`ClientError::from_response`].
    pub(crate) fn from_status_and_body(status: u16, body: &[u8], request_id: String) -> Self {
        match serde_json::from_slice::<ErrorBody>(body) {
            Ok(parsed) => Self::Api {
                status,
                code: parsed.code,
                message: parsed.error,
                request_id: parsed.request_id,
            },
            Err(_) => Self::Api {
                status,
                code: format!("http_{status}"),
                message: String::from_utf8_lossy(body)
                    .chars()
                    .take(MAX_RAW_MESSAGE_CHARS)
                    .collect(),
                request_id,
            },
        }
    }
}

/// Reads at most `cap` bytes of a body; the rest is left unread.
async fn read_capped(mut resp: reqwest::Response, cap: usize) -> Result<Vec<u8>, reqwest::Error> {
    let mut out = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        let room = cap.saturating_sub(out.len());
        out.extend_from_slice(chunk.get(..room.min(chunk.len())).unwrap_or_default());
        if out.len() >= cap {
            break;
        }
    }
    Ok(out)
}

/// `err` and its sources, joined with ": " (reqwest's own message alone is terse).
pub(crate) fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn json_error_body_is_used() {
        let body = br#"{"error":"bad token","code":"invalid_token","request_id":"r-1"}"#;
        let err = ClientError::from_status_and_body(401, body, String::new());
        assert_eq!(
            err,
            ClientError::Api {
                status: 401,
                code: "invalid_token".into(),
                message: "bad token".into(),
                request_id: "r-1".into(),
            }
        );
        assert_eq!(err.code(), Some("invalid_token"));
        assert_eq!(err.status(), Some(401));
        assert!(!err.is_transient());
    }

    #[test]
    fn other_bodies_become_http_code_and_are_truncated() {
        let body = "é".repeat(800);
        let err = ClientError::from_status_and_body(502, body.as_bytes(), "hdr".into());
        let ClientError::Api {
            code,
            message,
            request_id,
            ..
        } = &err
        else {
            panic!("not an Api error: {err:?}");
        };
        assert_eq!(code, "http_502");
        assert_eq!(message.chars().count(), 500);
        assert_eq!(request_id, "hdr");
        assert!(err.is_transient());
    }

    #[test]
    fn transience() {
        let api = |status| ClientError::Api {
            status,
            code: String::new(),
            message: String::new(),
            request_id: String::new(),
        };
        assert!(api(429).is_transient());
        assert!(api(503).is_transient());
        assert!(!api(404).is_transient());
        assert!(!api(409).is_transient());
        assert!(ClientError::Transport("refused".into()).is_transient());
        assert!(!ClientError::Decode("x".into()).is_transient());
        assert!(!ClientError::InvalidUrl("x".into()).is_transient());
        assert_eq!(ClientError::Decode("x".into()).code(), None);
    }
}
