//! (h) workspace checkpoints: one checkpoint of a 10,000-file workspace (100 directories of
//! 100 small files), unchanged since the last one, and with 100 files changed — what every
//! run pays before and after it.

use std::time::Instant;

use anyhow::Result;
use switchboard_engine::checkpoints::{CheckpointConfig, Checkpoints};
use switchboard_protocol::CheckpointKind;
use uuid::Uuid;

/// Milliseconds of each run: (unchanged, 100 changed).
pub async fn checkpoints(runs: usize) -> Result<(Vec<f64>, Vec<f64>)> {
    let data = tempfile::tempdir()?;
    let ws = tempfile::tempdir()?;
    for d in 0..100 {
        let dir = ws.path().join(format!("d{d}"));
        std::fs::create_dir(&dir)?;
        for f in 0..100 {
            std::fs::write(
                dir.join(format!("f{f}.txt")),
                format!("line {d} {f}\n").repeat(5),
            )?;
        }
    }
    let cps = Checkpoints::new(CheckpointConfig {
        enabled: true,
        dir: data.path().to_path_buf(),
        ..CheckpointConfig::default()
    });
    let session = Uuid::now_v7();
    // The first one records everything; the measured ones are the steady state.
    cps.take(session, ws.path(), CheckpointKind::BeforeRun, None)
        .await?;
    let (mut unchanged, mut changed) = (Vec::new(), Vec::new());
    for run in 0..runs {
        let t = Instant::now();
        let taken = cps
            .take(session, ws.path(), CheckpointKind::BeforeRun, None)
            .await?;
        unchanged.push(t.elapsed().as_secs_f64() * 1000.0);
        anyhow::ensure!(!taken.created, "an unchanged workspace made a checkpoint");
        for d in 0..100 {
            let f = ws.path().join(format!("d{d}/f{}.txt", run % 100));
            std::fs::write(f, format!("changed in run {run}\n"))?;
        }
        let t = Instant::now();
        let taken = cps
            .take(session, ws.path(), CheckpointKind::AfterRun, None)
            .await?;
        changed.push(t.elapsed().as_secs_f64() * 1000.0);
        anyhow::ensure!(taken.files == 100, "{} files changed, not 100", taken.files);
    }
    Ok((unchanged, changed))
}
