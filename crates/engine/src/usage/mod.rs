//! Usage, cost and budgets (docs/usage.md): the [`Meter`] every model call goes through.
//!
//! Before a call, a backend asks for a reservation of its estimate (the request's input
//! tokens plus its output cap) against every budget that applies ([`budgets::applying`]);
//! the store takes it atomically in every window or refuses it whole, so concurrent runs and
//! instances cannot pass a limit by more than the estimate's error. After the call, the
//! reservation is settled with the real usage and its cost ([`prices`]); a run's end loses
//! whatever it left reserved, and a lost call counts its reservation as spent.

mod api_budgets;
pub mod budgets;
mod handle;
pub mod prices;
mod report;

pub use handle::MeteredCall;

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use switchboard_protocol::Usage;
use switchboard_protocol::usage::{BudgetHit, BudgetSource, BudgetSpec, ModelPrice, format_micros};
use switchboard_store::{CallRecord, CallUsage, Reservation, Store, StoreError};
use uuid::Uuid;

pub use budgets::{Attribution, Budget};
pub use prices::{PRICES_TAKEN, Prices};

/// Where the meter reads the time: the wall clock, or a test's.
pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// `[prices]` and `[[budgets]]` of the configuration.
#[derive(Debug, Clone, Default)]
pub struct UsageConfig {
    pub prices: HashMap<String, ModelPrice>,
    pub budgets: Vec<BudgetSpec>,
}

