//! The scheduler's settings: the `[scheduler]` section of the configuration file (read by
//! the binary, handed over as it is) and its `SWITCHBOARD_SCHEDULER_*` environment
//! variables, turned into [`SchedulerOptions`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use switchboard_settings::{Host, SettingsError, StartError, env, env_parse};

use crate::{ScheduleStore, Scheduler, SchedulerOptions};

/// `[scheduler]`: scheduled tasks.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulerSection {
    /// How late a due time may be found (the server was busy or restarting) and still run;
    /// later, it counts as missed (default 60).
    pub grace_secs: Option<u64>,
    /// A failed delivery is tried again after this, then twice as long … (default 30).
    pub retry_base_secs: Option<u64>,
    /// Attempts of a delivery before it is failed (default 5).
    pub max_attempts: Option<u32>,
    /// How often due schedules are looked for, in milliseconds (default 1000).
    pub tick_ms: Option<u64>,
}

/// The scheduler's effective settings.
#[derive(Debug, Clone)]
pub struct SchedulerSettings {
    pub grace_secs: u64,
    pub retry_base_secs: u64,
    pub max_attempts: u32,
    pub tick_ms: u64,
    /// Tests only (`SWITCHBOARD_SCHEDULER_CLOCK_FILE`): the scheduler's time is read from
    /// this file.
    pub clock_file: Option<PathBuf>,
}

impl SchedulerSettings {
    /// The section, each key overridden by its environment variable, with the defaults.
    pub fn read(file: &SchedulerSection) -> Result<Self, SettingsError> {
        Ok(Self {
            grace_secs: env_parse("SWITCHBOARD_SCHEDULER_GRACE_SECS")?
                .or(file.grace_secs)
                .unwrap_or(60),
            retry_base_secs: env_parse("SWITCHBOARD_SCHEDULER_RETRY_BASE_SECS")?
                .or(file.retry_base_secs)
                .unwrap_or(30)
                .max(1),
            max_attempts: env_parse("SWITCHBOARD_SCHEDULER_MAX_ATTEMPTS")?
                .or(file.max_attempts)
                .unwrap_or(5)
                .max(1),
            tick_ms: env_parse("SWITCHBOARD_SCHEDULER_TICK_MS")?
                .or(file.tick_ms)
                .unwrap_or(1000)
                .clamp(50, 60_000),
            clock_file: env("SWITCHBOARD_SCHEDULER_CLOCK_FILE").map(PathBuf::from),
        })
    }

    /// The scheduler's options for instance `instance`, its firings leased for `lease`.
    pub fn options(&self, instance: String, lease: Duration) -> SchedulerOptions {
        let mut opts = SchedulerOptions::new(instance);
        opts.tick = Duration::from_millis(self.tick_ms);
        opts.lease = lease;
        opts.grace =
            chrono::TimeDelta::seconds(i64::try_from(self.grace_secs).unwrap_or(i64::MAX / 2));
        opts.retry_base = Duration::from_secs(self.retry_base_secs);
        opts.max_attempts = self.max_attempts;
        if let Some(file) = &self.clock_file {
            tracing::warn!(file = %file.display(), "the scheduler's clock is read from a file (tests only)");
            opts.clock = Arc::new(crate::FileClock(file.clone()));
        }
        opts
    }

    /// Starts the scheduler for `host`: its store (the schema `scheduler` of a PostgreSQL
    /// store, else `scheduler.db` in the data directory) and its tick.
    pub async fn start(&self, host: &Host) -> Result<Scheduler, StartError> {
        let store = ScheduleStore::open_beside(&host.store_url, &host.data_dir)
            .await
            .map_err(|e| {
                StartError::new(
                    "scheduler",
                    format!("opening its store ({}): {e}", host.store_url_redacted),
                )
            })?;
        let client = switchboard_client::Client::new(&host.server_url, Some(host.token.clone()))
            .map_err(|e| StartError::new("scheduler", e))?;
        let opts = self.options(host.instance_id.clone(), host.lease);
        Ok(Scheduler::start(store, client, opts))
    }
}
