//! The tools: what each does over the API, with the caller's token.

use std::time::Instant;

use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ProgressNotificationParam};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use switchboard_client::{ClientError, RunEnd, RunStep};
use switchboard_protocol::{
    BackendSpec, CreateSessionRequest, DecisionAction, MessageType, SendMessageRequest,
    ToolDecision, ToolDecisionsRequest,
};
use uuid::Uuid;

use super::SessionsMcp;

/// How long `send_message` waits for the reply unless told.
const DEFAULT_WAIT_SECONDS: u32 = 600;
/// The longest wait `send_message` takes.
const MAX_WAIT_SECONDS: u32 = 3600;
/// Progress notifications while a reply streams: at most this often.
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_millis(250);
/// A transcript longer than this is cut to its end unless told.
const DEFAULT_TRANSCRIPT_CHARS: u32 = 20_000;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ListArgs {
    /// How many sessions, newest first (1–100, default 20).
    #[schemars(range(min = 1, max = 100))]
    limit: Option<u32>,
    /// List archived sessions instead. Default false.
    #[serde(default)]
    archived: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SearchArgs {
    /// What to look for: words (all required), "a phrase", prefix*.
    query: String,
    /// Only this session (its id).
    session: Option<String>,
    /// How many hits, best first (1–100, default 20).
    #[schemars(range(min = 1, max = 100))]
    limit: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct StartArgs {
    /// The working directory (inside the server's workspace roots); the server's default if
    /// omitted.
    cwd: Option<String>,
    /// The agent: an `[agents.NAME]` of the server (an ACP agent such as claude or goose),
    /// or `builtin`; the server's default if omitted.
    agent: Option<String>,
    /// A title for the session.
    title: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SendArgs {
    /// The session's id (from list_sessions or start_session).
    session: String,
    /// The message to the agent.
    message: String,
    /// How long to wait for the reply, in seconds (0–3600, default 600). Past it the run
    /// goes on and the answer says `running` with what came so far.
    #[schemars(range(min = 0, max = 3600))]
    wait_seconds: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct TranscriptArgs {
    /// The session's id.
    session: String,
    /// At most this many characters, the end of the transcript (default 20000).
    #[schemars(range(min = 100, max = 1_000_000))]
    max_chars: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(super) enum Decision {
    Allow,
    Deny,
    /// Answer the call instead of running it: `answer` is its result (how an agent's
    /// question, `acp__elicitation`, is answered).
    Answer,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct DecideArgs {
    /// The session's id.
    session: String,
    /// The run that waits (`run_id` of list_approvals).
    run_id: String,
    /// The call to decide (`tool_calls[].id` of list_approvals).
    tool_call_id: String,
    /// `allow` runs the call; `deny` does not; `answer` gives `answer` as its result.
    decision: Decision,
    /// Why, for a denial: the agent reads it.
    reason: Option<String>,
    /// With `answer`: the result — for an agent's question (`acp__elicitation`), the form's
    /// fields as a JSON object, or the text of its one text field.
    answer: Option<String>,
}

/// A tool's failure as MCP wants it: a result with `isError`, the server's code and message.
pub(super) struct ToolError {
    code: String,
    message: String,
}

impl From<ClientError> for ToolError {
    fn from(e: ClientError) -> Self {
        match e {
            ClientError::Api { code, message, .. } => ToolError { code, message },
            other => ToolError {
                code: "server_unreachable".into(),
                message: other.to_string(),
            },
        }
    }
}

impl ToolError {
    pub(super) fn new(code: &str, message: impl Into<String>) -> Self {
        ToolError {
            code: code.into(),
            message: message.into(),
        }
    }
}

fn id(s: &str, what: &str) -> Result<Uuid, ToolError> {
    Uuid::parse_str(s.trim()).map_err(|_| {
        ToolError::new(
            "validation_failed",
            format!("{what} {s:?} is not a Switchboard id (a UUID)"),
        )
    })
}

pub(super) fn result(outcome: Result<serde_json::Value, ToolError>) -> CallToolResult {
    match outcome {
        Ok(v @ serde_json::Value::Object(_)) => CallToolResult::structured(v),
        Ok(v) => CallToolResult::success(vec![rmcp::model::ContentBlock::text(v.to_string())]),
        Err(e) => CallToolResult::structured_error(
            serde_json::json!({"code": e.code, "message": e.message}),
        ),
    }
}

fn json<T: serde::Serialize>(v: &T) -> Result<serde_json::Value, ToolError> {
    serde_json::to_value(v).map_err(|e| ToolError::new("internal", e.to_string()))
}

#[tool_router(router = sessions_router, vis = "pub(super)")]
impl SessionsMcp {
    #[tool(
        description = "List Switchboard sessions, newest first: id, title, working directory, \
                       whether a run is under way, approvals waiting.",
        annotations(read_only_hint = true)
    )]
    async fn list_sessions(
        &self,
        Parameters(args): Parameters<ListArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        result(
            async {
                let api = self.api(&ctx)?;
                let limit = Some(args.limit.unwrap_or(20).clamp(1, 100));
                let page = if args.archived {
                    api.list_archived_sessions(limit, None).await?
                } else {
                    api.list_sessions(limit, None).await?
                };
                json(&page)
            }
            .await,
        )
    }

    #[tool(
        description = "Search every session this token sees — messages, tool calls and their \
                       results, file names — best first: the session, where in its log, and \
                       the passage with the matches in **bold**.",
        annotations(read_only_hint = true)
    )]
    async fn search_sessions(
        &self,
        Parameters(args): Parameters<SearchArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        result(
            async {
                let api = self.api(&ctx)?;
                let session = match &args.session {
                    Some(s) => Some(id(s, "session")?),
                    None => None,
                };
                let mut found = api
                    .search(&switchboard_protocol::search::SearchParams {
                        q: args.query.clone(),
                        session,
                        limit: args.limit,
                        ..Default::default()
                    })
                    .await?;
                // Bold matches for a model or a person to read, instead of the pieces.
                let hits: Vec<serde_json::Value> = found
                    .hits
                    .drain(..)
                    .map(|h| {
                        serde_json::json!({
                            "session_id": h.session_id,
                            "session_title": h.session_title,
                            "kind": h.kind,
                            "id": h.id,
                            "role": h.role,
                            "seq": h.seq,
                            "created_at": h.created_at,
                            "passage": switchboard_protocol::search::SnippetPart::render(&h.snippet, "**", "**"),
                        })
                    })
                    .collect();
                json(&serde_json::json!({"hits": hits, "next_cursor": found.next_cursor}))
            }
            .await,
        )
    }

    #[tool(
        description = "Start a new Switchboard session (an agent working in a directory). \
                       Returns the session; talk to it with send_message."
    )]
    async fn start_session(
        &self,
        Parameters(args): Parameters<StartArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        result(
            async {
                let api = self.api(&ctx)?;
                let backend = args.agent.map(|a| match a.as_str() {
                    "builtin" => BackendSpec::Builtin,
                    _ => BackendSpec::Acp(a),
                });
                let req = CreateSessionRequest {
                    cwd: args.cwd,
                    title: args.title,
                    backend,
                    ..CreateSessionRequest::default()
                };
                json(&api.create_session(&req).await?)
            }
            .await,
        )
    }

    #[tool(
        description = "Send a message to a session's agent and wait for its reply (progress \
                       notifications carry the reply as it streams). When the agent waits for \
                       approval of a call, progress says so: decide it with decide_approval. \
                       Returns the reply, how the run ended, or `running` if the wait ran out."
    )]
    async fn send_message(
        &self,
        Parameters(args): Parameters<SendArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        result(self.send_and_wait(args, &ctx).await)
    }

    #[tool(
        description = "Read a session's transcript (Markdown: the messages, replies and tool \
                       calls), its end when it is long.",
        annotations(read_only_hint = true)
    )]
    async fn read_transcript(
        &self,
        Parameters(args): Parameters<TranscriptArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        result(
            async {
                let api = self.api(&ctx)?;
                let session = id(&args.session, "session")?;
                let text = api.transcript_markdown(session).await?;
                let max = args.max_chars.unwrap_or(DEFAULT_TRANSCRIPT_CHARS) as usize;
                let count = text.chars().count();
                let text = if count > max {
                    let tail: String = text.chars().skip(count - max).collect();
                    format!("[… the first {} characters left out]\n{tail}", count - max)
                } else {
                    text
                };
                Ok(serde_json::json!({"session": session, "transcript": text}))
            }
            .await,
        )
    }

    #[tool(
        description = "List the tool calls waiting for a person's approval, in every session \
                       this token may decide: session, run, the calls and when they expire \
                       (unanswered approvals are denied).",
        annotations(read_only_hint = true)
    )]
    async fn list_approvals(&self, ctx: RequestContext<RoleServer>) -> CallToolResult {
        result(async { json(&self.api(&ctx)?.waiting_approvals().await?) }.await)
    }

    #[tool(
        description = "Allow or deny a tool call waiting for approval (from list_approvals, or \
                       named in send_message's progress). A denial's reason reaches the agent. \
                       An agent's question (acp__elicitation) is answered with decision \
                       `answer` and the answer."
    )]
    async fn decide_approval(
        &self,
        Parameters(args): Parameters<DecideArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        result(
            async {
                let api = self.api(&ctx)?;
                let session = id(&args.session, "session")?;
                let run = id(&args.run_id, "run")?;
                let deny = matches!(args.decision, Decision::Deny);
                let (action, content) = match args.decision {
                    Decision::Allow => (DecisionAction::Accept, None),
                    Decision::Deny => (
                        DecisionAction::Reject,
                        Some(
                            args.reason
                                .clone()
                                .unwrap_or_else(|| "denied over MCP".to_owned()),
                        ),
                    ),
                    Decision::Answer => match &args.answer {
                        Some(a) => (DecisionAction::CustomResult, Some(a.clone())),
                        None => {
                            return Err(ToolError {
                                code: "validation_failed".into(),
                                message: "decision `answer` needs `answer`".into(),
                            });
                        }
                    },
                };
                let req = ToolDecisionsRequest {
                    run_id: run,
                    decisions: [(
                        args.tool_call_id.clone(),
                        ToolDecision {
                            action,
                            content,
                            by: Some("an MCP client".to_owned()),
                            cause: deny.then_some(switchboard_protocol::RejectionCause::User),
                        },
                    )]
                    .into_iter()
                    .collect(),
                };
                json(&api.decide_tools(session, &req).await?)
            }
            .await,
        )
    }
}

