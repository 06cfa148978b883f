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

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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

/// A question asked in a chat for a scheduled run's waiting calls.
struct Asked {
    prompt_id: String,
    ids: Vec<String>,
    /// On the scheduler's clock.
    deadline: DateTime<Utc>,
    reason: String,
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
        if !lock(&self.inner.driving).insert(f.firing.id) {
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
            lock(&me.inner.driving).remove(&id);
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

    /// Works on a firing until nothing is left to do on it (or it is lost to another
    /// instance).
    async fn work(&self, mut f: FiringRow) {
        let mut start_attempts = 0;
        loop {
            match f.firing.status {
                FiringStatus::Queued => {
                    let active = match self.inner.store.active(f.firing.schedule_id).await {
                        Ok(a) => a,
                        Err(e) => {
                            tracing::warn!(error = %e, "reading a schedule's firings failed");
                            Vec::new()
                        }
                    };
                    if active.first().is_none_or(|a| a.firing.id == f.firing.id) {
                        f.firing.status = FiringStatus::Starting;
                        if !self.save(&mut f).await {
                            return;
                        }
                        continue;
                    }
                    tokio::time::sleep(self.inner.opts.tick).await;
                }
                FiringStatus::Starting => match self.start_run(&mut f).await {
                    Ok(()) => {
                        if !self.save(&mut f).await {
                            return;
                        }
                    }
                    Err(e) if e.is_transient() && start_attempts + 1 < START_ATTEMPTS => {
                        start_attempts += 1;
                        tracing::warn!(firing = %f.firing.id, error = %e, "starting a scheduled run failed; trying again");
                        tokio::time::sleep(self.inner.opts.tick * 2).await;
                    }
                    Err(e) => {
                        self.finish(
                            &mut f,
                            FiringStatus::Failed,
                            format!("could not start the run: {e}"),
                        )
                        .await;
                        if !self.save(&mut f).await {
                            return;
                        }
                    }
                },
                FiringStatus::Running => {
                    self.follow(&mut f).await;
                    if !self.save(&mut f).await {
                        return;
                    }
                }
                _ => {
                    if !f
                        .firing
                        .deliveries
                        .iter()
                        .any(|d| d.status == DeliveryStatus::Pending)
                    {
                        self.save(&mut f).await;
                        return;
                    }
                    if self.deliver(&mut f).await && !self.save(&mut f).await {
                        return;
                    }
                    if f.firing
                        .deliveries
                        .iter()
                        .any(|d| d.status == DeliveryStatus::Pending)
                    {
                        tokio::time::sleep(self.inner.opts.tick).await;
                    }
                }
            }
        }
    }

    /// Ends a firing's run part: status, outcome, and the deliveries to make.
    async fn finish(&self, f: &mut FiringRow, status: FiringStatus, outcome: String) {
        f.firing.status = status;
        f.firing.outcome = Some(outcome);
        f.firing.finished_at = Some(self.now());
        let targets = match self.inner.store.schedule(f.firing.schedule_id).await {
            Ok(Some(s)) => s.spec.deliver,
            _ => Vec::new(),
        };
        f.firing.deliveries = targets
            .into_iter()
            .map(|target| Delivery {
                target,
                status: DeliveryStatus::Pending,
                attempts: 0,
                error: None,
                message_id: None,
                next_attempt_at: None,
                delivered_at: None,
            })
            .collect();
    }

    /// Creates the session (or picks the fixed one) and sends the prompt as a follow-up;
    /// the firing is then `running`. Saves the steps a restart must not repeat.
    async fn start_run(&self, f: &mut FiringRow) -> Result<(), ClientError> {
        let Some(row) = self
            .inner
            .store
            .schedule(f.firing.schedule_id)
            .await
            .ok()
            .flatten()
        else {
            self.finish(f, FiringStatus::Failed, "the schedule was deleted".into())
                .await;
            return Ok(());
        };
        let spec = &row.spec;
        let client = &self.inner.client;
        // A firing interrupted while its message was being sent (or after, before its run
        // was recorded) sends it again under the same idempotency key: the session answers
        // the run it started for it, or starts it now — exactly once either way.
        let session = match (spec.session_id, f.firing.session_id) {
            (Some(fixed), _) => fixed,
            // Made for this firing before a restart.
            (None, Some(made)) => made,
            (None, None) => {
                let auto_approve = match spec.approvals {
                    ScheduleApprovals::AutoApprove => spec.auto_approve.clone(),
                    ScheduleApprovals::Deny | ScheduleApprovals::Ask => None,
                };
                let created = client
                    .create_session(&CreateSessionRequest {
                        title: Some(format!("⏰ {}", spec::display_name(spec))),
                        cwd: spec.cwd.clone(),
                        backend: spec.backend.clone(),
                        model: spec.model.clone(),
                        permission_mode: spec.permission_mode,
                        auto_approve,
                        mcp_servers: None,
                    })
                    .await?;
                f.firing.session_id = Some(created.id);
                if !self.save(f).await {
                    return Ok(());
                }
                created.id
            }
        };
        f.firing.session_id = Some(session);
        let sent = client
            .send_message_once(
                session,
                &SendMessageRequest::user(spec.prompt.clone(), MessageType::FollowUp),
                &format!("schedule:{}:firing:{}", f.firing.schedule_id, f.firing.id),
            )
            .await;
        let sent = match sent {
            Ok(s) => s,
            Err(e) => {
                // Refused: nothing was sent, so a retry may send it.
                f.firing.outcome = None;
                return Err(e);
            }
        };
        f.firing.run_id = Some(sent.run_id);
        f.firing.status = FiringStatus::Running;
        f.firing.started_at = Some(self.now());
        f.firing.outcome = None;
        Ok(())
    }

    /// Follows a firing's run to its end from its session's log, answering the approvals
    /// it waits for as the schedule says.
    async fn follow(&self, f: &mut FiringRow) {
        let (Some(session), Some(run)) = (f.firing.session_id, f.firing.run_id) else {
            self.finish(f, FiringStatus::Failed, "no run recorded".into())
                .await;
            return;
        };
        let spec = match self.inner.store.schedule(f.firing.schedule_id).await {
            Ok(Some(row)) => Some(row.spec),
            _ => None,
        };
        let mut steps = self.inner.client.follow_run(session, run, None);
        let mut reply: Option<String> = None;
        // Questions asked in a chat (`approvals = ask`) that wait for an answer.
        let mut asked: Vec<Asked> = Vec::new();
        loop {
            let step = tokio::select! {
                step = steps.next() => step,
                _ = tokio::time::sleep(self.inner.opts.tick), if !asked.is_empty() => {
                    self.expire_asked(&mut asked, session, run).await;
                    continue;
                }
            };
            let step = match step {
                Some(Ok(step)) => step,
                Some(Err(e)) => {
                    // Refused for good (not a 404: that ends the run as `SessionGone`).
                    tracing::warn!(firing = %f.firing.id, error = %e, "following a scheduled run");
                    break;
                }
                None => break,
            };
            match step.kind {
                RunStep::ToolsWaiting(calls) => {
                    let tool_call_ids: Vec<String> = calls.into_iter().map(|c| c.id).collect();
                    let ask = spec
                        .as_ref()
                        .filter(|s| s.approvals == ScheduleApprovals::Ask);
                    match ask {
                        Some(spec) => {
                            if let Some(a) = self.ask(f, spec, session, run, &tool_call_ids).await {
                                asked.push(a);
                            }
                        }
                        None => self.reject(f, session, run, &tool_call_ids, DENIED).await,
                    }
                }
                RunStep::ToolStarted { call, .. } => {
                    self.close_asked(&mut asked, &call.id).await;
                }
                RunStep::ToolRejected { call, .. } => {
                    // A call proposed before the follower began is named by its id.
                    let name = if call.name.is_empty() {
                        call.id.clone()
                    } else {
                        call.name.clone()
                    };
                    if !f.firing.rejected_tools.contains(&name) {
                        f.firing.rejected_tools.push(name);
                    }
                    self.close_asked(&mut asked, &call.id).await;
                }
                RunStep::TextComplete(text) if !text.trim().is_empty() => {
                    reply = Some(truncate(&text, MAX_REPLY_CHARS));
                }
                RunStep::Ended(RunEnd::Completed { stop_reason, .. }) => {
                    f.firing.reply = reply;
                    let status = if stop_reason == switchboard_protocol::StopReason::Cancelled {
                        FiringStatus::Cancelled
                    } else {
                        FiringStatus::Succeeded
                    };
                    self.finish(f, status, stop_reason.to_string()).await;
                    return;
                }
                RunStep::Ended(RunEnd::Failed { error, .. }) => {
                    f.firing.reply = reply;
                    self.finish(f, FiringStatus::Failed, error).await;
                    return;
                }
                RunStep::Ended(RunEnd::SessionGone) => {
                    self.finish(f, FiringStatus::Failed, "the session was deleted".into())
                        .await;
                    return;
                }
                _ => {}
            }
        }
        // The stream ended (shutdown): the firing stays running, followed again later.
    }

    /// Rejects waiting calls (recorded as not run when their rejection is seen).
    async fn reject(&self, f: &FiringRow, session: Uuid, run: Uuid, ids: &[String], why: &str) {
        let decisions = ids
            .iter()
            .map(|id| {
                (
                    id.clone(),
                    ToolDecision {
                        action: DecisionAction::Reject,
                        content: Some(why.into()),
                        by: None,
                        cause: Some(RejectionCause::Policy),
                    },
                )
            })
            .collect();
        if let Err(e) = self
            .inner
            .client
            .decide_tools(
                session,
                &ToolDecisionsRequest {
                    run_id: run,
                    decisions,
                },
            )
            .await
        {
            // Decided elsewhere first, or the run moved on.
            tracing::info!(firing = %f.firing.id, error = %e, "rejecting a scheduled run's tool calls");
        }
    }

    /// `approvals = ask`: the calls are asked about in the first chat of `deliver`; when
    /// that is not possible they are rejected (fail closed).
    async fn ask(
        &self,
        f: &FiringRow,
        spec: &ScheduleSpec,
        session: Uuid,
        run: Uuid,
        ids: &[String],
    ) -> Option<Asked> {
        let timeout = spec::ask_timeout(spec).unwrap_or(spec::DEFAULT_ASK_TIMEOUT);
        let channels = self.channels().await;
        let target = spec
            .deliver
            .iter()
            .find_map(|t| parse_target(t, &channels).ok());
        let Some(t) = target else {
            let why = "no chat of deliver is on a configured channel to ask in: rejected, as nobody is watching";
            self.reject(f, session, run, ids, why).await;
            return None;
        };
        let asked = self
            .inner
            .client
            .gateway_ask(&GatewayAskRequest {
                channel: t.channel,
                target: t.chat,
                thread: t.thread,
                session_id: session,
                run_id: run,
                tool_call_ids: ids.to_vec(),
                title: Some(format!("⏰ {} asks:", spec::display_name(spec))),
            })
            .await;
        match asked {
            Ok(r) => Some(Asked {
                prompt_id: r.prompt_id,
                ids: ids.to_vec(),
                deadline: self.now()
                    + TimeDelta::from_std(timeout).unwrap_or(TimeDelta::minutes(10)),
                reason: format!(
                    "nobody answered within {}: rejected (the schedule's approvals = ask)",
                    humantime::format_duration(timeout)
                ),
            }),
            // Decided already (a replay of the log after a restart).
            Err(e) if e.status() == Some(409) => None,
            Err(e) => {
                tracing::warn!(firing = %f.firing.id, error = %e, "asking for a scheduled run's approval failed; rejecting");
                let why =
                    format!("could not ask for an approval ({e}): rejected, as nobody is watching");
                self.reject(f, session, run, ids, &why).await;
                None
            }
        }
    }

    /// A call was decided (it ran or was rejected): its question no longer waits, and a
    /// prompt still showing buttons (decided elsewhere) is closed.
    async fn close_asked(&self, asked: &mut Vec<Asked>, id: &str) {
        let (done, keep): (Vec<Asked>, Vec<Asked>) = std::mem::take(asked)
            .into_iter()
            .partition(|a| a.ids.iter().any(|i| i == id));
        *asked = keep;
        for a in done {
            // 404: answered in the chat (the usual case).
            let _ = self
                .inner
                .client
                .gateway_expire(&a.prompt_id, "decided elsewhere")
                .await;
        }
    }

    /// Rejects the asked calls whose time is up (the chat's prompt says so).
    async fn expire_asked(&self, asked: &mut Vec<Asked>, session: Uuid, run: Uuid) {
        let now = self.now();
        let (due, keep): (Vec<Asked>, Vec<Asked>) = std::mem::take(asked)
            .into_iter()
            .partition(|a| a.deadline <= now);
        *asked = keep;
        for a in due {
            if let Err(e) = self
                .inner
                .client
                .gateway_expire(&a.prompt_id, &a.reason)
                .await
                && e.status() != Some(404)
            {
                tracing::warn!(prompt = %a.prompt_id, error = %e, "expiring a question failed; rejecting its calls directly");
            }
            // Whatever the gateway did: the calls must not wait on (409 when they are
            // decided already).
            let decisions = a
                .ids
                .iter()
                .map(|id| {
                    (
                        id.clone(),
                        ToolDecision {
                            action: DecisionAction::Reject,
                            content: Some(a.reason.clone()),
                            by: None,
                            cause: Some(RejectionCause::Timeout),
                        },
                    )
                })
                .collect();
            let _ = self
                .inner
                .client
                .decide_tools(
                    session,
                    &ToolDecisionsRequest {
                        run_id: run,
                        decisions,
                    },
                )
                .await;
        }
    }

    /// Tries the pending deliveries that are due; whether anything changed.
    async fn deliver(&self, f: &mut FiringRow) -> bool {
        let now = self.now();
        let due: Vec<usize> = f
            .firing
            .deliveries
            .iter()
            .enumerate()
            .filter(|(_, d)| {
                d.status == DeliveryStatus::Pending && d.next_attempt_at.is_none_or(|t| t <= now)
            })
            .map(|(i, _)| i)
            .collect();
        if due.is_empty() {
            return false;
        }
        let name = match self.inner.store.schedule(f.firing.schedule_id).await {
            Ok(Some(s)) => spec::display_name(&s.spec),
            _ => "schedule".into(),
        };
        let text = result_text(&name, &f.firing);
        let channels = self.channels().await;
        for i in due {
            let target = f.firing.deliveries[i].target.clone();
            let sent = match parse_target(&target, &channels) {
                Ok(t) => self
                    .inner
                    .client
                    .gateway_send_once(
                        &GatewaySendRequest {
                            channel: t.channel,
                            target: t.chat,
                            text: text.clone(),
                            context: Some(serde_json::json!({
                                "trigger": "schedule",
                                "schedule": name,
                                "schedule_id": f.firing.schedule_id,
                                "status": f.firing.status.as_str(),
                                "summary": f.firing.reply.as_deref().map(|r| truncate(r, 2000)),
                            })),
                            thread: t.thread,
                            kind: None,
                        },
                        // One post per firing and target, whatever the timing.
                        &format!(
                            "schedule:{}:firing:{}:{target}",
                            f.firing.schedule_id, f.firing.id
                        ),
                    )
                    .await
                    .map(|r| r.message_id)
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.message),
            };
            let d = &mut f.firing.deliveries[i];
            d.attempts += 1;
            match sent {
                Ok(id) => {
                    d.status = DeliveryStatus::Delivered;
                    d.message_id = Some(id);
                    d.delivered_at = Some(self.now());
                    d.next_attempt_at = None;
                    d.error = None;
                }
                Err(e) => {
                    tracing::warn!(firing = %f.firing.id, target = %d.target, attempt = d.attempts, error = %e, "delivering a scheduled result failed");
                    d.error = Some(e);
                    if d.attempts >= self.inner.opts.max_attempts {
                        d.status = DeliveryStatus::Failed;
                        d.next_attempt_at = None;
                    } else {
                        let wait = self.inner.opts.retry_base * 2u32.saturating_pow(d.attempts - 1);
                        d.next_attempt_at =
                            Some(now + TimeDelta::from_std(wait).unwrap_or(TimeDelta::hours(1)));
                    }
                }
            }
        }
        true
    }

