//! `/v1/chat/completions` and `/v1/models`: the OpenAI-compatible front door. Each call
//! runs a Switchboard session — a new one, or the one named by `X-Switchboard-Session` (or
//! `metadata.session_id`) — so any OpenAI client (the `openai` SDKs, Open WebUI, `curl`)
//! reaches every backend with its durable log and approvals. Errors come in OpenAI's shape
//! (`{"error": {"message", "type", "param", "code"}}`), authentication errors included.

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use std::collections::BTreeMap;
use switchboard_engine::{Engine, SubItem, Subscription};
use switchboard_protocol::openai::{
    AssistantMessage, ChatCompletion, ChatCompletionChunk, ChatCompletionRequest, ChatMessage,
    Choice, ChunkChoice, CompletionUsage, Delta, Model, ModelList, OpenAiError, OpenAiErrorBody,
    SESSION_HEADER, backend_of, model_id,
};
use switchboard_protocol::{
    AgentEvent, AutoApprove, AutoApproveKeyword, ContextItem, ContextPriority,
    CreateSessionRequest, DecisionAction, MessageType, RunOverrides, SendMessageRequest,
    ToolDecision, ToolDecisionsRequest, Usage,
};
use uuid::Uuid;

use crate::{ApiError, AppState};

/// What the front door does with a tool call that waits for approval (`[openai]
/// approvals`): its clients cannot answer one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DoorApprovals {
    /// Refused at once (fails closed). The default.
    #[default]
    Deny,
    /// Everything the session's permission mode allows runs without asking.
    AutoApprove,
    /// Left to another surface (console, chat, CLI); the approval timeout fails it closed.
    Wait,
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/chat/completions", post(completions))
        .route("/v1/models", get(models))
}

fn oai(status: StatusCode, kind: &str, code: &str, message: impl Into<String>) -> Response {
    let body = OpenAiErrorBody {
        error: OpenAiError {
            message: message.into(),
            kind: kind.into(),
            param: None,
            code: Some(code.into()),
        },
    };
    (status, axum::Json(body)).into_response()
}

/// Any of our errors in OpenAI's shape, with the same status and code.
fn from_api(e: ApiError) -> Response {
    let status = e.status();
    let kind = match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        409 => "conflict_error",
        429 => "rate_limit_error",
        s if s >= 500 => "server_error",
        _ => "invalid_request_error",
    };
    oai(status, kind, e.code(), e.message())
}

fn from_engine(e: switchboard_engine::EngineError) -> Response {
    from_api(ApiError::from(e))
}

/// The model list: one model per backend.
#[utoipa::path(get, path = "/v1/models", tag = "openai",
    security(("bearer" = ["sessions:read"])),
    responses((status = 200, body = ModelList),
              (status = 401, description = "`unauthorized` or `invalid_token`, in OpenAI's error shape", body = OpenAiErrorBody)))]
pub async fn models(
    State(state): State<AppState>,
    extensions: axum::http::Extensions,
    headers: HeaderMap,
) -> Response {
    if let Err(e) = switchboard_http::authorized(&extensions, &headers, &state.config.token) {
        return from_api(e);
    }
    let data = state
        .engine
        .backend_specs()
        .iter()
        .map(|b| Model {
            id: model_id(b),
            object: "model".into(),
            created: 0,
            owned_by: "switchboard".into(),
        })
        .collect();
    axum::Json(ModelList {
        object: "list".into(),
        data,
    })
    .into_response()
}

