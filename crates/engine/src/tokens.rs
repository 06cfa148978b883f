//! Session-scoped credentials: what a session's own agent holds to call back into
//! Switchboard, instead of the server's token.
//!
//! An external agent's tools (`send_file` and `search_sessions` of `switchboard mcp
//! --session`) run in
//! processes the agent starts. They must reach the API, but the server's bearer token would
//! let them do anything — read every session, answer their own approvals. They get a
//! *session token* instead: `HMAC-SHA256(key, session id)` under a key drawn at random when
//! the engine starts. It proves "minted by this process for this session" and nothing more:
//!
//! - the routes that accept it say so, and check it against the session in their path
//!   (`POST /v1/sessions/{id}/share`, `GET /v1/sessions/{id}/search` — each only while a
//!   run of the session is under way, and the search only what that run's requester sees);
//!   every other route refuses it;
//! - it dies with the process (a restarted server draws a new key, and the agent processes
//!   it starts get new tokens), so nothing needs storing or revoking;
//! - it is compared in constant time.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use uuid::Uuid;

/// The prefix that tells a session token from the server's token at a glance.
const PREFIX: &str = "sbs1_";

/// Mints and checks session tokens (see the module docs).
pub struct SessionTokens {
    /// One SHA-256 block: HMAC's own key size, so no key schedule can fail.
    key: [u8; 64],
}

impl std::fmt::Debug for SessionTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionTokens([redacted])")
    }
}

impl Default for SessionTokens {
    fn default() -> Self {
        Self::new()
    }
}

impl SessionTokens {
    /// A fresh random key.
    pub fn new() -> Self {
        Self {
            key: rand::random(),
        }
    }

    fn mac(&self, session_id: Uuid) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as hmac::digest::KeyInit>::new(&self.key.into());
        mac.update(b"switchboard session token v1\0");
        mac.update(session_id.as_bytes());
        mac
    }

    /// The token for `session_id`.
    pub fn mint(&self, session_id: Uuid) -> String {
        use base64::Engine as _;
        let tag = self.mac(session_id).finalize().into_bytes();
        format!(
            "{PREFIX}{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(tag)
        )
    }

    /// Whether `token` is this process's token for `session_id`.
    pub fn verify(&self, session_id: Uuid, token: &str) -> bool {
        use base64::Engine as _;
        let Some(tag) = token.strip_prefix(PREFIX) else {
            return false;
        };
        let Ok(tag) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(tag) else {
            return false;
        };
        self.mac(session_id).verify_slice(&tag).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_opens_its_own_session_only() {
        let tokens = SessionTokens::new();
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        let t = tokens.mint(a);
        assert!(t.starts_with(PREFIX));
        assert!(tokens.verify(a, &t));
        assert!(!tokens.verify(b, &t));
        // Another process (another key) does not accept it.
        assert!(!SessionTokens::new().verify(a, &t));
        // Tampered, truncated, foreign.
        let mut bad = t.clone();
        bad.pop();
        assert!(!tokens.verify(a, &bad));
        assert!(!tokens.verify(a, &t[PREFIX.len()..]));
        assert!(!tokens.verify(a, "sbs1_!!!"));
        assert!(!tokens.verify(a, ""));
    }
}
