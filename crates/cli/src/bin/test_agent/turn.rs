//! One scripted turn: the prompt markers, in order.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use agent_client_protocol::v1::schema::{
    Content, ContentBlock, ContentChunk, PermissionOption, PermissionOptionKind, Plan, PlanEntry,
    PlanEntryPriority, PlanEntryStatus, PromptRequest, PromptResponse, RequestPermissionOutcome,
    RequestPermissionRequest, SessionId, SessionNotification, SessionUpdate, StopReason, ToolCall,
    ToolCallContent, ToolCallLocation, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields,
    ToolKind,
};
use agent_client_protocol::{Client, Error, ErrorCode, v1};
use serde_json::json;
use tokio::sync::watch;

use super::*;

/// How a scripted step ended.
pub(crate) enum Flow {
    Continue,
    Cancelled,
}

/// One prompt turn.
pub(crate) struct Turn {
    pub(crate) cx: v1::ConnectionTo<Client>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) session: SessionId,
    pub(crate) cancel: watch::Receiver<bool>,
}

impl Turn {
    pub(crate) fn update(&self, update: SessionUpdate) -> Result<(), Error> {
        self.cx
            .send_notification(SessionNotification::new(self.session.clone(), update))
    }

    pub(crate) fn say(&self, text: &str) -> Result<(), Error> {
        self.update(SessionUpdate::AgentMessageChunk(ContentChunk::new(
            text.into(),
        )))
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        *self.cancel.borrow()
    }

