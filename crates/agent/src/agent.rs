//! The built-in agent loop.

use async_trait::async_trait;
use serde_json::{Value, json};
use switchboard_engine::{Backend, BackendError, Decision, RunContext, RunSummary, ToolClass};
use switchboard_protocol::{
    AgentEvent, ContextPriority, PermissionMode, Role, ToolCall, TranscriptMessage, Usage,
};

use std::sync::Arc;

use crate::provider::{ChatMessage, Provider, ProviderError, StreamedToolCall, TextSink};
use crate::tools::{self, ToolLimits, Workspace};

/// Settings of the built-in agent.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Model when neither the message nor the session names one.
    pub default_model: Option<String>,
    pub system_prompt: String,
    /// Most model calls in one run.
    pub max_turns: u32,
    /// Timeouts and output cap of the tools.
    pub limits: ToolLimits,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            default_model: None,
            system_prompt: "You are a helpful coding assistant working in the user's workspace \
                            (the current directory of your tools). Use the tools to look \
                            before you change things, keep changes small, and answer \
                            concisely. A tool call may be rejected by the user; then do not \
                            retry it unchanged."
                .into(),
            max_turns: 50,
            limits: ToolLimits::default(),
        }
    }
}

/// The built-in agent: an LLM loop over a [`Provider`].
pub struct BuiltinAgent {
    provider: Arc<dyn Provider>,
    config: AgentConfig,
}

impl BuiltinAgent {
    pub fn new(provider: Arc<dyn Provider>, config: AgentConfig) -> Self {
        Self { provider, config }
    }
}

/// The stored transcript as provider messages. An assistant tool call that has no recorded
/// result (the process died while it ran) gets one saying so, because providers refuse a
/// conversation with an unanswered call.
fn history_messages(history: &[TranscriptMessage]) -> Vec<ChatMessage> {
    let mut out: Vec<ChatMessage> = Vec::with_capacity(history.len());
    let mut open: Vec<String> = Vec::new();
    let close_open = |out: &mut Vec<ChatMessage>, open: &mut Vec<String>| {
        for id in open.drain(..) {
            out.push(ChatMessage::tool_result(
                id,
                "no result was recorded for this tool call (interrupted)",
                true,
            ));
        }
    };
    for m in history {
        match m.role {
            Role::Tool => {
                let id = m.tool_call_id.clone().unwrap_or_default();
                open.retain(|o| *o != id);
                out.push(ChatMessage::tool_result(id, &m.content, m.is_error));
            }
            Role::Assistant => {
                close_open(&mut out, &mut open);
                open = m.tool_calls.iter().map(|c| c.id.clone()).collect();
                out.push(ChatMessage::assistant(&m.content, m.tool_calls.clone()));
            }
            Role::User | Role::System => {
                close_open(&mut out, &mut open);
                out.push(ChatMessage::user(&m.content));
            }
        }
    }
    close_open(&mut out, &mut open);
    out
}

fn user_content(ctx: &RunContext) -> String {
    let mut items = ctx.input.context.clone();
    items.sort_by_key(|c| match c.priority.unwrap_or_default() {
        ContextPriority::High => 0,
        ContextPriority::Normal => 1,
        ContextPriority::Low => 2,
    });
    let mut out = String::new();
    for c in items {
        out.push_str(&format!(
            "<context name=\"{}\">\n{}\n</context>\n\n",
            c.name.replace('"', "'"),
            c.content
        ));
    }
    out.push_str(&ctx.input.content);
    out
}

fn fail(p: &dyn Provider, e: ProviderError) -> BackendError {
    BackendError::new(p.redact(&e.to_string()), e.retryable())
}

/// Streams text deltas of a reply into the session's log.
struct DeltaSink<'a> {
    handle: &'a switchboard_engine::RunHandle,
    run_id: uuid::Uuid,
}

#[async_trait]
impl TextSink for DeltaSink<'_> {
    async fn text(&self, delta: String) {
        let ev = AgentEvent::TextDelta {
            run_id: self.run_id,
            delta,
        };
        if let Err(e) = self.handle.emit(ev).await {
            tracing::warn!(error = %e, "could not append text delta");
        }
    }
}

