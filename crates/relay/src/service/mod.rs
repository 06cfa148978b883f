//! The relay service: up/down, list, send with per-target durable queues, look, audit.
//!
//! This file holds the [`Relay`] itself (its options, state and start/shutdown), the audit
//! log and the outcome stream; each concern has its own file:
//!
//! - `hosting.rs`: the bundles' states, `up`, `down`, members' readiness and `list`;
//! - `send.rs`: validating, authorizing and recording a send, and answering it;
//! - `delivery.rs`: the per-target workers that hand messages over and record outcomes;
//! - `look.rs`: a member's pane or transcript.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use switchboard_client::Client;
use switchboard_protocol::relay::{AuditResponse, OutcomeEvent, RELAY_SCHEMA_VERSION};
use tokio::sync::{oneshot, watch};
use uuid::Uuid;

use crate::audit::AuditLog;
use crate::config::{Bundle, BundleDir};
use crate::error::RelayError;
use crate::policy::Requester;
use crate::store::RelayStore;
use crate::tmux::Tmux;

mod delivery;
mod hosting;
mod look;
mod send;

pub use send::{MAX_TIMEOUT_MS, validate_send};

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
    /// The relay MCP server every hosted session and ACP member's session gets (`None`:
    /// none is added).
    pub member_mcp: Option<MemberMcp>,
    /// Loop guards: hops per chain and send budgets.
    pub limits: Limits,
    /// The sandbox tmux members start in (`None`: they are not confined).
    pub sandbox: Option<Arc<switchboard_sandbox::Sandbox>>,
    /// Switchboard's own state, never granted to a member.
    pub protected: Vec<PathBuf>,
}

/// What stops agents messaging each other forever. A budget of 0 is no budget.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Hops a chain may have (a message, the reply to it, the reply to that …).
    pub max_hops: u32,
    /// A member's send continues the chain of the last message delivered to it within this
    /// long (unless it names the message it answers).
    pub reply_window: Duration,
    /// Deliveries one member may send per minute and per day.
    pub member_per_minute: u64,
    pub member_per_day: u64,
    /// Deliveries a bundle's members and principals may send in all, per minute and per day.
    pub bundle_per_minute: u64,
    pub bundle_per_day: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_hops: 8,
            reply_window: Duration::from_secs(600),
            member_per_minute: 30,
            member_per_day: 500,
            bundle_per_minute: 120,
            bundle_per_day: 2000,
        }
    }
}

/// How a member session reaches the relay: `COMMAND mcp --bundle B --member M` with
/// `SWITCHBOARD_URL` and the member's own token (never the API token).
#[derive(Clone)]
pub struct MemberMcp {
    /// The `switchboard` binary.
    pub command: PathBuf,
    pub url: String,
    /// The key of member tokens: the server's API token.
    pub key: String,
}

impl std::fmt::Debug for MemberMcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberMcp")
            .field("command", &self.command)
            .field("url", &self.url)
            .field("key", &"[redacted]")
            .finish()
    }
}

impl MemberMcp {
    /// The MCP server spec of `member` in `bundle`.
    pub fn spec(&self, bundle: &str, member: &str) -> Option<switchboard_protocol::McpServerSpec> {
        let token = crate::member_token::mint(&self.key, bundle, member)?;
        Some(switchboard_protocol::McpServerSpec {
            name: "relay".into(),
            command: Some(self.command.display().to_string()),
            args: vec![
                "mcp".into(),
                "--bundle".into(),
                bundle.into(),
                "--member".into(),
                member.into(),
            ],
            env: [
                ("SWITCHBOARD_URL".to_string(), self.url.clone()),
                ("SWITCHBOARD_RELAY_TOKEN".to_string(), token),
            ]
            .into(),
            ..Default::default()
        })
    }
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
            member_mcp: None,
            limits: Limits::default(),
            sandbox: None,
            protected: Vec::new(),
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
    waiters: parking_lot::Mutex<HashMap<String, Vec<oneshot::Sender<OutcomeEvent>>>>,
    /// Loop-guard refusals the bundle's owner was told of (see `tell_owner`).
    told: parking_lot::Mutex<std::collections::HashSet<String>>,
    /// The newest outcome seq, for event streams to wake on.
    outcomes: watch::Sender<u64>,
    tasks: parking_lot::Mutex<tokio::task::JoinSet<()>>,
    /// One tmux handle per bundle (it serializes its own starts and stops).
    tmux: parking_lot::Mutex<HashMap<String, Tmux>>,
    /// Serializes `up` and `down` of one bundle.
    hosting: parking_lot::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// What the sandbox keeps for each confined tmux member while it runs, by (bundle,
    /// member): replaced when the member is started again.
    confined: parking_lot::Mutex<HashMap<(String, String), switchboard_sandbox::Confined>>,
}

fn mkdir_private(p: &std::path::Path) -> Result<(), StartError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(p)
        .map_err(|e| StartError::Dir(p.to_path_buf(), e))
}

fn new_message_id() -> String {
    format!("msg_{}", Uuid::now_v7().simple())
}

fn new_chain_id() -> String {
    format!("chain_{}", Uuid::now_v7().simple())
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
                waiters: parking_lot::Mutex::new(HashMap::new()),
                told: parking_lot::Mutex::new(std::collections::HashSet::new()),
                outcomes,
                tasks: parking_lot::Mutex::new(tokio::task::JoinSet::new()),
                tmux: parking_lot::Mutex::new(HashMap::new()),
                hosting: parking_lot::Mutex::new(HashMap::new()),
                confined: parking_lot::Mutex::new(HashMap::new()),
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
        self.inner.waiters.lock().clear();
        let mut set = std::mem::take(&mut *self.inner.tasks.lock());
        set.abort_all();
        while set.join_next().await.is_some() {}
        self.inner.store.close().await;
    }

    pub fn bundle_dir(&self) -> &BundleDir {
        &self.inner.dir
    }

    fn tmux(&self, bundle: &str) -> Tmux {
        self.inner
            .tmux
            .lock()
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
        self.inner
            .hosting
            .lock()
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
