//! Scheduled tasks: prompts that run on a schedule.
//!
//! This crate holds the parts of the scheduler that decide, as pure functions of an
//! injected time, so that they are tested without waiting:
//! - [`when`]: a schedule's trigger — a cron expression in a time zone (`0 9 * * 1-5` in
//!   `Europe/Berlin`), a fixed interval (`every 30m`) or one time (`at …`, `in 2h`) — parsed
//!   with well-kept crates (`croner`, `chrono-tz`, `humantime`), every error naming its
//!   field, and its next due time after any instant (DST gaps and repeats resolved).
//! - [`plan`]: what to do at a tick: the due firing, the firings a downtime missed (`skip`
//!   records each; `run_once` runs one; never a burst), and overlap with a firing still
//!   running (`skip` or `queue`).

pub mod plan;
pub mod when;

pub use plan::{Missed, Overlap, Policy, SkipReason, Tick, plan_tick};
pub use when::{Trigger, TriggerError, TriggerSpec};
