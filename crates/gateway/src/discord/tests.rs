#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::inbound::strip_mention;
use super::*;
use crate::util::Backoff;

#[test]
fn strips_mentions() {
    assert_eq!(strip_mention("<@900> hello", "900"), "hello");
    assert_eq!(strip_mention("<@!900>, do it", "900"), "do it");
    assert_eq!(
        strip_mention("hey <@900> what's up", "900"),
        "hey what's up"
    );
    assert_eq!(
        strip_mention("ask <@9001> instead", "900"),
        "ask <@9001> instead"
    );
    assert_eq!(strip_mention("  plain  ", "900"), "plain");
    assert_eq!(strip_mention("<@900>", "900"), "");
}

#[test]
fn debug_hides_the_token() {
    let cfg = DiscordConfig::new("MTIz.SECRET.SECRET");
    let s = format!("{cfg:?}");
    assert!(!s.contains("SECRET"), "{s}");
    let ch = DiscordChannel::new(cfg).unwrap();
    assert!(!format!("{ch:?}").contains("SECRET"));
    assert_eq!(
        ch.client
            .redact_also("x MTIz.SECRET.SECRET y tok", Some("tok")),
        "x <redacted> y <redacted>"
    );
}

#[test]
fn rejects_bad_config() {
    assert!(DiscordChannel::new(DiscordConfig::new("")).is_err());
    assert!(DiscordChannel::new(DiscordConfig::new("a/b")).is_err());
    let mut cfg = DiscordConfig::new("abc");
    cfg.api_base = "ftp://x".into();
    assert!(DiscordChannel::new(cfg).is_err());
    let mut cfg = DiscordConfig::new("abc");
    cfg.gateway_url = Some("http://x".into());
    assert!(DiscordChannel::new(cfg).is_err());
}

#[test]
fn connect_urls() {
    assert_eq!(
        connect_url("wss://gateway.discord.gg"),
        "wss://gateway.discord.gg/?v=10&encoding=json"
    );
    assert_eq!(
        connect_url("ws://127.0.0.1:1/gateway/"),
        "ws://127.0.0.1:1/gateway/?v=10&encoding=json"
    );
}

#[test]
fn buttons_make_rows() {
    let ch = DiscordChannel::new(DiscordConfig::new("abc")).unwrap();
    let buttons: Vec<Button> = (0..7)
        .map(|i| Button {
            text: format!("b{i}"),
            data: format!("d{i}"),
        })
        .collect();
    let rows = ch.components(&buttons).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 2);
    assert_eq!(rows[0]["components"][0]["style"], 1);
    assert_eq!(rows[0]["components"][1]["style"], 2);
    assert_eq!(rows[1]["components"].as_array().unwrap().len(), 2);
    assert!(
        ch.components(&[Button {
            text: "x".into(),
            data: String::new()
        }])
        .is_err()
    );
}

#[test]
fn backoff_doubles_to_30s() {
    let mut b = Backoff::default();
    let waits: Vec<u64> = (0..7).map(|_| b.next_wait().as_secs()).collect();
    assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30]);
}
