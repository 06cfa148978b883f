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
    if p.chars().count() < MIN_PASSWORD {
        return Err(TeamError::Unprocessable(format!(
            "a password is at least {MIN_PASSWORD} characters"
        )));
    }
    Ok(())
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

/// Whether `p` sees every session (operators, admins and read-only viewers) rather than
/// only their own and those shared with them (members).
pub fn sees_all(p: &Principal) -> bool {
    p.role != Role::Member
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
            detail,
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
        }))
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

    // --- sessions -----------------------------------------------------------------------

    /// Shares a session with `users` (names, or `*` for everyone), replacing whom it was
    /// shared with: its owner may, and those who see every session. The list as stored.
    pub async fn share_session(
        &self,
        actor: &Principal,
        session_id: Uuid,
        users: Vec<String>,
        via: Via<'_>,
    ) -> Result<Vec<String>, TeamError> {
        let not_found = || TeamError::NotFound(format!("session {session_id} not found"));
        let Some(s) = self.store.get_session(session_id).await? else {
            return Err(not_found());
        };
        let shares = self.store.session_shares(session_id).await?;
        if !may_see(actor, s.owner.as_deref(), &shares) {
            return Err(not_found());
        }
        if !sees_all(actor) && s.owner.as_deref() != Some(actor.user.as_str()) {
            return Err(TeamError::Forbidden(
                "only the session's owner, an operator or an admin may change whom it is shared with".into(),
            ));
        }
        if users.len() > MAX_SHARES {
            return Err(TeamError::Unprocessable(format!(
                "a session is shared with at most {MAX_SHARES} users"
            )));
        }
        let mut users: Vec<String> = users.into_iter().map(|u| u.trim().to_string()).collect();
        users.sort();
        users.dedup();
        for u in &users {
            if u != "*" && self.store.get_user(u).await?.is_none() {
                return Err(TeamError::Unprocessable(format!(
                    "shared_with: no user {u:?} (a user's name, or * for everyone)"
                )));
            }
        }
        if !self.store.set_session_shares(session_id, &users).await? {
            return Err(not_found());
        }
        self.record(
            &actor.user,
            "session.share",
            Some(&session_id.to_string()),
            via,
            serde_json::json!({ "from": shares, "to": users }),
        )
        .await;
        Ok(users)
    }

    // --- console sign-ins -----------------------------------------------------------------

    /// Opens a console session for `name` lasting `ttl`: the secret for its cookie
    /// (`prefix` and 64 hex digits; the store keeps its hash).
    pub async fn open_console_session(
        &self,
        name: &str,
        prefix: &str,
        ttl: Duration,
    ) -> Result<String, TeamError> {
        let secret = new_secret(prefix);
        let now = chrono::Utc::now();
        let ttl = chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::days(30));
        self.store
            .create_console_session(&switchboard_store::ConsoleSessionRecord {
                id_hash: secret_hash(&secret),
                user_name: name.to_string(),
                created_at: rfc3339(now),
                expires_at: rfc3339(now + ttl),
            })
            .await?;
        Ok(secret)
    }

    /// The person a console session's secret signs in, while it lasts. Fails closed: a
    /// session that cannot be read signs in nobody.
    pub async fn console_principal(&self, secret: &str) -> Option<Principal> {
        let s = match self.store.get_console_session(&secret_hash(secret)).await {
            Ok(s) => s?,
            Err(e) => {
                tracing::warn!(error = %e, "reading a console session");
                return None;
            }
        };
        if s.expires_at <= now_rfc3339() {
            return None;
        }
        match self.principal_of(&s.user_name, Credential::Console).await {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "a console session's user");
                None
            }
        }
    }

    /// Ends the console session of `secret`, or with `everywhere` every one of its user's;
    /// the user's name, if it was a live session.
    pub async fn end_console_session(
        &self,
        secret: &str,
        everywhere: bool,
    ) -> Result<Option<String>, TeamError> {
        let Some(p) = self.console_principal(secret).await else {
            return Ok(None);
        };
        if everywhere {
            self.store.delete_console_sessions_of(&p.user).await?;
        } else {
            self.store
                .delete_console_session(&secret_hash(secret))
                .await?;
        }
        self.record(
            &p.user,
            "signout",
            None,
            "console",
            serde_json::json!({ "everywhere": everywhere }),
        )
        .await;
        Ok(Some(p.user))
    }

    // --- users --------------------------------------------------------------------------

    async fn user(&self, u: UserRecord) -> Result<User, TeamError> {
        let links = self.store.list_links(Some(&u.name)).await?;
        Ok(User {
            role: role_of(&u)?,
            has_password: u.password_hash.is_some(),
            links: links
                .into_iter()
                .map(|l| ChatLink {
                    platform: l.platform,
                    user_id: l.identity,
                })
                .collect(),
            name: u.name,
            created_at: u.created_at,
            updated_at: u.updated_at,
        })
    }

    pub async fn list_users(&self, actor: &Principal) -> Result<Vec<User>, TeamError> {
        forbidden_unless_admin(actor, "listing users")?;
        let mut out = Vec::new();
        for u in self.store.list_users().await? {
            out.push(self.user(u).await?);
        }
        Ok(out)
    }

    pub async fn get_user(&self, actor: &Principal, name: &str) -> Result<User, TeamError> {
        if actor.user != name {
            forbidden_unless_admin(actor, "reading another user")?;
        }
        match self.store.get_user(name).await? {
            Some(u) => self.user(u).await,
            None => Err(TeamError::NotFound(format!("no user {name:?}"))),
        }
    }

    pub async fn create_user(
        &self,
        actor: &Principal,
        req: CreateUserRequest,
        via: Via<'_>,
    ) -> Result<User, TeamError> {
        forbidden_unless_admin(actor, "adding a user")?;
        if let Some(p) = user_name_problem(&req.name) {
            return Err(TeamError::Unprocessable(p));
        }
        let password_hash = match &req.password {
            Some(p) => {
                check_password(p)?;
                let p = p.clone();
                Some(
                    tokio::task::spawn_blocking(move || hash_password(&p))
                        .await
                        .map_err(|e| TeamError::Internal(e.to_string()))??,
                )
            }
            None => None,
        };
        let now = now_rfc3339();
        let record = UserRecord {
            name: req.name.clone(),
            role: req.role.as_str().to_string(),
            password_hash,
            created_at: now.clone(),
            updated_at: now,
        };
        match self.store.create_user(&record).await {
            Err(StoreError::Conflict(_)) => {
                return Err(TeamError::Conflict(format!(
                    "a user named {:?} exists already",
                    req.name
                )));
            }
            r => r?,
        }
        self.record(
            &actor.user,
            "user.create",
            Some(&req.name),
            via,
            serde_json::json!({ "role": req.role, "password": req.password.is_some() }),
        )
        .await;
        self.user(record).await
    }

    pub async fn update_user(
        &self,
        actor: &Principal,
        name: &str,
        req: UpdateUserRequest,
        via: Via<'_>,
    ) -> Result<User, TeamError> {
        forbidden_unless_admin(actor, "changing a user")?;
        let Some(before) = self.store.get_user(name).await? else {
            return Err(TeamError::NotFound(format!("no user {name:?}")));
        };
        let password_hash = match &req.password {
            Some(p) => {
                check_password(p)?;
                let p = p.clone();
                Some(
                    tokio::task::spawn_blocking(move || hash_password(&p))
                        .await
                        .map_err(|e| TeamError::Internal(e.to_string()))??,
                )
            }
            None => None,
        };
        self.store
            .update_user(
                name,
                req.role.map(Role::as_str),
                password_hash.as_deref().map(Some),
                &now_rfc3339(),
            )
            .await?;
        if let Some(role) = req.role
            && role.as_str() != before.role
        {
            self.record(
                &actor.user,
                "user.role",
                Some(name),
                via,
                serde_json::json!({ "from": before.role, "to": role }),
            )
            .await;
        }
        if req.password.is_some() {
            // A new password ends every console sign-in of the old one.
            self.store.delete_console_sessions_of(name).await?;
            self.record(
                &actor.user,
                "user.password",
                Some(name),
                via,
                serde_json::json!({}),
            )
            .await;
        }
        self.get_user(actor, name).await
    }

    pub async fn delete_user(
        &self,
        actor: &Principal,
        name: &str,
        via: Via<'_>,
    ) -> Result<(), TeamError> {
        forbidden_unless_admin(actor, "removing a user")?;
        if !self.store.delete_user(name).await? {
            return Err(TeamError::NotFound(format!("no user {name:?}")));
        }
        self.record(
            &actor.user,
            "user.delete",
            Some(name),
            via,
            serde_json::json!({}),
        )
        .await;
        Ok(())
    }

    // --- tokens -------------------------------------------------------------------------

    pub async fn create_token(
        &self,
        actor: &Principal,
        req: CreateTokenRequest,
        via: Via<'_>,
    ) -> Result<CreatedToken, TeamError> {
        let owner = req.user.clone().unwrap_or_else(|| actor.user.clone());
        if owner != actor.user {
            forbidden_unless_admin(actor, "creating another user's token")?;
        }
        let name = req.name.trim();
        if name.is_empty() || name.chars().count() > 64 {
            return Err(TeamError::Unprocessable(
                "a token's name is 1 to 64 characters".into(),
            ));
        }
        if req.scopes.is_empty() {
            return Err(TeamError::Unprocessable(
                "a token needs at least one scope".into(),
            ));
        }
        let Some(user) = self.store.get_user(&owner).await? else {
            return Err(if owner == switchboard_protocol::people::BUILTIN_ADMIN {
                TeamError::Unprocessable(
                    "the server token's built-in admin has no personal tokens: add a user (`switchboard users add NAME --role admin`) and create theirs".into(),
                )
            } else {
                TeamError::NotFound(format!("no user {owner:?}"))
            });
        };
        let role = role_of(&user)?;
        let mut scopes = req.scopes.clone();
        scopes.sort();
        scopes.dedup();
        for s in &scopes {
            if !role.allows(*s) {
                return Err(TeamError::Unprocessable(format!(
                    "the scope `{s}` is beyond what the role {role} of {owner} allows"
                )));
            }
            // Nobody mints a token with more than they hold themselves.
            if !actor.has(*s) {
                return Err(TeamError::Forbidden(format!(
                    "a token with the scope `{s}` needs the scope `{s}`"
                )));
            }
        }
        let expires_at = match req.expires_in_days {
            Some(d) if d == 0 || d > MAX_TOKEN_DAYS => {
                return Err(TeamError::Unprocessable(format!(
                    "expires_in_days is 1 to {MAX_TOKEN_DAYS}"
                )));
            }
            Some(d) => Some(rfc3339(
                chrono::Utc::now() + chrono::Duration::days(i64::from(d)),
            )),
            None => None,
        };
        let secret = new_secret(TOKEN_PREFIX);
        let record = TokenRecord {
            id: Uuid::now_v7(),
            user_name: owner.clone(),
            name: name.to_string(),
            token_hash: secret_hash(&secret),
            scopes: scopes.iter().map(|s| s.as_str().to_string()).collect(),
            created_at: now_rfc3339(),
            expires_at,
            last_used_at: None,
            revoked_at: None,
        };
        self.store.create_token(&record).await?;
        self.record(
            &actor.user,
            "token.create",
            Some(&record.id.to_string()),
            via,
            serde_json::json!({ "user": owner, "name": name, "scopes": scopes, "expires_at": record.expires_at }),
        )
        .await;
        Ok(CreatedToken {
            token: secret,
            info: token_info(&record),
        })
    }

    /// The caller's tokens; an admin's `user` filter (`None`: everyone's).
    pub async fn list_tokens(
        &self,
        actor: &Principal,
        user: Option<&str>,
    ) -> Result<Vec<TokenInfo>, TeamError> {
        let whose = match user {
            Some(u) if u != actor.user => {
                forbidden_unless_admin(actor, "listing another user's tokens")?;
                Some(u)
            }
            Some(u) => Some(u),
            None if actor.is_admin() => None,
            None => Some(actor.user.as_str()),
        };
        Ok(self
            .store
            .list_tokens(whose)
            .await?
            .iter()
            .map(token_info)
            .collect())
    }

    /// Revokes a token of the caller's (an admin: anyone's). Someone else's token is "not
    /// found" to a non-admin, who learns nothing of it.
    pub async fn revoke_token(
        &self,
        actor: &Principal,
        id: Uuid,
        via: Via<'_>,
    ) -> Result<TokenInfo, TeamError> {
        let not_found = || TeamError::NotFound(format!("no token {id}"));
        let Some(t) = self.store.get_token(id).await? else {
            return Err(not_found());
        };
        if t.user_name != actor.user && !actor.is_admin() {
            return Err(not_found());
        }
        let at = now_rfc3339();
        self.store.revoke_token(id, &at).await?;
        if t.revoked_at.is_none() {
            self.record(
                &actor.user,
                "token.revoke",
                Some(&id.to_string()),
                via,
                serde_json::json!({ "user": t.user_name, "name": t.name }),
            )
            .await;
        }
        self.store
            .get_token(id)
            .await?
            .map(|t| token_info(&t))
            .ok_or_else(not_found)
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
