//! A remote A2A agent built with the official A2A Python SDK (`tests/a2a_server.py`): what
//! Switchboard's A2A backend talks to in the tests.

use std::path::PathBuf;
use std::time::Duration;

use tokio::io::AsyncBufReadExt;

/// The agent's bearer token.
pub const SDK_AGENT_TOKEN: &str = "sdk-agent-secret";

/// The running agent; killed when dropped.
pub struct SdkAgent {
    pub url: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
    _child: tokio::process::Child,
}

impl SdkAgent {
    pub async fn start() -> SdkAgent {
        Self::start_with(&[]).await
    }

    /// With more environment (`A2A_NO_STREAMING=1`: an agent that does not stream).
    pub async fn start_with(env: &[(&str, &str)]) -> SdkAgent {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("a2a.log");
        let mut child = tokio::process::Command::new("python3")
            .arg(format!(
                "{}/tests/a2a_server.py",
                env!("CARGO_MANIFEST_DIR")
            ))
            .env("A2A_TOKEN", SDK_AGENT_TOKEN)
            .env("A2A_LOG", &log)
            .envs(env.iter().copied())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("python3 runs the A2A SDK agent");
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let port = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if let Some(port) = line.strip_prefix("READY ") {
                    return port.trim().to_string();
                }
            }
            panic!("the A2A SDK agent exited before it was ready")
        })
        .await
        .expect("the A2A SDK agent starts");
        SdkAgent {
            url: format!("http://127.0.0.1:{port}/"),
            log,
            _dir: dir,
            _child: child,
        }
    }

    /// `[agents.NAME]` reaching this agent.
    pub fn config(&self, name: &str) -> String {
        format!(
            "[agents.{name}]\na2a = {:?}\ntoken = {SDK_AGENT_TOKEN:?}\n",
            self.url
        )
    }

    /// What the agent was sent, one JSON object a message (or cancel), in order.
    pub fn log(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Waits until the log has an entry `f` accepts, and returns it.
    pub async fn wait_for(&self, f: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                if let Some(v) = self.log().into_iter().find(|v| f(v)) {
                    return v;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("the A2A agent's log: {:?}", self.log()))
    }
}
