use super::*;
use std::time::Instant;

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

fn is_fence(line: &str) -> bool {
    fence_body(line).is_some()
}

fn fence_count(text: &str) -> usize {
    text.split('\n').filter(|l| is_fence(l)).count()
}

// ---- StreamBuffer ----

#[test]
fn whitespace_only_is_never_flushed() {
    let t0 = Instant::now();
    let mut b = StreamBuffer::new();
    assert!(b.is_empty());
    b.push("  \n\n \t\n", t0);
    assert!(b.is_empty());
    assert_eq!(b.take_ready(t0), None);
    assert_eq!(b.take_ready(t0 + secs(60.0)), None);
    assert_eq!(b.take_rest(), None);
}

#[test]
fn a_whole_reply_is_kept_until_the_end_unless_it_outgrows_the_cap() {
    let t0 = Instant::now();
    let mut b = StreamBuffer::whole(50);
    b.push("First paragraph.\n\nSecond one.\n\n", t0);
    assert_eq!(
        b.take_ready(t0 + secs(3600.0)),
        None,
        "no paragraph or time flush"
    );
    b.push(&"word ".repeat(8), t0);
    assert_eq!(
        b.take_ready(t0).as_deref(),
        Some("First paragraph.\n\nSecond one.\n\n"),
        "over the cap: up to the last line end"
    );
    assert_eq!(b.take_rest().map(|t| t.trim().len()), Some(39));
}

#[test]
fn paragraph_break_flushes_at_once_up_to_the_last_one() {
    let t0 = Instant::now();
    let mut b = StreamBuffer::new();
    b.push("Hello world.", t0);
    assert_eq!(b.take_ready(t0), None);
    b.push("\n\nSecond para.\n\nThird", t0);
    assert_eq!(
        b.take_ready(t0).as_deref(),
        Some("Hello world.\n\nSecond para.\n\n")
    );
    assert!(!b.is_empty());
    assert_eq!(b.take_ready(t0), None);
    assert_eq!(b.take_rest().as_deref(), Some("Third"));
    assert!(b.is_empty());
}

#[test]
fn paragraph_break_split_across_deltas_and_blank_line_with_spaces() {
    let t0 = Instant::now();
    let mut b = StreamBuffer::new();
    b.push("one\n", t0);
    assert_eq!(b.take_ready(t0), None);
    b.push("\ntwo\n  \nthree", t0);
    assert_eq!(b.take_ready(t0).as_deref(), Some("one\n\ntwo\n  \n"));
}

#[test]
fn leading_blank_lines_are_not_a_flush() {
    let t0 = Instant::now();
    let mut b = StreamBuffer::new();
    b.push("\n\nhi", t0);
    assert_eq!(b.take_ready(t0), None);
    b.push("\n\n", t0);
    assert_eq!(b.take_ready(t0).as_deref(), Some("\n\nhi\n\n"));
}

#[test]
fn a_line_is_flushed_after_max_wait() {
    let t0 = Instant::now();
    let mut b = StreamBuffer::new();
    b.push("line one\nline t", t0);
    assert_eq!(b.take_ready(t0 + secs(2.9)), None);
    assert_eq!(b.take_ready(t0 + secs(3.0)).as_deref(), Some("line one\n"));
    // No line end: waits for one however long it takes.
    assert_eq!(b.take_ready(t0 + secs(60.0)), None);
    b.push("wo\n", t0 + secs(61.0));
    assert_eq!(b.take_ready(t0 + secs(61.0)).as_deref(), Some("line two\n"));
}

#[test]
fn max_wait_counts_from_the_oldest_unflushed_text() {
    let t0 = Instant::now();
    let mut b = StreamBuffer::new();
    b.push("p1\n\n", t0);
    b.push("x\n", t0 + secs(2.5));
    assert_eq!(b.take_ready(t0 + secs(2.5)).as_deref(), Some("p1\n\n"));
    // "x" arrived at 2.5 s: 3.1 s is only 0.6 s later.
    assert_eq!(b.take_ready(t0 + secs(3.1)), None);
    assert_eq!(b.take_ready(t0 + secs(5.6)).as_deref(), Some("x\n"));
    // The clock restarts with the next text.
    b.push("y\n", t0 + secs(10.0));
    assert_eq!(b.take_ready(t0 + secs(12.0)), None);
    assert_eq!(b.take_ready(t0 + secs(13.0)).as_deref(), Some("y\n"));
}

