//! `/v1/sessions/{id}/files`: uploading a session's files, listing and fetching them.
//!
//! Mounted outside the JSON routes' body limit: an upload may be as large as the per-file
//! limit (plus the multipart framing), which the engine enforces exactly as the file streams
//! in from its temporary file; nothing is held in memory whole.

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Multipart, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use switchboard_protocol::{
    ErrorBody, ErrorCode, FileInfo, ListFilesResponse, ShareFileRequest, SharedFile, UploadForm,
};
use tokio::io::{AsyncSeekExt as _, AsyncWriteExt as _};
use uuid::Uuid;

use crate::extract::{Json as JsonBody, SessionCaller, SessionId};
use crate::{ApiError, AppState};
use switchboard_http::Path;

/// Room for the multipart framing around the file (boundaries, part headers).
const FRAMING: u64 = 64 * 1024;

/// The files routes, with their own body limit: `max_file_bytes` plus the framing.
pub fn router(max_file_bytes: u64) -> Router<AppState> {
    let limit = usize::try_from(max_file_bytes.saturating_add(FRAMING)).unwrap_or(usize::MAX);
    Router::new()
        .route("/v1/sessions/{id}/files", get(list).post(upload))
        .route("/v1/sessions/{id}/files/{file_id}", get(fetch))
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(
            switchboard_http::BodyLimit(limit),
            switchboard_http::reject_oversized,
        ))
}

/// `POST /v1/sessions/{id}/share`, a JSON route under the JSON body limit. It authenticates
/// itself ([`SessionCaller`]): the session's own token is accepted besides the server's.
pub fn share_router() -> Router<AppState> {
    Router::new().route("/v1/sessions/{id}/share", post(share))
}

fn multipart_error(e: axum::extract::multipart::MultipartError) -> ApiError {
    if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(ErrorCode::PayloadTooLarge, e.body_text())
    } else {
        ApiError::new(
            ErrorCode::ValidationFailed,
            format!("invalid multipart body: {}", e.body_text()),
        )
    }
}

/// Uploads a file (multipart, one part named `file`). Its type is sniffed from the content;
/// the answer's `file_id` goes in a message's `attachments`.
#[utoipa::path(post, path = "/v1/sessions/{id}/files", tag = "files", params(("id" = uuid::Uuid, Path)),
    request_body(content = UploadForm, content_type = "multipart/form-data"),
    security(("bearer" = ["sessions:write"])),
    responses((status = 201, body = FileInfo),
              (status = 400, description = "`validation_failed`: not a multipart body, or no part named `file`", body = ErrorBody),
              (status = 404, body = ErrorBody),
              (status = 413, description = "`file_too_large` (over the per-file limit) or `payload_too_large`", body = ErrorBody),
              (status = 415, description = "`unsupported_file_type`: the sniffed type is not allowed, or `unsupported_media_type`: not multipart", body = ErrorBody)))]
pub async fn upload(
    State(state): State<AppState>,
    SessionId(id): SessionId,
    multipart: Result<Multipart, axum::extract::multipart::MultipartRejection>,
) -> Result<Response, ApiError> {
    let mut multipart = multipart.map_err(|e| {
        ApiError::new(
            ErrorCode::UnsupportedMediaType,
            format!("expected a multipart/form-data body: {}", e.body_text()),
        )
    })?;
    // The session first: an upload to none is its 404 before the body is read.
    state.engine.get_session(id).await?;
    // The whole form is read before anything is kept: the first `file` part goes to an
    // anonymous temporary file (unlinked; gone when dropped), other parts are read and
    // dropped, so that a malformed part anywhere refuses the upload with nothing stored.
    let mut spooled: Option<(String, tokio::fs::File)> = None;
    while let Some(mut field) = multipart.next_field().await.map_err(multipart_error)? {
        if field.name() != Some("file") || spooled.is_some() {
            while field.chunk().await.map_err(multipart_error)?.is_some() {}
            continue;
        }
        let name = field.file_name().unwrap_or("file").to_owned();
        let mut spool = tokio::fs::File::from_std(tempfile::tempfile().map_err(spool_error)?);
        while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
            spool.write_all(&chunk).await.map_err(spool_error)?;
        }
        spool.flush().await.map_err(spool_error)?;
        spool.rewind().await.map_err(spool_error)?;
        spooled = Some((name, spool));
    }
    let Some((name, spool)) = spooled else {
        return Err(ApiError::new(
            ErrorCode::ValidationFailed,
            "file: the form has no part named `file`",
        ));
    };
    let body = tokio_util::io::ReaderStream::new(spool);
    let info = state.engine.upload_file(id, &name, body).await?;
    Ok((axum::http::StatusCode::CREATED, Json(info)).into_response())
}

/// The temporary file of an upload failed (the disk is full, the directory unwritable): 500,
/// the cause in the log.
fn spool_error(e: std::io::Error) -> ApiError {
    switchboard_engine::EngineError::Internal(format!("spooling an upload: {e}")).into()
}

