//! Pairing for `lifeboat detection`: the breaker's openings and the alarm's
//! transitions into ALARM, nearest pairs first within the window, made into
//! [`Incident`]s with the time from the first failure to each; the report's
//! types.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use lifeboat_aws::breaker::BreakerChange;
use lifeboat_core::{BreakerState, OperatorId};
use serde::Serialize;

use super::AlarmTransition;

/// What opened the breaker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "by", rename_all = "snake_case")]
pub enum OpenedBy {
    /// The errors alarm (or another alarm the switch maps to the operator).
    Alarm { alarm: String },
    /// The real consumer's failure window, with its rule.
    FailureWindow { rule: String },
    /// An operator command (`force-open`).
    Command { reason: String },
}

impl OpenedBy {
    /// From the breaker's recorded reason, as the breaker's `decide` words it:
    /// `alarm <name> in ALARM`, the window's verdict, or `force-open: …`.
    pub fn of(change: &BreakerChange) -> Self {
        if change.to == BreakerState::ForcedOpen {
            return OpenedBy::Command {
                reason: change.reason.clone(),
            };
        }
        match change
            .reason
            .strip_prefix("alarm ")
            .and_then(|r| r.strip_suffix(" in ALARM"))
        {
            Some(alarm) => OpenedBy::Alarm {
                alarm: alarm.to_owned(),
            },
            None => OpenedBy::FailureWindow {
                rule: change.reason.clone(),
            },
        }
    }
}

/// Where an incident's first failure comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FirstFailureSource {
    /// The failure window's first failing bucket (1 s), recorded with the trip.
    FailureWindow,
    /// The start of the alarm's first breaching period (10 s).
    AlarmDatapoint,
}

/// The alarm's side of an incident.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AlarmSide {
    /// When it went to ALARM.
    pub at: DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_breach: Option<DateTime<Utc>>,
    pub reason: String,
}

/// The breaker's side of an incident.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BreakerSide {
    /// When it opened.
    pub at: DateTime<Utc>,
    pub version: u64,
    pub state: BreakerState,
    pub opened_by: OpenedBy,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_first_failure: Option<DateTime<Utc>>,
}

/// One incident: an opening, an ALARM, or both.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Incident {
    pub operator: OperatorId,
    /// The earlier of the ALARM and the opening.
    pub started: DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_failure: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_failure_source: Option<FirstFailureSource>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alarm: Option<AlarmSide>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breaker: Option<BreakerSide>,
    /// Seconds from the first failure to ALARM.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_to_alarm_s: Option<f64>,
    /// Seconds from the first failure to the opening.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_to_open_s: Option<f64>,
    /// Seconds from ALARM to the opening (negative: the breaker was first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alarm_to_open_s: Option<f64>,
    /// "no alarm", "no breaker record", "first failure unknown".
    pub notes: Vec<String>,
}

/// What `lifeboat detection` shows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DetectionReport {
    pub at: DateTime<Utc>,
    pub alarm: String,
    /// The operator the alarm watches.
    pub alarm_operator: OperatorId,
    /// `--operator`, if given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operator: Option<OperatorId>,
    pub since: DateTime<Utc>,
    /// How far apart an ALARM and an opening may be to pair.
    pub window_s: u64,
    /// Oldest first.
    pub incidents: Vec<Incident>,
    /// Records skipped, each saying which and why.
    pub warnings: Vec<String>,
}

/// What [`detect`] works on besides the two histories.
#[derive(Debug, Clone)]
pub struct DetectionQuery {
    pub alarm: String,
    pub alarm_operator: OperatorId,
    /// Only this operator's incidents.
    pub only: Option<OperatorId>,
    /// Incidents that started before this are left out.
    pub since: DateTime<Utc>,
    pub window: Duration,
    pub now: DateTime<Utc>,
}

/// Whether `change` starts an incident: open or forced open, from a state
/// that was not open and not half-open (a failed half-open round reopens
/// within the same incident).
fn opens(change: &BreakerChange) -> bool {
    let from = change.from.unwrap_or(BreakerState::Closed);
    change.to.is_open() && !from.is_open() && from != BreakerState::HalfOpen
}