#[test]
fn empty_push_does_not_start_the_clock() {
    let t0 = Instant::now();
    let mut b = StreamBuffer::new();
    b.push("", t0);
    b.push("a\n", t0 + secs(5.0));
    assert_eq!(b.take_ready(t0 + secs(6.0)), None);
    assert_eq!(b.take_ready(t0 + secs(8.0)).as_deref(), Some("a\n"));
}

#[test]
fn a_long_buffer_is_flushed_at_its_last_line_end() {
    let t0 = Instant::now();
    let mut b = StreamBuffer::with_limits(20, Duration::from_secs(3600), 1000);
    b.push("0123456789\nabcdefghij", t0);
    assert_eq!(b.take_ready(t0).as_deref(), Some("0123456789\n"));
    b.push("klmnopqrstuvwxyz", t0);
    // Long, but no line end.
    assert_eq!(b.take_ready(t0), None);
    b.push("\nmore", t0);
    assert_eq!(
        b.take_ready(t0).as_deref(),
        Some("abcdefghijklmnopqrstuvwxyz\n")
    );
    assert_eq!(b.take_rest().as_deref(), Some("more"));
}

#[test]
fn length_counts_chars_not_bytes() {
    let t0 = Instant::now();
    let mut b = StreamBuffer::with_limits(40, Duration::from_secs(3600), 1000);
    b.push(&format!("{}\nx", "é".repeat(30)), t0); // 32 chars, 63 bytes
    assert_eq!(b.take_ready(t0), None);
    b.push(&"日".repeat(8), t0); // 40 chars
    assert_eq!(b.take_ready(t0), Some(format!("{}\n", "é".repeat(30))));
}

#[test]
fn nothing_is_flushed_inside_an_open_fence() {
    let t0 = Instant::now();
    let mut b = StreamBuffer::new();
    b.push("Intro\n\n```rust\nfn a() {}\n\nfn b() {}\n", t0);
    // The blank line inside the fence is not a paragraph break.
    assert_eq!(b.take_ready(t0).as_deref(), Some("Intro\n\n"));
    assert_eq!(b.take_ready(t0 + secs(10.0)), None);
    b.push("```\n\nAfter", t0 + secs(10.0));
    assert_eq!(
        b.take_ready(t0 + secs(10.0)).as_deref(),
        Some("```rust\nfn a() {}\n\nfn b() {}\n```\n\n")
    );
    assert_eq!(b.take_rest().as_deref(), Some("After"));
}

#[test]
fn a_long_or_timed_flush_stops_before_an_open_fence() {
    let t0 = Instant::now();
    let mut b = StreamBuffer::with_limits(10, Duration::ZERO, 1000);
    b.push("text line\n```\nline1\nline2\nline3\n", t0);
    assert_eq!(b.take_ready(t0).as_deref(), Some("text line\n"));
    assert_eq!(b.take_ready(t0), None);
    b.push("```\n", t0);
    assert_eq!(
        b.take_ready(t0).as_deref(),
        Some("```\nline1\nline2\nline3\n```\n")
    );
    assert!(b.is_empty());
}

#[test]
fn indented_fences_count() {
    let t0 = Instant::now();
    let mut b = StreamBuffer::with_limits(1, Duration::ZERO, 1000);
    b.push("1. step\n   ```sh\n   ls\n", t0);
    assert_eq!(b.take_ready(t0).as_deref(), Some("1. step\n"));
    b.push("   ```\n", t0);
    assert_eq!(
        b.take_ready(t0).as_deref(),
        Some("   ```sh\n   ls\n   ```\n")
    );
}

