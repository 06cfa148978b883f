//! Typed async client for the Switchboard `/v1` API.
//!
//! This crate owns talking to a Switchboard server over HTTP: one method per endpoint on
//! [`Client`], errors mapped to [`ClientError`] (with the server's stable error codes), and
//! [`EventStream`], a subscription to a session's SSE events that reconnects by itself with
//! `Last-Event-ID` and never yields an event twice, and [`RunFollower`], one run's events as
//! typed [`Step`]s — what surfaces follow a run with. The bodies are the types of
//! [`switchboard_protocol`], re-exported as [`protocol`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), switchboard_client::ClientError> {
//! use futures::StreamExt;
//! use switchboard_client::{Client, protocol::{CreateSessionRequest, MessageType, SendMessageRequest}};
//!
//! let client = Client::new("http://127.0.0.1:7070", Some("token".into()))?;
//! let session = client.create_session(&CreateSessionRequest::default()).await?;
//! let mut events = client.subscribe(session.id, None);
//! client.send_message(session.id, &SendMessageRequest::user("hi", MessageType::Message)).await?;
//! while let Some(event) = events.next().await {
//!     let event = event?;
//!     if event.event.is_terminal() {
//!         break;
//!     }
//! }
//! # Ok(())
//! # }
//! ```

mod client;
mod error;
mod follow;
mod gateway;
mod relay;
mod schedules;
mod search;
pub mod sse;
mod stream;
mod team;
mod usage;

#[cfg(test)]
mod sse_prop_tests;

pub use client::Client;
pub use error::ClientError;
pub use follow::{RunEnd, RunFollower, RunStep, Step};
pub use relay::RelayClientError;
pub use stream::EventStream;
pub use switchboard_protocol as protocol;
pub use team::AuditQuery;
