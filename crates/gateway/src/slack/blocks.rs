//! Block Kit: the agent's Markdown as Slack blocks and mrkdwn, buttons as `actions`.

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::channel::Button;

use super::*;

/// Escapes what Slack's text fields treat specially: `&`, `<`, `>`.
pub(super) fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

pub(super) fn count(s: &str) -> usize {
    s.chars().count()
}

/// Markdown inline syntax as Slack mrkdwn: `**b**`/`__b__` → `*b*`, `*i*` → `_i_`, `~~s~~` →
/// `~s~`, `[text](url)` → `<url|text>`, `<https://…>` kept as a link, code spans kept; `&`,
/// `<`, `>` escaped (so agent text cannot ping `<!channel>`), except in user mentions
/// (`<@U123>`, see [`mention`]) and channel links (`<#C123>`).
pub fn mrkdwn(line: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::with_capacity(line.len());
    inline(&chars, &mut out);
    out
}

/// Where `pat` next occurs in `chars` from `from`, with a non-space char before it.
pub(super) fn find_closing(chars: &[char], from: usize, pat: &[char]) -> Option<usize> {
    let mut j = from;
    while j + pat.len() <= chars.len() {
        if chars[j..j + pat.len()] == *pat && j > from && !chars[j - 1].is_whitespace() {
            return Some(j);
        }
        j += 1;
    }
    None
}