/// A chat completion, streamed (`stream: true`, server-sent `data:` chunks ending with
/// `[DONE]`) or not, answered by a Switchboard session: a new one, or the one named by the
/// `X-Switchboard-Session` header or `metadata.session_id`. The answer names the session in
/// that header (and, unstreamed, in `session_id`). Tool calls that wait for approval follow
/// `[openai] approvals`: denied (the default), allowed, or left to another surface.
#[utoipa::path(post, path = "/v1/chat/completions", tag = "openai",
    request_body = ChatCompletionRequest,
    security(("bearer" = ["sessions:write"])),
    params(("X-Switchboard-Session" = Option<uuid::Uuid>, Header, description = "continue this session")),
    responses((status = 200, description = "The completion, or with `stream: true` its chunks (`text/event-stream`)",
                 content((ChatCompletion = "application/json"), (ChatCompletionChunk = "text/event-stream"))),
              (status = 400, description = "`invalid_json` (a malformed body) or `invalid_header` (a malformed session id)", body = OpenAiErrorBody),
              (status = 401, description = "`authentication_error`", body = OpenAiErrorBody),
              (status = 404, description = "`model_not_found` or `session_not_found`", body = OpenAiErrorBody),
              (status = 409, description = "`session_already_running`: the session is answering another call", body = OpenAiErrorBody),
              (status = 429, description = "`too_many_streams`: with `stream: true`, the token holds as many streams as allowed", body = OpenAiErrorBody),
              (status = 422, description = "`validation_failed`: no messages, or the last one is not the user's with text; `unprocessable_entity`: the backend is not configured", body = OpenAiErrorBody),
              (status = 500, description = "`run_failed`: the backend failed (unstreamed; streamed, the error is the last chunk)", body = OpenAiErrorBody),
              (status = 503, description = "`unavailable`: shutting down", body = OpenAiErrorBody)))]
pub async fn completions(
    State(state): State<AppState>,
    extensions: axum::http::Extensions,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(e) = switchboard_http::authorized(&extensions, &headers, &state.config.token) {
        return from_api(e);
    }
    let req: ChatCompletionRequest = match switchboard_http::from_json_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return oai(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "invalid_json",
                format!("invalid request body: {e}"),
            );
        }
    };
    // A streamed answer is a long one: counted against the token's open streams like an
    // event stream (before the run starts, so a refusal costs nothing).
    let slot = if req.stream == Some(true) {
        match state.streams.take(&headers) {
            Ok(slot) => Some(slot),
            Err(e) => return from_api(e),
        }
    } else {
        None
    };
    let principal = extensions
        .get::<switchboard_protocol::people::Principal>()
        .cloned()
        .unwrap_or_else(switchboard_protocol::people::Principal::server);
    match start(&state, &principal, &headers, &req).await {
        Ok(started) => answer(state, req, started, slot).await,
        Err(resp) => resp,
    }
}

/// A call's run, started: its session, its run, the log from just before it.
struct Started {
    session: Uuid,
    run: Uuid,
    sub: Subscription,
}

async fn start(
    state: &AppState,
    principal: &switchboard_protocol::people::Principal,
    headers: &HeaderMap,
    req: &ChatCompletionRequest,
) -> Result<Started, Response> {
    let engine = &state.engine;
    let backend = backend_of(&req.model)
        .filter(|b| engine.backend_specs().contains(b))
        .ok_or_else(|| {
            let known: Vec<String> = engine.backend_specs().iter().map(model_id).collect();
            oai(
                StatusCode::NOT_FOUND,
                "not_found_error",
                "model_not_found",
                format!(
                    "no model {:?} here; GET /v1/models lists {}",
                    req.model,
                    known.join(", ")
                ),
            )
        })?;
    // Semantic (a schema cannot say "the last one is the user's"): 422.
    let bad = |m: &str| {
        oai(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request_error",
            "validation_failed",
            m,
        )
    };
    let Some((last, earlier)) = req.messages.split_last() else {
        return Err(bad("messages: must not be empty"));
    };
    let text = last.text();
    if last.role != "user" || text.trim().is_empty() {
        return Err(bad(
            "messages: the last message must be the user's, with text",
        ));
    }
    let named = headers
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| req.metadata.as_ref()?.get("session_id").cloned());
    let (session, new) = match named {
        Some(raw) => {
            let id = Uuid::parse_str(raw.trim()).map_err(|_| {
                oai(
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    "invalid_header",
                    format!("session id {raw:?} is not a UUID"),
                )
            })?;
            // A session the caller may not see is one that does not exist.
            crate::extract::visible(state, principal, id)
                .await
                .map_err(from_api)?;
            engine.get_session(id).await.map_err(from_engine)?;
            (id, false)
        }
        None => {
            let title: String = text.trim().chars().take(60).collect();
            let s = engine
                .create_session_as(
                    crate::extract::owner_of(principal),
                    CreateSessionRequest {
                        title: Some(title),
                        backend: Some(backend),
                        ..CreateSessionRequest::default()
                    },
                )
                .await
                .map_err(from_engine)?;
            (s.id, true)
        }
    };
    let (summary, _) = engine.get_session(session).await.map_err(from_engine)?;
    let sub = engine
        .subscribe(session, summary.last_event_id)
        .await
        .map_err(from_engine)?;
    let mut message = SendMessageRequest::user(text, MessageType::Message);
    // A new session has no history: what came before goes with the message as context.
    // (A continued one has its own; the client's copy of it is not sent twice.)
    if new {
        message.context = context_of(earlier);
    }
    if state.config.openai_approvals == DoorApprovals::AutoApprove {
        message.overrides = Some(RunOverrides {
            auto_approve: Some(AutoApprove::Keyword(AutoApproveKeyword::All)),
            ..RunOverrides::default()
        });
    }
    let sent = engine
        .send_message(session, message)
        .await
        .map_err(from_engine)?;
    Ok(Started {
        session,
        run: sent.run_id,
        sub,
    })
}

