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
//! * the breaker's state-change history ([`BreakerChange`], written by the
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

use std::fmt::Write as _;
use std::time::Duration;

use aws_sdk_cloudwatch::types::{HistoryItemType, ScanBy};
use chrono::{DateTime, TimeDelta, Utc};
use lifeboat_aws::breaker::BreakerChange;
use lifeboat_core::cloudwatch::parse_time as cloudwatch_time;
use lifeboat_core::ports::StoreError;
use lifeboat_core::{BreakerState, OperatorId};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ops::breaker::sdk_message;
use crate::ops::status::{span, timestamp};

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

/// One alarm history item that could not be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("alarm history item {item}: {why}")]
pub struct HistoryDataError {
    /// The item, for the reader: its time and summary.
    pub item: String,
    pub why: String,
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

/// `2h`, `30m`, `45s`, `1d`, `1h30m`: [`crate::span::parse_duration`].
pub fn parse_span(text: &str) -> Result<Duration, String> {
    crate::span::parse_duration(text)
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
            if name.trim() == alarm {
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

/// One state change of the alarm, from a `StateUpdate` history item.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AlarmTransition {
    /// When CloudWatch changed the state (the item's `Timestamp`).
    pub at: DateTime<Utc>,
    pub from: String,
    pub to: String,
    /// The start of the oldest evaluated period at or above the threshold.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_breach: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub period_s: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
    pub reason: String,
}

impl AlarmTransition {
    /// A transition into ALARM.
    pub fn is_alarm(&self) -> bool {
        self.to == "ALARM" && self.from != "ALARM"
    }
}

#[derive(Deserialize)]
struct HistoryData {
    #[serde(rename = "oldState")]
    old_state: StateData,
    #[serde(rename = "newState")]
    new_state: StateData,
}

#[derive(Deserialize)]
struct StateData {
    #[serde(rename = "stateValue")]
    state_value: String,
    #[serde(rename = "stateReason", default)]
    state_reason: Option<String>,
    /// An object in alarm history; a JSON string elsewhere (DescribeAlarms,
    /// alarm events). Both are read.
    #[serde(rename = "stateReasonData", default)]
    state_reason_data: Option<Value>,
}

#[derive(Deserialize)]
struct ReasonData {
    #[serde(rename = "startDate", default)]
    start_date: Option<String>,
    #[serde(default)]
    period: Option<u64>,
    #[serde(default)]
    threshold: Option<f64>,
    #[serde(rename = "recentDatapoints", default)]
    recent_datapoints: Vec<Option<f64>>,
    #[serde(rename = "evaluatedDatapoints", default)]
    evaluated_datapoints: Vec<EvaluatedDatapoint>,
}

#[derive(Deserialize)]
struct EvaluatedDatapoint {
    timestamp: String,
    /// Absent for a period without data.
    #[serde(default)]
    value: Option<f64>,
}

fn breaching(value: f64, threshold: Option<f64>) -> bool {
    threshold.is_none_or(|t| value >= t)
}

/// The start of the first breaching period: from `evaluatedDatapoints`, else
/// from `recentDatapoints` (oldest first, one `period` apart from
/// `startDate`).
fn first_breach(data: &ReasonData) -> Result<Option<DateTime<Utc>>, String> {
    if !data.evaluated_datapoints.is_empty() {
        let mut first: Option<DateTime<Utc>> = None;
        for point in &data.evaluated_datapoints {
            let at = cloudwatch_time(&point.timestamp).ok_or_else(|| {
                format!(
                    "evaluated datapoint timestamp {:?} is not a time",
                    point.timestamp
                )
            })?;
            if point.value.is_some_and(|v| breaching(v, data.threshold)) {
                first = Some(first.map_or(at, |f| f.min(at)));
            }
        }
        return Ok(first);
    }
    let (Some(start), Some(period)) = (&data.start_date, data.period) else {
        return Ok(None);
    };
    let start =
        cloudwatch_time(start).ok_or_else(|| format!("startDate {start:?} is not a time"))?;
    let period = TimeDelta::seconds(i64::try_from(period).unwrap_or(i64::MAX / 2_000));
    Ok(data
        .recent_datapoints
        .iter()
        .position(|v| v.is_some_and(|v| breaching(v, data.threshold)))
        .and_then(|i| i32::try_from(i).ok())
        .map(|i| start + period * i))
}

/// Read one `StateUpdate` item's `HistoryData`. `item` names the item in
/// errors (its time and summary).
pub fn parse_history_data(
    at: DateTime<Utc>,
    item: &str,
    data: &str,
) -> Result<AlarmTransition, HistoryDataError> {
    let fail = |why: String| HistoryDataError {
        item: item.to_owned(),
        why,
    };
    let history: HistoryData = serde_json::from_str(data)
        .map_err(|e| fail(format!("HistoryData is not a state update: {e}")))?;
    let reason_data = match history.new_state.state_reason_data {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(serde_json::from_str::<ReasonData>(&text)),
        Some(value) => Some(serde_json::from_value::<ReasonData>(value)),
    }
    .transpose()
    .map_err(|e| fail(format!("newState.stateReasonData is not readable: {e}")))?;
    let (first_breach, period_s, threshold) = match &reason_data {
        Some(data) => (
            first_breach(data).map_err(|why| fail(format!("newState.stateReasonData: {why}")))?,
            data.period,
            data.threshold,
        ),
        None => (None, None, None),
    };
    Ok(AlarmTransition {
        at,
        from: history.old_state.state_value,
        to: history.new_state.state_value,
        first_breach,
        period_s,
        threshold,
        reason: history.new_state.state_reason.unwrap_or_default(),
    })
}

/// What [`alarm_history`] read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AlarmHistory {
    /// Every readable state change, oldest first.
    pub transitions: Vec<AlarmTransition>,
    /// Items skipped, each naming the item and why.
    pub warnings: Vec<String>,
    /// `DescribeAlarmHistory` calls made.
    pub pages: usize,
}

fn smithy_time(t: DateTime<Utc>) -> aws_sdk_cloudwatch::primitives::DateTime {
    aws_sdk_cloudwatch::primitives::DateTime::from_millis(t.timestamp_millis())
}

fn chrono_time(t: &aws_sdk_cloudwatch::primitives::DateTime) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(t.secs(), t.subsec_nanos())
}

