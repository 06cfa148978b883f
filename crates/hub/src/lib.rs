//! Switchboard as an ACP agent: editors (Zed, JetBrains, Neovim's ACP plugins) drive its
//! sessions — whatever backend each has — with their durable log and their approvals.
//!
//! [`serve`] speaks the agent side of the Agent Client Protocol on any transport and is a
//! client of a Switchboard server's `/v1` API ([`switchboard_client::Client`]); nothing here
//! touches the engine. The same code serves `switchboard acp` (stdio, [`serve_stdio`]) and
//! `GET /v1/acp` (a WebSocket, [`ws`]).
//!
//! How the protocol meets the API:
//! - `session/new` creates a session (`cwd`, the editor's `mcpServers`, the backend from
//!   `_meta.switchboard.agent` / `.backend`, else [`HubOptions::agent`], else the server's
//!   default); `session/load` opens an existing one and replays its log as updates;
//!   `session/list` lists them.
//! - Each open session has one *follower*: a subscription to its events, resumed with
//!   `Last-Event-ID` when the connection to the server drops, that turns every event into
//!   `session/update`s in log order — so the editor sees each event once, including runs
//!   started elsewhere (a chat, the console).
//! - `session/prompt` sends the message as a follow-up (it waits its turn when a run from
//!   elsewhere is under way) and answers when the follower has seen that run end.
//! - A call waiting for approval becomes `session/request_permission`; the editor's answer
//!   is a decision over the API. When the call is decided elsewhere first, the editor's
//!   request is withdrawn with `$/cancel_request` (an ACP client answers it `cancelled`).
//!   An editor that goes away leaves the approval to the other surfaces and to its timeout,
//!   which fails closed as every approval does.
//! - Session modes are the permission modes; `session/set_mode` changes the session's, and
//!   so does the `mode` config option (`session/set_config_option`); a session of the
//!   built-in agent has a `model` option too ([`config`]).
//! - `session/resume` follows a session again without replaying it; `session/close` stops
//!   following it here; `session/delete` deletes it on the server.
//! - The session's title and what it cost reach the editor as `session_info_update` and
//!   `usage_update` ([`meter`]).
//! - `$/cancel_request` for a `session/prompt` cancels its run (the prompt answers
//!   `cancelled`); for another request it stops waiting and answers the cancellation error.
//! - An editor that can show forms (`elicitation.form`) is offered "Deny with a reason…":
//!   the reason it asks for goes to the agent with the rejection.

pub mod a2a;
mod config;
mod follow;
mod http;
mod map;
pub mod mcp;
mod meter;
mod mode;
mod prompt;
mod question;
mod session;
mod state;
pub mod ws;

use follow::*;
use mode::*;
use prompt::*;
use session::*;
use state::*;

use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, CancelNotification, CloseSessionRequest, CloseSessionResponse, ContentBlock,
    CurrentModeUpdate, DeleteSessionRequest, DeleteSessionResponse, EmbeddedResourceResource,
    Implementation, InitializeRequest, InitializeResponse, ListSessionsRequest,
    ListSessionsResponse, LoadSessionRequest, LoadSessionResponse, McpServer, NewSessionRequest,
    NewSessionResponse, PermissionOption, PermissionOptionKind, PromptCapabilities, PromptRequest,
    PromptResponse, RequestPermissionOutcome, RequestPermissionRequest, ResumeSessionRequest,
    ResumeSessionResponse, SessionCapabilities, SessionCloseCapabilities,
    SessionDeleteCapabilities, SessionInfo, SessionListCapabilities, SessionNotification,
    SessionResumeCapabilities, SessionUpdate, SetSessionConfigOptionRequest,
    SetSessionConfigOptionResponse, SetSessionModeRequest, SetSessionModeResponse, ToolCallUpdate,
    ToolCallUpdateFields,
};
use agent_client_protocol::{
    Agent, ByteStreams, Client, ConnectTo, Error, ErrorCode, RequestCancellation, v1,
};
use base64::Engine as _;
use futures::StreamExt;
use switchboard_client::{Client as Api, ClientError};
use switchboard_protocol::{
    AgentEvent, AttachmentRef, BackendSpec, CreateSessionRequest, DecisionAction, InputMessage,
    McpServerSpec, MessageType, SendMessageRequest, ToolDecision, ToolDecisionsRequest,
    UpdateSessionRequest,
};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use uuid::Uuid;

pub use map::{mode_of, modes};

/// How long `session/load` waits for the replay of the log.
const REPLAY_TIMEOUT: Duration = Duration::from_secs(120);
/// A silence this long while replaying a loaded session's history ends the replay.
const REPLAY_IDLE: Duration = Duration::from_secs(3);
/// Sessions per `session/list` page.
const LIST_PAGE: u32 = 100;

