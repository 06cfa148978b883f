//! Approvals without buttons: an answer in words — a reply to the prompt (`allow`, `deny,
//! not on main`), or `/allow` / `/deny [reason]` in its conversation — or by a reaction on
//! the prompt (✅ / ❌). Each is made into a press of the prompt's button by whoever answered
//! and queued with the presses, so that one path decides every answer with the same rules:
//! the requester or a configured approver, the server's approval rules, and a timeout that
//! rejects (`approvals.rs`). Platforms without buttons (Matrix, email) say so in their
//! [`ChannelInfo`](crate::channel::ChannelInfo), and their prompts then say how to answer;
//! the words and the commands work on every platform.

use std::sync::Arc;

use crate::channel::{AnswerVia, ButtonPress, Channel, InboundMessage, Reaction};
use crate::store::Prompt;

use super::*;

/// What a prompt on a platform without buttons adds: how to answer it.
/// How long a reply quoting an unknown message waits for a prompt being posted in its chat.
const PROMPT_POSTING: std::time::Duration = std::time::Duration::from_secs(5);

pub(super) fn how_to_answer(reactions: bool) -> String {
    let mut out = String::from(
        "To answer, reply to this message with “allow” or “deny” (a reason may follow: “deny, not on main”), or send /allow or /deny [reason].",
    );
    if reactions {
        out.push_str(" Or react with ✅ to allow, ❌ to deny.");
    }
    out
}

/// Reads the start of a reply as an answer: `allow`, `yes`, `ok`, `approve`, ✅, 👍 allow;
/// `deny`, `no`, `reject`, ❌, 👎 deny, and what follows is the reason (`no — use the other
/// file`). `None`: it is no answer (the reply is a message for the agent).
pub(super) fn parse_answer(text: &str) -> Option<(bool, Option<String>)> {
    let text = text.trim_start();
    let end = text
        .find(|c: char| c.is_whitespace() || matches!(c, ',' | '.' | ':' | ';' | '!' | '—' | '-'))
        .unwrap_or(text.len());
    let (word, rest) = text.split_at(end);
    let accept = match word.to_lowercase().as_str() {
        "allow" | "allowed" | "yes" | "y" | "ok" | "okay" | "approve" | "approved" => true,
        "deny" | "denied" | "no" | "n" | "reject" | "rejected" => false,
        other => reaction_answer(other)?,
    };
    if accept {
        // "yes" alone, or with a trailing word or two ("yes please", "ok, go ahead"); a long
        // text after "yes" is more likely a message than an answer.
        return (rest.split_whitespace().count() <= 3).then_some((true, None));
    }
    let reason = rest
        .trim_start_matches(|c: char| {
            c.is_whitespace() || matches!(c, ',' | '.' | ':' | ';' | '!' | '—' | '-')
        })
        .trim();
    Some((false, (!reason.is_empty()).then(|| reason.to_string())))
}

/// A reaction as an answer: ✅ ✔ 👍 allow, ❌ ✖ 👎 🚫 deny (variation selectors and skin
/// tones ignored); `None` for any other.
pub(super) fn reaction_answer(key: &str) -> Option<bool> {
    let base: String = key
        .chars()
        .filter(|c| !matches!(c, '\u{fe0e}' | '\u{fe0f}' | '\u{1f3fb}'..='\u{1f3ff}'))
        .collect();
    match base.as_str() {
        "✅" | "✔" | "☑" | "👍" | "+1" => Some(true),
        "❌" | "✖" | "❎" | "👎" | "🚫" | "-1" => Some(false),
        _ => None,
    }
}

/// Which of a conversation's prompts an answer is for.
pub(super) enum Target {
    One(Box<Prompt>),
    /// No prompt waits there.
    None,
    /// Several wait and the answer names none of them (it replies to none).
    Several(usize),
}

/// The prompt `reply_to` is (when it is one of `prompts`), else the only one there is.
pub(super) fn target(prompts: Vec<Prompt>, reply_to: Option<&str>) -> Target {
    if let Some(r) = reply_to
        && let Some(p) = prompts.iter().find(|p| p.prompt_message == r)
    {
        return Target::One(Box::new(p.clone()));
    }
    match prompts.len() {
        0 => Target::None,
        1 => prompts
            .into_iter()
            .next()
            .map_or(Target::None, |p| Target::One(Box::new(p))),
        n => Target::Several(n),
    }
}

