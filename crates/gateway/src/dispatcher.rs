//! The dispatcher: inbound chat messages to session runs, and runs' events back to chats.
//!
//! Everything goes through the store first: an inbound message is queued durably before the
//! channel acknowledges it; one worker per routing key takes the queue, starts a run (all
//! queued messages as one, with sender attribution), and follows the run's event log from a
//! stored cursor, streaming the reply by editing one message and showing approval prompts.
//! A restart resumes each route where its cursor stood: nothing lost, nothing posted twice.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::StreamExt;
use switchboard_client::{Client, ClientError};
use switchboard_protocol::{
    AgentEvent, ContextItem, ContextPriority, CreateSessionRequest, DecisionAction, MessageType,
    RunStatus, SendMessageRequest, ToolCall, ToolDecision, ToolDecisionsRequest,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::channel::{
    Button, ButtonPress, Channel, ChannelContext, ChatKind, ChatRef, Inbound, InboundMessage,
    InboundSink, Peer,
};
use crate::config::{ApprovalMode, GatewayConfig};
use crate::routing::{routing_key, title};
use crate::store::{
    FollowedRun, GatewayStore, NamespacedState, Pairing, Prompt, Queued, Route, ShownPage,
};
use crate::text::{StreamBuffer, paginate, showable, split_message, truncate};

/// How long [`Gateway::stop`] lets tasks finish what they are doing.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// Reason given to the agent when a new chat message overrides a pending approval.
const NEW_MESSAGE_REASON: &str = "new message received";

pub(crate) struct Inner {
    pub client: Client,
    pub store: GatewayStore,
    pub config: GatewayConfig,
    pub channels: HashMap<String, Arc<dyn Channel>>,
    /// Wakes the worker of a routing key.
    workers: StdMutex<HashMap<String, mpsc::UnboundedSender<()>>>,
    /// Wakes the press handler.
    presses: mpsc::UnboundedSender<()>,
    pub cancel: CancellationToken,
    tasks: StdMutex<Vec<tokio::task::JoinHandle<()>>>,
    /// A standby gateway (another instance holds the gateway lease) stores what reaches it
    /// over HTTP — webhooks, pushes — but runs no channel, worker or press handler: the
    /// active instance's scan picks the stored work up.
    standby: bool,
}

/// The running gateway. Cheap to clone.
#[derive(Clone)]
pub struct Gateway {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("server: {0}")]
    Client(#[from] ClientError),
    #[error("{0}")]
    Channel(#[from] crate::channel::ChannelError),
    #[error("{0}")]
    Other(String),
}

/// The private answer to a press by someone who may not decide.
pub const NOT_AN_APPROVER: &str = "Only the requester or an approver can decide this.";

fn log_err<T, E: std::fmt::Display>(what: &str, r: Result<T, E>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::warn!(error = %e, "{what}");
            None
        }
    }
}

impl Gateway {
    /// Starts the channels, the press handler, and a worker for every route with queued
    /// messages or a run to follow (a restart picks up where it stopped).
    pub async fn start(
        config: GatewayConfig,
        client: Client,
        store: GatewayStore,
        channels: Vec<Arc<dyn Channel>>,
    ) -> Result<Gateway, GatewayError> {
        // The store first: when it fails, nothing has been started.
        let mut keys: Vec<String> = store.queued_routes().await?;
        keys.extend(store.runs().await?.into_iter().map(|r| r.routing_key));
        keys.sort();
        keys.dedup();
        let (gw, press_rx) = Self::build(config, client, store, channels, false);
        let sink: Arc<dyn InboundSink> = Arc::new(gw.clone());
        for (name, ch) in &gw.inner.channels {
            let ctx = ChannelContext {
                sink: sink.clone(),
                state: Arc::new(NamespacedState {
                    store: gw.inner.store.clone(),
                    prefix: format!("channel:{name}"),
                }),
            };
            let ch = ch.clone();
            let cancel = gw.inner.cancel.clone();
            let name = name.clone();
            gw.spawn(async move {
                if let Err(e) = ch.run(ctx, cancel).await {
                    tracing::error!(channel = %name, error = %e, "channel stopped");
                }
            });
        }
        gw.spawn(press_loop(gw.clone(), press_rx));
        for key in keys {
            gw.kick(&key);
        }
        let _ = gw.inner.presses.send(());
        // A shared store: standby instances store inbound work without running it; look for
        // it every second.
        if gw.inner.store.kind() == "postgres" {
            gw.spawn(scan_loop(gw.clone()));
        }
        Ok(gw)
    }

    /// A gateway on standby: it accepts what reaches this instance over HTTP into the
    /// (shared) store and runs nothing; the instance holding the gateway lease handles it.
    pub fn standby(
        config: GatewayConfig,
        client: Client,
        store: GatewayStore,
        channels: Vec<Arc<dyn Channel>>,
    ) -> Gateway {
        Self::build(config, client, store, channels, true).0
    }

    fn build(
        config: GatewayConfig,
        client: Client,
        store: GatewayStore,
        channels: Vec<Arc<dyn Channel>>,
        standby: bool,
    ) -> (Gateway, mpsc::UnboundedReceiver<()>) {
        let (press_tx, press_rx) = mpsc::unbounded_channel();
        let gw = Gateway {
            inner: Arc::new(Inner {
                client,
                store,
                config,
                channels: channels
                    .into_iter()
                    .map(|c| (c.name().to_string(), c))
                    .collect(),
                workers: StdMutex::default(),
                presses: press_tx,
                cancel: CancellationToken::new(),
                tasks: StdMutex::default(),
                standby,
            }),
        };
        (gw, press_rx)
    }

    /// Whether this gateway is on standby (see [`Gateway::standby`]).
    pub fn is_standby(&self) -> bool {
        self.inner.standby
    }

    /// Stops channels and workers at once, leaving approvals, followed runs and queues as
    /// they are in the store: for handing the gateway over to another instance, which
    /// resumes them like a restart would.
    pub async fn stop(&self) {
        self.inner.cancel.cancel();
        let tasks: Vec<_> =
            std::mem::take(&mut *self.inner.tasks.lock().unwrap_or_else(|p| p.into_inner()));
        // Tasks end at the next await that watches the cancel token; one in the middle of
        // taking a message (seen, then queued) gets a moment to finish it. Aborted only
        // after that.
        let aborts: Vec<_> = tasks.iter().map(|t| t.abort_handle()).collect();
        if tokio::time::timeout(STOP_GRACE, futures::future::join_all(tasks))
            .await
            .is_err()
        {
            for a in aborts {
                a.abort();
            }
        }
    }

    fn spawn(&self, fut: impl std::future::Future<Output = ()> + Send + 'static) {
        let handle = tokio::spawn(fut);
        self.inner
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(handle);
    }

    pub fn store(&self) -> &GatewayStore {
        &self.inner.store
    }

