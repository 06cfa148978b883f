//! `GET /openapi.json`: the OpenAPI document of every route and body.

use axum::Router;
use axum::routing::get;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::AppState;
use crate::routes::{
    approvals, checkpoints, events, files, health, messages, metrics, openai, people, search,
    sessions, settings, tools, usage,
};

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        if let Some(c) = openapi.components.as_mut() {
            c.add_security_scheme(
                "bearer",
                SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
            );
        }
        common_responses(openapi);
    }
}

/// The pattern of a UUID as the server reads one (hyphenated; `format: uuid` alone is only
/// an annotation that validators and generators may ignore).
const UUID_PATTERN: &str =
    "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";

/// Every string schema with `format: uuid` (components, parameters, bodies, answers,
/// nested) gets [`UUID_PATTERN`], so that what the document allows is what the server
/// parses. Walked on utoipa's own types: a round trip through JSON failed on schemas that
/// do not deserialize back (`data did not match any variant of untagged enum RefOr`), and
/// the server logged an ERROR at every start.
fn uuid_patterns(doc: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::RefOr;
    use utoipa::openapi::schema::{
        AdditionalProperties, ArrayItems, KnownFormat, Schema, SchemaFormat,
    };
    fn schema(s: &mut Schema) {
        match s {
            Schema::Object(o) => {
                if matches!(o.format, Some(SchemaFormat::KnownFormat(KnownFormat::Uuid)))
                    && o.pattern.is_none()
                {
                    o.pattern = Some(UUID_PATTERN.into());
                }
                o.properties.values_mut().for_each(ref_or);
                if let Some(AdditionalProperties::RefOr(r)) = o.additional_properties.as_deref_mut()
                {
                    ref_or(r);
                }
            }
            Schema::Array(a) => {
                if let ArrayItems::RefOrSchema(r) = &mut a.items {
                    ref_or(r);
                }
                a.prefix_items.iter_mut().for_each(schema);
            }
            Schema::OneOf(x) => x.items.iter_mut().for_each(ref_or),
            Schema::AllOf(x) => x.items.iter_mut().for_each(ref_or),
            Schema::AnyOf(x) => x.items.iter_mut().for_each(ref_or),
            _ => {}
        }
    }
    fn ref_or(r: &mut RefOr<Schema>) {
        if let RefOr::T(s) = r {
            schema(s);
        }
    }
    fn content<'a>(c: impl Iterator<Item = &'a mut utoipa::openapi::Content>) {
        for c in c {
            if let Some(s) = c.schema.as_mut() {
                ref_or(s);
            }
        }
    }
    if let Some(c) = doc.components.as_mut() {
        c.schemas.values_mut().for_each(ref_or);
    }
    for item in doc.paths.paths.values_mut() {
        for p in item.parameters.iter_mut().flatten() {
            if let Some(s) = p.schema.as_mut() {
                ref_or(s);
            }
        }
        for op in operations(item) {
            for p in op.parameters.iter_mut().flatten() {
                if let Some(s) = p.schema.as_mut() {
                    ref_or(s);
                }
            }
            if let Some(b) = op.request_body.as_mut() {
                content(b.content.values_mut());
            }
            for r in op.responses.responses.values_mut() {
                if let RefOr::T(r) = r {
                    content(r.content.values_mut());
                }
            }
        }
    }
}

/// A path's operations, of every method the routes use.
fn operations(
    item: &mut utoipa::openapi::PathItem,
) -> impl Iterator<Item = &mut utoipa::openapi::path::Operation> {
    [
        item.get.as_mut(),
        item.put.as_mut(),
        item.post.as_mut(),
        item.delete.as_mut(),
        item.patch.as_mut(),
    ]
    .into_iter()
    .flatten()
}

