-- PostgreSQL twin of migrations/sqlite/0006_files.sql.
CREATE TABLE files (
    id              UUID PRIMARY KEY NOT NULL,
    session_id      UUID NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    name            TEXT NOT NULL,
    mime            TEXT NOT NULL,
    size            BIGINT NOT NULL,
    sha256          TEXT COLLATE "C" NOT NULL,
    created_at      TEXT COLLATE "C" NOT NULL
);
CREATE INDEX files_session ON files (session_id, created_at);
CREATE INDEX files_sha256 ON files (sha256);
