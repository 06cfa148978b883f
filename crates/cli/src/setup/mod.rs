//! `switchboard setup`: from nothing to a configured model (and a chat channel) without
//! editing a file. Asks in a terminal, or takes flags (`--yes` for no questions at all);
//! each answer is checked against the real thing — the provider lists its models, one
//! test call answers, a channel's token names its bot — before anything is written.
//! Running it again starts from what is there.

mod files;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use switchboard_agent::{ChatMessage, Provider};

use files::Files;

/// `switchboard setup`.
#[derive(clap::Args, Debug)]
pub struct SetupArgs {
    /// `openai`, `anthropic`, `openrouter`, `local` (a model server found on this machine),
    /// or the URL of any OpenAI-compatible server.
    #[arg(long)]
    provider: Option<String>,
    /// The provider's base URL, when not its usual one.
    #[arg(long)]
    base_url: Option<String>,
    /// Read the API key from the first line of standard input.
    #[arg(long)]
    api_key_stdin: bool,
    /// The model (default: the one configured, else the provider's first).
    #[arg(long)]
    model: Option<String>,
    /// Connect Telegram with this bot token (from @BotFather).
    #[arg(long, value_name = "TOKEN")]
    telegram_token: Option<String>,
    /// Connect Slack: the bot token (`xoxb-…`) …
    #[arg(long, value_name = "TOKEN", requires = "slack_app_token")]
    slack_bot_token: Option<String>,
    /// … and the app-level token (`xapp-…`, Socket Mode).
    #[arg(long, value_name = "TOKEN", requires = "slack_bot_token")]
    slack_app_token: Option<String>,
    /// Connect Discord with this bot token.
    #[arg(long, value_name = "TOKEN")]
    discord_token: Option<String>,
    /// Skip the test call to the model.
    #[arg(long)]
    no_test: bool,
    /// Ask nothing: what is not given by a flag keeps its configured value, or its default.
    #[arg(long, short = 'y')]
    yes: bool,
}

/// The provider chosen: how the configuration names it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Endpoint {
    /// `openai` or `anthropic` (the wire format).
    kind: &'static str,
    base_url: String,
    /// What to call it in messages.
    label: String,
}

const OPENAI_URL: &str = "https://api.openai.com/v1";
const ANTHROPIC_URL: &str = "https://api.anthropic.com";
const OPENROUTER_URL: &str = "https://openrouter.ai/api/v1";

/// A provider named on the command line or in the configuration (`local` needs `found`).
fn endpoint(name: &str, found: &[switchboard_agent::local::LocalServer]) -> Result<Endpoint> {
    let e = |kind, url: &str, label: &str| Endpoint {
        kind,
        base_url: url.to_string(),
        label: label.to_string(),
    };
    Ok(match name.trim() {
        "openai" => e("openai", OPENAI_URL, "OpenAI"),
        "anthropic" => e("anthropic", ANTHROPIC_URL, "Anthropic"),
        "openrouter" => e("openai", OPENROUTER_URL, "OpenRouter"),
        "local" => match found.first() {
            Some(s) => e("openai", &s.base_url, &s.name),
            None => bail!(
                "--provider local: no model server answers on this machine (looked for Ollama on 11434, LM Studio on 1234, llama.cpp on 8080, vLLM on 8000)"
            ),
        },
        url if url.starts_with("http://") || url.starts_with("https://") => {
            e("openai", url.trim_end_matches('/'), url)
        }
        other => bail!(
            "--provider {other:?}: expected openai, anthropic, openrouter, local or the URL of an OpenAI-compatible server"
        ),
    })
}

