-- Every model call metered (docs/usage.md): who it was for, what it used and cost. No
-- foreign keys: usage outlives a deleted session. Money in micro-dollars.
CREATE TABLE usage_calls (
    id                      TEXT PRIMARY KEY,
    at                      TEXT NOT NULL,
    session_id              TEXT,
    run_id                  TEXT,
    user_name               TEXT,
    chat                    TEXT,
    schedule                TEXT,
    bundle                  TEXT,
    backend                 TEXT NOT NULL,
    provider                TEXT NOT NULL,
    model                   TEXT NOT NULL,
    -- reserved (under way), settled, lost (cut off: its reservation counts as spent)
    state                   TEXT NOT NULL,
    reported                BOOLEAN NOT NULL,
    input_tokens            BIGINT NOT NULL DEFAULT 0,
    output_tokens           BIGINT NOT NULL DEFAULT 0,
    cache_read_tokens       BIGINT NOT NULL DEFAULT 0,
    cache_write_tokens      BIGINT NOT NULL DEFAULT 0,
    cost_microdollars       BIGINT,
    reserved_microdollars   BIGINT NOT NULL DEFAULT 0,
    reserved_tokens         BIGINT NOT NULL DEFAULT 0,
    -- the budget windows reserved against: JSON [[budget, subject, window], …]
    windows                 TEXT NOT NULL DEFAULT '[]'
);
CREATE INDEX usage_calls_at ON usage_calls (at);
CREATE INDEX usage_calls_session ON usage_calls (session_id, at);
CREATE INDEX usage_calls_run ON usage_calls (run_id) WHERE state = 'reserved';
-- What each budget's window has spent and holds for calls under way.
CREATE TABLE budget_windows (
    budget                  TEXT NOT NULL,
    subject                 TEXT NOT NULL,
    window_key              TEXT NOT NULL,
    spent_microdollars      BIGINT NOT NULL DEFAULT 0,
    spent_tokens            BIGINT NOT NULL DEFAULT 0,
    reserved_microdollars   BIGINT NOT NULL DEFAULT 0,
    reserved_tokens         BIGINT NOT NULL DEFAULT 0,
    extra_microdollars      BIGINT NOT NULL DEFAULT 0,
    extra_tokens            BIGINT NOT NULL DEFAULT 0,
    -- the budget's limit as the last reservation saw it (NULL: none of that kind), so one
    -- statement checks every window a call is reserved in against its own limit
    limit_microdollars      BIGINT,
    limit_tokens            BIGINT,
    PRIMARY KEY (budget, subject, window_key)
);
-- Budgets made over the API (those of the configuration file are not stored).
CREATE TABLE budgets (
    name                    TEXT PRIMARY KEY,
    spec                    TEXT NOT NULL,
    created_at              TEXT NOT NULL,
    created_by              TEXT NOT NULL
);
