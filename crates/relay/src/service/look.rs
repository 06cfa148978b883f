//! Look: the last lines of a tmux pane, or the last transcript entries of a session.

use chrono::Utc;
use serde_json::json;
use switchboard_protocol::relay::{BundleState, LookEntry, LookResponse, RELAY_SCHEMA_VERSION};

use super::{DEFAULT_LOOK_LINES, NOT_READY, Relay, resolve};
use crate::config::Transport;
use crate::error::RelayError;
use crate::policy::Capability;

impl Relay {
    /// The last lines of a tmux member's pane, or the last transcript entries of a session
    /// or ACP member.
    pub async fn look(
        &self,
        bundle: &str,
        requester: &str,
        target: &str,
        lines: Option<u32>,
    ) -> Result<LookResponse, RelayError> {
        let lines = lines.unwrap_or(DEFAULT_LOOK_LINES);
        if !(1..=1000).contains(&lines) {
            return Err(RelayError::validation(
                "invalid_lines",
                format!("lines must be between 1 and 1000 (got {lines})"),
            ));
        }
        let b = self.load(bundle)?;
        let who = resolve(&b, requester, "requester")?;
        let m = b.member(target).ok_or_else(|| {
            RelayError::validation(
                "unknown_target",
                format!("no member `{target}` in bundle {bundle}"),
            )
            .with_details(json!({"targets": [target]}))
        })?;
        who.authorize(&b, Capability::Look, &[target.to_string()])?;
        let state = self.inner.store.bundle_state(bundle).await?;
        if state == BundleState::Down {
            return Err(RelayError::new(
                409,
                "bundle_down",
                format!("bundle {bundle} is down (relay up {bundle})"),
            ));
        }
        let now = Utc::now();
        let mut resp = LookResponse {
            schema_version: RELAY_SCHEMA_VERSION,
            bundle: bundle.to_string(),
            target: target.to_string(),
            transport: m.transport.kind(),
            lines: Vec::new(),
            entries: Vec::new(),
            fresh: true,
            age_ms: 0,
            captured_at: now,
        };
        match &m.transport {
            Transport::Tmux(_) => {
                let tmux = self.tmux(bundle);
                match tmux.pane_state(target).await {
                    Ok(Some(_)) => {}
                    Ok(None) => {
                        return Err(RelayError::new(
                            409,
                            NOT_READY,
                            format!("`{target}` is not running"),
                        ));
                    }
                    Err(e) => return Err(RelayError::new(500, e.code(), e.to_string())),
                }
                resp.lines = tmux
                    .capture(target, lines)
                    .await
                    .map_err(|e| RelayError::new(500, e.code(), e.to_string()))?;
            }
            Transport::Acp(_) | Transport::Session(_) => {
                let id = self.member_session(bundle, target).await.ok_or_else(|| {
                    RelayError::new(409, NOT_READY, format!("`{target}` has no session"))
                })?;
                let client = &self.inner.client;
                let s = client.get_session(id).await.map_err(|e| {
                    RelayError::new(409, NOT_READY, format!("`{target}`'s session: {e}"))
                })?;
                let total = client
                    .list_messages(id, Some(1), Some(0))
                    .await
                    .map_err(|e| RelayError::new(502, "session_unreachable", e.to_string()))?
                    .total;
                let offset = total.saturating_sub(u64::from(lines));
                let page = client
                    .list_messages(
                        id,
                        Some(lines),
                        Some(offset.min(u64::from(u32::MAX)) as u32),
                    )
                    .await
                    .map_err(|e| RelayError::new(502, "session_unreachable", e.to_string()))?;
                resp.entries = page
                    .messages
                    .into_iter()
                    .map(|m| LookEntry {
                        role: m.role.as_str().to_string(),
                        content: m.content,
                        at: m.created_at,
                    })
                    .collect();
                resp.fresh = s.session.active_run_id.is_none();
                resp.age_ms = resp
                    .entries
                    .last()
                    .map(|e| (now - e.at).num_milliseconds().max(0) as u64)
                    .unwrap_or(0);
            }
        }
        self.inner.audit.record(
            bundle,
            "relay.look",
            json!({"requester": who.id(), "targets": [target], "lines": lines}),
        );
        Ok(resp)
    }
}
