//! The REST API v4 calls of the Mattermost channel (api.mattermost.com: "users", "posts",
//! "files", "channels"): every call through the kit's [`PlatformClient`] (outbox, retry
//! policy), Mattermost's error bodies (`{"id","message","status_code"}`) read into
//! [`ChannelError::Api`].

use std::time::Duration;

use serde_json::{Value, json};

use super::{MattermostChannel, Me, valid_id};
use crate::channel::{ChannelError, ChatRef, OutgoingFile};
use crate::platform::{self, Answer, Call, Verdict};

const CALL_TIMEOUT: Duration = Duration::from_secs(30);
const FILE_TIMEOUT: Duration = Duration::from_secs(120);

impl MattermostChannel {
    /// What an answer means: the JSON on success; a 429 waited out by `Retry-After` (or
    /// `X-Ratelimit-Reset`, seconds until the bucket refills); Mattermost's error otherwise.
    fn verdict(&self, label: &str, answer: Answer) -> Verdict<Value> {
        let status = answer.status;
        if status.is_success() {
            return Verdict::Done(answer.json().unwrap_or(Value::Null));
        }
        if status.as_u16() == 429 {
            let reset = answer
                .headers
                .get("x-ratelimit-reset")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            return Verdict::RateLimited(answer.retry_after().or(reset));
        }
        let body = answer.json().unwrap_or(Value::Null);
        let description = match (body["message"].as_str(), body["id"].as_str()) {
            (Some(m), Some(id)) => format!("{m} ({id})"),
            (Some(m), None) => m.to_string(),
            _ => format!("HTTP {status}; the answer is not a Mattermost error"),
        };
        let error = self.client.api_error(label, status.as_u16(), &description);
        if status.is_server_error() {
            Verdict::Transient(error)
        } else {
            Verdict::Failed(error)
        }
    }

