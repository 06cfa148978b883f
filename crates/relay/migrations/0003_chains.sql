-- Loop guards: every delivery belongs to a chain (a message and the replies it set off) at a
-- hop (1 for the message that started it); sends are counted per sender and per bundle.
ALTER TABLE deliveries ADD COLUMN chain_id TEXT;
ALTER TABLE deliveries ADD COLUMN hop INTEGER NOT NULL DEFAULT 1;
CREATE INDEX deliveries_sent ON deliveries (bundle, sender, created_at);
CREATE INDEX deliveries_bundle_sent ON deliveries (bundle, created_at);
CREATE INDEX deliveries_received ON deliveries (bundle, target, finished_at);
