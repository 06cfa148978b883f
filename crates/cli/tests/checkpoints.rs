#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! Workspace checkpoints end to end: the real server checkpoints around a built-in run that
//! changes files through a real shell; the API, the CLI and the event say what changed, and
//! restore (and undo) put the bytes and modes back.

mod common;

use common::api::cli;

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use common::*;
use switchboard_protocol::{
    AgentEvent, CheckpointKind, CreateSessionRequest, DiffQuery, PermissionMode,
};
use switchboard_test_support::mock_llm::{MockLlm, MockReply};
use uuid::Uuid;

fn read_all(ws: &Path) -> Vec<(String, String, u32)> {
    let mut out: Vec<_> = std::fs::read_dir(ws)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            let m = std::fs::metadata(&p).unwrap();
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read_to_string(&p).unwrap_or_default(),
                m.permissions().mode() & 0o777,
            )
        })
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_s_changes_are_shown_and_undone_and_the_undo_redone() {
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path();
    std::fs::write(w.join("edit.txt"), "one\n").unwrap();
    std::fs::write(w.join("gone.txt"), "bye\n").unwrap();
    std::fs::write(w.join("tool.sh"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(w.join("tool.sh"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let server = start(
        dir.path(),
        &llm.base_url(),
        &[("SWITCHBOARD_CHECKPOINTS", "true")],
    )
    .await;
    let c = client(&server);
    let session = c
        .create_session(&CreateSessionRequest {
            cwd: Some(w.to_string_lossy().into_owned()),
            permission_mode: Some(PermissionMode::FullAccess),
            ..CreateSessionRequest::default()
        })
        .await
        .unwrap()
        .id;
    let before = read_all(w);

    llm.push(MockReply::tool_call(
        "call_1",
        "run_command",
        serde_json::json!({"command":
            "printf 'fresh\\n' > new.txt && rm gone.txt && printf 'two\\n' >> edit.txt && chmod 755 tool.sh"}),
    ));
    llm.push(MockReply::text(&["done"]));
    let (mut events, run) = send(&c, session, "change things").await;
    let evs = until_run_ends(&mut events, run).await;
    let kinds = kinds(&evs);
    assert_eq!(kinds[kinds.len() - 2], "workspace_changed", "{kinds:?}");
    let Some(AgentEvent::WorkspaceChanged {
        checkpoint,
        files,
        insertions,
        deletions,
        ..
    }) = evs
        .iter()
        .map(|e| e.event.clone())
        .find(|e| matches!(e, AgentEvent::WorkspaceChanged { .. }))
    else {
        unreachable!()
    };
    assert_eq!((files, insertions, deletions), (4, 2, 1));
    let after = read_all(w);

    // The API: the list, the diff of the run, its stat.
    let list = c.checkpoints(session).await.unwrap().checkpoints;
    assert_eq!(
        list.iter().map(|c| c.kind).collect::<Vec<_>>(),
        [CheckpointKind::BeforeRun, CheckpointKind::AfterRun]
    );
    assert_eq!(list[1].id, checkpoint);
    assert_eq!(list[1].run_id, Some(run));
    let q = DiffQuery {
        run: Some(run),
        ..DiffQuery::default()
    };
    let diff = c.diff(session, &q).await.unwrap();
    assert!(diff.contains("+fresh"), "{diff}");
    assert!(diff.contains("deleted file mode 100644"), "{diff}");
    assert!(diff.contains(" one\n+two"), "{diff}");
    assert!(diff.contains("new mode 100755"), "{diff}");
    let stat = c.diff_stat(session, &q).await.unwrap();
    let mut paths: Vec<_> = stat.files.iter().map(|f| f.path.clone()).collect();
    paths.sort();
    assert_eq!(paths, ["edit.txt", "gone.txt", "new.txt", "tool.sh"]);
    // With no range: the last run that changed files.
    assert_eq!(c.diff(session, &DiffQuery::default()).await.unwrap(), diff);

    // The CLI.
    let id = session.to_string();
    let (ok, out, err) = cli(&server.url, &["diff", &id, "--stat"]);
    assert!(ok, "{err}");
    assert!(out.contains("4 files changed, +2 −1"), "{out}");
    let (ok, out, err) = cli(&server.url, &["checkpoints", &id]);
    assert!(ok, "{err}");
    assert!(
        out.contains("after run") && out.contains(&run.to_string()),
        "{out}"
    );

    // No restore while a run goes on.
    llm.push(MockReply::text_slow(&["a", "b", "c", "d", "e", "f"], 300));
    let (mut events, slow) = send(&c, session, "talk slowly").await;
    let err = c.restore(session, &list[0].id).await.unwrap_err();
    assert_eq!(err.code(), Some("session_already_running"), "{err}");
    until_run_ends(&mut events, slow).await;

    // Undo (CLI), then undo the undo with the command it prints.
    let (ok, out, err) = cli(&server.url, &["undo", &id]);
    assert!(ok, "{err}");
    assert_eq!(read_all(w), before, "{out}");
    assert!(out.contains("4 files changed"), "{out}");
    let redo = out
        .lines()
        .find_map(|l| l.strip_prefix("to redo: switchboard "))
        .unwrap()
        .to_owned();
    let args: Vec<&str> = redo.split(' ').collect();
    let (ok, out, err) = cli(&server.url, &args);
    assert!(ok, "{out} {err}");
    assert_eq!(read_all(w), after);

    // Clear errors.
    let err = c.restore(session, &"0".repeat(40)).await.unwrap_err();
    assert_eq!(err.code(), Some("checkpoint_not_found"), "{err}");
    let other = c
        .create_session(&CreateSessionRequest {
            cwd: Some(w.to_string_lossy().into_owned()),
            ..CreateSessionRequest::default()
        })
        .await
        .unwrap()
        .id;
    let err = c.restore(other, &checkpoint).await.unwrap_err();
    assert_eq!(
        err.code(),
        Some("checkpoint_not_found"),
        "another session's: {err}"
    );
    let err = c
        .diff(
            other,
            &DiffQuery {
                run: Some(run),
                ..DiffQuery::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("unprocessable_entity"), "{err}");
    let err = c
        .diff(
            session,
            &DiffQuery {
                run: Some(Uuid::now_v7()),
                from: Some(checkpoint.clone()),
                ..DiffQuery::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("unprocessable_entity"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_changes_nothing_leaves_no_checkpoint_and_no_event() {
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.txt"), "a\n").unwrap();
    let server = start(
        dir.path(),
        &llm.base_url(),
        &[("SWITCHBOARD_CHECKPOINTS", "true")],
    )
    .await;
    let c = client(&server);
    let session = c
        .create_session(&CreateSessionRequest {
            cwd: Some(ws.path().to_string_lossy().into_owned()),
            ..CreateSessionRequest::default()
        })
        .await
        .unwrap()
        .id;
    for _ in 0..2 {
        llm.push(MockReply::text(&["hi"]));
        let (mut events, run) = send(&c, session, "hello").await;
        let evs = until_run_ends(&mut events, run).await;
        assert!(
            !kinds(&evs).contains(&"workspace_changed"),
            "{:?}",
            kinds(&evs)
        );
        assert!(!kinds(&evs).contains(&"notice"), "{:?}", kinds(&evs));
    }
    let list = c.checkpoints(session).await.unwrap().checkpoints;
    assert_eq!(list.len(), 1, "only the first run's starting point");
    assert_eq!(c.diff(session, &DiffQuery::default()).await.unwrap(), "");
    // A file changed between runs gets its own checkpoint before the next run.
    std::fs::write(ws.path().join("a.txt"), "a\nb\n").unwrap();
    llm.push(MockReply::text(&["hi"]));
    let (mut events, run) = send(&c, session, "hello").await;
    until_run_ends(&mut events, run).await;
    let list = c.checkpoints(session).await.unwrap().checkpoints;
    assert_eq!(list.len(), 2);
    assert_eq!(
        (list[1].kind, list[1].files, list[1].insertions),
        (CheckpointKind::BeforeRun, 1, 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_too_large_gets_a_notice_and_the_run_goes_on() {
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    for i in 0..30 {
        std::fs::write(ws.path().join(format!("f{i}")), "x").unwrap();
    }
    let server = start(
        dir.path(),
        &llm.base_url(),
        &[
            ("SWITCHBOARD_CHECKPOINTS", "true"),
            ("SWITCHBOARD_CHECKPOINT_MAX_FILES", "20"),
        ],
    )
    .await;
    let c = client(&server);
    let session = c
        .create_session(&CreateSessionRequest {
            cwd: Some(ws.path().to_string_lossy().into_owned()),
            ..CreateSessionRequest::default()
        })
        .await
        .unwrap()
        .id;
    llm.push(MockReply::text(&["fine"]));
    let (mut events, run) = send(&c, session, "hello").await;
    let evs = until_run_ends(&mut events, run).await;
    let notice = evs.iter().find_map(|e| match &e.event {
        AgentEvent::Notice { message, .. } => Some(message.clone()),
        _ => None,
    });
    assert!(notice.unwrap().contains("more than 20 files"));
    assert!(matches!(
        evs.last().unwrap().event,
        AgentEvent::RunCompleted { .. }
    ));
    assert_eq!(text_of(&evs), "fine");
}

/// A `git` process working in `ws` (a checkpoint in progress), if any.
fn git_in(ws: &Path) -> Option<u32> {
    for e in std::fs::read_dir("/proc").ok()? {
        let Ok(e) = e else { continue };
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if comm.trim() == "git"
            && std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|c| c == ws)
        {
            return Some(pid);
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_checkpoint_leaves_a_shadow_repository_that_works() {
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(ws.path()).unwrap();
    // Large enough that the first checkpoint takes a while (about a second here).
    for d in 0..100 {
        let sub = root.join(format!("d{d}"));
        std::fs::create_dir(&sub).unwrap();
        for f in 0..100 {
            std::fs::write(sub.join(format!("f{f}.txt")), format!("{d} {f}\n")).unwrap();
        }
    }
    let env = [("SWITCHBOARD_CHECKPOINTS", "true")];
    let mut server = start(dir.path(), &llm.base_url(), &env).await;
    let c = client(&server);
    let session = c
        .create_session(&CreateSessionRequest {
            cwd: Some(root.to_string_lossy().into_owned()),
            ..CreateSessionRequest::default()
        })
        .await
        .unwrap()
        .id;
    // (No reply for the model: the run is killed before it asks.)
    let _ = send(&c, session, "first").await;
    // SIGKILL the server and its git together (as systemd stops a unit) while git writes.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let git = loop {
        if let Some(pid) = git_in(&root) {
            break pid;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint seen running"
        );
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    };
    let _ = std::process::Command::new("kill")
        .args(["-9", &git.to_string()])
        .status();
    server.kill().await;

    let server = start(dir.path(), &llm.base_url(), &env).await;
    let c = client(&server);
    llm.push(MockReply::text(&["back"]));
    let (mut events, run) = send(&c, session, "again").await;
    let evs = until_run_ends(&mut events, run).await;
    assert_eq!(text_of(&evs), "back");
    assert!(!kinds(&evs).contains(&"notice"), "{:?}", kinds(&evs));
    std::fs::write(root.join("d0/f0.txt"), "changed\n").unwrap();
    llm.push(MockReply::tool_call(
        "c1",
        "create",
        serde_json::json!({"path": "d1/f1.txt", "file_text": "edited\n"}),
    ));
    llm.push(MockReply::text(&["edited"]));
    let (mut events, run) = send(&c, session, "edit").await;
    let evs = until_run_ends(&mut events, run).await;
    assert!(
        evs.iter()
            .any(|e| matches!(e.event, AgentEvent::WorkspaceChanged { files: 1, .. })),
        "{:?}",
        kinds(&evs)
    );
    // The shadow repository checks out clean.
    // (The file watcher's cookies live beside the repositories, in a dot-directory.)
    let shadow = std::fs::read_dir(dir.path().join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .unwrap();
    let fsck = std::process::Command::new("git")
        .args(["fsck", "--no-dangling"])
        .env("GIT_DIR", &shadow)
        .output()
        .unwrap();
    assert!(
        fsck.status.success(),
        "{}",
        String::from_utf8_lossy(&fsck.stderr)
    );
    let list = c.checkpoints(session).await.unwrap().checkpoints;
    assert!(list.len() >= 3, "{list:?}");
}
