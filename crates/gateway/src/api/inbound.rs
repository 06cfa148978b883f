//! Inbound routes of the push channels: the signed webhook, a channel's own webhook, Slack's Events API.

use super::*;

/// Inbound signed webhook (`webhook:<name>`): 401 for a missing or wrong signature or a
/// stale timestamp, 400 for a malformed body, 200 once stored.
#[utoipa::path(post, path = "/v1/gateway/webhook/{name}", security(()), tag = "gateway",
    params(("name" = String, Path, description = "The webhook channel's name")),
    request_body(content = Vec<u8>, content_type = "application/octet-stream",
        description = "The signed JSON of the inbound message, checked against `X-Switchboard-Signature` before it is read"),
    responses((status = 200, description = "Stored", body = Accepted),
              (status = 400, description = "`validation_failed`: signed, but not an inbound message", body = ErrorBody),
              (status = 401, description = "`unauthorized`: missing or wrong signature, or a stale timestamp", body = ErrorBody),
              (status = 404, description = "`not_found`: no webhook channel of that name", body = ErrorBody),
              (status = 413, description = "`payload_too_large`", body = ErrorBody),
              (status = 503, description = "`unavailable`: not stored; retry", body = ErrorBody)))]
pub(crate) async fn webhook(
    State(s): State<ApiState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Answer<Json<Accepted>> {
    let gw = s.gw()?;
    let cfg = gw.config();
    let Some(secret) = cfg.webhook_secrets.get(&name) else {
        return Err(error(
            ErrorCode::NotFound,
            format!("no webhook channel named {name:?}"),
        ));
    };
    let now = chrono::Utc::now().timestamp();
    if let Err(e) = crate::webhook::verify(&secret.0, &headers, &body, now, cfg.webhook_tolerance) {
        tracing::warn!(webhook = %name, error = %e, "webhook refused");
        return Err(error(ErrorCode::Unauthorized, e.to_string()));
    }
    let inbound = crate::webhook::parse_inbound(&format!("webhook:{name}"), &body)
        .map_err(|e| error(ErrorCode::ValidationFailed, e))?;
    s.gw()?.accept(inbound).await.map_err(|e| {
        tracing::error!(webhook = %name, error = %e, "storing an inbound webhook");
        error(ErrorCode::Unavailable, "could not store the message; retry")
    })?;
    Ok(Json(Accepted { ok: true }))
}

/// Updates a platform pushes over HTTP (Telegram's webhook mode), checked by the channel.
#[utoipa::path(post, path = "/v1/gateway/channels/{name}/webhook", security(()), tag = "gateway",
    params(("name" = String, Path, description = "The channel's name")),
    request_body(content = Vec<u8>, content_type = "application/octet-stream",
        description = "The platform's update, as it pushes it (the channel checks its secret token or signature)"),
    responses((status = 200, description = "Taken: `{\"ok\": true}`, the platform's challenge (text/plain) or the answer the platform expects", body = Accepted),
              (status = 400, description = "`validation_failed`: authenticated, but not an update", body = ErrorBody),
              (status = 401, description = "`unauthorized`: missing or wrong secret token or signature", body = ErrorBody),
              (status = 404, description = "`not_found`: no such channel, or it does not receive updates over HTTP", body = ErrorBody),
              (status = 413, description = "`payload_too_large`", body = ErrorBody),
              (status = 503, description = "`unavailable`: not stored; retry", body = ErrorBody)))]
pub(crate) async fn channel_push(
    State(s): State<ApiState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Answer<Response> {
    let Some(ch) = s.gw()?.channel(&name) else {
        return Err(error(
            ErrorCode::NotFound,
            format!("no channel named {name:?}"),
        ));
    };
    if let Some(answer) = ch.http_challenge(&headers, &body) {
        return Ok(([(axum::http::header::CONTENT_TYPE, "text/plain")], answer).into_response());
    }
    let items = ch
        .inbound_http_all(&headers, &body)
        .await
        .map_err(|e| refused(&name, e))?;
    // In order, each stored before the push is answered: a failure answers 503 and the
    // platform pushes again (the gateway takes each message once).
    for item in items {
        s.gw()?.accept(item).await.map_err(|e| {
            tracing::error!(channel = %name, error = %e, "storing a pushed update");
            error(ErrorCode::Unavailable, "could not store the update; retry")
        })?;
    }
    Ok(match ch.http_answer(&headers, &body) {
        Some(answer) => answer.into_response(),
        None => Json(Accepted { ok: true }).into_response(),
    })
}

/// Why a push (or a subscription check) was refused, as an answer.
fn refused(name: &str, e: crate::channel::InboundHttpError) -> ApiError {
    use crate::channel::InboundHttpError;
    match e {
        InboundHttpError::NotSupported => error(
            ErrorCode::NotFound,
            format!("channel {name:?} does not receive updates over HTTP"),
        ),
        InboundHttpError::Unauthorized => {
            tracing::warn!(channel = %name, "pushed update refused: wrong secret token or signature");
            error(
                ErrorCode::Unauthorized,
                "missing or wrong secret token or signature",
            )
        }
        InboundHttpError::Malformed(m) => error(ErrorCode::ValidationFailed, m),
    }
}

/// A platform's check of the webhook before it pushes to it (Meta's `hub.challenge`):
/// answered with the challenge (text/plain) when the verify token is right.
#[utoipa::path(get, path = "/v1/gateway/channels/{name}/webhook", security(()), tag = "gateway",
    params(("name" = String, Path, description = "The channel's name")),
    responses((status = 200, description = "The challenge, echoed (text/plain)", body = String),
              (status = 401, description = "`unauthorized`: wrong verify token", body = ErrorBody),
              (status = 404, description = "`not_found`: no such channel, or it does not check its webhook this way", body = ErrorBody)))]
pub(crate) async fn channel_subscribe(
    State(s): State<ApiState>,
    Path(name): Path<String>,
    switchboard_http::Query(query): switchboard_http::Query<
        std::collections::HashMap<String, String>,
    >,
) -> Answer<Response> {
    let Some(ch) = s.gw()?.channel(&name) else {
        return Err(error(
            ErrorCode::NotFound,
            format!("no channel named {name:?}"),
        ));
    };
    let challenge = ch.http_subscribe(&query).map_err(|e| refused(&name, e))?;
    Ok((
        [(axum::http::header::CONTENT_TYPE, "text/plain")],
        challenge,
    )
        .into_response())
}

/// `POST /v1/gateway/slack/events`: the Slack Events API's usual path, for the channel
/// named `slack`.
#[utoipa::path(post, path = "/v1/gateway/slack/events", security(()), tag = "gateway",
    request_body(content = Vec<u8>, content_type = "application/octet-stream",
        description = "An Events API request, checked against Slack's signature"),
    responses((status = 200, description = "Taken: `{\"ok\": true}`, the platform's challenge (text/plain) or the answer the platform expects", body = Accepted),
              (status = 400, description = "`validation_failed`: authenticated, but not an update", body = ErrorBody),
              (status = 401, description = "`unauthorized`: missing or wrong secret token or signature", body = ErrorBody),
              (status = 404, description = "`not_found`: no such channel, or it does not receive updates over HTTP", body = ErrorBody),
              (status = 413, description = "`payload_too_large`", body = ErrorBody),
              (status = 503, description = "`unavailable`: not stored; retry", body = ErrorBody)))]
pub(crate) async fn slack_events(
    state: State<ApiState>,
    headers: HeaderMap,
    body: Bytes,
) -> Answer<Response> {
    channel_push(state, Path("slack".to_string()), headers, body).await
}