pub(super) fn inline(chars: &[char], out: &mut String) {
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match c {
            '`' => {
                let mut n = 0;
                while chars.get(i + n) == Some(&'`') {
                    n += 1;
                }
                let ticks = vec!['`'; n];
                let close = (i + n..chars.len().saturating_sub(n - 1))
                    .find(|&j| chars[j..j + n] == *ticks && chars.get(j + n) != Some(&'`'));
                match close {
                    Some(j) if j > i + n => {
                        let code: String = chars[i + n..j].iter().collect();
                        out.push('`');
                        out.push_str(&escape(code.trim()));
                        out.push('`');
                        i = j + n;
                    }
                    _ => {
                        out.extend(&ticks);
                        i += n;
                    }
                }
            }
            '*' | '_' | '~' if next == Some(c) => {
                let pat = [c, c];
                let start = i + 2;
                match find_closing(chars, start, &pat) {
                    Some(j) if chars.get(start).is_some_and(|s| !s.is_whitespace()) => {
                        let mark = if c == '~' { '~' } else { '*' };
                        out.push(mark);
                        inline(&chars[start..j], out);
                        out.push(mark);
                        i = j + 2;
                    }
                    _ => {
                        out.push(c);
                        out.push(c);
                        i += 2;
                    }
                }
            }
            '*' => {
                let start = i + 1;
                let close = (start + 1..chars.len()).find(|&j| {
                    chars[j] == '*'
                        && chars.get(j + 1) != Some(&'*')
                        && chars[j - 1] != '*'
                        && !chars[j - 1].is_whitespace()
                });
                match close {
                    Some(j) if chars.get(start).is_some_and(|s| !s.is_whitespace()) => {
                        out.push('_');
                        inline(&chars[start..j], out);
                        out.push('_');
                        i = j + 1;
                    }
                    _ => {
                        out.push('*');
                        i += 1;
                    }
                }
            }
            '[' => {
                if let Some((text_end, url_end)) = link_at(chars, i) {
                    let text: String = chars[i + 1..text_end].iter().collect();
                    let url: String = chars[text_end + 2..url_end].iter().collect();
                    let mut label = String::new();
                    inline(&text.chars().collect::<Vec<_>>(), &mut label);
                    out.push('<');
                    out.push_str(&escape(&url).replace('|', "%7C"));
                    out.push('|');
                    out.push_str(&label.replace('|', "¦"));
                    out.push('>');
                    i = url_end + 1;
                } else {
                    out.push('[');
                    i += 1;
                }
            }
            '<' => {
                let close = chars[i + 1..].iter().position(|&ch| ch == '>');
                let auto = close.map(|n| chars[i + 1..i + 1 + n].iter().collect::<String>());
                match auto {
                    Some(tag) if is_user_tag(&tag) => {
                        out.push('<');
                        out.push_str(&tag);
                        out.push('>');
                        i += tag.chars().count() + 2;
                    }
                    Some(url) if is_url(&url) => {
                        out.push('<');
                        out.push_str(&escape(&url).replace('|', "%7C"));
                        out.push('>');
                        i += url.chars().count() + 2;
                    }
                    _ => {
                        out.push_str("&lt;");
                        i += 1;
                    }
                }
            }
            '>' => {
                out.push_str("&gt;");
                i += 1;
            }
            '&' => {
                out.push_str("&amp;");
                i += 1;
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
}

/// `@U123` / `@W123|name` / `#C123`: a Slack user mention or channel link (kept as it
/// is; `<!channel>`-style broadcasts are not).
pub(super) fn is_user_tag(s: &str) -> bool {
    let Some(rest) = s.strip_prefix('@').or_else(|| s.strip_prefix('#')) else {
        return false;
    };
    let (id, label) = rest.split_once('|').unwrap_or((rest, ""));
    id.len() >= 2
        && id
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
        && !label.contains(['<', '>', '&'])
}

/// Escapes `&`, `<`, `>`, keeping user mentions and channel links (see [`is_user_tag`]).
pub(super) fn escape_keep_mentions(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find('<') {
        out.push_str(&escape(&rest[..pos]));
        let after = &rest[pos + 1..];
        match after.find('>') {
            Some(end) if is_user_tag(&after[..end]) => {
                out.push('<');
                out.push_str(&after[..end]);
                out.push('>');
                rest = &after[end + 1..];
            }
            _ => {
                out.push_str("&lt;");
                rest = after;
            }
        }
    }
    out.push_str(&escape(rest));
    out
}

pub(super) fn is_url(s: &str) -> bool {
    (s.starts_with("https://") || s.starts_with("http://") || s.starts_with("mailto:"))
        && s.len() > 8
        && !s.chars().any(char::is_whitespace)
}

/// `[text](url)` at `i`: the index of `]` and of the closing `)`.
pub(super) fn link_at(chars: &[char], i: usize) -> Option<(usize, usize)> {
    let text_end = i + 1 + chars[i + 1..].iter().position(|&c| c == ']')?;
    if chars.get(text_end + 1) != Some(&'(') || text_end == i + 1 {
        return None;
    }
    let url_start = text_end + 2;
    let url_end = url_start + chars[url_start..].iter().position(|&c| c == ')')?;
    let url: String = chars[url_start..url_end].iter().collect();
    is_url(&url).then_some((text_end, url_end))
}

/// `text` of a header (plain text): inline Markdown marks removed.
pub(super) fn plain(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '['
            && let Some((text_end, url_end)) = link_at(&chars, i)
        {
            out.extend(&chars[i + 1..text_end]);
            i = url_end + 1;
            continue;
        }
        let c = chars[i];
        let double = matches!(c, '*' | '_' | '~') && chars.get(i + 1) == Some(&c);
        if double {
            i += 2;
            continue;
        }
        if c != '`' {
            out.push(c);
        }
        i += 1;
    }
    out.trim().to_owned()
}

pub(super) fn section(text: &str) -> Value {
    json!({"type": "section", "text": {"type": "mrkdwn", "text": text}})
}

/// Sections of `text` (mrkdwn), split to at most [`MAX_CHARS`] each (code fences repaired).
pub(super) fn push_sections(blocks: &mut Vec<Value>, text: &str) {
    if text.trim().is_empty() {
        return;
    }
    if count(text) <= MAX_CHARS {
        blocks.push(section(text));
        return;
    }
    for chunk in crate::text::split_message(text, MAX_CHARS) {
        blocks.push(section(&chunk));
    }
}

pub(super) fn is_fence(line: &str) -> bool {
    let indent = line.len() - line.trim_start_matches(' ').len();
    indent <= 3 && line.trim_start_matches(' ').starts_with("```")
}

pub(super) fn heading(line: &str) -> Option<&str> {
    let t = line.trim_start();
    let hashes = t.len() - t.trim_start_matches('#').len();
    if !(1..=6).contains(&hashes) {
        return None;
    }
    let rest = &t[hashes..];
    if !rest.is_empty() && !rest.starts_with(' ') {
        return None;
    }
    Some(rest.trim().trim_end_matches('#').trim())
}

pub(super) fn is_rule(line: &str) -> bool {
    let t: String = line.chars().filter(|c| !c.is_whitespace()).collect();
    t.len() >= 3
        && (t.chars().all(|c| c == '-')
            || t.chars().all(|c| c == '*')
            || t.chars().all(|c| c == '_'))
}

/// One line of a paragraph as mrkdwn: list bullets as "•", quotes kept.
pub(super) fn paragraph_line(line: &str) -> String {
    let trimmed = line.trim_start();
    let indent = &line[..line.len() - trimmed.len()];
    for bullet in ["- ", "* ", "+ "] {
        if let Some(rest) = trimmed.strip_prefix(bullet) {
            let rest = rest.trim_start();
            // task lists
            let rest = rest
                .strip_prefix("[ ] ")
                .map(|r| format!("☐ {r}"))
                .or_else(|| {
                    rest.strip_prefix("[x] ")
                        .or_else(|| rest.strip_prefix("[X] "))
                        .map(|r| format!("☑ {r}"))
                })
                .unwrap_or_else(|| rest.to_owned());
            return format!("{indent}• {}", mrkdwn(&rest));
        }
    }
    if let Some(rest) = trimmed.strip_prefix('>') {
        return format!("> {}", mrkdwn(rest.trim_start()));
    }
    format!("{indent}{}", mrkdwn(trimmed.trim_end()))
}

/// Block Kit blocks for `markdown` (the agent's reply) and `buttons`:
///
/// - `# heading` → a `header` block (a bold section when longer than 150 chars);
/// - paragraphs (and lists, bullets as "•", and quotes) → `section` blocks with `mrkdwn`
///   (see [`mrkdwn`]);
/// - fenced code → a section with ```` ``` ```` … ```` ``` ```` (the info string dropped);
/// - `---` → a `divider`;
/// - sections longer than 3000 chars are split; when there would be more than 50 blocks,
///   neighbouring sections are merged, and what still does not fit is cut ("…");
/// - buttons → an `actions` block of `button`s (`action_id` and `value` = the data; the
///   first one `style: primary`).
///
/// Fails when a button's data is empty or longer than 255 bytes.
pub fn markdown_blocks(markdown: &str, buttons: &[Button]) -> Result<Vec<Value>, String> {
    let actions = actions_blocks(buttons)?;
    let mut blocks: Vec<Value> = Vec::new();
    let mut para: Vec<String> = Vec::new();
    let mut code: Option<Vec<&str>> = None;
    let flush = |blocks: &mut Vec<Value>, para: &mut Vec<String>| {
        if !para.is_empty() {
            push_sections(blocks, &para.join("\n"));
            para.clear();
        }
    };
    for line in markdown.lines() {
        if let Some(lines) = &mut code {
            if is_fence(line) && line.trim().trim_start_matches('`').is_empty() {
                push_sections(&mut blocks, &code_text(lines));
                code = None;
            } else {
                lines.push(line);
            }
            continue;
        }
        if is_fence(line) {
            flush(&mut blocks, &mut para);
            code = Some(Vec::new());
            continue;
        }
        if line.trim().is_empty() {
            flush(&mut blocks, &mut para);
            continue;
        }
        if let Some(h) = heading(line) {
            flush(&mut blocks, &mut para);
            let text = plain(h);
            if text.is_empty() {
                continue;
            }
            if count(&text) <= MAX_HEADER_CHARS {
                blocks.push(json!({
                    "type": "header",
                    "text": {"type": "plain_text", "text": text, "emoji": true},
                }));
            } else {
                push_sections(&mut blocks, &format!("*{}*", mrkdwn(h)));
            }
            continue;
        }
        if is_rule(line) {
            flush(&mut blocks, &mut para);
            blocks.push(json!({"type": "divider"}));
            continue;
        }
        para.push(paragraph_line(line));
    }
    if let Some(lines) = &code {
        push_sections(&mut blocks, &code_text(lines));
    }
    flush(&mut blocks, &mut para);
    let room = MAX_BLOCKS.saturating_sub(actions.len()).max(1);
    if blocks.len() > room {
        blocks = merge_sections(blocks);
    }
    if blocks.len() > room {
        let rest: Vec<String> = blocks
            .drain(room - 1..)
            .filter_map(|b| block_text(&b))
            .collect();
        let rest = crate::text::truncate(&rest.join("\n\n"), MAX_CHARS);
        blocks.push(section(&rest));
    }
    blocks.extend(actions);
    Ok(blocks)
}

pub(super) fn code_text(lines: &[&str]) -> String {
    let body = escape(&lines.join("\n"));
    let body = if body.trim().is_empty() {
        " ".into()
    } else {
        body
    };
    format!("```\n{body}\n```")
}

/// The text a block shows (for merging and cutting).
pub(super) fn block_text(b: &Value) -> Option<String> {
    let text = b.get("text")?.get("text")?.as_str()?;
    match b.get("type").and_then(Value::as_str) {
        Some("header") => Some(format!("*{}*", escape(text))),
        _ => Some(text.to_owned()),
    }
}

/// Neighbouring sections (and headers, as bold lines) merged while they fit in one.
pub(super) fn merge_sections(blocks: Vec<Value>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let mut current: Option<String> = None;
    for b in blocks {
        let Some(text) = block_text(&b) else {
            if let Some(t) = current.take() {
                out.push(section(&t));
            }
            out.push(b);
            continue;
        };
        current = match current.take() {
            Some(cur) if count(&cur) + 2 + count(&text) <= MAX_CHARS => {
                Some(format!("{cur}\n\n{text}"))
            }
            Some(cur) => {
                out.push(section(&cur));
                Some(text)
            }
            None => Some(text),
        };
    }
    if let Some(t) = current {
        out.push(section(&t));
    }
    out
}

pub(super) fn actions_blocks(buttons: &[Button]) -> Result<Vec<Value>, String> {
    let mut used = HashSet::new();
    let mut elements = Vec::with_capacity(buttons.len());
    for (i, b) in buttons.iter().enumerate() {
        if b.data.is_empty() || b.data.len() > MAX_BUTTON_DATA {
            return Err(format!(
                "button {:?}: data must be 1 to {MAX_BUTTON_DATA} bytes (is {})",
                b.text,
                b.data.len()
            ));
        }
        // action ids must be unique in a message
        let mut action_id = b.data.clone();
        let mut n = 1;
        while !used.insert(action_id.clone()) {
            n += 1;
            action_id = format!("{}#{n}", b.data);
        }
        let text = if b.text.trim().is_empty() {
            b.data.clone()
        } else {
            b.text.clone()
        };
        let mut e = json!({
            "type": "button",
            "text": {"type": "plain_text", "text": crate::text::truncate(&text, MAX_BUTTON_TEXT), "emoji": true},
            "action_id": action_id,
            "value": b.data,
        });
        if i == 0 {
            e["style"] = json!("primary");
        }
        elements.push(e);
    }
    Ok(elements
        .chunks(MAX_ACTIONS)
        .enumerate()
        .map(|(i, row)| {
            json!({"type": "actions", "block_id": format!("switchboard_actions_{i}"), "elements": row})
        })
        .collect())
}

/// Longest `text` field Slack keeps (it truncates longer ones).
pub(super) const TEXT_FIELD_CHARS: usize = 40_000;

/// The `text` fallback (notifications, clients without blocks): the reply, escaped, cut to
/// what Slack keeps.
pub(super) fn fallback_text(text: &str) -> String {
    crate::text::truncate(&escape_keep_mentions(text), TEXT_FIELD_CHARS)
}
