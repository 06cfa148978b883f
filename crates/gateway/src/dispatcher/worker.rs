//! The worker of one routing key: batches the queue into a run, follows the run's events
//! and shows the reply.

use std::time::{Duration, Instant};

use futures::StreamExt;
use switchboard_protocol::{
    AgentEvent, AttachmentRef, ContextItem, ContextPriority, CreateSessionRequest, MessageType,
    SendMessageRequest,
};
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::channel::{Channel, ChatRef};
use crate::routing::title;
use crate::store::{FollowedRun, Queued, Route, ShownPage};
use crate::text::{StreamBuffer, paginate, showable, split_message, truncate};

use super::*;

/// Fetches the files of a batch from their platforms and uploads them to the session: the
/// references to attach, and the batch with a note in each message's text for each file that
/// could not be taken (so the agent and the transcript say so). Each file is attributed by
/// its place in its sender's message.
async fn fetch_files(
    gw: &Gateway,
    session_id: Uuid,
    mut items: Vec<Queued>,
) -> (Vec<Queued>, Vec<AttachmentRef>) {
    let mut refs = Vec::new();
    let max = gw.inner.config.max_file_bytes;
    // With several senders, each file is named in its sender's line (attribution).
    let senders: std::collections::HashSet<&str> =
        items.iter().map(|q| q.peer.id.as_str()).collect();
    let attribute = senders.len() > 1;
    for item in &mut items {
        let Some(channel) = gw.channel(&item.channel) else {
            continue;
        };
        let mut sent = Vec::new();
        let mut transcripts: Vec<String> = Vec::new();
        for a in std::mem::take(&mut item.attachments) {
            let label = match &a.name {
                Some(n) => format!("{} {n}", a.kind),
                None => a.kind.clone(),
            };
            let fetched = channel.fetch(&a, max).await;
            if let Ok(f) = &fetched
                && crate::speech::is_speech(&a)
            {
                match &gw.inner.config.speech {
                    Some(cfg) => {
                        match crate::speech::transcribe(
                            &gw.inner.speech_http,
                            cfg,
                            &f.name,
                            f.bytes.clone(),
                        )
                        .await
                        {
                            Ok(t) => transcripts.push(t),
                            Err(reason) => {
                                tracing::warn!(channel = %item.channel, %reason, "voice note not transcribed");
                                item.text
                                    .push_str(&format!("\n[{label}: not transcribed — {reason}]"));
                            }
                        }
                    }
                    None => speech_hint(gw, channel.as_ref(), item).await,
                }
            }
            let outcome = match fetched {
                Ok(f) => gw
                    .inner
                    .client
                    .upload_file(session_id, &f.name, f.bytes)
                    .await
                    .map_err(|e| match e.code() {
                        Some("unsupported_file_type" | "file_too_large") => e.to_string(),
                        _ => "the server could not store it".to_string(),
                    }),
                Err(reason) => Err(reason),
            };
            match outcome {
                Ok(info) => {
                    tracing::info!(channel = %item.channel, file_id = %info.file_id, mime = %info.mime, size = info.size, "chat file taken");
                    refs.push(AttachmentRef {
                        file_id: info.file_id,
                    });
                    sent.push(label);
                }
                Err(reason) => {
                    tracing::warn!(channel = %item.channel, file = %label, %reason, "chat file not taken");
                    item.text
                        .push_str(&format!("\n[{label}: not received — {reason}]"));
                }
            }
            if refs.len() >= gw.inner.config.max_attachments {
                break;
            }
        }
        // A voice note's transcript is the message's text (after its caption, if any); the
        // audio stays attached.
        for t in transcripts {
            if !item.text.trim().is_empty() {
                item.text.push_str("\n\n");
            }
            item.text.push_str(&t);
        }
        if attribute && !sent.is_empty() {
            item.text.push_str(&format!(" (sent {})", sent.join(", ")));
        }
        item.text = item.text.trim().to_string();
        if item.text.is_empty() && !sent.is_empty() {
            // A file without a caption: the message still says something.
            item.text = format!("(sent {})", sent.join(", "));
        }
    }
    (items, refs)
}

