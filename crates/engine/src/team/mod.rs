//! A team (docs/teams.md): users with roles, their personal API tokens, console passwords,
//! and the audit log of who did what.
//!
//! Policy lives here, next to the store, not in the routes: every operation takes the
//! [`Principal`] that asks and refuses what it may not do (an admin manages every user and
//! token; anyone else their own tokens only, never with a scope they do not hold
//! themselves), so a surface that forgets a check still cannot widen anyone's reach. Every
//! exit that cannot decide fails closed: a token whose user, role or scopes cannot be read
//! is refused, not granted.
//!
//! A personal token is `sb_` and 64 hex digits of randomness; the store keeps its SHA-256
//! only (a token is random enough that a slow hash adds nothing), so a leaked database
//! yields no usable token. Each request looks its token up in the store, which is shared by
//! every instance: a revocation holds everywhere from the moment it commits, with no cache
//! to expire or bus message to miss.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use switchboard_protocol::ErrorCode;
use switchboard_protocol::people::{
    AuditEntry, ChatLink, CreateTokenRequest, CreateUserRequest, CreatedToken, Credential,
    MAX_TOKEN_DAYS, MIN_PASSWORD, Principal, Role, Scope, TokenInfo, UpdateUserRequest, User,
    user_name_problem,
};
use switchboard_store::people::{AuditFilter, NewAudit, TokenRecord, UserRecord};
use switchboard_store::{Store, StoreError};
use uuid::Uuid;

use crate::time::{now_rfc3339, parse_ts, rfc3339};

mod console;
pub mod deciders;
mod links;
mod sessions;
mod users;

pub use deciders::{ApprovalRule, CallFacts, may_decide};

/// The prefix of every personal API token.
pub const TOKEN_PREFIX: &str = "sb_";
/// How often a token's `last_used_at` is written at most.
const TOUCH_EVERY: Duration = Duration::from_secs(60);
/// The most audit entries one page holds.
pub const MAX_AUDIT_PAGE: u32 = 1000;

/// Why a team operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum TeamError {
    /// The caller may not do this; the message names what it lacks.
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    /// Well-formed but not acceptable (a bad name, a scope beyond the role).
    #[error("{0}")]
    Unprocessable(String),
    #[error("invalid token")]
    InvalidToken,
    /// A token that expired or was revoked.
    #[error("{0}")]
    Revoked(String),
    #[error("unknown user or wrong password")]
    InvalidCredentials,
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("internal error: {0}")]
    Internal(String),
}

impl switchboard_protocol::Coded for TeamError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::Forbidden(_) => ErrorCode::Forbidden,
            Self::NotFound(_) => ErrorCode::NotFound,
            Self::Conflict(_) => ErrorCode::Conflict,
            Self::Unprocessable(_) => ErrorCode::UnprocessableEntity,
            Self::InvalidToken => ErrorCode::InvalidToken,
            Self::Revoked(_) => ErrorCode::TokenRevoked,
            Self::InvalidCredentials => ErrorCode::InvalidCredentials,
            Self::Store(StoreError::Database(_)) => ErrorCode::StoreUnavailable,
            Self::Store(StoreError::NotFound(_)) => ErrorCode::NotFound,
            Self::Store(StoreError::Conflict(_)) => ErrorCode::Conflict,
            Self::Store(_) | Self::Internal(_) => ErrorCode::Internal,
        }
    }
}

/// Where an action was taken, for the audit log.
pub type Via<'a> = &'a str;

/// The team: users, tokens, passwords, the audit log. Cheap to clone.
#[derive(Clone)]
pub struct Team {
    store: Arc<dyn Store>,
    /// When each token's last use was last written.
    touched: Arc<Mutex<HashMap<Uuid, Instant>>>,
}

impl std::fmt::Debug for Team {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Team").finish_non_exhaustive()
    }
}

