//! The alarm's history, answered as CloudWatch answers it.
//!
//! CloudWatch keeps every state change of an alarm as a `StateUpdate`
//! history item, which `lifeboat detection` reads with `DescribeAlarmHistory`
//! to time each incident. moto_server 5.2.1 has no such call, and its
//! CloudWatch does not speak the SDK's protocol (Smithy RPC v2 CBOR). Here the
//! [`LocalAlarm`](super::LocalAlarm) writes each transition it makes into an
//! [`AlarmHistoryBook`] as CloudWatch would record it (the summary, and the
//! `HistoryData` with both states, their reasons and reason data), and the
//! suite's proxy in front of moto answers `DescribeAlarmHistory` from that
//! book ([`describe_alarm_history`]): the alarm name, item type, alarm types
//! and date filters, `ScanBy`, `MaxRecords` and `NextToken` pages, and the
//! errors CloudWatch gives for a bad token or parameter.
//!
//! The book holds the transitions of this run of the suite: CloudWatch keeps
//! 30 days, across whatever made them.

use std::sync::{Arc, Mutex, MutexGuard};

use aws_smithy_cbor::data::Type;
use aws_smithy_cbor::decode::DeserializeError;
use aws_smithy_cbor::{Decoder, Encoder};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::{AlarmRule, AlarmTransition, StateRecord};

/// The path of the SDK's `DescribeAlarmHistory` call (RPC v2 CBOR: the
/// service's Smithy name, then the operation).
pub const DESCRIBE_ALARM_HISTORY_PATH: &str =
    "/service/GraniteServiceVersion20100801/operation/DescribeAlarmHistory";

/// CloudWatch's default and largest `MaxRecords`.
const DEFAULT_RECORDS: usize = 50;
const MAX_RECORDS: usize = 100;

/// One `StateUpdate` history item.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryItem {
    pub alarm: String,
    pub at: DateTime<Utc>,
    /// `Alarm updated from OK to ALARM`.
    pub summary: String,
    /// The JSON CloudWatch writes: `version`, `oldState` and `newState`,
    /// each with `stateValue`, `stateReason` and `stateReasonData` (an
    /// object here, where alarm events carry it as a string).
    pub data: String,
}

fn state_data(record: &StateRecord) -> Value {
    let mut state = json!({
        "stateValue": record.value.as_str(),
        "stateReason": record.reason,
    });
    if record
        .reason_data
        .as_object()
        .is_some_and(|d| !d.is_empty())
    {
        state["stateReasonData"] = record.reason_data.clone();
    }
    state
}

impl HistoryItem {
    /// The item CloudWatch records for `transition` of `rule`'s alarm.
    pub fn state_update(rule: &AlarmRule, transition: &AlarmTransition) -> Self {
        let data = json!({
            "version": "1.0",
            "oldState": state_data(&transition.previous),
            "newState": state_data(&transition.current),
        });
        Self {
            alarm: rule.name.clone(),
            at: transition.current.timestamp,
            summary: format!(
                "Alarm updated from {} to {}",
                transition.previous.value, transition.current.value
            ),
            data: data.to_string(),
        }
    }
}

/// Every history item of the alarms evaluated here, oldest first. Clones
/// share the book.
#[derive(Debug, Clone, Default)]
pub struct AlarmHistoryBook(Arc<Mutex<Vec<HistoryItem>>>);

impl AlarmHistoryBook {
    fn lock(&self) -> MutexGuard<'_, Vec<HistoryItem>> {
        // A push leaves the book whole: a poisoned lock still holds it.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn record(&self, item: HistoryItem) {
        self.lock().push(item);
    }

    pub fn items(&self) -> Vec<HistoryItem> {
        self.lock().clone()
    }
}

/// What `DescribeAlarmHistory` asked for.
#[derive(Debug, Default, PartialEq)]
struct Query {
    alarm: Option<String>,
    alarm_types: Option<Vec<String>>,
    item_type: Option<String>,
    start: Option<DateTime<Utc>>,
    end: Option<DateTime<Utc>>,
    max_records: Option<i32>,
    next_token: Option<String>,
    scan_by: Option<String>,
}

/// Call `entry` for each key of the map at the decoder's position, definite
/// or not, with the decoder on the key's value.
fn each_entry(
    decoder: &mut Decoder<'_>,
    mut entry: impl FnMut(&str, &mut Decoder<'_>) -> Result<(), DeserializeError>,
) -> Result<(), DeserializeError> {
    let mut pair = |decoder: &mut Decoder<'_>| {
        let key = decoder.string()?;
        entry(&key, decoder)
    };
    match decoder.map()? {
        Some(n) => (0..n).try_for_each(|_| pair(decoder)),
        None => loop {
            if decoder.datatype()? == Type::Break {
                return decoder.skip();
            }
            pair(decoder)?;
        },
    }
}