fn seconds(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    // Milliseconds fit an f64 exactly for any real span.
    #[allow(clippy::cast_precision_loss)]
    let ms = (to - from).num_milliseconds() as f64;
    ms / 1000.0
}

/// Pair the alarm's ALARM transitions with the breaker's openings into
/// incidents (see the module docs) that started at or after `query.since`.
pub fn detect(
    query: &DetectionQuery,
    transitions: &[AlarmTransition],
    changes: &[BreakerChange],
    warnings: Vec<String>,
) -> DetectionReport {
    let window = TimeDelta::from_std(query.window).unwrap_or(TimeDelta::MAX);
    let alarm_counts = query
        .only
        .as_ref()
        .is_none_or(|only| *only == query.alarm_operator);
    let alarms: Vec<&AlarmTransition> = if alarm_counts {
        transitions.iter().filter(|t| t.is_alarm()).collect()
    } else {
        Vec::new()
    };
    let openings: Vec<&BreakerChange> = changes
        .iter()
        .filter(|c| opens(c))
        .filter(|c| query.only.as_ref().is_none_or(|only| c.operator == *only))
        .collect();

    // Nearest pairs first, each side used once.
    let mut candidates: Vec<(TimeDelta, usize, usize)> = Vec::new();
    for (oi, opening) in openings.iter().enumerate() {
        if opening.operator != query.alarm_operator {
            continue;
        }
        for (ai, alarm) in alarms.iter().enumerate() {
            let apart = (opening.at - alarm.at).abs();
            if apart <= window {
                candidates.push((apart, oi, ai));
            }
        }
    }
    candidates.sort();
    let mut alarm_of: Vec<Option<usize>> = vec![None; openings.len()];
    let mut alarm_used = vec![false; alarms.len()];
    for (_, oi, ai) in candidates {
        if alarm_of[oi].is_none() && !alarm_used[ai] {
            alarm_of[oi] = Some(ai);
            alarm_used[ai] = true;
        }
    }

    let mut incidents = Vec::new();
    for (oi, opening) in openings.iter().enumerate() {
        let alarm = alarm_of[oi].map(|ai| alarms[ai]);
        incidents.push(incident(opening.operator.clone(), alarm, Some(opening)));
    }
    for (ai, alarm) in alarms.iter().enumerate() {
        if !alarm_used[ai] {
            incidents.push(incident(query.alarm_operator.clone(), Some(alarm), None));
        }
    }
    incidents.retain(|i| i.started >= query.since);
    incidents.sort_by(|a, b| (a.started, &a.operator).cmp(&(b.started, &b.operator)));

    DetectionReport {
        at: query.now,
        alarm: query.alarm.clone(),
        alarm_operator: query.alarm_operator.clone(),
        operator: query.only.clone(),
        since: query.since,
        window_s: query.window.as_secs(),
        incidents,
        warnings,
    }
}

