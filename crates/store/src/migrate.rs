//! The engine's embedded, ordered migrations; [`switchboard_db`] applies them (a version
//! table, one transaction each, a database newer than the binary refused).

use sqlx::PgPool;

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
    (6, include_str!("../migrations/sqlite/0006_files.sql")),
    (
        7,
        include_str!("../migrations/sqlite/0007_run_instance.sql"),
    ),
    (8, include_str!("../migrations/sqlite/0008_idempotency.sql")),
    (9, include_str!("../migrations/sqlite/0009_people.sql")),
    (10, include_str!("../migrations/sqlite/0010_ownership.sql")),
    (11, include_str!("../migrations/sqlite/0011_usage.sql")),
    (12, include_str!("../migrations/sqlite/0012_search.sql")),
    (
        13,
        include_str!("../migrations/sqlite/0013_search_sessions.sql"),
    ),
    (
        14,
        include_str!("../migrations/sqlite/0014_search_pending.sql"),
    ),
];

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
    (6, include_str!("../migrations/postgres/0006_files.sql")),
    (
        7,
        include_str!("../migrations/postgres/0007_run_instance.sql"),
    ),
    (
        8,
        include_str!("../migrations/postgres/0008_idempotency.sql"),
    ),
    (9, include_str!("../migrations/postgres/0009_people.sql")),
    (
        10,
        include_str!("../migrations/postgres/0010_ownership.sql"),
    ),
    (11, include_str!("../migrations/postgres/0011_usage.sql")),
    (12, include_str!("../migrations/postgres/0012_search.sql")),
    (
        13,
        include_str!("../migrations/postgres/0013_search_sessions.sql"),
    ),
    (
        14,
        include_str!("../migrations/postgres/0014_search_pending.sql"),
    ),
];

/// The engine's migrations, applied by the one database kit ([`switchboard_db`]).
pub(crate) const MIGRATIONS: switchboard_db::Migrations = switchboard_db::Migrations {
    owner: "engine",
    sqlite: SQLITE,
    postgres: POSTGRES,
    postgres_schema: None,
    postgres_lock: 0x5357_4244_4d49_4752, // "SWBDMIGR"
};

/// Applies pending PostgreSQL migrations (serialized across instances by an advisory lock).
pub(crate) async fn run_postgres(pool: &PgPool) -> Result<(), StoreError> {
    switchboard_db::migrate_postgres(pool, &MIGRATIONS)
        .await
        .map_err(|e| StoreError::Open(e.to_string()))
}
