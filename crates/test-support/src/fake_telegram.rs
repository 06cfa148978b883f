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

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Map, Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;

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
    /// Flood control: at most `.0` sendMessage calls per chat within any `.1`.
    flood: Option<(usize, Duration)>,
    /// When each chat's recent sendMessage calls were let through.
    flood_seen: HashMap<String, Vec<tokio::time::Instant>>,
    /// 429 answers given, by method.
    refused: HashMap<String, usize>,
    conflict_next_poll: bool,
}

impl Shared {
    /// The state, even if a panicking test thread poisoned the lock.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
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
        let listener = match TcpListener::bind("127.0.0.1:0").await {
            Ok(listener) => listener,
            Err(err) => panic!("fake Telegram: cannot bind 127.0.0.1:0: {err}"),
        };
        let addr = match listener.local_addr() {
            Ok(addr) => addr,
            Err(err) => panic!("fake Telegram: no local address: {err}"),
        };
        let (shutdown, shutdown_rx) = watch::channel(false);
        let (updates_version, _) = watch::channel(0u64);
        let state = Arc::new(Shared {
            inner: Mutex::new(Inner::default()),
            updates_version,
            shutdown: shutdown_rx.clone(),
        });
        let app = Router::new()
            .route("/{auth}/{method}", post(api).get(api))
            .fallback(not_found)
            .with_state(state.clone());
        let mut signal = shutdown_rx;
        tokio::spawn(async move {
            let stopped = async move {
                let _ = signal.wait_for(|stop| *stop).await;
            };
            // an accept loop error ends the fake; the test then fails on its own
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(stopped)
                .await;
        });
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

    /// Flood control as Telegram's: a `sendMessage` to a chat that already had `n` within
    /// the last `window` answers 429 with `retry_after` = the seconds until one of them ages
    /// out (at least 1).
    pub fn flood_control(&self, n: usize, window: Duration) {
        self.state.lock().flood = Some((n, window));
    }

    /// How many calls to `method` were answered 429.
    pub fn refused(&self, method: &str) -> usize {
        self.state.lock().refused.get(method).copied().unwrap_or(0)
    }