pub async fn run(config: Option<PathBuf>, args: SetupArgs) -> Result<ExitCode> {
    let config_path = config.unwrap_or_else(crate::config::default_config_path);
    let secrets_path = crate::config::secrets_path(Some(&config_path));
    let mut files = Files::read(config_path, secrets_path)?;
    let ask = !args.yes && std::io::stdin().is_terminal();
    let ports = switchboard_agent::local::ports(
        switchboard_settings::env("SWITCHBOARD_LOCAL_MODEL_PORTS").as_deref(),
    )
    .map_err(|e| anyhow::anyhow!("SWITCHBOARD_LOCAL_MODEL_PORTS: {e}"))?;
    let found = find_all(&ports).await;

    // The provider.
    let configured = files.get(&["provider", "kind"]).map(|kind| {
        let url = files.get(&["provider", "base_url"]);
        match (kind.as_str(), url) {
            ("anthropic", url) => Endpoint {
                kind: "anthropic",
                label: "Anthropic".into(),
                base_url: url.unwrap_or_else(|| ANTHROPIC_URL.into()),
            },
            (_, url) => {
                let base_url = url.unwrap_or_else(|| OPENAI_URL.into());
                Endpoint {
                    kind: "openai",
                    label: base_url.clone(),
                    base_url,
                }
            }
        }
    });
    let configured_url = configured.as_ref().map(|c| c.base_url.clone());
    let mut chosen = match (&args.provider, configured) {
        (Some(name), _) => endpoint(name, &found)?,
        (None, configured) if ask => prompt::provider(&found, configured)?,
        (None, Some(c)) => c,
        (None, None) => endpoint("local", &found).context(
            "no provider given: pass --provider (openai, anthropic, openrouter, local or a URL)",
        )?,
    };
    if let Some(url) = &args.base_url {
        chosen.base_url = url.trim_end_matches('/').to_string();
    }
    let is_local = found.iter().any(|s| s.base_url == chosen.base_url);

    // The key: asked without echo, or read from standard input; a local server needs none.
    // The configured key goes with the configured provider only.
    let kept_key = files
        .get_secret(&["provider", "api_key"])
        .filter(|_| configured_url.as_deref() == Some(chosen.base_url.as_str()));
    let key = if args.api_key_stdin {
        let mut line = String::new();
        std::io::stdin()
            .read_line(&mut line)
            .context("reading the API key from standard input")?;
        Some(line.trim().to_string()).filter(|k| !k.is_empty())
    } else if ask && !is_local {
        prompt::secret(&format!("API key for {}", chosen.label), kept_key.is_some())?.or(kept_key)
    } else {
        kept_key
    };

    // The models the key reaches.
    let provider =
        crate::serve::make_provider(chosen.kind, &chosen.base_url, key.clone(), 0, 1024)?;
    let models = provider.models().await.map_err(|e| {
        anyhow::anyhow!(
            "{} at {} did not list its models: {}",
            chosen.label,
            chosen.base_url,
            provider.redact(&e.to_string())
        )
    })?;
    println!(
        "{} at {} answers: {} models",
        chosen.label,
        chosen.base_url,
        models.len()
    );
    let kept_model = files.get(&["provider", "model"]);
    let model = match args.model {
        Some(m) => m,
        None if ask => prompt::model(&models, kept_model.as_deref())?,
        None => kept_model
            .filter(|m| models.contains(m))
            .or_else(|| models.first().cloned())
            .context("the provider lists no models: pass --model")?,
    };
    if !models.is_empty() && !models.contains(&model) {
        println!("note: {model:?} is not among the models the provider lists; using it anyway");
    }

    if !args.no_test {
        let answer = test_call(provider.as_ref(), &model).await?;
        println!("test call to {model}: {answer}");
    }
    files.set(&["provider", "kind"], chosen.kind);
    files.set(&["provider", "base_url"], &chosen.base_url);
    files.set(&["provider", "model"], &model);
    if let Some(k) = &key {
        files.set_secret(&["provider", "api_key"], k);
    }

    // Chat channels.
    let mut channels = Channels {
        telegram: args.telegram_token,
        slack: args.slack_bot_token.zip(args.slack_app_token),
        discord: args.discord_token,
    };
    if ask && channels.is_empty() {
        channels = prompt::channels()?;
    }
    channels.check_and_set(&mut files).await?;

    files.write()?;
    println!("wrote {}", files.config_path.display());
    if files.secrets_path.exists() {
        println!("secrets in {} (mode 0600)", files.secrets_path.display());
    }
    println!();
    println!("next: `switchboard serve`, then open the console link it prints");
    Ok(ExitCode::SUCCESS)
}

