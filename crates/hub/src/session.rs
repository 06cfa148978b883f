//! `session/new`, `session/load`, `session/resume`, `session/list`, `session/close` and
//! `session/delete`.

use super::*;

/// The backend the editor asks for in `_meta.switchboard`, else the connection's.
pub(crate) fn backend_of(
    meta: Option<&serde_json::Map<String, serde_json::Value>>,
    opts: &HubOptions,
) -> Option<BackendSpec> {
    let ours = meta.and_then(|m| m.get("switchboard"));
    if let Some(agent) = ours.and_then(|s| s.get("agent")).and_then(|a| a.as_str()) {
        return Some(BackendSpec::Acp(agent.to_owned()));
    }
    if ours.and_then(|s| s.get("backend")).and_then(|b| b.as_str()) == Some("builtin") {
        return Some(BackendSpec::Builtin);
    }
    opts.agent.clone().map(BackendSpec::Acp)
}

/// The editor's MCP servers as Switchboard's (SSE servers, which Switchboard does not
/// speak, are left out with a warning).
pub(crate) fn mcp_specs(servers: &[McpServer]) -> Vec<McpServerSpec> {
    servers
        .iter()
        .filter_map(|s| match s {
            McpServer::Stdio(s) => Some(McpServerSpec {
                name: s.name.clone(),
                command: Some(s.command.display().to_string()),
                args: s.args.clone(),
                env: s
                    .env
                    .iter()
                    .map(|e| (e.name.clone(), e.value.clone()))
                    .collect(),
                url: None,
                headers: Default::default(),
            }),
            McpServer::Http(s) => Some(McpServerSpec {
                name: s.name.clone(),
                command: None,
                args: vec![],
                env: Default::default(),
                url: Some(s.url.clone()),
                headers: s
                    .headers
                    .iter()
                    .map(|h| (h.name.clone(), h.value.clone()))
                    .collect(),
            }),
            other => {
                tracing::warn!(server = ?other, "MCP server over SSE left out: Switchboard speaks stdio and streamable HTTP");
                None
            }
        })
        .collect()
}

pub(crate) async fn new_session(
    hub: &Arc<Hub>,
    cx: &v1::ConnectionTo<Client>,
    req: NewSessionRequest,
) -> Result<NewSessionResponse, Error> {
    let mcp = mcp_specs(&req.mcp_servers);
    let create = CreateSessionRequest {
        cwd: Some(req.cwd.display().to_string()),
        backend: backend_of(req.meta.as_ref(), &hub.opts),
        mcp_servers: (!mcp.is_empty()).then_some(mcp),
        ..CreateSessionRequest::default()
    };
    let summary = hub
        .api
        .create_session(&create)
        .await
        .map_err(|e| api_error("creating the session", &e))?;
    let detail = hub
        .api
        .get_session(summary.id)
        .await
        .map_err(|e| api_error("reading the session", &e))?;
    // Nothing to replay: the follower starts at once.
    drop(hub.open_session(cx, summary.id, 0, 0));
    tracing::info!(session = %summary.id, "ACP session created");
    Ok(NewSessionResponse::new(summary.id.to_string())
        .modes(modes(detail.config.permission_mode))
        .config_options(config::options(hub, &detail).await))
}

/// The session an editor opens again (`session/load`, `session/resume`), as it is now.
async fn existing(
    hub: &Arc<Hub>,
    method: &str,
    session: &agent_client_protocol::v1::schema::SessionId,
    mcp_servers: &[McpServer],
) -> Result<(uuid::Uuid, switchboard_protocol::SessionDetailResponse), Error> {
    let id = parse_id(&session.to_string())?;
    let detail = hub
        .api
        .get_session(id)
        .await
        .map_err(|e| api_error("reading the session", &e))?;
    if !mcp_servers.is_empty() {
        // A session's MCP servers are fixed when it is created.
        tracing::info!(session = %id, "{method}: the editor's mcpServers are not added to an existing session");
    }
    Ok((id, detail))
}

