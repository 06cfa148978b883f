//! `[elicit]`: the agent asks the person a question (`elicitation/create`, a form with a
//! required `branch` and a `force` yes/no defaulting to no) and says the answer it got:
//! `answer: accept {"branch":"…","force":false}`, `answer: decline`, `answer: cancel`.

use agent_client_protocol::Error;
use agent_client_protocol::v1::schema::{
    BooleanPropertySchema, CreateElicitationRequest, ElicitationAction, ElicitationFormMode,
    ElicitationPropertySchema, ElicitationSchema, ElicitationSessionScope, StringPropertySchema,
};

use crate::turn::Turn;

impl Turn {
    pub(crate) async fn elicit(&mut self) -> Result<(), Error> {
        let mut schema = ElicitationSchema::new();
        let mut branch = StringPropertySchema::new();
        branch.description = Some("the branch to deploy".into());
        schema
            .properties
            .insert("branch".into(), ElicitationPropertySchema::String(branch));
        let mut force = BooleanPropertySchema::new();
        force.default = Some(false);
        schema
            .properties
            .insert("force".into(), ElicitationPropertySchema::Boolean(force));
        schema.required = Some(vec!["branch".into()]);
        let request = CreateElicitationRequest::new(
            ElicitationFormMode::new(ElicitationSessionScope::new(self.session.clone()), schema),
            "Which branch should I deploy?",
        );
        let answer = self.cx.send_request(request).block_task().await?;
        let said = match answer.action {
            ElicitationAction::Accept(a) => format!(
                "accept {}",
                serde_json::to_string(&a.content.unwrap_or_default()).unwrap_or_default()
            ),
            ElicitationAction::Decline => "decline".into(),
            ElicitationAction::Cancel => "cancel".into(),
            _ => "other".into(),
        };
        self.shared.log(&format!("elicited {said}"));
        self.say(&format!("answer: {said}"))
    }
}
