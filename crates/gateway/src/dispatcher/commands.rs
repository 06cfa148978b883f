//! Chat commands (`/new`, `/stop`, `/status`, `/diff`, `/undo`, `/schedule`, `/schedules`,
//! `/unschedule`, `/link`, `/usage`, `/search`, `/archive`, `/title`), and the undo button.

use std::sync::Arc;

use switchboard_protocol::RunStatus;

use crate::channel::{Button, ButtonPress, Channel, ChatKind, InboundMessage, OutgoingFile};

use super::*;
use switchboard_protocol::RejectionCause;

impl Gateway {
    pub(super) async fn on_command(
        &self,
        channel: &Arc<dyn Channel>,
        key: &str,
        m: &InboundMessage,
        cmd: Command,
    ) -> Result<(), GatewayError> {
        match cmd {
            Command::Allow => return self.answer_command(channel, m, true).await,
            Command::Deny => return self.answer_command(channel, m, false).await,
            _ => {}
        }
        let route = self.inner.store.route(key).await?;
        let reply = match cmd {
            Command::Allow | Command::Deny => return Ok(()),
            Command::New => match &route {
                Some(r) if r.bound => {
                    "This chat is bound to a fixed session; /new does not change it.".to_string()
                }
                _ => {
                    if let Some(r) = &route {
                        self.leave_session(key, r).await?;
                    }
                    "Done: your next message starts a new session.".to_string()
                }
            },
            Command::Archive => match &route {
                None => "No session yet: nothing to archive.".into(),
                Some(r) if r.bound => {
                    "This chat is bound to a fixed session; /archive does not change it.".into()
                }
                Some(r) => {
                    let req = switchboard_protocol::UpdateSessionRequest {
                        archived: Some(true),
                        ..Default::default()
                    };
                    // The chat leaves the session first (its run and approval end, its route
                    // goes): archived, it must not take the chat's next message. Whether the
                    // sender may is asked before.
                    let sender = self.as_sender(m);
                    let may = sender.get_session(r.session_id).await;
                    let done = match may {
                        Ok(_) => {
                            self.leave_session(key, r).await?;
                            sender.update_session(r.session_id, &req).await
                        }
                        Err(e) => Err(e),
                    };
                    match done {
                        Ok(s) => {
                            format!(
                                "Archived \"{}\": your next message starts a new session. It stays searchable (/search), and the console or `switchboard sessions unarchive {}` brings it back.",
                                s.title, r.session_id
                            )
                        }
                        Err(e) if matches!(e.status(), Some(403 | 404)) => {
                            "You cannot archive this chat's session: it is not yours.".into()
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
            },
            Command::Title => {
                let title = super::schedules::args(&m.text);
                match &route {
                    _ if title.is_empty() => {
                        "Usage: /title NEW TITLE — renames this chat's session.".into()
                    }
                    None => "No session yet: send a message to start one.".into(),
                    Some(r) => {
                        let req = switchboard_protocol::UpdateSessionRequest {
                            title: Some(title.to_string()),
                            ..Default::default()
                        };
                        match self.as_sender(m).update_session(r.session_id, &req).await {
                            Ok(s) => format!("Renamed: {}", s.title),
                            Err(e) if matches!(e.status(), Some(400 | 422)) => format!(
                                "Cannot use that title: {}",
                                e.message().unwrap_or("the server refused it")
                            ),
                            Err(e) if matches!(e.status(), Some(403 | 404)) => {
                                "You cannot rename this chat's session: it is not yours.".into()
                            }
                            Err(e) => return Err(e.into()),
                        }
                    }
                }
            }
            Command::Stop => {
                // Messages still waiting go too: /stop means "stop what you are doing".
                let queued = self.inner.store.queued(key).await?;
                if let Some(last) = queued.last() {
                    let n = self.inner.store.dequeue(key, last.id).await?;
                    super::ledger::ignored(
                        &m.channel,
                        switchboard_protocol::gateway::IgnoredWhy::Stopped,
                        n,
                    );
                }
                let dropped = if queued.is_empty() {
                    String::new()
                } else {
                    format!(" ({} queued message(s) dropped)", queued.len())
                };
                let active = match &route {
                    None => None,
                    Some(r) => self
                        .inner
                        .client
                        .get_session(r.session_id)
                        .await?
                        .session
                        .active_run_id
                        .map(|run| (r.session_id, run)),
                };
                match active {
                    Some((session, run)) => {
                        self.inner.client.cancel(session, run).await?;
                        format!("Stopping the current run.{dropped}")
                    }
                    None => format!("Nothing is running.{dropped}"),
                }
            }
            Command::Status => match &route {
                None => "No session yet: send a message to start one.".into(),
                Some(r) => {
                    let s = self.inner.client.get_session(r.session_id).await?;
                    let state = match s.session.run_status {
                        RunStatus::Running => "running",
                        RunStatus::Idle => "idle",
                    };
                    let pending = self.inner.store.prompt_of_session(r.session_id).await?;
                    let queued = self.inner.store.queued(key).await?.len();
                    let sandbox = match &s.sandbox {
                        None => "none (its agent has no sandbox)".to_owned(),
                        Some(sb) if sb.confined => {
                            let network = match sb.network {
                                switchboard_protocol::SandboxNetwork::None => {
                                    "no network".to_owned()
                                }
                                switchboard_protocol::SandboxNetwork::Full => {
                                    "full network".to_owned()
                                }
                                switchboard_protocol::SandboxNetwork::Allowlist => {
                                    format!("network only to {}", sb.allow_hosts.join(", "))
                                }
                            };
                            format!("on: workspace only, {network}")
                        }
                        Some(sb) => format!("off: {}", sb.detail),
                    };
                    let (_, month) = self.chat_usage(key).await?;
                    format!(
                        "Session {} ({})\nRun: {state}\nApproval pending: {}\nQueued messages: {queued}\nSandbox: {sandbox}\nThis chat this month: {}",
                        r.session_id,
                        s.session.title,
                        if pending.is_some() { "yes" } else { "no" },
                        spent(&month),
                    )
                }
            },
            Command::Diff => match &route {
                None => "No session yet: send a message to start one.".into(),
                Some(r) => return self.send_diff(channel, m, r.session_id).await,
            },
            Command::Undo => match &route {
                None => "No session yet: send a message to start one.".into(),
                Some(r) => return self.offer_undo(channel, m, r.session_id).await,
            },
            Command::Schedule => self.add_schedule(m).await,
            Command::Schedules => self.list_schedules(m).await?,
            Command::Unschedule => self.remove_schedule(m).await?,
            Command::Link => self.link(m).await,
            Command::Search => self.search_chat(key, m, channel.max_chars()).await?,
            Command::Usage => {
                let (today, month) = self.chat_usage(key).await?;
                format!(
                    "This chat today: {}\nThis chat this month: {}",
                    spent(&today),
                    spent(&month)
                )
            }
        };
        log_err(
            "answering a command",
            channel.send(&m.chat, &reply, &[]).await,
        );
        Ok(())
    }

    /// What `/new` and `/archive` do to the chat's current session: its pending approval is
    /// refused and its run cancelled (nothing of it holds up the next one), and the chat's
    /// route is dropped, so that its next message starts a new session.
    async fn leave_session(&self, key: &str, r: &crate::store::Route) -> Result<(), GatewayError> {
        if let Some(p) = self.inner.store.prompt_of_session(r.session_id).await? {
            self.settle_prompt(
                &p,
                false,
                RejectionCause::NewMessage,
                "the chat started a new session",
                None,
            )
            .await;
        }
        if let Ok(s) = self.inner.client.get_session(r.session_id).await
            && let Some(run) = s.session.active_run_id
        {
            log_err(
                "cancelling the old session's run",
                self.inner.client.cancel(r.session_id, run).await,
            );
        }
        self.inner.store.delete_route(key).await?;
        Ok(())
    }

    /// The API client acting as the sender of `m` (a linked person: their sessions only).
    fn as_sender(&self, m: &InboundMessage) -> switchboard_client::Client {
        self.inner
            .client
            .on_behalf_of(&super::approvals::identity(&m.channel, &m.peer))
    }

    /// What this chat's runs used today and this month (UTC days and months).
    async fn chat_usage(
        &self,
        key: &str,
    ) -> Result<
        (
            switchboard_protocol::usage::UsageTotals,
            switchboard_protocol::usage::UsageTotals,
        ),
        GatewayError,
    > {
        use chrono::Datelike;
        let today = chrono::Utc::now().date_naive();
        let month = today.with_day(1).unwrap_or(today);
        let mut out = Vec::new();
        for from in [today, month] {
            let q = switchboard_protocol::usage::UsageQuery {
                from: Some(from.format("%Y-%m-%d").to_string()),
                chat: Some(key.to_string()),
                ..Default::default()
            };
            out.push(self.inner.client.usage(&q).await?.total);
        }
        Ok((out[0], out[1]))
    }

    /// `/search WORDS`: the words in the sessions this chat has had (the current one and
    /// those before `/new`), as the sender may see them (a linked person: their own and
    /// shared ones); the best few hits, the matched words between asterisks.
    async fn search_chat(
        &self,
        key: &str,
        m: &InboundMessage,
        channel_room: usize,
    ) -> Result<String, GatewayError> {
        let words = super::schedules::args(&m.text);
        if words.is_empty() {
            return Ok("Usage: /search WORDS — finds them in this chat's sessions (\"a phrase\", prefix* work too).".into());
        }
        let sessions = self.inner.store.chat_sessions(key, 100).await?;
        if sessions.is_empty() {
            return Ok("This chat has no session yet: nothing to search.".into());
        }
        let params = switchboard_protocol::search::SearchParams {
            q: words.to_string(),
            sessions: Some(
                sessions
                    .iter()
                    .map(uuid::Uuid::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            limit: Some(SEARCH_HITS),
            ..Default::default()
        };
        let found = match self.as_sender(m).search(&params).await {
            Ok(f) => f,
            Err(e) if matches!(e.status(), Some(400 | 422)) => {
                return Ok(format!(
                    "Cannot search for that: {}",
                    e.message().unwrap_or("the server refused the words")
                ));
            }
            Err(e) => return Err(e.into()),
        };
        Ok(search_reply(words, &found, channel_room))
    }

    /// `/link CODE`: this chat identity acts as the person who got the code (docs/teams.md).
    async fn link(&self, m: &InboundMessage) -> String {
        let Some(code) = m.text.split_whitespace().nth(1) else {
            return "Send /link CODE with the code the Switchboard console gives you (your name, then \"Link a chat\").".into();
        };
        let req = switchboard_protocol::people::LinkRequest {
            platform: m.channel.clone(),
            user_id: m.peer.id.clone(),
            code: Some(code.to_string()),
            user: None,
        };
        match self.inner.client.link(&req).await {
            Ok(u) => format!(
                "Linked: here you act as {} ({}) — their sessions, their approvals.",
                u.name, u.role
            ),
            Err(e) if e.status() == Some(404) => {
                "That code is unknown, used or expired: get a new one from the console.".into()
            }
            Err(e) => {
                tracing::warn!(error = %e, "linking a chat identity");
                format!(
                    "Could not link: {}",
                    e.message().unwrap_or("the server did not answer")
                )
            }
        }
    }

    /// `/diff`: what the last run that changed files changed — as text when it is short,
    /// as a `.diff` file otherwise.
    async fn send_diff(
        &self,
        channel: &Arc<dyn Channel>,
        m: &InboundMessage,
        session: uuid::Uuid,
    ) -> Result<(), GatewayError> {
        let q = switchboard_protocol::DiffQuery::default();
        let diff = self.inner.client.diff(session, &q).await?;
        if diff.is_empty() {
            log_err(
                "answering /diff",
                channel
                    .send(&m.chat, "No run in this session has changed files.", &[])
                    .await,
            );
            return Ok(());
        }
        let stat = self.inner.client.diff_stat(session, &q).await?;
        let files = u32::try_from(stat.files.len()).unwrap_or(u32::MAX);
        let summary = switchboard_protocol::change_summary(files, stat.insertions, stat.deletions);
        let text = format!("{summary}\n\n{diff}");
        if text.chars().count() <= channel.max_chars().min(DIFF_AS_TEXT) {
            log_err("sending a diff", channel.send(&m.chat, &text, &[]).await);
        } else {
            let file = OutgoingFile {
                path: format!("/v1/sessions/{session}/diff"),
                name: "changes.diff".into(),
                mime: "text/x-diff".into(),
                bytes: bytes::Bytes::from(diff.into_bytes()),
                caption: Some(summary),
            };
            log_err(
                "sending a diff as a file",
                channel.send_file(&m.chat, &file).await.map(|_| ()),
            );
        }
        Ok(())
    }

    /// `/undo`: asks for a confirmation (a button) before putting the workspace back to
    /// before the last run that changed files.
    async fn offer_undo(
        &self,
        channel: &Arc<dyn Channel>,
        m: &InboundMessage,
        session: uuid::Uuid,
    ) -> Result<(), GatewayError> {
        let list = self.inner.client.checkpoints(session).await?.checkpoints;
        let last = switchboard_protocol::last_change(&list);
        let Some((last, target)) = last.and_then(|c| Some((c, c.parent.clone()?))) else {
            log_err(
                "answering /undo",
                channel
                    .send(&m.chat, "Nothing to undo: no run has changed files.", &[])
                    .await,
            );
            return Ok(());
        };
        let text = format!(
            "Undo the last run's changes ({})? The workspace goes back to how it was before that run.",
            switchboard_protocol::change_summary(last.files, last.insertions, last.deletions)
        );
        // The offer stays here; its buttons carry only its id (a press cannot name another
        // checkpoint, session or requester than the offer's).
        let offer = UndoOffer {
            session_id: session,
            target,
            requester: m.peer.id.clone(),
            chat: m.chat.id.clone(),
        };
        let id = uuid::Uuid::now_v7().simple().to_string();
        self.inner.store.prune_kv().await?;
        self.inner
            .store
            .kv_set(&format!("undo:{id}"), &offer.to_json())
            .await?;
        let buttons = [
            Button {
                text: "Undo".into(),
                data: format!("un:{id}:undo"),
            },
            Button {
                text: "Keep".into(),
                data: format!("un:{id}:keep"),
            },
        ];
        log_err(
            "asking to confirm /undo",
            channel.send(&m.chat, &text, &buttons).await,
        );
        Ok(())
    }

    /// A press of an undo confirmation (`un:OFFER:undo`, `un:OFFER:keep`), the offer kept
    /// here. Only the one who asked may answer — in a group, or a configured approver —
    /// in the chat it was offered in, once.
    pub(super) async fn on_undo_press(
        &self,
        ch: &Arc<dyn Channel>,
        press: &ButtonPress,
    ) -> Result<(), GatewayError> {
        let parsed = press
            .data
            .strip_prefix("un:")
            .and_then(|rest| rest.split_once(':'))
            .filter(|(id, _)| id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()));
        let Some((id, choice)) = parsed else {
            log_err(
                "answering a press",
                ch.answer_press(press, Some("Unknown button")).await,
            );
            return Ok(());
        };
        let offer_key = format!("undo:{id}");
        let offer = self
            .inner
            .store
            .kv_get(&offer_key)
            .await?
            .and_then(|v| UndoOffer::from_json(&v))
            .filter(|o| o.chat == press.chat.id);
        let Some(offer) = offer else {
            log_err(
                "answering a press",
                ch.answer_press(press, Some("This offer was answered or has expired"))
                    .await,
            );
            return Ok(());
        };
        let requester = offer.requester.as_str();
        let approvers = self.inner.config.approvers.get(&press.channel);
        let allowed = press.peer.id == requester
            || (press.chat.kind != ChatKind::Direct
                && approvers.is_some_and(|a| a.contains(&press.peer.id)));
        if !allowed {
            log_err(
                "answering a refused press",
                ch.tell_presser(press, "Only the one who asked for /undo can answer this.")
                    .await,
            );
            return Ok(());
        }
        if choice != "undo" {
            // Answered: a second press (or a replayed one) finds no offer.
            self.inner.store.kv_set(&offer_key, "").await?;
            log_err(
                "answering a press",
                ch.answer_press(press, Some("Kept")).await,
            );
            log_err(
                "closing an undo prompt",
                ch.edit(&press.chat, &press.message_id, "Kept the changes.", &[])
                    .await,
            );
            return Ok(());
        }
        match self
            .inner
            .client
            .restore(offer.session_id, &offer.target)
            .await
        {
            Ok(r) => {
                self.inner.store.kv_set(&offer_key, "").await?;
                log_err(
                    "answering a press",
                    ch.answer_press(press, Some("Undone")).await,
                );
                let text = format!(
                    "↩️ Undone by {}: {}.",
                    press.peer.name,
                    switchboard_protocol::change_summary(r.files, r.insertions, r.deletions)
                );
                log_err(
                    "closing an undo prompt",
                    ch.edit(&press.chat, &press.message_id, &text, &[]).await,
                );
            }
            Err(e) if e.code() == Some("session_already_running") => {
                log_err(
                    "answering a press",
                    ch.tell_presser(press, "A run is going on: press again when it has ended.")
                        .await,
                );
            }
            Err(e) => {
                tracing::warn!(error = %e, "undo from the chat failed");
                log_err(
                    "answering a press",
                    ch.tell_presser(press, &format!("Could not undo: {}", e))
                        .await,
                );
            }
        }
        Ok(())
    }
}

/// Totals as a chat shows them: the cost, the tokens, and what is not priced.
fn spent(t: &switchboard_protocol::usage::UsageTotals) -> String {
    let mut out = format!(
        "{} ({} model calls, {} tokens in, {} out)",
        switchboard_protocol::usage::format_micros(t.cost_microdollars),
        t.calls,
        t.input_tokens,
        t.output_tokens
    );
    if t.unpriced_calls + t.unreported_calls > 0 {
        out.push_str(&format!(
            "; {} call(s) without a known cost are not in it",
            t.unpriced_calls + t.unreported_calls
        ));
    }
    out
}

/// A diff longer than this goes as a file.
const DIFF_AS_TEXT: usize = 3000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Command {
    /// `/search WORDS`: in this chat's sessions.
    Search,
    /// `/archive`: archives the chat's session; the next message starts a new one.
    Archive,
    /// `/title NEW TITLE`: renames the chat's session.
    Title,
    New,
    Stop,
    Status,
    Diff,
    Undo,
    Schedule,
    Schedules,
    Unschedule,
    Link,
    Usage,
    /// `/allow`: answers the conversation's waiting approval (`answers.rs`).
    Allow,
    /// `/deny [reason]`.
    Deny,
}

/// `/new`, `/stop`, `/status`, `/diff`, `/undo`, `/schedule`, `/schedules`, `/unschedule`,
/// `/link`, `/usage`, `/search`, `/archive`, `/title` (or `/rename`), `/allow`, `/deny` (also
/// `/stop@botname`).
pub(super) fn command(text: &str) -> Option<Command> {
    let first = text.split_whitespace().next()?;
    let name = first.strip_prefix('/')?;
    let name = name.split('@').next().unwrap_or(name);
    match name {
        "new" => Some(Command::New),
        "stop" => Some(Command::Stop),
        "status" => Some(Command::Status),
        "diff" => Some(Command::Diff),
        "undo" => Some(Command::Undo),
        "schedule" => Some(Command::Schedule),
        "schedules" => Some(Command::Schedules),
        "unschedule" => Some(Command::Unschedule),
        "link" => Some(Command::Link),
        "usage" => Some(Command::Usage),
        "search" => Some(Command::Search),
        "archive" => Some(Command::Archive),
        "title" | "rename" => Some(Command::Title),
        "allow" => Some(Command::Allow),
        "deny" => Some(Command::Deny),
        _ => None,
    }
}

/// An `/undo` confirmation waiting for its button, kept in the store (`undo:<id>`): the
/// buttons carry only the id.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct UndoOffer {
    session_id: uuid::Uuid,
    /// The checkpoint to restore.
    target: String,
    /// Who asked (the one who may answer, besides a group's approvers).
    requester: String,
    /// The chat it was offered in.
    chat: String,
}

impl UndoOffer {
    fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// `None` for an answered offer (an empty value) or anything unreadable.
    fn from_json(v: &str) -> Option<Self> {
        serde_json::from_str(v).ok()
    }
}

/// Hits a chat's `/search` shows.
const SEARCH_HITS: u32 = 5;
/// A hit's session title and passage in a chat's `/search` answer, at most (characters).
const SEARCH_TITLE_CHARS: usize = 80;
const SEARCH_PASSAGE_CHARS: usize = 300;

/// A chat's `/search` answer in plain text (chats get no markup): each hit's session, who
/// said it and when, and its passage with the matched words between asterisks. At most
/// `max_chars` characters (the channel's message limit): titles and passages are cut, and
/// the hits that do not fit are left for the console.
fn search_reply(
    words: &str,
    found: &switchboard_protocol::search::SearchResponse,
    max_chars: usize,
) -> String {
    use crate::text::truncate;
    use switchboard_protocol::search::SearchHitKind;
    if found.hits.is_empty() {
        return format!("Nothing found for {words} in this chat's sessions.");
    }
    let more = "\n\nMore in the console's search, or with more words.";
    let mut out = truncate(
        &format!("Found in this chat's sessions, best first ({words}):"),
        max_chars.saturating_sub(more.len()).max(1),
    );
    let mut left_out = found.next_cursor.is_some();
    for (i, hit) in found.hits.iter().enumerate() {
        let who = match hit.kind {
            SearchHitKind::File => "file",
            SearchHitKind::Message => hit.role.as_deref().unwrap_or("message"),
        };
        let when = hit
            .created_at
            .get(..16)
            .unwrap_or(&hit.created_at)
            .replace('T', " ");
        let passage: String = hit
            .snippet
            .iter()
            .map(|p| {
                if p.matched {
                    format!("*{}*", p.text)
                } else {
                    p.text.clone()
                }
            })
            .collect();
        let head = format!(
            "\n\n{}. {} · {who} · {when}\n",
            i + 1,
            truncate(&hit.session_title, SEARCH_TITLE_CHARS),
        );
        let passage = passage.split_whitespace().collect::<Vec<_>>().join(" ");
        let mut room = SEARCH_PASSAGE_CHARS;
        let used = out.chars().count() + head.chars().count() + more.chars().count();
        if used + room.min(passage.chars().count()) > max_chars {
            // The first hit is cut to the room there is (a small channel still gets one);
            // later ones that do not fit are left for the console.
            room = max_chars.saturating_sub(used);
            if i > 0 || room < 40 {
                left_out = true;
                break;
            }
        }
        out.push_str(&head);
        out.push_str(&truncate(&passage, room));
    }
    if left_out && out.chars().count() + more.chars().count() <= max_chars {
        out.push_str(more);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchboard_protocol::search::{SearchHit, SearchHitKind, SearchResponse, SnippetPart};

    fn hit(title: &str, passage: &str) -> SearchHit {
        SearchHit {
            session_id: uuid::Uuid::nil(),
            session_title: title.into(),
            kind: SearchHitKind::Message,
            id: uuid::Uuid::nil(),
            role: Some("assistant".into()),
            seq: Some(7),
            created_at: "2026-12-07T10:11:12Z".into(),
            snippet: vec![
                SnippetPart {
                    text: passage.into(),
                    matched: false,
                },
                SnippetPart {
                    text: "zebra".into(),
                    matched: true,
                },
            ],
        }
    }

    #[test]
    fn a_search_answer_fits_the_channel_however_long_the_hits() {
        // Five hits of 200-character titles and 5,000-character passages: Discord's 2,000.
        let found = SearchResponse {
            hits: (0..5)
                .map(|_| hit(&"t".repeat(200), &"long ".repeat(1000)))
                .collect(),
            next_cursor: None,
        };
        let text = search_reply("zebra", &found, 2000);
        assert!(
            text.chars().count() <= 2000,
            "{} chars",
            text.chars().count()
        );
        assert!(text.contains("\n\n1. "), "{text}");
        assert!(text.contains("\n\n4. "), "titles and passages cut: {text}");
        assert!(
            text.ends_with("More in the console's search, or with more words."),
            "{text}"
        );
        // A small limit (an SMS-like channel) still gets an answer within it, with a hit.
        let small = search_reply("zebra", &found, 300);
        assert!(small.chars().count() <= 300, "{small}");
        assert!(small.contains("\n\n1. "), "{small}");
        // Short hits are whole, the match between asterisks, no "More" when none is left.
        let few = SearchResponse {
            hits: vec![hit("Orders", "fix the ")],
            next_cursor: None,
        };
        let text = search_reply("zebra", &few, 2000);
        assert!(
            text.contains("1. Orders · assistant · 2026-12-07 10:11\nfix the *zebra*"),
            "{text}"
        );
        assert!(!text.contains("More"), "{text}");
    }
}
