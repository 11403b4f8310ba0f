//! The errors alarm's side of `lifeboat detection`: its `StateUpdate`
//! history items read from CloudWatch (`DescribeAlarmHistory`, every page)
//! and each item's `HistoryData` parsed into an [`AlarmTransition`], with the
//! start of the first breaching period when CloudWatch recorded the
//! evaluated datapoints.

use aws_sdk_cloudwatch::config::http::HttpResponse;
use aws_sdk_cloudwatch::error::{ProvideErrorMetadata as _, SdkError};
use aws_sdk_cloudwatch::operation::describe_alarm_history::DescribeAlarmHistoryError;
use aws_sdk_cloudwatch::types::{HistoryItemType, ScanBy};
use chrono::{DateTime, TimeDelta, Utc};
use lifeboat_core::cloudwatch::parse_time as cloudwatch_time;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::DetectionError;
use crate::ops::breaker::sdk_message;
use crate::ops::status::timestamp;

/// One alarm history item that could not be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("alarm history item {item}: {why}")]
pub struct HistoryDataError {
    /// The item, for the reader: its time and summary.
    pub item: String,
    pub why: String,
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

/// Why `DescribeAlarmHistory` failed, on one line. CloudWatch's API is
/// Smithy RPC v2 CBOR: an endpoint that answers another way is named as
/// such, with what it answered, rather than with the decoder's error
/// (`DeserializeError { … TypeMismatch … }`). moto_server 5.2.1 alone is
/// one: it answers the CBOR call 404 with an HTML page (`lifeboat local`'s
/// endpoint answers the call itself).
fn history_error(err: &SdkError<DescribeAlarmHistoryError, HttpResponse>) -> String {
    match undecoded_answer(err) {
        Some(answer) => format!(
            "the endpoint did not answer as CloudWatch does ({answer}): its answer is not \
             CloudWatch's protocol (Smithy RPC v2 CBOR); check AWS_ENDPOINT_URL and \
             AWS_ENDPOINT_URL_CLOUDWATCH"
        ),
        None => sdk_message(err),
    }
}

/// What an answer the SDK could not read was (`HTTP 404, content-type
/// text/html`), or `None` for any other failure: an answer that failed to
/// decode (`ResponseError`), or an error the SDK could read no error code
/// from (not a modeled error, and no code: the decoder failed on its body).
fn undecoded_answer(err: &SdkError<DescribeAlarmHistoryError, HttpResponse>) -> Option<String> {
    let raw = match err {
        SdkError::ResponseError(response) => response.raw(),
        SdkError::ServiceError(service)
            if !service.err().is_invalid_next_token() && service.err().code().is_none() =>
        {
            service.raw()
        }
        _ => return None,
    };
    let content_type = raw
        .headers()
        .get("content-type")
        .unwrap_or("no content-type");
    Some(format!(
        "HTTP {}, content-type {content_type}",
        raw.status().as_u16()
    ))
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
                message: history_error(&e),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::detection::tests::{ms, t};

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
}
