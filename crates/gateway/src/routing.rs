//! Routing keys and session titles.

use crate::channel::{ChatKind, ChatRef, Peer};
use crate::config::DmScope;

/// The key that picks a conversation's session: DMs by scope, groups per group, threads per
/// thread — or, with `thread_sessions` off, per the group they are in.
pub fn routing_key(
    scope: DmScope,
    thread_sessions: bool,
    channel: &str,
    peer: &Peer,
    chat: &ChatRef,
) -> String {
    match chat.kind {
        ChatKind::Thread if !thread_sessions => format!("{channel}:group:{}", chat.id),
        ChatKind::Direct => match scope {
            DmScope::Main => "main".into(),
            DmScope::PerPeer => format!("dm:{}", peer.id),
            DmScope::PerChannelPeer => format!("{channel}:dm:{}", peer.id),
        },
        ChatKind::Group => format!("{channel}:group:{}", chat.id),
        ChatKind::Thread => format!(
            "{channel}:thread:{}:{}",
            chat.id,
            chat.thread.as_deref().unwrap_or("")
        ),
    }
}

/// A session title from the template (`{channel}`, `{peer}`, `{chat_type}`, `{chat_id}`).
pub fn title(template: &str, channel: &str, peer: &Peer, chat: &ChatRef) -> String {
    let t = template
        .replace("{channel}", channel)
        .replace("{peer}", &peer.name)
        .replace("{chat_type}", chat.kind.as_str())
        .replace("{chat_id}", &chat.id);
    let t: String = t.chars().filter(|c| !c.is_control()).take(200).collect();
    if t.trim().is_empty() {
        "Chat".into()
    } else {
        t.trim().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(id: &str) -> Peer {
        Peer {
            id: id.into(),
            name: format!("user{id}"),
            username: None,
        }
    }

    fn chat(kind: ChatKind, id: &str, thread: Option<&str>) -> ChatRef {
        ChatRef {
            id: id.into(),
            kind,
            thread: thread.map(str::to_string),
        }
    }

    fn routing_key_t(scope: DmScope, channel: &str, peer: &Peer, chat: &ChatRef) -> String {
        routing_key(scope, true, channel, peer, chat)
    }

    #[test]
    fn threads_share_their_chat_s_session_when_asked() {
        let t1 = chat(ChatKind::Thread, "-100", Some("7"));
        let t2 = chat(ChatKind::Thread, "-100", Some("8"));
        let g = chat(ChatKind::Group, "-100", None);
        let key = |c: &ChatRef, threads: bool| {
            routing_key(DmScope::Main, threads, "telegram", &peer("1"), c)
        };
        assert_ne!(key(&t1, true), key(&t2, true), "a session per topic");
        assert_eq!(key(&t1, false), key(&t2, false));
        assert_eq!(key(&t1, false), key(&g, false), "one per group");
    }

    #[test]
    fn keys_follow_the_dm_scope_and_chat_kind() {
        let dm = chat(ChatKind::Direct, "42", None);
        assert_eq!(
            routing_key_t(DmScope::Main, "telegram", &peer("42"), &dm),
            "main"
        );
        assert_eq!(
            routing_key_t(DmScope::PerPeer, "telegram", &peer("42"), &dm),
            "dm:42"
        );
        assert_eq!(
            routing_key_t(DmScope::PerChannelPeer, "telegram", &peer("42"), &dm),
            "telegram:dm:42"
        );
        // Groups and threads do not depend on who writes.
        let g = chat(ChatKind::Group, "-100", None);
        assert_eq!(
            routing_key_t(DmScope::Main, "telegram", &peer("1"), &g),
            routing_key_t(DmScope::Main, "telegram", &peer("2"), &g)
        );
        assert_eq!(
            routing_key_t(DmScope::Main, "telegram", &peer("1"), &g),
            "telegram:group:-100"
        );
        let t = chat(ChatKind::Thread, "-100", Some("7"));
        assert_eq!(
            routing_key_t(DmScope::Main, "telegram", &peer("1"), &t),
            "telegram:thread:-100:7"
        );
    }

    #[test]
    fn titles_fill_the_template() {
        let t = title(
            "{channel}/{chat_type}/{chat_id} {peer}",
            "telegram",
            &peer("42"),
            &chat(ChatKind::Direct, "42", None),
        );
        assert_eq!(t, "telegram/direct/42 user42");
        assert_eq!(
            title("  ", "x", &peer("1"), &chat(ChatKind::Group, "1", None)),
            "Chat"
        );
    }
}
