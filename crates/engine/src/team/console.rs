//! Console sign-ins: sessions kept in the store, opened by a password or an identity
//! provider.

use super::*;

impl Team {
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
            Ok(p) => p.map(|p| Principal {
                console_session: Some(s.id_hash.clone()),
                ..p
            }),
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
}
