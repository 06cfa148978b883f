//! Extractors whose rejections are [`ApiError`]s with stable codes.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use switchboard_protocol::ErrorCode;

use crate::ApiError;

/// JSON body; malformed JSON, wrong types, a wrong content type and an oversized body each
/// get their own code.
pub struct Json<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        if !json_content_type(req.headers()) {
            return Err(ApiError::new(
                ErrorCode::UnsupportedMediaType,
                "expected a JSON body with content-type: application/json",
            ));
        }
        let body = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|r| {
                if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::new(ErrorCode::PayloadTooLarge, "request body is too large")
                } else {
                    ApiError::new(
                        ErrorCode::InvalidJson,
                        format!("cannot read request body: {}", r.body_text()),
                    )
                }
            })?;
        // Every body of the API is an object (serde would read a struct from an array too).
        if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(ApiError::new(
                ErrorCode::ValidationFailed,
                "invalid request body: expected a JSON object",
            ));
        }
        match axum::Json::<T>::from_bytes(&body) {
            Ok(axum::Json(v)) => Ok(Json(v)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

fn json_content_type(headers: &axum::http::HeaderMap) -> bool {
    let Some(ct) = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
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

/// Query string; a malformed one is 400 `invalid_query`.
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

/// Path parameters; a malformed one is 400 `validation_failed`.
pub struct Path<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| Path(p.0))
            .map_err(|e: PathRejection| ApiError::new(ErrorCode::ValidationFailed, e.body_text()))
    }
}
