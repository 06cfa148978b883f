//! One chat platform's fake (its wire format) behind the real server, with the mock LLM:
//! the world of the end-to-end chat tests (`chat_replies`, `gateway_platforms`).

use std::time::Duration;

use switchboard_test_support::fake_discord::FakeDiscord;
use switchboard_test_support::fake_slack::FakeSlack;
use switchboard_test_support::fake_telegram::FakeTelegram;
use switchboard_test_support::mock_llm::MockLlm;
use switchboard_test_support::process::ServerProcess;

use super::start;

/// How long a wait for the bot's messages lasts.
pub const WAIT: Duration = Duration::from_secs(40);

pub enum Fake {
    Telegram(FakeTelegram),
    Slack(FakeSlack),
    Discord(FakeDiscord),
}

/// One bot message as the scenarios see it.
#[derive(Debug, Clone)]
pub struct Msg {
    pub id: String,
    pub text: String,
    pub buttons: Vec<(String, String)>,
}

pub struct World {
    pub dir: tempfile::TempDir,
    pub ws: tempfile::TempDir,
    pub llm: MockLlm,
    pub fake: Fake,
}

impl World {
    /// `telegram`, `slack` or `discord`.
    pub async fn new(platform: &str) -> World {
        let fake = match platform {
            "telegram" => Fake::Telegram(FakeTelegram::start().await),
            "slack" => Fake::Slack(FakeSlack::start().await),
            _ => Fake::Discord(FakeDiscord::start().await),
        };
        Self::with(fake).await
    }

    pub async fn slack() -> World {
        Self::new("slack").await
    }

    pub async fn discord() -> World {
        Self::new("discord").await
    }

    pub async fn with(fake: Fake) -> World {
        World {
            dir: tempfile::tempdir().unwrap(),
            ws: tempfile::tempdir().unwrap(),
            llm: MockLlm::start().await,
            fake,
        }
    }

    pub async fn server(&self) -> ServerProcess {
        self.server_with(&[]).await
    }

    /// The server with the platform's channel configured (the users the scenarios use
    /// allowed), plus `extra` environment.
    pub async fn server_with(&self, extra: &[(&str, &str)]) -> ServerProcess {
        let ws = self.ws.path().to_string_lossy().to_string();
        let mut env: Vec<(String, String)> = vec![("SWITCHBOARD_DEFAULT_CWD".into(), ws)];
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let mut set = |k: &str, v: String| env.push((k.into(), v));
        match &self.fake {
            Fake::Telegram(f) => {
                set("SWITCHBOARD_TELEGRAM_TOKEN", FakeTelegram::TOKEN.into());
                set("SWITCHBOARD_TELEGRAM_BASE_URL", f.base_url());
                set("SWITCHBOARD_TELEGRAM_ALLOWED_CHATS", "42".into());
                set("SWITCHBOARD_TELEGRAM_POLL_TIMEOUT_SECS", "1".into());
            }
            Fake::Slack(f) => {
                set("SWITCHBOARD_SLACK_BOT_TOKEN", FakeSlack::BOT_TOKEN.into());
                set("SWITCHBOARD_SLACK_APP_TOKEN", FakeSlack::APP_TOKEN.into());
                set("SWITCHBOARD_SLACK_API_BASE", f.api_base());
                set("SWITCHBOARD_SLACK_ALLOWED_USERS", "U42,U1,U2,U7,U9".into());
            }
            Fake::Discord(f) => {
                set("SWITCHBOARD_DISCORD_TOKEN", FakeDiscord::TOKEN.into());
                set("SWITCHBOARD_DISCORD_API_BASE", f.api_base());
                set("SWITCHBOARD_DISCORD_ALLOWED_USERS", "42,1,2,7".into());
            }
        }
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        start(self.dir.path(), &self.llm.base_url(), &env).await
    }

