#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

const BOT: &str = "switchboard_test_bot";

#[test]
fn strips_mentions() {
    assert_eq!(
        strip_mention("@switchboard_test_bot hello", BOT),
        ("hello".into(), true)
    );
    assert_eq!(
        strip_mention("hey @Switchboard_Test_Bot what's up", BOT),
        ("hey what's up".into(), true)
    );
    assert_eq!(
        strip_mention("@switchboard_test_bot: do it", BOT),
        ("do it".into(), true)
    );
    assert_eq!(
        strip_mention("/status@switchboard_test_bot now", BOT),
        ("/status now".into(), true)
    );
    assert_eq!(
        strip_mention("ask @switchboard_test_bot2 instead", BOT),
        ("ask @switchboard_test_bot2 instead".into(), false)
    );
    assert_eq!(
        strip_mention("mail me@switchboard_test_bot", BOT),
        ("mail me@switchboard_test_bot".into(), false)
    );
    assert_eq!(
        strip_mention("ünï @switchboard_test_bot", BOT),
        ("ünï".into(), true)
    );
    assert_eq!(strip_mention("  plain  ", BOT), ("plain".into(), false));
}

#[test]
fn entity_mentions_use_utf16() {
    let me = BotIdentity {
        id: 999,
        username: BOT.into(),
    };
    let text = "🙂 @switchboard_test_bot";
    let e = vec![ApiEntity {
        kind: "mention".into(),
        offset: 3,
        length: 21,
        user: None,
    }];
    assert!(mentions_in_entities(text, Some(&e), &me));
    let e = vec![ApiEntity {
        kind: "mention".into(),
        offset: 2,
        length: 21,
        user: None,
    }];
    assert!(!mentions_in_entities(text, Some(&e), &me));
}

#[test]
fn debug_hides_the_token() {
    let cfg = TelegramConfig::new("123456:SECRET-SECRET");
    let s = format!("{cfg:?}");
    assert!(!s.contains("SECRET"), "{s}");
    let ch = TelegramChannel::new(cfg).unwrap();
    assert!(!format!("{ch:?}").contains("SECRET"));
    assert_eq!(
        ch.client.redact("http://x/bot123456:SECRET-SECRET/getMe"),
        "http://x/bot<redacted>/getMe"
    );
}

#[test]
fn rejects_bad_config() {
    assert!(TelegramChannel::new(TelegramConfig::new("")).is_err());
    assert!(TelegramChannel::new(TelegramConfig::new("no-colon")).is_err());
    assert!(TelegramChannel::new(TelegramConfig::new("1:a/b")).is_err());
    let mut cfg = TelegramConfig::new("1:abc");
    cfg.base_url = "ftp://x".into();
    assert!(TelegramChannel::new(cfg).is_err());
}
