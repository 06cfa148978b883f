//! `[channels.email]` and its `SWITCHBOARD_EMAIL_*` variables.

use std::time::Duration;

use serde::Deserialize;
use switchboard_settings::{csv, env, env_parse};

use super::{ChannelAccess, ChannelsSection, SettingsError, channel_access};
use crate::email::{EmailConfig, Security};

/// `[channels.email]`.
#[derive(Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmailSection {
    /// The bot's address (`agent@example.org`).
    pub address: Option<String>,
    /// The name on its mail (default `Switchboard`).
    pub display_name: Option<String>,
    /// The IMAP server (default: the address's domain).
    pub imap_host: Option<String>,
    pub imap_port: Option<u16>,
    /// `tls` (default), `starttls` or `none` (only to localhost).
    pub imap_security: Option<String>,
    /// The SMTP server (default: the IMAP server).
    pub smtp_host: Option<String>,
    pub smtp_port: Option<u16>,
    /// `tls` (default), `starttls` or `none` (only to localhost).
    pub smtp_security: Option<String>,
    /// The login of both servers (default: the address).
    pub username: Option<String>,
    pub password: Option<String>,
    /// The mailbox read (default `INBOX`).
    pub mailbox: Option<String>,
    /// Addresses (`ann@example.org`) or domains (`example.org`) whose mail is taken.
    pub allowed_senders: Option<Vec<String>>,
    /// Addresses that may answer approvals (default: whoever asked).
    pub approvers: Option<Vec<String>>,
    pub approval_mode: Option<String>,
    /// One session per thread (default true), or one per sender.
    pub thread_sessions: Option<bool>,
    /// The authserv-id whose `Authentication-Results` are believed (`mx.example.org`).
    pub trusted_authserv_id: Option<String>,
    /// Take only mail with a passing dkim, spf or dmarc result from that server.
    pub require_authentication: Option<bool>,
    /// Seconds between looks at the mailbox without IDLE (the length of one IDLE with it).
    pub poll_interval_secs: Option<u64>,
    pub max_message_bytes: Option<u64>,
    /// More root certificates (PEM) to trust, for servers with a private CA's certificate.
    pub ca_file: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for EmailSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmailSection")
            .field("address", &self.address)
            .field("imap_host", &self.imap_host)
            .finish_non_exhaustive()
    }
}

