//! The Signal channel, through signal-cli's daemon (`signal-cli -a +NUMBER daemon --http
//! 127.0.0.1:8080`), the usual way to run a Signal bot: JSON-RPC requests to `POST
//! /api/v1/rpc`, received messages from the Server-Sent Events of `GET /api/v1/events`
//! (signal-cli-jsonrpc(5)).
//!
//! - **Receiving**: JSON-RPC `receive`, called again and again (the daemon runs with
//!   `--receive-mode manual`, so messages wait on Signal's servers while Switchboard is
//!   away; see `receive.rs`). The gateway takes each message (sender, timestamp) once.
//! - **Conversations**: a direct message is one; a group is one (Signal has no threads).
//!   In groups the bot answers when mentioned or replied to (`require_mention`).
//! - **Replies** stream by edits (`send` with `editTimestamp`, always the original's), one
//!   every three seconds per chat; Signal's apps let a person edit a message at most
//!   [`MAX_EDITS`] times, and the bot keeps to that too: past it the reply goes on in a new
//!   message (its page repeated there). A message holds 2,000 characters; longer replies are split.
//! - **Approvals** (Signal has no buttons): a reply quoting the prompt (`allow`, `deny,
//!   not on main`), `/allow` / `/deny`, or a 👍 / 👎 (✅ / ❌) reaction on it.
//! - **Files**: attachments in (`getAttachment`, base64), `send_file` out (an attachment as a
//!   data URI with its file name).
//! - **Rate limits**: a send signal-cli reports rate limited (code -5) is waited out by its
//!   `retryAfterSeconds`; the outbox keeps to five calls a second.
//!
//! signal-cli's HTTP endpoint has no authentication: bind it to localhost (or a private
//! network) only.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::channel::{
    Attachment, Button, ButtonPress, Channel, ChannelContext, ChannelError, ChannelInfo, ChatKind,
    ChatRef, Fetched, OutgoingFile,
};
use crate::health::ChannelHealth;
use crate::platform::{self, Limits, OverCap, PlatformClient, Rate, RetryPolicy};

mod inbound;
mod receive;
mod rpc;

/// The longest text of one message (longer ones become a "long text" attachment).
pub const MAX_CHARS: usize = 2000;
/// How many times Signal's apps show a message edited; later edits are ignored by them.
pub const MAX_EDITS: u32 = 10;

/// `[channels.signal]`, checked.
#[derive(Debug, Clone)]
pub struct SignalConfig {
    /// The channel's name (default `signal`).
    pub name: String,
    /// signal-cli's `--http` address: `http://127.0.0.1:8080`.
    pub url: String,
    /// The bot's number (`+4915112345678`), as registered or linked in signal-cli.
    pub account: String,
    /// Whether to name the account in every call (a daemon serving several accounts).
    pub account_param: Option<String>,
    /// In groups, answer only when mentioned or replied to (default true).
    pub require_mention: bool,
    pub edit_interval: Duration,
    pub max_retries: u32,
    pub max_retry_after: Duration,
    pub over_cap: OverCap,
}

impl SignalConfig {
    pub fn new(url: impl Into<String>, account: impl Into<String>) -> Self {
        Self {
            name: "signal".into(),
            url: url.into(),
            account: account.into(),
            account_param: None,
            require_mention: true,
            edit_interval: Duration::from_secs(3),
            max_retries: 3,
            max_retry_after: Duration::from_secs(60),
            over_cap: OverCap::Fail,
        }
    }
}

fn limits(edit_interval: Duration) -> Limits {
    Limits::new()
        .with(platform::BOT, Rate::per(5, Duration::from_secs(1)))
        .with("edit", Rate::spaced(edit_interval))
}

/// The Signal channel (see the module docs).
pub struct SignalChannel {
    cfg: SignalConfig,
    info: ChannelInfo,
    client: PlatformClient,
    /// The bot's own ACI (uuid), once asked: mentions name it.
    own_uuid: Mutex<Option<String>>,
    /// How many times each of the bot's messages was edited.
    edits: Mutex<HashMap<String, u32>>,
}

