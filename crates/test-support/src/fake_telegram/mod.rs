//! A fake Telegram Bot API on real TCP (`127.0.0.1:0`).
//!
//! It speaks the Bot API wire format (`POST /bot<TOKEN>/<method>` with a JSON body, or the
//! parameters in the query string; answers `{"ok":true,"result":…}` or
//! `{"ok":false,"error_code":N,"description":"…","parameters":{"retry_after":S}}`) for the
//! methods a polling bot uses:
//!
//! - `getMe`: the bot [`FakeTelegram::BOT_ID`] / [`FakeTelegram::BOT_USERNAME`].
//! - `getUpdates` with long-poll semantics: updates with `update_id < offset` are confirmed
//!   (dropped for good); the ones `>= offset` are returned (at most `limit`, filtered by
//!   `allowed_updates`); when there are none, the request waits up to `timeout` seconds for
//!   new ones.
//! - `sendMessage` (`chat_id`, `text`, `message_thread_id`, `reply_markup` with an
//!   `inline_keyboard`): the result is the sent Message object.
//! - `editMessageText` / `editMessageReplyMarkup`: 400 `message to edit not found` for an
//!   unknown message, 400 `message is not modified` when nothing changes. As on Telegram,
//!   `editMessageText` without `reply_markup` removes the inline keyboard.
//! - `answerCallbackQuery`: unknown or already answered ids are refused like Telegram does.
//!
//! Only [`FakeTelegram::TOKEN`] is accepted (anything else: 401 `Unauthorized`). Users'
//! messages and button presses are injected with [`FakeTelegram::dm`],
//! [`FakeTelegram::group_message`] and [`FakeTelegram::press`]. Every call is recorded
//! ([`FakeTelegram::calls`]). The server shuts down when the [`FakeTelegram`] is dropped.
//!
//! This file holds the state and the server's start; `bot_api.rs` answers the Bot API,
//! `control.rs` is what a test does with the fake, and `wire.rs` renders Telegram's JSON
//! objects.

use parking_lot::{Mutex, MutexGuard};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::post;
use serde_json::{Map, Value, json};
use tokio::sync::watch;

mod bot_api;
mod control;
pub use control::SentFile;
#[cfg(test)]
mod tests;
mod wire;

use bot_api::{api, not_found};
use wire::{bot_user, keyboard_json, now};

/// Longest text of one message, as on Telegram.
const MAX_TEXT: usize = 4096;
/// Longest `callback_data`, as on Telegram (bytes).
const MAX_CALLBACK_DATA: usize = 64;
/// Most updates one `getUpdates` returns by default (and at most).
const MAX_LIMIT: usize = 100;
/// The title of every group chat.
const GROUP_TITLE: &str = "Test group";

/// One message the bot sent, as it stands now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BotMessage {
    pub chat_id: i64,
    pub message_id: i64,
    /// The forum topic (`message_thread_id`) it was sent to.
    pub thread_id: Option<i64>,
    pub text: String,
    /// `(text, callback_data)` of the inline keyboard, row after row.
    pub buttons: Vec<(String, String)>,
    /// How many times it was edited (text or keyboard).
    pub edits: usize,
}

/// The fake server; see the module docs.
pub struct FakeTelegram {
    addr: SocketAddr,
    state: Arc<Shared>,
    shutdown: watch::Sender<bool>,
}

struct Shared {
    inner: Mutex<Inner>,
    /// Bumped whenever an update is queued (wakes long polls).
    updates_version: watch::Sender<u64>,
    shutdown: watch::Receiver<bool>,
}

struct Chat {
    kind: &'static str,
    title: Option<String>,
    first_name: Option<String>,
    is_forum: bool,
}

struct StoredMessage {
    message: BotMessage,
    date: i64,
}

