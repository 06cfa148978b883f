//! The data directory (0700) and the token file (0600).

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use anyhow::{Context, Result};
use rand::RngCore;

/// Creates the data directory if missing, and makes it 0700 at every start: it holds the
/// token, the databases and every file users sent, and a directory others can read (made
/// by hand, restored from a backup) would hand all of it out.
pub fn ensure_data_dir(dir: &Path) -> Result<()> {
    let created = !dir.exists();
    if created {
        fs::create_dir_all(dir)
            .with_context(|| format!("creating data directory {}", dir.display()))?;
    }
    if let Some(mode) = mode_of(dir)
        && mode != 0o700
    {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .with_context(|| format!("setting permissions of {}", dir.display()))?;
        if !created && mode & 0o077 != 0 {
            tracing::warn!(dir = %dir.display(), was = format!("{mode:o}"), "the data directory was readable by others; it is 0700 now");
        }
    }
    Ok(())
}

/// Reads the token file, or creates it with a fresh random token (mode 0600).
pub fn load_or_create_token(path: &Path) -> Result<(String, bool)> {
    if let Some(t) = read_token(path)? {
        return Ok((t, false));
    }
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating token file {}", path.display()))?;
    f.write_all(token.as_bytes())?;
    f.write_all(b"\n")?;
    Ok((token, true))
}

/// The token in the file, if the file exists.
pub fn read_token(path: &Path) -> Result<Option<String>> {
    match fs::read_to_string(path) {
        Ok(s) => {
            let t = s.trim().to_string();
            if t.is_empty() {
                anyhow::bail!(
                    "token file {} is empty; delete it to generate a new token",
                    path.display()
                );
            }
            Ok(Some(t))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading token file {}", path.display())),
    }
}

/// Unix mode bits of a path.
pub fn mode_of(path: &Path) -> Option<u32> {
    fs::metadata(path)
        .ok()
        .map(|m| m.permissions().mode() & 0o777)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_data_dir_is_tightened_at_every_start() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("data");
        ensure_data_dir(&d).unwrap();
        assert_eq!(mode_of(&d), Some(0o700));
        fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).unwrap();
        ensure_data_dir(&d).unwrap();
        assert_eq!(mode_of(&d), Some(0o700));
    }

    #[test]
    fn token_file_is_private_and_stable() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("token");
        let (t1, created) = load_or_create_token(&p).unwrap();
        assert!(created);
        assert_eq!(t1.len(), 64);
        assert_eq!(mode_of(&p), Some(0o600));
        let (t2, created) = load_or_create_token(&p).unwrap();
        assert!(!created);
        assert_eq!(t1, t2);
    }
}
