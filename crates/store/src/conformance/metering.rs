//! Usage and budgets: what a call reserves, settles and loses, what sums say, and that a
//! limit holds under concurrent reservations.
#![allow(clippy::expect_used)] // the suite panics with what broke

use uuid::Uuid;

use super::check;
use crate::{
    BudgetRecord, CallFilter, CallKey, CallRecord, CallUsage, Reservation, Store, WindowClaim,
};

fn call(run: Uuid, model: &str, at: &str, micros: u64, tokens: u64) -> CallRecord {
    CallRecord {
        id: Uuid::now_v7(),
        at: at.into(),
        session_id: Some(Uuid::now_v7()),
        run_id: Some(run),
        user_name: Some("alice".into()),
        chat: Some("telegram:42".into()),
        backend: "builtin".into(),
        provider: "openai".into(),
        model: model.into(),
        state: "reserved".into(),
        reserved_microdollars: micros,
        reserved_tokens: tokens,
        ..CallRecord::default()
    }
}

fn claim(budget: &str, limit_micros: Option<u64>, limit_tokens: Option<u64>) -> WindowClaim {
    WindowClaim {
        budget: budget.into(),
        subject: String::new(),
        window: "2026-01-01".into(),
        limit_microdollars: limit_micros,
        limit_tokens,
    }
}

fn everything() -> CallFilter {
    CallFilter {
        from: "2000".into(),
        to: "3000".into(),
        ..CallFilter::default()
    }
}

fn used(input: u64, output: u64, cost: Option<u64>) -> CallUsage {
    CallUsage {
        reported: true,
        input_tokens: input,
        output_tokens: output,
        cost_microdollars: cost,
        ..CallUsage::default()
    }
}

