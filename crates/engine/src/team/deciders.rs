//! Who may decide a tool call (`[[approvals.rules]]`, docs/teams.md): a pure function of
//! the rules, the person deciding and the call, so every surface that decides — the API,
//! the console, the CLI, an editor, a chat — asks the same question and gets the same
//! answer.
//!
//! The first rule whose `tool` (a glob), `backend` and `mode` match the call says who may
//! decide it: its `roles` and `users` (both empty: anyone who may see the session and holds
//! `approvals:decide`), and with `second_person` never the person whose message caused the
//! call. No rule matches: anyone who may see the session. Every exit that cannot decide
//! refuses: a rule whose glob does not parse matches every call.

use serde::Deserialize;
use switchboard_protocol::PermissionMode;
use switchboard_protocol::people::{Principal, Role};

/// One `[[approvals.rules]]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalRule {
    /// The tool's name, or a glob of names (`*`, `write_*`); default every tool.
    #[serde(default = "every_tool")]
    pub tool: String,
    /// `builtin` or an `[agents.NAME]`; default any.
    #[serde(default)]
    pub backend: Option<String>,
    /// The session's permission mode; default any.
    #[serde(default)]
    pub mode: Option<PermissionMode>,
    /// Roles whose people may decide.
    #[serde(default)]
    pub roles: Vec<Role>,
    /// Users who may decide, whatever their role.
    #[serde(default)]
    pub users: Vec<String>,
    /// The person whose message caused the call may not allow or deny it themselves.
    #[serde(default)]
    pub second_person: bool,
}

fn every_tool() -> String {
    "*".into()
}

impl ApprovalRule {
    /// What is wrong with it, if anything (for the configuration's error).
    pub fn problem(&self) -> Option<String> {
        globset::Glob::new(&self.tool)
            .err()
            .map(|e| format!("tool {:?} is not a glob: {e}", self.tool))
    }

    fn matches(&self, call: &CallFacts<'_>) -> bool {
        let tool = globset::Glob::new(&self.tool)
            .map(|g| g.compile_matcher().is_match(call.tool))
            // Fails closed: a rule that cannot be read applies.
            .unwrap_or(true);
        tool && self.backend.as_deref().is_none_or(|b| b == call.backend)
            && self.mode.is_none_or(|m| m == call.mode)
    }
}

/// What the rules look at of a call.
#[derive(Debug, Clone, Copy)]
pub struct CallFacts<'a> {
    pub tool: &'a str,
    /// `builtin` or the agent's name.
    pub backend: &'a str,
    pub mode: PermissionMode,
    /// The person whose message started the run (`None`: the server token or a surface
    /// acting for someone it vouches for itself).
    pub requested_by: Option<&'a str>,
}

/// `Ok` when `p` may decide `call` under `rules`; else why not, in words for a 403.
pub fn may_decide(
    rules: &[ApprovalRule],
    p: &Principal,
    call: &CallFacts<'_>,
) -> Result<(), String> {
    let Some(rule) = rules.iter().find(|r| r.matches(call)) else {
        return Ok(());
    };
    let named = rule.roles.is_empty() && rule.users.is_empty()
        || rule.roles.contains(&p.role)
        || rule.users.contains(&p.user);
    if !named {
        let mut who: Vec<String> = rule.roles.iter().map(|r| format!("{r}s")).collect();
        who.extend(rule.users.iter().cloned());
        return Err(format!(
            "{} here is decided by {} only",
            call.tool,
            who.join(", ")
        ));
    }
    if rule.second_person && call.requested_by == Some(p.user.as_str()) {
        return Err(format!(
            "{} here needs a second person: you asked for it, so someone else decides",
            call.tool
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use switchboard_protocol::people::{Credential, Scope};

    fn person(name: &str, role: Role) -> Principal {
        Principal {
            user: name.into(),
            role,
            scopes: vec![Scope::ApprovalsDecide],
            credential: Credential::Token,
            token_id: None,
            console_session: None,
        }
    }

    fn call<'a>(tool: &'a str, requested_by: Option<&'a str>) -> CallFacts<'a> {
        CallFacts {
            tool,
            backend: "builtin",
            mode: PermissionMode::WorkspaceWrite,
            requested_by,
        }
    }

    fn rules() -> Vec<ApprovalRule> {
        vec![
            ApprovalRule {
                tool: "run_*".into(),
                backend: None,
                mode: None,
                roles: vec![Role::Operator, Role::Admin],
                users: vec!["lee".into()],
                second_person: true,
            },
            ApprovalRule {
                tool: "*".into(),
                backend: Some("claude".into()),
                mode: None,
                roles: vec![],
                users: vec![],
                second_person: true,
            },
        ]
    }

    #[test]
    fn the_first_matching_rule_says_who() {
        let r = rules();
        let ann = person("ann", Role::Member);
        let ops = person("ops", Role::Operator);
        let lee = person("lee", Role::Member);
        // A member may not decide run_command; an operator may, and lee by name.
        let e = may_decide(&r, &ann, &call("run_command", Some("bob"))).unwrap_err();
        assert!(e.contains("operators, admins, lee"), "{e}");
        assert!(may_decide(&r, &ops, &call("run_command", Some("ann"))).is_ok());
        assert!(may_decide(&r, &lee, &call("run_command", Some("ann"))).is_ok());
        // Second person: the requester may not decide their own call.
        let e = may_decide(&r, &ops, &call("run_command", Some("ops"))).unwrap_err();
        assert!(e.contains("second person"), "{e}");
        // Another tool, no rule: anyone.
        assert!(may_decide(&r, &ann, &call("write_file", Some("ann"))).is_ok());
        // The agent `claude`: anyone but the requester.
        let claude = CallFacts {
            backend: "claude",
            ..call("edit", Some("ann"))
        };
        assert!(may_decide(&r, &ann, &claude).is_err());
        assert!(may_decide(&r, &person("bob", Role::Member), &claude).is_ok());
        // The server token's runs have no requester: second person does not stop them.
        assert!(may_decide(&r, &ops, &call("run_command", None)).is_ok());
    }

    #[test]
    fn a_rule_that_cannot_be_read_applies_to_every_call() {
        let broken = vec![ApprovalRule {
            tool: "[".into(),
            backend: None,
            mode: None,
            roles: vec![Role::Admin],
            users: vec![],
            second_person: false,
        }];
        assert!(broken[0].problem().is_some());
        assert!(may_decide(&broken, &person("ops", Role::Operator), &call("view", None)).is_err());
    }
}
