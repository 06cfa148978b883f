//! The chat gateway's writes under a failing database: real SQLite errors, raised by a
//! trigger put on the gateway's own database file (`gateway.db`) while the server runs,
//! and taken away to let it recover.
//!
//! - An inbound chat message that cannot be stored in the inbox is not confirmed to
//!   Telegram: it stays pending there, is fetched again, and once the database takes writes
//!   it reaches the agent exactly once.
//! - A chat message is marked taken (a redelivery dropped) only together with its inbox row:
//!   a crash between the two cannot make the redelivery look like a repeat.
//! - An approval prompt that cannot be stored is not posted without its record, and the
//!   call does not run: the chat is told the approval could not be asked and the call is
//!   rejected (fails closed).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::chat::World;
use sqlx::Connection as _;
use switchboard_test_support::fake_telegram::FakeTelegram;
use switchboard_test_support::mock_llm::MockReply;

/// A connection of the test's own to the server's gateway database.
async fn gateway_db(w: &World) -> sqlx::SqliteConnection {
    let path = w.dir.path().join("gateway.db");
    sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap()
}

/// Makes every insert into `table` fail with a database error.
async fn break_inserts(db: &mut sqlx::SqliteConnection, table: &str) {
    sqlx::query(sqlx::AssertSqlSafe(&*format!(
        "CREATE TRIGGER fault_{table} BEFORE INSERT ON {table} BEGIN SELECT RAISE(ABORT, 'injected fault'); END"
    )))
    .execute(&mut *db)
    .await
    .unwrap();
}

/// Makes every delete from `table` fail with a database error (healed with
/// `heal(db, "{table}_delete")`).
async fn break_deletes(db: &mut sqlx::SqliteConnection, table: &str) {
    sqlx::query(sqlx::AssertSqlSafe(&*format!(
        "CREATE TRIGGER fault_{table}_delete BEFORE DELETE ON {table} BEGIN SELECT RAISE(ABORT, 'injected fault'); END"
    )))
    .execute(&mut *db)
    .await
    .unwrap();
}

async fn heal(db: &mut sqlx::SqliteConnection, table: &str) {
    sqlx::query(sqlx::AssertSqlSafe(&*format!("DROP TRIGGER fault_{table}")))
        .execute(&mut *db)
        .await
        .unwrap();
}

