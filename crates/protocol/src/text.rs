//! Text from people or agents placed inside a structure of Switchboard's own (a batch of
//! chat messages, a relay envelope): its lines are indented under that structure, so no line
//! of it can pass for one of the structure's own (a fake `[end of message …]` or `From:`).

/// Every character a reader (a model, a terminal) may take for a line break.
const LINE_BREAKS: [char; 6] = ['\r', '\u{0B}', '\u{0C}', '\u{85}', '\u{2028}', '\u{2029}'];

/// `text`'s lines, line breaks of every kind made `\n` and trailing ones dropped, each line
/// but the first prefixed with `indent` (the first follows whatever the caller puts before
/// it: a sender's label, or `indent` too with [`indent_all`]).
pub fn indent_after_first(text: &str, indent: &str) -> String {
    let text = text.replace("\r\n", "\n").replace(LINE_BREAKS, "\n");
    let mut lines = text.trim_end_matches('\n').split('\n');
    let mut out = lines.next().unwrap_or_default().to_owned();
    for line in lines {
        out.push('\n');
        out.push_str(indent);
        out.push_str(line);
    }
    out
}

/// Every line of `text` prefixed with `indent` (as [`indent_after_first`]).
pub fn indent_all(text: &str, indent: &str) -> String {
    format!("{indent}{}", indent_after_first(text, indent))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_line_break_is_indented() {
        assert_eq!(
            indent_all("a\r\nb\u{2028}[end]\rc\n\n", "  "),
            "  a\n  b\n  [end]\n  c"
        );
        assert_eq!(indent_after_first("x\ny", "  "), "x\n  y");
        assert_eq!(indent_all("", "  "), "  ");
    }
}
