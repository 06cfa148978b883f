//! Reports of the metered calls and the budgets' state, for `/v1/usage` and `/v1/budgets`.

use chrono::{DateTime, NaiveDate, Utc};
use switchboard_protocol::usage::{
    BudgetSource, BudgetSpec, BudgetStatus, BudgetWindowState, UsageCall, UsageGroup,
    UsageGroupTotals, UsageModelTotals, UsageQuery, UsageReportResponse, UsageTotals,
};
use switchboard_store::{BudgetRecord, CallFilter, CallKey, CallRecord, CallTotals, StoreError};

use super::{Budget, Meter};
use crate::error::EngineError;

/// Most calls `/v1/usage/calls` lists at once.
pub const MAX_CALLS: u32 = 1_000;

fn totals(t: &CallTotals) -> UsageTotals {
    UsageTotals {
        calls: t.calls,
        input_tokens: t.input_tokens,
        output_tokens: t.output_tokens,
        cache_read_tokens: t.cache_read_tokens,
        cache_write_tokens: t.cache_write_tokens,
        cost_microdollars: t.cost_microdollars,
        unpriced_calls: t.unpriced_calls,
        unreported_calls: t.unreported_calls,
    }
}

fn key(g: UsageGroup) -> CallKey {
    match g {
        UsageGroup::Day => CallKey::Day,
        UsageGroup::Session => CallKey::Session,
        UsageGroup::User => CallKey::User,
        UsageGroup::Chat => CallKey::Chat,
        UsageGroup::Model => CallKey::Model,
        UsageGroup::Backend => CallKey::Backend,
        UsageGroup::Schedule => CallKey::Schedule,
    }
}

/// A time of a query: RFC 3339, or a date (its start, UTC).
fn parse_time(what: &str, s: &str) -> Result<DateTime<Utc>, EngineError> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&Utc));
    }
    NaiveDate::parse_from_str(s, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| t.and_utc())
        .ok_or_else(|| {
            EngineError::Unprocessable(format!(
                "{what} {s:?}: expected an RFC 3339 time (2026-12-01T00:00:00Z) or a date (2026-12-01)"
            ))
        })
}

fn call(r: CallRecord) -> UsageCall {
    UsageCall {
        id: r.id,
        at: crate::time::parse_ts(&r.at),
        session_id: r.session_id,
        run_id: r.run_id,
        user: r.user_name,
        chat: r.chat,
        schedule: r.schedule,
        bundle: r.bundle,
        backend: r.backend,
        provider: r.provider,
        model: r.model,
        state: r.state,
        reported: r.reported,
        input_tokens: r.input_tokens,
        output_tokens: r.output_tokens,
        cache_read_tokens: r.cache_read_tokens,
        cache_write_tokens: r.cache_write_tokens,
        cost_microdollars: r.cost_microdollars,
        reserved_tokens: r.reserved_tokens,
        reserved_microdollars: r.reserved_microdollars,
    }
}

impl Meter {
    /// The period and filter of `q`, only `only_user`'s calls when given (a person who does
    /// not see every session sees their own usage only).
    fn filter(
        &self,
        q: &UsageQuery,
        only_user: Option<&str>,
    ) -> Result<(CallFilter, DateTime<Utc>, DateTime<Utc>), EngineError> {
        if q.limit.is_some_and(|l| l == 0 || l > MAX_CALLS) {
            return Err(EngineError::validation(
                "limit",
                format!("1 to {MAX_CALLS}"),
            ));
        }
        let to = match &q.to {
            Some(t) => parse_time("to", t)?,
            None => self.now(),
        };
        let from = match &q.from {
            Some(f) => parse_time("from", f)?,
            None => to - chrono::Duration::days(30),
        };
        if from > to {
            return Err(EngineError::Unprocessable(
                "`from` is after `to`".to_string(),
            ));
        }
        let user = match (only_user, &q.user) {
            (Some(me), Some(asked)) if asked != me => {
                return Err(EngineError::Forbidden(
                    "you see your own usage only".to_string(),
                ));
            }
            (Some(me), _) => Some(me.to_string()),
            (None, asked) => asked.clone(),
        };
        Ok((
            CallFilter {
                from: crate::time::rfc3339(from),
                to: crate::time::rfc3339(to),
                session_id: q.session,
                user_name: user,
                chat: q.chat.clone(),
            },
            from,
            to,
        ))
    }

