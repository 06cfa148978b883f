//! Hosting: the bundles' states, `up`, `down`, members' readiness and `list`.

use serde_json::json;
use switchboard_protocol::relay::{
    BundleHealth, BundleState, BundleSummary, BundlesResponse, HostingResponse, HostingResult,
    InvalidBundle, ListResponse, MemberChange, MemberInfo, RELAY_SCHEMA_VERSION, StartupFailures,
};
use switchboard_protocol::{BackendSpec, CreateSessionRequest};
use uuid::Uuid;

use super::{Relay, resolve};
use crate::config::{Bundle, ConfigError, Member, Transport};
use crate::error::RelayError;
use crate::policy::Capability;
use crate::tmux::{StartOutcome, StartSpec, Tmux};

impl Relay {
    /// Every bundle file with its state and health; files that do not validate are listed
    /// with their error.
    pub async fn bundles(&self) -> Result<BundlesResponse, RelayError> {
        let mut bundles = Vec::new();
        let mut invalid = Vec::new();
        for name in self.inner.dir.names()? {
            match self.inner.dir.load(&name) {
                Ok(b) => {
                    let state = self.inner.store.bundle_state(&name).await?;
                    let mut ready = 0;
                    for m in &b.members {
                        if self.readiness(&b, state, m).await.0 {
                            ready += 1;
                        }
                    }
                    let (health, reason_code) = health(state, ready, b.members.len());
                    bundles.push(BundleSummary {
                        name,
                        state,
                        health,
                        reason_code,
                        members: b.members.len(),
                        ready,
                    });
                }
                Err(e) => invalid.push(InvalidBundle {
                    file: format!("{name}.toml"),
                    error: e.to_string(),
                }),
            }
        }
        Ok(BundlesResponse {
            schema_version: RELAY_SCHEMA_VERSION,
            bundles,
            invalid,
        })
    }

    /// Starts every member that is not running.
    pub async fn up(&self, bundle: &str) -> Result<HostingResponse, RelayError> {
        let b = self.load(bundle)?;
        let hosting = self.hosting_lock(bundle);
        let _serial = hosting.lock().await;
        let was = self.inner.store.bundle_state(bundle).await?;
        let tmux = self.tmux(bundle);
        let mut changes = Vec::new();
        let mut started = false;
        for m in &b.members {
            let change = match self.start_member(&b, &tmux, m).await {
                Ok(true) => {
                    started = true;
                    change(&m.id, "started", None)
                }
                Ok(false) => change(&m.id, "already_running", None),
                Err((code, reason)) => {
                    tracing::warn!(bundle, member = %m.id, code, %reason, "member failed to start");
                    self.inner
                        .store
                        .record_startup_failure(bundle, &m.id, &code, &reason)
                        .await?;
                    change(&m.id, "failed", Some((code, reason)))
                }
            };
            changes.push(change);
        }
        let resp = self
            .conclude(
                bundle,
                BundleState::Up,
                was == BundleState::Down || started,
                changes,
            )
            .await?;
        for m in &b.members {
            if self.inner.store.queued_count(bundle, &m.id).await? > 0 {
                self.ensure_worker(bundle, &m.id).await;
            }
        }
        Ok(resp)
    }

