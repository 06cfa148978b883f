//! Applying each crate's migrations ([`Migrations`]) on either database, one transaction
//! each; a database newer than the binary is refused.

use sqlx::postgres::PgPool;
use sqlx::sqlite::SqliteConnection;
use sqlx::{Connection as _, Executor};

use crate::{DbError, Migrations, now};

/// Applies pending SQLite migrations, one transaction each.
///
/// `Executor::execute(raw_sql)` rather than `RawSql::execute`: the latter is a generic
/// `async fn` whose future the compiler cannot prove `Send`, which would make the stores'
/// `open` impossible to `tokio::spawn`.
pub async fn migrate_sqlite(
    conn: &mut SqliteConnection,
    migrations: &Migrations,
) -> Result<(), DbError> {
    let owner = migrations.owner;
    let db = |source| DbError::Db { owner, source };
    conn.execute(sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)",
    ))
    .await
    .map_err(db)?;
    let current: i64 =
        sqlx::query_scalar("SELECT COALESCE(MAX(version), 0) FROM schema_migrations")
            .fetch_one(&mut *conn)
            .await
            .map_err(db)?;
    refuse_newer(owner, current, migrations.sqlite)?;
    for &(version, sql) in migrations.sqlite.iter().filter(|(v, _)| *v > current) {
        let failed = |source| DbError::Migration {
            owner,
            version,
            source,
        };
        let started = announce(owner, version, current);
        let mut tx = conn.begin().await.map_err(db)?;
        (&mut *tx)
            .execute(sqlx::raw_sql(sql))
            .await
            .map_err(failed)?;
        sqlx::query("INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)")
            .bind(version)
            .bind(now())
            .execute(&mut *tx)
            .await
            .map_err(failed)?;
        tx.commit().await.map_err(failed)?;
        applied(owner, version, current, started);
    }
    Ok(())
}

/// Applies pending PostgreSQL migrations, one transaction each. Each transaction takes the
/// advisory lock before it looks at the version, so a second instance waits and then finds
/// the work done.
pub async fn migrate_postgres(pool: &PgPool, migrations: &Migrations) -> Result<(), DbError> {
    let owner = migrations.owner;
    let db = |source| DbError::Db { owner, source };
    let table = match migrations.postgres_schema {
        Some(schema) => format!("{schema}.schema_migrations"),
        None => "schema_migrations".to_owned(),
    };
    // The version found first: whether this start upgrades a database that has data (the
    // loop reads it again each time, after the lock, as another instance may have moved it).
    let mut found: Option<i64> = None;
    loop {
        let mut tx = pool.begin().await.map_err(db)?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(migrations.postgres_lock)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        // Under the lock: two concurrent `CREATE … IF NOT EXISTS` can both find nothing and
        // one then fails on the catalog's unique index. The schema is looked up first because
        // `CREATE SCHEMA IF NOT EXISTS` wants the CREATE privilege on the database even when
        // the schema is there, and a role given only the schema need not have it.
        if let Some(schema) = migrations.postgres_schema {
            let has_schema: bool =
                sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
                    .bind(schema)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(db)?;
            if !has_schema {
                (&mut *tx)
                    .execute(sqlx::raw_sql(sqlx::AssertSqlSafe(&*format!(
                        "CREATE SCHEMA {schema}"
                    ))))
                    .await
                    .map_err(db)?;
            }
        }
        // Qualified when the crate has a schema: another crate may have a
        // `schema_migrations` of its own in the same database.
        (&mut *tx)
            .execute(sqlx::raw_sql(sqlx::AssertSqlSafe(&*format!(
                "CREATE TABLE IF NOT EXISTS {table} (version BIGINT PRIMARY KEY, applied_at TEXT NOT NULL \
                 DEFAULT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'))"
            ))))
            .await
            .map_err(db)?;
        let current: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(&*format!(
            "SELECT COALESCE(MAX(version), 0) FROM {table}"
        )))
        .fetch_one(&mut *tx)
        .await
        .map_err(db)?;
        refuse_newer(owner, current, migrations.postgres)?;
        let first = *found.get_or_insert(current);
        let Some(&(version, sql)) = migrations.postgres.iter().find(|(v, _)| *v > current) else {
            tx.commit().await.map_err(db)?;
            return Ok(());
        };
        let failed = |source| DbError::Migration {
            owner,
            version,
            source,
        };
        let started = announce(owner, version, first);
        (&mut *tx)
            .execute(sqlx::raw_sql(sql))
            .await
            .map_err(failed)?;
        // The time as an untyped literal (it is ours, RFC 3339): a `schema_migrations` made
        // by an older binary may have `applied_at` as TIMESTAMPTZ rather than TEXT, and a
        // literal fits either (a bound TEXT parameter would not).
        sqlx::query(sqlx::AssertSqlSafe(&*format!(
            "INSERT INTO {table} (version, applied_at) VALUES ($1, '{}')",
            now()
        )))
        .bind(version)
        .execute(&mut *tx)
        .await
        .map_err(failed)?;
        tx.commit().await.map_err(failed)?;
        applied(owner, version, first, started);
    }
}

/// Says, when a database that has data is upgraded, which migration starts: some take a
/// while on a large database (docs/operations.md, "Upgrading"), and a start-up that is silent
/// meanwhile looks hung. A new database's migrations stay quiet.
fn announce(owner: &str, version: i64, current: i64) -> std::time::Instant {
    if current > 0 {
        tracing::info!(owner, version, "upgrading the database: applying migration");
    }
    std::time::Instant::now()
}

fn applied(owner: &str, version: i64, current: i64, started: std::time::Instant) {
    let ms = started.elapsed().as_millis() as u64;
    if current > 0 {
        tracing::info!(owner, version, ms, "applied migration");
    } else {
        tracing::debug!(owner, version, ms, "applied migration");
    }
}

fn refuse_newer(owner: &'static str, found: i64, list: &[(i64, &str)]) -> Result<(), DbError> {
    let known = list.last().map_or(0, |m| m.0);
    if found > known {
        return Err(DbError::Newer {
            owner,
            found,
            known,
        });
    }
    Ok(())
}
