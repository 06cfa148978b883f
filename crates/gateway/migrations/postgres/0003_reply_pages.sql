-- The messages that show a run's reply on a platform that edits (one per page of the
-- reply split at the platform's limit): JSON [{"id": "<message id>", "text": "<as shown>"}].
-- One for one with ../sqlite/0003_reply_pages.sql.
ALTER TABLE runs ADD COLUMN pages TEXT NOT NULL DEFAULT '[]';
