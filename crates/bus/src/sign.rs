//! What instances send each other is signed: an HMAC-SHA256, under the cluster's bus secret,
//! over the subject, the sending instance, a timestamp and the payload. Anything on the
//! subjects that is unsigned, signed under another key, altered, or older (or newer) than
//! [`MAX_SKEW`] is dropped and counted (`switchboard_bus_rejected_total{reason}`): a process
//! that can publish on NATS but does not hold the secret cannot decide approvals, switch on
//! auto-approve, restore checkpoints or inject events into anyone's stream.

use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Header naming the instance that sent a message.
pub(crate) const INSTANCE_HEADER: &str = "Switchboard-Instance";
/// Header with the sending time, in ms since the epoch.
pub(crate) const TS_HEADER: &str = "Switchboard-Ts";
/// Header with the signature (hex).
pub(crate) const SIG_HEADER: &str = "Switchboard-Sig";
/// How far a message's time may be from the receiver's: beyond it the message is stale (a
/// replay) or from a clock far off.
pub const MAX_SKEW: Duration = Duration::from_secs(60);

/// Why a message was dropped (the `reason` label of the counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    Unsigned,
    BadSignature,
    Stale,
}

impl Rejected {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unsigned => "unsigned",
            Self::BadSignature => "bad_signature",
            Self::Stale => "stale",
        }
    }
}

/// Signs and checks bus messages under one key.
#[derive(Clone)]
pub struct Signer {
    key: Vec<u8>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Signer([redacted])")
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Signer {
    /// The key is derived from `secret` (the bus secret, or the API token the instances
    /// share), so that it is never the secret itself.
    pub fn new(secret: &[u8]) -> Self {
        let key = match <Hmac<Sha256> as Mac>::new_from_slice(b"switchboard bus v1") {
            Ok(mut mac) => {
                mac.update(secret);
                mac.finalize().into_bytes().to_vec()
            }
            // HMAC takes a key of any length: unreachable, and fails closed (a key nobody
            // else has) if it were not.
            Err(_) => vec![0; 32],
        };
        Self { key }
    }

    /// `None` only if HMAC refused the key, which it never does (any length is a key):
    /// then nothing is signed and nothing verifies (fails closed).
    fn mac(&self, subject: &str, instance: &str, ts: u64, payload: &[u8]) -> Option<Hmac<Sha256>> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.key).ok()?;
        for part in [
            subject.as_bytes(),
            instance.as_bytes(),
            ts.to_string().as_bytes(),
        ] {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part);
        }
        mac.update(payload);
        Some(mac)
    }

    /// The headers a message from `instance` on `subject` carries.
    pub fn headers(&self, subject: &str, instance: &str, payload: &[u8]) -> async_nats::HeaderMap {
        let ts = now_ms();
        let mut h = async_nats::HeaderMap::new();
        h.insert(INSTANCE_HEADER, instance);
        h.insert(TS_HEADER, ts.to_string().as_str());
        if let Some(mac) = self.mac(subject, instance, ts, payload) {
            h.insert(SIG_HEADER, hex(&mac.finalize().into_bytes()).as_str());
        }
        h
    }

    /// The sending instance, if the message is signed under this key and fresh.
    pub fn verify(
        &self,
        subject: &str,
        headers: Option<&async_nats::HeaderMap>,
        payload: &[u8],
    ) -> Result<String, Rejected> {
        let get = |name: &str| {
            headers
                .and_then(|h| h.get(name))
                .map(|v| v.as_str().to_owned())
        };
        let (Some(instance), Some(ts), Some(sig)) =
            (get(INSTANCE_HEADER), get(TS_HEADER), get(SIG_HEADER))
        else {
            return Err(Rejected::Unsigned);
        };
        let Ok(ts_ms) = ts.parse::<u64>() else {
            return Err(Rejected::BadSignature);
        };
        let Some(sig) = unhex(&sig) else {
            return Err(Rejected::BadSignature);
        };
        self.mac(subject, &instance, ts_ms, payload)
            .ok_or(Rejected::BadSignature)?
            .verify_slice(&sig)
            .map_err(|_| Rejected::BadSignature)?;
        if now_ms().abs_diff(ts_ms) > MAX_SKEW.as_millis() as u64 {
            return Err(Rejected::Stale);
        }
        Ok(instance)
    }
}

/// Counts (and logs at debug) a dropped message.
pub(crate) fn count(reason: Rejected, subject: &str) {
    metrics::counter!("switchboard_bus_rejected_total", "reason" => reason.as_str()).increment(1);
    tracing::warn!(
        subject,
        reason = reason.as_str(),
        "a bus message was dropped: not signed under this cluster's bus secret, or stale"
    );
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signed_messages_verify_and_everything_else_is_rejected() {
        let s = Signer::new(b"cluster secret");
        let h = s.headers("switchboard.control.a", "b", b"{\"x\":1}");
        assert_eq!(
            s.verify("switchboard.control.a", Some(&h), b"{\"x\":1}"),
            Ok("b".to_string())
        );
        // Another payload, subject, key; none at all.
        assert_eq!(
            s.verify("switchboard.control.a", Some(&h), b"{\"x\":2}"),
            Err(Rejected::BadSignature)
        );
        assert_eq!(
            s.verify("switchboard.control.c", Some(&h), b"{\"x\":1}"),
            Err(Rejected::BadSignature)
        );
        assert_eq!(
            Signer::new(b"other").verify("switchboard.control.a", Some(&h), b"{\"x\":1}"),
            Err(Rejected::BadSignature)
        );
        assert_eq!(
            s.verify("switchboard.control.a", None, b"{\"x\":1}"),
            Err(Rejected::Unsigned)
        );
        // Another instance name under the same signature.
        let mut forged = h.clone();
        forged.insert(INSTANCE_HEADER, "c");
        assert_eq!(
            s.verify("switchboard.control.a", Some(&forged), b"{\"x\":1}"),
            Err(Rejected::BadSignature)
        );
        // Signed correctly, but long ago: a replay.
        let old = now_ms() - MAX_SKEW.as_millis() as u64 - 1000;
        let sig = s
            .mac("subj", "b", old, b"p")
            .unwrap()
            .finalize()
            .into_bytes();
        let mut stale = async_nats::HeaderMap::new();
        stale.insert(INSTANCE_HEADER, "b");
        stale.insert(TS_HEADER, old.to_string().as_str());
        stale.insert(SIG_HEADER, hex(&sig).as_str());
        assert_eq!(s.verify("subj", Some(&stale), b"p"), Err(Rejected::Stale));
        assert_eq!(format!("{s:?}"), "Signer([redacted])");
    }
}
