//! Teams on the wire: users and their roles, personal API tokens with scopes, who is
//! calling (`/v1/me`), and the audit log. See docs/teams.md.
//!
//! A request is made by a *principal*: the server's own token (the built-in admin), a
//! person's API token, or a person signed in to the console. What it may do is a set of
//! [`Scope`]s: a token's own scopes, never more than its user's [`Role`] allows (the two
//! are intersected on every request, so a role taken away narrows every token at once).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

/// What a person may do, as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
// Not `Role`: a message's role (user, assistant) has that name in the document.
#[schema(as = TeamRole)]
pub enum Role {
    /// Everything, users, tokens and the audit log included.
    Admin,
    /// Sessions, approvals, schedules, channels and the relay; not users or settings.
    Operator,
    /// Sessions and approvals.
    Member,
    /// Reads only.
    Viewer,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Admin, Role::Operator, Role::Member, Role::Viewer];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Operator => "operator",
            Role::Member => "member",
            Role::Viewer => "viewer",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// The scopes this role grants.
    pub fn scopes(self) -> &'static [Scope] {
        use Scope::*;
        match self {
            Role::Admin => &Scope::ALL,
            Role::Operator => &[
                SessionsRead,
                SessionsWrite,
                ApprovalsDecide,
                SchedulesRead,
                SchedulesWrite,
                GatewayRead,
                GatewayAdmin,
                RelayRead,
                RelaySend,
                RelayAdmin,
                SettingsRead,
                MetricsRead,
                UsageRead,
                BudgetsWrite,
            ],
            Role::Member => &[SessionsRead, SessionsWrite, ApprovalsDecide, UsageRead],
            Role::Viewer => &[
                SessionsRead,
                SchedulesRead,
                GatewayRead,
                RelayRead,
                MetricsRead,
                UsageRead,
            ],
        }
    }

    pub fn allows(self, scope: Scope) -> bool {
        self.scopes().contains(&scope)
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One permission; each operation of the API needs one (the OpenAPI document lists it as
/// the operation's `bearer` security scope).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema,
)]
pub enum Scope {
    /// Sessions, their events, transcripts, files, diffs and checkpoints; the approvals
    /// inbox; the model lists.
    #[serde(rename = "sessions:read")]
    SessionsRead,
    /// Create, message, steer, cancel, change and delete sessions; upload files; restore
    /// checkpoints; the OpenAI-compatible door and the ACP hub.
    #[serde(rename = "sessions:write")]
    SessionsWrite,
    /// Allow or deny a tool call.
    #[serde(rename = "approvals:decide")]
    ApprovalsDecide,
    #[serde(rename = "schedules:read")]
    SchedulesRead,
    #[serde(rename = "schedules:write")]
    SchedulesWrite,
    /// The chat channels' status, conversations and pairing requests.
    #[serde(rename = "gateway:read")]
    GatewayRead,
    /// Approve pairings, unbind conversations, send through a channel, test a channel.
    #[serde(rename = "gateway:admin")]
    GatewayAdmin,
    #[serde(rename = "relay:read")]
    RelayRead,
    /// Send a message into a relay bundle.
    #[serde(rename = "relay:send")]
    RelaySend,
    /// Start and stop relay bundles.
    #[serde(rename = "relay:admin")]
    RelayAdmin,
    /// Read the server's settings (secrets are never returned).
    #[serde(rename = "settings:read")]
    SettingsRead,
    /// Prometheus `/metrics`.
    #[serde(rename = "metrics:read")]
    MetricsRead,
    /// What model calls used and cost, and the budgets' state (a person without
    /// `sessions:read` of every session sees their own usage only).
    #[serde(rename = "usage:read")]
    UsageRead,
    /// Add, change and remove budgets made over the API.
    #[serde(rename = "budgets:write")]
    BudgetsWrite,
    /// Everything else: change settings, manage users and every token, read the audit log.
    #[serde(rename = "admin")]
    Admin,
}