impl Gateway {
    /// A reply to a waiting prompt of its conversation that reads as an answer: the prompt
    /// and the answer. (Any other reply, to a prompt or not, is a message for the agent.)
    pub(super) async fn reply_answer(
        &self,
        m: &InboundMessage,
    ) -> Result<Option<(Prompt, bool, Option<String>)>, GatewayError> {
        let Some(reply_to) = m.reply_to.as_deref().filter(|r| !r.is_empty()) else {
            return Ok(None);
        };
        let Some((accept, reason)) = parse_answer(&m.text) else {
            return Ok(None);
        };
        let mut prompts = self
            .inner
            .store
            .prompts_in_chat(&m.channel, &m.chat.id)
            .await?;
        // A prompt being posted (stored, its message id not yet) may be the one quoted: a
        // person can quote it the moment it shows, before the send's answer is recorded.
        // Its id is waited for (briefly), or the answer would go to the agent as a message.
        let deadline = std::time::Instant::now() + PROMPT_POSTING;
        while !prompts.iter().any(|p| p.prompt_message == reply_to)
            && prompts.iter().any(|p| p.prompt_message.is_empty())
            && std::time::Instant::now() < deadline
        {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            prompts = self
                .inner
                .store
                .prompts_in_chat(&m.channel, &m.chat.id)
                .await?;
        }
        Ok(prompts
            .into_iter()
            .find(|p| p.prompt_message == reply_to)
            .map(|p| (p, accept, reason)))
    }

    /// `/allow` or `/deny [reason]`: answers the conversation's prompt (the one the command
    /// replies to, or the only one there is); says why not when there is none or several.
    pub(super) async fn answer_command(
        &self,
        channel: &Arc<dyn Channel>,
        m: &InboundMessage,
        accept: bool,
    ) -> Result<(), GatewayError> {
        // A reply names its prompt anywhere in the chat; otherwise only this conversation's
        // (this thread's) prompts count.
        let prompts = self
            .inner
            .store
            .prompts_in_chat(&m.channel, &m.chat.id)
            .await?;
        let prompts = match m.reply_to.as_deref() {
            Some(r) if prompts.iter().any(|p| p.prompt_message == r) => prompts,
            _ => prompts
                .into_iter()
                .filter(|p| p.chat.thread == m.chat.thread)
                .collect(),
        };
        let text = match target(prompts, m.reply_to.as_deref()) {
            Target::One(p) => {
                let reason = (!accept)
                    .then(|| super::schedules::args(&m.text).trim().to_string())
                    .filter(|r| !r.is_empty());
                return self
                    .queue_answer(&p, m, AnswerVia::Words, accept, reason)
                    .await;
            }
            Target::None => "Nothing here waits for an approval.".to_string(),
            Target::Several(n) => {
                format!("{n} approvals wait here: reply to the one you mean with /allow or /deny.")
            }
        };
        log_err(
            "answering /allow or /deny",
            channel.tell(&m.chat, &m.peer, &text).await,
        );
        Ok(())
    }

    /// A reaction on a waiting prompt that reads as an answer decides it; any other
    /// reaction is ignored.
    pub(super) async fn on_reaction(&self, r: Reaction) -> Result<(), GatewayError> {
        let Some(accept) = reaction_answer(&r.key) else {
            return Ok(());
        };
        // (A reaction names no thread: the message it is on is enough.)
        let prompts = self
            .inner
            .store
            .prompts_in_chat(&r.channel, &r.chat.id)
            .await?;
        let Some(p) = prompts
            .into_iter()
            .find(|p| p.prompt_message == r.message_id)
        else {
            tracing::debug!(channel = %r.channel, message = %r.message_id, "a reaction on no waiting prompt; ignored");
            return Ok(());
        };
        let press = ButtonPress {
            channel: r.channel,
            press_id: r.reaction_id,
            peer: r.peer,
            chat: r.chat,
            message_id: p.prompt_message.clone(),
            data: answer_data(&p, accept),
            via: AnswerVia::Reaction,
            reason: None,
        };
        self.push_answer(&press).await
    }

    /// Queues an answer in words to `p` as a press by the message's sender.
    pub(super) async fn queue_answer(
        &self,
        p: &Prompt,
        m: &InboundMessage,
        via: AnswerVia,
        accept: bool,
        reason: Option<String>,
    ) -> Result<(), GatewayError> {
        let press = ButtonPress {
            channel: m.channel.clone(),
            press_id: m.message_id.clone(),
            peer: m.peer.clone(),
            chat: m.chat.clone(),
            message_id: p.prompt_message.clone(),
            data: answer_data(p, accept),
            via,
            reason,
        };
        self.push_answer(&press).await
    }

