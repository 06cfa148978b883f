use serde_json::json;

use super::inbound::strip;
use super::*;

const CHANNEL: &str = "c0000000000000000000000001";
const ALICE: &str = "u0000000000000000000000001";
const POST: &str = "p0000000000000000000000001";

fn channel(action_url: Option<&str>) -> MattermostChannel {
    let mut cfg = MattermostConfig::new("http://127.0.0.1:9", "bot-token");
    cfg.action_url = action_url.map(str::to_string);
    MattermostChannel::new(cfg).unwrap()
}

fn me() -> Me {
    Me {
        id: "b0000000000000000000000001".into(),
        username: "switchboard".into(),
    }
}

#[test]
fn a_mention_is_cut_out_and_noticed_only_as_a_whole_name() {
    assert_eq!(
        strip("@switchboard fix the build", "switchboard"),
        ("fix the build".into(), true)
    );
    assert_eq!(
        strip("ask @switchboard-ops later", "switchboard"),
        ("ask @switchboard-ops later".into(), false)
    );
    assert_eq!(
        strip("line one\n```\ncode @switchboard\n```", "switchboard"),
        ("line one\n```\ncode \n```".into(), true)
    );
    assert_eq!(
        strip("thanks @Switchboard.", "switchboard"),
        ("thanks .".into(), true)
    );
    assert_eq!(
        strip("ask @switchboard.ops", "switchboard"),
        ("ask @switchboard.ops".into(), false)
    );
}

#[test]
fn buttons_carry_a_signed_context_and_a_forged_or_moved_press_is_refused() {
    let ch = channel(Some(
        "https://sb.example.com/v1/gateway/channels/mattermost/webhook",
    ));
    let chat = ChatRef {
        id: CHANNEL.into(),
        kind: ChatKind::Thread,
        thread: Some(POST.into()),
    };
    let props = ch.button_props(
        &chat,
        &[
            Button {
                text: "Allow".into(),
                data: "ya:1".into(),
            },
            Button {
                text: "Deny".into(),
                data: "na:1".into(),
            },
        ],
    );
    let actions = props["attachments"][0]["actions"].as_array().unwrap();
    assert_eq!(actions.len(), 2);
    assert_eq!(actions[0]["id"], "sb0");
    assert_eq!(actions[1]["style"], "danger");
    let context = actions[0]["integration"]["context"].clone();
    let press = |context: serde_json::Value, channel: &str| {
        json!({"user_id": ALICE, "user_name": "alice", "channel_id": channel,
            "post_id": POST, "trigger_id": "t1", "context": context})
    };
    let p = ch.map_press(&press(context.clone(), CHANNEL)).unwrap();
    assert_eq!(p.data, "ya:1");
    assert_eq!(p.peer.id, ALICE);
    assert_eq!(p.chat, chat);
    assert_eq!(p.message_id, POST);
    // The context of one button with another's answer, or pressed in another channel, or
    // signed with another secret: refused.
    let mut forged = context.clone();
    forged["data"] = json!("na:1");
    assert_eq!(
        ch.map_press(&press(forged, CHANNEL)).unwrap_err(),
        InboundHttpError::Unauthorized
    );
    assert_eq!(
        ch.map_press(&press(context.clone(), "c0000000000000000000000002"))
            .unwrap_err(),
        InboundHttpError::Unauthorized
    );
    let other = {
        let mut cfg = MattermostConfig::new("http://127.0.0.1:9", "another-token");
        cfg.action_url = Some("https://x.example/".into());
        MattermostChannel::new(cfg).unwrap()
    };
    assert_eq!(
        other.map_press(&press(context, CHANNEL)).unwrap_err(),
        InboundHttpError::Unauthorized
    );
}

#[test]
fn posts_map_to_conversations_like_the_threads_they_are_in() {
    let ch = channel(None);
    assert!(!ch.info().buttons && ch.info().reactions);
    let post = |id: &str, root: &str, text: &str| {
        json!({"id": id, "user_id": ALICE, "channel_id": CHANNEL, "root_id": root,
            "message": text, "type": "", "create_at": 1})
    };
    let none = |_: &str| false;
    // A direct message: one conversation, no mention needed.
    let m = ch
        .map_post(
            &me(),
            &post(POST, "", "hello"),
            "D",
            Some("@alice"),
            false,
            none,
        )
        .unwrap();
    assert_eq!(m.message.chat.kind, ChatKind::Direct);
    assert_eq!(m.message.peer.name, "alice");
    assert!(m.thread.is_none());
    // In a channel: only with a mention, which starts a thread rooted at the post.
    assert!(
        ch.map_post(&me(), &post(POST, "", "hello"), "O", None, false, none)
            .is_none()
    );
    let m = ch
        .map_post(
            &me(),
            &post(POST, "", "@switchboard hi"),
            "O",
            None,
            false,
            none,
        )
        .unwrap();
    assert_eq!(m.message.chat.thread.as_deref(), Some(POST));
    assert_eq!(m.message.text, "hi");
    assert_eq!(
        m.thread.as_deref(),
        Some(format!("{CHANNEL}:{POST}").as_str())
    );
    // A later post in a known thread needs no mention.
    let later = post("p0000000000000000000000002", POST, "and more");
    assert!(ch.map_post(&me(), &later, "O", None, false, none).is_none());
    let m = ch
        .map_post(&me(), &later, "O", None, false, |_| true)
        .unwrap();
    assert_eq!(m.message.chat.thread.as_deref(), Some(POST));
    assert_eq!(m.message.reply_to.as_deref(), Some(POST));
    // The bot's own posts and system messages are skipped.
    let mut own = post(POST, "", "@switchboard echo");
    own["user_id"] = json!(me().id);
    assert!(ch.map_post(&me(), &own, "D", None, false, none).is_none());
    let mut system = post(POST, "", "alice joined");
    system["type"] = json!("system_join_channel");
    assert!(
        ch.map_post(&me(), &system, "D", None, false, none)
            .is_none()
    );
}

#[test]
fn the_configuration_is_checked_and_its_secrets_stay_out_of_debug() {
    let cfg = MattermostConfig::new("chat.example.com", "t");
    assert!(MattermostChannel::new(cfg).is_err());
    let cfg = MattermostConfig::new("https://chat.example.com", " ");
    assert!(MattermostChannel::new(cfg).is_err());
    let mut cfg = MattermostConfig::new("https://chat.example.com", "secret-token");
    cfg.action_secret = "secret-key".into();
    let shown = format!("{cfg:?}");
    assert!(!shown.contains("secret-token") && !shown.contains("secret-key"));
    let ch = MattermostChannel::new(cfg).unwrap();
    assert_eq!(ch.ws_url, "wss://chat.example.com/api/v4/websocket");
}
