//! Publishing lifeboat's events on its EventBridge bus.
//!
//! `PutEvents` answers 200 even when it refused some entries: the refused ones
//! carry an error code and `FailedEntryCount` says how many. The publisher
//! reads every entry's result, retries only the refused ones (and any call that
//! failed outright), and reports what still failed by the index of the event in
//! the slice it was given.

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_eventbridge::primitives::DateTime as AwsDateTime;
use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use chrono::{DateTime, Utc};
use lifeboat_core::events::{LifeboatEvent, SOURCE};
use lifeboat_core::ports::{EventPublisher, PublishError};

use crate::error::describe;

/// Entries per `PutEvents` call: the API's limit.
pub const MAX_ENTRIES_PER_CALL: usize = 10;

/// Attempts per event in all, the first one included.
pub const ATTEMPTS: usize = 3;

/// Pauses before the second and third attempt.
const PAUSES: [Duration; ATTEMPTS - 1] = [Duration::from_millis(50), Duration::from_millis(100)];

/// When the event happened, as EventBridge's `Time`.
fn event_time(event: &LifeboatEvent) -> DateTime<Utc> {
    match event {
        LifeboatEvent::BreakerStateChanged(e) => e.at,
        LifeboatEvent::OperatorRequestFailed(e) => e.at,
        LifeboatEvent::TripRequested(e) => e.at,
        LifeboatEvent::TrialsPassed(e) => e.at,
        LifeboatEvent::SaleSwitchWriteFailed(e) => e.at,
        LifeboatEvent::SelfFaultSuspected(e) => e.at,
        LifeboatEvent::OrderMoved(e) => e.at,
    }
}

/// Why one event is not published yet.
#[derive(Debug, Clone)]
enum Failure {
    /// The bus refused the entry.
    Refused(String),
    /// The call carrying it failed.
    Transport(String),
}

impl Failure {
    fn reason(self) -> String {
        match self {
            Failure::Refused(r) | Failure::Transport(r) => r,
        }
    }
}

/// [`EventPublisher`] on an EventBridge bus.
#[derive(Debug, Clone)]
pub struct EventBridgePublisher {
    client: aws_sdk_eventbridge::Client,
    bus_name: String,
}

impl EventBridgePublisher {
    /// `bus_name` is the bus's name or ARN.
    pub fn new(client: aws_sdk_eventbridge::Client, bus_name: impl Into<String>) -> Self {
        Self {
            client,
            bus_name: bus_name.into(),
        }
    }

    pub fn bus_name(&self) -> &str {
        &self.bus_name
    }

    fn entry(&self, event: &LifeboatEvent) -> PutEventsRequestEntry {
        PutEventsRequestEntry::builder()
            .source(SOURCE)
            .detail_type(event.detail_type())
            .detail(event.detail_json())
            .event_bus_name(&self.bus_name)
            .time(AwsDateTime::from_millis(
                event_time(event).timestamp_millis(),
            ))
            .build()
    }

    /// Send `indexes` (at most [`MAX_ENTRIES_PER_CALL`]) in one call and return
    /// those that were not published, with why.
    async fn put(&self, events: &[LifeboatEvent], indexes: &[usize]) -> Vec<(usize, Failure)> {
        let entries = indexes
            .iter()
            .filter_map(|i| events.get(*i))
            .map(|e| self.entry(e))
            .collect();
        let output = match self
            .client
            .put_events()
            .set_entries(Some(entries))
            .send()
            .await
        {
            Ok(output) => output,
            Err(e) => {
                let reason = describe(&format!("PutEvents to {}", self.bus_name), &e);
                return indexes
                    .iter()
                    .map(|i| (*i, Failure::Transport(reason.clone())))
                    .collect();
            }
        };
        // Result entries match request entries by position. A missing result
        // entry is treated as refused: better a duplicate than a lost event.
        let results = output.entries();
        let failed: Vec<(usize, Failure)> = indexes
            .iter()
            .enumerate()
            .filter_map(|(position, index)| match results.get(position) {
                Some(result) if result.error_code().is_none() => None,
                Some(result) => Some((
                    *index,
                    Failure::Refused(format!(
                        "{}: {}",
                        result.error_code().unwrap_or("error"),
                        result.error_message().unwrap_or("no message")
                    )),
                )),
                None => Some((
                    *index,
                    Failure::Refused("PutEvents returned no result for the entry".into()),
                )),
            })
            .collect();
        let counted = usize::try_from(output.failed_entry_count()).unwrap_or(0);
        if counted != failed.len() {
            tracing::warn!(
                failed_entry_count = counted,
                refused_entries = failed.len(),
                "PutEvents FailedEntryCount disagrees with its entries; trusting the entries"
            );
        }
        failed
    }
}

