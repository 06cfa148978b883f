//! Property tests of the bundle and policies parsers: the files are written by people,
//! so any text must give a bundle that keeps every promise of the validation, or an error
//! that says something, and never a panic.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;

use super::*;

const AGENTS: &[&str] = &["claude"];

fn known_agents() -> Vec<String> {
    AGENTS.iter().map(|a| a.to_string()).collect()
}

fn parse(text: &str) -> Result<Bundle, String> {
    parse_bundle(
        "dev",
        text,
        Path::new("/b"),
        &Policies::default(),
        &known_agents(),
    )
}

/// A TOML value as people write them, right and wrong.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "1",
            "2",
            "0",
            "-1",
            "750",
            "true",
            "\"\"",
            "\" \"",
            "\"x\"",
            "'builder'",
            "\"tester\"",
            "\"1a\"",
            "\"/src/app\"",
            "\"work\"",
            "\"claude\"",
            "\"gemini\"",
            "\"builtin\"",
            "\"peer\"",
            "\"operator\"",
            "\"boss\"",
            "\"read-only\"",
            "\"workspace-write\"",
            "\"^> \"",
            "\"(\"",
            "\"telegram:111\"",
            "\":\"",
            "\"self\"",
            "\"all\"",
            "\"none\"",
            "[]",
            "[\"a\"]",
            "{ A = \"1\" }",
            "{ \"=\" = \"1\" }",
            "\"a\\\"b\"",
            "'''multi\nline'''",
            "1979-05-27",
            "inf",
            "nan",
            "\"é✓\"",
        ])
        .prop_map(str::to_string),
        "[a-zA-Z0-9_ -]{0,12}".prop_map(|s| format!("{s:?}")),
        "[^\n]{0,12}",
    ]
}

fn key() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "format-version",
        "notify",
        "id",
        "name",
        "directory",
        "policy",
        "command",
        "prompt_regex",
        "quiet_window_ms",
        "env",
        "agent",
        "backend",
        "model",
        "permission_mode",
        "default",
        "list",
        "send",
        "look",
        "colour",
    ])
}

/// A line of a bundle or policies file: a table header, `key = value`, or junk.
fn line() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => prop::sample::select(vec![
            "[[members]]", "[members.tmux]", "[members.acp]", "[members.session]",
            "[members.tmux.env]", "[[policies]]", "[[principals]]", "[members]", "[[members",
            "", "# comment",
        ])
        .prop_map(str::to_string),
        6 => (key(), value()).prop_map(|(k, v)| format!("{k} = {v}")),
        1 => "[^\n]{0,20}",
    ]
}

fn tomlish() -> impl Strategy<Value = String> {
    (any::<bool>(), prop::collection::vec(line(), 0..24)).prop_map(|(versioned, lines)| {
        let head = if versioned {
            "format-version = 1\n"
        } else {
            ""
        };
        format!("{head}{}", lines.join("\n"))
    })
}

/// What every accepted bundle promises.
fn check_bundle(b: &Bundle) -> Result<(), TestCaseError> {
    prop_assert!(!b.members.is_empty());
    let mut ids = HashSet::new();
    let mut names = HashSet::new();
    for m in &b.members {
        prop_assert!(valid_id(&m.id), "{:?}", m.id);
        prop_assert!(ids.insert(m.id.clone()), "{} twice", m.id);
        prop_assert!(names.insert(m.name.clone()), "{} twice", m.name);
        prop_assert!(!m.name.trim().is_empty());
        prop_assert!(m.directory.is_absolute(), "{:?}", m.directory);
        prop_assert!(b.policies.get(&m.policy).is_some(), "{}", m.policy);
        match &m.transport {
            Transport::Tmux(t) => {
                prop_assert!(!t.command.trim().is_empty());
                prop_assert!(t.quiet_window_ms != Some(0));
                prop_assert!(t.env.keys().all(|k| !k.is_empty() && !k.contains('=')));
            }
            Transport::Acp(a) => prop_assert!(AGENTS.contains(&a.agent.as_str())),
            Transport::Session(s) => prop_assert!(
                s.backend
                    .as_deref()
                    .is_none_or(|b| b == "builtin" || AGENTS.contains(&b))
            ),
        }
    }
    if let Some((channel, chat)) = &b.notify {
        prop_assert!(!channel.is_empty() && !chat.is_empty());
        prop_assert_eq!(channel.trim(), channel.as_str());
    }
    Ok(())
}

