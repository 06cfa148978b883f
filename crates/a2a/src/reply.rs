//! What a remote agent's stream says, as a run's events: artifacts' text streamed as the
//! reply, their files shared, status messages as progress (thoughts) or as the reply, and the
//! task's final state as the run's end.

use base64::Engine as _;
use serde_json::Value;
use switchboard_engine::{EngineError, RunHandle};

/// A task state, from its proto3 JSON name (`TASK_STATE_COMPLETED`); the pre-1.0
/// lower-case names (`completed`, `input-required`) are read too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Submitted,
    Working,
    Completed,
    Failed,
    Canceled,
    Rejected,
    InputRequired,
    AuthRequired,
    Unknown,
}

impl State {
    pub fn parse(s: &str) -> Self {
        let s = s
            .trim_start_matches("TASK_STATE_")
            .to_ascii_lowercase()
            .replace('_', "-");
        match s.as_str() {
            "submitted" => Self::Submitted,
            "working" => Self::Working,
            "completed" => Self::Completed,
            "failed" => Self::Failed,
            "canceled" | "cancelled" => Self::Canceled,
            "rejected" => Self::Rejected,
            "input-required" => Self::InputRequired,
            "auth-required" => Self::AuthRequired,
            _ => Self::Unknown,
        }
    }

    /// The task will not move again without the caller: the run ends here.
    pub fn settles(self) -> bool {
        !matches!(self, Self::Submitted | Self::Working | Self::Unknown)
    }

    /// The task waits for the caller's next message.
    pub fn wants_input(self) -> bool {
        matches!(self, Self::InputRequired | Self::AuthRequired)
    }
}

/// How the stream left the task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    pub state: State,
    /// The status message's text, if it had one.
    pub message: String,
}

/// The run's view of one task's stream.
#[derive(Default)]
pub struct Reply {
    pub task_id: Option<String>,
    pub context_id: Option<String>,
    /// The reply's text so far (what the transcript records).
    pub text: String,
    /// Each artifact's text shown so far, by id.
    artifacts: std::collections::HashMap<String, String>,
    /// How many parts of each artifact were looked at for files.
    file_parts: std::collections::HashMap<String, usize>,
    /// The last progress message shown (a polled task repeats it).
    progress: String,
    /// The message continues a task that waited for input: the task as it was (the first
    /// `task` the agent sends back) is not said again.
    continuing: bool,
    pub settled: Option<Settled>,
    /// Files shared by this run.
    pub files: u32,
}

impl Reply {
    /// The reply to a message that continues a task waiting for input.
    pub fn continuing() -> Self {
        Self {
            continuing: true,
            ..Self::default()
        }
    }