#[test]
fn the_hard_cap_cuts_through_a_fence_and_reopens_it() {
    let t0 = Instant::now();
    let mut b = StreamBuffer::with_limits(10, Duration::ZERO, 50);
    let mut code = String::from("```py\n");
    for i in 0..10 {
        code.push_str(&format!("print({i})\n"));
    }
    b.push(&code, t0);
    let first = b.take_ready(t0).unwrap();
    assert!(first.starts_with("```py\nprint(0)\n"), "{first:?}");
    assert!(first.ends_with("print(9)\n```\n"), "{first:?}");
    assert_eq!(fence_count(&first), 2);
    assert_eq!(b.take_ready(t0), None);
    assert!(b.is_empty());
    b.push("print(10)\n```\n\ndone", t0);
    let second = b.take_ready(t0).unwrap();
    assert_eq!(second, "```py\nprint(10)\n```\n\n");
    assert_eq!(b.take_rest().as_deref(), Some("done"));
}

#[test]
fn take_rest_reopens_a_carried_fence() {
    let t0 = Instant::now();
    let mut b = StreamBuffer::with_limits(10, Duration::ZERO, 20);
    b.push("```\naaaaaaaaaa\nbbbbbbbbbb\ncc", t0);
    let first = b.take_ready(t0).unwrap();
    assert_eq!(first, "```\naaaaaaaaaa\nbbbbbbbbbb\n```\n");
    assert_eq!(b.take_rest().as_deref(), Some("```\ncc"));
    // A carried fence with nothing after it gives nothing.
    b.push("```\naaaaaaaaaa\nbbbbbbbbbb\n", t0);
    assert!(b.take_ready(t0).is_some());
    assert_eq!(b.take_rest(), None);
}

#[test]
fn the_hard_cap_prefers_a_cut_outside_the_fence_when_that_is_enough() {
    let t0 = Instant::now();
    let mut b = StreamBuffer::with_limits(1000, Duration::from_secs(3600), 50);
    let prose = "a prose line that is thirty ch\n"; // 31 chars
    let code = "```\nlet x = 1;\nlet y = 2;\n"; // 26 chars, fence open
    b.push(prose, t0);
    b.push(code, t0);
    assert_eq!(b.take_ready(t0).as_deref(), Some(prose));
    assert_eq!(b.take_ready(t0), None);
    b.push("let z = 3;\nlet w = 4;\nlet v = 5;\n", t0);
    let cut = b.take_ready(t0).unwrap();
    assert!(cut.starts_with("```\nlet x = 1;"), "{cut:?}");
    assert!(cut.ends_with("let v = 5;\n```\n"), "{cut:?}");
}

#[test]
fn the_hard_cap_without_line_ends_cuts_at_whitespace() {
    let t0 = Instant::now();
    let mut b = StreamBuffer::with_limits(10, Duration::ZERO, 30);
    b.push(&"word ".repeat(8), t0); // 40 chars, no '\n'
    b.push("tail", t0);
    let out = b.take_ready(t0).unwrap();
    assert_eq!(out, "word ".repeat(8));
    assert_eq!(b.take_rest().as_deref(), Some("tail"));

    let mut b = StreamBuffer::with_limits(10, Duration::ZERO, 30);
    let blob = "x".repeat(40);
    b.push(&blob, t0);
    assert_eq!(b.take_ready(t0), Some(blob));
    assert!(b.is_empty());
}

#[test]
fn streamed_text_is_preserved_across_flushes() {
    let t0 = Instant::now();
    let mut rng = Lcg(7);
    for round in 0..50 {
        let text = random_text(&mut rng, 3000);
        let mut b = StreamBuffer::with_limits(200, Duration::from_millis(500), 700);
        let mut out = Vec::new();
        let mut i = 0;
        let chars: Vec<char> = text.chars().collect();
        let mut t = t0;
        while i < chars.len() {
            let n = 1 + rng.below(40);
            let delta: String = chars[i..(i + n).min(chars.len())].iter().collect();
            i += n;
            t += Duration::from_millis(rng.below(300) as u64);
            b.push(&delta, t);
            if let Some(chunk) = b.take_ready(t) {
                assert!(!is_blank(&chunk), "round {round}");
                out.push(chunk);
            }
        }
        out.extend(b.take_rest());
        for chunk in &out {
            assert_eq!(fence_count(chunk) % 2, 0, "round {round}: {chunk:?}");
        }
        let strip = |s: &str| {
            s.split('\n')
                .filter(|l| !is_fence(l))
                .collect::<Vec<_>>()
                .concat()
                .chars()
                .filter(|c| !c.is_whitespace())
                .collect::<String>()
        };
        assert_eq!(strip(&out.concat()), strip(&text), "round {round}");
    }
}

