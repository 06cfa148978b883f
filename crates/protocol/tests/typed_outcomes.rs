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
fn no_surface_branches_on_the_text_of_an_outcome() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    let mut files = Vec::new();
    for c in SURFACES {
        rust_files(&crates.join(c).join("src"), &mut files);
    }
    assert!(files.len() > 50, "the surfaces' sources were not found");
    // A run's end, a rejection and a failure are branched on by their typed fields
    // (`stop_reason`, `cause`, `code`), never by the words beside them.
    let patterns = [
        "stop_reason == \"",
        "stop_reason.as_str() == \"",
        "\" == stop_reason",
        "reason.contains(",
        "reason.starts_with(",
        "reason.ends_with(",
        "reason == \"",
        "error.contains(",
        "error.starts_with(",
        "error == \"",
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
        "branch on `stop_reason`, `cause` or `code`, not on words:\n{}",
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

#[test]
fn rejection_causes_and_error_codes_read_back_and_old_logs_read_as_their_defaults() {
    use switchboard_protocol::{AgentEvent, RejectionCause as C, RunErrorCode as E};
    for c in [
        C::User,
        C::Timeout,
        C::Cancelled,
        C::NewMessage,
        C::Restart,
        C::Policy,
        C::Budget,
    ] {
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(json, format!("\"{}\"", c.as_str()));
        assert_eq!(serde_json::from_str::<C>(&json).unwrap(), c);
    }
    for e in [
        E::ProviderUnreachable,
        E::ProviderRateLimited,
        E::ProviderRefused,
        E::ContextTooLong,
        E::ProviderFailed,
        E::AgentFailed,
        E::WorkspaceUnavailable,
        E::NotConfigured,
        E::StoreUnavailable,
        E::Interrupted,
        E::Other,
    ] {
        let json = serde_json::to_string(&e).unwrap();
        assert_eq!(json, format!("\"{}\"", e.as_str()));
        assert_eq!(serde_json::from_str::<E>(&json).unwrap(), e);
    }
    // Events written before the typed fields existed.
    let run = "00000000-0000-0000-0000-000000000001";
    let old: AgentEvent = serde_json::from_str(&format!(
        r#"{{"ToolRejected":{{"run_id":"{run}","tool_call_id":"c","reason":"rejected by the user"}}}}"#
    ))
    .unwrap();
    assert!(matches!(
        old,
        AgentEvent::ToolRejected { cause: C::User, .. }
    ));
    let old: AgentEvent = serde_json::from_str(&format!(
        r#"{{"RunError":{{"run_id":"{run}","error":"boom","retryable":false}}}}"#
    ))
    .unwrap();
    assert!(matches!(old, AgentEvent::RunError { code: E::Other, .. }));
    // And the typed fields are on the wire.
    let now = serde_json::to_value(AgentEvent::ToolRejected {
        run_id: uuid::Uuid::nil(),
        tool_call_id: "c".into(),
        reason: "no decision within 300 s".into(),
        cause: C::Timeout,
        decided_by: None,
    })
    .unwrap();
    assert_eq!(now["ToolRejected"]["cause"], "timeout");
}
