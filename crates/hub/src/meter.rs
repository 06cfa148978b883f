//! What the editor is told about the session itself: its title (`session_info_update`)
//! and what its model calls have used and cost (`usage_update`).
//!
//! The cost is the session's, as the server's usage records total it; while a run is under
//! way each model call's report adds to it, and when the run ends the server's total is
//! read again (so a backend that reports only at the end, or a call counted elsewhere, is
//! right). ACP's `size` (the context window) is 0: Switchboard does not know models'
//! windows, and a made-up one would mislead.

use super::*;
use agent_client_protocol::v1::schema::{Cost, SessionInfoUpdate, UsageUpdate};
use switchboard_protocol::Usage;

#[derive(Default)]
pub(crate) struct Meter {
    /// The title the editor was last told (`None`: not told yet).
    title: Option<String>,
    /// The session's cost as last read, in micro-dollars, and whether every call is priced.
    cost: u64,
    incomplete: bool,
    /// Tokens of the last call (prompt and answer): what the context holds.
    used: u64,
    /// Cost reported by calls since the total was read.
    since: u64,
}

impl Meter {
    /// Reads the session and tells the editor its title (when it changed) and usage.
    pub(crate) async fn refresh(
        &mut self,
        api: &Api,
        session: Uuid,
        cx: &v1::ConnectionTo<Client>,
    ) {
        let detail = match api.get_session(session).await {
            Ok(d) => d,
            Err(e) => {
                tracing::debug!(%session, error = %e, "reading the session's title and usage");
                return;
            }
        };
        let mut updates = Vec::new();
        if self.title.as_deref() != Some(detail.session.title.as_str()) {
            self.title = Some(detail.session.title.clone());
            updates.push(SessionUpdate::SessionInfoUpdate(
                SessionInfoUpdate::new()
                    .title(detail.session.title.clone())
                    .updated_at(detail.session.updated_at.to_rfc3339()),
            ));
        }
        // Only what is known: calls whose backend reported nothing tell nothing.
        if let Some(u) = detail.usage.filter(|u| u.calls > u.unreported_calls) {
            self.cost = u.cost_microdollars;
            self.incomplete = u.unpriced_calls + u.unreported_calls > 0;
            self.since = 0;
            updates.push(SessionUpdate::UsageUpdate(self.update()));
        }
        for update in updates {
            let _ = cx.send_notification(SessionNotification::new(session.to_string(), update));
        }
    }

    /// A model call's report, live.
    pub(crate) fn call(&mut self, usage: &Usage) -> SessionUpdate {
        self.used = usage.prompt_tokens + usage.completion_tokens;
        match usage.cost_microdollars {
            Some(c) => self.since += c,
            None => self.incomplete = true,
        }
        self.incomplete |= usage.cost_incomplete;
        SessionUpdate::UsageUpdate(self.update())
    }

    fn update(&self) -> UsageUpdate {
        let micros = self.cost + self.since;
        let mut u = UsageUpdate::new(self.used, 0);
        if micros > 0 || !self.incomplete {
            u = u.cost(Cost::new(micros as f64 / 1_000_000.0, "USD"));
        }
        if self.incomplete {
            let mut meta = serde_json::Map::new();
            meta.insert(
                "switchboard".into(),
                serde_json::json!({"costIncomplete": true}),
            );
            u = u.meta(meta);
        }
        u
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn calls_add_to_the_cost_and_an_unpriced_one_says_so() {
        let mut m = Meter {
            cost: 1_500_000,
            ..Meter::default()
        };
        let priced = Usage {
            cost_microdollars: Some(250_000),
            ..Usage::tokens(1000, 200)
        };
        let SessionUpdate::UsageUpdate(u) = m.call(&priced) else {
            panic!()
        };
        assert_eq!(u.used, 1200);
        assert_eq!(u.cost.as_ref().unwrap().amount, 1.75);
        assert_eq!(u.cost.as_ref().unwrap().currency, "USD");
        assert!(u.meta.is_none());
        let SessionUpdate::UsageUpdate(u) = m.call(&Usage::tokens(10, 1)) else {
            panic!()
        };
        assert_eq!(u.used, 11);
        assert_eq!(u.cost.as_ref().unwrap().amount, 1.75);
        assert_eq!(u.meta.unwrap()["switchboard"]["costIncomplete"], true);
    }
}