/// `[channels.email]` and `SWITCHBOARD_EMAIL_*`: configured when an address is given.
pub(super) fn email_settings(
    config: &mut crate::GatewayConfig,
    channels: &ChannelsSection,
) -> Result<Option<EmailConfig>, SettingsError> {
    let file = channels.email.clone().unwrap_or_default();
    let Some(address) = env("SWITCHBOARD_EMAIL_ADDRESS").or(file.address.clone()) else {
        if channels.email.is_some() {
            return Err(SettingsError::new(
                "[channels.email]: no address: set `address` or SWITCHBOARD_EMAIL_ADDRESS",
            ));
        }
        return Ok(None);
    };
    let Some((_, domain)) = address.rsplit_once('@') else {
        return Err(SettingsError::new(format!(
            "SWITCHBOARD_EMAIL_ADDRESS / [channels.email] address: {address:?} is not an email address"
        )));
    };
    let password = env("SWITCHBOARD_EMAIL_PASSWORD")
        .or(file.password.clone())
        .ok_or_else(|| {
            SettingsError::new(
                "[channels.email]: no password: set `password` or SWITCHBOARD_EMAIL_PASSWORD",
            )
        })?;
    let imap_host = env("SWITCHBOARD_EMAIL_IMAP_HOST")
        .or(file.imap_host.clone())
        .unwrap_or_else(|| domain.to_string());
    let mut c = EmailConfig::new(address.clone(), &imap_host, password);
    let security =
        |var: &str, key: &str, from_file: &Option<String>| match env(var).or(from_file.clone()) {
            None => Ok(None),
            Some(v) => v
                .parse::<Security>()
                .map(Some)
                .map_err(|e| SettingsError::new(format!("{var} / [channels.email] {key}: {e}"))),
        };
    if let Some(s) = security(
        "SWITCHBOARD_EMAIL_IMAP_SECURITY",
        "imap_security",
        &file.imap_security,
    )? {
        c.imap.security = s;
        c.imap.port = if s == Security::Tls { 993 } else { 143 };
    }
    if let Some(p) = env_parse::<u16>("SWITCHBOARD_EMAIL_IMAP_PORT")?.or(file.imap_port) {
        c.imap.port = p;
    }
    c.smtp.host = env("SWITCHBOARD_EMAIL_SMTP_HOST")
        .or(file.smtp_host.clone())
        .unwrap_or(imap_host);
    if let Some(s) = security(
        "SWITCHBOARD_EMAIL_SMTP_SECURITY",
        "smtp_security",
        &file.smtp_security,
    )? {
        c.smtp.security = s;
        c.smtp.port = if s == Security::Tls { 465 } else { 587 };
    }
    if let Some(p) = env_parse::<u16>("SWITCHBOARD_EMAIL_SMTP_PORT")?.or(file.smtp_port) {
        c.smtp.port = p;
    }
    if let Some(u) = env("SWITCHBOARD_EMAIL_USERNAME").or(file.username.clone()) {
        c.username = u;
    }
    if let Some(n) = env("SWITCHBOARD_EMAIL_DISPLAY_NAME").or(file.display_name.clone()) {
        c.display_name = n;
    }
    if let Some(m) = env("SWITCHBOARD_EMAIL_MAILBOX").or(file.mailbox.clone()) {
        c.mailbox = m;
    }
    c.allowed_senders = env("SWITCHBOARD_EMAIL_ALLOWED_SENDERS")
        .map(|v| csv(&v))
        .or(file.allowed_senders.clone())
        .unwrap_or_default();
    if c.allowed_senders.is_empty() {
        return Err(SettingsError::new(
            "[channels.email]: no allowed_senders (SWITCHBOARD_EMAIL_ALLOWED_SENDERS): list the addresses or domains whose mail is answered",
        ));
    }
    c.trusted_authserv_id =
        env("SWITCHBOARD_EMAIL_TRUSTED_AUTHSERV_ID").or(file.trusted_authserv_id.clone());
    if let Some(r) = env_parse::<bool>("SWITCHBOARD_EMAIL_REQUIRE_AUTHENTICATION")?
        .or(file.require_authentication)
    {
        c.require_authentication = r;
    }
    if c.require_authentication && c.trusted_authserv_id.is_none() {
        return Err(SettingsError::new(
            "[channels.email] require_authentication needs trusted_authserv_id (whose results to believe)",
        ));
    }
    if let Some(s) =
        env_parse::<u64>("SWITCHBOARD_EMAIL_POLL_INTERVAL_SECS")?.or(file.poll_interval_secs)
    {
        if !(1..=3600).contains(&s) {
            return Err(SettingsError::new(
                "[channels.email] poll_interval_secs: between 1 and 3600",
            ));
        }
        c.poll_interval = Duration::from_secs(s);
    }
    if let Some(m) =
        env_parse::<u64>("SWITCHBOARD_EMAIL_MAX_MESSAGE_BYTES")?.or(file.max_message_bytes)
    {
        c.max_message_bytes = m;
    }
    c.ca_file = env("SWITCHBOARD_EMAIL_CA_FILE")
        .map(std::path::PathBuf::from)
        .or(file.ca_file.clone());
    for (var, instead) in [
        (
            "SWITCHBOARD_EMAIL_ALLOWED_USERS",
            "SWITCHBOARD_EMAIL_ALLOWED_SENDERS",
        ),
        (
            "SWITCHBOARD_EMAIL_ALLOWED_CHATS",
            "SWITCHBOARD_EMAIL_ALLOWED_SENDERS",
        ),
    ] {
        if env(var).is_some() {
            return Err(SettingsError::new(format!(
                "{var} is not an email setting: use {instead} (addresses or domains)"
            )));
        }
    }
    // The channel checks senders itself (addresses and domains, and their authentication),
    // and never answers a stranger (no pairing by mail): to the gateway it is open.
    config.open_channels.push(c.name.clone());
    channel_access(
        config,
        &c.name,
        "SWITCHBOARD_EMAIL",
        ChannelAccess {
            chats: &None,
            users: &None,
            approvers: &file.approvers,
            mode: &file.approval_mode,
            thread_sessions: file.thread_sessions,
        },
    )?;
    crate::email::EmailChannel::new(c.clone()).map_err(|e| {
        SettingsError::new(format!("[channels.email] (or SWITCHBOARD_EMAIL_*): {e}"))
    })?;
    Ok(Some(c))
}
