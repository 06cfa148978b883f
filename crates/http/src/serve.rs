//! Serving a router on a TCP listener with per-connection limits: the one accept loop of
//! every Switchboard listener (`serve`, `gateway`).
//!
//! `axum::serve` offers no way to bound how long a client may take to send its headers or
//! how large they may be, which is what a slow-headers (slowloris) client or a client with
//! megabytes of headers exploits. This loop is `axum::serve` with those two bounds: hyper's
//! HTTP/1 connection builder with `header_read_timeout` and `max_header_size`, upgrades kept
//! (the `/v1/acp` WebSocket), `TCP_NODELAY` on every connection, and a graceful shutdown
//! that lets requests in flight finish; and two bounds of its own: an idle timeout on
//! request bodies, and a cap on open connections.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tower::ServiceExt as _;
use tower_http::timeout::TimeoutBody;

/// Bounds on each connection.
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    /// How long a client may take to send a request's headers, from the first byte (or, on
    /// a kept-alive connection, from the end of the previous response). Past it the
    /// connection is closed: a client that trickles headers cannot hold it open.
    pub header_timeout: Duration,
    /// Largest request head (request line and headers) accepted, in bytes; a larger one is
    /// answered `431 Request Header Fields Too Large` and the connection closed.
    pub max_header_bytes: usize,
    /// How long a request body may go without sending a byte; past it the body fails and
    /// the request ends: a client that trickles a body cannot hold a connection and a
    /// handler open. Reset by every chunk, so a large upload on a slow link still works.
    pub body_timeout: Duration,
    /// Most connections open at once. At the cap, new ones wait in the kernel's backlog
    /// until one closes, instead of each taking a task and buffers.
    pub max_connections: usize,
}

impl Default for ConnLimits {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(10),
            max_header_bytes: 64 * 1024,
            body_timeout: Duration::from_secs(30),
            max_connections: 10_000,
        }
    }
}

/// Serves `router` on `listener` until `shutdown` completes, then stops accepting, asks
/// every open connection to finish its request in flight and close, and returns once all
/// have (long streams end when their producer ends them, as with `axum::serve`) — or
/// after 10 s, closing those still open.
pub async fn serve<F>(
    listener: TcpListener,
    router: Router,
    limits: ConnLimits,
    shutdown: F,
) -> std::io::Result<()>
where
    F: Future<Output = ()> + Send,
{
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    loop {
        // A slot first: at the cap, connections wait in the backlog, not in memory.
        let slot = tokio::select! {
            s = slots.clone().acquire_owned() => match s {
                Ok(s) => s,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: wait a little rather than spin.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Finished connections leave the set as they go, so it holds open ones only.
        while connections.try_join_next().is_some() {}
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY");
        }
        let body_timeout = limits.body_timeout;
        let service = TowerToHyperService::new(router.clone().map_request(
            move |req: axum::http::Request<Incoming>| {
                let mut req = req.map(|b| axum::body::Body::new(TimeoutBody::new(body_timeout, b)));
                // The peer's address, for what is limited per address (console sign-in).
                req.extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                req
            },
        ));
        let mut stop = stop_rx.clone();
        connections.spawn(async move {
            let _slot = slot;
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                // The head only: `max_buf_size` would also shrink the write buffer of large
                // and streamed answers.
                .max_header_size(limits.max_header_bytes)
                .serve_connection(TokioIo::new(tcp), service)
                .with_upgrades();
            let mut conn = std::pin::pin!(conn);
            let stopping = async move {
                // Dropped at once: a `watch` guard must not be held across an await.
                let _ = stop.wait_for(|s| *s).await.map(|_| ());
            };
            let result = tokio::select! {
                r = conn.as_mut() => r,
                () = stopping => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = result {
                // Timed-out headers, a reset, a malformed request: the client's doing.
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Requests in flight get a while to finish; a client that stopped reading (a stalled
    // event stream, a trickled body) does not hold the process past it.
    let drained = tokio::time::timeout(DRAIN, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            open = connections.len(),
            "connections still open {DRAIN:?} after shutdown began: closing them"
        );
        connections.shutdown().await;
    }
    Ok(())
}

/// How long a graceful shutdown waits for open connections to finish.
const DRAIN: Duration = Duration::from_secs(10);
