#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! What a person reads in the chat while the agent writes, on Telegram, Slack and Discord:
//! the real server, each platform's fake (its wire format), the mock LLM. The assertions are
//! on every post and edit the fake received, in order, not only on the final state.

mod common;

use std::time::{Duration, Instant};

use common::chat::{Fake, World};
use switchboard_gateway::text::paginate;
use switchboard_test_support::mock_llm::MockReply;

const WAIT: Duration = Duration::from_secs(40);

/// A post or an edit in the DM: when, which bot message (in posting order), the text.
#[derive(Debug, Clone, PartialEq)]
struct Op {
    at: Instant,
    edit: bool,
    message: usize,
    text: String,
}

/// The bot's messages in the DM, in posting order: (id, text).
fn dm_messages(w: &World) -> Vec<(String, String)> {
    w.messages(w.dm_chat())
        .into_iter()
        .map(|m| (m.id, m.text))
        .collect()
}

trait Timeline {
    fn ops(&self) -> Vec<Op>;
    async fn wait_until(&self, what: &str, f: impl Fn(&[(String, String)]) -> bool) -> Instant;
}

impl Timeline for World {
    /// Every post and edit of the bot in the DM, in the order the fake received them.
    fn ops(&self) -> Vec<Op> {
        let ids: Vec<String> = dm_messages(self).into_iter().map(|(id, _)| id).collect();
        let index = |id: &str| {
            ids.iter()
                .position(|i| i == id)
                .expect("edit of a known message")
        };
        let mut posts = 0;
        let mut out = Vec::new();
        let mut push = |at, edit: Option<String>, text: &str| {
            let (edit, message) = match edit {
                Some(id) => (true, index(&id)),
                None => {
                    posts += 1;
                    (false, posts - 1)
                }
            };
            out.push(Op {
                at,
                edit,
                message,
                text: text.to_string(),
            });
        };
        match &self.fake {
            Fake::Telegram(f) => {
                for (at, method, p) in f.timeline() {
                    if p["chat_id"] != 42 && p["chat_id"] != "42" {
                        continue;
                    }
                    let text = p["text"].as_str().unwrap_or_default();
                    match method.as_str() {
                        "sendMessage" => push(at, None, text),
                        "editMessageText" => push(
                            at,
                            Some(p["message_id"].to_string().trim_matches('"').to_string()),
                            text,
                        ),
                        _ => {}
                    }
                }
            }
            Fake::Slack(f) => {
                for (at, method, p) in f.timeline() {
                    if p["channel"] != "DU42" {
                        continue;
                    }
                    let text = p["text"].as_str().unwrap_or_default();
                    match method.as_str() {
                        "chat.postMessage" => push(at, None, text),
                        "chat.update" => {
                            push(at, Some(p["ts"].as_str().unwrap().to_string()), text)
                        }
                        _ => {}
                    }
                }
            }
            Fake::Discord(f) => {
                for (at, route, p) in f.timeline() {
                    let text = p["content"].as_str().unwrap_or_default();
                    if route == "POST /channels/dm-42/messages" {
                        push(at, None, text);
                    } else if let Some(id) = route.strip_prefix("PATCH /channels/dm-42/messages/") {
                        push(at, Some(id.to_string()), text);
                    }
                }
            }
        }
        out
    }

