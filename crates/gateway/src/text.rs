//! Reply text for chats: buffering an agent's streamed text into readable flushes
//! ([`StreamBuffer`]), splitting a long reply into message-sized chunks without breaking code
//! fences ([`split_message`]), and cutting text short ([`truncate`]).
//!
//! Everything counts characters (`char`s), not bytes: chat platforms limit messages in
//! characters (Telegram 4096, Discord 2000).
//!
//! A *fence line* is a line that starts with three backticks, after at most three spaces of
//! indentation (as in CommonMark). Fence lines are counted, not parsed: each one toggles
//! between "outside" and "inside a code block".

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// [`StreamBuffer`]: buffered text this long (in chars) is flushed at a line end.
pub const DEFAULT_LONG_CHARS: usize = 500;
/// [`StreamBuffer`]: text buffered this long is flushed at a line end.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(3);
/// [`StreamBuffer`]: past this many chars, text is flushed even inside an open code fence.
pub const DEFAULT_HARD_CAP: usize = 3500;

/// Below this limit [`split_message`] cuts without closing and reopening code fences: the
/// fence lines it would add would not leave room for the text.
pub const MIN_FENCE_REPAIR_LIMIT: usize = 16;

/// Buffers an agent's text deltas and decides when a piece is worth sending to a chat.
///
/// [`take_ready`](Self::take_ready) gives text to send when:
/// - a paragraph break (`\n\n`, or a line of only whitespace) arrived: everything up to and
///   including the last one;
/// - the buffer is long (≥ `long_chars`) or its oldest unflushed text arrived `max_wait` ago:
///   everything up to and including the last line end;
///
/// but never text that is only whitespace, and never text that ends inside an open ```` ``` ````
/// code fence. The one exception is the hard cap: when more than `hard_cap` chars would stay
/// buffered, everything up to the last line end is flushed anyway (up to the last whitespace,
/// or everything, when the buffer holds no line end at all). A flush that cuts through a code
/// fence gets a closing fence line appended, and the buffer remembers the fence's opening
/// line (with its info string, e.g. ```` ```rust ````): the next flush starts by reopening
/// it, so a later chunk continues the fence and every flushed chunk is balanced.
///
/// Flushed text is returned exactly as it arrived (plus those fence lines); callers trim it
/// and split it with [`split_message`] to fit a platform's limit.
#[derive(Debug, Clone)]
pub struct StreamBuffer {
    buf: String,
    /// Byte offset in `buf` where each push's text ends, with when it arrived. The front
    /// entry's time is when the oldest unflushed text arrived.
    arrivals: VecDeque<(usize, Instant)>,
    /// Opening line of a code fence that a hard-cap flush cut through: `buf` continues inside
    /// that fence.
    carried_fence: Option<String>,
    long_chars: usize,
    max_wait: Duration,
    hard_cap: usize,
}

impl Default for StreamBuffer {
    fn default() -> Self {
        Self::new()
    }
}

impl StreamBuffer {
    /// A buffer with the default limits ([`DEFAULT_LONG_CHARS`], [`DEFAULT_MAX_WAIT`],
    /// [`DEFAULT_HARD_CAP`]).
    pub fn new() -> Self {
        Self::with_limits(DEFAULT_LONG_CHARS, DEFAULT_MAX_WAIT, DEFAULT_HARD_CAP)
    }

    /// A buffer with its own limits (chars, time, chars).
    pub fn with_limits(long_chars: usize, max_wait: Duration, hard_cap: usize) -> Self {
        Self {
            buf: String::new(),
            arrivals: VecDeque::new(),
            carried_fence: None,
            long_chars,
            max_wait,
            hard_cap,
        }
    }

    /// Appends a text delta that arrived at `now`.
    pub fn push(&mut self, delta: &str, now: Instant) {
        if delta.is_empty() {
            return;
        }
        self.buf.push_str(delta);
        let end = self.buf.len();
        match self.arrivals.back_mut() {
            Some((last_end, at)) if *at == now => *last_end = end,
            _ => self.arrivals.push_back((end, now)),
        }
    }