    /// One JSON call to `path` (below `/api/v4`), counted against `keys`.
    async fn json_call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
        keys: &[String],
    ) -> Result<Value, ChannelError> {
        let label = format!("{method} {}", label_of(path));
        self.client
            .call(
                Call {
                    label: &label,
                    keys,
                    timeout: CALL_TIMEOUT,
                    policy: None,
                },
                |http, base| {
                    let req = http
                        .request(method.clone(), format!("{base}{path}"))
                        .bearer_auth(&self.cfg.token);
                    match body {
                        Some(b) => req.json(b),
                        None => req,
                    }
                },
                |a| self.verdict(&label, a),
            )
            .await
    }

    /// `GET /users/me`.
    pub(super) async fn get_me(&self) -> Result<Me, ChannelError> {
        let me = self
            .json_call(
                reqwest::Method::GET,
                "/users/me",
                None,
                &[platform::BOT.to_owned()],
            )
            .await?;
        match (me["id"].as_str(), me["username"].as_str()) {
            (Some(id), Some(name)) => Ok(Me {
                id: id.to_string(),
                username: name.to_string(),
            }),
            _ => Err(self.other("GET /users/me: the answer names no user")),
        }
    }

    /// A user's username (cached): reactions carry only the id.
    pub(super) async fn username(&self, user_id: &str) -> String {
        if let Some(n) = self.names.lock().get(user_id) {
            return n.clone();
        }
        if !valid_id(user_id) {
            return user_id.to_string();
        }
        match self
            .json_call(
                reqwest::Method::GET,
                &format!("/users/{user_id}"),
                None,
                &[platform::BOT.to_owned()],
            )
            .await
        {
            Ok(u) => {
                let name = u["username"].as_str().unwrap_or(user_id).to_string();
                let mut names = self.names.lock();
                if names.len() > 10_000 {
                    names.clear();
                }
                names.insert(user_id.to_string(), name.clone());
                name
            }
            Err(e) => {
                tracing::debug!(channel = %self.cfg.name, error = %e, "looking up a user");
                user_id.to_string()
            }
        }
    }

    /// `POST /posts`, counted against the bot and the chat.
    pub(super) async fn create_post(
        &self,
        chat: &ChatRef,
        body: &Value,
    ) -> Result<Value, ChannelError> {
        self.json_call(
            reqwest::Method::POST,
            "/posts",
            Some(body),
            &platform::send_keys(chat),
        )
        .await
    }

    /// `PUT /posts/{id}/patch`: pending edits of one post coalesce (only the newest goes).
    pub(super) async fn patch_post(
        &self,
        chat: &ChatRef,
        post: &str,
        body: &Value,
    ) -> Result<(), ChannelError> {
        let path = format!("/posts/{post}/patch");
        let label = "PUT /posts/{id}/patch";
        let keys = platform::edit_keys(&chat.id);
        self.client
            .edit(
                Call {
                    label,
                    keys: &keys,
                    timeout: CALL_TIMEOUT,
                    policy: None,
                },
                &platform::message_key(&chat.id, post),
                |http, base| {
                    http.put(format!("{base}{path}"))
                        .bearer_auth(&self.cfg.token)
                        .json(body)
                },
                |a| self.verdict(label, a),
            )
            .await
            .map(drop)
    }

    /// `POST /posts/ephemeral`: a post only `user` sees (needs the `create_post_ephemeral`
    /// permission; a 403 says the bot has not got it).
    pub(super) async fn ephemeral(
        &self,
        chat: &ChatRef,
        user: &str,
        text: &str,
    ) -> Result<(), ChannelError> {
        let mut post = json!({"channel_id": chat.id, "message": text});
        if let Some(root) = &chat.thread {
            post["root_id"] = json!(root);
        }
        self.json_call(
            reqwest::Method::POST,
            "/posts/ephemeral",
            Some(&json!({"user_id": user, "post": post})),
            &platform::send_keys(chat),
        )
        .await
        .map(drop)
    }

    /// `POST /files` (multipart: `channel_id`, `files`): the uploaded file's id.
    pub(super) async fn upload(
        &self,
        channel: &str,
        file: &OutgoingFile,
    ) -> Result<String, ChannelError> {
        let keys = [platform::BOT.to_owned()];
        let label = "POST /files";
        let answer = self
            .client
            .call(
                Call {
                    label,
                    keys: &keys,
                    timeout: FILE_TIMEOUT,
                    policy: None,
                },
                |http, base| {
                    let part = reqwest::multipart::Part::stream(file.bytes.clone())
                        .file_name(file.name.clone());
                    let part = part.mime_str(&file.mime).unwrap_or_else(|_| {
                        reqwest::multipart::Part::stream(file.bytes.clone())
                            .file_name(file.name.clone())
                    });
                    let form = reqwest::multipart::Form::new()
                        .text("channel_id", channel.to_string())
                        .part("files", part);
                    http.post(format!("{base}/files"))
                        .bearer_auth(&self.cfg.token)
                        .multipart(form)
                },
                |a| self.verdict(label, a),
            )
            .await?;
        answer["file_infos"][0]["id"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| self.other("POST /files: the answer names no file"))
    }

    /// The channels the bot is in (`GET /users/me/teams`, then each team's
    /// `GET /users/me/teams/{id}/channels`, which list direct and group messages too):
    /// (id, type, `last_post_at`).
    pub(super) async fn my_channels(&self) -> Result<Vec<(String, String, i64)>, ChannelError> {
        let keys = [platform::BOT.to_owned()];
        let teams = self
            .json_call(reqwest::Method::GET, "/users/me/teams", None, &keys)
            .await?;
        let mut out: Vec<(String, String, i64)> = Vec::new();
        for team in teams.as_array().into_iter().flatten() {
            let Some(team) = team["id"].as_str().filter(|t| valid_id(t)) else {
                continue;
            };
            let list = self
                .json_call(
                    reqwest::Method::GET,
                    &format!("/users/me/teams/{team}/channels"),
                    None,
                    &keys,
                )
                .await?;
            for c in list.as_array().into_iter().flatten() {
                let (Some(id), Some(kind)) = (c["id"].as_str(), c["type"].as_str()) else {
                    continue;
                };
                if valid_id(id) && !out.iter().any(|(o, _, _)| o == id) {
                    let last = c["last_post_at"].as_i64().unwrap_or_default();
                    out.push((id.to_string(), kind.to_string(), last));
                }
            }
        }
        Ok(out)
    }

    /// The posts of `channel` made at or after `since` (ms), oldest first:
    /// `GET /channels/{id}/posts?since=`, which answers at most 1,000 (in no set order);
    /// when it is full, the channel is paged through from its newest post back to `since`.
    pub(super) async fn posts_after(
        &self,
        channel: &str,
        since: i64,
    ) -> Result<Vec<Value>, ChannelError> {
        if !valid_id(channel) {
            return Ok(Vec::new());
        }
        let keys = [platform::BOT.to_owned()];
        // `since` takes posts changed after it; one made at `since` itself may not be
        // handled yet (the cursor says).
        let list = self
            .json_call(
                reqwest::Method::GET,
                &format!(
                    "/channels/{channel}/posts?since={}",
                    since.saturating_sub(1)
                ),
                None,
                &keys,
            )
            .await?;
        let mut posts = listed(&list);
        if posts.len() >= SINCE_LIMIT {
            posts.clear();
            for page in 0..MAX_PAGES {
                let list = self
                    .json_call(
                        reqwest::Method::GET,
                        &format!("/channels/{channel}/posts?page={page}&per_page={PER_PAGE}"),
                        None,
                        &keys,
                    )
                    .await?;
                let got = listed(&list);
                let done = got.len() < PER_PAGE
                    || got
                        .iter()
                        .any(|p| p["create_at"].as_i64().unwrap_or_default() < since);
                posts.extend(got);
                if done {
                    break;
                }
            }
        }
        posts.retain(|p| p["create_at"].as_i64().unwrap_or_default() >= since);
        posts.sort_by_key(|p| p["create_at"].as_i64().unwrap_or_default());
        posts.dedup_by(|a, b| a["id"] == b["id"]);
        Ok(posts)
    }
}

/// What `GET /channels/{id}/posts?since=` answers at most.
const SINCE_LIMIT: usize = 1000;
const PER_PAGE: usize = 200;
/// How far back a channel is paged (200 × 50 posts).
const MAX_PAGES: usize = 50;

/// The posts of a post list (`{"order": [...], "posts": {...}}`).
fn listed(list: &Value) -> Vec<Value> {
    list["order"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|id| id.as_str())
        .filter_map(|id| list["posts"].get(id).cloned())
        .collect()
}

/// A path with its ids replaced by `{id}`, for labels and metrics.
fn label_of(path: &str) -> String {
    let path = path.split('?').next().unwrap_or(path);
    path.split('/')
        .map(|seg| if valid_id(seg) { "{id}" } else { seg })
        .collect::<Vec<_>>()
        .join("/")
}