#[derive(Default)]
struct Inner {
    /// Updates not yet confirmed, in order.
    updates: Vec<Value>,
    /// The URL `setWebhook` registered (webhook mode: updates are not pushed by the fake, so
    /// a test pushes them itself or they stay pending), and the delivery error
    /// `getWebhookInfo` reports ([`FakeTelegram::webhook_error`]).
    webhook_url: Option<String>,
    webhook_error: Option<String>,
    next_update_id: i64,
    /// Last message id per chat (ids are per chat, as on Telegram).
    last_message_id: HashMap<i64, i64>,
    chats: HashMap<i64, Chat>,
    /// The bot's messages per chat, in the order sent.
    bot_messages: HashMap<i64, Vec<StoredMessage>>,
    calls: crate::call_log::CallLog,
    /// Callback queries pressed and not answered yet.
    open_queries: Vec<String>,
    answered: Vec<String>,
    next_query: u64,
    /// method → (calls still to refuse, retry_after).
    rate_limits: HashMap<String, (usize, u64)>,
    /// method → (calls still to refuse, the `Bad Request: …` description).
    failures: HashMap<String, (usize, String)>,
    /// method → calls still to answer 502 Bad Gateway (an outage).
    outages: HashMap<String, usize>,
    /// Calls whose effect is immediate but whose answer comes late: (calls left, delay).
    slow: HashMap<String, (usize, std::time::Duration)>,
    /// Flood control: at most `.0` sendMessage calls per chat within any `.1`.
    flood: Option<(usize, Duration)>,
    /// When each chat's recent sendMessage calls were let through.
    flood_seen: HashMap<String, Vec<tokio::time::Instant>>,
    /// The bot-wide limit: at most `.0` messages sent or edited, in any chats, within `.1`.
    bot_flood: Option<(usize, Duration)>,
    /// When the bot's recent sends and edits were let through, oldest first.
    bot_flood_seen: std::collections::VecDeque<tokio::time::Instant>,
    /// 429 answers given, by method.
    refused: HashMap<String, usize>,
    conflict_next_poll: bool,
    /// How long a long poll whose client went away (a killed process) still holds the bot's
    /// polling session on the server, as Telegram's does: new `getUpdates` calls are
    /// answered 409 Conflict until then. `None`: an abandoned poll ends with its client.
    abandoned_poll_linger: Option<Duration>,
    /// Until when an abandoned poll holds the session.
    abandoned_until: Option<tokio::time::Instant>,
    /// `getUpdates` calls answered 409.
    conflicts: usize,
    /// Files users sent, by `file_id`: their `file_path` and content (served by `getFile`
    /// and `GET /file/bot<TOKEN>/<file_path>`).
    files: HashMap<String, (String, Vec<u8>)>,
    /// Files the bot sent (`sendPhoto`, `sendDocument`), in order.
    uploads: Vec<Upload>,
}

/// A file the bot sent with `sendPhoto` or `sendDocument`.
#[derive(Debug, Clone, PartialEq)]
pub struct Upload {
    pub method: String,
    pub chat_id: i64,
    pub thread_id: Option<i64>,
    pub file_name: String,
    pub mime: String,
    pub caption: Option<String>,
    pub content: Vec<u8>,
}

impl Shared {
    /// The state, even if a panicking test thread poisoned the lock.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock()
    }

    fn queue_update(&self, body: (&str, Value)) -> i64 {
        let id = {
            let mut inner = self.lock();
            inner.next_update_id += 1;
            let id = inner.next_update_id;
            let mut update = Map::new();
            update.insert("update_id".into(), json!(id));
            update.insert(body.0.into(), body.1);
            inner.updates.push(Value::Object(update));
            id
        };
        self.updates_version.send_modify(|v| *v += 1);
        id
    }
}

impl Inner {
    fn next_message_id(&mut self, chat_id: i64) -> i64 {
        let id = self.last_message_id.entry(chat_id).or_insert(0);
        *id += 1;
        *id
    }