    /// The text to flush now, if the rules say so (removed from the buffer).
    pub fn take_ready(&mut self, now: Instant) -> Option<String> {
        if is_blank(&self.buf) {
            return None;
        }
        let total_chars = self.buf.chars().count();
        let timed = self
            .arrivals
            .front()
            .is_some_and(|&(_, at)| now.saturating_duration_since(at) >= self.max_wait);
        let long = total_chars >= self.long_chars || total_chars > self.hard_cap;

        // Line ends outside any fence: (byte offset after the '\n', is a paragraph break).
        let mut last_para = None;
        let mut last_line = None;
        let mut last_any_line = None;
        let mut fence = self.carried_fence.clone();
        let mut offset = 0;
        let mut seen_text = false;
        for segment in self.buf.split_inclusive('\n') {
            let start = offset;
            offset += segment.len();
            seen_text |= !is_blank(segment);
            if !segment.ends_with('\n') {
                break;
            }
            toggle_fence(&mut fence, segment);
            if !seen_text {
                continue;
            }
            last_any_line = Some(offset);
            if fence.is_none() {
                last_line = Some(offset);
                if start > 0 && is_blank(segment) {
                    last_para = Some(offset);
                }
            }
        }

        let mut cut = if long || timed { last_line } else { last_para };
        let flushed_chars = cut.map_or(0, |c| self.buf[..c].chars().count());
        if total_chars - flushed_chars > self.hard_cap {
            cut = match last_any_line.filter(|&l| l > cut.unwrap_or(0)) {
                Some(line) => Some(line),
                // No line end to cut at: the last whitespace, else everything.
                None => Some(
                    self.buf
                        .char_indices()
                        .rev()
                        .find(|(_, c)| c.is_whitespace())
                        .map(|(i, c)| i + c.len_utf8())
                        .filter(|&end| !is_blank(&self.buf[..end]))
                        .unwrap_or(self.buf.len()),
                ),
            };
        }
        let cut = cut?;
        Some(self.flush(cut))
    }

    /// Everything left (at the end of a run); `None` if only whitespace is left.
    pub fn take_rest(&mut self) -> Option<String> {
        let text = std::mem::take(&mut self.buf);
        self.arrivals.clear();
        let carried = self.carried_fence.take();
        if is_blank(&text) {
            return None;
        }
        Some(match carried {
            Some(opener) => format!("{opener}\n{text}"),
            None => text,
        })
    }

    /// What is buffered, as [`take_rest`](Self::take_rest) would return it, without taking
    /// it (to store it, so a restart can push it again).
    pub fn pending(&self) -> String {
        match &self.carried_fence {
            Some(opener) if !is_blank(&self.buf) => format!("{opener}\n{}", self.buf),
            _ => self.buf.clone(),
        }
    }

    /// True when nothing but whitespace is buffered (so [`take_rest`](Self::take_rest) would
    /// give `None`).
    pub fn is_empty(&self) -> bool {
        is_blank(&self.buf)
    }

    /// Removes `buf[..cut]` and returns it as a flush: reopening a carried fence, closing a
    /// fence it ends inside.
    fn flush(&mut self, cut: usize) -> String {
        let prefix: String = self.buf.drain(..cut).collect();
        while self.arrivals.front().is_some_and(|&(end, _)| end <= cut) {
            self.arrivals.pop_front();
        }
        for (end, _) in &mut self.arrivals {
            *end -= cut;
        }
        let opener = self.carried_fence.take();
        let state = fence_state(&prefix, opener.clone());
        let mut out = String::with_capacity(prefix.len() + 16);
        if let Some(opener) = opener {
            out.push_str(&opener);
            out.push('\n');
        }
        out.push_str(&prefix);
        if let Some(open) = &state {
            if !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(fence_ticks(open));
            out.push('\n');
        }
        self.carried_fence = state;
        out
    }
}

