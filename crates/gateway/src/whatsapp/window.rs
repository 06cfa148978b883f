//! WhatsApp's 24-hour customer-service window: free-form messages may only go to a chat
//! whose person (or, in a group, anyone) wrote in the last 24 hours — counted from the
//! message's own `timestamp`, not from when its delivery came.
//!
//! - Each chat's window (when it last opened, whether the template went for it) is kept in
//!   memory and in the channel's durable state (`window:{chat}`), the newest of the two
//!   winning, so that a restart or another instance sees the same window.
//! - A reply outside it is **held** (durably, `held:{chat}`, at most [`MAX_HELD`] messages,
//!   in the order written) and the configured template goes once for that closed window.
//!   When someone writes again the held replies go, and before any new reply to the chat
//!   (one that cannot be sent stays for the next time). A template's quick-reply button
//!   ("Show me") only brings them; it is no message for the agent. One chat's holds and
//!   releases go one at a time (a lock per chat); the held list is read before it is
//!   changed, and a failed read fails the hold rather than overwrite it.
//! - Meta may refuse a message the gateway thought inside the window (its failed status
//!   131047, "Re-engagement message", comes after the send was accepted): the window is
//!   then closed as of that status, the refused text held (the last [`RECENT`] texts sent
//!   are remembered for this) and the template sent.
//! - An approval prompt (known by its buttons, which the dispatcher passes even to a group
//!   that cannot show them) is never held nor replaced by the template: a prompt nobody saw
//!   must not be answerable later; it fails and its approval fails closed.
//! - Several instances share the windows and the held replies through the state; their
//!   order is the time each reply was written. Two instances changing one chat's held
//!   list in the same moment can lose one change (the state has no compare-and-set).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::{SERVICE_WINDOW, Wa};
use crate::channel::{ChannelError, ChatRef};

/// At most this many replies are held for one chat (the oldest go first).
pub const MAX_HELD: usize = 50;
/// How many sent texts are remembered (by message id) to be held again after a 131047.
pub const RECENT: usize = 256;
/// Meta's "Re-engagement message" error: the 24-hour window had closed.
pub const RE_ENGAGEMENT: i64 = 131_047;

/// One chat's window: three times (Unix seconds; 0: never), each only ever moving forward,
/// so two views of it (memory and the stored one, or two instances') merge by taking the
/// later of each.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Window {
    /// When someone last wrote.
    pub opened: i64,
    /// When Meta last refused a message for the closed window (131047).
    pub refused: i64,
    /// When the template last went.
    pub templated: i64,
}

impl Window {
    fn parse(s: &str) -> Option<Self> {
        let mut it = s.split_whitespace().map(|n| n.parse::<i64>());
        let opened = it.next()?.ok()?;
        let mut next = || it.next().and_then(Result::ok).unwrap_or_default();
        Some(Self {
            opened,
            refused: next(),
            templated: next(),
        })
    }

    fn encode(self) -> String {
        format!("{} {} {}", self.opened, self.refused, self.templated)
    }

    pub fn open_at(self, now: i64) -> bool {
        // A message in the same second as a refusal came after it (Meta took it as open).
        self.opened >= self.refused && now - self.opened < SERVICE_WINDOW.as_secs() as i64
    }

    /// Whether the template is still to go for this closed window: not since the person
    /// last wrote.
    pub fn template_due(self) -> bool {
        self.templated <= self.opened
    }

    fn merge(self, other: Self) -> Self {
        Self {
            opened: self.opened.max(other.opened),
            refused: self.refused.max(other.refused),
            templated: self.templated.max(other.templated),
        }
    }
}

/// A reply held while the window was closed, in the order it was written (`seq`: Meta's
/// failed statuses may come in any order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Held {
    pub seq: u64,
    pub text: String,
}

/// Texts sent lately, by message id (for a 131047 that comes after the send).
#[derive(Debug, Default)]
pub(super) struct Recent(VecDeque<(String, Held)>);

impl Recent {
    pub fn push(&mut self, id: String, held: Held) {
        if self.0.len() == RECENT {
            self.0.pop_front();
        }
        self.0.push_back((id, held));
    }

    pub fn take(&mut self, id: &str) -> Option<Held> {
        let at = self.0.iter().position(|(i, _)| i == id)?;
        self.0.remove(at).map(|(_, h)| h)
    }
}

