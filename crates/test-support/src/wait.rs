//! Waiting for a condition in a test, with a deadline that names what was awaited.

use std::time::Duration;

/// How long [`until`] waits.
pub const WAIT: Duration = Duration::from_secs(10);

/// Polls `f` every 10 ms until it holds.
///
/// # Panics
/// When it does not hold within [`WAIT`], naming `what`.
pub async fn until(what: &str, f: impl Fn() -> bool) {
    until_within(WAIT, what, f).await;
}

/// [`until`] with a deadline of `timeout`.
///
/// # Panics
/// When `f` does not hold within `timeout`, naming `what`.
pub async fn until_within(timeout: Duration, what: &str, f: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + timeout;
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
