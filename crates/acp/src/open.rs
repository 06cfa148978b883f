//! Opening the agent's session for a Switchboard session — `session/resume` of the stored
//! one when the agent offers it (no history replayed: it is in our log already), else
//! `session/load`, else `session/new` — and what the agent offers to configure: its model
//! option, set to the session's model (`session/set_config_option`).

use super::*;

/// The agent's session, opened.
pub(crate) struct Opened {
    pub(crate) session: SessionId,
    /// The agent's model option, when it offers one.
    pub(crate) model: Option<ModelOption>,
}

/// A `select` config option of category `model`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ModelOption {
    pub(crate) id: SessionConfigId,
    pub(crate) values: Vec<String>,
    pub(crate) current: String,
    /// The agent's own choice when the session was opened: what a run without a model of
    /// its own gets back.
    pub(crate) original: String,
}

/// The model option among the agent's config options.
pub(crate) fn model_option(options: Option<&Vec<SessionConfigOption>>) -> Option<ModelOption> {
    options?.iter().find_map(|o| {
        if o.category != Some(SessionConfigOptionCategory::Model) {
            return None;
        }
        let SessionConfigKind::Select(select) = &o.kind else {
            return None;
        };
        let values = match &select.options {
            SessionConfigSelectOptions::Ungrouped(v) => {
                v.iter().map(|x| x.value.to_string()).collect()
            }
            SessionConfigSelectOptions::Grouped(g) => g
                .iter()
                .flat_map(|g| g.options.iter().map(|x| x.value.to_string()))
                .collect(),
            _ => Vec::new(),
        };
        Some(ModelOption {
            id: o.id.clone(),
            values,
            current: select.current_value.to_string(),
            original: select.current_value.to_string(),
        })
    })
}

/// How long `session/close` is waited for before the process is stopped anyway.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

impl Conn {
    /// `session/close` when the agent offers it (the session idles out, or is deleted):
    /// the agent frees what it holds; a stored session can still be resumed or loaded.
    pub(crate) async fn close_session(&self, name: &str, session: &SessionId) {
        if !self.close_session {
            return;
        }
        let sent = self
            .cx
            .send_request(CloseSessionRequest::new(session.clone()))
            .block_task();
        match tokio::time::timeout(CLOSE_TIMEOUT, sent).await {
            Ok(Ok(_)) => {
                tracing::info!(agent = %name, acp_session = %session, "closed the agent's session")
            }
            Ok(Err(e)) => tracing::info!(agent = %name, error = %e, "session/close refused"),
            Err(_) => tracing::info!(agent = %name, "no answer to session/close"),
        }
    }
}

impl AcpBackend {
    /// Waits for the answer to `session/resume` or `session/load` (`step`): `Ok(Ok(_))`
    /// taken; `Ok(Err(_))` refused by an agent that is still there (another way may work);
    /// `Err(_)` no answer in time, or the agent died.
    async fn reopen<R>(
        &self,
        conn: &mut Conn,
        step: &'static str,
        sent: impl std::future::Future<Output = Result<R, agent_client_protocol::Error>>,
    ) -> Result<Result<R, AcpError>, AcpError> {
        let answer = tokio::time::timeout(LOAD_SESSION_TIMEOUT, sent)
            .await
            .map_err(|_| AcpError::Protocol {
                agent: self.name.clone(),
                step,
                reason: format!("no answer within {} s", LOAD_SESSION_TIMEOUT.as_secs()),
            })?;
        match answer {
            Ok(resp) => Ok(Ok(resp)),
            Err(e) => match conn.failure(&self.name, step, &e).await {
                err @ AcpError::Exited { .. } => Err(err),
                err => Ok(Err(err)),
            },
        }
    }

    /// Sets the agent's model option to `model` when it offers that value (and it is not
    /// already); `Err` says why the model could not be given.
    pub(crate) async fn set_model(
        &self,
        conn: &Conn,
        session: &SessionId,
        option: &mut ModelOption,
        model: &str,
    ) -> Result<(), String> {
        if option.current == model {
            return Ok(());
        }
        if !option.values.iter().any(|v| v == model) {
            return Err(format!(
                "this agent offers the models {}: {model:?} is not one of them",
                option.values.join(", ")
            ));
        }
        let req = SetSessionConfigOptionRequest::new(session.clone(), option.id.clone(), model);
        match tokio::time::timeout(NEW_SESSION_TIMEOUT, conn.cx.send_request(req).block_task())
            .await
        {
            Ok(Ok(resp)) => {
                option.current = model_option(Some(&resp.config_options))
                    .map(|m| m.current)
                    .unwrap_or_else(|| model.to_owned());
                tracing::info!(agent = %self.name, model, "set the agent's model");
                Ok(())
            }
            Ok(Err(e)) => Err(format!("the agent refused the model {model:?}: {e}")),
            Err(_) => Err(format!(
                "the agent did not answer setting the model {model:?}"
            )),
        }
    }

