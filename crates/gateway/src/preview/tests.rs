use super::*;
use serde_json::json;

fn call(name: &str, arguments: Value) -> ToolCall {
    ToolCall {
        id: format!("id-{name}"),
        name: name.to_string(),
        arguments,
        metadata: None,
    }
}

fn acp_call(kind: &str, arguments: Value, metadata: Option<Value>) -> ToolCall {
    ToolCall {
        id: "tc-1".into(),
        name: format!("acp__{kind}"),
        arguments,
        metadata,
    }
}

const BIG: usize = 10_000;

// ---- one call per tool ----

#[test]
fn run_command_shows_the_command_in_a_block() {
    let c = call("run_command", json!({"command": "cargo test"}));
    assert_eq!(preview_call(&c, BIG), "run_command\n```\ncargo test\n```");
}

#[test]
fn run_command_shows_every_line_the_host_and_the_timeout() {
    let c = call(
        "run_command",
        json!({"command": "cd app\nmake -j4\n", "timeout_secs": 30, "host": "build-1"}),
    );
    assert_eq!(
        preview_call(&c, BIG),
        "run_command on build-1 (timeout 30 s)\n```\ncd app\nmake -j4\n```"
    );
    let c = call("run_command", json!({"command": "  "}));
    assert_eq!(preview_call(&c, BIG), "run_command (empty command)");
}

#[test]
fn run_command_is_cut_inside_its_block() {
    let command = (0..100)
        .map(|i| format!("echo {i}"))
        .collect::<Vec<_>>()
        .join("\n");
    let c = call("run_command", json!({"command": command}));
    let p = preview_call(&c, 60);
    assert!(p.chars().count() <= 60, "{p}");
    assert!(p.starts_with("run_command\n```\necho 0\necho 1\n"), "{p}");
    assert!(p.ends_with("…\n```"), "{p}");
}

#[test]
fn create_shows_the_size_and_the_first_ten_lines() {
    let c = call(
        "create",
        json!({"path": "src/a.rs", "file_text": "fn a() {}\nfn b() {}\n"}),
    );
    assert_eq!(
        preview_call(&c, BIG),
        "create src/a.rs (2 lines)\n```\nfn a() {}\nfn b() {}\n```"
    );
    let content: String = (1..=25).map(|i| format!("line {i}\n")).collect();
    let c = call("create", json!({"path": "big.txt", "file_text": content}));
    let p = preview_call(&c, BIG);
    let expected_lines: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    assert_eq!(
        p,
        format!("create big.txt (25 lines)\n```\n{expected_lines}… (15 more lines)\n```")
    );
    let c = call("create", json!({"path": "one", "file_text": "x"}));
    assert_eq!(preview_call(&c, BIG), "create one (1 line)\n```\nx\n```");
    let c = call("create", json!({"path": "empty", "file_text": ""}));
    assert_eq!(preview_call(&c, BIG), "create empty (empty)");
}

#[test]
fn str_replace_shows_a_diff() {
    let c = call(
        "str_replace",
        json!({"path": "src/lib.rs", "old_str": "let a = 1;\nlet b = 2;", "new_str": "let a = 3;"}),
    );
    assert_eq!(
        preview_call(&c, BIG),
        "str_replace src/lib.rs\n```\n- let a = 1;\n- let b = 2;\n+ let a = 3;\n```"
    );
    // A deletion shows only removed lines; a blank line is kept as a bare marker.
    let c = call(
        "str_replace",
        json!({"path": "a", "old_str": "x\n\ny", "new_str": ""}),
    );
    assert_eq!(
        preview_call(&c, BIG),
        "str_replace a\n```\n- x\n-\n- y\n```"
    );
}

#[test]
fn str_replace_cuts_both_sides() {
    let old: String = (0..50).map(|i| format!("old line {i}\n")).collect();
    let c = call(
        "str_replace",
        json!({"path": "f", "old_str": old, "new_str": "short new"}),
    );
    let p = preview_call(&c, 120);
    assert!(p.chars().count() <= 120, "{p}");
    // The short new side is kept whole; the long old side is cut.
    assert!(p.contains("- old line 0\n"), "{p}");
    assert!(p.contains("…\n+ short new\n```"), "{p}");
}

#[test]
fn remove_says_when_recursive() {
    let c = call("remove", json!({"path": "build/", "recursive": true}));
    assert_eq!(preview_call(&c, BIG), "remove build/ (recursive)");
    let c = call("remove", json!({"path": "a.txt", "recursive": false}));
    assert_eq!(preview_call(&c, BIG), "remove a.txt");
    let c = call("remove", json!({"path": "a.txt"}));
    assert_eq!(preview_call(&c, BIG), "remove a.txt");
}

#[test]
fn view_shows_range_and_grep() {
    let c = call("view", json!({"path": "src/main.rs"}));
    assert_eq!(preview_call(&c, BIG), "view src/main.rs");
    let c = call("view", json!({"path": "a", "view_range": [10, 20]}));
    assert_eq!(preview_call(&c, BIG), "view a lines 10–20");
    let c = call(
        "view",
        json!({"path": "a", "view_range": [5, -1], "grep": "fn \\w+"}),
    );
    assert_eq!(preview_call(&c, BIG), "view a lines 5–end grep /fn \\w+/");
    let c = call("view", json!({"path": "a", "grep": "TODO"}));
    assert_eq!(preview_call(&c, BIG), "view a grep /TODO/");
}

