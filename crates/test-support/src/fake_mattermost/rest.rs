//! The REST API v4 of the fake (see the module docs).

use std::sync::Arc;

use axum::extract::{Multipart, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{FakeFile, FakeMattermost, FakePost, MAX_RUNES, Shared};

/// Mattermost's error body.
fn error(status: StatusCode, id: &str, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"id": id, "message": message, "detailed_error": "",
            "request_id": "fakerequestid", "status_code": status.as_u16()})),
    )
        .into_response()
}

/// The bearer check, the rate limit and the call log of every REST call; `Some` is the
/// answer to give instead.
fn admit(state: &Shared, headers: &HeaderMap, label: &str) -> Option<Response> {
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        });
    if token != Some(FakeMattermost::TOKEN) {
        return Some(error(
            StatusCode::UNAUTHORIZED,
            "api.context.session_expired.app_error",
            "Invalid or expired session, please login again.",
        ));
    }
    let mut s = state.inner.lock();
    let now = std::time::Instant::now();
    let limited = if s.throttle > 0 {
        s.throttle -= 1;
        Some(1)
    } else if let Some(b) = s.bucket.as_mut() {
        b.take().map(|wait| wait.as_secs().max(1))
    } else {
        None
    };
    if let Some(wait) = limited {
        s.limited += 1;
        let mut r = (StatusCode::TOO_MANY_REQUESTS, "limit exceeded\n").into_response();
        let h = r.headers_mut();
        for (k, v) in [
            ("x-ratelimit-limit", "10".to_string()),
            ("x-ratelimit-remaining", "0".to_string()),
            ("x-ratelimit-reset", wait.to_string()),
            ("retry-after", wait.to_string()),
        ] {
            if let Ok(v) = v.parse() {
                h.insert(k, v);
            }
        }
        return Some(r);
    }
    s.calls.push((label.to_string(), now));
    None
}

fn user_json(id: &str, name: &str) -> Value {
    json!({"id": id, "username": name, "first_name": "", "last_name": "", "nickname": "",
        "email": format!("{name}@example.com"), "roles": "system_user",
        "is_bot": id == FakeMattermost::BOT_ID, "locale": "en", "create_at": 0, "update_at": 0, "delete_at": 0})
}

pub(super) async fn me(State(state): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if let Some(r) = admit(&state, &headers, "GET /users/me") {
        return r;
    }
    axum::Json(user_json(FakeMattermost::BOT_ID, FakeMattermost::BOT_NAME)).into_response()
}

pub(super) async fn user(
    State(state): State<Arc<Shared>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Some(r) = admit(&state, &headers, "GET /users/{id}") {
        return r;
    }
    match state.inner.lock().users.get(&id) {
        Some(name) => axum::Json(user_json(&id, name)).into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            "app.user.missing_account.const",
            "Unable to find the user.",
        ),
    }
}

pub(super) async fn create_post(
    State(state): State<Arc<Shared>>,
    headers: HeaderMap,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    if let Some(r) = admit(&state, &headers, "POST /posts") {
        return r;
    }
    let post = {
        let mut s = state.inner.lock();
        let channel = body["channel_id"].as_str().unwrap_or_default().to_string();
        let member = s
            .channels
            .get(&channel)
            .is_some_and(|c| c.members.iter().any(|m| m == FakeMattermost::BOT_ID));
        if !member {
            return error(
                StatusCode::FORBIDDEN,
                "api.context.permissions.app_error",
                "You do not have the appropriate permissions.",
            );
        }
        let message = body["message"].as_str().unwrap_or_default().to_string();
        if message.chars().count() > MAX_RUNES {
            return error(
                StatusCode::BAD_REQUEST,
                "model.post.is_valid.msg.app_error",
                "Invalid Message.",
            );
        }
        let root = body["root_id"].as_str().unwrap_or_default().to_string();
        if !root.is_empty()
            && !s
                .posts
                .iter()
                .any(|p| p.id == root && p.channel_id == channel && p.root_id.is_empty())
        {
            return error(
                StatusCode::BAD_REQUEST,
                "api.post.create_post.root_id.app_error",
                "Invalid RootId parameter.",
            );
        }
        let file_ids: Vec<String> = body["file_ids"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|f| f.as_str().map(str::to_string))
            .collect();
        if file_ids
            .iter()
            .any(|f| s.files.get(f).is_none_or(|f| f.channel != channel))
        {
            return error(
                StatusCode::BAD_REQUEST,
                "api.post.create_post.file_ids.app_error",
                "Invalid file ids.",
            );
        }
        if message.is_empty() && file_ids.is_empty() {
            return error(
                StatusCode::BAD_REQUEST,
                "model.post.is_valid.msg.app_error",
                "Invalid Message.",
            );
        }
        let id = s.id('p');
        let at = s.ms();
        let post = FakePost {
            id,
            user_id: FakeMattermost::BOT_ID.to_string(),
            channel_id: channel,
            root_id: root,
            message,
            props: body.get("props").cloned().unwrap_or_else(|| json!({})),
            file_ids,
            create_at: at,
            update_at: at,
            edits: 0,
        };
        s.posts.push(post.clone());
        post
    };
    state.posted(&post);
    let files = state.inner.lock().files.clone();
    (StatusCode::CREATED, axum::Json(post.json(&files))).into_response()
}

