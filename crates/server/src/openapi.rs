//! `GET /openapi.json`: the OpenAPI document of every route and body.

use axum::Router;
use axum::routing::get;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::AppState;
use crate::routes::{events, health, messages, sessions, tools};

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        if let Some(c) = openapi.components.as_mut() {
            c.add_security_scheme(
                "bearer",
                SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
            );
        }
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "Switchboard API", version = "1", description = "Sessions, runs and a durable event log over HTTP + SSE."),
    paths(
        health::health,
        sessions::create, sessions::list, sessions::show, sessions::update, sessions::delete, sessions::cancel,
        messages::send, messages::list, messages::transcript,
        events::events,
        tools::pending, tools::decide,
    ),
    components(schemas(
        switchboard_protocol::ErrorBody, switchboard_protocol::ErrorCode,
        switchboard_protocol::HealthResponse,
        switchboard_protocol::CreateSessionRequest, switchboard_protocol::SessionSummary,
        switchboard_protocol::SessionDetailResponse, switchboard_protocol::SessionConfig,
        switchboard_protocol::ListSessionsResponse, switchboard_protocol::BackendSpec,
        switchboard_protocol::UpdateSessionRequest,
        switchboard_protocol::PermissionMode, switchboard_protocol::AutoApprove,
        switchboard_protocol::CancelRequest, switchboard_protocol::CancelResponse,
        switchboard_protocol::SendMessageRequest, switchboard_protocol::SendMessageResponse,
        switchboard_protocol::RunOverrides, switchboard_protocol::ContextItem,
        switchboard_protocol::ListMessagesResponse, switchboard_protocol::TranscriptMessage,
        switchboard_protocol::EventEnvelope, switchboard_protocol::AgentEvent, switchboard_protocol::GapDetected,
        switchboard_protocol::ToolCall, switchboard_protocol::PendingToolsResponse,
        switchboard_protocol::ToolDecisionsRequest, switchboard_protocol::ToolDecisionsResponse,
        switchboard_protocol::ToolDecision, switchboard_protocol::DecisionAction,
        switchboard_protocol::PlanEntry, switchboard_protocol::SteeringDelivery,
    )),
    modifiers(&BearerAuth),
)]
pub struct ApiDoc;

pub fn router() -> Router<AppState> {
    Router::new().route(
        "/openapi.json",
        get(|| async { axum::Json(ApiDoc::openapi()) }),
    )
}
