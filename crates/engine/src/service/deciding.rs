//! Deciding tool calls as a person: the approval rules ([`crate::team::may_decide`]) asked
//! for every call decided, whatever surface the decision comes from, and the decision
//! written to the audit log.

use super::*;
use switchboard_protocol::people::{Credential, Principal, Role};
use switchboard_protocol::usage::{BUDGET_CALL_PREFIX, BUDGET_EXTENSION_TOOL};
use switchboard_protocol::{BackendSpec, ToolDecisionsRequest, ToolDecisionsResponse};

use crate::team::{CallFacts, may_decide};

impl Engine {
    /// [`Engine::decide_tools`] by `p`: refused (`Forbidden`, saying why) when an approval
    /// rule gives a decided call to others or `p` asked for it under `second_person`; a
    /// decision without `by` is signed with the person's name. `via`: where it was made.
    pub async fn decide_tools_as(
        &self,
        p: &Principal,
        session_id: Uuid,
        mut req: ToolDecisionsRequest,
        via: &str,
    ) -> Result<ToolDecisionsResponse, EngineError> {
        // A budget's extension is money, not a tool call: it is decided by an admin or an
        // operator in person — never by the server token alone, so a surface's own approval
        // mode (a chat that allows everything) cannot extend a budget.
        if req
            .decisions
            .keys()
            .any(|id| id.starts_with(BUDGET_CALL_PREFIX))
        {
            let pending = self.pending_tools(session_id).await?;
            let budget_call = pending
                .tool_calls
                .iter()
                .any(|c| c.name == BUDGET_EXTENSION_TOOL && req.decisions.contains_key(&c.id));
            let in_person = p.credential != Credential::ServerToken
                && matches!(p.role, Role::Admin | Role::Operator);
            if budget_call && !in_person {
                return Err(EngineError::Forbidden(
                    "a budget's extension is decided by an admin or an operator, in person (the console, their token, or a linked chat account)".into(),
                ));
            }
        }
        let rules = &self.inner.config.approval_rules;
        if !rules.is_empty() {
            let pending = self.pending_tools(session_id).await?;
            let config = session_config(&self.record(session_id).await?)?;
            let backend = match &config.backend {
                BackendSpec::Builtin => "builtin".to_string(),
                BackendSpec::Acp(name) => name.clone(),
            };
            let requested_by = match pending.run_id {
                Some(run) => self
                    .inner
                    .store
                    .get_run(run)
                    .await?
                    .and_then(|r| serde_json::from_value::<RunInput>(r.input).ok())
                    .and_then(|i| i.requested_by),
                None => None,
            };
            for id in req.decisions.keys() {
                // A call that is not pending is the decision's own error to report.
                let Some(call) = pending.tool_calls.iter().find(|c| c.id == *id) else {
                    continue;
                };
                let facts = CallFacts {
                    tool: &call.name,
                    backend: &backend,
                    mode: config.permission_mode,
                    requested_by: requested_by.as_deref(),
                };
                may_decide(rules, p, &facts).map_err(EngineError::Forbidden)?;
            }
        }
        if p.credential != Credential::ServerToken {
            for d in req.decisions.values_mut() {
                d.by.get_or_insert_with(|| p.user.clone());
            }
        }
        let decisions: serde_json::Map<String, serde_json::Value> = req
            .decisions
            .iter()
            .map(|(id, d)| (id.clone(), serde_json::json!(d.action)))
            .collect();
        let run_id = req.run_id;
        let response = self.decide_tools(session_id, req).await?;
        self.inner
            .team
            .record(
                &p.user,
                "approval.decide",
                Some(&session_id.to_string()),
                via,
                serde_json::json!({ "run_id": run_id, "decisions": decisions }),
            )
            .await;
        Ok(response)
    }
}
