use super::*;
use proptest::prelude::*;

/// Telegram, Discord, Slack (practical per message), and small limits that make short
/// texts split often.
fn limits() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(4096usize),
        Just(2000usize),
        Just(4000usize),
        16usize..300,
        1usize..16,
    ]
}

fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => "[a-z]{1,8}".prop_map(|w| w),
        4 => Just(" ".to_string()),
        3 => Just("\n".to_string()),
        2 => Just("\n\n".to_string()),
        1 => Just("\n \n".to_string()),
        1 => prop_oneof![
            Just("\n```\n"), Just("\n```python\n"), Just("\n  ```rust\n"),
            Just("\n````\n"), Just("\n```a-very-long-info-string-here\n"),
        ].prop_map(str::to_string),
        1 => "[a-zé✓]{20,300}".prop_map(|w| w), // a long line without spaces
        1 => Just("    indented code\n".to_string()),
    ]
}

fn texts() -> impl Strategy<Value = String> {
    prop::collection::vec(segment(), 0..700).prop_map(|v| v.concat())
}

fn check(text: &str, limit: usize) -> Result<(), TestCaseError> {
    let pages = paginate(text, limit);
    if is_blank(text) {
        prop_assert!(pages.is_empty(), "nothing to show");
        return Ok(());
    }
    let joined: String = pages.iter().map(|p| p.body.as_str()).collect();
    prop_assert_eq!(&joined, text, "bodies are the text");
    let repair = limit.max(1) >= MIN_FENCE_REPAIR_LIMIT;
    let mut start = 0;
    let mut open_at_start: Option<String> = None;
    for (i, p) in pages.iter().enumerate() {
        let shown = p.text();
        // Only leading whitespace wider than the room (a page must show a character)
        // can push a page past the limit: the page is then the least it can be.
        let indent = p.body.chars().take_while(|c| c.is_whitespace()).count();
        let least = p.reopen.chars().count() + indent + 1 + p.close.chars().count();
        prop_assert!(
            shown.chars().count() <= limit.max(1) || shown.chars().count() <= least,
            "page {} has {} chars > {}",
            i,
            shown.chars().count(),
            limit
        );
        prop_assert!(!is_blank(&p.body), "page {} is blank", i);
        match &open_at_start {
            Some(opener) => {
                prop_assert!(!p.reopen.is_empty(), "page {} continues a fence", i);
                prop_assert!(p.reopen.ends_with('\n'));
                let line = p.reopen.trim_end();
                prop_assert!(fence_body(line).is_some(), "reopen is a fence line");
                if opener.chars().count() < limit / 2 {
                    prop_assert_eq!(line, opener.as_str(), "same info string");
                }
            }
            None => prop_assert!(p.reopen.is_empty()),
        }
        let end = start + p.body.len();
        let open_at_end = if repair {
            fence_state(&p.body, open_at_start.clone())
        } else {
            None
        };
        match &open_at_end {
            Some(_) => {
                let c = p.close.trim_start_matches('\n');
                prop_assert!(fence_body(c).is_some() && c.chars().all(|ch| ch == '`'));
                prop_assert!(shown.ends_with(c));
            }
            None => prop_assert!(p.close.is_empty()),
        }
        if i + 1 < pages.len() {
            prop_assert_eq!(!p.close.is_empty(), !pages[i + 1].reopen.is_empty());
        }
        start = end;
        open_at_start = open_at_end;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn pages_are_the_text_within_the_limit(text in texts(), limit in limits()) {
        check(&text, limit)?;
    }

    /// As the text grows, every page but the last of a shorter text is already final,
    /// so posted messages are edited to their final form, never patched back.
    #[test]
    fn earlier_pages_are_final(text in texts(), limit in 200usize..4100, cut in 0.0f64..1.0) {
        let chars: Vec<char> = text.chars().collect();
        let prefix: String = chars[..(chars.len() as f64 * cut) as usize].iter().collect();
        let prefix = showable(&prefix);
        let early = paginate(prefix, limit);
        let full = paginate(&text, limit);
        for (i, p) in early.iter().enumerate().take(early.len().saturating_sub(1)) {
            prop_assert_eq!(p, &full[i], "page {} of {}", i, early.len());
        }
    }
}

/// Found by proptest on CI: indentation inside a fence wider than a 16-char page's room.
#[test]
fn wide_indentation_in_a_fence_at_a_tiny_limit() {
    let text = "\n```\n\n```\n\n```\n\n```\n\n```\n\n```\n\n```\n\n```\n\n  ```rust\n\n    indented code\n";
    check(text, 16).unwrap();
}

#[test]
fn words_are_never_glued_at_a_seam() {
    let text: String = (1..=900).map(|i| format!("t{i} ")).collect();
    for limit in [4096, 2000, 4000, 100] {
        let pages = paginate(&text, limit);
        assert!(pages.len() > 1);
        let words: Vec<String> = pages
            .iter()
            .flat_map(|p| {
                p.text()
                    .split_whitespace()
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .collect();
        let expected: Vec<String> = (1..=900).map(|i| format!("t{i}")).collect();
        assert_eq!(words, expected, "limit {limit}");
    }
}

#[test]
fn a_code_block_is_closed_and_reopened_with_its_info_string() {
    let code: String = (0..200)
        .map(|i| format!("print({i})  # line {i}\n"))
        .collect();
    let text = format!("Here it is:\n\n```python\n{code}```\n\nDone.");
    let pages = paginate(&text, 2000);
    assert!(pages.len() >= 3, "{}", pages.len());
    for (i, p) in pages.iter().enumerate() {
        let shown = p.text();
        assert!(!shown.contains("``````"), "page {i}: {shown}");
        if i > 0 {
            assert!(
                shown.starts_with("```python\n"),
                "page {i} reopens: {shown:.40}"
            );
        }
        if i + 1 < pages.len() {
            assert!(shown.ends_with("\n```"), "page {i} closes");
        }
        // Every page is balanced: an even number of fence lines.
        let fences = shown.lines().filter(|l| l.starts_with("```")).count();
        assert_eq!(fences % 2, 0, "page {i}");
    }
    assert!(pages.last().unwrap().text().ends_with("Done."));
}

#[test]
fn a_streaming_fence_is_closed_for_now_and_continued_later() {
    let partial = "Look:\n\n```sh\nls -la\n";
    let p = paginate(partial, 4096);
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].text(), "Look:\n\n```sh\nls -la\n```");
    let done = "Look:\n\n```sh\nls -la\n```\n\nThat lists files.";
    assert_eq!(paginate(done, 4096)[0].text(), done);
}

#[test]
fn showable_stops_at_the_last_whitespace() {
    assert_eq!(showable("hello wor"), "hello ");
    assert_eq!(showable("hello\nwor"), "hello\n");
    assert_eq!(showable("unfinished"), "");
    assert_eq!(showable("done. "), "done. ");
    assert_eq!(showable("é✓ x"), "é✓ ");
    // inside an open code fence only whole lines show
    assert_eq!(
        showable("Run:\n```python\nprint(1)  # line 1\nprint(2)  # li"),
        "Run:\n```python\nprint(1)  # line 1\n"
    );
    // after the fence closes, words again
    assert_eq!(
        showable("```\nx = 1\n```\nand then som"),
        "```\nx = 1\n```\nand then "
    );
}
