//! `/v1/gateway/pairing`: the pairing requests of unknown chat users, approved or refused.

use super::*;

/// A stored pairing request on the wire.
pub(crate) fn pairing_wire(
    p: crate::store::Pairing,
) -> Result<PairingRequest, crate::store::StoreError> {
    let expires_at = stored_time(&p.expires_at).ok_or_else(|| {
        crate::store::StoreError::Corrupt(format!(
            "pairing {}: expires_at {:?} is not a time",
            p.code, p.expires_at
        ))
    })?;
    Ok(PairingRequest {
        channel: p.channel,
        code: p.code,
        peer: p.peer,
        chat: p.chat,
        expires_at,
    })
}

/// The pending pairing requests: people unknown to the bot who wrote to it in a direct
/// message and were given a code; the oldest first, expired ones left out.
#[utoipa::path(get, path = "/v1/gateway/pairing", tag = "gateway", security(("bearer" = ["gateway:read"])),
    responses((status = 200, description = "The pending requests", body = PairingRequestsResponse),
              (status = 500, description = "`internal`: the gateway store failed", body = ErrorBody),
              (status = 503, description = "`store_unavailable`: the gateway's database did not answer; retry", body = ErrorBody)))]
pub(crate) async fn pairing_list(
    State(s): State<ApiState>,
) -> Answer<Json<PairingRequestsResponse>> {
    let requests = crate::pairing::pending(s.gw()?.store())
        .await
        .and_then(|ps| {
            ps.into_iter()
                .map(pairing_wire)
                .collect::<Result<Vec<_>, _>>()
        })
        .or_failed("listing pairing requests")?;
    Ok(Json(PairingRequestsResponse { requests }))
}

/// What is wrong with the request's fields, if anything: neither may be blank.
pub(crate) fn check_decision(req: &PairingDecision) -> Answer<()> {
    if req.channel.trim().is_empty() {
        return Err(error(
            ErrorCode::ValidationFailed,
            "invalid channel: must not be blank",
        ));
    }
    if req.code.trim().is_empty() {
        return Err(error(
            ErrorCode::ValidationFailed,
            "invalid code: must not be blank",
        ));
    }
    Ok(())
}

/// The answer to a pairing decision (`what` names it in the log): the request decided, 404
/// when there was no such pending request, or the store's failure.
pub(crate) fn pairing_decided(
    what: &str,
    req: &PairingDecision,
    decided: Result<Option<crate::store::Pairing>, crate::store::StoreError>,
) -> Answer<Json<PairingRequest>> {
    match decided
        .and_then(|p| p.map(pairing_wire).transpose())
        .or_failed(what)?
    {
        Some(p) => Ok(Json(p)),
        None => Err(no_pairing(req)),
    }
}

pub(crate) fn no_pairing(req: &PairingDecision) -> ApiError {
    error(
        ErrorCode::PairingNotFound,
        format!(
            "no pending pairing request with code {:?} on {:?} (a wrong code, one decided already, or expired)",
            req.code.trim(),
            req.channel
        ),
    )
}

/// Approves a pairing request: its chat is allowed from now on, so the person's next message
/// reaches the agent. The same as `switchboard pairing approve CHANNEL CODE` (nothing is
/// said in the chat). Answers the request approved.
#[utoipa::path(post, path = "/v1/gateway/pairing/approve", tag = "gateway", request_body = PairingDecision,
    security(("bearer" = ["gateway:admin"])),
    responses((status = 200, description = "Approved: the request", body = PairingRequest),
              (status = 400, description = "`invalid_json` (not JSON) or `validation_failed` (a missing, unknown or blank field)", body = ErrorBody),
              (status = 404, description = "`pairing_not_found`: no pending request with that code on that channel (wrong, decided already, or expired)", body = ErrorBody),
              (status = 413, description = "`payload_too_large`", body = ErrorBody),
              (status = 415, description = "`unsupported_media_type`: the body is not JSON", body = ErrorBody),
              (status = 500, description = "`internal`: the gateway store failed", body = ErrorBody),
              (status = 503, description = "`store_unavailable`: the gateway's database did not answer; nothing was decided, retry", body = ErrorBody)))]
pub(crate) async fn pairing_approve(
    State(s): State<ApiState>,
    switchboard_http::Json(req): switchboard_http::Json<PairingDecision>,
) -> Answer<Json<PairingRequest>> {
    check_decision(&req)?;
    let decided = crate::pairing::approve(s.gw()?.store(), &req.channel, &req.code).await;
    pairing_decided("approving a pairing request", &req, decided)
}

/// Refuses a pairing request: it is deleted, and the person is told in one short message
/// ("The owner of this bot declined your pairing request."; a message that cannot be posted
/// is logged, the refusal stands). The chat stays unknown: writing again asks anew. Answers
/// the request refused.
#[utoipa::path(post, path = "/v1/gateway/pairing/refuse", tag = "gateway", request_body = PairingDecision,
    security(("bearer" = ["gateway:admin"])),
    responses((status = 200, description = "Refused: the request", body = PairingRequest),
              (status = 400, description = "`invalid_json` (not JSON) or `validation_failed` (a missing, unknown or blank field)", body = ErrorBody),
              (status = 404, description = "`pairing_not_found`: no pending request with that code on that channel (wrong, decided already, or expired)", body = ErrorBody),
              (status = 413, description = "`payload_too_large`", body = ErrorBody),
              (status = 415, description = "`unsupported_media_type`: the body is not JSON", body = ErrorBody),
              (status = 500, description = "`internal`: the gateway store failed", body = ErrorBody),
              (status = 503, description = "`store_unavailable`: the gateway's database did not answer; nothing was decided, retry", body = ErrorBody)))]
pub(crate) async fn pairing_refuse(
    State(s): State<ApiState>,
    switchboard_http::Json(req): switchboard_http::Json<PairingDecision>,
) -> Answer<Json<PairingRequest>> {
    check_decision(&req)?;
    let gw = s.gw()?;
    let chat = gw.channel(&req.channel);
    let decided =
        crate::pairing::refuse(gw.store(), chat.as_deref(), &req.channel, &req.code).await;
    pairing_decided("refusing a pairing request", &req, decided)
}
