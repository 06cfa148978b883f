//! The REST API under `/api/v10`: messages, interaction callbacks and follow-ups.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::wire::{bot_user_json, message_json};
use super::{
    APPLICATION_ID, DiscordMessage, FakeDiscord, INTERACTION_WINDOW, MAX_CONTENT, MAX_CUSTOM_ID,
    MAX_LABEL, Shared,
};

fn error(status: StatusCode, code: u64, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"message": message, "code": code})),
    )
        .into_response()
}

fn form_error(field: &str, code: &str, message: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        axum::Json(json!({
            "message": "Invalid Form Body",
            "code": 50035,
            "errors": {field: {"_errors": [{"code": code, "message": message}]}},
        })),
    )
        .into_response()
}

pub(super) async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, 0, "404: Not Found")
}

pub(super) async fn rest(
    State(state): State<Arc<Shared>>,
    method: Method,
    Path(path): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = format!("/{}", path.trim_start_matches('/'));
    let route = format!("{method} {path}");
    // A message with files: multipart, the JSON in `payload_json`, files as `files[n]`.
    let multipart = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("multipart/form-data"));
    let mut files: Vec<(String, String, Vec<u8>)> = Vec::new();
    let body = if multipart {
        let mut req = axum::http::Request::new(axum::body::Body::from(body));
        *req.headers_mut() = headers.clone();
        let mut form =
            match <axum::extract::Multipart as axum::extract::FromRequest<()>>::from_request(
                req,
                &(),
            )
            .await
            {
                Ok(f) => f,
                Err(_) => return error(StatusCode::BAD_REQUEST, 50035, "Invalid Form Body"),
            };
        let mut payload = Value::Null;
        while let Ok(Some(part)) = form.next_field().await {
            let name = part.name().unwrap_or_default().to_owned();
            if name == "payload_json" {
                payload = serde_json::from_str(&part.text().await.unwrap_or_default())
                    .unwrap_or(Value::Null);
            } else if name.starts_with("files[") {
                let file_name = part.file_name().unwrap_or_default().to_owned();
                let mime = part.content_type().unwrap_or_default().to_owned();
                let bytes = part.bytes().await.map(|b| b.to_vec()).unwrap_or_default();
                files.push((file_name, mime, bytes));
            }
        }
        payload
    } else if body.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else {
        match serde_json::from_slice::<Value>(&body) {
            Ok(v) => v,
            Err(_) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    50109,
                    "The request body contains invalid JSON.",
                );
            }
        }
    };
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    // Interaction callbacks and follow-ups are authorized by the interaction's token.
    let is_callback = matches!(segments.first(), Some(&"interactions" | &"webhooks"));
    {
        let mut inner = state.lock();
        inner.calls.push(&route, body.clone());
        if let Some(limit) = inner
            .rate_limits
            .iter_mut()
            .find(|(prefix, left, _)| *left > 0 && route.starts_with(prefix.as_str()))
        {
            limit.1 -= 1;
            let retry_after = limit.2;
            let mut resp = (
                StatusCode::TOO_MANY_REQUESTS,
                axum::Json(json!({
                    "message": "You are being rate limited.",
                    "retry_after": retry_after,
                    "global": false,
                })),
            )
                .into_response();
            let h = resp.headers_mut();
            if let Ok(v) = format!("{}", retry_after.ceil()).parse() {
                h.insert(header::RETRY_AFTER, v);
            }
            if let Ok(v) = "user".parse() {
                h.insert("x-ratelimit-scope", v);
            }
            return resp;
        }
    }
    let authorized = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        == Some(format!("Bot {}", FakeDiscord::TOKEN).as_str());
    if !is_callback && !authorized {
        return error(StatusCode::UNAUTHORIZED, 0, "401: Unauthorized");
    }
    match (method.as_str(), segments.as_slice()) {
        ("GET", ["gateway", "bot"]) => axum::Json(json!({
            "url": state.ws_url(),
            "shards": 1,
            "session_start_limit": {"total": 1000, "remaining": 999, "reset_after": 14_400_000, "max_concurrency": 1},
        }))
        .into_response(),
        ("GET", ["users", "@me"]) => axum::Json(bot_user_json()).into_response(),
        ("POST", ["channels", channel, "messages"]) => {
            if !files.is_empty() {
                let mut inner = state.lock();
                for (name, mime, content) in files {
                    inner.uploads.push(super::Upload {
                        channel: (*channel).to_owned(),
                        name,
                        mime,
                        content,
                        content_text: body.get("content").and_then(Value::as_str).unwrap_or_default().to_owned(),
                    });
                }
            }
            create_message(&state, channel, &body)
        }
        ("PATCH", ["channels", channel, "messages", id]) => edit_message(&state, channel, id, &body),
        ("POST", ["interactions", id, token, "callback"]) => callback(&state, id, token, &body),
        ("POST", ["webhooks", app, token]) => follow_up(&state, app, token, &body),
        _ => error(StatusCode::NOT_FOUND, 0, "404: Not Found"),
    }
}