/// The client's system prompt and earlier turns, as context items of the first message.
fn context_of(earlier: &[ChatMessage]) -> Vec<ContextItem> {
    let mut out = Vec::new();
    let instructions: Vec<String> = earlier
        .iter()
        .filter(|m| m.role == "system" || m.role == "developer")
        .map(ChatMessage::text)
        .filter(|t| !t.trim().is_empty())
        .collect();
    if !instructions.is_empty() {
        out.push(ContextItem {
            name: "instructions from the client".into(),
            content: cap(&instructions.join("\n\n")),
            priority: Some(ContextPriority::High),
        });
    }
    let turns: Vec<String> = earlier
        .iter()
        .filter(|m| m.role == "user" || m.role == "assistant")
        .map(|m| format!("{}: {}", m.role, m.text()))
        .collect();
    if !turns.is_empty() {
        out.push(ContextItem {
            name: "the conversation so far".into(),
            content: cap(&turns.join("\n\n")),
            priority: None,
        });
    }
    out
}

/// At most the engine's limit per context item (the end kept: the latest turns matter).
fn cap(s: &str) -> String {
    let max = switchboard_protocol::MAX_CONTEXT_CONTENT_CHARS;
    let n = s.chars().count();
    if n <= max {
        return s.to_owned();
    }
    s.chars().skip(n - max).collect()
}

/// What one batch of the run's events means for the answer.
#[derive(Default)]
struct Step {
    text: String,
    end: Option<End>,
}

enum End {
    /// Ended: OpenAI's `finish_reason` for it, and the tokens used.
    Done {
        finish_reason: &'static str,
        usage: Usage,
    },
    Failed(String),
}

