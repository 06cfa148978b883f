//! The file tools: `view`, `create`, `str_replace`, `remove`. Blocking; [`super::execute`]
//! runs them on the blocking pool.

use std::fs;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

use regex::Regex;
use serde_json::Value;

use super::{
    ToolLimits, ToolOutput, Workspace, as_integer, json_kind, opt_bool, opt_str, plural, req_str,
};

/// Bytes at the start of a file that decide whether it is binary (a NUL byte among them).
const BINARY_SNIFF: usize = 8 * 1024;
/// Most entries a directory listing shows.
const MAX_LISTING: usize = 1000;
/// How deep a directory listing goes (1 = only the directory's own entries).
const LISTING_DEPTH: usize = 2;
/// Lines of context shown around an edit.
const EDIT_CONTEXT: usize = 3;
/// Most line numbers listed when `old_str` is ambiguous.
const MAX_LISTED_LINES: usize = 20;

type Res = Result<ToolOutput, ToolOutput>;

fn io_error(tool: &str, given: &str, e: &io::Error) -> ToolOutput {
    match e.kind() {
        io::ErrorKind::NotFound => ToolOutput::error(format!("{tool}: {given} does not exist")),
        io::ErrorKind::PermissionDenied => {
            ToolOutput::error(format!("{tool}: {given}: permission denied"))
        }
        _ => ToolOutput::error(format!("{tool}: {given}: {e}")),
    }
}

/// Refuses anything but a regular file where a file is read or written: opening a FIFO or
/// a device (`mkfifo`, `/dev/tty` in full access) can block forever.
fn regular_file(tool: &str, given: &str, meta: &fs::Metadata) -> Result<(), ToolOutput> {
    if meta.is_file() {
        Ok(())
    } else {
        Err(ToolOutput::error(format!(
            "{tool}: {given} is not a regular file (a FIFO, socket or device); refused"
        )))
    }
}

// ---------------------------------------------------------------------------------------
// view

pub(super) fn view(ws: &Workspace, limits: &ToolLimits, args: &Value) -> ToolOutput {
    view_inner(ws, limits, args).unwrap_or_else(|e| e)
}

fn view_inner(ws: &Workspace, limits: &ToolLimits, args: &Value) -> Res {
    let given = req_str("view", args, "path")?;
    let range = parse_range(args)?;
    let grep = match opt_str("view", args, "grep")? {
        Some(re) => Some(Regex::new(re).map_err(|e| {
            ToolOutput::error(format!("view: invalid regular expression in `grep`: {e}"))
        })?),
        None => None,
    };
    let path = ws.resolve(given)?;
    let meta = fs::metadata(&path).map_err(|e| io_error("view", given, &e))?;
    if meta.is_dir() {
        if range.is_some() || grep.is_some() {
            return Err(ToolOutput::error(format!(
                "view: {given} is a directory; `view_range` and `grep` only apply to files"
            )));
        }
        return Ok(list_dir(ws, &path, given, limits.output_cap));
    }
    regular_file("view", given, &meta)?;
    view_file(
        &path,
        given,
        meta.len(),
        range,
        grep.as_ref(),
        limits.output_cap,
    )
}

/// `[start, end]`: 1-based, inclusive, `end == -1` for the end of the file.
fn parse_range(args: &Value) -> Result<Option<(u64, Option<u64>)>, ToolOutput> {
    let bad = |detail: String| {
        ToolOutput::error(format!(
            "view: argument `view_range` must be [start, end] with 1-based line numbers \
             (end = -1 for the end of the file); {detail}"
        ))
    };
    let items = match args.get("view_range") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(items)) => items,
        Some(other) => return Err(bad(format!("got {}", json_kind(other)))),
    };
    let [start, end] = items.as_slice() else {
        return Err(bad(format!("got {} items", items.len())));
    };
    let (Some(start), Some(end)) = (as_integer(start), as_integer(end)) else {
        return Err(bad("the items must be integers".into()));
    };
    if start < 1 {
        return Err(bad(format!("start {start} is below 1")));
    }
    let end = match end {
        -1 => None,
        e if e < start => return Err(bad(format!("end {e} is before start {start}"))),
        e => Some(e as u64),
    };
    Ok(Some((start as u64, end)))
}

