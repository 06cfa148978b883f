//! `/v1/gateway/send` and `/v1/gateway/approvals`: other surfaces (the scheduler, the relay) post messages and ask for approvals in a chat.

use super::*;

/// Longest field of a stored notification context.
pub(crate) const CONTEXT_FIELD_MAX: usize = 4000;

pub(crate) fn truncate_context(v: serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::String(s) => {
            serde_json::Value::String(crate::text::truncate(&s, CONTEXT_FIELD_MAX))
        }
        serde_json::Value::Object(m) => serde_json::Value::Object(
            m.into_iter()
                .map(|(k, v)| (k, truncate_context(v)))
                .collect(),
        ),
        other => other,
    }
}

/// Sends a notification to a chat — or a test message to a conversation listed by
/// `GET /v1/gateway/sessions`: `{"channel": s.channel, "target": s.chat.id, "thread":
/// s.chat.thread, "kind": s.chat.kind, "text": "…"}` posts where that conversation's replies
/// go. With an `Idempotency-Key` header, the same key sent again answers the first send's
/// `message_id` and posts nothing (a send under way with it answers 503: retry).
#[utoipa::path(post, path = "/v1/gateway/send", tag = "gateway", request_body = GatewaySendRequest,
    params(("Idempotency-Key" = Option<String>, Header, pattern = "^[!-~]{1,255}$", description = "1 to 255 visible ASCII characters: a repeat answers the first send instead of posting again")),
    security(("bearer" = ["gateway:admin"])),
    responses((status = 200, description = "Sent", body = GatewaySendResponse),
              (status = 400, description = "`invalid_json` (not a send request), `validation_failed` (empty text, `kind` `thread` without `thread`) or `invalid_header` (a malformed `Idempotency-Key`)", body = ErrorBody),
              (status = 413, description = "`payload_too_large`", body = ErrorBody),
              (status = 422, description = "`unprocessable_entity`: no channel of that name, or `kind: thread` without `thread`", body = ErrorBody),
              (status = 500, description = "`internal`: the context could not be stored", body = ErrorBody),
              (status = 503, description = "`unavailable`: the platform refused or did not answer, or a send with the same `Idempotency-Key` is under way", body = ErrorBody)))]
pub(crate) async fn send(
    State(s): State<ApiState>,
    headers: HeaderMap,
    body: Bytes,
) -> Answer<Json<GatewaySendResponse>> {
    let key = match headers.get("idempotency-key").map(|v| v.to_str()) {
        None => None,
        Some(Ok(k)) if switchboard_protocol::is_valid_idempotency_key(k) => Some(k.to_string()),
        Some(_) => {
            return Err(error(
                ErrorCode::InvalidHeader,
                "Idempotency-Key must be 1 to 255 visible ASCII characters",
            ));
        }
    };
    let req: GatewaySendRequest = json_body(&body)?;
    if req.text.trim().is_empty() {
        return Err(error(
            ErrorCode::ValidationFailed,
            "invalid text: must not be empty",
        ));
    }
    if req.target.trim().is_empty() {
        return Err(error(
            ErrorCode::ValidationFailed,
            "invalid target: must not be blank",
        ));
    }
    if req.context.as_ref().is_some_and(|c| !c.is_object()) {
        return Err(error(
            ErrorCode::ValidationFailed,
            "invalid context: must be an object",
        ));
    }
    // One field read against another, which the schema does not say: 422.
    if req.kind == Some(ChatKind::Thread) && req.thread.is_none() {
        return Err(error(
            ErrorCode::UnprocessableEntity,
            "invalid kind: \"thread\" needs the thread's id in `thread`",
        ));
    }
    let Some(ch) = s.gw()?.channel(&req.channel) else {
        let mut names: Vec<String> = s
            .gw()?
            .channels()
            .iter()
            .map(|c| c.name().to_string())
            .collect();
        names.sort();
        return Err(error(
            ErrorCode::UnprocessableEntity,
            format!(
                "unknown channel {:?}; configured: [{}]",
                req.channel,
                names.join(", ")
            ),
        ));
    };
    let chat = ChatRef {
        id: req.target.clone(),
        kind: req.kind.unwrap_or(if req.thread.is_some() {
            ChatKind::Thread
        } else {
            ChatKind::Direct
        }),
        thread: req.thread.clone(),
    };
    let text = crate::text::truncate(&req.text, ch.max_chars());
    if let Some(k) = &key {
        match s
            .gw()?
            .store()
            .claim_send(k)
            .await
            .or_failed("claiming a send")?
        {
            crate::store::SendClaim::Mine => {}
            crate::store::SendClaim::Sent(message_id) => {
                return Ok(Json(GatewaySendResponse { message_id }));
            }
            crate::store::SendClaim::Busy => {
                return Err(error(
                    ErrorCode::Unavailable,
                    "a send with this Idempotency-Key is under way; retry",
                )
                .with_retry_after(1));
            }
        }
    }
    let sent = ch.send(&chat, &text, &[]).await;
    if let Some(k) = &key {
        let recorded = match &sent {
            Ok(message_id) => s.gw()?.store().send_done(k, message_id).await,
            Err(_) => s.gw()?.store().send_failed(k).await,
        };
        if let Err(e) = recorded {
            tracing::warn!(error = %e, "recording an idempotent send");
        }
    }
    let message_id = sent.map_err(|e| error(ErrorCode::Unavailable, e.to_string()))?;
    if let Some(ctx) = req.context {
        let ttl = s.gw()?.config().context_ttl;
        s.gw()?
            .store()
            .put_context(&req.channel, &req.target, &truncate_context(ctx), ttl)
            .await
            .or_failed("storing a notification context")?;
    }
    Ok(Json(GatewaySendResponse { message_id }))
}

