//! Usage, cost and budgets (docs/usage.md) against the real binary and the mock model, which
//! reports usage as OpenAI does: every model call metered and priced, reports that add up
//! exactly by every grouping on SQLite and PostgreSQL, and budgets that stop a run before
//! the call that would cross them.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

mod common;

use std::path::Path;

use serde_json::{Value, json};
use switchboard_protocol::{AgentEvent, RunErrorCode};
use switchboard_test_support::mock_llm::{MockLlm, MockReply};
use switchboard_test_support::process::ServerProcess;

use common::TOKEN;
use common::api::{call, cli, get, person};
use switchboard_protocol::people::{Role, Scope};

/// `mock-model` at $2 in and $8 out per million tokens: a call costs 2 µ$ an input token
/// and 8 µ$ an output token, exactly.
const PRICES: &str = "[prices.\"openai/mock-model\"]\ninput = 2.0\noutput = 8.0\n";

async fn serve(dir: &Path, llm: &MockLlm, config: &str, store_url: Option<&str>) -> ServerProcess {
    let path = dir.join("switchboard.toml");
    std::fs::write(&path, config).unwrap();
    let mut env = vec![("SWITCHBOARD_CONFIG", path.to_string_lossy().into_owned())];
    if let Some(url) = store_url {
        env.push(("SWITCHBOARD_STORE_URL", url.to_string()));
    }
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    common::start(&dir.join("data"), &llm.base_url(), &env).await
}

/// Runs `text` in session `id` to its end; its events.
async fn run(
    c: &switchboard_client::Client,
    id: uuid::Uuid,
    text: &str,
) -> Vec<switchboard_protocol::EventEnvelope> {
    let (mut events, run_id) = common::send(c, id, text).await;
    common::until_run_ends(&mut events, run_id).await
}

fn n(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"))
}

