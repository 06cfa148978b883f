//! What `switchboard setup` writes: the configuration file, edited in place (its comments
//! and other keys kept), and the secrets file beside it, mode 0600 from its first byte.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use toml_edit::{DocumentMut, Item, Table, value};

/// The two files being edited.
pub struct Files {
    pub config_path: PathBuf,
    pub secrets_path: PathBuf,
    pub config: DocumentMut,
    pub secrets: DocumentMut,
    /// The files as they were read (`None`: not there), for [`Files::restore`].
    original: (Option<String>, Option<String>),
}

impl Files {
    /// Reads both files (either may not exist yet).
    pub fn read(config_path: PathBuf, secrets_path: PathBuf) -> Result<Self> {
        let read = |p: &Path| -> Result<(DocumentMut, Option<String>)> {
            match std::fs::read_to_string(p) {
                Ok(text) => Ok((
                    text.parse()
                        .with_context(|| format!("{} is not valid TOML", p.display()))?,
                    Some(text),
                )),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    Ok((DocumentMut::new(), None))
                }
                Err(e) => Err(e).with_context(|| format!("reading {}", p.display())),
            }
        };
        let (config, config_text) = read(&config_path)?;
        let (secrets, secrets_text) = read(&secrets_path)?;
        Ok(Self {
            config,
            secrets,
            config_path,
            secrets_path,
            original: (config_text, secrets_text),
        })
    }

    /// A string in the configuration file (`["provider", "model"]`).
    pub fn get(&self, path: &[&str]) -> Option<String> {
        get(&self.config, path)
    }

    /// A secret: the secrets file's, else one left in the configuration file.
    pub fn get_secret(&self, path: &[&str]) -> Option<String> {
        get(&self.secrets, path).or_else(|| get(&self.config, path))
    }

    /// Sets a key of the configuration file.
    pub fn set(&mut self, path: &[&str], v: &str) {
        set(&mut self.config, path, v);
    }

    /// Sets a secret in the secrets file and takes it out of the configuration file.
    pub fn set_secret(&mut self, path: &[&str], v: &str) {
        set(&mut self.secrets, path, v);
        remove(&mut self.config, path);
    }

    /// Takes a secret out of both files (a key that belongs to a provider no longer used).
    pub fn remove_secret(&mut self, path: &[&str]) {
        remove(&mut self.secrets, path);
        remove(&mut self.config, path);
    }

    /// Writes both files: the secrets file first (0600; also when it has become empty, so
    /// that a removed key is gone), then the configuration file (its own mode kept; a new
    /// one 0600, as it may come to hold a token or a database password).
    pub fn write(&self) -> Result<()> {
        if !self.secrets.as_table().is_empty() || self.secrets_path.exists() {
            write_file(&self.secrets_path, &self.secrets.to_string(), Some(0o600))?;
        }
        write_file(&self.config_path, &self.config.to_string(), None)
    }
}

impl Files {
    /// Puts both files back as they were read (one that was not there is removed): a change
    /// written and then found wrong leaves nothing of itself.
    pub fn restore(&self) -> Result<()> {
        for (path, text, mode) in [
            (&self.secrets_path, &self.original.1, Some(0o600)),
            (&self.config_path, &self.original.0, None),
        ] {
            match text {
                Some(t) => write_file(path, t, mode)?,
                None => match std::fs::remove_file(path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(e).with_context(|| format!("removing {}", path.display()));
                    }
                    _ => {}
                },
            }
        }
        Ok(())
    }
}

fn get(doc: &DocumentMut, path: &[&str]) -> Option<String> {
    let (last, tables) = path.split_last()?;
    let mut t = doc.as_table() as &dyn toml_edit::TableLike;
    for k in tables {
        t = t.get(k)?.as_table_like()?;
    }
    t.get(last)?.as_str().map(str::to_string)
}

fn set(doc: &mut DocumentMut, path: &[&str], v: &str) {
    let Some((last, tables)) = path.split_last() else {
        return;
    };
    let mut t = doc.as_table_mut() as &mut dyn toml_edit::TableLike;
    for k in tables {
        // A table, or an inline one (`provider = { kind = "openai" }`): kept as written.
        if !t.get(k).is_some_and(Item::is_table_like) {
            let mut new = Table::new();
            // `[channels.telegram]` without an empty `[channels]` above it.
            new.set_implicit(true);
            t.insert(k, Item::Table(new));
        }
        let Some(next) = t.get_mut(k).and_then(Item::as_table_like_mut) else {
            return;
        };
        t = next;
    }
    t.insert(last, value(v));
}

