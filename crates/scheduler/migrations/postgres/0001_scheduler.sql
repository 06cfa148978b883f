-- Scheduled tasks: the schedules and each of their firings. Times are RFC 3339 text in
-- UTC with microseconds (they sort as they read).

CREATE TABLE schedules (
    id          TEXT PRIMARY KEY NOT NULL,
    spec        TEXT NOT NULL,             -- JSON ScheduleSpec
    paused      BIGINT NOT NULL DEFAULT 0,
    -- The next due time; NULL: none (a one-shot that fired). A tick claims a due time by
    -- moving it on with `UPDATE … WHERE next_due = <the due time it read>`: of several
    -- instances, exactly one succeeds.
    next_due    TEXT,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);
CREATE INDEX schedules_next_due ON schedules (next_due);

CREATE TABLE firings (
    id          TEXT PRIMARY KEY NOT NULL,
    schedule_id TEXT NOT NULL,
    due_at      TEXT NOT NULL,
    status      TEXT NOT NULL,
    record      TEXT NOT NULL,             -- JSON Firing
    -- 1 while the scheduler still has work on it (start, follow its run, deliver).
    open        BIGINT NOT NULL,
    -- The instance working on it and until when; another takes it over after that.
    owner       TEXT,
    lease_until TEXT,
    created_at  TEXT NOT NULL
);
CREATE INDEX firings_schedule ON firings (schedule_id, due_at);
CREATE INDEX firings_open ON firings (open, lease_until);