fn view_file(
    path: &Path,
    given: &str,
    size: u64,
    range: Option<(u64, Option<u64>)>,
    grep: Option<&Regex>,
    cap: usize,
) -> Res {
    let mut file = fs::File::open(path).map_err(|e| io_error("view", given, &e))?;
    let mut sniff = Vec::with_capacity(BINARY_SNIFF);
    (&mut file)
        .take(BINARY_SNIFF as u64)
        .read_to_end(&mut sniff)
        .map_err(|e| io_error("view", given, &e))?;
    if sniff.contains(&0) {
        return Ok(ToolOutput::ok(format!(
            "{given}: binary file, {size} bytes"
        )));
    }
    let mut reader = BufReader::new(io::Cursor::new(sniff).chain(file));

    let (start, end) = range.unwrap_or((1, None));
    let mut out = String::new();
    let mut out_chars = 0usize;
    let mut shown = 0u64;
    let mut not_shown = 0u64;
    let mut line_no = 0u64;
    let mut line = Vec::new();
    // A single line keeps at most half the output, so that it shows (cut) rather than not at all.
    let line_max = (cap / 2).max(80);
    while let Some(line_truncated) = read_line_bounded(&mut reader, line_max, &mut line)
        .map_err(|e| io_error("view", given, &e))?
    {
        line_no += 1;
        if line_no < start || end.is_some_and(|end| line_no > end) {
            continue;
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.strip_suffix('\r').unwrap_or(&text);
        if let Some(re) = grep
            && !re.is_match(text)
        {
            continue;
        }
        if not_shown > 0 {
            not_shown += 1;
            continue;
        }
        let entry = if line_truncated {
            format!("{line_no:>6}\t{text} [… line truncated …]\n")
        } else {
            format!("{line_no:>6}\t{text}\n")
        };
        let entry_chars = entry.chars().count();
        if out_chars + entry_chars > cap {
            not_shown = 1;
            continue;
        }
        out.push_str(&entry);
        out_chars += entry_chars;
        shown += 1;
    }
    let total = line_no;

    if let Some((start, end)) = range {
        let lines = plural(total as usize, "line");
        if start > total {
            return Err(ToolOutput::error(format!(
                "view: view_range start {start} is out of range: {given} has {lines}"
            )));
        }
        if let Some(end) = end
            && end > total
        {
            return Err(ToolOutput::error(format!(
                "view: view_range end {end} is out of range: {given} has {lines} \
                 (use -1 to view to the end)"
            )));
        }
    }
    if total == 0 {
        return Ok(ToolOutput::ok(format!("({given} is empty)")));
    }
    if shown == 0 && not_shown == 0 {
        let re = grep.map(Regex::as_str).unwrap_or_default();
        let where_ = if range.is_some() {
            " in the given range"
        } else {
            ""
        };
        return Ok(ToolOutput::ok(format!(
            "(no lines of {given} match /{re}/{where_})"
        )));
    }
    if not_shown > 0 {
        out.push_str(&format!(
            "[… output truncated at {cap} characters: {} not shown; use view_range or grep to see them …]\n",
            plural(not_shown as usize, "more line")
        ));
    }
    Ok(ToolOutput::ok(out))
}

/// Reads one line (without its `\n`) into `line`, keeping at most `max` bytes of it. Returns
/// `None` at the end of the input, else whether the line was cut.
fn read_line_bounded(
    reader: &mut impl BufRead,
    max: usize,
    line: &mut Vec<u8>,
) -> io::Result<Option<bool>> {
    line.clear();
    let mut any = false;
    let mut truncated = false;
    loop {
        let (used, done) = {
            let buf = match reader.fill_buf() {
                Ok(buf) => buf,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if buf.is_empty() {
                return Ok(any.then_some(truncated));
            }
            any = true;
            let (chunk, used, done) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (&buf[..i], i + 1, true),
                None => (buf, buf.len(), false),
            };
            let room = max.saturating_sub(line.len());
            if chunk.len() > room {
                truncated = true;
                line.extend_from_slice(&chunk[..room]);
            } else {
                line.extend_from_slice(chunk);
            }
            (used, done)
        };
        reader.consume(used);
        if done {
            return Ok(Some(truncated));
        }
    }
}

fn list_dir(ws: &Workspace, path: &Path, given: &str, cap: usize) -> ToolOutput {
    let mut lines = Vec::new();
    let mut total = 0usize;
    if let Err(e) = walk(ws, path, "", 1, &mut lines, &mut total) {
        return io_error("view", given, &e);
    }
    if total == 0 {
        return ToolOutput::ok(format!("{given} is an empty directory"));
    }
    let mut out = format!(
        "{given} (directory; {} levels deep, .git skipped):\n",
        LISTING_DEPTH
    );
    let mut chars = out.chars().count();
    let mut shown = 0usize;
    for line in &lines {
        let n = line.chars().count() + 1;
        if chars + n > cap {
            break;
        }
        out.push_str(line);
        out.push('\n');
        chars += n;
        shown += 1;
    }
    if shown < total {
        out.push_str(&format!(
            "[… listing truncated: showing {shown} of {total} entries; view a subdirectory to see more …]\n"
        ));
    }
    ToolOutput::ok(out)
}

/// Appends `prefix/name` lines for the entries of `dir`, sorted by name, recursing into
/// subdirectories (not into symlinks) up to [`LISTING_DEPTH`]. Counts every entry in `total`
/// but keeps at most [`MAX_LISTING`] lines.
fn walk(
    ws: &Workspace,
    dir: &Path,
    prefix: &str,
    depth: usize,
    lines: &mut Vec<String>,
    total: &mut usize,
) -> io::Result<()> {
    let mut entries: Vec<(String, fs::DirEntry)> = fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e))
        .filter(|(name, _)| name != ".git")
        .collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, entry) in entries {
        *total += 1;
        let keep = lines.len() < MAX_LISTING;
        let file_type = entry.file_type();
        let shown = format!("{prefix}{name}");
        match file_type {
            // Switchboard's own state: named, never opened.
            Ok(t) if t.is_dir() && ws.is_protected(&entry.path()) => {
                if keep {
                    lines.push(format!("{shown}/ (Switchboard's own state: not shown)"));
                }
            }
            Ok(t) if t.is_dir() => {
                if keep {
                    lines.push(format!("{shown}/"));
                }
                if depth < LISTING_DEPTH
                    && let Err(e) = walk(
                        ws,
                        &entry.path(),
                        &format!("{shown}/"),
                        depth + 1,
                        lines,
                        total,
                    )
                    && keep
                {
                    lines.push(format!("{shown}/ (unreadable: {e})"));
                }
            }
            Ok(t) if t.is_symlink() => {
                if keep {
                    let target = fs::read_link(entry.path())
                        .map(|t| t.display().to_string())
                        .unwrap_or_else(|_| "?".into());
                    lines.push(format!("{shown} -> {target}"));
                }
            }
            Ok(t) if t.is_file() => {
                if keep {
                    let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
                    lines.push(format!("{shown} ({})", plural(size as usize, "byte")));
                }
            }
            _ => {
                if keep {
                    lines.push(format!("{shown} (special file)"));
                }
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// create

pub(super) fn create(ws: &Workspace, args: &Value) -> ToolOutput {
    create_inner(ws, args).unwrap_or_else(|e| e)
}

fn create_inner(ws: &Workspace, args: &Value) -> Res {
    let given = req_str("create", args, "path")?;
    let text = req_str("create", args, "file_text")?;
    let path = ws.resolve(given)?;
    let existed = match fs::metadata(&path) {
        Ok(m) if m.is_dir() => {
            return Err(ToolOutput::error(format!(
                "create: {given} is a directory; create writes files"
            )));
        }
        Ok(m) => {
            regular_file("create", given, &m)?;
            true
        }
        Err(_) => false,
    };
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(|e| {
            ToolOutput::error(format!(
                "create: cannot create the directories for {given}: {e}"
            ))
        })?;
    }
    fs::write(&path, text).map_err(|e| io_error("create", given, &e))?;
    let verb = if existed { "overwrote" } else { "created" };
    Ok(ToolOutput::ok(format!(
        "{verb} {given} ({}, {})",
        plural(text.lines().count(), "line"),
        plural(text.len(), "byte")
    )))
}

// ---------------------------------------------------------------------------------------
// str_replace

pub(super) fn str_replace(ws: &Workspace, limits: &ToolLimits, args: &Value) -> ToolOutput {
    str_replace_inner(ws, limits, args).unwrap_or_else(|e| e)
}

fn str_replace_inner(ws: &Workspace, limits: &ToolLimits, args: &Value) -> Res {
    let given = req_str("str_replace", args, "path")?;
    let old = req_str("str_replace", args, "old_str")?;
    let new = match args.get("new_str") {
        None | Some(Value::Null) => {
            return Err(ToolOutput::error(
                "str_replace: missing required argument `new_str` (a string; use \"\" to delete `old_str`)",
            ));
        }
        Some(_) => req_str("str_replace", args, "new_str")?,
    };
    if old.is_empty() {
        return Err(ToolOutput::error(
            "str_replace: `old_str` must not be empty; to write a whole file use `create`",
        ));
    }
    let path = ws.resolve(given)?;
    let meta = fs::metadata(&path).map_err(|e| io_error("str_replace", given, &e))?;
    if meta.is_dir() {
        return Err(ToolOutput::error(format!(
            "str_replace: {given} is a directory"
        )));
    }
    regular_file("str_replace", given, &meta)?;
    let content = fs::read_to_string(&path).map_err(|e| {
        if e.kind() == io::ErrorKind::InvalidData {
            ToolOutput::error(format!(
                "str_replace: {given} is not UTF-8 text; str_replace only edits text files"
            ))
        } else {
            io_error("str_replace", given, &e)
        }
    })?;

    // Every occurrence, overlapping ones included (`aa` occurs twice in `aaa`), with the line
    // it starts on.
    let step = old.chars().next().map_or(1, char::len_utf8);
    let mut count = 0usize;
    let mut first = 0usize;
    let mut lines_at = Vec::new();
    let (mut from, mut line, mut counted_to) = (0usize, 1usize, 0usize);
    while let Some(i) = content[from..].find(old) {
        let at = from + i;
        line += content[counted_to..at].matches('\n').count();
        counted_to = at;
        if count == 0 {
            first = at;
        }
        count += 1;
        if lines_at.len() < MAX_LISTED_LINES {
            lines_at.push(line.to_string());
        }
        from = at + step;
    }
    match count {
        0 => {
            let mut msg = format!("old_str not found in {given}");
            if content.contains("\r\n") && !old.contains("\r\n") && old.contains('\n') {
                msg.push_str(" (note: the file has CRLF line endings)");
            } else {
                msg.push_str(
                    "; it must match exactly, including whitespace and indentation \
                     (view the file to copy the text)",
                );
            }
            return Err(ToolOutput::error(msg));
        }
        1 => {}
        n => {
            let mut at = lines_at.join(", ");
            if n > lines_at.len() {
                at.push_str(", …");
            }
            return Err(ToolOutput::error(format!(
                "old_str occurs {n} times in {given} (at lines {at}); include more context to make it unique"
            )));
        }
    }

    let mut edited = String::with_capacity(content.len() - old.len() + new.len());
    edited.push_str(&content[..first]);
    edited.push_str(new);
    edited.push_str(&content[first + old.len()..]);
    fs::write(&path, &edited).map_err(|e| io_error("str_replace", given, &e))?;

    // The edited region with a few lines of context.
    let start_line = content[..first].matches('\n').count() + 1;
    let end_line = start_line + new.matches('\n').count();
    let from_line = start_line.saturating_sub(EDIT_CONTEXT).max(1);
    let to_line = end_line + EDIT_CONTEXT;
    let mut out = format!(
        "edited {given}: replaced {} with {}. ",
        plural(old.lines().count().max(1), "line"),
        plural(new.lines().count(), "line"),
    );
    let mut snippet = String::new();
    let mut last = from_line;
    for (i, text) in edited.lines().enumerate() {
        let n = i + 1;
        if n < from_line {
            continue;
        }
        if n > to_line {
            break;
        }
        let entry = format!("{n:>6}\t{text}\n");
        if out.len() + snippet.len() + entry.len() > limits.output_cap {
            snippet.push_str("[… rest of the edited region not shown …]\n");
            break;
        }
        snippet.push_str(&entry);
        last = n;
    }
    if snippet.is_empty() {
        out.push_str("The file is now empty.\n");
    } else {
        out.push_str(&format!("Lines {from_line}-{last} now read:\n"));
        out.push_str(&snippet);
    }
    Ok(ToolOutput::ok(out))
}

// ---------------------------------------------------------------------------------------
// remove

pub(super) fn remove(ws: &Workspace, args: &Value) -> ToolOutput {
    remove_inner(ws, args).unwrap_or_else(|e| e)
}

fn remove_inner(ws: &Workspace, args: &Value) -> Res {
    let given = req_str("remove", args, "path")?;
    let recursive = opt_bool("remove", args, "recursive")?.unwrap_or(false);
    let entry = ws.resolve_entry(given)?;
    let meta = fs::symlink_metadata(&entry).map_err(|e| io_error("remove", given, &e))?;
    if meta.is_symlink() {
        fs::remove_file(&entry).map_err(|e| io_error("remove", given, &e))?;
        return Ok(ToolOutput::ok(format!(
            "removed symlink {given} (its target was not touched)"
        )));
    }
    if meta.is_dir() {
        if !recursive {
            return Err(ToolOutput::error(format!(
                "remove: {given} is a directory; pass \"recursive\": true to remove it and everything in it"
            )));
        }
        fs::remove_dir_all(&entry).map_err(|e| io_error("remove", given, &e))?;
        return Ok(ToolOutput::ok(format!(
            "removed directory {given} and everything in it"
        )));
    }
    fs::remove_file(&entry).map_err(|e| io_error("remove", given, &e))?;
    Ok(ToolOutput::ok(format!("removed {given}")))
}
