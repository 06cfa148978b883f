//! Property tests of the SSE reader: the bytes of a subscription are outside input, so any
//! bytes in any split must neither panic nor desynchronise the parser, well-formed frames
//! among garbage must still come out, and a frame whose `data:` is not an envelope must
//! become an error item.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;

use crate::error::ClientError;
use crate::sse::{SseError, SseFrame, SseParser};
use crate::stream::handle_frame;

/// Pieces of an event stream, valid and not: field names, line ends, comments, a BOM,
/// invalid and truncated UTF-8, NULs and random bytes.
fn token() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => prop::collection::vec(any::<u8>(), 0..12),
        2 => "[a-z {}\":,0-9]{0,12}".prop_map(String::into_bytes),
        3 => prop::sample::select(vec![
            "data:", "data: ", "data", "id:", "id: ", "event:", "event: ", "retry: 5",
            ":", ": ping", "\n", "\r", "\r\n", "\n\n", "\r\r", "\u{feff}", "{\"id\":1}",
            "gap_detected", "é✓", "\0",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
        1 => Just(vec![0xff, 0xfe, 0x80]),
        1 => Just(vec![0xe2, 0x9c]), // the first two bytes of ✓
    ]
}

fn garbage() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(token(), 0..40).prop_map(|v| v.concat())
}

/// `bytes` cut at `cuts` (each taken modulo `len + 1`).
fn split<'a>(bytes: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut at: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    at.sort_unstable();
    let mut out = Vec::new();
    let mut start = 0;
    for a in at {
        out.push(&bytes[start..a]);
        start = a;
    }
    out.push(&bytes[start..]);
    out
}

/// Feeds the chunks in order; the frames, or the first error.
fn parse_with(parser: &mut SseParser, chunks: &[&[u8]]) -> Result<Vec<SseFrame>, SseError> {
    let mut out = Vec::new();
    for chunk in chunks {
        parser.feed(chunk)?;
        while let Some(f) = parser.next_frame() {
            out.push(f);
        }
    }
    Ok(out)
}

fn parse(chunks: &[&[u8]]) -> Vec<SseFrame> {
    parse_with(&mut SseParser::default(), chunks).expect("within the default cap")
}

/// A field value as a line can carry it (no line end; `id` also no NUL).
fn value() -> impl Strategy<Value = String> {
    "[^\r\n\0]{0,12}"
}

fn frames() -> impl Strategy<Value = SseFrame> {
    (
        prop::option::of(value()),
        prop::option::of(value()),
        prop::collection::vec(value(), 1..4),
    )
        .prop_map(|(id, event, lines)| SseFrame {
            id,
            event,
            data: lines.join("\n"),
        })
}

/// `frame` as the server would write it, with `eol` after every line and a comment line.
fn serialize(frame: &SseFrame, eol: &str, comment: bool) -> Vec<u8> {
    let mut s = String::new();
    if comment {
        s.push_str(": keep-alive");
        s.push_str(eol);
    }
    if let Some(id) = &frame.id {
        s.push_str(&format!("id: {id}{eol}"));
    }
    if let Some(event) = &frame.event {
        s.push_str(&format!("event: {event}{eol}"));
    }
    for line in frame.data.split('\n') {
        s.push_str(&format!("data: {line}{eol}"));
    }
    s.push_str(eol);
    s.into_bytes()
}

fn envelope_json(id: u64) -> String {
    serde_json::json!({
        "id": id,
        "session_id": "00000000-0000-0000-0000-000000000000",
        "run_id": null,
        "timestamp": "2026-01-01T00:00:00Z",
        "event": {"RunStarted": {"run_id": "00000000-0000-0000-0000-000000000000"}},
    })
    .to_string()
}

fn eols() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["\n", "\r\n", "\r"])
}

