//! A backend's metering of its model calls, through its [`RunHandle`].

use switchboard_protocol::usage::{BUDGET_CALL_PREFIX, BUDGET_EXTENSION_TOOL};
use switchboard_protocol::{AgentEvent, ToolCall, Usage};

use super::{MeterError, Ticket};
use crate::{BackendError, Decision, RunHandle};

/// A model call under way, reserved against the run's budgets; settle it with
/// [`RunHandle::call_done`] (a call never settled is lost at the run's end and its
/// reservation counts as spent).
#[derive(Debug)]
#[must_use = "settle the call with RunHandle::call_done"]
pub struct MeteredCall {
    ticket: Ticket,
}

/// The error a refusal of the meter ends the run with.
fn stopped(refused: MeterError) -> BackendError {
    match refused {
        MeterError::Exhausted { hit, .. } => {
            tracing::info!(budget = %hit.budget, "a budget stopped the run");
            BackendError::budget_exhausted(hit)
        }
        MeterError::Store(e) => crate::EngineError::Store(e).into(),
    }
}

impl RunHandle {
    /// Before a model call of `provider`/`model` with about `input_tokens` in and at most
    /// `max_output_tokens` out: reserves that much against every budget that applies. A
    /// budget without room ends the run ([`BackendError::budget_exhausted`]); a budget now
    /// 80 % spent is told to the run once (a `Notice`).
    pub async fn call_starts(
        &self,
        provider: &str,
        model: &str,
        input_tokens: u64,
        max_output_tokens: u64,
    ) -> Result<MeteredCall, BackendError> {
        let mut asked = false;
        let ticket = loop {
            let refused = match self
                .meter
                .reserve(
                    &self.attribution,
                    provider,
                    model,
                    input_tokens,
                    max_output_tokens,
                )
                .await
            {
                Ok(t) => break t,
                Err(e) => e,
            };
            // A budget that asks at its limit asks once per window, and this run once.
            if asked {
                return Err(stopped(refused));
            }
            asked = true;
            self.extended(refused).await?;
        };
        let fresh: Vec<String> = {
            let mut warned = self.warned.lock();
            ticket
                .nearly
                .iter()
                .filter(|(budget, _)| warned.insert(budget.clone()))
                .map(|(_, message)| message.clone())
                .collect()
        };
        for message in fresh {
            self.emit(AgentEvent::Notice {
                run_id: self.run_id,
                message,
            })
            .await?;
        }
        Ok(MeteredCall { ticket })
    }

    /// After the call: records what it used (`None`: the provider did not say — counted at
    /// its reservation, and flagged unknown) and returns the usage with its cost.
    pub async fn call_done(
        &self,
        call: MeteredCall,
        usage: Option<&Usage>,
    ) -> Result<Usage, BackendError> {
        Ok(self
            .meter
            .settle(&call.ticket, usage)
            .await
            .map_err(crate::EngineError::Store)?)
    }

    /// An agent's own report of a call it already made (an ACP agent's `usage_update`):
    /// recorded and counted in every budget that applies; returns it with its cost (the
    /// agent's, when it gives one).
    pub async fn call_reported(
        &self,
        provider: &str,
        model: &str,
        usage: Option<&Usage>,
        cost_microdollars: Option<u64>,
    ) -> Result<Usage, BackendError> {
        Ok(self
            .meter
            .record(&self.attribution, provider, model, usage, cost_microdollars)
            .await
            .map_err(crate::EngineError::Store)?)
    }

    /// Whether the run may make another model call: no budget that applies is spent (for a
    /// backend that cannot say beforehand what a call will use, an ACP agent's prompt).
    /// Ends the run like [`RunHandle::call_starts`] when one is (after asking, for a budget
    /// that asks).
    pub async fn budget_allows(&self) -> Result<(), BackendError> {
        let mut asked = false;
        loop {
            let refused = match self.meter.check(&self.attribution).await {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            if asked {
                return Err(stopped(refused));
            }
            asked = true;
            self.extended(refused).await?;
        }
    }

    /// A refusal of the meter: `Ok` when its budget asks at its limit and an admin or
    /// operator allowed one more window's worth (the caller tries again); otherwise the
    /// error that ends the run.
    async fn extended(&self, refused: MeterError) -> Result<(), BackendError> {
        let (hit, window, limit_microdollars, limit_tokens) = match refused {
            MeterError::Exhausted {
                hit,
                window,
                ask: true,
                extended: false,
                limit_microdollars,
                limit_tokens,
            } => (hit, window, limit_microdollars, limit_tokens),
            other => return Err(stopped(other)),
        };
        let more = match (limit_microdollars, limit_tokens) {
            (Some(m), _) => switchboard_protocol::usage::format_micros(m),
            (None, Some(t)) => format!("{t} tokens"),
            (None, None) => "nothing".to_string(),
        };
        let call = ToolCall {
            id: format!("{BUDGET_CALL_PREFIX}{}", uuid::Uuid::now_v7().simple()),
            name: BUDGET_EXTENSION_TOOL.to_string(),
            arguments: serde_json::json!({
                "budget": hit.budget,
                "subject": hit.subject,
                "window": window,
                "more": more,
                "resets_at": hit.resets_at,
            }),
            metadata: Some(serde_json::json!({
                "preview": format!("{hit}. Allow it {more} more, once, for this {}?", hit.window.as_str()),
            })),
        };
        self.emit(AgentEvent::ToolCallsProposed {
            run_id: self.run_id,
            tool_calls: vec![call.clone()],
        })
        .await?;
        let decision = self.ask(std::slice::from_ref(&call)).await?;
        if decision.first() != Some(&Decision::Run) {
            return Err(BackendError::budget_exhausted(hit));
        }
        let by = self
            .decided_by
            .lock()
            .remove(&call.id)
            .unwrap_or_else(|| "an approver".to_string());
        self.meter
            .extend(
                &hit,
                &window,
                limit_microdollars.unwrap_or(0),
                limit_tokens.unwrap_or(0),
            )
            .await
            .map_err(crate::EngineError::Store)?;
        self.emit(AgentEvent::Notice {
            run_id: self.run_id,
            message: format!(
                "budget {}: {by} allowed {more} more for this {}",
                hit.budget,
                hit.window.as_str()
            ),
        })
        .await?;
        Ok(())
    }
}
