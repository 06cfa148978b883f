//! `switchboard serve`: store, engine, agent and HTTP server wired together.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use switchboard_acp::{AcpBackend, AgentCommand, SessionMcp};
use switchboard_agent::anthropic::{AnthropicConfig, AnthropicProvider};
use switchboard_agent::tools::ToolLimits;
use switchboard_agent::{AgentConfig, BuiltinAgent, OpenAiConfig, OpenAiProvider, Provider};
use switchboard_engine::{Backends, Engine, EngineConfig};
use switchboard_server::ServerConfig;
use switchboard_store::Store;

use crate::config::Settings;
use crate::datadir;

/// Everything `serve` runs, before it listens.
pub struct App {
    pub engine: Engine,
    pub router: axum::Router,
    pub store: Arc<dyn Store>,
    /// The server's own URL, for Switchboard's MCP server in ACP agents: set by whoever binds
    /// the listener.
    pub self_url: Arc<std::sync::OnceLock<String>>,
    /// Every long answer's slot, per token (SSE, streamed completions, the relay's events).
    pub streams: Arc<switchboard_http::StreamSlots>,
    /// What `/v1/settings` reads and changes while serving.
    pub settings: Arc<crate::live::LiveSettings>,
}

/// The configured LLM provider (`openai` or `anthropic`).
pub fn provider(settings: &Settings) -> Result<Arc<dyn Provider>> {
    make_provider(
        &settings.provider_kind,
        &settings.base_url,
        settings.api_key.clone(),
        settings.max_retries,
        settings.max_tokens,
    )
}

/// A provider of `kind` (`anthropic`, else the OpenAI wire format) at `base_url`.
pub fn make_provider(
    kind: &str,
    base_url: &str,
    api_key: Option<String>,
    max_retries: u32,
    max_tokens: u32,
) -> Result<Arc<dyn Provider>> {
    let p: Arc<dyn Provider> = if kind == "anthropic" {
        Arc::new(
            AnthropicProvider::new(AnthropicConfig {
                base_url: base_url.to_string(),
                api_key,
                max_retries,
                max_tokens,
                ..AnthropicConfig::default()
            })
            .map_err(|e| anyhow::anyhow!("{e}"))?,
        )
    } else {
        Arc::new(
            OpenAiProvider::new(OpenAiConfig {
                base_url: base_url.to_string(),
                api_key,
                max_retries,
                ..OpenAiConfig::default()
            })
            .map_err(|e| anyhow::anyhow!("{e}"))?,
        )
    };
    Ok(p)
}

