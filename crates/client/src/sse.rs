//! A small incremental parser for `text/event-stream` bodies (the event streams here, and the
//! A2A backend's task streams in `switchboard-a2a`).
//!
//! Written by hand rather than taken from a crate because the subscription needs exact
//! control over what happens between bytes and events: which frames carry an `id:`, that
//! keep-alive comments never move the cursor, that control frames (`gap_detected`) are told
//! apart from events, and that the reconnect logic — not a library — owns `Last-Event-ID`
//! and de-duplication. The parser itself does no I/O: feed it chunks as they arrive, in any
//! split, and pop whole frames.
//!
//! It follows the WHATWG "event stream interpretation" rules: lines end in `\n`, `\r\n` or a
//! lone `\r`; a line starting with `:` is a comment; `field: value` loses one leading space of
//! the value; several `data:` lines join with `\n`; an empty line dispatches the frame; a frame
//! with no `data:` line is dropped. Unlike a browser's `EventSource`, a frame's `id` is the
//! `id:` line of that frame only (the cursor is kept by the caller, from the envelopes).

use std::collections::VecDeque;

/// Default cap on the size of one frame (its pending line plus its `data:` lines), in bytes
/// as they came over the wire: invalid UTF-8 decoded to U+FFFD does not count extra.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// One dispatched SSE frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseFrame {
    /// The frame's own `id:` line, if it had one.
    pub id: Option<String>,
    /// The `event:` line, if any (absent means `message`).
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// The stream broke the parser's limits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    #[error("SSE frame larger than {0} bytes")]
    FrameTooLarge(usize),
}

/// Incremental SSE parser; see the module docs.
#[derive(Debug)]
pub struct SseParser {
    /// Bytes of the line being read (no terminator yet).
    line: Vec<u8>,
    /// The previous chunk ended in `\r`: a `\n` at the start of the next one belongs to it.
    skip_lf: bool,
    /// Whether the first line was seen (a UTF-8 BOM is stripped from it only).
    started: bool,
    data: String,
    /// Wire bytes of the frame's `data:` lines so far (what the cap counts, with `line`).
    data_wire_bytes: usize,
    has_data: bool,
    event: Option<String>,
    id: Option<String>,
    frames: VecDeque<SseFrame>,
    max_frame_bytes: usize,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_FRAME_BYTES)
    }
}

impl SseParser {
    pub fn new(max_frame_bytes: usize) -> Self {
        Self {
            line: Vec::new(),
            skip_lf: false,
            started: false,
            data: String::new(),
            data_wire_bytes: 0,
            has_data: false,
            event: None,
            id: None,
            frames: VecDeque::new(),
            max_frame_bytes,
        }
    }

    /// Feeds the next chunk of the body. Whole frames become available from
    /// [`SseParser::next_frame`].
    pub fn feed(&mut self, mut rest: &[u8]) -> Result<(), SseError> {
        while let Some((&first, tail)) = rest.split_first() {
            if self.skip_lf {
                self.skip_lf = false;
                if first == b'\n' {
                    rest = tail;
                    continue;
                }
            }
            match rest.iter().position(|&b| b == b'\n' || b == b'\r') {
                Some(end) => {
                    let (line, after) = rest.split_at(end);
                    self.line.extend_from_slice(line);
                    if after.first() == Some(&b'\r') {
                        self.skip_lf = true;
                    }
                    rest = after.get(1..).unwrap_or_default();
                    self.check_size()?;
                    self.process_line();
                }
                None => {
                    self.line.extend_from_slice(rest);
                    rest = &[];
                    self.check_size()?;
                }
            }
        }
        Ok(())
    }

    /// The next whole frame, in arrival order.
    pub fn next_frame(&mut self) -> Option<SseFrame> {
        self.frames.pop_front()
    }

    fn check_size(&self) -> Result<(), SseError> {
        if self.line.len() + self.data_wire_bytes > self.max_frame_bytes {
            return Err(SseError::FrameTooLarge(self.max_frame_bytes));
        }
        Ok(())
    }

