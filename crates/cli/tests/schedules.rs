//! Scheduled tasks end to end: the real server, its scheduler on a test clock (a file the
//! test writes, `SWITCHBOARD_SCHEDULER_CLOCK_FILE`), the mock LLM and a fake Telegram.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use common::chat::World;
use common::client;
use serde_json::json;
use switchboard_protocol::AutoApprove;
use switchboard_protocol::schedules::{
    DeliveryStatus, FiringStatus, Overlap, ScheduleApprovals, ScheduleSpec, SkipReason,
};
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

fn telegram(w: &World) -> &switchboard_test_support::fake_telegram::FakeTelegram {
    match &w.fake {
        common::chat::Fake::Telegram(f) => f,
        _ => unreachable!("these scenarios run on Telegram"),
    }
}

async fn firing_done(
    c: &switchboard_client::Client,
    schedule: uuid::Uuid,
    id: uuid::Uuid,
) -> switchboard_protocol::schedules::Firing {
    wait_for("the firing done", async || {
        c.list_firings(schedule)
            .await
            .unwrap()
            .firings
            .into_iter()
            .find(|x| {
                x.id == id
                    && !x.deliveries.is_empty()
                    && x.deliveries
                        .iter()
                        .all(|d| d.status != DeliveryStatus::Pending)
            })
    })
    .await
}

