use std::collections::HashMap;

use aws_sdk_dynamodbstreams::types::{AttributeValue, Record};
use serde_json::{Value, json};

use crate::pump::*;
use aws_sdk_dynamodbstreams::primitives::DateTime;
use aws_sdk_dynamodbstreams::types::{OperationType, StreamRecord, StreamViewType};

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

fn modify_record() -> Record {
    let change = StreamRecord::builder()
        .approximate_creation_date_time(DateTime::from_secs(1_796_000_000))
        .keys("request_id", s("r-1"))
        .new_image("request_id", s("r-1"))
        .new_image("record_type", s("request"))
        .new_image(
            "outcome",
            AttributeValue::M(HashMap::from([
                ("status".to_owned(), s("failed")),
                ("call_ms".to_owned(), AttributeValue::N("12".into())),
                ("ok".to_owned(), AttributeValue::Bool(false)),
                ("tags".to_owned(), AttributeValue::L(vec![s("a")])),
            ])),
        )
        .old_image("request_id", s("r-1"))
        .old_image("record_type", s("request"))
        .sequence_number("1100000000017454423010")
        .size_bytes(349)
        .stream_view_type(StreamViewType::NewAndOldImages)
        .build();
    Record::builder()
        .event_id("bf974a4049b24efda74607f6a916c9d0")
        .event_name(OperationType::Modify)
        .event_version("1.1")
        .event_source("aws:dynamodb")
        .aws_region("us-east-1")
        .dynamodb(change)
        .build()
}

#[test]
fn records_take_lambdas_shape() {
    let arn =
        "arn:aws:dynamodb:us-east-1:123456789012:table/Requests/stream/2026-11-30T04:47:47.443610";
    let json = lambda_record(&modify_record(), arn).unwrap();
    for (pointer, want) in [
        ("/eventID", json!("bf974a4049b24efda74607f6a916c9d0")),
        ("/eventName", json!("MODIFY")),
        ("/eventVersion", json!("1.1")),
        ("/eventSource", json!("aws:dynamodb")),
        ("/awsRegion", json!("us-east-1")),
        ("/eventSourceARN", json!(arn)),
        ("/dynamodb/Keys", json!({"request_id": {"S": "r-1"}})),
        (
            "/dynamodb/NewImage",
            json!({
                "request_id": {"S": "r-1"},
                "record_type": {"S": "request"},
                "outcome": {"M": {
                    "status": {"S": "failed"},
                    "call_ms": {"N": "12"},
                    "ok": {"BOOL": false},
                    "tags": {"L": [{"S": "a"}]}
                }}
            }),
        ),
        (
            "/dynamodb/OldImage",
            json!({"request_id": {"S": "r-1"}, "record_type": {"S": "request"}}),
        ),
        ("/dynamodb/SequenceNumber", json!("1100000000017454423010")),
        ("/dynamodb/SizeBytes", json!(349)),
        ("/dynamodb/StreamViewType", json!("NEW_AND_OLD_IMAGES")),
    ] {
        assert_eq!(json.pointer(pointer), Some(&want), "{pointer} in {json}");
    }
    // What the consumers parse it with.
    let parsed: aws_lambda_events::event::dynamodb::EventRecord =
        serde_json::from_value(json).unwrap();
    assert_eq!(
        parsed.change.sequence_number.as_deref(),
        Some("1100000000017454423010")
    );
    assert_eq!(parsed.event_name, "MODIFY");
    assert_eq!(
        parsed.change.approximate_creation_date_time.timestamp(),
        1_796_000_000
    );
    assert!(parsed.user_identity.is_none());
}

#[test]
fn function_names_come_from_arns() {
    assert_eq!(
        function_name("arn:aws:lambda:us-east-1:123456789012:function:real-consumer"),
        "real-consumer"
    );
    assert_eq!(
        function_name("arn:aws:lambda:us-east-1:123456789012:function:fallback-consumer:live"),
        "fallback-consumer"
    );
    assert_eq!(function_name("circuit-switch"), "circuit-switch");
}

#[test]
fn redelivery_starts_at_the_first_failed_record() {
    let batch = ["10", "11", "12", "13"];
    assert_eq!(
        first_failed(&json!({"batchItemFailures": []}), &batch),
        Ok(None)
    );
    assert_eq!(first_failed(&Value::Null, &batch), Ok(None));
    assert_eq!(
        first_failed(&json!({"batchItemFailures": null}), &batch),
        Ok(None)
    );
    assert_eq!(
        first_failed(
            &json!({"batchItemFailures": [{"itemIdentifier": "13"}, {"itemIdentifier": "11"}]}),
            &batch
        ),
        Ok(Some(1))
    );
    assert!(
        first_failed(
            &json!({"batchItemFailures": [{"itemIdentifier": ""}]}),
            &batch
        )
        .is_err()
    );
    assert!(
        first_failed(
            &json!({"batchItemFailures": [{"itemIdentifier": "99"}]}),
            &batch
        )
        .is_err()
    );
    assert!(first_failed(&json!({"batchItemFailures": [{}]}), &batch).is_err());
    assert!(first_failed(&json!({"batchItemFailures": "x"}), &batch).is_err());
}
