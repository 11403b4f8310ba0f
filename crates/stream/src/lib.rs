//! lifeboat-stream: what both stream consumers do the same way.
//!
//! A batch from the Requests stream arrives as JSON. Each record is read on its
//! own ([`classify`]), so one record that does not fit the DynamoDB stream shape
//! or lifeboat's request schema is quarantined without failing the others:
//!
//! * an INSERT of a request item → [`StreamItem::Request`];
//! * MODIFY and REMOVE records (our own outcome writes, TTL expiry) →
//!   [`StreamItem::Skip`]: never processed, so a consumer never reacts to its
//!   own writes even without the mapping's filter;
//! * anything else → [`StreamItem::Quarantine`]: an `Operator Request Failed`
//!   event with reason `malformed` and, when the item is one of our request
//!   items, a `malformed` outcome so nobody waits for it. Never retried.

use aws_lambda_events::event::dynamodb::EventRecord;
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use chrono::{DateTime, Utc};
use lifeboat_aws::{request_from_item, request_hints};
use lifeboat_core::events::{LifeboatEvent, OperatorRequestFailed, SCHEMA_VERSION};
use lifeboat_core::ports::{EventPublisher, OutcomeWrite, RequestStore, StoreError};
use lifeboat_core::request::{FailureReason, Outcome, RequestRecord};
use lifeboat_core::{Operation, OperatorId};
use serde_json::Value;

/// One stream record, read.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamItem {
    Request {
        sequence: Option<String>,
        request: RequestRecord,
    },
    Quarantine(Quarantine),
    Skip {
        sequence: Option<String>,
        why: &'static str,
    },
}

/// A record that cannot be processed, with what could be read of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Quarantine {
    pub sequence: Option<String>,
    pub request_id: Option<String>,
    pub operator: Option<String>,
    pub kind: Option<Operation>,
    /// True when the item is one of our request items (it says
    /// `record_type = request`), so a `malformed` outcome may be written to it.
    pub ours: bool,
    pub detail: String,
}

/// The records of a stream batch, or an error if the payload has none.
pub fn records(payload: &Value) -> Result<&[Value], String> {
    payload
        .get("Records")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .ok_or_else(|| "payload is not a DynamoDB stream batch: no Records array".to_owned())
}

/// Read one stream record.
pub fn classify(record: &Value) -> StreamItem {
    let sequence = record
        .pointer("/dynamodb/SequenceNumber")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let parsed: EventRecord = match serde_json::from_value(record.clone()) {
        Ok(r) => r,
        Err(e) => {
            return StreamItem::Quarantine(Quarantine {
                sequence,
                request_id: None,
                operator: None,
                kind: None,
                ours: false,
                detail: format!("not a DynamoDB stream record: {e}"),
            });
        }
    };
    if parsed.event_name != "INSERT" {
        return StreamItem::Skip {
            sequence,
            why: "not an insert: outcome writes and removals are not requests",
        };
    }
    let image = &parsed.change.new_image;
    if image.is_empty() {
        return StreamItem::Quarantine(Quarantine {
            sequence,
            request_id: None,
            operator: None,
            kind: None,
            ours: false,
            detail: "insert without a NewImage: the stream must carry new images".into(),
        });
    }
    match request_from_item(image.clone()) {
        Ok(stored) => StreamItem::Request {
            sequence,
            request: stored.request,
        },
        Err(e) => {
            let hints = request_hints(image);
            StreamItem::Quarantine(Quarantine {
                sequence,
                ours: hints.ours && hints.request_id.is_some(),
                request_id: hints.request_id,
                operator: hints.operator,
                kind: hints.operation,
                detail: e.to_string(),
            })
        }
    }
}

/// A batch read: its requests, the failure events of the records it
/// quarantined, and how many records were skipped or quarantined.
#[derive(Debug, Default)]
pub struct Batch {
    pub requests: Vec<(Option<String>, RequestRecord)>,
    pub events: Vec<LifeboatEvent>,
    pub skipped: usize,
    pub quarantined: usize,
}

