//! The built-in agent loop.

use async_trait::async_trait;
use serde_json::{Value, json};
use switchboard_engine::{
    Backend, BackendError, Decision, RunContext, RunSummary, ToolClass, Verdict,
};
use switchboard_protocol::{
    AgentEvent, PermissionMode, RejectionCause, Role, RunErrorCode, ToolCall, TranscriptMessage,
    Usage,
};

use std::collections::HashSet;
use std::sync::Arc;

use crate::mcp::McpTools;
use crate::provider::{
    ChatMessage, DEFAULT_OUTPUT_ESTIMATE, ImagePart, Provider, ProviderError, StreamedToolCall,
    TextSink, estimate_input_tokens,
};
use crate::tools::{self, ToolLimits, Workspace};

/// Settings of the built-in agent. (The model of a session that names none is the engine's
/// default, handed to each run: `RunContext::default_model`.)
#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub system_prompt: String,
    /// Most model calls in one run.
    pub max_turns: u32,
    /// Timeouts and output cap of the tools.
    pub limits: ToolLimits,
    /// When the model refuses a message's images: send it again without them (the text
    /// still names the files and their copies in the workspace) instead of failing the run.
    pub image_fallback: bool,
    /// How `run_command` confines commands (`[sandbox]`); none: they run as the server's user.
    pub sandbox: Option<std::sync::Arc<crate::tools::sandbox::Sandbox>>,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            system_prompt: "You are a helpful coding assistant working in the user's workspace \
                            (the current directory of your tools). Use the tools to look \
                            before you change things, keep changes small, and answer \
                            concisely. A tool call may be rejected by the user; then do not \
                            retry it unchanged."
                .into(),
            max_turns: 50,
            limits: ToolLimits::default(),
            image_fallback: false,
            sandbox: None,
        }
    }
}

/// The provider the built-in agent's runs call, replaceable while serving (the settings
/// change): each run takes the one in place when it starts and keeps it to its end.
#[derive(Clone)]
pub struct ProviderSlot(Arc<parking_lot::RwLock<Arc<dyn Provider>>>);

impl ProviderSlot {
    pub fn new(provider: Arc<dyn Provider>) -> Self {
        Self(Arc::new(parking_lot::RwLock::new(provider)))
    }

    /// The provider in place now.
    pub fn get(&self) -> Arc<dyn Provider> {
        self.0.read().clone()
    }

    /// Runs started from now call `provider`.
    pub fn set(&self, provider: Arc<dyn Provider>) {
        *self.0.write() = provider;
    }
}

/// The built-in agent: an LLM loop over a [`Provider`].
pub struct BuiltinAgent {
    provider: ProviderSlot,
    config: AgentConfig,
}

impl BuiltinAgent {
    pub fn new(provider: Arc<dyn Provider>, config: AgentConfig) -> Self {
        Self {
            provider: ProviderSlot::new(provider),
            config,
        }
    }

    /// Where the provider can be replaced while serving.
    pub fn provider_slot(&self) -> ProviderSlot {
        self.provider.clone()
    }
}

/// Added to the system prompt when the session's older messages were left out of the run's
/// history (`[sessions] history_max_*`).
pub const EARLIER_LEFT_OUT: &str = "Only the most recent part of this conversation is shown \
to you: its earlier messages were left out to fit. If the user refers to something you \
cannot see, say so and ask them to repeat it.";

/// The stored transcript as provider messages. An assistant tool call that has no recorded
/// result (the process died while it ran) gets one saying so, because providers refuse a
/// conversation with an unanswered call.
fn history_messages(history: Vec<TranscriptMessage>) -> Vec<ChatMessage> {
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
                // Only a result for a call still open right above it: providers refuse a
                // result without its call, or a call answered twice.
                let id = m.tool_call_id.clone().unwrap_or_default();
                if let Some(pos) = open.iter().position(|o| *o == id) {
                    open.remove(pos);
                    out.push(ChatMessage::tool_result(id, m.content, m.is_error));
                }
            }
            Role::Assistant => {
                close_open(&mut out, &mut open);
                open = m.tool_calls.iter().map(|c| c.id.clone()).collect();
                out.push(ChatMessage::assistant(m.content, m.tool_calls));
            }
            Role::User | Role::System => {
                close_open(&mut out, &mut open);
                out.push(ChatMessage::user(m.content));
            }
        }
    }
    close_open(&mut out, &mut open);
    out
}

