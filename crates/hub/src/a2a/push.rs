//! Push notifications: a task's configs (`CreateTaskPushNotificationConfig` …) and the
//! delivery of its status changes to them — the event as A2A streams it, POSTed with the
//! config's `token` in `X-A2A-Notification-Token` and its `authentication` in
//! `Authorization` (A2A v1.0 signs the Agent Card, not notifications), in order, each
//! retried with back-off. Webhooks on this machine or a private network are refused unless
//! the server allows them (`SWITCHBOARD_A2A_PRIVATE_WEBHOOKS`): when the config is made
//! (the URL) and at each delivery (where its name resolves; redirects are not followed), so
//! a task cannot make the server call its own neighbours.
//!
//! A config is its creator's: another caller who may see the session neither reads it
//! (its secrets) nor deletes it.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;
use switchboard_http::CallerKey;
use tokio::sync::mpsc;

/// Tries per notification, and the first wait between them (doubling).
const TRIES: u32 = 4;
const FIRST_WAIT: Duration = Duration::from_millis(500);
/// Configs a task may have.
pub(crate) const MAX_CONFIGS: usize = 10;

/// One config, as the client gave it (`id`, `taskId`, `url`, `token`, `authentication`),
/// and whose it is.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) value: Value,
    pub(crate) owner: CallerKey,
}

impl Config {
    pub(crate) fn id(&self) -> &str {
        self.value.get("id").and_then(Value::as_str).unwrap_or("")
    }

    /// As answered to its owner: the secrets are not sent back.
    pub(crate) fn shown(&self) -> Value {
        let mut v = self.value.clone();
        if v.get("token").is_some() {
            v["token"] = Value::String("[redacted]".into());
        }
        if let Some(a) = v.get_mut("authentication").and_then(Value::as_object_mut)
            && a.contains_key("credentials")
        {
            a.insert("credentials".into(), Value::String("[redacted]".into()));
        }
        v
    }
}

/// The configs of one task, and the queue their notifications go out from, in order.
#[derive(Clone)]
pub(crate) struct Pusher {
    configs: Arc<Mutex<Vec<Config>>>,
    queue: mpsc::UnboundedSender<Value>,
}

impl Pusher {
    pub(crate) fn new(http: reqwest::Client, allow_private: bool) -> Self {
        let configs: Arc<Mutex<Vec<Config>>> = Arc::default();
        let (queue, mut rx) = mpsc::unbounded_channel::<Value>();
        let all = configs.clone();
        // One worker a task: each event goes to every config before the next one does.
        tokio::spawn(async move {
            while let Some(event) = rx.recv().await {
                let targets = all.lock().clone();
                for config in targets {
                    send(&http, &config, &event, allow_private).await;
                }
            }
        });
        Self { configs, queue }
    }

    pub(crate) fn set(&self, config: Config) -> Result<(), String> {
        let mut all = self.configs.lock();
        if all
            .iter()
            .any(|c| c.id() == config.id() && c.owner != config.owner)
        {
            return Err(format!(
                "a push notification config {:?} exists",
                config.id()
            ));
        }
        all.retain(|c| c.id() != config.id());
        if all.len() >= MAX_CONFIGS {
            return Err(format!(
                "a task has at most {MAX_CONFIGS} push notification configs"
            ));
        }
        all.push(config);
        Ok(())
    }

    pub(crate) fn get(&self, id: &str, owner: CallerKey) -> Option<Config> {
        self.configs
            .lock()
            .iter()
            .find(|c| c.id() == id && c.owner == owner)
            .cloned()
    }

    pub(crate) fn list(&self, owner: CallerKey) -> Vec<Config> {
        self.configs
            .lock()
            .iter()
            .filter(|c| c.owner == owner)
            .cloned()
            .collect()
    }

    pub(crate) fn delete(&self, id: &str, owner: CallerKey) -> bool {
        let mut all = self.configs.lock();
        let before = all.len();
        all.retain(|c| !(c.id() == id && c.owner == owner));
        all.len() != before
    }

    /// Queues `event` for every config (in the background, in order).
    pub(crate) fn deliver(&self, event: Value) {
        if !self.configs.lock().is_empty() {
            let _ = self.queue.send(event);
        }
    }
}

