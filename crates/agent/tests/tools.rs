#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

//! The workspace tools against real files in temporary directories and a real `bash`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchboard_agent::tools::{ToolLimits, ToolOutput, Workspace, execute};
use tokio_util::sync::CancellationToken;

/// A workspace `base/ws` next to a directory `base/outside` holding `secret.txt` and
/// `dir/inner.txt`, with symlinks in the workspace pointing out of it.
struct Fixture {
    _base: tempfile::TempDir,
    base: PathBuf,
    ws_dir: PathBuf,
    outside: PathBuf,
}

impl Fixture {
    fn new() -> Self {
        let base_dir = tempfile::tempdir().unwrap();
        let base = base_dir.path().canonicalize().unwrap();
        let ws_dir = base.join("ws");
        let outside = base.join("outside");
        std::fs::create_dir_all(&ws_dir).unwrap();
        std::fs::create_dir_all(outside.join("dir")).unwrap();
        std::fs::write(outside.join("secret.txt"), "outside\n").unwrap();
        std::fs::write(outside.join("dir/inner.txt"), "outside\n").unwrap();
        std::os::unix::fs::symlink(&outside, ws_dir.join("link_dir")).unwrap();
        std::os::unix::fs::symlink(outside.join("secret.txt"), ws_dir.join("link_file")).unwrap();
        std::os::unix::fs::symlink(outside.join("missing.txt"), ws_dir.join("dangling")).unwrap();
        Self {
            _base: base_dir,
            base,
            ws_dir,
            outside,
        }
    }

    fn ws(&self, confine: bool) -> Workspace {
        Workspace::new(&self.ws_dir, confine).unwrap()
    }

    fn outside_untouched(&self) {
        assert_eq!(
            std::fs::read_to_string(self.outside.join("secret.txt")).unwrap(),
            "outside\n"
        );
        assert_eq!(
            std::fs::read_to_string(self.outside.join("dir/inner.txt")).unwrap(),
            "outside\n"
        );
        let mut names: Vec<_> = std::fs::read_dir(&self.outside)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["dir", "secret.txt"]);
        assert!(!self.base.join("x").exists());
    }
}

async fn call(ws: &Workspace, name: &str, args: Value) -> ToolOutput {
    call_with(ws, &ToolLimits::default(), name, args).await
}

async fn call_with(ws: &Workspace, limits: &ToolLimits, name: &str, args: Value) -> ToolOutput {
    execute(ws, limits, name, &args, &CancellationToken::new()).await
}

fn ok(out: &ToolOutput) -> &str {
    assert!(!out.is_error, "unexpected error: {}", out.content);
    &out.content
}

fn err(out: &ToolOutput) -> &str {
    assert!(out.is_error, "expected an error, got: {}", out.content);
    &out.content
}

// ---------------------------------------------------------------------------------------
// Confinement

#[tokio::test]
async fn confined_paths_outside_the_workspace_are_refused() {
    let fx = Fixture::new();
    let ws = fx.ws(true);
    let abs_secret = fx.outside.join("secret.txt").display().to_string();
    let paths = [
        "../x".to_owned(),
        "../outside/secret.txt".to_owned(),
        "../outside/new.txt".to_owned(),
        "sub/../../outside/secret.txt".to_owned(),
        abs_secret,
        "/etc/passwd".to_owned(),
        "link_dir".to_owned(),
        "link_dir/secret.txt".to_owned(),
        "link_dir/dir".to_owned(),
        "link_dir/new.txt".to_owned(),
        "link_dir/newdir/new.txt".to_owned(),
        "link_file".to_owned(),
        "dangling".to_owned(),
    ];
    for path in &paths {
        let attempts = [
            ("view", json!({"path": path})),
            ("create", json!({"path": path, "file_text": "pwned\n"})),
            (
                "str_replace",
                json!({"path": path, "old_str": "outside", "new_str": "pwned"}),
            ),
            ("remove", json!({"path": path, "recursive": true})),
        ];
        for (tool, args) in attempts {
            let out = call(&ws, tool, args).await;
            let msg = err(&out);
            assert!(msg.contains("refused"), "{tool} {path}: {msg}");
            // A `..` below a missing directory is refused before it is resolved.
            if !path.starts_with("sub/") {
                assert!(
                    msg.contains("resolves outside the workspace"),
                    "{tool} {path}: {msg}"
                );
            }
            assert!(msg.contains(&format!("{path:?}")), "{tool} {path}: {msg}");
        }
    }
    fx.outside_untouched();
    // The links themselves are still there too.
    for link in ["link_dir", "link_file", "dangling"] {
        assert!(
            fx.ws_dir
                .join(link)
                .symlink_metadata()
                .unwrap()
                .is_symlink()
        );
    }
    // The message names the workspace root.
    let out = call(&ws, "view", json!({"path": "../x"})).await;
    assert_eq!(
        out.content,
        format!(
            "path \"../x\" resolves outside the workspace ({}); refused",
            ws.root().display()
        )
    );
}