#[test]
fn acp_calls_show_title_kind_command_and_path() {
    let c = acp_call(
        "execute",
        json!({"command": "npm test", "cwd": "/w"}),
        Some(
            json!({"title": "Run the tests", "kind": "execute", "preview": "execute: Run the tests"}),
        ),
    );
    assert_eq!(
        preview_call(&c, BIG),
        "execute: Run the tests\n```\nnpm test\n```"
    );
    let c = acp_call(
        "edit",
        json!({"path": "/w/src/a.rs"}),
        Some(json!({"title": "Edit a.rs", "kind": "edit"})),
    );
    assert_eq!(preview_call(&c, BIG), "edit: Edit a.rs\npath: /w/src/a.rs");
    // Only a preview; the kind from the name; an argv command; locations as the path.
    let c = acp_call(
        "execute",
        json!({"command": ["ls", "-la"]}),
        Some(json!({"preview": "execute: List files", "locations": ["/w"]})),
    );
    assert_eq!(
        preview_call(&c, BIG),
        "execute: List files\n```\nls -la\n```\npath: /w"
    );
    let c = acp_call("fetch", json!({}), None);
    assert_eq!(preview_call(&c, BIG), "fetch");
}

#[test]
fn other_tools_show_their_most_telling_argument() {
    let c = call(
        "web_fetch",
        json!({"url": "https://example.com", "method": "GET"}),
    );
    assert_eq!(preview_call(&c, BIG), "web_fetch: https://example.com");
    let c = call("search", json!({"limit": 5, "query": "rust async"}));
    assert_eq!(preview_call(&c, BIG), "search: rust async");
    let c = call("ssh", json!({"path": "/etc", "command": "ls"}));
    assert_eq!(preview_call(&c, BIG), "ssh: ls");
    let c = call("notify", json!({"count": 2, "message": "hello"}));
    assert_eq!(preview_call(&c, BIG), "notify: hello");
    let c = call("add", json!({"a": 1, "b": [2, 3]}));
    assert_eq!(preview_call(&c, BIG), "add: {\"a\":1,\"b\":[2,3]}");
    let c = call("ping", json!({}));
    assert_eq!(preview_call(&c, BIG), "ping");
    let c = call("raw", json!("just a string"));
    assert_eq!(preview_call(&c, BIG), "raw: \"just a string\"");
    // A built-in tool with unexpected arguments falls back to this.
    let c = call("run_command", json!({"cmd": "ls"}));
    assert_eq!(preview_call(&c, BIG), "run_command: ls");
}

#[test]
fn long_titles_are_cut() {
    let c = call("web_fetch", json!({"url": "x".repeat(1000)}));
    let p = preview_call(&c, BIG);
    assert_eq!(p.chars().count(), TITLE_MAX);
    assert!(p.ends_with('…'));
    let p = preview_call(&c, 50);
    assert_eq!(p.chars().count(), 50);
    let c = call("run_command", json!({"command": "ls"}));
    assert_eq!(preview_call(&c, 5), "run_…");
    assert_eq!(preview_call(&c, 0), "");
}

#[test]
fn control_characters_are_escaped() {
    let c = call(
        "run_command",
        json!({"command": "echo \u{1b}[31mred\rover\u{7}\tok"}),
    );
    let p = preview_call(&c, BIG);
    assert_eq!(
        p,
        "run_command\n```\necho \\u{1b}[31mred\\rover\\u{7}\tok\n```"
    );
    assert!(!p.chars().any(|c| c.is_control() && c != '\n' && c != '\t'));

    let c = call("remove", json!({"path": "a\nremove nothing\u{0}"}));
    assert_eq!(preview_call(&c, BIG), "remove a\\nremove nothing\\0");

    // Bidi overrides and zero-width characters would hide what runs.
    let c = call("view", json!({"path": "safe\u{202e}txt.sh\u{200b}"}));
    assert_eq!(preview_call(&c, BIG), "view safe\\u{202e}txt.sh\\u{200b}");

    let c = acp_call(
        "execute",
        json!({"command": "x"}),
        Some(json!({"title": "T\u{1b}]0;owned\u{7}"})),
    );
    assert!(preview_call(&c, BIG).starts_with("execute: T\\u{1b}]0;owned\\u{7}\n"));
    let c = call("weird\u{1b}name", json!({"q": "a\tb"}));
    assert_eq!(preview_call(&c, BIG), "weird\\u{1b}name: a\\tb");
}

#[test]
fn fence_lines_in_shown_text_are_escaped() {
    let c = call(
        "create",
        json!({"path": "README.md", "file_text": "# T\n```sh\nls\n  ```\n"}),
    );
    assert_eq!(
        preview_call(&c, BIG),
        "create README.md (4 lines)\n```\n# T\n\\```sh\nls\n  \\```\n```"
    );
}

