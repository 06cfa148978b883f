//! Member tokens: the credential of the relay MCP server a hosted session member gets.
//!
//! An agent must not hold the server's API token (it could approve its own tool calls), yet
//! the relay MCP server in its session has to reach the relay routes. So that server gets a
//! token that names one member of one bundle and is good only for what that member may do
//! through the relay: list, send and look *as itself*, read its messages' outcomes and
//! events. It is `sbm.MEMBER.MAC`, MAC = HMAC-SHA256 under the server's token of the bundle
//! and the member: stateless, the same on every instance, and void when the server's token
//! changes.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

const PREFIX: &str = "sbm.";

fn mac(key: &str, bundle: &str, member: &str) -> Option<Vec<u8>> {
    let mut m = Hmac::<Sha256>::new_from_slice(key.as_bytes()).ok()?;
    m.update(b"switchboard relay member\0");
    m.update(bundle.as_bytes());
    m.update(b"\0");
    m.update(member.as_bytes());
    Some(m.finalize().into_bytes().to_vec())
}

/// The token of `member` in `bundle`, under `key` (the server's API token).
pub fn mint(key: &str, bundle: &str, member: &str) -> Option<String> {
    Some(format!(
        "{PREFIX}{member}.{}",
        hex::encode(mac(key, bundle, member)?)
    ))
}

/// Whether `token` looks like a member token (and not the API token).
pub fn is_member_token(token: &str) -> bool {
    token.starts_with(PREFIX)
}

/// The member a token names, if it is valid for `bundle` under `key`.
pub fn verify(key: &str, bundle: &str, token: &str) -> Option<String> {
    let rest = token.strip_prefix(PREFIX)?;
    let (member, given) = rest.split_once('.')?;
    if !crate::config::valid_id(member) {
        return None;
    }
    let given = hex::decode(given).ok()?;
    let expected = mac(key, bundle, member)?;
    bool::from(expected.ct_eq(&given)).then(|| member.to_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_token_names_one_member_of_one_bundle_under_one_key() {
        let t = mint("server-token", "dev", "builder").unwrap();
        assert!(is_member_token(&t));
        assert_eq!(
            verify("server-token", "dev", &t).as_deref(),
            Some("builder")
        );
        assert_eq!(verify("server-token", "other", &t), None, "another bundle");
        assert_eq!(verify("new-token", "dev", &t), None, "another server token");
        let forged = t.replace("builder", "reviewer");
        assert_eq!(
            verify("server-token", "dev", &forged),
            None,
            "another member"
        );
        assert_eq!(verify("server-token", "dev", "sbm.builder.zz"), None);
        assert_eq!(verify("server-token", "dev", "server-token"), None);
    }
}
