//! The running scheduler: a tick that claims due firings, and one task per open firing that
//! starts its run, follows it to its end (answering its approvals as the schedule says) and
//! delivers the result through the gateway, retrying with back-off.
//!
//! It is a surface like the gateway: sessions and runs are reached through the `/v1` API
//! ([`Client`]), results are sent with `POST /v1/gateway/send`. Everything it knows is in the
//! [`ScheduleStore`], so a restart (or another instance, once the owner's lease has run
//! out) carries on where it stopped:
//! - a firing claimed but not started is started;
//! - a firing whose run was not recorded (a crash while or after its message was sent)
//!   sends it again under the firing's idempotency key (`schedule:<id>:firing:<id>`): the
//!   session answers the run it started for it, or starts it now — exactly once;
//! - a run being followed is followed again from its session's log;
//! - pending deliveries are tried again at their time.

use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use switchboard_client::{Client, ClientError};
use switchboard_client::{RunEnd, RunStep};
use switchboard_protocol::gateway::{GatewayAskRequest, GatewaySendRequest};
use switchboard_protocol::schedules::{
    Delivery, DeliveryStatus, Firing, FiringStatus, Schedule, ScheduleApprovals, ScheduleSpec,
    UpdateScheduleRequest,
};
use switchboard_protocol::{
    CreateSessionRequest, DecisionAction, MessageType, SendMessageRequest, ToolDecision,
    ToolDecisionsRequest,
};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::clock::Clock;
use crate::plan::{Policy, plan_tick};
use crate::spec::{self, SpecError, parse_target, trigger_spec};
use crate::store::{FiringRow, ScheduleRow, ScheduleStore, StoreError, is_open};
use crate::when::Trigger;
use switchboard_protocol::RejectionCause;

mod approvals;
mod firing;
mod operations;

use approvals::Asked;

/// How much of a reply a firing keeps (and delivers).
const MAX_REPLY_CHARS: usize = 16_000;
/// Firings listed by [`Scheduler::firings`].
pub const HISTORY_LIMIT: u32 = 200;
/// Why a scheduled run's tool call was rejected.
const DENIED: &str = "this run is scheduled and nobody is watching: the schedule's approvals deny tool calls that ask";
/// Tries to start a run before the firing fails, when the server answers with a transient
/// error.
const START_ATTEMPTS: u32 = 10;

/// How the scheduler runs.
#[derive(Clone)]
pub struct SchedulerOptions {
    /// This instance's name, the owner of the firings it works on.
    pub instance: String,
    /// How often due schedules are looked for.
    pub tick: Duration,
    /// How long a firing stays with an instance that stopped renewing it.
    pub lease: Duration,
    /// How late a due time may be found and still run (beyond it, it was missed).
    pub grace: TimeDelta,
    /// A failed delivery is tried again after `retry_base`, then twice that, and so on.
    pub retry_base: Duration,
    /// Attempts of a delivery before it is failed (it can then be retried by hand).
    pub max_attempts: u32,
    pub clock: Arc<dyn Clock>,
}

impl SchedulerOptions {
    pub fn new(instance: impl Into<String>) -> Self {
        Self {
            instance: instance.into(),
            tick: Duration::from_secs(1),
            lease: Duration::from_secs(30),
            grace: TimeDelta::seconds(60),
            retry_base: Duration::from_secs(30),
            max_attempts: 5,
            clock: Arc::new(crate::clock::SystemClock),
        }
    }
}

/// What the scheduler's operations fail with.
#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error("no schedule {0}")]
    NotFound(Uuid),
    #[error("no firing {0} of that schedule")]
    FiringNotFound(Uuid),
    #[error("{0}")]
    Conflict(String),
    #[error("scheduler store: {0}")]
    Store(#[from] StoreError),
}

/// The scheduler. Cheap to clone.
#[derive(Clone)]
pub struct Scheduler {
    inner: Arc<Inner>,
}

struct Inner {
    store: ScheduleStore,
    client: Client,
    opts: SchedulerOptions,
    /// Firings with a task on this instance.
    driving: Mutex<HashSet<Uuid>>,
    cancel: CancellationToken,
    tasks: tokio_util::task::TaskTracker,
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
    t.push('…');
    t
}