pub(crate) async fn load_session(
    hub: &Arc<Hub>,
    cx: &v1::ConnectionTo<Client>,
    req: LoadSessionRequest,
) -> Result<LoadSessionResponse, Error> {
    let (id, detail) = existing(hub, "session/load", &req.session_id, &req.mcp_servers).await?;
    let caught = hub.open_session(cx, id, 0, detail.session.last_event_id);
    match tokio::time::timeout(REPLAY_TIMEOUT, caught).await {
        Ok(Ok(())) => {}
        Ok(Err(_)) => {
            return Err(Error::new(
                ErrorCode::INTERNAL_ERROR,
                "the session's event stream ended before its history was replayed",
            ));
        }
        Err(_) => {
            return Err(Error::new(
                ErrorCode::INTERNAL_ERROR,
                format!(
                    "the session's history was not replayed within {} s",
                    REPLAY_TIMEOUT.as_secs()
                ),
            ));
        }
    }
    Ok(LoadSessionResponse::new()
        .modes(modes(detail.config.permission_mode))
        .config_options(config::options(hub, &detail).await))
}

/// `session/resume`: the session is followed again from its newest event, without its
/// history (the editor has it). Approvals waiting in it are asked.
pub(crate) async fn resume_session(
    hub: &Arc<Hub>,
    cx: &v1::ConnectionTo<Client>,
    req: ResumeSessionRequest,
) -> Result<ResumeSessionResponse, Error> {
    let (id, detail) = existing(hub, "session/resume", &req.session_id, &req.mcp_servers).await?;
    let last = detail.session.last_event_id;
    // Nothing to replay: the follower is caught up at once.
    let _ = hub.open_session(cx, id, last, last).await;
    tracing::info!(session = %id, after = last, "ACP session resumed");
    Ok(ResumeSessionResponse::new()
        .modes(modes(detail.config.permission_mode))
        .config_options(config::options(hub, &detail).await))
}

/// `session/close`: this connection stops following the session and cancels the run it
/// started there (as `session/cancel` would); the session stays on the server, where
/// other surfaces go on with it and `session/load` or `session/resume` open it again.
pub(crate) async fn close_session(
    hub: &Hub,
    req: CloseSessionRequest,
) -> Result<CloseSessionResponse, Error> {
    let id = parse_id(&req.session_id.to_string())?;
    let open = hub.session(&id.to_string())?;
    // As `session/cancel` first: the editor's run is cancelled (or will be, once the
    // prompt being sent has it), and its prompt answers `cancelled`.
    cancel(hub, &id.to_string()).await;
    open.cancel_waiting();
    hub.close(id);
    tracing::info!(session = %id, "ACP session closed");
    Ok(CloseSessionResponse::new())
}

/// `session/delete`: the session is deleted on the server (its log, files and
/// checkpoints; the server decides whether this token may), after closing it here.
pub(crate) async fn delete_session(
    hub: &Hub,
    req: DeleteSessionRequest,
) -> Result<DeleteSessionResponse, Error> {
    let id = parse_id(&req.session_id.to_string())?;
    hub.api
        .delete_session(id)
        .await
        .map_err(|e| api_error("deleting the session", &e))?;
    hub.close(id);
    tracing::info!(session = %id, "ACP session deleted");
    Ok(DeleteSessionResponse::new())
}

pub(crate) async fn list(
    hub: &Hub,
    req: ListSessionsRequest,
) -> Result<ListSessionsResponse, Error> {
    let offset = match req.cursor.as_deref() {
        None => 0,
        Some(c) => c.parse::<u32>().map_err(|_| {
            Error::new(
                ErrorCode::INVALID_PARAMS,
                format!("cursor {c:?} is not one of ours"),
            )
        })?,
    };
    let page = hub
        .api
        .list_sessions(Some(LIST_PAGE), Some(offset))
        .await
        .map_err(|e| api_error("listing sessions", &e))?;
    let seen = offset as u64 + page.sessions.len() as u64;
    let sessions = page
        .sessions
        .into_iter()
        .filter(|s| {
            req.cwd
                .as_ref()
                .is_none_or(|cwd| std::path::Path::new(&s.cwd) == cwd.as_path())
        })
        .map(|s| {
            SessionInfo::new(s.id.to_string(), s.cwd.clone())
                .title(s.title.clone())
                .updated_at(s.updated_at.to_rfc3339())
        })
        .collect();
    let mut resp = ListSessionsResponse::new(sessions);
    if seen < page.total {
        resp = resp.next_cursor(seen.to_string());
    }
    Ok(resp)
}
