//! [`StreamBuffer`]: an agent's streamed text in readable flushes.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::*;

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
    /// Whether a paragraph break flushes (not for [`StreamBuffer::whole`]).
    paragraphs: bool,
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

    /// A buffer that flushes only what exceeds `hard_cap` (a reply sent whole, at the end,
    /// in pieces of at most about `hard_cap`).
    pub fn whole(hard_cap: usize) -> Self {
        Self {
            paragraphs: false,
            ..Self::with_limits(usize::MAX, Duration::MAX, hard_cap)
        }
    }

    /// A buffer with its own limits (chars, time, chars).
    pub fn with_limits(long_chars: usize, max_wait: Duration, hard_cap: usize) -> Self {
        Self {
            buf: String::new(),
            arrivals: VecDeque::new(),
            carried_fence: None,
            long_chars,
            paragraphs: true,
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

        let mut cut = if long || timed {
            last_line
        } else if self.paragraphs {
            last_para
        } else {
            None
        };
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