    /// Waits until the bot's messages, joined, satisfy `f`; returns when that was.
    async fn wait_until(&self, what: &str, f: impl Fn(&[(String, String)]) -> bool) -> Instant {
        let deadline = Instant::now() + WAIT;
        loop {
            let m = dm_messages(self);
            if f(&m) {
                return Instant::now();
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}: {m:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The texts each message showed, in order (its post, then its edits).
fn history(ops: &[Op], message: usize) -> Vec<String> {
    ops.iter()
        .filter(|o| o.message == message)
        .map(|o| o.text.clone())
        .collect()
}

// --- 1. the shown reply keeps up with the model ------------------------------------------

async fn a_fast_long_reply_is_shown_soon_after_the_model_finishes(platform: &str) {
    let w = World::new(platform).await;
    let _server = w.server().await;
    // 20 paragraphs in 2 s.
    let paragraphs: Vec<String> = (1..=20)
        .map(|i| format!("Paragraph {i} says something short.\n\n"))
        .collect();
    let chunks: Vec<&str> = paragraphs.iter().map(String::as_str).collect();
    w.llm.push(MockReply::text_slow(&chunks, 100));
    let sent = Instant::now();
    w.dm("write twenty paragraphs");
    let shown = w
        .wait_until("all twenty paragraphs", |m| {
            m.iter()
                .any(|(_, t)| t.contains("Paragraph 20 says something short."))
        })
        .await;
    // The model takes about 2 s; everything is on screen within 2 s more (one edit
    // interval, plus the time it takes the fake platforms to deliver the DM), with room for
    // a loaded CI machine — the paragraph-per-edit pace this replaced took about 18 s.
    let took = shown - sent;
    assert!(
        took < Duration::from_millis(6_000),
        "{platform}: shown {took:?} after the DM (before: about 18 s)"
    );
    let ops = w.ops();
    assert_eq!(dm_messages(&w).len(), 1, "one message, edited");
    let texts = history(&ops, 0);
    // Each edit carries everything there is: a few edits, not one per paragraph.
    assert!(
        texts.len() <= 6,
        "{platform}: {} edits: {texts:#?}",
        texts.len()
    );
    let paragraphs_in = |t: &str| t.matches("says something short.").count();
    for pair in texts.windows(2) {
        assert!(paragraphs_in(&pair[1]) >= paragraphs_in(&pair[0]));
    }
    assert!(
        texts
            .windows(2)
            .any(|p| paragraphs_in(&p[1]) - paragraphs_in(&p[0]) >= 3),
        "{platform}: some edit adds several paragraphs: {texts:#?}"
    );
    assert_eq!(paragraphs_in(texts.last().unwrap()), 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telegram_a_fast_long_reply_keeps_up() {
    a_fast_long_reply_is_shown_soon_after_the_model_finishes("telegram").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_a_fast_long_reply_keeps_up() {
    a_fast_long_reply_is_shown_soon_after_the_model_finishes("slack").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_a_fast_long_reply_keeps_up() {
    a_fast_long_reply_is_shown_soon_after_the_model_finishes("discord").await;
}

// --- 2. a line is shown as it is written, word by word ------------------------------------

async fn a_one_line_reply_is_visible_growing(platform: &str) {
    let w = World::new(platform).await;
    let _server = w.server().await;
    // One line, no line break, over 10 s; the last piece ends mid-word and finishes it.
    let words: Vec<String> = (1..=20).map(|i| format!("word{i} ")).collect();
    let mut chunks: Vec<String> = Vec::new();
    for word in &words {
        // Each word arrives in two pieces, so a cut mid-word would show.
        let (a, b) = word.split_at(3);
        chunks.push(a.to_string());
        chunks.push(b.to_string());
    }
    chunks.push("end.".into());
    let chunks: Vec<&str> = chunks.iter().map(String::as_str).collect();
    w.llm.push(MockReply::text_slow(&chunks, 250));
    let sent = Instant::now();
    w.dm("one long line please");
    let first = w.wait_until("the first words", |m| !m.is_empty()).await;
    assert!(
        first - sent < Duration::from_secs(4),
        "{platform}: first words after {:?}",
        first - sent
    );
    let done = w
        .wait_until("the whole line", |m| {
            m.iter().any(|(_, t)| t.ends_with("word20 end."))
        })
        .await;
    assert!(done - sent > Duration::from_secs(9), "the model took ~10 s");
    let texts = history(&w.ops(), 0);
    let final_text = texts.last().unwrap().clone();
    assert_eq!(final_text, format!("{}end.", words.concat()));
    // Growing: many showings, each a longer prefix of the line made of whole words.
    assert!(
        texts.len() >= 6,
        "{platform}: only {} showings: {texts:?}",
        texts.len()
    );
    for pair in texts.windows(2) {
        assert!(pair[1].len() > pair[0].len(), "{pair:?}");
    }
    for t in &texts[..texts.len() - 1] {
        assert!(final_text.starts_with(t.as_str()), "{t:?}");
        for word in t.split_whitespace() {
            assert!(
                words.iter().any(|w| w.trim() == word),
                "{platform}: a word shown cut: {word:?} in {t:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telegram_a_one_line_reply_grows() {
    a_one_line_reply_is_visible_growing("telegram").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_a_one_line_reply_grows() {
    a_one_line_reply_is_visible_growing("slack").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_a_one_line_reply_grows() {
    a_one_line_reply_is_visible_growing("discord").await;
}

// --- 3. splits keep words and code whole --------------------------------------------------

fn words_and_code() -> String {
    let words: String = (1..=900).map(|i| format!("t{i} ")).collect();
    let code: String = (0..200)
        .map(|i| format!("print({i})  # line {i}\n"))
        .collect();
    format!("{}\n\n```python\n{code}```\n\nDone.\n", words.trim_end())
}

/// Checks one shown text: no glued words, no glued fences, only whole code lines.
fn check_shown(platform: &str, text: &str, limit: usize) {
    assert!(
        text.chars().count() <= limit,
        "{platform}: {} chars",
        text.chars().count()
    );
    assert!(
        !text.contains("``````"),
        "{platform}: glued fences in {text:.80}"
    );
    // Every message is balanced: a code block it cuts is closed in it and reopened after.
    let fences = text.lines().filter(|l| l.starts_with("```")).count();
    assert_eq!(fences % 2, 0, "{platform}: unbalanced fences in {text:.80}");
    let mut last: Option<u32> = None;
    for line in text.lines() {
        if line.starts_with("```") {
            assert!(
                line == "```" || line == "```python",
                "{platform}: fence line {line:?}"
            );
            continue;
        }
        if line.starts_with("print(") {
            let n: u32 = line[6..line.find(')').unwrap()].parse().unwrap();
            assert_eq!(line, format!("print({n})  # line {n}"), "{platform}");
            continue;
        }
        for token in line.split_whitespace() {
            if token == "Done." {
                continue;
            }
            let n: u32 = token
                .strip_prefix('t')
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{platform}: glued or cut word {token:?}"));
            if let Some(l) = last {
                assert_eq!(n, l + 1, "{platform}: words in order");
            }
            last = Some(n);
        }
    }
}

async fn long_replies_are_split_whole(platform: &str) {
    let w = World::new(platform).await;
    let _server = w.server().await;
    let reply = words_and_code();
    let expected: Vec<String> = paginate(&reply, w.max_chars())
        .iter()
        .map(|p| p.text())
        .collect();
    assert!(expected.len() >= 3, "{}", expected.len());

    // Arriving in one piece (it ends with a line break, so it is whole words): the pages are
    // posted once each, in order, already in their final form — nothing else.
    w.llm.push(MockReply::text(&[&reply]));
    w.dm("all at once");
    w.wait_until("every page", |m| {
        m.len() >= expected.len() && m.last().unwrap().1.ends_with("Done.")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await; // no late edit comes
    let ops = w.ops();
    for op in &ops {
        check_shown(platform, &op.text, w.max_chars());
    }
    let seq: Vec<(bool, usize, String)> = ops
        .iter()
        .map(|o| (o.edit, o.message, o.text.clone()))
        .collect();
    let want: Vec<(bool, usize, String)> = expected
        .iter()
        .enumerate()
        .map(|(i, t)| (false, i, t.clone()))
        .collect();
    assert_eq!(seq, want, "{platform}: the exact posts");

    // Streaming in small pieces: every post and every edit is whole, and the messages end
    // as the pages of the whole reply.
    let before = dm_messages(&w).len();
    let chars: Vec<char> = reply.chars().collect();
    let pieces: Vec<String> = chars.chunks(97).map(|c| c.iter().collect()).collect();
    let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
    w.llm.push(MockReply::text_slow(&pieces, 15));
    w.dm("now streamed");
    w.wait_until("the streamed reply", |m| {
        m.len() >= before + expected.len() && m.last().unwrap().1.ends_with("Done.")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let ops: Vec<Op> = w
        .ops()
        .into_iter()
        .filter(|o| o.message >= before)
        .collect();
    for op in &ops {
        check_shown(platform, &op.text, w.max_chars());
    }
    let finals: Vec<String> = dm_messages(&w)[before..]
        .iter()
        .map(|(_, t)| t.clone())
        .collect();
    assert_eq!(finals, expected, "{platform}: final pages");
    // Posted in order, each once, and only ever edited to more of itself or its final form.
    let mut posted = Vec::new();
    for op in &ops {
        if !op.edit {
            assert_eq!(
                op.message,
                before + posted.len(),
                "{platform}: posts in order"
            );
            posted.push(op.message);
        }
    }
    assert_eq!(posted.len(), expected.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telegram_long_replies_are_split_whole() {
    long_replies_are_split_whole("telegram").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_long_replies_are_split_whole() {
    long_replies_are_split_whole("slack").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_long_replies_are_split_whole() {
    long_replies_are_split_whole("discord").await;
}
