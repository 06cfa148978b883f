-- Sessions: one conversation with one backend in one workspace.
CREATE TABLE sessions (
    id              TEXT PRIMARY KEY NOT NULL,
    title           TEXT NOT NULL,
    cwd             TEXT NOT NULL,
    config          TEXT NOT NULL,            -- JSON: backend, model, permission_mode, auto_approve
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL,
    last_seq        INTEGER NOT NULL DEFAULT 0 -- highest seq ever assigned; survives pruning
);
CREATE INDEX sessions_created ON sessions (created_at DESC, id);

-- Runs: one turn of work. A queued run is a stored follow-up.
CREATE TABLE runs (
    id              TEXT PRIMARY KEY NOT NULL,
    session_id      TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    queue_pos       INTEGER NOT NULL,         -- order of the follow-up queue (smaller first)
    state           TEXT NOT NULL,            -- queued | running | completed | failed | cancelled
    input           TEXT NOT NULL,            -- JSON: the message that started it
    error           TEXT,
    stop_reason     TEXT,
    created_at      TEXT NOT NULL,
    started_at      TEXT,
    finished_at     TEXT
);
CREATE INDEX runs_session_state ON runs (session_id, state, queue_pos);
-- At most one active run per session, enforced by the database itself.
CREATE UNIQUE INDEX runs_one_running ON runs (session_id) WHERE state = 'running';

-- The durable, append-only event log.
CREATE TABLE events (
    session_id      TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq             INTEGER NOT NULL,
    run_id          TEXT,
    kind            TEXT NOT NULL,
    payload         TEXT NOT NULL,            -- JSON of the event (externally tagged)
    created_at      TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE INDEX events_created ON events (created_at);

-- The transcript: what was said, in order.
CREATE TABLE messages (
    id              TEXT PRIMARY KEY NOT NULL,
    session_id      TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    pos             INTEGER NOT NULL,
    run_id          TEXT,
    role            TEXT NOT NULL,
    content         TEXT NOT NULL,
    tool_calls      TEXT,                     -- JSON array or NULL
    tool_call_id    TEXT,
    created_at      TEXT NOT NULL
);
CREATE UNIQUE INDEX messages_session_pos ON messages (session_id, pos);
