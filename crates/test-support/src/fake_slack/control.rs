//! What a test does with the fake: inject messages, commands and button presses, steer
//! the socket, read what the bot did, and make methods answer `ratelimited`.

use std::time::Duration;

use serde_json::{Value, json};

use super::{APP_ID, BOT_ID, Cmd, FakeSlack, SlackMessage, TEAM_ID, envelope_id, now};

impl FakeSlack {
    /// A direct message from `user` (in DM channel `D{user}`); returns its ts.
    pub fn dm(&self, user: &str, text: &str) -> String {
        let mut inner = self.state.lock();
        let ts = inner.ts();
        let event = json!({
            "type": "message",
            "channel": format!("D{user}"),
            "user": user,
            "text": text,
            "ts": ts,
            "event_ts": ts,
            "channel_type": "im",
            "team": TEAM_ID,
            "client_msg_id": format!("cm-{ts}"),
        });
        let envelope = inner.event_envelope(event);
        inner.deliver(envelope);
        ts
    }

    /// The files the bot uploaded into channels, in order.
    pub fn uploads(&self) -> Vec<super::Upload> {
        self.state.lock().uploads.clone()
    }

    /// A direct message of `user` sharing a file (`subtype: file_share`, the file in
    /// `files` with a `url_private` this fake serves to the bot token); returns its ts.
    pub fn dm_file(
        &self,
        user: &str,
        text: &str,
        name: &str,
        mime: &str,
        content: &[u8],
    ) -> String {
        let mut inner = self.state.lock();
        let ts = inner.ts();
        let n = inner.files.len() + 1;
        let path = format!("T0TEAM-F{n}/{name}");
        inner.files.insert(path.clone(), content.to_vec());
        let url = format!("http://{}/files-pri/{path}", self.addr);
        let filetype = name.rsplit_once('.').map_or("binary", |(_, e)| e);
        let event = json!({
            "type": "message",
            "subtype": "file_share",
            "channel": format!("D{user}"),
            "user": user,
            "text": text,
            "ts": ts,
            "event_ts": ts,
            "channel_type": "im",
            "team": TEAM_ID,
            "files": [{
                "id": format!("F{n}"),
                "name": name,
                "title": name,
                "mimetype": mime,
                "filetype": filetype,
                "size": content.len(),
                "mode": "hosted",
                "url_private": url,
                "url_private_download": format!("{url}?download=1"),
            }],
        });
        let envelope = inner.event_envelope(event);
        inner.deliver(envelope);
        ts
    }

    /// A message of `user` in `channel` (in the thread `thread_ts`, if any); returns its ts.
    /// When it mentions the bot (`<@UBOT>`), an `app_mention` event follows the `message`
    /// event, as on Slack.
    pub fn channel_message(
        &self,
        channel: &str,
        user: &str,
        text: &str,
        thread_ts: Option<&str>,
    ) -> String {
        let mut inner = self.state.lock();
        let ts = inner.ts();
        let mut event = json!({
            "type": "message",
            "channel": channel,
            "user": user,
            "text": text,
            "ts": ts,
            "event_ts": ts,
            "channel_type": if channel.starts_with('G') { "group" } else { "channel" },
            "team": TEAM_ID,
            "client_msg_id": format!("cm-{ts}"),
        });
        if let Some(t) = thread_ts {
            event["thread_ts"] = json!(t);
            event["parent_user_id"] = json!(user);
        }
        let envelope = inner.event_envelope(event.clone());
        inner.deliver(envelope);
        if text.contains(&format!("<@{}", Self::BOT_USER_ID)) {
            event["type"] = json!("app_mention");
            if let Some(map) = event.as_object_mut() {
                map.remove("channel_type");
            }
            let envelope = inner.event_envelope(event);
            inner.deliver(envelope);
        }
        ts
    }

    /// A slash command (`/new`, `/stop` …) typed by `user` in `channel`, in a
    /// `slash_commands` envelope as Socket Mode delivers it; returns the envelope id.
    pub fn slash_command(&self, channel: &str, user: &str, command: &str, text: &str) -> String {
        let mut inner = self.state.lock();
        let n = inner.next();
        let payload = json!({
            "token": "verification-token",
            "team_id": TEAM_ID,
            "team_domain": "test",
            "channel_id": channel,
            "channel_name": if channel.starts_with('D') { "directmessage" } else { "general" },
            "user_id": user,
            "user_name": user.to_lowercase(),
            "command": command,
            "text": text,
            "api_app_id": APP_ID,
            "is_enterprise_install": "false",
            "response_url": format!("http://{}/commands/{n}", self.addr),
            "trigger_id": format!("{n}.1.slash{n}"),
        });
        let envelope = inner.envelope("slash_commands", payload);
        let id = envelope_id(&envelope);
        inner.deliver(envelope);
        id
    }

    /// Makes `users.info` know `user`.
    pub fn set_user(&self, user: &str, display_name: &str, real_name: &str) {
        self.state.lock().users.insert(
            user.to_owned(),
            (display_name.to_owned(), real_name.to_owned()),
        );
    }

    /// Ephemeral messages posted: (channel, user, text, thread_ts).
    pub fn ephemerals(&self) -> Vec<(String, String, String, Option<String>)> {
        self.state.lock().ephemerals.clone()
    }

    /// Delivers `event` (any Events API event object) in an `events_api` envelope; returns
    /// the envelope id. For shapes the helpers above do not make (bot messages, edits).
    pub fn push_event(&self, event: Value) -> String {
        let mut inner = self.state.lock();
        let envelope = inner.event_envelope(event);
        let id = envelope_id(&envelope);
        inner.deliver(envelope);
        id
    }

