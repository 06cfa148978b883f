//! What a test does with the fake: inject messages and button presses, read what the bot
//! did, and make methods answer 429 or 409.

use std::time::Duration;

use serde_json::{Value, json};

use super::wire::{bot_user, message_id_of, now, user_json, user_message};
use super::{BotMessage, Chat, FakeTelegram, GROUP_TITLE};

/// A file a user sends ([`FakeTelegram::dm_file`]).
#[derive(Debug, Clone, Copy)]
pub struct SentFile<'a> {
    /// `photo`, `document`, `voice`, `audio` or `video`.
    pub kind: &'a str,
    pub content: &'a [u8],
    pub name: Option<&'a str>,
    pub mime: Option<&'a str>,
    /// May be empty.
    pub caption: &'a str,
}

impl FakeTelegram {
    /// The error `getWebhookInfo` reports for delivering to the webhook (`None`: none), as
    /// Telegram does when the bot's URL does not answer.
    pub fn webhook_error(&self, error: Option<&str>) {
        self.state.lock().webhook_error = error.map(str::to_owned);
    }

    /// A private message from user `user_id` (chat id = user id); returns its message id.
    pub fn dm(&self, user_id: i64, first_name: &str, text: &str) -> i64 {
        let message = {
            let mut inner = self.state.lock();
            inner.chats.insert(
                user_id,
                Chat {
                    kind: "private",
                    title: None,
                    first_name: Some(first_name.to_owned()),
                    is_forum: false,
                },
            );
            let message_id = inner.next_message_id(user_id);
            let mut msg = user_message(message_id, user_id, first_name, text);
            msg.insert("chat".into(), inner.chat_json(user_id));
            msg
        };
        let message_id = message_id_of(&message);
        self.state.queue_update(("message", Value::Object(message)));
        message_id
    }

    /// A private message from user `user_id` that replies to the bot's message
    /// `reply_to` (carried whole as `reply_to_message`, as Telegram does); returns its id.
    ///
    /// # Panics
    /// When the bot sent no such message in that chat.
    pub fn dm_reply(&self, user_id: i64, first_name: &str, text: &str, reply_to: i64) -> i64 {
        let message = {
            let mut inner = self.state.lock();
            let Some(replied) = inner
                .bot_messages
                .get(&user_id)
                .and_then(|m| m.iter().find(|m| m.message.message_id == reply_to))
                .map(|m| inner.bot_message_json(m))
            else {
                panic!(
                    "fake Telegram: dm_reply to {reply_to}, which the bot did not send to {user_id}"
                );
            };
            let message_id = inner.next_message_id(user_id);
            let mut msg = user_message(message_id, user_id, first_name, text);
            msg.insert("chat".into(), inner.chat_json(user_id));
            msg.insert("reply_to_message".into(), replied);
            msg
        };
        let message_id = message_id_of(&message);
        self.state.queue_update(("message", Value::Object(message)));
        message_id
    }

    /// A private message carrying a file, in Telegram's shape: `kind` `photo` (two sizes, the
    /// larger one this content, as JPEG), `document`, `voice` (OGG/Opus), `audio` or
    /// `video`, with `caption` (may be empty). The content is served by `getFile` and the
    /// file URL. Returns the message id.
    pub fn dm_file(&self, user_id: i64, first_name: &str, file: SentFile<'_>) -> i64 {
        let SentFile {
            kind,
            content,
            name,
            mime,
            caption,
        } = file;
        let message = {
            let mut inner = self.state.lock();
            inner.chats.insert(
                user_id,
                Chat {
                    kind: "private",
                    title: None,
                    first_name: Some(first_name.to_owned()),
                    is_forum: false,
                },
            );
            let n = inner.files.len() + 1;
            let file_id = format!("AgAC{kind}{n}");
            let ext = match kind {
                "photo" => "jpg",
                "voice" => "oga",
                _ => name
                    .and_then(|n| n.rsplit_once('.'))
                    .map_or("bin", |(_, e)| e),
            };
            let folder = match kind {
                "photo" => "photos",
                "voice" => "voice",
                "document" => "documents",
                other => other,
            };
            let path = format!("{folder}/file_{n}.{ext}");
            inner
                .files
                .insert(file_id.clone(), (path, content.to_vec()));
            let message_id = inner.next_message_id(user_id);
            let mut msg = user_message(message_id, user_id, first_name, "");
            msg.remove("text");
            msg.remove("entities");
            if !caption.is_empty() {
                msg.insert("caption".into(), json!(caption));
            }
            let size = content.len();
            let file = match kind {
                "photo" => json!([
                    {"file_id": format!("{file_id}-thumb"), "file_unique_id": format!("t{n}"), "width": 90, "height": 60, "file_size": 1200},
                    {"file_id": file_id, "file_unique_id": format!("f{n}"), "width": 1280, "height": 853, "file_size": size},
                ]),
                "voice" => {
                    json!({"file_id": file_id, "file_unique_id": format!("f{n}"), "duration": 3, "mime_type": mime.unwrap_or("audio/ogg"), "file_size": size})
                }
                _ => {
                    let mut f = json!({"file_id": file_id, "file_unique_id": format!("f{n}"), "file_size": size});
                    if let Some(name) = name {
                        f["file_name"] = json!(name);
                    }
                    if let Some(mime) = mime {
                        f["mime_type"] = json!(mime);
                    }
                    f
                }
            };
            msg.insert(kind.into(), file);
            msg.insert("chat".into(), inner.chat_json(user_id));
            msg
        };
        let message_id = message_id_of(&message);
        self.state.queue_update(("message", Value::Object(message)));
        message_id
    }