/// Opens the data directory and store, recovers from a crash, builds the router.
pub async fn build(settings: &Settings, token: String) -> Result<App> {
    datadir::ensure_data_dir(&settings.data_dir)?;
    let store = switchboard_store::open_url(&settings.store_url())
        .await
        .with_context(|| format!("opening store {}", settings.store_url_redacted()))?;
    tracing::debug!(store = store.kind(), url = %settings.store_url_redacted(), "store opened");
    let sandbox = crate::sandbox_cmd::settings(settings, &crate::sandbox_cmd::mechanisms());
    let mut agent_config = AgentConfig {
        limits: ToolLimits {
            default_timeout: Duration::from_secs(settings.command_timeout_secs),
            max_timeout: Duration::from_secs(settings.command_max_timeout_secs),
            output_cap: settings.output_cap_chars,
        },
        image_fallback: settings.image_fallback,
        sandbox: sandbox.clone(),
        ..AgentConfig::default()
    };
    if let Some(p) = &settings.system_prompt {
        agent_config.system_prompt = p.clone();
    }
    let agent = BuiltinAgent::new(provider(settings)?, agent_config);
    let provider_slot = agent.provider_slot();
    let mut backends = Backends {
        builtin: Some(Arc::new(agent)),
        ..Backends::default()
    };
    let self_url = Arc::new(std::sync::OnceLock::new());
    // Switchboard's MCP server is this same binary (`switchboard mcp --session`).
    let exe = std::env::current_exe().ok();
    for (name, a) in &settings.agents {
        if let Some(url) = &a.a2a {
            let agent = switchboard_a2a::A2aAgent {
                url: url.clone(),
                token: a.token.clone(),
                headers: a.headers.clone().into_iter().collect(),
            };
            let backend = switchboard_a2a::A2aBackend::new(name.clone(), agent)
                .map_err(|e| anyhow::anyhow!("[agents.{name}]: {e}"))?;
            backends.named.insert(name.clone(), Arc::new(backend));
            continue;
        }
        let command = AgentCommand {
            command: a.command.clone(),
            args: a.args.clone(),
            env: a.env.clone(),
        };
        let mut backend = AcpBackend::new(name.clone(), command);
        if let Some(s) = crate::sandbox_cmd::agent_sandbox(sandbox.as_ref(), a) {
            backend = backend.with_sandbox(s);
        }
        match &exe {
            Some(exe) if a.switchboard_mcp => {
                backend = backend.with_session_mcp(SessionMcp {
                    command: exe.clone(),
                    url: self_url.clone(),
                });
            }
            None if a.switchboard_mcp => {
                tracing::warn!(agent = %name, "the path of this binary is unknown: the agent gets no Switchboard MCP server (send_file)");
            }
            _ => {}
        }
        backends.named.insert(name.clone(), Arc::new(backend));
    }
    let protected = crate::workspace::protected_paths(settings);
    let (default_cwd, why) = crate::workspace::default_workspace(settings, &protected)?;
    println!("workspace: {} ({why})", default_cwd.display());
    if let Some(w) = crate::workspace::warning(&default_cwd, &protected) {
        tracing::warn!("{w}");
    }
    let engine_config = EngineConfig {
        default_cwd,
        default_model: settings.model.clone(),
        default_permission_mode: settings.permission_mode,
        approval_timeout: Duration::from_secs(settings.approval_timeout_secs),
        event_retention: settings
            .retention_days
            .map(|d| Duration::from_secs(d * 86_400)),
        instance_id: settings.instance_id.clone(),
        run_lease_ttl: settings.lease,
        // SQLite is one machine's file: this instance is alone on it. On PostgreSQL others
        // may share the store, so runs are only closed when their leases run out.
        exclusive: store.kind() == "sqlite",
        files_dir: settings.files_dir.clone(),
        files: settings.files.clone(),
        checkpoints: settings.checkpoints.clone(),
        mcp_servers: settings.mcp_servers.clone(),
        history: settings.history,
        live_buffer: settings.live_buffer,
        protected,
        approval_rules: settings.approval_rules.clone(),
        usage: settings.usage.clone(),
        ..EngineConfig::default()
    };
    let engine = Engine::start(store.clone(), backends, engine_config)
        .await
        .map_err(|e| anyhow::anyhow!("starting engine: {e}"))?;
    if let Some(url) = &settings.bus_url {
        // The bus secret, else the API token the instances share: what they send each other
        // is signed under it (docs/scale-out.md, "Trust").
        let secret = settings.bus_secret.as_deref().unwrap_or(token.as_str());
        switchboard_bus::NatsBus::start(
            url,
            &settings.instance_id,
            secret.as_bytes(),
            engine.clone(),
        )
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let mut server_config = ServerConfig::new(token);
    server_config.max_body_bytes = settings.max_body_bytes;
    server_config.keepalive = Duration::from_secs(settings.keepalive_secs);
    server_config.max_streams_per_token = settings.max_streams_per_token;
    let streams = switchboard_http::StreamSlots::new(settings.max_streams_per_token);
    server_config.streams = Some(streams.clone());
    server_config.openai_approvals = settings.chat_completions_approvals;
    server_config.api_doc = Some(api_doc(settings));
    let live = Arc::new(crate::live::LiveSettings::new(
        settings,
        engine.clone(),
        provider_slot,
    ));
    server_config.settings = Some(live.clone());
    let router = switchboard_server::router(engine.clone(), server_config);
    Ok(App {
        engine,
        router,
        store,
        self_url,
        streams,
        settings: live,
    })
}

/// The document `/openapi.json` serves: every route `serve` mounts — the server's, the
/// console's, the relay's, and the gateway's when it runs.
pub fn api_doc(settings: &Settings) -> utoipa::openapi::OpenApi {
    use utoipa::OpenApi as _;
    let mut doc = switchboard_server::ApiDoc::openapi();
    doc.merge(switchboard_server::web::ConsoleDoc::openapi());
    doc.merge(switchboard_relay::api::RelayDoc::openapi());
    doc.merge(switchboard_hub::ws::HubDoc::openapi());
    doc.merge(switchboard_hub::mcp::McpDoc::openapi());
    doc.merge(switchboard_hub::a2a::A2aDoc::openapi());
    doc.merge(switchboard_scheduler::api::SchedulerDoc::openapi());
    if let Some(g) = settings.gateway.as_ref().filter(|g| g.enabled) {
        doc.merge(switchboard_gateway::api::document(&g.channel_names()));
    }
    switchboard_server::common_responses(&mut doc);
    doc
}

/// What the authentication layer reads each operation's scope from: [`api_doc`] with the
/// chat channels' routes whether or not a channel runs yet.
fn scope_doc(settings: &Settings) -> utoipa::openapi::OpenApi {
    let mut doc = api_doc(settings);
    doc.merge(switchboard_gateway::api::document(&[]));
    doc
}

/// The token to require: configured, else the token file, else a new token file.
pub fn resolve_token(settings: &Settings) -> Result<(String, String)> {
    datadir::ensure_data_dir(&settings.data_dir)?;
    if let Some(t) = &settings.token {
        return Ok((t.clone(), "from SWITCHBOARD_TOKEN / config".into()));
    }
    let path = settings.token_path();
    let (t, created) = datadir::load_or_create_token(&path)?;
    let how = if created {
        "generated, stored in"
    } else {
        "stored in"
    };
    Ok((t, format!("{how} {}", path.display())))
}

pub async fn run(mut settings: Settings) -> Result<()> {
    // Not dumpable: commands the agent runs as the same user cannot read this process's
    // environment (tokens, API keys) from /proc/PID/environ or attach a debugger to it.
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        tracing::warn!(error = %e, "could not mark the process non-dumpable");
    }
    // Before anything records: every counter from start-up on is in `/metrics`.
    switchboard_server::routes::metrics::install();
    crate::heap::register();
    let (token, token_note) = resolve_token(&settings)?;
    // The server's own token is exempt from the write limit unless asked otherwise.
    let write_rate = switchboard_http::WriteRate::new(
        settings.write_requests_per_minute,
        (!settings.write_limit_local_token).then_some(token.as_str()),
    );
    crate::local_model::adopt(&mut settings).await;
    let model_line = match crate::local_model::describe(&settings) {
        Ok(m) | Err(m) => format!("model: {m}"),
    };
    let sandbox_line = format!(
        "sandbox: {}",
        crate::sandbox_cmd::describe(&settings, &crate::sandbox_cmd::mechanisms())
    );
    let app = build(&settings, token.clone()).await?;
    let listener = tokio::net::TcpListener::bind(&settings.listen)
        .await
        .with_context(|| format!("binding {}", settings.listen))?;
    let addr = listener.local_addr()?;
    // Agents on this machine reach the server on loopback when it listens everywhere.
    let local = match addr.ip() {
        std::net::IpAddr::V4(ip) if ip.is_unspecified() => format!("127.0.0.1:{}", addr.port()),
        std::net::IpAddr::V6(ip) if ip.is_unspecified() => format!("[::1]:{}", addr.port()),
        _ => addr.to_string(),
    };
    let _ = app.self_url.set(format!("http://{local}"));
    if let Some(listen) = &settings.metrics_listen {
        let metrics = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("binding [metrics] listen {listen}"))?;
        // Printed before the ready line, so whoever waits for that has this one too.
        println!("metrics on http://{}/metrics", metrics.local_addr()?);
        let limits = settings.conn_limits;
        tokio::spawn(async move {
            let router = switchboard_server::routes::metrics::standalone()
                .layer(axum::middleware::from_fn(switchboard_http::request_id));
            let _ = switchboard_http::serve(metrics, router, limits, std::future::pending()).await;
        });
    }
    // Scripts and tests wait for this exact line.
    println!("listening on http://{addr}");
    println!("token: {token_note}");
    println!("data directory: {}", settings.data_dir.display());
    println!("{model_line}");
    println!("{sandbox_line}");
    tracing::debug!(%addr, "serving");
    let engine = app.engine.clone();
    // The server's routes carry their own body limits (the JSON limit, and the per-file
    // limit on uploads); the surfaces below get the JSON limit as one layer.
    let server_routes = app.router;
    let mut router = axum::Router::new();
    // Every surface is a client of the /v1 API, like any other, and owns its start-up.
    let host = host(&settings, format!("http://{local}"), token.clone());
    // The chat channels: their routes are mounted whether or not one is configured, so
    // that the settings can add the first while serving.
    let gateway = Arc::new(
        crate::live::gateway::GatewayControl::start(&settings, host.clone(), app.store.clone())
            .await?,
    );
    app.settings.attach_gateway(gateway.clone());
    router = router.merge(switchboard_gateway::api::router(
        gateway.slot.clone(),
        host.token.clone(),
    ));
    match settings.gateway.as_ref().filter(|g| g.enabled) {
        Some(g) => println!("channels: {}", g.channel_names().join(", ")),
        None => {
            println!("channels: none (`switchboard setup` connects Telegram, Slack or Discord)")
        }
    }
    let relay = settings.relay.start(&host).await?;
    router = router.merge(switchboard_relay::api::router(
        relay.clone(),
        host.token.clone(),
        app.streams.clone(),
    ));
    // Results of scheduled tasks go out through the gateway's send route.
    let scheduler = settings.scheduler.start(&host).await?;
    router = router.merge(switchboard_scheduler::api::router(
        scheduler.clone(),
        host.token.clone(),
    ));
    // Editors over ACP: the hub's agent is a client of the API, like the relay.
    router = router.merge(switchboard_hub::ws::router(
        host.server_url.clone(),
        host.token.clone(),
        switchboard_hub::HubOptions::default(),
    ));
    // Other agents over A2A: the Agent Card and the JSON-RPC binding, each task a run.
    let mut skills = vec!["builtin".to_owned()];
    skills.extend(settings.agents.keys().cloned());
    router = router.merge(switchboard_hub::a2a::router(
        host.server_url.clone(),
        host.token.clone(),
        switchboard_hub::a2a::A2aOptions {
            skills,
            // Push notifications to this machine or a private network (tests, a LAN).
            private_webhooks: std::env::var("SWITCHBOARD_A2A_PRIVATE_WEBHOOKS")
                .is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true")),
        },
    ));
    // MCP clients: the sessions as tools, through the API with each caller's token.
    router = router.merge(switchboard_hub::mcp::router(
        host.server_url.clone(),
        host.token.clone(),
    ));
    // The web console, and the guard (Host/Origin checks, cookie → bearer) in front of
    // every route, the gateway's and the relay's included.
    let mut allowed_hosts = switchboard_server::web::default_allowed_hosts(addr);
    allowed_hosts.extend(settings.allowed_hosts.iter().cloned());
    let console = switchboard_server::web::Console::new(switchboard_server::web::ConsoleConfig {
        token: host.token.clone(),
        allowed_hosts,
        agents: settings.agents.keys().cloned().collect(),
        defaults: {
            let engine = app.engine.clone();
            Arc::new(move || engine.defaults())
        },
        default_cwd: app.engine.config().default_cwd.display().to_string(),
        team: Some(app.engine.team().clone()),
        oidc: settings
            .oidc
            .clone()
            .map(switchboard_server::oidc::Oidc::new)
            .transpose()
            .map_err(|e| anyhow::anyhow!("[auth.oidc]: {e}"))?
            .map(Arc::new),
    });
    let code = console.new_login_code();
    let browse_host = if addr.ip().is_unspecified() {
        format!("127.0.0.1:{}", addr.port())
    } else {
        addr.to_string()
    };
    println!(
        "console: http://{browse_host}/login?code={code}  (one-time sign-in link, valid {} min)",
        switchboard_server::web::LOGIN_LINK_TTL.as_secs() / 60
    );
    // The surfaces' body limit (a declared `Content-Length` over it is answered 413 before
    // the body is read); the server's routes have theirs. Not one limit outside everything:
    // that capped uploads at the JSON limit whatever `[files] max_file_mb` said.
    let surfaces = router
        .merge(switchboard_server::web::router(console.clone()))
        .layer(axum::extract::DefaultBodyLimit::max(
            settings.max_body_bytes,
        ))
        .layer(axum::middleware::from_fn_with_state(
            switchboard_http::BodyLimit(settings.max_body_bytes),
            switchboard_http::reject_oversized,
        ));
    // Who is calling and whether the operation's scope allows it, read from the document of
    // every route mounted (the chat channels' included, which the settings can start while
    // serving).
    let auth = switchboard_server::auth(&token, &engine, &scope_doc(&settings))
        .context("the OpenAPI document does not say what an operation needs")?;
    // Outermost, in front of every route: the guard and the request id.
    let router = server_routes
        .merge(surfaces)
        .layer(axum::middleware::from_fn_with_state(
            write_rate,
            switchboard_http::limit_writes,
        ))
        // Inside the guard, which has turned a console cookie into the credential it
        // stands for.
        .layer(axum::middleware::from_fn_with_state(
            auth,
            switchboard_http::authenticate,
        ))
        .layer(axum::middleware::from_fn_with_state(
            console,
            switchboard_server::web::guard,
        ))
        .layer(axum::middleware::from_fn(switchboard_http::request_id));
    switchboard_http::serve(listener, router, settings.conn_limits, async move {
        shutdown_signal().await;
        tracing::info!("shutting down");
        scheduler.shutdown().await;
        relay.shutdown().await;
        gateway.shutdown().await;
        // Runs record their end before the event streams close.
        engine.shutdown(Duration::from_secs(5)).await;
    })
    .await
    .context("serving HTTP")?;
    app.store.close().await;
    Ok(())
}

