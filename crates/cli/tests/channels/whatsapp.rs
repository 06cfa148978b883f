//! The WhatsApp channel end to end: the real server, a fake WhatsApp Cloud API speaking the
//! Graph API's wire format and pushing signed deliveries to the server's webhook, and the
//! mock LLM. One scenario, in steps.

use std::time::{Duration, Instant};

use crate::WAIT;
use crate::common::*;
use serde_json::json;
use sqlx::Connection as _;
use switchboard_test_support::fake_whatsapp::{FakeWhatsApp, Sent};
use switchboard_test_support::mock_llm::{MockLlm, MockReply};

const ALICE: &str = "4915112345";
const CAROL: &str = "4915177777";
const GROUP: &str = "Y2FwaV9ncm91cDoxNzA1NTU1MDEzOToxMjAzNjM0MDQ2OTQyMzM4MjAZD";
const MALLORY: &str = "4915199999";
const VERIFY: &str = "verify-token-for-meta";

async fn wait_sent(wa: &FakeWhatsApp, what: &str, f: impl Fn(&[Sent]) -> bool) -> Vec<Sent> {
    wait_sent_to(wa, ALICE, what, f).await
}

async fn wait_sent_to(
    wa: &FakeWhatsApp,
    to: &str,
    what: &str,
    f: impl Fn(&[Sent]) -> bool,
) -> Vec<Sent> {
    let deadline = Instant::now() + WAIT;
    loop {
        let sent = wa.sent_to(to);
        if f(&sent) {
            return sent;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {sent:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whatsapp_dm_streams_approves_shares_files_and_refuses_forgeries() {
    let wa = FakeWhatsApp::start().await;
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let ws_s = ws.path().to_string_lossy().to_string();
    let base = wa.api_base();
    let env = [
        (
            "SWITCHBOARD_WHATSAPP_PHONE_NUMBER_ID",
            FakeWhatsApp::PHONE_NUMBER_ID,
        ),
        ("SWITCHBOARD_WHATSAPP_ACCESS_TOKEN", FakeWhatsApp::TOKEN),
        ("SWITCHBOARD_WHATSAPP_APP_SECRET", FakeWhatsApp::APP_SECRET),
        ("SWITCHBOARD_WHATSAPP_VERIFY_TOKEN", VERIFY),
        ("SWITCHBOARD_WHATSAPP_API_BASE", base.as_str()),
        (
            "SWITCHBOARD_WHATSAPP_ALLOWED_USERS",
            "4915112345,4915177777",
        ),
        ("SWITCHBOARD_WHATSAPP_TEMPLATE", "new_reply"),
        ("SWITCHBOARD_DEFAULT_CWD", ws_s.as_str()),
    ];
    let out = channels_test(
        "whatsapp",
        env.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
    .await;
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success() && said.contains("whatsapp: ok — Switchboard Test (+1 555-010-0199)"),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let server = start(dir.path(), &llm.base_url(), &env).await;
    wa.set_webhook(&format!(
        "{}/v1/gateway/channels/whatsapp/webhook",
        server.url
    ));

    // Meta's subscription check: the challenge for the right verify token only.
    assert_eq!(
        wa.subscribe(VERIFY, "1158201444").await,
        (200, "1158201444".into())
    );
    assert_eq!(wa.subscribe("guess", "1158201444").await.0, 401);
    // A delivery not signed with the app secret is refused, and reaches nobody.
    let forged = FakeWhatsApp::delivery(
        ALICE,
        "Alice",
        json!([{"from": ALICE, "id": "wamid.forged", "type": "text", "text": {"body": "rm -rf"}}]),
    );
    assert_eq!(wa.post_signed(&forged, "not-the-app-secret").await, 401);

    // 1. A reply streamed in paragraphs (WhatsApp cannot edit), the whole text exact; the
    //    message marked read.
    llm.push(MockReply::text_slow(
        &["First paragraph.\n\n", "Second paragraph.\n\n", "The end."],
        400,
    ));
    let hello = wa.dm(ALICE, "Alice", "hello").await;
    let sent = wait_sent(&wa, "the whole reply", |s| {
        s.iter().any(|m| m.text.contains("The end."))
    })
    .await;
    let texts: Vec<&str> = sent.iter().map(|m| m.text.as_str()).collect();
    assert_eq!(texts, ["First paragraph.", "Second paragraph.", "The end."]);
    assert!(wa.reads().contains(&hello), "marked read");
    assert_eq!(
        llm.requests().len(),
        1,
        "the forged delivery reached nobody"
    );

    // 2. A long reply is split under WhatsApp's 4,096 characters, nothing lost.
    let long: String = (0..900).map(|i| format!("word{i} ")).collect();
    llm.push(MockReply::text(&[long.as_str()]));
    wa.dm(ALICE, "Alice", "say a lot").await;
    let before = sent.len();
    let sent = wait_sent(&wa, "the long reply", |s| {
        s.iter().any(|m| m.text.contains("word899"))
    })
    .await;
    let parts = &sent[before..];
    assert!(parts.len() >= 2, "{parts:#?}");
    assert!(parts.iter().all(|m| m.text.chars().count() <= 4096));
    let joined = parts
        .iter()
        .map(|m| m.text.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    assert_eq!(
        joined.split_whitespace().collect::<Vec<_>>(),
        long.split_whitespace().collect::<Vec<_>>()
    );

    // 2b. A burst: a reply in eight paragraphs, each its own message, goes out paced by the
    //     outbox at about one a second to one person (Meta's pair rate never hit).
    let paras: Vec<String> = (1..=8).map(|i| format!("Burst {i}.\n\n")).collect();
    let paras: Vec<&str> = paras.iter().map(String::as_str).collect();
    llm.push(MockReply::text_slow(&paras, 30));
    wa.dm(ALICE, "Alice", "burst").await;
    let before = wa.sent_to(ALICE).len();
    let sent = wait_sent(&wa, "the burst", |s| {
        s.iter().any(|m| m.text.contains("Burst 8."))
    })
    .await;
    let burst: Vec<&Sent> = sent[before..]
        .iter()
        .filter(|m| m.text.starts_with("Burst"))
        .collect();
    assert!(burst.len() >= 4, "{burst:#?}");
    assert_eq!(
        burst
            .iter()
            .map(|m| m.text.as_str())
            .collect::<Vec<_>>()
            .join("\n\n")
            .split("\n\n")
            .collect::<Vec<_>>(),
        (1..=8).map(|i| format!("Burst {i}.")).collect::<Vec<_>>()
    );
    for pair in burst.windows(2) {
        let gap = pair[1].at.duration_since(pair[0].at);
        assert!(gap >= Duration::from_millis(800), "sent {gap:?} apart");
    }
    assert_eq!(wa.pair_limited(), 0);

    // 3. An approval with reply buttons: someone else's press is refused, Alice's allows.
    llm.push(MockReply::tool_call(
        "c1",
        "run_command",
        json!({"command": "touch allowed.txt"}),
    ));
    llm.push(MockReply::text(&["Ran it."]));
    wa.dm(ALICE, "Alice", "make the file").await;
    let sent = wait_sent(&wa, "the prompt", |s| {
        s.iter().any(|m| !m.buttons.is_empty())
    })
    .await;
    let prompt = sent.iter().find(|m| !m.buttons.is_empty()).unwrap().clone();
    assert_eq!(prompt.kind, "interactive");
    assert!(prompt.text.contains("allowed.txt"), "{prompt:?}");
    let (allow, _) = prompt
        .buttons
        .iter()
        .find(|(_, t)| t.starts_with("Allow"))
        .unwrap()
        .clone();
    let (deny, _) = prompt
        .buttons
        .iter()
        .find(|(_, t)| t.starts_with("Deny"))
        .unwrap()
        .clone();
    let _ = deny;
    wa.press(MALLORY, "Mallory", &prompt.id, &allow, "Allow")
        .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !ws.path().join("allowed.txt").exists(),
        "a stranger's press decides nothing"
    );
    let pressed = wa.press(ALICE, "Alice", &prompt.id, &allow, "Allow").await;
    // The prompt cannot change: the press is answered by a reply quoting it.
    let sent = wait_sent(&wa, "the reply after allow", |s| {
        s.iter().any(|m| m.text.contains("Ran it.")) && s.iter().any(|m| m.text == "Allowed")
    })
    .await;
    assert!(ws.path().join("allowed.txt").exists());
    // Meta delivers the same press again: taken once, nothing more is said.
    let again = FakeWhatsApp::delivery(
        ALICE,
        "Alice",
        json!([{"from": ALICE, "id": pressed, "timestamp": "1700000000", "type": "interactive",
            "context": {"from": "15550100199", "id": prompt.id},
            "interactive": {"type": "button_reply", "button_reply": {"id": allow, "title": "Allow"}}}]),
    );
    assert_eq!(wa.post_signed(&again, FakeWhatsApp::APP_SECRET).await, 200);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        wa.sent_to(ALICE).len(),
        sent.len(),
        "{:#?}",
        wa.sent_to(ALICE)
    );
    assert!(
        server
            .logs()
            .contains("press or reaction seen before; dropped"),
        "the second delivery of the press was not recognised"
    );

    // 4. Denied by a reply to the prompt, with a reason.
    llm.push(MockReply::tool_call(
        "c2",
        "run_command",
        json!({"command": "touch denied.txt"}),
    ));
    llm.push(MockReply::text(&["Not touching it."]));
    wa.dm(ALICE, "Alice", "another one").await;
    let sent = wait_sent(&wa, "the second prompt", |s| {
        s.iter()
            .any(|m| m.text.contains("denied.txt") && !m.buttons.is_empty())
    })
    .await;
    let prompt = sent
        .iter()
        .rev()
        .find(|m| m.text.contains("denied.txt"))
        .unwrap()
        .clone();
    wa.reply(ALICE, "Alice", &prompt.id, "deny, not today")
        .await;
    wait_sent(&wa, "the reply after deny", |s| {
        s.iter().any(|m| m.text.contains("Not touching it."))
    })
    .await;
    assert!(!ws.path().join("denied.txt").exists());

    // 5. A file each way, and a send the platform throttled is waited out.
    std::fs::write(ws.path().join("report.txt"), "all green\n").unwrap();
    llm.push(MockReply::tool_call(
        "c3",
        "send_file",
        json!({"path": "report.txt", "caption": "the report"}),
    ));
    llm.push(MockReply::text(&["Read it and sent the report."]));
    wa.throttle(1);
    wa.send_document(
        ALICE,
        "Alice",
        "notes.txt",
        "text/plain",
        b"the notes: 42\n",
        "read my notes",
    )
    .await;
    let sent = wait_sent(&wa, "the reply about the file", |s| {
        s.iter().any(|m| m.text.contains("sent the report"))
    })
    .await;
    let file = sent.iter().find(|m| m.file.is_some()).unwrap();
    assert_eq!(file.kind, "document");
    assert_eq!(file.text, "the report");
    assert_eq!(
        file.file,
        Some((Some("report.txt".into()), b"all green\n".to_vec()))
    );
    assert_eq!(
        wa.throttled(),
        1,
        "one send was throttled, then went through"
    );
    let copies: Vec<_> = std::fs::read_dir(ws.path().join(".switchboard/inbox"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(copies.len(), 1);
    assert_eq!(std::fs::read(copies[0].path()).unwrap(), b"the notes: 42\n");
    assert!(!server.logs().contains(FakeWhatsApp::TOKEN));
    assert!(!server.logs().contains(FakeWhatsApp::APP_SECRET));

    // 5b. A delivery of two messages whose second cannot be stored (a real SQLite error, from
    //     a trigger on the server's own database): answered 503, so Meta delivers it all
    //     again; the first was taken and is not taken twice, the second arrives once.
    let mut db = sqlx::SqliteConnection::connect(&format!(
        "sqlite://{}",
        dir.path().join("gateway.db").display()
    ))
    .await
    .unwrap();
    sqlx::query(
        "CREATE TRIGGER fault_second BEFORE INSERT ON inbox WHEN NEW.text = 'second of two' \
         BEGIN SELECT RAISE(ABORT, 'injected fault'); END",
    )
    .execute(&mut db)
    .await
    .unwrap();
    llm.push(MockReply::text(&["Answer A."]));
    llm.push(MockReply::text(&["Answer B."]));
    let two = FakeWhatsApp::delivery(
        ALICE,
        "Alice",
        json!([
            {"from": ALICE, "id": "wamid.two1", "type": "text", "text": {"body": "first of two"}},
            {"from": ALICE, "id": "wamid.two2", "type": "text", "text": {"body": "second of two"}},
        ]),
    );
    assert_eq!(wa.post_signed(&two, FakeWhatsApp::APP_SECRET).await, 503);
    wait_sent(&wa, "the answer to the stored one", |s| {
        s.iter().any(|m| m.text == "Answer A.")
    })
    .await;
    sqlx::query("DROP TRIGGER fault_second")
        .execute(&mut db)
        .await
        .unwrap();
    assert_eq!(wa.post_signed(&two, FakeWhatsApp::APP_SECRET).await, 200);
    wait_sent(&wa, "the answer to the redelivered one", |s| {
        s.iter().any(|m| m.text == "Answer B.")
    })
    .await;
    for text in ["first of two", "second of two"] {
        assert_eq!(
            llm.requests()
                .iter()
                .filter(|r| r.last_user_text() == text)
                .count(),
            1,
            "{text:?} reached the agent once"
        );
    }

    // 6. A group (Meta's Groups API): only a mention of the bot's number (or a quote of its
    //    message) is for it; groups take no buttons, so a prompt says how to answer, and a
    //    reply quoting it allows.
    wa.group_message(GROUP, ALICE, "Alice", None, "lunch anyone?")
        .await;
    llm.push(MockReply::text(&["Hello, group."]));
    wa.group_message(GROUP, ALICE, "Alice", None, "@15550100199 are you there?")
        .await;
    wait_sent_to(&wa, GROUP, "the group's answer", |s| {
        s.iter().any(|m| m.text == "Hello, group.")
    })
    .await;
    assert!(
        !llm.requests()
            .iter()
            .any(|r| r.last_user_text() == "lunch anyone?"),
        "the chatter is no prompt"
    );
    llm.push(MockReply::tool_call(
        "c4",
        "run_command",
        json!({"command": "touch group.txt"}),
    ));
    llm.push(MockReply::text(&["Done for the group."]));
    wa.group_message(GROUP, ALICE, "Alice", None, "@15550100199 make group.txt")
        .await;
    let sent = wait_sent_to(&wa, GROUP, "the group's prompt", |s| {
        s.iter().any(|m| m.text.contains("group.txt"))
    })
    .await;
    let prompt = sent
        .iter()
        .find(|m| m.text.contains("group.txt"))
        .unwrap()
        .clone();
    assert_eq!(prompt.kind, "text", "{prompt:?}");
    assert!(prompt.text.contains("“allow”"), "{}", prompt.text);
    // (At once: a quote of the prompt before its message id is stored waits for it.)
    wa.group_message(GROUP, ALICE, "Alice", Some(&prompt.id), "allow")
        .await;
    wait_sent_to(&wa, GROUP, "the group's reply after allow", |s| {
        s.iter().any(|m| m.text == "Done for the group.")
    })
    .await;
    assert!(
        ws.path().join("group.txt").exists(),
        "{:#?}\n{}",
        wa.sent_to(GROUP),
        server.logs()
    );

    // 7. The 24-hour window, counted from when a message was sent: Carol's came a day late,
    //    so the reply is held, the template tells her once, and tapping its button brings
    //    the reply (and reaches no agent).
    llm.push(MockReply::text(&["Sorry for the wait.\n\n", "Here it is."]));
    wa.dm_sent(
        CAROL,
        "Carol",
        "are you up?",
        Duration::from_secs(25 * 3600),
    )
    .await;
    let sent = wait_sent_to(&wa, CAROL, "the template", |s| {
        s.iter().any(|m| m.kind == "template")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let sent = if wa.sent_to(CAROL).len() > sent.len() {
        wa.sent_to(CAROL)
    } else {
        sent
    };
    assert_eq!(sent.len(), 1, "one template, nothing else: {sent:#?}");
    assert_eq!(sent[0].text, "new_reply");
    wa.tap_template(CAROL, "Carol", "Show me").await;
    let sent = wait_sent_to(&wa, CAROL, "the held reply", |s| {
        s.iter().any(|m| m.text == "Here it is.")
    })
    .await;
    let texts: Vec<&str> = sent.iter().skip(1).map(|m| m.text.as_str()).collect();
    assert_eq!(texts, ["Sorry for the wait.", "Here it is."]);
    assert!(sent.iter().all(|m| !m.failed));
    // 8. Meta refuses what the gateway thought inside the window (131047, after the send
    //    was taken): the window closes, the refused paragraphs are held in order, the
    //    template goes once, and the tap brings them.
    llm.push(MockReply::text_slow(&["Late one.\n\n", "Late two."], 700));
    // (Sent a few seconds ago: a refusal in the same second as a message is taken as
    // before it.)
    wa.dm_sent(ALICE, "Alice", "take your time", Duration::from_secs(3))
        .await;
    wa.close_window(ALICE);
    let before = wa.sent_to(ALICE).len();
    wait_sent(&wa, "the template after a refusal", |s| {
        s[before..].iter().any(|m| m.kind == "template")
    })
    .await;
    assert!(
        !llm.requests()
            .iter()
            .any(|r| r.last_user_text().contains("Show me")),
        "the tap reached no agent"
    );
    wa.tap_template(ALICE, "Alice", "Show me").await;
    let sent = wait_sent(&wa, "the refused paragraphs, again", |s| {
        s[before..]
            .iter()
            .filter(|m| !m.failed && m.text.starts_with("Late"))
            .count()
            == 2
    })
    .await;
    let delivered: Vec<&str> = sent[before..]
        .iter()
        .filter(|m| !m.failed && m.kind == "text")
        .map(|m| m.text.as_str())
        .collect();
    assert_eq!(delivered, ["Late one.", "Late two."], "{sent:#?}");
    assert_eq!(
        sent[before..]
            .iter()
            .filter(|m| m.kind == "template")
            .count(),
        1
    );

    // 9. kill -9 mid-reply: what was sent stays sent once, the interrupted run is said to
    //    have failed (once), and the next message is answered once.
    let mut server = server;
    llm.push(MockReply::text_slow(
        &[
            "Part one.\n\n",
            "Part two.\n\n",
            "Part three.\n\n",
            "Part four.",
        ],
        1500,
    ));
    wa.dm(ALICE, "Alice", "tell me slowly").await;
    wait_sent(&wa, "the reply has started", |s| {
        s.iter().any(|m| m.text == "Part one.")
    })
    .await;
    // (Not in the instant between the platform taking a message and the server recording
    // it: a crash there sends that message again, as with any platform without idempotent
    // sends; under load that instant grows.)
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.kill().await;
    let server = start(dir.path(), &llm.base_url(), &env).await;
    wa.set_webhook(&format!(
        "{}/v1/gateway/channels/whatsapp/webhook",
        server.url
    ));
    wait_sent(&wa, "the interrupted run told", |s| {
        s.iter().any(|m| m.text.contains("interrupted by restart"))
    })
    .await;
    llm.push(MockReply::text(&["Still here."]));
    wa.dm(ALICE, "Alice", "and now?").await;
    let sent = wait_sent(&wa, "the answer after the restart", |s| {
        s.iter().any(|m| m.text == "Still here.")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let sent = if wa.sent_to(ALICE).len() > sent.len() {
        wa.sent_to(ALICE)
    } else {
        sent
    };
    for (text, times) in [
        ("Part one.", 1),
        ("interrupted by restart", 1),
        ("Still here.", 1),
    ] {
        assert_eq!(
            sent.iter().filter(|m| m.text.contains(text)).count(),
            times,
            "{text:?}: {sent:#?}"
        );
    }
    for asked in ["tell me slowly", "and now?"] {
        assert_eq!(
            llm.requests()
                .iter()
                .filter(|r| r.last_user_text() == asked)
                .count(),
            1,
            "{asked:?} reached the agent once"
        );
    }
    drop(server);
}
