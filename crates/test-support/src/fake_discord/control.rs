//! What a test does with the fake: inject dispatches, steer the Gateway, read what the bot
//! did, and make routes answer 429.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::wire::{bot_user_json, message_json, timestamp, user_json};
use super::{APPLICATION_ID, DiscordMessage, FakeDiscord, Interaction};

impl FakeDiscord {
    /// A direct message from `user_id` (channel `dm-{user_id}`); returns its message id.
    pub fn dm(&self, user_id: &str, username: &str, text: &str) -> String {
        self.dm_with(user_id, username, text, None)
    }

    /// The files the bot posted, in order.
    pub fn uploads(&self) -> Vec<super::Upload> {
        self.state.lock().uploads.clone()
    }

    /// A DM with one attachment (`filename`, `content_type`, `size`, and a CDN `url` this
    /// fake serves); returns its message id.
    pub fn dm_file(
        &self,
        user_id: &str,
        username: &str,
        text: &str,
        file: (&str, &str, &[u8]),
    ) -> String {
        self.dm_with(user_id, username, text, Some(file))
    }

    fn dm_with(
        &self,
        user_id: &str,
        username: &str,
        text: &str,
        file: Option<(&str, &str, &[u8])>,
    ) -> String {
        let channel = format!("dm-{user_id}");
        let (id, d) = {
            let mut inner = self.state.lock();
            let id = inner.next_id();
            let attachments = match file {
                Some((name, mime, content)) => {
                    let att = inner.next_id();
                    let path = format!("{channel}/{att}/{name}");
                    inner.attachments.insert(path.clone(), content.to_vec());
                    json!([{
                        "id": att,
                        "filename": name,
                        "content_type": mime,
                        "size": content.len(),
                        "url": format!("http://{}/attachments/{path}", self.state.addr),
                        "proxy_url": format!("http://{}/attachments/{path}", self.state.addr),
                    }])
                }
                None => json!([]),
            };
            inner
                .user_messages
                .entry(channel.clone())
                .or_default()
                .push(id.clone());
            let d = json!({
                "id": id,
                "type": 0,
                "channel_id": channel,
                "author": user_json(user_id, username),
                "content": text,
                "timestamp": timestamp(),
                "edited_timestamp": null,
                "tts": false,
                "mention_everyone": false,
                "mentions": [],
                "mention_roles": [],
                "attachments": attachments,
                "embeds": [],
                "pinned": false,
                "flags": 0,
            });
            (id, d)
        };
        self.state.dispatch("MESSAGE_CREATE", d);
        id
    }

    /// A message in guild channel `channel`; `mention_bot` starts it with `<@BOT_ID> ` and
    /// lists the bot in `mentions`. Returns its message id.
    pub fn guild_message(
        &self,
        guild: &str,
        channel: &str,
        user_id: &str,
        username: &str,
        text: &str,
        mention_bot: bool,
    ) -> String {
        let (id, d) = {
            let mut inner = self.state.lock();
            let id = inner.next_id();
            inner
                .user_messages
                .entry(channel.to_owned())
                .or_default()
                .push(id.clone());
            inner
                .channel_guild
                .insert(channel.to_owned(), guild.to_owned());
            let (content, mentions) = if mention_bot {
                (
                    format!("<@{}> {text}", Self::BOT_ID),
                    json!([bot_user_json()]),
                )
            } else {
                (text.to_owned(), json!([]))
            };
            let d = json!({
                "id": id,
                "type": 0,
                "channel_id": channel,
                "guild_id": guild,
                "author": user_json(user_id, username),
                "member": {"roles": [], "joined_at": timestamp(), "deaf": false, "mute": false},
                "content": content,
                "timestamp": timestamp(),
                "edited_timestamp": null,
                "tts": false,
                "mention_everyone": false,
                "mentions": mentions,
                "mention_roles": [],
                "attachments": [],
                "embeds": [],
                "pinned": false,
                "flags": 0,
            });
            (id, d)
        };
        self.state.dispatch("MESSAGE_CREATE", d);
        id
    }

    /// A THREAD_CREATE: thread `thread_id` in `guild` under channel `parent`.
    pub fn thread_create(&self, guild: &str, parent: &str, thread_id: &str) {
        self.state
            .lock()
            .channel_guild
            .insert(thread_id.to_owned(), guild.to_owned());
        self.state.dispatch(
            "THREAD_CREATE",
            json!({
                "id": thread_id,
                "type": 11,
                "guild_id": guild,
                "parent_id": parent,
                "name": "a thread",
                "newly_created": true,
                "thread_metadata": {"archived": false, "auto_archive_duration": 1440, "locked": false},
            }),
        );
    }