#[tokio::test]
async fn confined_paths_inside_the_workspace_work() {
    let fx = Fixture::new();
    let ws = fx.ws(true);
    ok(&call(
        &ws,
        "create",
        json!({"path": "a/b/c.txt", "file_text": "hi\n"}),
    )
    .await);
    ok(&call(&ws, "view", json!({"path": "a/../a/b/c.txt"})).await);
    let abs = fx.ws_dir.join("a/b/c.txt").display().to_string();
    assert!(ok(&call(&ws, "view", json!({"path": abs})).await).contains("hi"));
    // A symlink inside pointing inside is fine; removing it removes the link only.
    std::os::unix::fs::symlink("a", fx.ws_dir.join("inner_link")).unwrap();
    assert!(ok(&call(&ws, "view", json!({"path": "inner_link/b/c.txt"})).await).contains("hi"));
    ok(&call(&ws, "remove", json!({"path": "inner_link"})).await);
    assert!(fx.ws_dir.join("a/b/c.txt").exists());
    assert!(!fx.ws_dir.join("inner_link").exists());
}

#[tokio::test]
async fn full_access_allows_absolute_paths_outside() {
    let fx = Fixture::new();
    let ws = fx.ws(false);
    let secret = fx.outside.join("secret.txt").display().to_string();
    assert!(ok(&call(&ws, "view", json!({"path": secret})).await).contains("outside"));
    let new = fx.outside.join("new.txt").display().to_string();
    ok(&call(&ws, "create", json!({"path": new, "file_text": "x\n"})).await);
    assert_eq!(
        std::fs::read_to_string(fx.outside.join("new.txt")).unwrap(),
        "x\n"
    );
    // Relative paths are still relative to the root.
    ok(&call(&ws, "create", json!({"path": "rel.txt", "file_text": "r"})).await);
    assert!(fx.ws_dir.join("rel.txt").exists());
    // The root itself still cannot be removed.
    err(&call(&ws, "remove", json!({"path": ".", "recursive": true})).await);
    assert!(fx.ws_dir.exists());
}

#[tokio::test]
async fn workspace_root_must_be_an_existing_directory() {
    let fx = Fixture::new();
    assert!(Workspace::new(&fx.base.join("nope"), true).is_err());
    assert!(Workspace::new(&fx.outside.join("secret.txt"), true).is_err());
    // The root is canonical.
    let ws = Workspace::new(&fx.ws_dir.join("link_dir"), true).unwrap();
    assert_eq!(ws.root(), fx.outside.as_path());
}

// ---------------------------------------------------------------------------------------
// Arguments

#[tokio::test]
async fn bad_calls_are_tool_errors() {
    let fx = Fixture::new();
    let ws = fx.ws(true);
    assert!(err(&call(&ws, "fetch", json!({})).await).contains("unknown tool"));
    assert!(err(&call(&ws, "view", json!("src")).await).contains("JSON object"));
    assert!(err(&call(&ws, "view", json!({})).await).contains("`path`"));
    assert!(err(&call(&ws, "view", json!({"path": 3})).await).contains("`path` must be a string"));
    assert!(err(&call(&ws, "create", json!({"path": "a"})).await).contains("`file_text`"));
    assert!(
        err(&call(&ws, "str_replace", json!({"path": "a", "old_str": "x"})).await)
            .contains("`new_str`")
    );
    assert!(err(&call(&ws, "run_command", json!({})).await).contains("`command`"));
    assert!(err(&call(&ws, "view", json!({"path": ""})).await).contains("empty path"));
    assert!(err(&call(&ws, "view", json!({"path": "nope.txt"})).await).contains("does not exist"));
    assert!(
        err(&call(&ws, "view", json!({"path": "link_dir", "view_range": [1]})).await)
            .contains("view_range")
    );
}

