#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! The chat channels on Meta's, Signal's, Microsoft's and Mattermost's platforms end to end,
//! in one test binary (one link, not four): each module runs the real server against a fake
//! of its platform written from the platform's documentation, and the mock LLM.

#[path = "../common/mod.rs"]
mod common;
mod mattermost;
mod msteams;
mod signal;
mod whatsapp;

use std::time::{Duration, Instant};

/// How long a step may take.
pub const WAIT: Duration = Duration::from_secs(30);

/// Polls `f` until it has something (every 100 ms, at most [`WAIT`]).
pub async fn until<T>(what: &str, f: impl Fn() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
