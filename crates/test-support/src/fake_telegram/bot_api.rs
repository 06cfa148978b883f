//! The Bot API under `/bot<TOKEN>/<method>`: parameters, `getUpdates`, sending and
//! editing messages, answering callback queries.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::wire::now;
use super::{
    BotMessage, FakeTelegram, MAX_CALLBACK_DATA, MAX_LIMIT, MAX_TEXT, Shared, StoredMessage,
};

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

pub(super) fn reply(result: ApiResult) -> Response {
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

pub(super) async fn not_found() -> Response {
    reply(Err((StatusCode::NOT_FOUND, "Not Found".into(), None)))
}

/// The parameters: the JSON body, or else the query string (values that parse as JSON are
/// taken as JSON, e.g. numbers and `reply_markup`).
pub(super) fn params(query: Option<&str>, body: &[u8]) -> Result<Value, String> {
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

pub(super) async fn api(
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
    let mut slow = None;
    {
        let mut inner = state.lock();
        inner.calls.push(&method, params.clone());
        if let Some((left, delay)) = inner.slow.get_mut(&method)
            && *left > 0
        {
            *left -= 1;
            slow = Some(*delay);
        }
        if let Some(left) = inner.outages.get_mut(&method)
            && *left > 0
        {
            *left -= 1;
            return reply(Err((StatusCode::BAD_GATEWAY, "Bad Gateway".into(), None)));
        }
        if let Some((left, description)) = inner.failures.get_mut(&method)
            && *left > 0
        {
            *left -= 1;
            let description = description.clone();
            return reply(Err(bad_request(&description)));
        }
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
        if limited.is_none()
            && (method.starts_with("send") || method.starts_with("edit"))
            && let Some((n, window)) = inner.bot_flood
        {
            let now = tokio::time::Instant::now();
            let seen = &mut inner.bot_flood_seen;
            while seen
                .front()
                .is_some_and(|t| now.duration_since(*t) >= window)
            {
                seen.pop_front();
            }
            if seen.len() >= n {
                let oldest = seen.front().copied().unwrap_or(now);
                let left = window.saturating_sub(now.duration_since(oldest));
                limited = Some(left.as_secs_f64().ceil().max(1.0) as u64);
            } else {
                seen.push_back(now);
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
        "getFile" => get_file(&state, &params),
        "sendMessage" => send_message(&state, &params),
        "editMessageText" => edit_message(&state, &params, true),
        "editMessageReplyMarkup" => edit_message(&state, &params, false),
        "answerCallbackQuery" => answer_callback_query(&state, &params),
        // Webhook mode: accepted and recorded (see `calls`); updates are then pushed by
        // the test itself — or stay pending, as `getWebhookInfo` then says.
        "setWebhook" => {
            state.lock().webhook_url = params["url"].as_str().map(str::to_owned);
            Ok(json!(true))
        }
        "deleteWebhook" => {
            state.lock().webhook_url = None;
            Ok(json!(true))
        }
        "getWebhookInfo" => Ok(webhook_info(&state)),
        _ => Err((StatusCode::NOT_FOUND, "Not Found".into(), None)),
    };
    if let Some(delay) = slow {
        tokio::time::sleep(delay).await;
    }
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

/// `WebhookInfo` (core.telegram.org/bots/api#webhookinfo): the URL (empty when polling),
/// the updates not yet confirmed, and the last delivery error with its Unix time.
fn webhook_info(state: &Shared) -> Value {
    let inner = state.lock();
    let mut info = json!({
        "url": inner.webhook_url.clone().unwrap_or_default(),
        "has_custom_certificate": false,
        "pending_update_count": inner.updates.len(),
    });
    if let Some(e) = &inner.webhook_error {
        info["last_error_date"] = json!(super::wire::now());
        info["last_error_message"] = json!(e);
    }
    info
}

async fn get_updates(state: &Arc<Shared>, params: &Value) -> ApiResult {
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
        let held = inner
            .abandoned_until
            .is_some_and(|t| tokio::time::Instant::now() < t);
        if std::mem::take(&mut inner.conflict_next_poll) || held {
            inner.conflicts += 1;
            return Err((
                StatusCode::CONFLICT,
                "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running".into(),
                None,
            ));
        }
    }
    // Dropped unanswered (the client went away): the poll lingers on the server.
    let mut abandoned = AbandonedPoll {
        state: state.clone(),
        answered: false,
    };
    let r = long_poll(state, offset, limit, timeout, allowed).await;
    abandoned.answered = true;
    r
}

/// Marks the bot's polling session held for the linger time when a poll is dropped
/// unanswered.
struct AbandonedPoll {
    state: Arc<Shared>,
    answered: bool,
}

impl Drop for AbandonedPoll {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        let mut inner = self.state.lock();
        if let Some(linger) = inner.abandoned_poll_linger {
            inner.abandoned_until = Some(tokio::time::Instant::now() + linger);
        }
    }
}

async fn long_poll(
    state: &Shared,
    offset: Option<i64>,
    limit: usize,
    timeout: u64,
    allowed: Option<Vec<String>>,
) -> ApiResult {
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

/// `getFile`: the file's path for the download URL, as Telegram answers it.
fn get_file(state: &Shared, params: &Value) -> Result<Value, ApiError> {
    let id = params
        .get("file_id")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let inner = state.lock();
    match inner.files.get(id) {
        Some((path, bytes)) => Ok(json!({
            "file_id": id,
            "file_unique_id": format!("u-{id}"),
            "file_size": bytes.len(),
            "file_path": path,
        })),
        None => Err(bad_request(
            "wrong file_id or the file is temporarily unavailable",
        )),
    }
}

/// `GET /file/bot<TOKEN>/<file_path>`: the content.
pub(super) async fn file(
    State(state): State<Arc<Shared>>,
    Path((auth, path)): Path<(String, String)>,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    if auth.strip_prefix("bot") != Some(FakeTelegram::TOKEN) {
        return (StatusCode::UNAUTHORIZED, "Unauthorized").into_response();
    }
    let found = {
        let inner = state.lock();
        inner
            .files
            .values()
            .find(|(p, _)| *p == path)
            .map(|(_, b)| b.clone())
    };
    match found {
        Some(bytes) => bytes.into_response(),
        None => (StatusCode::NOT_FOUND, "Not Found").into_response(),
    }
}

pub(super) async fn upload_photo(
    state: State<Arc<Shared>>,
    auth: Path<String>,
    form: axum::extract::Multipart,
) -> Response {
    upload(state, auth, "sendPhoto", "photo", form).await
}

pub(super) async fn upload_document(
    state: State<Arc<Shared>>,
    auth: Path<String>,
    form: axum::extract::Multipart,
) -> Response {
    upload(state, auth, "sendDocument", "document", form).await
}

/// `sendPhoto` / `sendDocument` as multipart uploads (the only way to send new content):
/// `chat_id`, `message_thread_id`, `caption` and the file in the part named `field`.
async fn upload(
    State(state): State<Arc<Shared>>,
    Path(auth): Path<String>,
    method: &str,
    field: &str,
    mut form: axum::extract::Multipart,
) -> Response {
    if auth.strip_prefix("bot") != Some(FakeTelegram::TOKEN) {
        return reply(Err((StatusCode::UNAUTHORIZED, "Unauthorized".into(), None)));
    }
    let mut up = super::Upload {
        method: method.to_owned(),
        chat_id: 0,
        thread_id: None,
        file_name: String::new(),
        mime: String::new(),
        caption: None,
        content: Vec::new(),
    };
    let mut has_file = false;
    while let Ok(Some(part)) = form.next_field().await {
        let name = part.name().unwrap_or_default().to_owned();
        if name == field {
            up.file_name = part.file_name().unwrap_or_default().to_owned();
            up.mime = part.content_type().unwrap_or_default().to_owned();
            up.content = part.bytes().await.map(|b| b.to_vec()).unwrap_or_default();
            has_file = !up.content.is_empty();
            continue;
        }
        let text = part.text().await.unwrap_or_default();
        match name.as_str() {
            "chat_id" => up.chat_id = text.trim().parse().unwrap_or(0),
            "message_thread_id" => up.thread_id = text.trim().parse().ok(),
            "caption" => up.caption = Some(text),
            _ => {}
        }
    }
    if up.chat_id == 0 {
        return reply(Err(bad_request("chat not found")));
    }
    if !has_file {
        return reply(Err(bad_request(&format!(
            "there is no {field} in the request"
        ))));
    }
    let mut inner = state.lock();
    inner.calls.push(
        method,
        json!({"chat_id": up.chat_id, "caption": up.caption}),
    );
    let message_id = inner.next_message_id(up.chat_id);
    let mut msg = json!({
        "message_id": message_id,
        "from": super::wire::bot_user(),
        "chat": inner.chat_json(up.chat_id),
        "date": now(),
    });
    if let Some(c) = &up.caption {
        msg["caption"] = json!(c);
    }
    msg[field] = json!({"file_id": format!("sent-{message_id}"), "file_name": up.file_name, "file_size": up.content.len()});
    inner.uploads.push(up);
    reply(Ok(msg))
}
