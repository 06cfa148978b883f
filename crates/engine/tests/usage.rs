//! The meter on a real SQLite store with a test clock: a budget's window rolls over at its
//! local midnight, a call that would cross the limit is refused whole, a lost call counts
//! its reservation, and twenty concurrent reservations never pass the limit.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

use std::sync::Arc;

use chrono::{DateTime, Utc};
use switchboard_engine::usage::{Attribution, Meter, MeterError, UsageConfig};
use switchboard_protocol::Usage;
use switchboard_protocol::usage::{AtLimit, BudgetScope, BudgetSpec, BudgetWindow};
use switchboard_store::{SqlStore, Store};
use uuid::Uuid;

fn budget(limit_tokens: u64) -> BudgetSpec {
    BudgetSpec {
        name: "daily".into(),
        scope: BudgetScope::User,
        match_: None,
        window: BudgetWindow::Day,
        time_zone: Some("Europe/Berlin".into()),
        limit_usd: None,
        limit_tokens: Some(limit_tokens),
        at_limit: AtLimit::Stop,
    }
}

fn alice() -> Attribution {
    Attribution {
        session_id: Some(Uuid::now_v7()),
        run_id: Some(Uuid::now_v7()),
        user: Some("alice".into()),
        backend: "builtin".into(),
        ..Attribution::default()
    }
}

async fn meter(
    limit: u64,
) -> (
    tempfile::TempDir,
    Arc<Meter>,
    Arc<parking_lot::Mutex<DateTime<Utc>>>,
) {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> =
        Arc::new(SqlStore::open_path(&dir.path().join("db")).await.unwrap());
    let config = UsageConfig {
        budgets: vec![budget(limit)],
        ..UsageConfig::default()
    };
    let meter = Arc::new(Meter::new(store, &config).unwrap());
    let now = Arc::new(parking_lot::Mutex::new(
        "2026-12-05T22:30:00Z".parse::<DateTime<Utc>>().unwrap(),
    ));
    let clock = now.clone();
    meter.set_clock(Arc::new(move || *clock.lock()));
    (dir, meter, now)
}

#[tokio::test]
async fn a_day_window_rolls_over_at_local_midnight() {
    let (_dir, meter, now) = meter(1_000).await;
    let who = alice();
    // 23:30 in Berlin: 600 of 1,000 tokens held and spent.
    let t = meter.reserve(&who, "openai", "m", 500, 100).await.unwrap();
    meter
        .settle(&t, Some(&Usage::tokens(500, 100)))
        .await
        .unwrap();
    // Another 600 would cross the limit: refused, naming the budget and its reset.
    match meter.reserve(&who, "openai", "m", 500, 100).await {
        Err(MeterError::Exhausted { hit, .. }) => {
            assert_eq!(hit.budget, "daily");
            assert_eq!(hit.subject, "alice");
            assert_eq!(
                hit.resets_at,
                Some("2026-12-05T23:00:00Z".parse().unwrap()),
                "midnight in Berlin"
            );
        }
        other => panic!("expected the budget to refuse: {other:?}"),
    }
    // Someone else has a budget of their own.
    let bob = Attribution {
        user: Some("bob".into()),
        ..alice()
    };
    assert!(meter.reserve(&bob, "openai", "m", 500, 100).await.is_ok());
    // Past midnight in Berlin (still the 5th in UTC): a new window.
    *now.lock() = "2026-12-05T23:00:01Z".parse().unwrap();
    let t = meter.reserve(&who, "openai", "m", 500, 100).await.unwrap();
    meter
        .settle(&t, Some(&Usage::tokens(10, 10)))
        .await
        .unwrap();
    meter.flush().await;
    let status = meter.status().await.unwrap();
    let w = status[0]
        .windows
        .iter()
        .find(|w| w.subject == "alice")
        .unwrap();
    assert_eq!(w.window, "2026-12-06");
    assert_eq!(w.spent_tokens, 20);
}

#[tokio::test]
async fn a_lost_call_counts_its_reservation_and_concurrent_calls_never_pass_the_limit() {
    let (_dir, meter, _now) = meter(1_000).await;
    let who = alice();
    // Held, never settled: the run ends, the call is lost, its reservation spent.
    let _t = meter.reserve(&who, "openai", "m", 100, 100).await.unwrap();
    assert_eq!(meter.lose(who.run_id.unwrap()).await.unwrap(), 1);
    let spent = meter.status().await.unwrap()[0].windows[0].spent_tokens;
    assert_eq!(
        spent, 200,
        "not knowing what a call cost never lets more through"
    );
    // Twenty at once, each 100, with 800 left: exactly eight.
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let meter = meter.clone();
            let who = Attribution {
                run_id: Some(Uuid::now_v7()),
                ..who.clone()
            };
            tokio::spawn(async move { meter.reserve(&who, "openai", "m", 50, 50).await })
        })
        .collect();
    let mut granted = 0;
    for t in tasks {
        if t.await.unwrap().is_ok() {
            granted += 1;
        }
    }
    assert_eq!(granted, 8);
}

