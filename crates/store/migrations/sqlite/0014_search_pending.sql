-- The full-text index is written in batches, off the transaction that writes a message or a
-- file (src/sql/indexer.rs): FTS5 writes a segment, and now and then merges segments, on
-- every transaction that touches it, so one reply per transaction cost twice what ten do,
-- and held SQLite's one write lock meanwhile. `search_pending` lists the documents written
-- (in `search_docs`) but not yet in `search`; the indexer moves them over a batch at a
-- time, and a search first indexes whatever is pending, so it always sees every write.
CREATE TABLE search_pending (
    doc             INTEGER PRIMARY KEY
);
