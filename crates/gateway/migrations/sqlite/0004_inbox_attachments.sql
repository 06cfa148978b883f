-- Files that came with a queued message (JSON list of the channel's Attachment: kind, name,
-- size, type and the platform's reference to fetch it by). Fetched when the batch is sent.
ALTER TABLE inbox ADD COLUMN attachments TEXT;
