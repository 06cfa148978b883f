//! Small pieces every platform channel needs: a poison-proof lock and reconnect back-off
//! (the pacing of calls is [`crate::platform::Outbox`]'s).

use std::time::Duration;

/// First wait of a reconnect back-off.
pub(crate) const BACKOFF_START: Duration = Duration::from_secs(1);
/// Longest wait of a reconnect back-off.
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// Waits that double from 1 s to 30 s until reset.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    next: Option<Duration>,
}

impl Backoff {
    pub(crate) fn next_wait(&mut self) -> Duration {
        let wait = self.next.unwrap_or(BACKOFF_START);
        self.next = Some((wait * 2).min(BACKOFF_MAX));
        wait
    }

    pub(crate) fn reset(&mut self) {
        self.next = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_30s_and_resets() {
        let mut b = Backoff::default();
        let waits: Vec<u64> = (0..7).map(|_| b.next_wait().as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30]);
        b.reset();
        assert_eq!(b.next_wait().as_secs(), 1);
    }
}
