//! Console sign-in per person (docs/teams.md): a user name and password (argon2id, checked
//! by the engine's team), throttled per user and per address, opening a console session
//! kept in the store — so that signing out, a new password or removing the user ends it on
//! every instance at once.
//!
//! A person's cookie is `v2.<64 hex digits>`; the store keeps the SHA-256 of it, never the
//! value. (The server token's own sign-in keeps its stateless `v1.` cookie: it is the
//! built-in admin, and dies with the token.)

use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use switchboard_engine::Team;
use switchboard_protocol::ErrorCode;
use switchboard_protocol::people::Principal;

use crate::ApiError;

/// The prefix of a person's console cookie.
pub const PERSON_COOKIE: &str = "v2.";
/// How long a person's console sign-in lasts.
pub const SESSION_TTL: Duration = Duration::from_secs(30 * 86_400);
/// The window failures are counted in.
const WINDOW: Duration = Duration::from_secs(15 * 60);
/// Failed sign-ins one user name may have in [`WINDOW`] before it is refused for a while.
pub const MAX_FAILURES_PER_USER: usize = 5;
/// Failed sign-ins one address may have in [`WINDOW`].
pub const MAX_FAILURES_PER_ADDRESS: usize = 20;

/// Failed sign-ins per user name and per address, in this instance's memory.
#[derive(Debug, Default)]
pub struct Throttle {
    users: Mutex<HashMap<String, VecDeque<Instant>>>,
    addresses: Mutex<HashMap<IpAddr, VecDeque<Instant>>>,
}

fn prune(q: &mut VecDeque<Instant>, now: Instant) {
    while q.front().is_some_and(|t| now.duration_since(*t) >= WINDOW) {
        q.pop_front();
    }
}

/// Seconds until the oldest of a full window's failures leaves it.
fn wait(q: &VecDeque<Instant>, max: usize, now: Instant) -> Option<u64> {
    if q.len() < max {
        return None;
    }
    let oldest = q.front()?;
    Some(
        WINDOW
            .saturating_sub(now.duration_since(*oldest))
            .as_secs()
            .max(1),
    )
}

impl Throttle {
    /// 429 `rate_limited` (with `Retry-After`) when the user or the address has failed too
    /// often lately.
    pub fn check(&self, user: &str, address: Option<IpAddr>) -> Result<(), ApiError> {
        let now = Instant::now();
        let by_user = {
            let mut users = self.users.lock();
            let q = users.entry(user.to_string()).or_default();
            prune(q, now);
            wait(q, MAX_FAILURES_PER_USER, now)
        };
        let by_address = address.and_then(|a| {
            let mut addresses = self.addresses.lock();
            let q = addresses.entry(a).or_default();
            prune(q, now);
            wait(q, MAX_FAILURES_PER_ADDRESS, now)
        });
        match by_user.max(by_address) {
            Some(secs) => Err(ApiError::new(
                ErrorCode::RateLimited,
                format!(
                    "too many failed sign-ins; try again in {} min",
                    secs.div_ceil(60)
                ),
            )
            .with_retry_after(secs)),
            None => Ok(()),
        }
    }

    pub fn failed(&self, user: &str, address: Option<IpAddr>) {
        let now = Instant::now();
        self.users
            .lock()
            .entry(user.to_string())
            .or_default()
            .push_back(now);
        if let Some(a) = address {
            self.addresses.lock().entry(a).or_default().push_back(now);
        }
    }

    /// A good sign-in forgets the user's failures (not the address's).
    pub fn succeeded(&self, user: &str) {
        self.users.lock().remove(user);
    }
}

/// Checks a password and opens a console session; the cookie's value on success.
pub async fn sign_in(
    team: &Team,
    throttle: &Throttle,
    user: &str,
    password: &str,
    address: Option<IpAddr>,
) -> Result<String, ApiError> {
    throttle.check(user, address)?;
    let detail = serde_json::json!({ "address": address.map(|a| a.to_string()) });
    let name = match team.check_password(user, password).await {
        Ok(name) => name,
        Err(e) => {
            if matches!(e, switchboard_engine::TeamError::InvalidCredentials) {
                throttle.failed(user, address);
                team.record(user, "signin.failed", None, "console", detail)
                    .await;
                // Slow down guessing on top of the throttle.
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            return Err(e.into());
        }
    };
    throttle.succeeded(&name);
    let secret = team
        .open_console_session(&name, PERSON_COOKIE, SESSION_TTL)
        .await?;
    team.record(&name, "signin", None, "console", detail).await;
    Ok(secret)
}

/// The person a `v2.` cookie signs in, if it is a live console session.
pub async fn person(team: &Team, cookie: &str) -> Option<Principal> {
    if !cookie.starts_with(PERSON_COOKIE) {
        return None;
    }
    team.console_principal(cookie).await
}

/// Ends the console session of `cookie` (and with `everywhere` every one of its user's).
pub async fn sign_out(team: &Team, cookie: &str, everywhere: bool) -> Result<(), ApiError> {
    if cookie.starts_with(PERSON_COOKIE) {
        team.end_console_session(cookie, everywhere).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_throttle_counts_per_user_and_per_address() {
        let t = Throttle::default();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        for _ in 0..MAX_FAILURES_PER_USER {
            t.check("ann", Some(a)).unwrap();
            t.failed("ann", Some(a));
        }
        let e = t.check("ann", Some(a)).unwrap_err();
        assert_eq!(e.code(), "rate_limited");
        // Another user from the same address is not (yet) refused …
        t.check("bob", Some(a)).unwrap();
        // … until the address has failed too often with any names.
        for i in 0..MAX_FAILURES_PER_ADDRESS {
            t.failed(&format!("u{i}"), Some(a));
        }
        assert!(t.check("bob", Some(a)).is_err());
        assert!(t.check("bob", Some("10.0.0.2".parse().unwrap())).is_ok());
        t.succeeded("ann");
        assert!(t.check("ann", None).is_ok());
    }
}