/// SHA-256 of a secret, hex: how tokens and console sign-ins are stored.
pub fn secret_hash(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// A new random secret: `prefix` and 64 hex digits.
pub fn new_secret(prefix: &str) -> String {
    let bytes: [u8; 32] = rand::random();
    format!("{prefix}{}", hex::encode(bytes))
}

fn forbidden_unless_admin(actor: &Principal, what: &str) -> Result<(), TeamError> {
    if actor.is_admin() {
        Ok(())
    } else {
        Err(TeamError::Forbidden(format!(
            "{what} needs the scope `admin`"
        )))
    }
}

fn role_of(u: &UserRecord) -> Result<Role, TeamError> {
    Role::parse(&u.role).ok_or_else(|| {
        TeamError::Internal(format!("user {} has an unknown role {:?}", u.name, u.role))
    })
}

fn token_info(t: &TokenRecord) -> TokenInfo {
    TokenInfo {
        id: t.id,
        user: t.user_name.clone(),
        name: t.name.clone(),
        // A scope this binary does not know is left out (and so not granted).
        scopes: t.scopes.iter().filter_map(|s| Scope::parse(s)).collect(),
        created_at: t.created_at.clone(),
        expires_at: t.expires_at.clone(),
        last_used_at: t.last_used_at.clone(),
        revoked_at: t.revoked_at.clone(),
    }
}

fn audit_entry(r: switchboard_store::AuditRecord) -> AuditEntry {
    AuditEntry {
        id: r.id,
        at: r.at,
        actor: r.actor,
        action: r.action,
        target: r.target,
        via: r.via,
        detail: r.detail,
    }
}

fn check_password(p: &str) -> Result<(), TeamError> {
    let n = p.chars().count();
    if !(MIN_PASSWORD..=switchboard_protocol::people::MAX_PASSWORD).contains(&n) {
        return Err(TeamError::Unprocessable(format!(
            "a password is {MIN_PASSWORD} to {} characters",
            switchboard_protocol::people::MAX_PASSWORD
        )));
    }
    Ok(())
}

/// A new password checked and hashed, off the async threads (argon2id takes a while on
/// purpose).
async fn new_password_hash(password: &str) -> Result<String, TeamError> {
    check_password(password)?;
    let p = password.to_string();
    tokio::task::spawn_blocking(move || hash_password(&p))
        .await
        .map_err(|e| TeamError::Internal(e.to_string()))?
}

/// The argon2id hash of `password` as a PHC string (a fresh salt each time).
pub fn hash_password(password: &str) -> Result<String, TeamError> {
    use argon2::PasswordHasher as _;
    let salt: [u8; 16] = rand::random();
    let salt = argon2::password_hash::SaltString::encode_b64(&salt)
        .map_err(|e| TeamError::Internal(format!("salt: {e}")))?;
    argon2::Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| TeamError::Internal(format!("hashing a password: {e}")))
}

/// Whether `password` matches the PHC string `hash` (false for an unreadable hash).
pub fn verify_password(password: &str, hash: &str) -> bool {
    use argon2::PasswordVerifier as _;
    argon2::password_hash::PasswordHash::new(hash).is_ok_and(|h| {
        argon2::Argon2::default()
            .verify_password(password.as_bytes(), &h)
            .is_ok()
    })
}

/// Whether `p` sees every session (operators, admins and read-only viewers; a person
/// writing in a chat) rather than only their own and those shared with them (members).
pub fn sees_all(p: &Principal) -> bool {
    // A chat identity reaches the sessions of the chats it is in: the chat channel admits
    // it there (its allow-lists and pairing) and vouches for the session it routes to.
    p.role != Role::Member || p.credential == Credential::Chat
}

/// Whether `p` may see (and, with the scopes, drive) a session of `owner` shared with
/// `shares` (user names; `*`: everyone).
pub fn may_see(p: &Principal, owner: Option<&str>, shares: &[String]) -> bool {
    sees_all(p) || owner == Some(p.user.as_str()) || shares.iter().any(|s| s == "*" || *s == p.user)
}

/// The most users one session is shared with.
pub const MAX_SHARES: usize = 100;