    /// `session/resume` or `session/load` of the stored ACP session as the agent offers,
    /// else `session/new` (saying so in a notice when an earlier session is lost).
    pub(crate) async fn open_session(
        &self,
        conn: &mut Conn,
        ctx: &RunContext,
    ) -> Result<Opened, AcpError> {
        let saved: Option<SavedState> = ctx
            .handle
            .backend_state()
            .await
            .map_err(|e| AcpError::Protocol {
                agent: self.name.clone(),
                step: "reading the stored session",
                reason: e.to_string(),
            })?
            .and_then(|v| serde_json::from_value(v).ok())
            .filter(|s: &SavedState| s.agent == self.name);
        let cwd = ctx.cwd.clone();
        let mut notice = None;
        if let Some(saved) = &saved {
            let id = SessionId::new(saved.acp_session_id.clone());
            if conn.resume_session {
                let req = ResumeSessionRequest::new(id.clone(), cwd.clone())
                    .mcp_servers(self.mcp_servers(ctx, conn.mcp_http).0);
                let sent = conn.cx.send_request(req).block_task();
                match self.reopen(conn, "session/resume", sent).await? {
                    Ok(resp) => {
                        tracing::info!(agent = %self.name, acp_session = %id, "resumed the agent's session");
                        return Ok(Opened {
                            session: id,
                            model: model_option(resp.config_options.as_ref()),
                        });
                    }
                    Err(err) => {
                        tracing::warn!(agent = %self.name, error = %err, "session/resume failed; trying session/load");
                    }
                }
            }
            if conn.load_session {
                let req = LoadSessionRequest::new(id.clone(), cwd.clone())
                    .mcp_servers(self.mcp_servers(ctx, conn.mcp_http).0);
                let sent = conn.cx.send_request(req).block_task();
                let loaded = self.reopen(conn, "session/load", sent).await?;
                // The agent replays the history as updates before it answers: it is already
                // in our log, so it is dropped here (after a failure too).
                while conn.incoming.try_recv().is_ok() {}
                match loaded {
                    Ok(resp) => {
                        tracing::info!(agent = %self.name, acp_session = %id, "loaded the agent's session");
                        return Ok(Opened {
                            session: id,
                            model: model_option(resp.config_options.as_ref()),
                        });
                    }
                    Err(err) => {
                        notice = Some(format!(
                            "agent {:?} could not resume its earlier session ({err}); started a new one, which does not remember earlier turns",
                            self.name
                        ));
                    }
                }
            } else if !conn.resume_session {
                notice = Some(format!(
                    "agent {:?} cannot resume sessions (it offers neither session/resume nor session/load); started a new session, which does not remember earlier turns",
                    self.name
                ));
            } else {
                notice = Some(format!(
                    "agent {:?} could not resume its earlier session; started a new one, which does not remember earlier turns",
                    self.name
                ));
            }
        }
        let (servers, left_out) = self.mcp_servers(ctx, conn.mcp_http);
        if !left_out.is_empty() {
            let message = format!(
                "agent {:?} does not take MCP servers over HTTP; left out: {}",
                self.name,
                left_out.join(", ")
            );
            self::notice(ctx, message).await;
        }
        let req = NewSessionRequest::new(cwd).mcp_servers(servers);
        let answer =
            tokio::time::timeout(NEW_SESSION_TIMEOUT, conn.cx.send_request(req).block_task())
                .await
                .map_err(|_| AcpError::Protocol {
                    agent: self.name.clone(),
                    step: "session/new",
                    reason: format!("no answer within {} s", NEW_SESSION_TIMEOUT.as_secs()),
                })?;
        let (session, model) = match answer {
            Ok(r) => (r.session_id, model_option(r.config_options.as_ref())),
            Err(e) => return Err(conn.failure(&self.name, "session/new", &e).await),
        };
        let state = json!(SavedState {
            agent: self.name.clone(),
            acp_session_id: session.to_string(),
        });
        if let Err(e) = ctx.handle.save_backend_state(Some(&state)).await {
            tracing::warn!(agent = %self.name, error = %e, "could not store the agent's session id");
        }
        if let Some(message) = notice {
            tracing::warn!(agent = %self.name, "{message}");
            self::notice(ctx, message).await;
        }
        Ok(Opened { session, model })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_model_option_is_the_select_of_category_model() {
        let options = vec![
            SessionConfigOption::select(
                "mode",
                "Mode",
                "ask",
                vec![SessionConfigSelectOption::new("ask", "Ask")],
            )
            .category(SessionConfigOptionCategory::Mode),
            SessionConfigOption::select(
                "llm",
                "Model",
                "fast",
                vec![
                    SessionConfigSelectOption::new("fast", "Fast"),
                    SessionConfigSelectOption::new("smart", "Smart"),
                ],
            )
            .category(SessionConfigOptionCategory::Model),
        ];
        let m = model_option(Some(&options)).unwrap();
        assert_eq!(m.id.to_string(), "llm");
        assert_eq!(m.values, ["fast", "smart"]);
        assert_eq!(m.current, "fast");
        assert_eq!(model_option(Some(&options[..1].to_vec())), None);
        assert_eq!(model_option(None), None);
    }
}
