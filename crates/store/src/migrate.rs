//! Embedded, ordered migrations with a version table.
//!
//! Written by hand rather than with `sqlx::migrate!` to avoid the macro crate's build cost
//! and to keep the SQLite and PostgreSQL lists side by side as plain files.

use sqlx::{Row, SqlitePool};

use crate::StoreError;

/// `(version, sql)` in the order they apply.
pub(crate) const SQLITE: &[(i64, &str)] = &[
    (1, include_str!("../migrations/sqlite/0001_init.sql")),
    (2, include_str!("../migrations/sqlite/0002_approvals.sql")),
    (
        3,
        include_str!("../migrations/sqlite/0003_backend_state.sql"),
    ),
    (4, include_str!("../migrations/sqlite/0004_archive.sql")),
];

pub(crate) async fn run_sqlite(pool: &SqlitePool) -> Result<(), StoreError> {
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)",
    )
    .execute(pool)
    .await
    .map_err(|e| StoreError::Open(format!("creating schema_migrations: {e}")))?;
    let current: i64 = sqlx::query("SELECT COALESCE(MAX(version), 0) AS v FROM schema_migrations")
        .fetch_one(pool)
        .await
        .map_err(|e| StoreError::Open(e.to_string()))?
        .try_get("v")
        .map_err(|e| StoreError::Open(e.to_string()))?;
    let newest = SQLITE.last().map(|m| m.0).unwrap_or(0);
    if current > newest {
        return Err(StoreError::Open(format!(
            "database schema version {current} is newer than this binary knows ({newest}); upgrade switchboard"
        )));
    }
    for (version, sql) in SQLITE.iter().filter(|(v, _)| *v > current) {
        let mut tx = pool
            .begin()
            .await
            .map_err(|e| StoreError::Open(e.to_string()))?;
        sqlx::raw_sql(sql)
            .execute(&mut *tx)
            .await
            .map_err(|e| StoreError::Open(format!("migration {version}: {e}")))?;
        sqlx::query(
            "INSERT INTO schema_migrations (version, applied_at) VALUES (?, datetime('now'))",
        )
        .bind(version)
        .execute(&mut *tx)
        .await
        .map_err(|e| StoreError::Open(format!("migration {version}: {e}")))?;
        tx.commit()
            .await
            .map_err(|e| StoreError::Open(e.to_string()))?;
        tracing::info!(version, "applied migration");
    }
    Ok(())
}
