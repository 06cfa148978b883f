//! An agent's `elicitation/create` as a Switchboard approval, and the decision back as its
//! answer — pure functions.
//!
//! The question becomes one call, `acp__elicitation`, of class [`ToolClass::Question`]
//! (asked in every mode): its arguments are the message and the form's fields (or the page
//! to visit), so every surface that shows approvals shows it — the API, the console, chats
//! with their buttons, editors, A2A clients (`input-required`), MCP clients. The decision
//! answers it:
//!
//! - **allow** accepts with each field's default, the agent's own; a form whose required
//!   fields cannot all be filled that way is declined;
//! - a **custom result** (`custom_result` in the API) fills the form: a JSON object of the
//!   fields, or plain text for the one field it fits (a text field — one of its choices if
//!   it has them —, a yes/no, a number), a required one still empty first; a value that
//!   does not fit its field declines (nothing is made up for the person);
//! - **deny** declines; a question nobody answered (timeout, cancel, restart) is cancelled.
//!
//! [`ToolClass::Question`]: switchboard_engine::ToolClass::Question

use std::collections::BTreeMap;

use agent_client_protocol::v1::schema::{
    CreateElicitationRequest, ElicitationAcceptAction, ElicitationAction, ElicitationContentValue,
    ElicitationMode, ElicitationPropertySchema, ElicitationSchema, MultiSelectItems,
};
use serde_json::{Value, json};
use switchboard_engine::Decision;
use switchboard_protocol::{RejectionCause, ToolCall};

/// The call's name.
pub(crate) const NAME: &str = switchboard_protocol::QUESTION_TOOL;

/// The approval's call for `req` (`id`: its public id); `None` for a mode Switchboard does
/// not know, which is declined unasked.
pub(crate) fn question(id: String, req: &CreateElicitationRequest) -> Option<ToolCall> {
    let message = req.message.trim();
    let (arguments, preview) = match &req.mode {
        ElicitationMode::Form(form) => {
            let fields = fields(&form.requested_schema);
            let names: Vec<String> = fields
                .iter()
                .map(|(name, f)| {
                    let star = if f["required"] == json!(true) {
                        "*"
                    } else {
                        ""
                    };
                    format!("{name}{star}")
                })
                .collect();
            (
                json!({"message": message, "fields": fields}),
                format!(
                    "asks: {message} — fields: {} (allow takes the defaults; answer with a result to fill them)",
                    names.join(", ")
                ),
            )
        }
        ElicitationMode::Url(u) => (
            json!({"message": message, "url": u.url}),
            format!("asks you to open {}: {message}", u.url),
        ),
        _ => return None,
    };
    Some(ToolCall {
        id,
        name: NAME.into(),
        arguments,
        metadata: Some(json!({
            "preview": preview,
            "kind": "elicitation",
            "title": message,
        })),
    })
}

/// Each field: its type, title, description, default, choices, and whether it is required.
fn fields(schema: &ElicitationSchema) -> BTreeMap<String, Value> {
    let required = schema.required.clone().unwrap_or_default();
    schema
        .properties
        .iter()
        .map(|(name, p)| {
            let mut f = match p {
                ElicitationPropertySchema::String(s) => json!({
                    "type": "string", "title": s.title, "description": s.description,
                    "default": s.default,
                    "choices": s.enum_values.clone().or_else(|| s.one_of.as_ref().map(|o| o.iter().map(|e| e.value.clone()).collect())),
                }),
                ElicitationPropertySchema::Number(n) => json!({
                    "type": "number", "title": n.title, "description": n.description, "default": n.default,
                }),
                ElicitationPropertySchema::Integer(n) => json!({
                    "type": "integer", "title": n.title, "description": n.description, "default": n.default,
                }),
                ElicitationPropertySchema::Boolean(b) => json!({
                    "type": "boolean", "title": b.title, "description": b.description, "default": b.default,
                }),
                ElicitationPropertySchema::Array(a) => json!({
                    "type": "array", "title": a.title, "description": a.description, "default": a.default,
                    "choices": match &a.items {
                        MultiSelectItems::String(s) => Some(s.values.clone()),
                        MultiSelectItems::Titled(t) => Some(t.options.iter().map(|o| o.value.clone()).collect()),
                        _ => None,
                    },
                }),
                _ => json!({"type": "other"}),
            };
            if let Some(o) = f.as_object_mut() {
                o.retain(|_, v| !v.is_null());
                o.insert("required".into(), json!(required.contains(name)));
            }
            (name.clone(), f)
        })
        .collect()
}