    /// The gateway's channel names (none when the server runs no gateway).
    pub async fn channels(&self) -> Vec<String> {
        match self.inner.client.gateway_status().await {
            Ok(s) => s.channels.into_iter().map(|c| c.name).collect(),
            Err(e) => {
                if e.status() != Some(404) {
                    tracing::warn!(error = %e, "reading the gateway's channels failed");
                }
                Vec::new()
            }
        }
    }

    // ---- the operations of the API ----

    pub async fn create(&self, mut spec: ScheduleSpec) -> Result<Schedule, SchedulerError> {
        let now = self.now();
        let channels = if spec.deliver.is_empty() {
            Vec::new()
        } else {
            self.channels().await
        };
        let trigger = spec::check(&mut spec, now, &channels)?;
        let row = ScheduleRow {
            id: Uuid::new_v4(),
            paused: spec.paused,
            next_due: trigger.next_after(now),
            spec,
            created_at: now,
            updated_at: now,
        };
        self.inner.store.insert_schedule(&row).await?;
        Ok(view(&row))
    }

    pub async fn list(&self) -> Result<Vec<Schedule>, SchedulerError> {
        Ok(self
            .inner
            .store
            .schedules()
            .await?
            .iter()
            .map(view)
            .collect())
    }

    async fn row(&self, id: Uuid) -> Result<ScheduleRow, SchedulerError> {
        self.inner
            .store
            .schedule(id)
            .await?
            .ok_or(SchedulerError::NotFound(id))
    }

