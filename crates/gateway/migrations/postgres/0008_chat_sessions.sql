-- Every session each chat (routing key) has talked to, the current one included: a chat's
-- `/search` looks in these. A route names only the current session; `/new` replaces it.
CREATE TABLE chat_sessions (
    routing_key     TEXT NOT NULL,
    session_id      TEXT NOT NULL,
    since           TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (routing_key, session_id)
);
INSERT INTO chat_sessions (routing_key, session_id, since)
    SELECT routing_key, session_id, created_at FROM routes;
