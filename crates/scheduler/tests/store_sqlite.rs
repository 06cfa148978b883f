//! [`ScheduleStore`] on SQLite (`scheduler.db`): the shared cases of `store_suite`, plus
//! reopening the file.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

#[macro_use]
mod store_suite;

use switchboard_scheduler::ScheduleStore;
use tempfile::TempDir;

async fn fresh() -> (TempDir, ScheduleStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = ScheduleStore::open(&dir.path().join("scheduler.db"))
        .await
        .unwrap();
    assert_eq!(store.kind(), "sqlite");
    (dir, store)
}

store_suite!(fresh);

#[tokio::test]
async fn reopening_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("scheduler.db");
    let row = store_suite::schedule("kept", None);
    {
        let s = ScheduleStore::open(&path).await.unwrap();
        s.insert_schedule(&row).await.unwrap();
    }
    let s = ScheduleStore::open(&path).await.unwrap();
    assert_eq!(s.schedule(row.id).await.unwrap(), Some(row));
}
