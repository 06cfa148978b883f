//! Which budgets apply to a call, and in which window — pure functions of the budgets, the
//! call's attribution and the time, so a test clock rolls windows over.

use chrono::{DateTime, Datelike, NaiveDate, TimeZone, Utc};
use chrono_tz::Tz;
use switchboard_protocol::usage::{BudgetHit, BudgetScope, BudgetSource, BudgetSpec, BudgetWindow};
use switchboard_store::WindowClaim;
use uuid::Uuid;

/// Whom a model call is for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attribution {
    pub session_id: Option<Uuid>,
    pub run_id: Option<Uuid>,
    /// The person the run was started for.
    pub user: Option<String>,
    /// `channel:conversation`.
    pub chat: Option<String>,
    pub schedule: Option<String>,
    pub bundle: Option<String>,
    /// `builtin`, or the ACP agent's name.
    pub backend: String,
}

/// A budget in force.
#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    pub spec: BudgetSpec,
    pub source: BudgetSource,
    pub tz: Tz,
}

impl Budget {
    /// A budget from its spec; what is wrong with it in words.
    pub fn new(spec: BudgetSpec, source: BudgetSource) -> Result<Self, String> {
        if let Some(p) = spec.problem() {
            return Err(p);
        }
        let tz = match spec.time_zone.as_deref() {
            None => Tz::UTC,
            Some(name) => name.parse::<Tz>().map_err(|_| {
                format!(
                    "budget {}: unknown time zone {name:?} (an IANA name such as Europe/Berlin)",
                    spec.name
                )
            })?,
        };
        Ok(Self { spec, source, tz })
    }

    /// Which one of its scope a call for `who` is counted as; `None` when the budget does
    /// not apply to the call.
    pub fn subject(&self, who: &Attribution) -> Option<String> {
        let value = match self.spec.scope {
            BudgetScope::Global => return Some(String::new()),
            BudgetScope::User => who.user.clone(),
            BudgetScope::Chat => who.chat.clone(),
            BudgetScope::Session => who.session_id.map(|s| s.to_string()),
            BudgetScope::Backend => Some(who.backend.clone()),
            BudgetScope::Schedule => who.schedule.clone(),
            BudgetScope::Bundle => who.bundle.clone(),
        }?;
        match &self.spec.match_ {
            Some(only) if *only != value => None,
            _ => Some(value),
        }
    }

    /// The key of the window `now` falls in, and when it ends (none for `run`).
    pub fn window(
        &self,
        now: DateTime<Utc>,
        run_id: Option<Uuid>,
    ) -> (String, Option<DateTime<Utc>>) {
        let local = now.with_timezone(&self.tz).date_naive();
        match self.spec.window {
            BudgetWindow::Run => (
                format!("run:{}", run_id.map(|r| r.to_string()).unwrap_or_default()),
                None,
            ),
            BudgetWindow::Day => (
                local.format("%Y-%m-%d").to_string(),
                local.succ_opt().and_then(|d| self.start_of(d)),
            ),
            BudgetWindow::Month => {
                let next = if local.month() == 12 {
                    NaiveDate::from_ymd_opt(local.year() + 1, 1, 1)
                } else {
                    NaiveDate::from_ymd_opt(local.year(), local.month() + 1, 1)
                };
                (
                    local.format("%Y-%m").to_string(),
                    next.and_then(|d| self.start_of(d)),
                )
            }
        }
    }

    /// When the window `now` falls in began (none for `run`).
    pub fn window_start(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local = now.with_timezone(&self.tz).date_naive();
        match self.spec.window {
            BudgetWindow::Run => None,
            BudgetWindow::Day => self.start_of(local),
            BudgetWindow::Month => local.with_day(1).and_then(|d| self.start_of(d)),
        }
    }

    /// The first moment of `day` in the budget's time zone (a day that starts in a DST gap
    /// starts at its first existing time).
    fn start_of(&self, day: NaiveDate) -> Option<DateTime<Utc>> {
        let midnight = day.and_hms_opt(0, 0, 0)?;
        let local = self
            .tz
            .from_local_datetime(&midnight)
            .earliest()
            .or_else(|| {
                self.tz
                    .from_local_datetime(&(midnight + chrono::Duration::hours(1)))
                    .earliest()
            })?;
        Some(local.with_timezone(&Utc))
    }

    /// The budget's hold on a call: its window and limit.
    pub fn claim(&self, subject: String, window: String) -> WindowClaim {
        WindowClaim {
            budget: self.spec.name.clone(),
            subject,
            window,
            limit_microdollars: self.spec.limit_micros(),
            limit_tokens: self.spec.limit_tokens,
        }
    }

