//! What every fake server here does to run: bind a port on 127.0.0.1, and serve its
//! routes until told to stop.

use std::net::SocketAddr;

use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// A listener on `127.0.0.1:0` and its address.
///
/// # Panics
/// When no local port can be bound (test-only code: the test cannot go on anyway), naming
/// `what`.
pub async fn bind(what: &str) -> (TcpListener, SocketAddr) {
    bind_port(what, 0).await
}

/// [`bind`] on `127.0.0.1:port` (0: any free port).
///
/// # Panics
/// When the port cannot be bound (taken by something else on this machine, say).
pub async fn bind_port(what: &str, port: u16) -> (TcpListener, SocketAddr) {
    let listener = match TcpListener::bind(("127.0.0.1", port)).await {
        Ok(listener) => listener,
        Err(err) => panic!("{what}: cannot bind 127.0.0.1:{port}: {err}"),
    };
    let addr = match listener.local_addr() {
        Ok(addr) => addr,
        Err(err) => panic!("{what}: no local address: {err}"),
    };
    (listener, addr)
}

/// Serves `app` on `listener` in a task until `stop` turns true (connections in flight
/// finish first). An accept-loop error ends the server; the test then fails on its own.
pub fn spawn(listener: TcpListener, app: Router, mut stop: watch::Receiver<bool>) {
    tokio::spawn(async move {
        let stopped = async move {
            let _ = stop.wait_for(|stop| *stop).await;
        };
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(stopped)
            .await;
    });
}