/// The answer to `req` for `decision`, and what the transcript records of it (`None`:
/// declined or cancelled, already told by the rejection).
pub(crate) fn answer(
    decision: &Decision,
    req: &CreateElicitationRequest,
) -> (ElicitationAction, Option<String>) {
    let given = match decision {
        Decision::Rejected(RejectionCause::User | RejectionCause::Policy, _) => {
            return (ElicitationAction::Decline, None);
        }
        Decision::Rejected(..) => return (ElicitationAction::Cancel, None),
        Decision::Run => None,
        Decision::Custom(text) => Some(text.as_str()),
    };
    let form = match &req.mode {
        ElicitationMode::Form(form) => &form.requested_schema,
        ElicitationMode::Url(_) => {
            // Allowed, or answered with a plain yes: done; any other answer declines.
            let yes = given.is_none_or(|t| affirmative(t) == Some(true));
            return if yes {
                (
                    ElicitationAction::Accept(ElicitationAcceptAction::new()),
                    Some("accepted".into()),
                )
            } else {
                (ElicitationAction::Decline, None)
            };
        }
        _ => return (ElicitationAction::Decline, None),
    };
    match fill(form, given) {
        Some(content) => {
            let shown = serde_json::to_string(&content).unwrap_or_default();
            (
                ElicitationAction::Accept(ElicitationAcceptAction::new().content(content)),
                Some(shown),
            )
        }
        None => (ElicitationAction::Decline, None),
    }
}

/// A yes or a no (`yes`, `no`, `true`, `false`, `ok`, `y`, `n`), or neither.
fn affirmative(text: &str) -> Option<bool> {
    match text.trim().to_lowercase().as_str() {
        "yes" | "y" | "true" | "ok" | "done" | "accept" | "allow" => Some(true),
        "no" | "n" | "false" => Some(false),
        _ => None,
    }
}

/// The form's values: the agent's defaults, then what was given over them; `None` (so the
/// question is declined) when a required field is left empty, or a given value does not
/// fit its field — nothing is made up for the person.
fn fill(
    schema: &ElicitationSchema,
    given: Option<&str>,
) -> Option<BTreeMap<String, ElicitationContentValue>> {
    let required = schema.required.clone().unwrap_or_default();
    let mut out = BTreeMap::new();
    for (name, p) in &schema.properties {
        let value = match p {
            ElicitationPropertySchema::String(s) => {
                s.default.clone().map(ElicitationContentValue::String)
            }
            ElicitationPropertySchema::Number(n) => n.default.map(ElicitationContentValue::Number),
            ElicitationPropertySchema::Integer(n) => {
                n.default.map(ElicitationContentValue::Integer)
            }
            ElicitationPropertySchema::Boolean(b) => {
                b.default.map(ElicitationContentValue::Boolean)
            }
            ElicitationPropertySchema::Array(a) => {
                a.default.clone().map(ElicitationContentValue::StringArray)
            }
            _ => None,
        };
        if let Some(v) = value {
            out.insert(name.clone(), v);
        }
    }
    if let Some(text) = given {
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(map)) => {
                for (name, v) in map {
                    // A field the form does not have is left out; one that does not fit
                    // its field declines.
                    if let Some(p) = schema.properties.get(&name) {
                        out.insert(name, typed(p, &v)?);
                    }
                }
            }
            _ => {
                // Plain text: the one field it can be — a required one still empty first,
                // then any still empty, then any.
                let fits = |p: &ElicitationPropertySchema| plain(p, text).is_some();
                let pick = |filter: &dyn Fn(&String) -> bool| {
                    schema
                        .properties
                        .iter()
                        .find(|(n, p)| filter(n) && fits(p))
                        .map(|(n, _)| n.clone())
                };
                let target = pick(&|n| required.contains(n) && !out.contains_key(n))
                    .or_else(|| pick(&|n| !out.contains_key(n)))
                    .or_else(|| pick(&|_| true))?;
                let value = plain(schema.properties.get(&target)?, text)?;
                out.insert(target, value);
            }
        }
    }
    let empty = |v: &ElicitationContentValue| matches!(v, ElicitationContentValue::String(s) if s.trim().is_empty());
    required
        .iter()
        .all(|name| out.get(name).is_some_and(|v| !empty(v)))
        .then_some(out)
}

/// Plain text as the field `p` takes it: the text for a text field (one of its choices,
/// when it has them), a yes or no for a yes/no field, a number for a number field.
fn plain(p: &ElicitationPropertySchema, text: &str) -> Option<ElicitationContentValue> {
    let t = text.trim();
    match p {
        ElicitationPropertySchema::String(s) => {
            let choices = s.enum_values.clone().or_else(|| {
                s.one_of
                    .as_ref()
                    .map(|o| o.iter().map(|e| e.value.clone()).collect())
            });
            match choices {
                Some(c) if !c.iter().any(|v| v == t) => None,
                _ => Some(ElicitationContentValue::String(t.to_string())),
            }
        }
        ElicitationPropertySchema::Boolean(_) => {
            affirmative(t).map(ElicitationContentValue::Boolean)
        }
        ElicitationPropertySchema::Integer(_) => {
            t.parse().ok().map(ElicitationContentValue::Integer)
        }
        ElicitationPropertySchema::Number(_) => t.parse().ok().map(ElicitationContentValue::Number),
        _ => None,
    }
}

