//! `/v1/usage` and `/v1/budgets`: what model calls used and cost, and the budgets that
//! limit it (docs/usage.md). The engine's [`Meter`](switchboard_engine::Meter) reports and
//! keeps them; these handlers parse, call, encode.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, put};
use axum::{Json, Router};
use switchboard_protocol::ErrorBody;
use switchboard_protocol::people::Principal;
use switchboard_protocol::usage::{
    BudgetSpec, BudgetStatus, BudgetsResponse, UsageCallsResponse, UsageQuery, UsageReportResponse,
};

use crate::extract::{self, Caller, via};
use crate::{ApiError, AppState};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/usage", get(report))
        .route("/v1/usage/calls", get(calls))
        .route("/v1/budgets", get(budgets))
        .route("/v1/budgets/{name}", put(put_budget).delete(delete_budget))
}

/// Whose usage `p` may read: everyone's, or (a person who sees only their own sessions)
/// their own.
fn only(p: &Principal) -> Option<&str> {
    (!switchboard_engine::team::sees_all(p)).then_some(p.user.as_str())
}

/// What model calls used and cost in a period (default the last 30 days), in all and
/// grouped: the groups add up exactly to the total. A member sees their own usage only.
#[utoipa::path(get, path = "/v1/usage", tag = "usage", params(UsageQuery),
    security(("bearer" = ["usage:read"])),
    responses((status = 200, body = UsageReportResponse),
              (status = 400, description = "`validation_failed`: a parameter does not parse", body = ErrorBody),
              (status = 403, description = "`forbidden`: another person's usage, asked by a member", body = ErrorBody),
              (status = 422, description = "`unprocessable_entity`: `from` or `to` is not a time, or `from` is after `to`", body = ErrorBody)))]
pub async fn report(
    State(state): State<AppState>,
    Caller(p): Caller,
    extract::Query(q): extract::Query<UsageQuery>,
) -> Result<Json<UsageReportResponse>, ApiError> {
    Ok(Json(state.engine.meter().report(&q, only(&p)).await?))
}

/// The metered model calls of a period, newest first (`limit`, default 100).
#[utoipa::path(get, path = "/v1/usage/calls", tag = "usage", params(UsageQuery),
    security(("bearer" = ["usage:read"])),
    responses((status = 200, body = UsageCallsResponse),
              (status = 400, description = "`validation_failed`: a parameter does not parse", body = ErrorBody),
              (status = 403, description = "`forbidden`: another person's usage, asked by a member", body = ErrorBody),
              (status = 422, description = "`unprocessable_entity`: `from` or `to` is not a time, or `from` is after `to`", body = ErrorBody)))]
pub async fn calls(
    State(state): State<AppState>,
    Caller(p): Caller,
    extract::Query(q): extract::Query<UsageQuery>,
) -> Result<Json<UsageCallsResponse>, ApiError> {
    let calls = state.engine.meter().calls(&q, only(&p)).await?;
    Ok(Json(UsageCallsResponse { calls }))
}

/// Every budget (the configuration's and those made here) with its current windows. A
/// member sees the windows that count them (their own, and `global` ones), not what others
/// spent.
#[utoipa::path(get, path = "/v1/budgets", tag = "usage",
    security(("bearer" = ["usage:read"])),
    responses((status = 200, body = BudgetsResponse)))]
pub async fn budgets(
    State(state): State<AppState>,
    Caller(p): Caller,
) -> Result<Json<BudgetsResponse>, ApiError> {
    let mut budgets = state.engine.meter().status().await?;
    if let Some(me) = only(&p) {
        for b in &mut budgets {
            b.windows
                .retain(|w| w.subject.is_empty() || w.subject == me);
        }
    }
    Ok(Json(BudgetsResponse { budgets }))
}

/// Makes or replaces a budget (its `name` must be the path's). It holds on every instance
/// from the next model call on.
#[utoipa::path(put, path = "/v1/budgets/{name}", tag = "usage", params(("name" = String, Path)),
    request_body = BudgetSpec, security(("bearer" = ["budgets:write"])),
    responses((status = 200, body = BudgetStatus),
              (status = 409, description = "`conflict`: a budget of the configuration file has that name", body = ErrorBody),
              (status = 422, description = "`unprocessable_entity`: the name differs from the path's, neither or both limits, an unknown time zone", body = ErrorBody)))]
pub async fn put_budget(
    State(state): State<AppState>,
    Caller(p): Caller,
    switchboard_http::Path(name): switchboard_http::Path<String>,
    extract::Json(spec): extract::Json<BudgetSpec>,
) -> Result<Json<BudgetStatus>, ApiError> {
    if spec.name != name {
        return Err(ApiError::new(
            switchboard_protocol::ErrorCode::UnprocessableEntity,
            format!(
                "the budget's name {:?} is not the path's {name:?}",
                spec.name
            ),
        ));
    }
    let detail = serde_json::to_value(&spec).unwrap_or_default();
    let status = state.engine.meter().put_budget(spec, &p.user).await?;
    state
        .engine
        .team()
        .record(&p.user, "budget.put", Some(&name), via(&p), detail)
        .await;
    Ok(Json(status))
}

/// Removes a budget made over the API.
#[utoipa::path(delete, path = "/v1/budgets/{name}", tag = "usage", params(("name" = String, Path)),
    security(("bearer" = ["budgets:write"])),
    responses((status = 204, description = "Removed"),
              (status = 404, description = "`not_found`: no budget of that name was made over the API", body = ErrorBody),
              (status = 409, description = "`conflict`: it is set in the configuration file", body = ErrorBody)))]
pub async fn delete_budget(
    State(state): State<AppState>,
    Caller(p): Caller,
    switchboard_http::Path(name): switchboard_http::Path<String>,
) -> Result<StatusCode, ApiError> {
    if !state.engine.meter().delete_budget(&name).await? {
        return Err(ApiError::new(
            switchboard_protocol::ErrorCode::NotFound,
            format!("no budget {name:?} was made over the API"),
        ));
    }
    state
        .engine
        .team()
        .record(
            &p.user,
            "budget.delete",
            Some(&name),
            via(&p),
            serde_json::json!({}),
        )
        .await;
    Ok(StatusCode::NO_CONTENT)
}
