//! An EventBridge rule targeting a Lambda, played through SQS.
//!
//! moto refuses `PutEvents` as a whole (HTTP 500) when a matching rule
//! targets a Lambda, so the harness gives such a rule an SQS queue as its
//! target instead and [`BusDrain`] does the Lambda target's part: it receives
//! the queue's messages (each body is the EventBridge event as the target
//! would get it), invokes the function with the body, and deletes the message
//! once the invocation succeeded. A failed invocation is tried again after
//! `retry_after`, up to `max_attempts` deliveries in all, like the rule's
//! `RetryPolicy`.
//!
//! moto leaves `account` out of the events it delivers (EventBridge always
//! sends it); the drain adds it, so the function sees EventBridge's shape.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::{Message, MessageSystemAttributeName};
use serde_json::Value;

use super::task::{StopSignal, TaskHandle};
use super::{Invoker, lock};

/// How a [`BusDrain`] runs.
#[derive(Debug, Clone)]
pub struct BusDrainConfig {
    /// The queue the rule targets.
    pub queue_url: String,
    /// The function the rule stands for (its binary name).
    pub function: String,
    /// Long-poll wait of each receive (whole seconds, at most 20).
    pub wait: Duration,
    /// How soon a message whose invocation failed is delivered again.
    pub retry_after: Duration,
    /// Deliveries of one message before it is dropped (the rule's retry
    /// policy: 1 + MaximumRetryAttempts).
    pub max_attempts: u32,
    /// Filled into events that lack `account`.
    pub account: String,
}

impl BusDrainConfig {
    pub fn new(queue_url: impl Into<String>, function: impl Into<String>) -> Self {
        Self {
            queue_url: queue_url.into(),
            function: function.into(),
            wait: Duration::from_secs(1),
            retry_after: Duration::from_secs(1),
            max_attempts: 11,
            account: crate::moto::ACCOUNT_ID.to_owned(),
        }
    }
}

/// What a [`BusDrain`] has done so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainStats {
    pub received: u64,
    /// Successful invocations, by the event's `detail-type`.
    pub invoked: BTreeMap<String, u64>,
    pub failed_invocations: u64,
    /// Messages dropped after `max_attempts` deliveries.
    pub dropped: u64,
    /// Messages whose body was not a JSON event (deleted).
    pub unreadable: u64,
    pub errors: u64,
    pub last_error: Option<String>,
}

impl DrainStats {
    pub fn invoked_total(&self) -> u64 {
        self.invoked.values().sum()
    }
}

/// Drains one queue into one function; see the module docs.
#[derive(Debug)]
pub struct BusDrain {
    task: TaskHandle,
    stats: Arc<Mutex<DrainStats>>,
}

impl BusDrain {
    pub fn start(sqs: aws_sdk_sqs::Client, invoker: Invoker, config: BusDrainConfig) -> Self {
        let stats = Arc::new(Mutex::new(DrainStats::default()));
        let drain = Drain {
            sqs,
            invoker,
            config,
            stats: Arc::clone(&stats),
        };
        Self {
            task: TaskHandle::spawn(move |stop| drain.run(stop)),
            stats,
        }
    }

    pub fn stats(&self) -> DrainStats {
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

/// The event a Lambda target receives, from a message body.
pub fn event_from_body(body: &str, account: &str) -> Option<Value> {
    let mut event: Value = serde_json::from_str(body).ok()?;
    let map = event.as_object_mut()?;
    map.entry("account")
        .or_insert_with(|| Value::String(account.to_owned()));
    Some(event)
}

struct Drain {
    sqs: aws_sdk_sqs::Client,
    invoker: Invoker,
    config: BusDrainConfig,
    stats: Arc<Mutex<DrainStats>>,
}

impl Drain {
    fn error(&self, message: String) {
        tracing::warn!(error = %message, queue = %self.config.queue_url, "bus drain");
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
                .max_number_of_messages(10)
                .wait_time_seconds(wait)
                .visibility_timeout(30)
                .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
                .send();
            let received = tokio::select! {
                () = stop.stopped() => return,
                received = receive => received,
            };
            let messages = match received {
                Ok(output) => output.messages.unwrap_or_default(),
                Err(e) => {
                    self.error(format!("ReceiveMessage: {}", DisplayErrorContext(&e)));
                    if stop.sleep(self.config.retry_after).await {
                        return;
                    }
                    continue;
                }
            };
            for message in messages {
                self.handle(message).await;
            }
        }
    }

    async fn handle(&self, message: Message) {
        lock(&self.stats).received += 1;
        let Some(receipt) = message.receipt_handle() else {
            return;
        };
        let Some(event) = message
            .body()
            .and_then(|b| event_from_body(b, &self.config.account))
        else {
            lock(&self.stats).unreadable += 1;
            self.error(format!(
                "message {} is not an event; deleted",
                message.message_id().unwrap_or("-")
            ));
            self.delete(receipt).await;
            return;
        };
        let detail_type = event
            .get("detail-type")
            .and_then(Value::as_str)
            .unwrap_or("-")
            .to_owned();
        match self.invoker.invoke(&self.config.function, &event).await {
            Ok(_) => {
                *lock(&self.stats).invoked.entry(detail_type).or_default() += 1;
                self.delete(receipt).await;
            }
            Err(e) => {
                let deliveries = message
                    .attributes()
                    .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
                    .and_then(|n| n.parse::<u32>().ok())
                    .unwrap_or(1);
                lock(&self.stats).failed_invocations += 1;
                self.error(format!("{detail_type} (delivery {deliveries}): {e}"));
                if deliveries >= self.config.max_attempts {
                    lock(&self.stats).dropped += 1;
                    self.delete(receipt).await;
                } else {
                    let after = i32::try_from(self.config.retry_after.as_secs()).unwrap_or(1);
                    if let Err(e) = self
                        .sqs
                        .change_message_visibility()
                        .queue_url(&self.config.queue_url)
                        .receipt_handle(receipt)
                        .visibility_timeout(after)
                        .send()
                        .await
                    {
                        self.error(format!(
                            "ChangeMessageVisibility: {}",
                            DisplayErrorContext(&e)
                        ));
                    }
                }
            }
        }
    }

    async fn delete(&self, receipt: &str) {
        if let Err(e) = self
            .sqs
            .delete_message()
            .queue_url(&self.config.queue_url)
            .receipt_handle(receipt)
            .send()
            .await
        {
            self.error(format!("DeleteMessage: {}", DisplayErrorContext(&e)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bodies_become_eventbridge_events_with_an_account() {
        // A body as moto delivers it (no "account").
        let body = r#"{"id": "0dae5fe6-4c6f-4a7d-9314-5cd430abba3f", "time": "2026-11-30T04:47:48Z", "version": "0", "detail-type": "Trip Requested", "source": "lifeboat", "region": "us-east-1", "resources": [], "detail": {"operator": "nordic"}}"#;
        let event = event_from_body(body, "123456789012").unwrap();
        assert_eq!(event["account"], json!("123456789012"));
        assert_eq!(event["detail"]["operator"], json!("nordic"));
        let kept = event_from_body(r#"{"account": "999"}"#, "123456789012").unwrap();
        assert_eq!(kept["account"], json!("999"));
        assert!(event_from_body("not json", "1").is_none());
        assert!(event_from_body("[1]", "1").is_none());
    }
}