    /// `GET /v1/usage`: the period's total, and its groups when asked.
    pub async fn report(
        &self,
        q: &UsageQuery,
        only_user: Option<&str>,
    ) -> Result<UsageReportResponse, EngineError> {
        let (filter, from, to) = self.filter(q, only_user)?;
        let store = &self.store;
        let total = store
            .call_totals(&filter, &[])
            .await?
            .first()
            .map(|(_, t)| totals(t))
            .unwrap_or_default();
        let mut groups: Vec<UsageGroupTotals> = Vec::new();
        match q.group_by {
            None => {}
            Some(UsageGroup::Day) => {
                // Each day with its models, in date order: what the console stacks.
                let rows = store
                    .call_totals(&filter, &[CallKey::Day, CallKey::Model])
                    .await?;
                for (k, t) in rows {
                    let day = k.first().cloned().flatten();
                    let model = UsageModelTotals {
                        key: k.get(1).cloned().flatten(),
                        totals: totals(&t),
                    };
                    match groups.last_mut() {
                        Some(g) if g.key == day => {
                            g.totals.add(&model.totals);
                            g.by_model.push(model);
                        }
                        _ => groups.push(UsageGroupTotals {
                            key: day,
                            totals: model.totals,
                            by_model: vec![model],
                        }),
                    }
                }
                groups.sort_by(|a, b| a.key.cmp(&b.key));
                for g in &mut groups {
                    g.by_model
                        .sort_by_key(|m| std::cmp::Reverse(m.totals.cost_microdollars));
                }
            }
            Some(g) => {
                groups = store
                    .call_totals(&filter, &[key(g)])
                    .await?
                    .into_iter()
                    .map(|(k, t)| UsageGroupTotals {
                        key: k.into_iter().next().flatten(),
                        by_model: Vec::new(),
                        totals: totals(&t),
                    })
                    .collect();
                groups.sort_by(|a, b| {
                    (b.totals.cost_microdollars, b.totals.tokens(), &a.key).cmp(&(
                        a.totals.cost_microdollars,
                        a.totals.tokens(),
                        &b.key,
                    ))
                });
            }
        }
        let unpriced_models = store
            .unpriced_models(&filter)
            .await?
            .into_iter()
            .map(|(p, m)| format!("{p}/{m}"))
            .collect();
        Ok(UsageReportResponse {
            from,
            to,
            group_by: q.group_by,
            total,
            groups,
            unpriced_models,
        })
    }

    /// What a session's calls have used, all told.
    pub async fn session_usage(&self, id: uuid::Uuid) -> Result<UsageTotals, EngineError> {
        let filter = CallFilter {
            from: String::new(),
            to: "~".into(),
            session_id: Some(id),
            ..CallFilter::default()
        };
        Ok(self
            .store
            .call_totals(&filter, &[])
            .await?
            .first()
            .map(|(_, t)| totals(t))
            .unwrap_or_default())
    }

    /// `GET /v1/usage/calls`: the period's calls, newest first.
    pub async fn calls(
        &self,
        q: &UsageQuery,
        only_user: Option<&str>,
    ) -> Result<Vec<UsageCall>, EngineError> {
        let (filter, _, _) = self.filter(q, only_user)?;
        let limit = q.limit.unwrap_or(100);
        Ok(self
            .store
            .list_calls(&filter, limit)
            .await?
            .into_iter()
            .map(call)
            .collect())
    }

    /// Every budget with its current windows.
    pub async fn status(&self) -> Result<Vec<BudgetStatus>, EngineError> {
        let now = self.now();
        let mut out = Vec::new();
        for b in self.budgets().await? {
            out.push(self.status_of(&b, now).await?);
        }
        Ok(out)
    }

    async fn status_of(&self, b: &Budget, now: DateTime<Utc>) -> Result<BudgetStatus, StoreError> {
        let (window, resets_at) = b.window(now, None);
        let windows = if b.spec.window == switchboard_protocol::usage::BudgetWindow::Run {
            // A run's window is the run's: nothing current to show.
            Vec::new()
        } else {
            self.store
                .budget_windows(&b.spec.name, &window)
                .await?
                .into_iter()
                .map(|w| BudgetWindowState {
                    subject: w.subject,
                    window: w.window,
                    spent_microdollars: w.spent_microdollars,
                    spent_tokens: w.spent_tokens,
                    reserved_microdollars: w.reserved_microdollars,
                    reserved_tokens: w.reserved_tokens,
                    extra_microdollars: w.extra_microdollars,
                    extra_tokens: w.extra_tokens,
                })
                .collect()
        };
        Ok(BudgetStatus {
            limit_microdollars: b.spec.limit_micros(),
            budget: b.spec.clone(),
            source: b.source,
            resets_at,
            windows,
        })
    }