/// A member of the documented shape, as TOML, and what it must parse to.
fn members() -> impl Strategy<Value = Vec<(String, Option<String>, String, u8)>> {
    prop::collection::vec(
        (
            "[a-zA-Z][a-zA-Z0-9_-]{0,30}",
            prop::option::of("[a-zA-Z][a-zA-Z ]{0,10}"),
            prop_oneof![Just("/src/app".to_string()), "[a-z]{1,8}"],
            0u8..3,
        ),
        1..5,
    )
    .prop_map(|mut v| {
        // ids and display names are unique in a valid bundle
        let mut seen = HashSet::new();
        v.retain(|(id, name, _, _)| {
            seen.insert(id.clone()) && seen.insert(format!("name:{}", name.as_ref().unwrap_or(id)))
        });
        v
    })
    .prop_filter("at least one member", |v| !v.is_empty())
}

fn member_toml(id: &str, name: &Option<String>, dir: &str, transport: u8) -> String {
    let mut s = format!("[[members]]\nid = {id:?}\ndirectory = {dir:?}\n");
    if let Some(n) = name {
        s.push_str(&format!("name = {n:?}\n"));
    }
    s.push_str(match transport {
        0 => "[members.tmux]\ncommand = \"claude\"\nquiet_window_ms = 750\n",
        1 => "[members.acp]\nagent = \"claude\"\n",
        _ => "[members.session]\nbackend = \"builtin\"\n",
    });
    s
}

/// A valid bundle with a few lines deleted, replaced or inserted (a header, a `key =
/// value` of the real keys, junk): mostly near misses, now and then still valid.
fn mutated() -> impl Strategy<Value = String> {
    (
        members(),
        prop::collection::vec((any::<usize>(), 0u8..3, line()), 0..4),
    )
        .prop_map(|(members, edits)| {
            let mut text = String::from("format-version = 1\n");
            for (id, name, dir, t) in &members {
                text.push_str(&member_toml(id, name, dir, *t));
            }
            let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
            for (at, op, line) in edits {
                let i = at % (lines.len() + 1);
                match op {
                    0 if i < lines.len() => {
                        lines.remove(i);
                    }
                    1 if i < lines.len() => lines[i] = line,
                    _ => lines.insert(i, line),
                }
            }
            lines.join("\n")
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any text: no panic; a bundle keeps every promise of the validation; a refusal says
    /// something. The same for `policies.toml`.
    #[test]
    fn any_text_is_a_valid_bundle_or_a_reason(text in prop_oneof![any::<String>(), tomlish(), mutated()]) {
        match parse(&text) {
            Ok(b) => check_bundle(&b)?,
            Err(e) => prop_assert!(!e.trim().is_empty()),
        }
        match parse_policies(&text) {
            Ok(p) => {
                prop_assert!(p.get(&p.default).is_some());
                for pr in p.principals.values() {
                    prop_assert!(valid_id(&pr.id));
                    prop_assert!(p.get(p.principal_policy(pr)).is_some());
                }
            }
            Err(e) => prop_assert!(!e.trim().is_empty()),
        }
    }

    /// A bundle of the documented shape parses to exactly its members; an unknown key or
    /// a bad id added to it is refused, naming it.
    #[test]
    fn a_documented_bundle_parses_exactly(members in members(), notify in prop::option::of("[a-z]{1,8}:[0-9]{1,9}")) {
        let mut text = String::from("format-version = 1\n");
        if let Some(n) = &notify {
            text.push_str(&format!("notify = {n:?}\n"));
        }
        for (id, name, dir, t) in &members {
            text.push_str(&member_toml(id, name, dir, *t));
        }
        let b = parse(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        check_bundle(&b)?;
        prop_assert_eq!(b.members.len(), members.len());
        for (m, (id, name, dir, t)) in b.members.iter().zip(&members) {
            prop_assert_eq!(&m.id, id);
            prop_assert_eq!(&m.name, name.as_ref().unwrap_or(id));
            prop_assert_eq!(&m.directory, &Path::new("/b").join(dir));
            prop_assert_eq!(m.policy.as_str(), "peer");
            let kind = [TransportKind::Tmux, TransportKind::Acp, TransportKind::Session][*t as usize];
            prop_assert_eq!(m.transport.kind(), kind);
        }
        prop_assert_eq!(
            b.notify,
            notify.as_deref().and_then(|n| n.split_once(':')).map(|(c, t)| (c.to_string(), t.to_string()))
        );

        let e = parse(&format!("{text}colour = 1\n")).unwrap_err();
        prop_assert!(e.contains("colour"), "{}", e);
        let e = parse(&format!("{text}{}", member_toml("9bad", &None, "/x", 1))).unwrap_err();
        prop_assert!(e.contains("9bad") && e.contains("not valid"), "{}", e);
        let (id, _, _, _) = &members[0];
        let e = parse(&format!("{text}{}", member_toml(id, &Some("Other Name".into()), "/x", 1))).unwrap_err();
        prop_assert!(e.contains("defined twice"), "{}", e);
    }
}