fn strings(decoder: &mut Decoder<'_>) -> Result<Vec<String>, DeserializeError> {
    match decoder.list()? {
        Some(n) => (0..n).map(|_| decoder.string()).collect(),
        None => {
            let mut all = Vec::new();
            while decoder.datatype()? != Type::Break {
                all.push(decoder.string()?);
            }
            decoder.skip()?;
            Ok(all)
        }
    }
}

fn timestamp(decoder: &mut Decoder<'_>) -> Result<DateTime<Utc>, DeserializeError> {
    let at = decoder.timestamp()?;
    let position = decoder.position();
    DateTime::from_timestamp(at.secs(), at.subsec_nanos())
        .ok_or_else(|| DeserializeError::custom("a timestamp out of range", position))
}

fn decode_query(body: &[u8]) -> Result<Query, DeserializeError> {
    let mut query = Query::default();
    if body.is_empty() {
        return Ok(query);
    }
    let decoder = &mut Decoder::new(body);
    // A null member is an absent one, as the SDK's own decoders read it.
    let null = |decoder: &mut Decoder<'_>| -> Result<bool, DeserializeError> {
        if decoder.datatype()? == Type::Null {
            decoder.skip()?;
            return Ok(true);
        }
        Ok(false)
    };
    each_entry(decoder, |key, decoder| {
        if null(decoder)? {
            return Ok(());
        }
        match key {
            "AlarmName" => query.alarm = Some(decoder.string()?),
            "AlarmTypes" => query.alarm_types = Some(strings(decoder)?),
            "HistoryItemType" => query.item_type = Some(decoder.string()?),
            "StartDate" => query.start = Some(timestamp(decoder)?),
            "EndDate" => query.end = Some(timestamp(decoder)?),
            "MaxRecords" => query.max_records = Some(decoder.integer()?),
            "NextToken" => query.next_token = Some(decoder.string()?),
            "ScanBy" => query.scan_by = Some(decoder.string()?),
            // AlarmContributorId: no alarm here has contributors.
            _ => decoder.skip()?,
        }
        Ok(())
    })?;
    if decoder.position() != body.len() {
        return Err(DeserializeError::expected_end_of_stream(decoder.position()));
    }
    Ok(query)
}

/// An answer to the SDK: the HTTP status and the CBOR body.
#[derive(Debug, Clone, PartialEq)]
pub struct CborAnswer {
    pub status: u16,
    pub body: Vec<u8>,
}

impl CborAnswer {
    /// An error as RPC v2 CBOR carries it: `__type` and `message`.
    fn error(code: &str, message: &str) -> Self {
        let mut encoder = Encoder::new(Vec::new());
        encoder
            .map(2)
            .str("__type")
            .str(code)
            .str("message")
            .str(message);
        Self {
            status: 400,
            body: encoder.into_writer(),
        }
    }
}

fn invalid(message: &str) -> CborAnswer {
    CborAnswer::error("InvalidParameterValue", message)
}

fn smithy_time(at: DateTime<Utc>) -> aws_smithy_types::DateTime {
    aws_smithy_types::DateTime::from_millis(at.timestamp_millis())
}

