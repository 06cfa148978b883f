//! Throwaway PostgreSQL databases for tests that need a real server.
//!
//! [`TestDatabase::create`] makes a database of its own on the server that
//! `SWITCHBOARD_TEST_POSTGRES_URL` names (a role allowed to create databases; `scripts/test`
//! starts one), and dropping the value drops the database, whether the test passed or not.

use sqlx::Connection;
use sqlx::postgres::PgConnection;

/// The variable naming the test server (an admin URL).
pub const URL_VAR: &str = "SWITCHBOARD_TEST_POSTGRES_URL";

/// The admin URL of the test server.
///
/// # Panics
/// When the variable is unset: these tests must not pass silently without a server.
pub fn admin_url() -> String {
    std::env::var(URL_VAR).unwrap_or_else(|_| {
        panic!(
            "{URL_VAR} is not set. These tests need a PostgreSQL server and a role that may \
             create databases; from the repository root run\n\n    \
             eval \"$(scripts/test-services)\"\n\nand run the tests again."
        )
    })
}

/// `url` with its database replaced by `db` (query string kept).
pub fn with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let authority = base.find("://").map_or(0, |i| i + 3);
    let base = match base[authority..].find('/') {
        Some(i) => &base[..authority + i],
        None => base,
    };
    match query {
        Some(q) => format!("{base}/{db}?{q}"),
        None => format!("{base}/{db}"),
    }
}

/// A fresh database for one test, dropped with this value.
pub struct TestDatabase {
    pub admin: String,
    pub name: String,
    /// The URL of the new database.
    pub url: String,
}

impl TestDatabase {
    /// Creates `<prefix>_<random>`.
    ///
    /// # Panics
    /// When the server cannot be reached or refuses (the test cannot go on anyway).
    pub async fn create(prefix: &str) -> Self {
        let admin = admin_url();
        let name = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
        let mut conn = PgConnection::connect(&admin).await.unwrap_or_else(|e| {
            panic!(
                "cannot connect with {URL_VAR}: {e} (is the server up? see scripts/test-services)"
            )
        });
        if let Err(e) = sqlx::raw_sql(sqlx::AssertSqlSafe(&*format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await
        {
            panic!("CREATE DATABASE {name}: {e}");
        }
        conn.close().await.ok();
        let url = with_database(&admin, &name);
        Self { admin, name, url }
    }

    /// A plain connection to the database.
    ///
    /// # Panics
    /// When it cannot connect.
    pub async fn connect(&self) -> PgConnection {
        match PgConnection::connect(&self.url).await {
            Ok(c) => c,
            Err(e) => panic!("connecting to {}: {e}", self.name),
        }
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let (admin, name) = (self.admin.clone(), self.name.clone());
        // Drop runs on the test's runtime, which cannot block on another one: use a thread.
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            rt.block_on(async {
                let mut conn = PgConnection::connect(&admin)
                    .await
                    .map_err(|e| e.to_string())?;
                // FORCE: the code under test may still hold connections.
                sqlx::raw_sql(sqlx::AssertSqlSafe(&*format!(
                    "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                )))
                .execute(&mut conn)
                .await
                .map_err(|e| e.to_string())?;
                conn.close().await.map_err(|e| e.to_string())
            })
        })
        .join();
        if let Ok(Err(e)) | Err(e) = dropped.map_err(|_| "panicked".to_string()) {
            eprintln!("could not drop test database {}: {e}", self.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn database_is_swapped_in_the_url() {
        assert_eq!(
            with_database("postgres://u:p@h:5432/postgres", "x"),
            "postgres://u:p@h:5432/x"
        );
        assert_eq!(
            with_database("postgres://u:p@h/postgres?sslmode=disable", "x"),
            "postgres://u:p@h/x?sslmode=disable"
        );
        assert_eq!(with_database("postgres://h:1", "x"), "postgres://h:1/x");
    }
}
