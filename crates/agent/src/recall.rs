//! `search_sessions {query, limit?}`: the agent recalls what was said and decided in earlier
//! sessions — the same search as `GET /v1/search`, within what the session's owner sees.

use serde_json::Value;
use switchboard_engine::RunContext;
use switchboard_protocol::search::{SearchHitKind, SearchParams, SnippetPart};

/// Hits given to the model unless it asks for fewer.
const DEFAULT_HITS: u32 = 8;
/// The most it may ask for.
const MAX_HITS: u32 = 20;

/// The answer for the model, and whether it is an error.
pub(crate) async fn search_sessions(ctx: &RunContext, args: &Value) -> (String, bool) {
    let Some(query) = args.get("query").and_then(Value::as_str) else {
        return (
            "search_sessions: `query` (a string) is required".into(),
            true,
        );
    };
    let limit = args
        .get("limit")
        .and_then(Value::as_u64)
        .map_or(DEFAULT_HITS, |l| {
            u32::try_from(l).unwrap_or(MAX_HITS).clamp(1, MAX_HITS)
        });
    let params = SearchParams {
        q: query.to_string(),
        limit: Some(limit),
        ..SearchParams::default()
    };
    match ctx.handle.search(&params).await {
        Ok(found) if found.hits.is_empty() => (format!("nothing found for {query:?}"), false),
        Ok(found) => {
            let mut out = String::new();
            for h in &found.hits {
                let what = match h.kind {
                    SearchHitKind::Message => h.role.clone().unwrap_or_else(|| "message".into()),
                    SearchHitKind::File => "file".into(),
                };
                let here = if h.session_id == ctx.session_id {
                    " (this session)"
                } else {
                    ""
                };
                out.push_str(&format!(
                    "- session {} \"{}\"{here}, {what}, {}: {}\n",
                    h.session_id,
                    h.session_title,
                    h.created_at,
                    SnippetPart::render(&h.snippet, "**", "**").replace('\n', " ")
                ));
            }
            (out, false)
        }
        Err(e) => (format!("search_sessions: {e}"), true),
    }
}
