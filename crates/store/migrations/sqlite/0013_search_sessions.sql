-- Search in named sessions (`GET /v1/search?session=`): the index learns each document's
-- session, as one word in a second column (`sess`: `s` and the id's hex digits), so that
-- FTS5 finds a session's matches itself instead of reading a common word's matches until
-- the session's come (a word in most of a million messages, in one session: 0.5 s). FTS5
-- cannot add a column: the index is made again from what it holds.
CREATE VIRTUAL TABLE search_new USING fts5(body, sess, tokenize = 'unicode61 remove_diacritics 0');
INSERT INTO search_new (rowid, body, sess)
    SELECT d.doc, s.body, 's' || replace(d.session_id, '-', '')
    FROM search s JOIN search_docs d ON d.doc = s.rowid;
DROP TABLE search;
ALTER TABLE search_new RENAME TO search;
