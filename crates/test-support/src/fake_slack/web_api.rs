//! The Web API under `/api/{method}`: parameters, Block Kit checks, posting and updating.

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::socket_mode::AppState;
use super::{
    APP_ID, BOT_ID, BOT_NAME, FakeSlack, Inner, MAX_BLOCKS, MAX_BUTTON_TEXT, MAX_ELEMENTS,
    MAX_HEADER, MAX_SECTION, SlackMessage, TEAM_ID, TEAM_NAME,
};

fn ok(mut fields: Value) -> Response {
    fields["ok"] = json!(true);
    axum::Json(fields).into_response()
}

fn fail(error: &str) -> Response {
    axum::Json(json!({"ok": false, "error": error})).into_response()
}

/// The parameters: a JSON body, a form body, or the query string.
pub(super) fn params(
    headers: &HeaderMap,
    query: Option<&str>,
    body: &[u8],
) -> Result<Map<String, Value>, String> {
    let json_body = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/json"));
    let mut map = Map::new();
    if json_body && !body.iter().all(u8::is_ascii_whitespace) {
        return match serde_json::from_slice::<Value>(body) {
            Ok(Value::Object(m)) => Ok(m),
            _ => Err("invalid_json".into()),
        };
    }
    let form = std::str::from_utf8(body).map_err(|_| "invalid_form_data".to_owned())?;
    let pairs = form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .chain(form_urlencoded::parse(form.as_bytes()));
    for (k, v) in pairs {
        map.insert(k.into_owned(), Value::String(v.into_owned()));
    }
    Ok(map)
}

pub(super) async fn api(
    State((state, addr)): State<AppState>,
    Path(method): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let params = match params(&headers, query.as_deref(), &body) {
        Ok(p) => p,
        Err(e) => return fail(&e),
    };
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned)
        .or_else(|| {
            params
                .get("token")
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
    let mut inner = state.lock();
    inner.calls.push(&method, Value::Object(params.clone()));
    if let Some((left, retry_after)) = inner.rate_limits.get_mut(&method)
        && *left > 0
    {
        *left -= 1;
        let retry_after = *retry_after;
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, retry_after.to_string())],
            axum::Json(json!({"ok": false, "error": "ratelimited"})),
        )
            .into_response();
    }
    let wanted = if method == "apps.connections.open" {
        FakeSlack::APP_TOKEN
    } else {
        FakeSlack::BOT_TOKEN
    };
    match token.as_deref() {
        None | Some("") => return fail("not_authed"),
        Some(t) if t == wanted => {}
        Some(t) if t == FakeSlack::APP_TOKEN || t == FakeSlack::BOT_TOKEN => {
            return fail("not_allowed_token_type");
        }
        Some(_) => return fail("invalid_auth"),
    }
    match method.as_str() {
        "auth.test" => ok(json!({
            "url": "https://test.slack.com/",
            "team": TEAM_NAME,
            "user": BOT_NAME,
            "team_id": TEAM_ID,
            "user_id": FakeSlack::BOT_USER_ID,
            "bot_id": BOT_ID,
            "is_enterprise_install": false,
        })),
        "apps.connections.open" => {
            let n = inner.next();
            let ticket = format!("ticket-{n}");
            inner.tickets.push(ticket.clone());
            ok(json!({"url": format!("ws://{addr}/socket?ticket={ticket}&app_id={APP_ID}")}))
        }
        // Slack's upload flow: a URL to POST the bytes to, then completing it into a
        // channel (form parameters, `files` a JSON array).
        "files.getUploadURLExternal" => {
            let (Some(filename), Some(length)) = (
                params.get("filename").and_then(Value::as_str),
                params
                    .get("length")
                    .and_then(Value::as_str)
                    .and_then(|l| l.parse::<usize>().ok()),
            ) else {
                return fail("invalid_arguments");
            };
            let n = inner.next();
            let id = format!("F0UP{n}");
            inner
                .pending_uploads
                .insert(id.clone(), (filename.to_owned(), length, None));
            ok(json!({"upload_url": format!("http://{addr}/upload/{id}"), "file_id": id}))
        }
        "files.completeUploadExternal" => {
            let files: Vec<Value> = params
                .get("files")
                .and_then(Value::as_str)
                .and_then(|f| serde_json::from_str(f).ok())
                .unwrap_or_default();
            let Some(channel) = params.get("channel_id").and_then(Value::as_str) else {
                return fail("invalid_arguments");
            };
            let mut done = Vec::new();
            for f in &files {
                let Some(id) = f.get("id").and_then(Value::as_str) else {
                    return fail("invalid_arguments");
                };
                let Some((name, length, Some(content))) = inner.pending_uploads.remove(id) else {
                    return fail("file_not_found");
                };
                if content.len() != length {
                    return fail("file_upload_size_mismatch");
                }
                inner.uploads.push(super::Upload {
                    file_id: id.to_owned(),
                    channel: channel.to_owned(),
                    thread_ts: params
                        .get("thread_ts")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    title: f
                        .get("title")
                        .and_then(Value::as_str)
                        .unwrap_or(&name)
                        .to_owned(),
                    comment: params
                        .get("initial_comment")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    name,
                    content,
                });
                done.push(json!({"id": id}));
            }
            ok(json!({"files": done}))
        }
        "chat.postMessage" => post_message(&mut inner, &params),
        "chat.update" => update_message(&mut inner, &params),
        "chat.postEphemeral" => {
            let (Some(channel), Some(user), Some(text)) = (
                str_param(&params, "channel"),
                str_param(&params, "user"),
                str_param(&params, "text"),
            ) else {
                return fail("invalid_arguments");
            };
            if !channel_ok(channel) {
                return fail("channel_not_found");
            }
            // A DM channel `D{user}` has only that user (and the bot) in it.
            if channel.starts_with('D') && channel != format!("D{user}") {
                return fail("user_not_in_channel");
            }
            let thread = str_param(&params, "thread_ts").map(str::to_owned);
            inner
                .ephemerals
                .push((channel.to_owned(), user.to_owned(), text.to_owned(), thread));
            let ts = inner.ts();
            ok(json!({"message_ts": ts}))
        }
        "users.info" => {
            let Some(user) = str_param(&params, "user") else {
                return fail("user_not_found");
            };
            match inner.users.get(user) {
                Some((display, real)) => ok(json!({"user": {
                    "id": user, "team_id": TEAM_ID, "name": user.to_lowercase(), "real_name": real,
                    "is_bot": false, "profile": {"display_name": display, "real_name": real},
                }})),
                None => fail("user_not_found"),
            }
        }
        "reactions.add" => {
            let (Some(channel), Some(ts), Some(name)) = (
                str_param(&params, "channel"),
                str_param(&params, "timestamp"),
                str_param(&params, "name"),
            ) else {
                return fail("invalid_arguments");
            };
            let r = (channel.to_owned(), ts.to_owned(), name.to_owned());
            if inner.message(channel, ts).is_none() && !channel_ok(channel) {
                return fail("channel_not_found");
            }
            if inner.reactions.contains(&r) {
                return fail("already_reacted");
            }
            inner.reactions.push(r);
            ok(json!({}))
        }
        _ => fail("unknown_method"),
    }
}

