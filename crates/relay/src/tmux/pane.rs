//! Reading and writing a pane: capture, quiescence and paste.

use std::time::{Duration, Instant};

use super::command::{command_error, is_absent, pane_target};
use super::{
    Blocker, MAX_CAPTURE_LINES, MAX_PASTE_BYTES, Quiescence, QuiescenceError, SNAPSHOT_MARK,
    Snapshot, Tmux, TmuxError,
};
use regex::Regex;

impl Tmux {
    /// The last `lines` lines (clamped to 1..=1000) of the pane, history included, wrapped
    /// lines joined, trailing spaces of each line and trailing blank lines removed.
    pub async fn capture(&self, session: &str, lines: u32) -> Result<Vec<String>, TmuxError> {
        let lines = lines.clamp(1, MAX_CAPTURE_LINES);
        // `-S -N` starts N lines into the history and runs to the end of the visible screen, so
        // even when the bottom of the screen is blank there are N lines of content to keep.
        let start = format!("-{lines}");
        let pane = pane_target(session);
        let args = ["capture-pane", "-p", "-J", "-S", &start, "-t", &pane];
        let output = self.exec(&args, None).await?;
        if !output.success {
            return Err(command_error(&args, &output));
        }
        let mut captured: Vec<String> = output
            .stdout
            .lines()
            .map(|line| line.trim_end().to_owned())
            .collect();
        while captured.last().is_some_and(|line| line.is_empty()) {
            captured.pop();
        }
        let skip = captured.len().saturating_sub(lines as usize);
        captured.drain(..skip);
        Ok(captured)
    }

    /// Waits until the pane is quiescent (see [`Quiescence`]): screen, cursor, history size
    /// and window activity unchanged for `quiet_window`, the prompt (if any) visible, the pane
    /// not in a mode, and no attached client in a key table other than `root`. Any change
    /// restarts the quiet window.
    pub async fn wait_quiescent(
        &self,
        session: &str,
        q: &Quiescence,
    ) -> Result<(), QuiescenceError> {
        let started = Instant::now();
        let poll = q.poll.max(Duration::from_millis(10));
        let mut last: Option<Snapshot> = None;
        let mut quiet_since = started;
        loop {
            let Some(snap) = self.snapshot(session).await? else {
                return Err(QuiescenceError::Gone);
            };
            if snap.dead {
                return Err(QuiescenceError::Gone);
            }
            let now = Instant::now();
            if last.as_ref() != Some(&snap) {
                quiet_since = now;
                last = Some(snap);
            }
            let Some(snap) = last.as_ref() else {
                return Err(QuiescenceError::Gone);
            };
            let blocker = if snap.in_mode {
                Some(Blocker::CopyMode)
            } else if let Some(table) = snap.key_tables.iter().find(|t| t.as_str() != "root") {
                Some(Blocker::KeyTable(table.clone()))
            } else if now.duration_since(quiet_since) < q.quiet_window {
                Some(Blocker::OutputChanging)
            } else if let Some(prompt) = &q.prompt
                && !prompt_visible(&snap.screen, prompt, q.prompt_lines)
            {
                Some(Blocker::PromptNotSeen)
            } else {
                None
            };
            let Some(blocker) = blocker else {
                tracing::debug!(session, waited = ?started.elapsed(), "pane quiescent");
                return Ok(());
            };
            let waited = now.duration_since(started);
            if waited >= q.timeout {
                tracing::debug!(
                    session,
                    ?waited,
                    blocker = blocker.code(),
                    "quiescence timeout"
                );
                return Err(QuiescenceError::Timeout {
                    blocked_by: blocker,
                    waited,
                });
            }
            tokio::time::sleep(poll.min(q.timeout - waited)).await;
        }
    }