/// Every local server that lists a model, in the order of `ports`.
async fn find_all(ports: &[(String, u16)]) -> Vec<switchboard_agent::local::LocalServer> {
    let each = ports
        .iter()
        .map(|p| switchboard_agent::local::find(std::slice::from_ref(p)));
    futures::future::join_all(each)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// One short call to the model; its answer.
async fn test_call(provider: &dyn Provider, model: &str) -> Result<String> {
    struct Nothing;
    #[async_trait::async_trait]
    impl switchboard_agent::TextSink for Nothing {
        async fn text(&self, _: String) {}
    }
    let cancel = tokio_util::sync::CancellationToken::new();
    let messages = [ChatMessage::user("Say hello to a new Switchboard user.")];
    let call = provider.stream(
        model,
        "Answer in one short sentence.",
        &messages,
        &[],
        &cancel,
        &Nothing,
    );
    let done = tokio::time::timeout(std::time::Duration::from_secs(120), call)
        .await
        .context("the test call took over two minutes")?
        .map_err(|e| {
            anyhow::anyhow!("the test call failed: {}", provider.redact(&e.to_string()))
        })?;
    let text = done.text.split_whitespace().collect::<Vec<_>>().join(" ");
    Ok(match text.char_indices().nth(200) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    })
}

/// The chat channels to connect.
#[derive(Default)]
struct Channels {
    telegram: Option<String>,
    /// Bot token, app-level token.
    slack: Option<(String, String)>,
    discord: Option<String>,
}

impl Channels {
    fn is_empty(&self) -> bool {
        self.telegram.is_none() && self.slack.is_none() && self.discord.is_none()
    }

    /// Checks each token with its platform (the bot's name, and where to talk to it), then
    /// puts it in the secrets file.
    async fn check_and_set(self, files: &mut Files) -> Result<()> {
        use switchboard_gateway::settings::{
            ChannelsSection, DiscordSection, GatewaySection, SlackSection, TelegramSection,
        };
        let mut section = ChannelsSection::default();
        if let Some(t) = &self.telegram {
            section.telegram = Some(TelegramSection {
                token: Some(t.clone()),
                ..TelegramSection::default()
            });
        }
        if let Some((bot, app)) = &self.slack {
            section.slack = Some(SlackSection {
                bot_token: Some(bot.clone()),
                app_token: Some(app.clone()),
                ..SlackSection::default()
            });
        }
        if let Some(t) = &self.discord {
            section.discord = Some(DiscordSection {
                token: Some(t.clone()),
                ..DiscordSection::default()
            });
        }
        if self.is_empty() {
            return Ok(());
        }
        let settings =
            switchboard_gateway::settings::gateway_settings(&GatewaySection::default(), &section)?
                .context("no channel to check")?;
        for ch in settings.channels()? {
            let name = ch.name().to_string();
            let identity = ch
                .test()
                .await
                .map_err(|e| anyhow::anyhow!("{name}: the token was not accepted: {e}"))?;
            println!("{name}: ok — {identity}");
            if let Ok(Some(link)) = ch.open_link().await {
                match name.as_str() {
                    "discord" => println!("  invite the bot to a server: {link}"),
                    _ => println!("  talk to it: {link}"),
                }
            }
        }
        if let Some(t) = self.telegram {
            files.set_secret(&["channels", "telegram", "token"], &t);
        }
        if let Some((bot, app)) = self.slack {
            files.set_secret(&["channels", "slack", "bot_token"], &bot);
            files.set_secret(&["channels", "slack", "app_token"], &app);
        }
        if let Some(t) = self.discord {
            files.set_secret(&["channels", "discord", "token"], &t);
        }
        Ok(())
    }
}

/// The Slack app's manifest (docs/slack-app-manifest.yaml), shown by the Slack question.
const SLACK_MANIFEST: &str = include_str!("../../../../docs/slack-app-manifest.yaml");

/// The questions, in a terminal.
mod prompt {
    use super::*;
    use dialoguer::{Confirm, Input, Password, Select};

