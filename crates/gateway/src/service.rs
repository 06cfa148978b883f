//! Starting and stopping the gateway, alone or as one of several instances.
//!
//! Alone on its store (SQLite) the gateway runs at once. On a shared PostgreSQL store exactly
//! one instance runs the channels — the holder of the `gateway` lease — and the others stand
//! by: they store what reaches them over HTTP (webhooks) for the active one, and the first to
//! see the lease run out takes over, resuming queues, followed runs and prompts from the
//! shared store like a restart would. The lease itself is the engine's (in the database the
//! instances share), reached through [`Leases`], which the binary implements.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use switchboard_client::Client;
use tokio_util::sync::CancellationToken;

use switchboard_settings::{Host, StartError};

use crate::api::GatewaySlot;
use crate::settings::GatewaySettings;
use crate::{Channel, Gateway, GatewayConfig, GatewayError, GatewayStore};

/// The lease that elects the instance running the channels.
pub const GATEWAY_LEASE: &str = "gateway";

/// Named leases several instances compete for: taken when free or run out, renewed by their
/// holder, given back.
#[async_trait]
pub trait Leases: Send + Sync + 'static {
    /// A held lease.
    type Lease: Clone + Send + Sync + 'static;
    /// Takes `name` for `holder` for `ttl`: `None` while another instance holds it.
    async fn acquire(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Self::Lease>, String>;
    /// Extends a held lease by `ttl`; `false` when it was taken over meanwhile.
    async fn renew(&self, lease: &Self::Lease, ttl: Duration) -> Result<bool, String>;
    /// Gives a held lease back.
    async fn release(&self, lease: &Self::Lease) -> Result<(), String>;
}

/// What a gateway is built from (and built again from at each change of role).
#[derive(Clone)]
pub struct GatewayParts {
    pub config: GatewayConfig,
    pub client: Client,
    pub store: GatewayStore,
    pub channels: Vec<Arc<dyn Channel>>,
}

impl GatewayParts {
    fn standby(&self) -> Gateway {
        Gateway::standby(
            self.config.clone(),
            self.client.clone(),
            self.store.clone(),
            self.channels.clone(),
        )
    }

    async fn active(&self) -> Result<Gateway, GatewayError> {
        Gateway::start(
            self.config.clone(),
            self.client.clone(),
            self.store.clone(),
            self.channels.clone(),
        )
        .await
    }
}

/// How an instance on a shared store competes for the channels.
pub struct Election<L> {
    pub leases: L,
    /// This instance, as the lease's holder.
    pub instance: String,
    /// The lease's length: a dead holder is replaced soon after it.
    pub ttl: Duration,
}

/// This instance's gateway: running, or standing by for the lease.
pub struct GatewayService {
    pub slot: GatewaySlot,
    election: Option<(CancellationToken, tokio::task::JoinHandle<()>)>,
}

impl GatewayService {
    /// Starts the gateway in a slot of its own: see [`GatewayService::start_in`].
    pub async fn start<L: Leases>(
        parts: GatewayParts,
        election: Option<Election<L>>,
    ) -> Result<Self, GatewayError> {
        Self::start_in(GatewaySlot::empty(), parts, election).await
    }

    /// Starts the gateway in `slot` (where the routes find it): at once when its store is
    /// its own (SQLite, or no `election`); on a shared store, standing by until `election`
    /// wins the lease.
    pub async fn start_in<L: Leases>(
        slot: GatewaySlot,
        parts: GatewayParts,
        election: Option<Election<L>>,
    ) -> Result<Self, GatewayError> {
        for c in &parts.channels {
            tracing::debug!(channel = %c.name(), "chat channel configured");
        }
        let election = election.filter(|_| parts.store.kind() == "postgres");
        let Some(election) = election else {
            let gw = parts.active().await?;
            slot.replace(gw);
            return Ok(Self {
                slot,
                election: None,
            });
        };
        slot.replace(parts.standby());
        let cancel = CancellationToken::new();
        let task = tokio::spawn(elect(parts, slot.clone(), election, cancel.clone()));
        Ok(Self {
            slot,
            election: Some((cancel, task)),
        })
    }

    /// Stops the gateway. Alone: pending approvals are rejected and followed runs cancelled.
    /// Sharing: the active gateway stops and gives its lease back, so a standby instance
    /// takes over at once and finds everything as it was.
    pub async fn shutdown(self) {
        match self.election {
            None => {
                if let Some(gw) = self.slot.get() {
                    gw.shutdown().await;
                }
            }
            Some((cancel, task)) => {
                cancel.cancel();
                let _ = task.await;
            }
        }
    }

