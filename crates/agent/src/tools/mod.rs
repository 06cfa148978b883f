//! The built-in agent's workspace tools: `view`, `create`, `str_replace`, `remove` and
//! `run_command`.
//!
//! The agent loop offers [`specs`] to the model, asks [`class`] how each call is to be
//! approved, shows [`preview`] to humans, and runs approved calls with [`execute`]. Every
//! failure — an unknown tool, a bad argument, a refused path, an IO error, a failing command —
//! comes back as a [`ToolOutput`] with `is_error` set and a message meant for the model;
//! `execute` never returns `Err` and never panics.
//!
//! File tools resolve paths through a [`Workspace`], which (when confining) refuses any path
//! that resolves outside its root, and in every mode refuses Switchboard's own state
//! (`forbidden_path`: data directory, token, configuration, files store, checkpoints). `run_command` is **not** sandboxed: it runs `bash` with the
//! server's privileges, with the workspace root as its working directory; only the file tools
//! are confined.

mod command;
mod files;
mod path;
pub mod sandbox;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use switchboard_engine::ToolClass;
use tokio_util::sync::CancellationToken;

use crate::provider::ToolSpec;

pub use path::Workspace;

/// Limits applied to every tool call.
#[derive(Debug, Clone)]
pub struct ToolLimits {
    /// `run_command` timeout when the model gives none.
    pub default_timeout: Duration,
    /// Longest `run_command` timeout the model may ask for; longer ones are clamped.
    pub max_timeout: Duration,
    /// Most characters of output a tool returns (command output, file views).
    pub output_cap: usize,
}

impl Default for ToolLimits {
    fn default() -> Self {
        Self {
            default_timeout: Duration::from_secs(120),
            max_timeout: Duration::from_secs(600),
            output_cap: 30_000,
        }
    }
}

/// The result of one tool call, as it goes back to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    pub content: String,
    pub is_error: bool,
    /// What the run's log should say of the call besides its result, for the people
    /// watching (a command the sandbox refused), as a `Notice`.
    pub notice: Option<String>,
}

impl ToolOutput {
    pub(crate) fn ok(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            is_error: false,
            notice: None,
        }
    }

    pub(crate) fn error(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            is_error: true,
            notice: None,
        }
    }
}

/// Why a workspace could not be opened or a path was refused.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("workspace root {}: {source}", path.display())]
    Root {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("workspace root {} is not a directory", .0.display())]
    RootNotDirectory(PathBuf),
    #[error("path {path:?} resolves outside the workspace ({}); refused", root.display())]
    Outside { path: String, root: PathBuf },
    #[error("path {path:?}: {message}")]
    Path { path: String, message: String },
    /// Switchboard's own state, refused in every permission mode.
    #[error("{}", switchboard_engine::ProtectedPaths::refusal(path, by))]
    Forbidden { path: String, by: PathBuf },
}

impl From<ToolError> for ToolOutput {
    fn from(e: ToolError) -> Self {
        ToolOutput::error(e.to_string())
    }
}

/// The names of the tools, in the order [`specs`] lists them.
pub const TOOL_NAMES: [&str; 7] = [
    "view",
    "create",
    "str_replace",
    "remove",
    "run_command",
    "send_file",
    "search_sessions",
];

/// The workspace tools, with JSON schemas and descriptions for the model.
pub fn specs() -> Vec<ToolSpec> {
    let mut specs = file_and_command_specs();
    specs.push(ToolSpec {
        name: "send_file".into(),
        description: "Send a file of the workspace to the user: it is delivered where they \
            talk to you (a chat gets it as a document or a photo, the console as a download). \
            Use it for what a user wants to see or keep — a screenshot, a report, a build \
            artifact, a patch. The usual file size and type limits apply."
            .into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "The file, relative to the workspace root."
                },
                "caption": {
                    "type": "string",
                    "description": "A short line that goes with it."
                }
            },
            "required": ["path"],
            "additionalProperties": false
        }),
    });
    specs.push(ToolSpec {
        name: "search_sessions".into(),
        description: "Search what was said and done in the user's sessions, this one and \
            earlier ones: messages, tool calls and their results, file names. Use it to recall \
            a decision, a fix or a command from earlier work before asking the user again. \
            Words are all required; \"a phrase\" and prefix* work. Read-only."
            .into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "description": "What to look for: words, \"a phrase\", prefix*."
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 20,
                    "description": "How many hits, best first (default 8)."
                }
            },
            "required": ["query"],
            "additionalProperties": false
        }),
    });
    specs
}