/// Read a whole stream batch, quarantining what cannot be processed (see
/// [`quarantine`]). Fails only if the payload is not a stream batch at all.
pub async fn read_batch(
    payload: &Value,
    requests: &dyn RequestStore,
    at: DateTime<Utc>,
    by: &str,
) -> Result<Batch, String> {
    let mut batch = Batch::default();
    for record in records(payload)? {
        match classify(record) {
            StreamItem::Request { sequence, request } => batch.requests.push((sequence, request)),
            StreamItem::Skip { .. } => batch.skipped += 1,
            StreamItem::Quarantine(q) => {
                batch.quarantined += 1;
                batch.events.push(quarantine(requests, &q, at, by).await);
            }
        }
    }
    Ok(batch)
}

/// The `Operator Request Failed` event for a request that ended without an answer.
pub fn failure_event(
    request: &RequestRecord,
    reason: FailureReason,
    detail: &str,
    at: DateTime<Utc>,
) -> LifeboatEvent {
    LifeboatEvent::OperatorRequestFailed(OperatorRequestFailed {
        schema_version: SCHEMA_VERSION,
        request_id: Some(request.request_id.clone()),
        operator: Some(request.operator.to_string()),
        kind: Some(request.operation),
        reason,
        detail: detail.to_owned(),
        at,
    })
}

/// Quarantine a record: write a `malformed` outcome when the item is ours,
/// and return the failure event to publish. A store error while writing the
/// outcome is logged, not returned: a malformed record must never be retried.
pub async fn quarantine(
    requests: &dyn RequestStore,
    q: &Quarantine,
    at: DateTime<Utc>,
    by: &str,
) -> LifeboatEvent {
    tracing::warn!(
        request_id = q.request_id.as_deref().unwrap_or("-"),
        operator = q.operator.as_deref().unwrap_or("-"),
        sequence = q.sequence.as_deref().unwrap_or("-"),
        detail = %q.detail,
        "quarantined a stream record"
    );
    if q.ours
        && let Some(id) = &q.request_id
    {
        // The item is found by its operator (whose table it is in); without
        // a valid one nobody can be polling for it, and the event still says
        // what happened.
        match q.operator.as_deref().map(OperatorId::new) {
            Some(Ok(operator)) => {
                let outcome = Outcome::failed(FailureReason::Malformed, q.detail.clone(), at, by);
                if let Err(e) = requests.write_outcome(&operator, id, &outcome).await {
                    tracing::error!(request_id = %id, error = %e, "could not write the malformed outcome");
                }
            }
            _ => {
                tracing::warn!(request_id = %id, "no valid operator: no malformed outcome written");
            }
        }
    }
    LifeboatEvent::OperatorRequestFailed(OperatorRequestFailed {
        schema_version: SCHEMA_VERSION,
        request_id: q.request_id.clone(),
        operator: q.operator.clone(),
        kind: q.kind,
        reason: FailureReason::Malformed,
        detail: q.detail.clone(),
        at,
    })
}

