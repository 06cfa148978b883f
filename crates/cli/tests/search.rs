#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! Search end to end (`GET /v1/search`, `switchboard search`): hits from real runs on the
//! mock model, ranked and marked, only in sessions the caller sees, in step after a restart
//! and a deletion.

mod common;

use common::api::{cli, cli_as, person};
use common::*;
use switchboard_protocol::CreateSessionRequest;
use switchboard_protocol::people::{Role, Scope};
use switchboard_protocol::search::{SearchHitKind, SearchParams};
use switchboard_test_support::mock_llm::{MockLlm, MockReply};

fn q(text: &str) -> SearchParams {
    SearchParams {
        q: text.into(),
        ..SearchParams::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_finds_what_was_said_where_the_caller_may_look() {
    let dir = tempfile::tempdir().unwrap();
    let llm = MockLlm::start().await;
    let data = dir.path().join("data");
    let mut server = start(&data, &llm.base_url(), &[]).await;
    let admin = client(&server);
    let (ann, ann_token) = person(
        &server,
        "ann",
        Role::Member,
        &[Scope::SessionsRead, Scope::SessionsWrite],
    )
    .await;
    let (bob, _) = person(
        &server,
        "bob",
        Role::Member,
        &[Scope::SessionsRead, Scope::SessionsWrite],
    )
    .await;

    // Ann's session: the agent tells her how to fix the migration.
    let mine = ann
        .create_session(&CreateSessionRequest::default())
        .await
        .unwrap()
        .id;
    llm.push(MockReply::text(&[
        "Rerun the zebra migration with ",
        "--fix-checksums, then restart.",
    ]));
    let (mut events, run) = send(&ann, mine, "how do I fix the zebra migration?").await;
    until_run_ends(&mut events, run).await;
    // Bob's: another zebra.
    let his = bob
        .create_session(&CreateSessionRequest::default())
        .await
        .unwrap()
        .id;
    llm.push(MockReply::text(&["A zebra has stripes."]));
    let (mut events, run) = send(&bob, his, "tell me about the zebra").await;
    until_run_ends(&mut events, run).await;

    // Ann finds her answer — not Bob's session — the reply ranked before her question.
    let found = ann.search(&q("zebra migration")).await.unwrap();
    assert!(found.hits.iter().all(|h| h.session_id == mine), "{found:?}");
    assert_eq!(found.hits.len(), 2, "{found:?}");
    let best = &found.hits[0];
    assert_eq!(best.kind, SearchHitKind::Message);
    assert!(best.seq.is_some(), "a message links into the log: {best:?}");
    assert!(
        best.snippet
            .iter()
            .any(|p| p.matched && p.text.eq_ignore_ascii_case("zebra")),
        "{best:?}"
    );
    // A phrase, a prefix; the server token sees both sessions.
    let phrase = admin.search(&q("\"fix checksums\"")).await.unwrap();
    assert_eq!(phrase.hits.len(), 1, "{phrase:?}");
    assert_eq!(phrase.hits[0].role.as_deref(), Some("assistant"));
    let all = admin.search(&q("zebr*")).await.unwrap();
    let sessions: std::collections::HashSet<_> = all.hits.iter().map(|h| h.session_id).collect();
    assert_eq!(sessions.len(), 2, "{all:?}");
    // Pages: one hit a page, a cursor to the next.
    let mut page = q("zebra");
    page.limit = Some(1);
    let first = admin.search(&page).await.unwrap();
    page.cursor = first.next_cursor.clone();
    let second = admin.search(&page).await.unwrap();
    assert_ne!(first.hits[0].id, second.hits[0].id);

    // Bad queries are refused with the field named.
    for (query, field) in [("  --  ", "q"), ("zebra", "cursor")] {
        let mut p = q(query);
        if field == "cursor" {
            p.cursor = Some("not-a-cursor".into());
        }
        let e = admin.search(&p).await.unwrap_err().to_string();
        assert!(e.contains(field), "{e}");
    }

    // Ann's agent recalls with search_sessions: her sessions only.
    llm.push(MockReply::tool_call(
        "s1",
        "search_sessions",
        serde_json::json!({"query": "zebra"}),
    ));
    llm.push(MockReply::text(&["Found it."]));
    let (mut events, run) = send(&ann, mine, "what did we say about zebras?").await;
    let seen = until_run_ends(&mut events, run).await;
    assert_eq!(text_of(&seen), "Found it.");
    let last = llm.chat_requests().last().unwrap().body.clone();
    let result = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .and_then(|m| m["content"].as_str())
        .unwrap()
        .to_string();
    assert!(
        result.contains(&mine.to_string()) && result.contains("**zebra**"),
        "{result}"
    );
    assert!(!result.contains(&his.to_string()), "{result}");

    // An agent searches for whoever started its run, not for the session's owner: Bob
    // shares a session with Ann; Ann asking its agent does not reach Bob's other sessions.
    let private = bob
        .create_session(&CreateSessionRequest::default())
        .await
        .unwrap()
        .id;
    llm.push(MockReply::text(&["Noted."]));
    let (mut events, run) = send(&bob, private, "the okapi plan is private").await;
    until_run_ends(&mut events, run).await;
    bob.update_session(
        his,
        &switchboard_protocol::UpdateSessionRequest {
            shared_with: Some(vec!["ann".into()]),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    llm.push(MockReply::tool_call(
        "s2",
        "search_sessions",
        serde_json::json!({"query": "okapi"}),
    ));
    llm.push(MockReply::text(&["Nothing."]));
    let (mut events, run) = send(&ann, his, "anything about okapis?").await;
    until_run_ends(&mut events, run).await;
    let last = llm.chat_requests().last().unwrap().body.clone();
    let result = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .and_then(|m| m["content"].as_str())
        .unwrap()
        .to_string();
    // (The agent's own call, recorded before it runs, is found: this session is Ann's to see.)
    assert!(
        !result.contains(&private.to_string()) && !result.contains("private"),
        "{result}"
    );

    // The CLI, as Ann.
    let (ok, out, err) = cli_as(
        &server.url,
        &ann_token,
        &["search", "fix", "checksums"],
        None,
    );
    assert!(ok, "{err}");
    assert!(
        out.contains("[checksums]") && out.contains(&mine.to_string()),
        "{out}"
    );

    // After a restart the index is still there; after a deletion, its hits are gone.
    server.stop().await;
    let server = start(&data, &llm.base_url(), &[]).await;
    let admin = client(&server);
    let again = admin.search(&q("zebra migration")).await.unwrap();
    assert!(
        found
            .hits
            .iter()
            .all(|h| again.hits.iter().any(|a| a.id == h.id)),
        "{again:?}"
    );
    admin.delete_session(mine).await.unwrap();
    let (ok, out, _) = cli(&server.url, &["search", "zebra", "--json"]);
    assert!(ok);
    let left: serde_json::Value = serde_json::from_str(&out).unwrap();
    let ids: Vec<&str> = left["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["session_id"].as_str().unwrap())
        .collect();
    assert!(
        !ids.is_empty() && ids.iter().all(|s| *s == his.to_string()),
        "{left}"
    );
}

/// The console's search in headless Chromium (`tests/e2e/search.mjs`): a long session whose
/// fourth reply says how to fix the orders migration, found from the sidebar's box and
/// opened scrolled to that reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_finds_a_reply_and_opens_the_transcript_there() {
    use common::browser::{Script, assert_shots};
    let dir = tempfile::tempdir().unwrap();
    let llm = MockLlm::start().await;
    let server = start(&dir.path().join("data"), &llm.base_url(), &[]).await;
    let admin = client(&server);
    let id = admin
        .create_session(&CreateSessionRequest {
            title: Some("Orders service".into()),
            ..CreateSessionRequest::default()
        })
        .await
        .unwrap()
        .id;
    for i in 0..25 {
        let reply = if i == 3 {
            "Add an index on customer_id first; the orders migration then runs in seconds.".into()
        } else {
            // Long enough that 25 of them fill many screens.
            format!(
                "Step {i}: filler.\n\n{}",
                "Nothing to see here. ".repeat(40)
            )
        };
        llm.push(MockReply::text(&[reply.as_str()]));
        let (mut events, run) = send(&admin, id, &format!("step {i}, please")).await;
        until_run_ends(&mut events, run).await;
    }
    let other = admin
        .create_session(&CreateSessionRequest::default())
        .await
        .unwrap()
        .id;
    llm.push(MockReply::text(&["The migration of users is done."]));
    let (mut events, run) = send(&admin, other, "migrate the users").await;
    until_run_ends(&mut events, run).await;

    let session = id.to_string();
    let script = Script::start(
        "search.mjs",
        &[
            ("SB_URL", &server.url),
            ("SB_TOKEN", TOKEN),
            ("SB_SESSION", &session),
        ],
        std::time::Duration::from_secs(180),
    );
    script.finish(|| server.logs()).await;
    assert_shots(&[
        "search.png",
        "search-jump.png",
        "search-fork.png",
        "search-phone.png",
    ]);
}

/// `/search` in a chat (the fake Telegram): the chat's sessions — the one before `/new` too
/// — and no other session; the matched words between asterisks; a query of no word, an
/// empty one and one that finds nothing each get their answer. Then `/title` and
/// `/archive`: an archived session stays searchable, and the next message starts anew.
#[tokio::test]
async fn a_chat_searches_the_sessions_it_has_had() {
    let w = common::chat::World::new("telegram").await;
    let server = w.server().await;
    let chat = w.dm_chat();
    w.llm.push(MockReply::text(&[
        "Rerun the zebra migration with --fix-checksums.",
    ]));
    w.dm("how do I fix the zebra migration?");
    w.wait(chat, "the first reply", |m| {
        m.text.contains("fix-checksums")
    })
    .await;
    w.dm("/new");
    w.wait(chat, "/new done", |m| m.text.starts_with("Done"))
        .await;
    w.llm
        .push(MockReply::text(&["Zebra crossings are striped."]));
    w.dm("and zebra crossings?");
    w.wait(chat, "the second reply", |m| m.text.contains("striped"))
        .await;
    // A session of no chat says "zebra" too: not this chat's.
    let admin = client(&server);
    let elsewhere = admin
        .create_session(&CreateSessionRequest::default())
        .await
        .unwrap()
        .id;
    w.llm.push(MockReply::text(&["A zebra from elsewhere."]));
    let (mut events, run) = send(&admin, elsewhere, "zebra elsewhere").await;
    until_run_ends(&mut events, run).await;

    w.dm("/search zebra");
    let found = w
        .wait(chat, "the hits", |m| {
            m.text.starts_with("Found in this chat")
        })
        .await;
    assert!(found.text.contains("fix-checksums"), "{}", found.text);
    assert!(found.text.contains("striped"), "{}", found.text);
    assert!(
        found.text.contains("*zebra*") || found.text.contains("*Zebra*"),
        "{}",
        found.text
    );
    assert!(!found.text.contains("elsewhere"), "{}", found.text);
    w.dm("/search");
    w.wait(chat, "the usage", |m| m.text.starts_with("Usage: /search"))
        .await;
    w.dm("/search --");
    w.wait(chat, "the refusal", |m| {
        m.text.starts_with("Cannot search for that") && m.text.contains("word")
    })
    .await;
    w.dm("/search okapi");
    w.wait(chat, "nothing found", |m| {
        m.text.starts_with("Nothing found for okapi")
    })
    .await;

    // `/title` renames the chat's session, `/archive` archives it — still searchable — and
    // the next message starts a new one.
    w.dm("/title");
    w.wait(chat, "the usage", |m| m.text.starts_with("Usage: /title"))
        .await;
    w.dm("/title Zebra notes");
    w.wait(chat, "renamed", |m| m.text == "Renamed: Zebra notes")
        .await;
    let listed = admin.list_sessions(None, None).await.unwrap();
    let notes = listed
        .sessions
        .iter()
        .find(|s| s.title == "Zebra notes")
        .expect("the chat's session renamed")
        .id;
    w.dm("/archive");
    w.wait(chat, "archived", |m| {
        m.text.starts_with("Archived \"Zebra notes\"")
    })
    .await;
    assert!(admin.get_session(notes).await.unwrap().session.archived);
    w.dm("/search striped");
    w.wait(chat, "an archived session's hit", |m| {
        m.text.starts_with("Found in this chat") && m.text.contains("Zebra notes")
    })
    .await;
    w.llm.push(MockReply::text(&["A fresh start."]));
    w.dm("hello again");
    w.wait(chat, "a new session's reply", |m| {
        m.text.contains("fresh start")
    })
    .await;
    let now = admin.list_sessions(None, None).await.unwrap();
    assert!(
        !now.sessions.iter().any(|s| s.id == notes),
        "archived: out of the list"
    );
    w.dm("/archive");
    w.wait(chat, "the new one archived", |m| {
        m.text.starts_with("Archived \"")
    })
    .await;
    w.dm("/archive");
    w.wait(chat, "nothing to archive", |m| {
        m.text == "No session yet: nothing to archive."
    })
    .await;
}
