//! The pump's loop against scripted AWS answers: what it delivers, in which
//! batches, and what it gives up.

use super::*;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodbstreams::types::{AttributeValue, Record};
use aws_sdk_lambda::operation::get_event_source_mapping::GetEventSourceMappingOutput;
use aws_sdk_lambda::types::{EventSourcePosition, FunctionResponseType};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::pump::*;
use aws_sdk_dynamodbstreams::Client as Streams;
use aws_sdk_dynamodbstreams::operation::describe_stream::DescribeStreamOutput;
use aws_sdk_dynamodbstreams::operation::get_records::GetRecordsOutput;
use aws_sdk_dynamodbstreams::operation::get_shard_iterator::GetShardIteratorOutput;
use aws_sdk_dynamodbstreams::primitives::DateTime;
use aws_sdk_dynamodbstreams::types::{OperationType, Shard, StreamDescription, StreamRecord};
use aws_sdk_lambda::Client as Lambda;
use aws_sdk_lambda::operation::invoke::InvokeOutput;
use aws_sdk_lambda::primitives::Blob;
use aws_sdk_lambda::types::{Filter, FilterCriteria as SdkFilterCriteria};
use aws_smithy_mocks::{Rule, RuleMode, mock, mock_client};

const STREAM: &str =
    "arn:aws:dynamodb:us-east-1:123456789012:table/Requests/stream/2026-11-30T00:00:00.000";
const REAL: &str = "arn:aws:lambda:us-east-1:123456789012:function:real-consumer";

type Seen = Arc<Mutex<Vec<Vec<String>>>>;

fn record(seq: u32, event: OperationType) -> Record {
    let id = AttributeValue::S(format!("r-{seq}"));
    let change = StreamRecord::builder()
        .approximate_creation_date_time(DateTime::from_secs(chrono::Utc::now().timestamp()))
        .keys("request_id", id.clone())
        .new_image("request_id", id)
        .new_image("record_type", AttributeValue::S("request".into()))
        .sequence_number(seq.to_string())
        .size_bytes(100)
        .build();
    Record::builder()
        .event_id(format!("e-{seq}"))
        .event_name(event)
        .event_version("1.1")
        .event_source("aws:dynamodb")
        .aws_region("us-east-1")
        .dynamodb(change)
        .build()
}

fn inserts(seqs: std::ops::RangeInclusive<u32>) -> Vec<Record> {
    seqs.map(|s| record(s, OperationType::Insert)).collect()
}

fn mapping(retries: i32, bisect: bool) -> GetEventSourceMappingOutput {
    GetEventSourceMappingOutput::builder()
        .uuid("m-1")
        .event_source_arn(STREAM)
        .function_arn(REAL)
        .state("Enabled")
        .batch_size(3)
        .function_response_types(FunctionResponseType::ReportBatchItemFailures)
        .maximum_retry_attempts(retries)
        .maximum_record_age_in_seconds(60)
        .bisect_batch_on_function_error(bisect)
        .starting_position(EventSourcePosition::TrimHorizon)
        .build()
}

/// A stream of one shard that holds `records`, read in one go.
fn streams(records: Vec<Record>) -> Streams {
    let describe = mock!(Streams::describe_stream).then_output(|| {
        DescribeStreamOutput::builder()
            .stream_description(
                StreamDescription::builder()
                    .shards(Shard::builder().shard_id("shard-1").build())
                    .build(),
            )
            .build()
    });
    let iterator = mock!(Streams::get_shard_iterator).then_output(|| {
        GetShardIteratorOutput::builder()
            .shard_iterator("it-0")
            .build()
    });
    let read = mock!(Streams::get_records)
        .sequence()
        .output(move || {
            GetRecordsOutput::builder()
                .set_records(Some(records.clone()))
                .next_shard_iterator("it-1")
                .build()
        })
        .output(|| {
            GetRecordsOutput::builder()
                .next_shard_iterator("it-1")
                .build()
        })
        .repeatedly()
        .build();
    mock_client!(
        aws_sdk_dynamodbstreams,
        RuleMode::MatchAny,
        [&describe, &iterator, &read]
    )
}