    /// How a run stopped by this budget names it.
    pub fn hit(&self, subject: &str, resets_at: Option<DateTime<Utc>>) -> BudgetHit {
        BudgetHit {
            budget: self.spec.name.clone(),
            scope: self.spec.scope,
            subject: subject.to_string(),
            window: self.spec.window,
            resets_at,
        }
    }
}

/// A budget that applies to a call, with its window.
#[derive(Debug, Clone)]
pub struct Applied<'a> {
    pub budget: &'a Budget,
    pub claim: WindowClaim,
    pub resets_at: Option<DateTime<Utc>>,
}

/// Every budget of `budgets` that applies to a call for `who` at `now`.
pub fn applying<'a>(
    budgets: &'a [Budget],
    who: &Attribution,
    now: DateTime<Utc>,
) -> Vec<Applied<'a>> {
    budgets
        .iter()
        .filter_map(|b| {
            let subject = b.subject(who)?;
            let (window, resets_at) = b.window(now, who.run_id);
            Some(Applied {
                budget: b,
                claim: b.claim(subject, window),
                resets_at,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchboard_protocol::usage::AtLimit;

    fn spec(scope: BudgetScope, window: BudgetWindow, tz: Option<&str>) -> BudgetSpec {
        BudgetSpec {
            name: "b".into(),
            scope,
            match_: None,
            window,
            time_zone: tz.map(str::to_string),
            limit_usd: Some(1.0),
            limit_tokens: None,
            at_limit: AtLimit::Stop,
        }
    }

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().expect("a time")
    }

    #[test]
    fn windows_follow_the_calendar_of_their_time_zone() {
        let b = Budget::new(
            spec(
                BudgetScope::Global,
                BudgetWindow::Day,
                Some("Europe/Berlin"),
            ),
            BudgetSource::Config,
        )
        .expect("valid");
        // 23:30 UTC on the 5th is already the 6th in Berlin (UTC+1 in December).
        let (key, resets) = b.window(at("2026-12-05T23:30:00Z"), None);
        assert_eq!(key, "2026-12-06");
        assert_eq!(resets, Some(at("2026-12-06T23:00:00Z")));
        let (key, _) = b.window(at("2026-12-05T22:59:59Z"), None);
        assert_eq!(key, "2026-12-05", "the window rolls over at local midnight");

        let m = Budget::new(
            spec(BudgetScope::Global, BudgetWindow::Month, None),
            BudgetSource::Config,
        )
        .expect("valid");
        let (key, resets) = m.window(at("2026-12-31T23:59:59Z"), None);
        assert_eq!(key, "2026-12");
        assert_eq!(resets, Some(at("2027-01-01T00:00:00Z")));
        assert_eq!(m.window(at("2027-01-01T00:00:00Z"), None).0, "2027-01");

        let r = Budget::new(
            spec(BudgetScope::Global, BudgetWindow::Run, None),
            BudgetSource::Config,
        )
        .expect("valid");
        let run = Uuid::now_v7();
        assert_eq!(
            r.window(at("2026-12-05T00:00:00Z"), Some(run)),
            (format!("run:{run}"), None)
        );
    }

    #[test]
    fn a_budget_applies_to_its_scope_and_match_only() {
        let who = Attribution {
            user: Some("alice".into()),
            chat: Some("telegram:1".into()),
            backend: "builtin".into(),
            ..Attribution::default()
        };
        let b = |scope, only: Option<&str>| {
            let mut s = spec(scope, BudgetWindow::Day, None);
            s.match_ = only.map(str::to_string);
            Budget::new(s, BudgetSource::Config).expect("valid")
        };
        assert_eq!(
            b(BudgetScope::Global, None).subject(&who),
            Some(String::new())
        );
        assert_eq!(
            b(BudgetScope::User, None).subject(&who),
            Some("alice".into())
        );
        assert_eq!(b(BudgetScope::User, Some("bob")).subject(&who), None);
        assert_eq!(
            b(BudgetScope::Chat, Some("telegram:1")).subject(&who),
            Some("telegram:1".into())
        );
        assert_eq!(
            b(BudgetScope::Schedule, None).subject(&who),
            None,
            "not a schedule's run"
        );
        assert_eq!(
            b(BudgetScope::Backend, None).subject(&who),
            Some("builtin".into())
        );
    }

    #[test]
    fn an_unknown_time_zone_is_refused_by_name() {
        let e = Budget::new(
            spec(BudgetScope::Global, BudgetWindow::Day, Some("Mars/Olympus")),
            BudgetSource::Config,
        )
        .expect_err("refused");
        assert!(e.contains("Mars/Olympus"), "{e}");
    }
}
