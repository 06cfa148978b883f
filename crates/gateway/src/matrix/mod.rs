//! The Matrix channel, on `matrix-sdk` (the Matrix foundation's Rust SDK): client-server
//! calls, end-to-end encryption, media and Markdown are the SDK's; this module says what is
//! Switchboard's.
//!
//! - **Login.** With a password the first start logs in as a new device named
//!   [`MatrixConfig::device_name`] and keeps the session (user, device, access token) in
//!   `session.json` (0600) beside the SDK's SQLite stores (state and crypto) in
//!   [`MatrixConfig::store_dir`]: later starts restore it, so the device and its encryption
//!   keys stay the same. With an access token, `whoami` names the user and device.
//! - **Sync** ([`sync`]): long-polls `/sync` from the token kept in the channel state
//!   (`sync_token`), hands every new event of the response to the sink, and only then
//!   stores the response's `next_batch`: a crash in between syncs the same events again,
//!   and the gateway takes each event id once — nothing lost, nothing repeated. The first
//!   start takes the rooms as they are and answers only what comes after.
//! - **Encrypted rooms**: the SDK decrypts what comes in and encrypts what goes out. An
//!   event it cannot decrypt is answered in words in its room (and logged), not dropped.
//! - **Invites** are accepted from the allowed users, into the allowed rooms, and for direct
//!   chats from anyone (whom the gateway then pairs like any unknown DM); others declined.
//! - **Conversations**: a room of two (or marked direct) is a DM, others are groups where
//!   the bot answers when mentioned (unless [`MatrixConfig::require_mention`] is off); a
//!   thread (`m.thread`) is its own conversation, answered in the thread.
//! - **Replies** are Markdown rendered to Matrix HTML (`formatted_body`), streamed by edits
//!   (`m.replace`, each with the whole text) paced by the kit's [`Outbox`]; approvals have no buttons: their prompts say to
//!   reply `allow` / `deny` or react ✅ / ❌ (`dispatcher/answers.rs`).
//! - **Files** in (images, files, audio, video — downloaded and decrypted by the SDK) and
//!   out (`send_file` uploads, encrypted in encrypted rooms).
//!
//! Secrets (the password, the access token) are never logged or returned.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use matrix_sdk::Client;
use matrix_sdk::ruma::events::relation::Thread;
use matrix_sdk::ruma::events::room::message::{
    ReplacementMetadata, RoomMessageEventContent, TextMessageEventContent,
};
use matrix_sdk::ruma::{OwnedEventId, OwnedRoomId};
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use crate::channel::{
    Attachment, Button, ButtonPress, Channel, ChannelContext, ChannelError, ChannelInfo, ChatRef,
    Fetched, OutgoingFile,
};
use crate::health::{ChannelHealth, Health};
use crate::platform::{Limits, Outbox, Rate};

mod session;
mod sync;

/// The longest text of one message: Matrix events are at most 64 KiB with the body twice
/// (plain and HTML), encrypted on top.
pub const MAX_CHARS: usize = 16_000;

/// `[channels.matrix]`, checked.
#[derive(Clone)]
pub struct MatrixConfig {
    /// The channel's name (default `matrix`).
    pub name: String,
    /// The homeserver's URL (`https://matrix.example.org`).
    pub homeserver: String,
    /// The bot's user: `@bot:example.org` or its local part.
    pub user: String,
    /// Secret: never logged.
    pub password: Option<String>,
    /// Secret: never logged. Used instead of a password when set.
    pub access_token: Option<String>,
    /// The name of the device the bot logs in as.
    pub device_name: String,
    /// Where the session and the SDK's stores are kept (`DATA_DIR/matrix/NAME`).
    pub store_dir: PathBuf,
    /// Users (`@ann:example.org`) whose invites are accepted.
    pub allowed_users: Vec<String>,
    /// Rooms (`!id:example.org`) whose invites are accepted.
    pub allowed_rooms: Vec<String>,
    /// In rooms of more than two, answer only when mentioned (default true).
    pub require_mention: bool,
    /// Least time between two edits of one reply (default 1 s).
    pub edit_interval: Duration,
    /// How long one `/sync` long-poll waits for something new (default 30 s).
    pub sync_timeout: Duration,
}

impl std::fmt::Debug for MatrixConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MatrixConfig")
            .field("name", &self.name)
            .field("homeserver", &self.homeserver)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "[redacted]"))
            .field(
                "access_token",
                &self.access_token.as_ref().map(|_| "[redacted]"),
            )
            .field("store_dir", &self.store_dir)
            .finish_non_exhaustive()
    }
}

