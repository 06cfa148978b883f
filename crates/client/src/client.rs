//! [`Client`]: one typed method per `/v1` endpoint.

use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use switchboard_protocol::{
    CancelRequest, CancelResponse, CreateSessionRequest, FileInfo, HealthResponse,
    ListFilesResponse, ListMessagesResponse, ListSessionsQuery, ListSessionsResponse, Page,
    PendingToolsResponse, SendMessageRequest, SendMessageResponse, SessionDetailResponse,
    SessionSummary, ToolDecisionsRequest, ToolDecisionsResponse, UpdateSessionRequest,
};
use uuid::Uuid;

use crate::error::ClientError;
use crate::stream::{EventStream, Subscription};

/// How long a plain request (not the event stream) may take in all.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long establishing a TCP (and TLS) connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A client of one Switchboard server. Cheap to clone; clones share the connection pool.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    /// Scheme, host, port and optional path prefix, without a trailing slash.
    base_url: Arc<str>,
    token: Option<Arc<str>>,
    /// The chat identity its requests act for (`X-Switchboard-On-Behalf-Of`).
    on_behalf_of: Option<Arc<str>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base_url", &self.base_url)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Client {
    /// A client of the server at `base_url` (e.g. `http://127.0.0.1:7070`; a trailing slash is
    /// fine), sending `Authorization: Bearer <token>` when a token is given.
    pub fn new(base_url: impl Into<String>, token: Option<String>) -> Result<Client, ClientError> {
        let raw = base_url.into();
        let trimmed = raw.trim().trim_end_matches('/');
        let parsed = reqwest::Url::parse(trimmed)
            .map_err(|e| ClientError::InvalidUrl(format!("{trimmed:?}: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(ClientError::InvalidUrl(format!(
                "{trimmed:?}: scheme must be http or https"
            )));
        }
        if parsed.host_str().is_none_or(str::is_empty) {
            return Err(ClientError::InvalidUrl(format!("{trimmed:?}: no host")));
        }
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(ClientError::InvalidUrl(format!(
                "{trimmed:?}: a base URL has no query or fragment"
            )));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            // reqwest's default too; said here because a request's first bytes must not
            // wait for the server's delayed ACK.
            .tcp_nodelay(true)
            .user_agent(concat!("switchboard-client/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ClientError::Transport(crate::error::error_chain(&e)))?;
        Ok(Client {
            http,
            base_url: Arc::from(trimmed),
            token: token.map(Arc::from),
            on_behalf_of: None,
        })
    }

    /// This client acting for a chat identity (`platform:user_id`): with the server token,
    /// the server takes its requests as the person linked to it, if anyone (docs/teams.md).
    pub fn on_behalf_of(&self, identity: &str) -> Client {
        Client {
            on_behalf_of: Some(Arc::from(identity)),
            ..self.clone()
        }
    }

    /// The base URL, without a trailing slash.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// `GET /v1/health`.
    pub async fn health(&self) -> Result<HealthResponse, ClientError> {
        self.json(self.request(reqwest::Method::GET, "/v1/health"))
            .await
    }

    /// `POST /v1/sessions`.
    pub async fn create_session(
        &self,
        req: &CreateSessionRequest,
    ) -> Result<SessionSummary, ClientError> {
        self.json(
            self.request(reqwest::Method::POST, "/v1/sessions")
                .json(req),
        )
        .await
    }

    /// `GET /v1/sessions?limit&offset`.
    pub async fn list_sessions(
        &self,
        limit: Option<u32>,
        offset: Option<u32>,
    ) -> Result<ListSessionsResponse, ClientError> {
        let req = self
            .request(reqwest::Method::GET, "/v1/sessions")
            .query(&Page { limit, offset });
        self.json(req).await
    }

    /// `GET /v1/sessions/{id}`.
    pub async fn get_session(&self, id: Uuid) -> Result<SessionDetailResponse, ClientError> {
        self.json(self.request(reqwest::Method::GET, &format!("/v1/sessions/{id}")))
            .await
    }

    /// `PATCH /v1/sessions/{id}`: rename, archive or unarchive.
    pub async fn update_session(
        &self,
        id: Uuid,
        req: &UpdateSessionRequest,
    ) -> Result<SessionSummary, ClientError> {
        let path = format!("/v1/sessions/{id}");
        self.json(self.request(reqwest::Method::PATCH, &path).json(req))
            .await
    }

    /// `POST /v1/sessions/{id}/fork`: a new session with this one's history up to `q.at`.
    pub async fn fork_session(
        &self,
        id: Uuid,
        q: &switchboard_protocol::ForkSessionQuery,
    ) -> Result<SessionSummary, ClientError> {
        let path = format!("/v1/sessions/{id}/fork");
        self.json(self.request(reqwest::Method::POST, &path).query(q))
            .await
    }

    /// `GET /v1/sessions?archived=true`: archived sessions, newest first.
    pub async fn list_archived_sessions(
        &self,
        limit: Option<u32>,
        offset: Option<u32>,
    ) -> Result<ListSessionsResponse, ClientError> {
        let q = ListSessionsQuery {
            limit,
            offset,
            archived: Some(true),
        };
        let req = self.request(reqwest::Method::GET, "/v1/sessions").query(&q);
        self.json(req).await
    }

    /// `DELETE /v1/sessions/{id}`.
    pub async fn delete_session(&self, id: Uuid) -> Result<(), ClientError> {
        let req = self.request(reqwest::Method::DELETE, &format!("/v1/sessions/{id}"));
        self.send(req).await.map(drop)
    }

    /// `POST /v1/sessions/{id}/messages`.
    pub async fn send_message(
        &self,
        id: Uuid,
        req: &SendMessageRequest,
    ) -> Result<SendMessageResponse, ClientError> {
        let path = format!("/v1/sessions/{id}/messages");
        self.json(self.request(reqwest::Method::POST, &path).json(req))
            .await
    }

    /// `POST /v1/sessions/{id}/messages` with an `Idempotency-Key`: a retry with the same
    /// key (after a lost answer, a crash, a restart) answers the first send's run instead
    /// of starting another. Surfaces derive the key from what they deliver.
    pub async fn send_message_once(
        &self,
        id: Uuid,
        req: &SendMessageRequest,
        idempotency_key: &str,
    ) -> Result<SendMessageResponse, ClientError> {
        let path = format!("/v1/sessions/{id}/messages");
        self.json(
            self.request(reqwest::Method::POST, &path)
                .header("Idempotency-Key", idempotency_key)
                .json(req),
        )
        .await
    }

    /// `GET /v1/sessions/{id}/messages?limit&offset`.
    pub async fn list_messages(
        &self,
        id: Uuid,
        limit: Option<u32>,
        offset: Option<u32>,
    ) -> Result<ListMessagesResponse, ClientError> {
        let path = format!("/v1/sessions/{id}/messages");
        let req = self
            .request(reqwest::Method::GET, &path)
            .query(&Page { limit, offset });
        self.json(req).await
    }

    /// `GET /v1/sessions/{id}/transcript.md`.
    pub async fn transcript_markdown(&self, id: Uuid) -> Result<String, ClientError> {
        let path = format!("/v1/sessions/{id}/transcript.md");
        let resp = self.send(self.request(reqwest::Method::GET, &path)).await?;
        resp.text().await.map_err(|e| ClientError::from_reqwest(&e))
    }

    /// `GET /v1/sessions/{id}/checkpoints`.
    pub async fn checkpoints(
        &self,
        id: Uuid,
    ) -> Result<switchboard_protocol::ListCheckpointsResponse, ClientError> {
        let path = format!("/v1/sessions/{id}/checkpoints");
        self.json(self.request(reqwest::Method::GET, &path)).await
    }

    /// `GET /v1/sessions/{id}/diff`: the unified diff (`query.stat` is ignored; see
    /// [`Client::diff_stat`]).
    pub async fn diff(
        &self,
        id: Uuid,
        query: &switchboard_protocol::DiffQuery,
    ) -> Result<String, ClientError> {
        let path = format!("/v1/sessions/{id}/diff");
        let q = switchboard_protocol::DiffQuery {
            stat: None,
            ..query.clone()
        };
        let resp = self
            .send(self.request(reqwest::Method::GET, &path).query(&q))
            .await?;
        resp.text().await.map_err(|e| ClientError::from_reqwest(&e))
    }

    /// `GET /v1/sessions/{id}/diff?stat=1`.
    pub async fn diff_stat(
        &self,
        id: Uuid,
        query: &switchboard_protocol::DiffQuery,
    ) -> Result<switchboard_protocol::DiffStat, ClientError> {
        let path = format!("/v1/sessions/{id}/diff");
        let q = switchboard_protocol::DiffQuery {
            stat: Some("1".into()),
            ..query.clone()
        };
        self.json(self.request(reqwest::Method::GET, &path).query(&q))
            .await
    }

    /// `POST /v1/sessions/{id}/checkpoints/{checkpoint}/restore`.
    pub async fn restore(
        &self,
        id: Uuid,
        checkpoint: &str,
    ) -> Result<switchboard_protocol::RestoreResponse, ClientError> {
        let path = format!(
            "/v1/sessions/{id}/checkpoints/{}/restore",
            percent_encoding::utf8_percent_encode(checkpoint, percent_encoding::NON_ALPHANUMERIC)
        );
        self.json(self.request(reqwest::Method::POST, &path)).await
    }

    /// `POST /v1/sessions/{id}/files`: uploads `content` as a file named `name` (its type is
    /// sniffed by the server).
    pub async fn upload_file(
        &self,
        id: Uuid,
        name: &str,
        content: impl Into<bytes::Bytes>,
    ) -> Result<FileInfo, ClientError> {
        let path = format!("/v1/sessions/{id}/files");
        let content: bytes::Bytes = content.into();
        let part = reqwest::multipart::Part::stream(content).file_name(name.to_owned());
        let form = reqwest::multipart::Form::new().part("file", part);
        self.json(self.request(reqwest::Method::POST, &path).multipart(form))
            .await
    }

    /// `GET /v1/sessions/{id}/files`.
    pub async fn list_files(&self, id: Uuid) -> Result<ListFilesResponse, ClientError> {
        let path = format!("/v1/sessions/{id}/files");
        self.json(self.request(reqwest::Method::GET, &path)).await
    }

    /// `POST /v1/sessions/{id}/share`: shares a file of the workspace from the session's
    /// active run (works with the session's own token, which `switchboard mcp --session`
    /// holds).
    pub async fn share_file(
        &self,
        id: Uuid,
        req: &switchboard_protocol::ShareFileRequest,
    ) -> Result<switchboard_protocol::SharedFile, ClientError> {
        let path = format!("/v1/sessions/{id}/share");
        self.json(self.request(reqwest::Method::POST, &path).json(req))
            .await
    }

    /// `GET /v1/sessions/{id}/files/{file_id}`: the content and its `Content-Type`.
    pub async fn download_file(
        &self,
        id: Uuid,
        file_id: Uuid,
    ) -> Result<(bytes::Bytes, String), ClientError> {
        let path = format!("/v1/sessions/{id}/files/{file_id}");
        let resp = self.send(self.request(reqwest::Method::GET, &path)).await?;
        let mime = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/octet-stream")
            .to_owned();
        let body = resp
            .bytes()
            .await
            .map_err(|e| ClientError::from_reqwest(&e))?;
        Ok((body, mime))
    }

    /// `GET /v1/sessions/{id}/tools/pending`.
    pub async fn pending_tools(&self, id: Uuid) -> Result<PendingToolsResponse, ClientError> {
        let path = format!("/v1/sessions/{id}/tools/pending");
        self.json(self.request(reqwest::Method::GET, &path)).await
    }

    /// `GET /v1/approvals`: every approval waiting, in any session, newest first.
    pub async fn waiting_approvals(
        &self,
    ) -> Result<switchboard_protocol::ApprovalsResponse, ClientError> {
        self.json(self.request(reqwest::Method::GET, "/v1/approvals"))
            .await
    }

    /// `POST /v1/sessions/{id}/tools/decisions`.
    pub async fn decide_tools(
        &self,
        id: Uuid,
        req: &ToolDecisionsRequest,
    ) -> Result<ToolDecisionsResponse, ClientError> {
        let path = format!("/v1/sessions/{id}/tools/decisions");
        self.json(self.request(reqwest::Method::POST, &path).json(req))
            .await
    }

    /// `POST /v1/sessions/{id}/cancel`.
    pub async fn cancel(&self, id: Uuid, run_id: Uuid) -> Result<CancelResponse, ClientError> {
        let path = format!("/v1/sessions/{id}/cancel");
        let body = CancelRequest { run_id };
        self.json(self.request(reqwest::Method::POST, &path).json(&body))
            .await
    }

    /// `GET /v1/sessions/{id}/events`: the session's events, resumed after `after` when given.
    ///
    /// The returned stream reconnects by itself (with `Last-Event-ID`) whenever the connection
    /// drops or the server answers 5xx/429, backing off from 100 ms to 5 s, and never yields an
    /// event twice. It ends after yielding one `Err(ClientError::Api)` when the server refuses
    /// the subscription for good (401, 403, 404...). Dropping it closes the connection.
    pub fn subscribe(&self, id: Uuid, after: Option<u64>) -> EventStream {
        EventStream::new(Subscription {
            http: self.http.clone(),
            url: self.url(&format!("/v1/sessions/{id}/events")),
            token: self.token.clone(),
            cursor: after,
        })
    }

    /// Follows run `run` of session `session`, from the event after `from` (from the
    /// session's start when `None`) to the run's end, as typed [`Step`](crate::Step)s: the
    /// one run follower every surface uses. See [`RunFollower`](crate::RunFollower).
    pub fn follow_run(&self, session: Uuid, run: Uuid, from: Option<u64>) -> crate::RunFollower {
        crate::RunFollower::new(self.subscribe(session, from), session, run)
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }

    /// A request with the auth header and the per-request timeout.
    pub(crate) fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let req = self
            .http
            .request(method, self.url(path))
            .timeout(REQUEST_TIMEOUT);
        let req = match &self.on_behalf_of {
            Some(identity) => req.header(switchboard_protocol::people::ON_BEHALF_OF, &**identity),
            None => req,
        };
        match &self.token {
            Some(token) => req.bearer_auth(token),
            None => req,
        }
    }

    /// Sends `req`; a non-2xx answer becomes [`ClientError::Api`].
    pub(crate) async fn send(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, ClientError> {
        let resp = req
            .send()
            .await
            .map_err(|e| ClientError::from_reqwest(&e))?;
        if resp.status().is_success() {
            Ok(resp)
        } else {
            let err = ClientError::from_response(resp).await;
            tracing::debug!(error = %err, "request failed");
            Err(err)
        }
    }

    /// Sends `req` and parses a JSON answer.
    pub(crate) async fn json<T: DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<T, ClientError> {
        let resp = self.send(req).await?;
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| ClientError::from_reqwest(&e))?;
        serde_json::from_slice(&bytes).map_err(|e| {
            let snippet: String = String::from_utf8_lossy(&bytes).chars().take(200).collect();
            ClientError::Decode(format!("{e} (body starts {snippet:?})"))
        })
    }
}
