//! Surfaces branch on the typed outcome of a run, never on its text: a comparison of a
//! `RunCompleted`'s stop reason against words in a surface's sources fails here.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

use std::path::{Path, PathBuf};

/// The crates that follow runs to do their job (the backends, which produce the words,
/// are not among them).
const SURFACES: &[&str] = &[
    "gateway",
    "scheduler",
    "hub",
    "relay",
    "cli",
    "server",
    "client",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_surface_compares_a_stop_reason_with_text() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    let mut files = Vec::new();
    for c in SURFACES {
        rust_files(&crates.join(c).join("src"), &mut files);
    }
    assert!(files.len() > 50, "the surfaces' sources were not found");
    let patterns = [
        "stop_reason == \"",
        "stop_reason.as_str() == \"",
        "\" == stop_reason",
    ];
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for (i, line) in text.lines().enumerate() {
            let l = line.trim_start();
            if !l.starts_with("//") && patterns.iter().any(|p| l.contains(p)) {
                found.push(format!("{}:{}: {l}", f.display(), i + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "compare `StopReason` values, not words:\n{}",
        found.join("\n")
    );
}

#[test]
fn every_stop_reason_reads_back_and_old_logs_read_as_an_outcome() {
    use switchboard_protocol::StopReason;
    for r in [
        StopReason::Completed,
        StopReason::Cancelled,
        StopReason::MaxTurns,
        StopReason::Error,
        StopReason::Refused,
    ] {
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(json, format!("\"{}\"", r.as_str()));
        assert_eq!(serde_json::from_str::<StopReason>(&json).unwrap(), r);
    }
    // What logs written before the typed outcome hold: the backends' own words.
    for (old, now) in [
        ("end_turn", StopReason::Completed),
        ("stop", StopReason::Completed),
        ("tool_calls", StopReason::Completed),
        ("max_tokens", StopReason::Completed),
        ("cancelled", StopReason::Cancelled),
        ("max_turns", StopReason::MaxTurns),
        ("max_turn_requests", StopReason::MaxTurns),
        ("refusal", StopReason::Refused),
    ] {
        assert_eq!(
            serde_json::from_str::<StopReason>(&format!("\"{old}\"")).unwrap(),
            now,
            "{old}"
        );
    }
}
