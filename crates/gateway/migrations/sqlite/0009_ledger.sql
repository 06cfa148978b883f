-- The delivery ledger: what became of every inbound chat message (received, ignored and
-- why, queued, in a run, answered with the reply's platform ids, failed and why), kept for
-- `[gateway] ledger_days`. And what a followed run has posted so far (replies, files,
-- prompts, notices: platform ids and attempts), copied to its messages' entries at its end.
CREATE TABLE ledger (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    channel         TEXT NOT NULL,
    chat_id         TEXT NOT NULL,
    chat            TEXT NOT NULL,            -- JSON ChatRef
    peer            TEXT NOT NULL,            -- JSON Peer
    message_id      TEXT NOT NULL,            -- the platform's id ('' when it gave none)
    kind            TEXT NOT NULL,            -- message | command | answer
    text            TEXT NOT NULL,
    attachments     TEXT,                     -- JSON list, as in the inbox
    status          TEXT NOT NULL,            -- received | ignored | queued | in_run | answered | failed
    reason          TEXT,                     -- why ignored or failed
    duplicate_of    INTEGER,                  -- the entry this one repeats
    routing_key     TEXT,
    inbox_id        INTEGER,                  -- while queued
    session_id      TEXT,
    run_id          TEXT,
    outbound        TEXT NOT NULL DEFAULT '[]', -- JSON list of what was posted for it
    attempts        INTEGER NOT NULL DEFAULT 0, -- times it was sent to the agent
    received_at     TEXT NOT NULL,
    updated_at      TEXT NOT NULL
);
CREATE INDEX ledger_chat ON ledger (channel, chat_id, id);
CREATE INDEX ledger_message ON ledger (channel, chat_id, message_id);
CREATE INDEX ledger_inbox ON ledger (routing_key, inbox_id);
CREATE INDEX ledger_run ON ledger (run_id);
CREATE INDEX ledger_status ON ledger (status, id);
CREATE INDEX ledger_updated ON ledger (updated_at);
ALTER TABLE runs ADD COLUMN outbound TEXT NOT NULL DEFAULT '[]';