/// Tells a chat once that voice notes need a speech service (they still reach the agent, as
/// audio files).
async fn speech_hint(gw: &Gateway, channel: &dyn Channel, item: &Queued) {
    let key = format!("speech-hint:{}:{}", item.channel, item.chat.id);
    if matches!(gw.inner.store.kv_get(&key).await, Ok(Some(_))) {
        return;
    }
    let text = "Voice notes reach the agent as audio files only: transcribing them needs a speech-to-text service ([speech] in the server's configuration).";
    log_err(
        "telling a chat about voice notes",
        channel.send(&item.chat, text, &[]).await,
    );
    if let Err(e) = gw.inner.store.kv_set(&key, "told").await {
        tracing::warn!(error = %e, "could not remember that a chat was told about voice notes");
    }
}

pub(super) async fn worker(gw: Gateway, key: String, mut rx: mpsc::UnboundedReceiver<()>) {
    let mut backoff = Duration::from_millis(500);
    loop {
        if gw.inner.cancel.is_cancelled() {
            return;
        }
        match step(&gw, &key).await {
            Ok(true) => {
                backoff = Duration::from_millis(500);
                continue;
            }
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(routing_key = %key, error = %e, "gateway worker step failed; retrying");
                tokio::select! {
                    _ = gw.inner.cancel.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(30));
                continue;
            }
        }
        // Idle: wait for a kick.
        tokio::select! {
            _ = gw.inner.cancel.cancelled() => return,
            got = rx.recv() => if got.is_none() { return },
        }
        while rx.try_recv().is_ok() {}
    }
}

