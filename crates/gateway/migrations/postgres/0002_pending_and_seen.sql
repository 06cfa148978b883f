-- Reply text received but not yet shown (restored into the buffer after a restart), and
-- inbound messages already taken (a platform's redelivery or a replayed webhook is dropped;
-- with several instances on one database, also one delivered to each of them).
-- One for one with ../sqlite/0002_pending_and_seen.sql.
ALTER TABLE runs ADD COLUMN pending TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN channel TEXT;
ALTER TABLE runs ADD COLUMN chat TEXT;
CREATE TABLE seen (
    channel         TEXT NOT NULL,
    chat_id         TEXT NOT NULL,
    message_id      TEXT NOT NULL,
    seen_at         TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (channel, chat_id, message_id)
);
CREATE INDEX seen_at ON seen (seen_at);
