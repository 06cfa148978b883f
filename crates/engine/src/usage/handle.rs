//! A backend's metering of its model calls, through its [`RunHandle`].

use switchboard_protocol::{AgentEvent, Usage};

use super::{MeterError, Ticket};
use crate::{BackendError, RunHandle};

/// A model call under way, reserved against the run's budgets; settle it with
/// [`RunHandle::call_done`] (a call never settled is lost at the run's end and its
/// reservation counts as spent).
#[derive(Debug)]
#[must_use = "settle the call with RunHandle::call_done"]
pub struct MeteredCall {
    ticket: Ticket,
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
        let ticket = match self
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
            Ok(t) => t,
            Err(MeterError::Exhausted { hit, .. }) => {
                tracing::info!(session_id = %self.session_id, run_id = %self.run_id, budget = %hit.budget, "a budget stopped the run");
                return Err(BackendError::budget_exhausted(hit));
            }
            Err(MeterError::Store(e)) => return Err(crate::EngineError::Store(e).into()),
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
    /// Ends the run like [`RunHandle::call_starts`] when one is.
    pub async fn budget_allows(&self) -> Result<(), BackendError> {
        match self.meter.check(&self.attribution).await {
            Ok(()) => Ok(()),
            Err(MeterError::Exhausted { hit, .. }) => Err(BackendError::budget_exhausted(hit)),
            Err(MeterError::Store(e)) => Err(crate::EngineError::Store(e).into()),
        }
    }
}