/// The `StateUpdate` items of `alarm` from `from` to `to`, every page
/// (`NextToken`). An item that cannot be read is skipped with a warning; a
/// failed call is an error.
pub async fn alarm_history(
    client: &aws_sdk_cloudwatch::Client,
    alarm: &str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<AlarmHistory, DetectionError> {
    let mut history = AlarmHistory::default();
    let mut token: Option<String> = None;
    loop {
        let output = client
            .describe_alarm_history()
            .alarm_name(alarm)
            .history_item_type(HistoryItemType::StateUpdate)
            .start_date(smithy_time(from))
            .end_date(smithy_time(to))
            .scan_by(ScanBy::TimestampAscending)
            .max_records(100)
            .set_next_token(token.take())
            .send()
            .await
            .map_err(|e| DetectionError::AlarmHistory {
                alarm: alarm.to_owned(),
                message: sdk_message(&e),
            })?;
        history.pages += 1;
        for item in output.alarm_history_items() {
            if item
                .history_item_type()
                .is_some_and(|t| *t != HistoryItemType::StateUpdate)
            {
                continue;
            }
            let at = item.timestamp().and_then(chrono_time);
            let name = format!(
                "at {} ({})",
                at.map_or_else(|| "an unknown time".to_owned(), timestamp),
                item.history_summary().unwrap_or("no summary")
            );
            let parsed = match (at, item.history_data()) {
                (None, _) => Err(HistoryDataError {
                    item: name,
                    why: "no Timestamp".to_owned(),
                }),
                (Some(_), None) => Err(HistoryDataError {
                    item: name,
                    why: "no HistoryData".to_owned(),
                }),
                (Some(at), Some(data)) => parse_history_data(at, &name, data),
            };
            match parsed {
                Ok(transition) => history.transitions.push(transition),
                Err(e) => {
                    tracing::warn!(alarm, error = %e, "alarm history item skipped");
                    history.warnings.push(format!("skipped {e}"));
                }
            }
        }
        match output.next_token() {
            Some(next) if !next.is_empty() => token = Some(next.to_owned()),
            _ => break,
        }
    }
    history.transitions.sort_by_key(|t| t.at);
    tracing::info!(
        alarm,
        pages = history.pages,
        transitions = history.transitions.len(),
        skipped = history.warnings.len(),
        "alarm history read"
    );
    Ok(history)
}

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

    fn describe(&self) -> String {
        match self {
            OpenedBy::Alarm { alarm } => format!("alarm {alarm}"),
            OpenedBy::FailureWindow { rule } => format!("failure window: {rule}"),
            OpenedBy::Command { reason } => format!("command: {reason}"),
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

impl DetectionReport {
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string_pretty(self)
    }
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

fn secs_cell(s: Option<f64>, missing: &str) -> String {
    s.map_or_else(|| missing.to_owned(), |s| format!("{s:.1} s"))
}

/// The report as a table: one row per incident, then the warnings.
pub fn render_table(report: &DetectionReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "alarm {} watches {}; incidents since {}{} (alarm and opening paired within {})",
        report.alarm,
        report.alarm_operator,
        timestamp(report.since),
        report
            .operator
            .as_ref()
            .map_or_else(String::new, |o| format!(" of {o}")),
        span(Duration::from_secs(report.window_s)),
    );
    if report.incidents.is_empty() {
        let _ = writeln!(out, "no incidents");
    } else {
        let _ = writeln!(out);
        let header = [
            "STARTED",
            "OPERATOR",
            "FIRST FAILURE",
            "FAILURE->ALARM",
            "FAILURE->OPEN",
            "ALARM->OPEN",
            "OPENED BY",
        ];
        let rows: Vec<[String; 7]> = report
            .incidents
            .iter()
            .map(|i| {
                let alarm_missing = if i.alarm.is_none() {
                    "no alarm"
                } else {
                    "unknown"
                };
                let open_missing = if i.breaker.is_none() {
                    "no breaker record"
                } else {
                    "unknown"
                };
                [
                    timestamp(i.started),
                    i.operator.to_string(),
                    match (i.first_failure, i.first_failure_source) {
                        (Some(at), Some(FirstFailureSource::FailureWindow)) => {
                            format!("{} (window)", timestamp(at))
                        }
                        (Some(at), _) => format!("{} (alarm)", timestamp(at)),
                        (None, _) => "unknown".to_owned(),
                    },
                    secs_cell(i.failure_to_alarm_s, alarm_missing),
                    secs_cell(i.failure_to_open_s, open_missing),
                    secs_cell(
                        i.alarm_to_open_s,
                        if i.alarm.is_none() {
                            "no alarm"
                        } else {
                            "no breaker record"
                        },
                    ),
                    i.breaker
                        .as_ref()
                        .map_or_else(|| "-".to_owned(), |b| b.opened_by.describe()),
                ]
            })
            .collect();
        let mut widths = header.map(str::len);
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |out: &mut String, cells: &[&str]| {
            let last = cells.len().saturating_sub(1);
            for (i, cell) in cells.iter().enumerate() {
                if i == last {
                    let _ = writeln!(out, "{cell}");
                } else {
                    let _ = write!(out, "{cell:<w$}  ", w = widths[i]);
                }
            }
        };
        line(&mut out, &header);
        for row in &rows {
            let cells: Vec<&str> = row.iter().map(String::as_str).collect();
            line(&mut out, &cells);
        }
        let _ = writeln!(
            out,
            "\nfirst failure: (window) the failure window's first failing 1 s bucket before the \
             trip; (alarm) the start of the alarm's first breaching period. ALARM->OPEN below \
             zero: the breaker opened first."
        );
    }
    for warning in &report.warnings {
        let _ = writeln!(out, "warning: {warning}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(secs: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 1, 10, 0, 0).unwrap() + TimeDelta::seconds(secs)
    }

    fn ms(millis: i64) -> DateTime<Utc> {
        t(0) + TimeDelta::milliseconds(millis)
    }

    fn op(name: &str) -> OperatorId {
        OperatorId::new(name).unwrap()
    }

    const ALARM: &str = "lifeboat-nordic-errors";

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

    // HistoryData as CloudWatch writes it for the errors alarm (2 of 2
    // periods of 10 s at or above 5 failed calls), and the shapes around it.
    const INTO_ALARM: &str = r#"{"version":"1.0","oldState":{"stateValue":"OK","stateReason":"Threshold Crossed: 2 out of the last 2 datapoints [1.0 (01/12/26 09:59:50), 0.0 (01/12/26 09:59:40)] were not greater than or equal to the threshold (5.0) (minimum 2 datapoints for ALARM -> OK transition).","stateReasonData":{"version":"1.0","queryDate":"2026-12-01T09:59:58.211+0000","startDate":"2026-12-01T09:59:40.000+0000","statistic":"Sum","period":10,"recentDatapoints":[0.0,1.0],"threshold":5.0,"evaluatedDatapoints":[{"timestamp":"2026-12-01T09:59:50.000+0000","sampleCount":3.0,"value":1.0},{"timestamp":"2026-12-01T09:59:40.000+0000","sampleCount":2.0,"value":0.0}]}},"newState":{"stateValue":"ALARM","stateReason":"Threshold Crossed: 2 out of the last 2 datapoints [12.0 (01/12/26 10:00:10), 7.0 (01/12/26 10:00:00)] were greater than or equal to the threshold (5.0) (minimum 2 datapoints for OK -> ALARM transition).","stateReasonData":{"version":"1.0","queryDate":"2026-12-01T10:00:32.118+0000","startDate":"2026-12-01T10:00:00.000+0000","statistic":"Sum","period":10,"recentDatapoints":[7.0,12.0],"threshold":5.0,"evaluatedDatapoints":[{"timestamp":"2026-12-01T10:00:10.000+0000","sampleCount":14.0,"value":12.0},{"timestamp":"2026-12-01T10:00:00.000+0000","sampleCount":9.0,"value":7.0}]}}}"#;

    #[test]
    fn history_data_gives_the_first_breaching_period() {
        let tr = parse_history_data(ms(32_118), "at 10:00:32", INTO_ALARM).unwrap();
        assert!(tr.is_alarm());
        assert_eq!((tr.from.as_str(), tr.to.as_str()), ("OK", "ALARM"));
        assert_eq!(tr.first_breach, Some(t(0)));
        assert_eq!((tr.period_s, tr.threshold), (Some(10), Some(5.0)));
        assert!(
            tr.reason
                .starts_with("Threshold Crossed: 2 out of the last 2")
        );

        // A missing datapoint has no value; one below the threshold does not breach.
        let sparse = INTO_ALARM.replace(
            r#"{"timestamp":"2026-12-01T10:00:00.000+0000","sampleCount":9.0,"value":7.0}"#,
            r#"{"timestamp":"2026-12-01T10:00:00.000+0000"},{"timestamp":"2026-12-01T09:59:50.000+0000","sampleCount":3.0,"value":4.0}"#,
        );
        let tr = parse_history_data(t(32), "x", &sparse).unwrap();
        assert_eq!(tr.first_breach, Some(t(10)));

        // stateReasonData as a JSON string (as DescribeAlarms and events carry
        // it), and without evaluatedDatapoints: recentDatapoints from startDate.
        let as_string = serde_json::json!({
            "version": "1.0",
            "oldState": {"stateValue": "OK"},
            "newState": {"stateValue": "ALARM", "stateReason": "Threshold Crossed",
                "stateReasonData": "{\"version\":\"1.0\",\"startDate\":\"2026-12-01T10:00:00.000+0000\",\"period\":10,\"recentDatapoints\":[3.0,6.0,9.0],\"threshold\":5.0}"}
        })
        .to_string();
        let tr = parse_history_data(t(40), "x", &as_string).unwrap();
        assert_eq!(tr.first_breach, Some(t(10)));

        // Set by hand (set-alarm-state): no reason data, no first breach.
        let by_hand = r#"{"version":"1.0","oldState":{"stateValue":"OK","stateReason":"x"},"newState":{"stateValue":"ALARM","stateReason":"testing the action"}}"#;
        let tr = parse_history_data(t(40), "x", by_hand).unwrap();
        assert_eq!(tr.first_breach, None);
        assert!(tr.is_alarm());
        // ALARM to ALARM (a reason update) is not a transition into ALARM.
        let again = by_hand.replace(r#""stateValue":"OK""#, r#""stateValue":"ALARM""#);
        assert!(!parse_history_data(t(40), "x", &again).unwrap().is_alarm());
    }

    #[test]
    fn malformed_history_data_is_an_error_naming_the_item() {
        let item = "at 2026-12-01T10:00:32Z (Alarm updated from OK to ALARM)";
        for (data, says) in [
            ("not json", "HistoryData is not a state update"),
            (
                r#"{"version":"1.0","newState":{"stateValue":"ALARM"}}"#,
                "oldState",
            ),
            (
                r#"{"oldState":{"stateValue":"OK"},"newState":{"stateValue":"ALARM","stateReasonData":{"evaluatedDatapoints":[{"value":6.0}]}}}"#,
                "stateReasonData is not readable",
            ),
            (
                r#"{"oldState":{"stateValue":"OK"},"newState":{"stateValue":"ALARM","stateReasonData":{"threshold":5.0,"evaluatedDatapoints":[{"timestamp":"yesterday","value":6.0}]}}}"#,
                "\"yesterday\" is not a time",
            ),
            (
                r#"{"oldState":{"stateValue":"OK"},"newState":{"stateValue":"ALARM","stateReasonData":"{not json"}}"#,
                "stateReasonData is not readable",
            ),
        ] {
            let err = parse_history_data(t(32), item, data).unwrap_err();
            let text = err.to_string();
            assert!(
                text.starts_with(&format!("alarm history item {item}: ")),
                "{text}"
            );
            assert!(text.contains(says), "{data}: {text}");
        }
    }

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
    }
}
