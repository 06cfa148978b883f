//! What the store keeps of a team (docs/teams.md): users with a role, their personal API
//! tokens (a hash of each, never the token), the chat identities linked to them, their
//! console sign-ins (a hash of each cookie's id), and the audit log, which is only ever
//! appended to — nothing here changes or deletes an entry.
//!
//! Roles and scopes are stored as their wire names (`member`, `sessions:read`); the engine
//! parses them, refusing what it does not know.

use async_trait::async_trait;
use uuid::Uuid;

use crate::Result;

/// A user as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRecord {
    pub name: String,
    pub role: String,
    /// The PHC string of the password's argon2id hash.
    pub password_hash: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// A personal API token as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRecord {
    pub id: Uuid,
    pub user_name: String,
    pub name: String,
    /// SHA-256 of the token, hex.
    pub token_hash: String,
    /// Wire names, in order.
    pub scopes: Vec<String>,
    pub created_at: String,
    pub expires_at: Option<String>,
    pub last_used_at: Option<String>,
    pub revoked_at: Option<String>,
}

/// A chat identity that acts as a user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkRecord {
    pub platform: String,
    pub identity: String,
    pub user_name: String,
    pub created_at: String,
}

/// A console sign-in of a user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleSessionRecord {
    /// SHA-256 of the session's secret id, hex.
    pub id_hash: String,
    pub user_name: String,
    pub created_at: String,
    pub expires_at: String,
}

/// An audit entry to append.
#[derive(Debug, Clone, PartialEq)]
pub struct NewAudit {
    pub at: String,
    pub actor: String,
    pub action: String,
    pub target: Option<String>,
    pub via: String,
    pub detail: serde_json::Value,
}

/// An audit entry as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditRecord {
    pub id: i64,
    pub at: String,
    pub actor: String,
    pub action: String,
    pub target: Option<String>,
    pub via: String,
    pub detail: serde_json::Value,
}

/// Which audit entries to read: all given filters hold; oldest first, after `after`.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    pub actor: Option<String>,
    pub action: Option<String>,
    /// `at >= from` (the stores' time format).
    pub from: Option<String>,
    /// `at < to`.
    pub to: Option<String>,
    /// Entries with a larger id only.
    pub after: Option<i64>,
    pub limit: u32,
}

/// Users, tokens, links, console sign-ins and the audit log. Part of every [`Store`](crate::Store).
#[async_trait]
pub trait People: Send + Sync {
    /// Inserts a user; [`StoreError::Conflict`](crate::StoreError::Conflict) if the name is
    /// taken.
    async fn create_user(&self, user: &UserRecord) -> Result<()>;
    async fn get_user(&self, name: &str) -> Result<Option<UserRecord>>;
    /// Every user, by name.
    async fn list_users(&self) -> Result<Vec<UserRecord>>;
    /// Sets what is `Some` (`password_hash: Some(None)` clears it); false if no such user.
    async fn update_user(
        &self,
        name: &str,
        role: Option<&str>,
        password_hash: Option<Option<&str>>,
        at: &str,
    ) -> Result<bool>;
    /// Deletes a user with their tokens, links and console sign-ins; false if no such user.
    async fn delete_user(&self, name: &str) -> Result<bool>;

    /// Inserts a token; [`StoreError::NotFound`](crate::StoreError::NotFound) if its user
    /// does not exist.
    async fn create_token(&self, token: &TokenRecord) -> Result<()>;
    async fn token_by_hash(&self, token_hash: &str) -> Result<Option<TokenRecord>>;
    async fn get_token(&self, id: Uuid) -> Result<Option<TokenRecord>>;
    /// A user's tokens (or everyone's), oldest first.
    async fn list_tokens(&self, user_name: Option<&str>) -> Result<Vec<TokenRecord>>;
    /// Marks a token revoked (once: the first time stays); false if no such token.
    async fn revoke_token(&self, id: Uuid, at: &str) -> Result<bool>;
    async fn touch_token(&self, id: Uuid, at: &str) -> Result<()>;

    /// Links a chat identity; [`StoreError::Conflict`](crate::StoreError::Conflict) if it
    /// acts as someone already, [`StoreError::NotFound`](crate::StoreError::NotFound) if the
    /// user does not exist.
    async fn link(&self, link: &LinkRecord) -> Result<()>;
    /// False if the identity was not linked.
    async fn unlink(&self, platform: &str, identity: &str) -> Result<bool>;
    /// A user's links (or everyone's), by platform and identity.
    async fn list_links(&self, user_name: Option<&str>) -> Result<Vec<LinkRecord>>;
    async fn linked_user(&self, platform: &str, identity: &str) -> Result<Option<String>>;

    async fn create_console_session(&self, session: &ConsoleSessionRecord) -> Result<()>;
    async fn get_console_session(&self, id_hash: &str) -> Result<Option<ConsoleSessionRecord>>;
    /// Ends one sign-in; false if there was none.
    async fn delete_console_session(&self, id_hash: &str) -> Result<bool>;
    /// Ends every sign-in of a user; how many there were.
    async fn delete_console_sessions_of(&self, user_name: &str) -> Result<u64>;

    /// Replaces whom a session is shared with (user names; `*`: everyone); false if there is
    /// no such session.
    async fn set_session_shares(&self, session_id: Uuid, users: &[String]) -> Result<bool>;
    /// Whom a session is shared with, by name.
    async fn session_shares(&self, session_id: Uuid) -> Result<Vec<String>>;

    /// Appends an entry, returning its id.
    async fn append_audit(&self, entry: &NewAudit) -> Result<i64>;
    async fn list_audit(&self, filter: &AuditFilter) -> Result<Vec<AuditRecord>>;
}
