//! Push notifications: a task's configs (`CreateTaskPushNotificationConfig` …) and the
//! delivery of its status changes to them — the event as A2A streams it, POSTed with the
//! config's `token` in `X-A2A-Notification-Token` and its `authentication` in
//! `Authorization` (A2A v1.0 signs the Agent Card, not notifications), retried with
//! back-off. Webhooks on this machine or a private network are refused unless the server
//! allows them (`SWITCHBOARD_A2A_PRIVATE_WEBHOOKS`): a task must not make the server call
//! its own neighbours.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;

/// Tries per notification, and the first wait between them (doubling).
const TRIES: u32 = 4;
const FIRST_WAIT: Duration = Duration::from_millis(500);
/// Configs a task may have.
pub(crate) const MAX_CONFIGS: usize = 10;

/// One config, as the client gave it (`id`, `taskId`, `url`, `token`, `authentication`).
#[derive(Debug, Clone)]
pub(crate) struct Config(pub(crate) Value);

impl Config {
    pub(crate) fn id(&self) -> &str {
        self.0.get("id").and_then(Value::as_str).unwrap_or("")
    }
}

/// The configs of one task, and the client that delivers to them.
#[derive(Clone)]
pub(crate) struct Pusher {
    configs: Arc<Mutex<Vec<Config>>>,
    http: reqwest::Client,
}

impl Pusher {
    pub(crate) fn new(http: reqwest::Client) -> Self {
        Self {
            configs: Arc::default(),
            http,
        }
    }

    pub(crate) fn set(&self, config: Config) -> Result<(), String> {
        let mut all = self.configs.lock();
        all.retain(|c| c.id() != config.id());
        if all.len() >= MAX_CONFIGS {
            return Err(format!(
                "a task has at most {MAX_CONFIGS} push notification configs"
            ));
        }
        all.push(config);
        Ok(())
    }

    pub(crate) fn get(&self, id: &str) -> Option<Config> {
        self.configs.lock().iter().find(|c| c.id() == id).cloned()
    }

    pub(crate) fn list(&self) -> Vec<Config> {
        self.configs.lock().clone()
    }

    pub(crate) fn delete(&self, id: &str) -> bool {
        let mut all = self.configs.lock();
        let before = all.len();
        all.retain(|c| c.id() != id);
        all.len() != before
    }

    /// Sends `event` to every config, each on its own task, in the background.
    pub(crate) fn deliver(&self, event: Value) {
        for config in self.list() {
            let http = self.http.clone();
            let event = event.clone();
            tokio::spawn(async move { send(http, config, event).await });
        }
    }
}

async fn send(http: reqwest::Client, config: Config, event: Value) {
    let Some(url) = config
        .0
        .get("url")
        .and_then(Value::as_str)
        .map(str::to_owned)
    else {
        return;
    };
    let mut wait = FIRST_WAIT;
    for attempt in 1..=TRIES {
        let mut req = http
            .post(&url)
            .json(&event)
            .timeout(Duration::from_secs(10));
        if let Some(t) = config
            .0
            .get("token")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            req = req.header("X-A2A-Notification-Token", t);
        }
        let auth = config.0.get("authentication");
        if let (Some(scheme), Some(creds)) = (
            auth.and_then(|a| a.get("scheme")).and_then(Value::as_str),
            auth.and_then(|a| a.get("credentials"))
                .and_then(Value::as_str),
        ) {
            req = req.header("Authorization", format!("{scheme} {creds}"));
        }
        match req.send().await {
            Ok(r) if r.status().is_success() => return,
            Ok(r) => tracing::info!(attempt, status = %r.status(), "A2A push notification refused"),
            Err(e) => tracing::info!(attempt, error = %e, "A2A push notification not delivered"),
        }
        if attempt < TRIES {
            tokio::time::sleep(wait).await;
            wait *= 2;
        }
    }
    tracing::warn!(
        config = config.id(),
        "A2A push notification given up after {TRIES} tries"
    );
}

/// Whether `url` may receive notifications: http(s), and not this machine or a private
/// network unless `allow_private`.
pub(crate) fn check_url(url: &str, allow_private: bool) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("url: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err("url: http or https".into());
    }
    if allow_private {
        return Ok(());
    }
    let host = parsed.host_str().unwrap_or("");
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let private = match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(ip)) => {
            ip.is_loopback() || ip.is_private() || ip.is_link_local() || ip.is_unspecified()
        }
        Ok(std::net::IpAddr::V6(ip)) => {
            ip.is_loopback()
                || ip.is_unspecified()
                || (ip.segments()[0] & 0xfe00) == 0xfc00
                || (ip.segments()[0] & 0xffc0) == 0xfe80
        }
        Err(_) => {
            host.is_empty()
                || host.eq_ignore_ascii_case("localhost")
                || host.to_ascii_lowercase().ends_with(".localhost")
        }
    };
    if private {
        return Err("url: a webhook on this machine or a private network is refused (SWITCHBOARD_A2A_PRIVATE_WEBHOOKS allows them)".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_webhooks_are_refused_unless_allowed() {
        for bad in [
            "http://127.0.0.1:9/x",
            "http://localhost/x",
            "http://10.1.2.3/",
            "http://[::1]/",
            "ftp://example.com/",
            "http://169.254.169.254/latest",
        ] {
            assert!(check_url(bad, false).is_err(), "{bad}");
        }
        assert!(check_url("https://hooks.example.com/a2a", false).is_ok());
        assert!(check_url("http://127.0.0.1:9/x", true).is_ok());
    }
}