/// Splits a final reply into chunks of at most `limit` characters.
///
/// Cuts prefer a paragraph break, then a line break, then a space, in the latter half of the
/// room a chunk has; then any of those earlier in it; then a hard cut. A chunk that would end
/// inside an open ```` ``` ```` fence is closed there (`"\n```"`) and the fence is reopened, with
/// the same info string (e.g. ```` ```rust ````), at the start of the next chunk; those added
/// characters count within `limit`. Whitespace at the cut points is dropped (but not the
/// indentation of a line inside a fence), chunks have no trailing whitespace, and no chunk is
/// empty or only whitespace. Cuts outside fences are preferred, and a fence line is never
/// cut (a fence line longer than half the limit is shortened to its backticks, losing its info
/// string and indentation, so that it fits). Below
/// [`MIN_FENCE_REPAIR_LIMIT`] chars fences are not repaired; a `limit` of 0 counts as 1.
pub fn split_message(text: &str, limit: usize) -> Vec<String> {
    let limit = limit.max(1);
    let repair = limit >= MIN_FENCE_REPAIR_LIMIT;
    let chars: Vec<char> = if repair {
        shorten_fence_lines(text, limit / 2)
    } else {
        text.chars().collect()
    };
    let mut out = Vec::new();
    let mut pos = 0;
    let mut open: Option<String> = None;
    loop {
        pos = skip_blank_lines(&chars, pos);
        if pos >= chars.len() {
            break;
        }
        let prefix = match &open {
            Some(opener) if repair => reopen_prefix(opener, limit),
            _ => String::new(),
        };
        let prefix_len = prefix.chars().count();
        let rest_end = trimmed_end(&chars, pos, chars.len());
        if prefix_len + (rest_end - pos) <= limit {
            let mut chunk = prefix;
            chunk.extend(&chars[pos..rest_end]);
            out.push(chunk);
            break;
        }
        let mut budget = limit.saturating_sub(prefix_len).max(1);
        let (body_end, next, state) = loop {
            let (end, next) = choose_cut(&chars, pos, budget, open.is_some() && repair);
            let body_end = trimmed_end(&chars, pos, end);
            let state = if repair {
                let body: String = chars[pos..body_end].iter().collect();
                fence_state(&body, open.clone())
            } else {
                None
            };
            let close_len = state
                .as_deref()
                .map_or(0, |o| close_fence(o, limit).chars().count());
            let need = prefix_len + (body_end - pos) + close_len;
            if need <= limit || budget <= 1 {
                break (body_end, next, state);
            }
            budget = budget.saturating_sub(need - limit).max(1);
        };
        if body_end > pos {
            let mut chunk = prefix;
            chunk.extend(&chars[pos..body_end]);
            if let Some(opener) = &state {
                chunk.push_str(&close_fence(opener, limit));
            }
            out.push(chunk);
            open = state;
        }
        pos = next;
    }
    out
}

/// One message of a reply split at a platform's limit (see [`paginate`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The opening line of a code block that the page before left open (`"```rust\n"`), or
    /// empty.
    pub reopen: String,
    /// This page's slice of the reply, exactly as the reply has it.
    pub body: String,
    /// A line closing a code block the body leaves open (`"\n```"`), or empty.
    pub close: String,
}

impl Page {
    /// What to post: `reopen`, `body` and `close`, without the body's trailing whitespace
    /// (every platform drops it, some refuse a message that is only that, and before `close`
    /// it would push the closing fence down).
    pub fn text(&self) -> String {
        let body = self.body.trim_end();
        let mut s = String::with_capacity(self.reopen.len() + body.len() + self.close.len());
        s.push_str(&self.reopen);
        s.push_str(body);
        s.push_str(&self.close);
        s
    }
}

