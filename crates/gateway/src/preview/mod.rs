//! Readable previews of pending tool calls, for the approval prompt sent to a chat.
//!
//! Plain text only: chat platforms render no markdown reliably, so a preview is a title line
//! plus, for some tools, body lines, with code shown between ```` ``` ```` lines (readable as
//! plain text too). Every piece of text taken from a call is escaped: control characters
//! become `\u{1b}`-style escapes (`\n` and `\t` in single-line places), invisible formatting
//! characters (bidi overrides, zero-width characters) become `\u{202e}`-style escapes, and a
//! shown line that would look like a fence line gets a backslash (`\```), so that what a
//! person reads to decide is what would run.

use serde_json::Value;
use switchboard_protocol::ToolCall;

use crate::text::truncate;

/// Longest title line, in chars.
const TITLE_MAX: usize = 300;
/// Lines of a new file's content shown by `create`.
const CREATE_LINES: usize = 10;
/// A body part given less room than this (in chars, for its text) is left out.
const MIN_PART: usize = 6;
/// "```\n" + "\n```".
const BLOCK_OVERHEAD: usize = 8;

/// One call: a title line plus optional body lines, at most `max_chars` chars in all.
///
/// The title is cut first to [`TITLE_MAX`] chars, then to `max_chars`; the body gets the rest
/// of the room (code blocks are cut with "…" and keep their fence lines) or is left out.
pub fn preview_call(call: &ToolCall, max_chars: usize) -> String {
    let preview = Preview::of(call);
    let title = truncate(&preview.title, max_chars);
    let room = max_chars.saturating_sub(title.chars().count() + 1);
    match render_parts(&preview.body, room) {
        Some(body) => format!("{title}\n{body}"),
        None => title,
    }
}

/// The whole approval prompt: a header ("🔧 Approve 2 tool calls?", or "🔧 Approve
/// run_command?" for one call), each call's preview (numbered when there are several), and,
/// if `auto_accepted > 0`, a line "(3 more calls were allowed by the allowlist)".
///
/// The whole text is at most `max_chars` chars: the longest previews' bodies are cut first
/// (down to nothing if need be), and every call keeps its title line (cut too, the longest
/// first, only when the titles alone do not fit).
pub fn approval_prompt(calls: &[ToolCall], auto_accepted: usize, max_chars: usize) -> String {
    let previews: Vec<Preview> = calls.iter().map(Preview::of).collect();
    let header = match calls {
        [] => "🔧 No tool calls wait for approval.".to_string(),
        [one] => format!("🔧 Approve {}?", display_name(&one.name)),
        many => format!("🔧 Approve {} tool calls?", many.len()),
    };
    let footer = match auto_accepted {
        0 => None,
        1 => Some("(1 more call was allowed by the allowlist)".to_string()),
        n => Some(format!("({n} more calls were allowed by the allowlist)")),
    };
    let labels: Vec<String> = (1..=previews.len())
        .map(|i| {
            if previews.len() > 1 {
                format!("{i}. ")
            } else {
                String::new()
            }
        })
        .collect();

    // Fixed text: header, a blank line before each entry and the footer, labels, footer.
    let fixed = count(&header)
        + labels.iter().map(|l| 2 + count(l)).sum::<usize>()
        + footer.as_deref().map_or(0, |f| 2 + count(f));

    let title_sizes: Vec<usize> = previews.iter().map(|p| count(&p.title)).collect();
    let title_cap = water_level(&title_sizes, max_chars.saturating_sub(fixed));
    let titles: Vec<String> = previews
        .iter()
        .map(|p| truncate(&p.title, title_cap))
        .collect();

    let used = fixed + titles.iter().map(|t| count(t)).sum::<usize>();
    // A body costs its text and the '\n' before it.
    let body_sizes: Vec<usize> = previews
        .iter()
        .map(|p| render_parts(&p.body, usize::MAX).map_or(0, |b| count(&b) + 1))
        .collect();
    let body_cap = water_level(&body_sizes, max_chars.saturating_sub(used));

    let mut out = header;
    for (((preview, title), label), size) in
        previews.iter().zip(&titles).zip(&labels).zip(&body_sizes)
    {
        out.push_str("\n\n");
        out.push_str(label);
        out.push_str(title);
        let room = (*size).min(body_cap).saturating_sub(1);
        if let Some(body) = render_parts(&preview.body, room) {
            out.push('\n');
            out.push_str(&body);
        }
    }
    if let Some(footer) = footer {
        out.push_str("\n\n");
        out.push_str(&footer);
    }
    // Only when even the header, labels and footer do not fit.
    truncate(&out, max_chars)
}

