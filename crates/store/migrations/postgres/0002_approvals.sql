-- A tool result can be an error (a failed command, a rejected call).
ALTER TABLE messages ADD COLUMN is_error BOOLEAN NOT NULL DEFAULT FALSE;

-- Tool calls waiting for a human decision: at most one pending approval per session (one
-- active run, one model step at a time). Kept so that a restart can reject them.
CREATE TABLE approvals (
    session_id      UUID PRIMARY KEY NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    run_id          UUID NOT NULL,
    tool_calls      TEXT NOT NULL,            -- JSON array of the calls that wait
    created_at      TEXT COLLATE "C" NOT NULL,
    expires_at      TEXT COLLATE "C" NOT NULL
);
