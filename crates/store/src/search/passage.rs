//! A hit's passage, built from its text: the words around the query's matches, each match
//! marked. SQLite's `snippet()` would do it, but only inside the query that matched, and a
//! passage per hit asked of FTS5 by rowid reads the term's whole list again for each (a
//! word in most messages: milliseconds a hit); the page's texts are read by rowid instead
//! and their passages made here, from the same reading of the words as the index's
//! (runs of letters and digits, compared without case).

use std::borrow::Cow;
use std::cmp::Reverse;

use super::{MATCH_END, MATCH_START, Term};

/// How many words a passage holds at most (as SQLite's `snippet(…, 24)` did).
pub const PASSAGE_WORDS: usize = 24;

/// How many matches are tried as the place to start a passage (a text of a common word
/// repeated has many; the first ones decide).
const ANCHORS: usize = 1_000;

/// At most [`PASSAGE_WORDS`] words of `text` where most of the query's terms are found
/// together, each match between [`MATCH_START`] and [`MATCH_END`], with `…` where the text
/// goes on. A text where no term is found (the index reads some scripts otherwise) gives
/// its first words.
pub fn passage(text: &str, terms: &[Term]) -> String {
    let spans = word_spans(text);
    if spans.is_empty() {
        return text.chars().take(200).collect();
    }
    // Lowered only where needed: most words of most texts are lower-case ASCII already.
    let words: Vec<Cow<'_, str>> = spans
        .iter()
        .map(|&(a, b)| {
            let w = &text[a..b];
            if w.bytes().any(|c| c.is_ascii_uppercase() || !c.is_ascii()) {
                Cow::Owned(w.to_lowercase())
            } else {
                Cow::Borrowed(w)
            }
        })
        .collect();
    let matches = find(&words, terms);
    let (start, end) = window(words.len(), &matches);
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    let mut at = spans[start].0;
    let mut marked_to = start;
    for &(first, last, _) in &matches {
        if first < start || first >= end || first < marked_to {
            continue;
        }
        // A phrase longer than the passage is marked as far as the passage goes.
        let last = last.min(end - 1);
        out.push_str(&text[at..spans[first].0]);
        out.push(MATCH_START);
        out.push_str(&text[spans[first].0..spans[last].1]);
        out.push(MATCH_END);
        at = spans[last].1;
        marked_to = last + 1;
    }
    out.push_str(&text[at..spans[end - 1].1]);
    if end < words.len() {
        out.push('…');
    }
    out
}

/// The byte ranges of `text`'s words.
fn word_spans(text: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices() {
        if c.is_alphanumeric() {
            start.get_or_insert(i);
        } else if let Some(s) = start.take() {
            spans.push((s, i));
        }
    }
    if let Some(s) = start {
        spans.push((s, text.len()));
    }
    spans
}