/// A call's preview before it is fitted to a size.
struct Preview {
    /// Escaped, at most [`TITLE_MAX`] chars.
    title: String,
    body: Vec<Part>,
}

/// A piece of a preview's body; its texts are escaped already.
enum Part {
    /// A line (or lines) of plain text.
    Plain(String),
    /// Text shown between fence lines.
    Block(String),
    /// A block with removed ("- ") and added ("+ ") lines, each cut on its own.
    Diff { old: String, new: String },
}

impl Preview {
    fn of(call: &ToolCall) -> Self {
        let args = &call.arguments;
        let text = |key: &str| args.get(key).and_then(Value::as_str);
        let built = match call.name.as_str() {
            "run_command" => text("command").map(|command| run_command(args, command)),
            "create" => text("path")
                .zip(text("file_text"))
                .map(|(path, content)| create(path, content)),
            "str_replace" => match (text("path"), text("old_str"), text("new_str")) {
                (Some(path), Some(old), Some(new)) => Some(Preview {
                    title: format!("str_replace {}", escape_inline(path)),
                    body: vec![Part::Diff {
                        old: prefixed_lines(old, "- "),
                        new: prefixed_lines(new, "+ "),
                    }],
                }),
                _ => None,
            },
            "remove" => text("path").map(|path| {
                let mut title = format!("remove {}", escape_inline(path));
                if args.get("recursive").and_then(Value::as_bool) == Some(true) {
                    title.push_str(" (recursive)");
                }
                Preview::title_only(title)
            }),
            "view" => text("path").map(|path| view(args, path)),
            name if name.starts_with("acp__") => Some(acp(call)),
            _ => None,
        };
        let mut preview = built.unwrap_or_else(|| other(call));
        preview.title = truncate(&preview.title, TITLE_MAX);
        preview
    }

    fn title_only(title: String) -> Self {
        Preview {
            title,
            body: Vec::new(),
        }
    }
}

/// `run_command {command, timeout_secs?, host?}`.
fn run_command(args: &Value, command: &str) -> Preview {
    let mut title = String::from("run_command");
    match args.get("host") {
        None | Some(Value::Null) => {}
        Some(Value::String(host)) => {
            title.push_str(" on ");
            title.push_str(&escape_inline(host));
        }
        Some(other) => {
            title.push_str(" on ");
            title.push_str(&escape_inline(&other.to_string()));
        }
    }
    if let Some(secs) = args.get("timeout_secs").and_then(Value::as_u64) {
        title.push_str(&format!(" (timeout {secs} s)"));
    }
    if command.trim().is_empty() {
        title.push_str(" (empty command)");
        return Preview::title_only(title);
    }
    Preview {
        title,
        body: vec![Part::Block(block_lines(command.lines()))],
    }
}

/// `create {path, file_text}`: the size and the first lines.
fn create(path: &str, content: &str) -> Preview {
    let n = content.lines().count();
    let size = match n {
        0 if content.is_empty() => "empty".to_string(),
        1 => "1 line".to_string(),
        n => format!("{n} lines"),
    };
    let title = format!("create {} ({size})", escape_inline(path));
    if content.trim().is_empty() {
        return Preview::title_only(title);
    }
    let mut shown = block_lines(content.lines().take(CREATE_LINES));
    if n > CREATE_LINES {
        shown.push_str(&format!("\n… ({} more lines)", n - CREATE_LINES));
    }
    Preview {
        title,
        body: vec![Part::Block(shown)],
    }
}

