//! Who may list, send to, or look at whom.

use crate::config::{Bundle, Member, Principal, Scope};
use crate::error::RelayError;

/// What a request wants to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    List,
    Send,
    Look,
}

impl Capability {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::List => "list",
            Self::Send => "send",
            Self::Look => "look",
        }
    }
}

/// Who asks: a member of the bundle, or a principal (a human) from `policies.toml`.
#[derive(Debug, Clone, Copy)]
pub enum Requester<'a> {
    Member(&'a Member),
    Principal(&'a Principal),
}

impl<'a> Requester<'a> {
    /// Resolves an id in a bundle; `None` when it is neither a member nor a principal.
    pub fn resolve(bundle: &'a Bundle, id: &str) -> Option<Self> {
        if let Some(m) = bundle.member(id) {
            return Some(Self::Member(m));
        }
        bundle.policies.principals.get(id).map(Self::Principal)
    }

    pub fn id(&self) -> &str {
        match self {
            Self::Member(m) => &m.id,
            Self::Principal(p) => &p.id,
        }
    }

    /// Display name (the id when none).
    pub fn name(&self) -> &str {
        match self {
            Self::Member(m) => &m.name,
            Self::Principal(p) => p.name.as_deref().unwrap_or(&p.id),
        }
    }

    fn scope(&self, bundle: &Bundle, cap: Capability) -> Scope {
        let policy_id = match self {
            Self::Member(m) => m.policy.as_str(),
            Self::Principal(p) => bundle.policies.principal_policy(p),
        };
        // Validation guarantees the policy exists; a missing one fails closed.
        match bundle.policies.get(policy_id) {
            None => Scope::None,
            Some(p) => match cap {
                Capability::List => p.list,
                Capability::Send => p.send,
                Capability::Look => p.look,
            },
        }
    }

    /// Whether the requester may use `cap` on member `target`.
    pub fn may(&self, bundle: &Bundle, cap: Capability, target: &str) -> bool {
        match self.scope(bundle, cap) {
            Scope::None => false,
            Scope::All => true,
            Scope::SelfOnly => matches!(self, Self::Member(m) if m.id == target),
        }
    }

    /// Whether the requester may use `cap` at all (`none` refuses before any target).
    pub fn may_at_all(&self, bundle: &Bundle, cap: Capability) -> bool {
        self.scope(bundle, cap) != Scope::None
    }

    /// Refuses with `authorization_forbidden` naming the targets it may not reach.
    pub fn authorize(
        &self,
        bundle: &Bundle,
        cap: Capability,
        targets: &[String],
    ) -> Result<(), RelayError> {
        if !self.may_at_all(bundle, cap) {
            return Err(RelayError::forbidden(cap.as_str(), self.id(), targets));
        }
        let denied: Vec<String> = targets
            .iter()
            .filter(|t| !self.may(bundle, cap, t))
            .cloned()
            .collect();
        if denied.is_empty() {
            Ok(())
        } else {
            Err(RelayError::forbidden(cap.as_str(), self.id(), &denied))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{parse_bundle, parse_policies};
    use std::path::Path;

    fn bundle() -> Bundle {
        let p = parse_policies(
            r#"
format-version = 1
[[policies]]
id = "mute"
list = "self"
send = "none"
look = "self"
[[policies]]
id = "watcher"
list = "all"
send = "self"
look = "all"
[[principals]]
id = "alice"
policy = "operator"
[[principals]]
id = "bob"
policy = "mute"
"#,
        )
        .unwrap();
        let text = r#"
format-version = 1
[[members]]
id = "a"
directory = "/"
[members.tmux]
command = "x"
[[members]]
id = "m"
directory = "/"
policy = "mute"
[members.tmux]
command = "x"
[[members]]
id = "w"
directory = "/"
policy = "watcher"
[members.tmux]
command = "x"
"#;
        parse_bundle("dev", text, Path::new("/"), &p, &[]).unwrap()
    }

    #[test]
    fn policy_matrix() {
        let b = bundle();
        let r = |id| Requester::resolve(&b, id).unwrap();
        use Capability::*;
        // (requester, capability, target, allowed)
        let matrix = [
            ("a", List, "m", true),
            ("a", Send, "m", true),
            ("a", Look, "w", true),
            ("m", List, "m", true),
            ("m", List, "a", false),
            ("m", Send, "a", false),
            ("m", Send, "m", false),
            ("m", Look, "m", true),
            ("m", Look, "a", false),
            ("w", Send, "a", false),
            ("w", Send, "w", true),
            ("w", Look, "a", true),
            ("alice", Send, "a", true),
            ("alice", Look, "m", true),
            ("bob", Send, "a", false),
            ("bob", List, "a", false),
        ];
        for (who, cap, target, want) in matrix {
            assert_eq!(r(who).may(&b, cap, target), want, "{who} {cap:?} {target}");
        }
        assert!(Requester::resolve(&b, "nobody").is_none());
        let e = r("m")
            .authorize(&b, Send, &["a".into(), "w".into()])
            .unwrap_err();
        assert_eq!(e.code, "authorization_forbidden");
        assert_eq!(e.status, 403);
        assert_eq!(e.details["capability"], "send");
        assert_eq!(e.details["requester"], "m");
        assert_eq!(e.details["targets"], serde_json::json!(["a", "w"]));
        let e = r("w")
            .authorize(&b, Send, &["a".into(), "w".into()])
            .unwrap_err();
        assert_eq!(e.details["targets"], serde_json::json!(["a"]));
        assert!(r("a").authorize(&b, Look, &["m".into()]).is_ok());
    }
}