/// Settings of one ACP connection.
#[derive(Debug, Clone, Default)]
pub struct HubOptions {
    /// The `[agents.NAME]` new sessions run, unless the editor names a backend in `_meta`;
    /// `None`: the server's default backend.
    pub agent: Option<String>,
}

/// Why the ACP connection ended.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("ACP connection: {0}")]
    Protocol(String),
}

/// Serves ACP on this process's stdin and stdout until the editor closes them.
pub async fn serve_stdio(api: Api, opts: HubOptions) -> Result<(), HubError> {
    use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};
    let transport = ByteStreams::new(
        tokio::io::stdout().compat_write(),
        tokio::io::stdin().compat(),
    );
    serve(api, opts, transport).await
}

fn parse_id(id: &str) -> Result<Uuid, Error> {
    Uuid::parse_str(id).map_err(|_| {
        Error::new(
            ErrorCode::INVALID_PARAMS,
            format!("session id {id:?} is not a Switchboard session id (a UUID)"),
        )
    })
}

/// An API failure as a JSON-RPC error: the server's code and message are kept in `data`.
fn api_error(step: &str, e: &ClientError) -> Error {
    let code = match e {
        ClientError::Api { status: 404, .. } => ErrorCode::RESOURCE_NOT_FOUND,
        ClientError::Api { status, .. } if (400..500).contains(status) && *status != 429 => {
            ErrorCode::INVALID_PARAMS
        }
        _ => ErrorCode::INTERNAL_ERROR,
    };
    let data = match e {
        ClientError::Api { status, code, .. } => {
            serde_json::json!({"status": status, "code": code})
        }
        _ => serde_json::json!({"code": "server_unreachable"}),
    };
    let message = match e {
        ClientError::Api { message, .. } => message.clone(),
        other => other.to_string(),
    };
    Error::new(code, format!("{step}: {message}")).data(data)
}

