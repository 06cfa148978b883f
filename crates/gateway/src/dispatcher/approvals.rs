//! Approvals: prompts for a run's waiting tool calls, button presses, decisions.

use std::collections::BTreeMap;
use std::time::Duration;

use switchboard_protocol::{
    DecisionAction, RejectionCause, ToolCall, ToolDecision, ToolDecisionsRequest,
};
use uuid::Uuid;

use switchboard_protocol::gateway::GatewayAskRequest;

use crate::channel::{AnswerVia, Button, ButtonPress, ChatKind, ChatRef, Peer};
use crate::config::ApprovalMode;
use crate::store::{FollowedRun, Prompt, Route};
use crate::text::truncate;

use super::*;

/// A prompt is stored before it is posted, so a decision can settle it while the post is
/// on its way: the settle then has no message to edit, and the post learns only that the
/// prompt is gone. Whichever of the two finishes second edits the posted message with the
/// decision's note; this is what the first leaves for it.
pub(crate) enum Unposted {
    /// Settled first: the note the message must end with.
    Note(String),
    /// Posted first: the message to edit.
    Posted(String),
}

/// The requester of a prompt asked for over HTTP: see [`Gateway::may_approve`].
const ANYONE: &str = "*";

/// What [`Gateway::settle`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Settled {
    Decided,
    /// Decided already, expired, or the decision could not be recorded.
    Gone,
    /// The server's approval rules give it to others (why, in words); it still waits.
    Refused(String),
}

/// A chat identity as the server knows it: `channel:platform user id`.
pub(super) fn identity(channel: &str, peer: &Peer) -> String {
    format!("{channel}:{}", peer.id)
}

/// What [`Gateway::ask`] did.
pub enum AskOutcome {
    /// The prompt's id and its message's id.
    Asked(String, String),
    /// The run does not wait for (all of) those calls.
    NotWaiting,
    /// No channel of that name.
    UnknownChannel,
}

impl Gateway {
    /// Decides a prompt's calls (accept or reject for all), edits the prompt to say who
    /// decided what (or that it expired), and forgets it. Returns whether it decided.
    pub(super) async fn settle_prompt(
        &self,
        p: &Prompt,
        accept: bool,
        cause: RejectionCause,
        reason: &str,
        by: Option<&Peer>,
    ) -> bool {
        matches!(
            self.settle(p, accept, cause, reason, by).await,
            Settled::Decided
        )
    }

    /// [`Self::settle_prompt`], telling a refusal apart: a press decides as the person
    /// linked to the presser (docs/teams.md), and the server's approval rules may give the
    /// calls to others — the prompt then stays, for someone who may.
    pub(super) async fn settle(
        &self,
        p: &Prompt,
        accept: bool,
        cause: RejectionCause,
        reason: &str,
        by: Option<&Peer>,
    ) -> Settled {
        if !matches!(self.inner.store.take_prompt(&p.id).await, Ok(true)) {
            return Settled::Gone;
        }
        let decisions: BTreeMap<String, ToolDecision> = p
            .tool_call_ids
            .iter()
            .map(|id| {
                (
                    id.clone(),
                    ToolDecision {
                        action: if accept {
                            DecisionAction::Accept
                        } else {
                            DecisionAction::Reject
                        },
                        content: (!accept).then(|| reason.to_string()),
                        // Shown in every surface as who decided.
                        by: by.map(|peer| decider(peer, &p.channel)),
                        cause: (!accept).then_some(cause),
                    },
                )
            })
            .collect();
        let client = match by {
            Some(peer) => self.inner.client.on_behalf_of(&identity(&p.channel, peer)),
            None => self.inner.client.clone(),
        };
        let result = client
            .decide_tools(
                p.session_id,
                &ToolDecisionsRequest {
                    run_id: p.run_id,
                    decisions,
                },
            )
            .await;
        if let Err(e) = &result
            && e.status() == Some(403)
        {
            // Not this person's to decide: the prompt waits on for someone who may.
            if let Err(err) = self.inner.store.put_prompt(p).await {
                tracing::warn!(error = %err, "putting back a prompt after a refused press");
            }
            return Settled::Refused(e.message().unwrap_or("not yours to decide").to_string());
        }
        let note = match (&result, by) {
            (Err(e), _) if e.status() == Some(409) => {
                "⌛ This approval expired: the run no longer waits for it.".to_string()
            }
            (Err(e), _) => format!("⚠️ Could not record the decision: {e}"),
            (Ok(_), Some(peer)) if accept => format!("✅ Allowed by {}", peer.name),
            (Ok(_), Some(peer)) => format!("❌ Denied by {}", peer.name),
            (Ok(_), None) => format!("❌ Rejected: {reason}"),
        };
        let message = if p.prompt_message.is_empty() {
            // Not posted yet (or the post's id not recorded yet): the post edits it.
            let mut unposted = self.inner.unposted.lock();
            match unposted.remove(&p.id) {
                Some(Unposted::Posted(id)) => Some(id),
                _ => {
                    unposted.insert(p.id.clone(), Unposted::Note(note.clone()));
                    None
                }
            }
        } else {
            Some(p.prompt_message.clone())
        };
        if let Some(message) = message {
            self.edit_settled(p, &message, &note).await;
        }
        if result.is_ok() {
            Settled::Decided
        } else {
            Settled::Gone
        }
    }

