-- SQLite's 0013 gives its full-text index each document's session; on PostgreSQL the
-- session filter is the messages' and files' own `session_id` index: nothing to do.
SELECT 1;
