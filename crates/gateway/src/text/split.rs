//! Cutting a reply at a platform's limit without breaking code fences: [`split_message`],
//! [`paginate`], and the fence bookkeeping they share.

use super::*;

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
pub(super) fn absorb_whitespace(chars: &[char], end: usize, in_fence: bool) -> usize {
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

/// The text's chars, with fence lines longer than `max` chars cut to their backticks.
pub(super) fn shorten_fence_lines(text: &str, max: usize) -> Vec<char> {
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
pub(super) fn is_blank(s: &str) -> bool {
    s.chars().all(char::is_whitespace)
}

/// The line without up to three spaces of indentation, if it is a fence line.
pub(super) fn fence_body(line: &str) -> Option<&str> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    let rest = &line[indent.min(3)..];
    (indent <= 3 && rest.starts_with("```")).then_some(rest)
}

/// The fence line's backticks, e.g. "```" for "```rust".
pub(super) fn fence_ticks(opener: &str) -> &str {
    let body = fence_body(opener).unwrap_or(opener);
    let n = body.len() - body.trim_start_matches('`').len();
    &body[..n.max(3).min(body.len())]
}

/// Updates the fence state with one line (which may end in '\n').
pub(super) fn toggle_fence(state: &mut Option<String>, line: &str) {
    if let Some(body) = fence_body(line) {
        *state = match state {
            Some(_) => None,
            None => Some(body.trim_end().to_string()),
        };
    }
}

/// The fence open at the end of `text` (its opening line), starting from `initial`.
pub(super) fn fence_state(text: &str, initial: Option<String>) -> Option<String> {
    let mut state = initial;
    for line in text.split('\n') {
        toggle_fence(&mut state, line);
    }
    state
}

/// The line reopening a fence at the start of a chunk, '\n' included: the opener itself when
/// it is short, else just its backticks, else "```".
pub(super) fn reopen_prefix(opener: &str, limit: usize) -> String {
    let ticks = fence_ticks(opener);
    [opener, ticks, "```"]
        .into_iter()
        .map(|o| format!("{o}\n"))
        .find(|p| p.chars().count() <= limit / 2)
        .unwrap_or_else(|| "```\n".to_string())
}

/// The closing fence line appended to a chunk, '\n' before it included.
pub(super) fn close_fence(opener: &str, limit: usize) -> String {
    let close = format!("\n{}", fence_ticks(opener));
    if close.chars().count() <= limit / 4 {
        close
    } else {
        "\n```".to_string()
    }
}

/// Whether a fence line starts at char index `i` (which must be a line start).
pub(super) fn fence_line_at(chars: &[char], i: usize) -> bool {
    let mut j = i;
    while j < chars.len() && j - i < 3 && chars[j] == ' ' {
        j += 1;
    }
    chars.len() >= j + 3 && chars[j..j + 3] == ['`', '`', '`']
}

/// Skips lines that hold only whitespace; the indentation of the next line stays.
pub(super) fn skip_blank_lines(chars: &[char], mut pos: usize) -> usize {
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
pub(super) fn trimmed_end(chars: &[char], start: usize, mut end: usize) -> usize {
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
pub(super) fn choose_cut(
    chars: &[char],
    pos: usize,
    budget: usize,
    in_fence: bool,
) -> (usize, usize) {
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