    pub async fn get(&self, id: Uuid) -> Result<Schedule, SchedulerError> {
        Ok(view(&self.row(id).await?))
    }

    pub async fn update(
        &self,
        id: Uuid,
        req: UpdateScheduleRequest,
    ) -> Result<Schedule, SchedulerError> {
        let mut row = self.row(id).await?;
        let now = self.now();
        let was_paused = row.paused;
        let mut spec = row.spec.clone();
        let new_trigger = req.changes_trigger();
        if new_trigger {
            spec.cron = req.cron.clone();
            spec.tz = req.tz.clone();
            spec.every = req.every.clone();
            spec.at = req.at.clone();
            spec.in_ = req.in_.clone();
        }
        if let Some(v) = req.name {
            spec.name = Some(v);
        }
        if let Some(v) = req.prompt {
            spec.prompt = v;
        }
        if let Some(v) = req.deliver {
            spec.deliver = v;
        }
        if let Some(v) = req.approvals {
            spec.approvals = v;
            if v != ScheduleApprovals::AutoApprove && req.auto_approve.is_none() {
                spec.auto_approve = None;
            }
            if v != ScheduleApprovals::Ask && req.ask_timeout.is_none() {
                spec.ask_timeout = None;
            }
        }
        if let Some(v) = req.auto_approve {
            spec.auto_approve = Some(v);
        }
        if let Some(v) = req.ask_timeout {
            spec.ask_timeout = Some(v);
        }
        if let Some(v) = req.missed {
            spec.missed = v;
        }
        if let Some(v) = req.overlap {
            spec.overlap = v;
        }
        if let Some(v) = req.paused {
            spec.paused = v;
            row.paused = v;
        }
        let channels = if spec.deliver.is_empty() {
            Vec::new()
        } else {
            self.channels().await
        };
        if new_trigger {
            let trigger = spec::check(&mut spec, now, &channels)?;
            row.next_due = trigger.next_after(now);
        } else {
            // The rest is checked as at creation, the stored trigger kept as it is.
            let mut probe = spec.clone();
            probe.cron = Some("0 0 * * *".into());
            probe.tz = None;
            probe.every = None;
            probe.at = None;
            probe.in_ = None;
            spec::check(&mut probe, now, &channels)?;
            spec.deliver = probe.deliver;
            spec.name = probe.name;
            if was_paused && !row.paused {
                // Resumed: from now on; what fell due while paused is not run.
                row.next_due = trigger_of(&row).ok().and_then(|t| t.next_after(now));
            }
        }
        row.spec = spec;
        row.updated_at = now;
        if !self.inner.store.update_schedule(&row).await? {
            return Err(SchedulerError::NotFound(id));
        }
        Ok(view(&row))
    }