#[async_trait]
impl EventPublisher for EventBridgePublisher {
    async fn publish(&self, events: &[LifeboatEvent]) -> Result<(), PublishError> {
        let mut pending: Vec<usize> = (0..events.len()).collect();
        let mut failed: Vec<(usize, Failure)> = Vec::new();
        for attempt in 0..ATTEMPTS {
            if pending.is_empty() {
                break;
            }
            if attempt > 0 {
                let pause = PAUSES.get(attempt - 1).copied().unwrap_or_default();
                tokio::time::sleep(pause).await;
            }
            failed.clear();
            for chunk in pending.chunks(MAX_ENTRIES_PER_CALL) {
                failed.extend(self.put(events, chunk).await);
            }
            pending = failed.iter().map(|(i, _)| *i).collect();
            if !pending.is_empty() {
                tracing::warn!(
                    attempt = attempt + 1,
                    not_published = pending.len(),
                    total = events.len(),
                    "some events not published"
                );
            }
        }
        if failed.is_empty() {
            return Ok(());
        }
        let total = events.len();
        let all_transport = failed
            .iter()
            .all(|(_, f)| matches!(f, Failure::Transport(_)));
        if failed.len() == total && all_transport {
            // Nothing got through and the bus never answered: the bus is down.
            let reason = failed
                .into_iter()
                .next()
                .map(|(_, f)| f.reason())
                .unwrap_or_default();
            return Err(PublishError::Unavailable(reason));
        }
        failed.sort_by_key(|(i, _)| *i);
        Err(PublishError::Partial {
            total,
            failed: failed.into_iter().map(|(i, f)| (i, f.reason())).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_eventbridge::Client;
    use aws_sdk_eventbridge::operation::put_events::{PutEventsError, PutEventsOutput};
    use aws_sdk_eventbridge::types::PutEventsResultEntry;
    use aws_sdk_eventbridge::types::error::InternalException;
    use aws_smithy_mocks::{RuleMode, mock, mock_client};
    use lifeboat_core::breaker::BreakerState;
    use lifeboat_core::events::{BreakerStateChanged, SCHEMA_VERSION};
    use lifeboat_core::operator::OperatorId;

    fn events(count: u64) -> Vec<LifeboatEvent> {
        (0..count)
            .map(|version| {
                LifeboatEvent::BreakerStateChanged(BreakerStateChanged {
                    schema_version: SCHEMA_VERSION,
                    operator: OperatorId::new("nordic").unwrap(),
                    from: BreakerState::Closed,
                    to: BreakerState::Open,
                    version,
                    reason: "test".into(),
                    at: DateTime::from_timestamp(1_700_000_000, 0).unwrap(),
                })
            })
            .collect()
    }

    fn ok_entry(n: usize) -> PutEventsResultEntry {
        PutEventsResultEntry::builder()
            .event_id(format!("id-{n}"))
            .build()
    }

    fn refused_entry() -> PutEventsResultEntry {
        PutEventsResultEntry::builder()
            .error_code("InternalFailure")
            .error_message("try again")
            .build()
    }

    /// An answer for every entry of the call, refusing those whose `version`
    /// is in `refuse`.
    fn answer(
        input: &aws_sdk_eventbridge::operation::put_events::PutEventsInput,
        refuse: &[u64],
    ) -> PutEventsOutput {
        let mut output = PutEventsOutput::builder();
        let mut failed = 0;
        for (n, entry) in input.entries().iter().enumerate() {
            let detail: serde_json::Value =
                serde_json::from_str(entry.detail().unwrap_or("{}")).unwrap();
            let version = detail["version"].as_u64().unwrap();
            if refuse.contains(&version) {
                failed += 1;
                output = output.entries(refused_entry());
            } else {
                output = output.entries(ok_entry(n));
            }
        }
        output.failed_entry_count(failed).build()
    }

    fn versions(input: &aws_sdk_eventbridge::operation::put_events::PutEventsInput) -> Vec<u64> {
        input
            .entries()
            .iter()
            .map(|e| serde_json::from_str::<serde_json::Value>(e.detail().unwrap_or("{}")).unwrap()["version"].as_u64().unwrap())
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn entries_are_sent_ten_at_a_time_with_every_field() {
        let put = mock!(Client::put_events)
            .match_requests(|input| {
                let entries = input.entries();
                entries.len() <= MAX_ENTRIES_PER_CALL
                    && entries.iter().all(|e| {
                        e.source() == Some("lifeboat")
                            && e.detail_type() == Some("Breaker State Changed")
                            && e.event_bus_name() == Some("lifeboat-bus")
                            && e.time().map(|t| t.secs()) == Some(1_700_000_000)
                    })
            })
            .then_compute_output(|input| answer(input, &[]));
        let client = mock_client!(aws_sdk_eventbridge, RuleMode::MatchAny, [&put]);
        let publisher = EventBridgePublisher::new(client, "lifeboat-bus");
        publisher.publish(&events(25)).await.unwrap();
        assert_eq!(put.num_calls(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn only_refused_entries_are_retried() {
        // First call: entry 3 of 5 refused (FailedEntryCount 1); the retry
        // carries that entry alone and succeeds.
        let first = mock!(Client::put_events)
            .match_requests(|input| input.entries().len() == 5)
            .then_compute_output(|input| answer(input, &[3]));
        let retry = mock!(Client::put_events)
            .match_requests(|input| versions(input) == vec![3])
            .then_compute_output(|input| answer(input, &[]));
        let client = mock_client!(aws_sdk_eventbridge, RuleMode::Sequential, [&first, &retry]);
        let publisher = EventBridgePublisher::new(client, "lifeboat-bus");
        publisher.publish(&events(5)).await.unwrap();
        assert_eq!((first.num_calls(), retry.num_calls()), (1, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn persistent_refusals_are_reported_by_index() {
        // Entries 2 and 11 (second call) are refused every time.
        let put = mock!(Client::put_events).then_compute_output(|input| answer(input, &[2, 11]));
        let client = mock_client!(aws_sdk_eventbridge, RuleMode::MatchAny, [&put]);
        let publisher = EventBridgePublisher::new(client, "lifeboat-bus");
        let started = tokio::time::Instant::now();
        let err = publisher.publish(&events(12)).await.unwrap_err();
        match &err {
            PublishError::Partial { total, failed } => {
                assert_eq!(*total, 12);
                assert_eq!(
                    failed.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
                    vec![2, 11]
                );
                assert!(failed[0].1.contains("InternalFailure"), "{}", failed[0].1);
            }
            other => panic!("expected Partial, got {other:?}"),
        }
        assert_eq!(err.failed_indexes(12), vec![2, 11]);
        // Two calls for the first attempt, then one per retry (both refused
        // entries fit one call): 3 attempts in all, with growing pauses.
        assert_eq!(put.num_calls(), 4);
        assert_eq!(started.elapsed(), Duration::from_millis(150));
    }

    #[tokio::test(start_paused = true)]
    async fn a_bus_that_never_answers_is_unavailable() {
        let down = mock!(Client::put_events).then_error(|| {
            PutEventsError::InternalException(InternalException::builder().message("down").build())
        });
        let client = mock_client!(aws_sdk_eventbridge, RuleMode::MatchAny, [&down]);
        let publisher = EventBridgePublisher::new(client, "lifeboat-bus");
        let err = publisher.publish(&events(3)).await.unwrap_err();
        assert!(
            matches!(&err, PublishError::Unavailable(m) if m.contains("InternalException")),
            "{err}"
        );
        assert_eq!(err.failed_indexes(3), vec![0, 1, 2]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_call_among_good_ones_is_partial() {
        // The first call (entries 0..10) goes through; the second (10, 11)
        // fails every time.
        let good = mock!(Client::put_events)
            .match_requests(|input| input.entries().len() == 10)
            .then_compute_output(|input| answer(input, &[]));
        let bad = mock!(Client::put_events)
            .match_requests(|input| input.entries().len() == 2)
            .then_error(|| {
                PutEventsError::InternalException(
                    InternalException::builder().message("down").build(),
                )
            });
        let client = mock_client!(aws_sdk_eventbridge, RuleMode::MatchAny, [&good, &bad]);
        let publisher = EventBridgePublisher::new(client, "lifeboat-bus");
        let err = publisher.publish(&events(12)).await.unwrap_err();
        assert_eq!(err.failed_indexes(12), vec![10, 11]);
    }

    #[tokio::test]
    async fn nothing_to_publish_is_no_call() {
        let put = mock!(Client::put_events).then_compute_output(|input| answer(input, &[]));
        let client = mock_client!(aws_sdk_eventbridge, RuleMode::MatchAny, [&put]);
        EventBridgePublisher::new(client, "b")
            .publish(&[])
            .await
            .unwrap();
        assert_eq!(put.num_calls(), 0);
    }
}