    /// The shell command tmux runs for member `m`: its own, or — when members are sandboxed
    /// and this one is not exempt — the sandbox's launcher running it (`$SHELL -c COMMAND`)
    /// with the member's directory read-write; what the launcher needs in its environment
    /// goes into `env`. Refused when the sandbox is required and this machine cannot.
    #[allow(clippy::type_complexity)]
    fn confine(
        &self,
        m: &Member,
        t: &crate::config::TmuxTransport,
        env: &mut Vec<(String, String)>,
    ) -> Result<(String, Option<switchboard_sandbox::Confined>), (String, String)> {
        let Some(sandbox) = self.inner.opts.sandbox.as_deref() else {
            return Ok((t.command.clone(), None));
        };
        if t.sandbox.enabled == Some(false) {
            return Ok((t.command.clone(), None));
        }
        if !sandbox.available {
            if sandbox.required {
                return Err((
                    "sandbox_unavailable".into(),
                    "the sandbox is required ([sandbox] mode = \"required\") and this machine cannot sandbox processes (no Landlock in its kernel)".into(),
                ));
            }
            tracing::warn!(member = %m.id, "this machine cannot sandbox processes: the member runs as the server's user");
            return Ok((t.command.clone(), None));
        }
        let words = shlex::split(&t.command).unwrap_or_default();
        let word_refs: Vec<&str> = words.iter().map(String::as_str).collect();
        let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
        let read_write = t.sandbox.read_write(&word_refs, home.as_deref());
        let read_only = match words.split_first() {
            Some((program, args)) => switchboard_sandbox::needed_by(program, args),
            None => Vec::new(),
        };
        // Checked when the bundle was read.
        let network = t.sandbox.network().unwrap_or_default();
        let shell = std::env::var("SHELL")
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "sh".to_owned());
        let own_env = env.clone();
        let spec = switchboard_sandbox::Spec {
            workspace: &m.directory,
            hidden: &self.inner.opts.protected,
            read_write: &read_write,
            read_only: &read_only,
            network: &network,
            connect_ports: &[],
            private_home: false,
            own_pids: true,
            env: &own_env,
        };
        let fail = |e: String| ("sandbox_failed".to_string(), e);
        let (mut cmd, confined) = sandbox
            .command(&spec, &shell)
            .map_err(|e| fail(e.to_string()))?;
        if !t.command.is_empty() {
            cmd.arg("-c").arg(&t.command);
        }
        let std = cmd.as_std();
        let mut line = Vec::new();
        for word in std::iter::once(std.get_program()).chain(std.get_args()) {
            let word = word
                .to_str()
                .ok_or_else(|| fail("a path of the sandbox is not UTF-8".into()))?;
            line.push(
                shlex::try_quote(word)
                    .map_err(|e| fail(e.to_string()))?
                    .into_owned(),
            );
        }
        for (k, v) in std.get_envs() {
            let (Some(k), v) = (k.to_str(), v.map(|v| v.to_str())) else {
                continue;
            };
            env.retain(|(key, _)| key != k);
            if let Some(Some(v)) = v {
                env.push((k.to_owned(), v.to_owned()));
            }
        }
        Ok((line.join(" "), Some(confined)))
    }

    /// Starts one member; Ok(true) when it was started, Ok(false) when it already ran.
    async fn start_member(
        &self,
        b: &Bundle,
        tmux: &Tmux,
        m: &Member,
    ) -> Result<bool, (String, String)> {
        match &m.transport {
            Transport::Tmux(t) => {
                let mut env: Vec<(String, String)> = self.inner.opts.member_env.clone();
                env.push(("SWITCHBOARD_RELAY_BUNDLE".into(), b.name.clone()));
                env.push(("SWITCHBOARD_RELAY_MEMBER".into(), m.id.clone()));
                // The member's own token: `switchboard relay send` in the pane acts as this
                // member only (its sends are its own, under its policy and budget).
                if let Some(token) = self
                    .inner
                    .opts
                    .member_mcp
                    .as_ref()
                    .and_then(|k| crate::member_token::mint(&k.key, &b.name, &m.id))
                {
                    env.push(("SWITCHBOARD_RELAY_TOKEN".into(), token));
                }
                env.extend(t.env.iter().map(|(k, v)| (k.clone(), v.clone())));
                let (command, confined) = self.confine(m, t, &mut env)?;
                let spec = StartSpec {
                    session: m.id.clone(),
                    directory: m.directory.clone(),
                    command,
                    env,
                    width: 200,
                    height: 50,
                    settle: self.inner.opts.tmux_settle,
                };
                let started = tmux.start(&spec).await;
                if let (Ok(StartOutcome::Started), Some(c)) = (&started, confined) {
                    self.inner
                        .confined
                        .lock()
                        .insert((b.name.clone(), m.id.clone()), c);
                }
                match started {
                    Ok(StartOutcome::Started) => Ok(true),
                    Ok(StartOutcome::AlreadyRunning) => Ok(false),
                    Err(e) => Err((e.code().to_string(), e.to_string())),
                }
            }
            Transport::Acp(_) | Transport::Session(_) => {
                if let Some(id) = self.member_session(&b.name, &m.id).await {
                    match self.inner.client.get_session(id).await {
                        Ok(_) => return Ok(false),
                        // Gone: a new session takes its place.
                        Err(e) if e.status() == Some(404) => {}
                        // Anything else is not a reason to orphan the member's session.
                        Err(e) => return Err(("session_unreachable".into(), e.to_string())),
                    }
                }
                if !m.directory.is_dir() {
                    return Err((
                        "startup_directory_missing".into(),
                        format!("directory {} does not exist", m.directory.display()),
                    ));
                }
                let (backend, model, permission_mode) = match &m.transport {
                    Transport::Acp(a) => (BackendSpec::Acp(a.agent.clone()), None, None),
                    Transport::Session(s) => (
                        match s.backend.as_deref() {
                            None | Some("builtin") => BackendSpec::Builtin,
                            Some(agent) => BackendSpec::Acp(agent.to_string()),
                        },
                        s.model.clone(),
                        s.permission_mode,
                    ),
                    Transport::Tmux(_) => (BackendSpec::Builtin, None, None),
                };
                let req = CreateSessionRequest {
                    title: Some(format!("{} ({} in relay bundle {})", m.name, m.id, b.name)),
                    cwd: Some(m.directory.display().to_string()),
                    backend: Some(backend),
                    model,
                    permission_mode,
                    auto_approve: None,
                    // The relay's own MCP server, so that the agent can list, message and
                    // look at its peers with no configuration.
                    mcp_servers: self
                        .inner
                        .opts
                        .member_mcp
                        .as_ref()
                        .and_then(|mcp| mcp.spec(&b.name, &m.id))
                        .map(|spec| vec![spec]),
                    sandbox: None,
                };
                let s = self
                    .inner
                    .client
                    .create_session(&req)
                    .await
                    .map_err(|e| ("session_create_failed".to_string(), e.to_string()))?;
                self.inner
                    .store
                    .set_member_session(&b.name, &m.id, Some(&s.id.to_string()))
                    .await
                    .map_err(|e| ("relay_store".to_string(), e.to_string()))?;
                Ok(true)
            }
        }
    }

    /// Stops the bundle's tmux members (only sessions the relay created) and detaches its
    /// session members (their sessions and transcripts stay; an active run is cancelled).
    pub async fn down(&self, bundle: &str) -> Result<HostingResponse, RelayError> {
        // A bundle whose file went bad, or was removed, can still be taken down.
        let b = match self.inner.dir.load(bundle) {
            Ok(b) => Some(b),
            Err(ConfigError::Invalid { .. }) if bundle != crate::config::POLICIES => None,
            Err(ConfigError::NotFound(..)) if crate::config::valid_id(bundle) => {
                if self.inner.store.bundle_state(bundle).await? == BundleState::Down
                    && self
                        .tmux(bundle)
                        .owned_sessions()
                        .await
                        .unwrap_or_default()
                        .is_empty()
                {
                    return Err(self.load(bundle).err().unwrap_or_else(|| {
                        RelayError::new(404, "bundle_not_found", "no such bundle")
                    }));
                }
                None
            }
            Err(e) => return Err(e.into()),
        };
        let hosting = self.hosting_lock(bundle);
        let _serial = hosting.lock().await;
        let was = self.inner.store.bundle_state(bundle).await?;
        let tmux = self.tmux(bundle);
        let mut changes = Vec::new();
        let mut stopped_any = false;
        let owned = tmux.owned_sessions().await.map_err(|e| {
            RelayError::new(
                500,
                e.code(),
                format!("listing the bundle's tmux sessions: {e}"),
            )
        })?;
        for s in owned {
            let stopped = tmux.stop(&s).await;
            if stopped.is_ok() {
                // Its cgroup goes once its last process has; its proxy and directory now.
                self.inner
                    .confined
                    .lock()
                    .remove(&(bundle.to_owned(), s.clone()));
            }
            match stopped {
                Ok(true) => {
                    stopped_any = true;
                    changes.push(change(&s, "stopped", None));
                }
                Ok(false) => {}
                Err(e) => changes.push(change(
                    &s,
                    "failed",
                    Some((e.code().to_string(), e.to_string())),
                )),
            }
        }
        if let Some(b) = &b {
            for m in &b.members {
                if matches!(m.transport, Transport::Tmux(_)) {
                    if !changes.iter().any(|c| c.id == m.id) {
                        changes.push(change(&m.id, "not_running", None));
                    }
                    continue;
                }
                let Some(id) = self.member_session(bundle, &m.id).await else {
                    changes.push(change(&m.id, "not_running", None));
                    continue;
                };
                if let Ok(s) = self.inner.client.get_session(id).await
                    && let Some(run) = s.session.active_run_id
                {
                    let _ = self.inner.client.cancel(id, run).await;
                }
                let r = if was == BundleState::Up {
                    "stopped"
                } else {
                    "not_running"
                };
                changes.push(change(&m.id, r, None));
            }
        }
        self.conclude(
            bundle,
            BundleState::Down,
            was == BundleState::Up || stopped_any,
            changes,
        )
        .await
    }

    /// Stores the bundle's new state and audits and reports what `up` or `down` did.
    async fn conclude(
        &self,
        bundle: &str,
        state: BundleState,
        changed: bool,
        members: Vec<MemberChange>,
    ) -> Result<HostingResponse, RelayError> {
        self.inner.store.set_bundle_state(bundle, state).await?;
        let (done, skipped, event) = match state {
            BundleState::Up => (HostingResult::Hosted, "already_up", "relay.up"),
            BundleState::Down => (HostingResult::Unhosted, "already_down", "relay.down"),
        };
        let (result, reason_code) = if changed {
            (done, None)
        } else {
            (HostingResult::Skipped, Some(skipped.to_string()))
        };
        self.inner.audit.record(
            bundle,
            event,
            json!({"result": result, "members": &members}),
        );
        Ok(HostingResponse {
            schema_version: RELAY_SCHEMA_VERSION,
            bundle: bundle.to_string(),
            result,
            reason_code,
            members,
        })
    }

    pub(super) async fn member_session(&self, bundle: &str, member: &str) -> Option<Uuid> {
        let s = self
            .inner
            .store
            .member_session(bundle, member)
            .await
            .ok()??;
        Uuid::parse_str(&s).ok()
    }

    /// Whether a member could take a message now, and why not.
    pub(super) async fn readiness(
        &self,
        b: &Bundle,
        state: BundleState,
        m: &Member,
    ) -> (bool, Option<String>) {
        if state == BundleState::Down {
            return (false, Some("bundle_down".into()));
        }
        match &m.transport {
            Transport::Tmux(_) => match self.tmux(&b.name).pane_state(&m.id).await {
                Ok(Some(p)) if !p.dead => match self.owned_pane(&b.name, &m.id).await {
                    Ok(true) => (true, None),
                    Ok(false) => (false, Some("foreign_session".into())),
                    Err(e) => (false, Some(e.code().to_string())),
                },
                Ok(Some(_)) => (false, Some("exited".into())),
                Ok(None) => (false, Some("not_started".into())),
                Err(e) => (false, Some(e.code().to_string())),
            },
            Transport::Acp(_) | Transport::Session(_) => {
                let Some(id) = self.member_session(&b.name, &m.id).await else {
                    return (false, Some("not_started".into()));
                };
                match self.inner.client.get_session(id).await {
                    Ok(_) => (true, None),
                    Err(e) if e.status() == Some(404) => (false, Some("session_missing".into())),
                    Err(_) => (false, Some("session_unreachable".into())),
                }
            }
        }
    }

    // --- list -----------------------------------------------------------------------------

    /// The members `requester` may list (`None`: the API caller itself, who sees all).
    pub async fn list(
        &self,
        bundle: &str,
        requester: Option<&str>,
    ) -> Result<ListResponse, RelayError> {
        let b = self.load(bundle)?;
        let who = match requester {
            Some(id) => Some(resolve(&b, id, "requester")?),
            None => None,
        };
        if let Some(r) = &who {
            r.authorize(&b, Capability::List, &[])?;
        }
        let state = self.inner.store.bundle_state(bundle).await?;
        let mut members = Vec::new();
        let mut ready_count = 0;
        for m in &b.members {
            let (ready, reason_code) = self.readiness(&b, state, m).await;
            if ready {
                ready_count += 1;
            }
            if let Some(r) = &who
                && !r.may(&b, Capability::List, &m.id)
            {
                continue;
            }
            members.push(MemberInfo {
                id: m.id.clone(),
                name: m.name.clone(),
                transport: m.transport.kind(),
                ready,
                reason_code,
                policy: m.policy.clone(),
                queued: self.inner.store.queued_count(bundle, &m.id).await?,
                session_id: self
                    .member_session(bundle, &m.id)
                    .await
                    .map(|u| u.to_string()),
            });
        }
        let (health, reason_code) = health(state, ready_count, b.members.len());
        let (count, latest) = self.inner.store.startup_failures(bundle).await?;
        Ok(ListResponse {
            schema_version: RELAY_SCHEMA_VERSION,
            bundle: bundle.to_string(),
            state,
            health,
            reason_code,
            members,
            startup_failures: StartupFailures { count, latest },
        })
    }
}

fn change(id: &str, result: &str, failure: Option<(String, String)>) -> MemberChange {
    let (code, reason) = match failure {
        Some((c, r)) => (Some(c), Some(r)),
        None => (None, None),
    };
    MemberChange {
        id: id.to_string(),
        result: result.to_string(),
        code,
        reason,
    }
}

fn health(state: BundleState, ready: usize, members: usize) -> (BundleHealth, Option<String>) {
    match state {
        BundleState::Down => (BundleHealth::Degraded, Some("bundle_down".into())),
        BundleState::Up if ready < members => {
            (BundleHealth::Degraded, Some("members_not_ready".into()))
        }
        BundleState::Up => (BundleHealth::Healthy, None),
    }
}