/// One step: follow a run to its end, or start one from the queue. `Ok(true)` when there
/// may be more to do at once.
pub(super) async fn step(gw: &Gateway, key: &str) -> Result<bool, GatewayError> {
    if let Some(run) = gw.inner.store.run(key).await? {
        follow(gw, key, run).await?;
        return Ok(true);
    }
    let mut items = gw.inner.store.queued(key).await?;
    // A batch sent before a crash, whose run was not recorded: sent again exactly as it
    // was (messages that arrived since wait for the next batch), under the same
    // idempotency key, so the server answers the run it started for it, or starts it now.
    let intent_key = format!("intent:{key}");
    let intent = gw
        .inner
        .store
        .kv_get(&intent_key)
        .await?
        .and_then(|i| Intent::parse(&i));
    if let Some(i) = &intent {
        items.retain(|q| q.id <= i.upto);
    } else {
        // A batch the session takes: under its file count and content size (the rest
        // waits for the next batch), so a busy chat's queue never grows into a batch that
        // is refused whole, again and again.
        let keep = batch_cut(&items, gw.inner.config.max_attachments, MAX_BATCH_BYTES);
        items.truncate(keep);
    }
    let files_in_batch: usize = items.iter().map(|q| q.attachments.len()).sum();
    let (Some(first), Some(last)) = (items.first(), items.last()) else {
        if intent.is_some() {
            // Nothing of it left queued: the intent is stale.
            gw.inner.store.kv_set(&intent_key, "").await?;
            return Ok(true);
        }
        return Ok(false);
    };
    let idempotency_key = format!("gateway:{key}:{}-{}", first.id, last.id);
    let route = ensure_route(gw, key, last, &items).await?;
    // Another client may run something on the session: wait for its end.
    let detail = match gw.inner.client.get_session(route.session_id).await {
        Ok(d) => d,
        Err(e) if e.status() == Some(404) && !route.bound => {
            // The session is gone: the route starts over with a new one.
            gw.inner.store.delete_route(key).await?;
            return Ok(true);
        }
        Err(e) if e.status() == Some(404) => {
            // A binding to a deleted session: say so once per batch and wait (backoff)
            // instead of spinning; unbind to start fresh.
            if let Some(ch) = gw.channel(&route.channel) {
                log_err(
                    "posting a binding error",
                    ch.send(
                        &route.chat,
                        "This chat is bound to a session that no longer exists; ask the owner to change [gateway.bindings].",
                        &[],
                    )
                    .await,
                );
            }
            return Err(GatewayError::Other(format!(
                "routing key {key} is bound to deleted session {}",
                route.session_id
            )));
        }
        Err(e) => return Err(e.into()),
    };
    let after = intent
        .as_ref()
        .map(|i| i.after)
        .unwrap_or(detail.session.last_event_id);
    let (items, files) = fetch_files(gw, route.session_id, items.clone()).await;
    let text = batch_text(&items);
    let mut context = Vec::new();
    if let Some(c) = batch_context(&items) {
        context.push(ContextItem {
            name: "caller".into(),
            content: match &c {
                serde_json::Value::String(s) => s.clone(),
                other => serde_json::to_string_pretty(other).unwrap_or_default(),
            },
            priority: Some(ContextPriority::High),
        });
    }
    let mut req = SendMessageRequest::user(text, MessageType::Message);
    req.context = context;
    req.message.attachments = files;
    let followed = |run_id: Uuid, deadline: Option<String>| FollowedRun {
        routing_key: key.to_string(),
        session_id: route.session_id,
        run_id,
        last_event_id: after,
        stream_message: None,
        streamed: String::new(),
        delivered: 0,
        deadline,
        pending: String::new(),
        pages: Vec::new(),
    };
    // An intent, stored before sending: if the process dies after the server took the
    // batch but before its run was recorded here, the restart sends the same batch with
    // the same key, and the server answers the run it started (exactly once, whatever the
    // batch's text or files).
    if intent.is_none() {
        let intent = Intent {
            after,
            upto: last.id,
        };
        gw.inner.store.kv_set(&intent_key, &intent.text()).await?;
    } else {
        tracing::info!(routing_key = %key, "sending again the batch a crash left without its run");
    }
    let sent = gw
        .inner
        .client
        .send_message_once(route.session_id, &req, &idempotency_key)
        .await;
    let run_id = match sent {
        Ok(r) => r.run_id,
        Err(e) if e.code() == Some("session_already_running") => {
            // Follow the active run first; the batch stays at the front of the queue.
            if let Some(active) = detail.session.active_run_id {
                gw.inner.store.put_run(&followed(active, None)).await?;
                return Ok(true);
            }
            return Err(e.into());
        }
        // Refused for good (too many files, too long, a type the server does not take): a
        // retry would get the same answer and jam the chat. Told in words and set aside
        // where an operator sees it; the chat's next messages run.
        Err(e) if is_permanent(&e) => {
            park(
                gw,
                key,
                &route,
                &items,
                &req.message.content,
                files_in_batch,
                &e,
            )
            .await?;
            gw.inner.store.kv_set(&intent_key, "").await?;
            return Ok(true);
        }
        // The batch stays queued (at the front) and is retried.
        Err(e) => return Err(e.into()),
    };
    let deadline = chrono::Utc::now()
        + chrono::Duration::from_std(gw.inner.config.run_timeout).unwrap_or_default();
    let deadline = Some(deadline.to_rfc3339_opts(chrono::SecondsFormat::Micros, true));
    gw.inner
        .store
        .start_run(&followed(run_id, deadline), last.id)
        .await?;
    gw.inner.store.kv_set(&intent_key, "").await?;
    Ok(true)
}