    /// Stores a press (durably, before the platform is acknowledged) and wakes the press
    /// handler.
    async fn push_answer(&self, press: &ButtonPress) -> Result<(), GatewayError> {
        self.inner.store.push_press(press).await?;
        let _ = self.inner.presses.send(());
        Ok(())
    }

    /// Tells whoever answered `press` something: a button's toast (or, `private`, its
    /// private answer), else a message to them in the chat.
    pub(super) async fn tell_answerer(
        &self,
        ch: &Arc<dyn Channel>,
        press: &ButtonPress,
        text: &str,
        private: bool,
    ) {
        let r = match (press.via, private) {
            (AnswerVia::Button, false) => ch.answer_press(press, Some(text)).await,
            (AnswerVia::Button, true) => ch.tell_presser(press, text).await,
            _ => ch.tell(&press.chat, &press.peer, text).await,
        };
        log_err("answering an approval answer", r);
    }
}

/// The button data an answer stands for: `ap:<prompt id>:y|n`.
fn answer_data(p: &Prompt, accept: bool) -> String {
    format!("ap:{}:{}", p.id, if accept { "y" } else { "n" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_read_as_answers() {
        assert_eq!(parse_answer("allow"), Some((true, None)));
        assert_eq!(parse_answer("  Yes please"), Some((true, None)));
        assert_eq!(parse_answer("ok, go ahead"), Some((true, None)));
        assert_eq!(parse_answer("✅"), Some((true, None)));
        assert_eq!(parse_answer("deny"), Some((false, None)));
        assert_eq!(
            parse_answer("No — use the other file"),
            Some((false, Some("use the other file".into())))
        );
        assert_eq!(
            parse_answer("deny, not on main"),
            Some((false, Some("not on main".into())))
        );
        assert_eq!(
            parse_answer("👎 too risky"),
            Some((false, Some("too risky".into())))
        );
        // Not answers: the reply is a message for the agent.
        assert_eq!(parse_answer("what does this command do?"), None);
        assert_eq!(parse_answer(""), None);
        assert_eq!(parse_answer("yesterday it worked"), None);
        assert_eq!(
            parse_answer("yes but first explain why you need to delete the database"),
            None
        );
    }

    #[test]
    fn reactions_read_as_answers() {
        assert_eq!(reaction_answer("✅"), Some(true));
        assert_eq!(reaction_answer("✔\u{fe0f}"), Some(true));
        assert_eq!(reaction_answer("👍🏽"), Some(true));
        assert_eq!(reaction_answer("❌"), Some(false));
        assert_eq!(reaction_answer("👎"), Some(false));
        assert_eq!(reaction_answer("🎉"), None);
        assert_eq!(reaction_answer(""), None);
    }

    #[test]
    fn a_reply_names_its_prompt_else_the_only_one() {
        let p = |id: &str, msg: &str| Prompt {
            id: id.into(),
            routing_key: "k".into(),
            session_id: uuid::Uuid::nil(),
            run_id: uuid::Uuid::nil(),
            tool_call_ids: vec!["c".into()],
            channel: "matrix".into(),
            chat: crate::channel::ChatRef {
                id: "!r".into(),
                kind: crate::channel::ChatKind::Group,
                thread: None,
            },
            prompt_message: msg.into(),
            prompt_text: String::new(),
            requester: crate::channel::Peer {
                id: "@a".into(),
                name: "A".into(),
                username: None,
            },
            requesters: Vec::new(),
        };
        let one = |t: Target| match t {
            Target::One(p) => p.id,
            Target::None => "none".into(),
            Target::Several(n) => format!("{n}"),
        };
        assert_eq!(one(target(vec![p("a", "$1")], None)), "a");
        assert_eq!(one(target(vec![p("a", "$1")], Some("$9"))), "a");
        assert_eq!(one(target(vec![], None)), "none");
        assert_eq!(one(target(vec![p("a", "$1"), p("b", "$2")], None)), "2");
        assert_eq!(
            one(target(vec![p("a", "$1"), p("b", "$2")], Some("$2"))),
            "b"
        );
    }
}
