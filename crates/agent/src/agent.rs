//! The built-in agent loop.

use async_trait::async_trait;
use serde_json::{Value, json};
use switchboard_engine::{Backend, BackendError, RunContext, RunSummary};
use switchboard_protocol::{AgentEvent, ContextPriority, Role, ToolCall, TranscriptMessage, Usage};

use crate::openai::{OpenAiProvider, ProviderError};

/// Settings of the built-in agent.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Model when neither the message nor the session names one.
    pub default_model: Option<String>,
    pub system_prompt: String,
    /// Most model calls in one run.
    pub max_turns: u32,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            default_model: None,
            system_prompt: "You are a helpful coding assistant working in the user's workspace. \
                            Answer concisely."
                .into(),
            max_turns: 50,
        }
    }
}

/// The built-in agent: an LLM loop over an OpenAI-compatible provider.
pub struct BuiltinAgent {
    provider: OpenAiProvider,
    config: AgentConfig,
}

impl BuiltinAgent {
    pub fn new(provider: OpenAiProvider, config: AgentConfig) -> Self {
        Self { provider, config }
    }
}

fn history_message(m: &TranscriptMessage) -> Value {
    match m.role {
        Role::Assistant if !m.tool_calls.is_empty() => json!({
            "role": "assistant",
            "content": m.content,
            "tool_calls": m.tool_calls.iter().map(|c| json!({
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments.to_string()},
            })).collect::<Vec<_>>(),
        }),
        Role::Tool => json!({
            "role": "tool",
            "tool_call_id": m.tool_call_id.clone().unwrap_or_default(),
            "content": m.content,
        }),
        role => json!({"role": role.as_str(), "content": m.content}),
    }
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

fn fail(p: &OpenAiProvider, e: ProviderError) -> BackendError {
    BackendError::new(p.redact(&e.to_string()), e.retryable())
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
        let mut messages = vec![json!({"role": "system", "content": self.config.system_prompt})];
        messages.extend(ctx.history.iter().map(history_message));
        messages.push(json!({"role": "user", "content": user_content(&ctx)}));
        let run_id = ctx.run_id;
        let mut usage = Usage::default();
        let mut turns = 0;
        loop {
            for s in ctx.handle.take_steering().await? {
                messages.push(json!({"role": "user", "content": s}));
            }
            if turns >= self.config.max_turns {
                return Ok(RunSummary {
                    stop_reason: "max_turns".into(),
                    total_turns: turns,
                    usage,
                });
            }
            turns += 1;
            let handle = &ctx.handle;
            let result = self
                .provider
                .stream(&model, &messages, &[], &ctx.cancel, |delta| async move {
                    if let Err(e) = handle.emit(AgentEvent::TextDelta { run_id, delta }).await {
                        tracing::warn!(error = %e, "could not append text delta");
                    }
                })
                .await;
            let completion = match result {
                Ok(c) => c,
                Err(ProviderError::Cancelled) => {
                    return Ok(RunSummary {
                        stop_reason: "cancelled".into(),
                        total_turns: turns,
                        usage,
                    });
                }
                Err(e) => return Err(fail(&self.provider, e)),
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
            let calls: Vec<ToolCall> = completion
                .tool_calls
                .iter()
                .enumerate()
                .map(|(i, c)| ToolCall {
                    id: if c.id.is_empty() {
                        format!("call_{turns}_{i}")
                    } else {
                        c.id.clone()
                    },
                    name: c.name.clone(),
                    arguments: serde_json::from_str(&c.arguments)
                        .unwrap_or(Value::String(c.arguments.clone())),
                    metadata: None,
                })
                .collect();
            ctx.handle
                .record(Role::Assistant, &completion.text, &calls, None)
                .await?;
            let mut assistant = json!({"role": "assistant", "content": completion.text});
            if !calls.is_empty() {
                assistant["tool_calls"] = calls
                    .iter()
                    .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments.to_string()}}))
                    .collect();
            }
            messages.push(assistant);
            if !calls.is_empty() {
                // Tools arrive with the next milestone: until then every call is answered
                // with an error result so the model can carry on without them.
                ctx.handle
                    .emit(AgentEvent::ToolCallsProposed {
                        run_id,
                        tool_calls: calls.clone(),
                    })
                    .await?;
                for c in &calls {
                    let reason = format!("tool {:?} is not available on this server", c.name);
                    ctx.handle
                        .emit(AgentEvent::ToolRejected {
                            run_id,
                            tool_call_id: c.id.clone(),
                            reason: reason.clone(),
                        })
                        .await?;
                    ctx.handle
                        .record(Role::Tool, &reason, &[], Some(&c.id))
                        .await?;
                    messages.push(json!({"role": "tool", "tool_call_id": c.id, "content": reason}));
                }
                continue;
            }
            if ctx.handle.has_steering() {
                continue;
            }
            return Ok(RunSummary {
                stop_reason: completion.finish_reason,
                total_turns: turns,
                usage,
            });
        }
    }
}