    /// The next call to getUpdates answers 409 Conflict.
    pub fn conflict_next_poll(&self) {
        self.state.lock().conflict_next_poll = true;
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

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn bot_user() -> Value {
    json!({
        "id": FakeTelegram::BOT_ID,
        "is_bot": true,
        "first_name": FakeTelegram::BOT_NAME,
        "username": FakeTelegram::BOT_USERNAME,
    })
}

fn user_json(user_id: i64, first_name: &str) -> Value {
    json!({
        "id": user_id,
        "is_bot": false,
        "first_name": first_name,
        "language_code": "en",
    })
}

fn message_id_of(message: &Map<String, Value>) -> i64 {
    message
        .get("message_id")
        .and_then(Value::as_i64)
        .unwrap_or_default()
}

/// A user's text message (without `chat`), with the entities Telegram would detect.
fn user_message(message_id: i64, user_id: i64, first_name: &str, text: &str) -> Map<String, Value> {
    let mut msg = Map::new();
    msg.insert("message_id".into(), json!(message_id));
    msg.insert("from".into(), user_json(user_id, first_name));
    msg.insert("date".into(), json!(now()));
    msg.insert("text".into(), json!(text));
    let entities = entities(text);
    if !entities.is_empty() {
        msg.insert("entities".into(), Value::Array(entities));
    }
    msg
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// `mention` entities (`@name`, 5–32 name characters) and a leading `bot_command`, with
/// offsets and lengths in UTF-16 code units as on Telegram.
fn entities(text: &str) -> Vec<Value> {
    let chars: Vec<char> = text.chars().collect();
    let mut utf16_at = Vec::with_capacity(chars.len() + 1);
    let mut pos = 0usize;
    for c in &chars {
        utf16_at.push(pos);
        pos += c.len_utf16();
    }
    utf16_at.push(pos);
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts_word = i == 0 || !is_name_char(chars[i - 1]);
        if chars[i] == '/' && i == 0 {
            let mut j = 1;
            while j < chars.len() && (is_name_char(chars[j]) || chars[j] == '@') {
                j += 1;
            }
            if j > 1 {
                out.push(json!({"type": "bot_command", "offset": 0, "length": utf16_at[j]}));
                i = j;
                continue;
            }
        }
        if chars[i] == '@' && starts_word {
            let mut j = i + 1;
            while j < chars.len() && is_name_char(chars[j]) {
                j += 1;
            }
            if (5..=32).contains(&(j - i - 1)) {
                out.push(json!({
                    "type": "mention",
                    "offset": utf16_at[i],
                    "length": utf16_at[j] - utf16_at[i],
                }));
            }
            i = j.max(i + 1);
            continue;
        }
        i += 1;
    }
    out
}

fn keyboard_json(buttons: &[(String, String)]) -> Value {
    let row: Vec<Value> = buttons
        .iter()
        .map(|(text, data)| json!({"text": text, "callback_data": data}))
        .collect();
    json!({"inline_keyboard": [row]})
}

/// An API refusal: status (= `error_code`), description, `retry_after`.
type ApiError = (StatusCode, String, Option<u64>);
type ApiResult = Result<Value, ApiError>;

fn bad_request(description: &str) -> ApiError {
    (
        StatusCode::BAD_REQUEST,
        format!("Bad Request: {description}"),
        None,
    )
}

fn reply(result: ApiResult) -> Response {
    match result {
        Ok(result) => (
            StatusCode::OK,
            axum::Json(json!({"ok": true, "result": result})),
        )
            .into_response(),
        Err((status, description, retry_after)) => {
            let mut body = json!({
                "ok": false,
                "error_code": status.as_u16(),
                "description": description,
            });
            if let Some(retry_after) = retry_after {
                body["parameters"] = json!({"retry_after": retry_after});
            }
            (status, axum::Json(body)).into_response()
        }
    }
}

async fn not_found() -> Response {
    reply(Err((StatusCode::NOT_FOUND, "Not Found".into(), None)))
}

/// The parameters: the JSON body, or else the query string (values that parse as JSON are
/// taken as JSON, e.g. numbers and `reply_markup`).
fn params(query: Option<&str>, body: &[u8]) -> Result<Value, String> {
    if !body.iter().all(u8::is_ascii_whitespace) {
        return match serde_json::from_slice::<Value>(body) {
            Ok(Value::Object(map)) => Ok(Value::Object(map)),
            Ok(_) => Err("parameters must be a JSON object".into()),
            Err(err) => Err(format!("can't parse JSON: {err}")),
        };
    }
    let mut map = Map::new();
    for (k, v) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        let value = serde_json::from_str::<Value>(&v).unwrap_or(Value::String(v.into_owned()));
        map.insert(k.into_owned(), value);
    }
    Ok(Value::Object(map))
}

async fn api(
    State(state): State<Arc<Shared>>,
    Path((auth, method)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Response {
    if auth.strip_prefix("bot") != Some(FakeTelegram::TOKEN) {
        return reply(Err((StatusCode::UNAUTHORIZED, "Unauthorized".into(), None)));
    }
    let params = match params(query.as_deref(), &body) {
        Ok(params) => params,
        Err(reason) => return reply(Err(bad_request(&reason))),
    };
    {
        let mut inner = state.lock();
        inner.calls.push(&method, params.clone());
        let mut limited = None;
        if let Some((left, retry_after)) = inner.rate_limits.get_mut(&method)
            && *left > 0
        {
            *left -= 1;
            limited = Some(*retry_after);
        }
        if limited.is_none()
            && method == "sendMessage"
            && let Some((n, window)) = inner.flood
        {
            let chat = params
                .get("chat_id")
                .map(|c| c.to_string())
                .unwrap_or_default();
            let now = tokio::time::Instant::now();
            let seen = inner.flood_seen.entry(chat).or_default();
            seen.retain(|t| now.duration_since(*t) < window);
            if seen.len() >= n {
                let oldest = seen.first().copied().unwrap_or(now);
                let left = window.saturating_sub(now.duration_since(oldest));
                limited = Some(left.as_secs_f64().ceil().max(1.0) as u64);
            } else {
                seen.push(now);
            }
        }
        if let Some(retry_after) = limited {
            *inner.refused.entry(method.clone()).or_default() += 1;
            return reply(Err((
                StatusCode::TOO_MANY_REQUESTS,
                format!("Too Many Requests: retry after {retry_after}"),
                Some(retry_after),
            )));
        }
    }
    let result = match method.as_str() {
        "getMe" => Ok(json!({
            "id": FakeTelegram::BOT_ID,
            "is_bot": true,
            "first_name": FakeTelegram::BOT_NAME,
            "username": FakeTelegram::BOT_USERNAME,
            "can_join_groups": true,
            "can_read_all_group_messages": false,
            "supports_inline_queries": false,
        })),
        "getUpdates" => get_updates(&state, &params).await,
        "sendMessage" => send_message(&state, &params),
        "editMessageText" => edit_message(&state, &params, true),
        "editMessageReplyMarkup" => edit_message(&state, &params, false),
        "answerCallbackQuery" => answer_callback_query(&state, &params),
        // Webhook mode: accepted and recorded (see `calls`); updates are then pushed by
        // the test itself.
        "setWebhook" | "deleteWebhook" => Ok(json!(true)),
        _ => Err((StatusCode::NOT_FOUND, "Not Found".into(), None)),
    };
    reply(result)
}

fn int_param(params: &Value, name: &str) -> Result<Option<i64>, ApiError> {
    match params.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_i64()
            .map(Some)
            .ok_or_else(|| bad_request(&format!("invalid {name} specified"))),
        Some(Value::String(s)) => s
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| bad_request(&format!("invalid {name} specified"))),
        Some(_) => Err(bad_request(&format!("invalid {name} specified"))),
    }
}

fn chat_id_param(params: &Value) -> Result<i64, ApiError> {
    match int_param(params, "chat_id") {
        Ok(Some(id)) => Ok(id),
        Ok(None) => Err(bad_request("chat_id is empty")),
        Err(_) => Err(bad_request("chat not found")),
    }
}

/// The `(text, callback_data)` of an inline keyboard (`reply_markup` as an object or a
/// JSON-serialized string).
fn keyboard_param(params: &Value) -> Result<Vec<(String, String)>, ApiError> {
    let markup = match params.get("reply_markup") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(s)) => serde_json::from_str::<Value>(s)
            .map_err(|_| bad_request("can't parse reply keyboard markup JSON object"))?,
        Some(other) => other.clone(),
    };
    let Some(rows) = markup.get("inline_keyboard").and_then(Value::as_array) else {
        return Err(bad_request(
            "can't parse inline keyboard markup: field \"inline_keyboard\" must be of type Array",
        ));
    };
    let mut buttons = Vec::new();
    for row in rows {
        let Some(row) = row.as_array() else {
            return Err(bad_request(
                "can't parse inline keyboard button: InlineKeyboardButton must be an Object",
            ));
        };
        for button in row {
            let Some(text) = button.get("text").and_then(Value::as_str) else {
                return Err(bad_request(
                    "can't parse inline keyboard button: Text buttons are unallowed in the inline keyboard",
                ));
            };
            let data = button
                .get("callback_data")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if data.is_empty() || data.len() > MAX_CALLBACK_DATA {
                return Err(bad_request("BUTTON_DATA_INVALID"));
            }
            buttons.push((text.to_owned(), data.to_owned()));
        }
    }
    Ok(buttons)
}

