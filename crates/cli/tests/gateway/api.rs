//! The gateway API and pairing: status, bindings, notifications, pairing requests, each
//! chat's state and last activity.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_chats_pair_and_commands_work() {
    let w = World::new().await;
    let server = w.server(&[]).await;
    w.tg.dm(7, "Stranger", "hello?");
    let m = w
        .wait_message(7, "a pairing code", |m| {
            m.text.contains("switchboard pairing approve")
        })
        .await;
    let code = m
        .text
        .split_whitespace()
        .skip_while(|t| *t != "telegram")
        .nth(1)
        .unwrap()
        .to_string();
    assert!(
        w.llm.chat_requests().is_empty(),
        "a stranger never reaches the agent"
    );
    let data = w.dir.path().to_string_lossy().to_string();
    let pairing = |args: Vec<String>| {
        let data = data.clone();
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(bin())
                .arg("pairing")
                .args(args)
                .env("SWITCHBOARD_DATA_DIR", &data)
                .env("SWITCHBOARD_CONFIG", "/dev/null")
                .output()
                .unwrap()
        })
    };
    let listed = pairing(vec!["list".into()]).await.unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout).to_string();
    assert!(
        listed.contains(&format!("telegram {code}")) && listed.contains("Stranger (7)"),
        "{listed}"
    );
    let wrong = pairing(vec!["refuse".into(), "telegram".into(), "NOSUCH99".into()])
        .await
        .unwrap();
    assert!(!wrong.status.success());
    let out = pairing(vec!["approve".into(), "telegram".into(), code.clone()])
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = pairing(vec!["list".into()]).await.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&listed.stdout),
        "no pending pairing requests\n"
    );
    w.llm.push(MockReply::text(&["Welcome."]));
    w.tg.dm(7, "Stranger", "hello again");
    w.wait_message(7, "a real reply", |m| m.text.contains("Welcome."))
        .await;

    // /status, /new.
    w.tg.dm(7, "Stranger", "/status");
    w.wait_message(7, "a status", |m| {
        // Its commands are sandboxed (workspace-write, this machine has Landlock).
        m.text.contains("Run: idle") && m.text.contains("Sandbox: on: workspace only, no network")
    })
    .await;
    w.tg.dm(7, "Stranger", "/new");
    w.wait_message(7, "/new confirmed", |m| {
        m.text.contains("next message starts a new session")
    })
    .await;
    let c = client(&server);
    let before = c.list_sessions(None, None).await.unwrap().total;
    w.llm.push(MockReply::text(&["Fresh."]));
    w.tg.dm(7, "Stranger", "start over");
    w.wait_message(7, "a reply in a new session", |m| m.text.contains("Fresh."))
        .await;
    assert_eq!(c.list_sessions(None, None).await.unwrap().total, before + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_api_reports_unbinds_and_sends_notifications_with_context() {
    let w = World::new().await;
    let server = w.server(&[]).await;
    w.llm.push(MockReply::text(&["Hi."]));
    w.tg.dm(ALICE, "Alice", "hello");
    w.wait_message(ALICE, "a reply", |m| m.text.contains("Hi."))
        .await;
    let http = reqwest::Client::new();
    let get = |path: &str| {
        http.get(format!("{}{path}", server.url))
            .bearer_auth(TOKEN)
            .send()
    };
    let status: serde_json::Value = get("/v1/gateway/status")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(status["channels"][0]["name"], "telegram");
    assert_eq!(status["sessions"], 1);
    let no_auth = http
        .get(format!("{}/v1/gateway/status", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(no_auth.status(), 401);
    let sessions: serde_json::Value = get("/v1/gateway/sessions")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let key = sessions["sessions"][0]["routing_key"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(key, "telegram:dm:42");

    // A notification with context: attached once to Alice's next message.
    let sent = http
        .post(format!("{}/v1/gateway/send", server.url))
        .bearer_auth(TOKEN)
        .json(
            &json!({"channel": "telegram", "target": "42", "text": "Nightly build failed.",
                      "context": {"trigger": "nightly", "output": "error[E0425]"}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status(), 200);
    w.wait_message(ALICE, "the notification", |m| {
        m.text == "Nightly build failed."
    })
    .await;
    w.llm.push(MockReply::text(&["Looking at E0425."]));
    w.tg.dm(ALICE, "Alice", "what broke?");
    w.wait_message(ALICE, "a reply", |m| m.text.contains("Looking at E0425."))
        .await;
    let last = w.llm.chat_requests().last().unwrap().body.to_string();
    assert!(
        last.contains("error[E0425]") && last.contains("nightly"),
        "{last}"
    );
    w.llm.push(MockReply::text(&["Again."]));
    w.tg.dm(ALICE, "Alice", "and now?");
    w.wait_message(ALICE, "a reply", |m| m.text.contains("Again."))
        .await;
    let last = w.llm.chat_requests().last().unwrap().body.to_string();
    assert!(
        !last.contains("error[E0425]"),
        "the context is attached once: {last}"
    );

    // Unbind: the next message starts a new session.
    let del = http
        .delete(format!("{}/v1/gateway/bindings/{key}", server.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(del.status(), 204);
    let again = http
        .delete(format!("{}/v1/gateway/bindings/{key}", server.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 404);
    let bad = http
        .post(format!("{}/v1/gateway/send", server.url))
        .bearer_auth(TOKEN)
        .json(&json!({"channel": "nope", "target": "1", "text": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 422);
    // What the document does not allow is refused: a blank target, a context that is not
    // an object.
    for body in [
        json!({"channel": "telegram", "target": " ", "text": "x"}),
        json!({"channel": "telegram", "target": "1", "text": "x", "context": [1]}),
    ] {
        let bad = http
            .post(format!("{}/v1/gateway/send", server.url))
            .bearer_auth(TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(bad.status(), 400, "{body}");
    }
    // The served document names this server's channels, so an unknown one is not
    // schema-valid there.
    let doc: serde_json::Value = http
        .get(format!("{}/openapi.json", server.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for schema in ["GatewaySendRequest", "GatewayAskRequest", "PairingDecision"] {
        assert_eq!(
            doc["components"]["schemas"][schema]["properties"]["channel"]["enum"],
            json!(["telegram"]),
            "{schema}"
        );
    }
}

/// The pairing code in the bot's answer to a stranger (`… approve telegram CODE …`).
fn pairing_code_in(m: &BotMessage) -> String {
    m.text
        .split_whitespace()
        .skip_while(|t| *t != "telegram")
        .nth(1)
        .unwrap()
        .to_string()
}

/// The gateway API as the web console calls it.
pub(super) struct Api {
    url: String,
    http: reqwest::Client,
}

impl Api {
    pub(super) fn new(server: &ServerProcess) -> Api {
        Api {
            url: server.url.clone(),
            http: reqwest::Client::new(),
        }
    }

    pub(super) async fn get(&self, path: &str) -> serde_json::Value {
        let r = self
            .http
            .get(format!("{}{path}", self.url))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "GET {path}");
        r.json().await.unwrap()
    }

    /// POSTs `body` as JSON: the status and the answer.
    pub(super) async fn post(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> (u16, serde_json::Value) {
        self.post_raw(path, "application/json", body.to_string())
            .await
    }

    async fn post_raw(
        &self,
        path: &str,
        content_type: &str,
        body: String,
    ) -> (u16, serde_json::Value) {
        let r = self
            .http
            .post(format!("{}{path}", self.url))
            .bearer_auth(TOKEN)
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or_default())
    }

    /// `GET /metrics`, as text.
    pub(super) async fn metrics(&self) -> String {
        let r = self
            .http
            .get(format!("{}/metrics", self.url))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "GET /metrics");
        r.text().await.unwrap()
    }

    /// The channel `telegram` in `GET /v1/gateway/status`.
    async fn telegram(&self) -> serde_json::Value {
        let status = self.get("/v1/gateway/status").await;
        status["channels"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "telegram")
            .unwrap()
            .clone()
    }

    /// Polls the status until the channel `telegram` is in `state`; returns its line.
    async fn wait_state(&self, state: &str) -> serde_json::Value {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let ch = self.telegram().await;
            if ch["state"] == state {
                return ch;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the channel never was {state}: {ch}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The one conversation of `GET /v1/gateway/sessions` with routing key `key`.
    async fn session(&self, key: &str) -> serde_json::Value {
        let all = self.get("/v1/gateway/sessions").await;
        all["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["routing_key"] == key)
            .unwrap_or_else(|| panic!("no session {key} in {all}"))
            .clone()
    }

    /// Polls until the conversation `key`'s last activity is after `after`; returns it.
    async fn activity_after(&self, key: &str, after: &str) -> String {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let s = self.session(key).await;
            if let Some(t) = s["last_activity"].as_str()
                && time(t) > time(after)
            {
                return t.to_string();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the last activity of {key} never moved past {after}: {s}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn time(t: &str) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339(t).unwrap().into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pairing_requests_are_listed_approved_and_refused_over_the_api() {
    let w = World::new().await;
    let server = w.server(&[]).await;
    let api = Api::new(&server);
    assert_eq!(
        api.get("/v1/gateway/pairing").await,
        json!({"requests": []})
    );
    w.tg.dm(7, "Stranger", "hello?");
    let asked = w
        .wait_message(7, "a pairing code", |m| m.text.contains("pairing approve"))
        .await;
    assert!(asked.text.contains("web console"), "{}", asked.text);
    let code = pairing_code_in(&asked);
    w.tg.dm(8, "Other", "me too");
    let code8 = pairing_code_in(&w.wait_message(8, "a second code", |_| true).await);

    let listed = api.get("/v1/gateway/pairing").await;
    let requests = listed["requests"].as_array().unwrap();
    assert_eq!(requests.len(), 2, "{listed}");
    let mine = requests
        .iter()
        .find(|r| r["code"] == code.as_str())
        .unwrap();
    assert_eq!(mine["channel"], "telegram");
    assert_eq!(mine["peer"]["id"], "7");
    assert_eq!(mine["peer"]["name"], "Stranger");
    assert_eq!(mine["chat"], json!({"id": "7", "kind": "direct"}));
    let expires = time(mine["expires_at"].as_str().unwrap());
    let left = expires - chrono::Utc::now();
    assert!(
        left > chrono::Duration::minutes(55) && left <= chrono::Duration::minutes(60),
        "valid for an hour: {left}"
    );

    // Malformed bodies: the field is named; nothing is decided.
    let approve = "/v1/gateway/pairing/approve";
    for (body, code_want, names) in [
        (json!({"channel": "telegram"}), "validation_failed", "code"),
        (
            json!({"channel": "telegram", "code": code, "extra": 1}),
            "validation_failed",
            "extra",
        ),
        (
            json!({"channel": "telegram", "code": "  "}),
            "validation_failed",
            "code",
        ),
        (
            json!({"channel": "", "code": code}),
            "validation_failed",
            "channel",
        ),
        (
            json!({"channel": "telegram", "code": 7}),
            "validation_failed",
            "code",
        ),
    ] {
        let (status, err) = api.post(approve, &body).await;
        assert_eq!(
            (status, err["code"].as_str()),
            (400, Some(code_want)),
            "{body}: {err}"
        );
        assert!(err["error"].as_str().unwrap().contains(names), "{err}");
    }
    let (status, err) = api
        .post_raw(approve, "application/json", "{not json".into())
        .await;
    assert_eq!((status, err["code"].as_str()), (400, Some("invalid_json")));
    let (status, err) = api
        .post_raw(
            approve,
            "text/plain",
            json!({"channel": "telegram", "code": code}).to_string(),
        )
        .await;
    assert_eq!(
        (status, err["code"].as_str()),
        (415, Some("unsupported_media_type"))
    );
    let unauthenticated = reqwest::Client::new()
        .post(format!("{}{approve}", server.url))
        .json(&json!({"channel": "telegram", "code": code}))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthenticated.status(), 401);
    // Unknown codes, and codes of another channel.
    for body in [
        json!({"channel": "telegram", "code": "NOSUCH99"}),
        json!({"channel": "slack", "code": code}),
    ] {
        for route in [approve, "/v1/gateway/pairing/refuse"] {
            let (status, err) = api.post(route, &body).await;
            assert_eq!(
                (status, err["code"].as_str()),
                (404, Some("pairing_not_found")),
                "{route} {body}: {err}"
            );
            assert!(
                err["error"]
                    .as_str()
                    .unwrap()
                    .contains(body["code"].as_str().unwrap())
            );
        }
    }
    assert_eq!(
        api.get("/v1/gateway/pairing").await["requests"]
            .as_array()
            .unwrap()
            .len(),
        2,
        "nothing was decided"
    );
    assert!(w.llm.chat_requests().is_empty());

    // Approved (the code as typed by a person): the stranger's next message reaches the agent.
    let (status, approved) = api
        .post(
            approve,
            &json!({"channel": "telegram", "code": format!(" {} ", code.to_lowercase())}),
        )
        .await;
    assert_eq!(status, 200, "{approved}");
    assert_eq!(&approved, mine, "the request approved");
    let (status, again) = api
        .post(approve, &json!({"channel": "telegram", "code": code}))
        .await;
    assert_eq!(
        (status, again["code"].as_str()),
        (404, Some("pairing_not_found"))
    );
    w.llm.push(MockReply::text(&["Welcome."]));
    w.tg.dm(7, "Stranger", "hello again");
    w.wait_message(7, "a real reply", |m| m.text.contains("Welcome."))
        .await;
    assert_eq!(w.user_text(0), "hello again");

    // Refused: gone from the list, and the person is told once.
    let (status, refused) = api
        .post(
            "/v1/gateway/pairing/refuse",
            &json!({"channel": "telegram", "code": code8}),
        )
        .await;
    assert_eq!(status, 200, "{refused}");
    assert_eq!(refused["peer"]["id"], "8");
    w.wait_message(8, "the refusal", |m| m.text.contains("declined"))
        .await;
    assert_eq!(
        api.get("/v1/gateway/pairing").await,
        json!({"requests": []})
    );
    let (status, _) = api
        .post(
            "/v1/gateway/pairing/refuse",
            &json!({"channel": "telegram", "code": code8}),
        )
        .await;
    assert_eq!(status, 404);
    // Still a stranger: a new message asks anew and never reaches the agent.
    w.tg.dm(8, "Other", "please?");
    w.tg.wait_until(WAIT, "a new code", |tg| {
        tg.bot_messages(8)
            .iter()
            .filter(|m| m.text.contains("pairing approve"))
            .count()
            == 2
    })
    .await;
    assert_eq!(w.llm.chat_requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_state_and_last_activity_for_the_console() {
    let w = World::new().await;
    let server = w.server(&[]).await;
    let api = Api::new(&server);
    let up = api.wait_state("connected").await;
    assert_eq!(up["status"], "polling");
    assert!(up["since"].is_string(), "{up}");
    assert_eq!(up["reason"], serde_json::Value::Null);

    w.llm.push(MockReply::text(&["Hi."]));
    w.tg.dm(ALICE, "Alice", "hello");
    w.wait_message(ALICE, "a reply", |m| m.text.contains("Hi."))
        .await;
    let key = "telegram:dm:42";
    let s = api.session(key).await;
    assert_eq!(s["channel"], "telegram");
    assert_eq!(s["chat"], json!({"id": "42", "kind": "direct"}));
    assert_eq!(s["peer"]["name"], "Alice");
    let first = s["last_activity"].as_str().unwrap().to_string();
    assert!(chrono::Utc::now() - time(&first) < chrono::Duration::seconds(30));

    // A test message from the console, with the conversation's own fields: it lands in the
    // chat, and counts as activity.
    let (status, sent) = api
        .post(
            "/v1/gateway/send",
            &json!({
                "channel": s["channel"],
                "target": s["chat"]["id"],
                "thread": s["chat"]["thread"],
                "kind": s["chat"]["kind"],
                "text": "Test message from the console.",
            }),
        )
        .await;
    assert_eq!(status, 200, "{sent}");
    let m = w
        .wait_message(ALICE, "the test message", |m| {
            m.text == "Test message from the console."
        })
        .await;
    assert_eq!(sent["message_id"], m.message_id.to_string());
    let second = api.activity_after(key, &first).await;
    // A message from the chat moves it again.
    w.llm.push(MockReply::text(&["Again."]));
    w.tg.dm(ALICE, "Alice", "and now?");
    w.wait_message(ALICE, "a reply", |m| m.text.contains("Again."))
        .await;
    api.activity_after(key, &second).await;
    let (status, err) = api
        .post(
            "/v1/gateway/send",
            &json!({"channel": "telegram", "target": "42", "kind": "thread", "text": "x"}),
        )
        .await;
    // One field read against another: 422, as the document says.
    assert_eq!(
        (status, err["code"].as_str()),
        (422, Some("unprocessable_entity"))
    );

    // Telegram fails: reconnecting, then failing, with the reason; connected after.
    w.tg.outage("getUpdates", 3);
    let down = api.wait_state("reconnecting").await;
    let reason = down["reason"].as_str().unwrap();
    assert!(reason.contains("Bad Gateway"), "{down}");
    assert!(!reason.contains(FakeTelegram::TOKEN), "{down}");
    let failing = api.wait_state("failing").await;
    assert!(
        failing["reason"].as_str().unwrap().contains("Bad Gateway"),
        "{failing}"
    );
    assert_eq!(
        failing["since"], down["since"],
        "since: when the failures began"
    );
    assert!(failing["status"].as_str().unwrap().starts_with("error: "));
    let back = api.wait_state("connected").await;
    assert_eq!(back["reason"], serde_json::Value::Null);
    assert!(
        back["last_error"].as_str().unwrap().contains("Bad Gateway"),
        "{back}"
    );
    assert!(back["last_error_at"].is_string(), "{back}");
    assert_eq!(w.tg.outage_left("getUpdates"), 0);
    // And it receives again.
    w.llm.push(MockReply::text(&["Back."]));
    w.tg.dm(ALICE, "Alice", "still there?");
    w.wait_message(ALICE, "a reply after the outage", |m| {
        m.text.contains("Back.")
    })
    .await;
}

/// A channel that is connected but deaf: Telegram in webhook mode holds a message it cannot
/// deliver (its `getWebhookInfo` counts it and names the error). Quiet past
/// `deaf_after_secs`, the channel is `degraded` with Telegram's count and error as the
/// reason, and the gauge says so; once an update arrives it is `connected` again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_the_platform_cannot_reach_is_degraded() {
    let w = World::new().await;
    let hook = "https://bot.example.com/v1/gateway/channels/telegram/webhook";
    let server = w
        .server(&[
            ("SWITCHBOARD_TELEGRAM_WEBHOOK_URL", hook),
            ("SWITCHBOARD_TELEGRAM_WEBHOOK_SECRET", "s3cret_Token-1"),
            ("SWITCHBOARD_GATEWAY_DEAF_AFTER_SECS", "1"),
        ])
        .await;
    let api = Api::new(&server);
    let up = api.wait_state("connected").await;
    assert_eq!(up["last_received_at"], serde_json::Value::Null, "{up}");
    // Quiet, and Telegram holds nothing: still connected.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(api.telegram().await["state"], "connected");
    assert!(
        !w.tg.calls("getWebhookInfo").is_empty(),
        "the platform was asked"
    );

    // A message Telegram cannot deliver to the webhook.
    w.tg.webhook_error(Some("Connection timed out"));
    w.tg.dm(ALICE, "Alice", "is anyone there?");
    let deaf = api.wait_state("degraded").await;
    let why = deaf["reason"].as_str().unwrap();
    assert!(
        why.contains("holds 1 update(s)") && why.contains("Connection timed out"),
        "{deaf}"
    );
    let metrics = api.metrics().await;
    assert!(
        metrics.contains("switchboard_gateway_channel_degraded{channel=\"telegram\"} 1"),
        "{metrics}"
    );

    // The console shows it, in headless Chromium (`tests/e2e/degraded.mjs`); the script
    // asks for the update to arrive, then sees the channel connected again.
    let mut script = common::browser::Script::start(
        "degraded.mjs",
        &[("SB_URL", &server.url), ("SB_TOKEN", TOKEN)],
        Duration::from_secs(120),
    );
    while let Some(cmd) = script.next_command().await {
        assert_eq!(cmd["cmd"], "deliver", "{cmd}");
        // The webhook reaches the server again: Telegram delivers what it held (and holds
        // nothing more), the channel hears.
        w.llm.push(MockReply::text(&["Here."]));
        let held = w.tg.take_webhook_updates();
        assert_eq!(held.len(), 1, "{held:?}");
        let r = reqwest::Client::new()
            .post(format!(
                "{}/v1/gateway/channels/telegram/webhook",
                server.url
            ))
            .header("x-telegram-bot-api-secret-token", "s3cret_Token-1")
            .json(&held[0])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        script.answer(serde_json::json!({"ok": true})).await;
    }
    script.finish(|| server.logs()).await;
    common::browser::assert_shots(&["channel-degraded.png"]);
    let back = api.wait_state("connected").await;
    assert!(back["last_received_at"].is_string(), "{back}");
    assert_eq!(back["reason"], serde_json::Value::Null);
    w.wait_message(ALICE, "the reply", |m| m.text.contains("Here."))
        .await;
}