    /// The chat id of the DM with user 42.
    pub fn dm_chat(&self) -> &'static str {
        match self.fake {
            Fake::Telegram(_) => "42",
            Fake::Slack(_) => "DU42",
            Fake::Discord(_) => "dm-42",
        }
    }

    /// The platform's limit for one message of reply text.
    pub fn max_chars(&self) -> usize {
        match self.fake {
            Fake::Telegram(_) => 4096,
            Fake::Slack(_) => 4000,
            Fake::Discord(_) => 2000,
        }
    }

    /// User 42 writes `text` in the DM.
    pub fn dm(&self, text: &str) {
        match &self.fake {
            Fake::Telegram(f) => {
                f.dm(42, "alice", text);
            }
            Fake::Slack(f) => {
                f.dm("U42", text);
            }
            Fake::Discord(f) => {
                f.dm("42", "alice", text);
            }
        }
    }

    /// User 42 sends a file in the DM, with `caption`: on Telegram as `kind` (`photo`,
    /// `document`, `voice`), elsewhere as an attachment named `name`.
    pub fn dm_file(&self, kind: &str, name: &str, mime: &str, content: &[u8], caption: &str) {
        match &self.fake {
            Fake::Telegram(f) => {
                f.dm_file(
                    42,
                    "alice",
                    switchboard_test_support::fake_telegram::SentFile {
                        kind,
                        content,
                        name: (kind != "photo").then_some(name),
                        mime: (kind != "photo").then_some(mime),
                        caption,
                    },
                );
            }
            Fake::Slack(f) => {
                f.dm_file("U42", caption, name, mime, content);
            }
            Fake::Discord(f) => {
                f.dm_file("42", "alice", caption, (name, mime, content));
            }
        }
    }

    /// The files the bot sent, in order: `(chat, name, content, caption)`.
    pub fn uploads(&self) -> Vec<(String, String, Vec<u8>, Option<String>)> {
        match &self.fake {
            Fake::Telegram(f) => f
                .uploads()
                .into_iter()
                .map(|u| (u.chat_id.to_string(), u.file_name, u.content, u.caption))
                .collect(),
            Fake::Slack(f) => f
                .uploads()
                .into_iter()
                .map(|u| (u.channel, u.name, u.content, u.comment))
                .collect(),
            Fake::Discord(f) => f
                .uploads()
                .into_iter()
                .map(|u| {
                    let caption = Some(u.content_text).filter(|c| !c.is_empty());
                    (u.channel, u.name, u.content, caption)
                })
                .collect(),
        }
    }

    /// The bot's messages in `chat`, in posting order.
    pub fn messages(&self, chat: &str) -> Vec<Msg> {
        match &self.fake {
            Fake::Telegram(f) => f
                .bot_messages(chat.parse().unwrap())
                .into_iter()
                .map(|m| Msg {
                    id: m.message_id.to_string(),
                    text: m.text,
                    buttons: m.buttons,
                })
                .collect(),
            Fake::Slack(f) => f
                .bot_messages(chat)
                .into_iter()
                .map(|m| Msg {
                    id: m.ts,
                    text: m.text,
                    buttons: m.buttons,
                })
                .collect(),
            Fake::Discord(f) => f
                .bot_messages(chat)
                .into_iter()
                .map(|m| Msg {
                    id: m.id,
                    text: m.content,
                    buttons: m.components,
                })
                .collect(),
        }
    }

    /// User 42 presses the button with `data` under message `msg` of `chat`.
    pub fn press(&self, chat: &str, msg: &str, data: &str) {
        match &self.fake {
            Fake::Telegram(_) => panic!("press: the Telegram scenarios press through the fake"),
            Fake::Slack(f) => {
                f.press(chat, msg, "U42", data);
            }
            Fake::Discord(f) => {
                f.press(chat, msg, "42", data);
            }
        }
    }

    /// The next message the bot sends is answered 429.
    pub fn rate_limit_sends(&self) {
        match &self.fake {
            Fake::Telegram(f) => f.rate_limit("sendMessage", 1, 1),
            Fake::Slack(f) => f.rate_limit("chat.postMessage", 1, 1),
            Fake::Discord(f) => f.rate_limit("POST /channels/", 1, 0.5),
        }
    }

    /// Waits (up to [`WAIT`]) for a bot message in `chat` that satisfies `f`.
    pub async fn wait(&self, chat: &str, what: &str, f: impl Fn(&Msg) -> bool) -> Msg {
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            if let Some(m) = self.messages(chat).into_iter().find(|m| f(m)) {
                return m;
            }
            if std::time::Instant::now() > deadline {
                panic!(
                    "timed out waiting for {what}; messages: {:?}",
                    self.messages(chat)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The last user message of the `n`-th request to the model.
    pub fn user_text(&self, n: usize) -> String {
        let reqs = self.llm.chat_requests();
        let msgs = reqs[n].body["messages"].as_array().unwrap().clone();
        msgs.iter()
            .rev()
            .find(|m| m["role"] == "user")
            .map(|m| m["content"].as_str().unwrap_or_default().to_string())
            .unwrap_or_default()
    }
}
