-- PostgreSQL twin of migrations/sqlite/0001_init.sql: same tables, columns and indexes.
-- Ids are native UUIDs and counters BIGINT. Timestamps stay RFC 3339 TEXT, as written by the
-- engine, so both stores return them byte for byte; they use the "C" collation so that
-- comparing and ordering them is bytewise, like SQLite's BINARY, whatever the database locale.
-- JSON stays TEXT too: it round-trips exactly (jsonb would reject "\u0000" and rewrite numbers).

-- Sessions: one conversation with one backend in one workspace.
CREATE TABLE sessions (
    id              UUID PRIMARY KEY NOT NULL,
    title           TEXT NOT NULL,
    cwd             TEXT NOT NULL,
    config          TEXT NOT NULL,            -- JSON: backend, model, permission_mode, auto_approve
    created_at      TEXT COLLATE "C" NOT NULL,
    updated_at      TEXT COLLATE "C" NOT NULL,
    last_seq        BIGINT NOT NULL DEFAULT 0 -- highest seq ever assigned; survives pruning
);
CREATE INDEX sessions_created ON sessions (created_at DESC, id DESC);

-- Runs: one turn of work. A queued run is a stored follow-up.
CREATE TABLE runs (
    id              UUID PRIMARY KEY NOT NULL,
    session_id      UUID NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    queue_pos       BIGINT NOT NULL,          -- order of the follow-up queue (smaller first)
    state           TEXT NOT NULL,            -- queued | running | completed | failed | cancelled
    input           TEXT NOT NULL,            -- JSON: the message that started it
    error           TEXT,
    stop_reason     TEXT,
    created_at      TEXT COLLATE "C" NOT NULL,
    started_at      TEXT COLLATE "C",
    finished_at     TEXT COLLATE "C"
);
CREATE INDEX runs_session_state ON runs (session_id, state, queue_pos);
-- At most one active run per session, enforced by the database itself.
CREATE UNIQUE INDEX runs_one_running ON runs (session_id) WHERE state = 'running';

-- The durable, append-only event log.
CREATE TABLE events (
    session_id      UUID NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq             BIGINT NOT NULL,
    run_id          UUID,
    kind            TEXT NOT NULL,
    payload         TEXT NOT NULL,            -- JSON of the event (externally tagged)
    created_at      TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE INDEX events_created ON events (created_at);

-- The transcript: what was said, in order.
CREATE TABLE messages (
    id              UUID PRIMARY KEY NOT NULL,
    session_id      UUID NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    pos             BIGINT NOT NULL,
    run_id          UUID,
    role            TEXT NOT NULL,
    content         TEXT NOT NULL,
    tool_calls      TEXT,                     -- JSON array or NULL
    tool_call_id    TEXT,
    created_at      TEXT COLLATE "C" NOT NULL
);
CREATE UNIQUE INDEX messages_session_pos ON messages (session_id, pos);
