-- The chat gateway's durable state: nothing the gateway needs lives in memory only.

-- Routing key → session, and where replies go (refreshed by each inbound message).
CREATE TABLE routes (
    routing_key     TEXT PRIMARY KEY NOT NULL,
    session_id      TEXT NOT NULL,
    channel         TEXT NOT NULL,
    chat            TEXT NOT NULL,            -- JSON ChatRef of the latest message
    requester       TEXT NOT NULL,            -- JSON Peer of the latest message
    bound           INTEGER NOT NULL DEFAULT 0, -- an explicit binding, not derived
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL
);

-- Messages waiting to go to the agent, oldest first.
CREATE TABLE inbox (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    routing_key     TEXT NOT NULL,
    channel         TEXT NOT NULL,
    peer            TEXT NOT NULL,            -- JSON Peer
    chat            TEXT NOT NULL,            -- JSON ChatRef
    text            TEXT NOT NULL,
    context         TEXT,                     -- JSON caller context, if any
    created_at      TEXT NOT NULL
);
CREATE INDEX inbox_route ON inbox (routing_key, id);

-- Button presses waiting to be handled.
CREATE TABLE presses (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    press           TEXT NOT NULL,            -- JSON ButtonPress
    created_at      TEXT NOT NULL
);

-- The run a route is following, and how far its reply got: streaming resumes from here.
CREATE TABLE runs (
    routing_key     TEXT PRIMARY KEY NOT NULL,
    session_id      TEXT NOT NULL,
    run_id          TEXT NOT NULL,
    last_event_id   INTEGER NOT NULL,
    stream_message  TEXT,                     -- id of the message being edited, if any
    streamed        TEXT NOT NULL DEFAULT '', -- text shown in it so far
    delivered       INTEGER NOT NULL DEFAULT 0, -- characters of the reply already posted
    deadline        TEXT,                     -- when the run times out
    started_at      TEXT NOT NULL
);

-- Approval prompts shown in chats.
CREATE TABLE approvals (
    id              TEXT PRIMARY KEY NOT NULL, -- short id used in button data
    routing_key     TEXT NOT NULL,
    session_id      TEXT NOT NULL,
    run_id          TEXT NOT NULL,
    tool_call_ids   TEXT NOT NULL,            -- JSON array
    channel         TEXT NOT NULL,
    chat            TEXT NOT NULL,            -- JSON ChatRef
    prompt_message  TEXT NOT NULL,
    prompt_text     TEXT NOT NULL,
    requester       TEXT NOT NULL,            -- JSON Peer
    created_at      TEXT NOT NULL
);
CREATE UNIQUE INDEX approvals_session ON approvals (session_id);

-- Context attached once to the next message from a chat (notifications).
CREATE TABLE contexts (
    channel         TEXT NOT NULL,
    target          TEXT NOT NULL,
    context         TEXT NOT NULL,            -- JSON
    expires_at      TEXT NOT NULL,
    PRIMARY KEY (channel, target)
);

-- Pairing codes for unknown direct messages, and the peers allowed by them.
CREATE TABLE pairing (
    code            TEXT PRIMARY KEY NOT NULL,
    channel         TEXT NOT NULL,
    peer            TEXT NOT NULL,            -- JSON Peer
    chat            TEXT NOT NULL,            -- JSON ChatRef
    expires_at      TEXT NOT NULL
);
CREATE TABLE allowed (
    channel         TEXT NOT NULL,
    chat_id         TEXT NOT NULL,
    added_at        TEXT NOT NULL,
    PRIMARY KEY (channel, chat_id)
);

-- Channels' own small state (a polling offset …).
CREATE TABLE kv (
    key             TEXT PRIMARY KEY NOT NULL,
    value           TEXT NOT NULL
);
