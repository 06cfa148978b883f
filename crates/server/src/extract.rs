//! Extractors whose rejections are [`ApiError`]s with stable codes.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use switchboard_protocol::ErrorCode;
use uuid::Uuid;

use crate::ApiError;

/// JSON body; malformed JSON, wrong types, a wrong content type and an oversized body each
/// get their own code.
pub struct Json<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(Json(v)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

fn json_rejection(r: JsonRejection) -> ApiError {
    match &r {
        JsonRejection::JsonDataError(e) => ApiError::new(
            ErrorCode::ValidationFailed,
            format!("invalid request body: {}", e.body_text()),
        ),
        JsonRejection::JsonSyntaxError(e) => ApiError::new(
            ErrorCode::InvalidJson,
            format!("malformed JSON: {}", e.body_text()),
        ),
        JsonRejection::MissingJsonContentType(_) => ApiError::new(
            ErrorCode::UnsupportedMediaType,
            "expected a JSON body with content-type: application/json",
        ),
        _ if r.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            ApiError::new(ErrorCode::PayloadTooLarge, "request body is too large")
        }
        _ => ApiError::new(
            ErrorCode::InvalidJson,
            format!("cannot read request body: {}", r.body_text()),
        ),
    }
}

/// Query string.
pub struct Query<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| Query(q.0))
            .map_err(|e: QueryRejection| ApiError::new(ErrorCode::InvalidQuery, e.body_text()))
    }
}

/// The `{id}` of `/v1/sessions/{id}/…` as a UUID.
pub struct SessionId(pub Uuid);

impl<S: Send + Sync> FromRequestParts<S> for SessionId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let axum::extract::Path(raw) =
            axum::extract::Path::<String>::from_request_parts(parts, state)
                .await
                .map_err(|e: PathRejection| {
                    ApiError::new(ErrorCode::ValidationFailed, e.body_text())
                })?;
        Uuid::parse_str(&raw).map(SessionId).map_err(|_| {
            ApiError::new(
                ErrorCode::ValidationFailed,
                format!("session id {raw:?} is not a UUID"),
            )
        })
    }
}

/// `limit` (1–1000, default 50) and `offset` (default 0).
pub(crate) fn page(p: switchboard_protocol::Page) -> Result<(u32, u32), ApiError> {
    let limit = p.limit.unwrap_or(50);
    if limit == 0 || limit > 1000 {
        return Err(ApiError::new(
            ErrorCode::InvalidQuery,
            "limit must be between 1 and 1000",
        ));
    }
    Ok((limit, p.offset.unwrap_or(0)))
}
