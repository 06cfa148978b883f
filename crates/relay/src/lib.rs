//! The relay: bundles of agents that list, message and look at each other.
//!
//! A *bundle* (one TOML file) groups *members*, each reached through a transport: a tmux pane
//! running a CLI agent, an ACP agent, or a Switchboard session. The relay validates requests,
//! applies the access policy, delivers messages (serialized per target, durable, bounded),
//! records an audit log, and serves all of it over HTTP and to agents over MCP.
//!
//! Like the gateway, the relay is a surface: it reaches sessions (and through them ACP
//! agents, whose permission requests become Switchboard approvals) only through the `/v1`
//! API client, never the engine directly.

// `RelayError` carries a details object for the caller; it is built on cold paths only
// (validation, authorization), where its size does not matter.
#![allow(clippy::result_large_err)]

pub mod api;
pub mod audit;
pub mod config;
pub mod envelope;
pub mod error;
pub mod mcp;
pub mod member_token;
pub mod policy;
pub mod service;
pub mod settings;
pub mod store;
pub mod tmux;

pub use config::{Bundle, BundleDir, ConfigError};
pub use error::RelayError;
pub use service::{Limits, MemberMcp, Relay, RelayOptions};
