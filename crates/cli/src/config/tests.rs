use super::*;

#[test]
fn one_rate_limit_policy_reaches_every_channel() {
    // (env vars named SWITCHBOARD_GATEWAY_RATE_LIMIT_* are not set in tests)
    let file = parse_config(
        "[gateway]\nrate_limit_max_wait_secs = 5\nrate_limit_over_cap = \"wait\"\n\
         [channels.webhook.ops]\nsecret = \"0123456789abcdef\"\nurl = \"https://example.com/h\"\n",
        Path::new("s.toml"),
    )
    .unwrap();
    let g = gateway_settings(&file).unwrap().unwrap();
    let w = &g.webhooks[0];
    assert_eq!(w.max_retry_after, std::time::Duration::from_secs(5));
    assert_eq!(w.over_cap, switchboard_gateway::platform::OverCap::Wait);
    let bad = parse_config(
        "[gateway]\nrate_limit_over_cap = \"sometimes\"\n[channels.webhook.ops]\nsecret = \"0123456789abcdef\"\nurl = \"https://example.com/h\"\n",
        Path::new("s.toml"),
    )
    .unwrap();
    let err = gateway_settings(&bad).err().unwrap().to_string();
    assert!(
        err.contains("rate_limit_over_cap") && err.contains("sometimes"),
        "{err}"
    );
}

#[test]
fn history_limits_default_and_zero_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.toml");
    std::fs::write(&path, "").unwrap();
    let s = Settings::load(Some(&path), Some(&dir.path().join("data")), None).unwrap();
    assert_eq!(s.history, switchboard_engine::HistoryLimits::default());
    std::fs::write(&path, "[sessions]\nhistory_max_chars = 0\n").unwrap();
    let e = Settings::load(Some(&path), Some(&dir.path().join("data")), None)
        .err()
        .expect("a zero budget is refused");
    assert!(format!("{e:#}").contains("history_max_chars"), "{e:#}");
}

#[test]
fn live_buffer_default_file_and_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.toml");
    let data = dir.path().join("data");
    std::fs::write(&path, "").unwrap();
    let s = Settings::load(Some(&path), Some(&data), None).unwrap();
    assert_eq!(s.live_buffer, 256);
    std::fs::write(&path, "[events]\nlive_buffer = 64\n").unwrap();
    let s = Settings::load(Some(&path), Some(&data), None).unwrap();
    assert_eq!(s.live_buffer, 64);
    for bad in ["0", "15", "65537"] {
        std::fs::write(&path, format!("[events]\nlive_buffer = {bad}\n")).unwrap();
        let e = Settings::load(Some(&path), Some(&data), None)
            .err()
            .expect("out of bounds is refused");
        assert!(
            format!("{e:#}").contains("live_buffer") && format!("{e:#}").contains("16 and 65536"),
            "{e:#}"
        );
    }
}

