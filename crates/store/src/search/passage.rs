//! A hit's passage, built from its text: the words around the query's matches, each match
//! marked. SQLite's `snippet()` would do it, but only inside the query that matched, and a
//! passage per hit asked of FTS5 by rowid reads the term's whole list again for each (a
//! word in most messages: milliseconds a hit); the page's texts are read by rowid instead
//! and their passages made here, from the same reading of the words as the index's
//! (runs of letters and digits, compared without case).

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
    let words: Vec<String> = spans
        .iter()
        .map(|&(a, b)| text[a..b].to_lowercase())
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
        if first < start || last >= end || first < marked_to {
            continue;
        }
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

/// Every match: `(first word, last word, which term)`, in the text's order.
fn find(words: &[String], terms: &[Term]) -> Vec<(usize, usize, usize)> {
    let mut found = Vec::new();
    for (t, term) in terms.iter().enumerate() {
        match term {
            Term::Phrase(phrase) if !phrase.is_empty() && phrase.len() <= words.len() => {
                for i in 0..=words.len() - phrase.len() {
                    if phrase.iter().zip(&words[i..]).all(|(p, w)| p == w) {
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
    found.sort_unstable();
    found
}

/// The words `[start, end)` to show: the [`PASSAGE_WORDS`] that hold the most distinct
/// terms (then the most matches; then the earliest), with the matches in it centred.
fn window(len: usize, matches: &[(usize, usize, usize)]) -> (usize, usize) {
    let n = PASSAGE_WORDS.min(len);
    let mut best: Option<((usize, usize), usize, usize)> = None; // (score, from, to)
    for &(anchor, _, _) in matches.iter().take(ANCHORS) {
        let inside = matches
            .iter()
            .skip_while(|m| m.0 < anchor)
            .take_while(|m| m.1 < anchor + n);
        let mut terms = 0u64;
        let (mut count, mut last) = (0, anchor);
        for m in inside {
            terms |= 1u64 << (m.2 % 64);
            count += 1;
            last = m.1;
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
