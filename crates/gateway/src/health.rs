//! How a channel's connection is doing, for `GET /v1/gateway/status`: a state a console can
//! branch on ([`ConnectionState`]), since when, why (the last error), and the human-readable
//! status text the channels always reported.
//!
//! A channel reports what happens to its connection through a [`Health`]: an attempt
//! begins ([`Health::connecting`]), it receives ([`Health::connected`]), the platform asks it
//! to reconnect ([`Health::reconnecting`]), an attempt fails and is retried
//! ([`Health::retrying`]: `reconnecting`, then `failing` after [`FAILING_AFTER`] in a row),
//! it gives up ([`Health::failed`]) or it stops ([`Health::stopped`]). The texts handed in
//! must hold no secret (the platform channels redact theirs before).

use parking_lot::Mutex;

use chrono::{DateTime, Utc};

pub use switchboard_protocol::gateway::{ConnectionState, FAILING_AFTER};

/// The reason shown while inbound messages cannot be stored (the gateway's database failed;
/// its own words go to the log only).
pub const NOT_STORED: &str =
    "the gateway could not store an inbound message (its database failed); retrying";

/// A channel's health at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelHealth {
    pub state: ConnectionState,
    /// The human-readable status (`polling`, `error: …`).
    pub status: String,
    /// When `state` began (for a run of failures: the first one).
    pub since: Option<DateTime<Utc>>,
    /// Why the channel is `reconnecting`, `failing` or `failed`.
    pub reason: Option<String>,
    /// The last error and when, kept after a recovery.
    pub last_error: Option<(String, DateTime<Utc>)>,
}

impl ChannelHealth {
    /// A channel that has not started: `configured`, with `status` as its text.
    pub fn configured(status: impl Into<String>) -> Self {
        Self {
            state: ConnectionState::Configured,
            status: status.into(),
            since: None,
            reason: None,
            last_error: None,
        }
    }
}

/// Tracks a channel's [`ChannelHealth`]; see the module docs.
#[derive(Debug)]
pub struct Health {
    inner: Mutex<Tracked>,
}

#[derive(Debug)]
struct Tracked {
    now: ChannelHealth,
    /// Failed attempts since the last success.
    failures: u32,
}

impl Default for Health {
    fn default() -> Self {
        Self::new()
    }
}

impl Health {
    /// `configured`, nothing happened yet.
    pub fn new() -> Self {
        Self {
            inner: Mutex::new(Tracked {
                now: ChannelHealth::configured("configured"),
                failures: 0,
            }),
        }
    }

    pub fn snapshot(&self) -> ChannelHealth {
        self.inner.lock().now.clone()
    }

    /// The human-readable status.
    pub fn status(&self) -> String {
        self.inner.lock().now.status.clone()
    }

    fn set(&self, state: ConnectionState, status: String, reason: Option<String>) {
        let mut t = self.inner.lock();
        let streak = matches!(
            (t.now.state, state),
            (ConnectionState::Reconnecting, ConnectionState::Failing)
                | (ConnectionState::Reconnecting, ConnectionState::Reconnecting)
                | (ConnectionState::Failing, ConnectionState::Failing)
        );
        if (t.now.state != state && !streak) || t.now.since.is_none() {
            t.now.since = Some(Utc::now());
        }
        t.now.state = state;
        t.now.status = status;
        t.now.reason = reason;
    }

    /// An attempt to connect begins (`starting`). While failures are being retried the
    /// state stays as it is — the attempt may fail again — and only the text changes.
    pub fn connecting(&self, status: impl Into<String>) {
        let status = status.into();
        let mut t = self.inner.lock();
        if matches!(
            t.now.state,
            ConnectionState::Reconnecting | ConnectionState::Failing
        ) {
            t.now.status = status;
            return;
        }
        drop(t);
        self.set(ConnectionState::Starting, status, None);
    }

    /// Receiving: the failures are over.
    pub fn connected(&self, status: impl Into<String>) {
        self.inner.lock().failures = 0;
        self.set(ConnectionState::Connected, status.into(), None);
    }

    /// The connection ended the ordinary way (the platform asked for a new one, a session
    /// was replaced) and is being opened again: `reconnecting`, not counted as a failure.
    pub fn reconnecting(&self, status: impl Into<String>, reason: Option<String>) {
        let status = status.into();
        let failing = self.inner.lock().now.state == ConnectionState::Failing;
        let state = if failing {
            ConnectionState::Failing
        } else {
            ConnectionState::Reconnecting
        };
        self.set(state, status, reason);
    }