// ---- split_message ----

#[test]
fn short_text_is_one_trimmed_chunk() {
    assert_eq!(split_message("hello\n\n", 100), vec!["hello"]);
    assert_eq!(split_message("\n\n  hello  ", 100), vec!["  hello"]);
    assert!(split_message("", 100).is_empty());
    assert!(split_message(" \n\t\n ", 100).is_empty());
}

#[test]
fn prefers_paragraph_breaks() {
    let p1 = "First paragraph, with several words in it.";
    let p2 = "Second paragraph\nwith a line break in it.";
    let text = format!("{p1}\n\n{p2}");
    assert_eq!(split_message(&text, 60), vec![p1, p2]);
}

#[test]
fn then_line_breaks_then_spaces_then_hard_cuts() {
    let text = "aaaa bbbb cccc\ndddd eeee ffff";
    assert_eq!(
        split_message(text, 20),
        vec!["aaaa bbbb cccc", "dddd eeee ffff"]
    );
    assert_eq!(
        split_message("aaaa bbbb cccc dddd", 10),
        vec!["aaaa bbbb", "cccc dddd"]
    );
    assert_eq!(
        split_message(&"x".repeat(25), 10),
        vec!["x".repeat(10), "x".repeat(10), "x".repeat(5)]
    );
}

#[test]
fn an_early_paragraph_break_loses_to_a_late_line_break() {
    let text = "ab\n\ncdefghij klmnopqrstu\nvwxyz0123456789";
    // Room of 30: the paragraph break at 2 is in the first half, the line break at 24 not.
    assert_eq!(
        split_message(text, 30),
        vec!["ab\n\ncdefghij klmnopqrstu", "vwxyz0123456789"]
    );
}

#[test]
fn counts_chars_not_bytes() {
    let chunks = split_message(&"é".repeat(25), 10);
    assert_eq!(chunks, vec!["é".repeat(10), "é".repeat(10), "é".repeat(5)]);
    let chunks = split_message(&"🦀 ".repeat(30), 16);
    assert!(chunks.iter().all(|c| c.chars().count() <= 16));
    assert_eq!(chunks.concat().matches('🦀').count(), 30);
}

#[test]
fn fences_are_closed_and_reopened_with_their_info_string() {
    let mut text = String::from("Here is the code:\n\n```rust\n");
    for i in 0..30 {
        text.push_str(&format!("    let x{i} = {i};\n"));
    }
    text.push_str("```\n\nThat is all.");
    let chunks = split_message(&text, 100);
    assert!(chunks.len() > 4);
    // The paragraph break before the fence is early in the first chunk's room: the cut
    // falls inside the fence instead, which is closed there.
    assert!(chunks[0].starts_with("Here is the code:\n\n```rust\n    let x0 = 0;"));
    assert!(chunks[0].ends_with("\n```"));
    for chunk in &chunks[1..chunks.len() - 1] {
        assert!(chunk.chars().count() <= 100);
        assert!(chunk.starts_with("```rust\n    let"), "{chunk:?}");
        assert!(chunk.ends_with("\n```"), "{chunk:?}");
    }
    assert!(chunks.last().unwrap().ends_with("That is all."));
    // Indentation inside the fence survives the cuts.
    for chunk in &chunks[1..] {
        for line in chunk.lines().filter(|l| l.contains("let")) {
            assert!(line.starts_with("    let"), "{line:?}");
        }
    }
    check_chunks(&text, &chunks, 100);
}

#[test]
fn longer_fences_close_with_their_own_backticks() {
    let mut text = String::from("````md\n");
    for i in 0..20 {
        text.push_str(&format!("line {i}\n"));
    }
    text.push_str("````\n");
    let chunks = split_message(&text, 60);
    assert!(chunks.len() >= 3);
    for (i, chunk) in chunks.iter().enumerate() {
        assert!(chunk.chars().count() <= 60);
        assert!(chunk.starts_with("````md\nline "), "{chunk:?}");
        assert!(chunk.ends_with("\n````"), "{chunk:?}");
        if i + 1 < chunks.len() {
            assert!(!chunk.ends_with("\n`````"), "{chunk:?}");
        }
    }
    check_chunks(&text, &chunks, 60);
}