#[test]
fn unknown_keys_are_named() {
    let err = parse_config("[provider]\nmodle = \"x\"\n", Path::new("s.toml"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("modle"), "{err}");
}

#[test]
fn a_file_key_never_goes_to_the_other_provider() {
    let file = ProviderSection {
        kind: None,
        base_url: Some("https://openrouter.ai/api/v1".into()),
        api_key: Some("sk-or-file".into()),
        ..ProviderSection::default()
    };
    let ant = |k: &str| (k == "ANTHROPIC_API_KEY").then(|| "sk-ant-env".to_string());
    assert_eq!(
        endpoint(true, &file, &ant),
        (
            "https://api.anthropic.com".into(),
            Some("sk-ant-env".into())
        )
    );
    let none = |_: &str| None;
    assert_eq!(
        endpoint(true, &file, &none),
        ("https://api.anthropic.com".into(), None)
    );
    assert_eq!(
        endpoint(false, &file, &none),
        (
            "https://openrouter.ai/api/v1".into(),
            Some("sk-or-file".into())
        )
    );
    let anthropic_file = ProviderSection {
        kind: Some("anthropic".into()),
        api_key: Some("sk-ant-file".into()),
        ..ProviderSection::default()
    };
    assert_eq!(endpoint(false, &anthropic_file, &none).1, None);
    assert_eq!(
        endpoint(true, &anthropic_file, &none).1,
        Some("sk-ant-file".into())
    );
}

#[test]
fn agents_parse_and_bad_ones_are_named() {
    let c = parse_config(
        "[agents.claude]\ncommand = \"claude-code-acp\"\nargs = [\"--x\"]\nenv = { A = \"1\" }\n",
        Path::new("s.toml"),
    )
    .unwrap();
    let a = &c.agents["claude"];
    assert_eq!(
        (a.command.as_str(), a.args.len(), a.env["A"].as_str()),
        ("claude-code-acp", 1, "1")
    );
    assert!(
        a.switchboard_mcp,
        "Switchboard's MCP server is on by default"
    );
    let off = parse_config(
        "[agents.x]\ncommand = \"x\"\nswitchboard_mcp = false\n",
        Path::new("s.toml"),
    )
    .unwrap();
    assert!(!off.agents["x"].switchboard_mcp);
    assert!(validate_agents(&c.agents).is_ok());
    let bad = parse_config("[agents.\"a b\"]\ncommand = \"x\"\n", Path::new("s.toml")).unwrap();
    assert!(
        validate_agents(&bad.agents)
            .unwrap_err()
            .to_string()
            .contains("a b")
    );
    let err = parse_config("[agents.x]\ncmd = \"x\"\n", Path::new("s.toml")).unwrap_err();
    assert!(err.to_string().contains("cmd"), "{err}");
}

#[test]
fn an_a2a_agent_is_a_url_with_credentials_and_nothing_of_a_command() {
    let parse = |t: &str| parse_config(t, Path::new("s.toml")).unwrap().agents;
    let ok = parse(
        "[agents.r]\na2a = \"https://a.example/r\"\ntoken = \"t\"\nheaders = { X-Key = \"k\" }\n",
    );
    assert!(validate_agents(&ok).is_ok());
    assert_eq!(ok["r"].a2a.as_deref(), Some("https://a.example/r"));
    for (text, says) in [
        ("[agents.r]\n", "give `command`"),
        (
            "[agents.r]\ncommand = \"x\"\na2a = \"https://a\"\n",
            "both given",
        ),
        ("[agents.r]\na2a = \"ftp://a\"\n", "http(s) URL"),
        (
            "[agents.r]\na2a = \"https://a\"\nargs = [\"-x\"]\n",
            "`args` and `env`",
        ),
        (
            "[agents.r]\ncommand = \"x\"\ntoken = \"t\"\n",
            "for an A2A agent",
        ),
        (
            "[agents.r]\na2a = \"https://a\"\nheaders = { \"bad name\" = \"v\" }\n",
            "not a valid header",
        ),
    ] {
        let e = validate_agents(&parse(text)).unwrap_err().to_string();
        assert!(e.contains(says) && e.contains("[agents.r]"), "{text}: {e}");
    }
}

#[test]
fn full_file_parses() {
    let c = parse_config(
        "listen = \"127.0.0.1:1\"\n[provider]\nbase_url = \"http://x/v1\"\nmodel = \"m\"\n[events]\nretention_days = 3\n",
        Path::new("s.toml"),
    )
    .unwrap();
    assert_eq!(c.provider.model.as_deref(), Some("m"));
    assert_eq!(c.events.retention_days, Some(3));
}

/// Property tests of `switchboard.toml` reading: the file is written by people, so any
/// text must load as settings or fail with a message, and never panic.
mod prop_tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use proptest::prelude::*;

    /// A value of a kind, right and wrong.
    fn value(kind: &'static str) -> BoxedStrategy<String> {
        let pick = |v: Vec<&'static str>| prop::sample::select(v).prop_map(str::to_string).boxed();
        let right = match kind {
            "str" => pick(vec![
                "\"x\"",
                "\"\"",
                "\" \"",
                "\"1:abc\"",
                "\"0123456789abcdef\"",
                "\"é✓\"",
            ]),
            "url" => pick(vec![
                "\"https://example.com/h\"",
                "\"http://127.0.0.1:9\"",
                "\"ftp://x\"",
                "\"\"",
                "\"sqlite:///tmp/x.db\"",
                "\"postgres://u:p@h/db\"",
            ]),
            "u64" => pick(vec![
                "0",
                "1",
                "5",
                "50",
                "60000",
                "18446744073709551615",
                "4294967296",
            ]),
            "bool" => pick(vec!["true", "false"]),
            "strs" => pick(vec![
                "[]",
                "[\"a\"]",
                "[\"image/*\", \"text/plain\"]",
                "[\"*/x\"]",
                "[\" \"]",
                "[\"a\\nb\"]",
            ]),
            "mode" => pick(vec![
                "\"read-only\"",
                "\"workspace-write\"",
                "\"full-access\"",
                "\"sometimes\"",
            ]),
            "path" => pick(vec!["\"/tmp/x\"", "\"rel\"", "\"\""]),
            "kind" => pick(vec!["\"openai\"", "\"anthropic\"", "\"gpt\""]),
            "approval" => pick(vec![
                "\"buttons\"",
                "\"auto\"",
                "\"wait\"",
                "\"deny\"",
                "\"x\"",
            ]),
            "over_cap" => pick(vec!["\"wait\"", "\"fail\"", "\"sometimes\""]),
            _ => pick(vec!["\"?\""]),
        };
        prop_oneof![
            30 => right,
            1 => pick(vec!["-1", "1.5", "\"5\"", "[1]", "{ a = 1 }", "true", "nan", "1979-05-27"]),
            1 => "[^\n]{0,10}".boxed(),
        ]
        .boxed()
    }

    /// The sections of `switchboard.toml` and some of their keys with their kinds.
    const SECTIONS: &[(&str, &[(&str, &str)])] = &[
        (
            "",
            &[("listen", "str"), ("data_dir", "path"), ("token", "str")],
        ),
        (
            "provider",
            &[
                ("kind", "kind"),
                ("base_url", "url"),
                ("api_key", "str"),
                ("model", "str"),
                ("max_retries", "u64"),
                ("system_prompt", "str"),
                ("max_tokens", "u64"),
                ("image_fallback", "bool"),
            ],
        ),
        (
            "sessions",
            &[
                ("default_cwd", "path"),
                ("permission_mode", "mode"),
                ("approval_timeout_secs", "u64"),
                ("history_max_messages", "u64"),
                ("history_max_chars", "u64"),
            ],
        ),
        (
            "tools",
            &[
                ("command_timeout_secs", "u64"),
                ("command_max_timeout_secs", "u64"),
                ("output_cap_chars", "u64"),
            ],
        ),
        (
            "events",
            &[("retention_days", "u64"), ("keepalive_secs", "u64")],
        ),
        (
            "server",
            &[
                ("max_body_bytes", "u64"),
                ("allowed_hosts", "strs"),
                ("chat_completions_approvals", "approval"),
            ],
        ),
        (
            "agents.claude",
            &[
                ("command", "str"),
                ("args", "strs"),
                ("switchboard_mcp", "bool"),
            ],
        ),
        ("agents.\"a b\"", &[("command", "str")]),
        (
            "gateway",
            &[
                ("enabled", "bool"),
                ("approval_mode", "approval"),
                ("allowlist", "strs"),
                ("run_timeout_secs", "u64"),
                ("rate_limit_max_wait_secs", "u64"),
                ("rate_limit_over_cap", "over_cap"),
                ("session_permission_mode", "mode"),
            ],
        ),
        (
            "channels.telegram",
            &[
                ("token", "str"),
                ("base_url", "url"),
                ("allowed_chats", "strs"),
                ("approvers", "strs"),
                ("approval_mode", "approval"),
                ("require_mention", "bool"),
                ("webhook_url", "url"),
                ("webhook_secret", "str"),
            ],
        ),
        (
            "channels.webhook.ops",
            &[
                ("secret", "str"),
                ("url", "url"),
                ("approval_mode", "approval"),
            ],
        ),
        (
            "relay",
            &[
                ("bundles_dir", "path"),
                ("audit_bodies", "bool"),
                ("queue_capacity", "u64"),
                ("max_hops", "u64"),
            ],
        ),
        (
            "scheduler",
            &[
                ("grace_secs", "u64"),
                ("retry_base_secs", "u64"),
                ("max_attempts", "u64"),
                ("tick_ms", "u64"),
            ],
        ),
        ("store", &[("url", "url"), ("lease_ms", "u64")]),
        (
            "files",
            &[
                ("max_file_mb", "u64"),
                ("max_message_mb", "u64"),
                ("allowed_types", "strs"),
            ],
        ),
        (
            "speech",
            &[("base_url", "url"), ("model", "str"), ("api_key", "str")],
        ),
        (
            "checkpoints",
            &[
                ("enabled", "bool"),
                ("dir", "path"),
                ("exclude", "strs"),
                ("max_files", "u64"),
                ("max_file_mb", "u64"),
                ("watch", "bool"),
            ],
        ),
        (
            "mcp.servers.fs",
            &[("command", "str"), ("args", "strs"), ("url", "url")],
        ),
    ];

    /// One section: its header and some of its keys, each once (now and then one it does
    /// not have).
    fn section(
        name: &'static str,
        keys: &'static [(&'static str, &'static str)],
    ) -> BoxedStrategy<String> {
        let lines: Vec<BoxedStrategy<String>> = keys
            .iter()
            .map(|&(k, kind)| value(kind).prop_map(move |v| format!("{k} = {v}")).boxed())
            .collect();
        (
            prop::sample::subsequence((0..lines.len()).collect::<Vec<_>>(), 0..=lines.len()),
            lines,
            prop::bool::weighted(0.05),
        )
            .prop_map(move |(pick, lines, unknown)| {
                let mut out: Vec<String> = pick.into_iter().map(|i| lines[i].clone()).collect();
                if unknown {
                    out.push("colour = 1".into());
                }
                let head = if name.is_empty() {
                    String::new()
                } else {
                    format!("[{name}]\n")
                };
                format!("{head}{}\n", out.join("\n"))
            })
            .boxed()
    }

    /// A file: some of the sections, each once, the top-level keys first (TOML puts them
    /// before any table).
    fn files() -> impl Strategy<Value = String> {
        let all: Vec<BoxedStrategy<String>> = SECTIONS
            .iter()
            .map(|&(name, keys)| section(name, keys))
            .collect();
        prop_oneof![
            1 => any::<String>(),
            1 => "[\\[\\]a-z_.= \"0-9\n]{0,60}",
            8 => (prop::sample::subsequence((0..all.len()).collect::<Vec<_>>(), 0..7), all)
                .prop_map(|(pick, all)| pick.into_iter().map(|i| all[i].clone()).collect::<String>()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// Any text: no panic; a file that does not parse is an error naming the file, and
        /// loading it fails with that message; one that parses loads as settings that keep
        /// the documented floors, or fails with a message.
        #[test]
        fn any_file_loads_or_fails_with_a_message(text in files()) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("s.toml");
            std::fs::write(&path, &text).unwrap();
            let parsed = parse_config(&text, &path);
            let loaded = Settings::load(Some(&path), Some(&dir.path().join("data")), None);
            match (parsed, loaded) {
                (Err(e), loaded) => {
                    let e = e.to_string();
                    prop_assert!(e.starts_with(&format!("config file {}: ", path.display())), "{}", e);
                    let l = loaded.err().map(|l| l.to_string());
                    prop_assert_eq!(l.as_deref(), Some(e.as_str()));
                }
                (Ok(_), Err(e)) => prop_assert!(!e.to_string().trim().is_empty()),
                (Ok(file), Ok(s)) => {
                    prop_assert!(s.approval_timeout_secs >= 1);
                    prop_assert!(s.command_timeout_secs >= 1 && s.command_timeout_secs <= s.command_max_timeout_secs);
                    prop_assert!((50..=60_000).contains(&s.scheduler.tick_ms));
                    prop_assert!(s.relay.queue_capacity >= 1);
                    prop_assert!(s.files.max_file_bytes >= 1);
                    prop_assert!(s.checkpoints.max_files >= 1);
                    prop_assert!(s.agents.keys().all(|n| !n.is_empty() && !n.contains(' ')));
                    prop_assert_eq!(s.model, file.provider.model);
                    prop_assert_eq!(s.config_path.as_deref(), Some(path.as_path()));
                }
            }
        }

        /// A file of plain, valid values loads exactly those values (floors applied).
        #[test]
        fn valid_values_load_exactly(
            model in "[a-z0-9.-]{1,12}",
            retries in 0u32..10,
            approval in 1u64..100_000,
            history_messages in 1u32..100_000,
            history_chars in 1u64..10_000_000,
            tick in any::<u32>(),
            queue in 0usize..1000,
            types in prop::collection::vec("[a-z]{1,6}/([a-z]{1,6}|\\*)", 0..3),
        ) {
            let text = format!(
                "[provider]\nmodel = {model:?}\nmax_retries = {retries}\n\
                 [sessions]\napproval_timeout_secs = {approval}\n\
                 history_max_messages = {history_messages}\nhistory_max_chars = {history_chars}\n\
                 [scheduler]\ntick_ms = {tick}\n[relay]\nqueue_capacity = {queue}\n\
                 [files]\nallowed_types = {types:?}\n"
            );
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("s.toml");
            std::fs::write(&path, &text).unwrap();
            let s = Settings::load(Some(&path), Some(&dir.path().join("data")), None)
                .map_err(|e| TestCaseError::fail(format!("{e:#}\n{text}")))?;
            prop_assert_eq!(s.model.as_deref(), Some(model.as_str()));
            prop_assert_eq!(s.max_retries, retries);
            prop_assert_eq!(s.approval_timeout_secs, approval);
            prop_assert_eq!(s.history.max_messages, history_messages);
            prop_assert_eq!(s.history.max_chars, history_chars);
            prop_assert_eq!(s.scheduler.tick_ms, u64::from(tick).clamp(50, 60_000));
            prop_assert_eq!(s.relay.queue_capacity, queue.max(1));
            prop_assert_eq!(s.files.allowed_types, types);
        }
    }
}

#[test]
fn the_secrets_file_is_merged_over_the_config_file_key_by_key() {
    let file = read_layers(
        "[provider]\nkind = \"openai\"\nmodel = \"m\"\napi_key = \"in-the-toml\"\n",
        Path::new("s.toml"),
        Some("[provider]\napi_key = \"sk-secret\"\n[channels.telegram]\ntoken = \"1:t\"\n"),
        Path::new("secrets.toml"),
    )
    .unwrap();
    assert_eq!(file.provider.model.as_deref(), Some("m"));
    assert_eq!(file.provider.api_key.as_deref(), Some("sk-secret"));
    assert_eq!(
        file.channels.telegram.and_then(|t| t.token).as_deref(),
        Some("1:t")
    );
    // A typo in the secrets file is named like one in the config file.
    let err = read_layers(
        "",
        Path::new("s.toml"),
        Some("[provider]\napi_kee = \"x\"\n"),
        Path::new("secrets.toml"),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("secrets.toml") && err.contains("api_kee"),
        "{err}"
    );
}

#[test]
fn an_error_in_the_secrets_file_never_shows_a_secret() {
    let bad_toml = read_layers(
        "",
        Path::new("s.toml"),
        Some("[provider]\napi_key = \"sk-leak-me\n"),
        Path::new("secrets.toml"),
    )
    .unwrap_err()
    .to_string();
    assert!(!bad_toml.contains("sk-leak-me"), "{bad_toml}");
    assert!(bad_toml.contains("line 2"), "{bad_toml}");
    let bad_type = read_layers(
        "",
        Path::new("s.toml"),
        Some("[channels]\ntelegram = \"123:leak\"\n"),
        Path::new("secrets.toml"),
    )
    .unwrap_err()
    .to_string();
    assert!(!bad_type.contains("123:leak"), "{bad_type}");
    // The configuration file's own errors keep their place.
    let in_config = read_layers(
        "[provider]\nmodle = \"x\"\n",
        Path::new("s.toml"),
        Some(""),
        Path::new("secrets.toml"),
    )
    .unwrap_err()
    .to_string();
    assert!(
        in_config.contains("modle") && in_config.contains("line 2"),
        "{in_config}"
    );
}
