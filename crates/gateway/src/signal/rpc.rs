//! signal-cli's JSON-RPC over HTTP (`POST /api/v1/rpc`, the signal-cli-jsonrpc(5) manual):
//! every call through the kit's [`PlatformClient`] (outbox, retry policy). Its error codes:
//! -1 the user's mistake (but a send whose every result is a `NETWORK_FAILURE` is worth
//! another try), -3 I/O and -32603 internal errors (another try), -4 an untrusted identity
//! key, -5 rate limited (waited out by the results' `retryAfterSeconds`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use super::SignalChannel;
use crate::channel::ChannelError;
use crate::platform::{Answer, Call, Verdict};

/// Long: a send that timed out may still be sent by signal-cli, and is not sent again
/// (see [`SignalChannel::rpc`]).
const CALL_TIMEOUT: Duration = Duration::from_secs(180);

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// signal-cli's code for "rate limited".
const RATE_LIMITED: i64 = -5;
/// signal-cli's codes for an I/O or an internal error (worth another try).
const IO_ERROR: i64 = -3;
const INTERNAL_ERROR: i64 = -32603;

impl SignalChannel {
    /// What an answer means: the `result`; a rate limit waited out; an error otherwise.
    fn verdict(&self, method: &str, answer: Answer) -> Verdict<Value> {
        let status = answer.status;
        if status.is_server_error() {
            return Verdict::Transient(self.client.server_error(method, status));
        }
        if status.as_u16() == 201 {
            return Verdict::Done(Value::Null); // a notification: nothing to answer
        }
        let Some(body) = answer.json().filter(|_| status.is_success()) else {
            return Verdict::Failed(self.client.api_error(
                method,
                status.as_u16(),
                &format!("HTTP {status}; the answer is not JSON-RPC (is the URL signal-cli's --http address?)"),
            ));
        };
        let Some(error) = body.get("error").filter(|e| !e.is_null()) else {
            return Verdict::Done(body.get("result").cloned().unwrap_or(Value::Null));
        };
        let code = error["code"].as_i64().unwrap_or_default();
        if code == RATE_LIMITED {
            let wait = error["data"]["response"]["results"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| r["retryAfterSeconds"].as_u64())
                .max()
                .map(Duration::from_secs);
            return Verdict::RateLimited(wait);
        }
        let message = error["message"].as_str().unwrap_or("no message");
        let results = error["data"]["response"]["results"].as_array();
        let network = results
            .is_some_and(|r| !r.is_empty() && r.iter().all(|r| r["type"] == "NETWORK_FAILURE"));
        if code == IO_ERROR || code == INTERNAL_ERROR || network {
            // Worth another try (the dispatcher tries again later): not a refusal.
            return Verdict::Transient(ChannelError::Unreachable {
                channel: self.cfg.name.clone(),
                reason: format!("{method}: {message} (signal-cli code {code})"),
            });
        }
        Verdict::Failed(self.client.api_error(
            method,
            400,
            &format!("{message} (signal-cli code {code})"),
        ))
    }

    /// One JSON-RPC call, counted against `keys`.
    pub(super) async fn rpc(
        &self,
        method: &str,
        mut params: Value,
        keys: &[String],
    ) -> Result<Value, ChannelError> {
        if let (Some(account), Some(p)) = (&self.cfg.account_param, params.as_object_mut()) {
            p.insert("account".into(), json!(account));
        }
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let body = json!({"jsonrpc": "2.0", "method": method, "params": params, "id": id});
        // A send is not repeated after a failure that may have come after it went out (a
        // timeout, a dropped connection): the dispatcher decides, rather than a second copy.
        let policy = (method == "send").then(|| crate::platform::RetryPolicy {
            transient_retries: 0,
            ..*self.client.policy()
        });
        self.client
            .call(
                Call {
                    label: method,
                    keys,
                    timeout: CALL_TIMEOUT,
                    policy,
                },
                |http, base| http.post(format!("{base}/api/v1/rpc")).json(&body),
                |a| self.verdict(method, a),
            )
            .await
    }
}