/// The view/create/str_replace/remove/run_command specs.
fn file_and_command_specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "view".into(),
            description: "Look at a file or a directory in the workspace. For a file, returns its \
                lines numbered like `cat -n` (number, tab, line); use `view_range` to see only \
                some lines and `grep` to see only the lines matching a regular expression (both \
                may be combined). For a directory, lists its entries two levels deep, sorted by \
                name, directories with a trailing `/`, files with their size in bytes (`.git` is \
                skipped). Paths are relative to the workspace root. Long output is truncated; \
                narrow it with `view_range` or `grep`."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "path": {
                        "type": "string",
                        "description": "File or directory, relative to the workspace root (`.` is the root)."
                    },
                    "view_range": {
                        "type": "array",
                        "items": {"type": "integer"},
                        "minItems": 2,
                        "maxItems": 2,
                        "description": "Files only: [start, end], 1-based and inclusive; end = -1 means to the end of the file."
                    },
                    "grep": {
                        "type": "string",
                        "description": "Files only: a regular expression (Rust regex syntax); only matching lines are shown, with their line numbers."
                    }
                },
                "required": ["path"],
                "additionalProperties": false
            }),
        },
        ToolSpec {
            name: "create".into(),
            description: "Create a file with the given content, or overwrite it completely if it \
                exists. Missing parent directories are created. To change part of an existing \
                file, prefer `str_replace`."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "path": {
                        "type": "string",
                        "description": "File to write, relative to the workspace root."
                    },
                    "file_text": {
                        "type": "string",
                        "description": "The complete new content of the file."
                    }
                },
                "required": ["path", "file_text"],
                "additionalProperties": false
            }),
        },
        ToolSpec {
            name: "str_replace".into(),
            description: "Edit a text file by replacing one exact occurrence of `old_str` with \
                `new_str`. `old_str` must match the file exactly (including whitespace and \
                indentation) and occur exactly once; if it occurs several times, include more \
                surrounding lines to make it unique. Use an empty `new_str` to delete the text. \
                Returns the edited region with line numbers."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "path": {
                        "type": "string",
                        "description": "File to edit, relative to the workspace root."
                    },
                    "old_str": {
                        "type": "string",
                        "description": "The exact text to replace; must occur exactly once in the file."
                    },
                    "new_str": {
                        "type": "string",
                        "description": "The replacement text (may be empty)."
                    }
                },
                "required": ["path", "old_str", "new_str"],
                "additionalProperties": false
            }),
        },
        ToolSpec {
            name: "remove".into(),
            description: "Delete a file, or a directory with everything in it when `recursive` \
                is true. A symbolic link is removed itself, not what it points to. The \
                workspace root itself cannot be removed."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "path": {
                        "type": "string",
                        "description": "File or directory to delete, relative to the workspace root."
                    },
                    "recursive": {
                        "type": "boolean",
                        "description": "Required (true) to delete a directory and its contents. Default false."
                    }
                },
                "required": ["path"],
                "additionalProperties": false
            }),
        },
        ToolSpec {
            name: "run_command".into(),
            description: "Run a shell command with `bash -c` in the workspace root and return \
                its combined stdout and stderr followed by a final line with the exit code. \
                stdin is closed (no interactive input). The command is killed, with all \
                processes it started, when it exceeds its timeout. Long output keeps only its \
                beginning and end, so redirect verbose output to a file and `grep`/`tail` it. \
                To leave a process running in the background, redirect its output \
                (`cmd > log 2>&1 &`); background processes still holding the output open \
                shortly after the command exits are killed."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "command": {
                        "type": "string",
                        "description": "The bash command line to run."
                    },
                    "timeout_secs": {
                        "type": "integer",
                        "minimum": 1,
                        "description": "Seconds before the command is killed. Optional: the server default (usually 120) applies; values above the server maximum (usually 600) are clamped."
                    }
                },
                "required": ["command"],
                "additionalProperties": false
            }),
        },
    ]
}