fn window_key(chat: &str) -> String {
    format!("window:{chat}")
}

fn held_key(chat: &str) -> String {
    format!("held:{chat}")
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

impl Wa {
    /// The next reply's place in order: the time in microseconds since 1970, one up from
    /// the last at least (so that replies held by two instances sort as they were written).
    pub(super) fn next_seq(&self) -> u64 {
        let now = chrono::Utc::now().timestamp_micros().max(0) as u64;
        let order = std::sync::atomic::Ordering::Relaxed;
        let last = self
            .seq
            .fetch_update(order, order, |last| Some(now.max(last + 1)))
            .unwrap_or(now);
        now.max(last + 1)
    }

    /// The lock of one chat's held replies (its holds and releases one at a time, in
    /// order; other chats go on).
    fn held_lock(&self, chat: &str) -> std::sync::Arc<tokio::sync::Mutex<()>> {
        self.held_locks
            .lock()
            .entry(chat.to_string())
            .or_default()
            .clone()
    }

    /// Whether the chat may have held replies (read from the state once a process).
    pub(super) async fn has_held(&self, chat: &str) -> bool {
        if let Some(known) = self.held_known.lock().get(chat) {
            return *known;
        }
        let some = self.held(chat).await.is_ok_and(|h| !h.is_empty());
        self.held_known.lock().insert(chat.to_string(), some);
        some
    }

    /// The chat's window, the newest of memory and the stored one. `None`: the channel has
    /// not started (nothing known: Meta decides).
    pub(super) async fn window(&self, chat: &str) -> Option<Window> {
        let ctx = self.ctx.get()?;
        let stored = ctx
            .state
            .get(&window_key(chat))
            .await
            .and_then(|s| Window::parse(&s))
            .unwrap_or_default();
        let mut windows = self.windows.lock();
        let w = windows.entry(chat.to_string()).or_default();
        *w = w.merge(stored);
        Some(*w)
    }

    pub(super) async fn in_window(&self, chat: &str) -> bool {
        self.window(chat).await.is_none_or(|w| w.open_at(now()))
    }

    async fn persist(&self, chat: &str, w: Window) {
        let Some(ctx) = self.ctx.get() else { return };
        if let Err(e) = ctx.state.set(&window_key(chat), &w.encode()).await {
            tracing::warn!(channel = %self.cfg.name, error = %e, "storing a WhatsApp window");
        }
    }

    /// Someone wrote in `chat` at `at` (Unix seconds): its window opens (if that is newer).
    /// Whether it opened anew (it was closed before).
    pub(super) async fn opened(&self, chat: &str, at: i64) -> bool {
        self.change(chat, |w| {
            if at <= w.opened {
                return None;
            }
            let was_closed = !w.open_at(at);
            w.opened = at;
            Some(was_closed)
        })
        .await
        .unwrap_or(false)
    }

    /// Meta refused a message to `chat` at `at` for the closed window (131047): the window
    /// is closed as of then, unless someone wrote since. Whether it is closed.
    pub(super) async fn closed(&self, chat: &str, at: i64) -> bool {
        self.change(chat, |w| {
            if w.opened >= at {
                return Some(false); // a newer message opened it again
            }
            w.refused = w.refused.max(at);
            Some(true)
        })
        .await
        .unwrap_or(false)
    }

    /// Whether the template is still to go for the chat's closed window; if so, it counts
    /// as sent from now (two replies at once send one).
    async fn claim_template(&self, chat: &str) -> bool {
        self.change(chat, |w| {
            if !w.template_due() {
                return Some(false);
            }
            w.templated = now().max(w.opened + 1);
            Some(true)
        })
        .await
        .unwrap_or(false)
    }

    /// Changes the chat's window (the stored one merged in first) with `f` and stores it;
    /// `f`'s answer (`None`: nothing to change, nothing stored).
    async fn change<T>(&self, chat: &str, f: impl FnOnce(&mut Window) -> Option<T>) -> Option<T> {
        let _ = self.window(chat).await;
        let (w, answer) = {
            let mut windows = self.windows.lock();
            let w = windows.entry(chat.to_string()).or_default();
            let before = *w;
            let answer = f(w)?;
            if *w == before {
                return Some(answer);
            }
            (*w, answer)
        };
        self.persist(chat, w).await;
        Some(answer)
    }

    /// The chat's held replies; an error when they could not be read (never taken for
    /// none: a hold then would overwrite them).
    async fn held(&self, chat: &str) -> Result<Vec<Held>, String> {
        let Some(ctx) = self.ctx.get() else {
            return Ok(Vec::new());
        };
        match ctx.state.try_get(&held_key(chat)).await? {
            None => Ok(Vec::new()),
            Some(s) => serde_json::from_str(&s).map_err(|e| format!("the held replies: {e}")),
        }
    }

    async fn store_held(&self, chat: &str, held: &[Held]) -> Result<(), String> {
        let Some(ctx) = self.ctx.get() else {
            return Err("the channel has not started".into());
        };
        let json = serde_json::to_string(held).map_err(|e| e.to_string())?;
        ctx.state.set(&held_key(chat), &json).await?;
        self.held_known
            .lock()
            .insert(chat.to_string(), !held.is_empty());
        Ok(())
    }

    /// Keeps a reply for when the chat's window opens again, in its place.
    pub(super) async fn hold(&self, chat: &str, reply: Held) -> Result<(), String> {
        let lock = self.held_lock(chat);
        let _guard = lock.lock().await;
        let mut held = self.held(chat).await?;
        let at = held.partition_point(|h| h.seq <= reply.seq);
        held.insert(at, reply);
        if held.len() > MAX_HELD {
            let over = held.len() - MAX_HELD;
            held.drain(..over);
            let why = format!(
                "more than {MAX_HELD} replies held for {chat} (its 24-hour window is closed): the {over} oldest dropped"
            );
            tracing::warn!(channel = %self.cfg.name, "{why}");
            self.client.note_error(&why);
        }
        self.store_held(chat, &held).await
    }

    /// The chat's window is open: its held replies go, oldest first, each removed once
    /// sent (a crash in between sends at most one twice). One that cannot be sent stays,
    /// with those after it, for the next time (the next reply or message).
    pub(super) async fn release(&self, chat: &ChatRef) {
        if !self.has_held(&chat.id).await || !self.in_window(&chat.id).await {
            return;
        }
        let lock = self.held_lock(&chat.id);
        let _guard = lock.lock().await;
        let mut held = match self.held(&chat.id).await {
            Ok(held) => held,
            Err(e) => {
                tracing::warn!(channel = %self.cfg.name, error = %e, "WhatsApp: reading the held replies");
                return;
            }
        };
        while let Some(first) = held.first() {
            if let Err(e) = self.send_text(chat, &first.text).await {
                tracing::warn!(channel = %self.cfg.name, chat = %chat.id, error = %e, "WhatsApp: sending a held reply");
                return;
            }
            held.remove(0);
            if let Err(e) = self.store_held(&chat.id, &held).await {
                tracing::warn!(channel = %self.cfg.name, error = %e, "WhatsApp: storing the held replies");
                return;
            }
        }
    }

    /// Outside the window: `text` is held (never a prompt's: see the module docs), the
    /// template sent once for this closed window, and the answer is a message id of the
    /// held reply (`held:…`). Without a place to hold it, or for a prompt, an error that
    /// says why (permanent: not retried).
    pub(super) async fn outside_window(
        &self,
        chat: &ChatRef,
        text: &str,
        prompt: bool,
    ) -> Result<String, ChannelError> {
        let closed = |why: &str| {
            let e = self.client.api_error(
                "messages",
                400,
                &format!(
                    "{} has not written in the last 24 hours: WhatsApp only takes a template message then ({why})",
                    chat.id
                ),
            );
            self.client.note_error(&e.to_string());
            e
        };
        if prompt {
            return Err(closed("an approval prompt is not held"));
        }
        let reply = Held {
            seq: self.next_seq(),
            text: text.to_string(),
        };
        self.hold(&chat.id, reply)
            .await
            .map_err(|e| closed(&format!("the reply could not be held: {e}")))?;
        if self.in_window(&chat.id).await {
            // The person wrote meanwhile (and its release may have found nothing yet).
            self.release(chat).await;
        } else {
            self.template(chat).await;
        }
        Ok(format!("held:{}", uuid::Uuid::new_v4().simple()))
    }

    /// Sends the template if it is still to go for the chat's closed window; says in the
    /// log and the channel's health when there is none or it fails.
    pub(super) async fn template(&self, chat: &ChatRef) {
        let Some((name, language)) = &self.cfg.template else {
            let why = format!(
                "{} has not written in the last 24 hours: replies are held until they write (set [channels.whatsapp] template to tell them)",
                chat.id
            );
            tracing::warn!(channel = %self.cfg.name, "{why}");
            self.client.note_error(&why);
            return;
        };
        if !self.claim_template(&chat.id).await {
            return;
        }
        if let Err(e) = self.send_template(chat, name, language).await {
            tracing::warn!(channel = %self.cfg.name, chat = %chat.id, error = %e, "WhatsApp: sending the template");
            self.client
                .note_error(&format!("sending the template to {}: {e}", chat.id));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::{ChannelContext, ChannelState, ChatKind, Inbound, InboundSink};
    use crate::whatsapp::{WhatsAppChannel, WhatsAppConfig};
    use std::collections::HashMap;
    use std::sync::Arc;

    #[derive(Default)]
    struct Mem(parking_lot::Mutex<HashMap<String, String>>);

    #[async_trait::async_trait]
    impl ChannelState for Mem {
        async fn get(&self, key: &str) -> Option<String> {
            self.0.lock().get(key).cloned()
        }
        async fn set(&self, key: &str, value: &str) -> Result<(), String> {
            self.0.lock().insert(key.into(), value.into());
            Ok(())
        }
    }

    struct Nowhere;

    #[async_trait::async_trait]
    impl InboundSink for Nowhere {
        async fn accept(&self, _item: Inbound) -> Result<(), String> {
            Ok(())
        }
    }

    /// A started channel whose API is unreachable, on `state`.
    fn channel(state: Arc<Mem>, template: bool) -> WhatsAppChannel {
        let mut cfg = WhatsAppConfig::new("106540352242922", "token", "secret", "verify");
        cfg.api_base = "http://127.0.0.1:9".into();
        cfg.max_retries = 0;
        if template {
            cfg.template = Some(("new_reply".into(), "en_US".into()));
        }
        let ch = WhatsAppChannel::new(cfg).unwrap();
        let _ = ch.inner.ctx.set(ChannelContext {
            sink: Arc::new(Nowhere),
            state,
        });
        ch
    }

    fn direct(id: &str) -> ChatRef {
        ChatRef {
            id: id.into(),
            kind: ChatKind::Direct,
            thread: None,
        }
    }

    #[tokio::test]
    async fn the_window_counts_from_the_message_and_is_shared_through_the_state() {
        let state = Arc::new(Mem::default());
        let a = channel(state.clone(), false);
        let day = SERVICE_WINDOW.as_secs() as i64;
        // Nobody wrote: closed. A message sent 25 hours ago (delivered now) opens nothing.
        assert!(!a.inner.in_window("49151").await);
        a.inner.opened("49151", now() - day - 3600).await;
        assert!(!a.inner.in_window("49151").await);
        // A fresh one opens it, for this instance and for another on the same state.
        assert!(a.inner.opened("49151", now() - 60).await, "it was closed");
        assert!(a.inner.in_window("49151").await);
        let b = channel(state.clone(), false);
        assert!(b.inner.in_window("49151").await);
        // An older message later does not move it back.
        assert!(!a.inner.opened("49151", now() - 7200).await);
        // Meta's 131047 for a message sent before the last one changes nothing; one after
        // it closes the window (for both), until the person writes again.
        assert!(!b.inner.closed("49151", now() - 3600).await);
        assert!(b.inner.in_window("49151").await);
        assert!(b.inner.closed("49151", now()).await);
        assert!(!a.inner.in_window("49151").await);
        assert!(a.inner.opened("49151", now()).await);
        assert!(b.inner.in_window("49151").await);
    }

    /// A state whose reads fail (a database that went away).
    struct Unreadable(Mem);

    #[async_trait::async_trait]
    impl ChannelState for Unreadable {
        async fn get(&self, _key: &str) -> Option<String> {
            None
        }
        async fn set(&self, key: &str, value: &str) -> Result<(), String> {
            self.0.set(key, value).await
        }
        async fn try_get(&self, _key: &str) -> Result<Option<String>, String> {
            Err("database is locked".into())
        }
    }

    #[tokio::test]
    async fn a_hold_that_cannot_read_the_held_replies_fails_rather_than_overwrite_them() {
        let state = Arc::new(Unreadable(Mem::default()));
        state
            .0
            .set("held:49151", r#"[{"seq":1,"text":"kept"}]"#)
            .await
            .unwrap();
        let mut cfg = WhatsAppConfig::new("106540352242922", "token", "secret", "verify");
        cfg.api_base = "http://127.0.0.1:9".into();
        let ch = WhatsAppChannel::new(cfg).unwrap();
        let _ = ch.inner.ctx.set(ChannelContext {
            sink: Arc::new(Nowhere),
            state: state.clone(),
        });
        let e = ch
            .inner
            .outside_window(&direct("49151"), "new", false)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("could not be held"), "{e}");
        assert_eq!(
            state.0.get("held:49151").await.as_deref(),
            Some(r#"[{"seq":1,"text":"kept"}]"#)
        );
    }

    #[tokio::test]
    async fn outside_the_window_replies_are_held_in_order_and_a_prompt_fails_closed() {
        let state = Arc::new(Mem::default());
        let ch = channel(state.clone(), true);
        let chat = direct("49151");
        // A prompt is never held nor replaced by the template, and the health says why.
        let e = ch
            .inner
            .outside_window(&chat, "Allow rm?", true)
            .await
            .unwrap_err();
        assert!(
            matches!(&e, ChannelError::Api { code: 400, description, .. } if description.contains("not held")),
            "{e:?}"
        );
        assert!(
            ch.inner
                .client
                .health()
                .last_error
                .unwrap()
                .0
                .contains("24 hours"),
            "the console shows why"
        );
        // Replies are held (the template, unreachable here, is claimed once).
        let id = ch.inner.outside_window(&chat, "one", false).await.unwrap();
        assert!(id.starts_with("held:"));
        ch.inner.outside_window(&chat, "two", false).await.unwrap();
        assert!(!ch.inner.window("49151").await.unwrap().template_due());
        assert!(
            !ch.inner.claim_template("49151").await,
            "one template a closed window"
        );
        // A refused message held later goes in its place (Meta's statuses come in any order).
        ch.inner
            .hold(
                "49151",
                Held {
                    seq: 0,
                    text: "zero".into(),
                },
            )
            .await
            .unwrap();
        let texts: Vec<String> = ch
            .inner
            .held("49151")
            .await
            .unwrap()
            .into_iter()
            .map(|h| h.text)
            .collect();
        assert_eq!(texts, ["zero", "one", "two"]);
        // Held durably: another instance on the same state sees them.
        let other = channel(state, true);
        assert_eq!(other.inner.held("49151").await.unwrap().len(), 3);
        assert!(other.inner.has_held("49151").await);
        // Writing again allows a new template for a later closed window.
        ch.inner.opened("49151", now()).await;
        assert!(ch.inner.window("49151").await.unwrap().template_due());
    }

    #[test]
    fn a_window_is_stored_as_text_and_views_merge_forward() {
        let w = Window {
            opened: 1_700_000_000,
            refused: 5,
            templated: 7,
        };
        assert_eq!(Window::parse(&w.encode()), Some(w));
        assert_eq!(
            Window::parse("1700000000"),
            Some(Window {
                opened: 1_700_000_000,
                ..Window::default()
            })
        );
        let other = Window {
            opened: 1,
            refused: 1_700_000_001,
            templated: 0,
        };
        assert_eq!(w.merge(other), other.merge(w));
        assert!(
            !w.merge(other).open_at(1_700_000_002),
            "refused after it opened"
        );
        assert!(w.open_at(w.opened + 24 * 3600 - 1));
        assert!(!w.open_at(w.opened + 24 * 3600));
        assert!(w.template_due(), "no template since the person wrote");
    }

    #[test]
    fn recent_texts_are_bounded_and_taken_once() {
        let mut r = Recent::default();
        for i in 0..RECENT + 1 {
            r.push(
                format!("m{i}"),
                Held {
                    seq: i as u64,
                    text: format!("t{i}"),
                },
            );
        }
        assert_eq!(r.take("m0"), None, "the oldest was forgotten");
        assert_eq!(r.take("m1").map(|h| h.text).as_deref(), Some("t1"));
        assert_eq!(r.take("m1"), None);
    }
}