/// The trigger of a stored schedule.
fn trigger_of(row: &ScheduleRow) -> Result<Trigger, SpecError> {
    Trigger::parse_stored(&trigger_spec(&row.spec), row.created_at).map_err(|e| SpecError {
        code: "invalid_trigger",
        field: e.field.to_string(),
        message: e.message,
    })
}

/// The API view of a stored schedule.
pub fn view(row: &ScheduleRow) -> Schedule {
    Schedule {
        id: row.id,
        name: spec::display_name(&row.spec),
        trigger: spec::describe(&row.spec),
        spec: row.spec.clone(),
        paused: row.paused,
        next_due: if row.paused { None } else { row.next_due },
        created_at: row.created_at,
        updated_at: row.updated_at,
    }
}

fn new_firing(schedule_id: Uuid, due_at: DateTime<Utc>, status: FiringStatus) -> Firing {
    Firing {
        id: Uuid::new_v4(),
        schedule_id,
        due_at,
        manual: false,
        status,
        skip_reason: None,
        more_skipped: 0,
        started_at: None,
        finished_at: None,
        session_id: None,
        run_id: None,
        outcome: None,
        reply: None,
        rejected_tools: Vec::new(),
        deliveries: Vec::new(),
    }
}

impl Scheduler {
    /// Starts the tick on `store`, reaching the server with `client`.
    pub fn start(store: ScheduleStore, client: Client, opts: SchedulerOptions) -> Self {
        let s = Self {
            inner: Arc::new(Inner {
                store,
                client,
                opts,
                driving: Mutex::new(HashSet::new()),
                cancel: CancellationToken::new(),
                tasks: tokio_util::task::TaskTracker::new(),
            }),
        };
        let me = s.clone();
        s.inner.tasks.spawn(async move { me.run().await });
        s
    }

    pub fn store(&self) -> &ScheduleStore {
        &self.inner.store
    }

    fn now(&self) -> DateTime<Utc> {
        self.inner.opts.clock.now()
    }

    fn lease_until(&self) -> DateTime<Utc> {
        Utc::now() + TimeDelta::from_std(self.inner.opts.lease).unwrap_or(TimeDelta::seconds(30))
    }

