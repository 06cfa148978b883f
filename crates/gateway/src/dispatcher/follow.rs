//! Following a run into its chat: a [`ReplyView`] (what the chat shows of the reply, saved
//! with the cursor) and one small handler per [`RunStep`] of the run, which the client's
//! run follower reads from the session's log.

use std::sync::Arc;
use std::time::{Duration, Instant};

use switchboard_client::{RunEnd, RunStep};
use switchboard_protocol::gateway::{DeliveryStatus, Outbound};
use switchboard_protocol::{FileInfo, RejectionCause, StopReason, ToolCall};

use crate::channel::{Channel, ChatRef};
use crate::store::{FollowedRun, Route, ShownPage};
use crate::text::{StreamBuffer, paginate, showable, split_message, truncate};

use super::ledger::posted;
use super::*;

/// Follows a run from its stored cursor to its end, streaming the reply into the chat.
///
/// The stored state is the cursor (the last event handled), the text received but not yet
/// shown (`pending`, pushed back into the buffer after a restart), and the message being
/// edited with what it shows; the three are saved together, so a restart neither loses nor
/// repeats reply text.
pub(super) async fn follow(gw: &Gateway, key: &str, run: FollowedRun) -> Result<(), GatewayError> {
    let Some(route) = gw.inner.store.route(key).await? else {
        gw.settle_run(
            &gw.channel_of_key(key),
            &run,
            DeliveryStatus::Failed,
            Some("the chat left the session (its route was removed)"),
        )
        .await?;
        gw.inner.store.finish_run(key).await?;
        return Ok(());
    };
    let Some(ch) = gw.channel(&route.channel) else {
        gw.settle_run(
            &route.channel,
            &run,
            DeliveryStatus::Failed,
            Some("the channel is no longer configured"),
        )
        .await?;
        gw.inner.store.finish_run(key).await?;
        return Ok(());
    };
    let mut steps = gw
        .inner
        .client
        .follow_run(run.session_id, run.run_id, Some(run.last_event_id));
    let mut view = ReplyView::new(gw, key, route, ch, run);
    let mut tick = tokio::time::interval(
        view.edit_interval
            .clamp(Duration::from_millis(50), Duration::from_millis(250)),
    );
    loop {
        let until_deadline = view.until_deadline().await?;
        let step = tokio::select! {
            _ = gw.inner.cancel.cancelled() => return Ok(()),
            _ = tick.tick() => {
                view.on_tick().await?;
                continue;
            }
            _ = tokio::time::sleep(until_deadline) => {
                view.on_deadline().await?;
                continue;
            }
            step = steps.next() => step,
        };
        let step = match step {
            Some(Ok(step)) => step,
            Some(Err(e)) => return Err(e.into()),
            None => return Err(GatewayError::Other("event stream ended".into())),
        };
        view.run.last_event_id = step.seq;
        view.dirty = true;
        match step.kind {
            RunStep::Text(delta) => view.on_text(&delta).await?,
            RunStep::FileShared { file, caption } => view.on_file(file, caption).await?,
            RunStep::WorkspaceChanged {
                files,
                insertions,
                deletions,
                ..
            } => view.on_workspace_changed(files, insertions, deletions),
            RunStep::ToolsWaiting(calls) => view.on_waiting(&calls).await?,
            RunStep::ToolRejected {
                call,
                cause,
                reason,
                ..
            } => view.on_rejected(&call, cause, &reason).await?,
            RunStep::Ended(RunEnd::SessionGone) => {
                gw.settle_run(
                    &view.route.channel,
                    &view.run,
                    DeliveryStatus::Failed,
                    Some("the session was deleted"),
                )
                .await?;
                gw.inner.store.finish_run(key).await?;
                return Ok(());
            }
            RunStep::Ended(end) => return view.on_end(end).await,
            _ => {}
        }
    }
}

/// What the chat shows of a followed run's reply, and how it gets there.
///
/// A platform that edits shows the reply in messages edited as it grows (see [`render`]);
/// one that cannot gets it in readable chunks ([`StreamBuffer`], [`deliver`]).
struct ReplyView<'a> {
    gw: &'a Gateway,
    key: &'a str,
    route: Route,
    ch: Arc<dyn Channel>,
    run: FollowedRun,
    edits: bool,
    edit_interval: Duration,
    buf: StreamBuffer,
    /// When the reply was last shown.
    shown_at: Option<Instant>,
    /// Whether text arrived since.
    unshown: bool,
    /// Whether `run` changed since it was saved.
    dirty: bool,
}

