//! Sending: validation, authorization, one durable delivery per target, and the answer
//! (sync sends wait for their outcomes).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chrono::Utc;
use serde_json::json;
use switchboard_protocol::relay::{
    Delivery, Outcome, OutcomeEvent, RELAY_SCHEMA_VERSION, SendRequest, SendResponse, SendStatus,
    TargetResult,
};
use tokio::sync::oneshot;

use super::{DEFAULT_QUIET_WINDOW, MAX_MESSAGE_BYTES, NOT_READY, Relay, new_message_id};
use crate::config::{Member, Transport};
use crate::envelope::{self, Party};
use crate::error::RelayError;
use crate::policy::{Capability, Requester};
use crate::store::{Budget, DeliveryRow, NewDelivery, Recorded, Refusal, RequestKey};

impl Relay {
    /// Validates, authorizes, enqueues one delivery per target, and (sync) waits for them.
    pub async fn send(
        &self,
        bundle: &str,
        mut req: SendRequest,
    ) -> Result<SendResponse, RelayError> {
        // Windows line ends become plain newlines; other control characters are refused.
        req.message = req.message.replace("\r\n", "\n");
        validate_send(&req)?;
        let b = self.load(bundle)?;
        let sender = Requester::resolve(&b, &req.sender).ok_or_else(|| {
            RelayError::validation(
                "unknown_sender",
                format!(
                    "sender `{}` is neither a member of bundle {bundle} nor a principal",
                    req.sender
                ),
            )
            .with_details(json!({"sender": req.sender}))
        })?;
        let targets: Vec<String> = if req.broadcast {
            b.members
                .iter()
                .filter(|m| m.id != sender.id())
                .map(|m| m.id.clone())
                .collect()
        } else {
            let mut seen = HashSet::new();
            req.targets
                .iter()
                .filter(|t| seen.insert(t.as_str()))
                .cloned()
                .collect()
        };
        if targets.is_empty() {
            return Err(RelayError::validation(
                "empty_targets",
                "broadcast reaches nobody: the sender is the bundle's only member",
            ));
        }
        let unknown: Vec<String> = targets
            .iter()
            .filter(|t| b.member(t).is_none())
            .cloned()
            .collect();
        if !unknown.is_empty() {
            return Err(RelayError::validation(
                "unknown_target",
                format!(
                    "no member {} in bundle {bundle}",
                    unknown
                        .iter()
                        .map(|t| format!("`{t}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
            .with_details(json!({"targets": unknown})));
        }
        let members: Vec<&Member> = targets.iter().filter_map(|t| b.member(t)).collect();
        if let Err(e) = sender.authorize(&b, Capability::Send, &targets) {
            self.audit_denied(bundle, &e);
            return Err(e);
        }
        for m in &members {
            self.check_timeouts(&req, m)?;
        }
        let (chain_id, hop) = self.chain_for(bundle, sender.id(), &req).await?;
        let limits = &self.inner.opts.limits;
        if limits.max_hops > 0 && hop > limits.max_hops {
            let e = RelayError::new(
                409,
                "relay_hop_limit",
                format!(
                    "this message would be hop {hop} of chain {chain_id}, beyond the bundle's limit of {} hops: agents answering each other are stopped here",
                    limits.max_hops
                ),
            )
            .with_details(json!({"chain_id": chain_id, "hop": hop, "max_hops": limits.max_hops}));
            self.audit_refused(bundle, sender.id(), &targets, &e);
            self.tell_owner(&b, format!("hop:{chain_id}"), &e).await;
            return Err(e);
        }

        let sync = req.delivery == Delivery::Sync;
        let key = req.request_id.as_ref().map(|rid| RequestKey {
            sender: sender.id().to_string(),
            request_id: rid.clone(),
            fingerprint: fingerprint(&req, &targets),
        });
        let state = self.inner.store.bundle_state(bundle).await?;
        let at = Utc::now();
        let from = Party {
            id: sender.id().to_string(),
            name: sender.name().to_string(),
        };
        let to: Vec<Party> = members
            .iter()
            .map(|m| Party {
                id: m.id.clone(),
                name: m.name.clone(),
            })
            .collect();
        let mut planned = Vec::new();
        for m in &members {
            let message_id = new_message_id();
            let nd = NewDelivery {
                envelope: envelope::render(
                    bundle,
                    &message_id,
                    &from,
                    &to,
                    at,
                    &req.message,
                    envelope::Hop {
                        chain_id: &chain_id,
                        hop,
                        max_hops: limits.max_hops,
                    },
                ),
                chain_id: chain_id.clone(),
                hop,
                message_id,
                bundle: bundle.to_string(),
                target: m.id.clone(),
                sender: sender.id().to_string(),
                request_id: req.request_id.clone(),
                body_bytes: req.message.len(),
                sync,
                quiet_window_ms: req.quiet_window_ms,
                quiescence_timeout_ms: req.quiescence_timeout_ms,
                turn_timeout_ms: req.turn_timeout_ms,
            };
            let (ready, why) = self.readiness(&b, state, m).await;
            let refusal = (!ready).then(|| Refusal {
                outcome: Outcome::Failed,
                code: if why.as_deref() == Some("bundle_down") {
                    "bundle_down".into()
                } else {
                    NOT_READY.into()
                },
                reason: format!(
                    "`{}` cannot take messages now ({})",
                    m.id,
                    why.as_deref().unwrap_or("not ready")
                ),
            });
            planned.push((nd, refusal));
        }
        let ids: Vec<String> = planned.iter().map(|(d, _)| d.message_id.clone()).collect();
        let budgets = budgets(limits, sender.id(), at);
        let refused = match self
            .inner
            .store
            .record_send(
                key.as_ref(),
                &planned,
                self.inner.opts.queue_capacity,
                &budgets
                    .iter()
                    .map(|(b, _, _)| b.clone())
                    .collect::<Vec<_>>(),
            )
            .await?
        {
            Recorded::Stored(refused) => refused,
            Recorded::OverBudget(i) => {
                let (budget, scope, window) = &budgets[i];
                let whose = match scope {
                    &"member" => format!("`{}`", sender.id()),
                    _ => format!("bundle {bundle}"),
                };
                let e = RelayError::new(
                    429,
                    "relay_budget_exhausted",
                    format!(
                        "{whose} may send {} messages per {window}, and this send would go beyond it; try again later",
                        budget.limit
                    ),
                )
                .with_details(json!({"scope": scope, "window": window, "limit": budget.limit, "targets": targets.len()}));
                self.audit_refused(bundle, sender.id(), &targets, &e);
                // Once per window: the minute or the day this refusal falls in.
                let span = if *window == "minute" { 60 } else { 86_400 };
                let key = format!(
                    "budget:{scope}:{}:{window}:{}",
                    if *scope == "member" { sender.id() } else { "" },
                    at.timestamp() / span
                );
                self.tell_owner(&b, key, &e).await;
                return Err(e);
            }
            Recorded::Duplicate { same: true } => {
                // A retry: answer from the first request's deliveries.
                let rid = req.request_id.clone().unwrap_or_default();
                let earlier = self
                    .inner
                    .store
                    .request_deliveries(bundle, sender.id(), &rid)
                    .await?;
                return self.answer(bundle, &req, earlier).await;
            }
            Recorded::Duplicate { same: false } => {
                return Err(RelayError::new(
                    409,
                    "request_id_reused",
                    format!(
                        "request_id {:?} was used by `{}` for a different message or targets; use a new id",
                        req.request_id.as_deref().unwrap_or(""),
                        sender.id()
                    ),
                ));
            }
        };
        let mut audit = json!({
            "requester": sender.id(),
            "targets": &targets,
            "message_ids": &ids,
            "bytes": req.message.len(),
            "delivery": req.delivery,
            "request_id": req.request_id,
            "chain_id": chain_id,
            "hop": hop,
        });
        if self.inner.opts.audit_bodies {
            audit["body"] = json!(req.message);
        }
        self.inner.audit.record(bundle, "relay.send.request", audit);
        for ev in &refused {
            self.published(ev);
        }
        let mut rows = Vec::new();
        for id in &ids {
            if let Some(row) = self.inner.store.delivery(bundle, id).await? {
                if row.state != "done" {
                    self.ensure_worker(bundle, &row.target).await;
                }
                rows.push(row);
            }
        }
        self.answer(bundle, &req, rows).await
    }

    /// Refuses timeout fields that do not fit the member's transport, or that cannot work
    /// together with the member's own quiet window.
    fn check_timeouts(&self, req: &SendRequest, m: &Member) -> Result<(), RelayError> {
        let wrong = |field: &str, tmux: bool| {
            RelayError::validation(
                "invalid_timeout_field_for_transport",
                format!(
                    "{field} does not apply to `{}`, a {} member ({})",
                    m.id,
                    m.transport.kind().as_str(),
                    if tmux {
                        "tmux members take quiet_window_ms and quiescence_timeout_ms"
                    } else {
                        "acp and session members take turn_timeout_ms"
                    }
                ),
            )
            .with_details(json!({"field": field, "target": m.id}))
        };
        match &m.transport {
            Transport::Tmux(t) => {
                if req.turn_timeout_ms.is_some() {
                    return Err(wrong("turn_timeout_ms", true));
                }
                let window = req
                    .quiet_window_ms
                    .or(t.quiet_window_ms)
                    .unwrap_or(DEFAULT_QUIET_WINDOW.as_millis() as u64);
                let timeout = req
                    .quiescence_timeout_ms
                    .unwrap_or(self.inner.opts.quiescence_timeout.as_millis() as u64);
                if window >= timeout {
                    return Err(RelayError::validation(
                        "conflicting_timeout_fields",
                        format!(
                            "`{}` must stay quiet for {window} ms, which does not fit in a quiescence timeout of {timeout} ms",
                            m.id
                        ),
                    )
                    .with_details(json!({"target": m.id, "quiet_window_ms": window, "quiescence_timeout_ms": timeout})));
                }
            }
            Transport::Acp(_) | Transport::Session(_) => {
                if req.quiet_window_ms.is_some() {
                    return Err(wrong("quiet_window_ms", false));
                }
                if req.quiescence_timeout_ms.is_some() {
                    return Err(wrong("quiescence_timeout_ms", false));
                }
            }
        }
        Ok(())
    }

    /// The chain a send belongs to and its hop: the named message's chain one hop on; else
    /// the chain of the last message delivered to the sender within the reply window; else a
    /// new chain.
    async fn chain_for(
        &self,
        bundle: &str,
        sender: &str,
        req: &SendRequest,
    ) -> Result<(String, u32), RelayError> {
        if let Some(parent) = &req.in_reply_to {
            return match self.inner.store.chain_of(bundle, parent).await? {
                Some((chain, hop)) => Ok((chain, hop.saturating_add(1))),
                None => Err(RelayError::new(
                    404,
                    "message_not_found",
                    format!("in_reply_to names no message of bundle {bundle}: {parent:?}"),
                )
                .with_details(json!({"in_reply_to": parent}))),
            };
        }
        let window = chrono::TimeDelta::from_std(self.inner.opts.limits.reply_window)
            .unwrap_or(chrono::TimeDelta::minutes(10));
        let since = switchboard_db::text_time(Utc::now() - window);
        Ok(
            match self
                .inner
                .store
                .last_received(bundle, sender, &since)
                .await?
            {
                Some((chain, hop)) => (chain, hop.saturating_add(1)),
                None => (super::new_chain_id(), 1),
            },
        )
    }

    /// Tells the bundle's owner (its `notify` chat, through the gateway) that a loop guard
    /// stopped a send — once per `key` (a chain, a budget window) in this process.
    async fn tell_owner(&self, b: &crate::config::Bundle, key: String, e: &RelayError) {
        let Some((channel, chat)) = &b.notify else {
            return;
        };
        if !self.inner.told.lock().insert(format!("{}:{key}", b.name)) {
            return;
        }
        let text = format!(
            "🔁 Relay bundle {}: a send was stopped ({}). {}",
            b.name, e.code, e.message
        );
        let sent = self
            .inner
            .client
            .gateway_send(&switchboard_protocol::gateway::GatewaySendRequest {
                channel: channel.clone(),
                target: chat.clone(),
                text,
                context: None,
                thread: None,
                kind: None,
            })
            .await;
        if let Err(err) = sent {
            tracing::warn!(bundle = %b.name, error = %err, "telling the bundle's owner failed");
        }
    }

    /// A send refused by a loop guard: audited with its code and details.
    fn audit_refused(&self, bundle: &str, sender: &str, targets: &[String], e: &RelayError) {
        tracing::warn!(bundle, sender, code = %e.code, "relay send refused");
        self.inner.audit.record(
            bundle,
            "relay.send.refused",
            json!({"requester": sender, "targets": targets, "code": e.code, "details": e.details}),
        );
    }

    fn audit_denied(&self, bundle: &str, e: &RelayError) {
        self.inner.audit.record(
            bundle,
            "relay.denied",
            json!({"code": e.code, "details": e.details}),
        );
    }

    /// An outcome is stored: audit it, hand it to sync waiters, wake event streams.
    pub(super) fn published(&self, ev: &OutcomeEvent) {
        self.inner.audit.record(
            &ev.bundle,
            "relay.send.outcome",
            json!({
                "message_id": ev.message_id,
                "requester": ev.sender,
                "target": ev.target,
                "outcome": ev.outcome,
                "reason_code": ev.reason_code,
            }),
        );
        let waiters = self.inner.waiters.lock().remove(&ev.message_id);
        for w in waiters.into_iter().flatten() {
            let _ = w.send(ev.clone());
        }
        self.inner.outcomes.send_replace(ev.seq);
    }

    /// The response for a request's deliveries; sync waits for the unfinished ones.
    async fn answer(
        &self,
        bundle: &str,
        req: &SendRequest,
        rows: Vec<DeliveryRow>,
    ) -> Result<SendResponse, RelayError> {
        let sync = req.delivery == Delivery::Sync;
        let chain_id = rows.iter().find_map(|r| r.chain_id.clone());
        let hop = chain_id.as_ref().and(rows.first().map(|r| r.hop));
        let mut waits = Vec::new();
        for row in &rows {
            if sync && row.state != "done" {
                waits.push(self.wait_outcome(row, req));
            }
        }
        let finished: Vec<Option<OutcomeEvent>> = futures::future::join_all(waits).await;
        let mut by_id: HashMap<String, OutcomeEvent> = finished
            .into_iter()
            .flatten()
            .map(|e| (e.message_id.clone(), e))
            .collect();
        let mut results = Vec::new();
        for row in rows {
            let r = if let Some(e) = by_id.remove(&row.message_id) {
                TargetResult {
                    target: row.target,
                    message_id: row.message_id,
                    outcome: e.outcome,
                    reason_code: e.reason_code,
                    reason: e.reason,
                }
            } else if let Some(o) = row.outcome {
                TargetResult {
                    target: row.target,
                    message_id: row.message_id,
                    outcome: o,
                    reason_code: row.reason_code,
                    reason: row.reason,
                }
            } else {
                // Async, or a sync wait that outlasted its bound: still in the queue.
                let (code, reason) = if sync {
                    (
                        Some("still_queued".to_string()),
                        Some(
                            "not delivered yet; the outcome will be pushed to the sender"
                                .to_string(),
                        ),
                    )
                } else {
                    (None, None)
                };
                TargetResult {
                    target: row.target,
                    message_id: row.message_id,
                    outcome: Outcome::Queued,
                    reason_code: code,
                    reason,
                }
            };
            results.push(r);
        }
        let delivered = results
            .iter()
            .filter(|r| r.outcome == Outcome::Delivered)
            .count();
        let queued = results
            .iter()
            .filter(|r| r.outcome == Outcome::Queued)
            .count();
        let failed = results.len() - delivered - queued;
        let status = if delivered == results.len() {
            SendStatus::Success
        } else if failed == 0 {
            // Nothing failed, some still in a queue (async, or a sync wait that ran out).
            SendStatus::Accepted
        } else if delivered + queued == 0 {
            SendStatus::Failure
        } else {
            SendStatus::Partial
        };
        Ok(SendResponse {
            schema_version: RELAY_SCHEMA_VERSION,
            request_id: req.request_id.clone(),
            bundle: bundle.to_string(),
            sender: req.sender.clone(),
            status,
            results,
            chain_id,
            hop,
        })
    }

    /// Waits for a delivery's outcome, bounded by how long its attempts may take.
    async fn wait_outcome(&self, row: &DeliveryRow, req: &SendRequest) -> Option<OutcomeEvent> {
        let (tx, rx) = oneshot::channel();
        self.inner
            .waiters
            .lock()
            .entry(row.message_id.clone())
            .or_default()
            .push(tx);
        // It may have finished before the waiter was in place.
        if let Ok(Some(r)) = self
            .inner
            .store
            .delivery(&row.bundle, &row.message_id)
            .await
            && r.state == "done"
        {
            self.inner.waiters.lock().remove(&row.message_id);
            return self.event_of(&r);
        }
        let attempt = match (req.quiescence_timeout_ms, req.turn_timeout_ms) {
            (Some(q), _) => Duration::from_millis(q),
            (_, Some(t)) => Duration::from_millis(t),
            _ => self
                .inner
                .opts
                .quiescence_timeout
                .max(self.inner.opts.turn_timeout),
        };
        let bound = attempt.saturating_mul(2) + Duration::from_secs(10);
        let out = match tokio::time::timeout(bound, rx).await {
            Ok(r) => r.ok(),
            Err(_) => None,
        };
        if out.is_none() {
            // Drop only this waiter (its receiver is gone now); others may still wait.
            let mut w = self.inner.waiters.lock();
            if let Some(list) = w.get_mut(&row.message_id) {
                list.retain(|s| !s.is_closed());
                if list.is_empty() {
                    w.remove(&row.message_id);
                }
            }
        }
        out
    }

    fn event_of(&self, r: &DeliveryRow) -> Option<OutcomeEvent> {
        Some(OutcomeEvent {
            seq: 0,
            bundle: r.bundle.clone(),
            message_id: r.message_id.clone(),
            request_id: r.request_id.clone(),
            sender: r.sender.clone(),
            target: r.target.clone(),
            outcome: r.outcome?,
            reason_code: r.reason_code.clone(),
            reason: r.reason.clone(),
            at: Utc::now(),
        })
    }

    /// A delivery's current state (`queued` while unfinished).
    pub async fn message(
        &self,
        bundle: &str,
        message_id: &str,
        viewer: Option<&str>,
    ) -> Result<TargetResult, RelayError> {
        let not_found = || {
            RelayError::new(
                404,
                "message_not_found",
                format!("no message {message_id} in bundle {bundle}"),
            )
        };
        let row = self
            .inner
            .store
            .delivery(bundle, message_id)
            .await?
            .ok_or_else(not_found)?;
        // A member sees the outcomes of what it sent or received, nothing else (not even
        // whether another message exists).
        if let Some(m) = viewer
            && row.sender != m
            && row.target != m
        {
            return Err(not_found());
        }
        Ok(TargetResult {
            target: row.target,
            message_id: row.message_id,
            outcome: row.outcome.unwrap_or(Outcome::Queued),
            reason_code: row.reason_code,
            reason: row.reason,
        })
    }
}

/// Longest timeout a request may ask for (one hour): a target's queue waits behind it.
pub const MAX_TIMEOUT_MS: u64 = 3_600_000;

/// What a request asks for, so a retry can be told from a different request reusing its id.
fn fingerprint(req: &SendRequest, targets: &[String]) -> String {
    use sha2::{Digest, Sha256};
    let mut sorted = targets.to_vec();
    sorted.sort();
    let canonical = json!({
        "message": req.message,
        "targets": sorted,
        "broadcast": req.broadcast,
        "delivery": req.delivery,
        "quiet_window_ms": req.quiet_window_ms,
        "quiescence_timeout_ms": req.quiescence_timeout_ms,
        "turn_timeout_ms": req.turn_timeout_ms,
    });
    hex::encode(Sha256::digest(canonical.to_string().as_bytes()))
}

/// Checks a send request's shape before anything is looked up.
/// The budgets a send of `sender` is checked against (those not switched off), each with
/// its scope and window for the refusal.
fn budgets(
    limits: &super::Limits,
    sender: &str,
    at: chrono::DateTime<Utc>,
) -> Vec<(Budget, &'static str, &'static str)> {
    let minute = switchboard_db::text_time(at - chrono::TimeDelta::minutes(1));
    let day = switchboard_db::text_time(at - chrono::TimeDelta::days(1));
    [
        (
            Some(sender),
            &minute,
            limits.member_per_minute,
            "member",
            "minute",
        ),
        (Some(sender), &day, limits.member_per_day, "member", "day"),
        (None, &minute, limits.bundle_per_minute, "bundle", "minute"),
        (None, &day, limits.bundle_per_day, "bundle", "day"),
    ]
    .into_iter()
    .filter(|(_, _, limit, _, _)| *limit > 0)
    .map(|(who, since, limit, scope, window)| {
        (
            Budget {
                sender: who.map(str::to_string),
                since: since.clone(),
                limit,
            },
            scope,
            window,
        )
    })
    .collect()
}

pub fn validate_send(req: &SendRequest) -> Result<(), RelayError> {
    if req.schema_version != RELAY_SCHEMA_VERSION {
        return Err(RelayError::validation(
            "invalid_arguments",
            format!(
                "schema_version {} is not supported (expected {RELAY_SCHEMA_VERSION})",
                req.schema_version
            ),
        ));
    }
    if req.message.trim().is_empty() {
        return Err(RelayError::validation(
            "invalid_arguments",
            "message is empty",
        ));
    }
    if let Some((i, c)) = req
        .message
        .char_indices()
        .find(|(_, c)| c.is_control() && *c != '\n' && *c != '\t')
    {
        // Escape sequences and control keys would drive a tmux member's terminal (end a
        // bracketed paste early, press Ctrl-C) instead of arriving as text.
        return Err(RelayError::validation(
            "invalid_arguments",
            format!(
                "message contains the control character U+{:04X} at byte {i}; only newlines and tabs are allowed",
                c as u32
            ),
        ));
    }
    if req.message.len() > MAX_MESSAGE_BYTES {
        return Err(RelayError::validation(
            "invalid_arguments",
            format!(
                "message is {} bytes; the most is {MAX_MESSAGE_BYTES}",
                req.message.len()
            ),
        ));
    }
    if req.sender.is_empty() {
        return Err(RelayError::validation("unknown_sender", "sender is empty"));
    }
    match (req.targets.is_empty(), req.broadcast) {
        (true, false) => {
            return Err(RelayError::validation(
                "empty_targets",
                "name at least one target, or set broadcast",
            ));
        }
        (false, true) => {
            return Err(RelayError::validation(
                "conflicting_targets",
                "targets and broadcast exclude each other",
            ));
        }
        _ => {}
    }
    for (field, v) in [
        ("quiet_window_ms", req.quiet_window_ms),
        ("quiescence_timeout_ms", req.quiescence_timeout_ms),
        ("turn_timeout_ms", req.turn_timeout_ms),
    ] {
        if v == Some(0) || v.is_some_and(|v| v > MAX_TIMEOUT_MS) {
            return Err(RelayError::validation(
                "invalid_timeout",
                format!("{field} must be between 1 and {MAX_TIMEOUT_MS} ms"),
            )
            .with_details(json!({"field": field})));
        }
    }
    if let (Some(w), Some(t)) = (req.quiet_window_ms, req.quiescence_timeout_ms)
        && w >= t
    {
        return Err(RelayError::validation(
            "conflicting_timeout_fields",
            format!(
                "quiet_window_ms ({w}) must be shorter than quiescence_timeout_ms ({t}), or the pane can never qualify"
            ),
        ));
    }
    if (req.quiet_window_ms.is_some() || req.quiescence_timeout_ms.is_some())
        && req.turn_timeout_ms.is_some()
    {
        return Err(RelayError::validation(
            "conflicting_timeout_fields",
            "turn_timeout_ms (acp and session members) cannot be combined with quiet_window_ms or quiescence_timeout_ms (tmux members)",
        ));
    }
    Ok(())
}
