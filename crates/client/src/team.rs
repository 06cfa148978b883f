//! A team's routes: who am I, users, personal tokens, the audit log.

use switchboard_protocol::people::{
    CreateTokenRequest, CreateUserRequest, CreatedToken, LinkCode, LinkRequest, ListAuditResponse,
    ListTokensResponse, ListUsersResponse, Me, TokenInfo, UpdateUserRequest, User,
};
use uuid::Uuid;

use crate::{Client, ClientError};

/// The filters of `GET /v1/audit`.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct AuditQuery {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

impl Client {
    /// `GET /v1/me`.
    pub async fn me(&self) -> Result<Me, ClientError> {
        self.json(self.request(reqwest::Method::GET, "/v1/me"))
            .await
    }

    /// `GET /v1/users`.
    pub async fn list_users(&self) -> Result<ListUsersResponse, ClientError> {
        self.json(self.request(reqwest::Method::GET, "/v1/users"))
            .await
    }

    /// `POST /v1/users`.
    pub async fn create_user(&self, req: &CreateUserRequest) -> Result<User, ClientError> {
        self.json(self.request(reqwest::Method::POST, "/v1/users").json(req))
            .await
    }

    /// `PATCH /v1/users/{name}`.
    pub async fn update_user(
        &self,
        name: &str,
        req: &UpdateUserRequest,
    ) -> Result<User, ClientError> {
        self.json(
            self.request(reqwest::Method::PATCH, &format!("/v1/users/{}", seg(name)))
                .json(req),
        )
        .await
    }

    /// `DELETE /v1/users/{name}`.
    pub async fn delete_user(&self, name: &str) -> Result<(), ClientError> {
        self.send(self.request(reqwest::Method::DELETE, &format!("/v1/users/{}", seg(name))))
            .await
            .map(|_| ())
    }

    /// `GET /v1/tokens` (an admin's `user` filter).
    pub async fn list_tokens(&self, user: Option<&str>) -> Result<ListTokensResponse, ClientError> {
        let mut r = self.request(reqwest::Method::GET, "/v1/tokens");
        if let Some(u) = user {
            r = r.query(&[("user", u)]);
        }
        self.json(r).await
    }

    /// `POST /v1/tokens`: the answer's `token` is shown this once.
    pub async fn create_token(
        &self,
        req: &CreateTokenRequest,
    ) -> Result<CreatedToken, ClientError> {
        self.json(self.request(reqwest::Method::POST, "/v1/tokens").json(req))
            .await
    }

    /// `DELETE /v1/tokens/{id}`.
    pub async fn revoke_token(&self, id: Uuid) -> Result<TokenInfo, ClientError> {
        self.json(self.request(reqwest::Method::DELETE, &format!("/v1/tokens/{id}")))
            .await
    }

    /// `POST /v1/me/link-code`.
    pub async fn link_code(&self) -> Result<LinkCode, ClientError> {
        self.json(self.request(reqwest::Method::POST, "/v1/me/link-code"))
            .await
    }

    /// `POST /v1/links`.
    pub async fn link(&self, req: &LinkRequest) -> Result<User, ClientError> {
        self.json(self.request(reqwest::Method::POST, "/v1/links").json(req))
            .await
    }

    /// `DELETE /v1/links/{platform}/{user_id}`.
    pub async fn unlink(&self, platform: &str, user_id: &str) -> Result<(), ClientError> {
        self.send(self.request(
            reqwest::Method::DELETE,
            &format!("/v1/links/{}/{}", seg(platform), seg(user_id)),
        ))
        .await
        .map(|_| ())
    }

    /// `GET /v1/audit`.
    pub async fn audit(&self, q: &AuditQuery) -> Result<ListAuditResponse, ClientError> {
        self.json(self.request(reqwest::Method::GET, "/v1/audit").query(q))
            .await
    }
}

/// A user name as one path segment (names are `a-z 0-9 . _ - @`; anything else is escaped).
pub(crate) fn seg(name: &str) -> String {
    name.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"._-@".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
