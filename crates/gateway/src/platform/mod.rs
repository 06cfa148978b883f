//! What every platform channel is built on: one HTTP client with one retry policy
//! ([`client`]) and one outbound scheduler per bot ([`outbox`]).
//!
//! A channel owns a [`PlatformClient`] and says only what is its platform's own: how a
//! request is built, what an answer means, and which keys a call counts against.

use crate::channel::{ChatKind, ChatRef};

pub mod client;
pub mod outbox;

pub use client::{Answer, Call, OverCap, PlatformClient, REDACTED, RetryPolicy, Verdict, pause};
pub use outbox::{Limits, Outbox, Rate};

/// How long connecting to a platform may take.
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// What every platform channel's configuration shares, checked: `url` (named `field` in
/// errors) must be an `http://` or `https://` URL, `edit_interval` at most an hour. Returns
/// the URL without a trailing `/` and the HTTP client `builder` makes (with the connect
/// timeout); the error is the reason, for [`crate::ChannelError::Other`].
pub fn prepare(
    field: &str,
    url: &str,
    edit_interval: std::time::Duration,
    builder: reqwest::ClientBuilder,
) -> Result<(String, reqwest::Client), String> {
    let base = url.trim().trim_end_matches('/').to_owned();
    if !(base.starts_with("http://") || base.starts_with("https://")) {
        return Err(format!(
            "{field} {base:?}: expected an http:// or https:// URL"
        ));
    }
    if edit_interval > std::time::Duration::from_secs(3600) {
        return Err("edit_interval: at most one hour".into());
    }
    let http = builder
        .connect_timeout(CONNECT_TIMEOUT)
        .build()
        .map_err(|e| format!("HTTP client: {e}"))?;
    Ok((base, http))
}

/// The outbox key of every call of the bot.
pub const BOT: &str = "bot";

/// The outbox key of messages sent to `chat` (`group:{id}` for a group, channel or thread:
/// platforms allow fewer messages there than in a direct chat).
pub fn chat_key(chat: &ChatRef) -> String {
    match chat.kind {
        ChatKind::Direct => format!("chat:{}", chat.id),
        _ => format!("group:{}", chat.id),
    }
}

/// The outbox key that spaces edits in chat `id`.
pub fn edit_key(id: &str) -> String {
    format!("edit:{id}")
}

/// The outbox keys of a message sent to `chat`.
pub fn send_keys(chat: &ChatRef) -> Vec<String> {
    vec![BOT.to_owned(), chat_key(chat)]
}

/// The outbox keys of an edit in chat `id`.
pub fn edit_keys(id: &str) -> Vec<String> {
    vec![BOT.to_owned(), edit_key(id)]
}

/// The name under which the edits of one message coalesce.
pub fn message_key(chat: &str, message: &str) -> String {
    format!("{chat}\u{0}{message}")
}