    pub async fn delete(&self, id: Uuid) -> Result<(), SchedulerError> {
        if self.inner.store.delete_schedule(id).await? {
            Ok(())
        } else {
            Err(SchedulerError::NotFound(id))
        }
    }

    /// A firing now, by hand: it runs at once, or after the running one (whatever the
    /// overlap policy: it was asked for).
    pub async fn run_now(&self, id: Uuid) -> Result<Firing, SchedulerError> {
        let row = self.row(id).await?;
        let active = self.inner.store.active(row.id).await?;
        let status = if active.is_empty() {
            FiringStatus::Starting
        } else {
            FiringStatus::Queued
        };
        let mut firing = new_firing(row.id, self.now(), status);
        firing.manual = true;
        let f = FiringRow::new(firing.clone());
        self.inner
            .store
            .insert_firing(&f, &self.inner.opts.instance, self.lease_until())
            .await?;
        self.drive(f);
        Ok(firing)
    }

    pub async fn firings(&self, id: Uuid) -> Result<Vec<Firing>, SchedulerError> {
        self.row(id).await?;
        Ok(self
            .inner
            .store
            .firings(id, HISTORY_LIMIT)
            .await?
            .into_iter()
            .map(|f| f.firing)
            .collect())
    }

    /// Tries a firing's failed deliveries again (by hand).
    pub async fn redeliver(&self, id: Uuid, firing: Uuid) -> Result<Firing, SchedulerError> {
        self.row(id).await?;
        let mut f = match self.inner.store.firing(firing).await? {
            Some(f) if f.firing.schedule_id == id => f,
            _ => return Err(SchedulerError::FiringNotFound(firing)),
        };
        if f.open {
            return Err(SchedulerError::Conflict(
                "this firing is still being worked on (its run or its deliveries); try again when it is done".into(),
            ));
        }
        let mut any = false;
        for d in &mut f.firing.deliveries {
            if d.status == DeliveryStatus::Failed {
                d.status = DeliveryStatus::Pending;
                d.next_attempt_at = None;
                d.attempts = 0;
                any = true;
            }
        }
        if !any {
            return Err(SchedulerError::Conflict(
                "no failed delivery to try again".into(),
            ));
        }
        if !self.inner.store.reopen_firing(&f).await? {
            return Err(SchedulerError::Conflict(
                "this firing is already being worked on".into(),
            ));
        }
        Ok(f.firing)
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
