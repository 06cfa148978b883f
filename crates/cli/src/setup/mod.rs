//! `switchboard setup`: from nothing to a configured model (and a chat channel) without
//! editing a file. Asks in a terminal, or takes flags (`--yes` for no questions at all);
//! each answer is checked against the real thing — the provider lists its models, one
//! test call answers, a channel's token names its bot — before anything is written.
//! Running it again starts from what is there.

pub(crate) mod files;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use switchboard_agent::{ChatMessage, Provider};

use crate::config::redact_url;
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
    /// Connect Telegram with this bot token (from @BotFather). A value on the command line
    /// is visible to other users of this machine (`ps`): SWITCHBOARD_TELEGRAM_TOKEN in the
    /// environment is taken the same way and is not.
    #[arg(long, value_name = "TOKEN")]
    telegram_token: Option<String>,
    /// Connect Slack: the bot token (`xoxb-…`) … (or SWITCHBOARD_SLACK_BOT_TOKEN)
    #[arg(long, value_name = "TOKEN", requires = "slack_app_token")]
    slack_bot_token: Option<String>,
    /// … and the app-level token (`xapp-…`, Socket Mode; or SWITCHBOARD_SLACK_APP_TOKEN).
    #[arg(long, value_name = "TOKEN", requires = "slack_bot_token")]
    slack_app_token: Option<String>,
    /// Connect Discord with this bot token (or SWITCHBOARD_DISCORD_TOKEN).
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
pub(crate) struct Endpoint {
    /// `openai` or `anthropic` (the wire format).
    pub kind: &'static str,
    pub base_url: String,
    /// What to call it in messages.
    pub label: String,
}

const OPENAI_URL: &str = switchboard_agent::openai::DEFAULT_BASE_URL;
const ANTHROPIC_URL: &str = switchboard_agent::anthropic::DEFAULT_BASE_URL;
const OPENROUTER_URL: &str = "https://openrouter.ai/api/v1";

/// A provider named on the command line or in the configuration (`local` needs `found`).
pub(crate) fn endpoint(
    name: &str,
    found: &[switchboard_agent::local::LocalServer],
) -> Result<Endpoint> {
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
    // What `serve` would use now: the files and the environment.
    let effective = crate::config::Settings::load(
        Some(if config_path.exists() {
            config_path.as_path()
        } else {
            Path::new("/dev/null")
        }),
        None,
        None,
    )?;
    let mut files = Files::read(config_path, secrets_path)?;
    let ask = !args.yes && std::io::stdin().is_terminal();
    // A channel's token: its flag, else its environment variable (Slack's two together).
    let env = switchboard_settings::env;
    let mut channels = Channels {
        telegram: args
            .telegram_token
            .clone()
            .or_else(|| env("SWITCHBOARD_TELEGRAM_TOKEN")),
        slack: args
            .slack_bot_token
            .clone()
            .zip(args.slack_app_token.clone())
            .or_else(|| env("SWITCHBOARD_SLACK_BOT_TOKEN").zip(env("SWITCHBOARD_SLACK_APP_TOKEN"))),
        discord: args
            .discord_token
            .clone()
            .or_else(|| env("SWITCHBOARD_DISCORD_TOKEN")),
    };
    let channels_given = !channels.is_empty();
    let provider_given = args.provider.is_some()
        || args.base_url.is_some()
        || args.api_key_stdin
        || args.model.is_some();
    let configured = effective.provider_named.then(|| Endpoint {
        kind: if effective.provider_kind == "anthropic" {
            "anthropic"
        } else {
            "openai"
        },
        label: redact_url(&effective.base_url),
        base_url: effective.base_url.clone(),
    });

    // Only a channel to add, the provider and model configured: they are kept as they are
    // (no model listing, no test call).
    if args.yes
        && channels_given
        && !provider_given
        && configured.is_some()
        && effective.model.is_some()
    {
        if let (Some(c), Some(m)) = (&configured, &effective.model) {
            println!("provider: keeping {} at {}, model {m}", c.kind, c.label);
        }
    } else {
        provider_step(&args, ask, &effective, configured, &mut files).await?;
    }

    // Chat channels.
    if ask && channels.is_empty() {
        channels = prompt::channels()?;
    }
    channels.check_and_set(&mut files).await?;

    files.write()?;
    println!("wrote {}", files.config_path.display());
    if files.secrets_path.exists() {
        println!("secrets in {} (mode 0600)", files.secrets_path.display());
    }
    overridden_by_environment(&files);
    println!();
    println!("next: `switchboard serve`, then open the console link it prints");
    Ok(ExitCode::SUCCESS)
}

