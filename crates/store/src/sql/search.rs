//! Search (crate::search): FTS5 on SQLite, tsvector and GIN on PostgreSQL. The index is the
//! migrations' (`0012_search.sql`): on SQLite written by the store with each message and
//! file ([`super::SearchIndex`]), on PostgreSQL generated columns; here are the queries, one
//! per database (their full-text syntax has nothing in common), built from the one reading
//! of the query.

use super::{Cols, SqlStore, with_db};
use crate::search::{HitKind, SearchHit, SearchQuery, Term};
use crate::{Result, StoreError};
use uuid::Uuid;

/// The query in FTS5's syntax: each word a quoted string (nothing in it is an operator),
/// a phrase its words in one string, a prefix `"word" *`; terms side by side are all
/// required.
pub(crate) fn fts5(terms: &[Term]) -> String {
    terms
        .iter()
        .map(|t| match t {
            Term::Phrase(words) => format!("\"{}\"", words.join(" ")),
            Term::Prefix(w) => format!("\"{w}\" *"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The query in `to_tsquery`'s syntax: each word quoted (`'word'`), a phrase its words
/// joined by `<->`, a prefix `'word':*`, the terms joined by `&`. Words hold only letters
/// and digits, so no quote can break out.
pub(crate) fn tsquery(terms: &[Term]) -> String {
    terms
        .iter()
        .map(|t| match t {
            Term::Phrase(words) if words.len() == 1 => format!("'{}'", words[0]),
            Term::Phrase(words) => {
                let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
                format!("({})", quoted.join(" <-> "))
            }
            Term::Prefix(w) => format!("'{w}':*"),
        })
        .collect::<Vec<_>>()
        .join(" & ")
}

/// Sessions a user sees: their own, and those shared with them or with everyone (`$2`, as
/// in `list_sessions`).
const VISIBLE: &str = "($2 IS NULL OR s.owner = $2 OR EXISTS (SELECT 1 FROM session_shares sh \
     WHERE sh.session_id = s.id AND (sh.user_name = $2 OR sh.user_name = '*')))";

/// The session's backend as the filter names it: `builtin`, or the agent's name.
const BACKEND_SQLITE: &str = "CASE WHEN json_type(s.config, '$.backend') = 'object' \
     THEN json_extract(s.config, '$.backend.acp') ELSE json_extract(s.config, '$.backend') END";
const BACKEND_PG: &str =
    "COALESCE(s.config::jsonb #>> '{backend,acp}', s.config::jsonb ->> 'backend')";

/// How many of a query's matches (the newest that pass its filters) SQLite ranks: a word in
/// more messages than this finds the best of the newest (docs/api.md says so).
pub(crate) const CANDIDATES: usize = 10_000;

/// How much of a message is indexed (its beginning): PostgreSQL refuses a `tsvector` over
/// 1 MB, which a message's generated column would make a failed write of.
pub(crate) const INDEXED_CHARS: usize = 200_000;

fn kind(k: &str) -> Result<HitKind> {
    match k {
        "m" => Ok(HitKind::Message),
        "f" => Ok(HitKind::File),
        k => Err(StoreError::Corrupt(format!("search hit kind {k:?}"))),
    }
}

impl SqlStore {
    pub(super) async fn run_search(&self, q: &SearchQuery) -> Result<Vec<SearchHit>> {
        if q.terms.is_empty() {
            return Ok(Vec::new());
        }
        // A JSON array of the ids: one bound value for any number of them on both databases.
        let sessions = q.sessions.as_ref().map(|ids| {
            serde_json::Value::from(ids.iter().map(Uuid::to_string).collect::<Vec<_>>()).to_string()
        });
        // The page is ranked first; only its hits get a passage (a passage for every match
        // of a common word would cost more than the whole search).
        let (sql, text) = match &self.db {
            switchboard_db::Db::Sqlite(_) => {
                // The index's matches newest first, the first CANDIDATES that pass the
                // filters ranked: a word in most messages would otherwise have every match
                // scored, joined and sorted (3.6 s over a million). Driving from the named
                // sessions' documents instead, each asked of the index by rowid, was tried
                // and is far slower: FTS5 reads a term's whole list for each such probe.
                let sql = format!(
                    "SELECT page.kind AS kind, page.ref AS ref, page.session_id AS session_id, \
                       page.title AS title, page.role AS role, page.seq AS seq, page.at AS at, \
                       (SELECT snippet(search, 0, char(1), char(2), '…', 24) FROM search \
                        WHERE search MATCH $1 AND search.rowid = page.doc) AS snippet \
                     FROM (SELECT * FROM (SELECT d.doc AS doc, d.kind AS kind, d.ref AS ref, \
                       d.session_id AS session_id, s.title AS title, m.role AS role, \
                       m.seq AS seq, COALESCE(m.created_at, f.created_at) AS at, \
                       bm25(search) AS score \
                     FROM search JOIN search_docs d ON d.doc = search.rowid \
                     JOIN sessions s ON s.id = d.session_id \
                     LEFT JOIN messages m ON d.kind = 'm' AND m.id = d.ref \
                     LEFT JOIN files f ON d.kind = 'f' AND f.id = d.ref \
                     WHERE search MATCH $1 AND {VISIBLE} \
                       AND ($3 IS NULL OR d.session_id IN (SELECT value FROM json_each($3))) \
                       AND ($4 IS NULL OR {BACKEND_SQLITE} = $4) \
                       AND ($5 IS NULL OR COALESCE(m.created_at, f.created_at) >= $5) \
                       AND ($6 IS NULL OR COALESCE(m.created_at, f.created_at) < $6) \
                     ORDER BY search.rowid DESC LIMIT {CANDIDATES}) \
                     ORDER BY score, doc LIMIT $7 OFFSET $8) page \
                     ORDER BY page.score, page.doc"
                );
                (sql, fts5(&q.terms))
            }
            switchboard_db::Db::Postgres(_) => {
                let q1 = "to_tsquery('simple', $1)";
                let marks = "'StartSel=' || chr(1) || ',StopSel=' || chr(2)";
                // The marks are the passage's own: any in the stored text are spaces.
                let clean = |t: &str| format!("translate({t}, chr(1) || chr(2), '  ')");
                let message_text = clean(&format!(
                    "left(m2.content || COALESCE(chr(10) || m2.tool_calls, ''), {INDEXED_CHARS})"
                ));
                let file_text = clean("f2.name");
                let sql = format!(
                    "SELECT kind, ref, session_id, title, role, seq, at, \
                       CASE WHEN kind = 'm' THEN \
                         (SELECT ts_headline('simple', {message_text}, {q1}, \
                            {marks} || ',MaxWords=35,MinWords=12') FROM messages m2 WHERE m2.id = page.tie) \
                       ELSE (SELECT ts_headline('simple', {file_text}, {q1}, {marks}) \
                            FROM files f2 WHERE f2.id = page.tie) END AS snippet \
                     FROM ( \
                       SELECT 'm' AS kind, m.id::text AS ref, m.session_id::text AS session_id, \
                         s.title AS title, m.role AS role, m.seq AS seq, m.created_at AS at, \
                         ts_rank_cd(m.search, {q1}) AS score, m.id AS tie \
                       FROM messages m JOIN sessions s ON s.id = m.session_id \
                       WHERE m.search @@ {q1} AND {VISIBLE} \
                         AND ($3::text IS NULL OR m.session_id IN (SELECT v::uuid FROM jsonb_array_elements_text($3::jsonb) v)) \
                         AND ($4::text IS NULL OR {BACKEND_PG} = $4) \
                         AND ($5::text IS NULL OR m.created_at >= $5) \
                         AND ($6::text IS NULL OR m.created_at < $6) \
                       UNION ALL \
                       SELECT 'f', f.id::text, f.session_id::text, s.title, NULL, NULL, f.created_at, \
                         ts_rank_cd(f.search, {q1}), f.id \
                       FROM files f JOIN sessions s ON s.id = f.session_id \
                       WHERE f.search @@ {q1} AND {VISIBLE} \
                         AND ($3::text IS NULL OR f.session_id IN (SELECT v::uuid FROM jsonb_array_elements_text($3::jsonb) v)) \
                         AND ($4::text IS NULL OR {BACKEND_PG} = $4) \
                         AND ($5::text IS NULL OR f.created_at >= $5) \
                         AND ($6::text IS NULL OR f.created_at < $6) \
                       ORDER BY score DESC, tie LIMIT $7 OFFSET $8 \
                     ) page ORDER BY score DESC, tie"
                );
                (sql, tsquery(&q.terms))
            }
        };
        with_db!(self, |pool, _d| {
            let rows = sqlx::query(sqlx::AssertSqlSafe(&*sql))
                .bind(text)
                .bind(q.visible_to.as_deref())
                .bind(sessions.as_deref())
                .bind(q.backend.as_deref())
                .bind(q.from.as_deref())
                .bind(q.to.as_deref())
                .bind(i64::from(q.limit))
                .bind(i64::from(q.offset))
                .fetch_all(pool)
                .await?;
            rows.iter().map(hit).collect()
        })
    }
}

fn hit(row: &impl Cols) -> Result<SearchHit> {
    let parse = |col: &str| -> Result<uuid::Uuid> {
        let text = row.text(col)?;
        uuid::Uuid::parse_str(&text).map_err(|e| StoreError::Corrupt(format!("{col}: {e}")))
    };
    Ok(SearchHit {
        session_id: parse("session_id")?,
        session_title: row.text("title")?,
        kind: kind(&row.text("kind")?)?,
        id: parse("ref")?,
        role: row.opt_text("role")?,
        seq: row.opt_int("seq")?.and_then(|s| u64::try_from(s).ok()),
        created_at: row.text("at")?,
        snippet: row.text("snippet")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::search::parse_query;

    #[test]
    fn both_syntaxes_from_one_reading() {
        let t = parse_query(r#"migration "fix that" postgre*"#).unwrap();
        assert_eq!(fts5(&t), r#""migration" "fix that" "postgre" *"#);
        assert_eq!(
            tsquery(&t),
            "'migration' & ('fix' <-> 'that') & 'postgre':*"
        );
    }
}
