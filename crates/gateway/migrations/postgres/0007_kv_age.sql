-- When a kv row was last written: the idempotency claims of `POST /v1/gateway/send`
-- (`send:KEY`) and the /undo offers (`undo:ID`) are dropped a day after, as the
-- Idempotency-Key window says. NULL (rows from before): kept.
ALTER TABLE kv ADD COLUMN updated_at TEXT;
