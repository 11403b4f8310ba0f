//! An SQS queue feeding a Lambda through its event source mapping, played by
//! the harness.
//!
//! moto keeps the queue (and delivers an EventBridge rule's events into it),
//! but an SQS event source mapping in moto would try to run the function
//! itself, in Docker, on every `SendMessage`. So no mapping is created in
//! moto for the queue, and [`QueuePump`] does Lambda's poller's part, as it
//! does with `FunctionResponseTypes: [ReportBatchItemFailures]`:
//!
//! * it receives up to `BatchSize` messages (a long poll), with every system
//!   attribute (`ApproximateReceiveCount`, `SentTimestamp`, …) and message
//!   attribute, and leaves their visibility to the queue (Lambda does not
//!   set one on receive: the queue's `VisibilityTimeout` applies);
//! * it invokes the function with them in the exact shape of a Lambda SQS
//!   event ([`sqs_event`], `eventSource: aws:sqs`, `eventSourceARN` the
//!   queue's ARN);
//! * it reads the answer as Lambda reads a partial batch response
//!   ([`settle`]): no answer, `{}`, a `null` or empty `batchItemFailures` is
//!   success; every message not listed is deleted, the listed ones stay for
//!   the queue to deliver again when their visibility runs out (the queue's
//!   timeout, or what the function set with `ChangeMessageVisibility`); an
//!   answer that is not a batch response, or an `itemIdentifier` that is
//!   missing, empty or not a message of the batch, fails the whole batch;
//! * after a failed invocation (a function error, which `cargo lambda
//!   watch` answers with HTTP 500, or no answer at all) it deletes nothing:
//!   the messages come back after their visibility timeout, and the queue's
//!   redrive policy moves them to its dead-letter queue after
//!   `maxReceiveCount` receives.
//!
//! Simplifications: one poller (Lambda runs up to five and scales them up),
//! each batch goes out as soon as it is received (the template's
//! `MaximumBatchingWindowInSeconds` is 0), and no message is ever received
//! twice at once by the pump itself.
//!
//! Message bodies are passed on untouched. EventBridge's own deliveries carry
//! `account`; moto's rule deliveries leave it out, so a body delivered by
//! moto's rule lacks it (the off-sale listener does not read it).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::encodings::Base64Data;
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage, SqsMessageAttribute};
use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, Message, MessageAttributeValue, MessageSystemAttributeName,
};
use serde_json::Value;

use super::task::{StopSignal, TaskHandle};
use super::{Invoker, lock};

/// How a [`QueuePump`] runs: the queue's event source mapping.
#[derive(Debug, Clone)]
pub struct QueuePumpConfig {
    pub queue_url: String,
    /// The queue's ARN, the records' `eventSourceARN`.
    pub queue_arn: String,
    /// The function the mapping invokes (its binary name).
    pub function: String,
    /// Messages per invocation (`BatchSize`, 1 to 10 for one receive).
    pub batch_size: i32,
    /// Long-poll wait of each receive (whole seconds, at most 20). Lambda
    /// waits 20 s; a short wait lets the pump stop promptly.
    pub wait: Duration,
    /// Pause after a failed receive.
    pub retry_after: Duration,
    /// The records' `awsRegion`.
    pub region: String,
}

impl QueuePumpConfig {
    pub fn new(
        queue_url: impl Into<String>,
        queue_arn: impl Into<String>,
        function: impl Into<String>,
    ) -> Self {
        Self {
            queue_url: queue_url.into(),
            queue_arn: queue_arn.into(),
            function: function.into(),
            batch_size: 10,
            wait: Duration::from_secs(1),
            retry_after: Duration::from_secs(1),
            region: crate::moto::REGION.to_owned(),
        }
    }
}