    /// A press of the button with `value` under the bot message `message_ts` in `channel` by
    /// `user` (a `block_actions` payload in an `interactive` envelope); returns the envelope
    /// id. The payload's `message` is the bot message as it stands now (a minimal one if the
    /// fake does not know it).
    pub fn press(&self, channel: &str, message_ts: &str, user: &str, value: &str) -> String {
        let mut inner = self.state.lock();
        let n = inner.next();
        let message = match inner.message(channel, message_ts) {
            Some(m) => {
                let mut msg = json!({
                    "type": "message",
                    "user": Self::BOT_USER_ID,
                    "bot_id": BOT_ID,
                    "text": m.text,
                    "ts": m.ts,
                    "blocks": m.blocks,
                });
                if let Some(t) = &m.thread_ts {
                    msg["thread_ts"] = json!(t);
                }
                msg
            }
            None => {
                json!({"type": "message", "user": Self::BOT_USER_ID, "bot_id": BOT_ID, "text": "", "ts": message_ts})
            }
        };
        let button = inner.message(channel, message_ts).and_then(|m| {
            m.blocks.as_array()?.iter().find_map(|b| {
                b.get("elements")?
                    .as_array()?
                    .iter()
                    .find(|e| e.get("value").and_then(Value::as_str) == Some(value))
                    .map(|e| (b.get("block_id").cloned(), e.clone()))
            })
        });
        let (block_id, action_id, text) = match &button {
            Some((block_id, e)) => (
                block_id.clone().unwrap_or(Value::Null),
                e.get("action_id").cloned().unwrap_or(json!(value)),
                e.get("text").cloned().unwrap_or(Value::Null),
            ),
            None => (
                json!("actions"),
                json!(value),
                json!({"type": "plain_text", "text": value}),
            ),
        };
        let payload = json!({
            "type": "block_actions",
            "user": {"id": user, "username": user.to_lowercase(), "name": user.to_lowercase(), "team_id": TEAM_ID},
            "api_app_id": APP_ID,
            "token": "verification-token",
            "container": {"type": "message", "message_ts": message_ts, "channel_id": channel, "is_ephemeral": false},
            "trigger_id": format!("{n}.1.trigger{n}"),
            "team": {"id": TEAM_ID, "domain": "test"},
            "channel": {"id": channel, "name": "general"},
            "message": message,
            "response_url": format!("http://{}/actions/{n}", self.addr),
            "actions": [{
                "action_id": action_id,
                "block_id": block_id,
                "text": text,
                "value": value,
                "type": "button",
                "action_ts": format!("{}.{n:06}", now()),
            }],
        });
        let envelope = inner.envelope("interactive", payload);
        let id = envelope_id(&envelope);
        inner.deliver(envelope);
        id
    }

    /// Delivers the last injected envelope again: same payload (same `event_id`), new
    /// envelope id, `retry_attempt` + 1.
    pub fn redeliver_last(&self) {
        let mut inner = self.state.lock();
        let Some(mut envelope) = inner.last.clone() else {
            return;
        };
        let n = inner.next();
        envelope["envelope_id"] = json!(format!("env-{n:06}"));
        let attempt = envelope["retry_attempt"].as_u64().unwrap_or_default() + 1;
        envelope["retry_attempt"] = json!(attempt);
        envelope["retry_reason"] = json!("timeout");
        inner.deliver(envelope);
    }

    /// Sends `{"type":"disconnect"}` on the connected socket (which then takes no more
    /// envelopes; it stays open until the client closes it).
    pub fn disconnect(&self) {
        let mut inner = self.state.lock();
        if let Some((_, tx)) = inner.current.take() {
            let _ = tx.send(Cmd::Disconnect);
        }
    }

    /// Drops the connected socket without a close frame.
    pub fn drop_socket(&self) {
        let mut inner = self.state.lock();
        if let Some((_, tx)) = inner.current.take() {
            let _ = tx.send(Cmd::Drop);
        }
    }

    /// Freezes the connected socket: it stays open, and the fake neither sends on it nor
    /// reads from it (a ping goes unanswered), as a connection a proxy or NAT forgot.
    /// Events wait for the next connection.
    pub fn freeze_socket(&self) {
        let mut inner = self.state.lock();
        if let Some((_, tx)) = inner.current.take() {
            let _ = tx.send(Cmd::Freeze);
        }
    }

    /// The bot's messages in `channel`, in the order posted.
    pub fn bot_messages(&self, channel: &str) -> Vec<SlackMessage> {
        self.state
            .lock()
            .messages
            .get(channel)
            .cloned()
            .unwrap_or_default()
    }

    /// Envelope ids acknowledged so far, in order.
    pub fn acked(&self) -> Vec<String> {
        self.state.lock().acked.clone()
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

    /// `(channel, timestamp, name)` of every reaction added.
    pub fn reactions(&self) -> Vec<(String, String, String)> {
        self.state.lock().reactions.clone()
    }

    /// The next `n` calls to `method` answer HTTP 429 with `Retry-After: retry_after`.
    pub fn rate_limit(&self, method: &str, n: usize, retry_after: u64) {
        self.state
            .lock()
            .rate_limits
            .insert(method.to_owned(), (n, retry_after));
    }

    /// Websocket connections opened so far.
    pub fn connections(&self) -> usize {
        self.state.lock().connections
    }

    /// Whether a socket is connected (and takes envelopes).
    pub fn connected(&self) -> bool {
        self.state.lock().current.is_some()
    }

    /// Waits (up to `timeout`) until `f(self)` holds.
    ///
    /// # Panics
    /// When it does not hold in time, naming `what`.
    pub async fn wait_until(&self, timeout: Duration, what: &str, f: impl Fn(&FakeSlack) -> bool) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if f(self) {
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!("fake Slack: timed out after {timeout:?} waiting until {what}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
