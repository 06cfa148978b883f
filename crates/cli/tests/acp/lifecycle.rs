//! An agent that offers `session/resume`, `session/close` and a model option
//! (`TEST_AGENT_RESUME`): resumed rather than loaded after a restart, given the session's
//! model, told when a run asks for a model it does not have, and closed when the session
//! is deleted.

use super::*;

fn notices(events: &[EventEnvelope]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            AgentEvent::Notice { message, .. } => Some(message.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_offering_resume_close_and_models_gets_them() {
    let w = World::new(&[("resumer", &[("TEST_AGENT_RESUME", "1")])]).await;
    let server = w.server(&[]).await;
    let c = client(&server);
    let id = c
        .create_session(&CreateSessionRequest {
            cwd: Some(w.ws.path().to_string_lossy().into_owned()),
            backend: Some(BackendSpec::Acp("resumer".into())),
            model: Some("smart".into()),
            ..CreateSessionRequest::default()
        })
        .await
        .unwrap()
        .id;
    let (mut events, run) = send(&c, id, "hello").await;
    let all = until_run_ends(&mut events, run).await;
    assert!(notices(&all).is_empty(), "{:?}", notices(&all));
    logged(&w, "set_model ").await;
    let agent_session = w
        .log()
        .lines()
        .find_map(|l| l.strip_prefix("new_session ").map(str::to_owned))
        .unwrap();
    assert!(
        w.log()
            .contains(&format!("set_model {agent_session} smart")),
        "{}",
        w.log()
    );

    // After a restart the agent's session is resumed (not loaded: nothing replayed), and
    // given the session's model again.
    drop(server);
    let server = w.server(&[]).await;
    let c = client(&server);
    let (mut events, run) = send(&c, id, "[count]").await;
    let all = until_run_ends(&mut events, run).await;
    assert_eq!(text_of(&all), "seen 2 prompts");
    let log = w.log();
    assert!(
        log.contains(&format!("resume_session {agent_session}")),
        "{log}"
    );
    assert!(!log.contains("load_session "), "{log}");
    assert_eq!(
        log.matches(&format!("set_model {agent_session} smart"))
            .count(),
        2,
        "{log}"
    );

    // A run that asks for a model the agent does not offer is told so.
    let mut req = SendMessageRequest::user("hi", MessageType::FollowUp);
    req.model = Some("huge".into());
    let mut events = c.subscribe(
        id,
        Some(c.get_session(id).await.unwrap().session.last_event_id),
    );
    let run = c.send_message(id, &req).await.unwrap().run_id;
    let all = until_run_ends(&mut events, run).await;
    let said = notices(&all);
    assert!(
        said.iter()
            .any(|n| n.contains("\"huge\" is not one of them") && n.contains("fast, smart")),
        "{said:?}"
    );

    // Deleting the session closes the agent's session before its process stops.
    c.delete_session(id).await.unwrap();
    logged(&w, &format!("close_session {agent_session}")).await;
}
