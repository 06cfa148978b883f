#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::util::Backoff;

#[test]
fn strips_mentions() {
    assert_eq!(
        strip_mention("<@UBOT> hello", "UBOT"),
        ("hello".into(), true)
    );
    assert_eq!(
        strip_mention("hey <@UBOT|switchboard> what's up", "UBOT"),
        ("hey what's up".into(), true)
    );
    assert_eq!(
        strip_mention("<@UBOT>: do it", "UBOT"),
        ("do it".into(), true)
    );
    assert_eq!(
        strip_mention("ask <@UBOT2> instead", "UBOT"),
        ("ask <@UBOT2> instead".into(), false)
    );
    assert_eq!(strip_mention("  plain ", "UBOT"), ("plain".into(), false));
}

#[test]
fn inline_markdown_to_mrkdwn() {
    assert_eq!(mrkdwn("a **bold** b"), "a *bold* b");
    assert_eq!(mrkdwn("an *italic* word"), "an _italic_ word");
    assert_eq!(mrkdwn("~~gone~~"), "~gone~");
    assert_eq!(
        mrkdwn("see [the docs](https://x.y/a?b=1&c=2)"),
        "see <https://x.y/a?b=1&amp;c=2|the docs>"
    );
    assert_eq!(mrkdwn("<https://x.y>"), "<https://x.y>");
    assert_eq!(
        mrkdwn("<!channel> a<b & c>d"),
        "&lt;!channel&gt; a&lt;b &amp; c&gt;d"
    );
    assert_eq!(mrkdwn("run `a **b** <c>`"), "run `a **b** &lt;c&gt;`");
    assert_eq!(mrkdwn("2 * 3 * 4"), "2 * 3 * 4");
    assert_eq!(mrkdwn("by <@U123> in <#C1|x>"), "by <@U123> in <#C1|x>");
    assert_eq!(mrkdwn("<@here>"), "&lt;@here&gt;");
    assert_eq!(
        escape_keep_mentions("<!here> & <@U1> <b>"),
        "&lt;!here&gt; &amp; <@U1> &lt;b&gt;"
    );
    assert_eq!(mrkdwn("[not a link](nope)"), "[not a link](nope)");
    assert_eq!(mrkdwn("**unclosed"), "**unclosed");
}

#[test]
fn debug_and_errors_hide_secrets() {
    let mut cfg = SlackConfig::new("xoxb-SECRET-BOT");
    cfg.app_token = Some("xapp-SECRET-APP".into());
    cfg.signing_secret = Some("SECRETSIGN".into());
    let s = format!("{cfg:?}");
    assert!(!s.contains("SECRET"), "{s}");
    let ch = SlackChannel::new(cfg).unwrap();
    assert!(!format!("{ch:?}").contains("SECRET"));
    assert_eq!(
        ch.redact("a xoxb-SECRET-BOT b xapp-SECRET-APP c SECRETSIGN"),
        "a <redacted> b <redacted> c <redacted>"
    );
}

#[test]
fn rejects_bad_config() {
    let with_app = |t: &str| {
        let mut c = SlackConfig::new(t);
        c.app_token = Some("xapp-1".into());
        c
    };
    assert!(SlackChannel::new(with_app("")).is_err());
    assert!(SlackChannel::new(with_app("xoxp-user")).is_err());
    assert!(SlackChannel::new(with_app("xoxb-a b")).is_err());
    assert!(SlackChannel::new(SlackConfig::new("xoxb-1")).is_err());
    let mut c = with_app("xoxb-1");
    c.app_token = Some("xoxb-1".into());
    assert!(SlackChannel::new(c).is_err());
    let mut c = with_app("xoxb-1");
    c.api_base = "ftp://x".into();
    assert!(SlackChannel::new(c).is_err());
    assert!(SlackChannel::new(with_app("xoxb-1")).is_ok());
}

#[test]
fn backoff_doubles_to_30s() {
    let mut b = Backoff::default();
    let waits: Vec<u64> = (0..7).map(|_| b.next_wait().as_secs()).collect();
    assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30]);
}

#[test]
fn signature_matches_slacks_example() {
    // The example from Slack's "Verifying requests from Slack" guide.
    let body = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    assert_eq!(
        signature("8f742231b10e8888abcd99yyyzzz85a5", "1531420618", body),
        "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
    );
}

/// wss:// goes through rustls (its process-default crypto provider must resolve): a TLS
/// handshake against a plain TCP peer fails with an error, not a panic.
#[tokio::test]
async fn wss_uses_rustls_without_panicking() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        if let Ok((mut sock, _)) = listener.accept().await {
            use tokio::io::AsyncWriteExt;
            let _ = sock.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
        }
    });
    let r = crate::platform::connect_ws(&format!("wss://127.0.0.1:{}/socket", addr.port())).await;
    let err = r.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        err.to_lowercase().contains("tls")
            || err.contains("InvalidContentType")
            || err.contains("corrupt"),
        "{err}"
    );
}

#[test]
fn mention_helper() {
    assert_eq!(mention("U123"), "<@U123>");
}
