//! Search (crate::search): FTS5 on SQLite, tsvector and GIN on PostgreSQL. The index is the
//! migrations' (`0012_search.sql`, and `0013_search_sessions.sql` on SQLite): on SQLite
//! written by the store with each message and file ([`super::SearchIndex`]), on PostgreSQL
//! generated columns; here are the queries, one per database (their full-text syntax has
//! nothing in common), built from the one reading of the query.

use super::{Cols, SqlStore};
use crate::search::{HitKind, SearchHit, SearchQuery, Term, passage};
use crate::{Result, StoreError};
use switchboard_db::Cols as _;
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
        let pool = match &self.db {
            switchboard_db::Db::Sqlite(pool) => {
                // What is written but not indexed yet is indexed first. If that fails (it
                // writes: a full disk, say), the search still answers from what is indexed,
                // and the documents stay pending for the indexer.
                if let Err(e) = self.index_pending().await {
                    tracing::warn!(error = %e, "search: indexing what is pending failed; searching what is indexed");
                }
                return search_sqlite(pool, q, sessions.as_deref()).await;
            }
            switchboard_db::Db::Postgres(pool) => pool,
        };
        // The page is ranked first; only its hits get a passage (a passage for every match
        // of a common word would cost more than the whole search).
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
        let rows = sqlx::query(sqlx::AssertSqlSafe(&*sql))
            .bind(tsquery(&q.terms))
            .bind(q.visible_to.as_deref())
            .bind(sessions.as_deref())
            .bind(q.backend.as_deref())
            .bind(q.from.as_deref())
            .bind(q.to.as_deref())
            .bind(i64::from(q.limit))
            .bind(i64::from(q.offset))
            .fetch_all(pool)
            .await?;
        rows.iter()
            .map(|row| {
                let snippet = row.text("snippet")?;
                hit(row, snippet)
            })
            .collect()
    }
}

/// A term is common when this many of its matches are among the index's newest
/// [`COMMON_WINDOW`] documents (a fifth of them).
const COMMON_HITS: i64 = 2_000;
const COMMON_WINDOW: i64 = 10_000;

/// A query naming at most this many sessions names them to the index (its `sess` column);
/// one naming more is filtered by the join alone.
const SESSION_TOKENS: usize = 64;

/// A session as the index's `sess` column holds it: one word, `s` and the id's hex digits.
pub(crate) fn session_token(id: Uuid) -> String {
    format!("s{}", id.simple())
}

/// The matches of FTS5 query `matching` (a placeholder) that pass the query's filters,
/// joined only to what those filters read (each join costs microseconds a match, and a
/// query ranks up to [`CANDIDATES`] of them).
fn filtered(matching: &str, q: &SearchQuery) -> String {
    let mut from = String::from("FROM search");
    let mut filters = String::new();
    let docs = q.sessions.is_some() || q.visible_to.is_some() || q.backend.is_some();
    let times = q.from.is_some() || q.to.is_some();
    if docs || times {
        from.push_str(" JOIN search_docs d ON d.doc = search.rowid");
    }
    if q.visible_to.is_some() || q.backend.is_some() {
        from.push_str(" JOIN sessions s ON s.id = d.session_id");
    }
    if times {
        from.push_str(
            " LEFT JOIN messages m ON d.kind = 'm' AND m.id = d.ref \
             LEFT JOIN files f ON d.kind = 'f' AND f.id = d.ref",
        );
    }
    if q.visible_to.is_some() {
        filters.push_str(&format!(" AND {VISIBLE}"));
    }
    if q.sessions.is_some() {
        filters.push_str(" AND d.session_id IN (SELECT value FROM json_each($3))");
    }
    if q.backend.is_some() {
        filters.push_str(&format!(" AND {BACKEND_SQLITE} = $4"));
    }
    if q.from.is_some() {
        filters.push_str(" AND COALESCE(m.created_at, f.created_at) >= $5");
    }
    if q.to.is_some() {
        filters.push_str(" AND COALESCE(m.created_at, f.created_at) < $6");
    }
    format!("{from} WHERE search MATCH {matching}{filters}")
}

