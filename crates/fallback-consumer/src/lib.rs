//! The fallback consumer: attached to the Requests stream while the breaker is
//! open. It calls nothing. Each request gets a `breaker_open` outcome at once
//! (so the caller stops waiting and answers from the last good data) and an
//! `Operator Request Failed` event; the events of a batch are published
//! together, ten to a `PutEvents` call.
//!
//! * this file: [`FallbackConsumer`], the handler, and its tests on the
//!   in-memory stores;
//! * `main.rs`: the Lambda function, built once from its environment.

use std::collections::BTreeMap;
use std::sync::Arc;

use aws_lambda_events::event::streams::DynamoDbEventResponse;
use futures::StreamExt;
use lambda_runtime::Diagnostic;
use lifeboat_core::OperatorId;
use lifeboat_core::invocation::NotABatch;
use lifeboat_core::metrics::{MetricSet, StdoutMetrics, names};
use lifeboat_core::ports::{Clock, EventPublisher, MetricsSink, RequestStore};
use lifeboat_core::request::{FailureReason, Outcome};
use lifeboat_core::watched::watch;
use lifeboat_stream::{batch_response, failure_event, publish_all, read_batch};
use serde_json::Value;

/// The name this function writes into the outcomes it produces.
pub const NAME: &str = "fallback-consumer";

/// Outcome writes in flight at once.
const WRITE_CONCURRENCY: usize = 16;

/// Why a whole invocation failed (records never fail the invocation).
#[derive(Debug, thiserror::Error)]
pub enum FallbackError {
    #[error(transparent)]
    NotABatch(#[from] NotABatch),
}

impl From<FallbackError> for Diagnostic {
    fn from(e: FallbackError) -> Self {
        Diagnostic {
            error_type: NotABatch::ERROR_TYPE.into(),
            error_message: e.to_string(),
        }
    }
}

/// Everything the handler needs, built once per Lambda instance.
pub struct FallbackConsumer {
    pub requests: Arc<dyn RequestStore>,
    pub events: Arc<dyn EventPublisher>,
    pub clock: Arc<dyn Clock>,
    /// Requests failed fast, per operator, as EMF lines.
    pub metrics: Arc<dyn MetricsSink>,
}

/// What one batch did.
#[derive(Debug, Default)]
pub struct FallbackReport {
    pub response: DynamoDbEventResponse,
    pub requests: usize,
    pub outcomes_written: usize,
    pub already_answered: usize,
    pub quarantined: usize,
    pub skipped: usize,
    pub events_not_published: usize,
}

impl FallbackConsumer {
    /// Build the consumer on AWS from `REQUESTS_TABLE` and `EVENT_BUS_NAME`.
    pub fn from_env(
        env: &lifeboat_aws::Env,
        clients: &lifeboat_aws::Clients,
    ) -> Result<Self, lifeboat_aws::ConfigError> {
        let metrics: Arc<dyn MetricsSink> = Arc::new(StdoutMetrics::from_env());
        let clock: Arc<dyn lifeboat_core::ports::Clock> = Arc::new(lifeboat_core::SystemClock);
        Ok(Self {
            requests: watch(Arc::new(clients.request_store(env)?), &metrics, &clock),
            events: watch(Arc::new(clients.publisher(env)?), &metrics, &clock),
            clock,
            metrics,
        })
    }

