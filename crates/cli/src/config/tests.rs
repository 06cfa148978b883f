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
fn full_file_parses() {
    let c = parse_config(
        "listen = \"127.0.0.1:1\"\n[provider]\nbase_url = \"http://x/v1\"\nmodel = \"m\"\n[events]\nretention_days = 3\n",
        Path::new("s.toml"),
    )
    .unwrap();
    assert_eq!(c.provider.model.as_deref(), Some("m"));
    assert_eq!(c.events.retention_days, Some(3));
}
