-- Who a session belongs to (a user's name; NULL: the server token's built-in admin, and
-- every session made before teams), and whom it is shared with (`*`: everyone).
ALTER TABLE sessions ADD COLUMN owner TEXT;
CREATE INDEX sessions_owner ON sessions (owner, created_at);
CREATE TABLE session_shares (
    session_id      TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    user_name       TEXT NOT NULL,
    PRIMARY KEY (session_id, user_name)
);
CREATE INDEX session_shares_user ON session_shares (user_name);
