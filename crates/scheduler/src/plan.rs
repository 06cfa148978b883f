//! What a tick does with a schedule: fire it, record what a downtime missed, handle overlap.
//!
//! The store keeps each schedule's next due time. A tick at `now` (every few seconds, on the
//! one instance that holds the schedule's lease) asks [`plan_tick`] what to do; the answer
//! depends only on its arguments, so a test clock drives every case. The rules:
//! - A due time up to `grace` in the past is on time: it fires.
//! - Due times further in the past were missed (the server was down). `skip` (the default)
//!   records each as a skipped firing and runs none; `run_once` runs one — the latest — and
//!   records the others as skipped. Never more than one run per tick: no burst.
//! - A firing while the schedule's previous run is still going: `skip` (the default) records
//!   it as skipped; `queue` runs it after the previous one.
//! - The next due time is the first one after `now`: a tick never leaves one in the past.

use chrono::{DateTime, TimeDelta, Utc};

use crate::when::Trigger;

/// Skipped firings listed one by one in a tick's answer; more are counted.
pub const LISTED_SKIPS: usize = 100;
/// Due times walked through at most (a minutely schedule down for a week is 10,080).
const WALK_LIMIT: usize = 100_000;

pub use switchboard_protocol::schedules::{Missed, Overlap, SkipReason};

/// A tick's answer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tick {
    /// Firings to record as skipped, oldest first (at most [`LISTED_SKIPS`]).
    pub skipped: Vec<(DateTime<Utc>, SkipReason)>,
    /// Missed due times beyond those listed.
    pub more_skipped: u64,
    /// The due time of the firing to start now.
    pub fire: Option<DateTime<Utc>>,
    /// The firing waits for the previous one (overlap `queue`).
    pub queued: bool,
    /// The next due time to store; `None`: the schedule has no more.
    pub next: Option<DateTime<Utc>>,
}

/// Settings of one schedule that a tick needs.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    pub missed: Missed,
    pub overlap: Overlap,
    /// How late a due time may be and still count as on time.
    pub grace: TimeDelta,
}