    fn process_line(&mut self) {
        let bytes = std::mem::take(&mut self.line);
        let mut line = String::from_utf8_lossy(&bytes).into_owned();
        if !self.started {
            self.started = true;
            if let Some(stripped) = line.strip_prefix('\u{feff}') {
                line = stripped.to_owned();
            }
        }
        if line.is_empty() {
            self.dispatch();
            return;
        }
        if line.starts_with(':') {
            return; // comment, e.g. the `: ping` keep-alive
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_str(), ""),
        };
        match field {
            "data" => {
                self.data_wire_bytes += bytes.len();
                self.data.push_str(value);
                self.data.push('\n');
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_owned()),
            "id" if !value.contains('\0') => self.id = Some(value.to_owned()),
            _ => {} // `retry` and unknown fields are ignored
        }
    }

    fn dispatch(&mut self) {
        let id = self.id.take();
        let event = self.event.take();
        if !self.has_data {
            return;
        }
        self.has_data = false;
        self.data_wire_bytes = 0;
        let mut data = std::mem::take(&mut self.data);
        if data.ends_with('\n') {
            data.pop();
        }
        self.frames.push_back(SseFrame { id, event, data });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn frame(id: Option<&str>, event: Option<&str>, data: &str) -> SseFrame {
        SseFrame {
            id: id.map(Into::into),
            event: event.map(Into::into),
            data: data.into(),
        }
    }

    fn parse_chunks(chunks: &[&[u8]]) -> Vec<SseFrame> {
        let mut parser = SseParser::default();
        let mut out = Vec::new();
        for chunk in chunks {
            parser.feed(chunk).unwrap();
            while let Some(f) = parser.next_frame() {
                out.push(f);
            }
        }
        out
    }

    const SAMPLE: &str = "id: 42\nevent: text_delta\ndata: {\"id\":42}\n\n\
                          : ping\n\n\
                          event: gap_detected\ndata: {\"requested_after_id\":1}\n\n\
                          id: 43\r\nevent: text_delta\r\ndata: line one\r\ndata: line two\r\n\r\n\
                          id: 44\rdata:no-space\r\r\
                          data\n\n";

    fn sample_frames() -> Vec<SseFrame> {
        vec![
            frame(Some("42"), Some("text_delta"), "{\"id\":42}"),
            frame(None, Some("gap_detected"), "{\"requested_after_id\":1}"),
            frame(Some("43"), Some("text_delta"), "line one\nline two"),
            frame(Some("44"), None, "no-space"),
            frame(None, None, ""),
        ]
    }

    #[test]
    fn parses_a_whole_body() {
        assert_eq!(parse_chunks(&[SAMPLE.as_bytes()]), sample_frames());
    }

    #[test]
    fn split_at_every_byte_position() {
        let bytes = SAMPLE.as_bytes();
        for i in 0..=bytes.len() {
            let (a, b) = bytes.split_at(i);
            assert_eq!(parse_chunks(&[a, b]), sample_frames(), "split at {i}");
        }
    }

    #[test]
    fn split_at_every_pair_of_positions() {
        let bytes = SAMPLE.as_bytes();
        for i in 0..=bytes.len() {
            for j in i..=bytes.len() {
                let chunks = [&bytes[..i], &bytes[i..j], &bytes[j..]];
                assert_eq!(
                    parse_chunks(&chunks),
                    sample_frames(),
                    "split at {i} and {j}"
                );
            }
        }
    }

    #[test]
    fn byte_by_byte() {
        let chunks: Vec<&[u8]> = SAMPLE.as_bytes().chunks(1).collect();
        assert_eq!(parse_chunks(&chunks), sample_frames());
    }

    #[test]
    fn multibyte_utf8_split_inside_a_character() {
        let body = "data: héllo ✓\n\n".as_bytes();
        for i in 0..=body.len() {
            let (a, b) = body.split_at(i);
            assert_eq!(
                parse_chunks(&[a, b]),
                vec![frame(None, None, "héllo ✓")],
                "split at {i}"
            );
        }
    }

    #[test]
    fn comments_and_frames_without_data_yield_nothing() {
        let frames = parse_chunks(&[b": ping\n\n: ping\r\n\r\nid: 7\nevent: x\n\n"]);
        assert!(frames.is_empty());
        // the id and event of a data-less frame do not leak into the next one
        let frames = parse_chunks(&[b"id: 7\nevent: x\n\ndata: y\n\n"]);
        assert_eq!(frames, vec![frame(None, None, "y")]);
    }

    #[test]
    fn unterminated_frame_is_not_dispatched() {
        assert!(parse_chunks(&[b"id: 1\ndata: {}\n"]).is_empty());
    }

    #[test]
    fn bom_is_stripped_at_start_only() {
        let frames = parse_chunks(&["\u{feff}data: a\n\n".as_bytes()]);
        assert_eq!(frames, vec![frame(None, None, "a")]);
    }

    #[test]
    fn id_with_nul_is_ignored_and_only_one_space_is_stripped() {
        let frames = parse_chunks(&[b"id: 1\0\ndata:  two spaces\n\n"]);
        assert_eq!(frames, vec![frame(None, None, " two spaces")]);
    }

    #[test]
    fn oversized_frame_is_an_error() {
        let mut parser = SseParser::new(16);
        assert!(parser.feed(b"data: 0123456789\n").is_ok());
        assert_eq!(
            parser.feed(b"data: 0123456789"),
            Err(SseError::FrameTooLarge(16))
        );
        let mut parser = SseParser::new(16);
        assert!(parser.feed(b"data: 0123456789abcdefgh").is_err());
    }

    #[test]
    fn the_cap_counts_wire_bytes_not_decoded_ones() {
        // 11 invalid bytes decode to 11 U+FFFD (33 bytes); the frame is 16 bytes on the wire
        let mut parser = SseParser::new(16);
        let body = b"data:\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\n";
        assert_eq!(body.len(), 17);
        assert!(parser.feed(body).is_ok());
        assert!(
            parser.feed(b"\n").is_ok(),
            "the blank line that ends the frame"
        );
        assert_eq!(
            parser.next_frame().map(|f| f.data.chars().count()),
            Some(11)
        );
    }
}