/// How a tool call is approved: `view`, `send_file` and `search_sessions` read; `create`,
/// `str_replace` and `remove` write; `run_command` executes. Unknown names give `None`.
pub fn class(name: &str) -> Option<ToolClass> {
    match name {
        // Sending the user a file of their workspace reads it; searching the sessions reads
        // what the session's owner may read.
        "view" | "send_file" | "search_sessions" => Some(ToolClass::Read),
        "create" | "str_replace" | "remove" => Some(ToolClass::Write),
        "run_command" => Some(ToolClass::Execute),
        _ => None,
    }
}

/// Longest preview of a command or path, in characters.
const PREVIEW_MAX: usize = 200;

/// A one-line, human-readable summary of a call, e.g. `run_command: cargo test`,
/// `create src/a.rs (12 lines)`, `remove build/ (recursive)`.
pub fn preview(name: &str, args: &Value) -> String {
    let s = |field: &str| args.get(field).and_then(Value::as_str);
    let path = || one_line(s("path").unwrap_or("?"));
    match name {
        "run_command" => format!("run_command: {}", one_line(s("command").unwrap_or("?"))),
        "view" => {
            let mut p = format!("view {}", path());
            if let Some(range) = args.get("view_range").and_then(Value::as_array) {
                let parts: Vec<String> = range.iter().map(Value::to_string).collect();
                p.push_str(&format!(" [{}]", parts.join(", ")));
            }
            if let Some(re) = s("grep") {
                p.push_str(&format!(" grep /{}/", one_line(re)));
            }
            p
        }
        "create" => match s("file_text") {
            Some(text) => format!(
                "create {} ({})",
                path(),
                plural(text.lines().count(), "line")
            ),
            None => format!("create {}", path()),
        },
        "str_replace" => format!("str_replace {}", path()),
        "send_file" => format!("send_file {}", path()),
        "search_sessions" => format!("search_sessions {}", one_line(s("query").unwrap_or("?"))),
        "remove" => {
            if args.get("recursive").and_then(Value::as_bool) == Some(true) {
                format!("remove {} (recursive)", path())
            } else {
                format!("remove {}", path())
            }
        }
        other => format!("{} {}", one_line(other), one_line(&args.to_string())),
    }
}

/// Runs one tool call. Never fails: every problem is an error [`ToolOutput`] for the model.
pub async fn execute(
    ws: &Workspace,
    limits: &ToolLimits,
    name: &str,
    args: &Value,
    cancel: &CancellationToken,
) -> ToolOutput {
    if class(name).is_none() {
        return ToolOutput::error(format!(
            "unknown tool {name:?}; the available tools are {}",
            TOOL_NAMES.join(", ")
        ));
    }
    if !args.is_object() {
        return ToolOutput::error(format!(
            "{name}: the arguments must be a JSON object, got {}",
            json_kind(args)
        ));
    }
    let out = match name {
        "run_command" => command::run_command(ws, limits, args, cancel).await,
        _ => {
            let (ws, limits, name_owned, args) =
                (ws.clone(), limits.clone(), name.to_owned(), args.clone());
            let job = tokio::task::spawn_blocking(move || match name_owned.as_str() {
                "view" => files::view(&ws, &limits, &args),
                "create" => files::create(&ws, &args),
                "str_replace" => files::str_replace(&ws, &limits, &args),
                "remove" => files::remove(&ws, &args),
                other => ToolOutput::error(format!("unknown tool {other:?}")),
            });
            // File work runs on the blocking pool; a cancel does not wait for it (the
            // thread finishes on its own, the run goes on).
            tokio::select! {
                r = job => match r {
                    Ok(out) => out,
                    Err(e) => ToolOutput::error(format!("{name} failed internally: {e}")),
                },
                _ = cancel.cancelled() => ToolOutput::error(format!("{name}: cancelled")),
            }
        }
    };
    if out.is_error {
        tracing::debug!(tool = name, error = %first_line(&out.content), "tool call failed");
    }
    out
}