/// `send_file {path, caption?}`: the file, confined to the workspace, shared with the user
/// through the engine. The answer for the model, and whether it is an error.
async fn send_file(
    ctx: &RunContext,
    workspace: &Workspace,
    args: &serde_json::Value,
) -> (String, bool) {
    let Some(given) = args.get("path").and_then(serde_json::Value::as_str) else {
        return ("send_file: `path` (a string) is required".into(), true);
    };
    let path = match workspace.resolve(given) {
        Ok(p) => p,
        Err(e) => return (format!("send_file: {e}"), true),
    };
    if !path.is_file() {
        return (format!("send_file: {given} is not a file"), true);
    }
    let caption = args
        .get("caption")
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned);
    match ctx.handle.share_file(&path, caption).await {
        Ok(f) => (
            format!("sent {} to the user ({}, {} bytes)", f.name, f.mime, f.size),
            false,
        ),
        Err(e) => (format!("send_file: {e}"), true),
    }
}

/// Image types sent to models as images (what both APIs accept).
const IMAGE_TYPES: &[&str] = &["image/png", "image/jpeg", "image/gif", "image/webp"];

/// Largest image sent as one (Anthropic's limit per image); larger ones are named in the
/// text only.
const MAX_IMAGE_BYTES: u64 = 5 * 1024 * 1024;

/// The run's attached images, read from their copies in the workspace.
async fn attached_images(ctx: &RunContext) -> Vec<ImagePart> {
    use base64::Engine as _;
    let mut out = Vec::new();
    for f in &ctx.input.attachments {
        if !IMAGE_TYPES.contains(&f.mime.as_str()) || f.size > MAX_IMAGE_BYTES {
            continue;
        }
        let path = ctx.cwd.join(switchboard_engine::files::inbox_path(f));
        match tokio::fs::read(&path).await {
            Ok(bytes) => out.push(ImagePart {
                mime: f.mime.clone(),
                base64: base64::engine::general_purpose::STANDARD.encode(bytes),
            }),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "an attached image could not be read; it is named in the text only");
            }
        }
    }
    out
}

/// Whether a provider's answer is its refusal of the request's images: a client error other
/// than rate limiting or auth, to a request that carried some.
fn refused_images(e: &ProviderError, messages: &[ChatMessage]) -> bool {
    matches!(e, ProviderError::Http { status, .. } if matches!(status, 400 | 413 | 415 | 422))
        && messages.iter().any(|m| !m.images.is_empty())
}

fn fail(p: &dyn Provider, e: ProviderError) -> BackendError {
    BackendError::new(e.code(), p.redact(&e.to_string()), e.retryable())
}

/// Streams text deltas of a reply into the session's log.
struct DeltaSink<'a> {
    handle: &'a switchboard_engine::RunHandle,
}

#[async_trait]
impl TextSink for DeltaSink<'_> {
    async fn text(&self, delta: String) {
        if let Err(e) = self.handle.stream_text(delta).await {
            // The run learns it at its next emit, and the engine when it ends.
            tracing::warn!(error = %e, "could not append text delta");
        }
    }
}

