//! An agent's question — an `acp__elicitation` call (the ACP backend's, crates/acp's
//! `elicit.rs`) — asked of an editor that shows forms as the form it is, rather than as
//! allow/deny: the fields the agent asked for, the editor's values given back as the call's
//! result (which fills the agent's form), a decline as a denial. An editor without forms, or
//! a question that is a page to visit, gets the permission request as any call.

use std::sync::Arc;

use agent_client_protocol::Client;
use agent_client_protocol::v1::{
    self,
    schema::{
        CreateElicitationRequest, ElicitationAction, ElicitationFormMode, ElicitationSchema,
        ElicitationSessionScope, ToolCallId,
    },
};
use serde_json::{Map, Value, json};
use switchboard_protocol::{DecisionAction, ToolCall};
use uuid::Uuid;

use crate::Hub;
use crate::state::Open;

/// Whether `call` is an agent's question rather than a tool call.
pub(crate) fn is_question(call: &ToolCall) -> bool {
    call.is_question()
}

/// The form to ask for `call`, when it is an agent's question with fields.
pub(crate) fn form(session: Uuid, call: &ToolCall) -> Option<CreateElicitationRequest> {
    if !is_question(call) {
        return None;
    }
    let fields = call.arguments.get("fields")?.as_object()?;
    let message = call.arguments.get("message")?.as_str()?;
    let mut properties = Map::new();
    let mut required = Vec::new();
    for (name, f) in fields {
        let mut p = Map::new();
        let kind = f.get("type").and_then(Value::as_str)?;
        p.insert("type".into(), json!(kind));
        for key in ["title", "description", "default"] {
            if let Some(v) = f.get(key) {
                p.insert(key.into(), v.clone());
            }
        }
        if let Some(choices) = f.get("choices") {
            match kind {
                "array" => {
                    p.insert("items".into(), json!({"type": "string", "enum": choices}));
                }
                _ => {
                    p.insert("enum".into(), choices.clone());
                }
            }
        }
        if f.get("required") == Some(&json!(true)) {
            required.push(name.clone());
        }
        properties.insert(name.clone(), Value::Object(p));
    }
    let schema: ElicitationSchema = serde_json::from_value(json!({
        "type": "object",
        "properties": properties,
        "required": required,
    }))
    .ok()?;
    let scope = ElicitationSessionScope::new(session.to_string())
        .tool_call_id(ToolCallId::new(call.id.clone()));
    Some(CreateElicitationRequest::new(
        ElicitationFormMode::new(scope, schema),
        message.to_owned(),
    ))
}

/// Asks the editor the form; its answer becomes the decision (withdrawn, like a permission
/// request, when the call is decided elsewhere).
pub(crate) fn ask(
    hub: &Arc<Hub>,
    open: &Arc<Open>,
    cx: &v1::ConnectionTo<Client>,
    run: Uuid,
    tool_call_id: &str,
    request: CreateElicitationRequest,
) {
    let sent = cx.send_request(request);
    open.asks
        .lock()
        .insert(tool_call_id.to_owned(), (run, sent.cancellation_handle()));
    let (hub, open, id) = (hub.clone(), open.clone(), tool_call_id.to_owned());
    let spawned = cx.spawn(async move {
        let answer = sent.block_task().await;
        open.asks.lock().remove(&id);
        let (action, content) = match answer {
            Ok(resp) => match resp.action {
                ElicitationAction::Accept(a) => (
                    DecisionAction::CustomResult,
                    serde_json::to_string(&a.content.unwrap_or_default()).ok(),
                ),
                ElicitationAction::Decline => (
                    DecisionAction::Reject,
                    Some("declined in the editor".to_owned()),
                ),
                // Dismissed: the other surfaces and the approval's timeout decide.
                _ => return Ok(()),
            },
            Err(e) => {
                tracing::info!(session = %open.id, tool_call_id = %id, error = %e, "no answer from the editor's form");
                return Ok(());
            }
        };
        crate::follow::decide(&hub, open.id, run, &id, action, content).await;
        Ok(())
    });
    if let Err(e) = spawned {
        tracing::debug!(error = %e, "the connection is closing");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_client_protocol::v1::schema::{ElicitationMode, ElicitationPropertySchema};

    #[test]
    fn a_question_s_fields_make_the_form() {
        let call = ToolCall {
            id: "abc-elicitation-1".into(),
            name: switchboard_protocol::QUESTION_TOOL.into(),
            arguments: json!({"message": "Which branch?", "fields": {
                "branch": {"type": "string", "required": true, "description": "the branch"},
                "force": {"type": "boolean", "default": false, "required": false},
                "env": {"type": "string", "choices": ["staging", "prod"], "required": false},
            }}),
            metadata: None,
        };
        let req = form(Uuid::nil(), &call).unwrap();
        assert_eq!(req.message, "Which branch?");
        let ElicitationMode::Form(f) = &req.mode else {
            panic!("{req:?}")
        };
        let s = &f.requested_schema;
        assert_eq!(s.required.as_deref(), Some(&["branch".to_string()][..]));
        assert!(matches!(
            s.properties["force"],
            ElicitationPropertySchema::Boolean(_)
        ));
        match &s.properties["env"] {
            ElicitationPropertySchema::String(e) => {
                assert_eq!(e.enum_values.as_deref().unwrap(), ["staging", "prod"]);
            }
            p => panic!("{p:?}"),
        }
        let url = ToolCall {
            arguments: json!({"message": "Sign in", "url": "https://x"}),
            ..call.clone()
        };
        assert!(form(Uuid::nil(), &url).is_none());
        let other = ToolCall {
            name: "acp__execute".into(),
            ..call
        };
        assert!(form(Uuid::nil(), &other).is_none());
    }
}