/// The `(label, custom_id)` of `components`, or the refusal.
fn parse_components(v: Option<&Value>) -> Result<Vec<(String, String)>, Box<Response>> {
    let rows = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(rows)) => rows,
        Some(_) => {
            return Err(Box::new(form_error(
                "components",
                "ARRAY_TYPE_CONVERT",
                "Must be an array.",
            )));
        }
    };
    if rows.len() > 5 {
        return Err(Box::new(form_error(
            "components",
            "BASE_TYPE_MAX_LENGTH",
            "Must be 5 or fewer in length.",
        )));
    }
    let mut out = Vec::new();
    for row in rows {
        if row.get("type").and_then(Value::as_u64) != Some(1) {
            return Err(Box::new(form_error(
                "components",
                "UNION_TYPE_CHOICES",
                "Value of field \"type\" must be one of (1,).",
            )));
        }
        let Some(buttons) = row.get("components").and_then(Value::as_array) else {
            return Err(Box::new(form_error(
                "components",
                "BASE_TYPE_REQUIRED",
                "This field is required",
            )));
        };
        if buttons.is_empty() || buttons.len() > 5 {
            return Err(Box::new(form_error(
                "components",
                "BASE_TYPE_BAD_LENGTH",
                "Must be between 1 and 5 in length.",
            )));
        }
        for b in buttons {
            let style = b.get("style").and_then(Value::as_u64).unwrap_or(0);
            let label = b.get("label").and_then(Value::as_str).unwrap_or_default();
            let custom_id = b
                .get("custom_id")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if b.get("type").and_then(Value::as_u64) != Some(2) || !(1..=4).contains(&style) {
                return Err(Box::new(form_error(
                    "components",
                    "COMPONENT_TYPE_INVALID",
                    "The specified component type is invalid in this context",
                )));
            }
            if custom_id.is_empty() || custom_id.chars().count() > MAX_CUSTOM_ID {
                return Err(Box::new(form_error(
                    "custom_id",
                    "BASE_TYPE_BAD_LENGTH",
                    "Must be between 1 and 100 in length.",
                )));
            }
            if label.chars().count() > MAX_LABEL {
                return Err(Box::new(form_error(
                    "label",
                    "BASE_TYPE_MAX_LENGTH",
                    "Must be 80 or fewer in length.",
                )));
            }
            out.push((label.to_owned(), custom_id.to_owned()));
        }
    }
    Ok(out)
}

fn content_of(body: &Value) -> Result<Option<String>, Box<Response>> {
    match body.get("content") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.chars().count() > MAX_CONTENT => Err(Box::new(form_error(
            "content",
            "BASE_TYPE_MAX_LENGTH",
            "Must be 2000 or fewer in length.",
        ))),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(Box::new(form_error(
            "content",
            "STRING_TYPE_CONVERT",
            "Could not interpret value as string.",
        ))),
    }
}