// ---- the prompt ----

#[test]
fn prompt_for_one_call() {
    let calls = [call("run_command", json!({"command": "cargo build"}))];
    assert_eq!(
        approval_prompt(&calls, 0, BIG),
        "🔧 Approve run_command?\n\nrun_command\n```\ncargo build\n```"
    );
    let calls = [acp_call(
        "execute",
        json!({}),
        Some(json!({"title": "Run"})),
    )];
    assert_eq!(
        approval_prompt(&calls, 0, BIG),
        "🔧 Approve execute?\n\nexecute: Run"
    );
}

#[test]
fn prompt_for_several_calls_with_allowlisted_ones() {
    let calls = [
        call("run_command", json!({"command": "ls"})),
        call("remove", json!({"path": "tmp", "recursive": true})),
    ];
    assert_eq!(
        approval_prompt(&calls, 3, BIG),
        "🔧 Approve 2 tool calls?\n\n1. run_command\n```\nls\n```\n\n2. remove tmp (recursive)\n\n\
         (3 more calls were allowed by the allowlist)"
    );
    assert!(
        approval_prompt(&calls, 1, BIG).ends_with("\n\n(1 more call was allowed by the allowlist)")
    );
    assert_eq!(
        approval_prompt(&[], 2, BIG),
        "🔧 No tool calls wait for approval.\n\n(2 more calls were allowed by the allowlist)"
    );
}

#[test]
fn prompt_cuts_the_longest_preview_first() {
    let long: String = (0..200).map(|i| format!("echo {i}\n")).collect();
    let calls = [
        call("run_command", json!({"command": "ls -la"})),
        call("run_command", json!({"command": long})),
        call("create", json!({"path": "a.txt", "file_text": "hello\n"})),
    ];
    let full = approval_prompt(&calls, 0, BIG);
    assert!(full.chars().count() > 500);
    let p = approval_prompt(&calls, 0, 300);
    assert!(p.chars().count() <= 300, "{}", p.chars().count());
    assert!(
        p.chars().count() > 250,
        "the room is used: {}",
        p.chars().count()
    );
    // The short previews are whole; the long one is cut inside its block.
    assert!(p.contains("1. run_command\n```\nls -la\n```\n\n2. run_command\n```\necho 0\n"));
    assert!(
        p.contains("…\n```\n\n3. create a.txt (1 line)\n```\nhello\n```"),
        "{p}"
    );
}

#[test]
fn prompt_keeps_every_title_when_space_is_short() {
    let calls: Vec<ToolCall> = (0..5)
        .map(|i| {
            call(
                "run_command",
                json!({"command": format!("make target{i}\nmore")}),
            )
        })
        .collect();
    let p = approval_prompt(&calls, 2, 200);
    assert!(p.chars().count() <= 200);
    for i in 1..=5 {
        assert!(p.contains(&format!("{i}. run_command")), "{p}");
    }
    assert!(p.ends_with("(2 more calls were allowed by the allowlist)"));
    // Even titles are cut (the longest first) rather than dropped.
    let calls: Vec<ToolCall> = (0..4)
        .map(|i| {
            call(
                "web_fetch",
                json!({"url": format!("https://{}/{i}", "x".repeat(40 * i))}),
            )
        })
        .collect();
    let p = approval_prompt(&calls, 0, 180);
    assert!(p.chars().count() <= 180, "{}", p.chars().count());
    assert!(p.contains("1. web_fetch: https:///0\n"), "{p}");
    for i in 2..=4 {
        assert!(p.contains(&format!("{i}. web_fetch: https://x")), "{p}");
    }
}

#[test]
fn prompt_never_exceeds_the_limit() {
    let calls = vec![
        call(
            "run_command",
            json!({"command": "a\nb\nc".repeat(30), "host": "h"}),
        ),
        call(
            "create",
            json!({"path": "p".repeat(50), "file_text": "l\n".repeat(40)}),
        ),
        call(
            "str_replace",
            json!({"path": "q", "old_str": "o\n".repeat(30), "new_str": "n\n".repeat(30)}),
        ),
        call(
            "view",
            json!({"path": "v", "view_range": [1, 9], "grep": "g"}),
        ),
        acp_call("edit", json!({"path": "e"}), Some(json!({"title": "Edit"}))),
        call("mystery", json!({"z": {"deep": [1, 2, 3]}})),
    ];
    for max in 0..700 {
        for n in [1, 2, calls.len()] {
            let p = approval_prompt(&calls[..n], max % 3, max);
            assert!(p.chars().count() <= max, "max {max}, n {n}: {p}");
        }
        for c in &calls {
            assert!(preview_call(c, max).chars().count() <= max);
        }
    }
}

#[test]
fn water_level_cuts_the_largest_first() {
    assert_eq!(water_level(&[1, 2, 3], 10), usize::MAX);
    assert_eq!(water_level(&[10, 100], 50), 40);
    assert_eq!(water_level(&[10, 100, 100], 50), 20);
    assert_eq!(water_level(&[5, 5], 0), 0);
    assert_eq!(water_level(&[], 0), usize::MAX);
}
