//! The email channel: IMAP in (`async-imap`, IDLE where the server has it, polling
//! otherwise), SMTP out (`lettre`), MIME read by `mail-parser`. This module says what is
//! Switchboard's.
//!
//! - **Who is heard.** A mail from an allowed sender (an address, or a whole domain) is
//!   taken; anyone else's is dropped and logged — never answered, so that a forged or stray
//!   sender gets no mail back (no pairing by mail). Mail from the bot itself, from mailer
//!   daemons and from robots (`Auto-Submitted`, `Precedence: bulk`) is never answered either.
//! - **Sender authentication.** With [`EmailConfig::trusted_authserv_id`] set, the
//!   topmost `Authentication-Results` header that server added (RFC 8601) is read: a failing
//!   `dkim`, `spf` or `dmarc` refuses the mail (and with
//!   [`EmailConfig::require_authentication`], so does one without a pass that vouches for
//!   the `From:` domain: `dmarc=pass`, or an aligned `dkim`/`spf` pass).
//!   Without one, the `From:` address is taken on trust (the start-up log says so).
//! - **Conversations.** A thread — by `References` / `In-Reply-To`, rooted at its first mail —
//!   is one conversation (`ChatKind::Thread`: the sender's address, the root's Message-ID),
//!   so one session. The reply is **one mail at the end of the run** (the dispatcher keeps
//!   the text whole: [`ChannelInfo::whole_replies`]) in the same thread (`In-Reply-To`,
//!   `References`, `Re:` subject), with a text and an HTML part (Markdown rendered);
//!   files the agent shares go as attachments, files received are fetched again from the
//!   mailbox when the agent needs them.
//! - **Nothing lost, nothing twice.** The mailbox is read from a UID cursor kept in the
//!   channel state (`cursor` = `UIDVALIDITY:UID`), advanced only after each mail was
//!   stored by the gateway (which takes each Message-ID once); handled mail is marked
//!   `\Seen`. The first start (or a new UIDVALIDITY) hands in the unseen mail only (each
//!   marked `\Seen` once stored), then stores the cursor at the end of the mailbox.
//! - **Approvals** have no buttons: the prompt mail lists the calls and says to reply
//!   `allow` or `deny [reason]` (`dispatcher/answers.rs`); the quoted prompt under a reply
//!   is cut off before the answer is read.
//!
//! Secrets (the password) are never logged or returned.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};
use tokio_util::sync::CancellationToken;

use crate::channel::{
    Attachment, Button, ButtonPress, Channel, ChannelContext, ChannelError, ChannelInfo,
    ChannelState, ChatRef, Fetched, OutgoingFile,
};
use crate::health::{ChannelHealth, Health};

mod imap;
mod mail;
mod receive;

/// The longest text of one mail (longer replies are split over several).
pub const MAX_CHARS: usize = 100_000;

/// How a connection is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Security {
    /// TLS from the first byte (IMAP 993, SMTP 465).
    Tls,
    /// Plain, then `STARTTLS` — required, never skipped (IMAP 143, SMTP 587).
    StartTls,
    /// No TLS: only allowed to a loopback address (a server on the same machine).
    None,
}

impl std::str::FromStr for Security {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "tls" => Ok(Self::Tls),
            "starttls" => Ok(Self::StartTls),
            "none" => Ok(Self::None),
            other => Err(format!("{other:?} is not `tls`, `starttls` or `none`")),
        }
    }
}

/// A mail server to connect to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
    pub security: Security,
}

/// `[channels.email]`, checked.
#[derive(Clone)]
pub struct EmailConfig {
    /// The channel's name (default `email`).
    pub name: String,
    /// The bot's address: where people write, and the `From:` of its mail.
    pub address: String,
    /// The name on its mail (default `Switchboard`).
    pub display_name: String,
    pub imap: Endpoint,
    pub smtp: Endpoint,
    /// The login of both servers (default: the address).
    pub username: String,
    /// Secret: never logged.
    pub password: String,
    /// The mailbox read (default `INBOX`).
    pub mailbox: String,
    /// Senders taken: addresses (`ann@example.org`) or domains (`example.org`, `@example.org`).
    pub allowed_senders: Vec<String>,
    /// The authserv-id of the server whose `Authentication-Results` are believed (the
    /// receiving MTA's, e.g. `mx.example.org`); `None`: senders are taken on trust.
    pub trusted_authserv_id: Option<String>,
    /// Take only mail for which that server has a passing dkim, spf or dmarc result.
    pub require_authentication: bool,
    /// Without IDLE, how often the mailbox is looked at; with it, how long one IDLE lasts.
    pub poll_interval: Duration,
    /// Larger mail is not read (logged and skipped; default 25 MiB).
    pub max_message_bytes: u64,
    /// More root certificates (PEM) to trust besides the Mozilla ones, for servers with a
    /// certificate of a private CA.
    pub ca_file: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for EmailConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmailConfig")
            .field("name", &self.name)
            .field("address", &self.address)
            .field("imap", &self.imap)
            .field("smtp", &self.smtp)
            .field("username", &self.username)
            .field("password", &"[redacted]")
            .finish_non_exhaustive()
    }
}

