//! [`People`] on either database: users, tokens, links, console sign-ins, the audit log.

use async_trait::async_trait;
use uuid::Uuid;

use super::{Cols, SqlStore, with_db};
use crate::people::{
    AuditFilter, AuditRecord, ConsoleSessionRecord, LinkRecord, NewAudit, People, TokenRecord,
    UserRecord,
};
use crate::{Result, StoreError};
use switchboard_db::Cols as _;

const USER_COLS: &str = "name, role, password_hash, created_at, updated_at";
const TOKEN_COLS: &str =
    "id, user_name, name, token_hash, scopes, created_at, expires_at, last_used_at, revoked_at";
const LINK_COLS: &str = "platform, identity, user_name, created_at";
const CONSOLE_COLS: &str = "id_hash, user_name, created_at, expires_at";
const AUDIT_COLS: &str = "id, at, actor, action, target, via, detail";

fn user_from_row(r: &impl Cols) -> Result<UserRecord> {
    Ok(UserRecord {
        name: r.text("name")?,
        role: r.text("role")?,
        password_hash: r.opt_text("password_hash")?,
        created_at: r.text("created_at")?,
        updated_at: r.text("updated_at")?,
    })
}

fn token_from_row(r: &impl Cols) -> Result<TokenRecord> {
    Ok(TokenRecord {
        id: r.uuid("id")?,
        user_name: r.text("user_name")?,
        name: r.text("name")?,
        token_hash: r.text("token_hash")?,
        scopes: r
            .text("scopes")?
            .split_whitespace()
            .map(str::to_string)
            .collect(),
        created_at: r.text("created_at")?,
        expires_at: r.opt_text("expires_at")?,
        last_used_at: r.opt_text("last_used_at")?,
        revoked_at: r.opt_text("revoked_at")?,
    })
}

fn link_from_row(r: &impl Cols) -> Result<LinkRecord> {
    Ok(LinkRecord {
        platform: r.text("platform")?,
        identity: r.text("identity")?,
        user_name: r.text("user_name")?,
        created_at: r.text("created_at")?,
    })
}

fn console_from_row(r: &impl Cols) -> Result<ConsoleSessionRecord> {
    Ok(ConsoleSessionRecord {
        id_hash: r.text("id_hash")?,
        user_name: r.text("user_name")?,
        created_at: r.text("created_at")?,
        expires_at: r.text("expires_at")?,
    })
}

fn audit_from_row(r: &impl Cols) -> Result<AuditRecord> {
    Ok(AuditRecord {
        id: r.int("id")?,
        at: r.text("at")?,
        actor: r.text("actor")?,
        action: r.text("action")?,
        target: r.opt_text("target")?,
        via: r.text("via")?,
        detail: r.json("detail")?,
    })
}

/// A foreign-key violation names the user that does not exist.
fn missing_user(e: sqlx::Error, user: &str) -> StoreError {
    match e {
        sqlx::Error::Database(db) if db.is_foreign_key_violation() => {
            StoreError::NotFound(format!("user {user}"))
        }
        e => e.into(),
    }
}

