//! IMAP connections: TCP, TLS (from the first byte, or after `STARTTLS`, which is then
//! required) on rustls with the webpki roots, and the login.

use std::sync::Arc;

use futures::TryStreamExt as _;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_util::either::Either;

use super::{EmailConfig, Security};

pub(super) type Conn = Either<TcpStream, TlsStream<TcpStream>>;
pub(super) type Session = async_imap::Session<Conn>;

/// How long connecting (TCP, TLS, greeting, login) may take.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// A logged-in session. The error is a reason without secrets.
pub(super) async fn login(cfg: &EmailConfig) -> Result<Session, String> {
    tokio::time::timeout(CONNECT_TIMEOUT, connect_and_login(cfg))
        .await
        .map_err(|_| {
            format!(
                "IMAP: {}:{} did not answer in time",
                cfg.imap.host, cfg.imap.port
            )
        })?
}

async fn connect_and_login(cfg: &EmailConfig) -> Result<Session, String> {
    let e = &cfg.imap;
    let tcp = TcpStream::connect((e.host.as_str(), e.port))
        .await
        .map_err(|err| format!("IMAP: connecting to {}:{}: {err}", e.host, e.port))?;
    let client = match e.security {
        Security::Tls => {
            let mut c = async_imap::Client::new(Either::Right(tls(cfg, &e.host, tcp).await?));
            greeting(&mut c).await?;
            c
        }
        Security::StartTls => {
            let mut plain = async_imap::Client::new(Either::Left(tcp));
            greeting(&mut plain).await?;
            plain
                .run_command_and_check_ok("STARTTLS", None)
                .await
                .map_err(|err| format!("IMAP: STARTTLS refused by {}: {err}", e.host))?;
            let Either::Left(tcp) = plain.into_inner() else {
                return Err("IMAP: STARTTLS on a TLS connection".into());
            };
            async_imap::Client::new(Either::Right(tls(cfg, &e.host, tcp).await?))
        }
        Security::None => {
            let mut c = async_imap::Client::new(Either::Left(tcp));
            greeting(&mut c).await?;
            c
        }
    };
    client
        .login(&cfg.username, &cfg.password)
        .await
        .map_err(|(err, _)| format!("IMAP: logging in as {}: {err}", cfg.username))
}

async fn greeting(c: &mut async_imap::Client<Conn>) -> Result<(), String> {
    match c.read_response().await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err("IMAP: the server closed the connection before its greeting".into()),
        Err(e) => Err(format!("IMAP: reading the greeting: {e}")),
    }
}

async fn tls(
    cfg: &EmailConfig,
    host: &str,
    tcp: TcpStream,
) -> Result<TlsStream<TcpStream>, String> {
    let mut roots =
        rustls::RootCertStore::from_iter(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = &cfg.ca_file {
        use rustls::pki_types::pem::PemObject as _;
        let certs = rustls::pki_types::CertificateDer::pem_file_iter(path)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| format!("ca_file {}: {e}", path.display()))?;
        let (added, _) = roots.add_parsable_certificates(certs);
        if added == 0 {
            return Err(format!("ca_file {}: no certificate in it", path.display()));
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| format!("TLS: {e}"))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|e| format!("TLS: {host:?}: {e}"))?;
    TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS with {host}: {e}"))
}

/// A whole mail by UID, or `None` when the mailbox has no such mail.
pub(super) async fn fetch_mail(session: &mut Session, uid: u32) -> Result<Option<Vec<u8>>, String> {
    let fetched: Vec<_> = session
        .uid_fetch(uid.to_string(), "(UID BODY.PEEK[])")
        .await
        .map_err(|e| format!("IMAP: fetching mail {uid}: {e}"))?
        .try_collect()
        .await
        .map_err(|e| format!("IMAP: fetching mail {uid}: {e}"))?;
    Ok(fetched
        .iter()
        .find(|f| f.uid == Some(uid))
        .and_then(|f| f.body())
        .map(<[u8]>::to_vec))
}

/// An attachment's source: `UIDVALIDITY:UID:INDEX` in the channel's mailbox.
pub(super) fn source(validity: u32, uid: u32, index: usize) -> String {
    format!("{validity}:{uid}:{index}")
}

/// Fetches an attachment again from the mailbox, by its [`source`].
pub(super) async fn fetch_attachment(cfg: &EmailConfig, source: &str) -> Result<Vec<u8>, String> {
    let unfetchable = || "this attachment cannot be fetched".to_string();
    let mut parts = source.split(':').map(str::parse::<u64>);
    let (Some(Ok(validity)), Some(Ok(uid)), Some(Ok(index)), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(unfetchable());
    };
    let mut session = login(cfg).await?;
    let mailbox = session
        .examine(&cfg.mailbox)
        .await
        .map_err(|e| format!("IMAP: opening {}: {e}", cfg.mailbox))?;
    if mailbox.uid_validity.map(u64::from) != Some(validity) {
        return Err(
            "the mailbox changed since this mail came (its UIDVALIDITY); the attachment is gone"
                .into(),
        );
    }
    let uid = u32::try_from(uid).map_err(|_| unfetchable())?;
    let raw = fetch_mail(&mut session, uid)
        .await?
        .ok_or("the mail is no longer in the mailbox")?;
    let _ = session.logout().await;
    super::mail::attachment(&raw, usize::try_from(index).map_err(|_| unfetchable())?)
        .ok_or_else(unfetchable)
}
