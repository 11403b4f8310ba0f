//! `lifeboat detection`: for each incident, how long it took from the first
//! failed operator call to the errors alarm going to ALARM and to the breaker
//! opening.
//!
//! Two records are read and paired:
//!
//! * the alarm's history ([`alarm_history`]: `DescribeAlarmHistory`,
//!   `StateUpdate` items, every page). Each item's `HistoryData` is JSON with
//!   `oldState` and `newState` (`stateValue`, `stateReason`,
//!   `stateReasonData`); for an evaluated transition `stateReasonData` holds
//!   `startDate`, `queryDate`, `period`, `threshold`, `recentDatapoints` and
//!   `evaluatedDatapoints` (`{timestamp, sampleCount, value}`, a missing
//!   datapoint without `value`). The oldest evaluated datapoint at or above
//!   the threshold (the errors alarm compares `GreaterThanOrEqualToThreshold`)
//!   is the start of the first period with failed calls: the alarm's own
//!   view of the first failure, to within one period (10 s).
//! * the breaker's state-change history
//!   ([`BreakerChange`](lifeboat_aws::breaker::BreakerChange), written by the
//!   breaker store with every transition): when it opened, why, and for a
//!   trip from closed when the failure window's failing run began (1 s
//!   buckets).
//!
//! [`detect`] is the pure part: an incident is a breaker opening from closed
//! (or forced open from any state but half-open) or an alarm transition to
//! ALARM; each opening is paired with the nearest ALARM transition of the
//! alarm's operator within the pairing window, nearest pairs first. The
//! first failure is the failure window's when the breaker recorded one (finer
//! grained), else the alarm's first breaching period. Reopenings after a
//! failed half-open round belong to the incident that opened the breaker and
//! are not incidents of their own.
//!
//! The parts: `history` reads the alarm's history, `pairing` pairs it
//! with the breaker's changes into incidents, `render` shows the report
//! as a table or JSON. This module holds the command's flags and errors.

mod history;
mod pairing;
mod render;

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use lifeboat_core::OperatorId;
use lifeboat_core::ports::StoreError;

pub use history::{
    AlarmHistory, AlarmTransition, HistoryDataError, alarm_history, parse_history_data,
};
pub use pairing::{
    AlarmSide, BreakerSide, DetectionQuery, DetectionReport, FirstFailureSource, Incident,
    OpenedBy, detect,
};
pub use render::render_table;

/// `--since` when not given: the last day.
pub const DEFAULT_SINCE: &str = "24h";
/// `--window` when not given: an alarm and a breaker opening at most 10
/// minutes apart are one incident.
pub const DEFAULT_WINDOW: &str = "10m";

#[derive(Debug, thiserror::Error)]
pub enum DetectionError {
    #[error("DescribeAlarmHistory {alarm}: {message}")]
    AlarmHistory { alarm: String, message: String },
    #[error("breaker table: {0}")]
    Breakers(#[from] StoreError),
    #[error(
        "which operator does alarm {alarm} watch? {why}: set ALARM_OPERATORS \
         (alarm=operator,…, as the circuit switch has it), pass --alarm-operators, \
         or pass --operator"
    )]
    AlarmOperator { alarm: String, why: String },
}

/// `--since`: a moment, or a span back from now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    At(DateTime<Utc>),
    Ago(Duration),
}

impl Since {
    pub fn resolve(self, now: DateTime<Utc>) -> DateTime<Utc> {
        match self {
            Since::At(at) => at,
            Since::Ago(ago) => now - TimeDelta::from_std(ago).unwrap_or(TimeDelta::MAX),
        }
    }
}

/// `2h`, `30m`, `45s`, `1d`, `1h30m`: [`lifeboat_command::span::parse_duration`].
pub fn parse_span(text: &str) -> Result<Duration, String> {
    lifeboat_command::span::parse_duration(text)
}

/// `--since`: RFC 3339 (`2026-12-01T10:00:00Z`) or a span back from now.
pub fn parse_since(text: &str) -> Result<Since, String> {
    if let Ok(at) = DateTime::parse_from_rfc3339(text.trim()) {
        return Ok(Since::At(at.with_timezone(&Utc)));
    }
    parse_span(text).map(Since::Ago).map_err(|_| {
        format!(
            "{text:?} is neither an RFC 3339 time (2026-12-01T10:00:00Z) nor a span back \
             from now (2h, 30m, 1d)"
        )
    })
}