/// Why a call may not be made.
#[derive(Debug, thiserror::Error)]
pub enum MeterError {
    /// A budget has no room for the call's estimate.
    #[error("{hit}")]
    Exhausted {
        hit: BudgetHit,
        /// Its window's key.
        window: String,
        /// The budget asks for more at its limit (`at_limit = "ask"`).
        ask: bool,
        /// Its window was given more already (once per window).
        extended: bool,
        /// The budget's limit: what one more window's worth is.
        limit_microdollars: Option<u64>,
        limit_tokens: Option<u64>,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A call under way: what it holds.
#[derive(Debug, Clone)]
pub struct Ticket {
    pub id: Uuid,
    pub provider: String,
    pub model: String,
    /// Budgets that are 80 % spent or more once this call's estimate is held: `(budget,
    /// what to tell the run)`.
    pub nearly: Vec<(String, String)>,
    /// A call no budget applies to holds nothing, so nothing is written before it: its row
    /// is written once, settled, off its path.
    unwritten: Option<CallRecord>,
}

/// The meter of every model call.
pub struct Meter {
    store: Arc<dyn Store>,
    prices: parking_lot::RwLock<Arc<Prices>>,
    /// `[[budgets]]` of the configuration.
    configured: parking_lot::RwLock<Arc<Vec<Budget>>>,
    /// Those made over the API, as read from the store ([`api_budgets`]).
    api_budgets: Arc<api_budgets::ApiBudgets>,
    /// Settlements, written off the calls' path ([`Meter::settle`]).
    settler: std::sync::OnceLock<tokio::sync::mpsc::UnboundedSender<Settling>>,
    clock: parking_lot::RwLock<Clock>,
}

pub use api_budgets::{API_BUDGETS_STALE_LIMIT, API_BUDGETS_TTL};

/// Work for the settler.
enum Settling {
    Call(Uuid, CallUsage),
    /// A call that held nothing, written whole.
    Record(Box<CallRecord>),
    /// Answered once everything sent before it is written.
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// Writes settlements in order; one that fails is tried again once, then left reserved (its
/// run's end loses it: its reservation counts as spent, never less).
async fn settle_loop(
    store: Arc<dyn Store>,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Settling>,
) {
    while let Some(job) = rx.recv().await {
        match job {
            Settling::Call(id, usage) => {
                if let Err(e) = store.settle_call(id, &usage).await {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    if let Err(e2) = store.settle_call(id, &usage).await {
                        tracing::warn!(call = %id, error = %e, again = %e2, "a model call's usage could not be recorded; its reservation counts instead");
                    }
                }
            }
            Settling::Record(call) => {
                if let Err(e) = store.record_call(&call, &[]).await {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    if let Err(e2) = store.record_call(&call, &[]).await {
                        tracing::warn!(call = %call.id, error = %e, again = %e2, "a model call's usage could not be recorded");
                    }
                }
            }
            Settling::Flush(done) => {
                let _ = done.send(());
            }
        }
    }
}

impl Meter {
    /// A meter with `config`'s prices and budgets; what is wrong with a budget in words.
    pub fn new(store: Arc<dyn Store>, config: &UsageConfig) -> Result<Self, String> {
        let configured = configured_budgets(&config.budgets)?;
        Ok(Self {
            store,
            prices: parking_lot::RwLock::new(Arc::new(Prices::new(&config.prices))),
            configured: parking_lot::RwLock::new(Arc::new(configured)),
            api_budgets: Arc::default(),
            settler: std::sync::OnceLock::new(),
            clock: parking_lot::RwLock::new(Arc::new(Utc::now)),
        })
    }

    /// The settler's queue, started on first use (within the runtime).
    fn settler(&self) -> &tokio::sync::mpsc::UnboundedSender<Settling> {
        self.settler.get_or_init(|| {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            tokio::spawn(settle_loop(self.store.clone(), rx));
            tx
        })
    }

    /// Waits until every settlement handed over so far is written.
    pub async fn flush(&self) {
        let (done, wait) = tokio::sync::oneshot::channel();
        if self.settler().send(Settling::Flush(done)).is_ok() {
            let _ = wait.await;
        }
    }

    /// Budgets made over the API are read again at the next call.
    pub(crate) fn api_budgets_changed(&self) {
        self.api_budgets.changed();
    }

    /// Reads the time from `clock` from now on (tests roll windows over with it).
    pub fn set_clock(&self, clock: Clock) {
        *self.clock.write() = clock;
    }

    fn now(&self) -> DateTime<Utc> {
        (self.clock.read())()
    }

    /// The prices in force.
    pub fn prices(&self) -> Arc<Prices> {
        self.prices.read().clone()
    }

    /// Every budget in force: the configuration's, then those made over the API.
    pub async fn budgets(&self) -> Result<Vec<Budget>, StoreError> {
        let mut all: Vec<Budget> = self.configured.read().as_ref().clone();
        let api = self.api_budgets.get(&self.store).await?;
        all.extend(
            api.iter()
                .filter(|b| !all.iter().any(|c| c.spec.name == b.spec.name))
                .cloned()
                .collect::<Vec<_>>(),
        );
        Ok(all)
    }

    /// Reserves an estimate of `input_tokens` in and at most `output_tokens` out for a call
    /// of `provider`/`model` for `who`, against every budget that applies.
    pub async fn reserve(
        &self,
        who: &Attribution,
        provider: &str,
        model: &str,
        input_tokens: u64,
        output_tokens: u64,
    ) -> Result<Ticket, MeterError> {
        let now = self.now();
        let budgets = self.budgets().await?;
        let applied = budgets::applying(&budgets, who, now);
        let estimate = Usage::tokens(input_tokens, output_tokens);
        let micros = self.prices().cost(provider, model, &estimate).unwrap_or(0);
        let call = CallRecord {
            id: Uuid::now_v7(),
            at: crate::time::rfc3339(now),
            state: "reserved".into(),
            reserved_microdollars: micros,
            reserved_tokens: estimate.total_tokens,
            ..record(who, provider, model)
        };
        if applied.is_empty() {
            return Ok(Ticket {
                id: call.id,
                provider: provider.to_string(),
                model: model.to_string(),
                nearly: Vec::new(),
                unwritten: Some(call),
            });
        }
        let claims: Vec<_> = applied.iter().map(|a| a.claim.clone()).collect();
        match self.store.reserve_call(&call, &claims).await? {
            Reservation::Granted(windows) => {
                let nearly = windows
                    .iter()
                    .zip(&applied)
                    .filter_map(|(w, a)| nearly_spent(a, w))
                    .collect();
                Ok(Ticket {
                    id: call.id,
                    provider: provider.to_string(),
                    model: model.to_string(),
                    nearly,
                    unwritten: None,
                })
            }
            Reservation::Refused(w) => {
                let a = applied
                    .iter()
                    .find(|a| a.claim.budget == w.budget)
                    .ok_or_else(|| {
                        StoreError::Corrupt(format!("refused by an unknown budget {}", w.budget))
                    })?;
                metrics::counter!("switchboard_budget_refusals_total", "budget" => w.budget.clone())
                    .increment(1);
                Err(MeterError::Exhausted {
                    hit: a.budget.hit(&w.subject, a.resets_at),
                    ask: a.budget.spec.at_limit == switchboard_protocol::usage::AtLimit::Ask,
                    extended: w.extra_microdollars > 0 || w.extra_tokens > 0,
                    window: w.window,
                    limit_microdollars: a.claim.limit_microdollars,
                    limit_tokens: a.claim.limit_tokens,
                })
            }
        }
    }

    /// Whether every budget that applies to `who` has room left (spent and held below its
    /// limit): for a call that cannot be estimated beforehand.
    pub async fn check(&self, who: &Attribution) -> Result<(), MeterError> {
        let now = self.now();
        let budgets = self.budgets().await?;
        for a in budgets::applying(&budgets, who, now) {
            let w = self
                .store
                .budget_windows(&a.claim.budget, &a.claim.window)
                .await?
                .into_iter()
                .find(|w| w.subject == a.claim.subject)
                .unwrap_or_default();
            let full = a.claim.limit_microdollars.is_some_and(|l| {
                w.spent_microdollars + w.reserved_microdollars >= l + w.extra_microdollars
            }) || a
                .claim
                .limit_tokens
                .is_some_and(|l| w.spent_tokens + w.reserved_tokens >= l + w.extra_tokens);
            if full {
                return Err(MeterError::Exhausted {
                    hit: a.budget.hit(&a.claim.subject, a.resets_at),
                    ask: a.budget.spec.at_limit == switchboard_protocol::usage::AtLimit::Ask,
                    extended: w.extra_microdollars > 0 || w.extra_tokens > 0,
                    window: a.claim.window,
                    limit_microdollars: a.claim.limit_microdollars,
                    limit_tokens: a.claim.limit_tokens,
                });
            }
        }
        Ok(())
    }

    /// Allows `hit`'s window this much more (an operator's extension).
    pub async fn extend(
        &self,
        hit: &BudgetHit,
        window: &str,
        microdollars: u64,
        tokens: u64,
    ) -> Result<(), StoreError> {
        self.store
            .extend_window(&hit.budget, &hit.subject, window, microdollars, tokens)
            .await
    }

    /// Settles a reserved call with what it used (`None`: the backend did not say); the
    /// usage with its cost.
    ///
    /// The write happens off the call's path, in order, by the settler: until it lands the
    /// reservation (never less than the call may use) still holds, so a budget is only
    /// stricter meanwhile. [`Meter::flush`] waits for it; [`Meter::lose`] flushes first.
    pub async fn settle(
        &self,
        ticket: &Ticket,
        usage: Option<&Usage>,
    ) -> Result<Usage, StoreError> {
        let (call, priced) = self.price(&ticket.provider, &ticket.model, usage, None);
        let job = match &ticket.unwritten {
            Some(row) => Settling::Record(Box::new(CallRecord {
                state: "settled".into(),
                reported: call.reported,
                input_tokens: call.input_tokens,
                output_tokens: call.output_tokens,
                cache_read_tokens: call.cache_read_tokens,
                cache_write_tokens: call.cache_write_tokens,
                cost_microdollars: call.cost_microdollars,
                ..row.clone()
            })),
            None => Settling::Call(ticket.id, call),
        };
        if let Err(tokio::sync::mpsc::error::SendError(job)) = self.settler().send(job) {
            // No settler (the runtime is going away): written here.
            match job {
                Settling::Record(row) => self.store.record_call(&row, &[]).await?,
                Settling::Call(id, call) => {
                    self.store.settle_call(id, &call).await?;
                }
                Settling::Flush(_) => {}
            }
        }
        count(&ticket.provider, &ticket.model, &priced, usage.is_some());
        Ok(priced)
    }

    /// Records a call nobody reserved (an agent's own report after it made it), counted in
    /// every budget that applies whatever their room; the usage with its cost (the agent's
    /// own, when it gives one).
    pub async fn record(
        &self,
        who: &Attribution,
        provider: &str,
        model: &str,
        usage: Option<&Usage>,
        reported_cost: Option<u64>,
    ) -> Result<Usage, StoreError> {
        let now = self.now();
        let (u, priced) = self.price(provider, model, usage, reported_cost);
        let budgets = self.budgets().await?;
        let claims: Vec<_> = budgets::applying(&budgets, who, now)
            .into_iter()
            .map(|a| a.claim)
            .collect();
        let call = CallRecord {
            id: Uuid::now_v7(),
            at: crate::time::rfc3339(now),
            state: "settled".into(),
            reported: u.reported,
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cache_read_tokens: u.cache_read_tokens,
            cache_write_tokens: u.cache_write_tokens,
            cost_microdollars: u.cost_microdollars,
            ..record(who, provider, model)
        };
        self.store.record_call(&call, &claims).await?;
        count(provider, model, &priced, usage.is_some());
        Ok(priced)
    }

    /// A run is over: whatever it left reserved is lost (counted as spent).
    pub async fn lose(&self, run_id: Uuid) -> Result<u64, StoreError> {
        // Its settlements handed over first: a call that did settle is not lost.
        self.flush().await;
        self.store.lose_calls(run_id).await
    }

    /// What a call used, as stored, and the usage with its cost.
    fn price(
        &self,
        provider: &str,
        model: &str,
        usage: Option<&Usage>,
        reported_cost: Option<u64>,
    ) -> (CallUsage, Usage) {
        let Some(u) = usage else {
            // An agent that gives its cost but not its tokens (ACP's `usage_update`): the
            // cost is known, the tokens are not counted.
            if let Some(c) = reported_cost {
                return (
                    CallUsage {
                        reported: true,
                        cost_microdollars: Some(c),
                        ..CallUsage::default()
                    },
                    Usage {
                        cost_microdollars: Some(c),
                        ..Usage::default()
                    },
                );
            }
            return (
                CallUsage::default(),
                Usage {
                    cost_incomplete: true,
                    ..Usage::default()
                },
            );
        };
        let cost = reported_cost.or_else(|| self.prices().cost(provider, model, u));
        let call = CallUsage {
            reported: true,
            input_tokens: u.prompt_tokens,
            output_tokens: u.completion_tokens,
            cache_read_tokens: u.cache_read_tokens,
            cache_write_tokens: u.cache_write_tokens,
            cost_microdollars: cost,
        };
        let priced = Usage {
            cost_microdollars: cost,
            cost_incomplete: cost.is_none(),
            ..*u
        };
        (call, priced)
    }
}

/// `[[budgets]]` as budgets in force; what is wrong with one (or two of one name) in words.
pub fn configured_budgets(specs: &[BudgetSpec]) -> Result<Vec<Budget>, String> {
    let budgets = specs
        .iter()
        .map(|s| Budget::new(s.clone(), BudgetSource::Config))
        .collect::<Result<Vec<_>, _>>()?;
    let mut seen = std::collections::HashSet::new();
    for b in &budgets {
        if !seen.insert(b.spec.name.clone()) {
            return Err(format!("two budgets are named {}", b.spec.name));
        }
    }
    Ok(budgets)
}

/// The row of a call for `who`, before its state and numbers.
fn record(who: &Attribution, provider: &str, model: &str) -> CallRecord {
    CallRecord {
        session_id: who.session_id,
        run_id: who.run_id,
        user_name: who.user.clone(),
        chat: who.chat.clone(),
        schedule: who.schedule.clone(),
        bundle: who.bundle.clone(),
        backend: who.backend.clone(),
        provider: provider.to_string(),
        model: model.to_string(),
        ..CallRecord::default()
    }
}

/// A notice when `a`'s window is 80 % spent or more, counting what calls under way hold.
fn nearly_spent(
    a: &budgets::Applied<'_>,
    w: &switchboard_store::WindowRecord,
) -> Option<(String, String)> {
    let (used, limit, shown) = match (a.claim.limit_microdollars, a.claim.limit_tokens) {
        (Some(l), _) => {
            let used = w.spent_microdollars + w.reserved_microdollars;
            let limit = l + w.extra_microdollars;
            (
                used,
                limit,
                format!("{} of {}", format_micros(used), format_micros(limit)),
            )
        }
        (None, Some(l)) => {
            let used = w.spent_tokens + w.reserved_tokens;
            let limit = l + w.extra_tokens;
            (used, limit, format!("{used} of {limit} tokens"))
        }
        (None, None) => return None,
    };
    if u128::from(used) * 5 < u128::from(limit) * 4 {
        return None;
    }
    let hit = a.budget.hit(&w.subject, a.resets_at);
    let when = match hit.resets_at {
        Some(t) => format!("; it resets at {}", t.format("%Y-%m-%d %H:%M UTC")),
        None => " for this run".to_string(),
    };
    Some((
        hit.budget.clone(),
        format!("budget {} is 80 % spent ({shown}){when}", hit.budget),
    ))
}

/// Prometheus: tokens by model and kind, cost by model.
fn count(provider: &str, model: &str, u: &Usage, reported: bool) {
    if !reported {
        metrics::counter!("switchboard_unreported_calls_total", "model" => format!("{provider}/{model}"))
            .increment(1);
        return;
    }
    let m = format!("{provider}/{model}");
    let cached = u.cache_read_tokens + u.cache_write_tokens;
    for (kind, n) in [
        ("input", u.prompt_tokens.saturating_sub(cached)),
        ("output", u.completion_tokens),
        ("cache_read", u.cache_read_tokens),
        ("cache_write", u.cache_write_tokens),
    ] {
        if n > 0 {
            metrics::counter!("switchboard_tokens_total", "model" => m.clone(), "kind" => kind)
                .increment(n);
        }
    }
    if let Some(c) = u.cost_microdollars {
        metrics::counter!("switchboard_cost_microdollars_total", "model" => m).increment(c);
    }
}