// ---------------------------------------------------------------------------------------
// create / str_replace / remove

#[tokio::test]
async fn create_reports_created_and_overwrote() {
    let fx = Fixture::new();
    let ws = fx.ws(true);
    let out = call(
        &ws,
        "create",
        json!({"path": "src/a.rs", "file_text": "fn a() {}\nfn b() {}\n"}),
    )
    .await;
    assert_eq!(ok(&out), "created src/a.rs (2 lines, 20 bytes)");
    let out = call(&ws, "create", json!({"path": "src/a.rs", "file_text": "x"})).await;
    assert_eq!(ok(&out), "overwrote src/a.rs (1 line, 1 byte)");
    assert_eq!(
        std::fs::read_to_string(fx.ws_dir.join("src/a.rs")).unwrap(),
        "x"
    );
    assert!(
        err(&call(&ws, "create", json!({"path": "src", "file_text": "x"})).await)
            .contains("is a directory")
    );
}

#[tokio::test]
async fn str_replace_needs_exactly_one_match() {
    let fx = Fixture::new();
    let ws = fx.ws(true);
    let text = "fn main() {\n    foo();\n    bar();\n    foo();\n}\n";
    std::fs::write(fx.ws_dir.join("a.rs"), text).unwrap();

    let out = call(
        &ws,
        "str_replace",
        json!({"path": "a.rs", "old_str": "baz()", "new_str": "x"}),
    )
    .await;
    assert!(
        err(&out).starts_with("old_str not found in a.rs"),
        "{}",
        out.content
    );

    let out = call(
        &ws,
        "str_replace",
        json!({"path": "a.rs", "old_str": "foo();", "new_str": "x"}),
    )
    .await;
    assert!(
        err(&out).contains(
            "old_str occurs 2 times in a.rs (at lines 2, 4); include more context to make it unique"
        ),
        "{}",
        out.content
    );

    let out = call(
        &ws,
        "str_replace",
        json!({"path": "a.rs", "old_str": "", "new_str": "x"}),
    )
    .await;
    assert!(err(&out).contains("must not be empty"));
    assert_eq!(
        std::fs::read_to_string(fx.ws_dir.join("a.rs")).unwrap(),
        text
    );

    let out = call(
        &ws,
        "str_replace",
        json!({"path": "a.rs", "old_str": "    bar();\n", "new_str": "    bar();\n    qux();\n"}),
    )
    .await;
    let report = ok(&out);
    assert!(
        report.contains("     3\t    bar();\n     4\t    qux();\n"),
        "{report}"
    );
    assert!(report.contains("     1\tfn main() {"), "{report}");
    assert_eq!(
        std::fs::read_to_string(fx.ws_dir.join("a.rs")).unwrap(),
        "fn main() {\n    foo();\n    bar();\n    qux();\n    foo();\n}\n"
    );
}

#[tokio::test]
async fn remove_needs_recursive_for_directories_and_spares_the_root() {
    let fx = Fixture::new();
    let ws = fx.ws(true);
    std::fs::create_dir_all(fx.ws_dir.join("build/out")).unwrap();
    std::fs::write(fx.ws_dir.join("build/out/x.o"), "x").unwrap();
    std::fs::write(fx.ws_dir.join("f.txt"), "x").unwrap();

    let out = call(&ws, "remove", json!({"path": "build"})).await;
    assert!(
        err(&out).contains("is a directory") && out.content.contains("recursive"),
        "{}",
        out.content
    );
    assert!(fx.ws_dir.join("build/out/x.o").exists());
    ok(&call(&ws, "remove", json!({"path": "build", "recursive": true})).await);
    assert!(!fx.ws_dir.join("build").exists());

    ok(&call(&ws, "remove", json!({"path": "f.txt"})).await);
    assert!(!fx.ws_dir.join("f.txt").exists());
    assert!(err(&call(&ws, "remove", json!({"path": "f.txt"})).await).contains("does not exist"));

    let root = fx.ws_dir.display().to_string();
    for path in [".", "./", root.as_str(), "link_dir/../ws"] {
        let out = call(&ws, "remove", json!({"path": path, "recursive": true})).await;
        assert!(
            err(&out).contains("workspace root"),
            "{path}: {}",
            out.content
        );
    }
    assert!(fx.ws_dir.join("link_dir").exists());
}

// ---------------------------------------------------------------------------------------
// view

