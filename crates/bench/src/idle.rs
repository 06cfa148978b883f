//! (i) Idle sessions (`--only idle`): what 10,000 sessions nobody is using cost a real
//! `switchboard serve` (SQLite), and whether listing them stays fast.
//!
//! Each run starts a fresh server, creates 100 sessions and lists them (warm-up), reads its
//! RSS, then creates 10,000 more through `POST /v1/sessions` (8 at a time), each then
//! subscribed to once and left (its event stream opened, its first frame read, the
//! connection dropped: what a console tab that was closed leaves behind). After a second's
//! rest it reads the RSS again and times `GET /v1/sessions` (the first page of 50, and the
//! last page: `offset` 10,000), 50 requests each on one kept-alive connection.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::common::{proc_status, status_field};
use crate::search::quantile;
use crate::{TOKEN, http, spawn_serve};

/// One run's figures.
pub struct IdleFigures {
    /// RSS the 10,000 sessions added (MiB).
    pub rss_added_mib: f64,
    /// `GET /v1/sessions?limit=50`, p50 and p95 (ms).
    pub first_page_ms: (f64, f64),
    /// `GET /v1/sessions?limit=50&offset=10000`, p50 and p95 (ms).
    pub last_page_ms: (f64, f64),
}

const SESSIONS: usize = 10_000;

pub async fn idle() -> Result<IdleFigures> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data)?;
    let proc = spawn_serve(&[
        ("SWITCHBOARD_DATA_DIR", data.to_str().context("path")?),
        (
            "SWITCHBOARD_DEFAULT_CWD",
            dir.path().to_str().context("path")?,
        ),
    ])
    .await?;
    let pid = proc.child.id().context("server pid")?;
    let url = proc.url.clone();
    let http = http()?;
    let rss = || status_field(&proc_status(Some(pid)), "VmRSS:").map_or(0.0, |k| k as f64 / 1024.0);
    let create = {
        let (http, url) = (http.clone(), url.clone());
        move || {
            let (http, url) = (http.clone(), url.clone());
            async move {
                let id = crate::common::create_session(&http, &url).await?;
                // Subscribed once, then left.
                let mut resp = http
                    .get(format!("{url}/v1/sessions/{id}/events?after=0"))
                    .bearer_auth(TOKEN)
                    .send()
                    .await?
                    .error_for_status()?;
                let _ = tokio::time::timeout(Duration::from_millis(50), resp.chunk()).await;
                anyhow::Ok(())
            }
        }
    };
    for _ in 0..100 {
        create().await?;
    }
    let list = async |offset: usize| -> Result<(f64, f64)> {
        let mut ms = Vec::new();
        for i in 0..53 {
            let t = Instant::now();
            let page: serde_json::Value = http
                .get(format!("{url}/v1/sessions?limit=50&offset={offset}"))
                .bearer_auth(TOKEN)
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            let took = t.elapsed().as_secs_f64() * 1000.0;
            if page["sessions"].as_array().is_none_or(Vec::is_empty) {
                bail!("GET /v1/sessions?offset={offset}: no sessions: {page}");
            }
            // The first requests warm the connection and the page cache.
            if i >= 3 {
                ms.push(took);
            }
        }
        Ok((quantile(&ms, 0.5), quantile(&ms, 0.95)))
    };
    list(0).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = rss();
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..8 {
        let create = create.clone();
        tasks.spawn(async move {
            for _ in (w..SESSIONS).step_by(8) {
                create().await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = rss();
    Ok(IdleFigures {
        rss_added_mib: after - before,
        first_page_ms: list(0).await?,
        last_page_ms: list(SESSIONS).await?,
    })
}