/// Answer a `DescribeAlarmHistory` request body from `book`, as CloudWatch
/// would: the items that match, a page of `MaxRecords` (default 50, at most
/// 100) in `ScanBy` order (newest first unless `TimestampAscending`), and a
/// `NextToken` while more remain.
pub fn describe_alarm_history(book: &AlarmHistoryBook, body: &[u8]) -> CborAnswer {
    let query = match decode_query(body) {
        Ok(query) => query,
        Err(e) => return invalid(&format!("the request is not a DescribeAlarmHistory: {e}")),
    };
    let max_records = match query.max_records {
        None => DEFAULT_RECORDS,
        Some(n) => match usize::try_from(n) {
            Ok(n @ 1..=MAX_RECORDS) => n,
            _ => {
                return invalid(&format!(
                    "MaxRecords {n} is not between 1 and {MAX_RECORDS}"
                ));
            }
        },
    };
    let ascending = match query.scan_by.as_deref() {
        None | Some("TimestampDescending") => false,
        Some("TimestampAscending") => true,
        Some(other) => {
            return invalid(&format!(
                "ScanBy {other:?} is not TimestampDescending or TimestampAscending"
            ));
        }
    };
    // Every item here is a metric alarm's state update.
    let wanted = query
        .item_type
        .as_deref()
        .is_none_or(|t| t == "StateUpdate")
        && query
            .alarm_types
            .as_ref()
            .is_none_or(|types| types.is_empty() || types.iter().any(|t| t == "MetricAlarm"));
    let mut items: Vec<HistoryItem> = if wanted {
        book.items()
            .into_iter()
            .filter(|item| query.alarm.as_ref().is_none_or(|name| *name == item.alarm))
            .filter(|item| query.start.is_none_or(|start| item.at >= start))
            .filter(|item| query.end.is_none_or(|end| item.at <= end))
            .collect()
    } else {
        Vec::new()
    };
    // Stable: items recorded in the same millisecond keep their order.
    items.sort_by_key(|item| item.at);
    if !ascending {
        items.reverse();
    }
    let from = match query.next_token.as_deref() {
        None => 0,
        Some(token) => match token.parse::<usize>() {
            Ok(from) if from <= items.len() => from,
            _ => {
                return CborAnswer::error(
                    "InvalidNextToken",
                    &format!("NextToken {token:?} was not given by this alarm history"),
                );
            }
        },
    };
    let to = (from + max_records).min(items.len());
    let page = &items[from..to];

    let mut encoder = Encoder::new(Vec::new());
    encoder.map(if to < items.len() { 2 } else { 1 });
    encoder.str("AlarmHistoryItems").array(page.len());
    for item in page {
        encoder
            .map(6)
            .str("AlarmName")
            .str(&item.alarm)
            .str("AlarmType")
            .str("MetricAlarm")
            .str("Timestamp")
            .timestamp(&smithy_time(item.at))
            .str("HistoryItemType")
            .str("StateUpdate")
            .str("HistorySummary")
            .str(&item.summary)
            .str("HistoryData")
            .str(&item.data);
    }
    if to < items.len() {
        encoder.str("NextToken").str(&to.to_string());
    }
    CborAnswer {
        status: 200,
        body: encoder.into_writer(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

    use super::*;
    use crate::alarm::AlarmState;

    fn record(value: AlarmState, reason_data: Value, secs: i64) -> StateRecord {
        StateRecord {
            value,
            reason: format!("{value} for a reason"),
            reason_data,
            timestamp: DateTime::from_timestamp(1_796_000_000 + secs, 0).unwrap(),
        }
    }

    #[test]
    fn a_transition_is_recorded_as_cloudwatch_records_it() {
        let rule = AlarmRule::errors_alarm("lifeboat-nordic-errors", "nordic");
        let evaluated = json!({"version": "1.0", "period": 10, "threshold": 5.0,
            "evaluatedDatapoints": [{"timestamp": "2026-11-30T10:00:10.000+0000", "value": 7.0}]});
        let transition = AlarmTransition {
            previous: record(AlarmState::Ok, json!({}), 0),
            current: record(AlarmState::Alarm, evaluated.clone(), 30),
        };
        let item = HistoryItem::state_update(&rule, &transition);
        assert_eq!(item.alarm, "lifeboat-nordic-errors");
        assert_eq!(item.at, transition.current.timestamp);
        assert_eq!(item.summary, "Alarm updated from OK to ALARM");
        let data: Value = serde_json::from_str(&item.data).unwrap();
        assert_eq!(data["oldState"]["stateValue"], "OK");
        assert_eq!(data["oldState"]["stateReason"], "OK for a reason");
        // An empty reason data (a forced state) is left out, not `{}`.
        assert!(data["oldState"].get("stateReasonData").is_none());
        assert_eq!(data["newState"]["stateValue"], "ALARM");
        // An object, as history items carry it (events carry a string).
        assert_eq!(data["newState"]["stateReasonData"], evaluated);
    }

    #[test]
    fn a_body_that_is_not_a_request_is_refused() {
        let book = AlarmHistoryBook::default();
        for body in [&b"{\"AlarmName\":\"x\"}"[..], &[0xa1, 0x69][..]] {
            let answer = describe_alarm_history(&book, body);
            assert_eq!(answer.status, 400);
            let mut decoder = Decoder::new(&answer.body);
            let mut code = String::new();
            each_entry(&mut decoder, |key, decoder| {
                if key == "__type" {
                    code = decoder.string()?;
                } else {
                    decoder.skip()?;
                }
                Ok(())
            })
            .unwrap();
            assert_eq!(code, "InvalidParameterValue");
        }
    }
}