/// The route's session, created when there is none; the reply target and the requesters
/// (every sender of `batch`, whose newest message is `latest`) refreshed.
pub(super) async fn ensure_route(
    gw: &Gateway,
    key: &str,
    latest: &Queued,
    batch: &[Queued],
) -> Result<Route, GatewayError> {
    let cfg = &gw.inner.config;
    let existing = gw.inner.store.route(key).await?;
    let (session_id, bound) = match (&existing, cfg.bindings.get(key)) {
        (_, Some(bound)) => (*bound, true),
        (Some(r), None) => (r.session_id, r.bound),
        (None, None) => {
            let s = gw
                .inner
                .client
                .create_session(&CreateSessionRequest {
                    title: Some(title(
                        &cfg.title_template,
                        &latest.channel,
                        &latest.peer,
                        &latest.chat,
                    )),
                    cwd: cfg.session_cwd.clone(),
                    model: cfg.session_model.clone(),
                    permission_mode: cfg.session_permission_mode,
                    ..CreateSessionRequest::default()
                })
                .await?;
            tracing::info!(routing_key = %key, session_id = %s.id, "new session for a chat");
            (s.id, false)
        }
    };
    let route = Route {
        routing_key: key.to_string(),
        session_id,
        channel: latest.channel.clone(),
        chat: latest.chat.clone(),
        requester: latest.peer.clone(),
        requesters: {
            let mut ids: Vec<String> = Vec::new();
            for q in batch {
                if !ids.contains(&q.peer.id) {
                    ids.push(q.peer.id.clone());
                }
            }
            ids
        },
        bound,
    };
    gw.inner.store.put_route(&route).await?;
    Ok(route)
}