fn str_param<'a>(params: &'a Map<String, Value>, name: &str) -> Option<&'a str> {
    params
        .get(name)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn channel_ok(channel: &str) -> bool {
    channel.len() > 1 && ["C", "D", "G"].iter().any(|p| channel.starts_with(p))
}

/// The `blocks` parameter (an array, or a JSON-encoded array in a form), checked.
pub(super) fn blocks_param(params: &Map<String, Value>) -> Result<Option<Value>, &'static str> {
    let blocks = match params.get("blocks") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(s)) => {
            serde_json::from_str::<Value>(s).map_err(|_| "invalid_blocks_format")?
        }
        Some(v) => v.clone(),
    };
    let list = blocks.as_array().ok_or("invalid_blocks_format")?;
    if list.len() > MAX_BLOCKS {
        return Err("invalid_blocks");
    }
    let len = |v: Option<&Value>| v.and_then(Value::as_str).map(|s| s.chars().count());
    for b in list {
        match b.get("type").and_then(Value::as_str) {
            Some("section") => {
                let n = len(b.pointer("/text/text")).ok_or("invalid_blocks")?;
                if n == 0 || n > MAX_SECTION {
                    return Err("invalid_blocks");
                }
            }
            Some("header") => {
                let n = len(b.pointer("/text/text")).ok_or("invalid_blocks")?;
                if n == 0 || n > MAX_HEADER || b.pointer("/text/type") != Some(&json!("plain_text"))
                {
                    return Err("invalid_blocks");
                }
            }
            Some("divider") => {}
            Some("actions") => {
                let elements = b
                    .get("elements")
                    .and_then(Value::as_array)
                    .ok_or("invalid_blocks")?;
                if elements.is_empty() || elements.len() > MAX_ELEMENTS {
                    return Err("invalid_blocks");
                }
                for e in elements {
                    let n = len(e.pointer("/text/text")).ok_or("invalid_blocks")?;
                    let id = len(e.get("action_id")).unwrap_or(0);
                    if n == 0 || n > MAX_BUTTON_TEXT || id == 0 || id > 255 {
                        return Err("invalid_blocks");
                    }
                }
                let mut ids: Vec<&str> = elements
                    .iter()
                    .filter_map(|e| e.get("action_id").and_then(Value::as_str))
                    .collect();
                ids.sort_unstable();
                ids.dedup();
                if ids.len() != elements.len() {
                    return Err("invalid_blocks");
                }
            }
            _ => return Err("invalid_blocks"),
        }
    }
    // action ids are unique across the message, too
    let mut all: Vec<&str> = list
        .iter()
        .filter_map(|b| b.get("elements").and_then(Value::as_array))
        .flatten()
        .filter_map(|e| e.get("action_id").and_then(Value::as_str))
        .collect();
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    if all.len() != n {
        return Err("invalid_blocks");
    }
    Ok(Some(blocks))
}