/// What a [`QueuePump`] has done so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Messages received (a message that comes back counts again).
    pub received: u64,
    /// Invocations of the function.
    pub invocations: u64,
    /// Invocations that failed as a whole (nothing deleted).
    pub failed_invocations: u64,
    /// Invocations whose answer failed the whole batch (nothing deleted).
    pub invalid_reports: u64,
    /// Messages the function reported in `batchItemFailures` (left on the
    /// queue).
    pub reported_failures: u64,
    /// Messages deleted after the function took them.
    pub deleted: u64,
    /// Messages invoked with, by the `detail-type` of their body (`-` when
    /// the body is not an EventBridge event).
    pub by_detail_type: BTreeMap<String, u64>,
    /// Receive or delete calls that failed.
    pub errors: u64,
    pub last_error: Option<String>,
}

/// Polls one queue into one function; see the module docs.
#[derive(Debug)]
pub struct QueuePump {
    task: TaskHandle,
    stats: Arc<Mutex<QueueStats>>,
}

impl QueuePump {
    pub fn start(sqs: aws_sdk_sqs::Client, invoker: Invoker, config: QueuePumpConfig) -> Self {
        let stats = Arc::new(Mutex::new(QueueStats::default()));
        let poller = Poller {
            sqs,
            invoker,
            config,
            stats: Arc::clone(&stats),
        };
        Self {
            task: TaskHandle::spawn(move |stop| poller.run(stop)),
            stats,
        }
    }

    pub fn stats(&self) -> QueueStats {
        lock(&self.stats).clone()
    }

    pub fn is_running(&self) -> bool {
        !self.task.is_finished()
    }

    /// Stop after the invocation in flight, if any.
    pub async fn stop(self) {
        self.task.stop().await;
    }
}

/// One record of a Lambda SQS event, from a received message.
pub fn sqs_record(message: &Message, queue_arn: &str, region: &str) -> SqsMessage {
    let mut record = SqsMessage::default();
    record.message_id = message.message_id.clone();
    record.receipt_handle = message.receipt_handle.clone();
    record.body = message.body.clone();
    record.md5_of_body = message.md5_of_body.clone();
    record.md5_of_message_attributes = message.md5_of_message_attributes.clone();
    record.attributes = message
        .attributes()
        .map(|attributes| {
            attributes
                .iter()
                .map(|(name, value)| (name.as_str().to_owned(), value.clone()))
                .collect()
        })
        .unwrap_or_default();
    record.message_attributes = message
        .message_attributes()
        .map(|attributes| {
            attributes
                .iter()
                .map(|(name, value)| (name.clone(), message_attribute(value)))
                .collect()
        })
        .unwrap_or_default();
    record.event_source = Some("aws:sqs".to_owned());
    record.event_source_arn = Some(queue_arn.to_owned());
    record.aws_region = Some(region.to_owned());
    record
}

fn message_attribute(value: &MessageAttributeValue) -> SqsMessageAttribute {
    let mut attribute = SqsMessageAttribute::default();
    attribute.string_value = value.string_value.clone();
    attribute.binary_value = value.binary_value.as_ref().map(|b| base64_data(b.as_ref()));
    attribute.string_list_values = value.string_list_values().to_vec();
    attribute.binary_list_values = value
        .binary_list_values()
        .iter()
        .map(|b| base64_data(b.as_ref()))
        .collect();
    attribute.data_type = Some(value.data_type.clone());
    attribute
}

/// Bytes that serialise as base64, as Lambda sends binary attributes.
fn base64_data(bytes: &[u8]) -> Base64Data {
    let mut data = Base64Data::default();
    *data = bytes.to_vec();
    data
}

/// The Lambda SQS event for `messages`.
pub fn sqs_event(messages: &[Message], queue_arn: &str, region: &str) -> Value {
    let mut event = SqsEvent::default();
    event.records = messages
        .iter()
        .map(|m| sqs_record(m, queue_arn, region))
        .collect();
    // Plain data with string keys: serialising it cannot fail.
    serde_json::to_value(&event).unwrap_or(Value::Null)
}

/// What becomes of a batch after the function answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    /// Delete the messages not reported; the reported ones stay.
    Partial { failed: BTreeSet<String> },
    /// The answer failed the whole batch: nothing is deleted.
    WholeBatch { why: String },
}

