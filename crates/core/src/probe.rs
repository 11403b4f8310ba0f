//! Active probes: the cheap operator call the circuit switch makes itself
//! while a breaker is open, and the timers that wake it to the second.
//!
//! An open breaker is probed at most once per `probe_every` (10 s by
//! default): an answer starts the half-open round at once, whatever is left
//! of the open period, and the switch makes the round's trial calls with the
//! same probe, so recovery needs no customer traffic and no customer pays
//! for a failed trial. Without a probe in an operator's settings the open
//! period ends at `open_until`, to the second, on a timer rather than the
//! minute tick.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use crate::breaker::{BreakerConfig, BreakerRecord, BreakerState};
use crate::budget::Budget;
use crate::operator::{Operation, OperatorId};
use crate::request::OperatorCall;

/// The call an operator's breaker is probed with, from `OPERATOR_SETTINGS`:
///
/// ```json
/// {"probe": {"operation": "search",
///            "params": {"from": "HEL", "to": "TLL", "date": "today+7", "passengers": "1"}}}
/// ```
///
/// A parameter written `today+N` is sent as the date N days after the
/// probe's day (`YYYY-MM-DD`), so the probe never asks about the past.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeSpec {
    /// A read: a probe that booked would book at every probe
    /// ([`Operation::read_only`]; `book` is refused when settings are read).
    #[serde(deserialize_with = "probe_operation")]
    pub operation: Operation,
    #[serde(default)]
    pub params: BTreeMap<String, String>,
}

fn probe_operation<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Operation, D::Error> {
    Operation::deserialize_read(d, "a probe")
}

impl ProbeSpec {
    /// The probe call for `operator` at `now`, bounded by `budget`.
    pub fn call(&self, operator: &OperatorId, now: DateTime<Utc>, budget: Budget) -> OperatorCall {
        let params = self
            .params
            .iter()
            .map(|(k, v)| (k.clone(), resolve(v, now)))
            .collect();
        OperatorCall {
            request_id: format!("probe-{operator}-{}", now.timestamp_millis()),
            operator: operator.clone(),
            operation: self.operation,
            params,
            budget,
        }
    }
}

impl ProbeSpec {
    /// The question an operator just answered, kept to probe it with when
    /// its settings name no probe: only a search (a read every operator
    /// answers, that changes nothing), its parameters as asked, except a
    /// parameter that is a date (`YYYY-MM-DD`), written `today+N` so that a
    /// probe days later still asks N days ahead instead of about the past.
    /// `None` for any other operation, or a date already past at `now`.
    pub fn remembered(
        operation: Operation,
        params: &BTreeMap<String, String>,
        now: DateTime<Utc>,
    ) -> Option<Self> {
        if operation != Operation::Search {
            return None;
        }
        let today = now.date_naive();
        let mut kept = BTreeMap::new();
        for (name, value) in params {
            let value = match chrono::NaiveDate::parse_from_str(value, "%Y-%m-%d") {
                Ok(date) if date < today => return None,
                Ok(date) => format!("today+{}", (date - today).num_days()),
                Err(_) => value.clone(),
            };
            kept.insert(name.clone(), value);
        }
        Some(Self {
            operation,
            params: kept,
        })
    }
}

/// `today+N` → the date N days after `now`; anything else unchanged.
fn resolve(value: &str, now: DateTime<Utc>) -> String {
    let days = value
        .strip_prefix("today+")
        .and_then(|n| n.parse::<i64>().ok())
        .or_else(|| (value == "today").then_some(0));
    match days
        .and_then(TimeDelta::try_days)
        .and_then(|d| now.checked_add_signed(d))
    {
        Some(day) => day.format("%Y-%m-%d").to_string(),
        None => value.to_owned(),
    }
}

/// A wake-up of the circuit switch for one breaker version, delivered when
/// `due` has come (an SQS message delayed until then, on AWS).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BreakerTimer {
    pub operator: OperatorId,
    /// The breaker version it was set for: a timer of an older version is
    /// dropped unopened.
    pub version: u64,
    pub due: DateTime<Utc>,
}

