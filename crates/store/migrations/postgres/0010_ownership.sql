-- PostgreSQL twin of migrations/sqlite/0010_ownership.sql.
ALTER TABLE sessions ADD COLUMN owner TEXT COLLATE "C";
CREATE INDEX sessions_owner ON sessions (owner, created_at);
CREATE TABLE session_shares (
    session_id      UUID NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    user_name       TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (session_id, user_name)
);
CREATE INDEX session_shares_user ON session_shares (user_name);
