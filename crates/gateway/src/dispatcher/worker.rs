//! The worker of one routing key: batches the queue into a run, follows the run's events
//! and shows the reply.

use std::time::Duration;

use switchboard_protocol::{
    AttachmentRef, ContextItem, ContextPriority, CreateSessionRequest, MessageType,
    SendMessageRequest,
};
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::channel::Channel;
use crate::routing::title;
use crate::store::{FollowedRun, Queued, Route};

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
    // Whom the run's usage is for: this chat (its routing key is `channel:conversation`).
    req.origin = Some(switchboard_protocol::usage::RunOrigin {
        channel: Some(last.channel.clone()),
        conversation: Some(
            key.strip_prefix(&format!("{}:", last.channel))
                .unwrap_or(key)
                .to_string(),
        ),
        ..Default::default()
    });
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
        outbound: Vec::new(),
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
    // As the person who wrote last (docs/teams.md: a linked chat identity acts as them).
    let sent = gw
        .inner
        .client
        .on_behalf_of(&super::approvals::identity(&last.channel, &last.peer))
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
            // A chat's session belongs to the person who started it, when linked; one whose
            // role starts no sessions (a viewer) gets the chat's own, and their message is
            // then refused in words.
            let req = CreateSessionRequest {
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
            };
            let s = match gw
                .inner
                .client
                .on_behalf_of(&super::approvals::identity(&latest.channel, &latest.peer))
                .create_session(&req)
                .await
            {
                Err(e) if e.status() == Some(403) => gw.inner.client.create_session(&req).await?,
                r => r?,
            };
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