/// `view {path, view_range?, grep?}`: one line.
fn view(args: &Value, path: &str) -> Preview {
    let mut title = format!("view {}", escape_inline(path));
    match args.get("view_range") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) if items.len() == 2 => {
            let start = range_bound(&items[0]);
            let end = match items[1].as_i64() {
                Some(-1) => "end".to_string(),
                _ => range_bound(&items[1]),
            };
            title.push_str(&format!(" lines {start}–{end}"));
        }
        Some(other) => title.push_str(&format!(" lines {}", escape_inline(&other.to_string()))),
    }
    if let Some(pattern) = args.get("grep").and_then(Value::as_str) {
        title.push_str(&format!(" grep /{}/", escape_inline(pattern)));
    }
    Preview::title_only(title)
}

fn range_bound(v: &Value) -> String {
    match v.as_i64() {
        Some(n) => n.to_string(),
        None => escape_inline(&v.to_string()),
    }
}

/// An ACP agent's call, `acp__<kind>`: its metadata's title (or preview) and kind, plus a
/// `command` and a path from the arguments when they have them.
fn acp(call: &ToolCall) -> Preview {
    let meta = call.metadata.as_ref();
    let meta_text = |key: &str| {
        meta.and_then(|m| m.get(key))
            .and_then(Value::as_str)
            .filter(|s| !s.trim().is_empty())
    };
    let kind = meta_text("kind")
        .or_else(|| call.name.strip_prefix("acp__"))
        .filter(|k| !k.is_empty())
        .unwrap_or("other");
    let title = match (meta_text("title"), meta_text("preview")) {
        (Some(title), _) => format!("{}: {}", escape_inline(kind), escape_inline(title)),
        (None, Some(preview)) => escape_inline(preview),
        (None, None) => escape_inline(kind),
    };
    let args = &call.arguments;
    let mut body = Vec::new();
    let command = match args.get("command") {
        Some(Value::String(c)) => Some(c.clone()),
        Some(Value::Array(parts)) if parts.iter().all(Value::is_string) => Some(
            parts
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" "),
        ),
        _ => None,
    };
    if let Some(command) = command.filter(|c| !c.trim().is_empty()) {
        body.push(Part::Block(block_lines(command.lines())));
    }
    let path = ["path", "file_path", "abs_path"]
        .iter()
        .find_map(|key| args.get(*key).and_then(Value::as_str));
    let locations: Vec<&str> = meta
        .and_then(|m| m.get("locations"))
        .and_then(Value::as_array)
        .map(|l| l.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    match path {
        Some(path) => body.push(Part::Plain(format!("path: {}", escape_inline(path)))),
        None if !locations.is_empty() => {
            let shown: Vec<String> = locations.iter().map(|l| escape_inline(l)).collect();
            body.push(Part::Plain(format!("path: {}", shown.join(", "))));
        }
        None => {}
    }
    Preview { title, body }
}

/// Any other call (or a built-in one with unexpected arguments): "NAME: " and its most telling
/// string argument (`command`, `path`, `url`, `query`, else the first string field), else its
/// arguments as compact JSON.
fn other(call: &ToolCall) -> Preview {
    let name = escape_inline(&call.name);
    let args = &call.arguments;
    let telling = ["command", "path", "url", "query"]
        .iter()
        .find_map(|key| args.get(*key).and_then(Value::as_str))
        .or_else(|| {
            args.as_object()
                .and_then(|fields| fields.values().find_map(Value::as_str))
        });
    let title = match (telling, args) {
        (Some(value), _) => format!("{name}: {}", escape_inline(value)),
        (None, Value::Null) => name,
        (None, Value::Object(fields)) if fields.is_empty() => name,
        (None, args) => format!("{name}: {}", escape_inline(&args.to_string())),
    };
    Preview::title_only(title)
}

/// The tool name as the prompt's header shows it: `acp__execute` as `execute`.
fn display_name(name: &str) -> String {
    let name = name
        .strip_prefix("acp__")
        .filter(|n| !n.is_empty())
        .unwrap_or(name);
    truncate(&escape_inline(name), 80)
}

/// Lines for a block, each escaped, joined with '\n'.
fn block_lines<'a>(lines: impl Iterator<Item = &'a str>) -> String {
    lines.map(escape_line).collect::<Vec<_>>().join("\n")
}

