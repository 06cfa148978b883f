//! Scheduled tasks end to end: the real server, its scheduler on a test clock (a file the
//! test writes, `SWITCHBOARD_SCHEDULER_CLOCK_FILE`), the mock LLM and a fake Telegram.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use common::chat::World;
use common::client;
use serde_json::json;
use switchboard_protocol::schedules::{DeliveryStatus, FiringStatus, ScheduleSpec, SkipReason};
use switchboard_test_support::mock_llm::MockReply;

const WAIT: Duration = Duration::from_secs(40);

struct Clock(std::path::PathBuf);

impl Clock {
    fn new(dir: &std::path::Path, t: DateTime<Utc>) -> Clock {
        let c = Clock(dir.join("clock"));
        c.set(t);
        c
    }
    fn set(&self, t: DateTime<Utc>) {
        let tmp = self.0.with_extension("tmp");
        std::fs::write(&tmp, t.to_rfc3339()).unwrap();
        std::fs::rename(&tmp, &self.0).unwrap();
    }
}

fn env(clock: &Clock) -> Vec<(String, String)> {
    vec![
        (
            "SWITCHBOARD_SCHEDULER_CLOCK_FILE".into(),
            clock.0.display().to_string(),
        ),
        ("SWITCHBOARD_SCHEDULER_TICK_MS".into(), "100".into()),
        ("SWITCHBOARD_SCHEDULER_GRACE_SECS".into(), "60".into()),
    ]
}

fn pairs(v: &[(String, String)]) -> Vec<(&str, &str)> {
    v.iter().map(|(k, s)| (k.as_str(), s.as_str())).collect()
}