impl<'a> ReplyView<'a> {
    fn new(
        gw: &'a Gateway,
        key: &'a str,
        route: Route,
        ch: Arc<dyn Channel>,
        mut run: FollowedRun,
    ) -> Self {
        let edits = ch.can_edit();
        if edits
            && run.pages.is_empty()
            && let Some(id) = run.stream_message.take()
        {
            // Stored by a version that tracked one message: it shows the start of the reply.
            run.pages.push(ShownPage {
                id,
                text: String::new(),
            });
        }
        let mut buf = if ch.info().whole_replies {
            StreamBuffer::whole(ch.max_chars())
        } else {
            StreamBuffer::new()
        };
        if !edits && !run.pending.is_empty() {
            buf.push(&run.pending, Instant::now());
        }
        let unshown = edits && !run.streamed.is_empty();
        Self {
            gw,
            key,
            route,
            edit_interval: ch.edit_interval(),
            ch,
            run,
            edits,
            buf,
            shown_at: None,
            unshown,
            dirty: false,
        }
    }

    /// Saves the run (cursor, pending text, pages) as it stands.
    async fn save(&mut self) -> Result<(), GatewayError> {
        self.run.pending = self.buf.pending();
        self.gw.inner.store.put_run(&self.run).await?;
        self.dirty = false;
        Ok(())
    }

    /// How long until the run's deadline: read from the store (a decision may have moved
    /// it), and not running while a prompt of this run waits.
    async fn until_deadline(&mut self) -> Result<Duration, GatewayError> {
        let store = &self.gw.inner.store;
        let waiting = store
            .prompt_of_session(self.run.session_id)
            .await?
            .is_some_and(|p| p.run_id == self.run.run_id);
        if let Some(stored) = store.run(self.key).await? {
            self.run.deadline = stored.deadline;
        }
        Ok(match self.run.deadline.as_deref().and_then(parse_time) {
            Some(d) if !waiting => (d - chrono::Utc::now()).to_std().unwrap_or(Duration::ZERO),
            _ => Duration::from_secs(365 * 24 * 3600),
        })
    }

    /// The edit pace: shows what arrived since the last showing, and saves.
    async fn on_tick(&mut self) -> Result<(), GatewayError> {
        if self.edits {
            if self.unshown
                && self
                    .shown_at
                    .is_none_or(|t| t.elapsed() >= self.edit_interval)
            {
                if render(&*self.ch, &self.route.chat, &mut self.run, false).await? {
                    self.shown_at = Some(Instant::now());
                }
                self.unshown = false;
                self.dirty = true;
            }
        } else if let Some(chunk) = self.buf.take_ready(Instant::now()) {
            deliver(&*self.ch, &self.route.chat, &mut self.run, &chunk).await?;
            self.dirty = true;
        }
        if self.dirty {
            self.save().await?;
        }
        Ok(())
    }

    /// The run took too long: the chat is told and the run cancelled (its end comes as a
    /// step).
    async fn on_deadline(&mut self) -> Result<(), GatewayError> {
        let gw = self.gw;
        let mins = gw.inner.config.run_timeout.as_secs() / 60;
        let note = format!("⏱ The run took longer than {mins} min and is being cancelled.");
        log_err(
            "posting a timeout notice",
            self.ch.send(&self.route.chat, &note, &[]).await,
        );
        log_err(
            "cancelling a timed-out run",
            gw.inner
                .client
                .cancel(self.run.session_id, self.run.run_id)
                .await,
        );
        self.run.deadline = None;
        self.save().await
    }

    async fn on_text(&mut self, delta: &str) -> Result<(), GatewayError> {
        if self.edits {
            self.run.streamed.push_str(delta);
            self.unshown = true;
            // The first showing waits for the next tick (a short reply then arrives in one
            // message, not a post and an edit); later ones come at the edit pace.
            if self
                .shown_at
                .is_some_and(|t| t.elapsed() >= self.edit_interval)
            {
                if render(&*self.ch, &self.route.chat, &mut self.run, false).await? {
                    self.shown_at = Some(Instant::now());
                }
                self.unshown = false;
                self.save().await?;
            }
        } else {
            self.buf.push(delta, Instant::now());
            if let Some(chunk) = self.buf.take_ready(Instant::now()) {
                deliver(&*self.ch, &self.route.chat, &mut self.run, &chunk).await?;
                self.save().await?;
            }
        }
        Ok(())
    }

