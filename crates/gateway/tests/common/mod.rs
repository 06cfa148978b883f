//! What the channel tests share: a sink and a channel state in memory, and a channel run
//! that a test can stop.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use switchboard_gateway::{
    ButtonPress, Channel, ChannelContext, ChannelError, ChannelState, Inbound, InboundMessage,
    InboundSink,
};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Keeps what the channel hands over; can refuse the next items, or hold `accept`.
#[derive(Default)]
pub struct Sink {
    items: Mutex<Vec<Inbound>>,
    /// Refuse this many more items.
    pub fail: AtomicUsize,
    pub attempts: AtomicUsize,
    /// Held by a test to keep `accept` from returning.
    pub hold: tokio::sync::Mutex<()>,
}

impl Sink {
    /// A sink that refuses the first `n` items.
    pub fn failing(n: usize) -> Arc<Self> {
        let s = Self::default();
        s.fail.store(n, Ordering::SeqCst);
        Arc::new(s)
    }

    pub fn items(&self) -> Vec<Inbound> {
        self.items.lock().unwrap().clone()
    }

    pub fn len(&self) -> usize {
        self.items.lock().unwrap().len()
    }

    /// Calls of `accept`, refused ones included.
    pub fn attempts(&self) -> usize {
        self.attempts.load(Ordering::SeqCst)
    }

    pub fn messages(&self) -> Vec<InboundMessage> {
        self.items()
            .into_iter()
            .filter_map(|i| match i {
                Inbound::Message(m) => Some(m),
                _ => None,
            })
            .collect()
    }

    pub fn presses(&self) -> Vec<ButtonPress> {
        self.items()
            .into_iter()
            .filter_map(|i| match i {
                Inbound::Press(p) => Some(p),
                _ => None,
            })
            .collect()
    }

    pub fn texts(&self) -> Vec<String> {
        self.messages().into_iter().map(|m| m.text).collect()
    }
}

#[async_trait]
impl InboundSink for Sink {
    async fn accept(&self, item: Inbound) -> Result<(), String> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        let _held = self.hold.lock().await;
        if self
            .fail
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err("database is locked".into());
        }
        self.items.lock().unwrap().push(item);
        Ok(())
    }
}

/// A channel's state in memory.
#[derive(Default)]
pub struct MemState(pub Mutex<HashMap<String, String>>);

impl MemState {
    /// The value of `key`, now (the trait's `get` is async).
    pub fn value(&self, key: &str) -> Option<String> {
        self.0.lock().unwrap().get(key).cloned()
    }

    /// The stored polling offset (Telegram).
    pub fn offset(&self) -> Option<i64> {
        self.value("offset").map(|s| s.parse().unwrap())
    }
}

#[async_trait]
impl ChannelState for MemState {
    async fn get(&self, key: &str) -> Option<String> {
        self.0.lock().unwrap().get(key).cloned()
    }
    async fn set(&self, key: &str, value: &str) -> Result<(), String> {
        self.0.lock().unwrap().insert(key.into(), value.into());
        Ok(())
    }
}

/// A channel's `run`, until [`Running::stop`].
pub struct Running {
    pub cancel: CancellationToken,
    pub handle: JoinHandle<Result<(), ChannelError>>,
}

impl Running {
    /// Cancels the run and waits (at most 3 s) for it to end.
    pub async fn stop(self) -> Result<(), ChannelError> {
        self.cancel.cancel();
        tokio::time::timeout(Duration::from_secs(3), self.handle)
            .await
            .expect("run stops promptly when cancelled")
            .unwrap()
    }
}

/// Runs `ch` with `sink` and `state` until stopped.
pub fn run<C: Channel + 'static>(ch: &Arc<C>, sink: &Arc<Sink>, state: &Arc<MemState>) -> Running {
    let cancel = CancellationToken::new();
    let ctx = ChannelContext {
        sink: sink.clone(),
        state: state.clone(),
    };
    let ch = ch.clone();
    let c = cancel.clone();
    let handle = tokio::spawn(async move { ch.run(ctx, c).await });
    Running { cancel, handle }
}
