//! `/v1/gateway/messages`: the delivery ledger — what became of each inbound chat message —
//! and the retry of a failed one.

use switchboard_http::Query;
use switchboard_protocol::gateway::{DeliveryEntry, DeliveryPage, DeliveryQuery};

use super::*;
use crate::store::Retried;

/// What became of inbound chat messages, the newest first: received, ignored (and why:
/// `not_allowed`, `duplicate` of the entry in `duplicate_of`, `edited`, `empty`), queued,
/// in a run, answered (with what was posted: the reply's platform message ids, files,
/// prompts and notices, each with its platform calls), failed (and why). Kept for
/// `[gateway] ledger_days` after an entry's last change.
#[utoipa::path(get, path = "/v1/gateway/messages", tag = "gateway", params(DeliveryQuery),
    security(("bearer" = ["gateway:read"])),
    responses((status = 200, body = DeliveryPage),
              (status = 400, description = "`invalid_query`: a parameter is not of its type; `validation_failed`: one is out of its range (named)", body = ErrorBody),
              (status = 500, description = "`internal`: the gateway store failed", body = ErrorBody),
              (status = 503, description = "`store_unavailable`: the gateway's database did not answer; retry", body = ErrorBody)))]
pub(crate) async fn messages(
    State(s): State<ApiState>,
    Query(q): Query<DeliveryQuery>,
) -> Answer<Json<DeliveryPage>> {
    validate(&q)?;
    let (messages, next) = s
        .gw()?
        .store()
        .deliveries(&q)
        .await
        .or_failed("the delivery ledger")?;
    Ok(Json(DeliveryPage { messages, next }))
}

/// Queues a failed message for the agent again, as it came (text and files): its entry is
/// `queued`, then follows its new run. Only a failed message for the agent is retried (a
/// command or an ignored message is not).
#[utoipa::path(post, path = "/v1/gateway/messages/{id}/retry", tag = "gateway",
    params(("id" = i64, Path, description = "The entry's id", minimum = 1, maximum = 9007199254740991_i64)),
    security(("bearer" = ["gateway:admin"])),
    responses((status = 200, description = "Queued again: the entry as it is now", body = DeliveryEntry),
              (status = 400, description = "`validation_failed`: the id is not a number", body = ErrorBody),
              (status = 404, description = "`not_found`: no such entry (or pruned)", body = ErrorBody),
              (status = 409, description = "`conflict`: the entry is not a failed message for the agent (its status is named), or its chat is no longer allowed", body = ErrorBody),
              (status = 500, description = "`internal`: the gateway store failed", body = ErrorBody),
              (status = 503, description = "`store_unavailable`: the gateway's database did not answer; retry", body = ErrorBody)))]
pub(crate) async fn retry(
    State(s): State<ApiState>,
    Path(id): Path<i64>,
) -> Answer<Json<DeliveryEntry>> {
    let gw = s.gw()?;
    let not_found = || {
        error(
            ErrorCode::NotFound,
            format!("no delivery ledger entry {id}"),
        )
    };
    match gw.retry_delivery(id).await {
        Ok(Retried::Queued(_)) => {}
        Ok(Retried::Unknown) => return Err(not_found()),
        Ok(Retried::NotAllowed) => {
            return Err(error(
                ErrorCode::Conflict,
                format!("entry {id}'s chat is no longer allowed to talk to the agent"),
            ));
        }
        Ok(Retried::NotFailed(status)) => {
            return Err(error(
                ErrorCode::Conflict,
                format!(
                    "entry {id} is {}: only a failed message for the agent is retried",
                    status.as_str()
                ),
            ));
        }
        Err(crate::dispatcher::GatewayError::Store(e)) => return Err(store_failed("a retry", e)),
        Err(e) => return Err(internal("a retry", e)),
    }
    gw.store()
        .delivery(id)
        .await
        .or_failed("the delivery ledger")?
        .map(Json)
        .ok_or_else(not_found)
}

/// The largest entry id the document admits (JSON's largest exact integer).
const MAX_ID: i64 = 9_007_199_254_740_991;

/// What the document says of the query and its types do not: the ranges.
fn validate(q: &DeliveryQuery) -> Answer<()> {
    let refuse = |what: String| Err(error(ErrorCode::ValidationFailed, what));
    if let Some(l) = q.limit
        && !(1..=200).contains(&l)
    {
        return refuse(format!("limit must be between 1 and 200 (got {l})"));
    }
    if let Some(b) = q.before
        && !(1..=MAX_ID).contains(&b)
    {
        return refuse(format!("before must be between 1 and {MAX_ID} (got {b})"));
    }
    for (name, value, max) in [("channel", &q.channel, 200), ("chat", &q.chat, 500)] {
        if value.as_ref().is_some_and(|v| v.chars().count() > max) {
            return refuse(format!("{name} is longer than {max} characters"));
        }
    }
    Ok(())
}
