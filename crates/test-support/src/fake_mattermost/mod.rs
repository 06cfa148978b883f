//! A fake Mattermost server (REST API v4 and the WebSocket) on real TCP (`127.0.0.1:0`),
//! written from Mattermost's API reference (api.mattermost.com: "users" `GET /users/me`,
//! `GET /users/{id}`; "posts" `POST /posts`, `PUT /posts/{id}/patch`, `POST
//! /posts/ephemeral`; "channels" `GET /channels/{id}/posts?since=`; "files" `POST /files`
//! multipart, `GET /files/{id}`), the WebSocket API (developers.mattermost.com → "WebSocket
//! API": `hello`, `posted` with the post as a JSON string, `reaction_added`, the `ping`
//! action answered `{"status":"OK","seq_reply":N}`), interactive messages
//! (developers.mattermost.com → "Interactive messages": a press posts `user_id`,
//! `user_name`, `channel_id`, `post_id`, `trigger_id` and the action's `context` to its
//! integration URL, and applies the answer's `update`) and the server's rate limiting (a
//! GCRA bucket per token, `429` with `X-Ratelimit-*` and `Retry-After`, body
//! `limit exceeded`).
//!
//! Errors are Mattermost's `{"id","message","detailed_error","request_id","status_code"}`.
//! Bearer tokens only: [`FakeMattermost::TOKEN`] is the bot's. `POST /posts/ephemeral`
//! answers 403 (bots lack `create_post_ephemeral` by default) unless
//! [`FakeMattermost::allow_ephemeral`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post, put};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::broadcast;

mod rest;
mod ws;

/// The longest post, as on Mattermost (`PostMessageMaxRunesV2`).
const MAX_RUNES: usize = 16_383;

/// One post, as it stands now.
#[derive(Debug, Clone, PartialEq)]
pub struct FakePost {
    pub id: String,
    pub user_id: String,
    pub channel_id: String,
    pub root_id: String,
    pub message: String,
    pub props: Value,
    pub file_ids: Vec<String>,
    pub create_at: i64,
    pub update_at: i64,
    /// How many times it was edited.
    pub edits: usize,
}

impl FakePost {
    /// The post as clients get it: the server strips its buttons' integration (URL and
    /// context) from every post it hands out.
    fn json(&self, files: &HashMap<String, FakeFile>) -> Value {
        let infos: Vec<Value> = self
            .file_ids
            .iter()
            .filter_map(|id| files.get(id).map(|f| f.info(id)))
            .collect();
        json!({
            "id": self.id, "create_at": self.create_at, "update_at": self.update_at,
            "edit_at": if self.edits > 0 { self.update_at } else { 0 }, "delete_at": 0,
            "user_id": self.user_id, "channel_id": self.channel_id, "root_id": self.root_id,
            "original_id": "", "message": self.message, "type": "", "props": stripped(&self.props),
            "hashtags": "", "pending_post_id": "", "reply_count": 0,
            "file_ids": self.file_ids, "metadata": {"files": infos},
        })
    }