/// `v` as the field `p` takes it; `None` when it does not fit.
fn typed(p: &ElicitationPropertySchema, v: &Value) -> Option<ElicitationContentValue> {
    match (p, v) {
        (ElicitationPropertySchema::String(_), Value::String(s)) => plain(p, s),
        (ElicitationPropertySchema::Integer(_), v) => {
            v.as_i64().map(ElicitationContentValue::Integer)
        }
        (ElicitationPropertySchema::Number(_), v) => {
            v.as_f64().map(ElicitationContentValue::Number)
        }
        (ElicitationPropertySchema::Boolean(_), Value::Bool(b)) => {
            Some(ElicitationContentValue::Boolean(*b))
        }
        (ElicitationPropertySchema::Array(_), Value::Array(items)) => items
            .iter()
            .map(|i| i.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .map(ElicitationContentValue::StringArray),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_client_protocol::v1::schema::{
        BooleanPropertySchema, ElicitationFormMode, ElicitationSessionScope, ElicitationUrlMode,
        StringPropertySchema,
    };

    fn form(required: &[&str]) -> CreateElicitationRequest {
        let mut schema = ElicitationSchema::new();
        schema.properties.insert(
            "branch".into(),
            ElicitationPropertySchema::String(StringPropertySchema::new()),
        );
        schema.properties.insert(
            "force".into(),
            ElicitationPropertySchema::Boolean(BooleanPropertySchema::new()),
        );
        let mut env = StringPropertySchema::new();
        env.default = Some("staging".into());
        schema
            .properties
            .insert("env".into(), ElicitationPropertySchema::String(env));
        schema.required = Some(required.iter().map(|s| s.to_string()).collect());
        CreateElicitationRequest::new(
            ElicitationFormMode::new(ElicitationSessionScope::new("s"), schema),
            "Which branch should I deploy?",
        )
    }

    fn accepted(a: ElicitationAction) -> BTreeMap<String, ElicitationContentValue> {
        match a {
            ElicitationAction::Accept(a) => a.content.unwrap_or_default(),
            a => panic!("{a:?}"),
        }
    }

    #[test]
    fn the_question_names_its_fields() {
        let call = question("q1".into(), &form(&["branch"])).unwrap();
        assert_eq!(call.name, NAME);
        assert_eq!(call.arguments["fields"]["branch"]["required"], true);
        assert_eq!(call.arguments["fields"]["env"]["default"], "staging");
        let preview = call.metadata.unwrap()["preview"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            preview.contains("Which branch") && preview.contains("branch*"),
            "{preview}"
        );
    }

    #[test]
    fn allow_takes_the_defaults_and_declines_what_it_cannot_fill() {
        let (a, _) = answer(&Decision::Run, &form(&["env"]));
        let c = accepted(a);
        assert_eq!(c["env"], ElicitationContentValue::String("staging".into()));
        // A required yes/no without a default is not made a yes.
        let (a, _) = answer(&Decision::Run, &form(&["force"]));
        assert_eq!(a, ElicitationAction::Decline);
        let (a, _) = answer(&Decision::Custom("yes".into()), &form(&["force"]));
        assert_eq!(accepted(a)["force"], ElicitationContentValue::Boolean(true));
        let (a, _) = answer(
            &Decision::Custom(r#"{"force": "true"}"#.into()),
            &form(&["force"]),
        );
        assert_eq!(
            a,
            ElicitationAction::Decline,
            "a value of the wrong type declines"
        );
        let (a, _) = answer(
            &Decision::Custom(r#"{"branch": " "}"#.into()),
            &form(&["branch"]),
        );
        assert_eq!(
            a,
            ElicitationAction::Decline,
            "a blank required text is empty"
        );
        let (a, shown) = answer(&Decision::Run, &form(&["branch"]));
        assert_eq!(a, ElicitationAction::Decline);
        assert!(shown.is_none());
    }

    #[test]
    fn a_result_fills_the_form_as_json_or_as_the_one_text_field() {
        let (a, _) = answer(
            &Decision::Custom(r#"{"branch": "main", "force": false, "nope": 1}"#.into()),
            &form(&["branch"]),
        );
        let c = accepted(a);
        assert_eq!(c["branch"], ElicitationContentValue::String("main".into()));
        assert_eq!(c["force"], ElicitationContentValue::Boolean(false));
        assert!(!c.contains_key("nope"));
        let (a, shown) = answer(&Decision::Custom("release-2".into()), &form(&["branch"]));
        assert_eq!(
            accepted(a)["branch"],
            ElicitationContentValue::String("release-2".into())
        );
        assert!(shown.unwrap().contains("release-2"));
    }

    #[test]
    fn deny_declines_and_an_unanswered_question_is_cancelled() {
        let q = form(&[]);
        let deny = Decision::Rejected(RejectionCause::User, "no".into());
        assert_eq!(answer(&deny, &q).0, ElicitationAction::Decline);
        let late = Decision::Rejected(RejectionCause::Timeout, "timed out".into());
        assert_eq!(answer(&late, &q).0, ElicitationAction::Cancel);
        let url = CreateElicitationRequest::new(
            ElicitationUrlMode::new(
                ElicitationSessionScope::new("s"),
                "e1",
                "https://x.example/auth",
            ),
            "Sign in",
        );
        let call = question("q2".into(), &url).unwrap();
        assert_eq!(call.arguments["url"], "https://x.example/auth");
        assert!(matches!(
            answer(&Decision::Run, &url).0,
            ElicitationAction::Accept(_)
        ));
    }
}
