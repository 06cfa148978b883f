//! The Events API: signed requests Slack POSTs to the gateway's webhook route.

use serde_json::{Value, json};
use subtle::ConstantTimeEq;

use super::*;

impl SlackChannel {
    /// Checks an Events API request's signature and age.
    pub(super) fn verify(&self, headers: &axum::http::HeaderMap, body: &[u8]) -> bool {
        let Some(secret) = &self.cfg.signing_secret else {
            return false;
        };
        let header = |name: &str| {
            let mut values = headers.get_all(name).iter();
            match (values.next(), values.next()) {
                (Some(v), None) => v.to_str().ok().map(str::trim),
                _ => None,
            }
        };
        let (Some(ts), Some(sig)) = (header(TIMESTAMP_HEADER), header(SIGNATURE_HEADER)) else {
            return false;
        };
        if ts.is_empty() || ts.len() > 18 || !ts.bytes().all(|b| b.is_ascii_digit()) {
            return false;
        }
        let Some(given) = sig
            .strip_prefix("v0=")
            .filter(|h| h.len() == 64)
            .and_then(|h| hex::decode(h).ok())
        else {
            return false;
        };
        let Some(expected) = mac_bytes(secret, ts, body) else {
            return false;
        };
        if !bool::from(expected.as_slice().ct_eq(given.as_slice())) {
            return false;
        }
        let Ok(ts) = ts.parse::<u64>() else {
            return false;
        };
        now_secs().abs_diff(ts) <= SIGNATURE_TOLERANCE.as_secs()
    }
}

/// The value of field `name` of a form-encoded body.
pub(super) fn form_field(body: &[u8], name: &str) -> Option<String> {
    form_urlencoded::parse(body)
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// An Events API body: JSON, or form-encoded `payload=<json>` (interactive payloads).
pub(super) fn parse_http_body(
    headers: &axum::http::HeaderMap,
    body: &[u8],
) -> Result<Value, String> {
    let form = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/x-www-form-urlencoded"))
        || body.starts_with(b"payload=");
    if form {
        if let Some(payload) = form_field(body, "payload") {
            return serde_json::from_str(&payload).map_err(|e| format!("payload: {e}"));
        }
        // A slash command: its fields are the form itself.
        if form_field(body, "command").is_some() {
            let mut fields = serde_json::Map::new();
            fields.insert("type".into(), json!("slash_command"));
            for k in [
                "command",
                "text",
                "user_id",
                "user_name",
                "channel_id",
                "channel_name",
                "team_id",
                "trigger_id",
                "response_url",
            ] {
                if let Some(v) = form_field(body, k) {
                    fields.insert(k.into(), json!(v));
                }
            }
            return Ok(Value::Object(fields));
        }
        return Err("a form without `payload` or `command`".into());
    }
    serde_json::from_slice(body).map_err(|e| e.to_string())
}
