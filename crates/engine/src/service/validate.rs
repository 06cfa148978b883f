//! Checking what a client sends before anything is stored: a message, a session's
//! settings. Every refusal names the field (`400 validation_failed`), or says what this server
//! has not (`422 unprocessable_entity`).

use super::*;

/// Checks a message before anything is stored: every refusal names the field.
pub(super) fn validate_message(req: &SendMessageRequest) -> Result<(), EngineError> {
    use switchboard_protocol::{
        MAX_CONTEXT_CONTENT_CHARS, MAX_CONTEXT_ITEMS, MAX_CONTEXT_NAME_CHARS,
        MAX_CONTEXT_TOTAL_CHARS, MAX_SYSTEM_PROMPT_CHARS, MAX_TURNS_RANGE,
    };
    if req.message.role != Role::User {
        return Err(EngineError::validation("message.role", "must be \"user\""));
    }
    if req.message.content.trim().is_empty() {
        return Err(EngineError::validation(
            "message.content",
            "must not be empty",
        ));
    }
    if req.message.content.len() > MAX_CONTENT {
        return Err(EngineError::validation(
            "message.content",
            format!("longer than {MAX_CONTENT} bytes"),
        ));
    }
    if let Some(m) = &req.model
        && m.trim().is_empty()
    {
        return Err(EngineError::validation("model", "must not be empty"));
    }
    if req.context.len() > MAX_CONTEXT_ITEMS {
        return Err(EngineError::validation(
            "context",
            format!("at most {MAX_CONTEXT_ITEMS} items"),
        ));
    }
    let mut total = 0usize;
    for (i, c) in req.context.iter().enumerate() {
        if c.name.trim().is_empty() {
            return Err(EngineError::validation(
                &format!("context[{i}].name"),
                "must not be empty",
            ));
        }
        if c.name.chars().count() > MAX_CONTEXT_NAME_CHARS {
            return Err(EngineError::validation(
                &format!("context[{i}].name"),
                format!("longer than {MAX_CONTEXT_NAME_CHARS} characters"),
            ));
        }
        let len = c.content.chars().count();
        if len > MAX_CONTEXT_CONTENT_CHARS {
            return Err(EngineError::validation(
                &format!("context[{i}].content"),
                format!("longer than {MAX_CONTEXT_CONTENT_CHARS} characters"),
            ));
        }
        total += len;
    }
    if total > MAX_CONTEXT_TOTAL_CHARS {
        return Err(EngineError::validation(
            "context",
            format!("more than {MAX_CONTEXT_TOTAL_CHARS} characters of content in all"),
        ));
    }
    if let Some(o) = &req.overrides {
        if let Some(m) = &o.model
            && m.trim().is_empty()
        {
            return Err(EngineError::validation(
                "overrides.model",
                "must not be empty",
            ));
        }
        if let Some(n) = o.max_turns
            && !MAX_TURNS_RANGE.contains(&n)
        {
            return Err(EngineError::validation(
                "overrides.max_turns",
                format!(
                    "must be between {} and {}",
                    MAX_TURNS_RANGE.start(),
                    MAX_TURNS_RANGE.end()
                ),
            ));
        }
        if let Some(p) = &o.system_prompt
            && p.chars().count() > MAX_SYSTEM_PROMPT_CHARS
        {
            return Err(EngineError::validation(
                "overrides.system_prompt",
                format!("longer than {MAX_SYSTEM_PROMPT_CHARS} characters"),
            ));
        }
    }
    Ok(())
}

pub(super) fn validate_cwd(
    p: &Path,
    protected: &crate::ProtectedPaths,
) -> Result<PathBuf, EngineError> {
    if !p.is_absolute() {
        return Err(EngineError::validation("cwd", "must be an absolute path"));
    }
    // A workspace inside Switchboard's own state would hand it to the agent.
    if let Some(by) = protected.covering(p) {
        return Err(EngineError::ForbiddenPath {
            given: p.display().to_string(),
            by: by.to_path_buf(),
        });
    }
    // An absolute path that is not a directory here: well-formed, but this server has no
    // such workspace (422, like an unknown agent), not a malformed request.
    match std::fs::metadata(p) {
        Ok(m) if m.is_dir() => p
            .canonicalize()
            .map_err(|e| EngineError::Unprocessable(format!("invalid cwd: {}: {e}", p.display()))),
        Ok(_) => Err(EngineError::Unprocessable(format!(
            "invalid cwd: {} is not a directory",
            p.display()
        ))),
        Err(e) => Err(EngineError::Unprocessable(format!(
            "invalid cwd: {}: {e}",
            p.display()
        ))),
    }
}

/// A session's own sandbox network, if it has one, makes sense (`allow_hosts` with an
/// allowlist only, host names). 422 `unprocessable_entity`: the body is well-formed, its
/// schema cannot say this.
pub(super) fn validate_sandbox(
    s: Option<&switchboard_protocol::SessionSandbox>,
) -> Result<(), EngineError> {
    match s.and_then(|s| s.problem()) {
        Some(p) => Err(EngineError::Unprocessable(format!("sandbox: {p}"))),
        None => Ok(()),
    }
}

/// At most [`switchboard_protocol::MAX_MCP_SERVERS`], each usable, names unique.
pub(super) fn validate_mcp_servers(
    servers: &[switchboard_protocol::McpServerSpec],
) -> Result<(), EngineError> {
    if servers.len() > switchboard_protocol::MAX_MCP_SERVERS {
        return Err(EngineError::Unprocessable(format!(
            "mcp_servers: at most {} servers",
            switchboard_protocol::MAX_MCP_SERVERS
        )));
    }
    let mut seen = std::collections::HashSet::new();
    for s in servers {
        if let Some(p) = s.problem() {
            return Err(EngineError::Unprocessable(format!("mcp_servers: {p}")));
        }
        if !seen.insert(s.name.as_str()) {
            return Err(EngineError::Unprocessable(format!(
                "mcp_servers: {} is named twice",
                s.name
            )));
        }
    }
    Ok(())
}

/// A session title as given to create or rename: trimmed, not empty, at most [`MAX_TITLE`]
/// characters.
pub(super) fn valid_title(t: &str) -> Result<String, EngineError> {
    let t = t.trim();
    if t.is_empty() {
        return Err(EngineError::validation("title", "must not be empty"));
    }
    if t.chars().count() > MAX_TITLE {
        return Err(EngineError::validation(
            "title",
            format!("longer than {MAX_TITLE} characters"),
        ));
    }
    Ok(t.to_string())
}

/// A list of tool names must name tools: no blank entries, no padding around a name (which
/// would never match a call, silently). 422 `unprocessable_entity`: the body is well-formed,
/// its schema cannot say this.
pub(super) fn validate_auto_approve(
    a: &switchboard_protocol::AutoApprove,
) -> Result<(), EngineError> {
    if let switchboard_protocol::AutoApprove::Tools(list) = a {
        for (i, t) in list.iter().enumerate() {
            if t.trim().is_empty() || t.trim() != t {
                return Err(EngineError::Unprocessable(format!(
                    "auto_approve[{i}]: {t:?} is not a tool name (blank, or spaces around it)"
                )));
            }
        }
    }
    Ok(())
}
