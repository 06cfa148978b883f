//! A remote agent built with the official A2A Python SDK (`tests/a2a_server.py`) as a
//! session's backend: Switchboard is the A2A client (crates/a2a).

use super::*;
use common::a2a_agent::{SDK_AGENT_TOKEN, SdkAgent};
use switchboard_protocol::{
    AttachmentRef, InputMessage, MessageType, Role, RunErrorCode, SendMessageRequest,
};

fn ended(events: &[switchboard_protocol::EventEnvelope]) -> &AgentEvent {
    &events.last().unwrap().event
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_delegates_to_an_agent_built_with_the_a2a_sdk() {
    let world = World::new().await;
    let agent = SdkAgent::start().await;
    let mut config = std::fs::read_to_string(&world.config).unwrap();
    config.push_str(&agent.config("sdk"));
    std::fs::write(&world.config, config).unwrap();
    let mut server = world.server(&[]).await;
    let c = client(&server);
    let session = c
        .create_session(&CreateSessionRequest {
            backend: Some(BackendSpec::Acp("sdk".into())),
            cwd: Some(world.ws.path().to_string_lossy().into()),
            ..CreateSessionRequest::default()
        })
        .await
        .unwrap()
        .id;

    // The reply streams from the artifact's chunks, with the attached file as a file part.
    let file = c
        .upload_file(session, "notes.txt", "some notes\n")
        .await
        .unwrap();
    let after = c.get_session(session).await.unwrap().session.last_event_id;
    let mut events = c.subscribe(session, Some(after));
    let mut req = SendMessageRequest::user("hello there", MessageType::Message);
    req.message = InputMessage {
        attachments: vec![AttachmentRef {
            file_id: file.file_id,
        }],
        ..req.message
    };
    let run = c.send_message(session, &req).await.unwrap().run_id;
    let seen = until_run_ends(&mut events, run).await;
    assert!(
        matches!(ended(&seen), AgentEvent::RunCompleted { .. }),
        "{seen:?}"
    );
    assert_eq!(text_of(&seen), "Hello from the SDK agent. Got 1 file(s).");
    let first = agent.wait_for(|v| v["text"] == "hello there").await;
    assert_eq!(first["auth"], format!("Bearer {SDK_AGENT_TOKEN}"));
    assert_eq!(first["files"][0]["name"], "notes.txt");
    assert_eq!(first["files"][0]["size"], 11);
    let context = first["context_id"].as_str().unwrap().to_string();

    // The session is one A2A context: the next message is in the same one.
    let (mut events, run) = send(&c, session, "remember this").await;
    let seen = until_run_ends(&mut events, run).await;
    assert_eq!(text_of(&seen), format!("context {context}"));

    // input-required: what the agent asks is the reply; the next message answers the task.
    let (mut events, run) = send(&c, session, "ask me").await;
    let seen = until_run_ends(&mut events, run).await;
    assert_eq!(text_of(&seen), "Which colour?");
    assert!(
        seen.iter().any(|e| matches!(&e.event, AgentEvent::Notice { message, .. } if message.contains("asks for more input"))),
        "{seen:?}"
    );
    let asked = agent.wait_for(|v| v["text"] == "ask me").await;
    let (mut events, run) = send(&c, session, "blue").await;
    let seen = until_run_ends(&mut events, run).await;
    assert_eq!(text_of(&seen), "You chose blue");
    let answer = agent.wait_for(|v| v["text"] == "blue").await;
    assert_eq!(answer["message_task_id"], asked["task_id"]);

    // A file artifact is shared with the user.
    let (mut events, run) = send(&c, session, "a file please").await;
    let seen = until_run_ends(&mut events, run).await;
    let shared = seen
        .iter()
        .find_map(|e| match &e.event {
            AgentEvent::FileShared { file, .. } => Some(file.clone()),
            _ => None,
        })
        .expect("the file is shared");
    assert_eq!(shared.name, "table.csv");
    let (bytes, _) = c.download_file(session, shared.file_id).await.unwrap();
    assert_eq!(&bytes[..], b"col1,col2\n1,2\n");
    assert_eq!(text_of(&seen), "here is the table");

    // A failed task is a run error that says why.
    let (mut events, run) = send(&c, session, "fail now").await;
    let seen = until_run_ends(&mut events, run).await;
    match ended(&seen) {
        AgentEvent::RunError { error, code, .. } => {
            assert_eq!(*code, RunErrorCode::AgentFailed);
            assert!(error.contains("failed on purpose"), "{error}");
        }
        e => panic!("{e:?}"),
    }

    // Cancelling the run cancels the task on the agent.
    let (mut events, run) = send(&c, session, "slow work").await;
    let slow = agent.wait_for(|v| v["text"] == "slow work").await;
    c.cancel(session, run).await.unwrap();
    let seen = until_run_ends(&mut events, run).await;
    assert!(
        matches!(
            ended(&seen),
            AgentEvent::RunCompleted {
                stop_reason: switchboard_protocol::StopReason::Cancelled,
                ..
            }
        ),
        "{seen:?}"
    );
    agent.wait_for(|v| v["cancelled"] == slow["task_id"]).await;

    // After a restart the session is still the same context; the transcript kept the replies.
    server.stop().await;
    let server = world.server(&[]).await;
    let c = client(&server);
    let (mut events, run) = send(&c, session, "remember again").await;
    let seen = until_run_ends(&mut events, run).await;
    assert_eq!(text_of(&seen), format!("context {context}"));
    let transcript = c.list_messages(session, Some(100), None).await.unwrap();
    let replies: Vec<&str> = transcript
        .messages
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .map(|m| m.content.as_str())
        .collect();
    assert!(replies.contains(&"You chose blue"), "{replies:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_or_refusing_a2a_agent_fails_the_run_with_a_reason() {
    let world = World::new().await;
    let agent = SdkAgent::start().await;
    let port = free_port();
    let mut config = std::fs::read_to_string(&world.config).unwrap();
    config.push_str(&format!(
        "[agents.gone]\na2a = \"http://127.0.0.1:{port}/\"\n[agents.wrongkey]\na2a = {:?}\ntoken = \"not-the-key\"\n",
        agent.url
    ));
    std::fs::write(&world.config, config).unwrap();
    let server = world.server(&[]).await;
    let c = client(&server);
    for (name, says, retryable) in [
        ("gone", "cannot reach", true),
        ("wrongkey", "HTTP 401: check the agent's token", false),
    ] {
        let session = c
            .create_session(&CreateSessionRequest {
                backend: Some(BackendSpec::Acp(name.into())),
                ..CreateSessionRequest::default()
            })
            .await
            .unwrap()
            .id;
        let (mut events, run) = send(&c, session, "hello").await;
        let seen = until_run_ends(&mut events, run).await;
        match ended(&seen) {
            AgentEvent::RunError {
                error,
                code,
                retryable: r,
                ..
            } => {
                assert_eq!(*code, RunErrorCode::AgentFailed, "{name}");
                assert!(error.contains(says), "{name}: {error}");
                assert!(!error.contains("not-the-key"), "{error}");
                assert_eq!(*r, retryable, "{name}");
            }
            e => panic!("{name}: {e:?}"),
        }
    }
    assert!(server.logs().find("not-the-key").is_none());
}

/// Both sides are Switchboard's: a session whose backend is this same server's A2A
/// endpoint, reached with the server token, gets the built-in agent's reply streamed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switchboard_delegates_to_switchboard_over_a2a() {
    let world = World::new().await;
    let listen = format!("127.0.0.1:{}", free_port());
    let mut config = std::fs::read_to_string(&world.config).unwrap();
    config.push_str(&format!(
        "[agents.peer]\na2a = \"http://{listen}/\"\ntoken = {TOKEN:?}\n"
    ));
    std::fs::write(&world.config, config).unwrap();
    let server = world.server(&[("SWITCHBOARD_LISTEN", &listen)]).await;
    let c = client(&server);
    world
        .llm
        .push(switchboard_test_support::mock_llm::MockReply::text(&[
            "Peer ", "says hi",
        ]));
    let session = c
        .create_session(&CreateSessionRequest {
            backend: Some(BackendSpec::Acp("peer".into())),
            ..CreateSessionRequest::default()
        })
        .await
        .unwrap()
        .id;
    let (mut events, run) = send(&c, session, "hi over A2A").await;
    let seen = until_run_ends(&mut events, run).await;
    assert!(
        matches!(ended(&seen), AgentEvent::RunCompleted { .. }),
        "{seen:?}"
    );
    assert_eq!(text_of(&seen), "Peer says hi");
    assert_eq!(
        world.llm.chat_requests().last().unwrap().last_user_text(),
        "hi over A2A"
    );
    // The far side is a session of its own (the A2A context), on the built-in agent.
    let sessions = c.list_sessions(None, None).await.unwrap();
    assert_eq!(sessions.sessions.len(), 2, "{sessions:?}");

    // The far side's approval is the task's input-required: its question is this run's
    // reply, and the next message answers it on the same task — the task as it was (its
    // earlier reply, its wait) is not said again.
    world
        .llm
        .push(switchboard_test_support::mock_llm::MockReply::tool_call(
            "call_1",
            "run_command",
            serde_json::json!({"command": "echo from-the-peer"}),
        ));
    let (mut events, run) = send(&c, session, "run something").await;
    let seen = until_run_ends(&mut events, run).await;
    let asked = text_of(&seen);
    assert!(
        asked.starts_with("Approve run_command") && asked.contains("from-the-peer"),
        "{asked}"
    );
    world
        .llm
        .push(switchboard_test_support::mock_llm::MockReply::text(&[
            "It ran.",
        ]));
    let (mut events, run) = send(&c, session, "allow").await;
    let seen = until_run_ends(&mut events, run).await;
    assert!(
        matches!(ended(&seen), AgentEvent::RunCompleted { .. }),
        "{seen:?}"
    );
    assert_eq!(text_of(&seen), "It ran.");
}

/// An agent whose card says it does not stream gets `SendMessage`, and its answer is the
/// reply (the SDK refuses `SendStreamingMessage` to such an agent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_a2a_agent_that_does_not_stream_is_sent_messages_and_read() {
    let world = World::new().await;
    let agent = SdkAgent::start_with(&[("A2A_NO_STREAMING", "1")]).await;
    let mut config = std::fs::read_to_string(&world.config).unwrap();
    config.push_str(&agent.config("plain"));
    std::fs::write(&world.config, config).unwrap();
    let server = world.server(&[]).await;
    let c = client(&server);
    let session = c
        .create_session(&CreateSessionRequest {
            backend: Some(BackendSpec::Acp("plain".into())),
            ..CreateSessionRequest::default()
        })
        .await
        .unwrap()
        .id;
    for (said, reply) in [
        ("hello again", "Hello from the SDK agent."),
        ("remember", "context "),
    ] {
        let (mut events, run) = send(&c, session, said).await;
        let seen = until_run_ends(&mut events, run).await;
        assert!(
            matches!(ended(&seen), AgentEvent::RunCompleted { .. }),
            "{seen:?}"
        );
        assert!(text_of(&seen).starts_with(reply), "{seen:?}");
    }
    // One context for the two messages.
    let log = agent.log();
    assert_eq!(log[0]["context_id"], log[1]["context_id"], "{log:?}");
}
