//! `/schedule`, `/schedules`, `/unschedule`: scheduled tasks made from a chat, which becomes
//! their delivery target. They go to the scheduler through `/v1/schedules` like any client.

use switchboard_protocol::schedules::{Schedule, ScheduleSpec};

use crate::channel::InboundMessage;

use super::*;

/// What `/schedule` alone answers.
pub(super) const SCHEDULE_USAGE: &str = "Usage:\n\
/schedule every 30m <prompt>\n\
/schedule in 2h <prompt>\n\
/schedule at 2026-12-24T09:00:00Z <prompt>\n\
/schedule cron 0 9 * * 1-5 Europe/Berlin <prompt>\n\
The result is posted here. Tool calls that ask for approval are rejected: nobody watches a scheduled run (use the API or `switchboard schedule add --ask` to be asked).";

/// The words after the command (`/schedule@bot every 1h x` → `every 1h x`).
pub(super) fn args(text: &str) -> &str {
    let text = text.trim_start();
    match text.find(char::is_whitespace) {
        Some(i) => text[i..].trim(),
        None => "",
    }
}

fn take_word(s: &str) -> Option<(&str, &str)> {
    let s = s.trim_start();
    if s.is_empty() {
        return None;
    }
    match s.find(char::is_whitespace) {
        Some(i) => Some((&s[..i], s[i..].trim_start())),
        None => Some((s, "")),
    }
}

/// Whether a word names a time zone rather than starting the prompt (`Europe/Berlin`,
/// `UTC`).
fn is_tz(word: &str) -> bool {
    word.contains('/') && !word.starts_with('/') || word.eq_ignore_ascii_case("utc")
}

/// `/schedule`'s words as a spec delivering to `target` (`CHANNEL:CHAT[/THREAD]`). The
/// trigger's own checks (a valid expression, a time zone that exists) are the scheduler's:
/// its 422 names the field.
pub(super) fn schedule_spec(args: &str, target: &str) -> Result<ScheduleSpec, String> {
    let (kind, rest) = take_word(args).ok_or_else(|| SCHEDULE_USAGE.to_string())?;
    let mut spec = ScheduleSpec {
        deliver: vec![target.to_string()],
        ..Default::default()
    };
    let prompt = match kind.to_ascii_lowercase().as_str() {
        "every" | "in" | "at" => {
            let (value, prompt) =
                take_word(rest).ok_or_else(|| format!("{kind} needs a value, then the prompt"))?;
            match kind.to_ascii_lowercase().as_str() {
                "every" => spec.every = Some(value.to_string()),
                "in" => spec.in_ = Some(value.to_string()),
                _ => spec.at = Some(value.to_string()),
            }
            prompt
        }
        "cron" => {
            let mut rest = rest;
            let mut fields = Vec::new();
            for _ in 0..5 {
                let (f, r) = take_word(rest).ok_or(
                    "cron needs five fields (minute hour day month weekday), then the prompt",
                )?;
                fields.push(f);
                rest = r;
            }
            spec.cron = Some(fields.join(" "));
            if let Some((tz, r)) = take_word(rest)
                && is_tz(tz)
            {
                spec.tz = Some(tz.to_string());
                rest = r;
            }
            rest
        }
        _ => return Err(SCHEDULE_USAGE.to_string()),
    };
    if prompt.trim().is_empty() {
        return Err("What should the agent do? Give the prompt after the time.".into());
    }
    spec.prompt = prompt.trim().to_string();
    Ok(spec)
}

/// This chat as a delivery target.
fn target_of(m: &InboundMessage) -> String {
    match &m.chat.thread {
        Some(t) => format!("{}:{}/{t}", m.channel, m.chat.id),
        None => format!("{}:{}", m.channel, m.chat.id),
    }
}

fn short(id: uuid::Uuid) -> String {
    id.simple().to_string()[..8].to_string()
}

