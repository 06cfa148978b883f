//! The chat gateway: chat platforms bridged to Switchboard sessions.
//!
//! It talks to the engine only through the `/v1` API ([`switchboard_client::Client`]), so it
//! runs inside `switchboard serve` or as its own process pointed at a remote server. Every
//! piece of its state (routes, queued messages, approval prompts, reply cursors, channel
//! offsets) is in its own store — a SQLite file, or a schema of a PostgreSQL database that
//! several instances share ([`GatewayStore`]) — so a restart loses and repeats nothing.

pub mod api;
pub mod channel;
pub mod config;
pub mod discord;
mod dispatcher;
pub mod email;
pub mod health;
pub mod hearing;
pub mod matrix;
pub mod mattermost;
pub mod msteams;
pub mod pairing;
pub mod platform;
pub mod preview;
pub mod routing;
pub mod service;
pub mod settings;
pub mod signal;
pub mod slack;
pub mod speech;
pub mod store;
pub mod telegram;
pub mod text;
mod util;
pub mod webhook;
pub mod whatsapp;

#[cfg(test)]
mod prop_json;

pub use channel::{
    AnswerVia, Attachment, Button, ButtonPress, Channel, ChannelContext, ChannelError,
    ChannelState, ChatKind, ChatRef, Inbound, InboundMessage, InboundSink, Peer, Reaction,
};
pub use config::{ApprovalMode, DmScope, GatewayConfig};
pub use dispatcher::{Gateway, GatewayError, NOT_AN_APPROVER, batch_context, batch_text};
pub use store::GatewayStore;
