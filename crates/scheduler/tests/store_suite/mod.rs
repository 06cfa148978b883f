//! The [`ScheduleStore`] cases every back-end must pass: round trips, and the semantics the
//! scheduler's exactly-once firing rests on (a due time claimed once, even by concurrent
//! claimers; open firings leased to one owner; saves guarded by ownership).
//! `store_sqlite.rs` and `store_postgres.rs` run them, each on a fresh store per case.

use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};
use switchboard_protocol::schedules::{Firing, FiringStatus, ScheduleSpec};
use switchboard_scheduler::ScheduleStore;
use switchboard_scheduler::store::{FiringRow, ScheduleRow};
use uuid::Uuid;

/// One `#[tokio::test]` per case, each on the store (and its guard) from `$open().await`.
macro_rules! store_suite {
    ($open:path) => {
        store_suite!(@cases $open;
            schedules_round_trip,
            due_lists_what_is_due_and_not_paused,
            a_due_time_is_claimed_once,
            concurrent_claims_have_one_winner,
            a_claim_of_a_paused_or_deleted_schedule_fails,
            open_firings_are_leased_to_one_owner,
            saves_are_guarded_by_ownership,
            history_is_newest_first_and_active_lists_open_runs,
            a_closed_firing_is_reopened_once
        );
    };
    (@cases $open:path; $($case:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $case() {
            let (_guard, store) = $open().await;
            store_suite::$case(&store).await;
        }
    )*};
}

fn t(s: &str) -> DateTime<Utc> {
    s.parse().unwrap()
}

fn t0() -> DateTime<Utc> {
    t("2026-12-07T08:00:00Z")
}

pub fn schedule(prompt: &str, next_due: Option<DateTime<Utc>>) -> ScheduleRow {
    ScheduleRow {
        id: Uuid::new_v4(),
        spec: ScheduleSpec {
            every: Some("10m".into()),
            prompt: prompt.into(),
            deliver: vec!["telegram:42".into()],
            ..Default::default()
        },
        paused: false,
        next_due,
        created_at: t0(),
        updated_at: t0(),
    }
}

pub fn firing(schedule_id: Uuid, due_at: DateTime<Utc>, status: FiringStatus) -> FiringRow {
    FiringRow::new(Firing {
        id: Uuid::new_v4(),
        schedule_id,
        due_at,
        manual: false,
        status,
        skip_reason: None,
        more_skipped: 0,
        started_at: None,
        finished_at: None,
        session_id: None,
        run_id: None,
        outcome: None,
        reply: None,
        rejected_tools: Vec::new(),
        deliveries: Vec::new(),
    })
}

pub async fn schedules_round_trip(s: &ScheduleStore) {
    let a = schedule("a", Some(t0()));
    let mut b = schedule("b", None);
    b.created_at = t0() + TimeDelta::seconds(1);
    s.insert_schedule(&a).await.unwrap();
    s.insert_schedule(&b).await.unwrap();
    assert_eq!(s.schedule(a.id).await.unwrap(), Some(a.clone()));
    assert_eq!(s.schedules().await.unwrap(), vec![a.clone(), b.clone()]);
    let mut a2 = a.clone();
    a2.paused = true;
    a2.spec.prompt = "changed".into();
    a2.next_due = Some(t0() + TimeDelta::minutes(10));
    assert!(s.update_schedule(&a2).await.unwrap());
    assert_eq!(s.schedule(a.id).await.unwrap(), Some(a2));
    assert!(s.delete_schedule(a.id).await.unwrap());
    assert!(!s.delete_schedule(a.id).await.unwrap());
    assert_eq!(s.schedule(a.id).await.unwrap(), None);
    assert!(!s.update_schedule(&a).await.unwrap(), "gone");
}

pub async fn due_lists_what_is_due_and_not_paused(s: &ScheduleStore) {
    let due = schedule("due", Some(t0()));
    let later = schedule("later", Some(t0() + TimeDelta::minutes(5)));
    let mut paused = schedule("paused", Some(t0()));
    paused.paused = true;
    let done = schedule("done", None);
    for x in [&due, &later, &paused, &done] {
        s.insert_schedule(x).await.unwrap();
    }
    let ids: Vec<Uuid> = s.due(t0()).await.unwrap().iter().map(|r| r.id).collect();
    assert_eq!(ids, vec![due.id]);
    let ids: Vec<Uuid> = s
        .due(t0() + TimeDelta::minutes(5))
        .await
        .unwrap()
        .iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(ids, vec![due.id, later.id]);
}