fn line(s: &Schedule) -> String {
    let next = match (&s.paused, s.next_due) {
        (true, _) => "paused".to_string(),
        (false, Some(t)) => format!("next {}", t.format("%Y-%m-%d %H:%M UTC")),
        (false, None) => "done".to_string(),
    };
    format!("{} {} — {} ({next})", short(s.id), s.trigger, s.name)
}

const UNAVAILABLE: &str = "Scheduled tasks are not available on this server.";

impl Gateway {
    pub(super) async fn add_schedule(&self, m: &InboundMessage) -> String {
        let mut spec = match schedule_spec(args(&m.text), &target_of(m)) {
            Ok(s) => s,
            Err(e) => return e,
        };
        // The chat's own limits go with it: a schedule made here runs with this chat's
        // session settings, never the server's defaults (a chat confined to `read-only` in
        // a sandbox directory must not get a `workspace-write` session elsewhere).
        if let Err(e) = self.inherit_chat_settings(m, &mut spec).await {
            return format!("Not scheduled: {e}");
        }
        match self.inner.client.create_schedule(&spec).await {
            Ok(s) => format!(
                "⏰ Scheduled: {}\nResults come here. /schedules lists this chat's schedules; /unschedule {} removes it.",
                line(&s),
                short(s.id)
            ),
            Err(e) if e.status() == Some(404) => UNAVAILABLE.into(),
            Err(switchboard_client::ClientError::Api { message, .. }) => {
                format!("Not scheduled: {message}")
            }
            Err(e) => format!("Not scheduled: {e}"),
        }
    }

    /// Sets `spec`'s workspace, backend, model and permission mode to those of the chat's
    /// session, or (before the chat has one) to those its session would get.
    async fn inherit_chat_settings(
        &self,
        m: &InboundMessage,
        spec: &mut ScheduleSpec,
    ) -> Result<(), GatewayError> {
        let cfg = &self.inner.config;
        let threads = !cfg.chat_sessions.contains(&m.channel);
        let key = crate::routing::routing_key(cfg.dm_scope, threads, &m.channel, &m.peer, &m.chat);
        let session = match cfg.bindings.get(&key) {
            Some(bound) => Some(*bound),
            None => self.inner.store.route(&key).await?.map(|r| r.session_id),
        };
        let detail = match session {
            Some(id) => match self.inner.client.get_session(id).await {
                Ok(d) => Some(d),
                // The chat's session is gone: its next message makes one from the config.
                Err(e) if e.status() == Some(404) => None,
                Err(e) => return Err(e.into()),
            },
            None => None,
        };
        match detail {
            Some(d) => {
                spec.cwd = Some(d.session.cwd);
                spec.backend = Some(d.config.backend);
                spec.model = d.config.model;
                spec.permission_mode = Some(d.config.permission_mode);
            }
            None => {
                spec.cwd = cfg.session_cwd.clone();
                spec.model = cfg.session_model.clone();
                spec.permission_mode = cfg.session_permission_mode;
            }
        }
        Ok(())
    }

