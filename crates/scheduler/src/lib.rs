//! Scheduled tasks: prompts that run on a schedule and report where the user is.
//!
//! - [`when`]: a schedule's trigger — a cron expression in a time zone (`0 9 * * 1-5` in
//!   `Europe/Berlin`), a fixed interval (`every 30m`) or one time (`at …`, `in 2h`) — parsed
//!   with well-kept crates (`croner`, `chrono-tz`, `humantime`), every error naming its
//!   field, and its next due time after any instant (DST gaps and repeats resolved).
//! - [`plan`]: what to do at a tick: the due firing, the firings a downtime missed (`skip`
//!   records each; `run_once` runs one; never a burst), and overlap with a firing still
//!   running (`skip` or `queue`). Pure functions of an injected time.
//! - [`spec`]: a schedule as written, checked and normalised; delivery targets.
//! - [`store`]: schedules and firings on SQLite or PostgreSQL; a due time is claimed once
//!   across instances.
//! - [`service`]: the tick and the firing tasks, over the `/v1` API and the gateway's
//!   `POST /v1/gateway/send`.
//! - [`api`]: the `/v1/schedules` routes.
//! - [`clock`]: the time the scheduler goes by (injected in tests).

pub mod api;
pub mod clock;
pub mod plan;
pub mod service;
pub mod settings;
pub mod spec;
pub mod store;
pub mod when;

pub use clock::{Clock, FileClock, ManualClock, SystemClock};
pub use plan::{Missed, Overlap, Policy, SkipReason, Tick, plan_tick};
pub use service::{Scheduler, SchedulerError, SchedulerOptions};
pub use store::ScheduleStore;
pub use when::{Trigger, TriggerError, TriggerSpec};