    pub(super) fn provider(
        found: &[switchboard_agent::local::LocalServer],
        configured: Option<Endpoint>,
    ) -> Result<Endpoint> {
        let mut options: Vec<(String, Option<Endpoint>)> = Vec::new();
        if let Some(c) = &configured {
            options.push((
                format!("keep {} ({})", c.label, c.base_url),
                Some(c.clone()),
            ));
        }
        for s in found {
            options.push((
                format!("{} on this machine ({} models)", s.name, s.models.len()),
                Some(Endpoint {
                    kind: "openai",
                    base_url: s.base_url.clone(),
                    label: s.name.clone(),
                }),
            ));
        }
        for name in ["openai", "anthropic", "openrouter"] {
            let e = endpoint(name, found)?;
            options.push((e.label.clone(), Some(e)));
        }
        options.push(("another OpenAI-compatible server (its URL)".into(), None));
        let labels: Vec<&str> = options.iter().map(|(l, _)| l.as_str()).collect();
        let i = Select::new()
            .with_prompt("Which model provider?")
            .items(&labels)
            .default(0)
            .interact()?;
        match &options[i].1 {
            Some(e) => Ok(e.clone()),
            None => {
                let url: String = Input::new()
                    .with_prompt("Its base URL (e.g. http://host:8000/v1)")
                    .interact_text()?;
                endpoint(&url, found)
            }
        }
    }

    /// A secret typed without echo; `None` when left empty (with `keep`: the one there).
    pub(super) fn secret(what: &str, keep: bool) -> Result<Option<String>> {
        let prompt = if keep {
            format!("{what} (Enter keeps the one configured)")
        } else {
            format!("{what} (Enter for none)")
        };
        let v = Password::new()
            .with_prompt(prompt)
            .allow_empty_password(true)
            .interact()?;
        Ok(Some(v.trim().to_string()).filter(|v| !v.is_empty()))
    }

    pub(super) fn model(models: &[String], kept: Option<&str>) -> Result<String> {
        if models.is_empty() {
            return Ok(Input::new().with_prompt("Model").interact_text()?);
        }
        let default = kept
            .and_then(|k| models.iter().position(|m| m == k))
            .unwrap_or(0);
        let i = Select::new()
            .with_prompt("Which model?")
            .items(models)
            .default(default)
            .max_length(15)
            .interact()?;
        Ok(models[i].clone())
    }

    pub(super) fn channels() -> Result<Channels> {
        let mut c = Channels::default();
        if !Confirm::new()
            .with_prompt("Connect a chat channel (Telegram, Slack or Discord)?")
            .default(false)
            .interact()?
        {
            return Ok(c);
        }
        let i = Select::new()
            .with_prompt("Which?")
            .items(["Telegram", "Slack", "Discord"])
            .default(0)
            .interact()?;
        match i {
            0 => {
                println!("Make a bot with @BotFather in Telegram (/newbot); it gives the token.");
                c.telegram = secret("Telegram bot token", false)?;
            }
            1 => {
                println!(
                    "Create the Slack app at https://api.slack.com/apps → Create New App → From an app manifest, with this manifest (Socket Mode: no public URL needed):\n"
                );
                println!("{SLACK_MANIFEST}");
                println!(
                    "Then: App-Level Tokens → generate one with `connections:write` (xapp-…); Install to Workspace → the Bot User OAuth Token (xoxb-…)."
                );
                let bot = secret("Bot token (xoxb-…)", false)?;
                let app = secret("App-level token (xapp-…)", false)?;
                c.slack = bot.zip(app);
            }
            _ => {
                println!(
                    "Create an application at https://discord.com/developers/applications, add a bot, turn on its Message Content intent, and copy its token."
                );
                c.discord = secret("Discord bot token", false)?;
            }
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn providers_by_name() {
        assert_eq!(
            endpoint("openrouter", &[]).unwrap().base_url,
            OPENROUTER_URL
        );
        assert_eq!(endpoint("anthropic", &[]).unwrap().kind, "anthropic");
        let url = endpoint("http://h:8000/v1/", &[]).unwrap();
        assert_eq!(
            (url.kind, url.base_url.as_str()),
            ("openai", "http://h:8000/v1")
        );
        assert!(
            endpoint("local", &[])
                .unwrap_err()
                .to_string()
                .contains("11434")
        );
        assert!(endpoint("gemini", &[]).is_err());
    }
}
