-- PostgreSQL twin of migrations/sqlite/0009_people.sql.
CREATE TABLE users (
    name            TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    role            TEXT NOT NULL,
    password_hash   TEXT,
    created_at      TEXT COLLATE "C" NOT NULL,
    updated_at      TEXT COLLATE "C" NOT NULL
);
CREATE TABLE api_tokens (
    id              UUID PRIMARY KEY NOT NULL,
    user_name       TEXT COLLATE "C" NOT NULL REFERENCES users (name) ON DELETE CASCADE,
    name            TEXT NOT NULL,
    token_hash      TEXT COLLATE "C" NOT NULL UNIQUE,
    scopes          TEXT NOT NULL,
    created_at      TEXT COLLATE "C" NOT NULL,
    expires_at      TEXT COLLATE "C",
    last_used_at    TEXT COLLATE "C",
    revoked_at      TEXT COLLATE "C"
);
CREATE INDEX api_tokens_user ON api_tokens (user_name, created_at);
CREATE TABLE user_links (
    platform        TEXT COLLATE "C" NOT NULL,
    identity        TEXT COLLATE "C" NOT NULL,
    user_name       TEXT COLLATE "C" NOT NULL REFERENCES users (name) ON DELETE CASCADE,
    created_at      TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (platform, identity)
);
CREATE INDEX user_links_user ON user_links (user_name);
CREATE TABLE console_sessions (
    id_hash         TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    user_name       TEXT COLLATE "C" NOT NULL REFERENCES users (name) ON DELETE CASCADE,
    created_at      TEXT COLLATE "C" NOT NULL,
    expires_at      TEXT COLLATE "C" NOT NULL
);
CREATE INDEX console_sessions_user ON console_sessions (user_name);
CREATE TABLE audit_log (
    id              BIGSERIAL PRIMARY KEY,
    at              TEXT COLLATE "C" NOT NULL,
    actor           TEXT COLLATE "C" NOT NULL,
    action          TEXT COLLATE "C" NOT NULL,
    target          TEXT,
    via             TEXT NOT NULL,
    detail          TEXT NOT NULL
);
CREATE INDEX audit_log_actor ON audit_log (actor, id);
CREATE INDEX audit_log_action ON audit_log (action, id);
