//! A real `nats-server` for the tests of several instances (installed by scripts/test).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::free_port;

fn nats_bin() -> PathBuf {
    for p in ["/usr/sbin/nats-server", "/usr/bin/nats-server"] {
        if std::path::Path::new(p).exists() {
            return PathBuf::from(p);
        }
    }
    panic!("nats-server is missing (scripts/test installs the Debian package)");
}

/// A `nats-server` on a fixed loopback port, restartable; killed on drop.
pub struct Nats {
    pub port: u16,
    child: Option<tokio::process::Child>,
}

impl Nats {
    pub async fn start() -> Nats {
        let mut n = Nats {
            port: free_port(),
            child: None,
        };
        n.up().await;
        n
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub async fn up(&mut self) {
        let child = tokio::process::Command::new(nats_bin())
            .args(["-a", "127.0.0.1", "-p", &self.port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let start = Instant::now();
        while tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .is_err()
        {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "nats-server did not start"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn down(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill().await;
            let _ = c.wait().await;
        }
    }
}
