//! Logging in, once: the session (user, device, access token) is kept in `session.json`
//! (0600) in the store directory, beside the SDK's SQLite state and crypto stores, so that
//! every later start is the same device with the same encryption keys.

use std::path::Path;

use matrix_sdk::Client;
use matrix_sdk::authentication::matrix::MatrixSession;

use super::MatrixConfig;

const SESSION_FILE: &str = "session.json";

/// A logged-in client: the stored session restored, else a new login (password or access
/// token), stored. The error is a reason without secrets.
pub(super) async fn connect(cfg: &MatrixConfig) -> Result<Client, String> {
    std::fs::create_dir_all(&cfg.store_dir)
        .map_err(|e| format!("creating {}: {e}", cfg.store_dir.display()))?;
    restrict(&cfg.store_dir, 0o700);
    let client = Client::builder()
        .homeserver_url(cfg.homeserver.trim())
        .sqlite_store(&cfg.store_dir, None)
        .build()
        .await
        .map_err(|e| format!("opening the Matrix client: {e}"))?;
    let path = cfg.store_dir.join(SESSION_FILE);
    if let Some(session) = read_session(&path)? {
        client
            .matrix_auth()
            .restore_session(session, matrix_sdk::store::RoomLoadSettings::default())
            .await
            .map_err(|e| format!("restoring the stored Matrix session: {e}"))?;
        return Ok(client);
    }
    let session = match (&cfg.access_token, &cfg.password) {
        (Some(token), _) => {
            let me = whoami(cfg, token).await?;
            MatrixSession {
                meta: matrix_sdk::SessionMeta {
                    user_id: me.user_id,
                    device_id: me.device_id.ok_or(
                        "the access token has no device (log in with a password, or use a device's token)",
                    )?,
                },
                tokens: matrix_sdk::SessionTokens {
                    access_token: token.clone(),
                    refresh_token: None,
                },
            }
        }
        (None, Some(password)) => {
            client
                .matrix_auth()
                .login_username(cfg.user.trim(), password)
                .initial_device_display_name(&cfg.device_name)
                .send()
                .await
                .map_err(|e| format!("logging in as {}: {e}", cfg.user))?;
            client
                .matrix_auth()
                .session()
                .ok_or("logged in, but the client has no session")?
        }
        (None, None) => return Err("set password or access_token".into()),
    };
    if cfg.access_token.is_some() {
        client
            .matrix_auth()
            .restore_session(
                session.clone(),
                matrix_sdk::store::RoomLoadSettings::default(),
            )
            .await
            .map_err(|e| format!("using the access token: {e}"))?;
    }
    write_session(&path, &session)?;
    Ok(client)
}

/// Who an access token belongs to, asked before the client has a session.
async fn whoami(
    cfg: &MatrixConfig,
    token: &str,
) -> Result<matrix_sdk::ruma::api::client::account::whoami::v3::Response, String> {
    let probe = Client::builder()
        .homeserver_url(cfg.homeserver.trim())
        .build()
        .await
        .map_err(|e| format!("opening the Matrix client: {e}"))?;
    probe
        .matrix_auth()
        .restore_session(
            MatrixSession {
                meta: matrix_sdk::SessionMeta {
                    user_id: matrix_sdk::ruma::OwnedUserId::try_from(cfg.user.trim())
                        .map_err(|e| format!("user {:?}: {e}", cfg.user))?,
                    device_id: "PROBE".into(),
                },
                tokens: matrix_sdk::SessionTokens {
                    access_token: token.to_owned(),
                    refresh_token: None,
                },
            },
            matrix_sdk::store::RoomLoadSettings::default(),
        )
        .await
        .map_err(|e| format!("using the access token: {e}"))?;
    probe
        .whoami()
        .await
        .map_err(|e| format!("the homeserver refused the access token: {e}"))
}

fn read_session(path: &Path) -> Result<Option<MatrixSession>, String> {
    match std::fs::read(path) {
        Ok(raw) => serde_json::from_slice(&raw).map(Some).map_err(|e| {
            format!(
                "{} is unreadable ({e}): delete it to log in again",
                path.display()
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("reading {}: {e}", path.display())),
    }
}

/// Written to a temporary file (0600) then renamed: a crash leaves the old one or the new.
fn write_session(path: &Path, session: &MatrixSession) -> Result<(), String> {
    let raw = serde_json::to_vec(session).map_err(|e| format!("encoding the session: {e}"))?;
    let tmp = path.with_extension("json.tmp");
    let write = || -> std::io::Result<()> {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new();
        f.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            f.mode(0o600);
        }
        let mut f = f.open(&tmp)?;
        f.write_all(&raw)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| format!("writing {}: {e}", path.display()))
}

fn restrict(path: &Path, mode: u32) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Err(e) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)) {
            tracing::warn!(path = %path.display(), error = %e, "restricting the Matrix store's permissions");
        }
    }
    #[cfg(not(unix))]
    let _ = (path, mode);
}