/// The provider, its key and the model: chosen, checked against the provider (its models,
/// one test call), put in the files.
async fn provider_step(
    args: &SetupArgs,
    ask: bool,
    effective: &crate::config::Settings,
    configured: Option<Endpoint>,
    files: &mut Files,
) -> Result<()> {
    let ports = switchboard_agent::local::ports(
        switchboard_settings::env("SWITCHBOARD_LOCAL_MODEL_PORTS").as_deref(),
    )
    .map_err(|e| anyhow::anyhow!("SWITCHBOARD_LOCAL_MODEL_PORTS: {e}"))?;
    let found = switchboard_agent::local::find_all(&ports).await;
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
    let shown = redact_url(&chosen.base_url);
    let is_local = found.iter().any(|s| s.base_url == chosen.base_url);

    // The key: asked without echo, or read from standard input; a local server needs none.
    // The configured key goes with the configured provider only: another provider never
    // receives it.
    let kept_key = effective
        .api_key
        .clone()
        .filter(|_| configured_url.as_deref() == Some(chosen.base_url.as_str()));
    let key = if args.api_key_stdin {
        if std::io::stdin().is_terminal() {
            prompt::secret(&format!("API key for {}", chosen.label), false)?
        } else {
            let mut line = String::new();
            std::io::stdin()
                .read_line(&mut line)
                .context("reading the API key from standard input")?;
            Some(line.trim().to_string()).filter(|k| !k.is_empty())
        }
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
            "{} at {shown} did not list its models: {}",
            chosen.label,
            provider.redact(&e.to_string())
        )
    })?;
    println!(
        "{} at {shown} answers: {} models",
        chosen.label,
        models.len()
    );
    // A configured model stays unless another is asked for, listed or not (aliases such as
    // `*-latest` or `openrouter/auto` often are not).
    let kept_model = effective
        .model
        .clone()
        .filter(|_| configured_url.as_deref() == Some(chosen.base_url.as_str()));
    let model = match &args.model {
        Some(m) => m.clone(),
        None if ask => prompt::model(&models, kept_model.as_deref())?,
        None => kept_model
            .or_else(|| switchboard_agent::local::chat_model(&models))
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
    match &key {
        Some(k) => files.set_secret(&["provider", "api_key"], k),
        None => files.remove_secret(&["provider", "api_key"]),
    }
    Ok(())
}

/// Says which of what was written an environment variable still overrides for `serve` run
/// from this environment.
fn overridden_by_environment(files: &Files) {
    let written = |path: &[&str]| files.get(path).or_else(|| files.get_secret(path));
    for o in crate::config::OVERRIDES {
        let var = o.var;
        if let Some(v) = switchboard_settings::env(var)
            && written(o.path).as_deref() != Some(v.as_str())
        {
            println!(
                "note: {var} is set in this environment and overrides what was written, for a `serve` started from it: unset it to use the file"
            );
        }
    }
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
        // The gateway's settings apply the environment over the section: a variable holding
        // another token would be checked in place of the one given (and win at `serve`).
        let differs = |var: &str, given: Option<&String>| {
            given.is_some_and(|g| switchboard_settings::env(var).is_some_and(|e| &e != g))
        };
        for (var, given) in [
            ("SWITCHBOARD_TELEGRAM_TOKEN", self.telegram.as_ref()),
            (
                "SWITCHBOARD_SLACK_BOT_TOKEN",
                self.slack.as_ref().map(|s| &s.0),
            ),
            (
                "SWITCHBOARD_SLACK_APP_TOKEN",
                self.slack.as_ref().map(|s| &s.1),
            ),
            ("SWITCHBOARD_DISCORD_TOKEN", self.discord.as_ref()),
        ] {
            if differs(var, given) {
                bail!(
                    "{var} is set in this environment to another token, which would override the one given: unset it first"
                );
            }
        }
        let settings =
            switchboard_gateway::settings::gateway_settings(&GatewaySection::default(), &section)?
                .context("no channel to check")?;
        let given: Vec<&str> = [
            self.telegram.as_ref().map(|_| "telegram"),
            self.slack.as_ref().map(|_| "slack"),
            self.discord.as_ref().map(|_| "discord"),
        ]
        .into_iter()
        .flatten()
        .collect();
        // Only the channels being set up (the environment may configure others).
        for bot in settings.check(&given).await? {
            println!("{}: ok — {}", bot.name, bot.identity);
            if let Some(link) = bot.link {
                match bot.name.as_str() {
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
            let mut input = Input::new().with_prompt("Model");
            if let Some(k) = kept {
                input = input.default(k.to_string());
            }
            return Ok(input.interact_text()?);
        }
        // The configured model first when the provider does not list it (an alias).
        let mut items: Vec<String> = Vec::new();
        if let Some(k) = kept.filter(|k| !models.iter().any(|m| m == k)) {
            items.push(k.to_string());
        }
        items.extend(models.iter().cloned());
        let default = kept
            .and_then(|k| items.iter().position(|m| m == k))
            .or_else(|| {
                switchboard_agent::local::chat_model(models)
                    .and_then(|c| items.iter().position(|m| *m == c))
            })
            .unwrap_or(0);
        let i = Select::new()
            .with_prompt("Which model?")
            .items(&items)
            .default(default)
            .max_length(15)
            .interact()?;
        Ok(items[i].clone())
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
                if bot.is_some() != app.is_some() {
                    bail!(
                        "Slack needs both tokens: the bot token (xoxb-…) and the app-level token (xapp-…)"
                    );
                }
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