    async fn on_file(
        &mut self,
        file: FileInfo,
        caption: Option<String>,
    ) -> Result<(), GatewayError> {
        let session = self.run.session_id;
        // At least once: a crash before the cursor is stored sends it again.
        match self
            .gw
            .inner
            .client
            .download_file(session, file.file_id)
            .await
        {
            Ok((bytes, _)) => {
                let out = crate::channel::OutgoingFile {
                    path: format!("/v1/sessions/{session}/files/{}", file.file_id),
                    name: file.name.clone(),
                    mime: file.mime.clone(),
                    bytes,
                    caption,
                };
                let (sent, record) =
                    posted("file", self.ch.send_file(&self.route.chat, &out)).await;
                self.run.outbound.extend(record);
                log_err("sending a file", sent.map(|_| ()));
            }
            Err(e) => {
                tracing::warn!(routing_key = %self.key, file_id = %file.file_id, error = %e, "a shared file could not be read from the server");
            }
        }
        self.save().await
    }

    /// Comes just before the run's end: the reply ends with it.
    fn on_workspace_changed(&mut self, files: u32, insertions: u64, deletions: u64) {
        let line = format!(
            "\n\n📝 {} (/diff shows them, /undo reverts them)",
            switchboard_protocol::change_summary(files, insertions, deletions)
        );
        if self.edits {
            self.run.streamed.push_str(&line);
            self.unshown = true;
        } else {
            self.buf.push(&line, Instant::now());
        }
    }

    /// The run waits for approval: the reply so far is shown whole, the prompt is asked
    /// below it, and the reply goes on in a new message under the prompt.
    async fn on_waiting(&mut self, calls: &[ToolCall]) -> Result<(), GatewayError> {
        let ids: Vec<String> = calls.iter().map(|c| c.id.clone()).collect();
        if self.edits {
            render(&*self.ch, &self.route.chat, &mut self.run, true).await?;
            self.run.delivered += self.run.streamed.chars().count();
            self.unshown = false;
        } else if let Some(rest) = self.buf.take_rest() {
            deliver(&*self.ch, &self.route.chat, &mut self.run, &rest).await?;
        }
        // The reply continues in a new message below the prompt.
        self.run.stream_message = None;
        self.run.streamed.clear();
        self.run.pending.clear();
        self.run.pages.clear();
        self.gw.inner.store.put_run(&self.run).await?;
        self.dirty = false;
        let (asked, attempts) =
            crate::platform::counting_attempts(self.gw.on_waiting(&self.route, &self.run, &ids))
                .await;
        asked?;
        // The prompt it posted, once (a replay after a restart finds it recorded).
        if let Some(p) = self
            .gw
            .inner
            .store
            .prompt_of_session(self.run.session_id)
            .await?
            && p.run_id == self.run.run_id
            && !p.prompt_message.is_empty()
            && !self
                .run
                .outbound
                .iter()
                .any(|o| o.kind == "prompt" && o.id.as_deref() == Some(&p.prompt_message))
        {
            self.run.outbound.push(Outbound {
                kind: "prompt".into(),
                id: Some(p.prompt_message.clone()),
                attempts: attempts.max(1),
                error: None,
                at: chrono::Utc::now(),
            });
            self.gw.inner.store.put_run(&self.run).await?;
        }
        Ok(())
    }

    /// A call of a prompt was rejected by the server (timeout, cancel, restart): the prompt
    /// says so.
    async fn on_rejected(
        &mut self,
        call: &ToolCall,
        cause: RejectionCause,
        reason: &str,
    ) -> Result<(), GatewayError> {
        let store = &self.gw.inner.store;
        if let Some(p) = store.prompt_of_session(self.run.session_id).await?
            && p.run_id == self.run.run_id
            && p.tool_call_ids.contains(&call.id)
            && store.take_prompt(&p.id).await?
            && !p.prompt_message.is_empty()
        {
            let note = if cause == RejectionCause::Timeout {
                "⌛ This approval expired: no decision in time.".to_string()
            } else {
                format!("❌ Rejected: {reason}")
            };
            self.edit_prompt(&p, &note).await;
        }
        Ok(())
    }