pub(super) async fn patch_post(
    State(state): State<Arc<Shared>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    if let Some(r) = admit(&state, &headers, "PUT /posts/{id}/patch") {
        return r;
    }
    let mut s = state.inner.lock();
    let at = s.ms();
    let files = s.files.clone();
    let Some(post) = s.posts.iter_mut().find(|p| p.id == id) else {
        return error(
            StatusCode::NOT_FOUND,
            "app.post.get.app_error",
            "Unable to get the post.",
        );
    };
    if post.user_id != FakeMattermost::BOT_ID {
        return error(
            StatusCode::FORBIDDEN,
            "api.context.permissions.app_error",
            "You do not have the appropriate permissions.",
        );
    }
    if let Some(m) = body["message"].as_str() {
        if m.chars().count() > MAX_RUNES {
            return error(
                StatusCode::BAD_REQUEST,
                "model.post.is_valid.msg.app_error",
                "Invalid Message.",
            );
        }
        post.message = m.to_string();
    }
    if let Some(props) = body.get("props") {
        post.props = props.clone();
    }
    post.update_at = at;
    post.edits += 1;
    axum::Json(post.json(&files)).into_response()
}

pub(super) async fn ephemeral(
    State(state): State<Arc<Shared>>,
    headers: HeaderMap,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    if let Some(r) = admit(&state, &headers, "POST /posts/ephemeral") {
        return r;
    }
    let mut s = state.inner.lock();
    if !s.allow_ephemeral {
        return error(
            StatusCode::FORBIDDEN,
            "api.context.permissions.app_error",
            "You do not have the appropriate permissions.",
        );
    }
    let s_ = |v: &Value| v.as_str().unwrap_or_default().to_string();
    s.ephemerals.push((
        s_(&body["user_id"]),
        s_(&body["post"]["channel_id"]),
        s_(&body["post"]["message"]),
    ));
    (StatusCode::CREATED, axum::Json(body["post"].clone())).into_response()
}

pub(super) async fn teams(State(state): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if let Some(r) = admit(&state, &headers, "GET /users/me/teams") {
        return r;
    }
    axum::Json(
        json!([{"id": FakeMattermost::TEAM_ID, "name": "test", "display_name": "Test",
        "type": "O", "create_at": 0, "update_at": 0, "delete_at": 0}]),
    )
    .into_response()
}

