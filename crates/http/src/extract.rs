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
            Err(rejection @ JsonRejection::JsonDataError(_)) => {
                match integral_floats(&body).and_then(|b| axum::Json::<T>::from_bytes(&b).ok()) {
                    Some(axum::Json(v)) => Ok(Json(v)),
                    None => Err(json_rejection(rejection)),
                }
            }
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

/// `T` from a JSON body as [`Json`] reads it, for routes that take the bytes themselves:
/// a number written with a fraction of zero (`5.0`) is the integer it equals.
pub fn from_json_slice<T: DeserializeOwned>(body: &[u8]) -> serde_json::Result<T> {
    serde_json::from_slice(body).or_else(|e| {
        integral_floats(body)
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or(e)
    })
}

/// The body again with every number that is a whole number written as one (`119.0` →
/// `119`), or `None` when it has none (or is not JSON). JSON and JSON Schema do not tell
/// `119.0` from `119` (a schema's `integer` allows both), while serde reads only the second
/// into an integer field; tried only after a body failed to read, so well-typed bodies pay
/// nothing.
fn integral_floats(body: &[u8]) -> Option<Vec<u8>> {
    fn walk(v: &mut serde_json::Value) -> bool {
        match v {
            serde_json::Value::Number(n) if n.is_f64() => {
                let f = n.as_f64().unwrap_or(f64::NAN);
                let whole = if f.fract() == 0.0 && f >= 0.0 && f < u64::MAX as f64 {
                    Some(serde_json::Number::from(f as u64))
                } else if f.fract() == 0.0 && f < 0.0 && f >= i64::MIN as f64 {
                    Some(serde_json::Number::from(f as i64))
                } else {
                    None
                };
                match whole {
                    Some(w) => {
                        *n = w;
                        true
                    }
                    None => false,
                }
            }
            serde_json::Value::Array(a) => a.iter_mut().fold(false, |c, v| walk(v) | c),
            serde_json::Value::Object(o) => o.values_mut().fold(false, |c, v| walk(v) | c),
            _ => false,
        }
    }
    let mut v: serde_json::Value = serde_json::from_slice(body).ok()?;
    if !walk(&mut v) {
        return None;
    }
    serde_json::to_vec(&v).ok()
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

#[cfg(test)]
mod tests {
    use super::from_json_slice;

    #[derive(Debug, serde::Deserialize, PartialEq)]
    struct Turns {
        max_turns: u32,
        offset: i64,
        ratio: f64,
    }

    #[test]
    fn a_whole_number_written_with_a_fraction_is_that_integer() {
        let t: Turns =
            from_json_slice(br#"{"max_turns": 119.0, "offset": -2.0, "ratio": 0.5}"#).unwrap();
        assert_eq!(
            t,
            Turns {
                max_turns: 119,
                offset: -2,
                ratio: 0.5
            }
        );
        // a real fraction is still refused, with serde's own message
        let e = from_json_slice::<Turns>(br#"{"max_turns": 1.5, "offset": 0, "ratio": 1}"#)
            .unwrap_err();
        assert!(
            e.to_string().contains("max_turns") || e.to_string().contains("u32"),
            "{e}"
        );
    }
}