/// Approvals `ask`: the question reaches the delivery chat with buttons; Allow runs the
/// tool; a question nobody answers is rejected at `ask_timeout` (on the scheduler's clock)
/// and its message says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_approvals_are_answered_in_the_chat_and_time_out_closed() {
    let w = World::new("telegram").await;
    let clock = Clock::new(w.dir.path(), t0());
    let e = env(&clock);
    let server = w.server_with(&pairs(&e)).await;
    let c = client(&server);
    let tg = telegram(&w);
    let s = c
        .create_schedule(&ScheduleSpec {
            name: Some("nightly".into()),
            every: Some("1h".into()),
            prompt: "tidy up".into(),
            deliver: vec!["telegram:42".into()],
            approvals: ScheduleApprovals::Ask,
            ask_timeout: Some("1m".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    w.llm.push(MockReply::tool_call(
        "c1",
        "run_command",
        json!({"command": "touch allowed.txt"}),
    ));
    w.llm.push(MockReply::text(&["Tidied."]));
    let f = c.run_schedule(s.id).await.unwrap();
    let prompt = w
        .wait("42", "the question", |m| {
            m.text.contains("nightly asks") && !m.buttons.is_empty()
        })
        .await;
    assert!(prompt.text.contains("touch allowed.txt"), "{}", prompt.text);
    let allow = prompt
        .buttons
        .iter()
        .find(|(t, _)| t == "Allow")
        .unwrap()
        .1
        .clone();
    tg.press(42, prompt.id.parse().unwrap(), 42, "Alice", &allow);
    let done = firing_done(&c, s.id, f.id).await;
    assert_eq!(done.status, FiringStatus::Succeeded);
    assert!(done.rejected_tools.is_empty(), "{done:?}");
    assert!(w.ws.path().join("allowed.txt").exists());
    let answered = w
        .messages("42")
        .into_iter()
        .find(|m| m.id == prompt.id)
        .unwrap();
    assert!(
        answered.text.contains("Allowed by Alice"),
        "{}",
        answered.text
    );
    assert!(answered.buttons.is_empty());

    // Nobody answers the second one.
    w.llm.push(MockReply::tool_call(
        "c2",
        "run_command",
        json!({"command": "touch late.txt"}),
    ));
    w.llm.push(MockReply::text(&["Nobody let me."]));
    let f = c.run_schedule(s.id).await.unwrap();
    let prompt = w
        .wait("42", "the second question", |m| {
            m.text.contains("touch late.txt") && !m.buttons.is_empty()
        })
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        c.list_firings(s.id).await.unwrap().firings[0].status,
        FiringStatus::Running,
        "it waits for an answer"
    );
    clock.set(t0() + TimeDelta::seconds(61));
    let done = firing_done(&c, s.id, f.id).await;
    assert_eq!(done.rejected_tools, vec!["run_command"]);
    assert!(!w.ws.path().join("late.txt").exists());
    let expired = w
        .messages("42")
        .into_iter()
        .find(|m| m.id == prompt.id)
        .unwrap();
    assert!(
        expired.text.contains("nobody answered within 1m"),
        "{}",
        expired.text
    );
    assert!(expired.buttons.is_empty());
    // Asking needs a chat to ask in.
    let r = c
        .create_schedule(&ScheduleSpec {
            every: Some("1h".into()),
            prompt: "x".into(),
            approvals: ScheduleApprovals::Ask,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(r.status(), Some(422));
}

/// Approvals `auto_approve`: the listed tool runs without a question.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_approved_tools_run_unattended() {
    let w = World::new("telegram").await;
    let clock = Clock::new(w.dir.path(), t0());
    let e = env(&clock);
    let server = w.server_with(&pairs(&e)).await;
    let c = client(&server);
    let s = c
        .create_schedule(&ScheduleSpec {
            every: Some("1h".into()),
            prompt: "build it".into(),
            deliver: vec!["telegram:42".into()],
            approvals: ScheduleApprovals::AutoApprove,
            auto_approve: Some(AutoApprove::Tools(vec!["run_command".into()])),
            ..Default::default()
        })
        .await
        .unwrap();
    w.llm.push(MockReply::tool_call(
        "c1",
        "run_command",
        json!({"command": "touch built.txt"}),
    ));
    w.llm.push(MockReply::text(&["Built."]));
    let f = c.run_schedule(s.id).await.unwrap();
    let done = firing_done(&c, s.id, f.id).await;
    assert_eq!(done.status, FiringStatus::Succeeded);
    assert!(done.rejected_tools.is_empty());
    assert!(w.ws.path().join("built.txt").exists());
    assert!(w.messages("42").iter().all(|m| m.buttons.is_empty()));
}

/// Overlap: a due time while the previous firing runs is skipped (`skip`, recorded) or
/// waits and runs after it (`queue`).
async fn overlap(policy: Overlap) {
    let w = World::new("telegram").await;
    let clock = Clock::new(w.dir.path(), t0());
    let e = env(&clock);
    let server = w.server_with(&pairs(&e)).await;
    let c = client(&server);
    let s = c
        .create_schedule(&ScheduleSpec {
            every: Some("10m".into()),
            prompt: "slow work".into(),
            overlap: policy,
            ..Default::default()
        })
        .await
        .unwrap();
    w.llm
        .push(MockReply::text_slow(&["one ", "two ", "three"], 1500));
    w.llm.set_default(MockReply::text(&["second"]));
    clock.set(t0() + TimeDelta::minutes(10) + TimeDelta::seconds(1));
    wait_for("the first firing runs", async || {
        let f = c.list_firings(s.id).await.unwrap().firings;
        f.iter()
            .any(|f| f.status == FiringStatus::Running)
            .then_some(())
    })
    .await;
    clock.set(t0() + TimeDelta::minutes(20) + TimeDelta::seconds(1));
    let f = wait_for("both firings ended", async || {
        let f = c.list_firings(s.id).await.unwrap().firings;
        (f.len() == 2
            && f.iter().all(|f| {
                matches!(
                    f.status,
                    FiringStatus::Skipped | FiringStatus::Succeeded | FiringStatus::Failed
                )
            }))
        .then_some(f)
    })
    .await;
    // Newest first.
    assert_eq!(f[1].status, FiringStatus::Succeeded);
    assert_eq!(f[1].reply.as_deref(), Some("one two three"));
    match policy {
        Overlap::Skip => {
            assert_eq!(f[0].status, FiringStatus::Skipped, "{f:?}");
            assert_eq!(f[0].skip_reason, Some(SkipReason::Overlap));
            tokio::time::sleep(Duration::from_millis(500)).await;
            assert_eq!(w.llm.chat_requests().len(), 1);
        }
        Overlap::Queue => {
            assert_eq!(f[0].status, FiringStatus::Succeeded, "{f:?}");
            assert_eq!(f[0].reply.as_deref(), Some("second"));
            assert!(
                f[0].started_at.unwrap() >= f[1].finished_at.unwrap(),
                "the queued one started after the first ended: {f:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overlapping_firing_is_skipped_by_default() {
    overlap(Overlap::Skip).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overlapping_firing_waits_with_queue() {
    overlap(Overlap::Queue).await;
}

/// A delivery the platform refuses twice is tried again with back-off (on the scheduler's
/// clock) and delivered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_that_fails_twice_is_delivered_once() {
    let w = World::new("telegram").await;
    let clock = Clock::new(w.dir.path(), t0());
    let mut e = env(&clock);
    e.push(("SWITCHBOARD_SCHEDULER_RETRY_BASE_SECS".into(), "10".into()));
    let server = w.server_with(&pairs(&e)).await;
    let c = client(&server);
    let tg = telegram(&w);
    let s = c
        .create_schedule(&ScheduleSpec {
            every: Some("1h".into()),
            prompt: "report".into(),
            deliver: vec!["telegram:42".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    w.llm.push(MockReply::text(&["All fine."]));
    tg.fail("sendMessage", 2, "chat not found");
    let f = c.run_schedule(s.id).await.unwrap();
    let attempts = async |n: u32| {
        wait_for("an attempt", async || {
            let all = c.list_firings(s.id).await.unwrap().firings;
            all.into_iter()
                .find(|x| x.id == f.id && x.deliveries.first().is_some_and(|d| d.attempts == n))
        })
        .await
    };
    let one = attempts(1).await;
    let d = &one.deliveries[0];
    assert_eq!(d.status, DeliveryStatus::Pending);
    assert!(
        d.error.as_deref().unwrap().contains("chat not found"),
        "{d:?}"
    );
    assert_eq!(
        d.next_attempt_at.unwrap(),
        one.finished_at.unwrap() + TimeDelta::seconds(10)
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(tg.calls("sendMessage").len(), 1, "no retry before its time");
    clock.set(t0() + TimeDelta::seconds(11));
    let two = attempts(2).await;
    assert_eq!(two.deliveries[0].status, DeliveryStatus::Pending);
    clock.set(t0() + TimeDelta::seconds(11 + 21));
    let three = attempts(3).await;
    assert_eq!(three.deliveries[0].status, DeliveryStatus::Delivered);
    assert!(three.deliveries[0].message_id.is_some());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let got: Vec<_> = w
        .messages("42")
        .into_iter()
        .filter(|m| m.text.contains("All fine."))
        .collect();
    assert_eq!(got.len(), 1, "delivered once: {got:?}");
}

/// `/schedule`, `/schedules`, `/unschedule` in a chat: the chat is the delivery target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_commands_schedule_list_and_remove() {
    let w = World::new("telegram").await;
    let clock = Clock::new(w.dir.path(), t0());
    let e = env(&clock);
    let server = w.server_with(&pairs(&e)).await;
    let c = client(&server);
    w.dm("/schedule every 1h check CI and summarise");
    let added = w
        .wait("42", "the confirmation", |m| m.text.contains("Scheduled"))
        .await;
    assert!(added.text.contains("every 1h"), "{}", added.text);
    let all = c.list_schedules().await.unwrap().schedules;
    assert_eq!(all.len(), 1);
    let s = &all[0];
    assert_eq!(s.spec.deliver, vec!["telegram:42"]);
    assert_eq!(s.spec.prompt, "check CI and summarise");
    let short = s.id.simple().to_string()[..8].to_string();
    assert!(added.text.contains(&short));
    w.dm("/schedule cron 61 9 * * * Europe/Berlin nope");
    let refused = w
        .wait("42", "the refusal", |m| m.text.starts_with("Not scheduled"))
        .await;
    assert!(refused.text.contains("cron"), "{}", refused.text);
    w.dm("/schedules");
    let listed = w
        .wait("42", "the list", |m| {
            m.text.starts_with("Schedules reporting here")
        })
        .await;
    assert!(
        listed.text.contains(&short) && listed.text.contains("check CI"),
        "{}",
        listed.text
    );

    w.llm.push(MockReply::text(&["CI: 2 failures."]));
    clock.set(t0() + TimeDelta::minutes(61));
    w.wait("42", "the firing's result", |m| {
        m.text.contains("CI: 2 failures.")
    })
    .await;

    w.dm(&format!("/unschedule {short}"));
    w.wait("42", "the removal", |m| m.text.starts_with("Removed"))
        .await;
    assert!(c.list_schedules().await.unwrap().schedules.is_empty());
    w.dm("/unschedule abcd1234");
    w.wait("42", "nothing to remove", |m| {
        m.text.starts_with("No schedule \"abcd1234\"")
    })
    .await;
}

/// A schedule made from a chat runs with that chat's session settings — its workspace,
/// model, backend and permission mode — not the server's defaults: a chat confined to
/// `read-only` cannot get a `workspace-write` run through `/schedule`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_s_schedule_keeps_the_chat_s_limits() {
    let w = World::new("telegram").await;
    let clock = Clock::new(w.dir.path(), t0());
    let e = env(&clock);
    let server = w.server_with(&pairs(&e)).await;
    let c = client(&server);
    w.llm.push(MockReply::text(&["hi"]));
    w.dm("hello");
    w.wait("42", "the reply", |m| m.text.contains("hi")).await;
    let session = c.list_sessions(None, None).await.unwrap().sessions[0].id;
    c.update_session(
        session,
        &switchboard_protocol::UpdateSessionRequest {
            permission_mode: Some(switchboard_protocol::PermissionMode::ReadOnly),
            model: Some("small-model".into()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    w.dm("/schedule every 1h tidy the repository");
    w.wait("42", "the confirmation", |m| m.text.contains("Scheduled"))
        .await;
    let all = c.list_schedules().await.unwrap().schedules;
    let spec = &all[0].spec;
    assert_eq!(
        spec.permission_mode,
        Some(switchboard_protocol::PermissionMode::ReadOnly)
    );
    assert_eq!(spec.model.as_deref(), Some("small-model"));
    let ws = std::fs::canonicalize(w.ws.path()).unwrap();
    assert_eq!(spec.cwd.as_deref(), Some(ws.to_str().unwrap()));
}

/// Many firings due at once, on a fast tick: each result reaches the chat exactly once.
/// (The tick handed an open firing to a new worker from a copy read before its previous
/// worker finished, and a result was delivered a second time: 4 of 12 in the report.)
/// Deliveries also carry an idempotency key per firing and target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_firings_due_at_once_are_each_delivered_once() {
    let w = World::new("telegram").await;
    let clock = Clock::new(w.dir.path(), t0());
    let mut e = env(&clock);
    for (k, v) in e.iter_mut() {
        if k == "SWITCHBOARD_SCHEDULER_TICK_MS" {
            *v = "20".into();
        }
    }
    let server = w.server_with(&pairs(&e)).await;
    let c = client(&server);
    // Replies of different lengths: the firings' workers end at different times, among
    // the ticks.
    w.llm
        .set_default(MockReply::text_slow(&["Result", " ready."], 30));
    for i in 0..24 {
        c.create_schedule(&ScheduleSpec {
            name: Some(format!("job {i}")),
            in_: Some("1m".into()),
            prompt: format!("job {i}"),
            deliver: vec!["telegram:42".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    }
    clock.set(t0() + TimeDelta::minutes(2));
    let results = |w: &World| {
        w.messages("42")
            .into_iter()
            .filter(|m| m.text.contains("Result ready."))
            .count()
    };
    wait_for("every result", async || (results(&w) >= 24).then_some(())).await;
    // Long enough for many more ticks.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert_eq!(results(&w), 24, "each delivered once");
    for s in c.list_schedules().await.unwrap().schedules {
        let firings = c.list_firings(s.id).await.unwrap().firings;
        assert_eq!(firings.len(), 1);
        assert_eq!(firings[0].deliveries[0].attempts, 1);
    }
}

/// `switchboard schedule add|list|show|pause|resume|run|rm`, with the README's example.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_adds_lists_pauses_runs_and_removes() {
    let w = World::new("telegram").await;
    let clock = Clock::new(w.dir.path(), t0());
    let e = env(&clock);
    let server = w.server_with(&pairs(&e)).await;
    let (ok, out, err) = common::api::cli(
        &server.url,
        &[
            "schedule",
            "add",
            "--cron",
            "0 9 * * 1-5",
            "--tz",
            "Europe/Berlin",
            "--to",
            "telegram:42",
            "check CI and summarise failures",
        ],
    );
    assert!(ok, "{out}{err}");
    assert!(out.contains("next firing 2026-12-07 08:00:00 UTC"), "{out}");
    let id = out.split_whitespace().nth(1).unwrap()[..8].to_string();
    let (ok, out, _) = common::api::cli(&server.url, &["schedule", "list"]);
    assert!(
        ok && out.contains(&id) && out.contains("Europe/Berlin") && out.contains("active"),
        "{out}"
    );
    let (ok, out, _) = common::api::cli(&server.url, &["schedule", "pause", &id]);
    assert!(ok && out.contains("paused"), "{out}");
    let (ok, out, _) = common::api::cli(&server.url, &["schedule", "resume", &id]);
    assert!(ok && out.contains("active"), "{out}");
    w.llm.push(MockReply::text(&["All green."]));
    let (ok, out, err) = common::api::cli(&server.url, &["schedule", "run", &id]);
    assert!(ok && out.starts_with("firing "), "{out}{err}");
    w.wait("42", "the result", |m| m.text.contains("All green."))
        .await;
    let shown = wait_for("the firing shown as done", async || {
        let (_, out, _) = common::api::cli(&server.url, &["schedule", "show", &id]);
        (out.contains("succeeded (by hand)") && out.contains("telegram:42 delivered"))
            .then_some(out)
    })
    .await;
    assert!(
        shown.contains("prompt: check CI and summarise failures"),
        "{shown}"
    );
    let (ok, _, err) = common::api::cli(
        &server.url,
        &["schedule", "add", "--cron", "0 25 * * *", "x"],
    );
    assert!(
        !ok && err.contains("invalid_trigger") && err.contains("cron"),
        "{err}"
    );
    let (ok, out, _) = common::api::cli(&server.url, &["schedule", "rm", &id]);
    assert!(ok && out.contains("deleted"), "{out}");
    let (ok, out, _) = common::api::cli(&server.url, &["schedule", "list"]);
    assert!(ok && out.contains("no schedules"), "{out}");
}

/// A delivery that failed every attempt is tried again by hand (`redeliver`), once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_delivery_is_retried_by_hand() {
    let w = World::new("telegram").await;
    let clock = Clock::new(w.dir.path(), t0());
    let mut e = env(&clock);
    e.push(("SWITCHBOARD_SCHEDULER_MAX_ATTEMPTS".into(), "1".into()));
    let server = w.server_with(&pairs(&e)).await;
    let c = client(&server);
    let tg = telegram(&w);
    let s = c
        .create_schedule(&ScheduleSpec {
            every: Some("1h".into()),
            prompt: "report".into(),
            deliver: vec!["telegram:42".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    w.llm.push(MockReply::text(&["Late but fine."]));
    tg.fail("sendMessage", 1, "chat not found");
    let f = c.run_schedule(s.id).await.unwrap();
    let failed = firing_done(&c, s.id, f.id).await;
    assert_eq!(failed.deliveries[0].status, DeliveryStatus::Failed);
    let (_, out, _) = common::api::cli(&server.url, &["schedule", "show", &s.id.to_string()]);
    assert!(out.contains("telegram:42 failed"), "{out}");
    let again = c.redeliver_firing(s.id, f.id).await.unwrap();
    assert_eq!(again.deliveries[0].status, DeliveryStatus::Pending);
    let done = firing_done(&c, s.id, f.id).await;
    assert_eq!(done.deliveries[0].status, DeliveryStatus::Delivered);
    let err = c.redeliver_firing(s.id, f.id).await.unwrap_err();
    assert_eq!(err.status(), Some(409), "nothing failed any more");
    let got = w
        .messages("42")
        .into_iter()
        .filter(|m| m.text.contains("Late but fine."))
        .count();
    assert_eq!(got, 1);
}