impl SessionsMcp {
    async fn send_and_wait(
        &self,
        args: SendArgs,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<serde_json::Value, ToolError> {
        let api = self.api(ctx)?;
        let session = id(&args.session, "session")?;
        let wait = std::time::Duration::from_secs(
            args.wait_seconds
                .unwrap_or(DEFAULT_WAIT_SECONDS)
                .min(MAX_WAIT_SECONDS) as u64,
        );
        // The run's events come after the log's present end.
        let from = api.get_session(session).await?.session.last_event_id;
        let sent = api
            .send_message(
                session,
                &SendMessageRequest::user(&args.message, MessageType::FollowUp),
            )
            .await?;
        let run = sent.run_id;
        let mut follower = api.follow_run(session, run, Some(from));
        let token = ctx.meta.get_progress_token();
        let mut reply = String::new();
        let mut steps = 0u32;
        let mut last_progress = Instant::now() - PROGRESS_EVERY;
        let deadline = tokio::time::Instant::now() + wait;
        let progress = |steps: u32, message: String| {
            let peer = ctx.peer.clone();
            let token = token.clone();
            async move {
                if let Some(token) = token {
                    let p =
                        ProgressNotificationParam::new(token, steps as f64).with_message(message);
                    if let Err(e) = peer.notify_progress(p).await {
                        tracing::debug!(error = %e, "MCP progress not sent");
                    }
                }
            }
        };
        let end = loop {
            let step = tokio::select! {
                s = follower.next() => s,
                _ = tokio::time::sleep_until(deadline) => {
                    return Ok(serde_json::json!({
                        "session": session, "run_id": run, "status": "running", "reply": reply,
                    }));
                }
                _ = ctx.ct.cancelled() => {
                    // The client cancelled the call: the run goes on (cancel it elsewhere).
                    return Err(ToolError::new("cancelled", "the call was cancelled; the run goes on"));
                }
            };
            let Some(step) = step else {
                return Err(ToolError::new(
                    "stream_ended",
                    "the session's events ended before the run did",
                ));
            };
            let step = step?;
            steps += 1;
            match step.kind {
                RunStep::Text(t) => {
                    reply.push_str(&t);
                    if last_progress.elapsed() >= PROGRESS_EVERY {
                        last_progress = Instant::now();
                        progress(steps, reply.clone()).await;
                    }
                }
                RunStep::ToolsWaiting(calls) => {
                    let names: Vec<String> = calls
                        .iter()
                        .map(|c| format!("{} (tool_call_id {})", c.name, c.id))
                        .collect();
                    progress(
                        steps,
                        format!(
                            "waiting for approval of {}: decide_approval with session {session}, run_id {run}",
                            names.join(", ")
                        ),
                    )
                    .await;
                }
                RunStep::Ended(end) => break end,
                _ => {}
            }
        };
        Ok(match end {
            RunEnd::Completed { stop_reason, .. } => serde_json::json!({
                "session": session, "run_id": run, "status": "completed",
                "stop_reason": stop_reason, "reply": reply,
            }),
            RunEnd::Failed {
                code,
                error,
                retryable,
            } => serde_json::json!({
                "session": session, "run_id": run, "status": "failed",
                "error": {"code": code, "message": error, "retryable": retryable}, "reply": reply,
            }),
            RunEnd::SessionGone => {
                return Err(ToolError::new(
                    "not_found",
                    "the session was deleted during the run",
                ));
            }
        })
    }
}