    /// Counts what was spent in `b`'s current window before the budget existed (a budget
    /// of $100 a month made on the 20th has the month's spending so far): each subject's
    /// window is made with the calls' cost and tokens since the window began. A window that
    /// exists already is left as it is.
    pub async fn seed(&self, b: &Budget) -> Result<(), StoreError> {
        let now = self.now();
        let Some(start) = b.window_start(now) else {
            return Ok(());
        };
        let (window, _) = b.window(now, None);
        let filter = CallFilter {
            from: crate::time::rfc3339(start),
            to: "~".into(),
            ..CallFilter::default()
        };
        use switchboard_protocol::usage::BudgetScope as S;
        let key = match b.spec.scope {
            S::Global => None,
            S::User => Some(CallKey::User),
            S::Chat => Some(CallKey::Chat),
            S::Session => Some(CallKey::Session),
            S::Backend => Some(CallKey::Backend),
            S::Schedule => Some(CallKey::Schedule),
            S::Bundle => Some(CallKey::Bundle),
        };
        let keys: Vec<CallKey> = key.into_iter().collect();
        for (k, t) in self.store.call_totals(&filter, &keys).await? {
            let subject = match (key, k.into_iter().next().flatten()) {
                (None, _) => String::new(),
                (Some(_), Some(s)) => s,
                // Calls without one of the scope (no person, no chat): not this budget's.
                (Some(_), None) => continue,
            };
            if b.spec.match_.as_ref().is_some_and(|m| *m != subject) || t.calls == 0 {
                continue;
            }
            self.store
                .seed_window(&switchboard_store::WindowRecord {
                    budget: b.spec.name.clone(),
                    subject,
                    window: window.clone(),
                    spent_microdollars: t.cost_microdollars,
                    spent_tokens: t.input_tokens + t.output_tokens,
                    ..Default::default()
                })
                .await?;
        }
        Ok(())
    }

    /// [`Meter::seed`] for every budget of the configuration: one added since the last start
    /// counts what its window spent before.
    pub async fn seed_configured(&self) -> Result<(), StoreError> {
        let configured = self.configured.read().clone();
        for b in configured.iter() {
            self.seed(b).await?;
        }
        Ok(())
    }

    /// Makes or replaces a budget over the API; one of the configuration's cannot be.
    pub async fn put_budget(
        &self,
        spec: BudgetSpec,
        by: &str,
    ) -> Result<BudgetStatus, EngineError> {
        let b = Budget::new(spec, BudgetSource::Api).map_err(EngineError::Unprocessable)?;
        if self
            .configured
            .read()
            .iter()
            .any(|c| c.spec.name == b.spec.name)
        {
            return Err(EngineError::Conflict(format!(
                "budget {} is set in the configuration file; change it there",
                b.spec.name
            )));
        }
        let spec = serde_json::to_string(&b.spec)
            .map_err(|e| EngineError::Unprocessable(e.to_string()))?;
        let before = self
            .store
            .list_budgets()
            .await?
            .into_iter()
            .find(|r| r.name == b.spec.name)
            .map(|r| serde_json::from_str::<BudgetSpec>(&r.spec).ok());
        // What its windows count changes with its scope (and whom it matches) or its window:
        // those are started afresh from what was spent, as a new budget's are. A new limit
        // keeps them.
        let redefined = match &before {
            None => true,
            Some(None) => true,
            Some(Some(old)) => {
                old.scope != b.spec.scope
                    || old.match_ != b.spec.match_
                    || old.window != b.spec.window
                    || old.time_zone != b.spec.time_zone
            }
        };
        self.store
            .put_budget(
                &BudgetRecord {
                    name: b.spec.name.clone(),
                    spec,
                    created_at: crate::time::now_rfc3339(),
                    created_by: by.to_string(),
                },
                redefined && before.is_some(),
            )
            .await?;
        self.api_budgets_changed();
        if redefined {
            self.seed(&b).await?;
        }
        Ok(self.status_of(&b, self.now()).await?)
    }

    /// Removes a budget made over the API; false if there is none of that name.
    pub async fn delete_budget(&self, name: &str) -> Result<bool, EngineError> {
        if self.configured.read().iter().any(|c| c.spec.name == name) {
            return Err(EngineError::Conflict(format!(
                "budget {name} is set in the configuration file; remove it there"
            )));
        }
        let gone = self.store.delete_budget(name).await?;
        self.api_budgets_changed();
        Ok(gone)
    }
}