    /// Edits a settled prompt's message to its text and the decision's note, no buttons.
    async fn edit_settled(&self, p: &Prompt, message: &str, note: &str) {
        if let Some(ch) = self.channel(&p.channel) {
            let room = ch.max_chars().saturating_sub(note.chars().count() + 2);
            let text = format!("{}\n\n{note}", truncate(&p.prompt_text, room));
            log_err(
                "editing an approval prompt",
                ch.edit(&p.chat, message, &text, &[]).await,
            );
        }
    }

    pub(super) async fn on_press(&self, press: &ButtonPress) -> Result<(), GatewayError> {
        let Some(ch) = self.channel(&press.channel) else {
            return Ok(());
        };
        if press.data.starts_with("un:") {
            return self.on_undo_press(&ch, press).await;
        }
        let Some((prompt_id, accept)) = parse_button(&press.data) else {
            log_err(
                "answering a press",
                ch.answer_press(press, Some("Unknown button")).await,
            );
            return Ok(());
        };
        let Some(mut prompt) = self.inner.store.prompt(prompt_id).await? else {
            if press.via != AnswerVia::Reaction {
                self.tell_answerer(&ch, press, "This approval is no longer pending", false)
                    .await;
            }
            return Ok(());
        };
        // A press can come before the prompt's message id was recorded: it is the message
        // the button is on.
        if prompt.prompt_message.is_empty() {
            prompt.prompt_message = press.message_id.clone();
        }
        if press.channel != prompt.channel || press.chat.id != prompt.chat.id {
            tracing::warn!(peer = %press.peer.id, prompt = %prompt.id, "approval press from another chat refused");
            self.tell_answerer(&ch, press, "This approval belongs to another chat.", true)
                .await;
            return Ok(());
        }
        if !self.may_approve(&prompt, &press.peer).await {
            tracing::warn!(peer = %press.peer.id, prompt = %prompt.id, "approval press refused: not an approver");
            self.tell_answerer(&ch, press, NOT_AN_APPROVER, true).await;
            return Ok(());
        }
        let reason = press.reason.as_deref().unwrap_or("denied in the chat");
        let settled = self
            .settle(
                &prompt,
                accept,
                RejectionCause::User,
                reason,
                Some(&press.peer),
            )
            .await;
        let toast = match (&settled, accept) {
            (Settled::Decided, true) => "Allowed",
            (Settled::Decided, false) => "Denied",
            (Settled::Gone, _) => "Too late: this approval is no longer pending",
            (Settled::Refused(why), _) => {
                tracing::info!(peer = %press.peer.id, prompt = %prompt.id, %why, "approval press refused by the approval rules");
                self.tell_answerer(&ch, press, &format!("Not yours to decide: {why}."), true)
                    .await;
                return Ok(());
            }
        };
        // A decision shows in the prompt's edit; an answer without a button needs no toast,
        // only a word when it came too late.
        if press.via == AnswerVia::Button || matches!(settled, Settled::Gone) {
            self.tell_answerer(&ch, press, toast, false).await;
        }
        if let Some(mut run) = self.inner.store.run(&prompt.routing_key).await?
            && let Some(d) = run.deadline.as_deref().and_then(parse_time)
        {
            // The wait counted against the run's timeout; a floor remains after a decision.
            let fixed =
                deadline_after_decision(d, chrono::Utc::now(), self.inner.config.timeout_floor);
            if fixed != d {
                run.deadline = Some(fixed.to_rfc3339_opts(chrono::SecondsFormat::Micros, true));
                self.inner.store.put_run(&run).await?;
            }
        }
        Ok(())
    }

