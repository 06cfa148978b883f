//! `switchboard doctor`: one verdict per thing that can be wrong.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use switchboard_store::SqlStore;

use crate::config::Settings;
use crate::datadir;

enum Verdict {
    Ok(String),
    Warn(String),
    Fail(String),
}

fn report(name: &str, v: &Verdict) {
    let (tag, msg) = match v {
        Verdict::Ok(m) => ("ok  ", m),
        Verdict::Warn(m) => ("warn", m),
        Verdict::Fail(m) => ("FAIL", m),
    };
    println!("[{tag}] {name}: {msg}");
}

pub async fn run(config: Option<&Path>, data_dir: Option<&Path>) -> Result<ExitCode> {
    let mut failed = false;
    let mut check = |name: &str, v: Verdict| {
        failed |= matches!(v, Verdict::Fail(_));
        report(name, &v);
    };
    let mut settings = match Settings::load(config, data_dir, None) {
        Ok(s) => {
            let src = s
                .config_path
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "no file; defaults and environment".into());
            check("config", Verdict::Ok(src));
            // Read with the configuration, so its mode was checked: only the owner's.
            let secrets = crate::config::secrets_path(s.config_path.as_deref());
            if let Ok(meta) = std::fs::metadata(&secrets) {
                use std::os::unix::fs::PermissionsExt;
                check(
                    "secrets",
                    Verdict::Ok(format!(
                        "{} (mode {:04o})",
                        secrets.display(),
                        meta.permissions().mode() & 0o777
                    )),
                );
            }
            s
        }
        Err(e) => {
            check("config", Verdict::Fail(format!("{e:#}")));
            return Ok(ExitCode::FAILURE);
        }
    };
    let dir = &settings.data_dir;
    match datadir::mode_of(dir) {
        None => check(
            "data directory",
            Verdict::Warn(format!(
                "{} does not exist yet; `serve` creates it (0700)",
                dir.display()
            )),
        ),
        Some(m) if m & 0o077 != 0 => check(
            "data directory",
            Verdict::Fail(format!(
                "{} has mode {m:o}; others can read it — run: chmod 700 {}",
                dir.display(),
                dir.display()
            )),
        ),
        Some(_) => {
            let probe = dir.join(".doctor-probe");
            match std::fs::write(&probe, b"x").and_then(|_| std::fs::remove_file(&probe)) {
                Ok(()) => check(
                    "data directory",
                    Verdict::Ok(format!("{} (0700, writable)", dir.display())),
                ),
                Err(e) => check(
                    "data directory",
                    Verdict::Fail(format!("{} is not writable: {e}", dir.display())),
                ),
            }
        }
    }
    let token_path = settings.token_path();
    if settings.token.is_some() {
        check(
            "token",
            Verdict::Ok("set by SWITCHBOARD_TOKEN / config".into()),
        );
    } else {
        match datadir::mode_of(&token_path) {
            None => check(
                "token",
                Verdict::Warn(format!(
                    "{} missing; `serve` generates it",
                    token_path.display()
                )),
            ),
            Some(0o600) | Some(0o400) => check(
                "token",
                Verdict::Ok(format!("{} (0600)", token_path.display())),
            ),
            Some(m) => check(
                "token",
                Verdict::Fail(format!(
                    "{} has mode {m:o}; run: chmod 600 {}",
                    token_path.display(),
                    token_path.display()
                )),
            ),
        }
    }
    if settings.store_url.is_some() {
        match switchboard_store::open_url(&settings.store_url()).await {
            Ok(s) => {
                let ping = s.ping().await;
                s.close().await;
                check(
                    "store",
                    match ping {
                        Ok(()) => Verdict::Ok(format!(
                            "{} ({}) reachable, schema up to date",
                            settings.store_url_redacted(),
                            s.kind()
                        )),
                        Err(e) => Verdict::Fail(format!("{}: {e}", settings.store_url_redacted())),
                    },
                );
            }
            Err(e) => check(
                "store",
                Verdict::Fail(format!("{}: {e}", settings.store_url_redacted())),
            ),
        }
    } else if settings.db_path().exists() {
        match SqlStore::open_path(&settings.db_path()).await {
            Ok(s) => {
                s.close().await;
                check(
                    "store",
                    Verdict::Ok(format!(
                        "{} opens, schema up to date",
                        settings.db_path().display()
                    )),
                );
            }
            Err(e) => check(
                "store",
                Verdict::Fail(format!("{}: {e}", settings.db_path().display())),
            ),
        }
    } else {
        check(
            "store",
            Verdict::Warn(format!("{} not created yet", settings.db_path().display())),
        );
    }
    if let Some(url) = &settings.bus_url {
        let shown = crate::config::redact_url(url);
        check(
            "bus",
            match switchboard_bus::probe(url).await {
                Ok(version) => Verdict::Ok(format!("{shown} reachable (NATS {version})")),
                Err(e) => Verdict::Fail(e.to_string()),
            },
        );
    }
    let protected = crate::workspace::protected_paths(&settings);
    let workspace = match &settings.default_cwd {
        Some(p) => Some(p.clone()),
        None => std::env::current_dir().ok(),
    };
    if let Some(ws) = workspace {
        let verdict = match (
            crate::workspace::warning(&ws, &protected),
            settings.default_cwd.is_some(),
        ) {
            (None, _) => Verdict::Ok(format!(
                "{} (holds none of Switchboard's own state)",
                ws.display()
            )),
            (Some(w), true) => Verdict::Warn(w),
            (Some(_), false) => Verdict::Warn(format!(
                "the current directory {} holds Switchboard's own state: `serve` started here uses ~/switchboard-workspace instead; set [sessions] default_cwd to choose",
                ws.display()
            )),
        };
        check("workspace", verdict);
    }
    crate::local_model::adopt(&mut settings).await;
    match crate::local_model::describe(&settings) {
        Ok(m) => check("model", Verdict::Ok(m)),
        Err(what) => check("model", Verdict::Fail(what)),
    }
    match crate::serve::provider(&settings) {
        Ok(p) => match p.models().await {
            Ok(models) => check(
                "provider",
                Verdict::Ok(format!(
                    "{} at {} answers ({} models listed)",
                    settings.provider_kind,
                    settings.base_url,
                    models.len()
                )),
            ),
            Err(e) => check("provider", Verdict::Fail(p.redact(&e.to_string()))),
        },
        Err(e) => check("provider", Verdict::Fail(format!("{e:#}"))),
    }
    // What confines the agent's commands here.
    let found = crate::sandbox_cmd::mechanisms();
    let line = crate::sandbox_cmd::describe(&settings, &found);
    check(
        "sandbox",
        match (settings.sandbox.mode, found.available()) {
            (crate::config::SandboxMode::Off, _) => Verdict::Warn(line),
            (crate::config::SandboxMode::Required, false) => Verdict::Fail(line),
            (_, false) => Verdict::Warn(line),
            (_, true) => Verdict::Ok(line),
        },
    );
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
