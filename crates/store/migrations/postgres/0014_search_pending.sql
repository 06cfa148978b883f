-- SQLite's 0014 lets its full-text index be written in batches; PostgreSQL's `tsvector`
-- columns are generated with their rows (and GIN batches its own updates): nothing to do.
SELECT 1;