    fn chat_json(&self, chat_id: i64) -> Value {
        let mut chat = Map::new();
        chat.insert("id".into(), json!(chat_id));
        match self.chats.get(&chat_id) {
            Some(c) => {
                chat.insert("type".into(), json!(c.kind));
                if let Some(title) = &c.title {
                    chat.insert("title".into(), json!(title));
                }
                if let Some(first_name) = &c.first_name {
                    chat.insert("first_name".into(), json!(first_name));
                }
                if c.is_forum {
                    chat.insert("is_forum".into(), json!(true));
                }
            }
            None if chat_id > 0 => {
                chat.insert("type".into(), json!("private"));
            }
            None => {
                chat.insert("type".into(), json!("supergroup"));
                chat.insert("title".into(), json!(GROUP_TITLE));
            }
        }
        Value::Object(chat)
    }

    fn bot_message(&self, chat_id: i64, message_id: i64) -> Option<&StoredMessage> {
        self.bot_messages
            .get(&chat_id)?
            .iter()
            .find(|m| m.message.message_id == message_id)
    }

    fn bot_message_mut(&mut self, chat_id: i64, message_id: i64) -> Option<&mut StoredMessage> {
        self.bot_messages
            .get_mut(&chat_id)?
            .iter_mut()
            .find(|m| m.message.message_id == message_id)
    }

    /// The Message object of a bot message.
    fn bot_message_json(&self, stored: &StoredMessage) -> Value {
        let m = &stored.message;
        let mut msg = Map::new();
        msg.insert("message_id".into(), json!(m.message_id));
        msg.insert("from".into(), bot_user());
        msg.insert("chat".into(), self.chat_json(m.chat_id));
        msg.insert("date".into(), json!(stored.date));
        if stored.message.edits > 0 {
            msg.insert("edit_date".into(), json!(now()));
        }
        if let Some(thread) = m.thread_id {
            msg.insert("message_thread_id".into(), json!(thread));
            msg.insert("is_topic_message".into(), json!(true));
        }
        msg.insert("text".into(), json!(m.text));
        if !m.buttons.is_empty() {
            msg.insert("reply_markup".into(), keyboard_json(&m.buttons));
        }
        Value::Object(msg)
    }
}

impl FakeTelegram {
    /// The only token the fake accepts.
    pub const TOKEN: &'static str = "123456:TEST-TOKEN";
    /// The bot's user id.
    pub const BOT_ID: i64 = 999;
    /// The bot's username (without `@`).
    pub const BOT_USERNAME: &'static str = "switchboard_test_bot";
    /// The bot's first name.
    pub const BOT_NAME: &'static str = "Switchboard Test";

    /// Starts the server on `127.0.0.1:0`.
    ///
    /// # Panics
    /// When no local port can be bound (test-only code: the test cannot go on anyway).
    pub async fn start() -> FakeTelegram {
        let (listener, addr) = crate::serve::bind("fake Telegram").await;
        let (shutdown, shutdown_rx) = watch::channel(false);
        let (updates_version, _) = watch::channel(0u64);
        let state = Arc::new(Shared {
            inner: Mutex::new(Inner::default()),
            updates_version,
            shutdown: shutdown_rx.clone(),
        });
        let app = Router::new()
            .route("/{auth}/{method}", post(api).get(api))
            .route("/file/{auth}/{*path}", axum::routing::get(bot_api::file))
            .route("/{auth}/sendPhoto", post(bot_api::upload_photo))
            .route("/{auth}/sendDocument", post(bot_api::upload_document))
            .fallback(not_found)
            .with_state(state.clone());
        crate::serve::spawn(listener, app, shutdown_rx);
        FakeTelegram {
            addr,
            state,
            shutdown,
        }
    }

    /// `http://127.0.0.1:PORT`, the Bot API base URL (methods are at `/bot<TOKEN>/<method>`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for FakeTelegram {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

impl std::fmt::Debug for FakeTelegram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeTelegram")
            .field("addr", &self.addr)
            .finish()
    }
}
