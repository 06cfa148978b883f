//! The outbound scheduler of one bot: every call it makes takes its turn here.
//!
//! A call names the *keys* it counts against, from the most general to the most specific:
//! `bot` (every call of the bot), `chat:{id}` (sends and edits in one chat), `edit:{id}`
//! (edits in one chat), `update` (Slack's workspace-wide `chat.update` tier), `bucket:{name}`
//! (a Discord rate-limit bucket). Each key kind may have a [`Rate`]; a key without one is
//! only ever held.
//!
//! Contract:
//! - **Pacing.** Every key with a rate is a GCRA (a leaky bucket): `burst` calls may go at
//!   once, then one per `every`. A call waits until all its keys allow it, and turns are
//!   handed out in the order they were asked for (one lock, so two calls asked at the same
//!   time are spaced too).
//! - **Holds.** When the platform says "slow down" (a 429 with a wait, or a bucket that
//!   reports no calls left), [`Outbox::hold`] stops every call on that key until the wait is
//!   over — the calls already queued included — and spends the key's burst, so that after
//!   the wait the queued calls go out one per interval: one 429 does not become a storm.
//! - **Edits coalesce.** [`Outbox::edit_turn`] for a message that already has an edit
//!   waiting takes over that edit's turn: the older edit is told it was superseded (it does
//!   not go out), the newer one goes out in its place. The newest edit of a message is never
//!   superseded, so a reply's final text always goes out. An edit whose caller gives up
//!   while it waits (its future is dropped) leaves the turn to the newest edit still
//!   waiting: a cancelled edit never takes older ones down with it.

use parking_lot::Mutex;
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use tokio::time::Instant;

/// A rate: `burst` calls at once, then one per `every`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub every: Duration,
    pub burst: u32,
}

impl Rate {
    /// `n` calls per `period`, all of them allowed at once.
    pub const fn per(n: u32, period: Duration) -> Self {
        let n = if n == 0 { 1 } else { n };
        Self {
            every: Duration::from_nanos((period.as_nanos() / n as u128) as u64),
            burst: n,
        }
    }

    /// One call per `every`, no burst.
    pub const fn spaced(every: Duration) -> Self {
        Self { every, burst: 1 }
    }

    /// How far ahead of its theoretical arrival a call may go.
    fn tolerance(&self) -> Duration {
        self.every * self.burst.saturating_sub(1)
    }
}

/// Key kinds (the part before `:`) and their rates.
#[derive(Debug, Clone, Default)]
pub struct Limits {
    rates: Vec<(String, Rate)>,
}

impl Limits {
    pub fn new() -> Self {
        Self::default()
    }

    /// Keys of `kind` (`bot`, `chat`, …) follow `rate`.
    pub fn with(mut self, kind: &str, rate: Rate) -> Self {
        self.rates.retain(|(k, _)| k != kind);
        if !rate.every.is_zero() {
            self.rates.push((kind.to_owned(), rate));
        }
        self
    }

    fn rate(&self, key: &str) -> Option<Rate> {
        let kind = key.split_once(':').map_or(key, |(k, _)| k);
        self.rates.iter().find(|(k, _)| k == kind).map(|(_, r)| *r)
    }
}

#[derive(Debug, Clone, Copy)]
struct KeyState {
    /// GCRA's theoretical arrival time of the next call.
    tat: Instant,
    /// No call before this (a hold).
    hold: Instant,
}

/// The edits of one message waiting for one turn.
#[derive(Debug)]
struct Pending {
    /// The generations still waiting (their callers have not given up); the highest goes.
    waiting: BTreeSet<u64>,
    at: Instant,
}

/// Takes a waiting edit's generation out when its caller gives up (or it is done).
struct Waiting<'a> {
    outbox: &'a Outbox,
    message: &'a str,
    generation: u64,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut edits = self.outbox.edits.lock();
        if let Some(p) = edits.get_mut(self.message) {
            p.waiting.remove(&self.generation);
            if p.waiting.is_empty() {
                edits.remove(self.message);
            }
        }
    }
}

/// See the module docs.
#[derive(Debug)]
pub struct Outbox {
    limits: Limits,
    keys: Mutex<HashMap<String, KeyState>>,
    edits: Mutex<HashMap<String, Pending>>,
    /// The generation the next edit gets, of any message: unique for the outbox's life, so
    /// that an edit's guard dropped after its entry was replaced by a newer one never takes
    /// out a generation of that newer entry.
    next_edit: std::sync::atomic::AtomicU64,
    /// The channel, as the `channel` label of `switchboard_gateway_outbound_waiting`.
    channel: String,
}

/// `switchboard_gateway_outbound_waiting{channel}`: up while a call waits for its turn,
/// down when it goes (or its caller gives up).
struct QueueGauge<'a>(&'a str);