/// Serves one ACP connection on `transport` until the editor closes it.
pub async fn serve(
    api: Api,
    opts: HubOptions,
    transport: impl ConnectTo<Agent> + 'static,
) -> Result<(), HubError> {
    let hub = Arc::new(Hub {
        api,
        opts,
        open: Mutex::new(HashMap::new()),
        models: tokio::sync::OnceCell::new(),
        forms: std::sync::atomic::AtomicBool::new(false),
    });
    // However the connection ends (its transport closes, or its task is stopped), its
    // followers stop and its waiting prompts end.
    let closing = CloseAll(hub.clone());
    // Each request runs on its own task, answered when it is done; `$/cancel_request`
    // stops waiting for it (a prompt's run is cancelled instead, see `prompt`).
    macro_rules! handle {
        ($req:ty, $resp:ty, |$hub:ident, $cx:ident, $r:ident| $body:expr) => {{
            let h = hub.clone();
            async move |$r: $req, responder: v1::Responder<$resp>, cx: v1::ConnectionTo<Client>| {
                let $hub = h.clone();
                let $cx = cx.clone();
                let cancel = responder.cancellation();
                cx.spawn(async move {
                    responder.respond_with_result(cancel.run_until_cancelled($body).await)
                })
            }
        }};
    }
    let h_init = hub.clone();
    let (h_prompt, h_cancel) = (hub.clone(), hub.clone());
    let result = Agent
        .v1()
        .name("switchboard")
        .on_receive_request(
            async move |req: InitializeRequest,
                        responder: v1::Responder<InitializeResponse>,
                        _cx| {
                let forms = req
                    .client_capabilities
                    .elicitation
                    .as_ref()
                    .is_some_and(|e| e.form.is_some());
                h_init
                    .forms
                    .store(forms, std::sync::atomic::Ordering::Relaxed);
                responder.respond(initialize(&req))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            handle!(
                NewSessionRequest,
                NewSessionResponse,
                |hub, cx, req| async move { new_session(&hub, &cx, req).await }
            ),
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            handle!(
                LoadSessionRequest,
                LoadSessionResponse,
                |hub, cx, req| async move { load_session(&hub, &cx, req).await }
            ),
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            handle!(
                ResumeSessionRequest,
                ResumeSessionResponse,
                |hub, cx, req| async move { resume_session(&hub, &cx, req).await }
            ),
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            handle!(
                ListSessionsRequest,
                ListSessionsResponse,
                |hub, _cx, req| async move { list(&hub, req).await }
            ),
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            handle!(
                CloseSessionRequest,
                CloseSessionResponse,
                |hub, _cx, req| async move { close_session(&hub, req).await }
            ),
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            handle!(
                DeleteSessionRequest,
                DeleteSessionResponse,
                |hub, _cx, req| async move { delete_session(&hub, req).await }
            ),
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            handle!(
                SetSessionModeRequest,
                SetSessionModeResponse,
                |hub, cx, req| async move { set_mode(&hub, &cx, req).await }
            ),
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            handle!(
                SetSessionConfigOptionRequest,
                SetSessionConfigOptionResponse,
                |hub, cx, req| async move { config::set_config_option(&hub, &cx, req).await }
            ),
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: PromptRequest,
                        responder: v1::Responder<PromptResponse>,
                        cx: v1::ConnectionTo<Client>| {
                let hub = h_prompt.clone();
                let cancel = responder.cancellation();
                cx.spawn(
                    async move { responder.respond_with_result(prompt(&hub, req, cancel).await) },
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |n: CancelNotification, cx: v1::ConnectionTo<Client>| {
                let hub = h_cancel.clone();
                cx.spawn(async move {
                    cancel(&hub, &n.session_id.to_string()).await;
                    Ok(())
                })
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_to(transport)
        .await;
    drop(closing);
    result.map_err(|e| HubError::Protocol(e.to_string()))
}

/// Closes every session a connection has open when dropped.
struct CloseAll(Arc<Hub>);

impl Drop for CloseAll {
    fn drop(&mut self) {
        self.0.close_all();
    }
}

fn initialize(req: &InitializeRequest) -> InitializeResponse {
    let version = req.protocol_version.min(ProtocolVersion::LATEST);
    InitializeResponse::new(version)
        .agent_capabilities(
            AgentCapabilities::new()
                .load_session(true)
                // Images and embedded files become attachments of the message.
                .prompt_capabilities(
                    PromptCapabilities::new()
                        .image(true)
                        .audio(true)
                        .embedded_context(true),
                )
                .session_capabilities(
                    SessionCapabilities::new()
                        .list(SessionListCapabilities::new())
                        .resume(SessionResumeCapabilities::new())
                        .close(SessionCloseCapabilities::new())
                        .delete(SessionDeleteCapabilities::new()),
                ),
        )
        .agent_info(Implementation::new(
            "switchboard",
            env!("CARGO_PKG_VERSION"),
        ))
}

/// The bearer token a protocol of the hub (`ACP`, `MCP`, `A2A`) acts with: the request's
/// own, so each caller acts as itself (a personal token as its person). A console session
/// or a chat identity is refused: the protocols take a bearer token. `None`: the request
/// reached the route without a principal (no authentication layer in front of it).
pub(crate) fn bearer_token(
    protocol: &str,
    extensions: &axum::http::Extensions,
    headers: &axum::http::HeaderMap,
) -> Result<Option<String>, switchboard_http::ApiError> {
    use switchboard_protocol::people::{Credential, Principal};
    match extensions.get::<Principal>().map(|p| p.credential) {
        Some(Credential::Console | Credential::Chat) => Err(switchboard_http::ApiError::custom(
            403,
            "forbidden",
            format!(
                "{protocol} takes a bearer token: the server's, or a personal token (`switchboard tokens create`)"
            ),
        )),
        Some(Credential::Token | Credential::ServerToken) => {
            Ok(Some(switchboard_http::bearer_value(headers)?.to_string()))
        }
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_editor_picks_the_backend_in_meta_else_the_connection_does() {
        let opts = HubOptions {
            agent: Some("claude".into()),
        };
        let meta = |v: serde_json::Value| v.as_object().cloned().unwrap();
        assert_eq!(
            backend_of(
                Some(&meta(
                    serde_json::json!({"switchboard": {"agent": "goose"}})
                )),
                &opts
            ),
            Some(BackendSpec::Acp("goose".into()))
        );
        assert_eq!(
            backend_of(
                Some(&meta(
                    serde_json::json!({"switchboard": {"backend": "builtin"}})
                )),
                &opts
            ),
            Some(BackendSpec::Builtin)
        );
        assert_eq!(
            backend_of(None, &opts),
            Some(BackendSpec::Acp("claude".into()))
        );
        assert_eq!(backend_of(None, &HubOptions::default()), None);
    }

    #[test]
    fn resource_uris_name_their_files() {
        assert_eq!(file_name("file:///home/me/src/main.rs"), "main.rs");
        assert_eq!(file_name("zed:untitled"), "resource.txt");
        assert_eq!(file_name(""), "resource.txt");
    }

    #[test]
    fn api_errors_keep_the_servers_code() {
        let e = api_error(
            "creating the session",
            &ClientError::Api {
                status: 422,
                code: "validation_failed".into(),
                message: "cwd: not a directory".into(),
                request_id: "r".into(),
            },
        );
        assert_eq!(e.code, ErrorCode::INVALID_PARAMS);
        assert!(e.message.contains("cwd: not a directory"));
        assert_eq!(e.data.unwrap()["code"], "validation_failed");
        let e = api_error("x", &ClientError::Transport("refused".into()));
        assert_eq!(e.code, ErrorCode::INTERNAL_ERROR);
    }
}
