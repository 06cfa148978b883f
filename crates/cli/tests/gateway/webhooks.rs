//! The signed webhook channel (and its test receiver), and Telegram's webhook mode.

use super::*;

/// A receiver for the webhook channel's outbound POSTs: checks our signature, records
/// bodies, answers with message ids.
pub(super) struct Receiver {
    pub(super) url: String,
    pub(super) got: std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
}

pub(super) const SECRET: &str = "a-webhook-secret-0123456789";

pub(super) async fn receiver() -> Receiver {
    use axum::http::HeaderMap;
    let got: std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>> = Default::default();
    let g = got.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let g = g.clone();
            async move {
                let now = chrono::Utc::now().timestamp();
                if switchboard_gateway::webhook::verify(
                    SECRET,
                    &headers,
                    &body,
                    now,
                    Duration::from_secs(300),
                )
                .is_err()
                {
                    return (
                        axum::http::StatusCode::UNAUTHORIZED,
                        "bad signature".to_string(),
                    );
                }
                let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                let mut g = g.lock().unwrap();
                g.push(v);
                (
                    axum::http::StatusCode::OK,
                    json!({"message_id": format!("m{}", g.len())}).to_string(),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Receiver { url, got }
}

pub(super) fn signed(body: &serde_json::Value, at: i64, secret: &str) -> (String, String, Vec<u8>) {
    let raw = serde_json::to_vec(body).unwrap();
    let sig = switchboard_gateway::webhook::sign(secret, at, &raw);
    (at.to_string(), sig, raw)
}

/// The server with the signed webhook channel `ops` sending to a [`receiver`], in `ws`.
pub(super) struct Hooked {
    pub(super) _dir: tempfile::TempDir,
    pub(super) llm: MockLlm,
    pub(super) rx: Receiver,
    pub(super) server: ServerProcess,
}

impl Hooked {
    pub(super) async fn start(ws: &std::path::Path) -> Hooked {
        let dir = tempfile::tempdir().unwrap();
        let llm = MockLlm::start().await;
        let rx = receiver().await;
        let config = dir.path().join("switchboard.toml");
        std::fs::write(
            &config,
            format!(
                "[channels.webhook.ops]\nsecret = {SECRET:?}\nurl = {:?}\n",
                rx.url
            ),
        )
        .unwrap();
        let (config_s, ws_s) = (
            config.to_string_lossy().to_string(),
            ws.to_string_lossy().to_string(),
        );
        let server = start(
            &dir.path().join("data"),
            &llm.base_url(),
            &[
                ("SWITCHBOARD_CONFIG", config_s.as_str()),
                ("SWITCHBOARD_DEFAULT_CWD", ws_s.as_str()),
            ],
        )
        .await;
        Hooked {
            _dir: dir,
            llm,
            rx,
            server,
        }
    }

    /// POSTs `body` to the channel's inbound route, signed for `at` with `secret`.
    pub(super) async fn post(
        &self,
        body: &serde_json::Value,
        at: i64,
        secret: &str,
    ) -> reqwest::Response {
        let (ts, sig, raw) = signed(body, at, secret);
        self.post_raw(ts, sig, raw).await
    }

    pub(super) async fn post_raw(
        &self,
        ts: String,
        sig: String,
        raw: Vec<u8>,
    ) -> reqwest::Response {
        reqwest::Client::new()
            .post(format!("{}/v1/gateway/webhook/ops", self.server.url))
            .header("x-switchboard-timestamp", ts)
            .header("x-switchboard-signature", sig)
            .header("content-type", "application/json")
            .body(raw)
            .send()
            .await
            .unwrap()
    }

    /// The first request the receiver got that satisfies `f`, waiting up to 30 s.
    pub(super) async fn sent(
        &self,
        what: &str,
        f: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        for _ in 0..600 {
            if let Some(v) = self.rx.got.lock().unwrap().iter().find(|v| f(v)) {
                return v.clone();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "timed out waiting for {what}: {:?}",
            self.rx.got.lock().unwrap()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_webhook_round_trip_and_refused_signatures() {
    let ws = tempfile::tempdir().unwrap();
    let h = Hooked::start(ws.path()).await;
    h.llm.push(MockReply::text(&["Deploy looks fine."]));
    let body = json!({"type": "message", "peer": {"id": "u1", "name": "Ops"},
                      "chat": {"id": "c1", "kind": "direct"}, "text": "how is the deploy?", "message_id": "x1"});
    let now = chrono::Utc::now().timestamp();
    assert_eq!(h.post(&body, now, SECRET).await.status(), 200);
    h.sent("the reply", |v| {
        v["type"] == "send" && v["chat"]["id"] == "c1" && v["text"] == "Deploy looks fine."
    })
    .await;
    // A wrong signature, a tampered body and a replayed old request are refused.
    let r = h.post(&body, now, "another-secret-0123456789").await;
    assert_eq!(r.status(), 401);
    let err: serde_json::Value = r.json().await.unwrap();
    assert_eq!(err["code"], "unauthorized");
    let (ts, sig, _) = signed(&body, now, SECRET);
    let tampered = serde_json::to_vec(
        &json!({"type": "message", "peer": {"id": "u1", "name": "Ops"},
        "chat": {"id": "c1", "kind": "direct"}, "text": "rm -rf", "message_id": "x2"}),
    )
    .unwrap();
    assert_eq!(h.post_raw(ts, sig, tampered).await.status(), 401);
    assert_eq!(h.post(&body, now - 3600, SECRET).await.status(), 401);
    assert_eq!(
        h.llm.chat_requests().len(),
        1,
        "only the good request reached the agent"
    );
    // A malformed body (validly signed) is a 400 naming the problem.
    let bad = json!({"type": "message", "peer": {"id": "u1"}, "chat": {"id": "c1", "kind": "channel"}, "text": "x", "message_id": "x3"});
    let r = h.post(&bad, now, SECRET).await;
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("chat.kind"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telegram_webhook_mode_checks_the_secret_token() {
    let w = World::new().await;
    let server = w
        .server(&[
            (
                "SWITCHBOARD_TELEGRAM_WEBHOOK_URL",
                "https://bot.example.com/v1/gateway/channels/telegram/webhook",
            ),
            ("SWITCHBOARD_TELEGRAM_WEBHOOK_SECRET", "s3cret_Token-1"),
        ])
        .await;
    w.tg.wait_until(WAIT, "setWebhook called", |tg| {
        !tg.calls("setWebhook").is_empty()
    })
    .await;
    let set = &w.tg.calls("setWebhook")[0];
    assert_eq!(
        set["url"],
        "https://bot.example.com/v1/gateway/channels/telegram/webhook"
    );
    assert_eq!(set["secret_token"], "s3cret_Token-1");
    w.llm.push(MockReply::text(&["Pushed and answered."]));
    let update = json!({"update_id": 1000, "message": {"message_id": 5, "date": 0,
        "from": {"id": ALICE, "is_bot": false, "first_name": "Alice"},
        "chat": {"id": ALICE, "type": "private"}, "text": "hello over the webhook"}});
    let url = format!("{}/v1/gateway/channels/telegram/webhook", server.url);
    let http = reqwest::Client::new();
    let wrong = http
        .post(&url)
        .header("x-telegram-bot-api-secret-token", "nope")
        .json(&update)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let missing = http.post(&url).json(&update).send().await.unwrap();
    assert_eq!(missing.status(), 401);
    let ok = http
        .post(&url)
        .header("x-telegram-bot-api-secret-token", "s3cret_Token-1")
        .json(&update)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    w.wait_message(ALICE, "the reply", |m| {
        m.text.contains("Pushed and answered.")
    })
    .await;
    assert!(
        w.tg.calls("getUpdates").is_empty(),
        "no polling in webhook mode"
    );
    assert_eq!(w.user_text(0), "hello over the webhook");
}
