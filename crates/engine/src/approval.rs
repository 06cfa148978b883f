//! Tool-call policy and approval gates.
//!
//! A backend hands each model step's proposed calls to [`crate::RunHandle::gate`] with the
//! [`ToolClass`] of each. Policy (the session's permission mode and `auto_approve`) settles
//! what it can; the rest wait as one pending approval that a human answers over the API, that
//! times out, or that a cancel or a restart rejects.

use switchboard_protocol::{AutoApprove, AutoApproveKeyword, PermissionMode};

/// What a tool does, for the permission modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolClass {
    /// Only reads (view, search).
    Read,
    /// Changes files (create, edit, remove).
    Write,
    /// Runs programs.
    Execute,
    /// Anything else (fetch, MCP tools, unknown ACP kinds).
    Other,
}

/// What policy says about one call before anybody is asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    Deny(String),
    Ask,
}

/// Whether `name` is listed by `auto_approve`. A listed `server__tool` matches a call named
/// `server__tool` and, since MCP prefixes are optional, a call named `tool`; a listed `tool`
/// also matches a call named `server__tool`.
pub fn auto_approved(auto: &AutoApprove, name: &str) -> bool {
    match auto {
        AutoApprove::Keyword(k) => *k == AutoApproveKeyword::All,
        AutoApprove::Tools(list) => {
            let bare = |n: &str| n.rsplit("__").next().unwrap_or(n).to_string();
            list.iter()
                .any(|t| t == name || bare(t) == name || *t == bare(name))
        }
    }
}

/// Settles a call by the session's mode and `auto_approve`.
///
/// - `read-only`: reads run; writes and commands are refused; anything else asks.
/// - `workspace-write`: reads and (confined) writes run; commands and anything else ask.
/// - `full-access`: everything runs.
///
/// `auto_approve` turns an *ask* into *allow*; it never overrides a refusal by the mode.
pub fn settle(mode: PermissionMode, auto: &AutoApprove, name: &str, class: ToolClass) -> Verdict {
    let by_mode = match (mode, class) {
        (PermissionMode::FullAccess, _) => Verdict::Allow,
        (_, ToolClass::Read) => Verdict::Allow,
        (PermissionMode::ReadOnly, ToolClass::Write | ToolClass::Execute) => Verdict::Deny(format!(
            "the session is read-only: {name} is not allowed (permission mode read-only)"
        )),
        (PermissionMode::WorkspaceWrite, ToolClass::Write) => Verdict::Allow,
        _ => Verdict::Ask,
    };
    match by_mode {
        Verdict::Ask if auto_approved(auto, name) => Verdict::Allow,
        v => v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools(names: &[&str]) -> AutoApprove {
        AutoApprove::Tools(names.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn modes() {
        let none = AutoApprove::default();
        use PermissionMode::*;
        use ToolClass::*;
        assert_eq!(settle(ReadOnly, &none, "view", Read), Verdict::Allow);
        assert!(matches!(settle(ReadOnly, &none, "create", Write), Verdict::Deny(_)));
        assert!(matches!(settle(ReadOnly, &none, "run_command", Execute), Verdict::Deny(_)));
        assert_eq!(settle(ReadOnly, &none, "fetch", Other), Verdict::Ask);
        assert_eq!(settle(WorkspaceWrite, &none, "create", Write), Verdict::Allow);
        assert_eq!(settle(WorkspaceWrite, &none, "run_command", Execute), Verdict::Ask);
        assert_eq!(settle(FullAccess, &none, "run_command", Execute), Verdict::Allow);
        let all = AutoApprove::Keyword(AutoApproveKeyword::All);
        assert_eq!(settle(WorkspaceWrite, &all, "run_command", Execute), Verdict::Allow);
        // auto_approve never lifts a refusal of the mode.
        assert!(matches!(settle(ReadOnly, &all, "run_command", Execute), Verdict::Deny(_)));
    }

    #[test]
    fn auto_approve_lists_match_with_and_without_mcp_prefix() {
        assert!(auto_approved(&tools(&["run_command"]), "run_command"));
        assert!(!auto_approved(&tools(&["view"]), "run_command"));
        assert!(auto_approved(&tools(&["fs__read"]), "fs__read"));
        assert!(auto_approved(&tools(&["fs__read"]), "read"));
        assert!(auto_approved(&tools(&["read"]), "fs__read"));
        assert!(!auto_approved(&tools(&["fs__read"]), "write"));
        assert!(!auto_approved(&AutoApprove::default(), "view"));
    }
}