    /// Stops the tick and the firing tasks; their firings stay open in the store and are
    /// carried on by the next start (or another instance).
    pub async fn shutdown(&self) {
        self.inner.cancel.cancel();
        self.inner.tasks.close();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.inner.tasks.wait()).await;
    }

    async fn run(&self) {
        // Alone on a SQLite store, this instance may take every open firing at once: their
        // owner was an earlier run of this server.
        let mut first = self.inner.store.kind() == "sqlite";
        loop {
            self.tick(first).await;
            first = false;
            tokio::select! {
                _ = self.inner.cancel.cancelled() => return,
                _ = tokio::time::sleep(self.inner.opts.tick) => {}
            }
        }
    }

    /// One tick: claim what is due, then work on the open firings this instance owns (or
    /// takes over).
    pub async fn tick(&self, take_all: bool) {
        let now = self.now();
        match self.inner.store.due(now).await {
            Ok(rows) => {
                for row in rows {
                    if let Err(e) = self.plan(&row, now).await {
                        tracing::warn!(schedule = %row.id, error = %e, "planning a schedule failed");
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "reading due schedules failed"),
        }
        let wall = if take_all {
            DateTime::<Utc>::MAX_UTC
        } else {
            Utc::now()
        };
        let open = match self
            .inner
            .store
            .take_open(&self.inner.opts.instance, wall, self.lease_until())
            .await
        {
            Ok(open) => open,
            Err(e) => {
                tracing::warn!(error = %e, "reading open firings failed");
                return;
            }
        };
        for f in open {
            self.drive(f);
        }
    }

    /// Claims a due schedule's tick: its skipped firings and the one to run.
    async fn plan(&self, row: &ScheduleRow, now: DateTime<Utc>) -> Result<(), SchedulerError> {
        let Some(due) = row.next_due else {
            return Ok(());
        };
        let trigger = match trigger_of(row) {
            Ok(t) => t,
            Err(e) => {
                tracing::error!(schedule = %row.id, error = %e, "a stored schedule no longer parses: it will not fire");
                let mut row = row.clone();
                row.next_due = None;
                self.inner.store.update_schedule(&row).await?;
                return Ok(());
            }
        };
        let active = self.inner.store.active(row.id).await?;
        let policy = Policy {
            missed: row.spec.missed,
            overlap: row.spec.overlap,
            grace: self.inner.opts.grace,
        };
        let mut tick = plan_tick(&trigger, due, now, policy, !active.is_empty());
        // One firing waits at most: a queue that grows while runs are slower than the
        // schedule would be a burst later.
        if tick.queued
            && active
                .iter()
                .any(|f| f.firing.status == FiringStatus::Queued)
            && let Some(t) = tick.fire.take()
        {
            tick.skipped
                .push((t, switchboard_protocol::schedules::SkipReason::Overlap));
            tick.queued = false;
        }
        let mut rows: Vec<FiringRow> = tick
            .skipped
            .iter()
            .map(|(t, why)| {
                let mut f = new_firing(row.id, *t, FiringStatus::Skipped);
                f.skip_reason = Some(*why);
                FiringRow::new(f)
            })
            .collect();
        if let Some(last) = rows.last_mut() {
            last.firing.more_skipped = tick.more_skipped;
        }
        if let Some(t) = tick.fire {
            let status = if tick.queued {
                FiringStatus::Queued
            } else {
                FiringStatus::Starting
            };
            rows.push(FiringRow::new(new_firing(row.id, t, status)));
        }
        let claimed = self
            .inner
            .store
            .claim(
                row.id,
                due,
                tick.next,
                &rows,
                &self.inner.opts.instance,
                self.lease_until(),
            )
            .await?;
        if claimed {
            for f in &rows {
                match f.firing.status {
                    FiringStatus::Skipped => {
                        tracing::info!(schedule = %row.id, due = %f.firing.due_at, reason = ?f.firing.skip_reason, "firing skipped")
                    }
                    _ => tracing::info!(schedule = %row.id, due = %f.firing.due_at, "firing"),
                }
            }
        }
        Ok(())
    }

    /// Starts a task for an open firing, unless one runs already.
    fn drive(&self, f: FiringRow) {
        if !self.inner.driving.lock().insert(f.firing.id) {
            return;
        }
        let me = self.clone();
        self.inner.tasks.spawn(async move {
            let id = f.firing.id;
            // Read again now that this task has the firing: the copy the tick read may
            // predate the end of the firing's previous worker (which saved it delivered and
            // left `driving` since), and acting on it delivered a result twice.
            let fresh = match me.inner.store.firing(id).await {
                // Closed meanwhile (done and delivered): nothing to do. Saves are guarded
                // by owner, so a firing another instance took is not acted on either.
                Ok(Some(fresh)) if fresh.open => Some(fresh),
                Ok(_) => None,
                Err(e) => {
                    tracing::warn!(firing = %id, error = %e, "reading a firing failed");
                    None
                }
            };
            if let Some(f) = fresh {
                tokio::select! {
                    _ = me.inner.cancel.cancelled() => {}
                    _ = me.work(f) => {}
                }
            }
            me.inner.driving.lock().remove(&id);
        });
    }

    /// Saves a firing; false when this instance no longer owns it.
    async fn save(&self, f: &mut FiringRow) -> bool {
        f.open = is_open(&f.firing);
        loop {
            match self
                .inner
                .store
                .save_firing(f, &self.inner.opts.instance)
                .await
            {
                Ok(owned) => {
                    if !owned {
                        tracing::warn!(firing = %f.firing.id, "firing taken over by another instance");
                    }
                    return owned;
                }
                Err(e) => {
                    tracing::warn!(firing = %f.firing.id, error = %e, "saving a firing failed; trying again");
                    tokio::time::sleep(self.inner.opts.tick).await;
                }
            }
        }
    }
}

/// The message a firing delivers.
pub fn result_text(name: &str, f: &Firing) -> String {
    let mut text = match f.status {
        FiringStatus::Succeeded => format!(
            "⏰ {name}\n\n{}",
            f.reply.as_deref().unwrap_or("(the agent gave no reply)")
        ),
        FiringStatus::Cancelled => format!("⏰ {name}: the run was cancelled."),
        _ => {
            let mut t = format!(
                "⏰ {name} failed: {}",
                f.outcome.as_deref().unwrap_or("unknown error")
            );
            if let Some(r) = &f.reply {
                t.push_str("\n\n");
                t.push_str(r);
            }
            t
        }
    };
    if !f.rejected_tools.is_empty() {
        text.push_str(&format!(
            "\n\n(Not run, without approval: {})",
            f.rejected_tools.join(", ")
        ));
    }
    text
}
