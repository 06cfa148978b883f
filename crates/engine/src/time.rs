use chrono::{SecondsFormat, Utc};

/// Current time as RFC 3339 with microseconds and `Z`; sorts lexicographically.
pub fn now_rfc3339() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// `t` in the format of [`now_rfc3339`] (the stores' time text).
pub fn rfc3339(t: chrono::DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// Parses a stored timestamp; falls back to the epoch for unreadable values.
pub(crate) fn parse_ts(s: &str) -> chrono::DateTime<Utc> {
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|d| d.with_timezone(&Utc))
        .unwrap_or_default()
}