/// Lambda's reading of a partial batch response for a batch of `batch`
/// message ids (see the module docs).
pub fn settle(batch: &[String], answer: &Value) -> Settlement {
    let whole = |why: String| Settlement::WholeBatch { why };
    let failures = match answer {
        Value::Null => return Settlement::Partial { failed: [].into() },
        Value::Object(map) => match map.get("batchItemFailures") {
            None | Some(Value::Null) => return Settlement::Partial { failed: [].into() },
            Some(Value::Array(items)) => items,
            Some(other) => return whole(format!("batchItemFailures is not a list: {other}")),
        },
        other => return whole(format!("not a batch response: {other}")),
    };
    let mut failed = BTreeSet::new();
    for item in failures {
        match item.get("itemIdentifier").and_then(Value::as_str) {
            Some(id) if !id.is_empty() && batch.iter().any(|b| b == id) => {
                failed.insert(id.to_owned());
            }
            _ => return whole(format!("itemIdentifier not of this batch: {item}")),
        }
    }
    Settlement::Partial { failed }
}

struct Poller {
    sqs: aws_sdk_sqs::Client,
    invoker: Invoker,
    config: QueuePumpConfig,
    stats: Arc<Mutex<QueueStats>>,
}

impl Poller {
    fn error(&self, message: String) {
        tracing::warn!(error = %message, queue = %self.config.queue_url, "queue pump");
        let mut stats = lock(&self.stats);
        stats.errors += 1;
        stats.last_error = Some(message);
    }

    async fn run(self, mut stop: StopSignal) {
        let wait = i32::try_from(self.config.wait.as_secs().clamp(0, 20)).unwrap_or(1);
        while !stop.is_stopped() {
            let receive = self
                .sqs
                .receive_message()
                .queue_url(&self.config.queue_url)
                .max_number_of_messages(self.config.batch_size.clamp(1, 10))
                .wait_time_seconds(wait)
                .message_system_attribute_names(MessageSystemAttributeName::All)
                .message_attribute_names("All")
                .send();
            let received = tokio::select! {
                () = stop.stopped() => return,
                received = receive => received,
            };
            match received {
                Ok(output) => {
                    let messages = output.messages.unwrap_or_default();
                    if !messages.is_empty() {
                        self.deliver(&messages).await;
                    }
                }
                Err(e) => {
                    self.error(format!("ReceiveMessage: {}", DisplayErrorContext(&e)));
                    if stop.sleep(self.config.retry_after).await {
                        return;
                    }
                }
            }
        }
    }

    async fn deliver(&self, messages: &[Message]) {
        {
            let mut stats = lock(&self.stats);
            stats.received += messages.len() as u64;
            stats.invocations += 1;
            for message in messages {
                *stats
                    .by_detail_type
                    .entry(detail_type(message.body()))
                    .or_default() += 1;
            }
        }
        let event = sqs_event(messages, &self.config.queue_arn, &self.config.region);
        let answer = match self.invoker.invoke(&self.config.function, &event).await {
            Ok(answer) => answer,
            Err(e) => {
                lock(&self.stats).failed_invocations += 1;
                self.error(format!(
                    "{} messages stay on the queue: {e}",
                    messages.len()
                ));
                return;
            }
        };
        let ids: Vec<String> = messages
            .iter()
            .filter_map(|m| m.message_id.clone())
            .collect();
        let failed = match settle(&ids, &answer) {
            Settlement::Partial { failed } => failed,
            Settlement::WholeBatch { why } => {
                lock(&self.stats).invalid_reports += 1;
                self.error(format!(
                    "{} answered a batch of {}: {why}; nothing deleted",
                    self.config.function,
                    messages.len()
                ));
                return;
            }
        };
        lock(&self.stats).reported_failures += failed.len() as u64;
        let done: HashMap<String, &str> = messages
            .iter()
            .filter_map(|m| Some((m.message_id.clone()?, m.receipt_handle.as_deref()?)))
            .filter(|(id, _)| !failed.contains(id))
            .collect();
        self.delete(&done).await;
    }

