//! The error type and request-id plumbing of the API come from the HTTP kit.

pub use switchboard_http::{ApiError, method_not_allowed, not_found, request_id};