/// Write a request's outcome. `Ok(true)` when this write is the one outcome,
/// `Ok(false)` when the request already had one (a re-delivered record) or its
/// item no longer exists.
pub async fn write_outcome(
    requests: &dyn RequestStore,
    request: &RequestRecord,
    outcome: &Outcome,
) -> Result<bool, StoreError> {
    match requests
        .write_outcome(&request.operator, &request.request_id, outcome)
        .await
    {
        Ok(OutcomeWrite::Written) => Ok(true),
        Ok(OutcomeWrite::AlreadyPresent) => {
            tracing::info!(request_id = %request.request_id, "request already had an outcome; left as it was");
            Ok(false)
        }
        // The item is gone (expired and removed): nobody can read an outcome,
        // and retrying the record would only loop.
        Err(StoreError::Conflict(why)) => {
            tracing::warn!(request_id = %request.request_id, why = %why, "request item is gone; no outcome written");
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// Publish the batch's events. Outcomes are the source of truth for callers,
/// so a failed publish is logged loudly with what was lost rather than failing
/// records whose outcomes are already written.
pub async fn publish_all(events: &dyn EventPublisher, batch: &[LifeboatEvent]) -> usize {
    if batch.is_empty() {
        return 0;
    }
    match events.publish(batch).await {
        Ok(()) => 0,
        Err(e) => {
            let failed = e.failed_indexes(batch.len());
            for i in &failed {
                if let Some(event) = batch.get(*i) {
                    tracing::error!(
                        detail_type = event.detail_type(),
                        detail = %event.detail_json(),
                        "event not published"
                    );
                }
            }
            tracing::error!(error = %e, "events not published");
            failed.len()
        }
    }
}

/// Build the partial-batch response from the sequence numbers of records that
/// must be retried.
pub fn batch_response(failed: impl IntoIterator<Item = String>) -> DynamoDbEventResponse {
    let mut response = DynamoDbEventResponse::default();
    for id in failed {
        let mut failure = DynamoDbBatchItemFailure::default();
        failure.item_identifier = Some(id);
        response.batch_item_failures.push(failure);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request_image() -> Value {
        json!({
            "request_id": {"S": "r-1"},
            "record_type": {"S": "request"},
            "operator": {"S": "nordic"},
            "operation": {"S": "search"},
            "params": {"M": {"from": {"S": "HEL"}, "to": {"S": "TLL"}}},
            "created_at": {"S": "2026-11-30T10:00:00Z"},
            "deadline": {"S": "2026-11-30T10:00:03Z"},
            "expires_at": {"N": "1796032800"}
        })
    }

    fn record(event_name: &str, image: Value) -> Value {
        json!({
            "eventID": "1", "eventName": event_name, "eventVersion": "1.1",
            "eventSource": "aws:dynamodb", "awsRegion": "us-east-1",
            "dynamodb": {"Keys": {"request_id": {"S": "r-1"}}, "NewImage": image,
                         "SequenceNumber": "111", "SizeBytes": 26, "StreamViewType": "NEW_AND_OLD_IMAGES"},
            "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/Requests/stream/2026-11-30T00:00:00.000"
        })
    }

    #[test]
    fn inserts_of_requests_are_read() {
        match classify(&record("INSERT", request_image())) {
            StreamItem::Request { sequence, request } => {
                assert_eq!(sequence.as_deref(), Some("111"));
                assert_eq!(request.request_id, "r-1");
                assert_eq!(request.operation, Operation::Search);
                assert_eq!(request.params.get("from").map(String::as_str), Some("HEL"));
            }
            other => panic!("expected a request, got {other:?}"),
        }
    }

    #[test]
    fn modify_and_remove_are_skipped() {
        assert!(matches!(
            classify(&record("MODIFY", request_image())),
            StreamItem::Skip { .. }
        ));
        assert!(matches!(
            classify(&record("REMOVE", json!({}))),
            StreamItem::Skip { .. }
        ));
    }

    #[test]
    fn foreign_and_malformed_records_are_quarantined() {
        let foreign = record(
            "INSERT",
            json!({"Id": {"N": "101"}, "Message": {"S": "New item!"}}),
        );
        match classify(&foreign) {
            StreamItem::Quarantine(q) => assert!(!q.ours),
            other => panic!("{other:?}"),
        }
        let mut bad_operator = request_image();
        bad_operator["operator"] = json!({"S": "BAD OP"});
        match classify(&record("INSERT", bad_operator)) {
            StreamItem::Quarantine(q) => {
                assert!(q.ours);
                assert_eq!(q.request_id.as_deref(), Some("r-1"));
                assert_eq!(q.operator.as_deref(), Some("BAD OP"));
            }
            other => panic!("{other:?}"),
        }
        let mut no_operation = request_image();
        no_operation.as_object_mut().unwrap().remove("operation");
        assert!(matches!(
            classify(&record("INSERT", no_operation)),
            StreamItem::Quarantine(_)
        ));
        match classify(&json!({"eventName": 7, "dynamodb": {"SequenceNumber": "5"}})) {
            StreamItem::Quarantine(q) => assert_eq!(q.sequence.as_deref(), Some("5")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn payload_without_records_is_an_error() {
        assert!(records(&json!({"foo": 1})).is_err());
        assert_eq!(records(&json!({"Records": []})).unwrap().len(), 0);
    }
}