    /// The files the bot sent (`sendPhoto`, `sendDocument`), in order.
    pub fn uploads(&self) -> Vec<super::Upload> {
        self.state.lock().uploads.clone()
    }

    /// A group message; `thread_id` makes it a forum-topic message; `reply_to_bot` replies
    /// to the bot's last message in that chat. Returns its message id.
    ///
    /// The chat is a supergroup titled `Test group` (a forum once a `thread_id` is used). As
    /// on Telegram, a topic message that replies to nothing carries the topic's creation
    /// message as `reply_to_message`. A reply outside topics carries no `message_thread_id`.
    ///
    /// # Panics
    /// When `reply_to_bot` is set and the bot has sent nothing in that chat.
    pub fn group_message(
        &self,
        chat_id: i64,
        user_id: i64,
        first_name: &str,
        text: &str,
        thread_id: Option<i64>,
        reply_to_bot: bool,
    ) -> i64 {
        let message = {
            let mut inner = self.state.lock();
            let chat = inner.chats.entry(chat_id).or_insert(Chat {
                kind: "supergroup",
                title: Some(GROUP_TITLE.to_owned()),
                first_name: None,
                is_forum: false,
            });
            if thread_id.is_some() {
                chat.is_forum = true;
            }
            let chat_json = inner.chat_json(chat_id);
            let reply_to = if reply_to_bot {
                let Some(last) = inner.bot_messages.get(&chat_id).and_then(|m| m.last()) else {
                    panic!(
                        "fake Telegram: group_message(reply_to_bot) in chat {chat_id}, where the bot has sent nothing"
                    );
                };
                Some(inner.bot_message_json(last))
            } else {
                thread_id.map(|thread| {
                    json!({
                        "message_id": thread,
                        "from": user_json(user_id, first_name),
                        "chat": chat_json.clone(),
                        "date": now(),
                        "message_thread_id": thread,
                        "forum_topic_created": {"name": "Topic", "icon_color": 7_322_096},
                        "is_topic_message": true,
                    })
                })
            };
            let message_id = inner.next_message_id(chat_id);
            let mut msg = user_message(message_id, user_id, first_name, text);
            msg.insert("chat".into(), chat_json);
            if let Some(thread) = thread_id {
                msg.insert("message_thread_id".into(), json!(thread));
                msg.insert("is_topic_message".into(), json!(true));
            }
            if let Some(reply_to) = reply_to {
                msg.insert("reply_to_message".into(), reply_to);
            }
            msg
        };
        let message_id = message_id_of(&message);
        self.state.queue_update(("message", Value::Object(message)));
        message_id
    }

    /// A press of button `data` under bot message `message_id` in `chat_id` by `user_id`;
    /// returns the callback query id. The query's `message` is the bot message as it stands
    /// now (a minimal one if the fake does not know it).
    pub fn press(
        &self,
        chat_id: i64,
        message_id: i64,
        user_id: i64,
        first_name: &str,
        data: &str,
    ) -> String {
        let query = {
            let mut inner = self.state.lock();
            inner.next_query += 1;
            let id = format!("{}", 4_000_000_000_000_000_000u64 + inner.next_query);
            inner.open_queries.push(id.clone());
            let message = match inner.bot_message(chat_id, message_id) {
                Some(stored) => inner.bot_message_json(stored),
                None => json!({
                    "message_id": message_id,
                    "from": bot_user(),
                    "chat": inner.chat_json(chat_id),
                    "date": now(),
                    "text": "",
                }),
            };
            json!({
                "id": id,
                "from": user_json(user_id, first_name),
                "message": message,
                "chat_instance": format!("ci{chat_id}"),
                "data": data,
            })
        };
        let id = query["id"].as_str().unwrap_or_default().to_owned();
        self.state.queue_update(("callback_query", query));
        id
    }

    /// Queues a raw update of `kind` (`message`, `callback_query`, `edited_message` …) with
    /// `payload` as its object, for shapes the helpers above do not make (captions, files,
    /// messages from bots); returns its `update_id`.
    pub fn push_update(&self, kind: &str, payload: Value) -> i64 {
        self.state.queue_update((kind, payload))
    }

    /// The bot's messages in `chat_id` in the order sent, with their current text/buttons.
    pub fn bot_messages(&self, chat_id: i64) -> Vec<BotMessage> {
        self.state
            .lock()
            .bot_messages
            .get(&chat_id)
            .map(|m| m.iter().map(|s| s.message.clone()).collect())
            .unwrap_or_default()
    }

