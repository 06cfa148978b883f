-- The `Idempotency-Key` a message was sent with: a repeat of the same key in the same
-- session answers this run instead of starting another (for 24 h; an older run's key is
-- cleared when the key is used again). Stored in the run's own row, so the key and the run
-- are written in one transaction.
ALTER TABLE runs ADD COLUMN idempotency_key TEXT;
CREATE UNIQUE INDEX runs_idempotency ON runs (session_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
