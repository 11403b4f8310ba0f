//! The off-sale listener's SQS message reader: `read_message`, which reads
//! one record of a batch as `OffsaleListener::handle` does (a sale change, or
//! the poison report of a message that will never read), and
//! `sweep::is_schedule`, which tells the sweep's tick from a batch.
//!
//! Input: an SQS batch or a single record, as JSON text or a tree generated
//! from the bytes (message bodies are JSON text inside a string, so the
//! generator writes lifeboat events into `body`).
//!
//! Invariants: no panic; a change is read only from a message with an id, a
//! receipt handle and a lifeboat `Breaker State Changed` body, and carries
//! that body's version and target state; a poison report is a
//! `malformed` `Operator Request Failed` of at most 400 characters that
//! names the message and reads back as itself.
#![no_main]

use chrono::{DateTime, Utc};
use libfuzzer_sys::fuzz_target;
use lifeboat_core::events::LifeboatEvent;
use lifeboat_core::request::FailureReason;
use lifeboat_core::sale::OnSaleAt;
use lifeboat_fuzz::{Vocabulary, payload, round_trip};
use offsale_listener::{read_message, sweep};
use serde_json::Value;

const VOCABULARY: Vocabulary = Vocabulary {
    keys: &[
        "Records",
        "messageId",
        "receiptHandle",
        "body",
        "attributes",
        "messageAttributes",
        "md5OfBody",
        "eventSource",
        "eventSourceARN",
        "awsRegion",
        "ApproximateReceiveCount",
        "SentTimestamp",
        "source",
        "detail-type",
        "detail",
        "time",
        "id",
        "version",
        "schema_version",
        "operator",
        "from",
        "to",
        "reason",
        "at",
    ],
    strings: &[
        "lifeboat",
        "aws:sqs",
        "aws.events",
        "Scheduled Event",
        "Breaker State Changed",
        "Trip Requested",
        "Operator Request Failed",
        "nordic",
        "BAD OP",
        "",
        "closed",
        "open",
        "half_open",
        "forced_open",
        "forced_closed",
        "2026-11-30T10:00:00Z",
        "2026-11-30T10:15:06.412Z",
        "m1",
        "AQEBwJnKyrHigUMZj6rYigCgxlaS3SLy0a",
        "arn:aws:sqs:us-east-1:123456789012:lifeboat-OffsaleQueue",
    ],
};

/// The longest poison detail the listener puts in an event.
const MAX_DETAIL_CHARS: usize = 400;

fuzz_target!(|data: &[u8]| {
    let payload = payload(data, &VOCABULARY);
    let _ = sweep::is_schedule(&payload);
    let on_sale_at = if data.len().is_multiple_of(2) {
        OnSaleAt::Closed
    } else {
        OnSaleAt::HalfOpen
    };
    match payload.get("Records").and_then(Value::as_array) {
        Some(records) => {
            for record in records {
                check(record, on_sale_at);
            }
        }
        None => check(&payload, on_sale_at),
    }
});

fn at() -> DateTime<Utc> {
    DateTime::from_timestamp(1_796_032_800, 0).unwrap_or_default()
}

fn check(record: &Value, on_sale_at: OnSaleAt) {
    match read_message(record, on_sale_at, at()) {
        Ok(change) => {
            for field in ["messageId", "receiptHandle"] {
                assert!(record.get(field).is_some_and(Value::is_string), "{field}");
            }
            let body: Value = match record.get("body").and_then(Value::as_str) {
                Some(body) => match serde_json::from_str(body) {
                    Ok(body) => body,
                    Err(e) => panic!("a change from a body that is not JSON: {e}"),
                },
                None => panic!("a change from a message without a body"),
            };
            assert_eq!(body.get("source").and_then(Value::as_str), Some("lifeboat"));
            assert_eq!(
                body.get("detail-type").and_then(Value::as_str),
                Some("Breaker State Changed")
            );
            let detail = body.get("detail").unwrap_or(&Value::Null);
            assert_eq!(
                detail.get("version").and_then(Value::as_u64),
                Some(change.version)
            );
            assert_eq!(
                detail.get("operator").and_then(Value::as_str),
                Some(change.operator.as_str())
            );
            assert_eq!(change.status, on_sale_at.status(change.breaker));
        }
        Err(event) => {
            let LifeboatEvent::OperatorRequestFailed(failed) = &event else {
                panic!("a poison message is reported as {event:?}");
            };
            assert_eq!(failed.reason, FailureReason::Malformed);
            assert!(failed.detail.chars().count() <= MAX_DETAIL_CHARS);
            assert!(
                failed
                    .detail
                    .starts_with("off-sale listener dropped SQS message ")
            );
            round_trip(&event);
        }
    }
}
