use super::*;
use chrono::TimeDelta;
use lifeboat_core::window::Bucket;
use std::sync::Arc;

use super::change::{ChangeItem, change_from_item};
use super::item::BreakerItem;

fn record() -> BreakerRecord {
    let mut r = BreakerRecord::initial(
        OperatorId::new("nordic").unwrap(),
        DateTime::from_timestamp(1_700_000_000, 0).unwrap(),
    );
    r.state = BreakerState::Open;
    r.previous = Some(BreakerState::HalfOpen);
    r.version = 4;
    r.open_until = DateTime::from_timestamp(1_700_000_030, 0);
    r.failed_trials = 1;
    r.announced_version = 3;
    r
}

#[test]
fn breaker_items_round_trip() {
    let item: HashMap<String, AttributeValue> =
        serde_dynamo::to_item(BreakerItem::from(&record())).unwrap();
    assert_eq!(item.get("item"), Some(&s("breaker")));
    assert_eq!(item.get("state"), Some(&s("open")));
    assert_eq!(item.get("version"), Some(&n(4)));
    assert_eq!(breaker_from_item(item).unwrap(), record());

    let mut closed = record();
    closed.open_until = None;
    closed.previous = None;
    let item: HashMap<String, AttributeValue> =
        serde_dynamo::to_item(BreakerItem::from(&closed)).unwrap();
    assert!(!item.contains_key("open_until"));
    assert_eq!(breaker_from_item(item).unwrap(), closed);
}

#[test]
fn missing_counters_are_corrupt_not_zero() {
    let mut item: HashMap<String, AttributeValue> =
        serde_dynamo::to_item(BreakerItem::from(&record())).unwrap();
    item.remove("trials_claimed");
    assert!(
        matches!(breaker_from_item(item), Err(StoreError::Corrupt(m)) if m.contains("trials_claimed"))
    );

    let mut item: HashMap<String, AttributeValue> =
        serde_dynamo::to_item(BreakerItem::from(&record())).unwrap();
    item.insert("state".into(), s("ajar"));
    assert!(matches!(
        breaker_from_item(item),
        Err(StoreError::Corrupt(_))
    ));
}

fn at(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_700_000_000 + secs, 0).unwrap()
}

fn bucket(secs: i64, successes: u32, failures: u32, timeouts: u32) -> Bucket {
    Bucket {
        start: at(secs),
        counts: lifeboat_core::window::CallCounts {
            calls: successes + failures + timeouts,
            successes,
            failures,
            timeouts,
            slow: 0,
            refusals: 0,
        },
    }
}

#[test]
fn change_items_round_trip_under_their_version_key() {
    let change = BreakerChange::of(&record(), Some(at(-6)));
    let item: HashMap<String, AttributeValue> =
        serde_dynamo::to_item(ChangeItem::from(&change)).unwrap();
    assert_eq!(item.get("item"), Some(&s("change#00000000000000000004")));
    assert_eq!(item.get("from"), Some(&s("half_open")));
    assert_eq!(item.get("to"), Some(&s("open")));
    assert_eq!(
        item.get("expires_at"),
        Some(&n(1_700_000_000 + 90 * 86_400))
    );
    assert_eq!(change_from_item(item).unwrap(), change);
    assert!(change_key(9) < change_key(10));
    assert!(!change.is_trip(), "a reopen from half-open is not a trip");

    let mut item: HashMap<String, AttributeValue> =
        serde_dynamo::to_item(ChangeItem::from(&change)).unwrap();
    item.insert("item".into(), s("change#7"));
    let err = change_from_item(item).unwrap_err();
    assert!(
        matches!(&err, StoreError::Corrupt(m) if m.contains("change#7") && m.contains("version 4")),
        "{err}"
    );
    let mut item: HashMap<String, AttributeValue> =
        serde_dynamo::to_item(ChangeItem::from(&change)).unwrap();
    item.remove("at");
    assert!(
        matches!(change_from_item(item), Err(StoreError::Corrupt(m)) if m.contains("change#00000000000000000004"))
    );
}

