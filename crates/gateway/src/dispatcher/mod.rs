//! The dispatcher: inbound chat messages to session runs, and runs' events back to chats.
//!
//! Everything goes through the store first: an inbound message is queued durably before the
//! channel acknowledges it; one worker per routing key takes the queue, starts a run (all
//! queued messages as one, with sender attribution), and follows the run's event log from a
//! stored cursor, streaming the reply by editing one message and showing approval prompts.
//! A restart resumes each route where its cursor stood: nothing lost, nothing posted twice.

use parking_lot::Mutex as SyncMutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use switchboard_client::{Client, ClientError};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::channel::{Channel, ChannelContext, Inbound, InboundSink};
use crate::config::GatewayConfig;
use crate::store::{GatewayStore, NamespacedState};

mod activity;
mod answers;
mod approvals;
mod batch;
mod commands;
mod follow;
mod inbound;
mod ledger;
mod schedules;
mod worker;

pub use approvals::AskOutcome;
use approvals::*;
use batch::*;
pub use batch::{batch_context, batch_text};
use commands::*;
use follow::*;
use switchboard_protocol::RejectionCause;
use worker::*;
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
    workers: SyncMutex<HashMap<String, mpsc::UnboundedSender<()>>>,
    /// Wakes the press handler.
    presses: mpsc::UnboundedSender<()>,
    /// Prompts settled while they were being posted (see `approvals::Unposted`).
    pub(crate) unposted: SyncMutex<HashMap<String, approvals::Unposted>>,
    pub cancel: CancellationToken,
    /// Every task the gateway spawned and has not reaped yet. Finished ones are reaped at
    /// each spawn: a task's memory lives until it is joined, and the gateway spawns a few
    /// per chat message (the soak found a `Vec` of handles growing by ~3 KB a message).
    tasks: SyncMutex<tokio::task::JoinSet<()>>,
    /// A standby gateway (another instance holds the gateway lease) stores what reaches it
    /// over HTTP — webhooks, pushes — but runs no channel, worker or press handler: the
    /// active instance's scan picks the stored work up.
    standby: bool,
    /// For the speech service (`[speech]`).
    pub speech_http: reqwest::Client,
    /// When each channel last received anything, and which are deaf (`hearing.rs`).
    pub hearing: Arc<crate::hearing::Hearing>,
}

/// The running gateway. Cheap to clone.
#[derive(Clone)]
pub struct Gateway {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("gateway store: {0}")]
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
        gw.spawn(ledger::prune_loop(gw.clone()));
        gw.spawn(gw.inner.hearing.clone().watch(
            gw.channels(),
            gw.inner.config.deaf_after,
            gw.inner.cancel.clone(),
        ));
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
        // Each channel notes its chats' outbound activity.
        let channels = channels
            .into_iter()
            .map(|c| {
                let tracked: Arc<dyn Channel> = Arc::new(activity::Tracked {
                    inner: c,
                    store: store.clone(),
                });
                (tracked.name().to_string(), tracked)
            })
            .collect();
        let gw = Gateway {
            inner: Arc::new(Inner {
                client,
                store,
                config,
                channels,
                workers: SyncMutex::default(),
                presses: press_tx,
                unposted: SyncMutex::new(HashMap::new()),
                cancel: CancellationToken::new(),
                tasks: SyncMutex::default(),
                standby,
                speech_http: reqwest::Client::builder()
                    .connect_timeout(crate::platform::CONNECT_TIMEOUT)
                    .build()
                    .unwrap_or_default(),
                hearing: Arc::default(),
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
        let mut tasks = std::mem::take(&mut *self.inner.tasks.lock());
        // Tasks end at the next await that watches the cancel token; one in the middle of
        // taking a message (seen, then queued) gets a moment to finish it. Aborted only
        // after that.
        let joined = async {
            while let Some(done) = tasks.join_next().await {
                log_panic(done);
            }
        };
        if tokio::time::timeout(STOP_GRACE, joined).await.is_err() {
            tasks.abort_all();
        }
    }

    fn spawn(&self, fut: impl std::future::Future<Output = ()> + Send + 'static) {
        let mut tasks = self.inner.tasks.lock();
        while let Some(done) = tasks.try_join_next() {
            log_panic(done);
        }
        tasks.spawn(fut);
    }

    /// Tasks spawned and not reaped yet (finished ones are reaped at the next spawn).
    #[cfg(test)]
    pub(crate) fn task_count(&self) -> usize {
        self.inner.tasks.lock().len()
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
        let mut map = self.inner.workers.lock();
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
                    self.settle_prompt(
                        &p,
                        false,
                        RejectionCause::Restart,
                        "gateway shutting down",
                        None,
                    ),
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
        std::mem::take(&mut *self.inner.tasks.lock()).abort_all();
    }
}

/// A gateway task that panicked says so in the log (its work is picked up again by the
/// next scan or restart, as after a crash).
fn log_panic(done: Result<(), tokio::task::JoinError>) {
    if let Err(e) = done
        && e.is_panic()
    {
        tracing::error!(error = %e, "a gateway task panicked");
    }
}

#[async_trait]
impl InboundSink for Gateway {
    async fn accept(&self, item: Inbound) -> Result<(), String> {
        self.inner.hearing.heard(match &item {
            Inbound::Message(m) => &m.channel,
            Inbound::Press(p) => &p.channel,
            Inbound::Reaction(r) => &r.channel,
        });
        match item {
            Inbound::Message(m) => self.on_message(m).await.map_err(|e| e.to_string()),
            // A platform may deliver a press or a reaction again (Meta resends a whole
            // delivery after a 5xx, and sometimes after a 200): each is taken once, by its
            // id, like messages.
            Inbound::Press(p) => {
                let id = format!("press:{}", p.press_id);
                if !self.first_time(&p.channel, &p.chat.id, &id).await? {
                    return Ok(());
                }
                if let Err(e) = self.inner.store.push_press(&p).await {
                    let _ = self
                        .inner
                        .store
                        .forget_seen(&p.channel, &p.chat.id, &id)
                        .await;
                    return Err(e.to_string());
                }
                let _ = self.inner.presses.send(());
                Ok(())
            }
            Inbound::Reaction(r) => {
                let id = format!("reaction:{}", r.reaction_id);
                if !self.first_time(&r.channel, &r.chat.id, &id).await? {
                    return Ok(());
                }
                let (channel, chat) = (r.channel.clone(), r.chat.id.clone());
                let done = self.on_reaction(r).await.map_err(|e| e.to_string());
                if done.is_err() {
                    let _ = self.inner.store.forget_seen(&channel, &chat, &id).await;
                }
                done
            }
        }
    }
}

impl Gateway {
    /// Whether an inbound item's `id` is seen for the first time (see
    /// [`GatewayStore::first_seen`]); an empty id cannot be told apart, so it counts as new.
    async fn first_time(&self, channel: &str, chat: &str, id: &str) -> Result<bool, String> {
        if id.ends_with(':') {
            return Ok(true);
        }
        let first = self
            .inner
            .store
            .first_seen(channel, chat, id)
            .await
            .map_err(|e| e.to_string())?;
        if !first {
            tracing::info!(%channel, %id, "press or reaction seen before; dropped");
        }
        Ok(first)
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

#[cfg(test)]
mod tests;

#[cfg(test)]
mod prop_tests;
