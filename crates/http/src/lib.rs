//! The HTTP kit of every Switchboard route (the server's `/v1`, the gateway's and the
//! relay's): one [`ApiError`] answering the one error body, extractors whose rejections are
//! `ApiError`s with stable codes, the `x-request-id` middleware, the bearer-token check
//! (constant time) and the `Content-Length` limit answered before the body is read.
//!
//! It knows nothing of the engine: an error type becomes an `ApiError` through
//! [`switchboard_protocol::Coded`] (see [`ApiError`]'s `From`).

mod auth;
mod error;
mod extract;
mod limit;
mod per_token;
mod principal;
mod serve;

pub use auth::{BearerToken, bearer_value, check_bearer, require_bearer};
pub use error::{ApiError, current_request_id, method_not_allowed, not_found, request_id};
pub use extract::{Json, Path, Query, from_json_slice};
pub use limit::{BodyLimit, reject_oversized};
pub use per_token::{CallerKey, CallerKeys, StreamSlot, StreamSlots, WriteRate, limit_writes};
pub use principal::{
    Access, Auth, Authenticator, STREAM_RECHECK, ScopeTable, ScopeTableError, authenticate,
    authorized, missing_scope,
};
pub use serve::{ConnLimits, serve};
