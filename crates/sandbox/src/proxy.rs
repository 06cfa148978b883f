//! The filtering HTTP(S) proxy of a sandbox whose network is an allowlist: the confined
//! process may connect only to this proxy's port (a Landlock TCP rule), and the proxy opens
//! a connection only to a host on the list — `CONNECT host:port` for HTTPS (the TLS stays
//! end to end: nothing is decrypted), an absolute `http://host/…` request for plain HTTP.
//! Anything else is answered `403` and logged.
//!
//! By hand over `httparse`: what is needed is a request head and a byte pipe, and the crates
//! that proxy HTTP are man-in-the-middle frameworks (decrypting TLS) or full servers — more
//! than a filter by host name wants, and more to trust.

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::SandboxError;

/// The largest request head the proxy reads.
const MAX_HEAD: usize = 16 * 1024;

/// A proxy listening on 127.0.0.1; stops when dropped.
#[derive(Debug)]
pub(crate) struct Proxy {
    port: u16,
    task: JoinHandle<()>,
}

impl Proxy {
    /// Starts one for `hosts` on the current Tokio runtime.
    pub(crate) fn start(hosts: Vec<String>) -> Result<Proxy, SandboxError> {
        let fail =
            |e: std::io::Error| SandboxError::Setup(format!("starting its network proxy: {e}"));
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|e| SandboxError::Setup(format!("starting its network proxy: {e}")))?;
        let std_listener = std::net::TcpListener::bind(("127.0.0.1", 0)).map_err(fail)?;
        std_listener.set_nonblocking(true).map_err(fail)?;
        let port = std_listener.local_addr().map_err(fail)?.port();
        let hosts: Arc<[String]> = hosts
            .into_iter()
            .map(|h| h.trim().to_ascii_lowercase())
            .collect();
        let task = runtime.spawn(async move {
            let listener = match TcpListener::from_std(std_listener) {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(error = %e, "the sandbox's network proxy did not start");
                    return;
                }
            };
            loop {
                let Ok((conn, _)) = listener.accept().await else {
                    continue;
                };
                let hosts = hosts.clone();
                tokio::spawn(async move {
                    if let Err(e) = serve(conn, &hosts).await {
                        tracing::debug!(error = %e, "sandbox proxy connection");
                    }
                });
            }
        });
        Ok(Proxy { port, task })
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Whether `host` is allowed by `hosts` (`example.com`, or `*.example.com` for any of its
/// subdomains).
pub(crate) fn allowed(hosts: &[String], host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    hosts.iter().any(|h| match h.strip_prefix("*.") {
        Some(domain) => host.len() > domain.len() && host.ends_with(&format!(".{domain}")),
        None => *h == host,
    })
}

/// One client connection: read its request head, check its host, pipe it through.
async fn serve(mut conn: TcpStream, hosts: &[String]) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let (method, target, head_len) = loop {
        let mut chunk = [0u8; 2048];
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf) {
            Ok(httparse::Status::Complete(len)) => {
                break (
                    req.method.unwrap_or_default().to_owned(),
                    req.path.unwrap_or_default().to_owned(),
                    len,
                );
            }
            Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => {}
            _ => return refuse(&mut conn, 400, "not an HTTP proxy request").await,
        }
    };
    let connect = method.eq_ignore_ascii_case("CONNECT");
    let Some((host, port)) = destination(&target, connect) else {
        return refuse(
            &mut conn,
            400,
            "the proxy takes CONNECT host:port or http:// requests",
        )
        .await;
    };
    if !allowed(hosts, &host) {
        tracing::info!(
            host,
            port,
            "sandbox proxy: refused a host off the allowlist"
        );
        return refuse(
            &mut conn,
            403,
            &format!("{host} is not on this sandbox's network allowlist"),
        )
        .await;
    }
    tracing::debug!(host, port, "sandbox proxy: connecting");
    let mut upstream = match TcpStream::connect((host.as_str(), port)).await {
        Ok(s) => s,
        Err(e) => return refuse(&mut conn, 502, &format!("{host}:{port}: {e}")).await,
    };
    if connect {
        conn.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            .await?;
        // Whatever the client sent after its head (a TLS hello in a hurry) goes on.
        upstream.write_all(&buf[head_len..]).await?;
    } else {
        upstream.write_all(&buf).await?;
    }
    tokio::io::copy_bidirectional(&mut conn, &mut upstream).await?;
    Ok(())
}

/// The host and port a request goes to: `host:port` of a `CONNECT`, the authority of an
/// absolute `http://` target.
fn destination(target: &str, connect: bool) -> Option<(String, u16)> {
    let (authority, default_port) = if connect {
        (target, None)
    } else {
        let rest = target.strip_prefix("http://")?;
        (rest.split(['/', '?']).next()?, Some(80))
    };
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
            (h, p.parse().ok()?)
        }
        _ => (authority, default_port?),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    (!host.is_empty()).then(|| (host.to_ascii_lowercase(), port))
}

async fn refuse(conn: &mut TcpStream, status: u16, why: &str) -> std::io::Result<()> {
    let reason = match status {
        403 => "Forbidden",
        502 => "Bad Gateway",
        _ => "Bad Request",
    };
    let body = format!("switchboard sandbox: {why}\n");
    let answer = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(answer.as_bytes()).await?;
    conn.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_and_targets() {
        let hosts = vec!["example.com".to_owned(), "*.github.com".to_owned()];
        assert!(allowed(&hosts, "example.com"));
        assert!(allowed(&hosts, "EXAMPLE.com."));
        assert!(!allowed(&hosts, "www.example.com"));
        assert!(!allowed(&hosts, "badexample.com"));
        assert!(allowed(&hosts, "api.github.com"));
        assert!(!allowed(&hosts, "github.com"));
        assert!(!allowed(&hosts, "evilgithub.com"));
        assert_eq!(
            destination("example.com:443", true),
            Some(("example.com".into(), 443))
        );
        assert_eq!(destination("example.com", true), None);
        assert_eq!(
            destination("http://Example.com/a:b?x", false),
            Some(("example.com".into(), 80))
        );
        assert_eq!(
            destination("http://example.com:8080/", false),
            Some(("example.com".into(), 8080))
        );
        assert_eq!(destination("/relative", false), None);
        assert_eq!(destination("https://example.com/", false), None);
    }
}