fn buttons_of(blocks: &Value) -> Vec<(String, String)> {
    blocks
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("actions"))
        .filter_map(|b| b.get("elements").and_then(Value::as_array))
        .flatten()
        .filter(|e| e.get("type").and_then(Value::as_str) == Some("button"))
        .map(|e| {
            let s = |p: &str| {
                e.pointer(p)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            (s("/text/text"), s("/value"))
        })
        .collect()
}

fn post_message(inner: &mut Inner, params: &Map<String, Value>) -> Response {
    let Some(channel) = str_param(params, "channel") else {
        return fail("channel_not_found");
    };
    if !channel_ok(channel) {
        return fail("channel_not_found");
    }
    let blocks = match blocks_param(params) {
        Ok(b) => b,
        Err(e) => return fail(e),
    };
    let text = str_param(params, "text").unwrap_or_default().to_owned();
    if text.trim().is_empty() && blocks.is_none() {
        return fail("no_text");
    }
    if text.chars().count() > 40_000 {
        return fail("msg_too_long");
    }
    let ts = inner.ts();
    let blocks = blocks.unwrap_or_else(|| json!([]));
    let msg = SlackMessage {
        ts: ts.clone(),
        thread_ts: str_param(params, "thread_ts").map(str::to_owned),
        text: text.clone(),
        buttons: buttons_of(&blocks),
        blocks: blocks.clone(),
        updates: 0,
    };
    let mut message = json!({
        "type": "message",
        "user": FakeSlack::BOT_USER_ID,
        "bot_id": BOT_ID,
        "text": text,
        "ts": ts,
        "blocks": blocks,
    });
    if let Some(t) = &msg.thread_ts {
        message["thread_ts"] = json!(t);
    }
    let channel = channel.to_owned();
    inner.messages.entry(channel.clone()).or_default().push(msg);
    ok(json!({"channel": channel, "ts": ts, "message": message}))
}

fn update_message(inner: &mut Inner, params: &Map<String, Value>) -> Response {
    let (Some(channel), Some(ts)) = (str_param(params, "channel"), str_param(params, "ts")) else {
        return fail("message_not_found");
    };
    if !channel_ok(channel) {
        return fail("channel_not_found");
    }
    let blocks = match blocks_param(params) {
        Ok(b) => b,
        Err(e) => return fail(e),
    };
    let text = str_param(params, "text").map(str::to_owned);
    if text.as_deref().is_none_or(|t| t.trim().is_empty()) && blocks.is_none() {
        return fail("no_text");
    }
    let Some(msg) = inner
        .messages
        .get_mut(channel)
        .and_then(|m| m.iter_mut().find(|m| m.ts == ts))
    else {
        return fail("message_not_found");
    };
    if let Some(text) = text {
        msg.text = text;
    }
    if let Some(blocks) = blocks {
        msg.buttons = buttons_of(&blocks);
        msg.blocks = blocks;
    }
    msg.updates += 1;
    let (channel, ts, text) = (channel.to_owned(), msg.ts.clone(), msg.text.clone());
    ok(json!({"channel": channel, "ts": ts, "text": text}))
}

/// `GET /files-pri/…`: a shared file's content, as Slack serves `url_private`: with the bot
/// token only; without it, the sign-in page (HTML, 200), as Slack does.
pub(super) async fn file(
    State((state, _)): State<AppState>,
    Path(path): Path<String>,
    headers: HeaderMap,
) -> Response {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if auth != format!("Bearer {}", FakeSlack::BOT_TOKEN) {
        return (
            [("content-type", "text/html")],
            "<!DOCTYPE html><html><body>Sign in to Slack</body></html>",
        )
            .into_response();
    }
    let found = state.lock().files.get(&path).cloned();
    match found {
        Some(bytes) => bytes.into_response(),
        None => (StatusCode::NOT_FOUND, "file_not_found").into_response(),
    }
}

/// `POST /upload/{file_id}`: the bytes of an upload `files.getUploadURLExternal` started.
pub(super) async fn upload(
    State((state, _)): State<AppState>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let mut inner = state.lock();
    match inner.pending_uploads.get_mut(&id) {
        Some(p) => {
            p.2 = Some(body.to_vec());
            (StatusCode::OK, format!("OK - {}", body.len())).into_response()
        }
        None => (StatusCode::NOT_FOUND, "no such upload").into_response(),
    }
}