fn remove(doc: &mut DocumentMut, path: &[&str]) {
    let Some((last, tables)) = path.split_last() else {
        return;
    };
    let mut t = doc.as_table_mut() as &mut dyn toml_edit::TableLike;
    for k in tables {
        let Some(next) = t.get_mut(k).and_then(Item::as_table_like_mut) else {
            return;
        };
        t = next;
    }
    t.remove(last);
}

/// Writes `text` to `path` through a temporary file renamed over it: with `mode`, else the
/// mode the file has (0600 for a new one); created with it, so that nothing is readable by
/// others even for a moment. A symbolic link is followed (the file it names is replaced, not
/// the link); a missing directory is made 0700.
fn write_file(path: &Path, text: &str, mode: Option<u32>) -> Result<()> {
    let path = &std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mode = mode.unwrap_or_else(|| {
        std::fs::metadata(path).map_or(0o600, |m| m.permissions().mode() & 0o777)
    });
    if let Some(dir) = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty() && !d.exists())
    {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("restricting {}", dir.display()))?;
    }
    let tmp = path.with_extension("toml.tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .with_context(|| format!("writing {}", tmp.display()))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing {}", tmp.display()))?;
    // Exactly `mode`, whatever the umask took off at creation.
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("restricting {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    // The rename itself is durable once the directory is.
    if let Some(dir) = path.parent() {
        let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn secrets_move_out_of_the_config_and_comments_stay() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("switchboard.toml");
        std::fs::write(
            &config,
            "# mine\nlisten = \"127.0.0.1:9\"\n\n[provider]\napi_key = \"sk-old\"\n",
        )
        .unwrap();
        let mut f = Files::read(config.clone(), dir.path().join("secrets.toml")).unwrap();
        assert_eq!(
            f.get_secret(&["provider", "api_key"]).as_deref(),
            Some("sk-old")
        );
        f.set(&["provider", "model"], "m");
        f.set_secret(&["provider", "api_key"], "sk-new");
        f.set_secret(&["channels", "telegram", "token"], "1:abc");
        f.write().unwrap();
        let text = std::fs::read_to_string(&config).unwrap();
        assert!(text.starts_with("# mine\nlisten"), "{text}");
        assert!(
            text.contains("model = \"m\"") && !text.contains("sk-"),
            "{text}"
        );
        let secrets = dir.path().join("secrets.toml");
        let s = std::fs::read_to_string(&secrets).unwrap();
        assert!(s.contains("api_key = \"sk-new\""), "{s}");
        assert!(
            s.contains("[channels.telegram]") && !s.contains("[channels]\n"),
            "{s}"
        );
        let mode = std::fs::metadata(&secrets).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn a_file_keeps_its_mode_inline_tables_stay_and_a_removed_secret_goes() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("switchboard.toml");
        std::fs::write(
            &config,
            "provider = { kind = \"openai\", max_retries = 5 }\n",
        )
        .unwrap();
        std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o640)).unwrap();
        let secrets = dir.path().join("secrets.toml");
        std::fs::write(&secrets, "[provider]\napi_key = \"sk-old\"\n").unwrap();
        std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o600)).unwrap();
        let mut f = Files::read(config.clone(), secrets.clone()).unwrap();
        assert_eq!(f.get(&["provider", "kind"]).as_deref(), Some("openai"));
        f.set(&["provider", "model"], "m");
        f.remove_secret(&["provider", "api_key"]);
        f.write().unwrap();
        let text = std::fs::read_to_string(&config).unwrap();
        assert!(
            text.contains("max_retries = 5") && text.contains("model = \"m\""),
            "{text}"
        );
        assert_eq!(
            std::fs::metadata(&config).unwrap().permissions().mode() & 0o777,
            0o640
        );
        assert!(
            !std::fs::read_to_string(&secrets)
                .unwrap()
                .contains("sk-old")
        );
        // A new configuration file is the owner's alone.
        let fresh = dir.path().join("new/switchboard.toml");
        let mut g = Files::read(fresh.clone(), dir.path().join("new/secrets.toml")).unwrap();
        g.set(&["provider", "model"], "m");
        g.write().unwrap();
        assert_eq!(
            std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
}
