-- Teams (docs/teams.md): people with a role, their personal API tokens (only a hash of
-- each is kept), the chat identities that act as them, the console sign-ins, and the
-- audit log (only ever appended to).
CREATE TABLE users (
    name            TEXT PRIMARY KEY NOT NULL,
    role            TEXT NOT NULL,
    password_hash   TEXT,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL
);
CREATE TABLE api_tokens (
    id              TEXT PRIMARY KEY NOT NULL,
    user_name       TEXT NOT NULL REFERENCES users (name) ON DELETE CASCADE,
    name            TEXT NOT NULL,
    token_hash      TEXT NOT NULL UNIQUE,
    scopes          TEXT NOT NULL,
    created_at      TEXT NOT NULL,
    expires_at      TEXT,
    last_used_at    TEXT,
    revoked_at      TEXT
);
CREATE INDEX api_tokens_user ON api_tokens (user_name, created_at);
CREATE TABLE user_links (
    platform        TEXT NOT NULL,
    identity        TEXT NOT NULL,
    user_name       TEXT NOT NULL REFERENCES users (name) ON DELETE CASCADE,
    created_at      TEXT NOT NULL,
    PRIMARY KEY (platform, identity)
);
CREATE INDEX user_links_user ON user_links (user_name);
CREATE TABLE console_sessions (
    id_hash         TEXT PRIMARY KEY NOT NULL,
    user_name       TEXT NOT NULL REFERENCES users (name) ON DELETE CASCADE,
    created_at      TEXT NOT NULL,
    expires_at      TEXT NOT NULL
);
CREATE INDEX console_sessions_user ON console_sessions (user_name);
CREATE TABLE audit_log (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    at              TEXT NOT NULL,
    actor           TEXT NOT NULL,
    action          TEXT NOT NULL,
    target          TEXT,
    via             TEXT NOT NULL,
    detail          TEXT NOT NULL
);
CREATE INDEX audit_log_actor ON audit_log (actor, id);
CREATE INDEX audit_log_action ON audit_log (action, id);
