//! Opening a [`SqlStore`]: the options of each back-end, connecting, migrating.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use sqlx::sqlite::{SqlitePoolOptions, SqliteSynchronous};

use super::{Db, SqlStore};
use crate::{Result, StoreError};

/// How to open a SQLite store.
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    pub path: PathBuf,
    /// Connections in the pool (readers; SQLite serializes writers itself).
    pub max_connections: u32,
    /// `synchronous = FULL` instead of `NORMAL`: survives power loss, not only process
    /// crashes, at the price of an fsync per commit.
    pub synchronous_full: bool,
}

impl SqliteOptions {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            max_connections: 8,
            synchronous_full: false,
        }
    }
}

/// How to open a PostgreSQL store.
#[derive(Clone)]
pub struct PostgresOptions {
    /// `postgres://user:password@host:port/database?options` — the URL forms sqlx accepts
    /// (`sslmode`, `application_name`, …). The database must exist; the migrations create
    /// the tables in it.
    pub url: String,
    /// Connections in the pool.
    pub max_connections: u32,
    /// How long to wait for a connection (a new one, or a free one from the pool) before
    /// failing.
    pub connect_timeout: Duration,
}

impl PostgresOptions {
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            max_connections: 8,
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// Never prints the password: options end up in logs.
impl fmt::Debug for PostgresOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let target = PgConnectOptions::from_str(&self.url)
            .map(|c| describe(&c))
            .unwrap_or_else(|_| "<invalid url>".into());
        f.debug_struct("PostgresOptions")
            .field("url", &target)
            .field("max_connections", &self.max_connections)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

/// `postgres://user@host:port/database`, for messages: the URL without the password.
fn describe(c: &PgConnectOptions) -> String {
    format!(
        "postgres://{}@{}:{}/{}",
        c.get_username(),
        c.get_host(),
        c.get_port(),
        c.get_database().unwrap_or("")
    )
}

impl SqlStore {
    /// Opens (creating if needed) a SQLite database and applies pending migrations.
    pub async fn open_sqlite(opts: SqliteOptions) -> Result<Self> {
        let connect = switchboard_db::sqlite_options(&opts.path)
            .synchronous(if opts.synchronous_full {
                SqliteSynchronous::Full
            } else {
                SqliteSynchronous::Normal
            })
            // Rows come from sqlx's worker thread through a bounded channel; at the default
            // (50) a replay page of 2,000 events makes the worker block and be woken 40
            // times. A page's worth lets it read the page in one go.
            .row_buffer_size(2048);
        let pool = switchboard_db::open_sqlite(
            connect,
            SqlitePoolOptions::new()
                .max_connections(opts.max_connections.max(1))
                .min_connections(1),
            &crate::migrate::MIGRATIONS,
        )
        .await
        .map_err(|e| StoreError::Open(e.to_string()))?;
        let indexer = super::indexer::Indexer::start(pool.clone());
        Ok(Self {
            db: Db::Sqlite(pool),
            indexer: Some(indexer),
            reader: Some(switchboard_db::SqliteReader::new(&opts.path)),
        })
    }

    /// Opens a SQLite store at `path` with default options.
    pub async fn open_path(path: &Path) -> Result<Self> {
        Self::open_sqlite(SqliteOptions::new(path)).await
    }

    /// Connects to PostgreSQL and applies pending migrations. Several instances may open one
    /// database at once: migrations are serialized by an advisory lock.
    pub async fn open_postgres(opts: PostgresOptions) -> Result<Self> {
        let mut connect = PgConnectOptions::from_str(&opts.url)
            .map_err(|e| StoreError::Open(format!("invalid PostgreSQL URL: {e}")))?;
        if connect.get_application_name().is_none() {
            connect = connect.application_name("switchboard");
        }
        connect = connect.options([("statement_timeout", switchboard_db::STATEMENT_TIMEOUT)]);
        let target = describe(&connect);
        let pool = switchboard_db::pg_pool_options(opts.max_connections)
            .acquire_timeout(opts.connect_timeout)
            .connect_with(connect)
            .await
            .map_err(|e| StoreError::Open(format!("{target}: {e}")))?;
        crate::migrate::run_postgres(&pool).await?;
        Ok(Self {
            db: Db::Postgres(pool),
            indexer: None,
            reader: None,
        })
    }

    /// Closes the pool, waiting for connections to finish; on SQLite the search index is
    /// caught up first (what it cannot reach stays pending for the next start).
    pub async fn close(&self) {
        if let Db::Sqlite(pool) = &self.db
            && let Err(e) = super::indexer::catch_up(pool).await
        {
            tracing::warn!(error = %e, "search index: catching up before closing failed");
        }
        if let Some(r) = &self.reader {
            r.close();
        }
        self.db.close().await
    }

    /// After a commit that named documents for the search index ([`super::SearchIndex`]):
    /// SQLite's indexer takes them in its next batch.
    pub(super) fn indexed_later(&self) {
        if let Some(i) = &self.indexer {
            i.written();
        }
    }

    /// Indexes now what SQLite's indexer has not reached yet (it would within half a
    /// second): how many documents. Nothing to do on PostgreSQL.
    pub async fn index_now(&self) -> crate::Result<u64> {
        match &self.db {
            Db::Sqlite(pool) => super::indexer::catch_up(pool).await,
            Db::Postgres(_) => Ok(0),
        }
    }

    /// Indexes what is pending, so that a search sees every committed write (SQLite).
    pub(super) async fn index_pending(&self) -> crate::Result<()> {
        if let Db::Sqlite(pool) = &self.db
            && super::indexer::pending(pool).await?
        {
            super::indexer::catch_up(pool).await?;
        }
        Ok(())
    }
}
