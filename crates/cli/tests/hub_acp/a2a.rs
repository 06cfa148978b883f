//! The official A2A Python SDK (`a2a-sdk` on PyPI) drives Switchboard's A2A server: the
//! script, `tests/a2a_client.py`, checks each answer; the server shows their effect.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_a2a_sdk_drives_tasks_approvals_cancel_and_push() {
    let world = World::new().await;
    let server = world
        .server(&[("SWITCHBOARD_A2A_PRIVATE_WEBHOOKS", "1")])
        .await;
    let c = client(&server);

    // The card needs the token, as every route but health does.
    let http = reqwest::Client::new();
    let card_url = format!("{}/.well-known/agent-card.json", server.url);
    assert_eq!(http.get(&card_url).send().await.unwrap().status(), 401);
    let card: serde_json::Value = http
        .get(&card_url)
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let skills: Vec<&str> = card["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(skills, ["builtin", "test"]);
    assert_eq!(card["supportedInterfaces"][0]["protocolBinding"], "JSONRPC");
    assert_eq!(card["supportedInterfaces"][0]["protocolVersion"], "1.0");

    let seen = python(
        "a2a_client.py",
        &[],
        &[("A2A_BASE", &server.url), ("TOKEN", TOKEN)],
    )
    .await;

    // A context is a session; the denial over A2A is the run's, with its reason.
    let builtin = Uuid::parse_str(seen["builtin_context"].as_str().unwrap()).unwrap();
    assert_eq!(
        c.get_session(builtin).await.unwrap().config.backend,
        BackendSpec::Builtin
    );
    let denied = seen["denied"].as_str().unwrap();
    let (session, _) = denied.split_once('.').unwrap();
    let (reason, by) = rejection(&server.url, Uuid::parse_str(session).unwrap()).await;
    assert!(reason.ends_with("deny: not on main"), "{reason}");
    assert_eq!(by.as_deref(), Some("an A2A client"));
    assert!(seen["pushed"].as_u64().unwrap() >= 2, "{seen}");
}

/// An ACP agent's own question, reached over A2A: the task requires input with the
/// question in the agent's words, and the client's reply is the answer the agent gets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_s_question_is_answered_by_the_a2a_client_s_reply() {
    let world = World::new().await;
    let server = world.server(&[]).await;
    let http = reqwest::Client::new();
    let rpc = |method: &str, params: serde_json::Value| {
        http.post(format!("{}/v1/a2a", server.url))
            .bearer_auth(TOKEN)
            .header("A2A-Version", "1.0")
            .json(
                &serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}),
            )
            .send()
    };
    let message = |text: &str, task: Option<&str>| {
        let mut m = serde_json::json!({"messageId": Uuid::new_v4().to_string(), "role": "ROLE_USER", "parts": [{"text": text}]});
        if let Some(t) = task {
            m["taskId"] = serde_json::json!(t);
        }
        m
    };
    let sent: serde_json::Value = rpc(
        "SendMessage",
        serde_json::json!({"message": message("[elicit]", None), "metadata": {"skill": "test"}}),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let task = &sent["result"]["task"];
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{sent}"
    );
    let asks = task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap();
    assert!(
        asks.starts_with("The agent asks: Which branch should I deploy? (fields: branch, force)"),
        "{asks}"
    );
    let id = task["id"].as_str().unwrap();
    let done: serde_json::Value = rpc(
        "SendMessage",
        serde_json::json!({"message": message("release-9", Some(id))}),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let task = &done["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
    let reply: String = task["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|a| a["parts"].as_array().unwrap())
        .filter_map(|p| p["text"].as_str())
        .collect();
    assert!(
        reply.contains(r#"answer: accept {"branch":"release-9","force":false}"#),
        "{reply}"
    );
}
