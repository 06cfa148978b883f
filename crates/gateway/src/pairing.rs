//! Pairing requests — someone unknown wrote to the bot in a direct message and got a code —
//! listed, approved and refused. The one implementation that `switchboard pairing …` and the
//! routes `/v1/gateway/pairing*` both call.

use crate::channel::Channel;
use crate::store::{GatewayStore, Pairing, StoreError};

/// What the person is told when their request is refused.
pub const REFUSED: &str = "The owner of this bot declined your pairing request.";

/// The pending requests that have not expired, the oldest first.
pub async fn pending(store: &GatewayStore) -> Result<Vec<Pairing>, StoreError> {
    store.pairings().await
}

/// Approves `code` on `channel`: the request's chat is allowed from now on (its next
/// message reaches the agent). Nothing is said in the chat. `None`: no such pending request
/// (a wrong, decided or expired code). Case and surrounding spaces of `code` do not matter.
pub async fn approve(
    store: &GatewayStore,
    channel: &str,
    code: &str,
) -> Result<Option<Pairing>, StoreError> {
    store.approve_pairing(channel, code).await
}

/// Refuses `code` on `channel`: the request is deleted and, when `chat` is the channel,
/// the person is told in one short message ([`REFUSED`]; a message that cannot be posted is
/// logged, the refusal stands). The chat stays unknown: writing again asks anew. `None`: no
/// such pending request.
pub async fn refuse(
    store: &GatewayStore,
    chat: Option<&dyn Channel>,
    channel: &str,
    code: &str,
) -> Result<Option<Pairing>, StoreError> {
    let Some(p) = store.refuse_pairing(channel, code).await? else {
        return Ok(None);
    };
    tracing::info!(channel = %p.channel, peer = %p.peer.id, code = %p.code, "pairing refused");
    if let Some(ch) = chat
        && let Err(e) = ch.send(&p.chat, REFUSED, &[]).await
    {
        tracing::warn!(channel = %p.channel, error = %e, "could not tell a refused peer");
    }
    Ok(Some(p))
}