fn incident(
    operator: OperatorId,
    alarm: Option<&AlarmTransition>,
    opening: Option<&BreakerChange>,
) -> Incident {
    let window_first = opening.and_then(|o| o.first_failure_at);
    let alarm_first = alarm.and_then(|a| a.first_breach);
    let (first_failure, source) = match (window_first, alarm_first) {
        (Some(at), _) => (Some(at), Some(FirstFailureSource::FailureWindow)),
        (None, Some(at)) => (Some(at), Some(FirstFailureSource::AlarmDatapoint)),
        (None, None) => (None, None),
    };
    let alarm_at = alarm.map(|a| a.at);
    let open_at = opening.map(|o| o.at);
    let started = match (alarm_at, open_at) {
        (Some(a), Some(o)) => a.min(o),
        (Some(a), None) => a,
        (None, Some(o)) => o,
        // Every incident has one side or the other.
        (None, None) => DateTime::<Utc>::MIN_UTC,
    };
    let mut notes = Vec::new();
    if alarm.is_none() {
        notes.push("no alarm".to_owned());
    }
    if opening.is_none() {
        notes.push("no breaker record".to_owned());
    }
    if first_failure.is_none() {
        notes.push("first failure unknown".to_owned());
    }
    Incident {
        operator,
        started,
        first_failure,
        first_failure_source: source,
        alarm: alarm.map(|a| AlarmSide {
            at: a.at,
            first_breach: a.first_breach,
            reason: a.reason.clone(),
        }),
        breaker: opening.map(|o| BreakerSide {
            at: o.at,
            version: o.version,
            state: o.to,
            opened_by: OpenedBy::of(o),
            window_first_failure: o.first_failure_at,
        }),
        failure_to_alarm_s: first_failure.zip(alarm_at).map(|(f, a)| seconds(f, a)),
        failure_to_open_s: first_failure.zip(open_at).map(|(f, o)| seconds(f, o)),
        alarm_to_open_s: alarm_at.zip(open_at).map(|(a, o)| seconds(a, o)),
        notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::detection::render_table;
    use crate::ops::detection::tests::{ALARM, ms, op, t};
    use serde_json::Value;

    fn query(since: DateTime<Utc>) -> DetectionQuery {
        DetectionQuery {
            alarm: ALARM.to_owned(),
            alarm_operator: op("nordic"),
            only: None,
            since,
            window: Duration::from_secs(600),
            now: t(7_200),
        }
    }

    fn alarm_at(at: DateTime<Utc>, first_breach: DateTime<Utc>) -> AlarmTransition {
        AlarmTransition {
            at,
            from: "OK".into(),
            to: "ALARM".into(),
            first_breach: Some(first_breach),
            period_s: Some(10),
            threshold: Some(5.0),
            reason: "Threshold Crossed".into(),
        }
    }

    fn ok_at(at: DateTime<Utc>) -> AlarmTransition {
        AlarmTransition {
            at,
            from: "ALARM".into(),
            to: "OK".into(),
            first_breach: None,
            period_s: Some(10),
            threshold: Some(5.0),
            reason: "Threshold Crossed".into(),
        }
    }

    fn change(
        operator: &str,
        version: u64,
        from: BreakerState,
        to: BreakerState,
        at: DateTime<Utc>,
        reason: &str,
        first_failure_at: Option<DateTime<Utc>>,
    ) -> BreakerChange {
        BreakerChange {
            operator: op(operator),
            version,
            from: Some(from),
            to,
            at,
            reason: reason.into(),
            open_until: None,
            first_failure_at,
        }
    }

    use BreakerState::{Closed, ForcedOpen, HalfOpen, Open};

    #[test]
    fn an_alarm_then_the_opening_it_caused() {
        let alarms = [alarm_at(ms(32_000), t(0)), ok_at(t(300))];
        let changes = [
            change(
                "nordic",
                1,
                Closed,
                Open,
                ms(32_400),
                "alarm lifeboat-nordic-errors in ALARM",
                Some(t(2)),
            ),
            change("nordic", 2, Open, HalfOpen, t(62), "open period over", None),
            change(
                "nordic",
                3,
                HalfOpen,
                Open,
                t(64),
                "half-open trial failed: x",
                None,
            ),
        ];
        let report = detect(&query(t(-3_600)), &alarms, &changes, Vec::new());
        assert_eq!(
            report.incidents.len(),
            1,
            "the reopening is the same incident"
        );
        let i = &report.incidents[0];
        assert_eq!(i.started, ms(32_000));
        assert_eq!(i.first_failure, Some(t(2)));
        assert_eq!(
            i.first_failure_source,
            Some(FirstFailureSource::FailureWindow)
        );
        assert_eq!(i.failure_to_alarm_s, Some(30.0));
        assert_eq!(i.failure_to_open_s, Some(30.4));
        assert_eq!(i.alarm_to_open_s, Some(0.4));
        assert_eq!(
            i.breaker.as_ref().unwrap().opened_by,
            OpenedBy::Alarm {
                alarm: ALARM.into()
            }
        );
        assert_eq!(i.alarm.as_ref().unwrap().first_breach, Some(t(0)));
        assert!(i.notes.is_empty(), "{:?}", i.notes);

        // Without the window's first failure, the alarm's breaching period is used.
        let mut changes = changes;
        changes[0].first_failure_at = None;
        let report = detect(&query(t(-3_600)), &alarms, &changes, Vec::new());
        let i = &report.incidents[0];
        assert_eq!(i.first_failure, Some(t(0)));
        assert_eq!(
            i.first_failure_source,
            Some(FirstFailureSource::AlarmDatapoint)
        );
        assert_eq!(i.failure_to_open_s, Some(32.4));
    }

    #[test]
    fn an_opening_by_the_failure_window_without_an_alarm() {
        let changes = [change(
            "nordic",
            1,
            Closed,
            Open,
            ms(5_900),
            "5 consecutive timeouts",
            Some(t(1)),
        )];
        let report = detect(&query(t(-3_600)), &[ok_at(t(-7_000))], &changes, Vec::new());
        assert_eq!(report.incidents.len(), 1);
        let i = &report.incidents[0];
        assert_eq!(i.failure_to_open_s, Some(4.9));
        assert_eq!(i.failure_to_alarm_s, None);
        assert_eq!(i.alarm_to_open_s, None);
        assert_eq!(i.notes, vec!["no alarm"]);
        assert_eq!(
            i.breaker.as_ref().unwrap().opened_by,
            OpenedBy::FailureWindow {
                rule: "5 consecutive timeouts".into()
            }
        );
        let table = render_table(&report);
        assert!(table.contains("no alarm"), "{table}");
        assert!(table.contains("4.9 s"), "{table}");
        assert!(
            table.contains("failure window: 5 consecutive timeouts"),
            "{table}"
        );
        assert!(table.contains("2026-12-01T10:00:01Z (window)"), "{table}");
    }

    #[test]
    fn an_alarm_without_an_opening() {
        // The alarm fires, but the breaker was already open (or never
        // opened): no breaker record pairs with it.
        let report = detect(
            &query(t(-3_600)),
            &[alarm_at(t(40), t(10))],
            &[],
            Vec::new(),
        );
        let i = &report.incidents[0];
        assert_eq!(i.operator, op("nordic"));
        assert_eq!(i.first_failure, Some(t(10)));
        assert_eq!(i.failure_to_alarm_s, Some(30.0));
        assert_eq!(i.failure_to_open_s, None);
        assert_eq!(i.notes, vec!["no breaker record"]);
        let table = render_table(&report);
        assert!(table.contains("no breaker record"), "{table}");
        let json: Value = serde_json::from_str(&report.to_json().unwrap()).unwrap();
        assert_eq!(json["incidents"][0]["notes"][0], "no breaker record");
        assert_eq!(json["incidents"][0]["failure_to_alarm_s"], 30.0);
        assert!(json["incidents"][0].get("breaker").is_none());
    }

    #[test]
    fn two_incidents_pair_with_their_nearest_alarm() {
        // Incident 1: the window opens at +5 s, the alarm follows at +35 s.
        // Incident 2, an hour later: the alarm first, then the alarm's opening.
        let alarms = [
            alarm_at(t(35), t(0)),
            ok_at(t(120)),
            alarm_at(t(3_630), t(3_600)),
        ];
        let changes = [
            change(
                "nordic",
                1,
                Closed,
                Open,
                t(5),
                "failure rate 90% over 20 calls",
                Some(t(1)),
            ),
            change("nordic", 2, Open, HalfOpen, t(35), "open period over", None),
            change(
                "nordic",
                3,
                HalfOpen,
                Closed,
                t(40),
                "2 half-open trials succeeded",
                None,
            ),
            change(
                "nordic",
                4,
                Closed,
                Open,
                ms(3_630_300),
                "alarm lifeboat-nordic-errors in ALARM",
                None,
            ),
            // Another operator's opening never pairs with this alarm.
            change(
                "baltic",
                1,
                Closed,
                Open,
                t(3_631),
                "5 consecutive timeouts",
                Some(t(3_626)),
            ),
        ];
        let report = detect(&query(t(-3_600)), &alarms, &changes, Vec::new());
        // operator, failure->alarm, failure->open, alarm->open
        type Timings = (String, Option<f64>, Option<f64>, Option<f64>);
        let got: Vec<Timings> = report
            .incidents
            .iter()
            .map(|i| {
                (
                    i.operator.to_string(),
                    i.failure_to_alarm_s,
                    i.failure_to_open_s,
                    i.alarm_to_open_s,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("nordic".into(), Some(34.0), Some(4.0), Some(-30.0)),
                ("nordic".into(), Some(30.0), Some(30.3), Some(0.3)),
                ("baltic".into(), None, Some(5.0), None),
            ]
        );
        assert_eq!(report.incidents[2].notes, vec!["no alarm"]);
        let table = render_table(&report);
        assert!(table.contains("-30.0 s"), "{table}");

        // --operator baltic: nordic's alarm is not about it.
        let mut only = query(t(-3_600));
        only.only = Some(op("baltic"));
        let report = detect(&only, &alarms, &changes, Vec::new());
        assert_eq!(report.incidents.len(), 1);
        assert_eq!(report.incidents[0].operator, op("baltic"));
    }

    #[test]
    fn pairs_are_never_further_apart_than_the_window() {
        let alarms = [alarm_at(t(700), t(680))];
        let changes = [change(
            "nordic",
            1,
            Closed,
            Open,
            t(5),
            "5 consecutive timeouts",
            None,
        )];
        let report = detect(&query(t(-3_600)), &alarms, &changes, Vec::new());
        assert_eq!(report.incidents.len(), 2);
        assert_eq!(
            report.incidents[0].notes,
            vec!["no alarm", "first failure unknown"]
        );
        assert_eq!(report.incidents[1].notes, vec!["no breaker record"]);
        let table = render_table(&report);
        assert!(table.contains("unknown"), "{table}");
    }

    #[test]
    fn only_incidents_since_the_start_are_reported() {
        let alarms = [alarm_at(t(-7_000), t(-7_030)), alarm_at(t(30), t(0))];
        let changes = [
            change(
                "nordic",
                1,
                Closed,
                Open,
                t(-7_025),
                "5 consecutive timeouts",
                Some(t(-7_029)),
            ),
            change(
                "nordic",
                2,
                Open,
                HalfOpen,
                t(-6_995),
                "open period over",
                None,
            ),
            change(
                "nordic",
                3,
                HalfOpen,
                Closed,
                t(-6_990),
                "2 half-open trials succeeded",
                None,
            ),
            // Started just before --since (the opening), alarm just after: kept
            // out, as it started before.
            change(
                "nordic",
                4,
                Closed,
                Open,
                t(-2),
                "5 consecutive timeouts",
                Some(t(-6)),
            ),
        ];
        let report = detect(&query(t(0)), &alarms, &changes, Vec::new());
        assert!(report.incidents.is_empty(), "{:?}", report.incidents);
        assert!(render_table(&report).contains("no incidents"));

        let report = detect(&query(t(-3_600)), &alarms, &changes, Vec::new());
        assert_eq!(report.incidents.len(), 1);
        assert_eq!(report.incidents[0].started, t(-2));
        assert_eq!(report.incidents[0].alarm_to_open_s, Some(-32.0));

        let report = detect(&query(t(-86_400)), &alarms, &changes, Vec::new());
        assert_eq!(report.incidents.len(), 2);
    }

    #[test]
    fn a_forced_open_is_an_incident_opened_by_a_command() {
        let changes = [
            change(
                "nordic",
                1,
                Closed,
                ForcedOpen,
                t(0),
                "force-open: maintenance",
                None,
            ),
            // Releasing goes half-open; a failed trial reopens: same incident.
            change(
                "nordic",
                2,
                ForcedOpen,
                HalfOpen,
                t(600),
                "release: done",
                None,
            ),
            change(
                "nordic",
                3,
                HalfOpen,
                Open,
                t(601),
                "half-open trial failed: x",
                None,
            ),
        ];
        let report = detect(&query(t(-3_600)), &[], &changes, Vec::new());
        assert_eq!(report.incidents.len(), 1);
        assert_eq!(
            report.incidents[0].breaker.as_ref().unwrap().opened_by,
            OpenedBy::Command {
                reason: "force-open: maintenance".into()
            }
        );
    }
}