fn telegram(w: &World) -> &FakeTelegram {
    match &w.fake {
        common::chat::Fake::Telegram(f) => f,
        _ => unreachable!(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_message_the_inbox_cannot_store_is_not_confirmed_and_arrives_once_later() {
    let w = World::new("telegram").await;
    let _server = w.server().await;
    // The gateway is up and polling: one message goes through first.
    w.llm.push(MockReply::text(&["first answer"]));
    w.dm("before the fault");
    w.wait("42", "the first answer", |m| {
        m.text.contains("first answer")
    })
    .await;
    let mut db = gateway_db(&w).await;
    break_inserts(&mut db, "inbox").await;
    let polls = telegram(&w).calls("getUpdates").len();
    w.dm("sent while the database fails");
    // Fetched (and refused by the store) again and again: never confirmed, never answered.
    telegram(&w)
        .wait_until(
            Duration::from_secs(20),
            "the update fetched twice more",
            |tg| tg.calls("getUpdates").len() >= polls + 3,
        )
        .await;
    let offsets: Vec<i64> = telegram(&w).calls("getUpdates")[polls..]
        .iter()
        .filter_map(|c| c["offset"].as_i64())
        .collect();
    assert!(
        offsets.windows(2).all(|w| w[0] == w[1]),
        "the offset did not move past the refused update: {offsets:?}"
    );
    assert_eq!(
        telegram(&w).pending_updates(),
        1,
        "the update is still Telegram's to deliver"
    );
    assert_eq!(w.llm.chat_requests().len(), 1, "nothing reached the agent");
    w.llm.push(MockReply::text(&["second answer"]));
    heal(&mut db, "inbox").await;
    w.wait(
        "42",
        "the answer to the message sent during the fault",
        |m| m.text.contains("second answer"),
    )
    .await;
    telegram(&w)
        .wait_until(Duration::from_secs(20), "the update confirmed", |tg| {
            tg.pending_updates() == 0
        })
        .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let asked: Vec<String> = (0..w.llm.chat_requests().len())
        .map(|i| w.user_text(i))
        .collect();
    assert_eq!(
        asked,
        ["before the fault", "sent while the database fails"],
        "each message reached the agent once"
    );
}

/// The window a SIGKILL can hit between taking a chat message and queueing it: the gateway
/// marks a message taken (its `seen` row, which drops a platform's redelivery) and stores
/// it in the inbox. Were these two writes, a crash between them would leave the mark without
/// the message, unconfirmed to Telegram: the redelivery after the restart would be dropped
/// as "seen before" and the message lost (the crash torture caught it). Here the inbox
/// refuses the message and the mark cannot be taken back — what the crash leaves behind —
/// and the message must still arrive once the database heals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_message_is_marked_taken_only_with_its_inbox_row() {
    let w = World::new("telegram").await;
    let _server = w.server().await;
    w.llm.push(MockReply::text(&["first answer"]));
    w.dm("before the fault");
    w.wait("42", "the first answer", |m| {
        m.text.contains("first answer")
    })
    .await;
    let mut db = gateway_db(&w).await;
    break_inserts(&mut db, "inbox").await;
    break_deletes(&mut db, "seen").await;
    let polls = telegram(&w).calls("getUpdates").len();
    w.dm("sent before the crash");
    telegram(&w)
        .wait_until(
            Duration::from_secs(20),
            "the update fetched twice more",
            |tg| tg.calls("getUpdates").len() >= polls + 3,
        )
        .await;
    assert_eq!(
        telegram(&w).pending_updates(),
        1,
        "the update is still Telegram's to deliver"
    );
    let marks: i64 = sqlx::query_scalar("SELECT count(*) FROM seen")
        .fetch_one(&mut db)
        .await
        .unwrap();
    assert_eq!(marks, 1, "only the first message is marked taken");
    w.llm.push(MockReply::text(&["second answer"]));
    heal(&mut db, "seen_delete").await;
    heal(&mut db, "inbox").await;
    w.wait(
        "42",
        "the answer to the message sent before the crash",
        |m| m.text.contains("second answer"),
    )
    .await;
    telegram(&w)
        .wait_until(Duration::from_secs(20), "the update confirmed", |tg| {
            tg.pending_updates() == 0
        })
        .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let asked: Vec<String> = (0..w.llm.chat_requests().len())
        .map(|i| w.user_text(i))
        .collect();
    assert_eq!(
        asked,
        ["before the fault", "sent before the crash"],
        "each message reached the agent once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_prompt_that_cannot_be_stored_fails_closed() {
    let w = World::new("telegram").await;
    let _server = w.server().await;
    w.llm.push(MockReply::text(&["first answer"]));
    w.dm("before the fault");
    w.wait("42", "the first answer", |m| {
        m.text.contains("first answer")
    })
    .await;
    let mut db = gateway_db(&w).await;
    let marker = w.ws.path().join("ran");
    w.llm.push(MockReply::tool_call(
        "c1",
        "run_command",
        serde_json::json!({"command": format!("touch {}", marker.display())}),
    ));
    w.llm.push(MockReply::text(&["understood"]));
    break_inserts(&mut db, "approvals").await;
    w.dm("please run it");
    let told = w
        .wait("42", "a note that the approval could not be asked", |m| {
            m.text.contains("could not ask")
        })
        .await;
    assert!(
        told.buttons.is_empty(),
        "no buttons without a stored prompt"
    );
    w.wait("42", "the agent's answer after the rejection", |m| {
        m.text.contains("understood")
    })
    .await;
    assert!(!marker.exists(), "the call ran without an approval");
    let second = w.llm.chat_requests()[2].body.to_string();
    assert!(second.contains("not run"), "the agent was told: {second}");
    // Healed: the next call is asked about with buttons, as usual.
    heal(&mut db, "approvals").await;
    w.llm.push(MockReply::tool_call(
        "c2",
        "run_command",
        serde_json::json!({"command": "true"}),
    ));
    w.llm.push(MockReply::text(&["done"]));
    w.dm("try again");
    let prompt = w
        .wait("42", "an approval prompt with buttons", |m| {
            !m.buttons.is_empty()
        })
        .await;
    assert!(prompt.text.contains("true"), "{}", prompt.text);
}

/// The crash window between handing a batch to the session and recording its run here
/// (the gateway's `runs` insert fails, as a crash would leave it): the batch is sent again
/// under the same idempotency key, so the session answers the run it already started —
/// although a message that arrived meanwhile changed what the batch would now be. It runs
/// once; the newer message runs in the next batch. (The gateway used to guess its run by
/// comparing the session's newest user message with the batch text: a grown batch did not
/// match and was run a second time, with the first message in it again.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_run_was_not_recorded_runs_once_even_when_more_arrived() {
    let w = World::new("telegram").await;
    let _server = w.server().await;
    w.llm.push(MockReply::text(&["hello back"]));
    w.dm("hello");
    w.wait("42", "the first answer", |m| m.text.contains("hello back"))
        .await;
    let mut db = gateway_db(&w).await;
    break_inserts(&mut db, "runs").await;
    w.llm.push(MockReply::text(&["did X"]));
    w.dm("please do X");
    telegram(&w)
        .wait_until(Duration::from_secs(20), "X reaching the agent", |_| {
            w.llm.chat_requests().len() >= 2
        })
        .await;
    w.dm("and then Y");
    // The worker keeps failing to record X's run, with the bigger batch queued.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    w.llm.push(MockReply::text(&["did Y"]));
    heal(&mut db, "runs").await;
    w.wait("42", "the answer to Y", |m| m.text.contains("did Y"))
        .await;
    w.wait("42", "the answer to X", |m| m.text.contains("did X"))
        .await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let asked: Vec<String> = (0..w.llm.chat_requests().len())
        .map(|i| w.user_text(i))
        .collect();
    assert_eq!(asked.len(), 3, "three runs: hello, X, Y: {asked:?}");
    assert!(asked[1].contains("please do X"), "{asked:?}");
    assert!(
        asked[2].contains("and then Y") && !asked[2].contains("please do X"),
        "X ran once; Y alone in the next batch: {asked:?}"
    );
}
