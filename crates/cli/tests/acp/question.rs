//! An ACP agent's own question (`elicitation/create`, the test agent's `[elicit]`) is an
//! approval like any other — listed in `/v1/approvals`, asked even in full-access — and
//! the decision is its answer: a result fills the form (here through `switchboard approve
//! --answer`), allow takes the defaults (declined when a required field has none), deny
//! declines.

use super::*;

/// Waits for the question and returns its call as `/v1/approvals` lists it.
async fn asked(
    c: &Client,
    events: &mut switchboard_client::EventStream,
) -> switchboard_protocol::ToolCall {
    until(events, "the question", |e| {
        matches!(e, AgentEvent::WaitingForToolApproval { .. })
    })
    .await;
    let waiting = c.waiting_approvals().await.unwrap();
    let call = waiting.approvals[0].tool_calls[0].clone();
    assert_eq!(call.name, "acp__elicitation");
    call
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_s_question_is_an_approval_whose_decision_answers_it() {
    let w = World::new(&[("tester", &[])]).await;
    let server = w.server(&[]).await;
    let c = client(&server);
    // Full access runs every tool unasked; a question is still asked.
    let id = w
        .session(&c, "tester", Some(PermissionMode::FullAccess))
        .await;

    let (mut events, run) = send(&c, id, "[elicit]").await;
    let call = asked(&c, &mut events).await;
    let preview = call.metadata.as_ref().unwrap()["preview"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        preview.contains("Which branch should I deploy?") && preview.contains("branch*"),
        "{preview}"
    );
    assert_eq!(call.arguments["fields"]["force"]["default"], false);
    // The CLI answers with the text of the one text field.
    let (url, session) = (server.url.clone(), id.to_string());
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(bin())
            .args(["approve", &session, "--answer", "release-2"])
            .env("SWITCHBOARD_URL", &url)
            .env("SWITCHBOARD_TOKEN", TOKEN)
            .env("SWITCHBOARD_CONFIG", "/dev/null")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rest = until_run_ends(&mut events, run).await;
    assert_eq!(
        text_of(&rest),
        r#"answer: accept {"branch":"release-2","force":false}"#
    );
    assert!(rest.iter().any(|e| matches!(&e.event, AgentEvent::ToolExecutionCompleted { tool_call_id, is_error: false, .. } if *tool_call_id == call.id)));

    // A JSON object fills several fields.
    let (mut events, run) = send(&c, id, "[elicit]").await;
    let call = asked(&c, &mut events).await;
    c.decide_tools(
        id,
        &decide(
            run,
            &call.id,
            DecisionAction::CustomResult,
            Some(r#"{"branch": "main", "force": true}"#),
        ),
    )
    .await
    .unwrap();
    let rest = until_run_ends(&mut events, run).await;
    assert_eq!(
        text_of(&rest),
        r#"answer: accept {"branch":"main","force":true}"#
    );

    // Allow alone cannot fill the required branch: declined, and the call says why.
    let (mut events, run) = send(&c, id, "[elicit]").await;
    let call = asked(&c, &mut events).await;
    c.decide_tools(id, &decide(run, &call.id, DecisionAction::Accept, None))
        .await
        .unwrap();
    let rest = until_run_ends(&mut events, run).await;
    assert_eq!(text_of(&rest), "answer: decline");
    assert!(rest.iter().any(|e| matches!(&e.event, AgentEvent::ToolExecutionCompleted { is_error: true, result, .. } if result.contains("required field"))));

    // Deny declines.
    let (mut events, run) = send(&c, id, "[elicit]").await;
    let call = asked(&c, &mut events).await;
    c.decide_tools(
        id,
        &decide(run, &call.id, DecisionAction::Reject, Some("not now")),
    )
    .await
    .unwrap();
    let rest = until_run_ends(&mut events, run).await;
    assert_eq!(text_of(&rest), "answer: decline");

    // Cancelling the run cancels the question.
    let (mut events, run) = send(&c, id, "[elicit]").await;
    asked(&c, &mut events).await;
    c.cancel(id, run).await.unwrap();
    until_run_ends(&mut events, run).await;
    logged(&w, "elicited cancel").await;
}
