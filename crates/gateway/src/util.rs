//! Small pieces every platform channel needs: a poison-proof lock, reconnect back-off, and
//! spacing of message edits per chat.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

/// First wait of a reconnect back-off.
pub(crate) const BACKOFF_START: Duration = Duration::from_secs(1);
/// Longest wait of a reconnect back-off.
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// A mutex's value, even if a panicking thread poisoned it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

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

/// At most one edit per `interval` in each chat: a caller reserves the next slot of its
/// chat and sleeps until it comes (so edits issued at the same time are spaced too).
#[derive(Debug, Default)]
pub(crate) struct EditSpacer {
    next: Mutex<HashMap<String, Instant>>,
}

impl EditSpacer {
    pub(crate) async fn wait(&self, chat: &str, interval: Duration) {
        let at = {
            let mut next = lock(&self.next);
            let now = Instant::now();
            if next.len() > 1024 {
                next.retain(|_, t| *t > now);
            }
            let at = next.get(chat).copied().filter(|t| *t > now).unwrap_or(now);
            next.insert(chat.to_owned(), at + interval);
            at
        };
        tokio::time::sleep_until(at).await;
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

    #[tokio::test]
    async fn edits_in_one_chat_are_spaced() {
        let s = EditSpacer::default();
        let t = Instant::now();
        s.wait("a", Duration::from_millis(100)).await;
        s.wait("b", Duration::from_millis(100)).await;
        assert!(
            t.elapsed() < Duration::from_millis(90),
            "other chats are not delayed"
        );
        s.wait("a", Duration::from_millis(100)).await;
        assert!(t.elapsed() >= Duration::from_millis(100));
    }
}