    /// Raw params of every call to `method` (also refused ones), in order.
    pub fn calls(&self, method: &str) -> Vec<Value> {
        self.state.lock().calls.of(method)
    }

    /// Every call in arrival order, refused ones too: when it came, its method, its params.
    /// For asserting on the exact sequence of posts and edits.
    pub fn timeline(&self) -> Vec<(std::time::Instant, String, Value)> {
        self.state.lock().calls.timeline()
    }

    /// Callback query ids answered so far.
    pub fn answered(&self) -> Vec<String> {
        self.state.lock().answered.clone()
    }

    /// Hands over what the fake holds for a webhook, as Telegram does once the webhook's
    /// URL answers again: the updates leave its queue (`getWebhookInfo`'s
    /// `pending_update_count` drops to 0) and its last delivery error is forgotten. The
    /// test POSTs them to the server's webhook, as Telegram would.
    pub fn take_webhook_updates(&self) -> Vec<Value> {
        let mut inner = self.state.lock();
        inner.webhook_error = None;
        std::mem::take(&mut inner.updates)
    }

    /// Updates queued and not confirmed by a `getUpdates` offset yet.
    pub fn pending_updates(&self) -> usize {
        self.state.lock().updates.len()
    }

    /// The next `n` calls to `method` answer 429 with `retry_after`.
    pub fn rate_limit(&self, method: &str, n: usize, retry_after: u64) {
        self.state
            .lock()
            .rate_limits
            .insert(method.to_owned(), (n, retry_after));
    }

    /// The next `n` calls to `method` are refused as Telegram refuses a bad one: HTTP 400,
    /// `{"ok":false,"error_code":400,"description":"Bad Request: <description>"}`, with no
    /// effect.
    pub fn fail(&self, method: &str, n: usize, description: &str) {
        self.state
            .lock()
            .failures
            .insert(method.to_owned(), (n, description.to_owned()));
    }

    /// The next `n` calls to `method` fail as during an outage of Telegram: HTTP 502,
    /// `{"ok":false,"error_code":502,"description":"Bad Gateway"}`, with no effect.
    pub fn outage(&self, method: &str, n: usize) {
        self.state.lock().outages.insert(method.to_owned(), n);
    }

    /// Calls to `method` still to be answered 502 (see [`FakeTelegram::outage`]).
    pub fn outage_left(&self, method: &str) -> usize {
        self.state.lock().outages.get(method).copied().unwrap_or(0)
    }

    /// The next `n` calls to `method` take effect at once (a sent message is visible to
    /// the test) but are answered only after `delay`: the window in which the caller does
    /// not know the message id yet.
    pub fn slow_answers(&self, method: &str, n: usize, delay: Duration) {
        self.state.lock().slow.insert(method.to_owned(), (n, delay));
    }

    /// Flood control as Telegram's: a `sendMessage` to a chat that already had `n` within
    /// the last `window` answers 429 with `retry_after` = the seconds until one of them ages
    /// out (at least 1).
    pub fn flood_control(&self, n: usize, window: Duration) {
        self.state.lock().flood = Some((n, window));
    }

    /// The Bot API's bot-wide limit ("not more than 30 messages per second or so", in any
    /// chats): a send or an edit (`send*`, `edit*`) when `n` already went within the last
    /// `window` answers 429 with `retry_after` = the seconds until the oldest ages out (at
    /// least 1), and is not carried out.
    pub fn bot_flood_control(&self, n: usize, window: Duration) {
        self.state.lock().bot_flood = Some((n, window));
    }

    /// How many calls to `method` were answered 429.
    pub fn refused(&self, method: &str) -> usize {
        self.state.lock().refused.get(method).copied().unwrap_or(0)
    }

    /// The next call to getUpdates answers 409 Conflict.
    pub fn conflict_next_poll(&self) {
        self.state.lock().conflict_next_poll = true;
    }

    /// From now on a long poll whose client goes away before it is answered (the process
    /// was killed) keeps the bot's polling session for `linger`, as Telegram's server does:
    /// every `getUpdates` in that time is answered 409 Conflict ("terminated by other
    /// getUpdates request").
    pub fn abandoned_polls_linger(&self, linger: std::time::Duration) {
        self.state.lock().abandoned_poll_linger = Some(linger);
    }

    /// How many `getUpdates` calls were answered 409 Conflict.
    pub fn conflicts(&self) -> usize {
        self.state.lock().conflicts
    }

    /// Waits (up to `timeout`) until `f(self)` holds.
    ///
    /// # Panics
    /// When it does not hold in time, naming `what`.
    pub async fn wait_until(
        &self,
        timeout: Duration,
        what: &str,
        f: impl Fn(&FakeTelegram) -> bool,
    ) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if f(self) {
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!("fake Telegram: timed out after {timeout:?} waiting until {what}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
