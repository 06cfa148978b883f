-- Leases: who may act under a name (execute a run, poll a chat connection) and until when.
-- `token` grows with every new holder (the fencing token); `expires_at_ms` is milliseconds
-- since the Unix epoch by the database's clock.
CREATE TABLE leases (
    name            TEXT PRIMARY KEY NOT NULL,
    holder          TEXT NOT NULL,
    token           INTEGER NOT NULL,
    expires_at_ms   INTEGER NOT NULL
);
CREATE INDEX leases_expiry ON leases (expires_at_ms);
-- Runs already running when this migration applies were started without a lease: they get
-- one that has run out, so the next instance to look closes them.
INSERT INTO leases (name, holder, token, expires_at_ms)
    SELECT 'run:' || id, '', 1, 0 FROM runs WHERE state = 'running';
