//! The event bus: how committed events reach the other instances that share the store.
//!
//! With one instance there is no bus and live fan-out stays in-process. With several, each
//! instance hands every committed batch to the bus, and batches from the others are
//! injected into its own live channels ([`crate::EventLog::inject`]). The bus is a fast
//! path only: the store stays the truth, a subscription that sees a gap (or hears nothing
//! for a while) reads the store, so a lost or reordered message costs latency, never an
//! event.

use uuid::Uuid;

use crate::LogEvent;

/// Carries committed batches to the other instances.
pub trait EventBus: Send + Sync + 'static {
    /// Hands over a committed batch of one session. Must not block: an implementation
    /// queues it and may drop it when it cannot keep up (subscribers catch up from the
    /// store).
    fn publish(&self, session_id: Uuid, events: &[LogEvent]);
    /// `nats`, …
    fn kind(&self) -> &'static str;
    /// Whether the bus is connected now.
    fn connected(&self) -> bool;
}
