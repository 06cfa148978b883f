//! The gateway as the settings change it: started at `serve` when a channel is configured,
//! started, restarted or stopped later when the settings add, change or remove channels.
//! Its routes look in one slot the whole time (empty while no channel is configured).

use std::sync::Arc;

use switchboard_gateway::api::GatewaySlot;
use switchboard_gateway::service::GatewayService;
use switchboard_settings::{Host, StartError};
use switchboard_store::Store;

use crate::config::Settings;
use crate::serve::StoreLeases;

pub struct GatewayControl {
    /// Where the gateway's routes find it.
    pub slot: GatewaySlot,
    service: tokio::sync::Mutex<Option<GatewayService>>,
    host: Host,
    store: Arc<dyn Store>,
}

impl GatewayControl {
    /// Starts the gateway when `settings` configure (and enable) a channel.
    pub async fn start(
        settings: &Settings,
        host: Host,
        store: Arc<dyn Store>,
    ) -> Result<Self, StartError> {
        let control = Self {
            slot: GatewaySlot::empty(),
            service: tokio::sync::Mutex::new(None),
            host,
            store,
        };
        control.reload(settings).await?;
        Ok(control)
    }

    /// Runs the channels `settings` configure: the gateway running now stops (what it was
    /// doing stays in its store, and the next one resumes it like a restart would), then
    /// the new one starts in the same slot; with no channel left the slot is emptied.
    pub async fn reload(&self, settings: &Settings) -> Result<(), StartError> {
        let mut service = self.service.lock().await;
        if let Some(old) = service.take() {
            old.stop().await;
        }
        match settings.gateway.as_ref().filter(|g| g.enabled) {
            Some(g) => {
                let started = crate::serve::gateway_settings(settings, g)
                    .start_in(
                        self.slot.clone(),
                        &self.host,
                        Some(StoreLeases(self.store.clone())),
                    )
                    .await?;
                *service = Some(started);
            }
            None => {
                self.slot.take();
            }
        }
        Ok(())
    }

    /// Stops for good (the server is shutting down): approvals rejected, followed runs
    /// cancelled.
    pub async fn shutdown(&self) {
        if let Some(s) = self.service.lock().await.take() {
            s.shutdown().await;
        }
    }
}
