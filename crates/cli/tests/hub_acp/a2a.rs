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