impl SignalChannel {
    /// Checks the configuration (no network call).
    pub fn new(cfg: SignalConfig) -> Result<Self, ChannelError> {
        let other = |reason: String| ChannelError::Other {
            channel: cfg.name.clone(),
            reason,
        };
        let number = cfg.account.trim();
        if !(number.starts_with('+')
            && number.len() > 4
            && number[1..].chars().all(|c| c.is_ascii_digit()))
        {
            return Err(other(format!(
                "account {number:?}: the bot's number in international form (+4915112345678)"
            )));
        }
        let (base, http) = platform::prepare(
            "url",
            &cfg.url,
            cfg.edit_interval,
            reqwest::Client::builder(),
        )
        .map_err(other)?;
        let client = PlatformClient::new(
            cfg.name.clone(),
            &base,
            http,
            Vec::new(),
            RetryPolicy::configured(cfg.max_retries, cfg.max_retry_after, cfg.over_cap),
            limits(cfg.edit_interval),
        );
        let info = ChannelInfo::new(cfg.name.clone(), MAX_CHARS)
            .edit_interval(cfg.edit_interval)
            .without_buttons(true);
        let info = ChannelInfo {
            can_edit: true,
            ..info
        };
        Ok(Self {
            info,
            cfg,
            client,
            own_uuid: Mutex::new(None),
            edits: Mutex::new(HashMap::new()),
        })
    }

    /// Where a message to `chat` goes: `recipient` or `groupId`.
    fn target(chat: &ChatRef) -> Value {
        match chat.kind {
            ChatKind::Direct => json!({"recipient": [chat.id]}),
            _ => json!({"groupId": chat.id}),
        }
    }

    /// `send` with `extra` params; the sent message's timestamp (its id).
    async fn send_message(
        &self,
        chat: &ChatRef,
        extra: Value,
        keys: &[String],
    ) -> Result<String, ChannelError> {
        let mut params = Self::target(chat);
        if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
            p.extend(e.clone());
        }
        let result = self.rpc("send", params, keys).await?;
        match result["timestamp"].as_u64() {
            Some(t) => Ok(t.to_string()),
            None => Err(self.client.other("send: the answer has no timestamp")),
        }
    }
}

#[async_trait]
impl Channel for SignalChannel {
    fn info(&self) -> &ChannelInfo {
        &self.info
    }

    async fn run(
        &self,
        ctx: ChannelContext,
        cancel: CancellationToken,
    ) -> Result<(), ChannelError> {
        self.client.connecting("starting");
        let r = self.receive(&ctx, &cancel).await;
        match &r {
            Ok(()) => self.client.stopped(),
            Err(e) => {
                tracing::error!(channel = %self.cfg.name, error = %e, "stopped receiving from signal-cli");
                self.client.failed(&format!("error: {e}"), &e.to_string());
            }
        }
        r
    }

    /// Signal has no buttons: the prompt's text says how to answer (`buttons` unused).
    async fn send(
        &self,
        chat: &ChatRef,
        text: &str,
        _buttons: &[Button],
    ) -> Result<String, ChannelError> {
        self.send_message(chat, json!({"message": text}), &platform::send_keys(chat))
            .await
    }