pub(crate) fn gateway_error(what: &str, e: crate::GatewayError) -> ApiError {
    match e {
        crate::GatewayError::Channel(e) => error(ErrorCode::Unavailable, e.to_string()),
        crate::GatewayError::Client(e) if e.status() == Some(404) => {
            error(ErrorCode::SessionNotFound, "no such session")
        }
        crate::GatewayError::Store(e) => store_failed(what, e),
        e => internal(what, e),
    }
}

/// Asks a chat to decide tool calls of a run the gateway does not follow (a scheduled run):
/// one prompt with Allow / Deny buttons; a press decides them. The same calls asked again
/// answer the prompt already posted.
#[utoipa::path(post, path = "/v1/gateway/approvals", tag = "gateway", request_body = GatewayAskRequest,
    security(("bearer" = ["gateway:admin"])),
    responses((status = 200, description = "Asked (or asked already)", body = GatewayAskResponse),
              (status = 400, description = "`invalid_json` (not an ask request) or `validation_failed` (no calls)", body = ErrorBody),
              (status = 404, description = "`session_not_found`", body = ErrorBody),
              (status = 409, description = "`no_pending_approval`: the run does not wait for those calls", body = ErrorBody),
              (status = 413, description = "`payload_too_large`", body = ErrorBody),
              (status = 422, description = "`unprocessable_entity`: no channel of that name", body = ErrorBody),
              (status = 500, description = "`internal`: the gateway store failed", body = ErrorBody),
              (status = 503, description = "`unavailable`: the platform refused or did not answer", body = ErrorBody)))]
pub(crate) async fn ask(
    State(s): State<ApiState>,
    body: Bytes,
) -> Answer<Json<GatewayAskResponse>> {
    let req: GatewayAskRequest = json_body(&body)?;
    if req.tool_call_ids.is_empty() {
        return Err(error(
            ErrorCode::ValidationFailed,
            "invalid tool_call_ids: name at least one call",
        ));
    }
    if req.target.trim().is_empty() {
        return Err(error(
            ErrorCode::ValidationFailed,
            "invalid target: must not be blank",
        ));
    }
    use crate::dispatcher::AskOutcome;
    match s
        .gw()?
        .ask(&req)
        .await
        .map_err(|e| gateway_error("asking for an approval", e))?
    {
        AskOutcome::Asked(prompt_id, message_id) => Ok(Json(GatewayAskResponse {
            prompt_id,
            message_id,
        })),
        AskOutcome::NotWaiting => Err(error(
            ErrorCode::NoPendingApproval,
            "the run does not wait for a decision on those calls",
        )),
        AskOutcome::UnknownChannel => Err(error(
            ErrorCode::UnprocessableEntity,
            format!("unknown channel {:?}", req.channel),
        )),
    }
}

/// Nobody answered a prompt asked with `POST /v1/gateway/approvals`: its calls are rejected
/// with the reason, and its message says so (its buttons removed).
#[utoipa::path(post, path = "/v1/gateway/approvals/{id}/expire", tag = "gateway", request_body = GatewayExpireRequest,
    params(("id" = String, Path, description = "The prompt's id")),
    security(("bearer" = ["gateway:admin"])),
    responses((status = 200, description = "Settled: whether the calls were rejected now", body = GatewayExpireResponse),
              (status = 400, description = "`invalid_json` or `validation_failed` (blank reason)", body = ErrorBody),
              (status = 404, description = "`not_found`: no such prompt (answered already)", body = ErrorBody),
              (status = 413, description = "`payload_too_large`", body = ErrorBody),
              (status = 500, description = "`internal`: the gateway store failed", body = ErrorBody)))]
pub(crate) async fn expire(
    State(s): State<ApiState>,
    Path(id): Path<String>,
    body: Bytes,
) -> Answer<Json<GatewayExpireResponse>> {
    let req: GatewayExpireRequest = json_body(&body)?;
    if req.reason.trim().is_empty() {
        return Err(error(
            ErrorCode::ValidationFailed,
            "invalid reason: must not be blank",
        ));
    }
    match s
        .gw()?
        .expire(&id, &req.reason)
        .await
        .map_err(|e| gateway_error("expiring an approval", e))?
    {
        Some(rejected) => Ok(Json(GatewayExpireResponse { rejected })),
        None => Err(error(
            ErrorCode::NotFound,
            format!("no pending prompt {id:?}"),
        )),
    }
}