#[test]
fn the_first_failure_is_the_start_of_the_failing_run_before_the_trip() {
    // Healthy, then failing from +3 s, tripped at +8.5 s; a bucket after
    // the trip is not looked at.
    let buckets = [
        bucket(0, 10, 0, 0),
        bucket(1, 9, 1, 0),
        bucket(2, 10, 0, 0),
        bucket(3, 2, 0, 3),
        bucket(5, 0, 0, 4),
        bucket(6, 0, 0, 0),
        bucket(8, 0, 2, 5),
        bucket(9, 0, 0, 9),
    ];
    let trip = at(8) + TimeDelta::milliseconds(500);
    assert_eq!(first_failure(&buckets, trip), Some(at(3)));
    // In any order.
    let mut reversed = buckets;
    reversed.reverse();
    assert_eq!(first_failure(&reversed, trip), Some(at(3)));
    // Success-only buckets after the run are skipped (an alarm trip a
    // little later), a long quiet gap ends the run.
    let buckets = [
        bucket(0, 0, 1, 0),
        bucket(30, 0, 0, 5),
        bucket(31, 0, 3, 0),
        bucket(35, 4, 0, 0),
    ];
    assert_eq!(first_failure(&buckets, at(40)), Some(at(30)));
    // Nothing failing, or only before the lookback: none.
    assert_eq!(first_failure(&[bucket(0, 5, 0, 0)], at(1)), None);
    assert_eq!(first_failure(&[bucket(0, 0, 5, 0)], at(121)), None);
    assert_eq!(first_failure(&[bucket(0, 0, 5, 0)], at(120)), Some(at(0)));
    assert_eq!(first_failure(&[], at(0)), None);
}

#[test]
fn a_cancelled_transaction_is_a_lost_race_only_for_its_condition_or_a_conflict() {
    use aws_sdk_dynamodb::types::CancellationReason;
    use aws_sdk_dynamodb::types::error::TransactionCanceledException;
    let cancelled = |codes: &[&str]| {
        let mut b = TransactionCanceledException::builder();
        for code in codes {
            b = b.cancellation_reasons(CancellationReason::builder().code(*code).build());
        }
        b.build()
    };
    assert!(lost_race(&cancelled(&["ConditionalCheckFailed", "None"])));
    assert!(lost_race(&cancelled(&["None", "TransactionConflict"])));
    assert!(!lost_race(&cancelled(&["None", "ValidationError"])));
    let bare = TransactionCanceledException::builder()
        .message("Transaction cancelled, please refer cancellation reasons for specific reasons [ConditionalCheckFailed, None]")
        .build();
    assert!(lost_race(&bare));
    assert!(!lost_race(&TransactionCanceledException::builder().build()));
}

/// A trip whose read of the failure window fails is still saved, without
/// its first failure, and the failed read counts in `DependencyErrors` as
/// `window.read`: no failed call goes unseen because the write went on.
#[tokio::test]
async fn a_trips_failed_window_read_is_counted_and_the_trip_saved() {
    use aws_sdk_dynamodb::Client;
    use aws_smithy_mocks::{RuleMode, mock, mock_client};
    use lifeboat_core::ManualClock;
    use lifeboat_core::memory::MemoryMetrics;

    let query = mock!(Client::query).then_error(|| {
        aws_sdk_dynamodb::operation::query::QueryError::ProvisionedThroughputExceededException(
            aws_sdk_dynamodb::types::error::ProvisionedThroughputExceededException::builder()
                .message("throttled")
                .build(),
        )
    });
    let saved = mock!(Client::transact_write_items).then_output(|| {
        aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsOutput::builder()
            .build()
    });
    let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&query, &saved]);
    let metrics = Arc::new(MemoryMetrics::new());
    let clock = Arc::new(ManualClock::new(at(0)));
    let store = DynamoBreakerStore::new(client, "Breaker")
        .counting_failures(FailureCounter::new(metrics.clone(), clock));

    let mut trip = record();
    trip.previous = Some(BreakerState::Closed);
    store.save(&trip, Some(3)).await.unwrap();

    assert_eq!(query.num_calls(), 1);
    assert_eq!(saved.num_calls(), 1);
    let window_reads = metrics.sum(
        lifeboat_core::watched::METRIC,
        &[("Dependency", "window.read")],
    );
    assert_eq!(window_reads, 1.0);
    assert_eq!(metrics.sum(lifeboat_core::watched::METRIC, &[]), 2.0);
}
