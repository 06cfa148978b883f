//! `session/prompt` and `session/cancel`.

use super::*;

/// The prompt's text and its attachments (uploaded as files of the session).
pub(crate) async fn prompt_message(
    api: &Api,
    session: Uuid,
    blocks: &[ContentBlock],
) -> Result<InputMessage, Error> {
    let mut text = String::new();
    let mut attachments = Vec::new();
    let mut names: Vec<String> = Vec::new();
    let mut push = |s: &str| {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(s);
    };
    let b64 = |data: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| {
                Error::new(
                    ErrorCode::INVALID_PARAMS,
                    format!("content data is not base64: {e}"),
                )
            })
    };
    for block in blocks {
        let upload: Option<(String, Vec<u8>)> = match block {
            ContentBlock::Text(t) => {
                push(&t.text);
                None
            }
            ContentBlock::ResourceLink(l) => {
                push(&format!("[{}]({})", l.name, l.uri));
                None
            }
            ContentBlock::Image(i) => {
                let ext = i.mime_type.rsplit('/').next().unwrap_or("bin");
                Some((format!("image.{ext}"), b64(&i.data)?))
            }
            ContentBlock::Audio(a) => {
                let ext = a.mime_type.rsplit('/').next().unwrap_or("bin");
                Some((format!("audio.{ext}"), b64(&a.data)?))
            }
            ContentBlock::Resource(r) => match &r.resource {
                EmbeddedResourceResource::TextResourceContents(t) => {
                    Some((file_name(&t.uri), t.text.clone().into_bytes()))
                }
                EmbeddedResourceResource::BlobResourceContents(b) => {
                    Some((file_name(&b.uri), b64(&b.blob)?))
                }
                _ => None,
            },
            _ => None,
        };
        if let Some((name, bytes)) = upload {
            names.push(name.clone());
            let file = api
                .upload_file(session, &name, bytes)
                .await
                .map_err(|e| api_error(&format!("attaching {name}"), &e))?;
            attachments.push(AttachmentRef {
                file_id: file.file_id,
            });
        }
    }
    if text.trim().is_empty() && attachments.is_empty() {
        return Err(Error::new(
            ErrorCode::INVALID_PARAMS,
            "the prompt has no text and nothing attached",
        ));
    }
    if text.trim().is_empty() {
        // A message needs text: say what came.
        text = format!("({} attached)", names.join(", "));
    }
    Ok(InputMessage {
        role: switchboard_protocol::Role::User,
        content: text,
        attachments,
    })
}

/// The last segment of a resource URI, as a file name.
pub(crate) fn file_name(uri: &str) -> String {
    uri.trim_end_matches('/')
        .rsplit(['/', '\\'])
        .next()
        .filter(|n| !n.is_empty() && !n.contains(':'))
        .unwrap_or("resource.txt")
        .to_owned()
}

/// `session/prompt`. A `$/cancel_request` for it is a `session/cancel` of its run: the run
/// is cancelled and the prompt answers `cancelled` as ACP asks.
pub(crate) async fn prompt(
    hub: &Arc<Hub>,
    req: PromptRequest,
    cancellation: RequestCancellation,
) -> Result<PromptResponse, Error> {
    let open = hub.session(&req.session_id.to_string())?;
    let watcher = {
        let (hub, session, c) = (
            hub.clone(),
            req.session_id.to_string(),
            cancellation.clone(),
        );
        AbortOnDrop(tokio::spawn(async move {
            c.cancelled().await;
            cancel(&hub, &session).await;
        }))
    };
    let answer = prompt_run(hub, &open, req, &cancellation).await;
    drop(watcher);
    answer
}

/// Stops a task when dropped (a prompt whose connection went away stops watching).
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn prompt_run(
    hub: &Hub,
    open: &Open,
    req: PromptRequest,
    cancellation: &RequestCancellation,
) -> Result<PromptResponse, Error> {
    let message = prompt_message(&hub.api, open.id, &req.prompt).await?;
    let content = message.content.clone();
    open.runs.lock().pending_prompts.push(content.clone());
    let send = SendMessageRequest {
        message,
        // Waits its turn when a run from elsewhere is under way.
        kind: MessageType::FollowUp,
        ..SendMessageRequest::user("", MessageType::FollowUp)
    };
    let sent = match hub.api.send_message(open.id, &send).await {
        Ok(sent) => sent,
        Err(e) => {
            let mut runs = open.runs.lock();
            if let Some(i) = runs.pending_prompts.iter().position(|p| *p == content) {
                runs.pending_prompts.remove(i);
            }
            return Err(api_error("sending the prompt", &e));
        }
    };
    let run = sent.run_id;
    let (rx, cancel_now) = {
        let mut runs = open.runs.lock();
        runs.current = Some(run);
        // A `$/cancel_request` that came while the message was being made counts too.
        let cancel_now = std::mem::take(&mut runs.cancel_pending) || cancellation.is_cancelled();
        let rx = match (runs.ended.remove(&run), runs.closed.clone()) {
            (Some(ending), _) => Err(ending),
            // Closed (`session/close`) while its message was being sent: cancelled.
            (None, Some(_)) if cancel_now => Err(Ending::Done(
                switchboard_protocol::StopReason::Cancelled,
                None,
            )),
            (None, Some(why)) => Err(Ending::Failed {
                error: format!("{why}; session/load the session again"),
                retryable: true,
            }),
            (None, None) => {
                let (tx, rx) = oneshot::channel();
                runs.waiters.insert(run, tx);
                Ok(rx)
            }
        };
        (rx, cancel_now)
    };
    if cancel_now {
        cancel_run(hub, open, run).await;
    }
    let ending = match rx {
        Err(ending) => ending,
        Ok(rx) => rx.await.unwrap_or(Ending::Failed {
            error: "the session was closed".into(),
            retryable: true,
        }),
    };
    {
        let mut runs = open.runs.lock();
        if runs.current == Some(run) {
            runs.current = None;
        }
    }
    match ending {
        Ending::Done(reason, backend) => Ok(PromptResponse::new(map::stop_reason(
            reason,
            backend.as_deref(),
        ))),
        Ending::Failed { error, retryable } => Err(Error::new(ErrorCode::INTERNAL_ERROR, error)
            .data(
                serde_json::json!({"code": "run_failed", "retryable": retryable, "run_id": run}),
            )),
    }
}

pub(crate) async fn cancel(hub: &Hub, session: &str) {
    let Ok(open) = hub.session(session) else {
        return;
    };
    let run = {
        let mut runs = open.runs.lock();
        if runs.current.is_none() && !runs.pending_prompts.is_empty() {
            // The prompt is still being sent: cancelled as soon as its run is known.
            runs.cancel_pending = true;
        }
        runs.current
    };
    if let Some(run) = run {
        cancel_run(hub, &open, run).await;
    }
}

/// Cancels `run`. One still queued (waiting behind a run from elsewhere) is dropped without
/// an event of its own, so its prompt is answered `cancelled` here.
pub(crate) async fn cancel_run(hub: &Hub, open: &Open, run: Uuid) {
    match hub.api.cancel(open.id, run).await {
        Ok(_) => {
            let started = open.runs.lock().started.contains(&run);
            if !started {
                open.end(
                    run,
                    Ending::Done(switchboard_protocol::StopReason::Cancelled, None),
                );
            }
        }
        Err(e) => tracing::info!(session = %open.id, %run, error = %e, "cancelling the run"),
    }
}
