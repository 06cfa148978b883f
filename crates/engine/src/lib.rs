//! The headless engine of Switchboard.
//!
//! It owns sessions and runs (at most one active run per session, follow-ups queued durably,
//! steering, cancel), the durable event log with live fan-out and replay ([`EventLog`]), and
//! the [`Backend`] trait that agents implement. It knows nothing of HTTP, chat platforms or
//! tmux: surfaces reach it through the server's API.

pub mod approval;
mod backend;
mod bus;
pub mod checkpoints;
pub mod child;
mod config;
mod error;
pub mod files;
mod log;
mod markdown;
pub mod protected;
mod service;
pub mod team;
mod time;
pub mod tokens;
pub mod usage;

pub use approval::{Decision, ToolClass, Verdict};
pub use backend::{Backend, BackendError, Backends, RunContext, RunHandle, RunInput, RunSummary};
pub use bus::{ControlReply, EventBus, RunControl};
pub use config::{DEFAULT_LIVE_BUFFER, EngineConfig, HistoryLimits, MIN_LIVE_BUFFER};
pub use error::EngineError;
pub use files::FileLimits;
pub use log::{EventBatch, EventLog, LogEvent, Pipeline, SubItem, Subscription};
pub use markdown::render_transcript;
pub use protected::ProtectedPaths;
pub use service::{DiffOutput, Engine, SessionDefaults};
pub use team::{Team, TeamError};
pub use time::{now_rfc3339, rfc3339 as time_text};
pub use usage::{Attribution, Meter, UsageConfig};

pub use switchboard_protocol as protocol;
pub use switchboard_store as store;