async fn wait_for<T>(what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn t0() -> DateTime<Utc> {
    "2026-12-07T07:58:00Z".parse().unwrap()
}

/// A cron schedule in a time zone fires at its time with no client connected, the agent's
/// reply reaches the chat, and the history records it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cron_schedule_fires_with_no_client_and_reaches_the_chat() {
    let w = World::new("telegram").await;
    let clock = Clock::new(w.dir.path(), t0());
    let e = env(&clock);
    let server = w.server_with(&pairs(&e)).await;
    let c = client(&server);
    // Monday 2026-12-07, 09:00 in Berlin is 08:00 UTC.
    let s = c
        .create_schedule(&ScheduleSpec {
            cron: Some("0 9 * * 1-5".into()),
            tz: Some("Europe/Berlin".into()),
            prompt: "check CI and summarise failures".into(),
            deliver: vec!["telegram:42".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        s.next_due.unwrap(),
        "2026-12-07T08:00:00Z".parse::<DateTime<Utc>>().unwrap()
    );
    w.llm
        .push(MockReply::text(&["CI is green except ", "the flaky test."]));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        c.list_firings(s.id).await.unwrap().firings.is_empty(),
        "not due yet"
    );
    clock.set(t0() + TimeDelta::seconds(121));
    let f = wait_for("the firing delivered", async || {
        let f = c.list_firings(s.id).await.unwrap().firings;
        f.first()
            .filter(|f| {
                f.deliveries
                    .iter()
                    .all(|d| d.status == DeliveryStatus::Delivered)
                    && !f.deliveries.is_empty()
            })
            .cloned()
    })
    .await;
    assert_eq!(f.status, FiringStatus::Succeeded);
    assert_eq!(
        f.reply.as_deref(),
        Some("CI is green except the flaky test.")
    );
    let msgs = w.messages("42");
    assert!(
        msgs.iter()
            .any(|m| m.text.contains("CI is green except the flaky test.")),
        "{msgs:?}"
    );
    assert_eq!(
        w.llm.chat_requests().last().unwrap().last_user_text(),
        "check CI and summarise failures"
    );
    let next = c.get_schedule(s.id).await.unwrap().next_due.unwrap();
    assert_eq!(
        next,
        "2026-12-08T08:00:00Z".parse::<DateTime<Utc>>().unwrap()
    );
}

/// Bad expressions and unknown targets are 422 with their codes and the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_expressions_and_unknown_targets_are_refused_with_their_codes() {
    let w = World::new("telegram").await;
    let clock = Clock::new(w.dir.path(), t0());
    let e = env(&clock);
    let server = w.server_with(&pairs(&e)).await;
    let http = reqwest::Client::new();
    for (body, code, field) in [
        (
            json!({"cron": "61 * * * *", "prompt": "x"}),
            "invalid_trigger",
            "cron",
        ),
        (
            json!({"cron": "0 9 * * *", "tz": "Mars/Base", "prompt": "x"}),
            "invalid_trigger",
            "tz",
        ),
        (
            json!({"every": "soon", "prompt": "x"}),
            "invalid_trigger",
            "every",
        ),
        (
            json!({"at": "2020-01-01T00:00:00Z", "prompt": "x"}),
            "invalid_trigger",
            "at",
        ),
        (
            json!({"every": "1h", "in": "2h", "prompt": "x"}),
            "invalid_trigger",
            "trigger",
        ),
        (
            json!({"every": "1h", "prompt": "x", "deliver": ["matrix:1"]}),
            "unknown_target",
            "deliver",
        ),
        (
            json!({"every": "1h", "prompt": " "}),
            "validation_failed",
            "prompt",
        ),
    ] {
        let r = http
            .post(format!("{}/v1/schedules", server.url))
            .bearer_auth(common::TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 422, "{body}");
        let b: serde_json::Value = r.json().await.unwrap();
        assert_eq!(b["code"], code, "{body}: {b}");
        assert_eq!(b["field"], field, "{body}: {b}");
    }
    let r = http
        .post(format!("{}/v1/schedules", server.url))
        .bearer_auth(common::TOKEN)
        .json(&json!({"every": "1h", "prompt": "x", "colour": "red"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let r = http
        .get(format!(
            "{}/v1/schedules/{}",
            server.url,
            uuid::Uuid::new_v4()
        ))
        .bearer_auth(common::TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let r = http
        .get(format!("{}/v1/schedules", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}

/// kill -9 across a due time: `skip` records the missed firing and runs nothing;
/// `run_once` runs exactly one for several missed due times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missed_firings_after_a_crash_follow_the_policy() {
    let w = World::new("telegram").await;
    let clock = Clock::new(w.dir.path(), t0());
    let e = env(&clock);
    let mut server = w.server_with(&pairs(&e)).await;
    let c = client(&server);
    let skip = c
        .create_schedule(&ScheduleSpec {
            every: Some("10m".into()),
            prompt: "skipped work".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let once = c
        .create_schedule(&ScheduleSpec {
            every: Some("10m".into()),
            prompt: "catch-up work".into(),
            missed: switchboard_protocol::schedules::Missed::RunOnce,
            ..Default::default()
        })
        .await
        .unwrap();
    server.kill().await;
    // Down for 35 minutes: three due times of each passed.
    clock.set(t0() + TimeDelta::minutes(35));
    w.llm.set_default(MockReply::text(&["done"]));
    let server = w.server_with(&pairs(&e)).await;
    let c = client(&server);
    let f = wait_for("run_once ran one", async || {
        let f = c.list_firings(once.id).await.unwrap().firings;
        f.iter()
            .any(|f| f.status == FiringStatus::Succeeded)
            .then_some(f)
    })
    .await;
    let ran: Vec<_> = f.iter().filter(|f| f.skip_reason.is_none()).collect();
    assert_eq!(ran.len(), 1, "{f:?}");
    assert_eq!(
        f.iter()
            .filter(|f| f.skip_reason == Some(SkipReason::Missed))
            .count(),
        2
    );
    let s = wait_for("skip recorded", async || {
        let f = c.list_firings(skip.id).await.unwrap().firings;
        (f.len() == 3).then_some(f)
    })
    .await;
    assert!(s.iter().all(|f| f.status == FiringStatus::Skipped && f.skip_reason == Some(SkipReason::Missed)), "{s:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        w.llm.chat_requests().len(),
        1,
        "one run in all: no burst, nothing for skip"
    );
    assert_eq!(
        w.llm.chat_requests().last().unwrap().last_user_text(),
        "catch-up work"
    );
}

/// Approvals `deny`: the tool does not run, the firing says what was rejected; run by hand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_run_s_approvals_are_denied_by_default() {
    let w = World::new("telegram").await;
    let clock = Clock::new(w.dir.path(), t0());
    let e = env(&clock);
    let server = w.server_with(&pairs(&e)).await;
    let c = client(&server);
    let s = c
        .create_schedule(&ScheduleSpec {
            every: Some("1h".into()),
            prompt: "clean up".into(),
            deliver: vec!["telegram:42".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    w.llm.push(MockReply::tool_call(
        "c1",
        "run_command",
        json!({"command": "touch ran.txt"}),
    ));
    w.llm.push(MockReply::text(&["Could not run it."]));
    let f = c.run_schedule(s.id).await.unwrap();
    assert!(f.manual);
    let f = wait_for("the firing done", async || {
        let all = c.list_firings(s.id).await.unwrap().firings;
        all.into_iter().find(|x| {
            x.id == f.id
                && x.deliveries
                    .iter()
                    .any(|d| d.status == DeliveryStatus::Delivered)
        })
    })
    .await;
    assert_eq!(f.rejected_tools, vec!["run_command"]);
    assert!(!w.ws.path().join("ran.txt").exists());
    assert!(
        w.messages("42")
            .iter()
            .any(|m| m.text.contains("Not run") && m.text.contains("run_command"))
    );
}