impl Scope {
    pub const ALL: [Scope; 15] = [
        Scope::SessionsRead,
        Scope::SessionsWrite,
        Scope::ApprovalsDecide,
        Scope::SchedulesRead,
        Scope::SchedulesWrite,
        Scope::GatewayRead,
        Scope::GatewayAdmin,
        Scope::RelayRead,
        Scope::RelaySend,
        Scope::RelayAdmin,
        Scope::SettingsRead,
        Scope::MetricsRead,
        Scope::UsageRead,
        Scope::BudgetsWrite,
        Scope::Admin,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::SessionsRead => "sessions:read",
            Scope::SessionsWrite => "sessions:write",
            Scope::ApprovalsDecide => "approvals:decide",
            Scope::SchedulesRead => "schedules:read",
            Scope::SchedulesWrite => "schedules:write",
            Scope::GatewayRead => "gateway:read",
            Scope::GatewayAdmin => "gateway:admin",
            Scope::RelayRead => "relay:read",
            Scope::RelaySend => "relay:send",
            Scope::RelayAdmin => "relay:admin",
            Scope::SettingsRead => "settings:read",
            Scope::MetricsRead => "metrics:read",
            Scope::UsageRead => "usage:read",
            Scope::BudgetsWrite => "budgets:write",
            Scope::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|x| x.as_str() == s)
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The longest user name.
pub const MAX_USER_NAME: usize = 64;

/// Whether `name` may name a user: 1–64 of `a-z 0-9 . _ -` (and `@` for an address),
/// starting with a letter or digit. `admin` is the server token's own name and taken.
pub fn user_name_problem(name: &str) -> Option<String> {
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-@".contains(c);
    if name.is_empty() || name.len() > MAX_USER_NAME {
        return Some(format!("a user name is 1 to {MAX_USER_NAME} characters"));
    }
    if !name.chars().all(ok_char) || !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Some(format!(
            "user name {name:?}: lower-case letters, digits and . _ - @ only, starting with a letter or digit"
        ));
    }
    if name == BUILTIN_ADMIN {
        return Some(format!(
            "{BUILTIN_ADMIN:?} is the server token's own name; choose another"
        ));
    }
    None
}

/// The name the server's own token acts under.
pub const BUILTIN_ADMIN: &str = "admin";

/// A chat identity acting as a user: `platform` is the channel's platform (`telegram`,
/// `slack`, `discord`, …) and `user_id` the platform's id of the person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ChatLink {
    pub platform: String,
    pub user_id: String,
}

/// A person.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct User {
    pub name: String,
    pub role: Role,
    /// Whether the person can sign in to the console with a password.
    pub has_password: bool,
    #[serde(default)]
    pub links: Vec<ChatLink>,
    pub created_at: String,
    pub updated_at: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ListUsersResponse {
    pub users: Vec<User>,
}

/// `POST /v1/users`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateUserRequest {
    /// Lower-case letters, digits and `. _ - @`, starting with a letter or digit; not
    /// `admin` (the server token's).
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = "^[a-z0-9][a-z0-9._@-]{0,63}$"
    )]
    pub name: String,
    pub role: Role,
    /// For signing in to the console; at least 12 characters. Without one the person signs
    /// in through the identity provider, or uses tokens only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 12, max_length = 1024)]
    pub password: Option<String>,
}

/// `PATCH /v1/users/{name}`: what is given changes.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateUserRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// A new password (at least 12 characters); the person's console sessions end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 12, max_length = 1024)]
    pub password: Option<String>,
}

/// The shortest password accepted.
pub const MIN_PASSWORD: usize = 12;
/// The longest password accepted.
pub const MAX_PASSWORD: usize = 1024;

/// A personal API token, without its secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TokenInfo {
    pub id: Uuid,
    pub user: String,
    /// What it is for (`ci`, `laptop`).
    pub name: String,
    pub scopes: Vec<Scope>,
    pub created_at: String,
    /// After this it is refused; `null`: never.
    pub expires_at: Option<String>,
    /// Its last use (recorded at most once a minute).
    pub last_used_at: Option<String>,
    /// When it was revoked; a revoked token is refused everywhere.
    pub revoked_at: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ListTokensResponse {
    pub tokens: Vec<TokenInfo>,
}

/// The longest a token may live, in days.
pub const MAX_TOKEN_DAYS: u32 = 3650;

/// `POST /v1/tokens`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTokenRequest {
    /// Whose token: the caller's own unless an admin names someone else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 64)]
    pub user: Option<String>,
    #[schema(min_length = 1, max_length = 64)]
    pub name: String,
    /// At least one; none beyond what the user's role allows.
    #[schema(min_items = 1)]
    pub scopes: Vec<Scope>,
    /// Days until it expires (1–3650); absent: it never expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 3650)]
    pub expires_in_days: Option<u32>,
}