#[tokio::test]
async fn view_numbers_ranges_and_greps_lines() {
    let fx = Fixture::new();
    let ws = fx.ws(true);
    std::fs::write(fx.ws_dir.join("a.txt"), "alpha\nbeta\ngamma\r\ndelta").unwrap();

    let out = call(&ws, "view", json!({"path": "a.txt"})).await;
    assert_eq!(
        ok(&out),
        "     1\talpha\n     2\tbeta\n     3\tgamma\n     4\tdelta\n"
    );

    let out = call(&ws, "view", json!({"path": "a.txt", "view_range": [2, 3]})).await;
    assert_eq!(ok(&out), "     2\tbeta\n     3\tgamma\n");
    let out = call(&ws, "view", json!({"path": "a.txt", "view_range": [3, -1]})).await;
    assert_eq!(ok(&out), "     3\tgamma\n     4\tdelta\n");
    let out = call(&ws, "view", json!({"path": "a.txt", "view_range": [5, 6]})).await;
    assert!(err(&out).contains("a.txt has 4 lines"), "{}", out.content);
    let out = call(&ws, "view", json!({"path": "a.txt", "view_range": [2, 9]})).await;
    assert!(err(&out).contains("a.txt has 4 lines"), "{}", out.content);
    let out = call(&ws, "view", json!({"path": "a.txt", "view_range": [3, 2]})).await;
    err(&out);

    let out = call(&ws, "view", json!({"path": "a.txt", "grep": "^(b|d)"})).await;
    assert_eq!(ok(&out), "     2\tbeta\n     4\tdelta\n");
    let out = call(
        &ws,
        "view",
        json!({"path": "a.txt", "grep": "a$", "view_range": [3, 4]}),
    )
    .await;
    assert_eq!(ok(&out), "     3\tgamma\n     4\tdelta\n");
    let out = call(&ws, "view", json!({"path": "a.txt", "grep": "zzz"})).await;
    assert!(ok(&out).contains("no lines"));
    let out = call(&ws, "view", json!({"path": "a.txt", "grep": "(unclosed"})).await;
    assert!(err(&out).contains("invalid regular expression"));
}

#[tokio::test]
async fn view_caps_long_files() {
    let fx = Fixture::new();
    let ws = fx.ws(true);
    let text: String = (1..=10_000).map(|i| format!("line number {i}\n")).collect();
    std::fs::write(fx.ws_dir.join("big.txt"), &text).unwrap();
    let limits = ToolLimits {
        output_cap: 1000,
        ..ToolLimits::default()
    };
    let out = call_with(&ws, &limits, "view", json!({"path": "big.txt"})).await;
    let content = ok(&out);
    assert!(content.chars().count() <= 1000 + 200, "{}", content.len());
    assert!(content.starts_with("     1\tline number 1\n"));
    assert!(content.contains("output truncated"), "{content}");
    // The range can still reach the end.
    let out = call_with(
        &ws,
        &limits,
        "view",
        json!({"path": "big.txt", "view_range": [10000, -1]}),
    )
    .await;
    assert_eq!(ok(&out), " 10000\tline number 10000\n");
}

#[tokio::test]
async fn view_lists_directories_and_spots_binary_files() {
    let fx = Fixture::new();
    let ws = fx.ws(true);
    let d = &fx.ws_dir;
    std::fs::create_dir_all(d.join("src/deep/deeper")).unwrap();
    std::fs::create_dir_all(d.join(".git/objects")).unwrap();
    std::fs::write(d.join("Cargo.toml"), "[package]\n").unwrap();
    std::fs::write(d.join("src/lib.rs"), "pub fn a() {}\n").unwrap();
    std::fs::write(d.join("src/deep/hidden.rs"), "x").unwrap();
    std::fs::write(d.join(".env"), "A=1\n").unwrap();

    let out = call(&ws, "view", json!({"path": "."})).await;
    let listing = ok(&out);
    let lines: Vec<&str> = listing.lines().skip(1).collect();
    let outside = fx.outside.display();
    let expected = [
        ".env (4 bytes)".to_owned(),
        "Cargo.toml (10 bytes)".to_owned(),
        format!("dangling -> {outside}/missing.txt"),
        format!("link_dir -> {outside}"),
        format!("link_file -> {outside}/secret.txt"),
        "src/".to_owned(),
        "src/deep/".to_owned(),
        "src/lib.rs (14 bytes)".to_owned(),
    ];
    assert_eq!(lines, expected, "{listing}");
    assert!(!lines.iter().any(|l| l.starts_with(".git")), "{listing}");
    assert!(!listing.contains("hidden.rs"), "{listing}");

    let out = call(&ws, "view", json!({"path": "src/deep"})).await;
    assert!(
        ok(&out).contains("deeper/\nhidden.rs (1 byte)"),
        "{}",
        out.content
    );

    let mut bin = b"\x7fELF\x02\x01".to_vec();
    bin.extend([0u8; 100]);
    std::fs::write(d.join("a.out"), &bin).unwrap();
    let out = call(&ws, "view", json!({"path": "a.out"})).await;
    assert_eq!(ok(&out), "a.out: binary file, 106 bytes");

    std::fs::write(d.join("empty.txt"), "").unwrap();
    assert!(ok(&call(&ws, "view", json!({"path": "empty.txt"})).await).contains("empty"));
}