pub async fn a_due_time_is_claimed_once(s: &ScheduleStore) {
    let row = schedule("x", Some(t0()));
    s.insert_schedule(&row).await.unwrap();
    let next = Some(t0() + TimeDelta::minutes(10));
    let f = firing(row.id, t0(), FiringStatus::Starting);
    let lease = Utc::now() + TimeDelta::seconds(30);
    assert!(
        s.claim(row.id, t0(), next, std::slice::from_ref(&f), "a", lease)
            .await
            .unwrap()
    );
    let f2 = firing(row.id, t0(), FiringStatus::Starting);
    assert!(
        !s.claim(row.id, t0(), next, std::slice::from_ref(&f2), "b", lease)
            .await
            .unwrap()
    );
    assert_eq!(s.schedule(row.id).await.unwrap().unwrap().next_due, next);
    let all = s.firings(row.id, 10).await.unwrap();
    assert_eq!(all, vec![f], "the losing claim wrote nothing");
    assert_eq!(s.firing(f2.firing.id).await.unwrap(), None);
}

pub async fn concurrent_claims_have_one_winner(s: &ScheduleStore) {
    let row = schedule("x", Some(t0()));
    s.insert_schedule(&row).await.unwrap();
    let s = Arc::new(s.clone());
    let barrier = Arc::new(tokio::sync::Barrier::new(8));
    let mut tasks = Vec::new();
    for i in 0..8 {
        let s = s.clone();
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            let f = firing(row.id, t0(), FiringStatus::Starting);
            barrier.wait().await;
            s.claim(
                row.id,
                t0(),
                Some(t0() + TimeDelta::minutes(10)),
                &[f],
                &format!("i{i}"),
                Utc::now() + TimeDelta::seconds(30),
            )
            .await
            .unwrap()
        }));
    }
    let mut won = 0;
    for t in tasks {
        if t.await.unwrap() {
            won += 1;
        }
    }
    assert_eq!(won, 1);
    assert_eq!(s.firings(row.id, 10).await.unwrap().len(), 1);
}

pub async fn a_claim_of_a_paused_or_deleted_schedule_fails(s: &ScheduleStore) {
    let mut row = schedule("x", Some(t0()));
    s.insert_schedule(&row).await.unwrap();
    row.paused = true;
    s.update_schedule(&row).await.unwrap();
    let f = firing(row.id, t0(), FiringStatus::Starting);
    let lease = Utc::now() + TimeDelta::seconds(30);
    assert!(
        !s.claim(row.id, t0(), None, std::slice::from_ref(&f), "a", lease)
            .await
            .unwrap()
    );
    s.delete_schedule(row.id).await.unwrap();
    assert!(!s.claim(row.id, t0(), None, &[f], "a", lease).await.unwrap());
}

pub async fn open_firings_are_leased_to_one_owner(s: &ScheduleStore) {
    let row = schedule("x", Some(t0()));
    s.insert_schedule(&row).await.unwrap();
    let now = Utc::now();
    let f = firing(row.id, t0(), FiringStatus::Running);
    let skipped = firing(row.id, t0() - TimeDelta::minutes(10), FiringStatus::Skipped);
    assert!(!skipped.open);
    assert!(
        s.claim(
            row.id,
            t0(),
            None,
            &[skipped, f.clone()],
            "a",
            now + TimeDelta::seconds(30)
        )
        .await
        .unwrap()
    );
    let ids = |v: Vec<FiringRow>| v.into_iter().map(|f| f.firing.id).collect::<Vec<_>>();
    // The owner gets it back (renewing); another instance does not while the lease holds.
    assert_eq!(
        ids(s
            .take_open("a", now, now + TimeDelta::seconds(30))
            .await
            .unwrap()),
        vec![f.firing.id]
    );
    assert!(
        s.take_open("b", now, now + TimeDelta::seconds(30))
            .await
            .unwrap()
            .is_empty()
    );
    // Once it ran out, one of two takers wins.
    let later = now + TimeDelta::seconds(31);
    let (b, c) = tokio::join!(
        s.take_open("b", later, later + TimeDelta::seconds(30)),
        s.take_open("c", later, later + TimeDelta::seconds(30)),
    );
    let (b, c) = (b.unwrap(), c.unwrap());
    assert_eq!(b.len() + c.len(), 1, "one taker: {b:?} {c:?}");
}