    /// A press of the button `custom_id` under message `message_id` in `channel` by
    /// `user_id` (an INTERACTION_CREATE of type 3); returns the interaction id. In `dm-*`
    /// channels the presser is `user`, elsewhere `member.user` with the channel's guild.
    pub fn press(&self, channel: &str, message_id: &str, user_id: &str, custom_id: &str) -> String {
        let (id, d) = {
            let mut inner = self.state.lock();
            let id = inner.next_id();
            let token = format!("interaction-token-{id}");
            inner.interactions.insert(
                id.clone(),
                Interaction {
                    token: token.clone(),
                    created: Instant::now(),
                    answered: false,
                },
            );
            let message = inner
                .bot_messages
                .get(channel)
                .and_then(|m| m.iter().find(|m| m.id == message_id))
                .map(|m| message_json(channel, m))
                .unwrap_or_else(|| {
                    json!({"id": message_id, "channel_id": channel, "author": bot_user_json(),
                           "content": "", "components": [], "type": 0})
                });
            let user = user_json(user_id, &format!("user{user_id}"));
            let mut d = json!({
                "id": id,
                "application_id": APPLICATION_ID,
                "type": 3,
                "token": token,
                "version": 1,
                "channel_id": channel,
                "message": message,
                "data": {"custom_id": custom_id, "component_type": 2},
                "locale": "en-US",
            });
            if channel.starts_with("dm-") {
                d["user"] = user;
                d["channel"] = json!({"id": channel, "type": 1});
            } else {
                let guild = inner
                    .channel_guild
                    .get(channel)
                    .cloned()
                    .unwrap_or_else(|| "1".to_owned());
                d["guild_id"] = json!(guild);
                d["member"] = json!({"user": user, "roles": [], "permissions": "0"});
                d["channel"] = json!({"id": channel, "type": 0, "guild_id": guild});
            }
            (id, d)
        };
        self.state.dispatch("INTERACTION_CREATE", d);
        id
    }

    /// Queues a raw dispatch (`t`, `d`), for shapes the helpers above do not make.
    pub fn push_dispatch(&self, t: &str, d: Value) {
        self.state.dispatch(t, d);
    }

    /// Closes every open gateway socket abruptly (no close frame). The session stays
    /// resumable.
    pub fn drop_connection(&self) {
        {
            let mut inner = self.state.lock();
            inner.kill_through = inner.last_conn;
        }
        self.state.bump();
    }

    /// Closes every open gateway socket with close `code` (e.g. 4000, or 4004/4014).
    pub fn close_with(&self, code: u16) {
        {
            let mut inner = self.state.lock();
            inner.close_through = Some((inner.last_conn, code));
        }
        self.state.bump();
    }

    /// Sends a HEARTBEAT request (op 1) to every open socket.
    pub fn request_heartbeat(&self) {
        self.state.lock().server_ops.push(1);
        self.state.bump();
    }

    /// Sends RECONNECT (op 7) to every open socket.
    pub fn request_reconnect(&self) {
        self.state.lock().server_ops.push(7);
        self.state.bump();
    }

    /// Stops (or resumes) answering heartbeats with HEARTBEAT_ACK.
    pub fn withhold_acks(&self, on: bool) {
        self.state.lock().withhold_acks = on;
        self.state.bump();
    }

    /// The next RESUME gets INVALID_SESSION `d:false` and the session is forgotten.
    pub fn invalidate_session(&self) {
        self.state.lock().invalidate_next_resume = true;
    }

    /// The bot's messages in `channel` in the order sent, as they stand now.
    pub fn bot_messages(&self, channel: &str) -> Vec<DiscordMessage> {
        self.state
            .lock()
            .bot_messages
            .get(channel)
            .cloned()
            .unwrap_or_default()
    }

    /// IDENTIFYs received (with any token).
    pub fn identifies(&self) -> usize {
        self.state.lock().identifies
    }

    /// The `d` of every IDENTIFY received.
    pub fn identify_payloads(&self) -> Vec<Value> {
        self.state.lock().identify_payloads.clone()
    }

    /// RESUMEs received (also refused ones).
    pub fn resumes(&self) -> usize {
        self.state.lock().resumes
    }

    /// Heartbeats received.
    pub fn heartbeats(&self) -> usize {
        self.state.lock().heartbeats
    }

    /// Interaction callbacks accepted: (interaction id, body).
    pub fn callbacks(&self) -> Vec<(String, Value)> {
        self.state.lock().callbacks.clone()
    }

    /// Interaction follow-ups accepted: (interaction token, body).
    pub fn follow_ups(&self) -> Vec<(String, Value)> {
        self.state.lock().follow_ups.clone()
    }

    /// JSON bodies (`null` when none) of every REST call whose route (`METHOD /path`
    /// below `/api/v10`, e.g. `POST /channels/dm-42/messages`) starts with `route`, in
    /// order, refused ones too.
    pub fn calls(&self, route: &str) -> Vec<Value> {
        self.state.lock().calls.starting_with(route)
    }

    /// Every call in arrival order, refused ones too: when it came, its route, its params.
    /// For asserting on the exact sequence of posts and edits.
    pub fn timeline(&self) -> Vec<(std::time::Instant, String, Value)> {
        self.state.lock().calls.timeline()
    }

    /// The next `n` REST calls whose route starts with `route_prefix` answer 429 with
    /// `retry_after` seconds.
    pub fn rate_limit(&self, route_prefix: &str, n: usize, retry_after: f64) {
        self.state
            .lock()
            .rate_limits
            .push((route_prefix.to_owned(), n, retry_after));
    }

    /// Waits (up to `timeout`) until `f(self)` holds.
    ///
    /// # Panics
    /// When it does not hold in time, naming `what`.
    pub async fn wait_until(
        &self,
        timeout: Duration,
        what: &str,
        f: impl Fn(&FakeDiscord) -> bool,
    ) {
        let deadline = Instant::now() + timeout;
        loop {
            if f(self) {
                return;
            }
            if Instant::now() >= deadline {
                panic!("fake Discord: timed out after {timeout:?} waiting until {what}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
