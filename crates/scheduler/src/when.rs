//! When a schedule is due.

use std::str::FromStr as _;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use serde::{Deserialize, Serialize};

/// Shortest interval of `every`.
pub const MIN_INTERVAL: Duration = Duration::from_secs(60);

/// A trigger as a user writes it: exactly one of `cron` (with an optional `tz`, default
/// UTC), `every`, `at` or `in`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TriggerSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tz: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    #[serde(default, rename = "in", skip_serializing_if = "Option::is_none")]
    pub in_: Option<String>,
}

/// A spec that does not make a trigger: the field and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct TriggerError {
    pub field: &'static str,
    pub message: String,
}

fn bad(field: &'static str, message: impl Into<String>) -> TriggerError {
    TriggerError {
        field,
        message: message.into(),
    }
}

/// A parsed trigger.
#[derive(Debug, Clone)]
pub enum Trigger {
    /// Five-field cron (minute hour day-of-month month day-of-week) in a time zone.
    Cron { cron: Box<Cron>, tz: chrono_tz::Tz },
    /// Every `period`, counted from `anchor` (when the schedule was made).
    Every {
        period: TimeDelta,
        anchor: DateTime<Utc>,
    },
    /// Once.
    At(DateTime<Utc>),
}

fn duration(field: &'static str, text: &str) -> Result<TimeDelta, TriggerError> {
    let d = humantime::parse_duration(text.trim()).map_err(|e| {
        bad(
            field,
            format!("{text:?} is not a duration like 30m, 2h or 1h 30m ({e})"),
        )
    })?;
    TimeDelta::from_std(d).map_err(|_| bad(field, format!("{text:?} is too long")))
}

impl Trigger {
    /// Parses `spec` as given by a user; `now` anchors `every` and `in`, and `at` must be
    /// after it.
    pub fn parse(spec: &TriggerSpec, now: DateTime<Utc>) -> Result<Self, TriggerError> {
        Self::parse_at(spec, now, true)
    }

    /// Parses a stored spec (accepted before): `anchor` is when it was made, and an `at`
    /// that has passed is kept (it is then due, or done).
    pub fn parse_stored(spec: &TriggerSpec, anchor: DateTime<Utc>) -> Result<Self, TriggerError> {
        Self::parse_at(spec, anchor, false)
    }

    fn parse_at(
        spec: &TriggerSpec,
        now: DateTime<Utc>,
        future_only: bool,
    ) -> Result<Self, TriggerError> {
        let given = [
            spec.cron.is_some(),
            spec.every.is_some(),
            spec.at.is_some(),
            spec.in_.is_some(),
        ]
        .iter()
        .filter(|g| **g)
        .count();
        if given != 1 {
            return Err(bad(
                "trigger",
                "give exactly one of cron (with tz), every, at or in",
            ));
        }
        if spec.tz.is_some() && spec.cron.is_none() {
            return Err(bad("tz", "a time zone goes with a cron expression"));
        }
        if let Some(expr) = &spec.cron {
            let cron = CronParser::builder()
                .seconds(Seconds::Disallowed)
                .year(Year::Disallowed)
                .build()
                .parse(expr.trim())
                .map_err(|e| {
                    bad(
                        "cron",
                        format!("{expr:?} is not a cron expression of five fields ({e})"),
                    )
                })?;
            let tz = match spec.tz.as_deref().map(str::trim) {
                None | Some("") => chrono_tz::UTC,
                Some(name) => chrono_tz::Tz::from_str(name).map_err(|_| {
                    bad(
                        "tz",
                        format!("{name:?} is not an IANA time zone like Europe/Berlin"),
                    )
                })?,
            };
            let t = Trigger::Cron {
                cron: Box::new(cron),
                tz,
            };
            // A pattern that never matches (30 February) is refused now.
            if future_only && t.next_after(now).is_none() {
                return Err(bad("cron", format!("{expr:?} never comes")));
            }
            return Ok(t);
        }
        if let Some(every) = &spec.every {
            let period = duration("every", every)?;
            if period < TimeDelta::seconds(MIN_INTERVAL.as_secs() as i64) {
                return Err(bad("every", "the shortest interval is 1m"));
            }
            return Ok(Trigger::Every {
                period,
                anchor: now,
            });
        }
        if let Some(at) = &spec.at {
            let t = DateTime::parse_from_rfc3339(at.trim())
                .map_err(|e| {
                    bad(
                        "at",
                        format!("{at:?} is not an RFC 3339 time like 2026-12-24T09:00:00Z ({e})"),
                    )
                })?
                .with_timezone(&Utc);
            if future_only && t <= now {
                return Err(bad("at", format!("{at} is in the past")));
            }
            return Ok(Trigger::At(t));
        }
        let text = spec.in_.as_deref().unwrap_or_default();
        let delay = duration("in", text)?;
        if delay <= TimeDelta::zero() {
            return Err(bad("in", "the delay must be positive"));
        }
        now.checked_add_signed(delay)
            .map(Trigger::At)
            .ok_or_else(|| bad("in", "too far"))
    }

