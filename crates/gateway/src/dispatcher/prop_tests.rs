//! Property tests of what the dispatcher reads from chat text and button data: slash
//! commands (`/new`, `/stop@bot`, …), `/schedule`'s words, and approval button data. All
//! of it is typed (or forged) by whoever is in the chat.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;

use super::approvals::parse_button;
use super::commands::{Command, command};
use super::schedules::{args, schedule_spec};

const COMMANDS: &[(&str, Command)] = &[
    ("new", Command::New),
    ("stop", Command::Stop),
    ("status", Command::Status),
    ("diff", Command::Diff),
    ("undo", Command::Undo),
    ("schedule", Command::Schedule),
    ("schedules", Command::Schedules),
    ("unschedule", Command::Unschedule),
    ("usage", Command::Usage),
    ("search", Command::Search),
    ("archive", Command::Archive),
    ("title", Command::Title),
    ("rename", Command::Title),
    ("link", Command::Link),
    ("allow", Command::Allow),
    ("deny", Command::Deny),
];

/// Whitespace of several kinds (what `split_whitespace` splits on).
fn ws() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec![" ", "\t", "\n", "\u{a0}", "\u{3000}"]),
        1..3,
    )
    .prop_map(|v| v.concat())
}

/// Chat text that looks like commands, and text that does not.
fn texts() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => any::<String>(),
        2 => any::<String>().prop_map(|s| format!("/{s}")),
        2 => "[ /@a-z\u{e9}\u{1f642}\t\n]{0,24}",
        2 => (prop::sample::select(COMMANDS), "(@[^ ]{0,8})?", "( [^\u{0}]{0,20})?")
            .prop_map(|((name, _), at, rest)| format!("/{name}{at}{rest}")),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any text: no panic; a command only when the first word is `/NAME` or `/NAME@…` of
    /// a known name, and then that one.
    #[test]
    fn any_text_is_a_known_command_or_none(text in texts()) {
        let got = command(&text);
        let first = text.split_whitespace().next().unwrap_or_default();
        let want = first
            .strip_prefix('/')
            .map(|n| n.split('@').next().unwrap_or_default())
            .and_then(|n| COMMANDS.iter().find(|(name, _)| *name == n).map(|(_, c)| *c));
        prop_assert_eq!(got, want, "{:?}", text);
        if got.is_some() {
            prop_assert!(text.trim_start().starts_with('/'));
        }
    }

    /// A known command is read whatever precedes it (whitespace), follows it (`@bot`,
    /// arguments) and however it is spaced; its arguments are what follows, trimmed.
    #[test]
    fn a_known_command_is_read_with_its_arguments(
        (name, want) in prop::sample::select(COMMANDS),
        lead in prop_oneof![Just(String::new()), ws()],
        at in prop_oneof![Just(String::new()), "@[a-zA-Z_0-9]{0,12}", "@[^\\s]{0,8}"],
        gap in ws(),
        rest in any::<String>(),
    ) {
        let text = format!("{lead}/{name}{at}{gap}{rest}");
        prop_assert_eq!(command(&text), Some(want));
        prop_assert_eq!(command(&format!("{lead}/{name}{at}")), Some(want));
        prop_assert_eq!(args(&text), rest.trim());
        // one letter more or less is no command (and no other one)
        prop_assert_eq!(command(&format!("/{name}x{gap}{rest}")), None);
        prop_assert_eq!(command(&format!("{name}{gap}{rest}")), None);
    }

    /// `/schedule`'s words, any of them: no panic; an answer is a spec with exactly one
    /// trigger, the target, and a trimmed non-empty prompt; a refusal says something.
    #[test]
    fn any_schedule_words_are_a_spec_or_a_reason(
        words in prop_oneof![
            any::<String>(),
            (prop::sample::select(vec!["every", "in", "at", "cron", "EVERY", "Cron", "x"]), "[ a-z0-9*/\u{e9}\t]{0,30}")
                .prop_map(|(k, rest)| format!("{k} {rest}")),
        ],
        target in "[a-z]{1,8}:[0-9]{1,6}",
    ) {
        match schedule_spec(&words, &target) {
            Ok(spec) => {
                let triggers = [&spec.every, &spec.in_, &spec.at, &spec.cron]
                    .iter()
                    .filter(|t| t.is_some())
                    .count();
                prop_assert_eq!(triggers, 1, "{:?}", spec);
                prop_assert_eq!(&spec.deliver, &vec![target]);
                prop_assert!(!spec.prompt.is_empty());
                prop_assert_eq!(spec.prompt.trim(), spec.prompt.as_str());
                prop_assert!(spec.tz.is_none() || spec.cron.is_some());
                if let Some(cron) = &spec.cron {
                    prop_assert_eq!(cron.split(' ').count(), 5);
                }
            }
            Err(e) => prop_assert!(!e.trim().is_empty()),
        }
    }

    /// Well-formed `/schedule` words give exactly their parts.
    #[test]
    fn well_formed_schedule_words_are_read_exactly(
        kind in prop::sample::select(vec!["every", "in", "at"]),
        value in "[0-9a-zA-Z:.-]{1,20}",
        cron in prop::collection::vec("[0-9*/,-]{1,5}", 5),
        tz in prop::option::of(prop::sample::select(vec!["Europe/Berlin", "UTC", "utc", "America/New_York"])),
        gap in ws(),
        prompt in "[a-z][a-z /]{0,20}",
    ) {
        let s = schedule_spec(&format!("{kind}{gap}{value}{gap}{prompt}"), "x:1").unwrap();
        let got = match kind {
            "every" => s.every,
            "in" => s.in_,
            _ => s.at,
        };
        prop_assert_eq!(got.as_deref(), Some(value.as_str()));
        prop_assert_eq!(s.prompt.as_str(), prompt.trim());

        let tz_part = tz.map(|t| format!("{t}{gap}")).unwrap_or_default();
        let text = format!("cron{gap}{}{gap}{tz_part}{prompt}", cron.join(gap.as_str()));
        let got = schedule_spec(&text, "x:1");
        let first = prompt.split_whitespace().next().unwrap_or_default();
        let prompt_is_tz_like =
            first.contains('/') && !first.starts_with('/') || first.eq_ignore_ascii_case("utc");
        if tz.is_some() || !prompt_is_tz_like {
            let s = got.unwrap();
            prop_assert_eq!(s.cron, Some(cron.join(" ")));
            prop_assert_eq!(s.tz.as_deref(), tz);
            prop_assert_eq!(s.prompt.as_str(), prompt.trim());
        }
    }

    /// Button data, any of it: no panic; approval data round-trips whatever the id.
    #[test]
    fn button_data_of_any_shape(data in any::<String>(), id in any::<String>()) {
        if let Some((got, _)) = parse_button(&data) {
            prop_assert!(data.starts_with("ap:") && data.len() == got.len() + 5);
        }
        let (yes, no, other) = (format!("ap:{id}:y"), format!("ap:{id}:n"), format!("ap:{id}:yes"));
        prop_assert_eq!(parse_button(&yes), Some((id.as_str(), true)));
        prop_assert_eq!(parse_button(&no), Some((id.as_str(), false)));
        prop_assert_eq!(parse_button(&other), None);
    }
}