impl Team {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            touched: Arc::default(),
        }
    }

    /// Appends to the audit log. A failure is logged, not returned: the action it records
    /// has happened.
    pub async fn record(
        &self,
        actor: &str,
        action: &str,
        target: Option<&str>,
        via: Via<'_>,
        detail: serde_json::Value,
    ) {
        let entry = NewAudit {
            at: now_rfc3339(),
            actor: actor.to_string(),
            action: action.to_string(),
            target: target.map(str::to_string),
            via: via.to_string(),
            // An entry's detail is an object, as `/v1/audit` documents: nothing to add is
            // an empty one.
            detail: if detail.is_object() {
                detail
            } else if detail.is_null() {
                serde_json::json!({})
            } else {
                serde_json::json!({ "value": detail })
            },
        };
        if let Err(e) = self.store.append_audit(&entry).await {
            tracing::error!(error = %e, action, actor, "could not write an audit entry");
        }
    }

    // --- who is calling -----------------------------------------------------------------

    /// The principal of a personal API token: `Ok(None)` when `token` is not one (another
    /// kind of credential), an error when it is one that is unknown, expired or revoked.
    pub async fn authenticate_token(&self, token: &str) -> Result<Option<Principal>, TeamError> {
        if !token.starts_with(TOKEN_PREFIX) {
            return Ok(None);
        }
        let Some(t) = self.store.token_by_hash(&secret_hash(token)).await? else {
            return Err(TeamError::InvalidToken);
        };
        if let Some(at) = &t.revoked_at {
            return Err(TeamError::Revoked(format!(
                "this token was revoked at {at}"
            )));
        }
        let now = chrono::Utc::now();
        if let Some(until) = &t.expires_at
            && parse_ts(until) <= now
        {
            return Err(TeamError::Revoked(format!("this token expired at {until}")));
        }
        let Some(user) = self.store.get_user(&t.user_name).await? else {
            return Err(TeamError::InvalidToken);
        };
        let role = role_of(&user).map_err(|e| {
            tracing::error!(error = %e, "refusing a token");
            TeamError::InvalidToken
        })?;
        let scopes = token_info(&t)
            .scopes
            .into_iter()
            .filter(|s| role.allows(*s))
            .collect();
        self.touch(&t).await;
        Ok(Some(Principal {
            user: user.name,
            role,
            scopes,
            credential: Credential::Token,
            token_id: Some(t.id),
            console_session: None,
        }))
    }

    /// Whether what `p` authenticated with still holds: its token not revoked or expired,
    /// its console session not ended, its user not removed (the server token always). For
    /// streams, which outlive the request that checked it. Fails closed: an error is no.
    pub async fn still_valid(&self, p: &Principal) -> bool {
        let now = now_rfc3339();
        let holds = async {
            let user = match p.credential {
                Credential::ServerToken => return Ok::<_, TeamError>(true),
                Credential::Token => match p.token_id {
                    Some(id) => match self.store.get_token(id).await? {
                        Some(t)
                            if t.revoked_at.is_none()
                                && t.expires_at.as_deref().is_none_or(|e| *e > *now) =>
                        {
                            t.user_name
                        }
                        _ => return Ok(false),
                    },
                    None => return Ok(false),
                },
                Credential::Console => match &p.console_session {
                    Some(hash) => match self.store.get_console_session(hash).await? {
                        Some(s) if s.expires_at > now => s.user_name,
                        _ => return Ok(false),
                    },
                    None => return Ok(false),
                },
                Credential::Chat => p.user.clone(),
            };
            Ok(self.store.get_user(&user).await?.is_some())
        };
        holds.await.unwrap_or(false)
    }

    /// Records a token's use, at most once a minute per token and instance.
    async fn touch(&self, t: &TokenRecord) {
        let due = {
            let mut touched = self.touched.lock();
            let now = Instant::now();
            match touched.get(&t.id) {
                Some(at) if now.duration_since(*at) < TOUCH_EVERY => false,
                _ => {
                    touched.insert(t.id, now);
                    true
                }
            }
        };
        if due && let Err(e) = self.store.touch_token(t.id, &now_rfc3339()).await {
            tracing::warn!(error = %e, "could not record a token's use");
        }
    }

    /// The principal of a user signed in some other way (the console): everything their
    /// role grants. `None` if there is no such user.
    pub async fn principal_of(
        &self,
        name: &str,
        credential: Credential,
    ) -> Result<Option<Principal>, TeamError> {
        let Some(user) = self.store.get_user(name).await? else {
            return Ok(None);
        };
        let role = role_of(&user)?;
        Ok(Some(Principal {
            user: user.name,
            role,
            scopes: role.scopes().to_vec(),
            credential,
            token_id: None,
            console_session: None,
        }))
    }

    /// Checks a user's password. Unknown user and wrong password are one error; the work
    /// done is the same for both (a hash is verified either way), so timing tells them not
    /// apart either.
    pub async fn check_password(&self, name: &str, password: &str) -> Result<String, TeamError> {
        // A valid argon2id hash of nothing anyone knows, verified when the user has none.
        static DUMMY: std::sync::LazyLock<Option<String>> =
            std::sync::LazyLock::new(|| hash_password(&new_secret("")).ok());
        let user = self.store.get_user(name).await?;
        let hash = user
            .as_ref()
            .and_then(|u| u.password_hash.clone())
            .or_else(|| DUMMY.clone())
            .unwrap_or_default();
        let password = password.to_string();
        let ok = tokio::task::spawn_blocking(move || verify_password(&password, &hash))
            .await
            .unwrap_or(false);
        match user {
            Some(u) if ok && u.password_hash.is_some() => Ok(u.name),
            _ => Err(TeamError::InvalidCredentials),
        }
    }

    /// A person an identity provider vouched for, with the role its claims map to: added on
    /// their first sign-in, their role brought in line on each (the provider is the source
    /// of truth for it). Their name, as stored.
    pub async fn sign_in_external(
        &self,
        name: &str,
        role: Role,
        provider: &str,
    ) -> Result<String, TeamError> {
        let name = name.trim().to_ascii_lowercase();
        if let Some(p) = user_name_problem(&name) {
            return Err(TeamError::Unprocessable(p));
        }
        match self.store.get_user(&name).await? {
            Some(u) if u.role == role.as_str() => {}
            Some(u) => {
                self.store
                    .update_user(&name, Some(role.as_str()), None, &now_rfc3339())
                    .await?;
                self.record(
                    provider,
                    "user.role",
                    Some(&name),
                    "oidc",
                    serde_json::json!({ "from": u.role, "to": role }),
                )
                .await;
            }
            None => {
                let now = now_rfc3339();
                let created = self
                    .store
                    .create_user(&UserRecord {
                        name: name.clone(),
                        role: role.as_str().to_string(),
                        password_hash: None,
                        created_at: now.clone(),
                        updated_at: now,
                    })
                    .await;
                match created {
                    // Another instance added them a moment ago.
                    Err(StoreError::Conflict(_)) => {}
                    r => {
                        r?;
                        self.record(
                            provider,
                            "user.create",
                            Some(&name),
                            "oidc",
                            serde_json::json!({ "role": role, "provider": provider }),
                        )
                        .await;
                    }
                }
            }
        }
        Ok(name)
    }

    // --- audit --------------------------------------------------------------------------

    pub async fn list_audit(
        &self,
        actor: &Principal,
        mut filter: AuditFilter,
    ) -> Result<(Vec<AuditEntry>, Option<i64>), TeamError> {
        forbidden_unless_admin(actor, "reading the audit log")?;
        if filter.limit == 0 || filter.limit > MAX_AUDIT_PAGE {
            filter.limit = MAX_AUDIT_PAGE;
        }
        let limit = filter.limit as usize;
        let entries: Vec<AuditEntry> = self
            .store
            .list_audit(&filter)
            .await?
            .into_iter()
            .map(audit_entry)
            .collect();
        let next = (entries.len() == limit)
            .then(|| entries.last().map(|e| e.id))
            .flatten();
        Ok((entries, next))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn passwords_verify_only_themselves() {
        let h = hash_password("correct horse battery").unwrap();
        assert!(h.starts_with("$argon2id$"), "{h}");
        assert!(verify_password("correct horse battery", &h));
        assert!(!verify_password("correct horse batterY", &h));
        assert!(!verify_password("x", "not a hash"));
        assert_ne!(h, hash_password("correct horse battery").unwrap(), "salted");
    }

    #[test]
    fn secrets_are_random_and_hashed() {
        let a = new_secret(TOKEN_PREFIX);
        assert!(a.starts_with("sb_") && a.len() == 67, "{a}");
        assert_ne!(a, new_secret(TOKEN_PREFIX));
        assert_eq!(secret_hash(&a).len(), 64);
        assert_ne!(secret_hash(&a), a);
    }
}
