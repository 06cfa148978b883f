//! `GET /v1/search`: full-text search over the sessions a caller sees.

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

/// The query of `GET /v1/search`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SearchParams {
    /// Words (all required), `"quoted phrases"` and `prefix*` words; case is ignored.
    #[param(min_length = 1, max_length = 500)]
    pub q: String,
    /// Only this session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<Uuid>,
    /// Only these sessions: their ids separated by commas, at most 100 (a chat's `/search`
    /// looks in the sessions that chat has had). With `session` too, only that one of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(
        max_length = 3699,
        pattern = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}(,[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}){0,99}$"
    )]
    pub sessions: Option<String>,
    /// Only sessions of this backend: `builtin`, or an agent's name from `[agents.NAME]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(max_length = 100, pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]*$")]
    pub backend: Option<String>,
    /// Only what was said at or after this time (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(format = DateTime)]
    pub from: Option<String>,
    /// Only what was said before this time (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(format = DateTime)]
    pub to: Option<String>,
    /// Hits per page (default 20, at most 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<u32>,
    /// The `next_cursor` of the page before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

/// A page of hits, best first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SearchResponse {
    pub hits: Vec<SearchHit>,
    /// Where the next page starts (`cursor`); absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// What a hit is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SearchHitKind {
    /// A message of the transcript: its text, its tool calls, or a tool's result.
    Message,
    /// A file of the session, found by its name.
    File,
}

/// One hit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SearchHit {
    pub session_id: Uuid,
    pub session_title: String,
    pub kind: SearchHitKind,
    /// The message's id (`GET /v1/sessions/{id}/messages`) or the file's
    /// (`GET /v1/sessions/{id}/files/{file_id}`).
    pub id: Uuid,
    /// A message's role: `user`, `assistant` or `tool`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Where in the session's event log the message was recorded: read the log from just
    /// before it (`GET /v1/sessions/{id}/events?after=`) to show the hit in place. Absent for
    /// a file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    pub created_at: String,
    /// The passage that matched, in pieces: `matched` ones are the query's words.
    pub snippet: Vec<SnippetPart>,
}

/// A piece of a hit's passage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SnippetPart {
    pub text: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub matched: bool,
}

impl SnippetPart {
    /// A passage as the store marks it (`start` … `end` around each match) in pieces.
    pub fn split(marked: &str, start: char, end: char) -> Vec<SnippetPart> {
        let mut parts: Vec<SnippetPart> = Vec::new();
        let mut matched = false;
        let mut text = String::new();
        let flush = |text: &mut String, matched: bool, parts: &mut Vec<SnippetPart>| {
            if !text.is_empty() {
                parts.push(SnippetPart {
                    text: std::mem::take(text),
                    matched,
                });
            }
        };
        for c in marked.chars() {
            if c == start || c == end {
                flush(&mut text, matched, &mut parts);
                matched = c == start;
            } else {
                text.push(c);
            }
        }
        flush(&mut text, matched, &mut parts);
        parts
    }

    /// The passage with each match between `open` and `close` (`**` for Markdown).
    pub fn render(parts: &[SnippetPart], open: &str, close: &str) -> String {
        parts
            .iter()
            .map(|p| {
                if p.matched {
                    format!("{open}{}{close}", p.text)
                } else {
                    p.text.clone()
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marked_passage_splits_into_pieces() {
        let parts =
            SnippetPart::split("rerun \u{1}the\u{2} \u{1}migration\u{2}!", '\u{1}', '\u{2}');
        assert_eq!(
            SnippetPart::render(&parts, "[", "]"),
            "rerun [the] [migration]!"
        );
        assert_eq!(parts.len(), 5);
        assert!(parts[1].matched && !parts[2].matched);
    }
}