/// Reads the next batch of the run's events, answering waiting approvals per the policy.
async fn step(
    engine: &Engine,
    policy: DoorApprovals,
    session: Uuid,
    run: Uuid,
    sub: &mut Subscription,
) -> Step {
    let mut out = Step::default();
    let batch = match sub.next().await {
        Ok(Some(SubItem::Events(b))) => b,
        Ok(Some(SubItem::Gap(_))) => return out,
        Ok(None) => {
            out.end = Some(End::Failed("the session was deleted".into()));
            return out;
        }
        Err(e) => {
            out.end = Some(End::Failed(format!("reading the session's log: {e}")));
            return out;
        }
    };
    for le in batch.iter() {
        if le.run_id != Some(run) {
            continue;
        }
        let Ok(event) = serde_json::from_str::<AgentEvent>(&le.payload) else {
            continue;
        };
        match event {
            AgentEvent::TextDelta { delta, .. } => out.text.push_str(&delta),
            AgentEvent::WaitingForToolApproval { tool_call_ids, .. }
                if policy == DoorApprovals::Deny =>
            {
                let decisions: BTreeMap<String, ToolDecision> = tool_call_ids
                    .into_iter()
                    .map(|id| {
                        (
                            id,
                            ToolDecision {
                                action: DecisionAction::Reject,
                                content: Some(
                                    "tool calls that need approval are refused on the OpenAI-compatible endpoint ([openai] approvals = \"deny\")".into(),
                                ),
                                by: None,
                                cause: Some(switchboard_protocol::RejectionCause::Policy),
                            },
                        )
                    })
                    .collect();
                let r = engine
                    .decide_tools(
                        session,
                        ToolDecisionsRequest {
                            run_id: run,
                            decisions,
                        },
                    )
                    .await;
                if let Err(e) = r {
                    tracing::warn!(%session, %run, error = %e, "could not deny a tool call");
                }
            }
            AgentEvent::RunCompleted {
                stop_reason,
                backend_stop_reason,
                total_usage,
                ..
            } => {
                out.end = Some(End::Done {
                    finish_reason: finish_reason(stop_reason, backend_stop_reason.as_deref()),
                    usage: total_usage,
                });
            }
            AgentEvent::RunError { error, .. } => out.end = Some(End::Failed(error)),
            _ => {}
        }
    }
    out
}

/// OpenAI's `finish_reason` of a run's end: from its typed outcome, and from the
/// backend's own reason only to tell a reply cut at the token limit.
fn finish_reason(outcome: switchboard_protocol::StopReason, backend: Option<&str>) -> &'static str {
    use switchboard_protocol::StopReason as S;
    match outcome {
        S::MaxTurns => "length",
        S::Refused => "content_filter",
        S::Completed | S::Cancelled | S::Error => match backend {
            Some("max_tokens" | "length") => "length",
            _ => "stop",
        },
    }
}

fn usage(u: Usage) -> CompletionUsage {
    CompletionUsage {
        prompt_tokens: u.prompt_tokens,
        completion_tokens: u.completion_tokens,
        total_tokens: u.total_tokens,
    }
}

fn with_session(mut resp: Response, session: Uuid) -> Response {
    if let Ok(v) = HeaderValue::from_str(&session.to_string()) {
        resp.headers_mut().insert(SESSION_HEADER, v);
    }
    resp
}

