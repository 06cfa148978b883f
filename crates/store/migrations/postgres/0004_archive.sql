-- Archived sessions are hidden from the default session list.
ALTER TABLE sessions ADD COLUMN archived_at TEXT COLLATE "C";
CREATE INDEX sessions_archived ON sessions (archived_at, created_at);