#[test]
fn a_fence_line_is_never_cut() {
    let text = format!(
        "{} ```python-with-a-long-info\ncode\n```",
        "word ".repeat(3)
    );
    let text = text.replace(" ```", "\n```");
    // The opening line has 26 chars.
    for limit in 16..60 {
        let chunks = split_message(&text, limit);
        for chunk in &chunks {
            assert!(chunk.chars().count() <= limit, "{limit}: {chunk:?}");
            // Never a piece of the opening line; below twice its length, a bare fence.
            for line in chunk.lines().filter(|l| l.contains("```")) {
                if limit >= 52 {
                    assert!(line == "```python-with-a-long-info" || line == "```");
                } else {
                    assert_eq!(line, "```", "{limit}");
                }
            }
        }
        check_chunks(&text, &chunks, limit);
    }
}

#[test]
fn unbalanced_fences_do_not_break_anything() {
    let text = format!("start\n```\n{}", "open code line\n".repeat(50));
    let chunks = split_message(&text, 64);
    assert!(chunks.iter().all(|c| c.chars().count() <= 64));
    let strip = |s: &str| -> String {
        s.split('\n')
            .filter(|l| !is_fence(l))
            .flat_map(|l| l.chars())
            .filter(|c| !c.is_whitespace())
            .collect()
    };
    assert_eq!(strip(&chunks.concat()), strip(&text));
}

#[test]
fn tiny_limits_still_make_progress() {
    let text = "```rust\nfn main() {}\n```\nsome words here and there\n\nend";
    for limit in 0..MIN_FENCE_REPAIR_LIMIT {
        let chunks = split_message(text, limit);
        let limit = limit.max(1);
        for chunk in &chunks {
            assert!(chunk.chars().count() <= limit, "{limit}: {chunk:?}");
            assert!(!is_blank(chunk));
        }
        let squash = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
        assert_eq!(squash(&chunks.concat()), squash(text), "limit {limit}");
    }
}

#[test]
fn ten_thousand_chars_with_a_fence_in_the_middle() {
    let mut rng = Lcg(42);
    let mut text = String::new();
    while text.chars().count() < 2500 {
        text.push_str(&random_prose(&mut rng, 400));
        text.push_str("\n\n");
    }
    text.push_str("```python\n");
    let mut i = 0;
    while text.chars().count() < 7500 {
        text.push_str(&format!("    value_{i} = compute({i}, 'é') # step {i}\n"));
        i += 1;
    }
    text.push_str("```\n\n");
    while text.chars().count() < 10_000 {
        text.push_str(&random_prose(&mut rng, 300));
        text.push('\n');
    }
    let text: String = text.chars().take(10_000).collect();
    assert_eq!(text.chars().count(), 10_000);
    for (limit, min_chunks) in [(4096, 3), (2000, 5)] {
        let chunks = split_message(&text, limit);
        assert!(chunks.len() >= min_chunks, "{limit}: {}", chunks.len());
        assert!(chunks.len() <= min_chunks + 2, "{limit}: {}", chunks.len());
        // The fence spans a cut: it is reopened with its info string.
        let reopened = chunks
            .iter()
            .filter(|c| c.starts_with("```python\n"))
            .count();
        assert!(reopened >= 2, "{limit}: {reopened}");
        check_chunks(&text, &chunks, limit);
    }
}

#[test]
fn property_random_texts() {
    let mut rng = Lcg(1);
    for round in 0..300 {
        let len = 1 + rng.below(3000);
        let text = random_text(&mut rng, len);
        for limit in [16, 17, 23, 40, 64, 100, 257, 1000] {
            let chunks = split_message(&text, limit);
            check_chunks(&text, &chunks, limit);
            if limit >= 64 && !text.contains(LONG_WORD_MARK) {
                // No word is cut when every word fits easily.
                let words = |s: &str| -> Vec<String> {
                    s.split('\n')
                        .filter(|l| !is_fence(l))
                        .flat_map(|l| l.split_whitespace())
                        .map(str::to_string)
                        .collect()
                };
                let joined = chunks.join("\n");
                assert_eq!(words(&joined), words(&text), "round {round} limit {limit}");
            }
        }
    }
}

