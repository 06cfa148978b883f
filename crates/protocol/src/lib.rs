//! Wire types of the Switchboard `/v1` API.
//!
//! This crate owns the shapes that cross the wire: request and response bodies of every
//! endpoint, the SSE envelope and the [`events::AgentEvent`] enum, and the error body with its
//! stable codes. It does no I/O and knows nothing of HTTP frameworks, stores or agents; the
//! server, the client and every surface share these types so they cannot drift apart.

pub mod checkpoints;
pub mod error;
pub mod events;
pub mod files;
pub mod gateway;
pub mod mcp;
pub mod messages;
pub mod nullable;
pub mod openai;
pub mod outcomes;
pub mod people;
pub mod relay;
pub mod sandbox;
pub mod schedules;
mod schema;
pub mod search;
pub mod secrets;
pub mod sessions;
pub mod settings;
pub mod system;
pub mod text;
pub mod tools;
pub mod usage;

pub use checkpoints::*;
pub use error::{Coded, ErrorBody, ErrorCode};
pub use events::{
    AgentEvent, EventEnvelope, GAP_DETECTED_EVENT, GapDetected, PlanEntry, SseFrame, Usage,
};
pub use files::*;
pub use mcp::{MAX_MCP_SERVERS, McpServerSpec};
pub use messages::*;
pub use outcomes::{RejectionCause, RunErrorCode, StopReason};
pub use sandbox::{SandboxNetwork, SandboxStatus, SessionSandbox};
pub use sessions::*;
pub use system::*;
pub use tools::*;

/// Version of the wire contract; bumped when a body changes incompatibly.
pub const API_VERSION: &str = "v1";