#[async_trait]
impl People for SqlStore {
    async fn create_user(&self, u: &UserRecord) -> Result<()> {
        with_db!(self, |pool, _d| {
            sqlx::query(
                "INSERT INTO users (name, role, password_hash, created_at, updated_at) \
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(&u.name)
            .bind(&u.role)
            .bind(&u.password_hash)
            .bind(&u.created_at)
            .bind(&u.updated_at)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    async fn get_user(&self, name: &str) -> Result<Option<UserRecord>> {
        with_db!(self, |pool, _d| {
            sqlx::query(sqlx::AssertSqlSafe(&*format!(
                "SELECT {USER_COLS} FROM users WHERE name = $1"
            )))
            .bind(name)
            .fetch_optional(pool)
            .await?
            .as_ref()
            .map(user_from_row)
            .transpose()
        })
    }

    async fn list_users(&self) -> Result<Vec<UserRecord>> {
        with_db!(self, |pool, _d| {
            sqlx::query(sqlx::AssertSqlSafe(&*format!(
                "SELECT {USER_COLS} FROM users ORDER BY name"
            )))
            .fetch_all(pool)
            .await?
            .iter()
            .map(user_from_row)
            .collect()
        })
    }

    async fn update_user(
        &self,
        name: &str,
        role: Option<&str>,
        password_hash: Option<Option<&str>>,
        at: &str,
    ) -> Result<bool> {
        let set_password = password_hash.is_some();
        let password = password_hash.flatten();
        with_db!(self, |pool, _d| {
            let r = sqlx::query(
                "UPDATE users SET role = COALESCE($2, role), \
                 password_hash = CASE WHEN $3 THEN $4 ELSE password_hash END, updated_at = $5 \
                 WHERE name = $1",
            )
            .bind(name)
            .bind(role)
            .bind(set_password)
            .bind(password)
            .bind(at)
            .execute(pool)
            .await?;
            Ok(r.rows_affected() > 0)
        })
    }

    async fn delete_user(&self, name: &str) -> Result<bool> {
        with_db!(self, |pool, _d| {
            let r = sqlx::query("DELETE FROM users WHERE name = $1")
                .bind(name)
                .execute(pool)
                .await?;
            Ok(r.rows_affected() > 0)
        })
    }

    async fn create_token(&self, t: &TokenRecord) -> Result<()> {
        with_db!(self, |pool, d| {
            sqlx::query(
                "INSERT INTO api_tokens (id, user_name, name, token_hash, scopes, created_at, \
                 expires_at, last_used_at, revoked_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            )
            .bind(d.id(t.id))
            .bind(&t.user_name)
            .bind(&t.name)
            .bind(&t.token_hash)
            .bind(t.scopes.join(" "))
            .bind(&t.created_at)
            .bind(&t.expires_at)
            .bind(&t.last_used_at)
            .bind(&t.revoked_at)
            .execute(pool)
            .await
            .map_err(|e| missing_user(e, &t.user_name))?;
        });
        Ok(())
    }

    async fn token_by_hash(&self, token_hash: &str) -> Result<Option<TokenRecord>> {
        with_db!(self, |pool, _d| {
            sqlx::query(sqlx::AssertSqlSafe(&*format!(
                "SELECT {TOKEN_COLS} FROM api_tokens WHERE token_hash = $1"
            )))
            .bind(token_hash)
            .fetch_optional(pool)
            .await?
            .as_ref()
            .map(token_from_row)
            .transpose()
        })
    }

    async fn get_token(&self, id: Uuid) -> Result<Option<TokenRecord>> {
        with_db!(self, |pool, d| {
            sqlx::query(sqlx::AssertSqlSafe(&*format!(
                "SELECT {TOKEN_COLS} FROM api_tokens WHERE id = $1"
            )))
            .bind(d.id(id))
            .fetch_optional(pool)
            .await?
            .as_ref()
            .map(token_from_row)
            .transpose()
        })
    }

    async fn list_tokens(&self, user_name: Option<&str>) -> Result<Vec<TokenRecord>> {
        with_db!(self, |pool, _d| {
            sqlx::query(sqlx::AssertSqlSafe(&*format!(
                "SELECT {TOKEN_COLS} FROM api_tokens WHERE ($1 IS NULL OR user_name = $1) \
                 ORDER BY created_at, id"
            )))
            .bind(user_name)
            .fetch_all(pool)
            .await?
            .iter()
            .map(token_from_row)
            .collect()
        })
    }

    async fn revoke_token(&self, id: Uuid, at: &str) -> Result<bool> {
        with_db!(self, |pool, d| {
            let r = sqlx::query(
                "UPDATE api_tokens SET revoked_at = COALESCE(revoked_at, $2) WHERE id = $1",
            )
            .bind(d.id(id))
            .bind(at)
            .execute(pool)
            .await?;
            Ok(r.rows_affected() > 0)
        })
    }

    async fn touch_token(&self, id: Uuid, at: &str) -> Result<()> {
        with_db!(self, |pool, d| {
            sqlx::query("UPDATE api_tokens SET last_used_at = $2 WHERE id = $1")
                .bind(d.id(id))
                .bind(at)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    async fn link(&self, l: &LinkRecord) -> Result<()> {
        with_db!(self, |pool, _d| {
            sqlx::query(
                "INSERT INTO user_links (platform, identity, user_name, created_at) \
                 VALUES ($1, $2, $3, $4)",
            )
            .bind(&l.platform)
            .bind(&l.identity)
            .bind(&l.user_name)
            .bind(&l.created_at)
            .execute(pool)
            .await
            .map_err(|e| missing_user(e, &l.user_name))?;
        });
        Ok(())
    }

    async fn unlink(&self, platform: &str, identity: &str) -> Result<bool> {
        with_db!(self, |pool, _d| {
            let r = sqlx::query("DELETE FROM user_links WHERE platform = $1 AND identity = $2")
                .bind(platform)
                .bind(identity)
                .execute(pool)
                .await?;
            Ok(r.rows_affected() > 0)
        })
    }

    async fn list_links(&self, user_name: Option<&str>) -> Result<Vec<LinkRecord>> {
        with_db!(self, |pool, _d| {
            sqlx::query(sqlx::AssertSqlSafe(&*format!(
                "SELECT {LINK_COLS} FROM user_links WHERE ($1 IS NULL OR user_name = $1) \
                 ORDER BY platform, identity"
            )))
            .bind(user_name)
            .fetch_all(pool)
            .await?
            .iter()
            .map(link_from_row)
            .collect()
        })
    }

    async fn linked_user(&self, platform: &str, identity: &str) -> Result<Option<String>> {
        with_db!(self, |pool, _d| {
            let row = sqlx::query(
                "SELECT user_name FROM user_links WHERE platform = $1 AND identity = $2",
            )
            .bind(platform)
            .bind(identity)
            .fetch_optional(pool)
            .await?;
            row.as_ref()
                .map(|r| r.text("user_name"))
                .transpose()
                .map_err(Into::into)
        })
    }

    async fn create_console_session(&self, s: &ConsoleSessionRecord) -> Result<()> {
        with_db!(self, |pool, _d| {
            sqlx::query(
                "INSERT INTO console_sessions (id_hash, user_name, created_at, expires_at) \
                 VALUES ($1, $2, $3, $4)",
            )
            .bind(&s.id_hash)
            .bind(&s.user_name)
            .bind(&s.created_at)
            .bind(&s.expires_at)
            .execute(pool)
            .await
            .map_err(|e| missing_user(e, &s.user_name))?;
        });
        Ok(())
    }

    async fn get_console_session(&self, id_hash: &str) -> Result<Option<ConsoleSessionRecord>> {
        with_db!(self, |pool, _d| {
            sqlx::query(sqlx::AssertSqlSafe(&*format!(
                "SELECT {CONSOLE_COLS} FROM console_sessions WHERE id_hash = $1"
            )))
            .bind(id_hash)
            .fetch_optional(pool)
            .await?
            .as_ref()
            .map(console_from_row)
            .transpose()
        })
    }

    async fn delete_console_session(&self, id_hash: &str) -> Result<bool> {
        with_db!(self, |pool, _d| {
            let r = sqlx::query("DELETE FROM console_sessions WHERE id_hash = $1")
                .bind(id_hash)
                .execute(pool)
                .await?;
            Ok(r.rows_affected() > 0)
        })
    }

    async fn delete_console_sessions_of(&self, user_name: &str) -> Result<u64> {
        with_db!(self, |pool, _d| {
            let r = sqlx::query("DELETE FROM console_sessions WHERE user_name = $1")
                .bind(user_name)
                .execute(pool)
                .await?;
            Ok(r.rows_affected())
        })
    }

    async fn set_session_shares(&self, session_id: Uuid, users: &[String]) -> Result<bool> {
        with_db!(self, |pool, d| {
            let mut tx = pool.begin().await?;
            // A no-op write first: on SQLite it takes the write lock at once (waiting its
            // turn), where a read first would fail to upgrade while another writer holds it.
            let exists = sqlx::query("UPDATE sessions SET id = id WHERE id = $1")
                .bind(d.id(session_id))
                .execute(&mut *tx)
                .await?
                .rows_affected()
                > 0;
            if !exists {
                return Ok(false);
            }
            sqlx::query("DELETE FROM session_shares WHERE session_id = $1")
                .bind(d.id(session_id))
                .execute(&mut *tx)
                .await?;
            for u in users {
                sqlx::query(
                    "INSERT INTO session_shares (session_id, user_name) VALUES ($1, $2) \
                     ON CONFLICT DO NOTHING",
                )
                .bind(d.id(session_id))
                .bind(u)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            Ok(true)
        })
    }

    async fn session_shares(&self, session_id: Uuid) -> Result<Vec<String>> {
        with_db!(self, |pool, d| {
            let rows = sqlx::query(
                "SELECT user_name FROM session_shares WHERE session_id = $1 ORDER BY user_name",
            )
            .bind(d.id(session_id))
            .fetch_all(pool)
            .await?;
            rows.iter()
                .map(|r| r.text("user_name").map_err(Into::into))
                .collect()
        })
    }

    async fn append_audit(&self, e: &NewAudit) -> Result<i64> {
        let detail = serde_json::to_string(&e.detail)
            .map_err(|err| StoreError::Corrupt(format!("audit detail: {err}")))?;
        with_db!(self, |pool, _d| {
            let row = sqlx::query(
                "INSERT INTO audit_log (at, actor, action, target, via, detail) \
                 VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
            )
            .bind(&e.at)
            .bind(&e.actor)
            .bind(&e.action)
            .bind(&e.target)
            .bind(&e.via)
            .bind(&detail)
            .fetch_one(pool)
            .await?;
            Ok(row.int("id")?)
        })
    }

    async fn list_audit(&self, f: &AuditFilter) -> Result<Vec<AuditRecord>> {
        with_db!(self, |pool, _d| {
            sqlx::query(sqlx::AssertSqlSafe(&*format!(
                "SELECT {AUDIT_COLS} FROM audit_log WHERE id > $1 \
                 AND ($2 IS NULL OR actor = $2) AND ($3 IS NULL OR action = $3) \
                 AND ($4 IS NULL OR at >= $4) AND ($5 IS NULL OR at < $5) \
                 ORDER BY id LIMIT $6"
            )))
            .bind(f.after.unwrap_or(0))
            .bind(&f.actor)
            .bind(&f.action)
            .bind(&f.from)
            .bind(&f.to)
            .bind(i64::from(f.limit))
            .fetch_all(pool)
            .await?
            .iter()
            .map(audit_from_row)
            .collect()
        })
    }
}