    /// The schedules that report to this chat.
    async fn chat_schedules(
        &self,
        m: &InboundMessage,
    ) -> Result<Option<Vec<Schedule>>, GatewayError> {
        let target = target_of(m);
        match self.inner.client.list_schedules().await {
            Ok(l) => Ok(Some(
                l.schedules
                    .into_iter()
                    .filter(|s| s.spec.deliver.iter().any(|d| d == &target))
                    .collect(),
            )),
            Err(e) if e.status() == Some(404) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    pub(super) async fn list_schedules(&self, m: &InboundMessage) -> Result<String, GatewayError> {
        let Some(list) = self.chat_schedules(m).await? else {
            return Ok(UNAVAILABLE.into());
        };
        if list.is_empty() {
            return Ok(
                "No schedule reports to this chat. /schedule every 1h <prompt> adds one.".into(),
            );
        }
        let lines: Vec<String> = list.iter().map(line).collect();
        Ok(format!("Schedules reporting here:\n{}", lines.join("\n")))
    }

    /// `/unschedule ID` (the id's start as `/schedules` shows it, or the name): only a
    /// schedule that reports to this chat.
    pub(super) async fn remove_schedule(&self, m: &InboundMessage) -> Result<String, GatewayError> {
        let which = args(&m.text);
        if which.is_empty() {
            return Ok("Usage: /unschedule ID (as /schedules shows it)".into());
        }
        let Some(list) = self.chat_schedules(m).await? else {
            return Ok(UNAVAILABLE.into());
        };
        let wanted = which.to_ascii_lowercase();
        let found: Vec<&Schedule> = list
            .iter()
            .filter(|s| {
                (wanted.len() >= 4 && s.id.simple().to_string().starts_with(&wanted))
                    || s.id.to_string() == wanted
                    || s.name == which
            })
            .collect();
        match found.as_slice() {
            [] => Ok(format!(
                "No schedule {which:?} reports to this chat; /schedules lists them."
            )),
            [one] => match self.inner.client.delete_schedule(one.id).await {
                Ok(()) => Ok(format!("Removed: {}", line(one))),
                Err(e) if e.status() == Some(404) => Ok(format!("Already gone: {}", one.name)),
                Err(e) => Err(e.into()),
            },
            many => Ok(format!(
                "{which:?} matches {} schedules; give more of the id:\n{}",
                many.len(),
                many.iter().map(|s| line(s)).collect::<Vec<_>>().join("\n")
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_trigger_kind_is_read_from_the_words() {
        let s = schedule_spec("every 30m check CI", "telegram:42").unwrap();
        assert_eq!(s.every.as_deref(), Some("30m"));
        assert_eq!(s.prompt, "check CI");
        assert_eq!(s.deliver, vec!["telegram:42"]);
        let s = schedule_spec("in 2h re-run the flaky test", "slack:C1/1.2").unwrap();
        assert_eq!(s.in_.as_deref(), Some("2h"));
        assert_eq!(s.prompt, "re-run the flaky test");
        let s = schedule_spec("at 2026-12-24T09:00:00Z  say hi", "x:1").unwrap();
        assert_eq!(s.at.as_deref(), Some("2026-12-24T09:00:00Z"));
        assert_eq!(s.prompt, "say hi");
        let s = schedule_spec("cron 0 9 * * 1-5 Europe/Berlin check CI", "x:1").unwrap();
        assert_eq!(s.cron.as_deref(), Some("0 9 * * 1-5"));
        assert_eq!(s.tz.as_deref(), Some("Europe/Berlin"));
        assert_eq!(s.prompt, "check CI");
        let s = schedule_spec("cron */5 * * * * look at /tmp", "x:1").unwrap();
        assert_eq!(s.cron.as_deref(), Some("*/5 * * * *"));
        assert_eq!(s.tz, None);
        assert_eq!(s.prompt, "look at /tmp");
    }

    #[test]
    fn incomplete_words_are_answered_with_what_is_missing() {
        assert!(schedule_spec("", "x:1").unwrap_err().starts_with("Usage"));
        assert!(
            schedule_spec("tomorrow do it", "x:1")
                .unwrap_err()
                .starts_with("Usage")
        );
        assert!(
            schedule_spec("every", "x:1")
                .unwrap_err()
                .contains("needs a value")
        );
        assert!(
            schedule_spec("every 1h", "x:1")
                .unwrap_err()
                .contains("prompt")
        );
        assert!(
            schedule_spec("cron 0 9 *", "x:1")
                .unwrap_err()
                .contains("five fields")
        );
        assert!(
            schedule_spec("cron 0 9 * * * UTC", "x:1")
                .unwrap_err()
                .contains("prompt")
        );
    }

    #[test]
    fn the_arguments_follow_the_command() {
        assert_eq!(args("/schedule@bot every 1h x"), "every 1h x");
        assert_eq!(args("/schedules"), "");
        assert_eq!(args("  /unschedule  ab12 "), "ab12");
    }
}
