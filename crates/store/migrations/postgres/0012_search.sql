-- PostgreSQL twin of migrations/sqlite/0012_search.sql. Search (`GET /v1/search`): a
-- tsvector of each message (its text, tool calls and tool result) and of each file's name,
-- generated columns with GIN indexes, so the database keeps them in step with every write.
-- The text is indexed with everything but letters and digits made spaces, through the
-- `simple` configuration (no stemming, no stop words): the words SQLite's FTS5 `unicode61`
-- tokenizer finds, so a query finds the same things on both.

-- Where in the log a message was recorded: the log's last seq then (a hit links there).
ALTER TABLE messages ADD COLUMN seq BIGINT;
UPDATE messages SET seq = (
    SELECT MIN(e.seq) FROM events e
    WHERE e.session_id = messages.session_id AND e.created_at >= messages.created_at
);

-- The first 200,000 characters (src/sql/search.rs INDEXED_CHARS): a tsvector over 1 MB is
-- refused, and a generated column's refusal would fail the message's write.
ALTER TABLE messages ADD COLUMN search tsvector GENERATED ALWAYS AS (
    to_tsvector('simple'::regconfig, regexp_replace(
        left(content || chr(10) || COALESCE(tool_calls, ''), 200000), '[^[:alnum:]]+', ' ', 'g'))
) STORED;
CREATE INDEX messages_search ON messages USING GIN (search);

ALTER TABLE files ADD COLUMN search tsvector GENERATED ALWAYS AS (
    to_tsvector('simple'::regconfig, regexp_replace(name, '[^[:alnum:]]+', ' ', 'g'))
) STORED;
CREATE INDEX files_search ON files USING GIN (search);
