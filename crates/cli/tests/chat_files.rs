#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! Files from chat platforms to the agent, end to end: each fake speaks its platform's file
//! API (Telegram `getFile` and the file URL, Slack `url_private` with the bot token, Discord
//! attachment URLs); the real server fetches, stores and attaches them; the mock LLM sees the
//! image part.

mod common;

use base64::Engine as _;
use common::chat::*;
use switchboard_test_support::mock_llm::MockReply;

/// A JPEG's first bytes (SOI, APP0 JFIF), then filler.
fn jpeg() -> Vec<u8> {
    let mut b = vec![
        0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10, b'J', b'F', b'I', b'F', 0x00, 0x01, 0x01, 0x00,
    ];
    b.extend((0..20_000).map(|i| (i % 253) as u8));
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_photo_from_each_platform_reaches_the_model_as_an_image() {
    let photo = jpeg();
    for platform in ["telegram", "slack", "discord"] {
        let w = World::new(platform).await;
        let _server = w.server().await;
        w.llm.push(MockReply::Text {
            chunks: vec!["That test expects 3, not 4.".into()],
            delay_ms: 0,
        });
        w.dm_file("photo", "build.jpg", "image/jpeg", &photo, "why is CI red?");
        w.wait(w.dm_chat(), "the reply", |m| m.text.contains("expects 3"))
            .await;
        let req = w
            .llm
            .requests()
            .into_iter()
            .find(|r| r.last_user_text().contains("why is CI red?"))
            .unwrap_or_else(|| panic!("{platform}: the model got the caption"));
        let b64 = base64::engine::general_purpose::STANDARD.encode(&photo);
        assert_eq!(
            req.images(),
            vec![("image/jpeg".to_string(), b64)],
            "{platform}: the photo is an image part"
        );
        let text = req.last_user_text();
        assert!(text.contains(".switchboard/inbox/"), "{platform}: {text}");
        let inbox = w.ws.path().join(".switchboard/inbox");
        let copies: Vec<_> = std::fs::read_dir(&inbox).unwrap().flatten().collect();
        assert_eq!(copies.len(), 1, "{platform}");
        assert_eq!(
            std::fs::read(copies[0].path()).unwrap(),
            photo,
            "{platform}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disguised_or_oversized_chat_file_is_refused_and_the_agent_is_told() {
    let w = World::new("telegram").await;
    let _server = w.server_with(&[("SWITCHBOARD_MAX_FILE_MB", "1")]).await;
    w.llm.push(MockReply::Text {
        chunks: vec!["Noted.".into()],
        delay_ms: 0,
    });
    let mut elf = vec![0x7f, b'E', b'L', b'F', 2, 1, 1, 0];
    elf.extend_from_slice(&[0; 8]);
    elf.extend_from_slice(&[2, 0, 0x3e, 0, 1, 0, 0, 0]);
    elf.extend(std::iter::repeat_n(1u8, 2000));
    w.dm_file("document", "cat.png", "image/png", &elf, "look at my cat");
    w.wait(w.dm_chat(), "the reply", |m| m.text.contains("Noted"))
        .await;
    let req = w
        .llm
        .requests()
        .into_iter()
        .find(|r| r.last_user_text().contains("look at my cat"))
        .unwrap();
    let text = req.last_user_text();
    assert!(req.images().is_empty());
    assert!(
        text.contains("document cat.png: not received")
            && text.contains("application/x-executable"),
        "{text}"
    );

    w.llm.push(MockReply::Text {
        chunks: vec!["Too big, I see.".into()],
        delay_ms: 0,
    });
    let big = {
        let mut b = jpeg();
        b.resize(1024 * 1024 + 10, 7);
        b
    };
    w.dm_file("document", "huge.jpg", "image/jpeg", &big, "and this one");
    w.wait(w.dm_chat(), "the reply", |m| m.text.contains("Too big"))
        .await;
    let text = w
        .llm
        .requests()
        .into_iter()
        .map(|r| r.last_user_text())
        .find(|t| t.contains("and this one"))
        .unwrap();
    assert!(
        text.contains("huge.jpg: not received") && text.contains("1 MB"),
        "{text}"
    );
}

/// An Ogg page header (`OggS`), then an Opus head, then filler: what a voice note starts with.
fn ogg_opus() -> Vec<u8> {
    let mut b = b"OggS\x00\x02".to_vec();
    b.extend_from_slice(&[0; 20]);
    b.extend_from_slice(b"OpusHead\x01\x01");
    b.extend((0..3000).map(|i| (i % 200) as u8));
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voice_note_is_transcribed_and_stays_attached() {
    let w = World::new("telegram").await;
    let speech = w.llm.base_url();
    let _server = w
        .server_with(&[
            ("SWITCHBOARD_SPEECH_BASE_URL", &speech),
            ("SWITCHBOARD_SPEECH_MODEL", "whisper-test"),
            ("SWITCHBOARD_SPEECH_API_KEY", "sk-speech-secret"),
        ])
        .await;
    w.llm.set_transcript(Some("please rerun the flaky test"));
    w.llm.push(MockReply::Text {
        chunks: vec!["Rerunning it.".into()],
        delay_ms: 0,
    });
    let voice = ogg_opus();
    w.dm_file("voice", "", "audio/ogg", &voice, "");
    w.wait(w.dm_chat(), "the reply", |m| m.text.contains("Rerunning"))
        .await;
    let calls = w.llm.transcriptions();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].model, "whisper-test");
    assert_eq!(calls[0].content, voice);
    assert_eq!(
        calls[0].authorization.as_deref(),
        Some("Bearer sk-speech-secret")
    );
    let req = w
        .llm
        .requests()
        .into_iter()
        .find(|r| r.path.contains("chat/completions"))
        .unwrap();
    let text = req.last_user_text();
    assert!(
        text.starts_with("please rerun the flaky test"),
        "the transcript is the text: {text}"
    );
    assert!(
        text.contains("audio/ogg") && text.contains(".switchboard/inbox/"),
        "the audio stays attached: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_speech_service_the_user_is_told_once() {
    let w = World::new("telegram").await;
    let _server = w.server().await;
    for i in 0..2 {
        w.llm.push(MockReply::Text {
            chunks: vec![format!("got audio {i}")],
            delay_ms: 0,
        });
        w.dm_file("voice", "", "audio/ogg", &ogg_opus(), "");
        w.wait(w.dm_chat(), "the reply", |m| {
            m.text.contains(&format!("got audio {i}"))
        })
        .await;
    }
    let hints = w
        .messages(w.dm_chat())
        .into_iter()
        .filter(|m| m.text.contains("speech-to-text"))
        .count();
    assert_eq!(hints, 1, "told once, not per voice note");
    assert!(w.llm.transcriptions().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_the_agent_sends_arrives_in_the_chat() {
    let chart = {
        let mut b = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];
        b.extend_from_slice(&[0, 0, 0, 0x0d, b'I', b'H', b'D', b'R']);
        b.extend(std::iter::repeat_n(3u8, 4000));
        b
    };
    for platform in ["telegram", "slack", "discord"] {
        let w = World::new(platform).await;
        std::fs::write(w.ws.path().join("chart.png"), &chart).unwrap();
        std::fs::write(w.ws.path().join("report.txt"), "all green\n").unwrap();
        let _server = w.server().await;
        w.llm.push(MockReply::tool_call(
            "c1",
            "send_file",
            serde_json::json!({"path": "chart.png", "caption": "the coverage chart"}),
        ));
        w.llm.push(MockReply::tool_call(
            "c2",
            "send_file",
            serde_json::json!({"path": "report.txt"}),
        ));
        w.llm.push(MockReply::tool_call(
            "c3",
            "send_file",
            serde_json::json!({"path": "../../etc/passwd"}),
        ));
        w.llm.push(MockReply::Text {
            chunks: vec!["Sent both.".into()],
            delay_ms: 0,
        });
        w.dm("send me the chart and the report");
        w.wait(w.dm_chat(), "the reply", |m| m.text.contains("Sent both"))
            .await;
        let ups = w.uploads();
        assert_eq!(ups.len(), 2, "{platform}: {ups:?}");
        let (chat, name, content, caption) = &ups[0];
        assert_eq!(chat, w.dm_chat(), "{platform}");
        assert_eq!(name, "chart.png", "{platform}");
        assert_eq!(content, &chart, "{platform}");
        assert_eq!(caption.as_deref(), Some("the coverage chart"), "{platform}");
        assert_eq!(
            (ups[1].1.as_str(), ups[1].2.as_slice()),
            ("report.txt", b"all green\n".as_slice()),
            "{platform}"
        );
        // the path outside the workspace was refused to the model, not sent
        assert!(
            w.llm
                .requests()
                .into_iter()
                .map(|r| r.body.to_string())
                .any(|b| b.contains("c3") && b.contains("outside")),
            "{platform}: the model was told the path is outside the workspace"
        );
    }
    // Telegram: a photo as a photo, the rest as a document
    let w = World::new("telegram").await;
    let Fake::Telegram(tg) = &w.fake else {
        unreachable!()
    };
    std::fs::write(w.ws.path().join("chart.png"), &chart).unwrap();
    std::fs::write(w.ws.path().join("report.txt"), "x\n").unwrap();
    let _server = w.server().await;
    for (id, path) in [("p1", "chart.png"), ("p2", "report.txt")] {
        w.llm.push(MockReply::tool_call(
            id,
            "send_file",
            serde_json::json!({"path": path}),
        ));
    }
    w.llm.push(MockReply::Text {
        chunks: vec!["Done.".into()],
        delay_ms: 0,
    });
    w.dm("both please");
    w.wait(w.dm_chat(), "the reply", |m| m.text.contains("Done"))
        .await;
    let methods: Vec<String> = tg.uploads().into_iter().map(|u| u.method).collect();
    assert_eq!(methods, ["sendPhoto", "sendDocument"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_keeps_every_file_with_who_sent_it() {
    let w = World::new("telegram").await;
    let Fake::Telegram(tg) = &w.fake else {
        unreachable!()
    };
    // one conversation for every DM, so that two people's messages batch together
    let config = w.dir.path().join("switchboard.toml");
    std::fs::write(&config, "[gateway]\ndm_scope = \"main\"\n").unwrap();
    let config = config.display().to_string();
    let _server = w
        .server_with(&[
            ("SWITCHBOARD_CONFIG", &config),
            ("SWITCHBOARD_TELEGRAM_ALLOWED_USERS", "7"),
        ])
        .await;
    w.llm
        .push(MockReply::text_slow(&["Working", " on", " it."], 1500));
    w.llm.push(MockReply::text(&["Both noted."]));
    w.dm("first task");
    let ready = |_: &switchboard_test_support::fake_telegram::FakeTelegram| {
        w.llm.chat_requests().len() == 1
    };
    tg.wait_until(WAIT, "the first run started", ready).await;
    let photo = jpeg();
    w.dm_file("photo", "", "image/jpeg", &photo, "this one");
    tg.dm(7, "bob", "and that");
    // One conversation: the reply goes where its latest message came from, bob's chat.
    w.wait("7", "the batched reply", |m| m.text.contains("Both noted"))
        .await;
    let req = &w.llm.chat_requests()[1];
    let text = req.last_user_text();
    assert!(
        text.contains("alice: this one (sent photo)") && text.contains("bob: and that"),
        "{text}"
    );
    assert_eq!(req.images().len(), 1, "the photo goes with the batch");
}

/// A phone photo is 3–5 MB: over the JSON body limit (2 MiB), under the default per-file
/// limit (20 MB). It reaches the agent whole (the upload route has the file limit, not the
/// JSON one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_file_over_the_json_limit_and_under_the_file_limit_arrives() {
    let w = World::new("telegram").await;
    let _server = w.server().await;
    w.llm.push(MockReply::Text {
        chunks: vec!["Big one.".into()],
        delay_ms: 0,
    });
    let mut big = jpeg();
    big.extend((0..3 * 1024 * 1024).map(|i| (i % 251) as u8));
    w.dm_file("document", "phone.jpg", "image/jpeg", &big, "from my phone");
    w.wait(w.dm_chat(), "the reply", |m| m.text.contains("Big one"))
        .await;
    let inbox = w.ws.path().join(".switchboard/inbox");
    let copies: Vec<_> = std::fs::read_dir(&inbox).unwrap().flatten().collect();
    assert_eq!(copies.len(), 1);
    assert_eq!(std::fs::read(copies[0].path()).unwrap(), big);
}

fn telegram(w: &World) -> &switchboard_test_support::fake_telegram::FakeTelegram {
    match &w.fake {
        Fake::Telegram(f) => f,
        _ => unreachable!(),
    }
}

/// Twelve photos sent to a busy chat: the queue is cut into batches the session takes (at
/// most 10 files each), so all twelve reach the agent, each downloaded once. (The batch used
/// to hold all twelve, be refused, and be fetched and sent again forever, jamming the chat.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn photos_sent_to_a_busy_chat_go_in_batches_the_session_takes() {
    let w = World::new("telegram").await;
    let _server = w.server().await;
    w.llm.push(MockReply::text_slow(&["Busy", "."], 500));
    w.llm.push(MockReply::text(&["Ten seen."]));
    w.llm.push(MockReply::text(&["Two more seen."]));
    w.dm("start");
    telegram(&w)
        .wait_until(std::time::Duration::from_secs(20), "the first run", |_| {
            w.llm.chat_requests().len() == 1
        })
        .await;
    for i in 0..12u8 {
        let mut photo = jpeg();
        photo.push(i);
        w.dm_file("photo", "", "image/jpeg", &photo, "");
    }
    w.wait(w.dm_chat(), "the second batch's answer", |m| {
        m.text.contains("Two more seen.")
    })
    .await;
    let reqs = w.llm.chat_requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!(reqs[1].images().len(), 10);
    assert_eq!(reqs[2].images().len(), 2);
    assert_eq!(telegram(&w).calls("getFile").len(), 12, "each fetched once");
}

/// A message the session refuses for good (here: longer than a message may be) is told to
/// the chat in words and set aside where an operator sees it (`GET /v1/gateway/parked`);
/// the chat's next message runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_refused_for_good_is_set_aside_and_the_chat_goes_on() {
    let w = World::new("telegram").await;
    let server = w.server().await;
    let huge = "x".repeat(switchboard_protocol::MAX_MESSAGE_CONTENT_BYTES + 10);
    w.dm(&huge);
    let told = w
        .wait(w.dm_chat(), "the refusal", |m| {
            m.text.starts_with("⚠️ Your message")
        })
        .await;
    assert!(told.text.contains("set aside"), "{}", told.text);
    let parked: serde_json::Value = reqwest::Client::new()
        .get(format!("{}/v1/gateway/parked", server.url))
        .bearer_auth(common::TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let list = parked["parked"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{parked}");
    assert_eq!(list[0]["code"], "validation_failed");
    assert_eq!(list[0]["senders"][0]["name"], "alice");
    w.llm.push(MockReply::text(&["Hello again."]));
    w.dm("hello");
    w.wait(w.dm_chat(), "the next reply", |m| {
        m.text.contains("Hello again.")
    })
    .await;
    assert_eq!(w.llm.chat_requests().len(), 1, "the refused one never ran");
}