/// Turns the model's calls into protocol tool calls: an id when the model gave none, the
/// arguments as JSON (kept as a string when they are not JSON, so the tool can say so) and,
/// for the built-in tools, a readable preview in `metadata.preview`.
fn tool_calls(turn: u32, streamed: &[StreamedToolCall]) -> Vec<ToolCall> {
    streamed
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let arguments = if c.arguments.trim().is_empty() {
                json!({})
            } else {
                serde_json::from_str(&c.arguments).unwrap_or(Value::String(c.arguments.clone()))
            };
            let metadata = tools::class(&c.name)
                .map(|_| json!({"preview": tools::preview(&c.name, &arguments)}));
            ToolCall {
                id: if c.id.is_empty() {
                    format!("call_{turn}_{i}")
                } else {
                    c.id.clone()
                },
                name: c.name.clone(),
                arguments,
                metadata,
            }
        })
        .collect()
}

impl BuiltinAgent {
    fn summary(stop_reason: &str, turns: u32, usage: Usage) -> RunSummary {
        RunSummary {
            stop_reason: stop_reason.into(),
            total_turns: turns,
            usage,
        }
    }
}

#[async_trait]
impl Backend for BuiltinAgent {
    async fn run(&self, mut ctx: RunContext) -> Result<RunSummary, BackendError> {
        let model = ctx
            .input
            .model
            .clone()
            .or_else(|| ctx.config.model.clone())
            .or_else(|| self.config.default_model.clone())
            .ok_or_else(|| {
                BackendError::new(
                    "no model configured: set SWITCHBOARD_MODEL or give `model`",
                    false,
                )
            })?;
        let confine = ctx.config.permission_mode != PermissionMode::FullAccess;
        let workspace = Workspace::new(&ctx.cwd, confine).map_err(|e| {
            BackendError::new(format!("workspace {}: {e}", ctx.cwd.display()), false)
        })?;
        let specs = tools::specs();
        let mut messages = history_messages(&ctx.history);
        messages.push(ChatMessage::user(user_content(&ctx)));
        let run_id = ctx.run_id;
        let mut usage = Usage::default();
        let mut turns = 0;
        loop {
            for s in ctx.handle.take_steering().await? {
                messages.push(ChatMessage::user(s));
            }
            if ctx.cancel.is_cancelled() {
                return Ok(Self::summary("cancelled", turns, usage));
            }
            if turns >= self.config.max_turns {
                return Ok(Self::summary("max_turns", turns, usage));
            }
            turns += 1;
            let sink = DeltaSink {
                handle: &ctx.handle,
                run_id,
            };
            let result = self
                .provider
                .stream(
                    &model,
                    &self.config.system_prompt,
                    &messages,
                    &specs,
                    &ctx.cancel,
                    &sink,
                )
                .await;
            let completion = match result {
                Ok(c) => c,
                Err(ProviderError::Cancelled) => {
                    return Ok(Self::summary("cancelled", turns, usage));
                }
                Err(e) => return Err(fail(self.provider.as_ref(), e)),
            };
            if let Some(u) = completion.usage {
                usage.add(&u);
                ctx.handle
                    .emit(AgentEvent::UsageReport { run_id, usage: u })
                    .await?;
            }
            if !completion.text.is_empty() {
                ctx.handle
                    .emit(AgentEvent::TextComplete {
                        run_id,
                        text: completion.text.clone(),
                    })
                    .await?;
            }
            let calls = tool_calls(turns, &completion.tool_calls);
            ctx.handle
                .record(Role::Assistant, &completion.text, &calls, None)
                .await?;
            messages.push(ChatMessage::assistant(&completion.text, calls.clone()));
            if calls.is_empty() {
                if ctx.handle.has_steering() {
                    continue;
                }
                return Ok(Self::summary(&completion.finish_reason, turns, usage));
            }
            // Unknown tools go through as reads: policy lets them "run", and running them
            // tells the model which tools exist.
            let gated: Vec<(ToolCall, ToolClass)> = calls
                .iter()
                .map(|c| (c.clone(), tools::class(&c.name).unwrap_or(ToolClass::Read)))
                .collect();
            let decisions = ctx.handle.gate(&gated).await?;
            for (call, decision) in calls.iter().zip(decisions) {
                let (content, is_error) = if decision == Decision::Run && !ctx.cancel.is_cancelled()
                {
                    ctx.handle.tool_started(call).await?;
                    let out = tools::execute(
                        &workspace,
                        &self.config.limits,
                        &call.name,
                        &call.arguments,
                        &ctx.cancel,
                    )
                    .await;
                    ctx.handle
                        .tool_finished(call, &out.content, out.is_error)
                        .await?;
                    (out.content, out.is_error)
                } else if decision == Decision::Run {
                    let d = Decision::Rejected("the run was cancelled".into());
                    ctx.handle.tool_not_run(call, &d).await?
                } else {
                    ctx.handle.tool_not_run(call, &decision).await?
                };
                messages.push(ChatMessage::tool_result(&call.id, content, is_error));
            }
        }
    }
}