/// Search on SQLite. BM25 ranks the matches, but FTS5 reads every match of each term to
/// weigh it (a word in 900,000 of a million messages: 70 ms), and BM25 gives a word in more
/// than half the documents no weight at all. So each term is first tried on the index's
/// newest documents (a bounded read): a common one only filters, BM25 ranks by the others
/// (as Elasticsearch's common-terms query does), and a query of only common terms lists its
/// matches newest first. Passages are made from the page's texts ([`passage`]).
async fn search_sqlite(
    pool: &sqlx::SqlitePool,
    q: &SearchQuery,
    sessions: Option<&str>,
) -> Result<Vec<SearchHit>> {
    let mut conn = pool.acquire().await?;
    let newest: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(doc), 0) FROM search_docs")
        .fetch_one(&mut *conn)
        .await?;
    let (mut rare, mut common) = (Vec::new(), Vec::new());
    for term in &q.terms {
        let is_common = newest >= COMMON_WINDOW
            && sqlx::query(
                "SELECT rowid FROM search WHERE search MATCH $1 AND rowid > $2 \
                 ORDER BY rowid DESC LIMIT 1 OFFSET $3",
            )
            .bind(format!("body : ({})", fts5(std::slice::from_ref(term))))
            .bind(newest - COMMON_WINDOW)
            .bind(COMMON_HITS - 1)
            .fetch_optional(&mut *conn)
            .await?
            .is_some();
        if is_common {
            common.push(term.clone());
        } else {
            rare.push(term.clone());
        }
    }
    // The named sessions, to the index: their documents are found by it, not by reading a
    // common word's matches until theirs come.
    let scope = match &q.sessions {
        Some(ids) if !ids.is_empty() && ids.len() <= SESSION_TOKENS => {
            let names: Vec<String> = ids
                .iter()
                .map(|id| format!("\"{}\"", session_token(*id)))
                .collect();
            format!(" AND sess : ({})", names.join(" OR "))
        }
        _ => String::new(),
    };
    let matching = |terms: &[Term]| format!("body : ({}){scope}", fts5(terms));
    // The page: `doc` and `score`, in its order.
    let (page, order) = if rare.is_empty() {
        (
            format!(
                "SELECT search.rowid AS doc, 0.0 AS score {} \
                 ORDER BY search.rowid DESC LIMIT $7 OFFSET $8",
                filtered("$1", q)
            ),
            "page.doc DESC",
        )
    } else {
        let candidates = if common.is_empty() {
            format!(
                "SELECT search.rowid AS doc, bm25(search, 1.0, 0.0) AS score {} \
                 ORDER BY search.rowid DESC LIMIT {CANDIDATES}",
                filtered("$1", q)
            )
        } else {
            format!(
                "SELECT rowid AS doc, bm25(search, 1.0, 0.0) AS score FROM search \
                 WHERE search MATCH $1 AND +rowid IN (SELECT search.rowid {} \
                   ORDER BY search.rowid DESC LIMIT {CANDIDATES})",
                filtered("$9", q)
            )
        };
        (
            format!("SELECT doc, score FROM ({candidates}) ORDER BY score, doc LIMIT $7 OFFSET $8"),
            "page.score, page.doc",
        )
    };
    let sql = format!(
        "SELECT d.kind AS kind, d.ref AS ref, d.session_id AS session_id, s.title AS title, \
           m.role AS role, m.seq AS seq, COALESCE(m.created_at, f.created_at) AS at, \
           (SELECT body FROM search b WHERE b.rowid = page.doc) AS body \
         FROM ({page}) page JOIN search_docs d ON d.doc = page.doc \
         JOIN sessions s ON s.id = d.session_id \
         LEFT JOIN messages m ON d.kind = 'm' AND m.id = d.ref \
         LEFT JOIN files f ON d.kind = 'f' AND f.id = d.ref \
         ORDER BY {order}"
    );
    let ranked_by = if rare.is_empty() { &common } else { &rare };
    let mut query = sqlx::query(sqlx::AssertSqlSafe(&*sql))
        .bind(matching(ranked_by))
        .bind(q.visible_to.as_deref())
        .bind(sessions)
        .bind(q.backend.as_deref())
        .bind(q.from.as_deref())
        .bind(q.to.as_deref())
        .bind(i64::from(q.limit))
        .bind(i64::from(q.offset));
    if !rare.is_empty() && !common.is_empty() {
        query = query.bind(matching(&q.terms));
    }
    let rows = query.fetch_all(&mut *conn).await?;
    rows.iter()
        .map(|row| {
            let body = row.opt_text("body")?.unwrap_or_default();
            hit(row, passage(&body, &q.terms))
        })
        .collect()
}

fn hit(row: &impl Cols, snippet: String) -> Result<SearchHit> {
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
        snippet,
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