/// Reserve, settle, lose; the windows follow; sums add up to the rows by every key.
pub async fn usage_is_reserved_settled_and_summed(store: &dyn Store) {
    let budget = format!("b-{}", Uuid::now_v7().simple());
    let run = Uuid::now_v7();
    let claims = [claim(&budget, Some(1_000), None)];
    let a = call(run, "gpt-a", "2026-01-01T10:00:00.000000Z", 300, 50);
    let granted = check("reserve", store.reserve_call(&a, &claims).await);
    let Reservation::Granted(w) = granted else {
        panic!("a reservation within the limit was refused: {granted:?}");
    };
    assert_eq!(w[0].reserved_microdollars, 300, "the estimate is held");
    let after = check(
        "settle",
        store.settle_call(a.id, &used(10, 20, Some(120))).await,
    )
    .expect("a reserved call settles");
    assert_eq!(after[0].reserved_microdollars, 0, "the hold is given back");
    assert_eq!(after[0].spent_microdollars, 120, "what it cost is spent");
    assert_eq!(after[0].spent_tokens, 30);
    assert!(
        check(
            "settle twice",
            store.settle_call(a.id, &used(1, 1, Some(1))).await
        )
        .is_none(),
        "a settled call does not settle again"
    );
    // A call the backend did not report counts its reservation, and one cut off too.
    let b = call(run, "gpt-b", "2026-01-02T10:00:00.000000Z", 200, 40);
    check("reserve b", store.reserve_call(&b, &claims).await);
    let unreported = CallUsage::default();
    let after = check("settle b", store.settle_call(b.id, &unreported).await).expect("settles");
    assert_eq!(
        after[0].spent_microdollars, 320,
        "an unreported call spends its hold"
    );
    let c = call(run, "gpt-a", "2026-01-02T11:00:00.000000Z", 100, 10);
    check("reserve c", store.reserve_call(&c, &claims).await);
    assert_eq!(check("lose", store.lose_calls(run).await), 1);
    assert_eq!(check("lose again", store.lose_calls(run).await), 0);
    let w = check("windows", store.budget_windows(&budget, "2026-01-01").await);
    assert_eq!(w[0].spent_microdollars, 420, "a lost call spends its hold");
    assert_eq!(w[0].reserved_microdollars, 0);
    // A call recorded after the fact (no reservation), of a model without a price.
    let mut d = call(Uuid::now_v7(), "local", "2026-01-02T12:00:00.000000Z", 0, 0);
    d.state = "settled".into();
    d.reported = true;
    d.input_tokens = 7;
    d.output_tokens = 3;
    d.chat = None;
    check("record", store.record_call(&d, &claims).await);
    let w = check("windows", store.budget_windows(&budget, "2026-01-01").await);
    assert_eq!(w[0].spent_tokens, 30 + 40 + 10 + 10);

    let mut filter = everything();
    filter.user_name = Some("alice".into());
    let rows = check("list", store.list_calls(&filter, 100).await);
    let ours: Vec<&CallRecord> = rows.iter().filter(|r| r.run_id == Some(run)).collect();
    assert_eq!(ours.len(), 3);
    assert_eq!(ours[0].id, c.id, "newest first");
    assert_eq!(ours[0].state, "lost");
    assert_eq!(ours[2].cost_microdollars, Some(120));
    // Sums over only these calls: a filter on their chat and user.
    let mut mine = everything();
    mine.chat = Some("telegram:42".into());
    mine.user_name = Some("alice".into());
    mine.from = "2026-01-01".into();
    mine.to = "2026-01-03".into();
    let rows = check("list mine", store.list_calls(&mine, 1000).await);
    for keys in [
        vec![],
        vec![CallKey::Day],
        vec![CallKey::Model],
        vec![CallKey::Session],
        vec![CallKey::User],
        vec![CallKey::Chat],
        vec![CallKey::Backend],
        vec![CallKey::Schedule],
        vec![CallKey::Day, CallKey::Model],
    ] {
        let groups = check("totals", store.call_totals(&mine, &keys).await);
        let calls: u64 = groups.iter().map(|(_, t)| t.calls).sum();
        let cost: u64 = groups.iter().map(|(_, t)| t.cost_microdollars).sum();
        let input: u64 = groups.iter().map(|(_, t)| t.input_tokens).sum();
        assert_eq!(
            calls,
            rows.len() as u64,
            "{keys:?}: every call in one group"
        );
        assert_eq!(
            cost,
            rows.iter().filter_map(|r| r.cost_microdollars).sum::<u64>(),
            "{keys:?}: costs add up"
        );
        assert_eq!(input, rows.iter().map(|r| r.input_tokens).sum::<u64>());
    }
    let by_model = check(
        "by model",
        store.call_totals(&mine, &[CallKey::Model]).await,
    );
    let a_model = by_model
        .iter()
        .find(|(k, _)| k[0].as_deref() == Some("openai/gpt-a"))
        .expect("a group per provider/model");
    assert_eq!(a_model.1.calls, 2);
    assert_eq!(a_model.1.unreported_calls, 1, "the lost call is unreported");
    let by_day = check("by day", store.call_totals(&mine, &[CallKey::Day]).await);
    let days: Vec<Option<&str>> = by_day.iter().map(|(k, _)| k[0].as_deref()).collect();
    assert!(days.contains(&Some("2026-01-01")) && days.contains(&Some("2026-01-02")));
    let unpriced = check("unpriced", store.unpriced_models(&everything()).await);
    assert!(unpriced.contains(&("openai".into(), "local".into())));
}

