//! [`ScheduleStore`] on PostgreSQL (schema `scheduler`): the shared cases of `store_suite`,
//! plus several instances opening one database at once. Needs
//! `SWITCHBOARD_TEST_POSTGRES_URL` (`eval "$(scripts/test-services)"`); each test makes a
//! database of its own and drops it at the end.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

#[macro_use]
mod store_suite;

use switchboard_scheduler::ScheduleStore;
use switchboard_test_support::postgres::TestDatabase;

async fn fresh() -> (TestDatabase, ScheduleStore) {
    let db = TestDatabase::create("sb_sched").await;
    let store = ScheduleStore::open_postgres(&db.url).await.unwrap();
    assert_eq!(store.kind(), "postgres");
    (db, store)
}

store_suite!(fresh);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_opening_one_database_at_once_migrate_it_once() {
    let db = TestDatabase::create("sb_sched").await;
    let opens: Vec<_> = (0..4)
        .map(|_| {
            let url = db.url.clone();
            tokio::spawn(async move { ScheduleStore::open_postgres(&url).await })
        })
        .collect();
    let mut stores = Vec::new();
    for o in opens {
        stores.push(o.await.unwrap().unwrap());
    }
    let row = store_suite::schedule("shared", None);
    stores[0].insert_schedule(&row).await.unwrap();
    for s in &stores {
        assert_eq!(s.schedule(row.id).await.unwrap(), Some(row.clone()));
    }
}