impl MatrixConfig {
    /// The defaults, for `user` on `homeserver`, keeping its state in `store_dir`.
    pub fn new(homeserver: impl Into<String>, user: impl Into<String>, store_dir: PathBuf) -> Self {
        Self {
            name: "matrix".into(),
            homeserver: homeserver.into(),
            user: user.into(),
            password: None,
            access_token: None,
            device_name: "Switchboard".into(),
            store_dir,
            allowed_users: Vec::new(),
            allowed_rooms: Vec::new(),
            require_mention: true,
            edit_interval: Duration::from_secs(1),
            sync_timeout: Duration::from_secs(30),
        }
    }
}

/// The Matrix channel (see the module docs).
pub struct MatrixChannel {
    cfg: MatrixConfig,
    info: ChannelInfo,
    /// Logged in (or restored) on first use: `run`, a send, `test`.
    client: OnceCell<Client>,
    health: Arc<Health>,
    /// Paces sends and edits (matrix-sdk makes the HTTP calls; the kit's outbound scheduler
    /// still decides when): at most 10 events a second, edits of one room at the edit
    /// interval, a newer edit of a message taking the place of one still waiting.
    outbox: Outbox,
}

impl MatrixChannel {
    pub fn new(cfg: MatrixConfig) -> Result<Self, String> {
        let hs = cfg.homeserver.trim();
        if !(hs.starts_with("https://") || hs.starts_with("http://")) {
            return Err(format!(
                "homeserver {hs:?}: expected an http:// or https:// URL"
            ));
        }
        if cfg.user.trim().is_empty() {
            return Err("user: the bot's Matrix user (@bot:example.org) is missing".into());
        }
        if cfg.password.is_none() && cfg.access_token.is_none() {
            return Err("set password or access_token".into());
        }
        if cfg.edit_interval > Duration::from_secs(3600) {
            return Err("edit_interval: at most one hour".into());
        }
        let info = ChannelInfo::new(cfg.name.clone(), MAX_CHARS)
            .edit_interval(cfg.edit_interval)
            .without_buttons(true);
        let outbox = Outbox::new(
            Limits::new()
                .with("bot", Rate::per(10, Duration::from_secs(1)))
                .with("edit", Rate::spaced(cfg.edit_interval)),
        )
        .for_channel(&cfg.name);
        Ok(Self {
            cfg,
            info,
            client: OnceCell::new(),
            health: Arc::new(Health::new()),
            outbox,
        })
    }

    /// The logged-in client.
    async fn client(&self) -> Result<&Client, ChannelError> {
        self.client
            .get_or_try_init(|| session::connect(&self.cfg))
            .await
            .map_err(|reason| self.error(reason))
    }

    fn error(&self, reason: impl Into<String>) -> ChannelError {
        ChannelError::Other {
            channel: self.cfg.name.clone(),
            reason: reason.into(),
        }
    }

    fn api_error(&self, method: &str, e: impl std::fmt::Display) -> ChannelError {
        ChannelError::Api {
            channel: self.cfg.name.clone(),
            method: method.into(),
            code: 0,
            description: e.to_string(),
        }
    }

    async fn room(&self, chat: &ChatRef) -> Result<matrix_sdk::Room, ChannelError> {
        let client = self.client().await?;
        let id = OwnedRoomId::try_from(chat.id.as_str())
            .map_err(|e| self.error(format!("{:?} is no room id: {e}", chat.id)))?;
        client
            .get_room(&id)
            .ok_or_else(|| self.error(format!("the bot is not in room {}", chat.id)))
    }

    fn event_id(&self, id: &str) -> Result<OwnedEventId, ChannelError> {
        OwnedEventId::try_from(id).map_err(|e| self.error(format!("{id:?} is no event id: {e}")))
    }

    /// The thread a chat's messages go to, as a relation (`None`: the room itself).
    fn thread(&self, chat: &ChatRef) -> Result<Option<Thread>, ChannelError> {
        chat.thread
            .as_deref()
            .map(|root| {
                let root = self.event_id(root)?;
                Ok(Thread::plain(root.clone(), root))
            })
            .transpose()
    }
}

#[async_trait]
impl Channel for MatrixChannel {
    fn info(&self) -> &ChannelInfo {
        &self.info
    }

    async fn run(
        &self,
        ctx: ChannelContext,
        cancel: CancellationToken,
    ) -> Result<(), ChannelError> {
        sync::run(self, ctx, cancel).await
    }

    async fn send(
        &self,
        chat: &ChatRef,
        text: &str,
        _buttons: &[Button],
    ) -> Result<String, ChannelError> {
        let room = self.room(chat).await?;
        self.outbox
            .turn(&["bot".to_owned(), format!("chat:{}", chat.id)])
            .await;
        let mut content = RoomMessageEventContent::text_markdown(text);
        if let Some(thread) = self.thread(chat)? {
            content.relates_to = Some(matrix_sdk::ruma::events::room::message::Relation::Thread(
                thread,
            ));
        }
        let sent = room
            .send(content)
            .await
            .map_err(|e| self.api_error("send", e))?;
        Ok(sent.response.event_id.to_string())
    }