fn cuts() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(any::<usize>(), 0..8)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any bytes: no panic, and the frames do not depend on how the body was cut (in
    /// random places, or byte by byte). Dispatched frames carry no line end in `id` or
    /// `event`, no NUL in `id`, no `\r` in `data`.
    #[test]
    fn any_bytes_in_any_split_give_the_same_frames(body in garbage(), cuts in cuts()) {
        let whole = parse(&[&body]);
        prop_assert_eq!(&parse(&split(&body, &cuts)), &whole);
        let bytes: Vec<&[u8]> = body.chunks(1).collect();
        prop_assert_eq!(&parse(&bytes), &whole);
        for f in &whole {
            let id = f.id.as_deref().unwrap_or_default();
            let event = f.event.as_deref().unwrap_or_default();
            prop_assert!(!id.contains(['\n', '\r', '\0']), "{:?}", f);
            prop_assert!(!event.contains(['\n', '\r']), "{:?}", f);
            prop_assert!(!f.data.contains('\r'), "{:?}", f);
        }
    }

    /// A well-formed frame between garbage (the garbage ended by a blank line) comes out
    /// exactly, between what the garbage alone gives, however the body is cut.
    #[test]
    fn a_frame_among_garbage_is_still_parsed(
        before in garbage(),
        frame in frames(),
        eol in eols(),
        comment in any::<bool>(),
        after in garbage(),
        cuts in cuts(),
    ) {
        let mut body = before.clone();
        body.extend_from_slice(b"\n\n");
        let head = parse(&[&body]);
        body.extend_from_slice(&serialize(&frame, eol, comment));
        body.extend_from_slice(&after);
        // what follows the frame starts from the state a blank line `eol` leaves
        let mut tail_body = eol.as_bytes().to_vec();
        tail_body.extend_from_slice(&after);
        let tail = parse(&[&tail_body]);

        let mut want = head;
        want.push(frame);
        want.extend(tail);
        prop_assert_eq!(parse(&split(&body, &cuts)), want);
    }

    /// With a small cap, any body either parses or fails with `FrameTooLarge(cap)`; no
    /// frame is larger than the cap, and a body no longer than the cap always parses (the
    /// cap counts wire bytes, so invalid UTF-8 decoded to U+FFFD does not count triple).
    #[test]
    fn the_frame_cap_is_an_error_not_a_panic(
        body in garbage(),
        cap in 1usize..64,
        cuts in cuts(),
    ) {
        match parse_with(&mut SseParser::new(cap), &split(&body, &cuts)) {
            Ok(frames) => {
                for f in frames {
                    // the cap counts wire bytes; each wire byte decodes to at most one char
                    prop_assert!(f.data.chars().count() <= cap, "{:?} over {}", f, cap);
                }
            }
            Err(e) => {
                prop_assert_eq!(e, SseError::FrameTooLarge(cap));
                prop_assert!(body.len() > cap, "{} bytes failed a cap of {}", body.len(), cap);
            }
        }
    }

    /// Any `data:` that is not an event envelope is an error item (and leaves the cursor),
    /// except blank data and `gap_detected` frames, which are skipped.
    #[test]
    fn malformed_data_is_an_error_item(
        data in prop_oneof![
            any::<String>(),
            "[\\[\\]{}\":,0-9a-z ]{0,40}",
            Just(String::new()),
            Just("  ".to_string()),
            (0u64..1000).prop_map(envelope_json),
        ],
        event in prop::option::of(prop::sample::select(vec![
            "run_started", "gap_detected", "message", "",
        ])),
        cursor in prop::option::of(0u64..1000),
    ) {
        let frame = SseFrame { id: None, event: event.map(str::to_string), data: data.clone() };
        let mut after = cursor;
        let item = handle_frame(frame, &mut after);
        let parsed = serde_json::from_str::<switchboard_protocol::EventEnvelope>(&data);
        if event == Some("gap_detected") || data.trim().is_empty() {
            prop_assert!(item.is_none());
            prop_assert_eq!(after, cursor);
        } else {
            match parsed {
                Err(_) => {
                    prop_assert!(matches!(item, Some(Err(ClientError::Decode(_)))), "{:?}", item);
                    prop_assert_eq!(after, cursor);
                }
                Ok(env) if cursor.is_some_and(|c| env.id <= c) => {
                    prop_assert!(item.is_none());
                    prop_assert_eq!(after, cursor);
                }
                Ok(env) => {
                    prop_assert!(matches!(&item, Some(Ok(e)) if e.id == env.id), "{:?}", item);
                    prop_assert_eq!(after, Some(env.id));
                }
            }
        }
    }

    /// An envelope cut short anywhere is malformed JSON: an error item, never a panic.
    #[test]
    fn a_truncated_envelope_is_an_error_item(id in any::<u64>(), cut in any::<usize>()) {
        let json = envelope_json(id);
        let mut end = cut % json.len();
        while !json.is_char_boundary(end) {
            end -= 1;
        }
        let frame = SseFrame { id: None, event: None, data: json[..end].to_string() };
        let mut cursor = None;
        let item = handle_frame(frame, &mut cursor);
        if json[..end].trim().is_empty() {
            prop_assert!(item.is_none());
        } else {
            prop_assert!(matches!(item, Some(Err(ClientError::Decode(_)))), "{:?}", item);
        }
        prop_assert_eq!(cursor, None);
    }

    /// Bytes to items, as the subscription does it: an envelope among garbage is yielded
    /// (the garbage gives only decode errors), in any split.
    #[test]
    fn an_envelope_among_garbage_is_yielded(
        before in garbage(),
        id in any::<u64>(),
        after in garbage(),
        cuts in cuts(),
    ) {
        let mut body = before;
        body.extend_from_slice(b"\n\n");
        body.extend_from_slice(format!("id: {id}\nevent: run_started\ndata: {}\n\n", envelope_json(id)).as_bytes());
        body.extend_from_slice(&after);
        let mut cursor = None;
        let mut yielded = Vec::new();
        for frame in parse(&split(&body, &cuts)) {
            match handle_frame(frame, &mut cursor) {
                None => {}
                Some(Ok(e)) => yielded.push(e.id),
                Some(Err(e)) => prop_assert!(matches!(e, ClientError::Decode(_)), "{:?}", e),
            }
        }
        prop_assert_eq!(yielded, vec![id]);
        prop_assert_eq!(cursor, Some(id));
    }
}
