//! Embedded, ordered migrations with a version table.
//!
//! Written by hand rather than with `sqlx::migrate!` to avoid the macro crate's build cost
//! and to keep the SQLite and PostgreSQL lists side by side as plain files.

use sqlx::{Connection as _, Executor, PgPool, Row, SqliteConnection};

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
    (5, include_str!("../migrations/sqlite/0005_leases.sql")),
];

/// Uses `Executor::execute(raw_sql)` (see [`run_postgres`]) so that `SqliteStore::open`
/// can be spawned.
///
/// Runs on a connection of its own, opened and closed before the pool's: a pool connection
/// that had read the schema before a migration changed it would keep the old column list of
/// a statement that SQLite silently re-prepares, and sqlx then reads a row past its end
/// (a panic in sqlx's worker, seen under load as "index out of bounds: the len is 7").
pub(crate) async fn run_sqlite(conn: &mut SqliteConnection) -> Result<(), StoreError> {
    conn.execute(sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)",
    ))
    .await
    .map_err(|e| StoreError::Open(format!("creating schema_migrations: {e}")))?;
    let current: i64 = sqlx::query("SELECT COALESCE(MAX(version), 0) AS v FROM schema_migrations")
        .fetch_one(&mut *conn)
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
        let mut tx = conn
            .begin()
            .await
            .map_err(|e| StoreError::Open(e.to_string()))?;
        (&mut *tx)
            .execute(sqlx::raw_sql(sql))
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

/// `(version, sql)` in the order they apply; one for one with [`SQLITE`].
pub(crate) const POSTGRES: &[(i64, &str)] = &[
    (1, include_str!("../migrations/postgres/0001_init.sql")),
    (2, include_str!("../migrations/postgres/0002_approvals.sql")),
    (
        3,
        include_str!("../migrations/postgres/0003_backend_state.sql"),
    ),
    (4, include_str!("../migrations/postgres/0004_archive.sql")),
    (5, include_str!("../migrations/postgres/0005_leases.sql")),
];

/// Key of the transaction-scoped advisory lock that serializes migrations, so that several
/// instances starting at once on one database apply each migration exactly once.
const POSTGRES_MIGRATION_LOCK: i64 = 0x5357_4244_4d49_4752; // "SWBDMIGR"

/// Applies pending migrations, one transaction each like SQLite. Each transaction takes the
/// advisory lock before it looks at the version, so a second instance waits and then finds
/// the work done.
///
/// `Executor::execute(raw_sql)` rather than `RawSql::execute`: the latter is a generic
/// `async fn` whose future the compiler cannot prove `Send` for every lifetime, which would
/// make `PostgresStore::open` impossible to `tokio::spawn`.
pub(crate) async fn run_postgres(pool: &PgPool) -> Result<(), StoreError> {
    let newest = POSTGRES.last().map(|m| m.0).unwrap_or(0);
    loop {
        let mut tx = pool
            .begin()
            .await
            .map_err(|e| StoreError::Open(e.to_string()))?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(POSTGRES_MIGRATION_LOCK)
            .execute(&mut *tx)
            .await
            .map_err(|e| StoreError::Open(format!("taking the migration lock: {e}")))?;
        // Under the lock too: two concurrent `CREATE TABLE IF NOT EXISTS` can collide.
        (&mut *tx)
            .execute(sqlx::raw_sql(
                "CREATE TABLE IF NOT EXISTS schema_migrations \
                 (version BIGINT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
            ))
            .await
            .map_err(|e| StoreError::Open(format!("creating schema_migrations: {e}")))?;
        let current: i64 =
            sqlx::query("SELECT COALESCE(MAX(version), 0) AS v FROM schema_migrations")
                .fetch_one(&mut *tx)
                .await
                .map_err(|e| StoreError::Open(e.to_string()))?
                .try_get("v")
                .map_err(|e| StoreError::Open(e.to_string()))?;
        if current > newest {
            return Err(StoreError::Open(format!(
                "database schema version {current} is newer than this binary knows ({newest}); upgrade switchboard"
            )));
        }
        let Some((version, sql)) = POSTGRES.iter().find(|(v, _)| *v > current) else {
            tx.commit()
                .await
                .map_err(|e| StoreError::Open(e.to_string()))?;
            return Ok(());
        };
        (&mut *tx)
            .execute(sqlx::raw_sql(sql))
            .await
            .map_err(|e| StoreError::Open(format!("migration {version}: {e}")))?;
        sqlx::query("INSERT INTO schema_migrations (version) VALUES ($1)")
            .bind(version)
            .execute(&mut *tx)
            .await
            .map_err(|e| StoreError::Open(format!("migration {version}: {e}")))?;
        tx.commit()
            .await
            .map_err(|e| StoreError::Open(e.to_string()))?;
        tracing::info!(version, "applied migration");
    }
}