/// Each line of `text` escaped and prefixed (a diff side); empty for empty text.
fn prefixed_lines(text: &str, prefix: &str) -> String {
    text.lines()
        .map(|l| match l {
            "" => prefix.trim_end().to_string(),
            l => format!("{prefix}{}", escape_line(l)),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Renders body parts, joined by '\n', in at most `room` chars; `None` when nothing fits.
fn render_parts(parts: &[Part], room: usize) -> Option<String> {
    if parts.is_empty() {
        return None;
    }
    let sizes: Vec<usize> = parts
        .iter()
        .map(|p| p.render(usize::MAX).map_or(0, |s| count(&s)))
        .collect();
    let separators = parts.len() - 1;
    let cap = water_level(&sizes, room.saturating_sub(separators));
    let rendered: Vec<String> = parts
        .iter()
        .zip(&sizes)
        .filter_map(|(part, size)| part.render((*size).min(cap)))
        .collect();
    (!rendered.is_empty()).then(|| rendered.join("\n"))
}

impl Part {
    /// The part in at most `room` chars, cut with "…" if need be; `None` if it cannot be
    /// shown usefully in that room.
    fn render(&self, room: usize) -> Option<String> {
        match self {
            Part::Plain(text) => {
                let n = count(text);
                if n <= room {
                    Some(text.clone())
                } else if room >= MIN_PART {
                    Some(truncate(text, room))
                } else {
                    None
                }
            }
            Part::Block(text) => {
                let inner = room.saturating_sub(BLOCK_OVERHEAD);
                if count(text) <= inner {
                    Some(format!("```\n{text}\n```"))
                } else if inner >= MIN_PART {
                    Some(format!("```\n{}\n```", truncate(text, inner)))
                } else {
                    None
                }
            }
            Part::Diff { old, new } => {
                let sides: Vec<&String> =
                    [old, new].into_iter().filter(|s| !s.is_empty()).collect();
                if sides.is_empty() {
                    return None;
                }
                let separators = sides.len() - 1;
                let inner = room.saturating_sub(BLOCK_OVERHEAD + separators);
                let sizes: Vec<usize> = sides.iter().map(|s| count(s)).collect();
                if sizes.iter().sum::<usize>() > inner && inner < MIN_PART * sides.len() {
                    return None;
                }
                let cap = water_level(&sizes, inner);
                let shown: Vec<String> = sides.iter().map(|s| truncate(s, cap)).collect();
                Some(format!("```\n{}\n```", shown.join("\n")))
            }
        }
    }
}

/// The largest cap such that the sizes, each cut to it, sum to at most `total`
/// (`usize::MAX` when they fit uncut). Used to cut the longest pieces first.
fn water_level(sizes: &[usize], total: usize) -> usize {
    if sizes.iter().sum::<usize>() <= total {
        return usize::MAX;
    }
    let (mut lo, mut hi) = (0, sizes.iter().copied().max().unwrap_or(0));
    // Invariant: lo fits, hi does not.
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if sizes.iter().map(|&s| s.min(mid)).sum::<usize>() <= total {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

fn count(s: &str) -> usize {
    s.chars().count()
}

/// Characters that change how text around them looks without showing themselves: bidi
/// controls, zero-width characters, the soft hyphen, the byte order mark.
fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{061C}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{2069}'
            | '\u{FEFF}'
    )
}

fn push_escaped(out: &mut String, c: char) {
    if c.is_control() {
        out.extend(c.escape_debug());
    } else {
        out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
    }
}

/// Text for one line: every control character escaped, newlines and tabs included.
fn escape_inline(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() || is_invisible(c) {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
    }
    out
}

/// One line of a block: control characters escaped except tabs, and a leading ```` ``` ````
/// (which would end the block to a reader) escaped with a backslash.
fn escape_line(line: &str) -> String {
    let mut out = String::with_capacity(line.len() + 2);
    let indent = line.len() - line.trim_start().len();
    let fence_like = line.trim_start().starts_with("```");
    for (i, c) in line.char_indices() {
        if fence_like && i == indent {
            out.push('\\');
        }
        if (c.is_control() && c != '\t') || is_invisible(c) {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