fn create_message(state: &Shared, channel: &str, body: &Value) -> Response {
    let content = match content_of(body) {
        Ok(c) => c.unwrap_or_default(),
        Err(r) => return *r,
    };
    let components = match parse_components(body.get("components")) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    if content.trim().is_empty() && components.is_empty() {
        return error(
            StatusCode::BAD_REQUEST,
            50006,
            "Cannot send an empty message",
        );
    }
    let mut inner = state.lock();
    let reply_to = match body.get("message_reference") {
        None | Some(Value::Null) => None,
        Some(r) => {
            let id = r
                .get("message_id")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let known = inner
                .user_messages
                .get(channel)
                .is_some_and(|m| m.contains(&id))
                || inner
                    .bot_messages
                    .get(channel)
                    .is_some_and(|m| m.iter().any(|m| m.id == id));
            let fail = r
                .get("fail_if_not_exists")
                .and_then(Value::as_bool)
                .unwrap_or(true);
            match (known, fail) {
                (true, _) => Some(id),
                (false, false) => None,
                (false, true) => {
                    return form_error(
                        "message_reference",
                        "MESSAGE_REFERENCE_UNKNOWN_MESSAGE",
                        "Unknown message",
                    );
                }
            }
        }
    };
    let id = inner.next_id();
    let m = DiscordMessage {
        id,
        content,
        components,
        reply_to,
        edits: 0,
    };
    let json = message_json(channel, &m);
    inner
        .bot_messages
        .entry(channel.to_owned())
        .or_default()
        .push(m);
    axum::Json(json).into_response()
}

fn edit_message(state: &Shared, channel: &str, id: &str, body: &Value) -> Response {
    let content = match content_of(body) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    let components = match body.get("components") {
        None => None,
        Some(v) => match parse_components(Some(v)) {
            Ok(c) => Some(c),
            Err(r) => return *r,
        },
    };
    let mut inner = state.lock();
    let Some(m) = inner
        .bot_messages
        .get_mut(channel)
        .and_then(|m| m.iter_mut().find(|m| m.id == id))
    else {
        return error(StatusCode::NOT_FOUND, 10008, "Unknown Message");
    };
    if let Some(c) = content {
        m.content = c;
    }
    if let Some(c) = components {
        m.components = c;
    }
    if m.content.trim().is_empty() && m.components.is_empty() {
        return error(
            StatusCode::BAD_REQUEST,
            50006,
            "Cannot send an empty message",
        );
    }
    m.edits += 1;
    let json = message_json(channel, m);
    axum::Json(json).into_response()
}

fn callback(state: &Shared, id: &str, token: &str, body: &Value) -> Response {
    let mut inner = state.lock();
    let Some(i) = inner
        .interactions
        .get_mut(id)
        .filter(|i| i.token == token && i.created.elapsed() <= INTERACTION_WINDOW)
    else {
        return error(StatusCode::NOT_FOUND, 10062, "Unknown interaction");
    };
    if i.answered {
        return error(
            StatusCode::BAD_REQUEST,
            40060,
            "Interaction has already been acknowledged.",
        );
    }
    if !matches!(
        body.get("type").and_then(Value::as_u64),
        Some(1 | 4 | 5 | 6 | 7 | 9 | 10 | 12)
    ) {
        return form_error(
            "type",
            "BASE_TYPE_CHOICES",
            "Value must be one of {1, 4, 5, 6, 7, 9, 10, 12}.",
        );
    }
    i.answered = true;
    inner.callbacks.push((id.to_owned(), body.clone()));
    StatusCode::NO_CONTENT.into_response()
}

/// `POST /webhooks/{application_id}/{token}`: a follow-up message of an acknowledged
/// interaction, within its 15 minutes (10015 `Unknown Webhook` otherwise).
fn follow_up(state: &Shared, app: &str, token: &str, body: &Value) -> Response {
    let mut inner = state.lock();
    let known = inner
        .interactions
        .values()
        .any(|i| i.token == token && i.answered && i.created.elapsed() <= INTERACTION_WINDOW);
    if app != APPLICATION_ID || !known {
        return error(StatusCode::NOT_FOUND, 10015, "Unknown Webhook");
    }
    let content = body
        .get("content")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if content.is_empty() || content.chars().count() > 2000 {
        return form_error(
            "content",
            "BASE_TYPE_BAD_LENGTH",
            "Must be between 1 and 2000 in length.",
        );
    }
    inner.follow_ups.push((token.to_owned(), body.clone()));
    let n = inner.next_id();
    axum::Json(json!({"id": n, "content": content, "flags": body.get("flags")})).into_response()
}

/// `GET /attachments/…`: an attachment's content, as Discord's CDN serves it (no token).
pub(super) async fn attachment(
    State(state): State<Arc<Shared>>,
    Path(path): Path<String>,
) -> Response {
    let found = state.lock().attachments.get(&path).cloned();
    match found {
        Some(bytes) => bytes.into_response(),
        None => (StatusCode::NOT_FOUND, "Not Found").into_response(),
    }
}
