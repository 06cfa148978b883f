#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! Forking a session (`POST /v1/sessions/{id}/fork`, `switchboard sessions fork`): a new
//! session whose history is the first one's up to a point, that its agent then goes on from
//! — and points the server refuses, with the reason.

mod common;

use common::api::{cli, person};
use common::*;
use switchboard_protocol::people::{Role, Scope};
use switchboard_protocol::{BackendSpec, CreateSessionRequest, ForkSessionQuery, SessionSummary};
use switchboard_test_support::mock_llm::{MockLlm, MockReply};

fn contents(list: &switchboard_protocol::ListMessagesResponse) -> Vec<String> {
    list.messages.iter().map(|m| m.content.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_keeps_the_history_up_to_a_point_and_goes_its_own_way() {
    let dir = tempfile::tempdir().unwrap();
    let llm = MockLlm::start().await;
    let config = test_agent_config(dir.path());
    let config = config.to_string_lossy().into_owned();
    let server = start(
        &dir.path().join("data"),
        &llm.base_url(),
        &[("SWITCHBOARD_CONFIG", config.as_str())],
    )
    .await;
    let admin = client(&server);

    // Two exchanges.
    let s = admin
        .create_session(&CreateSessionRequest {
            title: Some("Okapi plan".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    llm.push(MockReply::text(&["Okapis live in ", "the Ituri forest."]));
    let (mut events, run) = send(&admin, s.id, "where do okapis live?").await;
    until_run_ends(&mut events, run).await;
    let after_first = admin.get_session(s.id).await.unwrap().session.last_event_id;
    llm.push(MockReply::text(&["They eat leaves."]));
    let (mut events, run) = send(&admin, s.id, "what do they eat?").await;
    until_run_ends(&mut events, run).await;

    // From the CLI, at the end of the first exchange.
    let (ok, out, err) = cli(
        &server.url,
        &[
            "sessions",
            "fork",
            &s.id.to_string(),
            "--at",
            &after_first.to_string(),
            "--title",
            "Okapi plan, take two",
        ],
    );
    assert!(ok, "{err}");
    let fork: SessionSummary = serde_json::from_str(&out).unwrap();
    assert_eq!(fork.title, "Okapi plan, take two");
    assert_eq!(fork.last_event_id, after_first);
    assert_eq!(fork.cwd, s.cwd);
    let kept = admin.list_messages(fork.id, None, None).await.unwrap();
    assert_eq!(
        contents(&kept),
        ["where do okapis live?", "Okapis live in the Ituri forest."]
    );
    // Its log is the first one's up to there: read from the start, it ends at the cut.
    let log = admin.get_session(fork.id).await.unwrap().session;
    assert_eq!(log.last_event_id, after_first);

    // It goes its own way: its agent sees the first exchange and not the second.
    llm.push(MockReply::text(&["They are shy."]));
    let (mut events, run) = send(&admin, fork.id, "are they shy?").await;
    let seen = until_run_ends(&mut events, run).await;
    assert!(
        seen.iter().all(|e| e.id > after_first),
        "the fork's log goes on after the cut"
    );
    let asked = llm.chat_requests().last().unwrap().body.to_string();
    assert!(
        asked.contains("Ituri forest") && asked.contains("are they shy?"),
        "{asked}"
    );
    assert!(
        !asked.contains("what do they eat?"),
        "the fork's agent saw past the cut: {asked}"
    );
    // The first session is as it was.
    let first = admin.list_messages(s.id, None, None).await.unwrap();
    assert_eq!(first.total, 4);
    assert!(!contents(&first).iter().any(|c| c.contains("shy")));
    // Both are found by search, each with its own copy.
    let found = admin
        .search(&switchboard_protocol::search::SearchParams {
            q: "Ituri".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut where_: Vec<_> = found.hits.iter().map(|h| h.session_id).collect();
    where_.sort();
    let mut both = vec![s.id, fork.id];
    both.sort();
    assert_eq!(where_, both, "{found:?}");

    // No point: the whole log, titled after the first.
    let whole = admin
        .fork_session(s.id, &ForkSessionQuery::default())
        .await
        .unwrap();
    assert_eq!(whole.title, "Fork of Okapi plan");
    assert_eq!(
        admin
            .list_messages(whole.id, None, None)
            .await
            .unwrap()
            .total,
        4
    );

    // Refused: inside a run (the positions around it named), past the log, a blank title.
    let inside = ForkSessionQuery {
        at: Some(after_first + 1),
        title: None,
    };
    let e = admin.fork_session(s.id, &inside).await.unwrap_err();
    assert_eq!(e.status(), Some(409), "{e}");
    assert!(
        e.message()
            .unwrap()
            .contains(&format!("fork at {after_first} (before it)")),
        "{e}"
    );
    let past = ForkSessionQuery {
        at: Some(10_000),
        title: None,
    };
    let e = admin.fork_session(s.id, &past).await.unwrap_err();
    assert_eq!(
        (e.status(), e.code()),
        (Some(422), Some("unprocessable_entity")),
        "{e}"
    );
    assert!(
        e.message().unwrap().contains("past the session's log"),
        "{e}"
    );
    let blank = ForkSessionQuery {
        at: None,
        title: Some("  ".into()),
    };
    assert_eq!(
        admin.fork_session(s.id, &blank).await.unwrap_err().status(),
        Some(400)
    );

    // An agent over ACP keeps its own history: its sessions do not fork.
    let acp = admin
        .create_session(&CreateSessionRequest {
            backend: Some(BackendSpec::Acp("test".into())),
            ..Default::default()
        })
        .await
        .unwrap();
    let e = admin
        .fork_session(acp.id, &ForkSessionQuery::default())
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(422), "{e}");
    assert!(e.message().unwrap().contains("ACP"), "{e}");

    // A member forks what they may see, and owns the fork; not what they may not.
    let (ann, _) = person(
        &server,
        "ann",
        Role::Member,
        &[Scope::SessionsRead, Scope::SessionsWrite],
    )
    .await;
    let e = ann
        .fork_session(s.id, &ForkSessionQuery::default())
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(404), "{e}");
    admin
        .update_session(
            s.id,
            &switchboard_protocol::UpdateSessionRequest {
                shared_with: Some(vec!["ann".into()]),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let hers = ann
        .fork_session(s.id, &ForkSessionQuery::default())
        .await
        .unwrap();
    assert_eq!(hers.owner.as_deref(), Some("ann"));
    let mine = ann.list_sessions(None, None).await.unwrap();
    assert!(mine.sessions.iter().any(|x| x.id == hers.id));

    // MCP servers carry their owner's credentials: Ann's fork of a shared session with one
    // does not take it; the owner's own fork does.
    let tickets = switchboard_protocol::McpServerSpec {
        name: "tickets".into(),
        command: Some("/bin/true".into()),
        args: vec![],
        env: [("TICKETS_TOKEN".to_string(), "admin-secret".to_string())].into(),
        url: None,
        headers: Default::default(),
    };
    let with_mcp = admin
        .create_session(&CreateSessionRequest {
            mcp_servers: Some(vec![tickets]),
            ..Default::default()
        })
        .await
        .unwrap();
    admin
        .update_session(
            with_mcp.id,
            &switchboard_protocol::UpdateSessionRequest {
                shared_with: Some(vec!["ann".into()]),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let anns = ann
        .fork_session(with_mcp.id, &ForkSessionQuery::default())
        .await
        .unwrap();
    let cfg = admin.get_session(anns.id).await.unwrap().config;
    assert!(cfg.mcp_servers.is_empty(), "{:?}", cfg.mcp_servers);
    let owners = admin
        .fork_session(with_mcp.id, &ForkSessionQuery::default())
        .await
        .unwrap();
    let cfg = admin.get_session(owners.id).await.unwrap().config;
    assert_eq!(cfg.mcp_servers.len(), 1);
}