/// Splits a reply into the messages that show it on a platform whose messages hold at most
/// `limit` characters: a pure function of the whole text, recomputed as the text grows, so
/// that messages already posted are edited to their final form rather than patched.
///
/// - The bodies, concatenated, are the text: nothing is dropped or glued at a seam; the
///   whitespace where a page ends stays at the end of that page's body.
/// - Each page's [`Page::text`] has at most `limit` characters.
/// - Cuts prefer a paragraph break, then a line break, then a space, in the latter half of
///   the room a page has, outside code fences; then the same inside a fence; then earlier
///   ones; then a hard cut. Blank lines after a cut stay with the page before, so no page
///   starts with one; no page is only whitespace (a text that is has no pages).
/// - A page that ends inside an open ```` ``` ```` fence is closed (`close`) and the next
///   page reopens it with the same opening line, info string included (`reopen`) — nothing
///   else is added. The last page is closed too while its fence is open (a reply still
///   streaming), which a later call, with more text, replaces.
/// - Below [`MIN_FENCE_REPAIR_LIMIT`] fences are not repaired; a `limit` of 0 counts as 1.
/// - The one way past the limit: whitespace at a page's start (a code line's indentation)
///   wider than the room the fence lines leave. A page must show a character, so that page
///   holds the whitespace and one character — only with limits far below any platform's.
pub fn paginate(text: &str, limit: usize) -> Vec<Page> {
    let limit = limit.max(1);
    let repair = limit >= MIN_FENCE_REPAIR_LIMIT;
    let chars: Vec<char> = text.chars().collect();
    let len = chars.len();
    let mut pages = Vec::new();
    let mut pos = 0;
    // Where the text ends, trailing whitespace aside: the rest cannot fit while it is longer.
    let text_end = trimmed_end(&chars, 0, len);
    // The fence open at `pos` (its opening line).
    let mut open: Option<String> = None;
    while pos < len && !chars[pos..].iter().all(|c| c.is_whitespace()) {
        let reopen = match &open {
            Some(opener) if repair => reopen_prefix(opener, limit),
            _ => String::new(),
        };
        let page_for = |end: usize| -> (Page, Option<String>) {
            let body: String = chars[pos..end].iter().collect();
            let state = if repair {
                fence_state(&body, open.clone())
            } else {
                None
            };
            let close = state
                .as_deref()
                .map(|opener| close_fence(opener, limit))
                .unwrap_or_default();
            let page = Page {
                reopen: reopen.clone(),
                body,
                close,
            };
            (page, state)
        };
        if text_end - pos <= limit {
            let (whole, _) = page_for(len);
            if whole.text().chars().count() <= limit {
                pages.push(whole);
                break;
            }
        }
        let mut budget = limit.saturating_sub(reopen.chars().count()).max(1);
        let (page, state, next) = loop {
            let (end, cut_next) = choose_cut(&chars, pos, budget, open.is_some() && repair);
            let next = if cut_next > end {
                let before: String = chars[pos..end].iter().collect();
                let in_fence = repair && fence_state(&before, open.clone()).is_some();
                absorb_whitespace(&chars, end, in_fence)
            } else if chars[pos..cut_next].iter().all(|c| c.is_whitespace()) {
                // A hard cut inside indentation wider than the room: take the first
                // character after it too, so that no page is only whitespace.
                (cut_next..len)
                    .find(|&i| !chars[i].is_whitespace())
                    .map_or(len, |i| i + 1)
            } else {
                cut_next
            };
            let (page, state) = page_for(next);
            let need = page.text().chars().count();
            if need <= limit || budget <= 1 {
                break (page, state, next);
            }
            budget = budget.saturating_sub(need - limit).max(1);
        };
        pages.push(page);
        open = state;
        pos = next;
    }
    pages
}

/// Where the page after a cut at the whitespace `chars[end]` starts: after the whole run of
/// whitespace there (so it starts with text), but inside a code fence only after the run's
/// last line break (the next line's indentation is code). A run that reaches the end of the
/// text is taken whole.
fn absorb_whitespace(chars: &[char], end: usize, in_fence: bool) -> usize {
    let mut j = end;
    let mut last_newline = None;
    while j < chars.len() && chars[j].is_whitespace() {
        if chars[j] == '\n' {
            last_newline = Some(j);
        }
        j += 1;
    }
    if j >= chars.len() || !in_fence {
        return j;
    }
    match last_newline {
        Some(n) => n + 1,
        None => j,
    }
}

/// The part of a reply still being written that is worth showing: everything up to its last
/// whitespace, so a word is never shown cut (nothing while the reply is one unfinished word).
pub fn showable(text: &str) -> &str {
    match text.char_indices().rev().find(|(_, c)| c.is_whitespace()) {
        Some((i, c)) => &text[..i + c.len_utf8()],
        None => "",
    }
}

/// Cuts `text` to at most `max` chars, ending with "…" when it was cut.
pub fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    if max == 0 {
        return String::new();
    }
    let kept: String = text.chars().take(max - 1).collect();
    let mut out = kept.trim_end().to_string();
    out.push('…');
    out
}

/// The text's chars, with fence lines longer than `max` chars cut to their backticks.
fn shorten_fence_lines(text: &str, max: usize) -> Vec<char> {
    let mut out = Vec::with_capacity(text.len());
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        match fence_body(line) {
            Some(body) if line.chars().count() > max && fence_ticks(body).len() <= max => {
                out.extend(fence_ticks(body).chars());
            }
            _ => out.extend(line.chars()),
        }
    }
    out
}

/// True for an empty or whitespace-only string.
fn is_blank(s: &str) -> bool {
    s.chars().all(char::is_whitespace)
}

/// The line without up to three spaces of indentation, if it is a fence line.
fn fence_body(line: &str) -> Option<&str> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    let rest = &line[indent.min(3)..];
    (indent <= 3 && rest.starts_with("```")).then_some(rest)
}

/// The fence line's backticks, e.g. "```" for "```rust".
fn fence_ticks(opener: &str) -> &str {
    let body = fence_body(opener).unwrap_or(opener);
    let n = body.len() - body.trim_start_matches('`').len();
    &body[..n.max(3).min(body.len())]
}

/// Updates the fence state with one line (which may end in '\n').
fn toggle_fence(state: &mut Option<String>, line: &str) {
    if let Some(body) = fence_body(line) {
        *state = match state {
            Some(_) => None,
            None => Some(body.trim_end().to_string()),
        };
    }
}

