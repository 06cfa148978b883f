//! Sessions and the team: sharing, and who may decide a session's tool calls.

use super::*;

impl Team {
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
}