/// Follows a run from its stored cursor to its end, streaming the reply into the chat.
///
/// The stored state is the cursor (the last event handled), the text received but not yet
/// shown (`pending`, pushed back into the buffer after a restart), and the message being
/// edited with what it shows; the three are saved together, so a restart neither loses nor
/// repeats reply text.
pub(super) async fn follow(
    gw: &Gateway,
    key: &str,
    mut run: FollowedRun,
) -> Result<(), GatewayError> {
    let Some(route) = gw.inner.store.route(key).await? else {
        gw.inner.store.finish_run(key).await?;
        return Ok(());
    };
    let Some(ch) = gw.channel(&route.channel) else {
        gw.inner.store.finish_run(key).await?;
        return Ok(());
    };
    let mut events = gw
        .inner
        .client
        .subscribe(run.session_id, Some(run.last_event_id));
    // A platform that edits shows the reply in messages edited as it grows (see `render`);
    // one that cannot gets it in readable chunks (`StreamBuffer`, `deliver`).
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
    let mut buf = StreamBuffer::new();
    if !edits && !run.pending.is_empty() {
        buf.push(&run.pending, Instant::now());
    }
    let edit_interval = ch.edit_interval();
    // When the reply was last shown, and whether text arrived since.
    let mut shown_at: Option<Instant> = None;
    let mut unshown = edits && !run.streamed.is_empty();
    let mut dirty = false;
    let mut tick = tokio::time::interval(
        edit_interval.clamp(Duration::from_millis(50), Duration::from_millis(250)),
    );
    loop {
        // The deadline is read from the store (a decision may have moved it) and does not
        // run while a prompt of this run waits.
        let waiting = gw
            .inner
            .store
            .prompt_of_session(run.session_id)
            .await?
            .is_some_and(|p| p.run_id == run.run_id);
        if let Some(stored) = gw.inner.store.run(key).await? {
            run.deadline = stored.deadline;
        }
        let until_deadline = match run.deadline.as_deref().and_then(parse_time) {
            Some(d) if !waiting => (d - chrono::Utc::now()).to_std().unwrap_or(Duration::ZERO),
            _ => Duration::from_secs(365 * 24 * 3600),
        };
        let item = tokio::select! {
            _ = gw.inner.cancel.cancelled() => return Ok(()),
            _ = tick.tick() => {
                if edits {
                    if unshown && shown_at.is_none_or(|t| t.elapsed() >= edit_interval) {
                        if render(&*ch, &route.chat, &mut run, false).await? {
                            shown_at = Some(Instant::now());
                        }
                        unshown = false;
                        dirty = true;
                    }
                } else if let Some(chunk) = buf.take_ready(Instant::now()) {
                    deliver(&*ch, &route.chat, &mut run, &chunk).await?;
                    dirty = true;
                }
                if dirty {
                    run.pending = buf.pending();
                    gw.inner.store.put_run(&run).await?;
                    dirty = false;
                }
                continue;
            }
            _ = tokio::time::sleep(until_deadline) => {
                let mins = gw.inner.config.run_timeout.as_secs() / 60;
                let note = format!("⏱ The run took longer than {mins} min and is being cancelled.");
                log_err("posting a timeout notice", ch.send(&route.chat, &note, &[]).await);
                log_err("cancelling a timed-out run", gw.inner.client.cancel(run.session_id, run.run_id).await);
                run.deadline = None;
                run.pending = buf.pending();
                gw.inner.store.put_run(&run).await?;
                continue;
            }
            item = events.next() => item,
        };
        let env = match item {
            Some(Ok(env)) => env,
            Some(Err(e)) if e.is_transient() => continue,
            Some(Err(e)) if e.status() == Some(404) => {
                gw.inner.store.finish_run(key).await?;
                return Ok(());
            }
            Some(Err(e)) => return Err(e.into()),
            None => return Err(GatewayError::Other("event stream ended".into())),
        };
        run.last_event_id = env.id;
        dirty = true;
        if env.event.run_id() != run.run_id {
            continue;
        }
        match env.event {
            AgentEvent::TextDelta { delta, .. } if edits => {
                run.streamed.push_str(&delta);
                unshown = true;
                // The first showing waits for the next tick (a short reply then arrives in
                // one message, not a post and an edit); later ones come at the edit pace.
                if shown_at.is_some_and(|t| t.elapsed() >= edit_interval) {
                    if render(&*ch, &route.chat, &mut run, false).await? {
                        shown_at = Some(Instant::now());
                    }
                    unshown = false;
                    gw.inner.store.put_run(&run).await?;
                    dirty = false;
                }
            }
            AgentEvent::TextDelta { delta, .. } => {
                buf.push(&delta, Instant::now());
                if let Some(chunk) = buf.take_ready(Instant::now()) {
                    deliver(&*ch, &route.chat, &mut run, &chunk).await?;
                    run.pending = buf.pending();
                    gw.inner.store.put_run(&run).await?;
                    dirty = false;
                }
            }
            AgentEvent::FileShared { file, caption, .. } => {
                // At least once: a crash before the cursor is stored sends it again.
                match gw
                    .inner
                    .client
                    .download_file(run.session_id, file.file_id)
                    .await
                {
                    Ok((bytes, _)) => {
                        let out = crate::channel::OutgoingFile {
                            path: format!("/v1/sessions/{}/files/{}", run.session_id, file.file_id),
                            name: file.name.clone(),
                            mime: file.mime.clone(),
                            bytes,
                            caption,
                        };
                        log_err(
                            "sending a file",
                            ch.send_file(&route.chat, &out).await.map(|_| ()),
                        );
                    }
                    Err(e) => {
                        tracing::warn!(routing_key = %key, file_id = %file.file_id, error = %e, "a shared file could not be read from the server");
                    }
                }
                gw.inner.store.put_run(&run).await?;
                dirty = false;
            }
            AgentEvent::WorkspaceChanged {
                files,
                insertions,
                deletions,
                ..
            } => {
                // Comes just before the run's end: the reply ends with it.
                let line = format!(
                    "\n\n📝 {} (/diff shows them, /undo reverts them)",
                    switchboard_protocol::change_summary(files, insertions, deletions)
                );
                if edits {
                    run.streamed.push_str(&line);
                    unshown = true;
                } else {
                    buf.push(&line, Instant::now());
                }
            }
            AgentEvent::WaitingForToolApproval { tool_call_ids, .. } => {
                if edits {
                    render(&*ch, &route.chat, &mut run, true).await?;
                    run.delivered += run.streamed.chars().count();
                    unshown = false;
                } else if let Some(rest) = buf.take_rest() {
                    deliver(&*ch, &route.chat, &mut run, &rest).await?;
                }
                // The reply continues in a new message below the prompt.
                run.stream_message = None;
                run.streamed.clear();
                run.pending.clear();
                run.pages.clear();
                gw.inner.store.put_run(&run).await?;
                dirty = false;
                gw.on_waiting(&route, &run, &tool_call_ids).await?;
            }
            AgentEvent::ToolRejected {
                tool_call_id,
                reason,
                cause,
                ..
            } => {
                if let Some(p) = gw.inner.store.prompt_of_session(run.session_id).await?
                    && p.run_id == run.run_id
                    && p.tool_call_ids.contains(&tool_call_id)
                    && gw.inner.store.take_prompt(&p.id).await?
                    && !p.prompt_message.is_empty()
                {
                    // Rejected by the server (timeout, cancel, restart): the prompt says so.
                    let note = if cause == switchboard_protocol::RejectionCause::Timeout {
                        "⌛ This approval expired: no decision in time.".to_string()
                    } else {
                        format!("❌ Rejected: {reason}")
                    };
                    let room = ch.max_chars().saturating_sub(note.chars().count() + 2);
                    let text = format!("{}\n\n{note}", truncate(&p.prompt_text, room));
                    log_err(
                        "editing an expired prompt",
                        ch.edit(&p.chat, &p.prompt_message, &text, &[]).await,
                    );
                }
            }
            AgentEvent::RunCompleted { .. } | AgentEvent::RunError { .. } => {
                if edits {
                    // The final edit always lands: the whole text, not only whole words.
                    render(&*ch, &route.chat, &mut run, true).await?;
                } else if let Some(rest) = buf.take_rest() {
                    deliver(&*ch, &route.chat, &mut run, &rest).await?;
                }
                // Finished first, notices after: a crash in between loses a notice rather
                // than posting it twice.
                gw.inner.store.finish_run(key).await?;
                if let AgentEvent::RunError { error, .. } = &env.event {
                    let text = truncate(&format!("⚠️ The run failed: {error}"), ch.max_chars());
                    log_err(
                        "posting a run error",
                        ch.send(&route.chat, &text, &[]).await,
                    );
                } else if run.streamed.is_empty()
                    && run.delivered == 0
                    && let AgentEvent::RunCompleted { stop_reason, .. } = &env.event
                    && *stop_reason == switchboard_protocol::StopReason::Cancelled
                {
                    log_err(
                        "posting a cancel notice",
                        ch.send(&route.chat, "Stopped.", &[]).await,
                    );
                }
                // A prompt left over (the run ended without a decision) is closed.
                if let Some(p) = gw.inner.store.prompt_of_session(run.session_id).await?
                    && p.run_id == run.run_id
                    && gw.inner.store.take_prompt(&p.id).await?
                    && !p.prompt_message.is_empty()
                {
                    let note = "⌛ The run ended; this approval is closed.";
                    let room = ch.max_chars().saturating_sub(note.chars().count() + 2);
                    let text = format!("{}\n\n{note}", truncate(&p.prompt_text, room));
                    log_err(
                        "closing a prompt",
                        ch.edit(&p.chat, &p.prompt_message, &text, &[]).await,
                    );
                }
                return Ok(());
            }
            _ => {}
        }
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
        let id = match ch.send(chat, &shown, &[]).await {
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
        match ch.send(chat, &text, &[]).await {
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
        let id = ch.send(chat, &part, &[]).await?;
        run.stream_message = Some(id);
        run.delivered += run.streamed.chars().count();
        run.streamed = part;
    }
    Ok(())
}
