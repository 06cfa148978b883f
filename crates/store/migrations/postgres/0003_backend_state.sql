-- What a session's backend needs to resume after a restart (e.g. an ACP agent's session id),
-- as JSON owned by that backend.
ALTER TABLE sessions ADD COLUMN backend_state TEXT;