/// When the switch must next look at `record` by itself: while open, at the
/// next probe when the operator is probed (each wake-up makes one call: a
/// probe, or the first trial once the open period is over, so the operator
/// sees at most one call per `probe_every` while it is down), otherwise at
/// the end of the open period; while half-open, when the round times out.
/// `None`: nothing to wait for.
pub fn next_wake(
    record: &BreakerRecord,
    cfg: &BreakerConfig,
    probing: bool,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let after = |gap: Duration| {
        TimeDelta::from_std(gap)
            .ok()
            .and_then(|gap| now.checked_add_signed(gap))
    };
    match record.state {
        BreakerState::Open => {
            let end = record.open_until.unwrap_or(now);
            let probe = probing
                .then(|| after(cfg.probe_every))
                .flatten()
                .filter(|_| !cfg.probe_every.is_zero());
            Some(probe.unwrap_or(end).max(now))
        }
        BreakerState::HalfOpen => TimeDelta::from_std(cfg.half_open_timeout)
            .ok()
            .and_then(|t| record.since.checked_add_signed(t))
            .map(|t| t.max(now)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_796_000_000 + s, 0).unwrap()
    }

    fn open(until: i64) -> BreakerRecord {
        let mut r = BreakerRecord::initial(OperatorId::new("nordic").unwrap(), t(0));
        r.state = BreakerState::Open;
        r.version = 1;
        r.open_until = Some(t(until));
        r
    }

    #[test]
    fn an_answered_search_is_remembered_days_ahead_not_on_its_date() {
        let params: BTreeMap<String, String> = [
            ("from", "HEL"),
            ("to", "TLL"),
            ("date", "2026-12-11"),
            ("passengers", "2"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let asked = DateTime::parse_from_rfc3339("2026-12-04T18:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let spec = ProbeSpec::remembered(Operation::Search, &params, asked).unwrap();
        assert_eq!(spec.params["date"], "today+7");
        assert_eq!(spec.params["from"], "HEL");
        // Probed two days later, it still asks a week ahead.
        let later = asked + TimeDelta::days(2);
        let budget = crate::budget::Budgets::default().search;
        let call = spec.call(&OperatorId::new("nordic").unwrap(), later, budget);
        assert_eq!(call.params["date"], "2026-12-13");
        assert_eq!(call.operation, Operation::Search);
        // Never a price (it may hold seats) or a ping; never a past date.
        assert_eq!(
            ProbeSpec::remembered(Operation::Price, &params, asked),
            None
        );
        assert_eq!(
            ProbeSpec::remembered(Operation::Search, &params, asked + TimeDelta::days(8)),
            None
        );
    }

    #[test]
    fn an_open_breaker_wakes_at_the_next_probe_or_the_end_of_its_period() {
        let cfg = BreakerConfig::default();
        assert_eq!(next_wake(&open(30), &cfg, true, t(0)), Some(t(10)));
        // Probed: every 10 s, the end of the period included.
        assert_eq!(next_wake(&open(30), &cfg, true, t(25)), Some(t(35)));
        assert_eq!(next_wake(&open(30), &cfg, false, t(0)), Some(t(30)));
        // Overdue: at once.
        assert_eq!(next_wake(&open(30), &cfg, false, t(45)), Some(t(45)));
        let mut half = open(30);
        half.state = BreakerState::HalfOpen;
        half.since = t(31);
        assert_eq!(next_wake(&half, &cfg, true, t(31)), Some(t(91)));
        half.state = BreakerState::Closed;
        assert_eq!(next_wake(&half, &cfg, true, t(31)), None);
    }

    #[test]
    fn probe_dates_are_relative_to_the_probe() {
        let spec: ProbeSpec = serde_json::from_str(
            r#"{"operation": "search", "params": {"from": "HEL", "date": "today+7", "on": "today"}}"#,
        )
        .unwrap();
        let call = spec.call(
            &OperatorId::new("nordic").unwrap(),
            DateTime::parse_from_rfc3339("2026-12-30T23:00:00Z")
                .unwrap()
                .to_utc(),
            crate::budget::Budgets::default().search,
        );
        assert_eq!(call.params["date"], "2027-01-06");
        assert_eq!(call.params["on"], "2026-12-30");
        assert_eq!(call.params["from"], "HEL");
        assert_eq!(call.operation, Operation::Search);
        assert!(serde_json::from_str::<ProbeSpec>(r#"{"operation": "search", "x": 1}"#).is_err());
    }
}
