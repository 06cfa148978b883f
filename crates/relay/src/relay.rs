//! The relay service: up/down, list, send with per-target durable queues, look, audit.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use futures::StreamExt;
use serde_json::json;
use switchboard_client::Client;
use switchboard_protocol::relay::{
    AuditResponse, BundleHealth, BundleState, BundleSummary, BundlesResponse, Delivery,
    HostingResponse, HostingResult, InvalidBundle, ListResponse, LookEntry, LookResponse,
    MemberChange, MemberInfo, Outcome, OutcomeEvent, RELAY_SCHEMA_VERSION, SendRequest,
    SendResponse, SendStatus, StartupFailures, TargetResult,
};
use switchboard_protocol::{BackendSpec, CreateSessionRequest, MessageType, SendMessageRequest};
use tokio::sync::{oneshot, watch};
use uuid::Uuid;

use crate::audit::AuditLog;
use crate::config::{Bundle, BundleDir, ConfigError, Member, Transport};
use crate::envelope::{self, Party};
use crate::error::RelayError;
use crate::policy::{Capability, Requester};
use crate::store::{DeliveryRow, NewDelivery, Recorded, Refusal, RelayStore, RequestKey};
use crate::tmux::{Quiescence, QuiescenceError, StartOutcome, StartSpec, Tmux};

/// Default `lines` of a look.
pub const DEFAULT_LOOK_LINES: u32 = 120;
/// Largest message body.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024;
/// Default quiet window of a tmux pane.
pub const DEFAULT_QUIET_WINDOW: Duration = Duration::from_millis(750);

/// How the relay is set up.
#[derive(Debug, Clone)]
pub struct RelayOptions {
    /// Where `BUNDLE.toml` and `policies.toml` live.
    pub bundles_dir: PathBuf,
    /// Agent names from `[agents.*]`.
    pub known_agents: Vec<String>,
    /// Holds `relay.db` and `audit/`.
    pub state_dir: PathBuf,
    /// Holds the bundles' tmux sockets (keep the path short: sockets are limited to ~100
    /// bytes).
    pub runtime_dir: PathBuf,
    /// Write message bodies into the audit log.
    pub audit_bodies: bool,
    /// Unfinished deliveries one target may have.
    pub queue_capacity: usize,
    pub quiescence_timeout: Duration,
    pub turn_timeout: Duration,
    /// Extra environment for tmux members (e.g. `SWITCHBOARD_URL`).
    pub member_env: Vec<(String, String)>,
    /// How long a started tmux member must stay alive to count as started.
    pub tmux_settle: Duration,
}