    /// Stops the gateway to start it again with other settings: its channels and workers
    /// end, and approvals, followed runs and queues stay in the store for the next one
    /// (which resumes them like a restart would); a held lease is given back. The slot keeps
    /// the stopped gateway until the next one replaces it.
    pub async fn stop(self) {
        match self.election {
            None => {
                if let Some(gw) = self.slot.get() {
                    gw.stop().await;
                }
            }
            Some((cancel, task)) => {
                cancel.cancel();
                let _ = task.await;
            }
        }
    }
}

impl GatewaySettings {
    /// Starts the configured channels for `host`: the gateway's store (the schema `gateway`
    /// of a PostgreSQL store, shared by every instance, else `gateway.db` in the data
    /// directory), its API client, and — on a shared store — the election over `leases`.
    pub async fn start<L: Leases>(
        &self,
        host: &Host,
        leases: Option<L>,
    ) -> Result<GatewayService, StartError> {
        self.start_in(GatewaySlot::empty(), host, leases).await
    }

    /// [`GatewaySettings::start`] in `slot`, where the routes already look (the settings
    /// change the channels while serving).
    pub async fn start_in<L: Leases>(
        &self,
        slot: GatewaySlot,
        host: &Host,
        leases: Option<L>,
    ) -> Result<GatewayService, StartError> {
        let fail = |e: String| StartError::new("gateway", e);
        let store = GatewayStore::open_beside(&host.store_url, &host.data_dir)
            .await
            .map_err(|e| {
                fail(format!(
                    "opening its store ({}): {e}",
                    host.store_url_redacted
                ))
            })?;
        let client = Client::new(&host.server_url, Some(host.token.clone()))
            .map_err(|e| fail(e.to_string()))?;
        let parts = GatewayParts {
            config: self.config.clone(),
            client,
            store,
            channels: self.channels().map_err(|e| fail(e.to_string()))?,
        };
        let election = leases.map(|leases| Election {
            leases,
            instance: host.instance_id.clone(),
            ttl: host.lease,
        });
        GatewayService::start_in(slot, parts, election)
            .await
            .map_err(|e| fail(e.to_string()))
    }
}

/// Takes the gateway lease when it is free (or has run out), renews it while active, and
/// steps down when it cannot: when the lease was taken over, or when renewing has failed
/// for two thirds of a lease (the others may take it over from then on).
async fn elect<L: Leases>(
    parts: GatewayParts,
    slot: GatewaySlot,
    election: Election<L>,
    cancel: CancellationToken,
) {
    let Election {
        leases,
        instance: me,
        ttl,
    } = election;
    let mut held: Option<(L::Lease, Instant)> = None;
    loop {
        let step_down = match &held {
            None => {
                match leases.acquire(GATEWAY_LEASE, &me, ttl).await {
                    Ok(Some(lease)) => match parts.active().await {
                        Ok(gw) => {
                            tracing::info!(instance = %me, "gateway lease taken: running the chat channels");
                            metrics::counter!("switchboard_lease_takeovers_total", "lease" => "gateway").increment(1);
                            if let Some(old) = slot.replace(gw) {
                                old.stop().await;
                            }
                            held = Some((lease, Instant::now()));
                        }
                        Err(e) => {
                            tracing::error!(error = %e, "could not start the gateway");
                            let _ = leases.release(&lease).await;
                        }
                    },
                    Ok(None) => {}
                    Err(e) => tracing::warn!(error = %e, "taking the gateway lease failed"),
                }
                false
            }
            Some((lease, renewed)) => {
                let started = Instant::now();
                // Bounded, and timed from before the call: the lease may run out (and be
                // taken over) from then on, so step down well before a lease has passed.
                let result = tokio::time::timeout(ttl / 4, leases.renew(lease, ttl)).await;
                match result {
                    Ok(Ok(true)) => {
                        held = Some((lease.clone(), started));
                        false
                    }
                    Ok(Ok(false)) => {
                        tracing::warn!(instance = %me, "gateway lease taken over by another instance: standing by");
                        true
                    }
                    failed if renewed.elapsed() >= ttl * 2 / 3 => {
                        tracing::warn!(outcome = ?failed.map(|r| r.map(|_| ())), "gateway lease not renewed for two thirds of a lease: standing by");
                        true
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "renewing the gateway lease failed");
                        false
                    }
                    Err(_) => {
                        tracing::warn!("renewing the gateway lease timed out");
                        false
                    }
                }
            }
        };
        if step_down {
            held = None;
            if let Some(old) = slot.replace(parts.standby()) {
                old.stop().await;
            }
        }
        // Renew every third of the lease; while standing by, try every eighth, so that a
        // dead holder is replaced soon after its lease runs out.
        let period = if held.is_some() { ttl / 3 } else { ttl / 8 };
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tokio::time::sleep(period) => {}
        }
    }
    // Shutting down: hand over at once.
    if let Some((lease, _)) = held {
        if let Some(gw) = slot.get() {
            gw.stop().await;
        }
        if let Err(e) = leases.release(&lease).await {
            tracing::warn!(error = %e, "giving the gateway lease back failed");
        }
    }
}
