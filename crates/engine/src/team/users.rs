//! Users and their personal API tokens.

use super::*;

impl Team {
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
            Some(p) => Some(new_password_hash(p).await?),
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
            Some(p) => Some(new_password_hash(p).await?),
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
}
