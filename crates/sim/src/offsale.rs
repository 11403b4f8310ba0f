//! What AWS does around the off-sale listener, in one process: the
//! `Breaker State Changed` rule that puts each change on the listener's
//! queue ([`rule_message`]), and the SQS event source mapping that hands the
//! queue's messages to the listener in batches ([`sqs_event`], [`deliver`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use chrono::{DateTime, TimeDelta, Utc};

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use lifeboat_core::events::{BREAKER_STATE_CHANGED, BreakerStateChanged, SOURCE};
use lifeboat_core::memory::{MemoryQueue, ReceivedMessage};
use offsale_listener::{ListenerError, ListenerReport, OffsaleListener};
use serde_json::Value;

use crate::aws::AwsRuntime;

/// Rule messages on their way to the off-sale queue: EventBridge's
/// delivery to the rule's SQS target, then the pick-up by Lambda's SQS
/// poller (at once in the ideal world).
#[derive(Debug, Default)]
pub struct InTransit {
    aws: Option<Arc<AwsRuntime>>,
    pending: Mutex<Vec<(DateTime<Utc>, String)>>,
}

impl InTransit {
    /// Messages charged as `aws` says (`None`: the ideal world).
    pub fn new(aws: Option<Arc<AwsRuntime>>) -> Self {
        Self {
            aws,
            pending: Mutex::new(Vec::new()),
        }
    }

    fn pending(&self) -> MutexGuard<'_, Vec<(DateTime<Utc>, String)>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Send `body` to `queue` as the rule does at `now`.
    pub fn send(&self, queue: &MemoryQueue, body: String, now: DateTime<Utc>) {
        match &self.aws {
            Some(aws) => {
                let delay =
                    aws.draw(aws.model.eventbridge_delivery) + aws.draw(aws.model.sqs_receive);
                let at = now + TimeDelta::from_std(delay).unwrap_or_default();
                self.pending().push((at, body));
            }
            None => {
                queue.send(body);
            }
        }
    }

    /// Put the messages that have arrived by `now` on `queue`, in the order
    /// they arrive.
    pub fn arrive(&self, queue: &MemoryQueue, now: DateTime<Utc>) {
        let mut pending = self.pending();
        pending.sort_by_key(|(at, _)| *at);
        let arrived = pending.iter().take_while(|(at, _)| *at <= now).count();
        for (_, body) in pending.drain(..arrived) {
            queue.send(body);
        }
    }
}

/// The account the rule's events come from.
const ACCOUNT: &str = "123456789012";
/// The region of the bus, the queue and the mapping.
const REGION: &str = "us-east-1";
/// The sender SQS names for the messages the rule sends.
const SENDER_ID: &str = "AIDAIENQZJOLO23YVJ4VO";

/// The SQS message body the `Breaker State Changed` rule delivers for `change`.
pub fn rule_message(change: &BreakerStateChanged) -> String {
    let mut event = EventBridgeEvent::<Value>::default();
    event.version = Some("0".to_owned());
    event.id = Some(format!("{}-{}", change.operator, change.version));
    event.detail_type = BREAKER_STATE_CHANGED.to_owned();
    event.source = SOURCE.to_owned();
    event.account = Some(ACCOUNT.to_owned());
    event.time = Some(change.at);
    event.region = Some(REGION.to_owned());
    event.resources = Some(Vec::new());
    // Strings, a time and JSON values: neither step can fail.
    event.detail = serde_json::to_value(change).unwrap_or(Value::Null);
    serde_json::to_value(&event)
        .unwrap_or(Value::Null)
        .to_string()
}

/// The batch Lambda's SQS event source mapping would deliver for `messages`.
pub fn sqs_event(messages: &[ReceivedMessage]) -> Value {
    let mut event = SqsEvent::default();
    event.records = messages
        .iter()
        .map(|m| {
            let sent_at = m.sent_at.timestamp_millis().to_string();
            let mut record = SqsMessage::default();
            record.message_id = Some(m.message_id.clone());
            record.receipt_handle = Some(m.receipt_handle.clone());
            record.body = Some(m.body.clone());
            record.attributes = HashMap::from([
                (
                    "ApproximateReceiveCount".to_owned(),
                    m.receive_count.to_string(),
                ),
                ("SentTimestamp".to_owned(), sent_at.clone()),
                ("SenderId".to_owned(), SENDER_ID.to_owned()),
                ("ApproximateFirstReceiveTimestamp".to_owned(), sent_at),
            ]);
            record.md5_of_body = Some(String::new());
            record.event_source = Some("aws:sqs".to_owned());
            record.event_source_arn = Some(MemoryQueue::ARN.to_owned());
            record.aws_region = Some(REGION.to_owned());
            record
        })
        .collect();
    serde_json::to_value(&event).unwrap_or(Value::Null)
}

/// One round of the SQS event source mapping on a [`MemoryQueue`]: receive up
/// to `max` visible messages, hand them to `listener` as one batch, and delete
/// those not reported as failures. `None` when no message was visible.
pub async fn deliver(
    listener: &OffsaleListener,
    queue: &MemoryQueue,
    max: usize,
) -> Result<Option<ListenerReport>, ListenerError> {
    let received = queue.receive(max);
    if received.is_empty() {
        return Ok(None);
    }
    let report = listener.handle(&sqs_event(&received)).await?;
    let failed: HashSet<&str> = report
        .response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    for m in &received {
        if !failed.contains(m.message_id.as_str()) {
            queue.delete(&m.receipt_handle);
        }
    }
    Ok(Some(report))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::DateTime;
    use lifeboat_core::events::SCHEMA_VERSION;
    use lifeboat_core::sale::{OnSaleAt, SaleChange};
    use lifeboat_core::{BreakerState, OperatorId};

    fn change() -> BreakerStateChanged {
        BreakerStateChanged {
            schema_version: SCHEMA_VERSION,
            operator: OperatorId::new("nordic").unwrap(),
            from: BreakerState::Closed,
            to: BreakerState::Open,
            version: 7,
            reason: "test".into(),
            at: DateTime::from_timestamp(1_796_032_800, 0).unwrap(),
        }
    }

    #[test]
    fn the_rule_message_is_the_event_the_rule_delivers() {
        // The same bytes as the event written out by hand.
        assert_eq!(
            rule_message(&change()),
            serde_json::json!({
                "version": "0",
                "id": "nordic-7",
                "detail-type": "Breaker State Changed",
                "source": "lifeboat",
                "account": "123456789012",
                "time": "2026-11-30T10:00:00Z",
                "region": "us-east-1",
                "resources": [],
                "detail": serde_json::to_value(change()).unwrap(),
            })
            .to_string()
        );
    }

    #[test]
    fn the_listener_reads_what_the_mapping_delivers() {
        let clock = std::sync::Arc::new(lifeboat_core::ManualClock::new(change().at));
        let queue = MemoryQueue::new(clock, std::time::Duration::from_secs(30));
        queue.send(rule_message(&change()));
        let event = sqs_event(&queue.receive(10));
        let record = &event["Records"][0];
        assert_eq!(record["eventSourceARN"], MemoryQueue::ARN);
        assert_eq!(record["attributes"]["ApproximateReceiveCount"], "1");
        assert_eq!(
            offsale_listener::read_message(record, OnSaleAt::HalfOpen, change().at),
            Ok(SaleChange::of(&change(), OnSaleAt::HalfOpen))
        );
    }
}