    /// An attempt failed and is retried: `reconnecting`, or `failing` once
    /// [`FAILING_AFTER`] attempts in a row have failed. `reason` is the error.
    pub fn retrying(&self, status: impl Into<String>, reason: impl Into<String>) {
        let reason = reason.into();
        let state = {
            let mut t = self.inner.lock();
            t.failures = t.failures.saturating_add(1);
            t.now.last_error = Some((reason.clone(), Utc::now()));
            if t.failures >= FAILING_AFTER {
                ConnectionState::Failing
            } else {
                ConnectionState::Reconnecting
            }
        };
        self.set(state, status.into(), Some(reason));
    }

    /// Stopped for a failure that retrying will not fix.
    pub fn failed(&self, status: impl Into<String>, reason: impl Into<String>) {
        let reason = reason.into();
        self.inner.lock().now.last_error = Some((reason.clone(), Utc::now()));
        self.set(ConnectionState::Failed, status.into(), Some(reason));
    }

    /// Shut down (cancelled).
    pub fn stopped(&self) {
        self.inner.lock().failures = 0;
        self.set(ConnectionState::Stopped, "stopped".into(), None);
    }

    /// Not started (any more): `configured`, with `status` as its text.
    pub fn configured(&self, status: impl Into<String>) {
        self.inner.lock().failures = 0;
        self.set(ConnectionState::Configured, status.into(), None);
    }

    /// An error that leaves the state as it is (a failed delivery): kept as the last error.
    pub fn error(&self, reason: impl Into<String>) {
        self.inner.lock().now.last_error = Some((reason.into(), Utc::now()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_in_a_row_go_from_reconnecting_to_failing_and_a_success_ends_them() {
        let h = Health::new();
        assert_eq!(h.snapshot().state, ConnectionState::Configured);
        assert_eq!(h.snapshot().since, None);
        h.connecting("starting");
        assert_eq!(h.snapshot().state, ConnectionState::Starting);
        h.connected("polling");
        let up = h.snapshot();
        assert_eq!(up.state, ConnectionState::Connected);
        assert_eq!((up.status.as_str(), up.reason), ("polling", None));

        h.retrying("error: one", "one");
        let first = h.snapshot();
        assert_eq!(first.state, ConnectionState::Reconnecting);
        assert_eq!(first.reason.as_deref(), Some("one"));
        // An attempt in between keeps the state and the reason.
        h.connecting("connecting");
        assert_eq!(h.snapshot().state, ConnectionState::Reconnecting);
        assert_eq!(h.snapshot().reason.as_deref(), Some("one"));
        assert_eq!(h.snapshot().status, "connecting");
        for n in 2..FAILING_AFTER {
            h.retrying(format!("error: {n}"), n.to_string());
            assert_eq!(h.snapshot().state, ConnectionState::Reconnecting);
        }
        h.retrying("error: last", "last");
        let failing = h.snapshot();
        assert_eq!(failing.state, ConnectionState::Failing);
        assert_eq!(failing.reason.as_deref(), Some("last"));
        assert_eq!(failing.since, first.since, "since: when the failures began");
        // An ordinary reconnect does not hide that it keeps failing.
        h.reconnecting("reconnecting", None);
        assert_eq!(h.snapshot().state, ConnectionState::Failing);

        h.connected("polling");
        let back = h.snapshot();
        assert_eq!(back.state, ConnectionState::Connected);
        assert_eq!(back.reason, None);
        assert_eq!(back.last_error.map(|e| e.0).as_deref(), Some("last"));
        h.retrying("error: again", "again");
        assert_eq!(
            h.snapshot().state,
            ConnectionState::Reconnecting,
            "the count starts over after a success"
        );
    }

    #[test]
    fn failed_stopped_and_errors() {
        let h = Health::new();
        h.connected("listening");
        h.error("delivery failed");
        let s = h.snapshot();
        assert_eq!(
            s.state,
            ConnectionState::Connected,
            "an error alone is no state"
        );
        assert_eq!(
            s.last_error.map(|e| e.0).as_deref(),
            Some("delivery failed")
        );
        h.failed("conflict", "another poller");
        assert_eq!(h.snapshot().state, ConnectionState::Failed);
        assert_eq!(h.snapshot().reason.as_deref(), Some("another poller"));
        h.stopped();
        assert_eq!(h.snapshot().state, ConnectionState::Stopped);
        assert_eq!(h.status(), "stopped");
        h.reconnecting("socket: reconnecting", None);
        assert_eq!(h.snapshot().state, ConnectionState::Reconnecting);
    }
}
