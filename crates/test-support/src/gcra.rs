//! The rate limit the fakes keep as their platforms document it: GCRA (the generic cell
//! rate algorithm, a token bucket without a timer) — one call every `every`, bursts of
//! `burst`.

use std::time::{Duration, Instant};

/// One bucket: a call conforms while its theoretical arrival time is within the burst.
#[derive(Debug, Clone, Copy)]
pub struct Gcra {
    every: Duration,
    burst: u32,
    tat: Instant,
}

impl Gcra {
    pub fn new(every: Duration, burst: u32) -> Self {
        Self {
            every,
            burst: burst.max(1),
            tat: Instant::now(),
        }
    }

    /// `per_sec` a second, bursts of `burst`.
    pub fn per_second(per_sec: u32, burst: u32) -> Self {
        Self::new(Duration::from_secs(1) / per_sec.max(1), burst)
    }

    /// Takes a call now: `None` when it conforms (and is counted), else how long until it
    /// would.
    pub fn take(&mut self) -> Option<Duration> {
        let now = Instant::now();
        let tat = self.tat.max(now);
        let allowance = self.every * (self.burst - 1);
        if tat > now + allowance {
            return Some(tat - now - allowance);
        }
        self.tat = tat + self.every;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_one_per_interval() {
        let mut g = Gcra::new(Duration::from_secs(60), 3);
        assert!(g.take().is_none());
        assert!(g.take().is_none());
        assert!(g.take().is_none());
        let wait = g.take().expect("past the burst");
        assert!(wait > Duration::from_secs(59) && wait <= Duration::from_secs(60));
    }
}