fn text_param(params: &Value) -> Result<String, ApiError> {
    let text = match params.get("text") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    };
    if text.trim().is_empty() {
        return Err(bad_request("message text is empty"));
    }
    if text.chars().map(char::len_utf16).sum::<usize>() > MAX_TEXT {
        return Err(bad_request("message is too long"));
    }
    Ok(text)
}

async fn get_updates(state: &Shared, params: &Value) -> ApiResult {
    let offset = int_param(params, "offset")?;
    let limit = int_param(params, "limit")?
        .and_then(|l| usize::try_from(l).ok())
        .filter(|l| (1..=MAX_LIMIT).contains(l))
        .unwrap_or(MAX_LIMIT);
    let timeout = int_param(params, "timeout")?
        .and_then(|t| u64::try_from(t).ok())
        .unwrap_or(0);
    let allowed: Option<Vec<String>> = params
        .get("allowed_updates")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .filter(|a| !a.is_empty());
    {
        let mut inner = state.lock();
        if std::mem::take(&mut inner.conflict_next_poll) {
            return Err((
                StatusCode::CONFLICT,
                "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running".into(),
                None,
            ));
        }
    }
    let mut version = state.updates_version.subscribe();
    let mut shutdown = state.shutdown.clone();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
    loop {
        version.borrow_and_update();
        let found = {
            let mut inner = state.lock();
            // confirm: everything below the offset is gone for good
            match offset {
                Some(offset) if offset < 0 => {
                    let keep = usize::try_from(offset.unsigned_abs()).unwrap_or(usize::MAX);
                    let drop = inner.updates.len().saturating_sub(keep);
                    inner.updates.drain(..drop);
                }
                Some(offset) => inner
                    .updates
                    .retain(|u| u["update_id"].as_i64().unwrap_or_default() >= offset),
                None => {}
            }
            inner
                .updates
                .iter()
                .filter(|u| match &allowed {
                    None => true,
                    Some(allowed) => u
                        .as_object()
                        .is_some_and(|o| o.keys().any(|k| allowed.contains(k))),
                })
                .take(limit)
                .cloned()
                .collect::<Vec<_>>()
        };
        if !found.is_empty() || tokio::time::Instant::now() >= deadline {
            return Ok(Value::Array(found));
        }
        tokio::select! {
            _ = version.changed() => {}
            _ = tokio::time::sleep_until(deadline) => {}
            _ = shutdown.wait_for(|stop| *stop) => return Ok(json!([])),
        }
    }
}