/// Turns the model's calls into protocol tool calls: an id unique in the session (the
/// model's own when it is, a fresh one when the model gave none or repeated one — decisions
/// and results are matched by id), the arguments as JSON (kept as a string when they are not
/// JSON, so the tool can say so) and, for the built-in tools, a readable preview in
/// `metadata.preview`.
fn tool_calls(used: &mut HashSet<String>, streamed: &[StreamedToolCall]) -> Vec<ToolCall> {
    streamed
        .iter()
        .map(|c| {
            let arguments = if c.arguments.trim().is_empty() {
                json!({})
            } else {
                serde_json::from_str(&c.arguments).unwrap_or(Value::String(c.arguments.clone()))
            };
            let metadata = tools::class(&c.name)
                .map(|_| json!({"preview": tools::preview(&c.name, &arguments)}));
            let ok = |id: &str| {
                !id.is_empty()
                    && id.len() <= 64
                    && id
                        .chars()
                        .all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '-')
            };
            let id = if ok(&c.id) && !used.contains(&c.id) {
                c.id.clone()
            } else {
                format!("call_{}", uuid::Uuid::now_v7().simple())
            };
            used.insert(id.clone());
            ToolCall {
                id,
                name: c.name.clone(),
                arguments,
                metadata,
            }
        })
        .collect()
}

impl BuiltinAgent {
    /// Runs one allowed call (unless the run was cancelled meanwhile) and reports it.
    async fn run_tool(
        &self,
        ctx: &RunContext,
        workspace: &Workspace,
        mcp: &McpTools,
        call: &ToolCall,
    ) -> Result<(String, bool), BackendError> {
        if ctx.cancel.is_cancelled() {
            let text = ctx
                .handle
                .reject(call, RejectionCause::Cancelled, "the run was cancelled")
                .await?;
            return Ok((text, true));
        }
        ctx.handle.tool_started(call).await?;
        if let Some((content, is_error)) = mcp.call(&call.name, &call.arguments, &ctx.cancel).await
        {
            ctx.handle.tool_finished(call, &content, is_error).await?;
            return Ok((content, is_error));
        }
        if call.name == "send_file" {
            let (content, is_error) = send_file(ctx, workspace, &call.arguments).await;
            ctx.handle.tool_finished(call, &content, is_error).await?;
            return Ok((content, is_error));
        }
        if call.name == "search_sessions" {
            let (content, is_error) = crate::recall::search_sessions(ctx, &call.arguments).await;
            ctx.handle.tool_finished(call, &content, is_error).await?;
            return Ok((content, is_error));
        }
        let out = tools::execute(
            workspace,
            &self.config.limits,
            &call.name,
            &call.arguments,
            &ctx.cancel,
        )
        .await;
        ctx.handle
            .tool_finished(call, &out.content, out.is_error)
            .await?;
        if let Some(message) = out.notice {
            ctx.handle.notice(message).await?;
        }
        Ok((out.content, out.is_error))
    }

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
    /// With a sandbox this machine can enforce (or one that is required, which then
    /// refuses each command rather than run it unconfined).
    fn sandboxes(&self) -> bool {
        self.config
            .sandbox
            .as_ref()
            .is_some_and(|s| s.available || s.required)
    }

    fn sandbox_status(
        &self,
        config: &switchboard_protocol::SessionConfig,
    ) -> Option<switchboard_protocol::SandboxStatus> {
        let s = self.config.sandbox.as_deref()?;
        Some(s.status(
            s.applies(config.permission_mode == PermissionMode::FullAccess, None),
            &s.network.or_session(config.sandbox.as_ref()),
        ))
    }

    async fn run(&self, ctx: RunContext) -> Result<RunSummary, BackendError> {
        // The session's MCP servers live as long as the run.
        let sandbox = self.sandbox_of(&ctx);
        let sandbox = sandbox.as_deref().map(|sandbox| crate::mcp::McpSandbox {
            sandbox,
            hidden: ctx
                .protected
                .iter()
                .map(std::path::Path::to_path_buf)
                .collect(),
        });
        let (mcp, notices) = McpTools::connect(&ctx.mcp_servers, &ctx.cwd, sandbox).await;
        for message in notices {
            tracing::warn!(session_id = %ctx.session_id, "{message}");
            ctx.handle.notice(message).await?;
        }
        let result = self.run_loop(ctx, &mcp).await;
        mcp.close().await;
        result
    }
}

