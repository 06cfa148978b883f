//! Bodies of endpoints that are about the server itself.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `GET /v1/health`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct HealthResponse {
    /// Always `"ok"` when the server answers.
    pub status: String,
    /// Version of the running binary.
    pub version: String,
    /// Seconds since the server started.
    pub uptime_seconds: u64,
    /// The store: `{"kind": "sqlite" | "postgres", "status": "ok" | "unavailable"}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<ComponentHealth>,
    /// The event bus between instances (`{"kind": "nats", "status": "ok" | "unavailable"}`);
    /// absent for a single instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bus: Option<ComponentHealth>,
}

/// One dependency's state in [`HealthResponse`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ComponentHealth {
    pub kind: String,
    /// `ok` or `unavailable`.
    pub status: String,
}
