//! (t) who is calling (`--only t`): what a request pays to be authenticated — the same
//! `GET /v1/sessions/{id}` (a member's own session, so the visibility check runs too) with
//! the server token (compared in memory) and with a person's API token (looked up by its
//! SHA-256 in the store on every request, the price of a revocation that holds on every
//! instance at once). An engine on SQLite serving the API with the authentication layer
//! on a loopback port; sequential requests on one kept-alive connection. Per request, in
//! microseconds; each run the median of 2,000 requests.

use std::time::Instant;

use anyhow::Result;
use switchboard_protocol::people::{CreateTokenRequest, CreateUserRequest, Principal, Role};
use utoipa::OpenApi as _;

use super::TOKEN;
use super::common::server;

const PER_RUN: usize = 2000;

/// Microseconds per request, one figure per run: the server token, a personal token.
pub struct Figures {
    pub server_token: Vec<f64>,
    pub personal_token: Vec<f64>,
}

pub async fn auth(runs: usize) -> Result<Figures> {
    let s = server().await?;
    // The server's router with the authentication layer, as `serve` mounts it.
    let auth = switchboard_server::auth(TOKEN, &s.engine, &switchboard_server::ApiDoc::openapi())?;
    let router = switchboard_server::router(
        s.engine.clone(),
        switchboard_server::ServerConfig::new(TOKEN),
    )
    .layer(axum::middleware::from_fn_with_state(
        auth,
        switchboard_http::authenticate,
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(switchboard_server::listener(listener), router).await;
    });
    let admin = Principal::server();
    let team = s.engine.team();
    let fail = |e: switchboard_engine::TeamError| anyhow::anyhow!("{e}");
    team.create_user(
        &admin,
        CreateUserRequest {
            name: "bench".into(),
            role: Role::Member,
            password: None,
        },
        "bench",
    )
    .await
    .map_err(fail)?;
    let personal = team
        .create_token(
            &admin,
            CreateTokenRequest {
                user: Some("bench".into()),
                name: "bench".into(),
                scopes: Role::Member.scopes().to_vec(),
                expires_in_days: None,
            },
            "bench",
        )
        .await
        .map_err(fail)?
        .token;
    let session = s
        .engine
        .create_session_as(
            Some("bench"),
            switchboard_protocol::CreateSessionRequest::default(),
        )
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .id;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .build()?;
    let path = format!("{url}/v1/sessions/{session}");
    let time = |token: String| {
        let (http, path) = (http.clone(), path.clone());
        async move {
            let mut each = Vec::with_capacity(PER_RUN);
            for _ in 0..PER_RUN {
                let t = Instant::now();
                let r = http.get(&path).bearer_auth(&token).send().await?;
                anyhow::ensure!(r.status().is_success(), "{}", r.status());
                r.bytes().await?;
                each.push(t.elapsed().as_secs_f64() * 1e6);
            }
            Ok::<f64, anyhow::Error>(super::median(each))
        }
    };
    let mut f = Figures {
        server_token: Vec::new(),
        personal_token: Vec::new(),
    };
    // Warm-up, then the two kinds interleaved run by run (the machine is noisy).
    time(TOKEN.to_string()).await?;
    for _ in 0..runs {
        f.server_token.push(time(TOKEN.to_string()).await?);
        f.personal_token.push(time(personal.clone()).await?);
    }
    Ok(f)
}
