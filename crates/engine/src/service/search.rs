//! Search over the sessions (`GET /v1/search`): a person's query read once
//! (`switchboard_store::search::parse_query`), checked, and answered by the store's index
//! within what the caller may see.

use switchboard_protocol::search::{
    SearchHit, SearchHitKind, SearchParams, SearchResponse, SnippetPart,
};
use switchboard_store::search::{HitKind, MATCH_END, MATCH_START, SearchQuery, parse_query};

use super::Engine;
use crate::error::EngineError;

/// Hits per page unless asked otherwise, and at most.
const DEFAULT_LIMIT: u32 = 20;
const MAX_LIMIT: u32 = 100;
/// The longest query taken.
const MAX_QUERY: usize = 500;
/// The most terms a query may have, and the shortest prefix (a one-letter prefix matches
/// nearly every word).
const MAX_TERMS: usize = 16;
const MIN_PREFIX: usize = 2;

/// Whose sessions a search looks in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum View {
    /// Every session.
    All,
    /// This user's own, and those shared with them or with everyone.
    User(String),
    /// This session alone.
    Session(uuid::Uuid),
}

impl View {
    fn of(visible_to: Option<&str>) -> Self {
        visible_to.map_or(Self::All, |u| Self::User(u.to_string()))
    }
}

impl Engine {
    /// The hits of `params` among the sessions `visible_to` sees (`None`: every session),
    /// best first, a page at a time.
    pub async fn search(
        &self,
        params: &SearchParams,
        visible_to: Option<&str>,
    ) -> Result<SearchResponse, EngineError> {
        search_in(self.inner.store.as_ref(), params, View::of(visible_to)).await
    }

    /// The search session `session`'s agent makes through Switchboard's MCP server (with
    /// the session's token), for its run under way: [`seen_by_run`]. Without a run under way
    /// there is no one it searches for: `session_not_running`.
    pub async fn search_as_session(
        &self,
        session: uuid::Uuid,
        params: &SearchParams,
    ) -> Result<SearchResponse, EngineError> {
        let store = self.inner.store.as_ref();
        store
            .get_session(session)
            .await?
            .ok_or(EngineError::SessionNotFound(session))?;
        let run = store
            .active_run(session)
            .await?
            .ok_or(EngineError::SessionNotRunning(session))?;
        let requested_by = run
            .input
            .get("requested_by")
            .and_then(serde_json::Value::as_str)
            .map(str::to_string);
        let view = seen_by_run(store, session, requested_by.as_deref()).await?;
        search_in(store, params, view).await
    }
}

/// What a run's agent may search (`search_sessions`): what the person whose message started
/// the run sees — not the session's owner, whose sessions a person the session is shared
/// with, or anyone in a group chat, must not read through the agent. On a server without
/// people everything is the one admin's: every session. With people, a run no person is
/// known to have started (a chat no person is linked to, a schedule, a relay message, the
/// server token) searches its own session alone.
pub(crate) async fn seen_by_run(
    store: &dyn switchboard_store::Store,
    session: uuid::Uuid,
    requested_by: Option<&str>,
) -> Result<View, EngineError> {
    if store.list_users().await?.is_empty() {
        return Ok(View::All);
    }
    let Some(person) = requested_by else {
        return Ok(View::Session(session));
    };
    let role = store
        .get_user(person)
        .await?
        .and_then(|u| switchboard_protocol::people::Role::parse(&u.role));
    Ok(match role {
        Some(r) if r != switchboard_protocol::people::Role::Member => View::All,
        Some(_) => View::User(person.to_string()),
        // Not (or no longer) a person here.
        None => View::Session(session),
    })
}

