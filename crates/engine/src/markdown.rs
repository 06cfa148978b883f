//! The transcript as Markdown (`GET /v1/sessions/{id}/transcript.md`).

use std::collections::HashMap;
use std::fmt::Write;

use switchboard_protocol::{Role, TranscriptMessage};

/// Renders a transcript: a title, then one section per message. Tool calls show their
/// command (for `run_command`) or their arguments as JSON; each tool result names the call it
/// answers and says when it is an error.
pub fn render_transcript(title: &str, messages: &[TranscriptMessage]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# {}\n", title.replace('\n', " "));
    let mut names: HashMap<&str, &str> = HashMap::new();
    for m in messages {
        for c in &m.tool_calls {
            names.insert(c.id.as_str(), c.name.as_str());
        }
    }
    for m in messages {
        let heading = match (m.role, &m.tool_call_id) {
            (Role::Tool, Some(id)) => {
                let name = names.get(id.as_str()).copied().unwrap_or("tool");
                let err = if m.is_error { " (error)" } else { "" };
                format!("Tool result: `{name}` (`{id}`){err}")
            }
            (Role::User, _) => "User".into(),
            (Role::Assistant, _) => "Assistant".into(),
            (Role::System, _) => "System".into(),
            (Role::Tool, None) => "Tool result".into(),
        };
        let _ = writeln!(out, "## {heading}\n");
        let _ = writeln!(out, "_{}_\n", m.created_at.format("%Y-%m-%d %H:%M:%S UTC"));
        if m.role == Role::Tool {
            let _ = writeln!(out, "{}\n", fence(&m.content, ""));
        } else if !m.content.is_empty() {
            let _ = writeln!(out, "{}\n", m.content.trim_end());
        }
        for call in &m.tool_calls {
            let _ = writeln!(out, "**Tool call** `{}` (`{}`):\n", call.name, call.id);
            match call.arguments.get("command").and_then(|c| c.as_str()) {
                Some(cmd) if call.name == "run_command" => {
                    let _ = writeln!(out, "{}\n", fence(cmd, "sh"));
                }
                _ => {
                    let args = serde_json::to_string_pretty(&call.arguments).unwrap_or_default();
                    let _ = writeln!(out, "{}\n", fence(&args, "json"));
                }
            }
        }
    }
    out
}

/// Wraps text in a code fence longer than any backtick run inside it.
fn fence(text: &str, lang: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    let ticks = "`".repeat(longest.max(2) + 1);
    format!("{ticks}{lang}\n{}\n{ticks}", text.trim_end_matches('\n'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use uuid::Uuid;

    fn msg(role: Role, content: &str) -> TranscriptMessage {
        TranscriptMessage {
            id: Uuid::nil(),
            run_id: None,
            role,
            content: content.into(),
            tool_calls: vec![],
            tool_call_id: None,
            is_error: false,
            created_at: Utc::now(),
        }
    }

    #[test]
    fn tool_calls_and_results_are_readable() {
        let mut a = msg(Role::Assistant, "Let me look.");
        a.tool_calls = vec![
            switchboard_protocol::ToolCall {
                id: "c1".into(),
                name: "run_command".into(),
                arguments: serde_json::json!({"command": "ls -la"}),
                metadata: None,
            },
            switchboard_protocol::ToolCall {
                id: "c2".into(),
                name: "view".into(),
                arguments: serde_json::json!({"path": "src/main.rs"}),
                metadata: None,
            },
        ];
        let mut r1 = msg(Role::Tool, "total 0\nexit code: 0");
        r1.tool_call_id = Some("c1".into());
        let mut r2 = msg(
            Role::Tool,
            "The tool call was not run: rejected by the user",
        );
        r2.tool_call_id = Some("c2".into());
        r2.is_error = true;
        let md = render_transcript("T", &[a, r1, r2]);
        assert!(md.contains("**Tool call** `run_command` (`c1`)"), "{md}");
        assert!(md.contains("```sh\nls -la\n```"), "{md}");
        assert!(md.contains("\"path\": \"src/main.rs\""), "{md}");
        assert!(
            md.contains("## Tool result: `run_command` (`c1`)\n"),
            "{md}"
        );
        assert!(md.contains("## Tool result: `view` (`c2`) (error)"), "{md}");
        assert!(md.contains("rejected by the user"), "{md}");
    }

    #[test]
    fn renders_roles_in_order() {
        let md = render_transcript("T", &[msg(Role::User, "hi"), msg(Role::Assistant, "hello")]);
        let u = md.find("## User").unwrap();
        let a = md.find("## Assistant").unwrap();
        assert!(md.starts_with("# T"));
        assert!(u < a);
        assert!(md.contains("hello"));
    }

    #[test]
    fn fences_outgrow_backticks_inside() {
        let f = fence("a ```` b", "");
        assert!(f.starts_with("`````\n"), "{f}");
    }
}