/// What every surface is handed: the API at `server_url`, called with `token`.
pub fn host(settings: &Settings, server_url: String, token: String) -> switchboard_settings::Host {
    switchboard_settings::Host {
        server_url,
        token,
        data_dir: settings.data_dir.clone(),
        store_url: settings.store_url(),
        store_url_redacted: settings.store_url_redacted(),
        config_path: settings.config_path.clone(),
        instance_id: settings.instance_id.clone(),
        lease: settings.lease,
        agents: settings.agents.keys().cloned().collect(),
        sandbox: crate::sandbox_cmd::settings(settings, &crate::sandbox_cmd::mechanisms()),
        protected: crate::workspace::protected_paths(settings)
            .iter()
            .map(std::path::Path::to_path_buf)
            .collect(),
    }
}

/// The gateway's settings with what it takes from other sections: the `[files]` limits
/// and `[speech]`.
pub fn gateway_settings(
    settings: &Settings,
    g: &crate::config::GatewaySettings,
) -> crate::config::GatewaySettings {
    let mut g = g.clone();
    g.config.max_file_bytes = settings.files.max_file_bytes;
    g.config.max_attachments = settings.files.max_attachments;
    g.config.speech = settings.speech.clone();
    g
}

/// The gateway's store: the schema `gateway` of the PostgreSQL database when the store is
/// PostgreSQL (shared by every instance), else `gateway.db` in the data directory.
pub async fn open_gateway_store(settings: &Settings) -> Result<switchboard_gateway::GatewayStore> {
    switchboard_gateway::GatewayStore::open_beside(&settings.store_url(), &settings.data_dir)
        .await
        .with_context(|| {
            format!(
                "opening the gateway store ({})",
                settings.store_url_redacted()
            )
        })
}

/// The engine's leases (in the store the instances share), as the gateway elects its
/// active instance with them.
pub struct StoreLeases(pub Arc<dyn Store>);

#[async_trait::async_trait]
impl switchboard_gateway::service::Leases for StoreLeases {
    type Lease = switchboard_store::Lease;

    async fn acquire(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Self::Lease>, String> {
        self.0
            .acquire_lease(name, holder, ttl)
            .await
            .map_err(|e| e.to_string())
    }

    async fn renew(&self, lease: &Self::Lease, ttl: Duration) -> Result<bool, String> {
        self.0
            .renew_lease(lease, ttl)
            .await
            .map_err(|e| e.to_string())
    }

    async fn release(&self, lease: &Self::Lease) -> Result<(), String> {
        self.0
            .release_lease(lease)
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    }
}

pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