    /// In a DM only the requester; in groups the configured approvers (default: the
    /// requester). A prompt asked for over HTTP ([`ANYONE`] as requester) may be answered
    /// by the configured approvers, else by anyone in its chat (which the bot's access
    /// rules already admit). Approvers are platform ids, or `user:NAME` for a person by
    /// the chat accounts they linked (docs/teams.md).
    pub(super) async fn may_approve(&self, p: &Prompt, peer: &Peer) -> bool {
        if p.requester.id == ANYONE {
            return match self.inner.config.approvers.get(&p.channel) {
                Some(list) if !list.is_empty() => self.is_listed(list, &p.channel, peer).await,
                _ => true,
            };
        }
        // Everyone whose message is in the batch the run answers asked for its calls.
        let asked = peer.id == p.requester.id || p.requesters.contains(&peer.id);
        if p.chat.kind == ChatKind::Direct {
            return asked;
        }
        match self.inner.config.approvers.get(&p.channel) {
            Some(list) if !list.is_empty() => self.is_listed(list, &p.channel, peer).await,
            _ => asked,
        }
    }

    /// Whether `peer` is on an approvers list: by their platform id, or as `user:NAME` —
    /// the person their chat account is linked to, as the server says.
    async fn is_listed(&self, list: &[String], channel: &str, peer: &Peer) -> bool {
        if list.contains(&peer.id) {
            return true;
        }
        if !list.iter().any(|e| e.starts_with("user:")) {
            return false;
        }
        match self
            .inner
            .client
            .on_behalf_of(&identity(channel, peer))
            .me()
            .await
        {
            Ok(me) if me.credential == switchboard_protocol::people::Credential::Chat => list
                .iter()
                .any(|e| e.strip_prefix("user:") == Some(me.user.as_str())),
            Ok(_) => false,
            Err(e) => {
                tracing::warn!(error = %e, "asking who a chat account acts as");
                false
            }
        }
    }