/// The operator alarm `alarm` watches: the alarm-to-operator map
/// (`alarm=operator,…`) if it names it, else `operator` (the `--operator`
/// filter).
pub fn alarm_operator(
    alarm: &str,
    map: Option<&str>,
    operator: Option<&OperatorId>,
) -> Result<OperatorId, DetectionError> {
    let err = |why: String| DetectionError::AlarmOperator {
        alarm: alarm.to_owned(),
        why,
    };
    let mut named = None;
    if let Some(map) = map {
        for entry in map.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (name, op) = entry.split_once('=').ok_or_else(|| {
                err(format!(
                    "ALARM_OPERATORS entry {entry:?} is not alarm=operator"
                ))
            })?;
            if name.trim() == alarm && op.trim() == "*" {
                // A contributor alarm speaks for every operator: which one
                // is --operator's to say.
                if operator.is_none() {
                    return Err(err(
                        "it is a contributor alarm (one contributor per operator): pass --operator"
                            .to_owned(),
                    ));
                }
            } else if name.trim() == alarm {
                named = Some(
                    OperatorId::new(op.trim())
                        .map_err(|e| err(format!("ALARM_OPERATORS entry {entry:?}: {e}")))?,
                );
            }
        }
    }
    match (named, operator) {
        (Some(op), _) => Ok(op),
        (None, Some(op)) => Ok(op.clone()),
        (None, None) if map.is_some() => Err(err("ALARM_OPERATORS does not name it".to_owned())),
        (None, None) => Err(err("no alarm-to-operator map".to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    pub(super) fn t(secs: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 1, 10, 0, 0).unwrap() + TimeDelta::seconds(secs)
    }

    pub(super) fn ms(millis: i64) -> DateTime<Utc> {
        t(0) + TimeDelta::milliseconds(millis)
    }

    pub(super) fn op(name: &str) -> OperatorId {
        OperatorId::new(name).unwrap()
    }

    pub(super) const ALARM: &str = "lifeboat-nordic-errors";

    #[test]
    fn spans_and_since() {
        assert_eq!(parse_span("2h").unwrap(), Duration::from_secs(7_200));
        assert_eq!(parse_span("30m").unwrap(), Duration::from_secs(1_800));
        assert_eq!(parse_span("1h30m").unwrap(), Duration::from_secs(5_400));
        assert_eq!(parse_span("1d").unwrap(), Duration::from_secs(86_400));
        assert_eq!(parse_span("45s").unwrap(), Duration::from_secs(45));
        for bad in ["", "h", "2x", "-2h", "2h30", "99999999999999999999d"] {
            assert!(parse_span(bad).is_err(), "{bad:?}");
        }
        let now = t(0);
        assert_eq!(parse_since("2h").unwrap().resolve(now), t(-7_200));
        assert_eq!(
            parse_since("2026-12-01T09:00:00Z").unwrap().resolve(now),
            t(-3_600)
        );
        assert_eq!(
            parse_since("2026-12-01T11:00:00+02:00")
                .unwrap()
                .resolve(now),
            t(-3_600)
        );
        let err = parse_since("yesterday").unwrap_err();
        assert!(err.contains("RFC 3339") && err.contains("2h"), "{err}");
    }

    #[test]
    fn the_alarm_operator_comes_from_the_map_or_the_operator_flag() {
        let nordic = op("nordic");
        assert_eq!(
            alarm_operator(ALARM, Some("a=baltic, lifeboat-nordic-errors=nordic"), None).unwrap(),
            nordic
        );
        // The map wins over --operator (which then only filters).
        assert_eq!(
            alarm_operator(
                ALARM,
                Some("lifeboat-nordic-errors=nordic"),
                Some(&op("baltic"))
            )
            .unwrap(),
            nordic
        );
        assert_eq!(alarm_operator(ALARM, None, Some(&nordic)).unwrap(), nordic);
        let err = alarm_operator(ALARM, Some("other=baltic"), None).unwrap_err();
        assert!(err.to_string().contains("does not name it"), "{err}");
        let err = alarm_operator(ALARM, None, None).unwrap_err().to_string();
        assert!(
            err.contains("ALARM_OPERATORS") && err.contains("--operator"),
            "{err}"
        );
        assert!(alarm_operator(ALARM, Some("broken"), None).is_err());
        assert!(alarm_operator(ALARM, Some("lifeboat-nordic-errors=No Way"), None).is_err());
        // A contributor alarm: --operator says which.
        let err = alarm_operator(ALARM, Some("lifeboat-nordic-errors=*"), None).unwrap_err();
        assert!(err.to_string().contains("pass --operator"), "{err}");
        assert_eq!(
            alarm_operator(ALARM, Some("lifeboat-nordic-errors=*"), Some(&nordic)).unwrap(),
            nordic
        );
    }
}