/// [`Engine::search`] on `store`.
pub(crate) async fn search_in(
    store: &dyn switchboard_store::Store,
    params: &SearchParams,
    view: View,
) -> Result<SearchResponse, EngineError> {
    if params.q.chars().count() > MAX_QUERY {
        return Err(EngineError::validation(
            "q",
            format!("at most {MAX_QUERY} characters"),
        ));
    }
    // 422: a word is a run of Unicode letters and digits, which the document's schema
    // cannot say portably.
    let terms = parse_query(&params.q).ok_or_else(|| {
        EngineError::Unprocessable(
            "q: no word to look for (a word is a run of letters and digits)".into(),
        )
    })?;
    if terms.len() > MAX_TERMS {
        return Err(EngineError::Unprocessable(format!(
            "q: at most {MAX_TERMS} words, phrases or prefixes"
        )));
    }
    if terms.iter().any(|t| matches!(t, switchboard_store::search::Term::Prefix(p) if p.chars().count() < MIN_PREFIX)) {
        return Err(EngineError::Unprocessable(format!(
            "q: a prefix* needs at least {MIN_PREFIX} letters or digits"
        )));
    }
    if let Some(b) = &params.backend
        && (b.chars().count() > 100 || b.chars().any(char::is_control))
    {
        return Err(EngineError::validation(
            "backend",
            "`builtin` or an agent's name (at most 100 characters, no control characters)",
        ));
    }
    let limit = params.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(EngineError::validation(
            "limit",
            format!("between 1 and {MAX_LIMIT}"),
        ));
    }
    let offset = match params.cursor.as_deref() {
        None | Some("") => 0,
        Some(c) => c.parse::<u32>().map_err(|_| {
            EngineError::Unprocessable(format!("cursor: {c:?} is not a cursor this server gave"))
        })?,
    };
    for (field, value) in [("from", &params.from), ("to", &params.to)] {
        if let Some(v) = value
            && chrono::DateTime::parse_from_rfc3339(v).is_err()
        {
            return Err(EngineError::validation(
                field,
                "an RFC 3339 time (2026-12-06T10:00:00Z)",
            ));
        }
    }
    // Stored times are UTC with microseconds: a bound given any other way is compared
    // as the same instant written that way.
    let utc = |v: &Option<String>| {
        v.as_deref()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map(|t| crate::time::rfc3339(t.with_timezone(&chrono::Utc)))
    };
    // The sessions asked for (`session`, `sessions`) and, for a session's own agent, its
    // own: a search confined to some sessions asked for others finds nothing.
    let mut sessions: Option<Vec<uuid::Uuid>> = params.session.map(|s| vec![s]);
    if let Some(list) = params.sessions.as_deref() {
        let ids = parse_sessions(list)?;
        sessions = Some(match sessions {
            Some(one) => one.into_iter().filter(|s| ids.contains(s)).collect(),
            None => ids,
        });
    }
    if let View::Session(own) = &view {
        sessions = Some(match sessions {
            Some(asked) => asked.into_iter().filter(|s| s == own).collect(),
            None => vec![*own],
        });
    }
    if sessions.as_ref().is_some_and(Vec::is_empty) {
        return Ok(SearchResponse {
            hits: Vec::new(),
            next_cursor: None,
        });
    }
    let query = SearchQuery {
        terms,
        sessions,
        backend: params.backend.clone().filter(|b| !b.is_empty()),
        from: utc(&params.from),
        to: utc(&params.to),
        visible_to: match &view {
            View::User(u) => Some(u.clone()),
            View::All | View::Session(_) => None,
        },
        // One more than asked: whether a next page exists.
        limit: limit + 1,
        offset,
    };
    let mut hits = store.search(&query).await?;
    let more = hits.len() > limit as usize;
    hits.truncate(limit as usize);
    Ok(SearchResponse {
        hits: hits
            .into_iter()
            .map(|h| SearchHit {
                session_id: h.session_id,
                session_title: h.session_title,
                kind: match h.kind {
                    HitKind::Message => SearchHitKind::Message,
                    HitKind::File => SearchHitKind::File,
                },
                id: h.id,
                role: h.role,
                seq: h.seq,
                created_at: h.created_at,
                snippet: SnippetPart::split(&h.snippet, MATCH_START, MATCH_END),
            })
            .collect(),
        next_cursor: more.then(|| (offset + limit).to_string()),
    })
}

/// The most sessions `sessions` may name.
const MAX_SESSIONS: usize = 100;

/// `sessions`: ids separated by commas (empty pieces ignored).
fn parse_sessions(list: &str) -> Result<Vec<uuid::Uuid>, EngineError> {
    let bad = || {
        EngineError::validation(
            "sessions",
            format!("session ids separated by commas, at most {MAX_SESSIONS}"),
        )
    };
    let ids = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<uuid::Uuid>().map_err(|_| bad()))
        .collect::<Result<Vec<_>, _>>()?;
    if ids.is_empty() || ids.len() > MAX_SESSIONS {
        return Err(bad());
    }
    Ok(ids)
}