    /// What the gateway does with calls that wait: by mode and allowlist; the rest become
    /// one prompt with buttons.
    pub(super) async fn on_waiting(
        &self,
        route: &Route,
        run: &FollowedRun,
        ids: &[String],
    ) -> Result<(), GatewayError> {
        if let Some(old) = self.inner.store.prompt_of_session(run.session_id).await? {
            if old.run_id == run.run_id && old.tool_call_ids.iter().all(|i| ids.contains(i)) {
                if old.prompt_message.is_empty() {
                    // Stored but not posted before a crash: post it now.
                    return self.post_prompt(old).await.map(drop);
                }
                return Ok(()); // already shown (a replay after a restart)
            }
            // One pending approval per session: an older prompt is marked ignored.
            if self.inner.store.take_prompt(&old.id).await?
                && let Some(ch) = self.channel(&old.channel)
                && !old.prompt_message.is_empty()
            {
                let note = "(ignored: a newer approval replaced this one)";
                let room = ch.max_chars().saturating_sub(note.len() + 2);
                let text = format!("{}\n\n{note}", truncate(&old.prompt_text, room));
                log_err(
                    "marking a prompt ignored",
                    ch.edit(&old.chat, &old.prompt_message, &text, &[]).await,
                );
            }
        }
        let pending = self.inner.client.pending_tools(run.session_id).await?;
        if pending.run_id != Some(run.run_id) {
            return Ok(()); // decided meanwhile
        }
        let calls: Vec<ToolCall> = pending
            .tool_calls
            .into_iter()
            .filter(|c| ids.contains(&c.id))
            .collect();
        if calls.is_empty() {
            return Ok(());
        }
        let mode = self.inner.config.mode_for(&route.channel);
        // An agent's question is a person's to answer: never allowed by the chat's mode.
        let (auto, ask): (Vec<ToolCall>, Vec<ToolCall>) = match mode {
            ApprovalMode::AllowAll => calls.into_iter().partition(|c| !c.is_question()),
            ApprovalMode::DenyAll => {
                self.decide(
                    run,
                    &calls,
                    false,
                    "the chat gateway denies every tool call (approval mode deny_all)",
                )
                .await?;
                return Ok(());
            }
            ApprovalMode::Allowlist => calls
                .into_iter()
                .partition(|c| !c.is_question() && self.inner.config.allowlisted(&c.name)),
        };
        if !auto.is_empty() {
            self.decide(run, &auto, true, "").await?;
        }
        if ask.is_empty() {
            return Ok(());
        }
        let Some(ch) = self.channel(&route.channel) else {
            return Ok(());
        };
        // Room for the decision note added later.
        let text =
            crate::preview::approval_prompt(&ask, auto.len(), ch.max_chars().saturating_sub(120));
        // Stored before it is posted: a press that comes back at once finds it, and a crash
        // in between posts it on the replay instead of losing it.
        let prompt = Prompt {
            id: short_id(),
            routing_key: route.routing_key.clone(),
            session_id: run.session_id,
            run_id: run.run_id,
            tool_call_ids: ask.iter().map(|c| c.id.clone()).collect(),
            channel: route.channel.clone(),
            chat: route.chat.clone(),
            prompt_message: String::new(),
            prompt_text: text,
            requester: route.requester.clone(),
            requesters: route.requesters.clone(),
        };
        if let Err(e) = self.inner.store.put_prompt(&prompt).await {
            // Fails closed: a prompt without its record could never be answered (a press
            // would find nothing) nor survive a restart, so it is not posted; the calls are
            // rejected and the chat is told why.
            tracing::error!(session_id = %run.session_id, run_id = %run.run_id, error = %e, "an approval prompt could not be stored; rejecting its calls");
            log_err(
                "telling the chat an approval could not be asked",
                ch.send(
                    &route.chat,
                    "⚠️ Switchboard could not ask for your approval (its database failed), so the tool call was not run.",
                    &[],
                )
                .await,
            );
            return self
                .decide(
                    run,
                    &ask,
                    false,
                    "the approval could not be asked in the chat (the gateway's database failed)",
                )
                .await;
        }
        self.post_prompt(prompt).await.map(drop)
    }

