//! What every platform channel is built on: one HTTP client with one retry policy
//! ([`client`]) and one outbound scheduler per bot ([`outbox`]).
//!
//! A channel owns a [`PlatformClient`] and says only what is its platform's own: how a
//! request is built, what an answer means, and which keys a call counts against.

use crate::channel::{ChatKind, ChatRef};

pub mod client;
pub mod outbox;
pub(crate) mod wire;

pub use client::{
    Answer, Call, OverCap, PlatformClient, REDACTED, RetryPolicy, Verdict, counting_attempts, pause,
};
pub use outbox::{Limits, Outbox, Rate};

/// How long connecting to a platform may take.
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Opens a platform's WebSocket (Slack's Socket Mode, Discord's gateway). `wss://` goes
/// through rustls with its process-default crypto provider, and two are compiled in (ring,
/// which the workspace uses; aws-lc-rs, which matrix-sdk's reqwest brings): with both and
/// none installed rustls cannot choose and panics, so ring is installed first (a no-op
/// when one is).
pub async fn connect_ws(
    url: impl tokio_tungstenite::tungstenite::client::IntoClientRequest + Unpin,
) -> Result<
    (
        tokio_tungstenite::WebSocketStream<
            tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
        >,
        tokio_tungstenite::tungstenite::handshake::client::Response,
    ),
    tokio_tungstenite::tungstenite::Error,
> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    tokio_tungstenite::connect_async(url).await
}

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

/// Whether a file URL a platform handed us may be fetched (with the bot's credentials, for
/// Slack): on the API's own host (the configured base, a test server included), or HTTPS on
/// one of the platform's `hosts` (`slack.com` covers `files.slack.com`). Anything else — a
/// URL a crafted message points at an internal address — is refused.
pub fn file_url_allowed(url: &str, base: &str, hosts: &[&str]) -> Result<reqwest::Url, String> {
    let u =
        reqwest::Url::parse(url).map_err(|_| "the platform gave no valid file URL".to_string())?;
    let host = u.host_str().unwrap_or_default().to_ascii_lowercase();
    let base_host = reqwest::Url::parse(base).ok().and_then(|b| {
        b.host_str()
            .map(|h| (h.to_ascii_lowercase(), b.port_or_known_default()))
    });
    if base_host.is_some_and(|(h, port)| h == host && port == u.port_or_known_default()) {
        return Ok(u);
    }
    let on_platform = hosts
        .iter()
        .any(|h| host == *h || host.ends_with(&format!(".{h}")));
    if u.scheme() == "https" && on_platform {
        return Ok(u);
    }
    Err(format!(
        "the file URL's host {host:?} is not the platform's; not fetched"
    ))
}

#[cfg(test)]
mod file_url_tests {
    use super::file_url_allowed;

    #[test]
    fn only_the_platform_s_hosts_are_fetched() {
        let hosts = ["slack.com", "slack-edge.com"];
        let base = "https://slack.com/api";
        assert!(
            file_url_allowed(
                "https://files.slack.com/files-pri/T1-F1/a.png",
                base,
                &hosts
            )
            .is_ok()
        );
        assert!(
            file_url_allowed(
                "http://127.0.0.1:4000/files/a.png",
                "http://127.0.0.1:4000/api",
                &hosts
            )
            .is_ok()
        );
        for bad in [
            "http://files.slack.com/a.png",
            "https://evil.example/slack.com/a.png",
            "https://slack.com.evil.example/a.png",
            "http://127.0.0.1:4001/a.png",
            "http://169.254.169.254/latest/meta-data",
            "not a url",
        ] {
            assert!(file_url_allowed(bad, base, &hosts).is_err(), "{bad}");
        }
    }
}