    /// The buttons of its message attachments: (id, name).
    pub fn buttons(&self) -> Vec<(String, String)> {
        self.props["attachments"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|a| a["actions"].as_array().cloned().unwrap_or_default())
            .map(|a| {
                (
                    a["id"].as_str().unwrap_or_default().to_string(),
                    a["name"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }
}

/// `props` without the actions' `integration`.
fn stripped(props: &Value) -> Value {
    let mut props = props.clone();
    for a in props["attachments"].as_array_mut().into_iter().flatten() {
        for action in a["actions"].as_array_mut().into_iter().flatten() {
            if let Some(o) = action.as_object_mut() {
                o.remove("integration");
            }
        }
    }
    props
}

#[derive(Debug, Clone)]
struct FakeFile {
    name: String,
    mime: String,
    bytes: Vec<u8>,
    channel: String,
}

impl FakeFile {
    fn info(&self, id: &str) -> Value {
        let ext = self.name.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
        json!({"id": id, "name": self.name, "extension": ext, "size": self.bytes.len(),
            "mime_type": self.mime, "create_at": 0, "update_at": 0, "delete_at": 0})
    }
}

struct Chan {
    /// `D`, `G`, `O` or `P`.
    kind: String,
    name: String,
    members: Vec<String>,
}

/// The rate limit (`RateLimitSettings`: `PerSec`, `MaxBurst`), as GCRA.
struct Inner {
    /// user id → username.
    users: HashMap<String, String>,
    channels: HashMap<String, Chan>,
    posts: Vec<FakePost>,
    files: HashMap<String, FakeFile>,
    next: u64,
    last_ms: i64,
    ephemerals: Vec<(String, String, String)>,
    allow_ephemeral: bool,
    bucket: Option<crate::gcra::Gcra>,
    throttle: u32,
    limited: u32,
    /// (label, when) of every REST call the bot made.
    calls: Vec<(String, std::time::Instant)>,
    /// WebSocket upgrades are refused (503) while set.
    ws_down: bool,
    ws_connections: u32,
}

struct Shared {
    inner: Mutex<Inner>,
    events: broadcast::Sender<Value>,
    /// Bumped to close every open socket.
    kick: tokio::sync::watch::Sender<u64>,
}

/// The fake server; see the module docs.
pub struct FakeMattermost {
    addr: SocketAddr,
    state: Arc<Shared>,
    shutdown: tokio::sync::watch::Sender<bool>,
}

impl Drop for FakeMattermost {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

impl Inner {
    /// A new 26-character id starting with `prefix`.
    fn id(&mut self, prefix: char) -> String {
        self.next += 1;
        format!("{prefix}{:025}", self.next)
    }

    /// A `create_at`, strictly increasing.
    fn ms(&mut self) -> i64 {
        self.last_ms = now_ms().max(self.last_ms + 1);
        self.last_ms
    }
}

impl Shared {
    /// The `posted` event of `post`, to the channel's members.
    fn posted(&self, post: &FakePost) {
        let event = {
            let s = self.inner.lock();
            let Some(ch) = s.channels.get(&post.channel_id) else {
                return;
            };
            let sender = s.users.get(&post.user_id).cloned().unwrap_or_default();
            let bot = s
                .users
                .get(FakeMattermost::BOT_ID)
                .cloned()
                .unwrap_or_default();
            let mut data = json!({
                "channel_display_name": if ch.kind == "D" { format!("@{sender}") } else { ch.name.clone() },
                "channel_name": ch.name, "channel_type": ch.kind,
                "post": post.json(&s.files).to_string(),
                "sender_name": format!("@{sender}"), "set_online": true, "team_id": if ch.kind == "D" { "" } else { FakeMattermost::TEAM_ID },
            });
            if post.message.contains(&format!("@{bot}")) {
                data["mentions"] = json!(json!([FakeMattermost::BOT_ID]).to_string());
            }
            json!({"event": "posted", "data": data,
                "broadcast": {"omit_users": null, "user_id": "", "channel_id": post.channel_id, "team_id": ""}})
        };
        let _ = self.events.send(event);
    }
}

impl FakeMattermost {
    pub const TOKEN: &'static str = "mm-bot-access-token-0123";
    pub const BOT_ID: &'static str = "b000000000000000000000bot1";
    pub const BOT_NAME: &'static str = "switchboard";
    pub const TEAM_ID: &'static str = "t000000000000000000000team";

    pub async fn start() -> FakeMattermost {
        let (events, _) = broadcast::channel(1024);
        let mut users = HashMap::new();
        users.insert(Self::BOT_ID.to_string(), Self::BOT_NAME.to_string());
        let state = Arc::new(Shared {
            inner: Mutex::new(Inner {
                users,
                channels: HashMap::new(),
                posts: Vec::new(),
                files: HashMap::new(),
                next: 0,
                last_ms: 0,
                ephemerals: Vec::new(),
                allow_ephemeral: false,
                bucket: None,
                throttle: 0,
                limited: 0,
                calls: Vec::new(),
                ws_down: false,
                ws_connections: 0,
            }),
            events,
            kick: tokio::sync::watch::channel(0).0,
        });
        let app = Router::new()
            .route("/api/v4/users/me", get(rest::me))
            .route("/api/v4/users/me/teams", get(rest::teams))
            .route(
                "/api/v4/users/me/teams/{team}/channels",
                get(rest::channels),
            )
            .route("/api/v4/users/{id}", get(rest::user))
            .route("/api/v4/posts", post(rest::create_post))
            .route("/api/v4/posts/ephemeral", post(rest::ephemeral))
            .route("/api/v4/posts/{id}/patch", put(rest::patch_post))
            .route("/api/v4/channels/{id}/posts", get(rest::posts_since))
            .route("/api/v4/files", post(rest::upload))
            .route("/api/v4/files/{id}", get(rest::download))
            .route("/api/v4/websocket", get(ws::upgrade))
            .with_state(state.clone());
        let (listener, addr) = crate::serve::bind("fake Mattermost").await;
        let (shutdown, stop) = tokio::sync::watch::channel(false);
        crate::serve::spawn(listener, app, stop);
        FakeMattermost {
            addr,
            state,
            shutdown,
        }
    }

    /// The server URL to configure.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A person; returns their user id.
    pub fn user(&self, username: &str) -> String {
        let mut s = self.state.inner.lock();
        let id = s.id('u');
        s.users.insert(id.clone(), username.to_string());
        id
    }

    /// The direct message channel of `user` and the bot.
    pub fn dm_channel(&self, user: &str) -> String {
        let mut s = self.state.inner.lock();
        let name = format!("{}__{user}", Self::BOT_ID);
        if let Some((id, _)) = s.channels.iter().find(|(_, c)| c.name == name) {
            return id.clone();
        }
        let id = s.id('d');
        s.channels.insert(
            id.clone(),
            Chan {
                kind: "D".into(),
                name,
                members: vec![Self::BOT_ID.to_string(), user.to_string()],
            },
        );
        id
    }

    /// An open channel with the bot and `members` in it.
    pub fn channel(&self, name: &str, members: &[&str]) -> String {
        let mut s = self.state.inner.lock();
        let id = s.id('c');
        let mut all = vec![Self::BOT_ID.to_string()];
        all.extend(members.iter().map(|m| m.to_string()));
        s.channels.insert(
            id.clone(),
            Chan {
                kind: "O".into(),
                name: name.into(),
                members: all,
            },
        );
        id
    }

    /// `user` posts `text` in `channel` (in the thread of `root`, if any), with files
    /// `(name, mime, bytes)`; returns the post id. Sockets get `posted` at once.
    pub fn post(
        &self,
        user: &str,
        channel: &str,
        root: Option<&str>,
        text: &str,
        files: &[(&str, &str, &[u8])],
    ) -> String {
        let post = {
            let mut s = self.state.inner.lock();
            let file_ids: Vec<String> = files
                .iter()
                .map(|(name, mime, bytes)| {
                    let id = s.id('f');
                    s.files.insert(
                        id.clone(),
                        FakeFile {
                            name: name.to_string(),
                            mime: mime.to_string(),
                            bytes: bytes.to_vec(),
                            channel: channel.to_string(),
                        },
                    );
                    id
                })
                .collect();
            let id = s.id('p');
            let at = s.ms();
            let post = FakePost {
                id,
                user_id: user.to_string(),
                channel_id: channel.to_string(),
                root_id: root.unwrap_or_default().to_string(),
                message: text.to_string(),
                props: json!({}),
                file_ids,
                create_at: at,
                update_at: at,
                edits: 0,
            };
            s.posts.push(post.clone());
            post
        };
        self.state.posted(&post);
        post.id
    }

    /// `user` reacts to `post` with `emoji` (a name: `+1`, `white_check_mark`).
    pub fn react(&self, user: &str, post: &str, emoji: &str) {
        let channel = {
            let mut s = self.state.inner.lock();
            let at = s.ms();
            let Some(p) = s.posts.iter().find(|p| p.id == post) else {
                return;
            };
            (p.channel_id.clone(), at)
        };
        let reaction =
            json!({"user_id": user, "post_id": post, "emoji_name": emoji, "create_at": channel.1});
        let _ = self.state.events.send(json!({"event": "reaction_added",
            "data": {"reaction": reaction.to_string()},
            "broadcast": {"omit_users": null, "user_id": "", "channel_id": channel.0, "team_id": ""}}));
    }

    /// `user` presses the button named `name` on `post`, as the Mattermost server does it:
    /// the integration request to the action's URL with its context. Returns the status
    /// the integration answered; an `update` in its answer is applied to the post.
    pub async fn press(&self, user: &str, post: &str, name: &str) -> u16 {
        let (action, body) = {
            let mut s = self.state.inner.lock();
            let trigger = s.id('x');
            let username = s.users.get(user).cloned().unwrap_or_default();
            let p = s
                .posts
                .iter()
                .find(|p| p.id == post)
                .unwrap_or_else(|| panic!("fake Mattermost: no post {post}"));
            let action = p.props["attachments"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|a| a["actions"].as_array().cloned().unwrap_or_default())
                .find(|a| a["name"] == name)
                .unwrap_or_else(|| panic!("fake Mattermost: no button {name:?} on {post}"));
            let channel = s.channels.get(&p.channel_id);
            let body = json!({
                "user_id": user, "user_name": username, "channel_id": p.channel_id,
                "channel_name": channel.map(|c| c.name.clone()), "team_id": Self::TEAM_ID,
                "team_domain": "test", "post_id": post, "trigger_id": trigger,
                "type": "", "data_source": "", "context": action["integration"]["context"],
            });
            (action, body)
        };
        let url = action["integration"]["url"].as_str().unwrap_or_default();
        self.integration_request(url, &body).await
    }

    /// Posts `body` to `url` as the Mattermost server posts an integration request.
    pub async fn integration_request(&self, url: &str, body: &Value) -> u16 {
        let r = reqwest::Client::new()
            .post(url)
            .json(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("fake Mattermost: the integration did not answer: {e}"));
        let status = r.status().as_u16();
        let answer: Value = r.json().await.unwrap_or_default();
        if let (Some(update), Some(post)) = (answer.get("update"), body["post_id"].as_str()) {
            let mut s = self.state.inner.lock();
            if let Some(p) = s.posts.iter_mut().find(|p| p.id == post) {
                if let Some(m) = update["message"].as_str() {
                    p.message = m.to_string();
                }
                if let Some(props) = update.get("props") {
                    p.props = props.clone();
                }
            }
        }
        status
    }

    /// Every post in `channel`, oldest first.
    pub fn posts_in(&self, channel: &str) -> Vec<FakePost> {
        self.state
            .inner
            .lock()
            .posts
            .iter()
            .filter(|p| p.channel_id == channel)
            .cloned()
            .collect()
    }

    /// The bot's posts in `channel`, oldest first.
    pub fn bot_posts(&self, channel: &str) -> Vec<FakePost> {
        self.posts_in(channel)
            .into_iter()
            .filter(|p| p.user_id == Self::BOT_ID)
            .collect()
    }

    /// A file's name and content.
    pub fn file(&self, id: &str) -> Option<(String, Vec<u8>)> {
        self.state
            .inner
            .lock()
            .files
            .get(id)
            .map(|f| (f.name.clone(), f.bytes.clone()))
    }

    /// Ephemeral posts made: (user, channel, message).
    pub fn ephemerals(&self) -> Vec<(String, String, String)> {
        self.state.inner.lock().ephemerals.clone()
    }

    /// Lets the bot make ephemeral posts (a role with `create_post_ephemeral`).
    pub fn allow_ephemeral(&self) {
        self.state.inner.lock().allow_ephemeral = true;
    }

    /// Turns the server's rate limit on: `per_sec` calls a second, bursts of `burst`.
    pub fn rate_limit(&self, per_sec: u32, burst: u32) {
        self.state.inner.lock().bucket = Some(crate::gcra::Gcra::per_second(per_sec, burst));
    }

    /// Answers the next `n` calls 429 whatever the bucket says.
    pub fn throttle(&self, n: u32) {
        self.state.inner.lock().throttle = n;
    }

    /// How many calls were answered 429.
    pub fn limited(&self) -> u32 {
        self.state.inner.lock().limited
    }

    /// The REST calls the bot made: (label, when).
    pub fn calls(&self) -> Vec<(String, std::time::Instant)> {
        self.state.inner.lock().calls.clone()
    }

    /// Closes every open WebSocket and refuses new ones (503) while `down`.
    pub fn websocket_down(&self, down: bool) {
        self.state.inner.lock().ws_down = down;
        if down {
            self.state.kick.send_modify(|k| *k += 1);
        }
    }

    /// How many WebSockets were opened.
    pub fn ws_connections(&self) -> u32 {
        self.state.inner.lock().ws_connections
    }
}