impl EmailConfig {
    /// The defaults: `address` on `host` (IMAP over TLS on 993, SMTP over TLS on 465),
    /// logging in as the address.
    pub fn new(address: impl Into<String>, host: &str, password: impl Into<String>) -> Self {
        let address = address.into();
        Self {
            name: "email".into(),
            display_name: "Switchboard".into(),
            imap: Endpoint {
                host: host.into(),
                port: 993,
                security: Security::Tls,
            },
            smtp: Endpoint {
                host: host.into(),
                port: 465,
                security: Security::Tls,
            },
            username: address.clone(),
            address,
            password: password.into(),
            mailbox: "INBOX".into(),
            allowed_senders: Vec::new(),
            trusted_authserv_id: None,
            require_authentication: false,
            poll_interval: Duration::from_secs(60),
            max_message_bytes: 25 * 1024 * 1024,
            ca_file: None,
        }
    }

    /// The domain of the address (message ids are made in it).
    fn domain(&self) -> &str {
        self.address
            .rsplit_once('@')
            .map(|(_, d)| d)
            .unwrap_or("localhost")
    }
}

/// Whether a host name is this machine (where a connection without TLS is allowed).
fn loopback(host: &str) -> bool {
    host == "localhost"
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The email channel (see the module docs).
pub struct EmailChannel {
    cfg: EmailConfig,
    info: ChannelInfo,
    smtp: AsyncSmtpTransport<Tokio1Executor>,
    /// The channel state, once `run` has it: the threads' subjects and references.
    state: OnceLock<Arc<dyn ChannelState>>,
    health: Arc<Health>,
}

impl EmailChannel {
    pub fn new(cfg: EmailConfig) -> Result<Self, String> {
        if !cfg.address.contains('@') {
            return Err(format!("address {:?}: not an email address", cfg.address));
        }
        if cfg.allowed_senders.is_empty() {
            return Err(
                "allowed_senders: nobody would be answered; list addresses or domains".into(),
            );
        }
        for (what, e) in [("imap", &cfg.imap), ("smtp", &cfg.smtp)] {
            if e.host.trim().is_empty() {
                return Err(format!("{what}_host is missing"));
            }
            if e.security == Security::None && !loopback(&e.host) {
                return Err(format!(
                    "{what}_security = \"none\" sends the password in the clear: only allowed to this machine (localhost), not {}",
                    e.host
                ));
            }
        }
        let extra_roots = match &cfg.ca_file {
            Some(path) => {
                std::fs::read(path).map_err(|e| format!("ca_file {}: {e}", path.display()))?
            }
            None => Vec::new(),
        };
        let tls = || -> Result<TlsParameters, String> {
            let mut params = TlsParameters::builder(cfg.smtp.host.clone());
            if !extra_roots.is_empty() {
                params = params.add_root_certificate(
                    Certificate::from_pem(&extra_roots)
                        .map_err(|e| format!("ca_file: no PEM certificates: {e}"))?,
                );
            }
            params
                .build_rustls()
                .map_err(|e| format!("SMTP TLS settings: {e}"))
        };
        let mut smtp = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&cfg.smtp.host)
            .port(cfg.smtp.port)
            .tls(match cfg.smtp.security {
                Security::Tls => Tls::Wrapper(tls()?),
                Security::StartTls => Tls::Required(tls()?),
                Security::None => Tls::None,
            })
            .timeout(Some(Duration::from_secs(60)));
        if !cfg.password.is_empty() {
            smtp = smtp.credentials(Credentials::new(cfg.username.clone(), cfg.password.clone()));
        }
        let info = ChannelInfo::new(cfg.name.clone(), MAX_CHARS)
            .without_buttons(false)
            .whole_replies();
        Ok(Self {
            info,
            smtp: smtp.build(),
            state: OnceLock::new(),
            health: Arc::new(Health::new()),
            cfg,
        })
    }

    fn error(&self, reason: impl Into<String>) -> ChannelError {
        ChannelError::Other {
            channel: self.cfg.name.clone(),
            reason: reason.into(),
        }
    }

    /// What the channel knows of a thread (its subject and references).
    async fn thread(&self, root: &str) -> mail::Thread {
        let stored = match self.state.get() {
            Some(s) => s.get(&thread_key(root)).await,
            None => None,
        };
        stored
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or_else(|| mail::Thread {
                subject: String::new(),
                references: vec![root.to_string()],
            })
    }

    /// Mails `text` (and a file) into a chat's thread; returns the mail's Message-ID.
    async fn mail(
        &self,
        chat: &ChatRef,
        text: &str,
        file: Option<mail::OutFile<'_>>,
    ) -> Result<String, ChannelError> {
        let root = chat.thread.clone().unwrap_or_default();
        let mut thread = if root.is_empty() {
            mail::Thread::default()
        } else {
            self.thread(&root).await
        };
        let id = format!("{}@{}", uuid::Uuid::new_v4().simple(), self.cfg.domain());
        let message = mail::reply(&self.cfg, &chat.id, &thread, &id, text, file)
            .map_err(|e| self.error(e))?;
        self.smtp.send(message).await.map_err(|e| {
            if e.is_permanent() {
                // The server refused this mail for good (no such recipient, too large …).
                ChannelError::Api {
                    channel: self.cfg.name.clone(),
                    method: "send".into(),
                    code: 400,
                    description: e.to_string(),
                }
            } else {
                ChannelError::Unreachable {
                    channel: self.cfg.name.clone(),
                    reason: e.to_string(),
                }
            }
        })?;
        if let Some(state) = self.state.get()
            && !root.is_empty()
        {
            thread.push(&id);
            let saved = async {
                state.set(&root_key(&id), &root).await?;
                state
                    .set(
                        &thread_key(&root),
                        &serde_json::to_string(&thread).map_err(|e| e.to_string())?,
                    )
                    .await
            };
            if let Err(e) = saved.await {
                tracing::warn!(channel = %self.cfg.name, error = %e, "storing a mail thread");
            }
        }
        Ok(id)
    }
}