/// A limit holds: a reservation that would pass it is refused whole; twenty at once
/// against room for ten get exactly ten; an approver's extra makes room.
pub async fn budget_limits_hold_under_concurrency(store: &dyn Store) {
    let budget = format!("b-{}", Uuid::now_v7().simple());
    let other = format!("o-{}", Uuid::now_v7().simple());
    let run = Uuid::now_v7();
    let claims = [
        claim(&other, None, Some(1_000_000)),
        claim(&budget, None, Some(100)),
    ];
    let a = call(run, "m", "2026-01-01T00:00:00.000000Z", 0, 60);
    assert!(matches!(
        check("reserve", store.reserve_call(&a, &claims).await),
        Reservation::Granted(_)
    ));
    let b = call(run, "m", "2026-01-01T00:00:01.000000Z", 0, 60);
    match check("reserve over", store.reserve_call(&b, &claims).await) {
        Reservation::Refused(w) => {
            assert_eq!(w.budget, budget, "the full window is named");
            assert_eq!(w.reserved_tokens, 60);
        }
        other => panic!("a reservation over the limit was granted: {other:?}"),
    }
    let ow = check("other", store.budget_windows(&other, "2026-01-01").await);
    assert_eq!(
        ow[0].reserved_tokens, 60,
        "a refusal writes nothing anywhere"
    );
    let mut filter = everything();
    filter.user_name = Some("alice".into());
    let listed = check("list", store.list_calls(&filter, 1000).await);
    assert!(!listed.iter().any(|c| c.id == b.id), "nor the refused call");
    check("settle", store.settle_call(a.id, &used(0, 0, None)).await);

    // Twenty at once (each on a connection of its own), room for ten.
    let calls: Vec<CallRecord> = (0..20)
        .map(|i| call(run, "m", &format!("2026-01-01T00:01:{i:02}.000000Z"), 0, 10))
        .collect();
    let results =
        futures::future::join_all(calls.iter().map(|c| store.reserve_call(c, &claims))).await;
    let mut granted = 0;
    for r in results {
        match r {
            Ok(Reservation::Granted(_)) => granted += 1,
            Ok(Reservation::Refused(_)) => {}
            // SQLite's busy timeout may refuse a writer under this much contention; a
            // failed reservation lets nothing through either.
            Err(e) => eprintln!("a reservation failed: {e}"),
        }
    }
    let w = check("window", store.budget_windows(&budget, "2026-01-01").await);
    assert!(
        granted <= 10,
        "{granted} reservations of 10 within a limit of 100"
    );
    assert_eq!(w[0].reserved_tokens, granted * 10);
    assert!(w[0].reserved_tokens + w[0].spent_tokens <= 100);
    check("lose", store.lose_calls(run).await);
    check(
        "extend",
        store.extend_window(&budget, "", "2026-01-01", 0, 50).await,
    );
    let c = call(Uuid::now_v7(), "m", "2026-01-01T00:02:00.000000Z", 0, 50);
    assert!(
        matches!(
            check("reserve extra", store.reserve_call(&c, &claims).await),
            Reservation::Granted(_)
        ),
        "an extra allowance makes room"
    );
}

/// Budgets made over the API round-trip; a put with fresh windows and removing one remove
/// its windows.
pub async fn budgets_round_trip(store: &dyn Store) {
    let name = format!("b-{}", Uuid::now_v7().simple());
    let b = BudgetRecord {
        name: name.clone(),
        spec: r#"{"name":"x"}"#.into(),
        created_at: super::ts(1),
        created_by: "admin".into(),
    };
    check("put", store.put_budget(&b, false).await);
    let mut changed = b.clone();
    changed.spec = r#"{"name":"y"}"#.into();
    check("put again", store.put_budget(&changed, false).await);
    let all = check("list", store.list_budgets().await);
    let got = all.iter().find(|x| x.name == name).expect("listed");
    assert_eq!(got.spec, changed.spec, "a put replaces the spec");
    let seed = crate::WindowRecord {
        budget: name.clone(),
        window: "w".into(),
        spent_microdollars: 70,
        spent_tokens: 7,
        ..crate::WindowRecord::default()
    };
    assert!(check("seed", store.seed_window(&seed).await));
    let again = crate::WindowRecord {
        spent_microdollars: 1,
        ..seed.clone()
    };
    assert!(
        !check("seed again", store.seed_window(&again).await),
        "a window that exists is left as it is"
    );
    check("extend", store.extend_window(&name, "", "w", 1, 1).await);
    let w = check("windows", store.budget_windows(&name, "w").await);
    assert_eq!((w[0].spent_microdollars, w[0].extra_tokens), (70, 1));
    check("put, same windows", store.put_budget(&changed, false).await);
    assert_eq!(
        check("windows", store.budget_windows(&name, "w").await).len(),
        1,
        "a put that keeps the windows keeps them"
    );
    check("put, fresh windows", store.put_budget(&changed, true).await);
    assert!(
        check("windows", store.budget_windows(&name, "w").await).is_empty(),
        "a put with fresh windows removes them"
    );
    assert!(check("seed anew", store.seed_window(&seed).await));
    assert!(check("delete", store.delete_budget(&name).await));
    assert!(!check("delete again", store.delete_budget(&name).await));
    assert!(
        check("windows", store.budget_windows(&name, "w").await).is_empty(),
        "its windows go with it"
    );
}