#[tokio::test]
async fn view_listing_is_capped() {
    let fx = Fixture::new();
    let ws = fx.ws(true);
    std::fs::create_dir(fx.ws_dir.join("many")).unwrap();
    for i in 0..1500 {
        std::fs::write(fx.ws_dir.join(format!("many/f{i:04}")), "").unwrap();
    }
    let limits = ToolLimits {
        output_cap: 1_000_000,
        ..ToolLimits::default()
    };
    let out = call_with(&ws, &limits, "view", json!({"path": "many"})).await;
    let listing = ok(&out);
    assert!(listing.contains("f0999 (0 bytes)"));
    assert!(!listing.contains("f1000"));
    assert!(
        listing.contains("showing 1000 of 1500 entries"),
        "{listing}"
    );
}

// ---------------------------------------------------------------------------------------
// run_command

/// Whether process `pid` is gone (or a zombie nobody reaped yet), waiting up to 5 s.
async fn process_gone(pid: i32) -> bool {
    for _ in 0..50 {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return true,
            Ok(stat) => {
                let state = stat
                    .rsplit_once(')')
                    .map(|(_, rest)| rest.trim_start().chars().next());
                if matches!(state, Some(Some('Z' | 'X'))) {
                    return true;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

fn read_pid(dir: &Path) -> i32 {
    std::fs::read_to_string(dir.join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn run_command_reports_output_and_exit_code() {
    let fx = Fixture::new();
    let ws = fx.ws(true);
    let out = call(&ws, "run_command", json!({"command": "echo hello; pwd"})).await;
    assert_eq!(
        ok(&out),
        format!("hello\n{}\nexit code: 0", fx.ws_dir.display())
    );

    let out = call(
        &ws,
        "run_command",
        json!({"command": "echo out; echo err >&2; exit 3"}),
    )
    .await;
    let content = err(&out);
    assert!(
        content.contains("out\n") && content.contains("err\n"),
        "{content}"
    );
    assert!(content.ends_with("exit code: 3"), "{content}");

    let out = call(&ws, "run_command", json!({"command": "true"})).await;
    assert_eq!(ok(&out), "(no output)\nexit code: 0");

    let out = call(
        &ws,
        "run_command",
        json!({"command": "printf 'no newline'"}),
    )
    .await;
    assert_eq!(ok(&out), "no newline\nexit code: 0");

    // stdin is closed, not inherited.
    let out = call(&ws, "run_command", json!({"command": "cat; echo done"})).await;
    assert_eq!(ok(&out), "done\nexit code: 0");

    let out = call(&ws, "run_command", json!({"command": "kill -9 $$"})).await;
    assert!(err(&out).contains("killed by signal 9"), "{}", out.content);
}

#[tokio::test]
async fn run_command_timeout_arguments() {
    let fx = Fixture::new();
    let ws = fx.ws(true);
    for bad in [json!(0), json!(-5), json!("soon"), json!(1.5)] {
        let out = call(
            &ws,
            "run_command",
            json!({"command": "true", "timeout_secs": bad}),
        )
        .await;
        assert!(err(&out).contains("timeout_secs"), "{bad}: {}", out.content);
    }
    let limits = ToolLimits {
        max_timeout: Duration::from_secs(5),
        ..ToolLimits::default()
    };
    let out = call_with(
        &ws,
        &limits,
        "run_command",
        json!({"command": "echo hi", "timeout_secs": 100}),
    )
    .await;
    let content = ok(&out);
    assert!(
        content.contains("clamped") && content.contains("5 s"),
        "{content}"
    );
}

#[tokio::test]
async fn run_command_output_is_capped_head_and_tail() {
    let fx = Fixture::new();
    let ws = fx.ws(true);
    let limits = ToolLimits::default();
    let out = call_with(
        &ws,
        &limits,
        "run_command",
        json!({"command": "echo START; head -c 1000000 /dev/zero | tr '\\0' a; echo; echo END"}),
    )
    .await;
    let content = ok(&out);
    assert!(
        content.chars().count() <= limits.output_cap + 100,
        "{}",
        content.len()
    );
    assert!(content.starts_with("START\naaaa"), "{}", &content[..20]);
    assert!(
        content.ends_with("aaaa\nEND\nexit code: 0"),
        "{}",
        &content[content.len() - 40..]
    );
    // 6 + 1,000,000 + 1 + 4 bytes printed, 30,000 kept.
    assert!(
        content.contains("[… 970,011 bytes of output dropped …]"),
        "{}",
        content.len()
    );
}

#[tokio::test]
async fn run_command_timeout_kills_the_process_group() {
    let fx = Fixture::new();
    let ws = fx.ws(true);
    let started = Instant::now();
    let out = call(
        &ws,
        "run_command",
        json!({"command": "echo before; sleep 30 & echo $! > pid; wait", "timeout_secs": 1}),
    )
    .await;
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(4), "{elapsed:?}");
    let content = err(&out);
    assert!(content.starts_with("before\n"), "{content}");
    assert!(
        content.ends_with("killed: timed out after 1 s"),
        "{content}"
    );
    let pid = read_pid(&fx.ws_dir);
    assert!(process_gone(pid).await, "background sleep {pid} survived");
}

#[tokio::test]
async fn run_command_cancel_kills_the_process_group() {
    let fx = Fixture::new();
    let ws = fx.ws(true);
    let cancel = CancellationToken::new();
    let firing = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        firing.cancel();
    });
    let started = Instant::now();
    let out = execute(
        &ws,
        &ToolLimits::default(),
        "run_command",
        &json!({"command": "sleep 30 & echo $! > pid; wait"}),
        &cancel,
    )
    .await;
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
    assert!(err(&out).ends_with("killed: cancelled"), "{}", out.content);
    let pid = read_pid(&fx.ws_dir);
    assert!(process_gone(pid).await, "background sleep {pid} survived");
}

#[tokio::test]
async fn run_command_kills_background_processes_holding_the_output() {
    let fx = Fixture::new();
    let ws = fx.ws(true);
    let started = Instant::now();
    let out = call(
        &ws,
        "run_command",
        json!({"command": "sleep 30 & echo $! > pid; echo started"}),
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let content = ok(&out);
    assert!(content.starts_with("started\n"), "{content}");
    assert!(content.contains("background processes"), "{content}");
    assert!(content.ends_with("exit code: 0"), "{content}");
    let pid = read_pid(&fx.ws_dir);
    assert!(process_gone(pid).await, "background sleep {pid} survived");
}

#[tokio::test]
async fn run_command_leaves_redirected_background_processes_running() {
    let fx = Fixture::new();
    let ws = fx.ws(true);
    let started = Instant::now();
    let out = call(
        &ws,
        "run_command",
        json!({"command": "sleep 30 > /dev/null 2>&1 & echo $! > pid; echo started"}),
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(ok(&out), "started\nexit code: 0");
    let pid = read_pid(&fx.ws_dir);
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
    assert!(process_gone(pid).await);
}

#[tokio::test]
async fn run_command_hides_the_servers_secrets() {
    let fx = Fixture::new();
    let ws = fx.ws(true);
    let out = call(&ws, "run_command", json!({"command": "env"})).await;
    let content = ok(&out);
    assert!(content.contains("PATH="), "{content}");
    for line in content.lines() {
        assert!(!line.starts_with("SWITCHBOARD_"), "{line}");
        assert!(!line.starts_with("OPENAI_API_KEY="), "{line}");
        assert!(!line.starts_with("ANTHROPIC_API_KEY="), "{line}");
    }
}

/// Peak resident memory of this process, in KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn run_command_output_of_200_mb_stays_bounded() {
    let fx = Fixture::new();
    let ws = fx.ws(true);
    let before = peak_rss_kib();
    let out = call(
        &ws,
        "run_command",
        json!({"command": "head -c 200000000 /dev/zero | tr '\\0' a"}),
    )
    .await;
    let grown = peak_rss_kib().saturating_sub(before);
    let content = ok(&out);
    assert!(
        content.contains("[… 199,970,000 bytes of output dropped …]"),
        "{}",
        content.len()
    );
    assert!(grown < 64 * 1024, "peak memory grew by {grown} KiB");
}

#[tokio::test]
async fn fifos_are_refused_instead_of_blocking_forever() {
    let fx = Fixture::new();
    let ws = fx.ws(true);
    let fifo = ws.root().join("pipe");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    for (tool, args) in [
        ("view", json!({"path": "pipe"})),
        ("create", json!({"path": "pipe", "file_text": "x"})),
        (
            "str_replace",
            json!({"path": "pipe", "old_str": "a", "new_str": "b"}),
        ),
    ] {
        let out = tokio::time::timeout(Duration::from_secs(5), call(&ws, tool, args))
            .await
            .unwrap_or_else(|_| panic!("{tool} blocked on a FIFO"));
        assert!(
            err(&out).contains("not a regular file"),
            "{tool}: {}",
            out.content
        );
    }
}

/// Switchboard's own state in the workspace (the default workspace is often `$HOME`, which
/// holds the data directory): no file tool reaches it, in any mode, through any path.
#[tokio::test]
async fn switchboards_own_state_is_forbidden_in_every_mode() {
    let fx = Fixture::new();
    let data = fx.ws_dir.join(".local/share/switchboard");
    std::fs::create_dir_all(data.join("checkpoints")).unwrap();
    std::fs::write(data.join("token"), "admin-token\n").unwrap();
    std::fs::write(fx.ws_dir.join("config.toml"), "[server]\n").unwrap();
    std::os::unix::fs::symlink(&data, fx.ws_dir.join("sneaky")).unwrap();
    std::fs::write(fx.ws_dir.join("notes.txt"), "mine\n").unwrap();
    let protected =
        switchboard_engine::ProtectedPaths::new([data.clone(), fx.ws_dir.join("config.toml")]);
    for confine in [true, false] {
        let ws = fx.ws(confine).protecting(protected.clone());
        let token_abs = data.join("token").display().to_string();
        for path in [
            ".local/share/switchboard/token",
            "sneaky/token",
            token_abs.as_str(),
            ".local/share/./switchboard/checkpoints",
        ] {
            let out = call(&ws, "view", json!({ "path": path })).await;
            let msg = err(&out);
            assert!(
                msg.starts_with("forbidden_path: "),
                "{confine} {path}: {msg}"
            );
            assert!(!msg.contains("admin-token"), "{msg}");
        }
        for (tool, args) in [
            ("view", json!({ "path": "config.toml" })),
            (
                "create",
                json!({ "path": ".local/share/switchboard/new", "file_text": "x" }),
            ),
            (
                "create",
                json!({ "path": "sneaky/checkpoints/config", "file_text": "x" }),
            ),
            (
                "str_replace",
                json!({ "path": "config.toml", "old_str": "[server]", "new_str": "[x]" }),
            ),
            ("remove", json!({ "path": "sneaky/token" })),
            // A directory that holds the state cannot go either.
            ("remove", json!({ "path": ".local", "recursive": true })),
        ] {
            let out = call(&ws, tool, args.clone()).await;
            assert!(
                err(&out).starts_with("forbidden_path: "),
                "{confine} {tool} {args}: {}",
                out.content
            );
        }
        // The link itself may go (its target stays); the rest of the workspace works.
        assert!(ok(&call(&ws, "view", json!({ "path": "notes.txt" })).await).contains("mine"));
        let listing = call(&ws, "view", json!({ "path": ".local/share" })).await;
        assert!(ok(&listing).contains("switchboard/ (Switchboard's own state"));
        assert!(!ok(&listing).contains("token"), "{}", listing.content);
    }
    assert_eq!(
        std::fs::read_to_string(data.join("token")).unwrap(),
        "admin-token\n"
    );
    assert_eq!(
        std::fs::read_to_string(fx.ws_dir.join("config.toml")).unwrap(),
        "[server]\n"
    );
    assert!(!data.join("new").exists());
    assert!(!data.join("checkpoints/config").exists());
}