fn control(rule: &Rule) -> Lambda {
    mock_client!(aws_sdk_lambda, RuleMode::MatchAny, [rule])
}

fn sequences(payload: &Value) -> Vec<String> {
    payload["Records"]
        .as_array()
        .map(|records| {
            records
                .iter()
                .filter_map(|r| r["dynamodb"]["SequenceNumber"].as_str())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// A function that answers `answer(batch sequence numbers)`, noting
/// every batch it gets; `None` is a function error.
fn function(
    seen: &Seen,
    answer: impl Fn(&[String]) -> Option<Value> + Send + Sync + 'static,
) -> Lambda {
    let seen = Arc::clone(seen);
    let rule = mock!(Lambda::invoke).then_compute_response(move |input| {
        let payload: Value = input
            .payload()
            .and_then(|p| serde_json::from_slice(p.as_ref()).ok())
            .unwrap_or(Value::Null);
        let batch = sequences(&payload);
        lock(&seen).push(batch.clone());
        match answer(&batch) {
            Some(body) => aws_smithy_mocks::MockResponse::Output(
                InvokeOutput::builder()
                    .status_code(200)
                    .payload(Blob::new(body.to_string()))
                    .build(),
            ),
            None => aws_smithy_mocks::MockResponse::Http(
                aws_sdk_lambda::config::http::HttpResponse::new(
                    500.try_into().expect("a status code"),
                    aws_sdk_lambda::primitives::SdkBody::from(
                        r#"{"errorType": "Boom", "errorMessage": "boom"}"#,
                    ),
                ),
            ),
        }
    });
    // As Invoker::for_endpoint: no SDK retries.
    mock_client!(aws_sdk_lambda, RuleMode::MatchAny, [&rule], |c| c
        .retry_config(aws_sdk_lambda::config::retry::RetryConfig::disabled()))
}

async fn runner(streams: Streams, mapping: &Rule, invoke: Lambda, config: PumpConfig) -> Runner {
    let mut runner = Runner {
        streams,
        lambda: control(mapping),
        invoker: Invoker::new(invoke),
        config,
        stats: Arc::new(Mutex::new(PumpStats::default())),
        stream_arn: STREAM.to_owned(),
        shards: Vec::new(),
        next_shard: 0,
    };
    runner
        .open_shards(StartingPosition::TrimHorizon)
        .await
        .unwrap();
    runner
}

/// Run `n` steps; returns how many delivered a batch.
async fn steps(runner: &mut Runner, n: usize) -> usize {
    let mut delivered = 0;
    for _ in 0..n {
        if runner.step().await.unwrap() {
            delivered += 1;
        }
    }
    delivered
}

/// The batches the function got, by sequence number.
fn batches(seen: &Seen) -> Vec<Vec<String>> {
    lock(seen).clone()
}

fn ok() -> Option<Value> {
    Some(json!({"batchItemFailures": []}))
}

#[tokio::test]
async fn a_reported_failure_comes_back_from_the_first_failed_record() {
    let seen = Seen::default();
    let failed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let invoke = function(&seen, move |batch| {
        if batch.iter().any(|s| s == "2") && !failed.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            Some(json!({"batchItemFailures": [{"itemIdentifier": "3"}, {"itemIdentifier": "2"}]}))
        } else {
            ok()
        }
    });
    let m = mock!(Lambda::get_event_source_mapping).then_output(|| mapping(3, false));
    let mut pump = runner(streams(inserts(1..=5)), &m, invoke, PumpConfig::new("m-1")).await;
    assert_eq!(steps(&mut pump, 5).await, 3);
    assert_eq!(
        batches(&seen),
        vec![vec!["1", "2", "3"], vec!["2", "3", "4"], vec!["5"]]
    );
    let stats = lock(&pump.stats).clone();
    assert_eq!(stats.delivered_to("real-consumer"), 5);
    assert_eq!(
        (
            stats.partial_failures,
            stats.retried_batches,
            stats.redelivered_records
        ),
        (1, 1, 3)
    );
    assert_eq!(stats.discarded_records, 0);
}

#[tokio::test]
async fn function_errors_are_retried_then_the_records_are_discarded() {
    let seen = Seen::default();
    let invoke = function(&seen, |_| None);
    let m = mock!(Lambda::get_event_source_mapping).then_output(|| mapping(1, false));
    let mut pump = runner(streams(inserts(1..=2)), &m, invoke, PumpConfig::new("m-1")).await;
    assert_eq!(steps(&mut pump, 4).await, 2);
    assert_eq!(batches(&seen), vec![vec!["1", "2"], vec!["1", "2"]]);
    let stats = lock(&pump.stats).clone();
    assert_eq!(
        (
            stats.failed_invocations,
            stats.retried_batches,
            stats.discarded_records
        ),
        (2, 1, 2)
    );
    assert_eq!(stats.delivered_to("real-consumer"), 0);
    let error = stats.last_error.unwrap_or_default();
    assert!(
        error.contains("function error") && error.contains("Boom"),
        "{error}"
    );
}

#[tokio::test]
async fn bisecting_isolates_the_record_that_fails_the_function() {
    let seen = Seen::default();
    let invoke = function(&seen, |batch| {
        (!batch.iter().any(|s| s == "2")).then(ok).flatten()
    });
    let m = mock!(Lambda::get_event_source_mapping).then_output(|| mapping(2, true));
    let mut pump = runner(streams(inserts(1..=4)), &m, invoke, PumpConfig::new("m-1")).await;
    assert_eq!(steps(&mut pump, 9).await, 7);
    assert_eq!(
        batches(&seen),
        vec![
            vec!["1", "2", "3"],
            vec!["1", "2"],
            vec!["1"],
            vec!["2", "3", "4"],
            vec!["2", "3"],
            vec!["2"],
            vec!["3", "4"],
        ]
    );
    let stats = lock(&pump.stats).clone();
    assert_eq!(stats.delivered_to("real-consumer"), 3);
    assert_eq!(stats.discarded_records, 1);
}

#[tokio::test]
async fn filtered_records_are_dropped_and_a_disabled_mapping_delivers_nothing() {
    let seen = Seen::default();
    let invoke = function(&seen, |_| ok());
    let filtered = || {
        let mut m = mapping(3, false);
        m.filter_criteria = Some(
            SdkFilterCriteria::builder()
                .filters(
                    Filter::builder()
                        .pattern(crate::moto::resources::REQUESTS_FILTER_PATTERN)
                        .build(),
                )
                .build(),
        );
        m
    };
    let m = mock!(Lambda::get_event_source_mapping)
        .sequence()
        .output(move || {
            let mut m = filtered();
            m.state = Some("Disabled".into());
            m
        })
        .output(filtered)
        .repeatedly()
        .build();
    let (tap, mut tapped) = mpsc::unbounded_channel();
    let mut config = PumpConfig::new("m-1");
    config.tap = Some(tap);
    let records = vec![
        record(1, OperationType::Insert),
        record(2, OperationType::Modify),
        record(3, OperationType::Insert),
    ];
    let mut pump = runner(streams(records), &m, invoke, config).await;
    assert_eq!(steps(&mut pump, 1).await, 0);
    assert!(lock(&seen).is_empty());
    assert_eq!(steps(&mut pump, 2).await, 1);
    assert_eq!(batches(&seen), vec![vec!["1", "3"]]);
    let stats = lock(&pump.stats).clone();
    assert_eq!(
        (stats.paused_polls, stats.filtered_out, stats.records_read),
        (1, 1, 3)
    );
    let mut names = Vec::new();
    while let Ok(r) = tapped.try_recv() {
        names.push(r["eventName"].as_str().unwrap_or_default().to_owned());
    }
    assert_eq!(names, ["INSERT", "MODIFY", "INSERT"]);
}
