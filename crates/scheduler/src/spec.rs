//! A schedule as a user writes it: checked (every error names its field), normalised, and
//! its delivery targets resolved against the gateway's channels.

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use switchboard_protocol::schedules::{ScheduleApprovals, ScheduleSpec};

use crate::when::{Trigger, TriggerSpec};

/// Prompts longer than this are refused.
pub const MAX_PROMPT_CHARS: usize = 32_000;

/// Why a spec was refused: a stable code, the field, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SpecError {
    /// `invalid_trigger`, `unknown_target` or `validation_failed`.
    pub code: &'static str,
    pub field: String,
    pub message: String,
}

fn invalid(field: &str, message: impl Into<String>) -> SpecError {
    SpecError {
        code: "validation_failed",
        field: field.to_string(),
        message: message.into(),
    }
}

/// Where a result goes: a gateway channel, the chat on it, and a thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub channel: String,
    pub chat: String,
    pub thread: Option<String>,
}

/// Parses `CHANNEL:CHAT[/THREAD]` against the configured channel names (the longest name
/// that prefixes the target wins, so channel names may hold `:` themselves).
pub fn parse_target(text: &str, channels: &[String]) -> Result<Target, SpecError> {
    let unknown = |why: String| SpecError {
        code: "unknown_target",
        field: "deliver".into(),
        message: why,
    };
    let text = text.trim();
    let channel = channels
        .iter()
        .filter(|c| {
            text.strip_prefix(c.as_str())
                .is_some_and(|rest| rest.starts_with(':'))
        })
        .max_by_key(|c| c.len());
    let Some(channel) = channel else {
        let mut names = channels.to_vec();
        names.sort();
        return Err(unknown(format!(
            "{text:?} names no configured channel (CHANNEL:CHAT[/THREAD]; configured: [{}])",
            names.join(", ")
        )));
    };
    let rest = &text[channel.len() + 1..];
    let (chat, thread) = match rest.split_once('/') {
        Some((c, t)) => (c, Some(t)),
        None => (rest, None),
    };
    if chat.trim().is_empty() || thread.is_some_and(|t| t.trim().is_empty()) {
        return Err(unknown(format!(
            "{text:?}: the chat (and the thread, when given) must not be empty"
        )));
    }
    Ok(Target {
        channel: channel.clone(),
        chat: chat.trim().to_string(),
        thread: thread.map(|t| t.trim().to_string()),
    })
}

/// The trigger fields of a spec.
pub fn trigger_spec(spec: &ScheduleSpec) -> TriggerSpec {
    TriggerSpec {
        cron: spec.cron.clone(),
        tz: spec.tz.clone(),
        every: spec.every.clone(),
        at: spec.at.clone(),
        in_: spec.in_.clone(),
    }
}

/// Checks a spec at `now` against the gateway's channels, and normalises it: `in` becomes
/// the `at` it means (so the stored schedule does not move when it is read again) and the
/// strings are trimmed. Returns the trigger.
pub fn check(
    spec: &mut ScheduleSpec,
    now: DateTime<Utc>,
    channels: &[String],
) -> Result<Trigger, SpecError> {
    if spec.prompt.trim().is_empty() {
        return Err(invalid("prompt", "must not be empty"));
    }
    if spec.prompt.chars().count() > MAX_PROMPT_CHARS {
        return Err(invalid(
            "prompt",
            format!("longer than {MAX_PROMPT_CHARS} characters"),
        ));
    }
    if let Some(name) = &spec.name
        && name.trim().is_empty()
    {
        return Err(invalid("name", "must not be blank"));
    }
    if spec.deliver.len() > 16 {
        return Err(invalid("deliver", "at most 16 targets"));
    }
    if let Some(cwd) = &spec.cwd
        && !cwd.starts_with('/')
    {
        return Err(invalid("cwd", "must be an absolute path"));
    }
    if spec.session_id.is_some()
        && (spec.backend.is_some() || spec.cwd.is_some() || spec.model.is_some())
    {
        return Err(invalid(
            "session_id",
            "a fixed session keeps its own backend, workspace and model: give session_id or backend/cwd/model, not both",
        ));
    }
    if spec.auto_approve.is_some() && spec.approvals != ScheduleApprovals::AutoApprove {
        return Err(invalid(
            "auto_approve",
            "goes with approvals = auto_approve",
        ));
    }
    if spec.approvals == ScheduleApprovals::AutoApprove && spec.auto_approve.is_none() {
        return Err(invalid(
            "auto_approve",
            "approvals = auto_approve needs the list of tools (or \"all\")",
        ));
    }
    for t in &spec.deliver {
        parse_target(t, channels)?;
    }
    if spec.ask_timeout.is_some() && spec.approvals != ScheduleApprovals::Ask {
        return Err(invalid("ask_timeout", "goes with approvals = ask"));
    }
    if spec.approvals == ScheduleApprovals::Ask {
        if spec.deliver.is_empty() {
            return Err(invalid(
                "approvals",
                "approvals = ask needs a chat in deliver to ask in",
            ));
        }
        ask_timeout(spec)?;
    }
    let trigger = Trigger::parse(&trigger_spec(spec), now).map_err(|e| SpecError {
        code: "invalid_trigger",
        field: e.field.to_string(),
        message: e.message,
    })?;
    if let (Some(_), Trigger::At(at)) = (&spec.in_, &trigger) {
        spec.at = Some(at.to_rfc3339_opts(SecondsFormat::Secs, true));
        spec.in_ = None;
    }
    spec.name = spec.name.as_ref().map(|n| n.trim().to_string());
    spec.deliver = spec.deliver.iter().map(|t| t.trim().to_string()).collect();
    Ok(trigger)
}