    /// The run ended: the whole reply is shown, the run is finished, then the chat hears
    /// of a failure or an empty cancel, and a prompt left over is closed.
    async fn on_end(mut self, end: RunEnd) -> Result<(), GatewayError> {
        if self.edits {
            // The final edit always lands: the whole text, not only whole words.
            render(&*self.ch, &self.route.chat, &mut self.run, true).await?;
        } else if let Some(rest) = self.buf.take_rest() {
            deliver(&*self.ch, &self.route.chat, &mut self.run, &rest).await?;
        }
        let store = &self.gw.inner.store;
        // The ledger settled before the run is let go: a crash in between follows the run
        // again and settles the same.
        let (status, reason) = ledger_outcome(&end, &self.run.outbound);
        self.gw
            .settle_run(&self.route.channel, &self.run, status, reason.as_deref())
            .await?;
        // Finished first, notices after: a crash in between loses a notice rather than
        // posting it twice.
        store.finish_run(self.key).await?;
        let notice = match end {
            RunEnd::Failed { error, .. } => Some(truncate(
                &format!("⚠️ The run failed: {error}"),
                self.ch.max_chars(),
            )),
            RunEnd::Completed {
                stop_reason: StopReason::Cancelled,
                ..
            } if self.run.streamed.is_empty() && self.run.delivered == 0 => {
                Some("Stopped.".to_string())
            }
            _ => None,
        };
        if let Some(text) = notice {
            let (sent, record) = posted("notice", self.ch.send(&self.route.chat, &text, &[])).await;
            log_err("posting a run notice", sent);
            if let Some(record) = record {
                self.run.outbound.push(record);
                log_err(
                    "recording a notice in the delivery ledger",
                    store
                        .settle_run(
                            self.run.run_id,
                            status,
                            reason.as_deref(),
                            &self.run.outbound,
                        )
                        .await,
                );
            }
        }
        // A prompt left over (the run ended without a decision) is closed.
        if let Some(p) = store.prompt_of_session(self.run.session_id).await?
            && p.run_id == self.run.run_id
            && store.take_prompt(&p.id).await?
            && !p.prompt_message.is_empty()
        {
            self.edit_prompt(&p, "⌛ The run ended; this approval is closed.")
                .await;
        }
        Ok(())
    }

    /// Ends a posted prompt with `note` (and no buttons).
    async fn edit_prompt(&self, p: &crate::store::Prompt, note: &str) {
        let room = self.ch.max_chars().saturating_sub(note.chars().count() + 2);
        let text = format!("{}\n\n{note}", truncate(&p.prompt_text, room));
        log_err(
            "editing a settled prompt",
            self.ch.edit(&p.chat, &p.prompt_message, &text, &[]).await,
        );
    }
}

/// What the ledger says of a run's messages at its end: answered, or failed and why (the
/// run failed or was stopped, or a page of its reply was refused by the platform).
fn ledger_outcome(end: &RunEnd, outbound: &[Outbound]) -> (DeliveryStatus, Option<String>) {
    match end {
        RunEnd::Failed { error, .. } => (
            DeliveryStatus::Failed,
            Some(format!("the run failed: {error}")),
        ),
        RunEnd::SessionGone => (
            DeliveryStatus::Failed,
            Some("the session was deleted".into()),
        ),
        RunEnd::Completed {
            stop_reason: StopReason::Cancelled,
            ..
        } => (DeliveryStatus::Failed, Some("the run was stopped".into())),
        RunEnd::Completed { .. } => match outbound
            .iter()
            .find(|o| o.kind == "reply" && o.error.is_some())
        {
            Some(o) => (
                DeliveryStatus::Failed,
                Some(format!(
                    "the reply could not be posted: {}",
                    o.error.as_deref().unwrap_or_default()
                )),
            ),
            None => (DeliveryStatus::Answered, None),
        },
    }
}

