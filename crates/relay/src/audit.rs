//! The audit log: one JSON line per relay request and outcome, one file per bundle
//! (`relay/audit/BUNDLE.jsonl` in the data directory). Message bodies are left out unless
//! the operator turned `audit_bodies` on.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// Appends and reads audit lines. Writes are serialized by the caller's lock.
#[derive(Debug)]
pub struct AuditLog {
    dir: PathBuf,
    lock: parking_lot::Mutex<()>,
}

/// Most lines one read returns.
pub const MAX_AUDIT_LINES: usize = 1000;

impl AuditLog {
    /// `dir` is created (0700) on the first write.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            lock: parking_lot::Mutex::new(()),
        }
    }

    fn path(&self, bundle: &str) -> PathBuf {
        self.dir.join(format!("{bundle}.jsonl"))
    }

    /// Appends one entry: `ts` and `event` first, then `fields`. Failures are logged, never
    /// returned: a full disk must not stop message delivery.
    pub fn record(&self, bundle: &str, event: &str, fields: Value) {
        let mut obj = Map::new();
        obj.insert(
            "ts".into(),
            Value::String(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
        );
        obj.insert("event".into(), Value::String(event.into()));
        obj.insert("bundle".into(), Value::String(bundle.into()));
        if let Value::Object(f) = fields {
            obj.extend(f);
        }
        let mut line = Value::Object(obj).to_string();
        line.push('\n');
        let _guard = self.lock.lock();
        if let Err(e) = append(&self.dir, &self.path(bundle), line.as_bytes()) {
            tracing::warn!(error = %e, bundle, "could not write the relay audit log");
        }
    }

    /// The newest `limit` entries (oldest first), optionally only those whose `event`
    /// starts with `event_prefix`. Reads the file's tail only.
    pub fn tail(
        &self,
        bundle: &str,
        limit: usize,
        event_prefix: Option<&str>,
    ) -> std::io::Result<Vec<Value>> {
        let limit = limit.clamp(1, MAX_AUDIT_LINES);
        let mut f = match std::fs::File::open(self.path(bundle)) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let len = f.metadata()?.len();
        // Read a growing tail until it holds enough matching lines or the whole file.
        let mut window: u64 = 64 * 1024;
        loop {
            let start = len.saturating_sub(window);
            f.seek(SeekFrom::Start(start))?;
            let mut buf = Vec::new();
            f.read_to_end(&mut buf)?;
            let text = String::from_utf8_lossy(&buf);
            let mut lines: Vec<&str> = text.lines().collect();
            if start > 0 && !lines.is_empty() {
                lines.remove(0); // probably cut in the middle
            }
            let entries: Vec<Value> = lines
                .iter()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .filter(|v| match event_prefix {
                    None => true,
                    Some(p) => v["event"].as_str().is_some_and(|e| e.starts_with(p)),
                })
                .collect();
            if entries.len() >= limit || start == 0 {
                let skip = entries.len().saturating_sub(limit);
                return Ok(entries.into_iter().skip(skip).collect());
            }
            window = window.saturating_mul(4);
        }
    }
}

fn append(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn records_and_reads_the_tail() {
        let d = tempfile::tempdir().unwrap();
        let log = AuditLog::new(d.path().join("audit"));
        assert!(log.tail("dev", 10, None).unwrap().is_empty());
        for i in 0..3000 {
            let ev = if i % 2 == 0 {
                "relay.send.request"
            } else {
                "relay.look"
            };
            log.record("dev", ev, json!({"requester": "a", "i": i}));
        }
        let t = log.tail("dev", 5, None).unwrap();
        assert_eq!(t.len(), 5);
        assert_eq!(t[4]["i"], 2999);
        assert_eq!(t[0]["i"], 2995);
        assert_eq!(t[0]["bundle"], "dev");
        let t = log.tail("dev", 1000, Some("relay.send")).unwrap();
        assert_eq!(t.len(), 1000);
        assert!(t.iter().all(|e| e["event"] == "relay.send.request"));
        assert_eq!(t[999]["i"], 2998);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(d.path().join("audit/dev.jsonl"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