/// What a tick at `now` does with a schedule due at `due` (`running`: its previous firing
/// has not ended).
pub fn plan_tick(
    trigger: &Trigger,
    due: DateTime<Utc>,
    now: DateTime<Utc>,
    policy: Policy,
    running: bool,
) -> Tick {
    if due > now {
        return Tick {
            next: Some(due),
            ..Tick::default()
        };
    }
    // Every due time up to now, oldest first.
    let mut dues = vec![due];
    let mut walked = 1;
    let mut cursor = due;
    while let Some(d) = trigger.next_after(cursor) {
        if d > now || walked >= WALK_LIMIT {
            break;
        }
        walked += 1;
        dues.push(d);
        cursor = d;
    }
    let latest = dues.pop().unwrap_or(due);
    let mut tick = Tick {
        next: trigger.next_after(now),
        ..Tick::default()
    };
    let skip = |t: DateTime<Utc>, why: SkipReason, tick: &mut Tick| {
        if tick.skipped.len() < LISTED_SKIPS {
            tick.skipped.push((t, why));
        } else {
            tick.more_skipped += 1;
        }
    };
    for d in dues {
        skip(d, SkipReason::Missed, &mut tick);
    }
    let on_time = now - latest <= policy.grace;
    if !on_time && policy.missed == Missed::Skip {
        skip(latest, SkipReason::Missed, &mut tick);
        return tick;
    }
    if running {
        match policy.overlap {
            Overlap::Skip => skip(latest, SkipReason::Overlap, &mut tick),
            Overlap::Queue => {
                tick.fire = Some(latest);
                tick.queued = true;
            }
        }
        return tick;
    }
    tick.fire = Some(latest);
    tick
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::when::TriggerSpec;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn hourly() -> Trigger {
        let spec = TriggerSpec {
            cron: Some("0 * * * *".into()),
            ..TriggerSpec::default()
        };
        Trigger::parse(&spec, utc("2026-12-01T00:00:00Z")).unwrap()
    }

    fn policy(missed: Missed, overlap: Overlap) -> Policy {
        Policy {
            missed,
            overlap,
            grace: TimeDelta::seconds(60),
        }
    }

    #[test]
    fn an_on_time_tick_fires_and_moves_on() {
        let t = hourly();
        let due = utc("2026-12-01T10:00:00Z");
        let tick = plan_tick(
            &t,
            due,
            utc("2026-12-01T10:00:02Z"),
            policy(Missed::Skip, Overlap::Skip),
            false,
        );
        assert_eq!(tick.fire, Some(due));
        assert!(tick.skipped.is_empty());
        assert_eq!(tick.next, Some(utc("2026-12-01T11:00:00Z")));
        let early = plan_tick(
            &t,
            due,
            utc("2026-12-01T09:59:59Z"),
            policy(Missed::Skip, Overlap::Skip),
            false,
        );
        assert_eq!(
            early,
            Tick {
                next: Some(due),
                ..Tick::default()
            }
        );
    }

    #[test]
    fn a_downtime_is_skipped_firing_by_firing_or_run_once_never_a_burst() {
        let t = hourly();
        let due = utc("2026-12-01T10:00:00Z");
        let back = utc("2026-12-01T13:20:00Z"); // 10, 11, 12 and 13 o'clock passed
        let skip = plan_tick(&t, due, back, policy(Missed::Skip, Overlap::Skip), false);
        assert_eq!(skip.fire, None);
        let times: Vec<_> = skip.skipped.iter().map(|(t, _)| t.to_rfc3339()).collect();
        assert_eq!(times.len(), 4, "{times:?}");
        assert!(skip.skipped.iter().all(|(_, r)| *r == SkipReason::Missed));
        assert_eq!(skip.next, Some(utc("2026-12-01T14:00:00Z")));
        let once = plan_tick(&t, due, back, policy(Missed::RunOnce, Overlap::Skip), false);
        assert_eq!(
            once.fire,
            Some(utc("2026-12-01T13:00:00Z")),
            "the latest runs"
        );
        assert_eq!(once.skipped.len(), 3, "the others are recorded");
        assert_eq!(once.next, Some(utc("2026-12-01T14:00:00Z")));
    }

    #[test]
    fn a_long_downtime_lists_a_hundred_and_counts_the_rest() {
        let spec = TriggerSpec {
            every: Some("1m".into()),
            ..TriggerSpec::default()
        };
        let anchor = utc("2026-12-01T00:00:00Z");
        let t = Trigger::parse(&spec, anchor).unwrap();
        let tick = plan_tick(
            &t,
            utc("2026-12-01T00:01:00Z"),
            utc("2026-12-02T00:00:30Z"),
            policy(Missed::Skip, Overlap::Skip),
            false,
        );
        assert_eq!(tick.skipped.len(), LISTED_SKIPS);
        // 00:01 … 00:00 next day is 1,440 due times; the last is on time and fires.
        assert_eq!(tick.skipped.len() as u64 + tick.more_skipped, 1_439);
        assert_eq!(tick.fire, Some(utc("2026-12-02T00:00:00Z")));
    }

    #[test]
    fn overlap_skips_or_queues() {
        let t = hourly();
        let due = utc("2026-12-01T10:00:00Z");
        let now = utc("2026-12-01T10:00:01Z");
        let skip = plan_tick(&t, due, now, policy(Missed::Skip, Overlap::Skip), true);
        assert_eq!(
            (skip.fire, skip.skipped.clone()),
            (None, vec![(due, SkipReason::Overlap)])
        );
        let queue = plan_tick(&t, due, now, policy(Missed::Skip, Overlap::Queue), true);
        assert_eq!((queue.fire, queue.queued), (Some(due), true));
    }

    #[test]
    fn a_one_shot_fires_once_and_is_done() {
        let spec = TriggerSpec {
            in_: Some("2h".into()),
            ..TriggerSpec::default()
        };
        let made = utc("2026-12-01T10:00:00Z");
        let t = Trigger::parse(&spec, made).unwrap();
        let due = t.next_after(made).unwrap();
        let tick = plan_tick(&t, due, due, policy(Missed::Skip, Overlap::Skip), false);
        assert_eq!((tick.fire, tick.next), (Some(due), None));
        // Missed while down, with skip: recorded, and done.
        let late = plan_tick(
            &t,
            due,
            due + TimeDelta::hours(5),
            policy(Missed::Skip, Overlap::Skip),
            false,
        );
        assert_eq!((late.fire, late.next, late.skipped.len()), (None, None, 1));
    }
}
