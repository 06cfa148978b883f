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

use std::time::Duration;

mod split;
mod stream;

use split::*;
pub use split::{Page, paginate, split_message};
pub use stream::StreamBuffer;

/// [`StreamBuffer`]: buffered text this long (in chars) is flushed at a line end.
pub const DEFAULT_LONG_CHARS: usize = 500;
/// [`StreamBuffer`]: text buffered this long is flushed at a line end.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(3);
/// [`StreamBuffer`]: past this many chars, text is flushed even inside an open code fence.
pub const DEFAULT_HARD_CAP: usize = 3500;

/// Below this limit [`split_message`] cuts without closing and reopening code fences: the
/// fence lines it would add would not leave room for the text.
pub const MIN_FENCE_REPAIR_LIMIT: usize = 16;

/// The part of a reply still being written that is worth showing: everything up to its last
/// whitespace, so a word is never shown cut (nothing while the reply is one unfinished word);
/// inside an open code fence, everything up to its last line break, so a line of code is
/// never shown cut either.
pub fn showable(text: &str) -> &str {
    let cut = match text.char_indices().rev().find(|(_, c)| c.is_whitespace()) {
        Some((i, c)) => &text[..i + c.len_utf8()],
        None => return "",
    };
    if cut.ends_with('\n') {
        return cut;
    }
    let line_start = cut.rfind('\n').map_or(0, |i| i + 1);
    if split::fence_state(&cut[..line_start], None).is_some() {
        &cut[..line_start]
    } else {
        cut
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod paginate_tests;
