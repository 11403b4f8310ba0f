//! The Requests-stream record reader: `records` and `classify` of
//! lifeboat-stream, as both stream consumers call them on every batch.
//!
//! Invariants: no panic; a record is skipped only when it is no INSERT; a
//! quarantined record is marked ours only with a request id; the sequence
//! number is the record's own; `read_batch` (with an in-memory Requests
//! table) accounts for every record and reports each quarantined one with an
//! event; and every event it makes reads back as the event that was written.
#![no_main]

use chrono::{DateTime, Utc};
use libfuzzer_sys::fuzz_target;
use lifeboat_core::memory::MemoryRequestStore;
use lifeboat_core::request::FailureReason;
use lifeboat_fuzz::{Vocabulary, block_on, payload, round_trip};
use lifeboat_stream::{StreamItem, classify, failure_event, read_batch, records};
use serde_json::Value;

const VOCABULARY: Vocabulary = Vocabulary {
    keys: &[
        "Records",
        "eventID",
        "eventName",
        "eventVersion",
        "eventSource",
        "awsRegion",
        "eventSourceARN",
        "dynamodb",
        "ApproximateCreationDateTime",
        "Keys",
        "NewImage",
        "OldImage",
        "SequenceNumber",
        "SizeBytes",
        "StreamViewType",
        "userIdentity",
        "S",
        "N",
        "B",
        "BOOL",
        "NULL",
        "M",
        "L",
        "SS",
        "NS",
        "request_id",
        "record_type",
        "operator",
        "operation",
        "params",
        "created_at",
        "deadline",
        "expires_at",
        "outcome",
        "from",
        "to",
        "date",
        "passengers",
    ],
    strings: &[
        "INSERT",
        "MODIFY",
        "REMOVE",
        "aws:dynamodb",
        "NEW_AND_OLD_IMAGES",
        "NEW_IMAGE",
        "request",
        "search",
        "price",
        "nordic",
        "BAD OP",
        "",
        "2026-11-30T10:15:00.000Z",
        "2026-11-30T10:15:04Z",
        "1796120104",
        "4421584500000000017450439101",
        "HEL",
        "2",
    ],
};

fuzz_target!(|data: &[u8]| {
    let payload = payload(data, &VOCABULARY);
    // A payload that is itself one record.
    check(&payload);
    let Ok(batch) = records(&payload) else {
        assert!(
            block_on(read_batch(
                &payload,
                &MemoryRequestStore::new(),
                at(),
                "fuzz"
            ))
            .is_err()
        );
        return;
    };
    for record in batch {
        check(record);
    }
    let read = match block_on(read_batch(
        &payload,
        &MemoryRequestStore::new(),
        at(),
        "fuzz",
    )) {
        Ok(read) => read,
        Err(e) => panic!("a batch with records is refused: {e}"),
    };
    assert_eq!(
        read.requests.len() + read.skipped + read.quarantined,
        batch.len()
    );
    assert_eq!(read.events.len(), read.quarantined);
    for event in &read.events {
        round_trip(event);
    }
});

fn at() -> DateTime<Utc> {
    DateTime::from_timestamp(1_796_032_800, 0).unwrap_or_default()
}

fn check(record: &Value) {
    let own_sequence = record
        .pointer("/dynamodb/SequenceNumber")
        .and_then(Value::as_str);
    match classify(record) {
        StreamItem::Request { sequence, request } => {
            assert_eq!(sequence.as_deref(), own_sequence);
            assert_eq!(
                record.get("eventName").and_then(Value::as_str),
                Some("INSERT")
            );
            let _ = request.remaining(at());
            let event = failure_event(&request, FailureReason::Malformed, "fuzz", at());
            round_trip(&event);
        }
        StreamItem::Skip { sequence, .. } => {
            assert_eq!(sequence.as_deref(), own_sequence);
            assert_ne!(
                record.get("eventName").and_then(Value::as_str),
                Some("INSERT")
            );
        }
        StreamItem::Quarantine(q) => {
            assert_eq!(q.sequence.as_deref(), own_sequence);
            assert!(!q.ours || q.request_id.is_some(), "{q:?}");
        }
    }
}