// ---------------------------------------------------------------------------------------
// Argument helpers shared by the tools.

/// A required string field.
pub(crate) fn req_str<'a>(tool: &str, args: &'a Value, field: &str) -> Result<&'a str, ToolOutput> {
    match args.get(field) {
        Some(Value::String(s)) => Ok(s),
        None | Some(Value::Null) => Err(ToolOutput::error(format!(
            "{tool}: missing required argument `{field}` (a string)"
        ))),
        Some(other) => Err(ToolOutput::error(format!(
            "{tool}: argument `{field}` must be a string, got {}",
            json_kind(other)
        ))),
    }
}

/// An optional string field.
pub(crate) fn opt_str<'a>(
    tool: &str,
    args: &'a Value,
    field: &str,
) -> Result<Option<&'a str>, ToolOutput> {
    match args.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => req_str(tool, args, field).map(Some),
    }
}

/// An optional boolean field (also accepts the strings "true"/"false").
pub(crate) fn opt_bool(tool: &str, args: &Value, field: &str) -> Result<Option<bool>, ToolOutput> {
    match args.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(Value::String(s)) if s == "true" => Ok(Some(true)),
        Some(Value::String(s)) if s == "false" => Ok(Some(false)),
        Some(other) => Err(ToolOutput::error(format!(
            "{tool}: argument `{field}` must be a boolean, got {}",
            json_kind(other)
        ))),
    }
}

/// An integer, also accepted as an integral float (`10.0`) or a numeric string (`"10"`).
pub(crate) fn as_integer(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                .map(|f| f as i64)
        }),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

pub(crate) use switchboard_protocol::error::json_kind;

/// `1 line`, `2 lines`.
pub(crate) fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("{n} {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// `970000` → `970,000`.
pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

/// The first line of `s`, at most [`PREVIEW_MAX`] characters, with `…` when shortened.
fn one_line(s: &str) -> String {
    let line = first_line(s.trim_start());
    let mut out: String = line.chars().take(PREVIEW_MAX).collect();
    if out.len() < line.len() || line.len() < s.trim_start().trim_end().len() {
        out.push_str(" …");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(970_000), "970,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn previews() {
        assert_eq!(
            preview("run_command", &json!({"command": "cargo test"})),
            "run_command: cargo test"
        );
        assert_eq!(
            preview("run_command", &json!({"command": "echo a\necho b"})),
            "run_command: echo a …"
        );
        assert_eq!(
            preview(
                "create",
                &json!({"path": "src/a.rs", "file_text": "a\nb\n"})
            ),
            "create src/a.rs (2 lines)"
        );
        assert_eq!(
            preview("str_replace", &json!({"path": "src/a.rs"})),
            "str_replace src/a.rs"
        );
        assert_eq!(preview("view", &json!({"path": "src/"})), "view src/");
        assert_eq!(
            preview(
                "view",
                &json!({"path": "a", "view_range": [1, -1], "grep": "fn"})
            ),
            "view a [1, -1] grep /fn/"
        );
        assert_eq!(
            preview("remove", &json!({"path": "build/", "recursive": true})),
            "remove build/ (recursive)"
        );
        assert_eq!(preview("remove", &json!({})), "remove ?");
    }

    #[test]
    fn classes_and_specs_agree() {
        let specs = specs();
        assert_eq!(specs.len(), TOOL_NAMES.len());
        for (spec, name) in specs.iter().zip(TOOL_NAMES) {
            assert_eq!(spec.name, name);
            assert!(class(name).is_some());
            assert_eq!(spec.input_schema["type"], "object");
        }
        assert_eq!(class("view"), Some(ToolClass::Read));
        assert_eq!(class("remove"), Some(ToolClass::Write));
        assert_eq!(class("run_command"), Some(ToolClass::Execute));
        assert_eq!(class("fetch"), None);
    }
}
