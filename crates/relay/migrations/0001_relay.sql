-- Desired state of each bundle (`up` / `down`).
CREATE TABLE bundles (
    name TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    updated_at TEXT NOT NULL
);

-- The Switchboard session behind a session or ACP member.
CREATE TABLE member_sessions (
    bundle TEXT NOT NULL,
    member TEXT NOT NULL,
    session_id TEXT NOT NULL,
    PRIMARY KEY (bundle, member)
);

-- Every message to every target: the durable per-target queue and the record of outcomes.
-- state: queued -> attempting -> committing -> done. `committing` is set just before the
-- message is handed over (pasted, posted); a row found there after a crash may or may not
-- have arrived, so it is closed as failed rather than sent twice.
CREATE TABLE deliveries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id TEXT NOT NULL UNIQUE,
    bundle TEXT NOT NULL,
    target TEXT NOT NULL,
    sender TEXT NOT NULL,
    request_id TEXT,
    envelope TEXT NOT NULL,
    body_bytes INTEGER NOT NULL,
    sync INTEGER NOT NULL,
    quiet_window_ms INTEGER,
    quiescence_timeout_ms INTEGER,
    turn_timeout_ms INTEGER,
    state TEXT NOT NULL,
    outcome TEXT,
    reason_code TEXT,
    reason TEXT,
    created_at TEXT NOT NULL,
    finished_at TEXT
);
CREATE INDEX deliveries_queue ON deliveries (bundle, target, state, id);
CREATE INDEX deliveries_request ON deliveries (bundle, sender, request_id);

-- Final outcomes in the order they happened: the stream pushed to senders.
CREATE TABLE outcomes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    bundle TEXT NOT NULL,
    sender TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX outcomes_bundle ON outcomes (bundle, seq);

-- Members that failed to start (bounded per bundle).
CREATE TABLE startup_failures (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    bundle TEXT NOT NULL,
    member TEXT NOT NULL,
    code TEXT NOT NULL,
    reason TEXT NOT NULL,
    at TEXT NOT NULL
);
CREATE INDEX startup_failures_bundle ON startup_failures (bundle, id);