/// Two instances (two meters, each with its own pool) on one PostgreSQL database: twenty
/// runs at once against a budget nearly spent never take it past its limit — the store
/// serializes the reservations, whoever makes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_postgres_never_pass_a_budget_together() {
    let db = switchboard_test_support::postgres::TestDatabase::create("sb_usage").await;
    let open = || async {
        let s: Arc<dyn Store> = Arc::new(
            SqlStore::open_postgres(switchboard_store::PostgresOptions::new(&db.url))
                .await
                .unwrap(),
        );
        s
    };
    let config = UsageConfig {
        budgets: vec![BudgetSpec {
            scope: BudgetScope::Global,
            time_zone: None,
            ..budget(10_000)
        }],
        ..UsageConfig::default()
    };
    let a = Arc::new(Meter::new(open().await, &config).unwrap());
    let b = Arc::new(Meter::new(open().await, &config).unwrap());
    // Nearly spent: 8,500 of 10,000, so room for one call of 1,000 and not two.
    let t = a
        .reserve(&alice(), "openai", "m", 8_000, 500)
        .await
        .unwrap();
    a.settle(&t, Some(&Usage::tokens(8_000, 500)))
        .await
        .unwrap();
    a.flush().await;
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let m = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(async move {
                let who = Attribution {
                    run_id: Some(Uuid::now_v7()),
                    ..alice()
                };
                match m.reserve(&who, "openai", "m", 500, 500).await {
                    Ok(t) => {
                        m.settle(&t, Some(&Usage::tokens(500, 500))).await.unwrap();
                        1
                    }
                    Err(MeterError::Exhausted { .. }) => 0,
                    Err(e) => panic!("{e}"),
                }
            })
        })
        .collect();
    let mut granted = 0;
    for t in tasks {
        granted += t.await.unwrap();
    }
    a.flush().await;
    b.flush().await;
    assert_eq!(granted, 1, "room for one");
    let w = &a.status().await.unwrap()[0].windows[0];
    assert_eq!(w.spent_tokens, 9_500);
    assert_eq!(w.reserved_tokens, 0);
}

/// A budget made over the API on one instance holds on another within about a second,
/// and at once on the instance it was made on; no call waits for the other instance's
/// refresh (its store answers slowly here, and every call still returns at once).
#[tokio::test]
async fn a_budget_made_on_one_instance_holds_on_another_within_a_second() {
    use std::time::{Duration, Instant};
    use switchboard_test_support::faulty_store::{Action, Fault, FaultyStore};
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> =
        Arc::new(SqlStore::open_path(&dir.path().join("db")).await.unwrap());
    let slow = Arc::new(FaultyStore::new(store.clone()));
    let here = Meter::new(store, &UsageConfig::default()).unwrap();
    let there = Meter::new(slow.clone(), &UsageConfig::default()).unwrap();
    assert!(there.budgets().await.unwrap().is_empty(), "read once, none");
    slow.set(
        "list_budgets",
        Fault::always(Action::Delay(Duration::from_millis(400))),
    );
    let mut spec = budget(10);
    spec.name = "made-here".into();
    here.put_budget(spec, "admin").await.unwrap();
    let named =
        |b: &[switchboard_engine::usage::Budget]| b.iter().any(|b| b.spec.name == "made-here");
    assert!(
        named(&here.budgets().await.unwrap()),
        "at once where it was made"
    );
    let started = Instant::now();
    loop {
        let t = Instant::now();
        let seen = named(&there.budgets().await.unwrap());
        assert!(
            t.elapsed() < Duration::from_millis(300),
            "a call waited {:?} for the budgets' refresh",
            t.elapsed()
        );
        if seen {
            break;
        }
        assert!(
            started.elapsed() < switchboard_engine::usage::API_BUDGETS_TTL * 3,
            "not seen on the other instance after {:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(slow.calls("list_budgets"), 2, "one refresh at a time");
}

/// A budget whose scope changes starts its windows afresh from what was spent under the new
/// scope (the old window, of a subject it no longer has, is gone); a new limit keeps them.
#[tokio::test]
async fn a_budget_redefined_over_the_api_counts_afresh_and_a_new_limit_keeps_its_windows() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> =
        Arc::new(SqlStore::open_path(&dir.path().join("db")).await.unwrap());
    let meter = Meter::new(store, &UsageConfig::default()).unwrap();
    let mut spec = budget(100_000);
    spec.name = "team".into();
    spec.scope = BudgetScope::Global;
    spec.time_zone = None;
    meter.put_budget(spec.clone(), "admin").await.unwrap();
    let bob = Attribution {
        user: Some("bob".into()),
        ..alice()
    };
    for (who, used) in [(alice(), 300), (bob, 200)] {
        let t = meter.reserve(&who, "openai", "m", 100, 100).await.unwrap();
        meter
            .settle(&t, Some(&Usage::tokens(used, 0)))
            .await
            .unwrap();
    }
    meter.flush().await;
    let windows = |s: &[switchboard_protocol::usage::BudgetStatus]| -> Vec<(String, u64)> {
        let mut w: Vec<_> = s[0]
            .windows
            .iter()
            .map(|w| (w.subject.clone(), w.spent_tokens))
            .collect();
        w.sort();
        w
    };
    assert_eq!(
        windows(&meter.status().await.unwrap()),
        [(String::new(), 500)]
    );
    spec.limit_tokens = Some(200_000);
    meter.put_budget(spec.clone(), "admin").await.unwrap();
    assert_eq!(
        windows(&meter.status().await.unwrap()),
        [(String::new(), 500)],
        "a new limit keeps what was spent"
    );
    spec.scope = BudgetScope::User;
    meter.put_budget(spec, "admin").await.unwrap();
    assert_eq!(
        windows(&meter.status().await.unwrap()),
        [("alice".to_string(), 300), ("bob".to_string(), 200)],
        "per person now, each from what they spent"
    );
}