async fn send(http: &reqwest::Client, config: &Config, event: &Value, allow_private: bool) {
    let Some(url) = config.value.get("url").and_then(Value::as_str) else {
        return;
    };
    let mut wait = FIRST_WAIT;
    for attempt in 1..=TRIES {
        // Where the name points now (a name may be made to resolve to a neighbour).
        if !allow_private && let Err(e) = resolves_publicly(url).await {
            tracing::warn!(config = config.id(), "A2A push notification refused: {e}");
            return;
        }
        let mut req = http.post(url).json(event).timeout(Duration::from_secs(10));
        if let Some(t) = config
            .value
            .get("token")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            req = req.header("X-A2A-Notification-Token", t);
        }
        let auth = config.value.get("authentication");
        if let (Some(scheme), Some(creds)) = (
            auth.and_then(|a| a.get("scheme")).and_then(Value::as_str),
            auth.and_then(|a| a.get("credentials"))
                .and_then(Value::as_str),
        ) {
            req = req.header("Authorization", format!("{scheme} {creds}"));
        }
        match req.send().await {
            Ok(r) if r.status().is_success() => return,
            // (Webhook URLs may carry secrets: not logged.)
            Ok(r) => {
                tracing::info!(attempt, status = %r.status(), config = config.id(), "A2A push notification refused")
            }
            Err(e) => {
                tracing::info!(attempt, error = %e.without_url(), config = config.id(), "A2A push notification not delivered")
            }
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

/// The client notifications go out with: no redirects (a public URL must not lead the
/// server to a private one).
pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap_or_default()
}

fn private_ip(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(ip) => {
            let [a, b, ..] = ip.octets();
            ip.is_loopback()
                || ip.is_private()
                || ip.is_link_local()
                || ip.is_unspecified()
                || ip.is_broadcast()
                // Shared address space (carrier-grade NAT), 100.64.0.0/10.
                || (a == 100 && (64..128).contains(&b))
        }
        std::net::IpAddr::V6(ip) => match ip.to_ipv4_mapped() {
            Some(v4) => private_ip(std::net::IpAddr::V4(v4)),
            None => {
                ip.is_loopback()
                    || ip.is_unspecified()
                    || (ip.segments()[0] & 0xfe00) == 0xfc00
                    || (ip.segments()[0] & 0xffc0) == 0xfe80
            }
        },
    }
}

/// Every address `url`'s host resolves to is public.
async fn resolves_publicly(url: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| e.to_string())?;
    let host = parsed.host_str().unwrap_or_default().to_owned();
    let port = parsed.port_or_known_default().unwrap_or(443);
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let addrs = tokio::net::lookup_host((host.as_str(), port))
        .await
        .map_err(|e| format!("the webhook's host does not resolve: {e}"))?;
    for a in addrs {
        if private_ip(a.ip()) {
            return Err("the webhook's host resolves to this machine or a private network".into());
        }
    }
    Ok(())
}

/// Whether `url` may receive notifications: http(s), and not this machine or a private
/// network unless `allow_private` (its resolved addresses are checked again at delivery).
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
        Ok(ip) => private_ip(ip),
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
            "http://[::ffff:127.0.0.1]/",
            "http://100.64.0.1/",
            "ftp://example.com/",
            "http://169.254.169.254/latest",
        ] {
            assert!(check_url(bad, false).is_err(), "{bad}");
        }
        assert!(check_url("https://hooks.example.com/a2a", false).is_ok());
        assert!(check_url("http://127.0.0.1:9/x", true).is_ok());
    }

    #[test]
    fn secrets_are_not_shown() {
        let keys = switchboard_http::CallerKeys::default();
        let c = Config {
            value: serde_json::json!({"id": "c", "url": "https://x/", "token": "t",
                "authentication": {"scheme": "Bearer", "credentials": "s"}}),
            owner: keys.of_token("a"),
        };
        let shown = c.shown();
        assert_eq!(shown["token"], "[redacted]");
        assert_eq!(shown["authentication"]["credentials"], "[redacted]");
        assert_eq!(shown["authentication"]["scheme"], "Bearer");
    }
}
