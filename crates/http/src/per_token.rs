//! Limits per credential: how many event streams one token may hold open, and how many
//! writes it may make a minute.
//!
//! A credential is told apart by a keyed hash of its bearer value (the console's cookie
//! is turned into the same bearer value in front of the routes), never by the secret
//! itself: the maps below hold no token.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use switchboard_protocol::ErrorCode;

use crate::ApiError;

/// A credential, as a hash only this process can compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CallerKey(u64);

/// The keyed hash of the requests' credentials (`Authorization: Bearer …`, else none).
#[derive(Debug, Default)]
pub struct CallerKeys(std::collections::hash_map::RandomState);

impl CallerKeys {
    /// The key of requests that carry `Authorization: Bearer {token}`.
    pub fn of_token(&self, token: &str) -> CallerKey {
        CallerKey(self.0.hash_one(format!("Bearer {token}").as_bytes()))
    }

    /// The key of a request's credential: its `Authorization`, else its cookies (a person
    /// signed in to the console, whose cookie is not turned into a bearer value).
    pub fn key(&self, headers: &HeaderMap) -> CallerKey {
        let credential = headers
            .get(axum::http::header::AUTHORIZATION)
            .or_else(|| headers.get(axum::http::header::COOKIE))
            .map(|v| v.as_bytes())
            .unwrap_or_default();
        CallerKey(self.0.hash_one(credential))
    }
}

/// Open event streams per credential, at most `max` each.
#[derive(Debug)]
pub struct StreamSlots {
    max: usize,
    keys: CallerKeys,
    open: Mutex<HashMap<CallerKey, usize>>,
}

/// One open stream; its slot is given back when this is dropped (the stream ended or the
/// client went away).
#[derive(Debug)]
pub struct StreamSlot {
    slots: Arc<StreamSlots>,
    key: CallerKey,
}

impl StreamSlots {
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            max,
            keys: CallerKeys::default(),
            open: Mutex::default(),
        })
    }

    /// A slot for the request's credential, or 429 `too_many_streams` when it holds `max`.
    pub fn take(self: &Arc<Self>, headers: &HeaderMap) -> Result<StreamSlot, ApiError> {
        let key = self.keys.key(headers);
        let mut open = self.open.lock();
        let n = open.entry(key).or_default();
        if *n >= self.max {
            return Err(ApiError::new(
                ErrorCode::TooManyStreams,
                format!(
                    "this token already has {} event streams open (the most allowed); close one, or raise [server] max_streams_per_token",
                    self.max
                ),
            )
            .with_retry_after(1));
        }
        *n += 1;
        Ok(StreamSlot {
            slots: self.clone(),
            key,
        })
    }

    /// Streams open for the request's credential.
    pub fn open(&self, headers: &HeaderMap) -> usize {
        let key = self.keys.key(headers);
        let open = self.open.lock();
        open.get(&key).copied().unwrap_or(0)
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self.slots.open.lock();
        if let Some(n) = open.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.key);
            }
        }
    }
}

/// A token bucket per credential for the write routes (`POST`, `PUT`, `PATCH`, `DELETE`):
/// `per_minute` writes a minute, in bursts of up to `per_minute`. Requests without a
/// credential are not counted (webhooks and sign-in carry their own proof), nor is the
/// exempt credential (the server's own token, by default: the gateway, the relay and the
/// console use it too).
#[derive(Debug)]
pub struct WriteRate {
    per_minute: u32,
    keys: CallerKeys,
    exempt: Option<CallerKey>,
    buckets: Mutex<HashMap<CallerKey, Bucket>>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl WriteRate {
    /// `per_minute` of 0 means no limit; requests bearing `exempt` (a token) are never
    /// counted.
    pub fn new(per_minute: u32, exempt: Option<&str>) -> Arc<Self> {
        let keys = CallerKeys::default();
        let exempt = exempt.map(|t| keys.of_token(t));
        Arc::new(Self {
            per_minute,
            keys,
            exempt,
            buckets: Mutex::default(),
        })
    }

    /// Gives back the write [`Self::take`] took for a request the route then refused as
    /// unauthenticated; a bucket that request made is dropped. So buckets are kept only for
    /// credentials the server accepted: a stream of made-up tokens costs no memory.
    fn give_back(&self, key: CallerKey, created: bool) {
        let mut buckets = self.buckets.lock();
        if created {
            buckets.remove(&key);
        } else if let Some(b) = buckets.get_mut(&key) {
            b.tokens = (b.tokens + 1.0).min(f64::from(self.per_minute));
        }
    }

    /// How many credentials have a bucket.
    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.buckets.lock().len()
    }

    /// Takes one write for `key` at `now`: whether its bucket was made for it, or
    /// `Err(wait)` when the bucket is empty.
    fn take(&self, key: CallerKey, now: Instant) -> Result<bool, Duration> {
        let cap = f64::from(self.per_minute);
        let per_sec = cap / 60.0;
        let mut buckets = self.buckets.lock();
        // Full buckets carry no information: dropped, so idle callers cost no memory.
        buckets.retain(|_, b| b.tokens + now.duration_since(b.at).as_secs_f64() * per_sec < cap);
        let created = !buckets.contains_key(&key);
        let b = buckets.entry(key).or_insert(Bucket {
            tokens: cap,
            at: now,
        });
        b.tokens = (b.tokens + now.duration_since(b.at).as_secs_f64() * per_sec).min(cap);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(created)
        } else {
            Err(Duration::from_secs_f64((1.0 - b.tokens) / per_sec))
        }
    }
}

