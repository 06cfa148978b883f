-- When each chat last had a message in or out (a message from it, a reply, a prompt, a
-- notification): `GET /v1/gateway/sessions` shows it as a conversation's last activity.
-- `thread` is '' for a chat without one.
CREATE TABLE chat_activity (
    channel         TEXT NOT NULL,
    chat_id         TEXT NOT NULL,
    thread          TEXT NOT NULL DEFAULT '',
    at              TEXT NOT NULL,
    PRIMARY KEY (channel, chat_id, thread)
);
