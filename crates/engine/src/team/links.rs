//! Chat identities that act as people: linked by a one-time code the person gets from the
//! console (or the API) and sends to the bot as `/link CODE`, or by an admin.
//!
//! A code is eight characters of an alphabet without look-alikes (40 bits), lives ten
//! minutes and works once; it is kept as a hash beside the console sign-ins (what it is: a
//! sign-in waiting for its chat).

use super::*;
use switchboard_protocol::people::LinkCode;
use switchboard_store::people::LinkRecord;

/// How long a link code works.
pub const LINK_CODE_TTL: Duration = Duration::from_secs(600);
/// Readable at a glance and typed on a phone: no 0/O, 1/I/L.
const ALPHABET: &[u8] = b"ABCDEFGHJKMNPQRSTUVWXYZ23456789";

fn code_key(code: &str) -> String {
    secret_hash(&format!(
        "link:{}",
        code.trim().to_ascii_uppercase().replace('-', "")
    ))
}

impl Team {
    /// A one-time code for `actor` to send to a bot as `/link CODE`.
    pub async fn new_link_code(&self, actor: &Principal) -> Result<LinkCode, TeamError> {
        if self.store.get_user(&actor.user).await?.is_none() {
            return Err(TeamError::Unprocessable(
                "the server token's built-in admin has no chat identities: link a user's".into(),
            ));
        }
        let code: String = (0..8)
            .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
            .collect();
        let now = chrono::Utc::now();
        let until = now + chrono::Duration::seconds(LINK_CODE_TTL.as_secs() as i64);
        self.store
            .create_console_session(&switchboard_store::ConsoleSessionRecord {
                id_hash: code_key(&code),
                user_name: actor.user.clone(),
                created_at: rfc3339(now),
                expires_at: rfc3339(until),
            })
            .await?;
        Ok(LinkCode {
            code: format!("{}-{}", &code[..4], &code[4..]),
            expires_at: rfc3339(until),
        })
    }

    /// Links `platform:identity` to the person a code was given to (the code then dies),
    /// or (an admin) to `user`. Only an admin — the server token a chat channel holds, or
    /// a person — links.
    pub async fn link(
        &self,
        actor: &Principal,
        platform: &str,
        identity: &str,
        code: Option<&str>,
        user: Option<&str>,
        via: Via<'_>,
    ) -> Result<User, TeamError> {
        forbidden_unless_admin(actor, "linking a chat identity")?;
        let (platform, identity) = (platform.trim(), identity.trim());
        if platform.is_empty() || identity.is_empty() {
            return Err(TeamError::Unprocessable(
                "platform and user_id must not be empty".into(),
            ));
        }
        let name = match (code, user) {
            (Some(code), None) => {
                let key = code_key(code);
                let session = self.store.get_console_session(&key).await?;
                let live = session.filter(|s| s.expires_at > now_rfc3339());
                let Some(s) = live else {
                    return Err(TeamError::NotFound(
                        "no such link code, or it was used or has expired (they last 10 minutes)"
                            .into(),
                    ));
                };
                // Once: a second use finds nothing.
                if !self.store.delete_console_session(&key).await? {
                    return Err(TeamError::NotFound("the link code was just used".into()));
                }
                s.user_name
            }
            (None, Some(user)) => user.to_string(),
            _ => {
                return Err(TeamError::Unprocessable("give either code or user".into()));
            }
        };
        // Linked again: to its new person.
        self.store.unlink(platform, identity).await?;
        self.store
            .link(&LinkRecord {
                platform: platform.to_string(),
                identity: identity.to_string(),
                user_name: name.clone(),
                created_at: now_rfc3339(),
            })
            .await
            .map_err(|e| match e {
                StoreError::NotFound(_) => TeamError::NotFound(format!("no user {name:?}")),
                e => e.into(),
            })?;
        self.record(
            &actor.user,
            "chat.link",
            Some(&name),
            via,
            serde_json::json!({ "platform": platform, "user_id": identity, "by_code": code.is_some() }),
        )
        .await;
        self.get_user(&Principal::server(), &name).await
    }

    /// Unlinks a chat identity (an admin).
    pub async fn unlink(
        &self,
        actor: &Principal,
        platform: &str,
        identity: &str,
        via: Via<'_>,
    ) -> Result<(), TeamError> {
        forbidden_unless_admin(actor, "unlinking a chat identity")?;
        let user = self.store.linked_user(platform, identity).await?;
        if !self.store.unlink(platform, identity).await? {
            return Err(TeamError::NotFound(format!(
                "{platform}:{identity} is linked to no one"
            )));
        }
        self.record(
            &actor.user,
            "chat.unlink",
            user.as_deref(),
            via,
            serde_json::json!({ "platform": platform, "user_id": identity }),
        )
        .await;
        Ok(())
    }

    /// The person a chat identity acts as, with everything their role grants; `None` if it
    /// is linked to no one.
    pub async fn linked_principal(
        &self,
        platform: &str,
        identity: &str,
    ) -> Result<Option<Principal>, TeamError> {
        match self.store.linked_user(platform, identity).await? {
            Some(name) => self.principal_of(&name, Credential::Chat).await,
            None => Ok(None),
        }
    }
}