    pub fn config(&self) -> &GatewayConfig {
        &self.inner.config
    }

    pub fn channel(&self, name: &str) -> Option<Arc<dyn Channel>> {
        self.inner.channels.get(name).cloned()
    }

    pub fn channels(&self) -> Vec<Arc<dyn Channel>> {
        self.inner.channels.values().cloned().collect()
    }

    /// Wakes (or starts) the worker of a routing key.
    fn kick(&self, key: &str) {
        if self.inner.standby {
            return;
        }
        let mut map = self.inner.workers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = map.get(key)
            && tx.send(()).is_ok()
        {
            return;
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = tx.send(());
        map.insert(key.to_string(), tx);
        drop(map);
        self.spawn(worker(self.clone(), key.to_string(), rx));
    }

    /// Stops: channels and workers end; every pending approval is rejected ("gateway shutting
    /// down") with bounded concurrency and a per-call timeout; followed runs are cancelled.
    pub async fn shutdown(&self) {
        self.inner.cancel.cancel();
        let cfg = &self.inner.config;
        let prompts = self.inner.store.prompts().await.unwrap_or_default();
        let runs = self.inner.store.runs().await.unwrap_or_default();
        futures::stream::iter(prompts)
            .for_each_concurrent(cfg.shutdown_concurrency.max(1), |p| async move {
                let done = tokio::time::timeout(
                    cfg.shutdown_call_timeout,
                    self.settle_prompt(&p, false, "gateway shutting down", None),
                )
                .await;
                if done.is_err() {
                    tracing::warn!(prompt = %p.id, "rejecting an approval at shutdown timed out");
                }
            })
            .await;
        futures::stream::iter(runs)
            .for_each_concurrent(cfg.shutdown_concurrency.max(1), |r| async move {
                let _ = tokio::time::timeout(
                    cfg.shutdown_call_timeout,
                    self.inner.client.cancel(r.session_id, r.run_id),
                )
                .await;
            })
            .await;
        let tasks: Vec<_> =
            std::mem::take(&mut *self.inner.tasks.lock().unwrap_or_else(|p| p.into_inner()));
        for t in tasks {
            t.abort();
        }
    }

    // --- inbound ------------------------------------------------------------------------

    async fn on_message(&self, m: InboundMessage) -> Result<(), GatewayError> {
        let Some(channel) = self.channel(&m.channel) else {
            tracing::warn!(channel = %m.channel, "message from an unknown channel ignored");
            return Ok(());
        };
        // A platform's redelivery (a crash before its offset was stored) or a replayed
        // webhook is taken once.
        if !m.message_id.is_empty()
            && !self
                .inner
                .store
                .first_seen(&m.channel, &m.chat.id, &m.message_id)
                .await?
        {
            tracing::info!(channel = %m.channel, message_id = %m.message_id, "message seen before; dropped");
            return Ok(());
        }
        if !self.allowed(&m).await? {
            return self.pairing(&channel, &m).await;
        }
        // (Whether a group message is addressed to the bot is the channel's call: Telegram
        // filters unless `require_mention` is off.)
        let text = m.text.trim();
        let key = routing_key(self.inner.config.dm_scope, &m.channel, &m.peer, &m.chat);
        if let Some(cmd) = command(text) {
            // A command that fails says so in the chat; it never blocks the channel.
            if let Err(e) = self.on_command(&channel, &key, &m, cmd).await {
                tracing::warn!(error = %e, "chat command failed");
                log_err(
                    "answering a failed command",
                    channel
                        .send(&m.chat, "That did not work; see the server log.", &[])
                        .await,
                );
            }
            return Ok(());
        }
        let mut text = text.to_string();
        for a in &m.attachments {
            let size = a.size.map(|b| format!(", {b} bytes")).unwrap_or_default();
            let name = a
                .name
                .as_deref()
                .map(|n| format!(" {n}"))
                .unwrap_or_default();
            text.push_str(&format!(
                "\n[attachment: {}{name}{size}; not downloaded]",
                a.kind
            ));
        }
        let text = text.trim();
        if text.is_empty() {
            return Ok(());
        }
        let stored = self.store_message(&m, &key, text).await;
        if let Err(e) = stored {
            // Not stored: forget that it was seen, so the platform's redelivery is taken.
            if let Err(e2) = self
                .inner
                .store
                .forget_seen(&m.channel, &m.chat.id, &m.message_id)
                .await
            {
                tracing::warn!(error = %e2, "could not forget a message that was not stored");
            }
            return Err(e);
        }
        // A pending approval yields to the new message: rejected, the run goes on, and the
        // message is taken when the run ends. Done in the background: the channel waits for
        // this call before it acknowledges the message to its platform.
        let gw = self.clone();
        let key2 = key.clone();
        self.spawn(async move {
            if let Ok(Some(route)) = gw.inner.store.route(&key2).await
                && let Ok(Some(p)) = gw.inner.store.prompt_of_session(route.session_id).await
            {
                gw.settle_prompt(&p, false, NEW_MESSAGE_REASON, None).await;
            }
        });
        self.kick(&key);
        Ok(())
    }

    async fn store_message(
        &self,
        m: &InboundMessage,
        key: &str,
        text: &str,
    ) -> Result<(), GatewayError> {
        let context = self
            .inner
            .store
            .take_context(&m.channel, &m.chat.id)
            .await?;
        self.inner
            .store
            .enqueue(&Queued {
                id: 0,
                routing_key: key.to_string(),
                channel: m.channel.clone(),
                peer: m.peer.clone(),
                chat: m.chat.clone(),
                text: text.to_string(),
                context,
            })
            .await?;
        Ok(())
    }

    /// Allowed: an open channel, a configured chat, or a chat paired before.
    async fn allowed(&self, m: &InboundMessage) -> Result<bool, GatewayError> {
        let cfg = &self.inner.config;
        if cfg.open_channels.contains(&m.channel) {
            return Ok(true);
        }
        if cfg
            .allowed_chats
            .get(&m.channel)
            .is_some_and(|l| l.contains(&m.chat.id))
        {
            return Ok(true);
        }
        if cfg
            .allowed_peers
            .get(&m.channel)
            .is_some_and(|l| l.contains(&m.peer.id))
        {
            return Ok(true);
        }
        Ok(self.inner.store.is_allowed(&m.channel, &m.chat.id).await?)
    }

    /// An unknown direct message gets a pairing code (once per code); anything else from
    /// an unknown chat is ignored and logged.
    async fn pairing(
        &self,
        channel: &Arc<dyn Channel>,
        m: &InboundMessage,
    ) -> Result<(), GatewayError> {
        if m.chat.kind != ChatKind::Direct {
            tracing::info!(channel = %m.channel, chat = %m.chat.id, "message from a chat that is not allowed; ignored");
            return Ok(());
        }
        if self
            .inner
            .store
            .pairing_of(&m.channel, &m.peer.id)
            .await?
            .is_some()
        {
            tracing::info!(channel = %m.channel, peer = %m.peer.id, "unpaired peer wrote again; ignored");
            return Ok(());
        }
        let code = pairing_code();
        let expires = chrono::Utc::now()
            + chrono::Duration::from_std(self.inner.config.pairing_ttl).unwrap_or_default();
        self.inner
            .store
            .put_pairing(&Pairing {
                code: code.clone(),
                channel: m.channel.clone(),
                peer: m.peer.clone(),
                chat: m.chat.clone(),
                expires_at: expires.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            })
            .await?;
        tracing::warn!(channel = %m.channel, peer = %m.peer.id, name = %m.peer.name, %code, "pairing requested; approve with `switchboard pairing approve {} {code}`", m.channel);
        let text = format!(
            "This bot does not know you yet. Ask its owner to run:\n\nswitchboard pairing approve {} {code}\n\n(the code is valid for {} minutes)",
            m.channel,
            self.inner.config.pairing_ttl.as_secs() / 60
        );
        log_err(
            "sending a pairing code",
            channel.send(&m.chat, &text, &[]).await,
        );
        Ok(())
    }

    async fn on_command(
        &self,
        channel: &Arc<dyn Channel>,
        key: &str,
        m: &InboundMessage,
        cmd: Command,
    ) -> Result<(), GatewayError> {
        let route = self.inner.store.route(key).await?;
        let reply = match cmd {
            Command::New => {
                if route.as_ref().is_some_and(|r| r.bound) {
                    "This chat is bound to a fixed session; /new does not change it.".to_string()
                } else {
                    // The old session's pending approval and run end here, so nothing of it
                    // holds up the new one.
                    if let Some(r) = &route {
                        if let Some(p) = self.inner.store.prompt_of_session(r.session_id).await? {
                            self.settle_prompt(&p, false, "the chat started a new session", None)
                                .await;
                        }
                        if let Ok(s) = self.inner.client.get_session(r.session_id).await
                            && let Some(run) = s.session.active_run_id
                        {
                            log_err(
                                "cancelling the old session's run",
                                self.inner.client.cancel(r.session_id, run).await,
                            );
                        }
                    }
                    self.inner.store.delete_route(key).await?;
                    "Done: your next message starts a new session.".to_string()
                }
            }
            Command::Stop => {
                // Messages still waiting go too: /stop means "stop what you are doing".
                let queued = self.inner.store.queued(key).await?;
                if let Some(last) = queued.last() {
                    self.inner.store.dequeue(key, last.id).await?;
                }
                let dropped = if queued.is_empty() {
                    String::new()
                } else {
                    format!(" ({} queued message(s) dropped)", queued.len())
                };
                let active = match &route {
                    None => None,
                    Some(r) => self
                        .inner
                        .client
                        .get_session(r.session_id)
                        .await?
                        .session
                        .active_run_id
                        .map(|run| (r.session_id, run)),
                };
                match active {
                    Some((session, run)) => {
                        self.inner.client.cancel(session, run).await?;
                        format!("Stopping the current run.{dropped}")
                    }
                    None => format!("Nothing is running.{dropped}"),
                }
            }
            Command::Status => match &route {
                None => "No session yet: send a message to start one.".into(),
                Some(r) => {
                    let s = self.inner.client.get_session(r.session_id).await?;
                    let state = match s.session.run_status {
                        RunStatus::Running => "running",
                        RunStatus::Idle => "idle",
                    };
                    let pending = self.inner.store.prompt_of_session(r.session_id).await?;
                    let queued = self.inner.store.queued(key).await?.len();
                    format!(
                        "Session {} ({})\nRun: {state}\nApproval pending: {}\nQueued messages: {queued}",
                        r.session_id,
                        s.session.title,
                        if pending.is_some() { "yes" } else { "no" },
                    )
                }
            },
        };
        log_err(
            "answering a command",
            channel.send(&m.chat, &reply, &[]).await,
        );
        Ok(())
    }

    // --- approvals ----------------------------------------------------------------------

    /// Decides a prompt's calls (accept or reject for all), edits the prompt to say who
    /// decided what (or that it expired), and forgets it. Returns whether it decided.
    async fn settle_prompt(
        &self,
        p: &Prompt,
        accept: bool,
        reason: &str,
        by: Option<&Peer>,
    ) -> bool {
        if !matches!(self.inner.store.take_prompt(&p.id).await, Ok(true)) {
            return false;
        }
        let decisions: BTreeMap<String, ToolDecision> = p
            .tool_call_ids
            .iter()
            .map(|id| {
                (
                    id.clone(),
                    ToolDecision {
                        action: if accept {
                            DecisionAction::Accept
                        } else {
                            DecisionAction::Reject
                        },
                        content: (!accept).then(|| reason.to_string()),
                    },
                )
            })
            .collect();
        let result = self
            .inner
            .client
            .decide_tools(
                p.session_id,
                &ToolDecisionsRequest {
                    run_id: p.run_id,
                    decisions,
                },
            )
            .await;
        let note = match (&result, by) {
            (Err(e), _) if e.status() == Some(409) => {
                "⌛ This approval expired: the run no longer waits for it.".to_string()
            }
            (Err(e), _) => format!("⚠️ Could not record the decision: {e}"),
            (Ok(_), Some(peer)) if accept => format!("✅ Allowed by {}", peer.name),
            (Ok(_), Some(peer)) => format!("❌ Denied by {}", peer.name),
            (Ok(_), None) => format!("❌ Rejected: {reason}"),
        };
        if let Some(ch) = self.channel(&p.channel) {
            let room = ch.max_chars().saturating_sub(note.chars().count() + 2);
            let text = format!("{}\n\n{note}", truncate(&p.prompt_text, room));
            log_err(
                "editing an approval prompt",
                ch.edit(&p.chat, &p.prompt_message, &text, &[]).await,
            );
        }
        result.is_ok()
    }

    async fn on_press(&self, press: &ButtonPress) -> Result<(), GatewayError> {
        let Some(ch) = self.channel(&press.channel) else {
            return Ok(());
        };
        let Some((prompt_id, accept)) = parse_button(&press.data) else {
            log_err(
                "answering a press",
                ch.answer_press(press, Some("Unknown button")).await,
            );
            return Ok(());
        };
        let Some(mut prompt) = self.inner.store.prompt(prompt_id).await? else {
            log_err(
                "answering a press",
                ch.answer_press(press, Some("This approval is no longer pending"))
                    .await,
            );
            return Ok(());
        };
        // A press can come before the prompt's message id was recorded: it is the message
        // the button is on.
        if prompt.prompt_message.is_empty() {
            prompt.prompt_message = press.message_id.clone();
        }
        if press.channel != prompt.channel || press.chat.id != prompt.chat.id {
            tracing::warn!(peer = %press.peer.id, prompt = %prompt.id, "approval press from another chat refused");
            log_err(
                "answering a refused press",
                ch.tell_presser(press, "This approval belongs to another chat.")
                    .await,
            );
            return Ok(());
        }
        if !self.may_approve(&prompt, &press.peer) {
            tracing::warn!(peer = %press.peer.id, prompt = %prompt.id, "approval press refused: not an approver");
            log_err(
                "answering a refused press",
                ch.tell_presser(press, NOT_AN_APPROVER).await,
            );
            return Ok(());
        }
        let decided = self
            .settle_prompt(&prompt, accept, "denied in the chat", Some(&press.peer))
            .await;
        let toast = match (decided, accept) {
            (true, true) => "Allowed",
            (true, false) => "Denied",
            (false, _) => "Too late: this approval is no longer pending",
        };
        log_err(
            "answering a press",
            ch.answer_press(press, Some(toast)).await,
        );
        if let Some(mut run) = self.inner.store.run(&prompt.routing_key).await?
            && let Some(d) = run.deadline.as_deref().and_then(parse_time)
        {
            // The wait counted against the run's timeout; a floor remains after a decision.
            let fixed =
                deadline_after_decision(d, chrono::Utc::now(), self.inner.config.timeout_floor);
            if fixed != d {
                run.deadline = Some(fixed.to_rfc3339_opts(chrono::SecondsFormat::Micros, true));
                self.inner.store.put_run(&run).await?;
            }
        }
        Ok(())
    }

    /// In a DM only the requester; in groups the configured approvers (default: the
    /// requester).
    fn may_approve(&self, p: &Prompt, peer: &Peer) -> bool {
        if p.chat.kind == ChatKind::Direct {
            return peer.id == p.requester.id;
        }
        match self.inner.config.approvers.get(&p.channel) {
            Some(list) if !list.is_empty() => list.contains(&peer.id),
            _ => peer.id == p.requester.id,
        }
    }

    /// What the gateway does with calls that wait: by mode and allowlist; the rest become
    /// one prompt with buttons.
    async fn on_waiting(
        &self,
        route: &Route,
        run: &FollowedRun,
        ids: &[String],
    ) -> Result<(), GatewayError> {
        if let Some(old) = self.inner.store.prompt_of_session(run.session_id).await? {
            if old.run_id == run.run_id && old.tool_call_ids.iter().all(|i| ids.contains(i)) {
                if old.prompt_message.is_empty() {
                    // Stored but not posted before a crash: post it now.
                    return self.post_prompt(old).await;
                }
                return Ok(()); // already shown (a replay after a restart)
            }
            // One pending approval per session: an older prompt is marked ignored.
            if self.inner.store.take_prompt(&old.id).await?
                && let Some(ch) = self.channel(&old.channel)
                && !old.prompt_message.is_empty()
            {
                let note = "(ignored: a newer approval replaced this one)";
                let room = ch.max_chars().saturating_sub(note.len() + 2);
                let text = format!("{}\n\n{note}", truncate(&old.prompt_text, room));
                log_err(
                    "marking a prompt ignored",
                    ch.edit(&old.chat, &old.prompt_message, &text, &[]).await,
                );
            }
        }
        let pending = self.inner.client.pending_tools(run.session_id).await?;
        if pending.run_id != Some(run.run_id) {
            return Ok(()); // decided meanwhile
        }
        let calls: Vec<ToolCall> = pending
            .tool_calls
            .into_iter()
            .filter(|c| ids.contains(&c.id))
            .collect();
        if calls.is_empty() {
            return Ok(());
        }
        let mode = self.inner.config.mode_for(&route.channel);
        let (auto, ask): (Vec<ToolCall>, Vec<ToolCall>) = match mode {
            ApprovalMode::AllowAll => (calls, Vec::new()),
            ApprovalMode::DenyAll => {
                self.decide(
                    run,
                    &calls,
                    false,
                    "the chat gateway denies every tool call (approval mode deny_all)",
                )
                .await?;
                return Ok(());
            }
            ApprovalMode::Allowlist => calls
                .into_iter()
                .partition(|c| self.inner.config.allowlisted(&c.name)),
        };
        if !auto.is_empty() {
            self.decide(run, &auto, true, "").await?;
        }
        if ask.is_empty() {
            return Ok(());
        }
        let Some(ch) = self.channel(&route.channel) else {
            return Ok(());
        };
        // Room for the decision note added later.
        let text =
            crate::preview::approval_prompt(&ask, auto.len(), ch.max_chars().saturating_sub(120));
        // Stored before it is posted: a press that comes back at once finds it, and a crash
        // in between posts it on the replay instead of losing it.
        let prompt = Prompt {
            id: short_id(),
            routing_key: route.routing_key.clone(),
            session_id: run.session_id,
            run_id: run.run_id,
            tool_call_ids: ask.iter().map(|c| c.id.clone()).collect(),
            channel: route.channel.clone(),
            chat: route.chat.clone(),
            prompt_message: String::new(),
            prompt_text: text,
            requester: route.requester.clone(),
        };
        self.inner.store.put_prompt(&prompt).await?;
        self.post_prompt(prompt).await
    }

    /// Posts a stored prompt with its buttons and records the message id.
    async fn post_prompt(&self, mut p: Prompt) -> Result<(), GatewayError> {
        let Some(ch) = self.channel(&p.channel) else {
            return Ok(());
        };
        let (allow, deny) = if p.tool_call_ids.len() > 1 {
            ("Allow All", "Deny All")
        } else {
            ("Allow", "Deny")
        };
        let buttons = vec![
            Button {
                text: allow.into(),
                data: format!("ap:{}:y", p.id),
            },
            Button {
                text: deny.into(),
                data: format!("ap:{}:n", p.id),
            },
        ];
        p.prompt_message = ch.send(&p.chat, &p.prompt_text, &buttons).await?;
        if !self
            .inner
            .store
            .set_prompt_message(&p.id, &p.prompt_message)
            .await?
        {
            // Settled while it was being posted (a press raced the send): no live buttons.
            log_err(
                "closing a settled prompt",
                ch.edit(&p.chat, &p.prompt_message, &p.prompt_text, &[])
                    .await,
            );
        }
        Ok(())
    }

    async fn decide(
        &self,
        run: &FollowedRun,
        calls: &[ToolCall],
        accept: bool,
        reason: &str,
    ) -> Result<(), GatewayError> {
        let decisions = calls
            .iter()
            .map(|c| {
                (
                    c.id.clone(),
                    ToolDecision {
                        action: if accept {
                            DecisionAction::Accept
                        } else {
                            DecisionAction::Reject
                        },
                        content: (!accept).then(|| reason.to_string()),
                    },
                )
            })
            .collect();
        match self
            .inner
            .client
            .decide_tools(
                run.session_id,
                &ToolDecisionsRequest {
                    run_id: run.run_id,
                    decisions,
                },
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.status() == Some(409) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

#[async_trait]
impl InboundSink for Gateway {
    async fn accept(&self, item: Inbound) -> Result<(), String> {
        match item {
            Inbound::Message(m) => self.on_message(m).await.map_err(|e| e.to_string()),
            Inbound::Press(p) => {
                self.inner
                    .store
                    .push_press(&p)
                    .await
                    .map_err(|e| e.to_string())?;
                let _ = self.inner.presses.send(());
                Ok(())
            }
        }
    }
}

/// On a shared store: picks up messages and presses that standby instances stored.
async fn scan_loop(gw: Gateway) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = gw.inner.cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        match gw.inner.store.queued_routes().await {
            Ok(keys) => {
                for key in keys {
                    gw.kick(&key);
                }
            }
            Err(e) => tracing::warn!(error = %e, "scanning the shared inbox"),
        }
        if gw.inner.store.presses().await.is_ok_and(|p| !p.is_empty()) {
            let _ = gw.inner.presses.send(());
        }
    }
}

async fn press_loop(gw: Gateway, mut rx: mpsc::UnboundedReceiver<()>) {
    loop {
        tokio::select! {
            _ = gw.inner.cancel.cancelled() => return,
            got = rx.recv() => if got.is_none() { return },
        }
        let presses = gw.inner.store.presses().await.unwrap_or_default();
        for (id, press) in presses {
            if let Err(e) = gw.on_press(&press).await {
                tracing::warn!(error = %e, "handling a button press failed");
            }
            log_err(
                "dropping a handled press",
                gw.inner.store.drop_press(id).await,
            );
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Command {
    New,
    Stop,
    Status,
}

/// `/new`, `/stop`, `/status` (also `/stop@botname`).
fn command(text: &str) -> Option<Command> {
    let first = text.split_whitespace().next()?;
    let name = first.strip_prefix('/')?;
    let name = name.split('@').next().unwrap_or(name);
    match name {
        "new" => Some(Command::New),
        "stop" => Some(Command::Stop),
        "status" => Some(Command::Status),
        _ => None,
    }
}

/// `ap:<prompt id>:y|n`.
fn parse_button(data: &str) -> Option<(&str, bool)> {
    let rest = data.strip_prefix("ap:")?;
    let (id, choice) = rest.rsplit_once(':')?;
    match choice {
        "y" => Some((id, true)),
        "n" => Some((id, false)),
        _ => None,
    }
}

fn parse_time(s: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    chrono::DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|d| d.with_timezone(&chrono::Utc))
}

/// A run's deadline after an approval decision: the time spent waiting counted against it,
/// but at least `floor` remains so that what was approved can run.
pub fn deadline_after_decision(
    deadline: chrono::DateTime<chrono::Utc>,
    now: chrono::DateTime<chrono::Utc>,
    floor: Duration,
) -> chrono::DateTime<chrono::Utc> {
    let min = now + chrono::Duration::from_std(floor).unwrap_or_default();
    deadline.max(min)
}

fn short_id() -> String {
    Uuid::new_v4().simple().to_string()[..12].to_string()
}

fn pairing_code() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZ23456789";
    let mut rng = rand::rng();
    (0..8)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// The text the agent gets for a batch: one sender's messages joined; with several senders
/// each line carries its sender.
pub fn batch_text(items: &[Queued]) -> String {
    let senders: std::collections::HashSet<&str> =
        items.iter().map(|q| q.peer.id.as_str()).collect();
    if senders.len() <= 1 {
        return items
            .iter()
            .map(|q| q.text.as_str())
            .collect::<Vec<_>>()
            .join("\n\n");
    }
    items
        .iter()
        .map(|q| format!("{}: {}", q.peer.name, q.text))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The caller context of a batch: the newest non-empty one wins.
pub fn batch_context(items: &[Queued]) -> Option<serde_json::Value> {
    items
        .iter()
        .rev()
        .find_map(|q| q.context.clone().filter(|c| !c.is_null()))
}

// --- the worker of one routing key --------------------------------------------------------

async fn worker(gw: Gateway, key: String, mut rx: mpsc::UnboundedReceiver<()>) {
    let mut backoff = Duration::from_millis(500);
    loop {
        if gw.inner.cancel.is_cancelled() {
            return;
        }
        match step(&gw, &key).await {
            Ok(true) => {
                backoff = Duration::from_millis(500);
                continue;
            }
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(routing_key = %key, error = %e, "gateway worker step failed; retrying");
                tokio::select! {
                    _ = gw.inner.cancel.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(30));
                continue;
            }
        }
        // Idle: wait for a kick.
        tokio::select! {
            _ = gw.inner.cancel.cancelled() => return,
            got = rx.recv() => if got.is_none() { return },
        }
        while rx.try_recv().is_ok() {}
    }
}

/// One step: follow a run to its end, or start one from the queue. `Ok(true)` when there
/// may be more to do at once.
async fn step(gw: &Gateway, key: &str) -> Result<bool, GatewayError> {
    if let Some(run) = gw.inner.store.run(key).await? {
        follow(gw, key, run).await?;
        return Ok(true);
    }
    let items = gw.inner.store.queued(key).await?;
    let Some(last) = items.last() else {
        return Ok(false);
    };
    let route = ensure_route(gw, key, last).await?;
    // Another client may run something on the session: wait for its end.
    let detail = match gw.inner.client.get_session(route.session_id).await {
        Ok(d) => d,
        Err(e) if e.status() == Some(404) && !route.bound => {
            // The session is gone: the route starts over with a new one.
            gw.inner.store.delete_route(key).await?;
            return Ok(true);
        }
        Err(e) if e.status() == Some(404) => {
            // A binding to a deleted session: say so once per batch and wait (backoff)
            // instead of spinning; unbind to start fresh.
            if let Some(ch) = gw.channel(&route.channel) {
                log_err(
                    "posting a binding error",
                    ch.send(
                        &route.chat,
                        "This chat is bound to a session that no longer exists; ask the owner to change [gateway.bindings].",
                        &[],
                    )
                    .await,
                );
            }
            return Err(GatewayError::Other(format!(
                "routing key {key} is bound to deleted session {}",
                route.session_id
            )));
        }
        Err(e) => return Err(e.into()),
    };
    let after = detail.session.last_event_id;
    let text = batch_text(&items);
    let mut context = Vec::new();
    if let Some(c) = batch_context(&items) {
        context.push(ContextItem {
            name: "caller".into(),
            content: match &c {
                serde_json::Value::String(s) => s.clone(),
                other => serde_json::to_string_pretty(other).unwrap_or_default(),
            },
            priority: Some(ContextPriority::High),
        });
    }
    let mut req = SendMessageRequest::user(text, MessageType::Message);
    req.context = context;
    let followed = |run_id: Uuid, deadline: Option<String>| FollowedRun {
        routing_key: key.to_string(),
        session_id: route.session_id,
        run_id,
        last_event_id: after,
        stream_message: None,
        streamed: String::new(),
        delivered: 0,
        deadline,
        pending: String::new(),
        pages: Vec::new(),
    };
    // An intent, stored before sending: if the process dies after the server took the
    // message but before the run was recorded, the restart finds the run instead of
    // sending the batch a second time.
    let intent_key = format!("intent:{key}");
    if let Some(intent) = gw.inner.store.kv_get(&intent_key).await?
        && let Some(run_id) = adopt(gw, route.session_id, &intent, &req.message.content).await?
    {
        tracing::info!(routing_key = %key, %run_id, "found the run a crash left unrecorded");
        let deadline = chrono::Utc::now()
            + chrono::Duration::from_std(gw.inner.config.run_timeout).unwrap_or_default();
        let after: u64 = intent
            .split_once(':')
            .and_then(|(a, _)| a.parse().ok())
            .unwrap_or(after);
        let mut r = followed(
            run_id,
            Some(deadline.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)),
        );
        r.last_event_id = after;
        gw.inner.store.start_run(&r, last.id).await?;
        gw.inner.store.kv_set(&intent_key, "").await?;
        return Ok(true);
    }
    gw.inner
        .store
        .kv_set(
            &intent_key,
            &format!("{after}:{}:{}", last.id, chrono::Utc::now().to_rfc3339()),
        )
        .await?;
    let run_id = match gw.inner.client.send_message(route.session_id, &req).await {
        Ok(r) => r.run_id,
        Err(e) if e.code() == Some("session_already_running") => {
            // Follow the active run first; the batch stays at the front of the queue.
            if let Some(active) = detail.session.active_run_id {
                gw.inner.store.put_run(&followed(active, None)).await?;
                return Ok(true);
            }
            return Err(e.into());
        }
        // The batch stays queued (at the front) and is retried.
        Err(e) => return Err(e.into()),
    };
    let deadline = chrono::Utc::now()
        + chrono::Duration::from_std(gw.inner.config.run_timeout).unwrap_or_default();
    let deadline = Some(deadline.to_rfc3339_opts(chrono::SecondsFormat::Micros, true));
    gw.inner
        .store
        .start_run(&followed(run_id, deadline), last.id)
        .await?;
    gw.inner.store.kv_set(&intent_key, "").await?;
    Ok(true)
}

/// After a crash between sending a batch and recording its run: the run the server started
/// for it, if the session's newest user message is that batch.
async fn adopt(
    gw: &Gateway,
    session_id: Uuid,
    intent: &str,
    content: &str,
) -> Result<Option<Uuid>, GatewayError> {
    // "<after>:<upto>:<when>": only a message stored after the intent can be its run.
    let Some(when) = intent
        .splitn(3, ':')
        .nth(2)
        .and_then(|w| chrono::DateTime::parse_from_rfc3339(w).ok())
        .map(|w| w.with_timezone(&chrono::Utc))
    else {
        return Ok(None);
    };
    let total = gw
        .inner
        .client
        .list_messages(session_id, Some(1), Some(0))
        .await?
        .total;
    let recent = gw
        .inner
        .client
        .list_messages(session_id, Some(20), Some(total.saturating_sub(20) as u32))
        .await?;
    Ok(recent
        .messages
        .iter()
        .rev()
        .find(|m| m.role == switchboard_protocol::Role::User)
        .filter(|m| m.content == content && m.created_at >= when)
        .and_then(|m| m.run_id))
}

/// The route's session, created when there is none; the reply target refreshed.
async fn ensure_route(gw: &Gateway, key: &str, latest: &Queued) -> Result<Route, GatewayError> {
    let cfg = &gw.inner.config;
    let existing = gw.inner.store.route(key).await?;
    let (session_id, bound) = match (&existing, cfg.bindings.get(key)) {
        (_, Some(bound)) => (*bound, true),
        (Some(r), None) => (r.session_id, r.bound),
        (None, None) => {
            let s = gw
                .inner
                .client
                .create_session(&CreateSessionRequest {
                    title: Some(title(
                        &cfg.title_template,
                        &latest.channel,
                        &latest.peer,
                        &latest.chat,
                    )),
                    cwd: cfg.session_cwd.clone(),
                    model: cfg.session_model.clone(),
                    permission_mode: cfg.session_permission_mode,
                    ..CreateSessionRequest::default()
                })
                .await?;
            tracing::info!(routing_key = %key, session_id = %s.id, "new session for a chat");
            (s.id, false)
        }
    };
    let route = Route {
        routing_key: key.to_string(),
        session_id,
        channel: latest.channel.clone(),
        chat: latest.chat.clone(),
        requester: latest.peer.clone(),
        bound,
    };
    gw.inner.store.put_route(&route).await?;
    Ok(route)
}

/// Follows a run from its stored cursor to its end, streaming the reply into the chat.
///
/// The stored state is the cursor (the last event handled), the text received but not yet
/// shown (`pending`, pushed back into the buffer after a restart), and the message being
/// edited with what it shows; the three are saved together, so a restart neither loses nor
/// repeats reply text.
async fn follow(gw: &Gateway, key: &str, mut run: FollowedRun) -> Result<(), GatewayError> {
    let Some(route) = gw.inner.store.route(key).await? else {
        gw.inner.store.finish_run(key).await?;
        return Ok(());
    };
    let Some(ch) = gw.channel(&route.channel) else {
        gw.inner.store.finish_run(key).await?;
        return Ok(());
    };
    let mut events = gw
        .inner
        .client
        .subscribe(run.session_id, Some(run.last_event_id));
    // A platform that edits shows the reply in messages edited as it grows (see `render`);
    // one that cannot gets it in readable chunks (`StreamBuffer`, `deliver`).
    let edits = ch.can_edit();
    if edits
        && run.pages.is_empty()
        && let Some(id) = run.stream_message.take()
    {
        // Stored by a version that tracked one message: it shows the start of the reply.
        run.pages.push(ShownPage {
            id,
            text: String::new(),
        });
    }
    let mut buf = StreamBuffer::new();
    if !edits && !run.pending.is_empty() {
        buf.push(&run.pending, Instant::now());
    }
    let edit_interval = ch.edit_interval();
    // When the reply was last shown, and whether text arrived since.
    let mut shown_at: Option<Instant> = None;
    let mut unshown = edits && !run.streamed.is_empty();
    let mut dirty = false;
    let mut tick = tokio::time::interval(
        edit_interval.clamp(Duration::from_millis(50), Duration::from_millis(250)),
    );
    loop {
        // The deadline is read from the store (a decision may have moved it) and does not
        // run while a prompt of this run waits.
        let waiting = gw
            .inner
            .store
            .prompt_of_session(run.session_id)
            .await?
            .is_some_and(|p| p.run_id == run.run_id);
        if let Some(stored) = gw.inner.store.run(key).await? {
            run.deadline = stored.deadline;
        }
        let until_deadline = match run.deadline.as_deref().and_then(parse_time) {
            Some(d) if !waiting => (d - chrono::Utc::now()).to_std().unwrap_or(Duration::ZERO),
            _ => Duration::from_secs(365 * 24 * 3600),
        };
        let item = tokio::select! {
            _ = gw.inner.cancel.cancelled() => return Ok(()),
            _ = tick.tick() => {
                if edits {
                    if unshown && shown_at.is_none_or(|t| t.elapsed() >= edit_interval) {
                        if render(&*ch, &route.chat, &mut run, false).await? {
                            shown_at = Some(Instant::now());
                        }
                        unshown = false;
                        dirty = true;
                    }
                } else if let Some(chunk) = buf.take_ready(Instant::now()) {
                    deliver(&*ch, &route.chat, &mut run, &chunk).await?;
                    dirty = true;
                }
                if dirty {
                    run.pending = buf.pending();
                    gw.inner.store.put_run(&run).await?;
                    dirty = false;
                }
                continue;
            }
            _ = tokio::time::sleep(until_deadline) => {
                let mins = gw.inner.config.run_timeout.as_secs() / 60;
                let note = format!("⏱ The run took longer than {mins} min and is being cancelled.");
                log_err("posting a timeout notice", ch.send(&route.chat, &note, &[]).await);
                log_err("cancelling a timed-out run", gw.inner.client.cancel(run.session_id, run.run_id).await);
                run.deadline = None;
                run.pending = buf.pending();
                gw.inner.store.put_run(&run).await?;
                continue;
            }
            item = events.next() => item,
        };
        let env = match item {
            Some(Ok(env)) => env,
            Some(Err(e)) if e.is_transient() => continue,
            Some(Err(e)) if e.status() == Some(404) => {
                gw.inner.store.finish_run(key).await?;
                return Ok(());
            }
            Some(Err(e)) => return Err(e.into()),
            None => return Err(GatewayError::Other("event stream ended".into())),
        };
        run.last_event_id = env.id;
        dirty = true;
        if env.event.run_id() != run.run_id {
            continue;
        }
        match env.event {
            AgentEvent::TextDelta { delta, .. } if edits => {
                run.streamed.push_str(&delta);
                unshown = true;
                // The first showing waits for the next tick (a short reply then arrives in
                // one message, not a post and an edit); later ones come at the edit pace.
                if shown_at.is_some_and(|t| t.elapsed() >= edit_interval) {
                    if render(&*ch, &route.chat, &mut run, false).await? {
                        shown_at = Some(Instant::now());
                    }
                    unshown = false;
                    gw.inner.store.put_run(&run).await?;
                    dirty = false;
                }
            }
            AgentEvent::TextDelta { delta, .. } => {
                buf.push(&delta, Instant::now());
                if let Some(chunk) = buf.take_ready(Instant::now()) {
                    deliver(&*ch, &route.chat, &mut run, &chunk).await?;
                    run.pending = buf.pending();
                    gw.inner.store.put_run(&run).await?;
                    dirty = false;
                }
            }
            AgentEvent::WaitingForToolApproval { tool_call_ids, .. } => {
                if edits {
                    render(&*ch, &route.chat, &mut run, true).await?;
                    run.delivered += run.streamed.chars().count();
                    unshown = false;
                } else if let Some(rest) = buf.take_rest() {
                    deliver(&*ch, &route.chat, &mut run, &rest).await?;
                }
                // The reply continues in a new message below the prompt.
                run.stream_message = None;
                run.streamed.clear();
                run.pending.clear();
                run.pages.clear();
                gw.inner.store.put_run(&run).await?;
                dirty = false;
                gw.on_waiting(&route, &run, &tool_call_ids).await?;
            }
            AgentEvent::ToolRejected {
                tool_call_id,
                reason,
                ..
            } => {
                if let Some(p) = gw.inner.store.prompt_of_session(run.session_id).await?
                    && p.run_id == run.run_id
                    && p.tool_call_ids.contains(&tool_call_id)
                    && gw.inner.store.take_prompt(&p.id).await?
                    && !p.prompt_message.is_empty()
                {
                    // Rejected by the server (timeout, cancel, restart): the prompt says so.
                    let note = if reason.contains("timed out") {
                        "⌛ This approval expired: no decision in time.".to_string()
                    } else {
                        format!("❌ Rejected: {reason}")
                    };
                    let room = ch.max_chars().saturating_sub(note.chars().count() + 2);
                    let text = format!("{}\n\n{note}", truncate(&p.prompt_text, room));
                    log_err(
                        "editing an expired prompt",
                        ch.edit(&p.chat, &p.prompt_message, &text, &[]).await,
                    );
                }
            }
            AgentEvent::RunCompleted { .. } | AgentEvent::RunError { .. } => {
                if edits {
                    // The final edit always lands: the whole text, not only whole words.
                    render(&*ch, &route.chat, &mut run, true).await?;
                } else if let Some(rest) = buf.take_rest() {
                    deliver(&*ch, &route.chat, &mut run, &rest).await?;
                }
                // Finished first, notices after: a crash in between loses a notice rather
                // than posting it twice.
                gw.inner.store.finish_run(key).await?;
                if let AgentEvent::RunError { error, .. } = &env.event {
                    let text = truncate(&format!("⚠️ The run failed: {error}"), ch.max_chars());
                    log_err(
                        "posting a run error",
                        ch.send(&route.chat, &text, &[]).await,
                    );
                } else if run.streamed.is_empty()
                    && run.delivered == 0
                    && let AgentEvent::RunCompleted { stop_reason, .. } = &env.event
                    && stop_reason == "cancelled"
                {
                    log_err(
                        "posting a cancel notice",
                        ch.send(&route.chat, "Stopped.", &[]).await,
                    );
                }
                // A prompt left over (the run ended without a decision) is closed.
                if let Some(p) = gw.inner.store.prompt_of_session(run.session_id).await?
                    && p.run_id == run.run_id
                    && gw.inner.store.take_prompt(&p.id).await?
                    && !p.prompt_message.is_empty()
                {
                    let note = "⌛ The run ended; this approval is closed.";
                    let room = ch.max_chars().saturating_sub(note.chars().count() + 2);
                    let text = format!("{}\n\n{note}", truncate(&p.prompt_text, room));
                    log_err(
                        "closing a prompt",
                        ch.edit(&p.chat, &p.prompt_message, &text, &[]).await,
                    );
                }
                return Ok(());
            }
            _ => {}
        }
    }
}

/// Whether a platform refused for good (a deleted message, a blocked bot): retrying the
/// same call will not help.
fn permanent(e: &crate::channel::ChannelError) -> bool {
    matches!(e, crate::channel::ChannelError::Api { code, .. } if (400..500).contains(code) && *code != 429)
}

/// Shows the reply as it stands, on a platform that edits: [`paginate`] of all the text
/// received (while it streams, up to its last whole word), each page posted once and then
/// edited whenever its text changes — so every edit carries all there is, and pages that an
/// earlier, shorter text laid out differently are edited to their final form. Returns
/// whether the platform was called.
async fn render(
    ch: &dyn Channel,
    chat: &ChatRef,
    run: &mut FollowedRun,
    done: bool,
) -> Result<bool, GatewayError> {
    let text = if done {
        run.streamed.as_str()
    } else {
        showable(&run.streamed)
    };
    let mut called = false;
    for (i, page) in paginate(text, ch.max_chars()).into_iter().enumerate() {
        let shown = page.text();
        match run.pages.get(i) {
            Some(p) if p.text == shown || p.id.is_empty() => continue,
            Some(p) => {
                called = true;
                match ch.edit(chat, &p.id, &shown, &[]).await {
                    Ok(()) => {
                        run.pages[i].text = shown;
                        continue;
                    }
                    // Deleted or too old to edit: this page goes on in a new message.
                    Err(e) if permanent(&e) => {
                        tracing::warn!(error = %e, "could not edit the reply; continuing in a new message");
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            None => {}
        }
        called = true;
        let id = match ch.send(chat, &shown, &[]).await {
            Ok(id) => id,
            Err(e) if permanent(&e) => {
                // The chat refuses us (bot blocked, chat gone): this page is dropped rather
                // than retried on every edit.
                tracing::warn!(error = %e, "could not post the reply; dropping it");
                String::new()
            }
            Err(e) => return Err(e.into()),
        };
        let shown = ShownPage { id, text: shown };
        match run.pages.get_mut(i) {
            Some(slot) => *slot = shown,
            None => run.pages.push(shown),
        }
    }
    Ok(called)
}

/// Shows a chunk of reply text on a platform that cannot edit: each flushed chunk is posted,
/// split (fences kept whole) to fit the platform's limit. Platforms that edit go through
/// [`render`] instead.
async fn deliver(
    ch: &dyn Channel,
    chat: &ChatRef,
    run: &mut FollowedRun,
    chunk: &str,
) -> Result<(), GatewayError> {
    if chunk.trim().is_empty() {
        run.streamed.push_str(chunk);
        return Ok(());
    }
    let combined = format!("{}{}", run.streamed, chunk);
    let parts = split_message(&combined, ch.max_chars());
    let single = parts.len() == 1;
    let mut parts = parts.into_iter();
    let Some(first) = parts.next() else {
        return Ok(());
    };
    let edited = match (&run.stream_message, ch.can_edit()) {
        (Some(id), true) => match ch.edit(chat, id, &first, &[]).await {
            Ok(()) => true,
            // The message can no longer be edited (deleted, too old): continue in a new one.
            Err(e) if permanent(&e) => {
                tracing::warn!(error = %e, "could not edit the reply; continuing in a new message");
                false
            }
            Err(e) => return Err(e.into()),
        },
        _ => false,
    };
    if !edited {
        let text = if ch.can_edit() || run.streamed.is_empty() {
            first.clone()
        } else {
            chunk.trim().to_string()
        };
        match ch.send(chat, &text, &[]).await {
            Ok(id) => run.stream_message = Some(id),
            Err(e) if permanent(&e) => {
                // The chat refuses us (bot blocked, chat gone): the reply is dropped rather
                // than retried forever.
                tracing::warn!(error = %e, "could not post the reply; dropping it");
                run.streamed = combined;
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        }
    }
    run.streamed = if single { combined } else { first };
    for part in parts {
        let id = ch.send(chat, &part, &[]).await?;
        run.stream_message = Some(id);
        run.delivered += run.streamed.chars().count();
        run.streamed = part;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(peer: &str, text: &str, context: Option<serde_json::Value>) -> Queued {
        Queued {
            id: 0,
            routing_key: "k".into(),
            channel: "telegram".into(),
            peer: Peer {
                id: peer.into(),
                name: peer.into(),
                username: None,
            },
            chat: ChatRef {
                id: "1".into(),
                kind: ChatKind::Group,
                thread: None,
            },
            text: text.into(),
            context,
        }
    }

    #[test]
    fn batches_attribute_senders_only_when_there_are_several() {
        assert_eq!(
            batch_text(&[q("alice", "one", None), q("alice", "two", None)]),
            "one\n\ntwo"
        );
        assert_eq!(
            batch_text(&[q("alice", "one", None), q("bob", "two", None)]),
            "alice: one\nbob: two"
        );
    }

    #[test]
    fn the_newest_non_empty_context_wins() {
        let items = [
            q("a", "1", Some(serde_json::json!({"n": 1}))),
            q("a", "2", Some(serde_json::json!({"n": 2}))),
            q("a", "3", None),
        ];
        assert_eq!(batch_context(&items), Some(serde_json::json!({"n": 2})));
        assert_eq!(batch_context(&[q("a", "1", None)]), None);
    }

    #[test]
    fn the_remaining_timeout_never_drops_below_the_floor() {
        let now = chrono::Utc::now();
        let floor = Duration::from_secs(60);
        // Plenty left: unchanged (the wait already counted against it).
        let later = now + chrono::Duration::seconds(600);
        assert_eq!(deadline_after_decision(later, now, floor), later);
        // Little or nothing left after a long wait: the floor.
        let soon = now + chrono::Duration::seconds(10);
        assert_eq!(
            deadline_after_decision(soon, now, floor),
            now + chrono::Duration::seconds(60)
        );
        let past = now - chrono::Duration::seconds(300);
        assert_eq!(
            deadline_after_decision(past, now, floor),
            now + chrono::Duration::seconds(60)
        );
    }

    #[test]
    fn commands_and_buttons_parse() {
        assert_eq!(command("/new"), Some(Command::New));
        assert_eq!(command("/stop@switchboard_bot now"), Some(Command::Stop));
        assert_eq!(command("/status"), Some(Command::Status));
        assert_eq!(command("/unknown"), None);
        assert_eq!(command("hello /new"), None);
        assert_eq!(parse_button("ap:abc123:y"), Some(("abc123", true)));
        assert_eq!(parse_button("ap:abc123:n"), Some(("abc123", false)));
        assert_eq!(parse_button("ap:abc123:x"), None);
        assert_eq!(parse_button("other"), None);
        assert!(format!("ap:{}:y", short_id()).len() <= 64);
        assert_eq!(pairing_code().len(), 8);
    }
}