    /// The first due time strictly after `t`, if there is one.
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Trigger::Cron { cron, tz } => cron
                .find_next_occurrence(&t.with_timezone(tz), false)
                .ok()
                .map(|d| d.with_timezone(&Utc)),
            Trigger::Every { period, anchor } => {
                if t < *anchor {
                    return anchor.checked_add_signed(*period);
                }
                let secs = period.num_seconds().max(1);
                let n = (t - *anchor).num_seconds() / secs + 1;
                anchor.checked_add_signed(TimeDelta::seconds(n.checked_mul(secs)?))
            }
            Trigger::At(at) => (*at > t).then_some(*at),
        }
    }

    /// Whether it fires at most once.
    pub fn is_once(&self) -> bool {
        matches!(self, Trigger::At(_))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn cron(expr: &str, tz: &str) -> TriggerSpec {
        TriggerSpec {
            cron: Some(expr.into()),
            tz: Some(tz.into()),
            ..TriggerSpec::default()
        }
    }

    #[test]
    fn weekdays_at_nine_in_berlin_across_the_spring_dst_change() {
        let now = utc("2026-03-26T12:00:00Z"); // a Thursday, CET (UTC+1)
        let t = Trigger::parse(&cron("0 9 * * 1-5", "Europe/Berlin"), now).unwrap();
        let fri = t.next_after(now).unwrap();
        assert_eq!(fri, utc("2026-03-27T08:00:00Z"), "09:00 CET");
        // Clocks go forward on Sunday 29 March: Monday 09:00 is CEST (UTC+2).
        let mon = t.next_after(fri).unwrap();
        assert_eq!(
            mon,
            utc("2026-03-30T07:00:00Z"),
            "09:00 CEST, weekend skipped"
        );
    }

    #[test]
    fn a_time_in_the_dst_gap_or_repeat_fires_once() {
        // 02:30 does not exist in Berlin on 29 March 2026, and exists twice on 25 October.
        let t = Trigger::parse(
            &cron("30 2 * * *", "Europe/Berlin"),
            utc("2026-03-28T12:00:00Z"),
        )
        .unwrap();
        let a = t.next_after(utc("2026-03-28T12:00:00Z")).unwrap();
        let b = t.next_after(a).unwrap();
        assert!(b - a >= TimeDelta::hours(23), "one firing per day: {a} {b}");
        let c = t.next_after(utc("2026-10-24T12:00:00Z")).unwrap();
        let d = t.next_after(c).unwrap();
        assert!(
            d - c >= TimeDelta::hours(23),
            "the repeated hour fires once: {c} {d}"
        );
    }

    #[test]
    fn intervals_count_from_the_anchor_and_one_shots_fire_once() {
        let now = utc("2026-12-01T10:00:00Z");
        let every = TriggerSpec {
            every: Some("30m".into()),
            ..TriggerSpec::default()
        };
        let t = Trigger::parse(&every, now).unwrap();
        assert_eq!(t.next_after(now).unwrap(), utc("2026-12-01T10:30:00Z"));
        assert_eq!(
            t.next_after(utc("2026-12-01T11:10:00Z")).unwrap(),
            utc("2026-12-01T11:30:00Z")
        );
        let in2h = TriggerSpec {
            in_: Some("2h".into()),
            ..TriggerSpec::default()
        };
        let t = Trigger::parse(&in2h, now).unwrap();
        assert!(t.is_once());
        let due = t.next_after(now).unwrap();
        assert_eq!(due, utc("2026-12-01T12:00:00Z"));
        assert_eq!(t.next_after(due), None);
        let at = TriggerSpec {
            at: Some("2026-12-24T09:00:00Z".into()),
            ..TriggerSpec::default()
        };
        assert_eq!(
            Trigger::parse(&at, now).unwrap().next_after(now).unwrap(),
            utc("2026-12-24T09:00:00Z")
        );
    }

    #[test]
    fn bad_specs_name_their_field() {
        let now = utc("2026-12-01T10:00:00Z");
        let field = |spec: TriggerSpec| Trigger::parse(&spec, now).unwrap_err().field;
        assert_eq!(field(cron("61 9 * * *", "UTC")), "cron");
        assert_eq!(field(cron("0 9 * *", "UTC")), "cron");
        assert_eq!(
            field(cron("0 0 0 * * *", "UTC")),
            "cron",
            "no seconds field"
        );
        assert_eq!(field(cron("0 0 30 2 *", "UTC")), "cron", "never comes");
        assert_eq!(field(cron("0 9 * * *", "Mars/Olympus")), "tz");
        let spec = |f: fn(&mut TriggerSpec)| {
            let mut s = TriggerSpec::default();
            f(&mut s);
            s
        };
        assert_eq!(field(spec(|s| s.every = Some("soon".into()))), "every");
        assert_eq!(field(spec(|s| s.every = Some("10s".into()))), "every");
        assert_eq!(field(spec(|s| s.at = Some("tomorrow".into()))), "at");
        assert_eq!(
            field(spec(|s| s.at = Some("2020-01-01T00:00:00Z".into()))),
            "at"
        );
        assert_eq!(field(spec(|s| s.in_ = Some("2 fortnights".into()))), "in");
        assert_eq!(field(TriggerSpec::default()), "trigger");
        assert_eq!(
            field(spec(|s| {
                s.every = Some("1h".into());
                s.in_ = Some("1h".into());
            })),
            "trigger"
        );
        assert_eq!(
            field(spec(|s| {
                s.every = Some("1h".into());
                s.tz = Some("UTC".into());
            })),
            "tz"
        );
    }
}