    /// Handle one stream batch.
    pub async fn handle(&self, payload: &Value) -> Result<FallbackReport, FallbackError> {
        let batch = read_batch(payload, self.requests.as_ref(), self.clock.now(), NAME)
            .await
            .map_err(NotABatch)?;
        let mut report = FallbackReport {
            skipped: batch.skipped,
            quarantined: batch.quarantined,
            ..FallbackReport::default()
        };
        let mut events = batch.events;
        let requests = batch.requests;
        report.requests = requests.len();
        let written: Vec<_> = futures::stream::iter(requests)
            .map(|(sequence, request)| async move {
                let at = self.clock.now();
                let detail = "breaker open: the operator was not called";
                let outcome = Outcome::failed(FailureReason::BreakerOpen, detail, at, NAME);
                let result =
                    lifeboat_stream::write_outcome(self.requests.as_ref(), &request, &outcome)
                        .await;
                let event = matches!(result, Ok(true))
                    .then(|| failure_event(&request, FailureReason::BreakerOpen, detail, at));
                (sequence, result, event, request.operator)
            })
            .buffer_unordered(WRITE_CONCURRENCY)
            .collect()
            .await;
        let mut failed = Vec::new();
        let mut failed_fast: BTreeMap<OperatorId, u64> = BTreeMap::new();
        for (sequence, result, event, operator) in written {
            match result {
                Ok(true) => {
                    report.outcomes_written += 1;
                    *failed_fast.entry(operator).or_default() += 1;
                }
                Ok(false) => report.already_answered += 1,
                Err(e) => {
                    tracing::error!(error = %e, sequence = sequence.as_deref().unwrap_or("-"), "outcome not written; the record will come back");
                    failed.extend(sequence);
                }
            }
            events.extend(event);
        }
        report.events_not_published = publish_all(self.events.as_ref(), &events).await;
        report.response = batch_response(failed);
        let sets: Vec<MetricSet> = failed_fast
            .iter()
            .map(|(operator, n)| {
                MetricSet::new()
                    .dimension("Operator", operator.as_str())
                    .count(names::FAILED_FAST, *n)
            })
            .collect();
        self.metrics.emit(&sets, self.clock.now());
        tracing::info!(
            requests = report.requests,
            outcomes_written = report.outcomes_written,
            already_answered = report.already_answered,
            quarantined = report.quarantined,
            retried = report.response.batch_item_failures.len(),
            "fallback batch done"
        );
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::DateTime;
    use lifeboat_core::ManualClock;
    use lifeboat_core::events::LifeboatEvent;
    use lifeboat_core::memory::{MemoryEventBus, MemoryRequestStore};
    use lifeboat_stream::{StreamItem, classify, records};
    use serde_json::json;

    fn consumer() -> (
        FallbackConsumer,
        Arc<MemoryRequestStore>,
        Arc<MemoryEventBus>,
    ) {
        let requests = Arc::new(MemoryRequestStore::new());
        let events = Arc::new(MemoryEventBus::new());
        let clock = Arc::new(ManualClock::new(
            DateTime::from_timestamp(1_796_032_800, 0).unwrap(),
        ));
        (
            FallbackConsumer {
                requests: requests.clone(),
                events: events.clone(),
                clock,
                metrics: Arc::new(lifeboat_core::memory::MemoryMetrics::new()),
            },
            requests,
            events,
        )
    }

    fn fixture(name: &str) -> Value {
        let path = format!("{}/../../tests/events/{name}", env!("CARGO_MANIFEST_DIR"));
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
    }

    async fn store_requests_of(batch: &Value, requests: &MemoryRequestStore) {
        for record in records(batch).unwrap() {
            if let StreamItem::Request { request, .. } = classify(record) {
                requests.put_request(&request).await.unwrap();
            }
        }
    }

    #[tokio::test]
    async fn every_request_fails_fast_with_one_event() {
        let (consumer, requests, events) = consumer();
        let batch = fixture("dynamodb-insert-requests.json");
        store_requests_of(&batch, &requests).await;
        let report = consumer.handle(&batch).await.unwrap();
        assert!(report.requests > 0);
        assert_eq!(report.outcomes_written, report.requests);
        assert!(report.response.batch_item_failures.is_empty());
        let counts = requests.counts();
        assert_eq!(counts.with_outcome, counts.total);
        let failures: Vec<_> = events
            .events()
            .into_iter()
            .filter_map(|e| match e {
                LifeboatEvent::OperatorRequestFailed(f) => Some(f),
                _ => None,
            })
            .collect();
        assert_eq!(failures.len(), report.requests);
        assert!(
            failures
                .iter()
                .all(|f| f.reason == FailureReason::BreakerOpen)
        );

        // The same batch again (a retry) writes nothing and publishes nothing.
        let again = consumer.handle(&batch).await.unwrap();
        assert_eq!(again.outcomes_written, 0);
        assert_eq!(again.already_answered, report.requests);
        assert_eq!(events.events().len(), failures.len());
    }

    #[tokio::test]
    async fn foreign_and_malformed_records_do_not_fail_the_batch() {
        let (consumer, requests, events) = consumer();
        let batch = fixture("dynamodb-foreign-and-malformed.json");
        store_requests_of(&batch, &requests).await;
        let report = consumer.handle(&batch).await.unwrap();
        assert!(report.quarantined >= 2, "{report:?}");
        assert!(report.response.batch_item_failures.is_empty());
        let malformed = events
            .events()
            .into_iter()
            .filter(|e| matches!(e, LifeboatEvent::OperatorRequestFailed(f) if f.reason == FailureReason::Malformed))
            .count();
        assert_eq!(malformed, report.quarantined);
    }

    #[tokio::test]
    async fn a_payload_that_is_not_a_batch_is_a_clear_error() {
        let (consumer, _, _) = consumer();
        let err = consumer
            .handle(&json!({"hello": "world"}))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("Records"));
    }
}
