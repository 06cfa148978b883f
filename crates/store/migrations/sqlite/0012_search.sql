-- Search (`GET /v1/search`): the transcript's messages (their text, tool calls and tool
-- results) and the files' names in one full-text index (FTS5). The store writes it in the
-- transaction that writes the message or the file, and empties a session's part of it in
-- the one that deletes the session (`SearchIndex` in src/sql/mod.rs says why not triggers).
--
-- `search_docs` names what each row of the index is: its `doc` is the index's rowid (an
-- INTEGER PRIMARY KEY, so VACUUM keeps it), `ref` the message's or file's id.

-- Where in the log a message was recorded: the log's last seq then (a hit links there).
ALTER TABLE messages ADD COLUMN seq INTEGER;
-- Messages written before: the first event at or after them.
UPDATE messages SET seq = (
    SELECT MIN(e.seq) FROM events e
    WHERE e.session_id = messages.session_id AND e.created_at >= messages.created_at
);

CREATE TABLE search_docs (
    doc             INTEGER PRIMARY KEY,
    session_id      TEXT NOT NULL,
    kind            TEXT NOT NULL,            -- m: a message, f: a file
    ref             TEXT NOT NULL UNIQUE
);
CREATE INDEX search_docs_session ON search_docs (session_id);

-- Letters and digits are words; case is folded; accents are kept (as on PostgreSQL).
CREATE VIRTUAL TABLE search USING fts5(body, tokenize = 'unicode61 remove_diacritics 0');

-- What is there already.
INSERT INTO search_docs (session_id, kind, ref) SELECT session_id, 'm', id FROM messages;
INSERT INTO search_docs (session_id, kind, ref) SELECT session_id, 'f', id FROM files;
-- As the store writes it (src/sql/mod.rs `indexed`): the first 200,000 characters, the
-- passage marks (characters 1 and 2) made spaces.
INSERT INTO search (rowid, body)
    SELECT d.doc, replace(replace(substr(
        m.content || CASE WHEN m.tool_calls IS NULL THEN '' ELSE char(10) || m.tool_calls END,
        1, 200000), char(1), ' '), char(2), ' ')
    FROM search_docs d JOIN messages m ON m.id = d.ref WHERE d.kind = 'm';
INSERT INTO search (rowid, body)
    SELECT d.doc, replace(replace(f.name, char(1), ' '), char(2), ' ')
    FROM search_docs d JOIN files f ON f.id = d.ref WHERE d.kind = 'f';