    async fn delete(&self, done: &HashMap<String, &str>) {
        if done.is_empty() {
            return;
        }
        let mut entries = Vec::with_capacity(done.len());
        for (id, receipt) in done {
            match DeleteMessageBatchRequestEntry::builder()
                .id(id)
                .receipt_handle(*receipt)
                .build()
            {
                Ok(entry) => entries.push(entry),
                Err(e) => self.error(format!("DeleteMessageBatch entry {id}: {e}")),
            }
        }
        match self
            .sqs
            .delete_message_batch()
            .queue_url(&self.config.queue_url)
            .set_entries(Some(entries))
            .send()
            .await
        {
            Ok(output) => {
                lock(&self.stats).deleted += output.successful().len() as u64;
                for failed in output.failed() {
                    self.error(format!(
                        "DeleteMessageBatch {}: {} {}",
                        failed.id(),
                        failed.code(),
                        failed.message().unwrap_or_default()
                    ));
                }
            }
            Err(e) => self.error(format!("DeleteMessageBatch: {}", DisplayErrorContext(&e))),
        }
    }
}

/// The `detail-type` of a body that is an EventBridge event, else `-`.
fn detail_type(body: Option<&str>) -> String {
    body.and_then(|b| serde_json::from_str::<Value>(b).ok())
        .and_then(|event| {
            event
                .get("detail-type")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "-".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_lambda::operation::invoke::InvokeOutput;
    use aws_sdk_lambda::primitives::Blob;
    use aws_smithy_mocks::{RuleMode, mock, mock_client};
    use serde_json::json;

    fn ids(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    fn failed(list: &[&str]) -> Settlement {
        Settlement::Partial {
            failed: list.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    #[test]
    fn empty_answers_and_empty_failure_lists_are_success() {
        let batch = ids(&["a", "b"]);
        for answer in [
            Value::Null,
            json!({}),
            json!({"batchItemFailures": null}),
            json!({"batchItemFailures": []}),
        ] {
            assert_eq!(settle(&batch, &answer), failed(&[]), "{answer}");
        }
    }

    #[test]
    fn reported_messages_stay_and_the_rest_is_deleted() {
        let batch = ids(&["a", "b", "c"]);
        let answer =
            json!({"batchItemFailures": [{"itemIdentifier": "b"}, {"itemIdentifier": "c"}]});
        assert_eq!(settle(&batch, &answer), failed(&["b", "c"]));
    }

    #[test]
    fn a_bad_identifier_or_answer_fails_the_whole_batch() {
        let batch = ids(&["a", "b"]);
        for answer in [
            json!({"batchItemFailures": [{"itemIdentifier": ""}]}),
            json!({"batchItemFailures": [{"itemIdentifier": null}]}),
            json!({"batchItemFailures": [{"itemId": "a"}]}),
            json!({"batchItemFailures": [{"itemIdentifier": "z"}]}),
            json!({"batchItemFailures": [{"itemIdentifier": "a"}, {"itemIdentifier": "z"}]}),
            json!({"batchItemFailures": "a"}),
            json!("ok"),
            json!([1]),
        ] {
            assert!(
                matches!(settle(&batch, &answer), Settlement::WholeBatch { .. }),
                "{answer}"
            );
        }
    }

    #[test]
    fn received_messages_become_lambda_sqs_records() {
        let message = Message::builder()
            .message_id("059f36b4-87a3-44ab-83d2-661975830a7d")
            .receipt_handle("handle-1")
            .body(r#"{"detail-type": "Breaker State Changed", "source": "lifeboat"}"#)
            .md5_of_body("543c7440446b131e2d72d9b8f95498d4")
            .attributes(MessageSystemAttributeName::ApproximateReceiveCount, "2")
            .attributes(MessageSystemAttributeName::SentTimestamp, "1796033706412")
            .message_attributes(
                "kind",
                MessageAttributeValue::builder()
                    .data_type("String")
                    .string_value("x")
                    .build()
                    .unwrap(),
            )
            .build();
        let arn = "arn:aws:sqs:us-east-1:123456789012:OffsaleQueue";
        let event = sqs_event(&[message], arn, "us-east-1");
        let record = &event["Records"][0];
        assert_eq!(record["messageId"], "059f36b4-87a3-44ab-83d2-661975830a7d");
        assert_eq!(record["receiptHandle"], "handle-1");
        assert_eq!(record["eventSource"], "aws:sqs");
        assert_eq!(record["eventSourceARN"], arn);
        assert_eq!(record["awsRegion"], "us-east-1");
        assert_eq!(record["attributes"]["ApproximateReceiveCount"], "2");
        assert_eq!(record["attributes"]["SentTimestamp"], "1796033706412");
        assert_eq!(record["messageAttributes"]["kind"]["stringValue"], "x");
        assert_eq!(record["messageAttributes"]["kind"]["dataType"], "String");
        assert_eq!(
            detail_type(record["body"].as_str()),
            "Breaker State Changed"
        );
        // It reads back as Lambda's type, like the fixture of a real batch.
        let back: SqsEvent = serde_json::from_value(event.clone()).unwrap();
        assert_eq!(back.records.len(), 1);
        let fixture: SqsEvent = serde_json::from_str(include_str!(
            "../../../../tests/events/sqs-breaker-state-changed.json"
        ))
        .unwrap();
        let keys = |v: &Value| -> BTreeSet<String> {
            v.as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect::<BTreeSet<_>>()
        };
        let fixture_record = serde_json::to_value(&fixture.records[0]).unwrap();
        assert_eq!(keys(record), keys(&fixture_record));
    }

    /// A function that notes every batch (the records as it got them) and
    /// answers `answer(invocation number, message ids)`; `None` is a
    /// function error.
    fn function(
        seen: &Arc<Mutex<Vec<Vec<Value>>>>,
        answer: impl Fn(usize, &[String]) -> Option<Value> + Send + Sync + 'static,
    ) -> aws_sdk_lambda::Client {
        let seen = Arc::clone(seen);
        let rule = mock!(aws_sdk_lambda::Client::invoke).then_compute_response(move |input| {
            let payload: Value = input
                .payload()
                .and_then(|p| serde_json::from_slice(p.as_ref()).ok())
                .unwrap_or(Value::Null);
            let records = payload["Records"].as_array().cloned().unwrap_or_default();
            let ids: Vec<String> = records
                .iter()
                .filter_map(|r| r["messageId"].as_str().map(str::to_owned))
                .collect();
            let n = {
                let mut seen = lock(&seen);
                seen.push(records);
                seen.len()
            };
            match answer(n, &ids) {
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
        mock_client!(aws_sdk_lambda, RuleMode::MatchAny, [&rule], |c| c
            .retry_config(aws_sdk_lambda::config::retry::RetryConfig::disabled()))
    }

    async fn queue_is_empty(sqs: &aws_sdk_sqs::Client, url: &str) -> bool {
        use aws_sdk_sqs::types::QueueAttributeName as A;
        let attributes = sqs
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(A::ApproximateNumberOfMessages)
            .attribute_names(A::ApproximateNumberOfMessagesNotVisible)
            .send()
            .await
            .unwrap()
            .attributes
            .unwrap_or_default();
        [
            A::ApproximateNumberOfMessages,
            A::ApproximateNumberOfMessagesNotVisible,
        ]
        .iter()
        .all(|a| attributes.get(a).map(String::as_str) == Some("0"))
    }

    /// moto's rule puts the bus's events on the queue; the pump hands them
    /// to the function as Lambda would, deletes what it took, leaves what
    /// it reported (back after the visibility timeout, received again) and
    /// deletes nothing of a batch whose invocation failed.
    #[tokio::test]
    async fn the_pump_plays_the_sqs_mapping_on_a_queue_fed_by_a_rule() {
        use crate::moto::MotoServer;
        use crate::moto::resources;
        use aws_sdk_eventbridge::types::PutEventsRequestEntry;

        let moto = MotoServer::start().await.unwrap();
        let sdk = moto.sdk_config().await;
        let sqs = aws_sdk_sqs::Client::new(&sdk);
        let eventbridge = aws_sdk_eventbridge::Client::new(&sdk);
        resources::create_event_bus(&eventbridge, "bus")
            .await
            .unwrap();
        let queue = resources::create_queue(&sqs, "OffsaleQueue", Some(1))
            .await
            .unwrap();
        resources::create_rule_to_queue(
            &eventbridge,
            "bus",
            "BreakerStateChangedRule",
            r#"{"source": ["lifeboat"], "detail-type": ["Breaker State Changed"]}"#,
            "offsale-queue",
            &queue.arn,
        )
        .await
        .unwrap();
        let entry = |detail_type: &str, version: u64| {
            PutEventsRequestEntry::builder()
                .event_bus_name("bus")
                .source("lifeboat")
                .detail_type(detail_type)
                .detail(json!({"operator": "nordic", "version": version}).to_string())
                .build()
        };
        let put = eventbridge
            .put_events()
            .entries(entry("Breaker State Changed", 7))
            .entries(entry("Trip Requested", 0))
            .entries(entry("Breaker State Changed", 8))
            .send()
            .await
            .unwrap();
        assert_eq!(put.failed_entry_count(), 0);

        // First batch: a function error. Second: the first message
        // reported. After that: success.
        let seen = Arc::new(Mutex::new(Vec::new()));
        let reported = Arc::new(Mutex::new(None::<String>));
        let noted = Arc::clone(&reported);
        let invoke = function(&seen, move |n, ids| match n {
            1 => None,
            2 => {
                let first = ids.first().cloned().unwrap_or_default();
                *lock(&noted) = Some(first.clone());
                Some(json!({"batchItemFailures": [{"itemIdentifier": first}]}))
            }
            _ => Some(json!({"batchItemFailures": []})),
        });
        let mut config = QueuePumpConfig::new(&queue.url, &queue.arn, "offsale-listener");
        config.wait = Duration::from_secs(1);
        let pump = QueuePump::start(sqs.clone(), Invoker::new(invoke), config);

        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let stats = pump.stats();
            if stats.deleted >= 2 && queue_is_empty(&sqs, &queue.url).await {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the queue was not drained: {stats:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let stats = pump.stats();
        pump.stop().await;
        moto.stop().await;

        let batches = lock(&seen).clone();
        let reported = lock(&reported).clone().unwrap();
        assert_eq!(stats.deleted, 2, "{stats:?}");
        assert_eq!(
            (
                stats.failed_invocations,
                stats.reported_failures,
                stats.invalid_reports
            ),
            (1, 1, 0),
            "{stats:?}"
        );
        assert_eq!(stats.errors, 1, "only the failed invocation: {stats:?}");
        assert_eq!(
            stats.by_detail_type.keys().collect::<Vec<_>>(),
            ["Breaker State Changed"],
            "the rule's pattern kept Trip Requested off the queue"
        );
        // The failed batch came back whole, then the reported message once more.
        let all: Vec<&Value> = batches.iter().flatten().collect();
        assert_eq!(all.len(), 2 + 2 + 1, "{batches:?}");
        let last = batches.last().unwrap();
        assert_eq!(last.len(), 1);
        assert_eq!(last[0]["messageId"], json!(reported));
        let receive_count: u32 = last[0]["attributes"]["ApproximateReceiveCount"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(receive_count >= 3, "received three times: {}", last[0]);
        for record in all {
            assert_eq!(record["eventSource"], "aws:sqs");
            assert_eq!(record["eventSourceARN"], json!(queue.arn));
            let body: Value = serde_json::from_str(record["body"].as_str().unwrap()).unwrap();
            assert_eq!(body["detail-type"], "Breaker State Changed");
            assert_eq!(body["source"], "lifeboat");
        }
    }
}
