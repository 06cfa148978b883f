//! `ServerProcess` against small shell scripts standing in for the `switchboard` binary.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use switchboard_test_support::process::ServerProcess;

fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

async fn wait_for_log(server: &ServerProcess, needle: &str) {
    for _ in 0..200 {
        if server.logs().contains(needle) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{needle:?} not in logs:\n{}", server.logs());
}

// One test on purpose: writing a script while another test thread forks can make exec fail
// with "text file busy", so every script is written before any process starts.
#[tokio::test]
async fn server_process_lifecycle() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let good = script(
        dir.path(),
        "good",
        r#"echo "arg=$1 listen=$SWITCHBOARD_LISTEN data=$SWITCHBOARD_DATA_DIR token=$SWITCHBOARD_TOKEN extra=$EXTRA"
echo "warming up" >&2
echo "2026-01-01 INFO listening on http://127.0.0.1:4321"
trap 'echo "got TERM"; exit 0' TERM
while true; do sleep 0.05; done"#,
    );
    let failing = script(
        dir.path(),
        "failing",
        r#"echo "config error: bad toml" >&2; exit 3"#,
    );
    let silent = script(dir.path(), "silent", r#"echo "never ready"; exec sleep 30"#);
    let chatty = script(
        dir.path(),
        "chatty",
        r#"i=0; while [ $i -lt 300 ]; do echo "line $i"; i=$((i+1)); done
echo "listening on http://127.0.0.1:1"
exec sleep 30"#,
    );

    // ready line, environment, logs of both pipes, graceful stop
    let mut server = ServerProcess::start(&good, &data_dir, "tok-1", &[("EXTRA", "yes")])
        .await
        .unwrap();
    assert_eq!(server.url, "http://127.0.0.1:4321");
    assert_eq!(
        (server.token.as_str(), server.data_dir.as_path()),
        ("tok-1", data_dir.as_path())
    );
    wait_for_log(&server, "warming up").await;
    let expected_env = format!(
        "arg=serve listen=127.0.0.1:0 data={} token=tok-1 extra=yes",
        data_dir.display()
    );
    assert!(server.logs().contains(&expected_env), "{}", server.logs());
    assert!(server.exit_status().is_none());
    server.stop().await;
    assert_eq!(server.exit_status().map(|s| s.code()), Some(Some(0)));
    wait_for_log(&server, "got TERM").await;

    // kill
    let mut server = ServerProcess::start(&good, &data_dir, "tok-2", &[])
        .await
        .unwrap();
    server.kill().await;
    let status = server.exit_status().unwrap();
    assert!(
        !status.success() && status.code().is_none(),
        "killed by a signal: {status}"
    );

    // early exit: the error carries stderr and the status
    let err = ServerProcess::start(&failing, &data_dir, "t", &[])
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("config error: bad toml") && text.contains('3'),
        "{text}"
    );

    // no ready line in time
    let err =
        ServerProcess::start_with_timeout(&silent, &data_dir, "t", &[], Duration::from_millis(500))
            .await
            .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    assert!(err.to_string().contains("never ready"), "{err}");

    // only the last lines are kept
    let server = ServerProcess::start(&chatty, &data_dir, "t", &[])
        .await
        .unwrap();
    let logs = server.logs();
    assert!(logs.lines().count() <= 200);
    assert!(
        !logs.contains("line 0\n") && logs.contains("line 299"),
        "{logs}"
    );
    drop(server);

    // missing binary
    let err = ServerProcess::start(&dir.path().join("missing"), &data_dir, "t", &[])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::NotFound);
}
