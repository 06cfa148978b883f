//! The transcript as Markdown (`GET /v1/sessions/{id}/transcript.md`).

use std::fmt::Write;

use switchboard_protocol::{Role, TranscriptMessage};

/// Renders a transcript: a title, then one section per message; tool calls as fenced JSON.
pub fn render_transcript(title: &str, messages: &[TranscriptMessage]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# {}\n", title.replace('\n', " "));
    for m in messages {
        let who = match m.role {
            Role::User => "User",
            Role::Assistant => "Assistant",
            Role::System => "System",
            Role::Tool => "Tool result",
        };
        let _ = writeln!(out, "## {who}\n");
        let _ = writeln!(out, "_{}_\n", m.created_at.format("%Y-%m-%d %H:%M:%S UTC"));
        if let Some(id) = &m.tool_call_id {
            let _ = writeln!(out, "Call `{id}`:\n");
            let _ = writeln!(out, "{}\n", fence(&m.content, ""));
        } else if !m.content.is_empty() {
            let _ = writeln!(out, "{}\n", m.content.trim_end());
        }
        for call in &m.tool_calls {
            let args = serde_json::to_string_pretty(&call.arguments).unwrap_or_default();
            let _ = writeln!(out, "Tool call `{}` (`{}`):\n", call.name, call.id);
            let _ = writeln!(out, "{}\n", fence(&args, "json"));
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
            created_at: Utc::now(),
        }
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
