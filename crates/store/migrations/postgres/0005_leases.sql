-- PostgreSQL twin of migrations/sqlite/0005_leases.sql. `expires_at_ms` is milliseconds since
-- the Unix epoch by the database server's clock, so instances never compare their own clocks.
CREATE TABLE leases (
    name            TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    holder          TEXT NOT NULL,
    token           BIGINT NOT NULL,
    expires_at_ms   BIGINT NOT NULL
);
CREATE INDEX leases_expiry ON leases (expires_at_ms);
INSERT INTO leases (name, holder, token, expires_at_ms)
    SELECT 'run:' || id::text, '', 1, 0 FROM runs WHERE state = 'running';