    /// A prompt for calls of a run the gateway does not follow (`POST /v1/gateway/approvals`):
    /// stored, then posted with its buttons. The same calls asked again answer the prompt
    /// already there.
    pub async fn ask(&self, req: &GatewayAskRequest) -> Result<AskOutcome, GatewayError> {
        let Some(ch) = self.channel(&req.channel) else {
            return Ok(AskOutcome::UnknownChannel);
        };
        if let Some(old) = self.inner.store.prompt_of_session(req.session_id).await? {
            if old.run_id == req.run_id
                && req
                    .tool_call_ids
                    .iter()
                    .all(|i| old.tool_call_ids.contains(i))
                && old.channel == req.channel
                && old.chat.id == req.target
            {
                if old.prompt_message.is_empty() {
                    let id = old.id.clone();
                    let message = self.post_prompt(old).await?;
                    return Ok(AskOutcome::Asked(id, message));
                }
                return Ok(AskOutcome::Asked(old.id, old.prompt_message));
            }
            // One prompt per session: the run moved on from the older one.
            self.inner.store.take_prompt(&old.id).await?;
        }
        let pending = self.inner.client.pending_tools(req.session_id).await?;
        if pending.run_id != Some(req.run_id) {
            return Ok(AskOutcome::NotWaiting);
        }
        let calls: Vec<ToolCall> = pending
            .tool_calls
            .into_iter()
            .filter(|c| req.tool_call_ids.contains(&c.id))
            .collect();
        if calls.len() != req.tool_call_ids.len() {
            return Ok(AskOutcome::NotWaiting);
        }
        let title = req.title.as_deref().map(str::trim).unwrap_or_default();
        let room = ch.max_chars().saturating_sub(120 + title.chars().count());
        let body = crate::preview::approval_prompt(&calls, 0, room);
        let text = if title.is_empty() {
            body
        } else {
            format!("{title}\n\n{body}")
        };
        let prompt = Prompt {
            id: short_id(),
            routing_key: format!("ask:{}", req.session_id),
            session_id: req.session_id,
            run_id: req.run_id,
            tool_call_ids: req.tool_call_ids.clone(),
            channel: req.channel.clone(),
            chat: ChatRef {
                id: req.target.clone(),
                kind: if req.thread.is_some() {
                    ChatKind::Thread
                } else {
                    ChatKind::Direct
                },
                thread: req.thread.clone(),
            },
            prompt_message: String::new(),
            prompt_text: text,
            requester: Peer {
                id: ANYONE.into(),
                name: "anyone in the chat".into(),
                username: None,
            },
            requesters: Vec::new(),
        };
        self.inner.store.put_prompt(&prompt).await?;
        let id = prompt.id.clone();
        let message = self.post_prompt(prompt).await?;
        Ok(AskOutcome::Asked(id, message))
    }

    /// Nobody answered a prompt: its calls are rejected with `reason` and its message says
    /// so. `None` when there is no such prompt (answered already).
    pub async fn expire(
        &self,
        prompt_id: &str,
        reason: &str,
    ) -> Result<Option<bool>, GatewayError> {
        let Some(p) = self.inner.store.prompt(prompt_id).await? else {
            return Ok(None);
        };
        Ok(Some(
            self.settle_prompt(&p, false, RejectionCause::Timeout, reason, None)
                .await,
        ))
    }

    /// Posts a stored prompt with its buttons and records the message id (empty when the
    /// channel is gone).
    pub(super) async fn post_prompt(&self, mut p: Prompt) -> Result<String, GatewayError> {
        let Some(ch) = self.channel(&p.channel) else {
            return Ok(String::new());
        };
        let (allow, deny) = if p.tool_call_ids.len() > 1 {
            ("Allow All", "Deny All")
        } else {
            ("Allow", "Deny")
        };
        let info = ch.info();
        let buttons = vec![
            Button {
                text: allow.into(),
                data: format!("ap:{}:y", p.id),
            },
            Button {
                text: deny.into(),
                data: format!("ap:{}:n", p.id),
            },
        ];
        p.prompt_message = if ch.buttons_in(&p.chat) {
            ch.send(&p.chat, &p.prompt_text, &buttons).await?
        } else {
            // Without buttons the prompt says how to answer (until it is settled: the edit
            // that records the decision leaves this out).
            let how = super::answers::how_to_answer(info.reactions);
            let room = info.max_chars.saturating_sub(how.chars().count() + 2);
            let text = format!("{}\n\n{how}", truncate(&p.prompt_text, room));
            // A channel with buttons elsewhere gets them to know this is a prompt (see
            // `Channel::buttons_in`); one without any gets none.
            let buttons: &[Button] = if info.buttons { &buttons } else { &[] };
            ch.send(&p.chat, &text, buttons).await?
        };
        if !self
            .inner
            .store
            .set_prompt_message(&p.id, &p.prompt_message)
            .await?
        {
            // Settled while it was being posted (a press or a new message raced the send):
            // the message gets the decision's note once the settle has one.
            let note = {
                let mut unposted = self.inner.unposted.lock();
                match unposted.remove(&p.id) {
                    Some(Unposted::Note(note)) => Some(note),
                    _ => {
                        unposted.insert(p.id.clone(), Unposted::Posted(p.prompt_message.clone()));
                        None
                    }
                }
            };
            if let Some(note) = note {
                self.edit_settled(&p, &p.prompt_message, &note).await;
            }
        }
        Ok(p.prompt_message)
    }

