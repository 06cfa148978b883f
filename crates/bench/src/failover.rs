//! (f) Failover: two `switchboard serve` processes, one SIGKILLed.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use switchboard_protocol::CreateSessionRequest;

use super::TOKEN;
use super::common::{Proc, bench_nats, http, spawn_serve};

/// An instance of the failover bench: on the shared database and bus, with a model and a
/// Telegram API that accept connections and never answer (the run stays running, the
/// poller stays connected).
async fn spawn_instance(
    store_url: &str,
    bus: &str,
    name: &str,
    hang: &str,
    dir: &std::path::Path,
) -> Result<Proc> {
    let data = dir.join(name);
    spawn_serve(&[
        ("SWITCHBOARD_DATA_DIR", data.to_str().context("path")?),
        ("SWITCHBOARD_STORE_URL", store_url),
        ("SWITCHBOARD_BUS_URL", bus),
        ("SWITCHBOARD_INSTANCE_ID", name),
        ("SWITCHBOARD_OPENAI_BASE_URL", hang),
        ("SWITCHBOARD_MODEL", "bench"),
        ("SWITCHBOARD_TELEGRAM_TOKEN", "123:bench"),
        ("SWITCHBOARD_TELEGRAM_BASE_URL", hang),
    ])
    .await
}

async fn gateway_role(http: &reqwest::Client, p: &Proc) -> String {
    let status: Option<serde_json::Value> = match http
        .get(format!("{}/v1/gateway/status", p.url))
        .bearer_auth(TOKEN)
        .send()
        .await
    {
        Ok(r) => r.json().await.ok(),
        Err(_) => None,
    };
    status
        .and_then(|s| s["role"].as_str().map(str::to_string))
        .unwrap_or_default()
}

async fn wait_for(what: &str, limit: Duration, mut f: impl AsyncFnMut() -> bool) -> Result<()> {
    let start = Instant::now();
    while !f().await {
        if start.elapsed() > limit {
            bail!("{what}: not within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// (f) One failover: (seconds until the run is closed, seconds until the poller runs on
/// the survivor) after SIGKILL.
async fn failover_once(store_url: &str, bus: &str, hang: &str, i: usize) -> Result<(f64, f64)> {
    let dir = tempfile::tempdir()?;
    let http = http()?;
    let (na, nb) = (format!("fa-{i}"), format!("fb-{i}"));
    let mut a = spawn_instance(store_url, bus, &na, hang, dir.path()).await?;
    wait_for("A runs the gateway", Duration::from_secs(30), async || {
        gateway_role(&http, &a).await == "active"
    })
    .await?;
    let mut b = spawn_instance(store_url, bus, &nb, hang, dir.path()).await?;
    wait_for("B stands by", Duration::from_secs(10), async || {
        gateway_role(&http, &b).await == "standby"
    })
    .await?;
    let ca = switchboard_client::Client::new(a.url.clone(), Some(TOKEN.into()))?;
    let cb = switchboard_client::Client::new(b.url.clone(), Some(TOKEN.into()))?;
    let id = ca
        .create_session(&CreateSessionRequest::default())
        .await?
        .id;
    let run = ca
        .send_message(
            id,
            &switchboard_protocol::SendMessageRequest::user(
                "hang",
                switchboard_protocol::MessageType::Message,
            ),
        )
        .await?
        .run_id;
    wait_for("B sees the run", Duration::from_secs(10), async || {
        cb.get_session(id)
            .await
            .is_ok_and(|s| s.session.active_run_id == Some(run))
    })
    .await?;
    let killed = Instant::now();
    a.child.kill().await?;
    let (mut run_s, mut poll_s) = (None, None);
    while run_s.is_none() || poll_s.is_none() {
        if killed.elapsed() > Duration::from_secs(60) {
            bail!("no failover within 60 s");
        }
        if run_s.is_none()
            && cb
                .get_session(id)
                .await
                .is_ok_and(|s| s.session.active_run_id.is_none())
        {
            run_s = Some(killed.elapsed().as_secs_f64());
        }
        if poll_s.is_none() && gateway_role(&http, &b).await == "active" {
            poll_s = Some(killed.elapsed().as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A graceful stop gives the gateway lease back for the next round.
    if let Some(pid) = b.child.id() {
        let _ = tokio::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .await;
    }
    let _ = tokio::time::timeout(Duration::from_secs(15), b.child.wait()).await;
    Ok((run_s.unwrap_or(f64::NAN), poll_s.unwrap_or(f64::NAN)))
}

pub(super) async fn failover(store_url: &str, runs: usize) -> Result<(Vec<f64>, Vec<f64>)> {
    let nats = bench_nats().await?;
    let hang = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let hang_url = format!("http://{}", hang.local_addr()?);
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = hang.accept().await {
            held.push(sock);
        }
    });
    let (mut r, mut p) = (Vec::new(), Vec::new());
    for i in 0..runs {
        let (a, b) = failover_once(store_url, &nats.url, &hang_url, i).await?;
        r.push(a);
        p.push(b);
    }
    Ok((r, p))
}
