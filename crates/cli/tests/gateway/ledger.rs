//! The delivery ledger through the fake Telegram: what became of an allowed, a refused, a
//! duplicate, an edited and a failed message, the retry of the failed one, and the counts
//! on `/metrics`.

use super::api::Api;
use super::*;

/// The entries of `GET /v1/gateway/messages?{query}`, newest first.
async fn entries(api: &Api, query: &str) -> Vec<serde_json::Value> {
    api.get(&format!("/v1/gateway/messages?{query}")).await["messages"]
        .as_array()
        .unwrap()
        .clone()
}

/// Polls until the entry of Telegram message `message_id` in `chat` whose kind of
/// status is `status` shows; returns it.
async fn wait_entry(api: &Api, chat: i64, message_id: i64, status: &str) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let all = entries(api, &format!("chat={chat}")).await;
        if let Some(e) = all.iter().find(|e| {
            e["message_id"].as_str() == Some(&*message_id.to_string()) && e["status"] == status
        }) {
            return e.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "message {message_id} never was {status}: {all:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_delivery_ledger_tells_what_became_of_each_message() {
    let w = World::new().await;
    let server = w.server(&[]).await;
    let api = Api::new(&server);

    // Allowed: answered, with the reply's Telegram message id.
    w.llm.push(MockReply::text(&["First answer."]));
    let first = w.tg.dm(ALICE, "Alice", "first question");
    let answered = wait_entry(&api, ALICE, first, "answered").await;
    let reply = w
        .wait_message(ALICE, "the reply", |m| m.text == "First answer.")
        .await;
    assert_eq!(answered["kind"], "message");
    assert_eq!(answered["text"], "first question");
    assert_eq!(answered["peer"]["name"], "Alice");
    assert_eq!(answered["attempts"], 1);
    assert!(answered["run_id"].is_string() && answered["session_id"].is_string());
    let out = answered["outbound"].as_array().unwrap();
    assert_eq!(out.len(), 1, "{answered}");
    assert_eq!(out[0]["kind"], "reply");
    assert_eq!(out[0]["id"], reply.message_id.to_string());
    assert_eq!(out[0]["attempts"], 1);

    // Refused: a stranger's message is ignored as not allowed (and gets a pairing code).
    let stranger = w.tg.dm(7, "Stranger", "let me in");
    let refused = wait_entry(&api, 7, stranger, "ignored").await;
    assert_eq!(refused["reason"], "not_allowed");
    assert_eq!(refused["text"], "let me in");

    // A duplicate: Telegram delivers the first message again in a new update.
    let again = json!({"message_id": first, "date": 0,
        "from": {"id": ALICE, "is_bot": false, "first_name": "Alice"},
        "chat": {"id": ALICE, "type": "private", "first_name": "Alice"}, "text": "first question"});
    w.tg.push_update("message", again.clone());
    let duplicate = wait_entry(&api, ALICE, first, "ignored").await;
    assert_eq!(duplicate["reason"], "duplicate");
    assert_eq!(duplicate["duplicate_of"], answered["id"]);
    // An edit of it: noted, not acted on.
    let mut edit = again;
    edit["text"] = json!("first question, edited");
    edit["edit_date"] = json!(1);
    w.tg.push_update("edited_message", edit);
    let deadline = tokio::time::Instant::now() + WAIT;
    while !entries(&api, &format!("chat={ALICE}&status=ignored"))
        .await
        .iter()
        .any(|e| e["reason"] == "edited")
    {
        assert!(tokio::time::Instant::now() < deadline, "no edited entry");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(w.llm.chat_requests().len(), 1, "neither reached the agent");

    // Failed: the model breaks, the run fails; the entry says why.
    w.llm.push(MockReply::status(
        500,
        r#"{"error":{"message":"the model broke"}}"#,
    ));
    let broken = w.tg.dm(ALICE, "Alice", "second question");
    let failed = wait_entry(&api, ALICE, broken, "failed").await;
    let why = failed["reason"].as_str().unwrap();
    assert!(why.starts_with("the run failed: "), "{failed}");
    let notice = w
        .wait_message(ALICE, "the failure notice", |m| {
            m.text.starts_with("⚠️ The run failed")
        })
        .await;
    // The notice is recorded once it is posted (just after the run's settling).
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let e = wait_entry(&api, ALICE, broken, "failed").await;
        if e["outbound"].as_array().unwrap().iter().any(|o| {
            o["kind"] == "notice" && o["id"].as_str() == Some(&*notice.message_id.to_string())
        }) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no notice in {e}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Retry: queued again, run again, answered; attempts 2.
    w.llm.push(MockReply::text(&["Second answer."]));
    let id = failed["id"].as_i64().unwrap();
    let (status, retried) = api
        .post(&format!("/v1/gateway/messages/{id}/retry"), &json!({}))
        .await;
    assert_eq!(status, 200, "{retried}");
    assert!(
        ["queued", "in_run", "answered"].contains(&retried["status"].as_str().unwrap()),
        "{retried}"
    );
    let redone = wait_entry(&api, ALICE, broken, "answered").await;
    assert_eq!(redone["id"], failed["id"], "the same entry");
    assert_eq!(redone["attempts"], 2);
    assert_eq!(redone["reason"], serde_json::Value::Null);
    assert_ne!(redone["run_id"], failed["run_id"]);
    w.wait_message(ALICE, "the retried reply", |m| m.text == "Second answer.")
        .await;
    assert_eq!(w.user_text(2), "second question", "the same text, again");

    // Only a failed message is retried; an unknown entry is 404.
    let (status, body) = api
        .post(&format!("/v1/gateway/messages/{id}/retry"), &json!({}))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("conflict")),
        "{body}"
    );
    let (status, body) = api
        .post("/v1/gateway/messages/999999/retry", &json!({}))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("not_found")),
        "{body}"
    );

    // Filters and pages.
    let ignored = entries(&api, "status=ignored").await;
    let mut reasons: Vec<&str> = ignored
        .iter()
        .map(|e| e["reason"].as_str().unwrap())
        .collect();
    reasons.sort();
    assert_eq!(reasons, ["duplicate", "edited", "not_allowed"]);
    assert_eq!(entries(&api, "chat=7").await.len(), 1);
    assert_eq!(entries(&api, "channel=nosuch").await.len(), 0);
    let page = api.get("/v1/gateway/messages?limit=2").await;
    assert_eq!(page["messages"].as_array().unwrap().len(), 2);
    let next = page["next"].as_i64().unwrap();
    let rest = api
        .get(&format!("/v1/gateway/messages?limit=10&before={next}"))
        .await;
    assert_eq!(rest["messages"].as_array().unwrap().len(), 3, "{rest}");
    assert_eq!(rest["next"], serde_json::Value::Null);

    // Bad queries are refused with what is wrong.
    for (query, code) in [
        ("limit=0", "validation_failed"),
        ("limit=201", "validation_failed"),
        ("before=0", "validation_failed"),
        ("status=lost", "invalid_query"),
        ("limit=many", "invalid_query"),
    ] {
        let r = reqwest::Client::new()
            .get(format!("{}/v1/gateway/messages?{query}", server.url))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{query}");
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["code"], code, "{query}: {body}");
    }

    // The counts.
    let metrics = api.metrics().await;
    for line in [
        "switchboard_gateway_messages_received_total{channel=\"telegram\"} 5",
        "switchboard_gateway_duplicates_suppressed_total{channel=\"telegram\"} 1",
        "switchboard_gateway_messages_ignored_total{channel=\"telegram\",reason=\"not_allowed\"} 1",
        "switchboard_gateway_messages_ignored_total{channel=\"telegram\",reason=\"edited\"} 1",
        "switchboard_gateway_messages_answered_total{channel=\"telegram\"} 2",
        "switchboard_gateway_messages_failed_total{channel=\"telegram\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
}