    pub(super) async fn decide(
        &self,
        run: &FollowedRun,
        calls: &[ToolCall],
        accept: bool,
        reason: &str,
    ) -> Result<(), GatewayError> {
        // Every call the gateway decides itself is its own rule: its approval mode, or an
        // approval it could not ask.
        let decisions = calls
            .iter()
            .map(|c| {
                (
                    c.id.clone(),
                    ToolDecision {
                        action: if accept {
                            DecisionAction::Accept
                        } else {
                            DecisionAction::Reject
                        },
                        content: (!accept).then(|| reason.to_string()),
                        by: None,
                        cause: (!accept).then_some(RejectionCause::Policy),
                    },
                )
            })
            .collect();
        match self
            .inner
            .client
            .decide_tools(
                run.session_id,
                &ToolDecisionsRequest {
                    run_id: run.run_id,
                    decisions,
                },
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.status() == Some(409) => Ok(()),
            // The server's approval rules give these calls to named people: the chat's own
            // mode does not decide them; they wait for those people (or time out, rejected).
            Err(e) if e.status() == Some(403) => {
                tracing::info!(session_id = %run.session_id, error = %e, "the approval rules keep these calls for people to decide");
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// `ap:<prompt id>:y|n`.
pub(super) fn parse_button(data: &str) -> Option<(&str, bool)> {
    let rest = data.strip_prefix("ap:")?;
    let (id, choice) = rest.rsplit_once(':')?;
    match choice {
        "y" => Some((id, true)),
        "n" => Some((id, false)),
        _ => None,
    }
}

pub(super) fn parse_time(s: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    chrono::DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|d| d.with_timezone(&chrono::Utc))
}

/// A run's deadline after an approval decision: the time spent waiting counted against it,
/// but at least `floor` remains so that what was approved can run.
pub fn deadline_after_decision(
    deadline: chrono::DateTime<chrono::Utc>,
    now: chrono::DateTime<chrono::Utc>,
    floor: Duration,
) -> chrono::DateTime<chrono::Utc> {
    let min = now + chrono::Duration::from_std(floor).unwrap_or_default();
    deadline.max(min)
}

pub(super) fn short_id() -> String {
    Uuid::new_v4().simple().to_string()[..12].to_string()
}

/// Who pressed a button, as `ToolDecision::by` says it: the chat name (or username, or id)
/// and the channel, on one line of at most 100 characters.
pub(super) fn decider(peer: &Peer, channel: &str) -> String {
    let name = [
        peer.name.as_str(),
        peer.username.as_deref().unwrap_or(""),
        peer.id.as_str(),
    ]
    .into_iter()
    .map(|n| n.chars().filter(|c| !c.is_control()).collect::<String>())
    .find(|n| !n.trim().is_empty())
    .unwrap_or_else(|| "someone".into());
    let channel: String = channel
        .chars()
        .filter(|c| !c.is_control())
        .take(30)
        .collect();
    let name: String = name.trim().chars().take(60).collect();
    format!("{name} ({channel})")
}