/// The bot's channels in the team — direct and group messages too (they have no team).
pub(super) async fn channels(
    State(state): State<Arc<Shared>>,
    Path(team): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Some(r) = admit(&state, &headers, "GET /users/me/teams/{id}/channels") {
        return r;
    }
    if team != FakeMattermost::TEAM_ID {
        return error(
            StatusCode::FORBIDDEN,
            "api.context.permissions.app_error",
            "You do not have the appropriate permissions.",
        );
    }
    let s = state.inner.lock();
    let list: Vec<Value> = s
        .channels
        .iter()
        .filter(|(_, c)| c.members.iter().any(|m| m == FakeMattermost::BOT_ID))
        .map(|(id, c)| {
            let last = s
                .posts
                .iter()
                .filter(|p| &p.channel_id == id)
                .map(|p| p.create_at)
                .max()
                .unwrap_or_default();
            json!({"id": id, "type": c.kind, "name": c.name, "display_name": c.name,
                "team_id": if c.kind == "D" || c.kind == "G" { "" } else { FakeMattermost::TEAM_ID },
                "last_post_at": last, "create_at": 0, "update_at": 0, "delete_at": 0})
        })
        .collect();
    axum::Json(list).into_response()
}

#[derive(serde::Deserialize)]
pub(super) struct Since {
    since: Option<i64>,
    page: Option<usize>,
    per_page: Option<usize>,
}

/// `?since=`: the posts changed after it, at most 1,000 (Mattermost's store does not order
/// them before the limit); otherwise a page of the newest first.
pub(super) async fn posts_since(
    State(state): State<Arc<Shared>>,
    Path(id): Path<String>,
    Query(q): Query<Since>,
    headers: HeaderMap,
) -> Response {
    if let Some(r) = admit(&state, &headers, "GET /channels/{id}/posts") {
        return r;
    }
    let s = state.inner.lock();
    let newest_first = s.posts.iter().rev().filter(|p| p.channel_id == id);
    let chosen: Vec<&FakePost> = match q.since {
        Some(since) => newest_first
            .filter(|p| p.update_at > since)
            .take(1000)
            .collect(),
        None => {
            let per = q.per_page.unwrap_or(60).min(200);
            newest_first
                .skip(q.page.unwrap_or(0) * per)
                .take(per)
                .collect()
        }
    };
    let mut order = Vec::new();
    let mut posts = serde_json::Map::new();
    for p in chosen {
        order.push(json!(p.id));
        posts.insert(p.id.clone(), p.json(&s.files));
    }
    axum::Json(json!({"order": order, "posts": posts, "next_post_id": "", "prev_post_id": ""}))
        .into_response()
}

pub(super) async fn upload(
    State(state): State<Arc<Shared>>,
    headers: HeaderMap,
    mut form: Multipart,
) -> Response {
    if let Some(r) = admit(&state, &headers, "POST /files") {
        return r;
    }
    let (mut channel, mut files) = (None, Vec::new());
    while let Ok(Some(field)) = form.next_field().await {
        match field.name().unwrap_or_default() {
            "channel_id" => channel = field.text().await.ok(),
            "files" => {
                let name = field.file_name().unwrap_or("file").to_string();
                let mime = field
                    .content_type()
                    .unwrap_or("application/octet-stream")
                    .to_string();
                if let Ok(b) = field.bytes().await {
                    files.push((name, mime, b.to_vec()));
                }
            }
            _ => {}
        }
    }
    let Some(channel) = channel.filter(|_| !files.is_empty()) else {
        return error(
            StatusCode::BAD_REQUEST,
            "api.file.upload_file.incorrect_number_of_files.app_error",
            "Unable to upload files. Incorrect number of files specified.",
        );
    };
    let mut s = state.inner.lock();
    let infos: Vec<Value> = files
        .into_iter()
        .map(|(name, mime, bytes)| {
            let id = s.id('f');
            let f = FakeFile {
                name,
                mime,
                bytes,
                channel: channel.clone(),
            };
            let info = f.info(&id);
            s.files.insert(id, f);
            info
        })
        .collect();
    (
        StatusCode::CREATED,
        axum::Json(json!({"file_infos": infos, "client_ids": []})),
    )
        .into_response()
}

pub(super) async fn download(
    State(state): State<Arc<Shared>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Some(r) = admit(&state, &headers, "GET /files/{id}") {
        return r;
    }
    match state.inner.lock().files.get(&id) {
        Some(f) => ([("content-type", f.mime.clone())], f.bytes.clone()).into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            "app.file_info.get.app_error",
            "Unable to get the file info.",
        ),
    }
}
