//! `/v1/schedules/*`: schedules, running one by hand, and their firings. Every route needs
//! the bearer token.

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use switchboard_http::{ApiError, BearerToken, Json, Path};
use switchboard_protocol::ErrorBody;
use switchboard_protocol::schedules::{
    Firing, ListFiringsResponse, ListSchedulesResponse, Schedule, ScheduleSpec,
    UpdateScheduleRequest,
};
use utoipa::OpenApi;
use uuid::Uuid;

use crate::service::{Scheduler, SchedulerError};

/// The scheduler's part of the OpenAPI document.
#[derive(OpenApi)]
#[openapi(
    paths(list, create, get_one, update, delete, run_now, firings, redeliver),
    components(schemas(
        ScheduleSpec, UpdateScheduleRequest, Schedule, ListSchedulesResponse, Firing,
        ListFiringsResponse,
        switchboard_protocol::schedules::Missed,
        switchboard_protocol::schedules::Overlap,
        switchboard_protocol::schedules::ScheduleApprovals,
        switchboard_protocol::schedules::FiringStatus,
        switchboard_protocol::schedules::SkipReason,
        switchboard_protocol::schedules::Delivery,
        switchboard_protocol::schedules::DeliveryStatus,
    )),
    tags((name = "schedules", description = "Prompts that run on a schedule and report to a chat"))
)]
pub struct SchedulerDoc;

impl From<SchedulerError> for ApiError {
    fn from(e: SchedulerError) -> Self {
        match e {
            SchedulerError::Spec(s) => {
                ApiError::custom(422, s.code, format!("{}: {}", s.field, s.message))
                    .with_field("field", serde_json::Value::String(s.field))
            }
            SchedulerError::NotFound(_) => {
                ApiError::custom(404, "schedule_not_found", e.to_string())
            }
            SchedulerError::FiringNotFound(_) => {
                ApiError::custom(404, "firing_not_found", e.to_string())
            }
            SchedulerError::Conflict(m) => ApiError::custom(409, "firing_busy", m),
            SchedulerError::Store(s) => {
                tracing::error!(error = %s, "scheduler store");
                ApiError::custom(
                    503,
                    "store_unavailable",
                    "the scheduler's store failed; try again",
                )
            }
        }
    }
}

type ApiResult<T> = Result<T, ApiError>;

/// The routes, behind `token`.
pub fn router(scheduler: Scheduler, token: impl Into<String>) -> Router {
    Router::new()
        .route("/v1/schedules", get(list).post(create))
        .route(
            "/v1/schedules/{id}",
            get(get_one).patch(update).delete(delete),
        )
        .route("/v1/schedules/{id}/run", post(run_now))
        .route("/v1/schedules/{id}/firings", get(firings))
        .route(
            "/v1/schedules/{id}/firings/{firing_id}/deliver",
            post(redeliver),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            BearerToken::new(token),
            switchboard_http::require_bearer,
        ))
        .with_state(scheduler)
}

/// Every schedule, oldest first, with its next firing.
#[utoipa::path(get, path = "/v1/schedules", tag = "schedules", security(("bearer" = ["schedules:read"])),
    responses((status = 200, body = ListSchedulesResponse),
              (status = 503, description = "`store_unavailable`", body = ErrorBody)))]
async fn list(State(s): State<Scheduler>) -> ApiResult<axum::Json<ListSchedulesResponse>> {
    Ok(axum::Json(ListSchedulesResponse {
        schedules: s.list().await?,
    }))
}

/// Creates a schedule. Exactly one of `cron` (with `tz`), `every`, `at`, `in`.
#[utoipa::path(post, path = "/v1/schedules", tag = "schedules", request_body = ScheduleSpec,
    security(("bearer" = ["schedules:write"])),
    responses((status = 201, body = Schedule),
              (status = 400, description = "`invalid_json` (not a schedule, unknown field) or `validation_failed` (not an object)", body = ErrorBody),
              (status = 413, description = "`payload_too_large`", body = ErrorBody),
              (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
              (status = 422, description = "`invalid_trigger` (a bad cron, time zone, interval or time), `unknown_target` (a delivery target naming no configured channel) or `validation_failed`; `field` names the field", body = ErrorBody),
              (status = 503, description = "`store_unavailable`", body = ErrorBody)))]
async fn create(State(s): State<Scheduler>, Json(spec): Json<ScheduleSpec>) -> ApiResult<Response> {
    let created = s.create(spec).await?;
    Ok((StatusCode::CREATED, axum::Json(created)).into_response())
}

#[utoipa::path(get, path = "/v1/schedules/{id}", tag = "schedules",
    params(("id" = Uuid, Path)), security(("bearer" = ["schedules:read"])),
    responses((status = 200, body = Schedule),
              (status = 400, description = "`invalid_path`: not a schedule id", body = ErrorBody),
              (status = 404, description = "`schedule_not_found`", body = ErrorBody),
              (status = 503, description = "`store_unavailable`", body = ErrorBody)))]