    /// Takes one `StreamResponse` (or a `SendMessage` result: the same `task` / `message`).
    pub async fn take(&mut self, handle: &RunHandle, item: &Value) -> Result<(), EngineError> {
        let continuing = std::mem::take(&mut self.continuing);
        if let Some(task) = item.get("task")
            && continuing
        {
            // The task as it was before this message: what it said then is not said again,
            // and the input it required is what this message gives.
            self.ids(task.get("id"), task.get("contextId"));
            for a in task
                .get("artifacts")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let id = a
                    .get("artifactId")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                self.artifacts.insert(id.to_string(), parts_text(a));
                let parts = a.get("parts").and_then(Value::as_array).map_or(0, Vec::len);
                self.file_parts.insert(id.to_string(), parts);
            }
            let state = task
                .get("status")
                .and_then(|s| s.get("state"))
                .and_then(Value::as_str)
                .map(State::parse);
            if state.is_some_and(|s| s.settles() && !s.wants_input()) {
                // Ended meanwhile (cancelled elsewhere, say).
                self.status(handle, task.get("status")).await?;
            }
            return Ok(());
        }
        if let Some(task) = item.get("task") {
            self.ids(task.get("id"), task.get("contextId"));
            for a in task
                .get("artifacts")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                self.artifact(handle, a, false).await?;
            }
            self.status(handle, task.get("status")).await?;
        } else if let Some(message) = item.get("message") {
            // A direct answer: no task; the message is the whole reply.
            self.ids(message.get("taskId"), message.get("contextId"));
            let text = parts_text(message);
            self.say(handle, &text).await?;
            self.share_files(handle, message).await?;
            self.settled = Some(Settled {
                state: State::Completed,
                message: String::new(),
            });
        } else if let Some(update) = item.get("statusUpdate") {
            self.ids(update.get("taskId"), update.get("contextId"));
            self.status(handle, update.get("status")).await?;
        } else if let Some(update) = item.get("artifactUpdate") {
            self.ids(update.get("taskId"), update.get("contextId"));
            let append = update
                .get("append")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            if let Some(a) = update.get("artifact") {
                self.artifact(handle, a, append).await?;
            }
        }
        Ok(())
    }

    fn ids(&mut self, task: Option<&Value>, context: Option<&Value>) {
        let set = |slot: &mut Option<String>, v: Option<&Value>| {
            if let Some(v) = v.and_then(Value::as_str).filter(|v| !v.is_empty()) {
                *slot = Some(v.to_string());
            }
        };
        set(&mut self.task_id, task);
        set(&mut self.context_id, context);
    }

    async fn status(
        &mut self,
        handle: &RunHandle,
        status: Option<&Value>,
    ) -> Result<(), EngineError> {
        let Some(status) = status else {
            return Ok(());
        };
        let state = State::parse(
            status
                .get("state")
                .and_then(Value::as_str)
                .unwrap_or_default(),
        );
        let message = status.get("message").map(parts_text).unwrap_or_default();
        if !state.settles() {
            // Progress: shown as the agent's thinking, not as its reply.
            if !message.trim().is_empty() && message != self.progress {
                self.progress = message.clone();
                handle
                    .stream_thought(format!("{}\n", message.trim_end()))
                    .await?;
            }
            return Ok(());
        }
        // What the agent asks is its reply; what it says as it finishes, when it has no
        // other.
        let says = match state {
            State::InputRequired | State::AuthRequired => true,
            State::Completed => self.text.is_empty(),
            _ => false,
        };
        if says && !message.trim().is_empty() {
            let text = if self.text.is_empty() {
                message.clone()
            } else {
                format!("\n\n{message}")
            };
            self.say(handle, &text).await?;
        }
        if let Some(m) = status.get("message") {
            self.share_files(handle, m).await?;
        }
        self.settled = Some(Settled { state, message });
        Ok(())
    }

    /// An artifact, whole (`append` false: a task's snapshot, or an update that replaces)
    /// or a piece to add. Only what was not shown yet is said: a snapshot read again (a
    /// task polled) repeats nothing, and a replacement that does not extend what was shown
    /// is said again on its own paragraph.
    async fn artifact(
        &mut self,
        handle: &RunHandle,
        artifact: &Value,
        append: bool,
    ) -> Result<(), EngineError> {
        let id = artifact
            .get("artifactId")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let text = parts_text(artifact);
        let shown = self.artifacts.entry(id).or_default();
        let new = if append {
            let fresh = shown.is_empty();
            shown.push_str(&text);
            if fresh && !text.is_empty() && !self.text.is_empty() {
                format!("\n\n{text}")
            } else {
                text
            }
        } else if let Some(rest) = text.strip_prefix(shown.as_str()) {
            let rest = rest.to_string();
            let fresh = shown.is_empty();
            *shown = text;
            if fresh && !rest.is_empty() && !self.text.is_empty() {
                format!("\n\n{rest}")
            } else {
                rest
            }
        } else {
            *shown = text.clone();
            format!("\n\n{text}")
        };
        self.say(handle, &new).await?;
        let files = artifact
            .get("parts")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        let seen = self
            .file_parts
            .entry(
                artifact
                    .get("artifactId")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            )
            .or_default();
        if append || files > *seen {
            // Only parts not seen before: a polled snapshot shares nothing twice.
            let skip = if append { 0 } else { *seen };
            *seen = if append { *seen + files } else { files };
            let parts: Vec<Value> = artifact
                .get("parts")
                .and_then(Value::as_array)
                .map(|p| p.iter().skip(skip).cloned().collect())
                .unwrap_or_default();
            self.share_files(handle, &serde_json::json!({"parts": parts}))
                .await?;
        }
        Ok(())
    }

    async fn say(&mut self, handle: &RunHandle, text: &str) -> Result<(), EngineError> {
        if text.is_empty() {
            return Ok(());
        }
        self.text.push_str(text);
        handle.stream_text(text.to_string()).await
    }

    /// Each file part with its bytes (`raw`) is shared with the user as a file of the
    /// session; a file given by `url` is named in the reply (it is not fetched: the URL is
    /// the agent's to hand out, and fetching what an agent names is how requests reach
    /// places they should not).
    async fn share_files(&mut self, handle: &RunHandle, holder: &Value) -> Result<(), EngineError> {
        for part in holder
            .get("parts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = part
                .get("filename")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .unwrap_or("file");
            if let Some(raw) = part.get("raw").and_then(Value::as_str) {
                let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(raw) else {
                    self.say(
                        handle,
                        &format!("\n[{name}: the agent sent bytes that are not base64]"),
                    )
                    .await?;
                    continue;
                };
                match shared(handle, name, &bytes).await {
                    Ok(()) => self.files += 1,
                    Err(why) => {
                        self.say(handle, &format!("\n[{name}: not shared: {why}]"))
                            .await?;
                    }
                }
            } else if let Some(url) = part.get("url").and_then(Value::as_str) {
                self.say(handle, &format!("\n[{name}: {url}]")).await?;
            }
        }
        Ok(())
    }
}