    /// An edit (`editTimestamp` = the message's own): after [`MAX_EDITS`] the apps would
    /// not show more, so it is refused and the dispatcher goes on in a new message.
    async fn edit(
        &self,
        chat: &ChatRef,
        message_id: &str,
        text: &str,
        _buttons: &[Button],
    ) -> Result<(), ChannelError> {
        let Ok(ts) = message_id.parse::<u64>() else {
            return Err(self
                .client
                .other(format!("{message_id:?} is not a Signal message timestamp")));
        };
        let done = self.edits.lock().get(message_id).copied().unwrap_or(0);
        if done >= MAX_EDITS {
            return Err(self.client.api_error(
                "send (edit)",
                400,
                &format!("message {message_id} was edited {MAX_EDITS} times, Signal's limit"),
            ));
        }
        self.send_message(
            chat,
            json!({"message": text, "editTimestamp": ts}),
            &platform::edit_keys(&chat.id),
        )
        .await?;
        let mut edits = self.edits.lock();
        if edits.len() > 10_000 {
            edits.clear();
        }
        *edits.entry(message_id.to_string()).or_default() += 1;
        Ok(())
    }

    async fn answer_press(
        &self,
        _press: &ButtonPress,
        _text: Option<&str>,
    ) -> Result<(), ChannelError> {
        Ok(())
    }

    /// signal-cli answers (`version`) and the account is loaded (`listGroups`).
    async fn test(&self) -> Result<String, ChannelError> {
        let keys = [platform::BOT.to_owned()];
        let version = self.rpc("version", json!({}), &keys).await?;
        let groups = self.rpc("listGroups", json!({}), &keys).await?;
        Ok(format!(
            "{} (signal-cli {}, in {} groups)",
            self.cfg.account,
            version["version"].as_str().unwrap_or("?"),
            groups.as_array().map_or(0, Vec::len)
        ))
    }

    async fn send_file(&self, chat: &ChatRef, file: &OutgoingFile) -> Result<String, ChannelError> {
        // RFC 2397 with signal-cli's `filename=`; signal-cli URL-decodes each parameter, so
        // the name is percent-encoded, and the type goes without parameters of its own.
        let name: String = form_urlencoded::byte_serialize(file.name.as_bytes()).collect();
        let mime = file
            .mime
            .split(';')
            .next()
            .unwrap_or("application/octet-stream")
            .trim();
        let uri = format!(
            "data:{mime};filename={name};base64,{}",
            base64::engine::general_purpose::STANDARD.encode(&file.bytes)
        );
        self.send_message(
            chat,
            json!({"message": file.caption.clone().unwrap_or_default(), "attachments": [uri]}),
            &platform::send_keys(chat),
        )
        .await
    }

    /// `getAttachment` (`source`: the attachment id, then `r:SENDER` or `g:GROUP`).
    async fn fetch(&self, a: &Attachment, max_bytes: u64) -> Result<Fetched, String> {
        platform::client::check_declared(a, max_bytes)?;
        let (id, from) = a
            .source
            .as_deref()
            .and_then(|s| s.split_once('\n'))
            .ok_or("this attachment cannot be fetched")?;
        let mut params = json!({"id": id});
        match from.split_once(':') {
            Some(("g", group)) => params["groupId"] = json!(group),
            Some(("r", sender)) => params["recipient"] = json!(sender),
            _ => return Err("this attachment cannot be fetched".into()),
        }
        let answer = self
            .rpc("getAttachment", params, &[platform::BOT.to_owned()])
            .await
            .map_err(|e| e.to_string())?;
        let data = answer["data"].as_str().unwrap_or_default();
        if (data.len() as u64) / 4 * 3 > max_bytes + 3 {
            return Err(platform::client::too_large(max_bytes));
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| format!("getAttachment: not base64: {e}"))?;
        if bytes.len() as u64 > max_bytes {
            return Err(platform::client::too_large(max_bytes));
        }
        let name = a.name.clone().unwrap_or_else(|| {
            let ext = a
                .mime
                .as_deref()
                .and_then(|m| m.split(['/', ';']).nth(1))
                .unwrap_or("bin");
            format!("{}.{ext}", a.kind)
        });
        Ok(Fetched {
            bytes: bytes.into(),
            name,
        })
    }

    fn status(&self) -> String {
        self.client.status()
    }

    fn health(&self) -> ChannelHealth {
        self.client.health()
    }
}

#[cfg(test)]
mod tests;