/// Middleware: a write over the credential's rate is answered 429 `rate_limited` with
/// `Retry-After` before the route sees it. Reads and streams are not counted.
pub async fn limit_writes(
    State(rate): State<Arc<WriteRate>>,
    req: Request,
    next: Next,
) -> Response {
    let write = matches!(
        *req.method(),
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    );
    let anonymous = !req
        .headers()
        .contains_key(axum::http::header::AUTHORIZATION);
    if rate.per_minute == 0 || !write || anonymous {
        return next.run(req).await;
    }
    let key = rate.keys.key(req.headers());
    if Some(key) == rate.exempt {
        return next.run(req).await;
    }
    match rate.take(key, Instant::now()) {
        Ok(created) => {
            let resp = next.run(req).await;
            if resp.status() == axum::http::StatusCode::UNAUTHORIZED {
                rate.give_back(key, created);
            }
            resp
        }
        Err(wait) => {
            // Rounded up: a client that waits exactly this long finds a write allowed.
            let secs = (wait.as_secs_f64().ceil() as u64).max(1);
            ApiError::new(
                ErrorCode::RateLimited,
                format!(
                    "more than {} writes a minute with this token; retry in {secs} s",
                    rate.per_minute
                ),
            )
            .with_retry_after(secs)
            .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn bearer(t: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            axum::http::header::AUTHORIZATION,
            format!("Bearer {t}").parse().unwrap(),
        );
        h
    }

    #[test]
    fn stream_slots_are_per_token_and_given_back() {
        let slots = StreamSlots::new(2);
        let a = bearer("a");
        let one = slots.take(&a).unwrap();
        let _two = slots.take(&a).unwrap();
        let err = slots.take(&a).unwrap_err();
        assert_eq!(err.code(), "too_many_streams");
        assert_eq!(err.status().as_u16(), 429);
        // Another token has its own slots.
        let _b = slots.take(&bearer("b")).unwrap();
        drop(one);
        assert_eq!(slots.open(&a), 1);
        let _three = slots.take(&a).unwrap();
    }

    #[tokio::test]
    async fn writes_over_the_rate_are_refused_but_not_the_exempt_token_nor_anonymous_ones() {
        use axum::body::Body;
        use tower::ServiceExt as _;
        let app = axum::Router::new()
            .route(
                "/w",
                axum::routing::post(|| async { "ok" }).get(|| async { "ok" }),
            )
            .layer(axum::middleware::from_fn_with_state(
                WriteRate::new(2, Some("local")),
                limit_writes,
            ));
        let call = |method: &str, auth: Option<&str>| {
            let mut b = axum::http::Request::builder().method(method).uri("/w");
            if let Some(t) = auth {
                b = b.header("authorization", format!("Bearer {t}"));
            }
            app.clone().oneshot(b.body(Body::empty()).unwrap())
        };
        for _ in 0..2 {
            assert_eq!(call("POST", Some("member")).await.unwrap().status(), 200);
        }
        let refused = call("POST", Some("member")).await.unwrap();
        assert_eq!(refused.status(), 429);
        let wait: u64 = refused.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(wait, 30, "one write every 30 s at 2 a minute, rounded up");
        // Reads, the server's own token and requests without a credential are not counted.
        assert_eq!(call("GET", Some("member")).await.unwrap().status(), 200);
        for _ in 0..5 {
            assert_eq!(call("POST", Some("local")).await.unwrap().status(), 200);
            assert_eq!(call("POST", None).await.unwrap().status(), 200);
        }
    }

    /// Made-up tokens are refused by the route (401): no bucket is kept for them, so a
    /// flood of them costs no memory; a valid token's bucket stays.
    #[tokio::test]
    async fn write_buckets_are_kept_only_for_accepted_tokens() {
        use axum::body::Body;
        use tower::ServiceExt as _;
        let rate = WriteRate::new(10, None);
        let app = axum::Router::new()
            .route(
                "/w",
                axum::routing::post(|headers: HeaderMap| async move {
                    let ok = headers
                        .get("authorization")
                        .is_some_and(|v| v == "Bearer good");
                    if ok {
                        axum::http::StatusCode::OK
                    } else {
                        axum::http::StatusCode::UNAUTHORIZED
                    }
                }),
            )
            .layer(axum::middleware::from_fn_with_state(
                rate.clone(),
                limit_writes,
            ));
        let call = |t: String| {
            let b = axum::http::Request::builder()
                .method("POST")
                .uri("/w")
                .header("authorization", format!("Bearer {t}"));
            app.clone().oneshot(b.body(Body::empty()).unwrap())
        };
        for i in 0..500 {
            assert_eq!(call(format!("bogus-{i}")).await.unwrap().status(), 401);
        }
        assert_eq!(rate.tracked(), 0, "no bucket for a refused token");
        assert_eq!(call("good".into()).await.unwrap().status(), 200);
        assert_eq!(rate.tracked(), 1);
    }

    #[test]
    fn the_write_bucket_refills_at_its_rate() {
        let rate = WriteRate::new(60, None);
        let key = rate.keys.key(&bearer("a"));
        let t0 = Instant::now();
        for _ in 0..60 {
            rate.take(key, t0).unwrap();
        }
        let wait = rate.take(key, t0).unwrap_err();
        assert!((0.9..=1.1).contains(&wait.as_secs_f64()), "{wait:?}");
        // One a second comes back.
        rate.take(key, t0 + Duration::from_millis(1001)).unwrap();
        assert!(rate.take(key, t0 + Duration::from_millis(1002)).is_err());
        // Another token is not affected.
        rate.take(rate.keys.key(&bearer("b")), t0).unwrap();
    }
}