/// Stores `bytes` as a shared file named `name` (through a private temporary copy: sharing
/// reads a path).
async fn shared(handle: &RunHandle, name: &str, bytes: &[u8]) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| format!("a temporary directory: {e}"))?;
    let clean: String = name
        .chars()
        .map(|c| {
            if c == '/' || c == '\\' || c.is_control() {
                '_'
            } else {
                c
            }
        })
        .collect();
    let clean = match clean.trim_matches('.') {
        "" => "file".to_string(),
        _ => clean,
    };
    let path = dir.path().join(clean);
    tokio::fs::write(&path, bytes)
        .await
        .map_err(|e| format!("writing a temporary copy: {e}"))?;
    handle
        .share_file(&path, None)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The text parts of a message or artifact, joined; structured (`data`) parts as JSON.
pub fn parts_text(holder: &Value) -> String {
    let mut out = String::new();
    for part in holder
        .get("parts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(t) = part.get("text").and_then(Value::as_str) {
            out.push_str(t);
        } else if let Some(d) = part.get("data") {
            if !out.is_empty() && !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str("```json\n");
            out.push_str(&serde_json::to_string_pretty(d).unwrap_or_default());
            out.push_str("\n```\n");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn states_read_both_spellings() {
        assert_eq!(
            State::parse("TASK_STATE_INPUT_REQUIRED"),
            State::InputRequired
        );
        assert_eq!(State::parse("input-required"), State::InputRequired);
        assert_eq!(State::parse("TASK_STATE_CANCELED"), State::Canceled);
        assert_eq!(State::parse("TASK_STATE_WORKING"), State::Working);
        assert!(!State::parse("TASK_STATE_WORKING").settles());
        assert!(State::parse("TASK_STATE_AUTH_REQUIRED").settles());
        assert!(!State::parse("TASK_STATE_UNSPECIFIED").settles());
    }

    #[test]
    fn text_and_data_parts_are_read() {
        let m =
            json!({"parts": [{"text": "a "}, {"text": "b"}, {"data": {"k": 1}}, {"raw": "AA=="}]});
        assert_eq!(parts_text(&m), "a b\n```json\n{\n  \"k\": 1\n}\n```\n");
    }
}