/// The new token: `token` is shown this once and stored only as a hash.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CreatedToken {
    pub token: String,
    #[serde(flatten)]
    pub info: TokenInfo,
}

/// `POST /v1/me/link-code`: send `/link CODE` to the bot on any chat platform within
/// `expires_at`, and that chat identity acts as you from then on.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LinkCode {
    pub code: String,
    pub expires_at: String,
}

/// `POST /v1/links`: link a chat identity to a person — by the one-time code they got
/// (`code`, what a chat channel sends for `/link CODE`), or, for an admin, by name (`user`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LinkRequest {
    /// The chat channel (`telegram`, `slack`, `discord`, …).
    #[schema(min_length = 1, max_length = 64)]
    pub platform: String,
    /// The platform's id of the person.
    #[schema(min_length = 1, max_length = 256)]
    pub user_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 64)]
    pub code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 64)]
    pub user: Option<String>,
}

/// The header with which a surface holding the server token acts for a chat identity
/// (`platform:user_id`): the request is the linked person's, with their role; an identity
/// linked to no one leaves it the surface's own.
pub const ON_BEHALF_OF: &str = "x-switchboard-on-behalf-of";

/// How a principal proved who it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Credential {
    /// The server's own token (the built-in admin).
    ServerToken,
    /// A personal API token.
    Token,
    /// A console sign-in.
    Console,
    /// A chat identity linked to the person, vouched for by the chat channel that
    /// received the message.
    Chat,
}

/// `GET /v1/me`: who the caller is and what it may do.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Me {
    pub user: String,
    pub role: Role,
    pub scopes: Vec<Scope>,
    pub credential: Credential,
    /// The token's id, when the caller used a personal token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_id: Option<Uuid>,
}

/// One entry of the audit log: who did what, where, to what. Entries are only ever
/// appended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AuditEntry {
    /// Increasing; the cursor of `GET /v1/audit?after=`.
    pub id: i64,
    pub at: String,
    /// The user who did it (`admin` for the server token), or for a failed sign-in the name
    /// that was tried.
    pub actor: String,
    /// `user.create`, `user.role`, `user.delete`, `token.create`, `token.revoke`,
    /// `signin`, `signin.failed`, `signout`, `approval.decide`, `settings.change`, …
    pub action: String,
    /// What it was done to (a user, a token id, a session id), if anything.
    pub target: Option<String>,
    /// Where: `api`, `console`, `cli`, a chat channel.
    pub via: String,
    /// The details of the action.
    #[schema(value_type = Object)]
    pub detail: serde_json::Value,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ListAuditResponse {
    pub entries: Vec<AuditEntry>,
    /// The `after` of the next page, when there may be more.
    pub next: Option<i64>,
}

/// Who makes a request, once authenticated, and what it may do: put in the request by the
/// authentication layer, read by handlers that decide per caller (whose tokens, whose
/// sessions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub user: String,
    pub role: Role,
    /// What it may do: its token's scopes within its role's (everything the role grants
    /// for a console sign-in or the server token).
    pub scopes: Vec<Scope>,
    pub credential: Credential,
    pub token_id: Option<Uuid>,
    /// The hash of the console session it signed in with (a console sign-in), so that a
    /// stream it holds ends when the session does.
    pub console_session: Option<String>,
}

impl Principal {
    /// The server's own token: the built-in admin.
    pub fn server() -> Self {
        Self {
            user: BUILTIN_ADMIN.into(),
            role: Role::Admin,
            scopes: Scope::ALL.to_vec(),
            credential: Credential::ServerToken,
            token_id: None,
            console_session: None,
        }
    }

    pub fn has(&self, scope: Scope) -> bool {
        self.scopes.contains(&scope)
    }

    /// May manage users, every token and read the audit log.
    pub fn is_admin(&self) -> bool {
        self.has(Scope::Admin)
    }

    pub fn me(&self) -> Me {
        Me {
            user: self.user.clone(),
            role: self.role,
            scopes: self.scopes.clone(),
            credential: self.credential,
            token_id: self.token_id,
        }
    }
}