    /// Pastes `text` into the session's pane as one bracketed paste, then presses Enter.
    ///
    /// LF/CR: the buffer is pasted with `-r`, so every LF arrives as LF (tmux's default would
    /// turn each LF into CR, like a terminal does when you paste by hand). Why LF:
    /// * an application that enabled bracketed paste gets exactly the bytes of `text` between
    ///   `ESC[200~` and `ESC[201~`;
    /// * a plain program reading lines from a cooked tty sees LF as the end of a line (CR would
    ///   work there too, only because of `ICRNL`);
    /// * a raw-mode program that did not enable bracketed paste sees LF as Ctrl-J, which line
    ///   editors treat as "newline" (or, like readline, as accept-line), whereas CR is Enter
    ///   and would submit every line as a separate message.
    ///
    /// The final Enter (`send-keys Enter`) is a CR, as a real keypress. Note the kernel's
    /// cooked-mode line limit: a program reading a cooked tty gets at most 4095 bytes of one
    /// line (the rest of that line is dropped by the tty driver; later lines arrive).
    pub async fn paste(&self, session: &str, text: &str) -> Result<(), TmuxError> {
        if text.len() > MAX_PASTE_BYTES {
            return Err(TmuxError::TooLarge(text.len()));
        }
        let pane = pane_target(session);
        if text.is_empty() {
            // tmux does not create a buffer from empty input; there is nothing to paste.
            let args = ["send-keys", "-t", pane.as_str(), "Enter"];
            let output = self.exec(&args, None).await?;
            if !output.success {
                return Err(command_error(&args, &output));
            }
            return Ok(());
        }
        let buffer = format!("switchboard-{}", uuid::Uuid::new_v4().simple());
        let load = ["load-buffer", "-b", buffer.as_str(), "-"];
        let output = self.exec(&load, Some(text.as_bytes())).await?;
        if !output.success {
            return Err(command_error(&load, &output));
        }
        // One client command, so nothing can get between the paste and its Enter.
        let args = [
            "paste-buffer",
            "-p",
            "-d",
            "-r",
            "-b",
            buffer.as_str(),
            "-t",
            pane.as_str(),
            ";",
            "send-keys",
            "-t",
            pane.as_str(),
            "Enter",
        ];
        let output = self.exec(&args, None).await?;
        if !output.success {
            // `-d` did not run if the paste failed; do not leave the text in the server.
            let _ = self
                .exec(&["delete-buffer", "-b", buffer.as_str()], None)
                .await;
            return Err(command_error(&args, &output));
        }
        tracing::debug!(session, bytes = text.len(), "pasted into tmux pane");
        Ok(())
    }

    /// One look at the pane for quiescence, in a single tmux invocation:
    /// a line of pane formats, the clients' key tables (one per line), a mark line, the screen.
    pub(super) async fn snapshot(&self, session: &str) -> Result<Option<Snapshot>, TmuxError> {
        let exact = format!("={session}");
        let pane = pane_target(session);
        let args = [
            "has-session",
            "-t",
            exact.as_str(),
            ";",
            "display-message",
            "-p",
            "-t",
            pane.as_str(),
            "#{pane_dead}\t#{pane_in_mode}\t#{cursor_x}\t#{cursor_y}\t#{history_size}\t#{window_activity}",
            ";",
            "list-clients",
            "-t",
            exact.as_str(),
            "-F",
            "#{client_key_table}",
            ";",
            "display-message",
            "-p",
            "-t",
            pane.as_str(),
            SNAPSHOT_MARK,
            ";",
            "capture-pane",
            "-p",
            "-N",
            "-t",
            pane.as_str(),
        ];
        let output = self.exec(&args, None).await?;
        if !output.success {
            if is_absent(&output.stderr) {
                return Ok(None);
            }
            return Err(command_error(&args, &output));
        }
        let mut lines = output.stdout.lines();
        let header = lines.next().unwrap_or_default();
        let mut fields = header.split('\t').map(str::to_owned);
        let mut next = || fields.next().unwrap_or_default();
        let dead = next() == "1";
        let in_mode = next() == "1";
        let cursor = (next(), next());
        let history_size = next();
        let window_activity = next();
        let key_tables = lines
            .by_ref()
            .take_while(|line| *line != SNAPSHOT_MARK)
            .map(str::to_owned)
            .collect();
        let screen = lines.map(str::to_owned).collect();
        Ok(Some(Snapshot {
            dead,
            in_mode,
            cursor,
            history_size,
            window_activity,
            key_tables,
            screen,
        }))
    }
}

/// Whether `prompt` matches one of the last `count` non-empty lines of `screen`.
pub(super) fn prompt_visible(screen: &[String], prompt: &Regex, count: usize) -> bool {
    screen
        .iter()
        .rev()
        .filter(|line| !line.trim().is_empty())
        .take(count.max(1))
        .any(|line| prompt.is_match(line))
}