/// Every chunk fits, is trimmed and non-blank, has balanced fences (when the text does),
/// and the chunks hold exactly the text's non-whitespace content outside fence lines.
fn check_chunks(text: &str, chunks: &[String], limit: usize) {
    let balanced = fence_count(text).is_multiple_of(2);
    for chunk in chunks {
        assert!(
            chunk.chars().count() <= limit,
            "limit {limit}: {} chars: {chunk:?}",
            chunk.chars().count()
        );
        assert!(!is_blank(chunk));
        assert_eq!(chunk.trim_end(), chunk);
        if balanced {
            assert_eq!(fence_count(chunk) % 2, 0, "limit {limit}: {chunk:?}");
        }
    }
    let strip = |s: &str| -> String {
        s.split('\n')
            .filter(|l| !is_fence(l))
            .flat_map(|l| l.chars())
            .filter(|c| !c.is_whitespace())
            .collect()
    };
    let joined = chunks.join("\n");
    assert_eq!(strip(&joined), strip(text), "limit {limit}");
}

// ---- truncate ----

#[test]
fn truncate_cuts_with_an_ellipsis() {
    assert_eq!(truncate("hello", 5), "hello");
    assert_eq!(truncate("hello", 10), "hello");
    assert_eq!(truncate("hello world", 6), "hello…");
    assert_eq!(truncate("hello world", 7), "hello…"); // trailing space dropped
    assert_eq!(truncate("héllo wörld", 3), "hé…");
    assert_eq!(truncate("hello", 1), "…");
    assert_eq!(truncate("hello", 0), "");
    assert_eq!(truncate("", 0), "");
    for max in 0..15 {
        assert!(
            truncate("日本語のテキストです。とても長い", max)
                .chars()
                .count()
                <= max
        );
    }
}

// ---- deterministic random inputs ----

struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) as u32
    }

    fn below(&mut self, n: usize) -> usize {
        self.next() as usize % n.max(1)
    }
}

const LONG_WORD_MARK: char = 'Ω';

fn random_word(rng: &mut Lcg) -> String {
    const ALPHABET: [char; 11] = ['a', 'e', 'o', 'k', 's', 't', 'é', 'ß', '日', '🦀', '*'];
    if rng.below(30) == 0 {
        return "`code`".to_string();
    }
    let len = if rng.below(60) == 0 {
        30 + rng.below(80)
    } else {
        1 + rng.below(11)
    };
    let mut w: String = (0..len)
        .map(|_| ALPHABET[rng.below(ALPHABET.len())])
        .collect();
    if len > 12 {
        w.push(LONG_WORD_MARK);
    }
    w
}

fn random_prose(rng: &mut Lcg, chars: usize) -> String {
    let mut s = String::new();
    while s.chars().count() < chars {
        s.push_str(&random_word(rng));
        s.push_str(match rng.below(12) {
            0 => "\n",
            1 => ". ",
            _ => " ",
        });
    }
    s.trim_end().to_string()
}

fn random_text(rng: &mut Lcg, chars: usize) -> String {
    let mut s = String::new();
    while s.chars().count() < chars {
        match rng.below(6) {
            0 => {
                let info = ["", "rust", "python", "sh", "a-very-long-info-string"][rng.below(5)];
                let indent = if rng.below(4) == 0 { "  " } else { "" };
                s.push_str(&format!("{indent}```{info}\n"));
                for _ in 0..1 + rng.below(20) {
                    let pad = " ".repeat(rng.below(3) * 4);
                    let n = rng.below(50);
                    let line = random_prose(rng, n).replace('\n', " ");
                    s.push_str(&format!("{pad}{line}\n"));
                    if rng.below(6) == 0 {
                        s.push('\n');
                    }
                }
                s.push_str(&format!("{indent}```\n"));
            }
            1 => s.push_str("\n\n"),
            2 => s.push_str("\n \n"),
            _ => {
                let n = rng.below(300);
                s.push_str(&random_prose(rng, n));
                s.push('\n');
            }
        }
    }
    s
}