/// Shares a file of the session's workspace from its active run: stored as a file of the
/// session, and a `FileShared` event tells the surfaces to deliver it (a chat gets it as a
/// photo or document). What an external agent's `send_file` tool calls, with the session
/// token Switchboard gave it (`switchboard mcp --session`); the server's token works too.
#[utoipa::path(post, path = "/v1/sessions/{id}/share", tag = "files", params(("id" = uuid::Uuid, Path)),
    request_body = ShareFileRequest,
    security(("bearer" = ["sessions:write"])),
    responses((status = 201, body = SharedFile),
              (status = 400, description = "`invalid_json`, or `validation_failed`: a malformed id or body, or a blank `path`", body = ErrorBody),
              (status = 401, description = "`unauthorized` or `invalid_token`: neither the server's token nor this session's", body = ErrorBody),
              (status = 404, description = "`session_not_found`", body = ErrorBody),
              (status = 409, description = "`session_not_running` (no run to share from) or `run_mismatch`", body = ErrorBody),
              (status = 413, description = "`file_too_large` (over the per-file limit) or `payload_too_large`", body = ErrorBody),
              (status = 415, description = "`unsupported_file_type` (the sniffed type is not allowed) or `unsupported_media_type` (not a JSON body)", body = ErrorBody),
              (status = 422, description = "`unprocessable_entity`: `path` names no regular file of the workspace (missing, not a regular file, or outside it), or the session's workspace cannot be read", body = ErrorBody),
              (status = 503, description = "`unavailable`: the instance running the session did not answer", body = ErrorBody)))]
pub async fn share(
    State(state): State<AppState>,
    SessionCaller(id): SessionCaller,
    JsonBody(req): JsonBody<ShareFileRequest>,
) -> Result<Response, ApiError> {
    let shared = state.engine.share_file(id, req).await?;
    Ok((axum::http::StatusCode::CREATED, Json(shared)).into_response())
}

/// The session's files, oldest first.
#[utoipa::path(get, path = "/v1/sessions/{id}/files", tag = "files", params(("id" = uuid::Uuid, Path)),
    security(("bearer" = ["sessions:read"])),
    responses((status = 200, body = ListFilesResponse), (status = 404, body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    SessionId(id): SessionId,
) -> Result<Json<ListFilesResponse>, ApiError> {
    Ok(Json(ListFilesResponse {
        files: state.engine.files(id).await?,
    }))
}

/// `inline` for what a browser shows safely (images, PDF, audio, video), else `attachment`;
/// the name both as ASCII and as RFC 5987 UTF-8.
fn disposition(info: &FileInfo) -> String {
    let kind = match info.mime.split('/').next() {
        Some("image" | "audio" | "video") => "inline",
        _ if info.mime == "application/pdf" => "inline",
        _ => "attachment",
    };
    let ascii: String = info
        .name
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let utf8 =
        percent_encoding::utf8_percent_encode(&info.name, percent_encoding::NON_ALPHANUMERIC);
    format!("{kind}; filename=\"{ascii}\"; filename*=UTF-8''{utf8}")
}

/// A file's content, with its sniffed `Content-Type` and a `Content-Disposition` naming it.
#[utoipa::path(get, path = "/v1/sessions/{id}/files/{file_id}", tag = "files",
    params(("id" = uuid::Uuid, Path), ("file_id" = uuid::Uuid, Path)),
    security(("bearer" = ["sessions:read"])),
    responses((status = 200, description = "The content; `Content-Type` is its type as sniffed at upload (any type the allowlist lets in)", content_type = "*/*", body = Vec<u8>),
              (status = 400, description = "`validation_failed`: a malformed id", body = ErrorBody),
              (status = 404, description = "`session_not_found` or `file_not_found`", body = ErrorBody)))]
pub async fn fetch(
    State(state): State<AppState>,
    SessionId(id): SessionId,
    Path((_, file_id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let file_id = Uuid::parse_str(&file_id).map_err(|_| {
        ApiError::new(
            ErrorCode::ValidationFailed,
            format!("file id {file_id:?} is not a UUID"),
        )
    })?;
    let (info, file) = state.engine.open_file(id, file_id).await?;
    let mime = if info.mime.starts_with("text/") {
        format!("{}; charset=utf-8", info.mime)
    } else {
        info.mime.clone()
    };
    let stream = tokio_util::io::ReaderStream::new(file);
    let mut resp = Body::from_stream(stream).into_response();
    let h = resp.headers_mut();
    let value = |s: &str| {
        HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static("attachment"))
    };
    h.insert(header::CONTENT_TYPE, value(&mime));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(info.size));
    h.insert(header::CONTENT_DISPOSITION, value(&disposition(&info)));
    h.insert(header::ETAG, value(&format!("\"{}\"", info.sha256)));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // What a browser opens inline runs nothing and loads nothing.
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; sandbox"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, max-age=3600"),
    );
    Ok(resp)
}