    async fn edit(
        &self,
        chat: &ChatRef,
        message_id: &str,
        text: &str,
        _buttons: &[Button],
    ) -> Result<(), ChannelError> {
        let room = self.room(chat).await?;
        let original = self.event_id(message_id)?;
        let keys = [
            "bot".to_owned(),
            format!("chat:{}", chat.id),
            format!("edit:{}", chat.id),
        ];
        if !self.outbox.edit_turn(message_id, &keys).await {
            return Ok(()); // a newer edit of this message goes out instead
        }
        let content = RoomMessageEventContent::text_markdown(text)
            .make_replacement(ReplacementMetadata::new(original, None));
        room.send(content)
            .await
            .map_err(|e| self.api_error("edit", e))?;
        Ok(())
    }

    /// Nothing to acknowledge: Matrix has no buttons (answers come as replies or
    /// reactions, and the prompt's edit shows the decision).
    async fn answer_press(
        &self,
        _press: &ButtonPress,
        _text: Option<&str>,
    ) -> Result<(), ChannelError> {
        Ok(())
    }

    async fn test(&self) -> Result<String, ChannelError> {
        let client = self.client().await?;
        let me = client
            .whoami()
            .await
            .map_err(|e| self.api_error("whoami", e))?;
        Ok(match me.device_id {
            Some(d) => format!("{} (device {d})", me.user_id),
            None => me.user_id.to_string(),
        })
    }

    async fn open_link(&self) -> Result<Option<String>, ChannelError> {
        let client = self.client().await?;
        Ok(client.user_id().map(|u| format!("https://matrix.to/#/{u}")))
    }

    async fn send_file(&self, chat: &ChatRef, file: &OutgoingFile) -> Result<String, ChannelError> {
        let room = self.room(chat).await?;
        self.outbox
            .turn(&["bot".to_owned(), format!("chat:{}", chat.id)])
            .await;
        let mime: mime::Mime = file.mime.parse().unwrap_or(mime::APPLICATION_OCTET_STREAM);
        let mut config = matrix_sdk::attachment::AttachmentConfig::new().caption(
            file.caption
                .as_deref()
                .map(TextMessageEventContent::markdown),
        );
        if let Some(root) = chat.thread.as_deref() {
            config = config.reply(Some(matrix_sdk::room::reply::Reply {
                event_id: self.event_id(root)?,
                enforce_thread: matrix_sdk::room::reply::EnforceThread::Threaded(
                    matrix_sdk::ruma::events::room::message::ReplyWithinThread::No,
                ),
                add_mentions: matrix_sdk::ruma::events::room::message::AddMentions::No,
            }));
        }
        let sent = room
            .send_attachment(file.name.clone(), &mime, file.bytes.to_vec(), config)
            .await
            .map_err(|e| self.api_error("send_attachment", e))?;
        Ok(sent.event_id.to_string())
    }

    async fn fetch(&self, attachment: &Attachment, max_bytes: u64) -> Result<Fetched, String> {
        if attachment.size.is_some_and(|s| s > max_bytes) {
            return Err(format!(
                "{} is larger than the limit of {max_bytes} bytes",
                attachment.name.as_deref().unwrap_or("the file")
            ));
        }
        let source = attachment
            .source
            .as_deref()
            .ok_or("this attachment cannot be fetched")?;
        let source: matrix_sdk::ruma::events::room::MediaSource =
            serde_json::from_str(source).map_err(|_| "this attachment cannot be fetched")?;
        let client = self.client().await.map_err(|e| e.to_string())?;
        let bytes = client
            .media()
            .get_media_content(
                &matrix_sdk::media::MediaRequestParameters {
                    source,
                    format: matrix_sdk::media::MediaFormat::File,
                },
                false,
            )
            .await
            .map_err(|e| format!("downloading it from the homeserver failed: {e}"))?;
        if bytes.len() as u64 > max_bytes {
            return Err(format!(
                "{} is larger than the limit of {max_bytes} bytes",
                attachment.name.as_deref().unwrap_or("the file")
            ));
        }
        Ok(Fetched {
            bytes: bytes.into(),
            name: attachment
                .name
                .clone()
                .unwrap_or_else(|| attachment.kind.clone()),
        })
    }

    fn status(&self) -> String {
        self.health.status()
    }

    fn health(&self) -> ChannelHealth {
        self.health.snapshot()
    }
}