/// Default of `ask_timeout`.
pub const DEFAULT_ASK_TIMEOUT: Duration = Duration::from_secs(600);

/// How long an `ask` question waits (`ask_timeout`, default 10 minutes, at least 10 s).
pub fn ask_timeout(spec: &ScheduleSpec) -> Result<Duration, SpecError> {
    let Some(text) = &spec.ask_timeout else {
        return Ok(DEFAULT_ASK_TIMEOUT);
    };
    let d = humantime::parse_duration(text.trim()).map_err(|e| {
        invalid(
            "ask_timeout",
            format!("{text:?} is not a duration like 10m or 1h: {e}"),
        )
    })?;
    if d < Duration::from_secs(10) {
        return Err(invalid("ask_timeout", "at least 10s"));
    }
    Ok(d)
}

/// The name a schedule goes by: its own, or the start of its prompt.
pub fn display_name(spec: &ScheduleSpec) -> String {
    if let Some(n) = &spec.name {
        return n.clone();
    }
    let line = spec.prompt.lines().next().unwrap_or_default().trim();
    let mut name: String = line.chars().take(40).collect();
    if line.chars().count() > 40 {
        name.push('…');
    }
    name
}

/// The trigger in words.
pub fn describe(spec: &ScheduleSpec) -> String {
    if let Some(c) = &spec.cron {
        return match &spec.tz {
            Some(tz) => format!("cron {c} ({tz})"),
            None => format!("cron {c} (UTC)"),
        };
    }
    if let Some(e) = &spec.every {
        return format!("every {e}");
    }
    if let Some(a) = &spec.at {
        return format!("at {a}");
    }
    spec.in_
        .as_ref()
        .map(|i| format!("in {i}"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn channels() -> Vec<String> {
        vec!["telegram".into(), "slack".into(), "webhook:ci".into()]
    }

    #[test]
    fn targets_resolve_against_the_channels() {
        let t = parse_target("slack:C123/1712.5", &channels()).unwrap();
        assert_eq!(
            t,
            Target {
                channel: "slack".into(),
                chat: "C123".into(),
                thread: Some("1712.5".into())
            }
        );
        let t = parse_target("webhook:ci:ops", &channels()).unwrap();
        assert_eq!((t.channel.as_str(), t.chat.as_str()), ("webhook:ci", "ops"));
        let e = parse_target("discord:1", &channels()).unwrap_err();
        assert_eq!(e.code, "unknown_target");
        assert!(e.message.contains("slack, telegram, webhook:ci"), "{e}");
        assert_eq!(
            parse_target("telegram:", &channels()).unwrap_err().code,
            "unknown_target"
        );
        assert_eq!(
            parse_target("telegram:1/", &channels()).unwrap_err().code,
            "unknown_target"
        );
    }

    #[test]
    fn check_names_the_field_and_normalises_in() {
        let now = Utc::now();
        let mut spec = ScheduleSpec {
            cron: Some("0 9 * * 1-5".into()),
            tz: Some("Mars/Olympus".into()),
            prompt: "check CI".into(),
            ..Default::default()
        };
        let e = check(&mut spec, now, &channels()).unwrap_err();
        assert_eq!((e.code, e.field.as_str()), ("invalid_trigger", "tz"));
        let mut spec = ScheduleSpec {
            in_: Some("2h".into()),
            prompt: "re-run the flaky test".into(),
            deliver: vec![" telegram:42 ".into()],
            ..Default::default()
        };
        let t = check(&mut spec, now, &channels()).unwrap();
        assert!(matches!(t, Trigger::At(_)));
        assert!(spec.in_.is_none() && spec.at.is_some());
        assert_eq!(spec.deliver, vec!["telegram:42"]);
        let mut spec = ScheduleSpec {
            every: Some("30m".into()),
            prompt: " ".into(),
            ..Default::default()
        };
        assert_eq!(
            check(&mut spec, now, &channels()).unwrap_err().field,
            "prompt"
        );
        let mut spec = ScheduleSpec {
            every: Some("30m".into()),
            prompt: "x".into(),
            approvals: ScheduleApprovals::AutoApprove,
            ..Default::default()
        };
        assert_eq!(
            check(&mut spec, now, &channels()).unwrap_err().field,
            "auto_approve"
        );
    }
}