impl RelayOptions {
    pub fn new(bundles_dir: PathBuf, state_dir: PathBuf, runtime_dir: PathBuf) -> Self {
        Self {
            bundles_dir,
            known_agents: Vec::new(),
            state_dir,
            runtime_dir,
            audit_bodies: false,
            queue_capacity: 100,
            quiescence_timeout: Duration::from_secs(30),
            turn_timeout: Duration::from_secs(600),
            member_env: Vec::new(),
            tmux_settle: Duration::from_millis(300),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("opening the relay store: {0}")]
    Store(#[from] crate::store::StoreError),
    #[error("creating {0}: {1}")]
    Dir(PathBuf, std::io::Error),
}

/// The relay. Cheap to clone.
#[derive(Clone)]
pub struct Relay {
    inner: Arc<Inner>,
}

struct Inner {
    opts: RelayOptions,
    dir: BundleDir,
    store: RelayStore,
    audit: AuditLog,
    client: Client,
    /// (bundle, target) pairs with a running delivery worker.
    workers: tokio::sync::Mutex<HashSet<(String, String)>>,
    /// Sync senders waiting for an outcome, by message id.
    waiters: std::sync::Mutex<HashMap<String, Vec<oneshot::Sender<OutcomeEvent>>>>,
    /// The newest outcome seq, for event streams to wake on.
    outcomes: watch::Sender<u64>,
    tasks: std::sync::Mutex<tokio::task::JoinSet<()>>,
    /// One tmux handle per bundle (it serializes its own starts and stops).
    tmux: std::sync::Mutex<HashMap<String, Tmux>>,
    /// Serializes `up` and `down` of one bundle.
    hosting: std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

fn mkdir_private(p: &std::path::Path) -> Result<(), StartError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(p)
        .map_err(|e| StartError::Dir(p.to_path_buf(), e))
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn new_message_id() -> String {
    format!("msg_{}", Uuid::now_v7().simple())
}

/// Why a member cannot take a message now.
const NOT_READY: &str = "target_not_ready";

impl Relay {
    /// Opens the relay's store, closes deliveries a crash interrupted mid-hand-over, and
    /// resumes the queues of bundles that are up.
    pub async fn start(opts: RelayOptions, client: Client) -> Result<Self, StartError> {
        mkdir_private(&opts.state_dir)?;
        mkdir_private(&opts.runtime_dir)?;
        let store = RelayStore::open(&opts.state_dir.join("relay.db")).await?;
        let (outcomes, _) = watch::channel(0);
        let relay = Self {
            inner: Arc::new(Inner {
                dir: BundleDir::new(opts.bundles_dir.clone(), opts.known_agents.clone()),
                audit: AuditLog::new(opts.state_dir.join("audit")),
                opts,
                store,
                client,
                workers: tokio::sync::Mutex::new(HashSet::new()),
                waiters: std::sync::Mutex::new(HashMap::new()),
                outcomes,
                tasks: std::sync::Mutex::new(tokio::task::JoinSet::new()),
                tmux: std::sync::Mutex::new(HashMap::new()),
                hosting: std::sync::Mutex::new(HashMap::new()),
            }),
        };
        // Attempts that handed nothing over go back to the queue; rows caught mid-hand-over
        // are closed by their worker without being sent again.
        relay.inner.store.recover().await?;
        for (bundle, target) in relay.inner.store.pending_targets().await? {
            relay.ensure_worker(&bundle, &target).await;
        }
        Ok(relay)
    }

    /// Stops the delivery workers (unfinished deliveries resume at the next start) and lets
    /// waiting sync senders answer at once (`queued` / `still_queued`).
    pub async fn shutdown(&self) {
        lock(&self.inner.waiters).clear();
        let mut set = std::mem::take(&mut *lock(&self.inner.tasks));
        set.abort_all();
        while set.join_next().await.is_some() {}
        self.inner.store.close().await;
    }

    pub fn bundle_dir(&self) -> &BundleDir {
        &self.inner.dir
    }

    fn tmux(&self, bundle: &str) -> Tmux {
        lock(&self.inner.tmux)
            .entry(bundle.to_string())
            .or_insert_with(|| {
                Tmux::new(
                    self.inner
                        .opts
                        .runtime_dir
                        .join(format!("relay-{bundle}.sock")),
                )
            })
            .clone()
    }

    fn hosting_lock(&self, bundle: &str) -> Arc<tokio::sync::Mutex<()>> {
        lock(&self.inner.hosting)
            .entry(bundle.to_string())
            .or_default()
            .clone()
    }

    /// Whether `member` runs in a tmux session this relay created (a session of that name
    /// made by someone else is never pasted into, looked at or counted as ready).
    async fn owned_pane(&self, bundle: &str, member: &str) -> Result<bool, crate::tmux::TmuxError> {
        Ok(self
            .tmux(bundle)
            .owned_sessions()
            .await?
            .iter()
            .any(|s| s == member))
    }

    fn load(&self, bundle: &str) -> Result<Bundle, RelayError> {
        self.inner.dir.load(bundle).map_err(RelayError::from)
    }

    // --- bundles, up, down ----------------------------------------------------------------

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
                env.extend(t.env.iter().map(|(k, v)| (k.clone(), v.clone())));
                let spec = StartSpec {
                    session: m.id.clone(),
                    directory: m.directory.clone(),
                    command: t.command.clone(),
                    env,
                    width: 200,
                    height: 50,
                    settle: self.inner.opts.tmux_settle,
                };
                match tmux.start(&spec).await {
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
            match tmux.stop(&s).await {
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

    async fn member_session(&self, bundle: &str, member: &str) -> Option<Uuid> {
        let s = self
            .inner
            .store
            .member_session(bundle, member)
            .await
            .ok()??;
        Uuid::parse_str(&s).ok()
    }

    /// Whether a member could take a message now, and why not.
    async fn readiness(
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

    // --- send -----------------------------------------------------------------------------

    /// Validates, authorizes, enqueues one delivery per target, and (sync) waits for them.
    pub async fn send(
        &self,
        bundle: &str,
        mut req: SendRequest,
    ) -> Result<SendResponse, RelayError> {
        // Windows line ends become plain newlines; other control characters are refused.
        req.message = req.message.replace("\r\n", "\n");
        validate_send(&req)?;
        let b = self.load(bundle)?;
        let sender = Requester::resolve(&b, &req.sender).ok_or_else(|| {
            RelayError::validation(
                "unknown_sender",
                format!(
                    "sender `{}` is neither a member of bundle {bundle} nor a principal",
                    req.sender
                ),
            )
            .with_details(json!({"sender": req.sender}))
        })?;
        let targets: Vec<String> = if req.broadcast {
            b.members
                .iter()
                .filter(|m| m.id != sender.id())
                .map(|m| m.id.clone())
                .collect()
        } else {
            let mut seen = HashSet::new();
            req.targets
                .iter()
                .filter(|t| seen.insert(t.as_str()))
                .cloned()
                .collect()
        };
        if targets.is_empty() {
            return Err(RelayError::validation(
                "empty_targets",
                "broadcast reaches nobody: the sender is the bundle's only member",
            ));
        }
        let unknown: Vec<String> = targets
            .iter()
            .filter(|t| b.member(t).is_none())
            .cloned()
            .collect();
        if !unknown.is_empty() {
            return Err(RelayError::validation(
                "unknown_target",
                format!(
                    "no member {} in bundle {bundle}",
                    unknown
                        .iter()
                        .map(|t| format!("`{t}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
            .with_details(json!({"targets": unknown})));
        }
        let members: Vec<&Member> = targets.iter().filter_map(|t| b.member(t)).collect();
        if let Err(e) = sender.authorize(&b, Capability::Send, &targets) {
            self.audit_denied(bundle, &e);
            return Err(e);
        }
        for m in &members {
            self.check_timeouts(&req, m)?;
        }

        let sync = req.delivery == Delivery::Sync;
        let key = req.request_id.as_ref().map(|rid| RequestKey {
            sender: sender.id().to_string(),
            request_id: rid.clone(),
            fingerprint: fingerprint(&req, &targets),
        });
        let state = self.inner.store.bundle_state(bundle).await?;
        let at = Utc::now();
        let from = Party {
            id: sender.id().to_string(),
            name: sender.name().to_string(),
        };
        let to: Vec<Party> = members
            .iter()
            .map(|m| Party {
                id: m.id.clone(),
                name: m.name.clone(),
            })
            .collect();
        let mut planned = Vec::new();
        for m in &members {
            let message_id = new_message_id();
            let nd = NewDelivery {
                envelope: envelope::render(bundle, &message_id, &from, &to, at, &req.message),
                message_id,
                bundle: bundle.to_string(),
                target: m.id.clone(),
                sender: sender.id().to_string(),
                request_id: req.request_id.clone(),
                body_bytes: req.message.len(),
                sync,
                quiet_window_ms: req.quiet_window_ms,
                quiescence_timeout_ms: req.quiescence_timeout_ms,
                turn_timeout_ms: req.turn_timeout_ms,
            };
            let (ready, why) = self.readiness(&b, state, m).await;
            let refusal = (!ready).then(|| Refusal {
                outcome: Outcome::Failed,
                code: if why.as_deref() == Some("bundle_down") {
                    "bundle_down".into()
                } else {
                    NOT_READY.into()
                },
                reason: format!(
                    "`{}` cannot take messages now ({})",
                    m.id,
                    why.as_deref().unwrap_or("not ready")
                ),
            });
            planned.push((nd, refusal));
        }
        let ids: Vec<String> = planned.iter().map(|(d, _)| d.message_id.clone()).collect();
        let refused = match self
            .inner
            .store
            .record_send(key.as_ref(), &planned, self.inner.opts.queue_capacity)
            .await?
        {
            Recorded::Stored(refused) => refused,
            Recorded::Duplicate { same: true } => {
                // A retry: answer from the first request's deliveries.
                let rid = req.request_id.clone().unwrap_or_default();
                let earlier = self
                    .inner
                    .store
                    .request_deliveries(bundle, sender.id(), &rid)
                    .await?;
                return self.answer(bundle, &req, earlier).await;
            }
            Recorded::Duplicate { same: false } => {
                return Err(RelayError::new(
                    409,
                    "request_id_reused",
                    format!(
                        "request_id {:?} was used by `{}` for a different message or targets; use a new id",
                        req.request_id.as_deref().unwrap_or(""),
                        sender.id()
                    ),
                ));
            }
        };
        let mut audit = json!({
            "requester": sender.id(),
            "targets": &targets,
            "message_ids": &ids,
            "bytes": req.message.len(),
            "delivery": req.delivery,
            "request_id": req.request_id,
        });
        if self.inner.opts.audit_bodies {
            audit["body"] = json!(req.message);
        }
        self.inner.audit.record(bundle, "relay.send.request", audit);
        for ev in &refused {
            self.published(ev);
        }
        let mut rows = Vec::new();
        for id in &ids {
            if let Some(row) = self.inner.store.delivery(bundle, id).await? {
                if row.state != "done" {
                    self.ensure_worker(bundle, &row.target).await;
                }
                rows.push(row);
            }
        }
        self.answer(bundle, &req, rows).await
    }

    /// Refuses timeout fields that do not fit the member's transport, or that cannot work
    /// together with the member's own quiet window.
    fn check_timeouts(&self, req: &SendRequest, m: &Member) -> Result<(), RelayError> {
        let wrong = |field: &str, tmux: bool| {
            RelayError::validation(
                "invalid_timeout_field_for_transport",
                format!(
                    "{field} does not apply to `{}`, a {} member ({})",
                    m.id,
                    m.transport.kind().as_str(),
                    if tmux {
                        "tmux members take quiet_window_ms and quiescence_timeout_ms"
                    } else {
                        "acp and session members take turn_timeout_ms"
                    }
                ),
            )
            .with_details(json!({"field": field, "target": m.id}))
        };
        match &m.transport {
            Transport::Tmux(t) => {
                if req.turn_timeout_ms.is_some() {
                    return Err(wrong("turn_timeout_ms", true));
                }
                let window = req
                    .quiet_window_ms
                    .or(t.quiet_window_ms)
                    .unwrap_or(DEFAULT_QUIET_WINDOW.as_millis() as u64);
                let timeout = req
                    .quiescence_timeout_ms
                    .unwrap_or(self.inner.opts.quiescence_timeout.as_millis() as u64);
                if window >= timeout {
                    return Err(RelayError::validation(
                        "conflicting_timeout_fields",
                        format!(
                            "`{}` must stay quiet for {window} ms, which does not fit in a quiescence timeout of {timeout} ms",
                            m.id
                        ),
                    )
                    .with_details(json!({"target": m.id, "quiet_window_ms": window, "quiescence_timeout_ms": timeout})));
                }
            }
            Transport::Acp(_) | Transport::Session(_) => {
                if req.quiet_window_ms.is_some() {
                    return Err(wrong("quiet_window_ms", false));
                }
                if req.quiescence_timeout_ms.is_some() {
                    return Err(wrong("quiescence_timeout_ms", false));
                }
            }
        }
        Ok(())
    }

    fn audit_denied(&self, bundle: &str, e: &RelayError) {
        self.inner.audit.record(
            bundle,
            "relay.denied",
            json!({"code": e.code, "details": e.details}),
        );
    }

    /// An outcome is stored: audit it, hand it to sync waiters, wake event streams.
    fn published(&self, ev: &OutcomeEvent) {
        self.inner.audit.record(
            &ev.bundle,
            "relay.send.outcome",
            json!({
                "message_id": ev.message_id,
                "requester": ev.sender,
                "target": ev.target,
                "outcome": ev.outcome,
                "reason_code": ev.reason_code,
            }),
        );
        let waiters = lock(&self.inner.waiters).remove(&ev.message_id);
        for w in waiters.into_iter().flatten() {
            let _ = w.send(ev.clone());
        }
        self.inner.outcomes.send_replace(ev.seq);
    }

    /// The response for a request's deliveries; sync waits for the unfinished ones.
    async fn answer(
        &self,
        bundle: &str,
        req: &SendRequest,
        rows: Vec<DeliveryRow>,
    ) -> Result<SendResponse, RelayError> {
        let sync = req.delivery == Delivery::Sync;
        let mut waits = Vec::new();
        for row in &rows {
            if sync && row.state != "done" {
                waits.push(self.wait_outcome(row, req));
            }
        }
        let finished: Vec<Option<OutcomeEvent>> = futures::future::join_all(waits).await;
        let mut by_id: HashMap<String, OutcomeEvent> = finished
            .into_iter()
            .flatten()
            .map(|e| (e.message_id.clone(), e))
            .collect();
        let mut results = Vec::new();
        for row in rows {
            let r = if let Some(e) = by_id.remove(&row.message_id) {
                TargetResult {
                    target: row.target,
                    message_id: row.message_id,
                    outcome: e.outcome,
                    reason_code: e.reason_code,
                    reason: e.reason,
                }
            } else if let Some(o) = row.outcome {
                TargetResult {
                    target: row.target,
                    message_id: row.message_id,
                    outcome: o,
                    reason_code: row.reason_code,
                    reason: row.reason,
                }
            } else {
                // Async, or a sync wait that outlasted its bound: still in the queue.
                let (code, reason) = if sync {
                    (
                        Some("still_queued".to_string()),
                        Some(
                            "not delivered yet; the outcome will be pushed to the sender"
                                .to_string(),
                        ),
                    )
                } else {
                    (None, None)
                };
                TargetResult {
                    target: row.target,
                    message_id: row.message_id,
                    outcome: Outcome::Queued,
                    reason_code: code,
                    reason,
                }
            };
            results.push(r);
        }
        let delivered = results
            .iter()
            .filter(|r| r.outcome == Outcome::Delivered)
            .count();
        let queued = results
            .iter()
            .filter(|r| r.outcome == Outcome::Queued)
            .count();
        let failed = results.len() - delivered - queued;
        let status = if delivered == results.len() {
            SendStatus::Success
        } else if failed == 0 {
            // Nothing failed, some still in a queue (async, or a sync wait that ran out).
            SendStatus::Accepted
        } else if delivered + queued == 0 {
            SendStatus::Failure
        } else {
            SendStatus::Partial
        };
        Ok(SendResponse {
            schema_version: RELAY_SCHEMA_VERSION,
            request_id: req.request_id.clone(),
            bundle: bundle.to_string(),
            sender: req.sender.clone(),
            status,
            results,
        })
    }

    /// Waits for a delivery's outcome, bounded by how long its attempts may take.
    async fn wait_outcome(&self, row: &DeliveryRow, req: &SendRequest) -> Option<OutcomeEvent> {
        let (tx, rx) = oneshot::channel();
        lock(&self.inner.waiters)
            .entry(row.message_id.clone())
            .or_default()
            .push(tx);
        // It may have finished before the waiter was in place.
        if let Ok(Some(r)) = self
            .inner
            .store
            .delivery(&row.bundle, &row.message_id)
            .await
            && r.state == "done"
        {
            lock(&self.inner.waiters).remove(&row.message_id);
            return self.event_of(&r);
        }
        let attempt = match (req.quiescence_timeout_ms, req.turn_timeout_ms) {
            (Some(q), _) => Duration::from_millis(q),
            (_, Some(t)) => Duration::from_millis(t),
            _ => self
                .inner
                .opts
                .quiescence_timeout
                .max(self.inner.opts.turn_timeout),
        };
        let bound = attempt.saturating_mul(2) + Duration::from_secs(10);
        let out = match tokio::time::timeout(bound, rx).await {
            Ok(r) => r.ok(),
            Err(_) => None,
        };
        if out.is_none() {
            // Drop only this waiter (its receiver is gone now); others may still wait.
            let mut w = lock(&self.inner.waiters);
            if let Some(list) = w.get_mut(&row.message_id) {
                list.retain(|s| !s.is_closed());
                if list.is_empty() {
                    w.remove(&row.message_id);
                }
            }
        }
        out
    }

    fn event_of(&self, r: &DeliveryRow) -> Option<OutcomeEvent> {
        Some(OutcomeEvent {
            seq: 0,
            bundle: r.bundle.clone(),
            message_id: r.message_id.clone(),
            request_id: r.request_id.clone(),
            sender: r.sender.clone(),
            target: r.target.clone(),
            outcome: r.outcome?,
            reason_code: r.reason_code.clone(),
            reason: r.reason.clone(),
            at: Utc::now(),
        })
    }

    /// A delivery's current state (`queued` while unfinished).
    pub async fn message(
        &self,
        bundle: &str,
        message_id: &str,
    ) -> Result<TargetResult, RelayError> {
        let row = self
            .inner
            .store
            .delivery(bundle, message_id)
            .await?
            .ok_or_else(|| {
                RelayError::new(
                    404,
                    "message_not_found",
                    format!("no message {message_id} in bundle {bundle}"),
                )
            })?;
        Ok(TargetResult {
            target: row.target,
            message_id: row.message_id,
            outcome: row.outcome.unwrap_or(Outcome::Queued),
            reason_code: row.reason_code,
            reason: row.reason,
        })
    }

    // --- delivery workers -----------------------------------------------------------------

    async fn ensure_worker(&self, bundle: &str, target: &str) {
        let key = (bundle.to_string(), target.to_string());
        let mut w = self.inner.workers.lock().await;
        if w.insert(key.clone()) {
            let me = self.clone();
            let mut tasks = lock(&self.inner.tasks);
            // Reap finished workers so the set does not grow with every idle target.
            while tasks.try_join_next().is_some() {}
            tasks.spawn(async move { me.worker(key.0, key.1).await });
        }
    }

    /// Delivers a target's queue in order, one message at a time.
    async fn worker(self, bundle: String, target: String) {
        loop {
            let row = {
                let mut w = self.inner.workers.lock().await;
                match self.inner.store.next_delivery(&bundle, &target).await {
                    Ok(Some(r)) => r,
                    Ok(None) => {
                        w.remove(&(bundle.clone(), target.clone()));
                        return;
                    }
                    Err(e) => {
                        tracing::error!(error = %e, bundle, target, "relay queue unreadable");
                        w.remove(&(bundle.clone(), target.clone()));
                        return;
                    }
                }
            };
            let (outcome, code, reason) = match row.state.as_str() {
                // Found mid-hand-over (a crash, or an outcome that could not be stored):
                // it may have arrived, so it is never sent again.
                "committing" => (
                    Outcome::Failed,
                    Some("delivery_interrupted".to_string()),
                    Some("the relay stopped while handing this message over; it was not sent again so that it cannot arrive twice".to_string()),
                ),
                "handed_over" => (
                    Outcome::Delivered,
                    Some("handed_over_before_restart".to_string()),
                    Some("the message was handed over; the relay restarted before it could record more (for a sync send: before the member's turn ended)".to_string()),
                ),
                _ => self.deliver(&row).await,
            };
            if !self
                .finish(&row, outcome, code.as_deref(), reason.as_deref())
                .await
            {
                // The outcome could not be stored: leave the row for the next start (which
                // closes it without sending again) rather than loop on it.
                self.inner
                    .workers
                    .lock()
                    .await
                    .remove(&(bundle.clone(), target.clone()));
                return;
            }
        }
    }

    /// Closes a delivery: stored, pushed to waiters and event streams, audited.
    /// Whether the outcome is stored (retried a few times with backoff).
    async fn finish(
        &self,
        row: &DeliveryRow,
        outcome: Outcome,
        code: Option<&str>,
        reason: Option<&str>,
    ) -> bool {
        let mut delay = Duration::from_millis(200);
        for attempt in 1..=5 {
            match self
                .inner
                .store
                .finish_delivery(row, outcome, code, reason)
                .await
            {
                Ok(Some(ev)) => {
                    self.published(&ev);
                    return true;
                }
                Ok(None) => return true,
                Err(e) => {
                    tracing::error!(error = %e, attempt, message_id = %row.message_id, "recording a delivery outcome");
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                }
            }
        }
        false
    }

    /// Moves a delivery one state forward; a row that is not in `from` (or a store error)
    /// fails the attempt instead of acting twice.
    async fn step(
        &self,
        row: &DeliveryRow,
        from: &str,
        to: &str,
    ) -> Result<(), (Outcome, Option<String>, Option<String>)> {
        let reason = match self.inner.store.advance(row.id, from, to).await {
            Ok(true) => return Ok(()),
            Ok(false) => format!(
                "delivery {} changed state underneath its worker",
                row.message_id
            ),
            Err(e) => e.to_string(),
        };
        Err((Outcome::Failed, Some("relay_store".into()), Some(reason)))
    }

    /// One delivery attempt: (outcome, reason code, reason).
    async fn deliver(&self, row: &DeliveryRow) -> (Outcome, Option<String>, Option<String>) {
        let fail =
            |code: &str, reason: String| (Outcome::Failed, Some(code.to_string()), Some(reason));
        let b = match self.inner.dir.load(&row.bundle) {
            Ok(b) => b,
            Err(e) => return fail(e.code(), e.to_string()),
        };
        let Some(m) = b.member(&row.target) else {
            return fail(
                "target_removed",
                format!("`{}` is no longer a member of the bundle", row.target),
            );
        };
        match self.inner.store.bundle_state(&row.bundle).await {
            Ok(BundleState::Up) => {}
            Ok(BundleState::Down) => {
                return fail("bundle_down", format!("bundle {} is down", row.bundle));
            }
            Err(e) => return fail("relay_store", e.to_string()),
        }
        if let Err(failed) = self.step(row, "queued", "attempting").await {
            return failed;
        }
        match &m.transport {
            Transport::Tmux(t) => {
                let tmux = self.tmux(&row.bundle);
                let prompt = match t.prompt_regex.as_deref().map(regex::Regex::new) {
                    None => None,
                    Some(Ok(r)) => Some(r),
                    Some(Err(e)) => return fail("bundle_invalid", e.to_string()),
                };
                let q = Quiescence {
                    quiet_window: row
                        .quiet_window_ms
                        .or(t.quiet_window_ms)
                        .map(Duration::from_millis)
                        .unwrap_or(DEFAULT_QUIET_WINDOW),
                    timeout: row
                        .quiescence_timeout_ms
                        .map(Duration::from_millis)
                        .unwrap_or(self.inner.opts.quiescence_timeout),
                    prompt,
                    ..Quiescence::default()
                };
                match tmux.wait_quiescent(&m.id, &q).await {
                    Ok(()) => {}
                    Err(QuiescenceError::Timeout { blocked_by, waited }) => {
                        return (
                            Outcome::Timeout,
                            Some(blocked_by.code().to_string()),
                            Some(format!(
                                "`{}` did not become ready within {} ms: {blocked_by}",
                                m.id,
                                waited.as_millis()
                            )),
                        );
                    }
                    Err(QuiescenceError::Gone) => {
                        return fail(NOT_READY, format!("`{}`'s pane is gone", m.id));
                    }
                    Err(QuiescenceError::Tmux(e)) => return fail(e.code(), e.to_string()),
                }
                match self.owned_pane(&row.bundle, &m.id).await {
                    Ok(true) => {}
                    Ok(false) => {
                        return fail(
                            NOT_READY,
                            format!("`{}` is not a tmux session the relay started", m.id),
                        );
                    }
                    Err(e) => return fail(e.code(), e.to_string()),
                }
                if let Err(failed) = self.step(row, "attempting", "committing").await {
                    return failed;
                }
                match tmux.paste(&m.id, &row.envelope).await {
                    Ok(()) => {
                        if let Err(e) = self
                            .inner
                            .store
                            .advance(row.id, "committing", "handed_over")
                            .await
                        {
                            tracing::warn!(error = %e, message_id = %row.message_id, "recording a hand-over");
                        }
                        (Outcome::Delivered, None, None)
                    }
                    Err(e) => fail(e.code(), e.to_string()),
                }
            }
            Transport::Acp(_) | Transport::Session(_) => self.deliver_to_session(row, m).await,
        }
    }

    async fn deliver_to_session(
        &self,
        row: &DeliveryRow,
        m: &Member,
    ) -> (Outcome, Option<String>, Option<String>) {
        let fail =
            |code: &str, reason: String| (Outcome::Failed, Some(code.to_string()), Some(reason));
        let Some(id) = self.member_session(&row.bundle, &m.id).await else {
            return fail(NOT_READY, format!("`{}` has no session (relay up)", m.id));
        };
        let client = &self.inner.client;
        let after = match client.get_session(id).await {
            Ok(s) => s.session.last_event_id,
            Err(e) if e.status() == Some(404) => {
                return fail(NOT_READY, format!("`{}`'s session {id} is gone", m.id));
            }
            Err(e) => return fail("session_unreachable", e.to_string()),
        };
        if let Err(failed) = self.step(row, "attempting", "committing").await {
            return failed;
        }
        // A follow-up starts a run at once when the session is idle and queues durably
        // behind the active run otherwise.
        let req = SendMessageRequest::user(row.envelope.clone(), MessageType::FollowUp);
        let run_id = match client.send_message(id, &req).await {
            Ok(r) => r.run_id,
            Err(e) => {
                return fail(
                    e.code().unwrap_or("session_send_failed"),
                    format!("the session refused the message: {e}"),
                );
            }
        };
        // In the session now: a restart from here on reports it delivered, never resends.
        if let Err(e) = self
            .inner
            .store
            .advance(row.id, "committing", "handed_over")
            .await
        {
            tracing::warn!(error = %e, message_id = %row.message_id, "recording a hand-over");
        }
        if !row.sync {
            return (Outcome::Delivered, None, None);
        }
        let limit = row
            .turn_timeout_ms
            .map(Duration::from_millis)
            .unwrap_or(self.inner.opts.turn_timeout);
        let mut events = client.subscribe(id, Some(after));
        let waited = tokio::time::timeout(limit, async {
            while let Some(item) = events.next().await {
                let Ok(env) = item else { continue };
                if env.event.run_id() == run_id && env.event.is_terminal() {
                    return Some(env.event);
                }
            }
            None
        })
        .await;
        match waited {
            Ok(Some(switchboard_protocol::AgentEvent::RunCompleted { stop_reason, .. }))
                if stop_reason == "cancelled" =>
            {
                fail(
                    "turn_cancelled",
                    format!("`{}` received the message but its turn was cancelled", m.id),
                )
            }
            Ok(Some(switchboard_protocol::AgentEvent::RunCompleted { .. })) => {
                (Outcome::Delivered, None, None)
            }
            Ok(Some(switchboard_protocol::AgentEvent::RunError { error: message, .. })) => fail(
                "turn_failed",
                format!(
                    "`{}` received the message but its turn failed: {message}",
                    m.id
                ),
            ),
            Ok(_) => fail(
                "session_unreachable",
                format!("the event stream of `{}`'s session ended", m.id),
            ),
            Err(_) => (
                Outcome::Timeout,
                Some("turn_timeout".into()),
                Some(format!(
                    "`{}` received the message but did not finish its turn within {} ms",
                    m.id,
                    limit.as_millis()
                )),
            ),
        }
    }

    // --- look -----------------------------------------------------------------------------

    /// The last lines of a tmux member's pane, or the last transcript entries of a session
    /// or ACP member.
    pub async fn look(
        &self,
        bundle: &str,
        requester: &str,
        target: &str,
        lines: Option<u32>,
    ) -> Result<LookResponse, RelayError> {
        let lines = lines.unwrap_or(DEFAULT_LOOK_LINES);
        if !(1..=1000).contains(&lines) {
            return Err(RelayError::validation(
                "invalid_lines",
                format!("lines must be between 1 and 1000 (got {lines})"),
            ));
        }
        let b = self.load(bundle)?;
        let who = resolve(&b, requester, "requester")?;
        let m = b.member(target).ok_or_else(|| {
            RelayError::validation(
                "unknown_target",
                format!("no member `{target}` in bundle {bundle}"),
            )
            .with_details(json!({"targets": [target]}))
        })?;
        who.authorize(&b, Capability::Look, &[target.to_string()])?;
        let state = self.inner.store.bundle_state(bundle).await?;
        if state == BundleState::Down {
            return Err(RelayError::new(
                409,
                "bundle_down",
                format!("bundle {bundle} is down (relay up {bundle})"),
            ));
        }
        let now = Utc::now();
        let mut resp = LookResponse {
            schema_version: RELAY_SCHEMA_VERSION,
            bundle: bundle.to_string(),
            target: target.to_string(),
            transport: m.transport.kind(),
            lines: Vec::new(),
            entries: Vec::new(),
            fresh: true,
            age_ms: 0,
            captured_at: now,
        };
        match &m.transport {
            Transport::Tmux(_) => {
                let tmux = self.tmux(bundle);
                match tmux.pane_state(target).await {
                    Ok(Some(_)) => {}
                    Ok(None) => {
                        return Err(RelayError::new(
                            409,
                            NOT_READY,
                            format!("`{target}` is not running"),
                        ));
                    }
                    Err(e) => return Err(RelayError::new(500, e.code(), e.to_string())),
                }
                resp.lines = tmux
                    .capture(target, lines)
                    .await
                    .map_err(|e| RelayError::new(500, e.code(), e.to_string()))?;
            }
            Transport::Acp(_) | Transport::Session(_) => {
                let id = self.member_session(bundle, target).await.ok_or_else(|| {
                    RelayError::new(409, NOT_READY, format!("`{target}` has no session"))
                })?;
                let client = &self.inner.client;
                let s = client.get_session(id).await.map_err(|e| {
                    RelayError::new(409, NOT_READY, format!("`{target}`'s session: {e}"))
                })?;
                let total = client
                    .list_messages(id, Some(1), Some(0))
                    .await
                    .map_err(|e| RelayError::new(502, "session_unreachable", e.to_string()))?
                    .total;
                let offset = total.saturating_sub(u64::from(lines));
                let page = client
                    .list_messages(
                        id,
                        Some(lines),
                        Some(offset.min(u64::from(u32::MAX)) as u32),
                    )
                    .await
                    .map_err(|e| RelayError::new(502, "session_unreachable", e.to_string()))?;
                resp.entries = page
                    .messages
                    .into_iter()
                    .map(|m| LookEntry {
                        role: m.role.as_str().to_string(),
                        content: m.content,
                        at: m.created_at,
                    })
                    .collect();
                resp.fresh = s.session.active_run_id.is_none();
                resp.age_ms = resp
                    .entries
                    .last()
                    .map(|e| (now - e.at).num_milliseconds().max(0) as u64)
                    .unwrap_or(0);
            }
        }
        self.inner.audit.record(
            bundle,
            "relay.look",
            json!({"requester": who.id(), "targets": [target], "lines": lines}),
        );
        Ok(resp)
    }

    // --- audit and outcome stream ---------------------------------------------------------

    pub async fn audit(
        &self,
        bundle: &str,
        limit: Option<usize>,
        event: Option<&str>,
    ) -> Result<AuditResponse, RelayError> {
        let limit = limit.unwrap_or(100);
        if !(1..=crate::audit::MAX_AUDIT_LINES).contains(&limit) {
            return Err(RelayError::validation(
                "invalid_arguments",
                format!("limit must be between 1 and 1000 (got {limit})"),
            ));
        }
        // The bundle must exist (its file), though its log may be empty.
        self.load(bundle)?;
        let entries = self
            .inner
            .audit
            .tail(bundle, limit, event)
            .map_err(|e| RelayError::internal(format!("reading the audit log: {e}")))?;
        Ok(AuditResponse {
            schema_version: RELAY_SCHEMA_VERSION,
            bundle: bundle.to_string(),
            entries,
        })
    }

    /// Checks that `as` may follow a bundle's outcome stream (it sees its own messages).
    pub fn check_follower(&self, bundle: &str, who: Option<&str>) -> Result<(), RelayError> {
        let b = self.load(bundle)?;
        if let Some(id) = who {
            resolve(&b, id, "requester")?;
        }
        Ok(())
    }

    /// Outcome events after `after` (of one sender when given).
    pub async fn outcomes_after(
        &self,
        bundle: &str,
        sender: Option<&str>,
        after: u64,
    ) -> Result<Vec<OutcomeEvent>, RelayError> {
        Ok(self
            .inner
            .store
            .outcomes_after(bundle, sender, after, 500)
            .await?)
    }

    /// Wakes when a new outcome is recorded.
    pub fn outcome_signal(&self) -> watch::Receiver<u64> {
        self.inner.outcomes.subscribe()
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

fn resolve<'a>(b: &'a Bundle, id: &str, what: &str) -> Result<Requester<'a>, RelayError> {
    Requester::resolve(b, id).ok_or_else(|| {
        RelayError::validation(
            "unknown_sender",
            format!(
                "{what} `{id}` is neither a member of bundle {} nor a principal",
                b.name
            ),
        )
        .with_details(json!({ what: id }))
    })
}

/// Longest timeout a request may ask for (one hour): a target's queue waits behind it.
pub const MAX_TIMEOUT_MS: u64 = 3_600_000;

/// What a request asks for, so a retry can be told from a different request reusing its id.
fn fingerprint(req: &SendRequest, targets: &[String]) -> String {
    use sha2::{Digest, Sha256};
    let mut sorted = targets.to_vec();
    sorted.sort();
    let canonical = json!({
        "message": req.message,
        "targets": sorted,
        "broadcast": req.broadcast,
        "delivery": req.delivery,
        "quiet_window_ms": req.quiet_window_ms,
        "quiescence_timeout_ms": req.quiescence_timeout_ms,
        "turn_timeout_ms": req.turn_timeout_ms,
    });
    hex::encode(Sha256::digest(canonical.to_string().as_bytes()))
}

/// Checks a send request's shape before anything is looked up.
pub fn validate_send(req: &SendRequest) -> Result<(), RelayError> {
    if req.schema_version != RELAY_SCHEMA_VERSION {
        return Err(RelayError::validation(
            "invalid_arguments",
            format!(
                "schema_version {} is not supported (expected {RELAY_SCHEMA_VERSION})",
                req.schema_version
            ),
        ));
    }
    if req.message.trim().is_empty() {
        return Err(RelayError::validation(
            "invalid_arguments",
            "message is empty",
        ));
    }
    if let Some((i, c)) = req
        .message
        .char_indices()
        .find(|(_, c)| c.is_control() && *c != '\n' && *c != '\t')
    {
        // Escape sequences and control keys would drive a tmux member's terminal (end a
        // bracketed paste early, press Ctrl-C) instead of arriving as text.
        return Err(RelayError::validation(
            "invalid_arguments",
            format!(
                "message contains the control character U+{:04X} at byte {i}; only newlines and tabs are allowed",
                c as u32
            ),
        ));
    }
    if req.message.len() > MAX_MESSAGE_BYTES {
        return Err(RelayError::validation(
            "invalid_arguments",
            format!(
                "message is {} bytes; the most is {MAX_MESSAGE_BYTES}",
                req.message.len()
            ),
        ));
    }
    if req.sender.is_empty() {
        return Err(RelayError::validation("unknown_sender", "sender is empty"));
    }
    match (req.targets.is_empty(), req.broadcast) {
        (true, false) => {
            return Err(RelayError::validation(
                "empty_targets",
                "name at least one target, or set broadcast",
            ));
        }
        (false, true) => {
            return Err(RelayError::validation(
                "conflicting_targets",
                "targets and broadcast exclude each other",
            ));
        }
        _ => {}
    }
    for (field, v) in [
        ("quiet_window_ms", req.quiet_window_ms),
        ("quiescence_timeout_ms", req.quiescence_timeout_ms),
        ("turn_timeout_ms", req.turn_timeout_ms),
    ] {
        if v == Some(0) || v.is_some_and(|v| v > MAX_TIMEOUT_MS) {
            return Err(RelayError::validation(
                "invalid_timeout",
                format!("{field} must be between 1 and {MAX_TIMEOUT_MS} ms"),
            )
            .with_details(json!({"field": field})));
        }
    }
    if let (Some(w), Some(t)) = (req.quiet_window_ms, req.quiescence_timeout_ms)
        && w >= t
    {
        return Err(RelayError::validation(
            "conflicting_timeout_fields",
            format!(
                "quiet_window_ms ({w}) must be shorter than quiescence_timeout_ms ({t}), or the pane can never qualify"
            ),
        ));
    }
    if (req.quiet_window_ms.is_some() || req.quiescence_timeout_ms.is_some())
        && req.turn_timeout_ms.is_some()
    {
        return Err(RelayError::validation(
            "conflicting_timeout_fields",
            "turn_timeout_ms (acp and session members) cannot be combined with quiet_window_ms or quiescence_timeout_ms (tmux members)",
        ));
    }
    Ok(())
}
