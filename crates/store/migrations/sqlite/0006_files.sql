-- Files of sessions: one row per upload; the content lives outside the database, stored by
-- its SHA-256 (see the engine's `files` module). Removed with the session.
CREATE TABLE files (
    id              TEXT PRIMARY KEY NOT NULL,
    session_id      TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    name            TEXT NOT NULL,
    mime            TEXT NOT NULL,
    size            INTEGER NOT NULL,
    sha256          TEXT NOT NULL,
    created_at      TEXT NOT NULL
);
CREATE INDEX files_session ON files (session_id, created_at);
CREATE INDEX files_sha256 ON files (sha256);
