-- The instance that executed each run: a session's workspace checkpoints live on that
-- instance's machine, so requests for them are forwarded there.
ALTER TABLE runs ADD COLUMN instance_id TEXT;