pub async fn saves_are_guarded_by_ownership(s: &ScheduleStore) {
    let row = schedule("x", Some(t0()));
    s.insert_schedule(&row).await.unwrap();
    let now = Utc::now();
    let mut f = firing(row.id, t0(), FiringStatus::Starting);
    s.claim(row.id, t0(), None, std::slice::from_ref(&f), "a", now)
        .await
        .unwrap();
    let taken = s
        .take_open(
            "b",
            now + TimeDelta::seconds(1),
            now + TimeDelta::seconds(30),
        )
        .await
        .unwrap();
    assert_eq!(taken.len(), 1);
    f.firing.status = FiringStatus::Running;
    assert!(!s.save_firing(&f, "a").await.unwrap(), "a lost it");
    assert_eq!(
        s.firing(f.firing.id).await.unwrap().unwrap().firing.status,
        FiringStatus::Starting
    );
    assert!(s.save_firing(&f, "b").await.unwrap());
    // Done: closed and released, no longer taken by anyone.
    f.firing.status = FiringStatus::Succeeded;
    f.open = false;
    assert!(s.save_firing(&f, "b").await.unwrap());
    let later = now + TimeDelta::hours(1);
    assert!(s.take_open("c", later, later).await.unwrap().is_empty());
    assert_eq!(s.firing(f.firing.id).await.unwrap().unwrap(), f);
}

pub async fn history_is_newest_first_and_active_lists_open_runs(s: &ScheduleStore) {
    let row = schedule("x", None);
    s.insert_schedule(&row).await.unwrap();
    let lease = Utc::now() + TimeDelta::seconds(30);
    let mut made = Vec::new();
    for (i, status) in [
        FiringStatus::Succeeded,
        FiringStatus::Skipped,
        FiringStatus::Running,
        FiringStatus::Queued,
    ]
    .into_iter()
    .enumerate()
    {
        let f = firing(row.id, t0() + TimeDelta::minutes(i as i64), status);
        s.insert_firing(&f, "a", lease).await.unwrap();
        made.push(f);
    }
    let all = s.firings(row.id, 10).await.unwrap();
    let due: Vec<_> = all.iter().map(|f| f.firing.due_at).collect();
    let mut sorted = due.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(due, sorted, "newest first");
    assert_eq!(s.firings(row.id, 2).await.unwrap().len(), 2);
    let active: Vec<_> = s
        .active(row.id)
        .await
        .unwrap()
        .into_iter()
        .map(|f| f.firing.id)
        .collect();
    assert_eq!(
        active,
        vec![made[2].firing.id, made[3].firing.id],
        "oldest first"
    );
    assert!(s.delete_schedule(row.id).await.unwrap());
    assert!(
        s.firings(row.id, 10).await.unwrap().is_empty(),
        "history goes with it"
    );
}

pub async fn a_closed_firing_is_reopened_once(s: &ScheduleStore) {
    let row = schedule("x", None);
    s.insert_schedule(&row).await.unwrap();
    let mut f = firing(row.id, t0(), FiringStatus::Failed);
    f.open = false;
    s.insert_firing(&f, "a", Utc::now()).await.unwrap();
    s.save_firing(&f, "a").await.unwrap();
    assert!(s.reopen_firing(&f).await.unwrap());
    assert!(!s.reopen_firing(&f).await.unwrap(), "open already");
    let now = Utc::now();
    let taken = s
        .take_open("b", now, now + TimeDelta::seconds(30))
        .await
        .unwrap();
    assert_eq!(taken.len(), 1, "anyone takes a reopened firing");
}
