//! A real Matrix homeserver for the Matrix channel's tests: Synapse (from PyPI, in the
//! virtualenv scripts/test makes), on a free loopback port with a SQLite database in a
//! temporary directory, rate limits raised, registration by shared secret only. Killed on
//! drop.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::free_port;

/// The shared secret test users are registered with.
const SHARED_SECRET: &str = "switchboard-test-registration-secret";

/// The virtualenv's Python: `SWITCHBOARD_SYNAPSE_PYTHON`, else the one scripts/test makes.
fn python() -> PathBuf {
    if let Ok(p) = std::env::var("SWITCHBOARD_SYNAPSE_PYTHON") {
        return PathBuf::from(p);
    }
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let p = PathBuf::from(home).join(".cache/switchboard-synapse/bin/python");
    assert!(
        p.exists(),
        "Synapse is missing: run scripts/test (it installs matrix-synapse from PyPI into {})",
        p.display()
    );
    p
}

pub struct Synapse {
    pub url: String,
    pub port: u16,
    dir: tempfile::TempDir,
    child: tokio::process::Child,
}

impl Synapse {
    /// Generates its keys, starts it and waits until `/_matrix/client/versions` answers.
    pub async fn start() -> Synapse {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let d = dir.path().display();
        let limit = "{per_second: 1000, burst_count: 1000}";
        let config = format!(
            r#"server_name: "localhost"
pid_file: "{d}/homeserver.pid"
listeners:
  - port: {port}
    bind_addresses: ["127.0.0.1"]
    type: http
    tls: false
    x_forwarded: false
    resources:
      - names: [client]
        compress: false
database:
  name: sqlite3
  args:
    database: "{d}/homeserver.db"
media_store_path: "{d}/media"
signing_key_path: "{d}/signing.key"
registration_shared_secret: "{SHARED_SECRET}"
enable_registration: false
report_stats: false
macaroon_secret_key: "test-macaroon-secret"
form_secret: "test-form-secret"
trusted_key_servers: []
suppress_key_server_warning: true
enable_metrics: false
presence:
  enabled: false
rc_message: {limit}
rc_registration: {limit}
rc_login:
  address: {limit}
  account: {limit}
  failed_attempts: {limit}
rc_joins:
  local: {limit}
  remote: {limit}
rc_invites:
  per_room: {limit}
  per_user: {limit}
  per_issuer: {limit}
rc_key_requests: {limit}
rc_3pid_validation: {limit}
"#
        );
        let config_path = dir.path().join("homeserver.yaml");
        std::fs::write(&config_path, config).unwrap();
        let keys = tokio::process::Command::new(python())
            .args(["-m", "synapse.app.homeserver", "--generate-keys", "-c"])
            .arg(&config_path)
            .output()
            .await
            .unwrap();
        assert!(
            keys.status.success(),
            "synapse --generate-keys: {}",
            String::from_utf8_lossy(&keys.stderr)
        );
        let log = std::fs::File::create(dir.path().join("synapse.log")).unwrap();
        let child = tokio::process::Command::new(python())
            .args(["-m", "synapse.app.homeserver", "-c"])
            .arg(&config_path)
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let s = Synapse {
            url: format!("http://127.0.0.1:{port}"),
            port,
            dir,
            child,
        };
        let http = reqwest::Client::new();
        let start = Instant::now();
        loop {
            if let Ok(r) = http
                .get(format!("{}/_matrix/client/versions", s.url))
                .send()
                .await
                && r.status().is_success()
            {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "Synapse did not start: {}",
                s.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        s
    }

    /// Registers `@name:localhost` with `password` (through the shared secret); returns the
    /// user id.
    pub async fn register(&self, name: &str, password: &str) -> String {
        let out = tokio::process::Command::new(python())
            .args([
                "-m",
                "synapse._scripts.register_new_matrix_user",
                "-u",
                name,
                "-p",
                password,
                "--no-admin",
                "-k",
                SHARED_SECRET,
                &self.url,
            ])
            .output()
            .await
            .unwrap();
        assert!(
            out.status.success(),
            "registering {name}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        format!("@{name}:localhost")
    }

    /// The homeserver's log (for a failing assertion).
    pub fn log(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("synapse.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    }
}

impl Drop for Synapse {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}