async fn get_one(
    State(s): State<Scheduler>,
    Path(id): Path<Uuid>,
) -> ApiResult<axum::Json<Schedule>> {
    Ok(axum::Json(s.get(id).await?))
}

/// Changes a schedule: pause (`paused: true`), resume (`paused: false`), a new trigger,
/// prompt, targets or policies.
#[utoipa::path(patch, path = "/v1/schedules/{id}", tag = "schedules",
    params(("id" = Uuid, Path)), request_body = UpdateScheduleRequest, security(("bearer" = ["schedules:write"])),
    responses((status = 200, body = Schedule),
              (status = 400, description = "`invalid_json` or `invalid_path`", body = ErrorBody),
              (status = 404, description = "`schedule_not_found`", body = ErrorBody),
              (status = 413, description = "`payload_too_large`", body = ErrorBody),
              (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
              (status = 422, description = "`invalid_trigger`, `unknown_target` or `validation_failed`; `field` names the field", body = ErrorBody),
              (status = 503, description = "`store_unavailable`", body = ErrorBody)))]
async fn update(
    State(s): State<Scheduler>,
    Path(id): Path<Uuid>,
    Json(req): Json<UpdateScheduleRequest>,
) -> ApiResult<axum::Json<Schedule>> {
    Ok(axum::Json(s.update(id, req).await?))
}

/// Deletes a schedule and its history (a run it started goes on).
#[utoipa::path(delete, path = "/v1/schedules/{id}", tag = "schedules",
    params(("id" = Uuid, Path)), security(("bearer" = ["schedules:write"])),
    responses((status = 204, description = "Deleted"),
              (status = 400, description = "`invalid_path`", body = ErrorBody),
              (status = 404, description = "`schedule_not_found`", body = ErrorBody),
              (status = 503, description = "`store_unavailable`", body = ErrorBody)))]
async fn delete(State(s): State<Scheduler>, Path(id): Path<Uuid>) -> ApiResult<StatusCode> {
    s.delete(id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Fires the schedule now (paused or not); after the running firing if one runs.
#[utoipa::path(post, path = "/v1/schedules/{id}/run", tag = "schedules",
    params(("id" = Uuid, Path)), security(("bearer" = ["schedules:write"])),
    responses((status = 202, description = "The firing, starting or queued", body = Firing),
              (status = 400, description = "`invalid_path`", body = ErrorBody),
              (status = 404, description = "`schedule_not_found`", body = ErrorBody),
              (status = 503, description = "`store_unavailable`", body = ErrorBody)))]
async fn run_now(State(s): State<Scheduler>, Path(id): Path<Uuid>) -> ApiResult<Response> {
    let f = s.run_now(id).await?;
    Ok((StatusCode::ACCEPTED, axum::Json(f)).into_response())
}

/// The schedule's firings, newest first (at most 200): skipped ones with their reason, runs
/// with their outcome and the delivery to each target.
#[utoipa::path(get, path = "/v1/schedules/{id}/firings", tag = "schedules",
    params(("id" = Uuid, Path)), security(("bearer" = ["schedules:read"])),
    responses((status = 200, body = ListFiringsResponse),
              (status = 400, description = "`invalid_path`", body = ErrorBody),
              (status = 404, description = "`schedule_not_found`", body = ErrorBody),
              (status = 503, description = "`store_unavailable`", body = ErrorBody)))]
async fn firings(
    State(s): State<Scheduler>,
    Path(id): Path<Uuid>,
) -> ApiResult<axum::Json<ListFiringsResponse>> {
    Ok(axum::Json(ListFiringsResponse {
        firings: s.firings(id).await?,
    }))
}

/// Tries a firing's failed deliveries again.
#[utoipa::path(post, path = "/v1/schedules/{id}/firings/{firing_id}/deliver", tag = "schedules",
    params(("id" = Uuid, Path), ("firing_id" = Uuid, Path)), security(("bearer" = ["schedules:write"])),
    responses((status = 202, description = "The firing, its failed deliveries pending again", body = Firing),
              (status = 400, description = "`invalid_path`", body = ErrorBody),
              (status = 404, description = "`schedule_not_found` or `firing_not_found`", body = ErrorBody),
              (status = 409, description = "`firing_busy`: still being worked on, or no failed delivery", body = ErrorBody),
              (status = 503, description = "`store_unavailable`", body = ErrorBody)))]
async fn redeliver(
    State(s): State<Scheduler>,
    Path((id, firing_id)): Path<(Uuid, Uuid)>,
) -> ApiResult<Response> {
    let f = s.redeliver(id, firing_id).await?;
    Ok((StatusCode::ACCEPTED, axum::Json(f)).into_response())
}