impl BuiltinAgent {
    /// The sandbox of `ctx`'s processes, if they are confined, with the session's network
    /// for its commands.
    fn sandbox_of(
        &self,
        ctx: &RunContext,
    ) -> Option<std::sync::Arc<crate::tools::sandbox::Sandbox>> {
        let s = self.config.sandbox.as_deref()?;
        if !s.applies(
            ctx.config.permission_mode == PermissionMode::FullAccess,
            ctx.input.sandbox,
        ) {
            return None;
        }
        Some(std::sync::Arc::new(crate::tools::sandbox::Sandbox {
            network: s.network.or_session(ctx.config.sandbox.as_ref()),
            ..s.clone()
        }))
    }

    async fn run_loop(
        &self,
        mut ctx: RunContext,
        mcp: &McpTools,
    ) -> Result<RunSummary, BackendError> {
        let model = ctx
            .input
            .model
            .clone()
            .or_else(|| ctx.config.model.clone())
            .or_else(|| ctx.default_model.clone())
            .ok_or_else(|| {
                BackendError::new(
                    RunErrorCode::NotConfigured,
                    "no model configured: choose one in the console's Settings page, or run `switchboard setup` on the server (or set SWITCHBOARD_MODEL there, or give `model` with the session)",
                    false,
                )
            })?;
        // The provider in place now, to the end of this run.
        let provider = self.provider.get();
        let confine = ctx.config.permission_mode != PermissionMode::FullAccess;
        let workspace = Workspace::new(&ctx.cwd, confine)
            .map_err(|e| {
                BackendError::new(
                    RunErrorCode::WorkspaceUnavailable,
                    format!("workspace {}: {e}", ctx.cwd.display()),
                    false,
                )
            })?
            .protecting(ctx.protected.clone())
            .sandboxed(self.sandbox_of(&ctx));
        let mut specs = tools::specs();
        specs.extend(mcp.specs());
        let mut used_ids: HashSet<String> = ctx
            .history
            .iter()
            .flat_map(|m| m.tool_calls.iter().map(|c| c.id.clone()))
            .collect();
        // Moved, not copied: the run holds the conversation once.
        let mut messages = history_messages(std::mem::take(&mut ctx.history));
        messages.push(ChatMessage::user_with_images(
            ctx.input.prompt_text(),
            attached_images(&ctx).await,
        ));
        // A run's overrides replace the system prompt (when not blank) and the turn limit.
        let overrides = ctx.input.overrides.clone().unwrap_or_default();
        let mut system_prompt = overrides
            .system_prompt
            .filter(|p| !p.trim().is_empty())
            .unwrap_or_else(|| self.config.system_prompt.clone());
        if ctx.earlier_left_out {
            // Else the model takes the tail for the whole conversation, and answers a
            // question about its start as if it had never been asked.
            system_prompt.push_str("\n\n");
            system_prompt.push_str(EARLIER_LEFT_OUT);
        }
        let max_turns = overrides.max_turns.unwrap_or(self.config.max_turns);
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
            if turns >= max_turns {
                return Ok(Self::summary("max_turns", turns, usage));
            }
            turns += 1;
            let sink = DeltaSink {
                handle: &ctx.handle,
            };
            // Reserved against the budgets before the call, settled with what it used after.
            let metered = ctx
                .handle
                .call_starts(
                    provider.name(),
                    &model,
                    estimate_input_tokens(&system_prompt, &messages, &specs),
                    provider
                        .max_output_tokens()
                        .map_or(DEFAULT_OUTPUT_ESTIMATE, u64::from),
                )
                .await?;
            let result = provider
                .stream(
                    &model,
                    &system_prompt,
                    &messages,
                    &specs,
                    &ctx.cancel,
                    &sink,
                )
                .await;
            let used = match &result {
                Ok(c) => c.usage,
                Err(e) if e.billed_nothing() => Some(Usage::default()),
                Err(_) => None,
            };
            let priced = ctx.handle.call_done(metered, used.as_ref()).await?;
            usage.add(&priced);
            let completion = match result {
                Ok(c) => c,
                Err(ProviderError::Cancelled) => {
                    return Ok(Self::summary("cancelled", turns, usage));
                }
                Err(e) if refused_images(&e, &messages) => {
                    let reason = provider.redact(&e.to_string());
                    if !self.config.image_fallback {
                        return Err(BackendError::new(
                            RunErrorCode::ProviderRefused,
                            format!(
                                "the model {model} did not accept the attached images ({reason}); use a vision-capable model, or set [provider] image_fallback = true to send the text alone"
                            ),
                            false,
                        ));
                    }
                    for m in &mut messages {
                        m.images.clear();
                    }
                    ctx.handle
                        .notice(format!(
                            "the model {model} did not accept the attached images; they were sent as text only (their names and workspace copies)"
                        ))
                        .await?;
                    turns -= 1;
                    continue;
                }
                Err(e) => return Err(fail(provider.as_ref(), e)),
            };
            if completion.usage.is_some() {
                ctx.handle
                    .emit(AgentEvent::UsageReport {
                        run_id,
                        usage: priced,
                    })
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
            let calls = tool_calls(&mut used_ids, &completion.tool_calls);
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
            let mut results: Vec<Option<(String, bool)>> = vec![None; calls.len()];
            if matches!(completion.finish_reason.as_str(), "length" | "max_tokens") {
                // The reply hit the token limit: the last call's arguments may be cut off.
                // Nobody is asked to approve a call that may not be what the model meant.
                ctx.handle
                    .emit(AgentEvent::ToolCallsProposed {
                        run_id,
                        tool_calls: calls.clone(),
                    })
                    .await?;
                for (i, call) in calls.iter().enumerate() {
                    let text = ctx
                        .handle
                        .reject(
                            call,
                            RejectionCause::Policy,
                            "the reply reached the output token limit, so the call may be incomplete; make smaller steps",
                        )
                        .await?;
                    results[i] = Some((text, true));
                }
            } else {
                // Unknown tools go through as reads: policy lets them "run", and running
                // them tells the model which tools exist.
                let gated: Vec<(ToolCall, ToolClass)> = calls
                    .iter()
                    .map(|c| {
                        let class = tools::class(&c.name)
                            .or_else(|| mcp.class(&c.name))
                            .unwrap_or(ToolClass::Read);
                        (c.clone(), class)
                    })
                    .collect();
                let verdicts = ctx.handle.propose(&gated).await?;
                // What policy allows runs at once; refusals are answered; then the rest
                // waits for a human.
                let mut ask = Vec::new();
                for (i, (call, verdict)) in calls.iter().zip(&verdicts).enumerate() {
                    match verdict {
                        Verdict::Allow => {
                            results[i] = Some(self.run_tool(&ctx, &workspace, mcp, call).await?)
                        }
                        Verdict::Deny(reason) => {
                            let d = Decision::Rejected(RejectionCause::Policy, reason.clone());
                            results[i] = Some(ctx.handle.tool_not_run(call, &d).await?);
                        }
                        Verdict::Ask => ask.push(i),
                    }
                }
                let asked: Vec<ToolCall> = ask.iter().map(|&i| calls[i].clone()).collect();
                let decisions = ctx.handle.ask(&asked).await?;
                for (&i, decision) in ask.iter().zip(decisions) {
                    let call = &calls[i];
                    results[i] = Some(if decision == Decision::Run {
                        self.run_tool(&ctx, &workspace, mcp, call).await?
                    } else {
                        ctx.handle.tool_not_run(call, &decision).await?
                    });
                }
            }
            for (call, result) in calls.iter().zip(results) {
                let (content, is_error) = match result {
                    Some(r) => r,
                    None => (
                        ctx.handle
                            .reject(call, RejectionCause::Cancelled, "no decision was made")
                            .await?,
                        true,
                    ),
                };
                messages.push(ChatMessage::tool_result(&call.id, content, is_error));
            }
        }
    }
}