/// Whether a platform refused for good (a deleted message, a blocked bot): retrying the
/// same call will not help.
pub(super) fn permanent(e: &crate::channel::ChannelError) -> bool {
    matches!(e, crate::channel::ChannelError::Api { code, .. } if (400..500).contains(code) && *code != 429)
}

/// Shows the reply as it stands, on a platform that edits: [`paginate`] of all the text
/// received (while it streams, up to its last whole word), each page posted once and then
/// edited whenever its text changes — so every edit carries all there is, and pages that an
/// earlier, shorter text laid out differently are edited to their final form. Returns
/// whether the platform was called.
pub(super) async fn render(
    ch: &dyn Channel,
    chat: &ChatRef,
    run: &mut FollowedRun,
    done: bool,
) -> Result<bool, GatewayError> {
    let text = if done {
        run.streamed.as_str()
    } else {
        showable(&run.streamed)
    };
    let mut called = false;
    for (i, page) in paginate(text, ch.max_chars()).into_iter().enumerate() {
        let shown = page.text();
        match run.pages.get(i) {
            Some(p) if p.text == shown || p.id.is_empty() => continue,
            Some(p) => {
                called = true;
                match ch.edit(chat, &p.id, &shown, &[]).await {
                    Ok(()) => {
                        run.pages[i].text = shown;
                        continue;
                    }
                    // Deleted or too old to edit: this page goes on in a new message.
                    Err(e) if permanent(&e) => {
                        tracing::warn!(error = %e, "could not edit the reply; continuing in a new message");
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            None => {}
        }
        called = true;
        let (sent, record) = posted("reply", ch.send(chat, &shown, &[])).await;
        run.outbound.extend(record);
        let id = match sent {
            Ok(id) => id,
            Err(e) if permanent(&e) => {
                // The chat refuses us (bot blocked, chat gone): this page is dropped rather
                // than retried on every edit.
                tracing::warn!(error = %e, "could not post the reply; dropping it");
                String::new()
            }
            Err(e) => return Err(e.into()),
        };
        let shown = ShownPage { id, text: shown };
        match run.pages.get_mut(i) {
            Some(slot) => *slot = shown,
            None => run.pages.push(shown),
        }
    }
    Ok(called)
}

/// Shows a chunk of reply text on a platform that cannot edit: each flushed chunk is posted,
/// split (fences kept whole) to fit the platform's limit. Platforms that edit go through
/// [`render`] instead.
pub(super) async fn deliver(
    ch: &dyn Channel,
    chat: &ChatRef,
    run: &mut FollowedRun,
    chunk: &str,
) -> Result<(), GatewayError> {
    if chunk.trim().is_empty() {
        run.streamed.push_str(chunk);
        return Ok(());
    }
    let combined = format!("{}{}", run.streamed, chunk);
    let parts = split_message(&combined, ch.max_chars());
    let single = parts.len() == 1;
    let mut parts = parts.into_iter();
    let Some(first) = parts.next() else {
        return Ok(());
    };
    let edited = match (&run.stream_message, ch.can_edit()) {
        (Some(id), true) => match ch.edit(chat, id, &first, &[]).await {
            Ok(()) => true,
            // The message can no longer be edited (deleted, too old): continue in a new one.
            Err(e) if permanent(&e) => {
                tracing::warn!(error = %e, "could not edit the reply; continuing in a new message");
                false
            }
            Err(e) => return Err(e.into()),
        },
        _ => false,
    };
    if !edited {
        let text = if ch.can_edit() || run.streamed.is_empty() {
            first.clone()
        } else {
            chunk.trim().to_string()
        };
        let (sent, record) = posted("reply", ch.send(chat, &text, &[])).await;
        run.outbound.extend(record);
        match sent {
            Ok(id) => run.stream_message = Some(id),
            Err(e) if permanent(&e) => {
                // The chat refuses us (bot blocked, chat gone): the reply is dropped rather
                // than retried forever.
                tracing::warn!(error = %e, "could not post the reply; dropping it");
                run.streamed = combined;
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        }
    }
    run.streamed = if single { combined } else { first };
    for part in parts {
        let (sent, record) = posted("reply", ch.send(chat, &part, &[])).await;
        run.outbound.extend(record);
        let id = sent?;
        run.stream_message = Some(id);
        run.delivered += run.streamed.chars().count();
        run.streamed = part;
    }
    Ok(())
}