async fn answer(
    state: AppState,
    req: ChatCompletionRequest,
    started: Started,
    slot: Option<switchboard_http::StreamSlot>,
) -> Response {
    let Started { session, run, sub } = started;
    let id = format!("chatcmpl-{}", run.simple());
    let created = chrono::Utc::now().timestamp();
    let policy = state.config.openai_approvals;
    if req.stream != Some(true) {
        let mut sub = sub;
        let mut text = String::new();
        loop {
            let s = step(&state.engine, policy, session, run, &mut sub).await;
            text.push_str(&s.text);
            match s.end {
                None => continue,
                Some(End::Failed(error)) => {
                    let resp = oai(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "server_error",
                        "run_failed",
                        format!("the run failed: {error}"),
                    );
                    return with_session(resp, session);
                }
                Some(End::Done {
                    finish_reason,
                    usage: u,
                }) => {
                    let body = ChatCompletion {
                        id,
                        object: "chat.completion".into(),
                        created,
                        model: req.model,
                        choices: vec![Choice {
                            index: 0,
                            message: AssistantMessage {
                                role: "assistant".into(),
                                content: text,
                            },
                            finish_reason: finish_reason.into(),
                        }],
                        usage: usage(u),
                        session_id: session.to_string(),
                    };
                    return with_session(axum::Json(body).into_response(), session);
                }
            }
        }
    }
    let include_usage = req
        .stream_options
        .as_ref()
        .and_then(|o| o.include_usage)
        .unwrap_or(false);
    let chunk = move |delta: Delta, finish: Option<String>, u: Option<CompletionUsage>| {
        let c = ChatCompletionChunk {
            id: id.clone(),
            object: "chat.completion.chunk".into(),
            created,
            model: req.model.clone(),
            choices: if u.is_some() && finish.is_none() && delta == Delta::default() {
                Vec::new()
            } else {
                vec![ChunkChoice {
                    index: 0,
                    delta,
                    finish_reason: finish,
                }]
            },
            usage: u,
        };
        format!(
            "data: {}\n\n",
            serde_json::to_string(&c).unwrap_or_default()
        )
    };
    struct Stream {
        sub: Subscription,
        first: bool,
        done: bool,
        /// The token's stream slot, given back when the answer ends.
        _slot: Option<switchboard_http::StreamSlot>,
    }
    let engine = state.engine.clone();
    let body = futures::stream::unfold(
        Stream {
            sub,
            first: true,
            done: false,
            _slot: slot,
        },
        move |mut st| {
            let engine = engine.clone();
            let chunk = chunk.clone();
            async move {
                if st.done {
                    return None;
                }
                let mut out = String::new();
                if st.first {
                    st.first = false;
                    out.push_str(&chunk(
                        Delta {
                            role: Some("assistant".into()),
                            content: Some(String::new()),
                        },
                        None,
                        None,
                    ));
                }
                let s = step(&engine, policy, session, run, &mut st.sub).await;
                if !s.text.is_empty() {
                    out.push_str(&chunk(
                        Delta {
                            role: None,
                            content: Some(s.text),
                        },
                        None,
                        None,
                    ));
                }
                match s.end {
                    None => {}
                    Some(End::Done {
                        finish_reason,
                        usage: u,
                    }) => {
                        out.push_str(&chunk(Delta::default(), Some(finish_reason.into()), None));
                        if include_usage {
                            out.push_str(&chunk(Delta::default(), None, Some(usage(u))));
                        }
                        out.push_str("data: [DONE]\n\n");
                        st.done = true;
                    }
                    Some(End::Failed(error)) => {
                        let e = OpenAiErrorBody {
                            error: OpenAiError {
                                message: format!("the run failed: {error}"),
                                kind: "server_error".into(),
                                param: None,
                                code: Some("run_failed".into()),
                            },
                        };
                        out.push_str(&format!(
                            "data: {}\n\ndata: [DONE]\n\n",
                            serde_json::to_string(&e).unwrap_or_default()
                        ));
                        st.done = true;
                    }
                }
                Some((Ok::<_, std::convert::Infallible>(Bytes::from(out)), st))
            }
        },
    );
    let mut resp = Body::from_stream(body).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    with_session(resp, session)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn msg(role: &str, content: serde_json::Value) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content,
            name: None,
        }
    }

    #[test]
    fn earlier_turns_and_instructions_become_context() {
        let earlier = [
            msg("system", serde_json::json!("Be brief.")),
            msg("user", serde_json::json!("hi")),
            msg(
                "assistant",
                serde_json::json!([{"type": "text", "text": "hello"}]),
            ),
        ];
        let ctx = context_of(&earlier);
        assert_eq!(ctx.len(), 2);
        assert_eq!(ctx[0].content, "Be brief.");
        assert_eq!(ctx[1].content, "user: hi\n\nassistant: hello");
        assert!(context_of(&[]).is_empty());
        let long = "x".repeat(switchboard_protocol::MAX_CONTEXT_CONTENT_CHARS + 10);
        assert_eq!(
            cap(&long).chars().count(),
            switchboard_protocol::MAX_CONTEXT_CONTENT_CHARS
        );
    }

    #[test]
    fn stop_reasons_map_to_finish_reasons() {
        use switchboard_protocol::StopReason as S;
        assert_eq!(finish_reason(S::Completed, Some("end_turn")), "stop");
        assert_eq!(finish_reason(S::Completed, Some("max_tokens")), "length");
        assert_eq!(finish_reason(S::MaxTurns, Some("max_turns")), "length");
        assert_eq!(finish_reason(S::Refused, Some("refusal")), "content_filter");
    }
}
