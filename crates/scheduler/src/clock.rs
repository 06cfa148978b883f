//! The scheduler's sense of time, injected so that tests fire schedules without waiting.

use parking_lot::Mutex;
use std::path::PathBuf;

use chrono::{DateTime, Utc};

/// What time it is for the scheduler (due times, delivery back-off). Leases between
/// instances use the wall clock regardless: they are about processes being alive.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> DateTime<Utc>;
}

/// The system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock a test sets.
#[derive(Debug)]
pub struct ManualClock(Mutex<DateTime<Utc>>);

impl ManualClock {
    pub fn new(t: DateTime<Utc>) -> Self {
        Self(Mutex::new(t))
    }

    pub fn set(&self, t: DateTime<Utc>) {
        *self.0.lock() = t;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock()
    }
}

/// For end-to-end tests of the binary (`SWITCHBOARD_SCHEDULER_CLOCK_FILE`): the time is
/// the RFC 3339 text of a file the test writes, read at each look; the system's clock while
/// the file is missing or unreadable. It survives the server's restarts, which is what the
/// tests of missed firings need.
#[derive(Debug, Clone)]
pub struct FileClock(pub PathBuf);

impl Clock for FileClock {
    fn now(&self) -> DateTime<Utc> {
        std::fs::read_to_string(&self.0)
            .ok()
            .and_then(|s| DateTime::parse_from_rfc3339(s.trim()).ok())
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_else(Utc::now)
    }
}