impl<'a> QueueGauge<'a> {
    fn up(channel: &'a str) -> Self {
        metrics::gauge!("switchboard_gateway_outbound_waiting", "channel" => channel.to_owned())
            .increment(1.0);
        Self(channel)
    }
}

impl Drop for QueueGauge<'_> {
    fn drop(&mut self) {
        metrics::gauge!("switchboard_gateway_outbound_waiting", "channel" => self.0.to_owned())
            .decrement(1.0);
    }
}

/// Entries kept before the map is pruned of keys whose every instant is past.
const PRUNE_AT: usize = 4096;

impl Outbox {
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            keys: Mutex::new(HashMap::new()),
            edits: Mutex::new(HashMap::new()),
            next_edit: std::sync::atomic::AtomicU64::new(0),
            channel: String::new(),
        }
    }

    /// Names the channel this outbox paces (for its queue-depth gauge).
    pub fn for_channel(mut self, channel: &str) -> Self {
        self.channel = channel.to_owned();
        self
    }

    /// Reserves the earliest instant every key allows, and returns it.
    fn reserve(&self, keys: &[String]) -> Instant {
        let now = Instant::now();
        let mut map = self.keys.lock();
        if map.len() > PRUNE_AT {
            map.retain(|_, s| s.tat > now || s.hold > now);
        }
        let mut at = now;
        for key in keys {
            if let Some(s) = map.get(key) {
                at = at.max(s.hold);
                if let Some(rate) = self.limits.rate(key) {
                    at = at.max(s.tat.checked_sub(rate.tolerance()).unwrap_or(now));
                }
            }
        }
        for key in keys {
            let rate = self.limits.rate(key);
            let s = map.entry(key.clone()).or_insert(KeyState {
                tat: now,
                hold: now,
            });
            if let Some(rate) = rate {
                s.tat = s.tat.max(at) + rate.every;
            }
        }
        at
    }

    /// The end of the longest hold on `keys`, if one is still on.
    fn held_until(&self, keys: &[String]) -> Option<Instant> {
        let now = Instant::now();
        let map = self.keys.lock();
        keys.iter()
            .filter_map(|k| map.get(k).map(|s| s.hold))
            .filter(|h| *h > now)
            .max()
    }

    /// Sleeps until `at`; when a hold came on meanwhile, waits it out and takes a new turn
    /// (so the calls a hold stopped go out paced, not all at once when it ends).
    async fn wait(&self, keys: &[String], mut at: Instant) {
        loop {
            tokio::time::sleep_until(at).await;
            let Some(until) = self.held_until(keys) else {
                return;
            };
            tokio::time::sleep_until(until).await;
            at = self.reserve(keys);
        }
    }

    /// Waits for this call's turn on `keys`.
    pub async fn turn(&self, keys: &[String]) {
        if keys.is_empty() {
            return;
        }
        let _queued = QueueGauge::up(&self.channel);
        let at = self.reserve(keys);
        self.wait(keys, at).await;
    }

    /// Waits for the turn of an edit of `message` on `keys`; false when a newer edit of the
    /// same message took this one's place while it waited (this one must not go out).
    pub async fn edit_turn(&self, message: &str, keys: &[String]) -> bool {
        let _queued = QueueGauge::up(&self.channel);
        let (generation, at) = {
            let mut edits = self.edits.lock();
            let p = match edits.get_mut(message) {
                Some(p) => p,
                None => {
                    let at = self.reserve(keys);
                    edits.entry(message.to_owned()).or_insert(Pending {
                        waiting: BTreeSet::new(),
                        at,
                    })
                }
            };
            let generation = self
                .next_edit
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            p.waiting.insert(generation);
            (generation, p.at)
        };
        let _waiting = Waiting {
            outbox: self,
            message,
            generation,
        };
        self.wait(keys, at).await;
        let mut edits = self.edits.lock();
        match edits.get(message) {
            Some(p) if p.waiting.last() == Some(&generation) => {
                // This one goes; the older ones still waiting are superseded, and an edit
                // asked from now on takes a new turn.
                edits.remove(message);
                true
            }
            // A newer edit holds the turn (or took it and went out already).
            _ => false,
        }
    }

    /// No call on `key` for `wait` from now (a longer hold already on stays). The key's
    /// burst is spent too: when the hold ends, calls go one per its rate's interval.
    pub fn hold(&self, key: &str, wait: Duration) {
        let until = Instant::now() + wait;
        let tolerance = self.limits.rate(key).map(|r| r.tolerance());
        let mut map = self.keys.lock();
        let s = map.entry(key.to_owned()).or_insert(KeyState {
            tat: until,
            hold: until,
        });
        s.hold = s.hold.max(until);
        if let Some(tolerance) = tolerance {
            s.tat = s.tat.max(until + tolerance);
        }
    }

    /// Ends a hold on `key` (a bucket that reports calls left again).
    pub fn release(&self, key: &str) {
        if let Some(s) = self.keys.lock().get_mut(key) {
            s.hold = Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn keys(k: &[&str]) -> Vec<String> {
        k.iter().map(|s| s.to_string()).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_goes_at_once_then_calls_are_paced() {
        let o = Outbox::new(Limits::new().with("chat", Rate::per(3, Duration::from_secs(3))));
        let t0 = Instant::now();
        let k = keys(&["chat:1"]);
        for _ in 0..3 {
            o.turn(&k).await;
        }
        assert_eq!(t0.elapsed(), Duration::ZERO, "the burst waits for nothing");
        o.turn(&k).await;
        assert_eq!(t0.elapsed(), Duration::from_secs(1));
        o.turn(&k).await;
        assert_eq!(t0.elapsed(), Duration::from_secs(2));
        // another chat has its own budget
        let t1 = Instant::now();
        o.turn(&keys(&["chat:2"])).await;
        assert_eq!(t1.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn the_bot_wide_rate_spaces_calls_across_chats() {
        let o = Outbox::new(
            Limits::new()
                .with("bot", Rate::spaced(Duration::from_millis(100)))
                .with("chat", Rate::per(20, Duration::from_secs(20))),
        );
        let t0 = Instant::now();
        for chat in 0..5 {
            o.turn(&keys(&["bot", &format!("chat:{chat}")])).await;
        }
        assert_eq!(t0.elapsed(), Duration::from_millis(400));
    }

    #[tokio::test(start_paused = true)]
    async fn a_hold_stops_calls_already_waiting() {
        let o = Arc::new(Outbox::new(
            Limits::new().with("chat", Rate::spaced(Duration::from_millis(100))),
        ));
        let k = keys(&["chat:1"]);
        o.turn(&k).await;
        let t0 = Instant::now();
        // queued for +100 ms, then a 429 says 2 s
        let waiting = {
            let (o, k) = (o.clone(), k.clone());
            tokio::spawn(async move {
                o.turn(&k).await;
                Instant::now()
            })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        o.hold("chat:1", Duration::from_secs(2));
        let went = waiting.await.unwrap();
        assert!(went - t0 >= Duration::from_millis(2010), "{:?}", went - t0);
        // other keys are not held
        let t1 = Instant::now();
        o.turn(&keys(&["chat:2"])).await;
        assert_eq!(t1.elapsed(), Duration::ZERO);
        // release ends a hold early
        o.hold("bucket:x", Duration::from_secs(60));
        o.release("bucket:x");
        let t2 = Instant::now();
        o.turn(&keys(&["bucket:x"])).await;
        assert_eq!(t2.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn pending_edits_of_one_message_coalesce_and_the_last_goes_out() {
        let o = Arc::new(Outbox::new(
            Limits::new().with("edit", Rate::spaced(Duration::from_secs(1))),
        ));
        let k = keys(&["edit:1"]);
        assert!(o.edit_turn("m1", &k).await, "the first edit goes at once");
        // five edits asked at the same time while the next slot is 1 s away
        let mut tasks = Vec::new();
        for i in 0..5 {
            let (o, k) = (o.clone(), k.clone());
            tasks.push(tokio::spawn(
                async move { (i, o.edit_turn("m1", &k).await) },
            ));
            tokio::task::yield_now().await;
        }
        let mut went = Vec::new();
        for t in tasks {
            let (i, ok) = t.await.unwrap();
            if ok {
                went.push(i);
            }
        }
        assert_eq!(went, [4], "only the newest edit goes out");
        // an edit of another message is not coalesced with them
        assert!(o.edit_turn("m2", &k).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_newest_edit_given_up_leaves_the_turn_to_the_one_before() {
        let o = Arc::new(Outbox::new(
            Limits::new().with("edit", Rate::spaced(Duration::from_secs(1))),
        ));
        let k = keys(&["edit:1"]);
        assert!(o.edit_turn("m1", &k).await);
        let older = {
            let (o, k) = (o.clone(), k.clone());
            tokio::spawn(async move { o.edit_turn("m1", &k).await })
        };
        tokio::task::yield_now().await;
        let newest = {
            let (o, k) = (o.clone(), k.clone());
            tokio::spawn(async move { o.edit_turn("m1", &k).await })
        };
        tokio::task::yield_now().await;
        newest.abort();
        assert!(newest.await.is_err(), "the newest edit was cancelled");
        assert!(
            older.await.unwrap(),
            "with the newest edit gone, the one before it goes out"
        );
        // nothing is left waiting: the next edit takes a turn of its own
        let t = Instant::now();
        assert!(o.edit_turn("m1", &k).await);
        assert_eq!(t.elapsed(), Duration::from_secs(1));
    }
}