fn send_message(state: &Shared, params: &Value) -> ApiResult {
    let chat_id = chat_id_param(params)?;
    let text = text_param(params)?;
    let buttons = keyboard_param(params)?;
    let thread_id = int_param(params, "message_thread_id")?.filter(|t| *t != 0);
    let mut inner = state.lock();
    let message_id = inner.next_message_id(chat_id);
    let stored = StoredMessage {
        message: BotMessage {
            chat_id,
            message_id,
            thread_id,
            text,
            buttons,
            edits: 0,
        },
        date: now(),
    };
    let json = inner.bot_message_json(&stored);
    inner.bot_messages.entry(chat_id).or_default().push(stored);
    Ok(json)
}

fn edit_message(state: &Shared, params: &Value, with_text: bool) -> ApiResult {
    let chat_id = chat_id_param(params)?;
    let Some(message_id) = int_param(params, "message_id")? else {
        return Err(bad_request("message identifier is not specified"));
    };
    let text = if with_text {
        Some(text_param(params)?)
    } else {
        None
    };
    let buttons = keyboard_param(params)?;
    let mut inner = state.lock();
    let Some(stored) = inner.bot_message_mut(chat_id, message_id) else {
        return Err(bad_request("message to edit not found"));
    };
    let same_text = text.as_ref().is_none_or(|t| *t == stored.message.text);
    if same_text && buttons == stored.message.buttons {
        return Err(bad_request(
            "message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message",
        ));
    }
    if let Some(text) = text {
        stored.message.text = text;
    }
    stored.message.buttons = buttons;
    stored.message.edits += 1;
    let Some(stored) = inner.bot_message(chat_id, message_id) else {
        return Err(bad_request("message to edit not found"));
    };
    Ok(inner.bot_message_json(stored))
}

fn answer_callback_query(state: &Shared, params: &Value) -> ApiResult {
    let id = match params.get("callback_query_id") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => {
            return Err(bad_request(
                "query is too old and response timeout expired or query ID is invalid",
            ));
        }
    };
    let mut inner = state.lock();
    let Some(pos) = inner.open_queries.iter().position(|q| *q == id) else {
        return Err(bad_request(
            "query is too old and response timeout expired or query ID is invalid",
        ));
    };
    inner.open_queries.remove(pos);
    inner.answered.push(id);
    Ok(json!(true))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn entities_use_utf16_offsets() {
        let e = entities("hé 🙂 @switchboard_test_bot hi @abc");
        assert_eq!(e.len(), 1);
        assert_eq!(e[0]["type"], "mention");
        assert_eq!(e[0]["offset"], 6);
        assert_eq!(e[0]["length"], 21);
        let e = entities("/start@switchboard_test_bot");
        assert_eq!(e[0]["type"], "bot_command");
        assert_eq!(e[0]["length"], 27);
    }

    #[test]
    fn query_params_decode() {
        let p = params(Some("chat_id=-100&text=a%20b+c&offset=5"), b"").unwrap();
        assert_eq!(p["chat_id"], -100);
        assert_eq!(p["text"], "a b c");
        assert_eq!(p["offset"], 5);
    }
}