/// The channel-state key of a thread's [`mail::Thread`].
fn thread_key(root: &str) -> String {
    format!("thread:{root}")
}

/// The channel-state key of the thread root of a message.
fn root_key(message_id: &str) -> String {
    format!("root:{message_id}")
}

#[async_trait]
impl Channel for EmailChannel {
    fn info(&self) -> &ChannelInfo {
        &self.info
    }

    async fn run(
        &self,
        ctx: ChannelContext,
        cancel: CancellationToken,
    ) -> Result<(), ChannelError> {
        let _ = self.state.set(ctx.state.clone());
        receive::run(self, ctx, cancel).await
    }

    async fn send(
        &self,
        chat: &ChatRef,
        text: &str,
        _buttons: &[Button],
    ) -> Result<String, ChannelError> {
        self.mail(chat, text, None).await
    }

    /// Sent mail cannot be changed: the dispatcher sends replies whole
    /// ([`ChannelInfo::whole_replies`]), and a settled prompt's note is not mailed again.
    async fn edit(
        &self,
        _chat: &ChatRef,
        _message_id: &str,
        _text: &str,
        _buttons: &[Button],
    ) -> Result<(), ChannelError> {
        Ok(())
    }

    async fn answer_press(
        &self,
        _press: &ButtonPress,
        _text: Option<&str>,
    ) -> Result<(), ChannelError> {
        Ok(())
    }

    async fn test(&self) -> Result<String, ChannelError> {
        let mut session = imap::login(&self.cfg).await.map_err(|e| self.error(e))?;
        session
            .examine(&self.cfg.mailbox)
            .await
            .map_err(|e| self.error(format!("IMAP: opening {}: {e}", self.cfg.mailbox)))?;
        let _ = session.logout().await;
        let smtp = self
            .smtp
            .test_connection()
            .await
            .map_err(|e| self.error(format!("SMTP: {e}")))?;
        if !smtp {
            return Err(self.error("SMTP: the server did not answer"));
        }
        Ok(format!(
            "{} (IMAP {}:{}, SMTP {}:{})",
            self.cfg.address,
            self.cfg.imap.host,
            self.cfg.imap.port,
            self.cfg.smtp.host,
            self.cfg.smtp.port
        ))
    }

    async fn open_link(&self) -> Result<Option<String>, ChannelError> {
        Ok(Some(format!("mailto:{}", self.cfg.address)))
    }

    async fn send_file(&self, chat: &ChatRef, file: &OutgoingFile) -> Result<String, ChannelError> {
        let text = file
            .caption
            .clone()
            .unwrap_or_else(|| format!("Attached: {}", file.name));
        self.mail(
            chat,
            &text,
            Some(mail::OutFile {
                name: &file.name,
                mime: &file.mime,
                bytes: &file.bytes,
            }),
        )
        .await
    }

    async fn fetch(&self, attachment: &Attachment, max_bytes: u64) -> Result<Fetched, String> {
        let name = attachment
            .name
            .clone()
            .unwrap_or_else(|| "attachment".into());
        if attachment.size.is_some_and(|s| s > max_bytes) {
            return Err(format!(
                "{name} is larger than the limit of {max_bytes} bytes"
            ));
        }
        let bytes = imap::fetch_attachment(
            &self.cfg,
            attachment
                .source
                .as_deref()
                .ok_or("this attachment cannot be fetched")?,
        )
        .await?;
        if bytes.len() as u64 > max_bytes {
            return Err(format!(
                "{name} is larger than the limit of {max_bytes} bytes"
            ));
        }
        Ok(Fetched {
            bytes: bytes.into(),
            name,
        })
    }

    fn status(&self) -> String {
        self.health.status()
    }

    fn health(&self) -> ChannelHealth {
        self.health.snapshot()
    }
}
