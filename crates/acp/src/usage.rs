//! What an ACP agent's turns cost: agents report the session's cumulative cost in
//! `usage_update` (ACP v1 has no per-turn token counts), so a turn's cost is what the total
//! grew by since the last report. The last total is kept with the backend's state in the
//! store, so a restart (and `session/load`) neither counts a session's cost twice nor loses
//! it. A turn with no report is recorded as a call of unknown usage, never as free.

use switchboard_engine::{BackendError, RunContext};
use switchboard_protocol::Usage;
use switchboard_protocol::usage::usd_to_micros;

/// The provider name ACP agents' calls are recorded under (the model is the agent's name).
pub const PROVIDER: &str = "acp";

/// Records one finished turn of agent `agent`: `reported` is the cumulative cost its
/// last `usage_update` gave (amount, currency), if any. Returns the turn's usage with cost.
pub(crate) async fn record_turn(
    ctx: &RunContext,
    agent: &str,
    reported: Option<(f64, String)>,
) -> Result<Usage, BackendError> {
    let cost = match reported {
        Some((amount, currency)) if currency.eq_ignore_ascii_case("USD") => Some(amount),
        Some((_, currency)) => {
            tracing::warn!(agent, %currency, "the agent reports its cost in a currency other than USD; its usage is recorded as unknown");
            None
        }
        None => None,
    };
    let Some(total) = cost else {
        return ctx.handle.call_reported(PROVIDER, agent, None, None).await;
    };
    let mut state = ctx
        .handle
        .backend_state()
        .await
        .map_err(BackendError::from)?
        .unwrap_or_else(|| serde_json::json!({}));
    let before = state["cost_usd"].as_f64().unwrap_or(0.0);
    // A total that went down is a session the agent started afresh: all of it is new.
    let grew = if total >= before {
        total - before
    } else {
        total
    };
    let used = ctx
        .handle
        .call_reported(PROVIDER, agent, None, Some(usd_to_micros(grew)))
        .await?;
    if let Some(obj) = state.as_object_mut() {
        obj.insert("cost_usd".into(), serde_json::json!(total));
        if let Err(e) = ctx.handle.save_backend_state(Some(&state)).await {
            tracing::warn!(agent, error = %e, "could not keep the agent's cost so far");
        }
    }
    Ok(used)
}