/// Three runs in two sessions, one of them with a tool call (two model calls): every call
/// is a row, priced exactly, and every grouping adds up to the total.
async fn usage_adds_up(store_url: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    let llm = MockLlm::start().await;
    let server = serve(dir.path(), &llm, PRICES, store_url).await;
    let c = common::client(&server);
    let a = c.create_session(&Default::default()).await.unwrap().id;
    let b = c.create_session(&Default::default()).await.unwrap().id;
    let first = run(&c, a, "hello there").await;
    llm.push(MockReply::tool_call("c1", "list_dir", json!({"path": "."})));
    run(&c, b, "look around").await;
    run(&c, a, "and again").await;

    let model_calls = llm.chat_requests().len() as u64;
    assert_eq!(model_calls, 4, "one call a run, two for the tool call's");
    // The run's end carries its cost: its one call's.
    let (reported, completed) = first.iter().fold((None, None), |acc, e| match &e.event {
        AgentEvent::UsageReport { usage, .. } => (Some(*usage), acc.1),
        AgentEvent::RunCompleted { total_usage, .. } => (acc.0, Some(*total_usage)),
        _ => acc,
    });
    let reported = reported.expect("a usage report");
    let completed = completed.expect("the run completed");
    assert_eq!(
        reported.cost_microdollars,
        Some(reported.prompt_tokens * 2 + reported.completion_tokens * 8),
        "priced at the configured price"
    );
    assert_eq!(completed.cost_microdollars, reported.cost_microdollars);
    assert!(!completed.cost_incomplete);

    let calls = get(&server, "/v1/usage/calls?limit=1000").await;
    let rows = calls["calls"].as_array().unwrap();
    assert_eq!(rows.len() as u64, model_calls, "a row per model call");
    let mut cost = 0;
    for r in rows {
        assert_eq!(r["state"], "settled");
        assert_eq!(r["reported"], true);
        assert_eq!(r["provider"], "openai");
        assert_eq!(r["model"], "mock-model");
        assert_eq!(r["backend"], "builtin");
        assert_eq!(
            n(r, "cost_microdollars"),
            n(r, "input_tokens") * 2 + n(r, "output_tokens") * 8
        );
        cost += n(r, "cost_microdollars");
    }
    let input: u64 = rows.iter().map(|r| n(r, "input_tokens")).sum();
    let total = get(&server, "/v1/usage").await["total"].clone();
    assert_eq!(n(&total, "calls"), model_calls);
    assert_eq!(n(&total, "cost_microdollars"), cost);
    assert_eq!(n(&total, "input_tokens"), input);
    assert_eq!(n(&total, "unpriced_calls"), 0);
    for group in [
        "day", "session", "user", "chat", "model", "backend", "schedule",
    ] {
        let r = get(&server, &format!("/v1/usage?group_by={group}")).await;
        let groups = r["groups"].as_array().unwrap();
        let sum = |k: &str| groups.iter().map(|g| n(g, k)).sum::<u64>();
        assert_eq!(
            sum("calls"),
            model_calls,
            "{group}: every call in one group"
        );
        assert_eq!(sum("cost_microdollars"), cost, "{group}: costs add up");
        assert_eq!(sum("input_tokens"), input, "{group}: tokens add up");
        assert_eq!(r["total"], total, "{group}: the same total");
    }
    let by_session = get(&server, "/v1/usage?group_by=session").await;
    let of = |id: uuid::Uuid| {
        by_session["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["key"] == id.to_string())
            .map(|g| n(g, "calls"))
    };
    assert_eq!((of(a), of(b)), (Some(2), Some(2)));
    let by_day = get(&server, "/v1/usage?group_by=day").await;
    let day = &by_day["groups"][0];
    assert_eq!(
        day["by_model"][0]["key"], "openai/mock-model",
        "each day by model"
    );
    assert_eq!(n(&day["by_model"][0], "calls"), model_calls);
    // One session's usage alone, and its running total with the session.
    let only_a = get(&server, &format!("/v1/usage?session={a}")).await;
    assert_eq!(n(&only_a["total"], "calls"), 2);
    let detail = c.get_session(a).await.unwrap();
    let running = detail.usage.expect("a session shows its usage");
    assert_eq!(running.calls, 2);
    assert_eq!(
        running.cost_microdollars,
        n(&only_a["total"], "cost_microdollars")
    );
    // The CLI: a table by model, and the report as JSON.
    let (ok, table, err) = cli(&server.url, &["usage", "--by", "model"]);
    assert!(ok, "{err}");
    assert!(table.contains("openai/mock-model"), "{table}");
    assert!(
        table.contains(&switchboard_protocol::usage::format_micros(cost)),
        "{table}"
    );
    let (ok, out, err) = cli(&server.url, &["usage", "--since", "7d", "--json"]);
    assert!(ok, "{err}");
    let parsed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(parsed["total"], total);
    // Prometheus counts the same.
    let metrics = common::scrape(&server.url).await;
    let cost_metric = common::sample(
        &metrics,
        "switchboard_cost_microdollars_total{model=\"openai/mock-model\"}",
    );
    assert_eq!(cost_metric, Some(cost as f64), "{metrics}");
    assert!(
        common::sample(
            &metrics,
            "switchboard_tokens_total{model=\"openai/mock-model\",kind=\"output\"}"
        )
        .is_some_and(|v| v > 0.0)
    );
}

#[tokio::test]
async fn usage_is_metered_and_adds_up_on_sqlite() {
    usage_adds_up(None).await;
}

#[tokio::test]
async fn usage_is_metered_and_adds_up_on_postgres() {
    let db = common::Db::create().await;
    usage_adds_up(Some(&db.url)).await;
    db.drop_now().await;
}

/// A model without a price is counted in tokens and flagged, never priced at zero.
#[tokio::test]
async fn an_unpriced_model_is_counted_in_tokens_and_flagged() {
    let dir = tempfile::tempdir().unwrap();
    let llm = MockLlm::start().await;
    let server = serve(dir.path(), &llm, "", None).await;
    let c = common::client(&server);
    let id = c.create_session(&Default::default()).await.unwrap().id;
    let events = run(&c, id, "hi").await;
    let total = events
        .iter()
        .find_map(|e| match &e.event {
            AgentEvent::RunCompleted { total_usage, .. } => Some(*total_usage),
            _ => None,
        })
        .unwrap();
    assert_eq!(total.cost_microdollars, None);
    assert!(total.cost_incomplete, "the run's cost says it is not known");
    assert!(total.prompt_tokens > 0);
    let r = get(&server, "/v1/usage").await;
    assert_eq!(n(&r["total"], "unpriced_calls"), 1);
    assert_eq!(r["unpriced_models"], json!(["openai/mock-model"]));
}

/// A budget stops a run before the model call that would cross it: the model is not
/// called, the run ends `budget_exhausted` naming the budget and when it resets. Near the
/// limit, the run is told first.
#[tokio::test]
async fn a_budget_stops_a_run_before_the_call_that_would_cross_it() {
    let dir = tempfile::tempdir().unwrap();
    let llm = MockLlm::start().await;
    let server = serve(dir.path(), &llm, PRICES, None).await;
    let c = common::client(&server);
    let id = c.create_session(&Default::default()).await.unwrap().id;
    run(&c, id, "first").await;
    let total = get(&server, "/v1/usage").await["total"].clone();
    let spent = n(&total, "input_tokens") + n(&total, "output_tokens");
    // What a call of this session holds while it runs: its input and 4,096 tokens out.
    let held = n(
        &get(&server, "/v1/usage/calls").await["calls"][0],
        "reserved_tokens",
    );
    assert!(held > 4_096, "the reply's most output is held: {held}");

    // Room for one more call's reservation (a little more than the first's: the history
    // grew), and 80 % of the limit is held once it is made: the run is told, and goes on.
    let budget = |limit: u64| json!({"name": "daily", "scope": "global", "window": "day", "limit_tokens": limit});
    let (s, b) = call(
        &server,
        TOKEN,
        "PUT",
        "/v1/budgets/daily",
        Some(budget(spent + held + 300)),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    let events = run(&c, id, "second").await;
    assert!(
        events.iter().any(|e| matches!(&e.event, AgentEvent::Notice { message, .. } if message.contains("budget daily is 80 % spent"))),
        "the run is told the budget is nearly spent: {:?}",
        common::kinds(&events)
    );
    assert!(matches!(
        events.last().unwrap().event,
        AgentEvent::RunCompleted { .. }
    ));

    // Now no room for another call: the run ends before it, and the model is not called.
    let before = llm.chat_requests().len();
    let used = {
        let t = &get(&server, "/v1/usage").await["total"];
        n(t, "input_tokens") + n(t, "output_tokens")
    };
    call(
        &server,
        TOKEN,
        "PUT",
        "/v1/budgets/daily",
        Some(budget(used + 100)),
    )
    .await;
    let events = run(&c, id, "third").await;
    assert_eq!(
        llm.chat_requests().len(),
        before,
        "the model was not called"
    );
    match &events.last().unwrap().event {
        AgentEvent::RunError {
            code,
            budget,
            retryable,
            error,
            ..
        } => {
            assert_eq!(*code, RunErrorCode::BudgetExhausted);
            assert!(!retryable);
            let hit = budget.as_ref().expect("the budget is named");
            assert_eq!(hit.budget, "daily");
            let tomorrow = (chrono::Utc::now() + chrono::Duration::days(1)).date_naive();
            assert_eq!(
                hit.resets_at.map(|t| t.date_naive()),
                Some(tomorrow),
                "a day's window resets at the next midnight (UTC)"
            );
            assert!(error.contains("budget daily"), "{error}");
        }
        other => panic!("the run should have ended on the budget: {other:?}"),
    }
    // The CLI lists it, with what its window spent.
    let (ok, table, err) = cli(&server.url, &["budgets", "list"]);
    assert!(ok, "{err}");
    assert!(
        table.contains("daily") && table.contains("tokens"),
        "{table}"
    );
    let (ok, _, err) = cli(
        &server.url,
        &[
            "budgets",
            "set",
            "weekly-ish",
            "--scope",
            "user",
            "--window",
            "month",
            "--usd",
            "9.5",
            "--ask",
        ],
    );
    assert!(ok, "{err}");
    let listed = get(&server, "/v1/budgets").await;
    let weekly = listed["budgets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["budget"]["name"] == "weekly-ish")
        .cloned()
        .unwrap();
    assert_eq!(weekly["budget"]["at_limit"], "ask");
    assert_eq!(weekly["limit_microdollars"], 9_500_000);
    let (ok, _, err) = cli(&server.url, &["budgets", "remove", "weekly-ish"]);
    assert!(ok, "{err}");
    // Both changes are in the audit log, each with an object for its detail.
    let audit = get(&server, "/v1/audit?action=budget.delete").await;
    assert_eq!(audit["entries"][0]["target"], "weekly-ish");
    assert!(audit["entries"][0]["detail"].is_object(), "{audit}");
    let audit = get(&server, "/v1/audit?action=budget.put").await;
    assert!(!audit["entries"].as_array().unwrap().is_empty());
    // The budget's state says what was spent, and nothing is held.
    let budgets = get(&server, "/v1/budgets").await;
    let daily = &budgets["budgets"][0];
    assert_eq!(daily["budget"]["name"], "daily");
    assert_eq!(daily["source"], "api");
    assert_eq!(n(&daily["windows"][0], "reserved_tokens"), 0);
    // A budget of the configuration file cannot be changed over the API, nor made twice.
    let (s, _) = call(
        &server,
        TOKEN,
        "PUT",
        "/v1/budgets/other",
        Some(json!({"name": "mismatch", "scope": "global", "window": "day", "limit_usd": 1.0})),
    )
    .await;
    assert_eq!(s, 422, "the name must be the path's");
    let (s, b) = call(
        &server,
        TOKEN,
        "PUT",
        "/v1/budgets/bad",
        Some(json!({"name": "bad", "scope": "global", "window": "day"})),
    )
    .await;
    assert_eq!(s, 422, "a budget needs a limit: {b}");
    let (s, b) = call(&server, TOKEN, "PUT", "/v1/budgets/bad", Some(json!({"name": "bad", "scope": "global", "window": "day", "limit_usd": 1, "time_zone": "Mars/Base"})))
    .await;
    assert_eq!(s, 422, "an unknown time zone: {b}");
    assert!(
        b["error"].as_str().is_some_and(|m| m.contains("Mars/Base")),
        "{b}"
    );
}

/// `[[budgets]]` of the configuration: a per-user limit in dollars stops that person's
/// runs (a member, by token) and not the server token's.
#[tokio::test]
async fn a_configured_budget_per_user_stops_only_that_user() {
    let dir = tempfile::tempdir().unwrap();
    let llm = MockLlm::start().await;
    // Each call reserves at least 4,096 output tokens at 8 µ$: 32,768 µ$ > $0.03.
    let config = format!(
        "{PRICES}\n[[budgets]]\nname = \"per-person\"\nscope = \"user\"\nwindow = \"month\"\nlimit_usd = 0.03\n"
    );
    let server = serve(dir.path(), &llm, &config, None).await;
    let admin = common::client(&server);
    let (mia, mia_token) = person(
        &server,
        "mia",
        Role::Member,
        &[Scope::SessionsRead, Scope::SessionsWrite, Scope::UsageRead],
    )
    .await;
    let id = mia.create_session(&Default::default()).await.unwrap().id;
    let events = run(&mia, id, "hi").await;
    match &events.last().unwrap().event {
        AgentEvent::RunError { code, budget, .. } => {
            assert_eq!(*code, RunErrorCode::BudgetExhausted);
            let hit = budget.as_ref().unwrap();
            assert_eq!(
                (hit.budget.as_str(), hit.subject.as_str()),
                ("per-person", "mia")
            );
        }
        other => panic!("mia's run should stop on her budget: {other:?}"),
    }
    assert!(llm.chat_requests().is_empty(), "the model was not called");
    // The server token is nobody's person: its runs are not limited by a per-user budget.
    let own = admin.create_session(&Default::default()).await.unwrap().id;
    let events = run(&admin, own, "hi").await;
    assert!(matches!(
        events.last().unwrap().event,
        AgentEvent::RunCompleted { .. }
    ));
    // A member sees their own usage only.
    let (s, _) = call(&server, &mia_token, "GET", "/v1/usage?user=admin", None).await;
    assert_eq!(s, 403);
    // The configuration's budget cannot be changed over the API.
    let (s, _) = call(
        &server,
        TOKEN,
        "PUT",
        "/v1/budgets/per-person",
        Some(json!({"name": "per-person", "scope": "global", "window": "day", "limit_usd": 100})),
    )
    .await;
    assert_eq!(s, 409);
}

/// In a chat: `/usage` shows what this chat's runs cost, and a budget of the chat stops
/// its next run with a message that names it.
#[tokio::test]
async fn a_chat_sees_its_usage_and_its_budget() {
    let w = common::chat::World::new("telegram").await;
    let config = w.dir.path().join("usage.toml");
    std::fs::write(&config, PRICES).unwrap();
    let server = w
        .server_with(&[("SWITCHBOARD_CONFIG", config.to_str().unwrap())])
        .await;
    let chat = w.dm_chat();
    w.dm("hello");
    w.wait(chat, "the reply", |m| m.text.contains("Hello"))
        .await;
    w.dm("/usage");
    let usage = w
        .wait(chat, "the usage", |m| m.text.starts_with("This chat today"))
        .await;
    assert!(usage.text.contains("(1 model calls"), "{}", usage.text);
    // The chat's calls are the chat's: grouped by chat, one group with them.
    let by_chat = get(&server, "/v1/usage?group_by=chat").await;
    let key = by_chat["groups"][0]["key"].as_str().unwrap().to_string();
    assert!(key.starts_with("telegram:"), "{key}");
    assert_eq!(n(&by_chat["groups"][0], "calls"), 1);
    // A budget on each chat, smaller than one call's reservation: the next run stops.
    let (s, b) = call(
        &server,
        TOKEN,
        "PUT",
        "/v1/budgets/per-chat",
        Some(json!({"name": "per-chat", "scope": "chat", "window": "day", "limit_usd": 0.03})),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    let calls = w.llm.chat_requests().len();
    w.dm("more please");
    let stopped = w
        .wait(chat, "the budget's message", |m| {
            m.text.contains("budget per-chat")
        })
        .await;
    assert!(
        stopped.text.contains(&key),
        "names whose budget: {}",
        stopped.text
    );
    assert_eq!(
        w.llm.chat_requests().len(),
        calls,
        "the model was not called"
    );
    w.dm("/status");
    let status = w
        .wait(chat, "the status", |m| {
            m.text.contains("This chat this month")
        })
        .await;
    assert!(status.text.contains("(1 model calls"), "{}", status.text);
}

/// A schedule is budgeted like anything else: its firings' runs are its own (`group_by =
/// schedule`), and a budget of the schedule stops its next firing's run before the model
/// is called, the firing failing with the budget's words.
#[tokio::test]
async fn a_schedule_is_budgeted_like_anything_else() {
    use switchboard_protocol::schedules::{FiringStatus, ScheduleSpec};
    let dir = tempfile::tempdir().unwrap();
    let llm = MockLlm::start().await;
    let server = serve(dir.path(), &llm, PRICES, None).await;
    let c = common::client(&server);
    let s = c
        .create_schedule(&ScheduleSpec {
            every: Some("1h".into()),
            prompt: "check the build".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let finished = |n: usize| {
        let c = c.clone();
        async move {
            for _ in 0..600 {
                let f = c.list_firings(s.id).await.unwrap().firings;
                let done: Vec<_> = f
                    .into_iter()
                    .filter(|f| matches!(f.status, FiringStatus::Succeeded | FiringStatus::Failed))
                    .collect();
                if done.len() >= n {
                    return done;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            panic!("no {n} finished firings");
        }
    };
    c.run_schedule(s.id).await.unwrap();
    finished(1).await;
    let by_schedule = get(&server, "/v1/usage?group_by=schedule").await;
    assert_eq!(by_schedule["groups"][0]["key"], s.id.to_string());
    assert_eq!(n(&by_schedule["groups"][0], "calls"), 1);
    // This schedule's budget, smaller than a call's reservation.
    let (st, b) = call(&server, TOKEN, "PUT", "/v1/budgets/nightly", Some(json!({"name": "nightly", "scope": "schedule", "match": s.id.to_string(), "window": "month", "limit_usd": 0.03})))
    .await;
    assert_eq!(st, 200, "{b}");
    let calls = llm.chat_requests().len();
    c.run_schedule(s.id).await.unwrap();
    let done = finished(2).await;
    let last = done
        .iter()
        .find(|f| f.status == FiringStatus::Failed)
        .expect("the second firing failed");
    assert!(
        last.outcome
            .as_deref()
            .is_some_and(|o| o.contains("budget nightly")),
        "{last:?}"
    );
    assert_eq!(llm.chat_requests().len(), calls, "the model was not called");
}

/// An ACP agent's usage: the cumulative cost of its `usage_update`s, counted by what it
/// grew each turn; a turn it reports nothing for is a call of unknown usage; a budget on
/// the backend stops its next run before the prompt.
#[tokio::test]
async fn acp_usage_is_recorded_from_the_agent_s_usage_updates() {
    use switchboard_protocol::{BackendSpec, CreateSessionRequest};
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let llm = MockLlm::start().await;
    let config = common::test_agent_config(dir.path());
    let toml = std::fs::read_to_string(&config).unwrap();
    let server = serve(dir.path(), &llm, &toml, None).await;
    let c = common::client(&server);
    let id = c
        .create_session(&CreateSessionRequest {
            cwd: Some(ws.path().to_string_lossy().into_owned()),
            backend: Some(BackendSpec::Acp("test".into())),
            ..CreateSessionRequest::default()
        })
        .await
        .unwrap()
        .id;
    let cost_of = |events: &[switchboard_protocol::EventEnvelope]| {
        events.iter().find_map(|e| match &e.event {
            AgentEvent::RunCompleted { total_usage, .. } => Some(*total_usage),
            _ => None,
        })
    };
    let first = run(&c, id, "[cost=0.25] hi").await;
    assert_eq!(cost_of(&first).unwrap().cost_microdollars, Some(250_000));
    let second = run(&c, id, "[cost=0.40] again").await;
    assert_eq!(
        cost_of(&second).unwrap().cost_microdollars,
        Some(150_000),
        "what the session's total grew by"
    );
    let third = run(&c, id, "nothing reported").await;
    assert!(
        cost_of(&third).unwrap().cost_incomplete,
        "unknown, not free"
    );
    let r = get(&server, "/v1/usage?group_by=backend").await;
    let test = &r["groups"][0];
    assert_eq!(test["key"], "test");
    assert_eq!(n(test, "calls"), 3);
    assert_eq!(n(test, "cost_microdollars"), 400_000);
    assert_eq!(n(test, "unreported_calls"), 1);
    // A budget on this backend, spent: the next run stops before its prompt.
    let (s, b) = call(&server, TOKEN, "PUT", "/v1/budgets/agents", Some(json!({"name": "agents", "scope": "backend", "match": "test", "window": "month", "limit_usd": 0.4})))
    .await;
    assert_eq!(s, 200, "{b}");
    let stopped = run(&c, id, "[cost=0.50] more").await;
    match &stopped.last().unwrap().event {
        AgentEvent::RunError { code, budget, .. } => {
            assert_eq!(*code, RunErrorCode::BudgetExhausted);
            assert_eq!(budget.as_ref().unwrap().budget, "agents");
        }
        other => panic!("the run should stop on the backend's budget: {other:?}"),
    }
    assert_eq!(
        n(
            &get(&server, "/v1/usage").await["total"],
            "cost_microdollars"
        ),
        400_000,
        "the stopped run cost nothing"
    );
}

/// The console's Usage page in headless Chromium (tests/e2e/usage.mjs): the period's cost,
/// the chart of cost per day stacked by model, the top sessions, the budgets, a session's
/// running cost; screenshots `usage.png` and `usage-phone.png`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_usage_page_shows_cost_per_day_by_model_and_the_budgets() {
    let dir = tempfile::tempdir().unwrap();
    let llm = MockLlm::start().await;
    let config = format!(
        "{PRICES}\n[[budgets]]\nname = \"team-daily\"\nscope = \"global\"\nwindow = \"day\"\nlimit_usd = 0.04\n"
    );
    let server = serve(dir.path(), &llm, &config, None).await;
    let c = common::client(&server);
    for text in ["one", "two"] {
        let title = format!("Session {text}");
        let new = switchboard_protocol::CreateSessionRequest {
            title: Some(title),
            ..Default::default()
        };
        let id = c.create_session(&new).await.unwrap().id;
        run(&c, id, text).await;
    }
    let cost = n(
        &get(&server, "/v1/usage").await["total"],
        "cost_microdollars",
    );
    let shown = format!("${:.4}", cost as f64 / 1e6);
    let mut script = common::browser::Script::start(
        "usage.mjs",
        &[
            ("SB_URL", &server.url),
            ("SB_TOKEN", TOKEN),
            ("SB_COST", &shown),
        ],
        std::time::Duration::from_secs(180),
    );
    if let Some(cmd) = script.next_command().await {
        panic!("unexpected request from the script: {cmd}");
    }
    script.finish(|| server.logs()).await;
    common::browser::assert_shots(&["usage.png", "usage-phone.png"]);
}

/// A member reads their own usage and their own windows of the budgets, not what others
/// spent; an admin reads everyone's.
#[tokio::test]
async fn a_member_sees_their_own_spending_only() {
    let dir = tempfile::tempdir().unwrap();
    let llm = MockLlm::start().await;
    let config = format!(
        "{PRICES}\n[[budgets]]\nname = \"per-person\"\nscope = \"user\"\nwindow = \"month\"\nlimit_usd = 1.0\n"
    );
    let server = serve(dir.path(), &llm, &config, None).await;
    let mut tokens = Vec::new();
    for name in ["mia", "noa"] {
        let (c, token) = person(
            &server,
            name,
            Role::Member,
            &[Scope::SessionsRead, Scope::SessionsWrite, Scope::UsageRead],
        )
        .await;
        let id = c.create_session(&Default::default()).await.unwrap().id;
        run(&c, id, &format!("hello from {name}")).await;
        tokens.push(token);
    }
    let as_mia = |path: &'static str| {
        let (server, token) = (&server, tokens[0].clone());
        async move {
            let (s, b) = call(server, &token, "GET", path, None).await;
            assert_eq!(s, 200, "GET {path}: {b}");
            b
        }
    };
    let budgets = as_mia("/v1/budgets").await;
    let subjects: Vec<&str> = budgets["budgets"][0]["windows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["subject"].as_str().unwrap())
        .collect();
    assert_eq!(subjects, ["mia"], "her own window only");
    let usage = as_mia("/v1/usage?group_by=user").await;
    assert_eq!(usage["groups"].as_array().unwrap().len(), 1);
    assert_eq!(usage["groups"][0]["key"], "mia");
    let all = get(&server, "/v1/budgets").await;
    assert_eq!(
        all["budgets"][0]["windows"].as_array().unwrap().len(),
        2,
        "{all}"
    );
}

/// `at_limit = "ask"`: at its limit the run asks for one more window's worth — an approval
/// the server token alone may not decide (so no chat's own approval mode extends a budget),
/// an operator may; allowed, the run goes on; refused, it ends `budget_exhausted`.
#[tokio::test]
async fn ask_lets_an_operator_extend_a_budget_once() {
    use switchboard_protocol::{DecisionAction, usage::BUDGET_EXTENSION_TOOL};
    let dir = tempfile::tempdir().unwrap();
    let llm = MockLlm::start().await;
    // Below one call's estimate (its input and 4,096 out), within two windows' worth.
    let config = format!(
        "{PRICES}\n[[budgets]]\nname = \"ask-me\"\nscope = \"global\"\nwindow = \"day\"\nlimit_tokens = 4000\nat_limit = \"ask\"\n"
    );
    let server = serve(dir.path(), &llm, &config, None).await;
    let c = common::client(&server);
    let (ops, _) = person(
        &server,
        "ops",
        Role::Operator,
        &[Scope::SessionsRead, Scope::ApprovalsDecide],
    )
    .await;
    let id = c.create_session(&Default::default()).await.unwrap().id;
    let (mut events, run_id) = common::send(&c, id, "please").await;
    let waiting = common::until(&mut events, "the budget's approval", |e| {
        matches!(e, AgentEvent::WaitingForToolApproval { .. })
    })
    .await;
    let call = waiting
        .iter()
        .find_map(|e| match &e.event {
            AgentEvent::ToolCallsProposed { tool_calls, .. } => tool_calls.first().cloned(),
            _ => None,
        })
        .expect("the extension is proposed");
    assert_eq!(call.name, BUDGET_EXTENSION_TOOL);
    assert_eq!(call.arguments["budget"], "ask-me");
    assert!(llm.chat_requests().is_empty(), "nothing was called yet");
    // The server token alone (what a chat's allow-all mode decides with) may not.
    let accept = common::decide(run_id, &call.id, DecisionAction::Accept, None);
    let refused = c.decide_tools(id, &accept).await.unwrap_err();
    assert_eq!(refused.status(), Some(403), "{refused}");
    // An operator may: the run goes on and the model is called.
    ops.decide_tools(id, &accept).await.unwrap();
    let rest = common::until_run_ends(&mut events, run_id).await;
    assert!(
        rest.iter().any(|e| matches!(&e.event, AgentEvent::Notice { message, .. } if message.contains("ops allowed 4000 tokens more"))),
        "{:?}",
        common::kinds(&rest)
    );
    assert!(matches!(
        rest.last().unwrap().event,
        AgentEvent::RunCompleted { .. }
    ));
    assert_eq!(llm.chat_requests().len(), 1);
    let budgets = get(&server, "/v1/budgets").await;
    assert_eq!(
        n(&budgets["budgets"][0]["windows"][0], "extra_tokens"),
        4000
    );
    // Refused: the next one that needs more ends on the budget. (Its window was extended
    // once already, so it does not ask again: it stops.)
    let big = "x".repeat(20_000);
    let (mut events, run_id) = common::send(&c, id, &big).await;
    let end = common::until_run_ends(&mut events, run_id).await;
    match &end.last().unwrap().event {
        AgentEvent::RunError { code, .. } => assert_eq!(*code, RunErrorCode::BudgetExhausted),
        other => panic!("{other:?}"),
    }
    assert!(
        !end.iter()
            .any(|e| matches!(e.event, AgentEvent::WaitingForToolApproval { .. })),
        "once per window"
    );
}