/// The fence open at the end of `text` (its opening line), starting from `initial`.
fn fence_state(text: &str, initial: Option<String>) -> Option<String> {
    let mut state = initial;
    for line in text.split('\n') {
        toggle_fence(&mut state, line);
    }
    state
}

/// The line reopening a fence at the start of a chunk, '\n' included: the opener itself when
/// it is short, else just its backticks, else "```".
fn reopen_prefix(opener: &str, limit: usize) -> String {
    let ticks = fence_ticks(opener);
    [opener, ticks, "```"]
        .into_iter()
        .map(|o| format!("{o}\n"))
        .find(|p| p.chars().count() <= limit / 2)
        .unwrap_or_else(|| "```\n".to_string())
}

/// The closing fence line appended to a chunk, '\n' before it included.
fn close_fence(opener: &str, limit: usize) -> String {
    let close = format!("\n{}", fence_ticks(opener));
    if close.chars().count() <= limit / 4 {
        close
    } else {
        "\n```".to_string()
    }
}

/// Whether a fence line starts at char index `i` (which must be a line start).
fn fence_line_at(chars: &[char], i: usize) -> bool {
    let mut j = i;
    while j < chars.len() && j - i < 3 && chars[j] == ' ' {
        j += 1;
    }
    chars.len() >= j + 3 && chars[j..j + 3] == ['`', '`', '`']
}

/// Skips lines that hold only whitespace; the indentation of the next line stays.
fn skip_blank_lines(chars: &[char], mut pos: usize) -> usize {
    loop {
        let mut j = pos;
        while j < chars.len() && chars[j] != '\n' && chars[j].is_whitespace() {
            j += 1;
        }
        if j >= chars.len() {
            return chars.len();
        }
        if chars[j] == '\n' {
            pos = j + 1;
        } else {
            return pos;
        }
    }
}

/// `end` moved back over trailing whitespace (not before `start`).
fn trimmed_end(chars: &[char], start: usize, mut end: usize) -> usize {
    while end > start && chars[end - 1].is_whitespace() {
        end -= 1;
    }
    end
}

/// Where to end the chunk starting at `pos` with room for `budget` chars: (end of its text,
/// where the next chunk starts). `in_fence` tells whether `pos` is inside a code fence.
///
/// Preference: a paragraph break, line break or space in the latter half of the room that is
/// outside any fence; then one inside a fence; then one earlier; then a hard cut.
fn choose_cut(chars: &[char], pos: usize, budget: usize, in_fence: bool) -> (usize, usize) {
    let len = chars.len();
    let window_end = pos.saturating_add(budget).min(len);
    let half = pos.saturating_add(budget / 2);
    let first_text = (pos..len)
        .find(|&i| !chars[i].is_whitespace())
        .unwrap_or(len);
    // Last candidates: [para, line, space], anywhere and outside fences.
    let mut any = [None; 3];
    let mut outside = [None; 3];
    let mut inside = in_fence;
    let mut in_fence_line = (pos == 0 || chars[pos - 1] == '\n') && fence_line_at(chars, pos);
    for i in pos..(window_end + 1).min(len) {
        let c = chars[i];
        if c == '\n' {
            if in_fence_line {
                inside = !inside;
            }
            if i > first_text {
                let mut j = i + 1;
                while j < len && chars[j] != '\n' && chars[j].is_whitespace() {
                    j += 1;
                }
                let kind = if j < len && chars[j] == '\n' { 0 } else { 1 };
                any[kind] = Some(i);
                any[1] = Some(i);
                if !inside {
                    outside[kind] = Some(i);
                    outside[1] = Some(i);
                }
            }
            in_fence_line = fence_line_at(chars, i + 1);
        } else if c.is_whitespace() && i > first_text && !in_fence_line {
            any[2] = Some(i);
            if !inside {
                outside[2] = Some(i);
            }
        }
    }
    let late = |c: &[Option<usize>; 3]| c.iter().flatten().copied().find(|&end| end >= half);
    let early = any.iter().flatten().copied().next();
    match late(&outside).or_else(|| late(&any)).or(early) {
        Some(end) => (end, end + 1),
        // A hard cut. It lands inside a fence line only when that line alone is longer than
        // the room.
        None => (window_end, window_end),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

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
                    let info =
                        ["", "rust", "python", "sh", "a-very-long-info-string"][rng.below(5)];
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
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod paginate_tests {
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
    }
}