    /// Reports a tool call, asks permission, and settles it.
    pub(crate) async fn tool(
        &mut self,
        kind: ToolKind,
        title: &str,
        raw_input: serde_json::Value,
        noun: &str,
        locations: Vec<PathBuf>,
        crash_after_ms: Option<u64>,
    ) -> Result<Flow, Error> {
        let n = self.shared.tool_counter.fetch_add(1, Ordering::SeqCst) + 1;
        let id = format!("tool-{n}");
        let locs: Vec<ToolCallLocation> =
            locations.into_iter().map(ToolCallLocation::new).collect();
        self.update(SessionUpdate::ToolCall(
            ToolCall::new(id.clone(), title)
                .kind(kind)
                .status(ToolCallStatus::Pending)
                .locations(locs.clone())
                .raw_input(raw_input.clone()),
        ))?;
        let request = RequestPermissionRequest::new(
            self.session.clone(),
            ToolCallUpdate::new(
                id.clone(),
                ToolCallUpdateFields::new()
                    .title(title.to_owned())
                    .kind(kind)
                    .locations(locs)
                    .raw_input(raw_input),
            ),
            vec![
                PermissionOption::new("allow-once", "Allow", PermissionOptionKind::AllowOnce),
                PermissionOption::new(
                    "allow-always",
                    "Always allow",
                    PermissionOptionKind::AllowAlways,
                ),
                PermissionOption::new("reject-once", "Reject", PermissionOptionKind::RejectOnce),
            ],
        );
        let answer = self.cx.send_request(request).block_task();
        tokio::pin!(answer);
        if let Some(ms) = crash_after_ms {
            // Dies while its permission request waits.
            tokio::select! {
                _ = &mut answer => {}
                () = tokio::time::sleep(Duration::from_millis(ms)) => {}
            }
            eprintln!("test agent crashing while a permission request waits (exit 4)");
            std::process::exit(4);
        }
        // A cancel does not abandon the request: the client still owes it an answer
        // (normally `cancelled`), so keep waiting for it and then end the turn.
        let mut was_cancelled = false;
        let answer = tokio::select! {
            answer = &mut answer => answer,
            () = cancelled(&mut self.cancel) => {
                was_cancelled = true;
                answer.await
            }
        };
        let outcome = match answer {
            Ok(response) => response.outcome,
            Err(e) => {
                self.shared
                    .log(&format!("permission_error {}", one_line(&e.message)));
                return if was_cancelled || self.is_cancelled() {
                    Ok(Flow::Cancelled)
                } else {
                    Err(e)
                };
            }
        };
        let allowed = match &outcome {
            RequestPermissionOutcome::Selected(selected) => {
                let option = selected.option_id.to_string();
                self.shared.log(&format!("permission_outcome {option}"));
                option == "allow-once" || option == "allow-always"
            }
            RequestPermissionOutcome::Cancelled => {
                self.shared.log("permission_outcome cancelled");
                return Ok(Flow::Cancelled);
            }
            _ => {
                self.shared.log("permission_outcome unknown");
                false
            }
        };
        if was_cancelled || self.is_cancelled() {
            return Ok(Flow::Cancelled);
        }
        let (status, content, reply) = if allowed {
            (ToolCallStatus::Completed, "hi", format!("The {noun} ran."))
        } else {
            (
                ToolCallStatus::Failed,
                "rejected by the client",
                format!("The {noun} was rejected."),
            )
        };
        self.update(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
            id,
            ToolCallUpdateFields::new()
                .status(status)
                .content(vec![ToolCallContent::Content(Content::new(content))]),
        )))?;
        self.say(&reply)?;
        Ok(Flow::Continue)
    }

    /// Streams 60 "tick " chunks 100 ms apart, stopping on cancel.
    pub(crate) async fn slow(&mut self) -> Result<Flow, Error> {
        for _ in 0..60 {
            if self.is_cancelled() {
                return Ok(Flow::Cancelled);
            }
            self.say("tick ")?;
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(100)) => {}
                () = cancelled(&mut self.cancel) => return Ok(Flow::Cancelled),
            }
        }
        Ok(Flow::Continue)
    }

    /// Sends one chunk, waits until it reached stdout, then exits with status 3.
    pub(crate) async fn crash(&self) -> Result<(), Error> {
        let crash = &self.shared.crash;
        crash.armed.store(false, Ordering::SeqCst);
        crash.flushed.send_replace(false);
        let mut flushed = crash.flushed.subscribe();
        self.say(CRASH_TEXT)?;
        let waited = tokio::time::timeout(Duration::from_secs(5), flushed.wait_for(|f| *f))
            .await
            .is_ok();
        if !waited {
            eprintln!("test agent: crash chunk not flushed in time");
        }
        eprintln!("test agent crashing on purpose (exit 3)");
        std::process::exit(3);
    }

    pub(crate) async fn run(&mut self, text: &str, count: usize) -> Result<PromptResponse, Error> {
        let has = |marker: &str| text.contains(marker);
        let cancelled_response = || Ok(PromptResponse::new(StopReason::Cancelled));

        if has("[think]") {
            self.update(SessionUpdate::AgentThoughtChunk(ContentChunk::new(
                "pondering".into(),
            )))?;
        }
        if has("[plan]") {
            self.update(SessionUpdate::Plan(Plan::new(vec![
                PlanEntry::new(
                    "read the code",
                    PlanEntryPriority::High,
                    PlanEntryStatus::InProgress,
                ),
                PlanEntry::new(
                    "write the fix",
                    PlanEntryPriority::Medium,
                    PlanEntryStatus::Pending,
                ),
            ])))?;
        }
        // `[cost=0.25]`: a usage update with the session's cumulative cost, in USD.
        if let Some(rest) = text.split("[cost=").nth(1)
            && let Some(amount) = rest.split(']').next().and_then(|a| a.parse::<f64>().ok())
        {
            self.update(SessionUpdate::UsageUpdate(
                v1::schema::UsageUpdate::new(1_000, 200_000)
                    .cost(v1::schema::Cost::new(amount, "USD")),
            ))?;
        }
        if self.is_cancelled() {
            return cancelled_response();
        }
        let mut scripted = false;
        if has("[elicit]") {
            scripted = true;
            self.elicit().await?;
        }
        if has("[tool]") || has("[tool-crash]") {
            scripted = true;
            let flow = self
                .tool(
                    ToolKind::Execute,
                    "Run echo hi",
                    json!({"command": "echo hi"}),
                    "tool",
                    Vec::new(),
                    has("[tool-crash]").then_some(300),
                )
                .await?;
            if let Flow::Cancelled = flow {
                return cancelled_response();
            }
        }
        if has("[edit]") {
            scripted = true;
            let here = std::env::current_dir().unwrap_or_default();
            let flow = self
                .tool(
                    ToolKind::Edit,
                    "Edit notes.txt",
                    json!({"path": "notes.txt"}),
                    "edit",
                    vec![here.join("notes.txt")],
                    None,
                )
                .await?;
            if let Flow::Cancelled = flow {
                return cancelled_response();
            }
        }
        if has("[edit-outside]") {
            scripted = true;
            let flow = self
                .tool(
                    ToolKind::Edit,
                    "Edit /etc/hosts",
                    json!({"path": "/etc/hosts"}),
                    "edit",
                    vec![PathBuf::from("/etc/hosts")],
                    None,
                )
                .await?;
            if let Flow::Cancelled = flow {
                return cancelled_response();
            }
        }
        if has("[stubborn]") {
            // Ignores session/cancel.
            scripted = true;
            self.shared.log("stubborn");
            for _ in 0..300 {
                self.say("tock ")?;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        if has("[slow]") {
            scripted = true;
            if let Flow::Cancelled = self.slow().await? {
                return cancelled_response();
            }
        }
        if has("[crash]") {
            self.crash().await?;
        }
        if let Some(name) = marker_arg(text, "[write:") {
            // Straight to disk, as agents with their own file tools do (no permission asked).
            scripted = true;
            let path = std::env::current_dir().unwrap_or_default().join(&name);
            match std::fs::write(&path, "written by the test agent\n") {
                Ok(()) => self.say(&format!("wrote {name}"))?,
                Err(e) => self.say(&format!("could not write {name}: {e}"))?,
            }
        }
        // Its own reads, as an agent's file tools or shell do (the sandbox's business); each
        // `[read:PATH]` of the prompt, one line each.
        let mut rest = text;
        while let Some(path) = marker_arg(rest, "[read:") {
            scripted = true;
            rest = rest.split_once("[read:").map_or("", |(_, r)| r);
            match std::fs::read_to_string(&path) {
                Ok(content) => self.say(&format!("read {path}: {}\n", one_line(content.trim())))?,
                Err(e) => self.say(&format!("could not read {path}: {e}\n"))?,
            }
        }
        if let Some(path) = marker_arg(text, "[share:") {
            scripted = true;
            let servers = self
                .shared
                .mcp
                .lock()
                .get(&self.session.to_string())
                .cloned()
                .unwrap_or_default();
            let answer = match mcp_send_file(&servers, &path).await {
                Ok((true, text)) => {
                    self.shared
                        .log(&format!("mcp send_file error {}", one_line(&text)));
                    format!("send_file failed: {text}")
                }
                Ok((false, text)) => {
                    self.shared.log("mcp send_file ok");
                    format!("sent {path}: {text}")
                }
                Err(e) => {
                    self.shared.log(&format!("mcp failed {}", one_line(&e)));
                    format!("MCP failed: {e}")
                }
            };
            self.say(&answer)?;
        }
        if let Some(query) = marker_arg(text, "[recall:") {
            // `search_sessions {query}` on the session's `switchboard` MCP server.
            scripted = true;
            let servers = self
                .shared
                .mcp
                .lock()
                .get(&self.session.to_string())
                .cloned()
                .unwrap_or_default();
            let answer = match mcp_call(
                &servers,
                "switchboard",
                "search_sessions",
                serde_json::json!({"query": query}),
            )
            .await
            {
                Ok((is_error, text)) => format!("recall error={is_error}: {text}"),
                Err(e) => format!("MCP failed: {e}"),
            };
            self.say(&answer)?;
        }
        if has("[calc]") {
            // The session's own MCP server `calc` (tests/mcp_test_server.py): 40 + 2.
            scripted = true;
            let servers = self
                .shared
                .mcp
                .lock()
                .get(&self.session.to_string())
                .cloned()
                .unwrap_or_default();
            let answer = match mcp_call(&servers, "calc", "add", json!({"a": 40, "b": 2})).await {
                Ok((false, text)) => format!("calc says {text}"),
                Ok((true, text)) => format!("calc failed: {text}"),
                Err(e) => format!("MCP failed: {e}"),
            };
            self.say(&answer)?;
        }
        if let Some(other) = marker_arg(text, "[probe-token:") {
            scripted = true;
            let servers = self
                .shared
                .mcp
                .lock()
                .get(&self.session.to_string())
                .cloned()
                .unwrap_or_default();
            let line = match probe_token(&servers, &other).await {
                Ok(line) => line,
                Err(e) => format!("probe failed {e}"),
            };
            self.shared.log(&line);
            self.say(&line)?;
        }
        if has("[count]") {
            scripted = true;
            self.say(&format!("seen {count} prompts"))?;
        }
        if has("[refuse]") {
            return Ok(PromptResponse::new(StopReason::Refusal));
        }
        if has("[error]") {
            return Err(Error::new(ErrorCode::INTERNAL_ERROR, "scripted failure"));
        }
        if !scripted {
            for chunk in ["Hello", " from", " the test agent"] {
                self.say(chunk)?;
            }
        }
        if self.is_cancelled() {
            return cancelled_response();
        }
        Ok(PromptResponse::new(StopReason::EndTurn))
    }
}

pub(crate) fn prompt_text(req: &PromptRequest) -> String {
    req.prompt
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect()
}

/// The text after `marker` up to the next `]`: `[share:out.png]` → `out.png`.
pub(crate) fn marker_arg(text: &str, marker: &str) -> Option<String> {
    let rest = &text[text.find(marker)? + marker.len()..];
    Some(rest[..rest.find(']')?].trim().to_owned())
}