/// Every match: `(first word, last word, which term)`, in the text's order, the longest
/// first of those that start at one word (a phrase before a word of it, which would hide it).
fn find(words: &[Cow<'_, str>], terms: &[Term]) -> Vec<(usize, usize, usize)> {
    let mut found = Vec::new();
    for (t, term) in terms.iter().enumerate() {
        match term {
            Term::Phrase(phrase) if !phrase.is_empty() && phrase.len() <= words.len() => {
                for i in 0..=words.len() - phrase.len() {
                    if phrase.iter().zip(&words[i..]).all(|(p, w)| p.as_str() == w) {
                        found.push((i, i + phrase.len() - 1, t));
                    }
                }
            }
            Term::Phrase(_) => {}
            Term::Prefix(p) => found.extend(
                words
                    .iter()
                    .enumerate()
                    .filter(|(_, w)| w.starts_with(p.as_str()))
                    .map(|(i, _)| (i, i, t)),
            ),
        }
    }
    found.sort_unstable_by_key(|&(first, last, term)| (first, Reverse(last), term));
    found
}

/// The words `[start, end)` to show: the [`PASSAGE_WORDS`] that hold the most distinct
/// terms (then the most matches; then the earliest), with the matches in it centred.
fn window(len: usize, matches: &[(usize, usize, usize)]) -> (usize, usize) {
    let n = PASSAGE_WORDS.min(len);
    let mut best: Option<((usize, usize), usize, usize)> = None; // (score, from, to)
    for (i, &(anchor, _, _)) in matches.iter().enumerate().take(ANCHORS) {
        if i > 0 && matches[i - 1].0 == anchor {
            continue; // the same window as the previous anchor's
        }
        // The matches that start at the anchor and end inside its window (ordered by start;
        // one too long for the window does not end the search).
        let inside = matches[i..]
            .iter()
            .take_while(|m| m.0 < anchor + n)
            .filter(|m| m.1 < anchor + n);
        let mut terms = 0u64;
        let (mut count, mut last) = (0, anchor);
        for m in inside {
            terms |= 1u64 << (m.2 % 64);
            count += 1;
            last = last.max(m.1);
        }
        let score = (terms.count_ones() as usize, count);
        if best.is_none_or(|(s, _, _)| score > s) {
            best = Some((score, anchor, last));
        }
    }
    let Some((_, first, last)) = best else {
        return (0, n);
    };
    let pad = (n - (last - first + 1).min(n)) / 2;
    let start = first.saturating_sub(pad).min(len - n);
    (start, start + n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(s: &str) -> String {
        s.replace(MATCH_START, "[").replace(MATCH_END, "]")
    }

    fn p(w: &[&str]) -> Term {
        Term::Phrase(w.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn a_short_text_is_whole_with_its_matches_marked() {
        assert_eq!(
            shown(&passage(
                "Rerun the Zebra migration, then zebras.",
                &[p(&["zebra"])]
            )),
            "Rerun the [Zebra] migration, then zebras"
        );
        assert_eq!(
            shown(&passage("fix the migration; fix it", &[p(&["fix", "the"])])),
            "[fix the] migration; fix it"
        );
        assert_eq!(
            shown(&passage(
                "migrations migrate",
                &[Term::Prefix("migra".into())]
            )),
            "[migrations] [migrate]"
        );
        assert_eq!(
            shown(&passage("ünïcode Ünïcode", &[p(&["ünïcode"])])),
            "[ünïcode] [Ünïcode]"
        );
    }

    #[test]
    fn a_long_text_shows_where_the_terms_meet() {
        let filler = |n: usize, w: &str| vec![w; n].join(" ");
        let text = format!(
            "zebra {} the zebra migration failed {}",
            filler(50, "word"),
            filler(50, "more")
        );
        let got = shown(&passage(&text, &[p(&["zebra"]), p(&["migration"])]));
        assert!(got.starts_with('…') && got.ends_with('…'), "{got}");
        assert!(got.contains("[zebra] [migration] failed"), "{got}");
        let words = got.split_whitespace().filter(|w| *w != "…").count();
        assert!(words <= PASSAGE_WORDS, "{words}: {got}");
        // Centred: words on both sides of the matches.
        assert!(got.contains("word the [zebra]"), "{got}");
        assert!(got.contains("failed more"), "{got}");
    }

    #[test]
    fn a_phrase_is_marked_whole_where_a_word_of_it_matches_too() {
        assert_eq!(
            shown(&passage(
                "the zebra migration, a zebra",
                &[p(&["zebra"]), p(&["zebra", "migration"])]
            )),
            "the [zebra migration], a [zebra]"
        );
    }

    #[test]
    fn a_phrase_longer_than_the_passage_is_marked_as_far_as_it_goes() {
        let words: Vec<String> = (0..30).map(|i| format!("w{i}")).collect();
        let text = format!("start {} end", words.join(" "));
        let phrase: Vec<&str> = words.iter().map(String::as_str).collect();
        let got = shown(&passage(&text, &[p(&phrase)]));
        assert!(got.contains("[w0 w1 w2") && got.ends_with("]…"), "{got}");
        assert_eq!(got.matches('[').count(), 1, "{got}");
    }

    #[test]
    fn no_match_gives_the_beginning_and_no_words_the_text() {
        let text = (0..40)
            .map(|i| format!("w{i}"))
            .collect::<Vec<_>>()
            .join(" ");
        let got = passage(&text, &[p(&["absent"])]);
        assert!(got.starts_with("w0 w1") && got.ends_with("w23…"), "{got}");
        assert_eq!(passage("—— …", &[p(&["x"])]), "—— …");
    }
}
