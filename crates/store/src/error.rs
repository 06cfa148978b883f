use thiserror::Error;

/// What can go wrong in a store.
#[derive(Debug, Clone, Error)]
pub enum StoreError {
    /// A uniqueness or state rule was violated (duplicate id, second running run, …).
    #[error("conflict: {0}")]
    Conflict(String),
    /// A referenced row does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// Stored data could not be decoded (hand-edited database, incompatible version).
    #[error("corrupt data: {0}")]
    Corrupt(String),
    /// The database failed or is unreachable.
    #[error("database error: {0}")]
    Database(String),
    /// A write under a lease that is no longer current: someone else holds a newer fencing
    /// token (the lease expired and was taken over).
    #[error("fenced: {0}")]
    Fenced(String),
    /// A run to close is not queued or running (closed already, perhaps by another
    /// instance that took it over).
    #[error("run {0} is not active")]
    RunNotActive(uuid::Uuid),
    /// Opening the database or running migrations failed.
    #[error("cannot open store: {0}")]
    Open(String),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        if let sqlx::Error::Database(db) = &e
            && db.is_unique_violation()
        {
            return StoreError::Conflict(db.message().to_string());
        }
        StoreError::Database(e.to_string())
    }
}

impl From<switchboard_db::ReadError> for StoreError {
    fn from(e: switchboard_db::ReadError) -> Self {
        StoreError::Database(e.to_string())
    }
}

impl From<switchboard_db::rusqlite::Error> for StoreError {
    fn from(e: switchboard_db::rusqlite::Error) -> Self {
        StoreError::Database(e.to_string())
    }
}
