//! Full-text search over the sessions (`GET /v1/search`): what a query is, what a hit is,
//! and the one reading of a person's query that both databases' queries are built from.
//!
//! A query is words, `"quoted phrases"` and `prefix*` words; a hit has every one of them
//! (AND). Words are runs of letters and digits, compared without case: `foo-bar` is the
//! phrase `"foo bar"`, as the index reads the text it holds (SQLite's FTS5 `unicode61`
//! tokenizer; on PostgreSQL, the text with everything but letters and digits made spaces,
//! through the `simple` configuration).

use uuid::Uuid;

mod passage;
pub use passage::{PASSAGE_WORDS, passage};

/// One part of a query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Term {
    /// Words in this order, next to each other (one word: that word).
    Phrase(Vec<String>),
    /// Words beginning with this.
    Prefix(String),
}

/// Reads a person's query: `None` when it holds no word.
pub fn parse_query(q: &str) -> Option<Vec<Term>> {
    let mut terms = Vec::new();
    let mut rest = q;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('"') {
            let (phrase, tail) = after.split_once('"').unwrap_or((after, ""));
            let words = words(phrase);
            if !words.is_empty() {
                terms.push(Term::Phrase(words));
            }
            rest = tail;
            continue;
        }
        let end = rest
            .find(|c: char| c.is_whitespace() || c == '"')
            .unwrap_or(rest.len());
        let (token, tail) = rest.split_at(end);
        rest = tail
            .strip_prefix(|c: char| c.is_whitespace())
            .unwrap_or(tail);
        let prefix = token.ends_with('*');
        let mut w = words(token);
        match (prefix, w.len()) {
            (_, 0) => {}
            (true, 1) => terms.push(Term::Prefix(w.remove(0))),
            (true, _) => {
                // `foo-ba*`: the phrase's last word is the prefix. Neither database has a
                // prefix inside a phrase that the other reads the same: the words apart.
                let last = w.pop().unwrap_or_default();
                terms.push(Term::Phrase(w));
                terms.push(Term::Prefix(last));
            }
            (false, _) => terms.push(Term::Phrase(w)),
        }
    }
    (!terms.is_empty()).then_some(terms)
}

/// The words of `text`: runs of letters and digits, lower-cased.
pub fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// What to look for, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchQuery {
    pub terms: Vec<Term>,
    /// Only these sessions (`None`: any).
    pub sessions: Option<Vec<Uuid>>,
    /// Only sessions of this backend: `builtin`, or an agent's name.
    pub backend: Option<String>,
    /// Only what was said at or after / before this time (RFC 3339, as stored).
    pub from: Option<String>,
    pub to: Option<String>,
    /// Only sessions this user sees (their own, shared with them or with everyone); `None`:
    /// every session.
    pub visible_to: Option<String>,
    pub limit: u32,
    pub offset: u32,
}

/// What a hit is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HitKind {
    /// A message of the transcript (its text, tool calls or tool result).
    Message,
    /// A file of the session, by its name.
    File,
}

/// One hit, best first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchHit {
    pub session_id: Uuid,
    pub session_title: String,
    pub kind: HitKind,
    /// The message's or the file's id.
    pub id: Uuid,
    /// A message's role.
    pub role: Option<String>,
    /// Where in the session's log the message was recorded (the log's last seq then); none
    /// for a file, or a message recorded before the log was kept.
    pub seq: Option<u64>,
    pub created_at: String,
    /// The matching passage: text, with each match between [`MATCH_START`] and
    /// [`MATCH_END`].
    pub snippet: String,
}

/// Around each match in [`SearchHit::snippet`] (control characters no stored text holds
/// in a way that matters: a snippet is read by splitting on them).
pub const MATCH_START: char = '\u{1}';
pub const MATCH_END: char = '\u{2}';

#[cfg(test)]
mod tests {
    use super::*;

    fn p(w: &[&str]) -> Term {
        Term::Phrase(w.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn words_phrases_and_prefixes() {
        assert_eq!(
            parse_query(r#"Migration "fix that" postgre* foo-bar"#).unwrap(),
            vec![
                p(&["migration"]),
                p(&["fix", "that"]),
                Term::Prefix("postgre".into()),
                p(&["foo", "bar"]),
            ]
        );
        assert_eq!(parse_query("  \"\"  --- * "), None);
        assert_eq!(
            parse_query("\"unclosed phrase").unwrap(),
            vec![p(&["unclosed", "phrase"])]
        );
        assert_eq!(
            parse_query("foo-ba*").unwrap(),
            vec![p(&["foo"]), Term::Prefix("ba".into())]
        );
        assert_eq!(parse_query("Ünïcode").unwrap(), vec![p(&["ünïcode"])]);
    }
}
