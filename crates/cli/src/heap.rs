//! The heap gauges of `/metrics`: what jemalloc (the process's allocator, see `main.rs`)
//! holds, so an operator can tell a growing heap from memory the allocator keeps.
//!
//! - `switchboard_heap_allocated_bytes`: bytes the program has allocated and not freed
//!   (the live heap; a leak grows this one).
//! - `switchboard_heap_active_bytes`: bytes in pages holding live allocations (allocated plus
//!   the unused space of those pages: fragmentation is active minus allocated).
//! - `switchboard_heap_resident_bytes`: bytes of the allocator's memory in RAM, its metadata
//!   and the freed pages not yet given back included (the heap's share of RSS).
//! - `switchboard_heap_metadata_bytes`: the allocator's own bookkeeping (part of resident).
//! - `switchboard_heap_retained_bytes`: address space kept for reuse but given back to the OS
//!   (not in RSS).
//! - `switchboard_heap_dirty_bytes`: freed pages kept in RAM for reuse (part of resident),
//!   given back to the OS after `dirty_decay_ms` (jemalloc's default 10 s; `MALLOC_CONF`
//!   sets it). Under a steady load it follows the rate memory is freed at.
//! - `switchboard_heap_muzzy_bytes`: freed pages marked reclaimable (`MADV_FREE`), 0 unless
//!   `MALLOC_CONF` sets a `muzzy_decay_ms`.
//!
//! jemalloc's statistics are snapshots refreshed by advancing its epoch; [`sample`] does
//! that at each scrape of `/metrics` (registered with the server's metrics route by
//! [`register`]). A failed read leaves the gauges as they were and is logged once: the
//! gauges are a diagnostic, never a reason to fail a scrape.

use std::sync::atomic::{AtomicBool, Ordering};

use tikv_jemalloc_ctl::{Access, AsName, epoch, stats};

/// The heap's figures at one instant, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heap {
    pub allocated: usize,
    pub active: usize,
    pub resident: usize,
    pub metadata: usize,
    pub retained: usize,
    /// Freed pages kept for reuse, still in RAM (all arenas).
    pub dirty: usize,
    /// Freed pages marked reclaimable (`MADV_FREE`): the kernel takes them when it needs to.
    pub muzzy: usize,
}

/// Reads jemalloc's statistics now (advancing its epoch first, so they are current).
pub fn read() -> Result<Heap, tikv_jemalloc_ctl::Error> {
    epoch::advance()?;
    Ok(Heap {
        allocated: stats::allocated::read()?,
        active: stats::active::read()?,
        resident: stats::resident::read()?,
        metadata: stats::metadata::read()?,
        retained: stats::retained::read()?,
        dirty: all_arenas(b"stats.arenas.4096.pdirty\0")?,
        muzzy: all_arenas(b"stats.arenas.4096.pmuzzy\0")?,
    })
}

/// A page count summed over every arena (4096 is jemalloc's `MALLCTL_ARENAS_ALL`), in bytes.
fn all_arenas(key: &[u8]) -> Result<usize, tikv_jemalloc_ctl::Error> {
    let pages: usize = key.name().read()?;
    let page: usize = b"arenas.page\0".name().read()?;
    Ok(pages.saturating_mul(page))
}

/// Describes the heap gauges and has the metrics route set them at each scrape.
pub fn register() {
    use metrics::{Unit, describe_gauge};
    describe_gauge!(
        "switchboard_heap_allocated_bytes",
        Unit::Bytes,
        "Bytes allocated and not freed (the live heap)"
    );
    describe_gauge!(
        "switchboard_heap_active_bytes",
        Unit::Bytes,
        "Bytes in the allocator's pages that hold live allocations"
    );
    describe_gauge!(
        "switchboard_heap_resident_bytes",
        Unit::Bytes,
        "Bytes of the allocator's memory resident in RAM (its share of RSS)"
    );
    describe_gauge!(
        "switchboard_heap_metadata_bytes",
        Unit::Bytes,
        "Bytes of the allocator's own bookkeeping"
    );
    describe_gauge!(
        "switchboard_heap_dirty_bytes",
        Unit::Bytes,
        "Bytes of freed pages the allocator keeps in RAM for reuse"
    );
    describe_gauge!(
        "switchboard_heap_muzzy_bytes",
        Unit::Bytes,
        "Bytes of freed pages the allocator marked reclaimable by the kernel"
    );
    describe_gauge!(
        "switchboard_heap_retained_bytes",
        Unit::Bytes,
        "Bytes of address space the allocator keeps but gave back to the OS"
    );
    switchboard_server::routes::metrics::sample_also(sample);
}

/// Sets the heap gauges from the allocator's current statistics.
fn sample() {
    static WARNED: AtomicBool = AtomicBool::new(false);
    match read() {
        Ok(h) => {
            // Gauges are f64; a heap under 2^53 bytes converts exactly.
            metrics::gauge!("switchboard_heap_allocated_bytes").set(h.allocated as f64);
            metrics::gauge!("switchboard_heap_active_bytes").set(h.active as f64);
            metrics::gauge!("switchboard_heap_resident_bytes").set(h.resident as f64);
            metrics::gauge!("switchboard_heap_metadata_bytes").set(h.metadata as f64);
            metrics::gauge!("switchboard_heap_retained_bytes").set(h.retained as f64);
            metrics::gauge!("switchboard_heap_dirty_bytes").set(h.dirty as f64);
            metrics::gauge!("switchboard_heap_muzzy_bytes").set(h.muzzy as f64);
        }
        Err(e) => {
            if !WARNED.swap(true, Ordering::Relaxed) {
                tracing::warn!(error = %e, "cannot read the allocator's statistics; the heap gauges keep their last values");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The heap tests measure the whole process's heap: one at a time.
    static ONE_AT_A_TIME: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

    #[test]
    fn freed_pages_show_as_dirty() {
        let _one = ONE_AT_A_TIME.lock();
        if std::env::var_os("MALLOC_CONF").is_some() {
            return; // its decay settings could give them back at once
        }
        let before = read().expect("stats");
        // 96 blocks of 1 MiB, touched: below jemalloc's oversize threshold (8 MiB, given
        // back at once) and above its thread cache, so freeing them leaves dirty pages.
        let blocks: Vec<Vec<u8>> = (0..96).map(|i| vec![i as u8; 1 << 20]).collect();
        drop(std::hint::black_box(blocks));
        let after = read().expect("stats");
        // Not all 96: jemalloc may reuse or give back some at once (58.8 MiB seen in CI).
        assert!(
            after.dirty >= before.dirty + (32 << 20),
            "96 MiB freed: dirty {} -> {}",
            before.dirty,
            after.dirty
        );
        assert!(after.resident >= after.active + after.dirty, "{after:?}");
    }

    #[test]
    fn a_live_allocation_shows_in_the_allocated_figure() {
        let _one = ONE_AT_A_TIME.lock();
        let before = read().expect("stats");
        // 64 MiB, touched so it is resident: far above anything else this test thread does.
        let big = vec![1u8; 64 << 20];
        let during = read().expect("stats");
        assert!(
            during.allocated >= before.allocated + (60 << 20),
            "allocated {} -> {} with 64 MiB live",
            before.allocated,
            during.allocated
        );
        assert!(during.active >= during.allocated, "{during:?}");
        assert!(during.resident >= during.active, "{during:?}");
        drop(std::hint::black_box(big));
        let after = read().expect("stats");
        assert!(
            after.allocated + (60 << 20) <= during.allocated,
            "allocated {} -> {} after freeing 64 MiB",
            during.allocated,
            after.allocated
        );
    }
}