/// The answers every route of a kind gives, added to each operation that does not document
/// them itself: 401 where the bearer token is required, 400 where a path parameter is a
/// UUID, and 400, 413 and 415 where the body is JSON (the kit's extractors and limit). Run
/// it again on a document merged from several (`switchboard serve` does).
pub fn common_responses(doc: &mut utoipa::openapi::OpenApi) {
    uuid_patterns(doc);
    use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
    let error = |description: &str| {
        RefOr::T(
            ResponseBuilder::new()
                .description(description)
                .content(
                    "application/json",
                    ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name("ErrorBody")))
                        .build(),
                )
                .build(),
        )
    };
    for (path, item) in doc.paths.paths.iter_mut() {
        for op in operations(item) {
            let mut add = |status: &str, description: &str| {
                op.responses
                    .responses
                    .entry(status.to_string())
                    .or_insert_with(|| error(description));
            };
            let bearer = serde_json::to_value(&op.security).is_ok_and(|v| {
                v.as_array()
                    .is_some_and(|reqs| reqs.iter().any(|r| r.get("bearer").is_some()))
            });
            let json_body = op
                .request_body
                .as_ref()
                .is_some_and(|b| b.content.contains_key("application/json"));
            let uuid_param = path.contains("/sessions/{id}");
            let scoped = serde_json::to_value(&op.security).is_ok_and(|v| {
                v.as_array().is_some_and(|reqs| {
                    reqs.iter().any(|r| {
                        r.get("bearer")
                            .and_then(|b| b.as_array())
                            .is_some_and(|s| !s.is_empty())
                    })
                })
            });
            if bearer {
                add(
                    "401",
                    "`unauthorized` (no bearer token), `invalid_token`, or `token_revoked` (a personal token that expired or was revoked)",
                );
                // Every authenticated route reads or writes the store.
                add(
                    "503",
                    "`store_unavailable`: the database failed or did not answer; nothing of the request was kept, retry after `Retry-After` seconds",
                );
            }
            if scoped {
                add(
                    "403",
                    "`forbidden`: the credential lacks the operation's scope (named in `scope`)",
                );
            }
            if json_body {
                add(
                    "400",
                    "`invalid_json` or `validation_failed` (the field is named)",
                );
                add("413", "`payload_too_large`: the body is over the limit");
                add("415", "`unsupported_media_type`: the body is not JSON");
            } else if uuid_param {
                add("400", "`validation_failed`: the id is not a UUID");
            }
        }
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "Switchboard API", version = "1", description = "Sessions, runs and a durable event log over HTTP + SSE."),
    paths(
        openapi_json,
        health::health,
        sessions::create, sessions::list, sessions::show, sessions::update, sessions::delete, sessions::cancel, sessions::fork,
        search::search, search::session_search,
        messages::send, messages::list, messages::transcript,
        files::upload, files::list, files::fetch, files::share,
        events::events,
        tools::pending, tools::decide, approvals::list, approvals::events,
        checkpoints::list, checkpoints::diff, checkpoints::restore,
        openai::completions, openai::models,
        metrics::metrics_text,
        settings::show, settings::update, settings::providers, settings::models, settings::test_channel,
        people::me, people::list_users, people::create_user, people::show_user, people::update_user,
        people::delete_user, people::list_tokens, people::create_token, people::revoke_token,
        people::audit, people::link_code, people::link, people::unlink,
        usage::report, usage::calls, usage::budgets, usage::put_budget, usage::delete_budget,
    ),
    components(schemas(
        switchboard_protocol::ErrorBody, switchboard_protocol::ErrorCode,
        switchboard_protocol::HealthResponse,
        switchboard_protocol::CreateSessionRequest, switchboard_protocol::SessionSummary,
        switchboard_protocol::SessionDetailResponse, switchboard_protocol::SessionConfig,
        switchboard_protocol::ListSessionsResponse, switchboard_protocol::BackendSpec,
        switchboard_protocol::UpdateSessionRequest,
        switchboard_protocol::search::SearchResponse, switchboard_protocol::search::SearchHit,
        switchboard_protocol::search::SearchHitKind, switchboard_protocol::search::SnippetPart,
        switchboard_protocol::PermissionMode, switchboard_protocol::AutoApprove,
        switchboard_protocol::CancelRequest, switchboard_protocol::CancelResponse,
        switchboard_protocol::SendMessageRequest, switchboard_protocol::SendMessageResponse,
        switchboard_protocol::RunOverrides, switchboard_protocol::ContextItem,
        switchboard_protocol::ListMessagesResponse, switchboard_protocol::TranscriptMessage,
        switchboard_protocol::EventEnvelope, switchboard_protocol::AgentEvent, switchboard_protocol::StopReason, switchboard_protocol::RejectionCause, switchboard_protocol::RunErrorCode, switchboard_protocol::GapDetected,
        switchboard_protocol::ToolCall, switchboard_protocol::PendingToolsResponse,
        switchboard_protocol::WaitingApproval, switchboard_protocol::ApprovalsResponse,
        switchboard_protocol::ApprovalResolved,
        switchboard_protocol::ToolDecisionsRequest, switchboard_protocol::ToolDecisionsResponse,
        switchboard_protocol::ToolDecision, switchboard_protocol::DecisionAction,
        switchboard_protocol::PlanEntry, switchboard_protocol::SteeringDelivery,
        switchboard_protocol::FileInfo, switchboard_protocol::ListFilesResponse,
        switchboard_protocol::ShareFileRequest, switchboard_protocol::SharedFile,
        switchboard_protocol::AttachmentRef, switchboard_protocol::UploadForm,
        switchboard_protocol::Checkpoint, switchboard_protocol::CheckpointKind,
        switchboard_protocol::ListCheckpointsResponse, switchboard_protocol::DiffStat,
        switchboard_protocol::FileStat, switchboard_protocol::RestoreResponse,
        switchboard_protocol::openai::ChatCompletionRequest, switchboard_protocol::openai::ChatMessage,
        switchboard_protocol::openai::StreamOptions, switchboard_protocol::openai::ChatCompletion,
        switchboard_protocol::openai::Choice, switchboard_protocol::openai::AssistantMessage,
        switchboard_protocol::openai::CompletionUsage, switchboard_protocol::openai::ChatCompletionChunk,
        switchboard_protocol::openai::ChunkChoice, switchboard_protocol::openai::Delta,
        switchboard_protocol::openai::ModelList, switchboard_protocol::openai::Model,
        switchboard_protocol::openai::OpenAiErrorBody, switchboard_protocol::openai::OpenAiError,
        switchboard_protocol::settings::SettingsResponse, switchboard_protocol::settings::ProviderSettings,
        switchboard_protocol::settings::ChannelSettings, switchboard_protocol::settings::SettingsUpdate,
        switchboard_protocol::settings::ProviderUpdate, switchboard_protocol::settings::TokenUpdate,
        switchboard_protocol::settings::SlackUpdate, switchboard_protocol::settings::ProviderKind,
        switchboard_protocol::settings::ChannelKind, switchboard_protocol::settings::ProvidersResponse,
        switchboard_protocol::settings::ProviderEntry, switchboard_protocol::settings::ModelsResponse,
        switchboard_protocol::settings::ChannelCheck,
        switchboard_protocol::people::Role, switchboard_protocol::people::Scope,
        switchboard_protocol::people::User, switchboard_protocol::people::ChatLink,
        switchboard_protocol::people::ListUsersResponse, switchboard_protocol::people::CreateUserRequest,
        switchboard_protocol::people::UpdateUserRequest, switchboard_protocol::people::TokenInfo,
        switchboard_protocol::people::ListTokensResponse, switchboard_protocol::people::CreateTokenRequest,
        switchboard_protocol::people::CreatedToken, switchboard_protocol::people::Credential,
        switchboard_protocol::people::Me, switchboard_protocol::people::AuditEntry,
        switchboard_protocol::people::ListAuditResponse,
        switchboard_protocol::people::LinkCode, switchboard_protocol::people::LinkRequest,
        switchboard_protocol::usage::RunOrigin, switchboard_protocol::usage::BudgetScope,
        switchboard_protocol::usage::BudgetWindow, switchboard_protocol::usage::AtLimit,
        switchboard_protocol::usage::BudgetSpec, switchboard_protocol::usage::BudgetHit,
        switchboard_protocol::usage::UsageGroup, switchboard_protocol::usage::UsageTotals,
        switchboard_protocol::usage::UsageGroupTotals, switchboard_protocol::usage::UsageModelTotals,
        switchboard_protocol::usage::UsageReportResponse,
        switchboard_protocol::usage::UsageCall, switchboard_protocol::usage::UsageCallsResponse,
        switchboard_protocol::usage::BudgetSource, switchboard_protocol::usage::BudgetWindowState,
        switchboard_protocol::usage::BudgetStatus, switchboard_protocol::usage::BudgetsResponse,
    )),
    modifiers(&BearerAuth),
)]
pub struct ApiDoc;

/// This document.
#[utoipa::path(get, path = "/openapi.json", security(()), tag = "system",
    responses((status = 200, description = "The OpenAPI 3.1 document of every route", content_type = "application/json", body = Object),
              (status = 405, description = "`method_not_allowed`", body = switchboard_protocol::ErrorBody)))]
async fn openapi_json(
    axum::Extension(doc): axum::Extension<std::sync::Arc<utoipa::openapi::OpenApi>>,
) -> axum::Json<std::sync::Arc<utoipa::openapi::OpenApi>> {
    axum::Json(doc)
}

pub fn router(doc: utoipa::openapi::OpenApi) -> Router<AppState> {
    Router::new()
        .route("/openapi.json", get(openapi_json))
        .layer(axum::Extension(std::sync::Arc::new(doc)))
}
