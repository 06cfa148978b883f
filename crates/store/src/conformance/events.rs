//! The event log: append, read, conflicts, pruning.

use uuid::Uuid;

use crate::{Store, StoreError};

use super::*;

pub async fn events_append_and_read(store: &dyn Store) {
    let s = new_session(store, "events").await;
    let run = Some(Uuid::now_v7());
    let batch: Vec<_> = (1..=10).map(|i| event(s.id, i, run)).collect();
    check("append", store.append_events(&batch[..4], &[]).await);
    check("append", store.append_events(&batch[4..], &[]).await);
    let all = check("read", store.read_events(s.id, 0, 100).await);
    assert_eq!(all, batch, "events read back in order, unchanged");
    let tail = check("read", store.read_events(s.id, 7, 100).await);
    assert_eq!(
        tail.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![8, 9, 10]
    );
    let limited = check("read", store.read_events(s.id, 2, 3).await);
    assert_eq!(
        limited.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![3, 4, 5]
    );
    let b = check("bounds", store.event_bounds(s.id).await);
    assert_eq!((b.oldest, b.newest, b.last_seq), (Some(1), Some(10), 10));
    let got = check("get", store.get_session(s.id).await);
    assert_eq!(got.map(|g| g.last_seq), Some(10), "append raises last_seq");
}

pub async fn events_duplicate_seq_is_conflict(store: &dyn Store) {
    let s = new_session(store, "dup events").await;
    check(
        "append",
        store.append_events(&[event(s.id, 1, None)], &[]).await,
    );
    let r = store
        .append_events(&[event(s.id, 2, None), event(s.id, 1, None)], &[])
        .await;
    assert!(
        matches!(r, Err(StoreError::Conflict(_))),
        "reused seq is refused: {r:?}"
    );
    let all = check("read", store.read_events(s.id, 0, 100).await);
    assert_eq!(
        all.len(),
        1,
        "a failed batch leaves nothing behind (atomic)"
    );
}

pub async fn events_last_seq_survives_pruning(store: &dyn Store) {
    let s = new_session(store, "prune").await;
    let mut evs: Vec<_> = (1..=5).map(|i| event(s.id, i, None)).collect();
    for e in &mut evs {
        e.created_at = "2000-01-01T00:00:00.000000Z".into();
    }
    check("append", store.append_events(&evs, &[]).await);
    let n = check(
        "prune",
        store.prune_events_before("2001-01-01T00:00:00Z").await,
    );
    assert!(n >= 5, "old events are pruned");
    let b = check("bounds", store.event_bounds(s.id).await);
    assert_eq!(
        (b.oldest, b.newest, b.last_seq),
        (None, None, 5),
        "last_seq is kept"
    );
}
