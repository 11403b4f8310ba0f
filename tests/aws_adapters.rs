//! lifeboat-aws's adapters against moto_server: the same guarantees the
//! in-memory adapters give, now from DynamoDB condition expressions, atomic
//! counters, EventBridge and Lambda's event source mappings.
//!
//! Every test starts its own moto (about a second) and names its own
//! resources, so tests run in parallel and share nothing. The concurrency
//! tests fire real concurrent requests at moto through one SDK client.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use aws_config::SdkConfig;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_eventbridge::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_eventbridge::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_eventbridge::error::BoxError;
use chrono::{DateTime, TimeDelta, Utc};
use futures::future::join_all;
use lifeboat_aws::{
    DynamoBreakerStore, DynamoCacheStore, DynamoRequestStore, DynamoWindowStore,
    EventBridgePublisher, LambdaStreamRouter,
};
use lifeboat_core::ManualClock;
use lifeboat_core::breaker::{BreakerRecord, BreakerState, ConsumerTarget};
use lifeboat_core::budget::Budget;
use lifeboat_core::cache::{
    CacheEntry, CacheKey, CachePolicy, CachedAnswer, CachedRefusal, Source,
};
use lifeboat_core::events::{
    BreakerStateChanged, LifeboatEvent, OperatorRequestFailed, SCHEMA_VERSION, TrialsPassed,
};
use lifeboat_core::memory::{MemoryBreakerStore, MemoryRequestStore};
use lifeboat_core::operator::{Operation, OperatorId};
use lifeboat_core::ports::{
    BreakerStore, CacheStore, CacheWrite, Clock, EventPublisher, OutcomeWrite, Repoint,
    RequestStore, RouterError, StoreError, StreamRouter, Trial, TrialTally, WindowStore,
};
use lifeboat_core::request::{FailureReason, Outcome, OutcomeKind, RequestRecord};
use lifeboat_core::settings::Settings;
use lifeboat_core::window::CallCounts;
use lifeboat_local::moto::MotoServer;
use lifeboat_local::moto::resources;
use lifeboat_local::moto::resources::stack::{Stack, StackNames};
use lifeboat_lookup::{Lookup, Mode, Polling, UnavailableReason};

async fn moto() -> (MotoServer, SdkConfig) {
    let moto = MotoServer::start().await.expect("moto_server starts");
    let config = moto.sdk_config().await;
    (moto, config)
}

fn t(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(secs, 0).expect("valid timestamp")
}

fn op(name: &str) -> OperatorId {
    OperatorId::new(name).expect("valid operator id")
}

fn request(id: &str) -> RequestRecord {
    RequestRecord {
        request_id: id.to_owned(),
        operator: op("nordic"),
        operation: Operation::Search,
        params: BTreeMap::from([
            ("from".to_owned(), "HEL".to_owned()),
            ("to".to_owned(), "TLL".to_owned()),
            ("date".to_owned(), "2026-12-01".to_owned()),
        ]),
        created_at: t(1_796_000_000),
        deadline: t(1_796_000_003),
    }
}

async fn requests_store(config: &SdkConfig, table: &str) -> DynamoRequestStore {
    let client = aws_sdk_dynamodb::Client::new(config);
    resources::create_requests_table(&client, table)
        .await
        .expect("requests table");
    DynamoRequestStore::new(client, table)
}

async fn breaker_table(config: &SdkConfig, table: &str) -> aws_sdk_dynamodb::Client {
    let client = aws_sdk_dynamodb::Client::new(config);
    resources::create_breaker_table(&client, table)
        .await
        .expect("breaker table");
    client
}

fn half_open(operator: &str, version: u64) -> BreakerRecord {
    let mut record = BreakerRecord::initial(op(operator), t(1_796_000_000));
    record.state = BreakerState::HalfOpen;
    record.version = version;
    record.reason = "open period over".to_owned();
    record
}

#[tokio::test]
async fn requests_are_written_once_and_read_back() {
    let (_moto, config) = moto().await;
    let store = requests_store(&config, "requests-put-get").await;

    store.put_request(&request("r-1")).await.unwrap();
    let stored = store
        .get(&op("nordic"), "r-1")
        .await
        .unwrap()
        .expect("stored request");
    assert_eq!(stored.request, request("r-1"));
    assert_eq!(stored.outcome, None);

    let mut again = request("r-1");
    again.operation = Operation::Price;
    assert!(matches!(
        store.put_request(&again).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(
        store
            .get(&op("nordic"), "r-1")
            .await
            .unwrap()
            .unwrap()
            .request,
        request("r-1")
    );
    assert_eq!(store.get(&op("nordic"), "r-2").await.unwrap(), None);

    // The item has the table design, TTL included.
    let item = aws_sdk_dynamodb::Client::new(&config)
        .get_item()
        .table_name("requests-put-get")
        .key(
            "request_id",
            aws_sdk_dynamodb::types::AttributeValue::S("r-1".into()),
        )
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    assert_eq!(item["record_type"].as_s().unwrap(), "request");
    assert_eq!(
        item["expires_at"].as_n().unwrap(),
        &(1_796_000_003 + 86_400).to_string()
    );
}

#[tokio::test]
async fn exactly_one_outcome_under_twenty_concurrent_writers() {
    let (_moto, config) = moto().await;
    let store = Arc::new(requests_store(&config, "requests-one-outcome").await);
    store.put_request(&request("r-1")).await.unwrap();

    let writers = (0..20).map(|n| {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            let mut outcome = Outcome::failed(
                FailureReason::Timeout,
                format!("writer {n}"),
                t(1_796_000_004),
                "real-consumer",
            );
            if n % 2 == 0 {
                outcome.kind = OutcomeKind::Answered {
                    body: format!("{{\"writer\":{n}}}"),
                };
                outcome.call_ms = Some(1300);
            }
            let written = store
                .write_outcome(&op("nordic"), "r-1", &outcome)
                .await
                .unwrap();
            (written, outcome)
        })
    });
    let results: Vec<(OutcomeWrite, Outcome)> = join_all(writers)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    let winners: Vec<&Outcome> = results
        .iter()
        .filter(|(w, _)| *w == OutcomeWrite::Written)
        .map(|(_, o)| o)
        .collect();
    assert_eq!(winners.len(), 1, "exactly one writer wins");
    assert_eq!(
        results
            .iter()
            .filter(|(w, _)| *w == OutcomeWrite::AlreadyPresent)
            .count(),
        19
    );
    let stored = store.get(&op("nordic"), "r-1").await.unwrap().unwrap();
    assert_eq!(
        stored.outcome.as_ref(),
        Some(winners[0]),
        "the winner's outcome is the one stored"
    );
}

#[tokio::test]
async fn a_consumers_outcome_takes_the_place_of_an_askers_close_once() {
    let (_moto, config) = moto().await;
    let store = requests_store(&config, "requests-closed").await;
    // The search's close of a question, and the booking worker's of a
    // booking call it took as lost.
    for (k, closer) in lifeboat_core::request::ASKERS_CLOSES.iter().enumerate() {
        let id = format!("r-{k}");
        store.put_request(&request(&id)).await.unwrap();
        let outcome =
            |by: &str| Outcome::failed(FailureReason::Expired, by.to_owned(), t(1_796_000_004), by);
        let close = outcome(closer);
        let written = |w: Result<OutcomeWrite, StoreError>| w.unwrap() == OutcomeWrite::Written;
        assert!(written(
            store.write_outcome(&op("nordic"), &id, &close).await
        ));
        assert!(
            !written(store.write_outcome(&op("nordic"), &id, &close).await),
            "one close ({closer})"
        );
        let late = outcome("real-consumer");
        assert!(
            written(store.write_outcome(&op("nordic"), &id, &late).await),
            "{closer}'s close replaced"
        );
        let stored = store.get(&op("nordic"), &id).await.unwrap().unwrap();
        assert_eq!(stored.outcome.as_ref(), Some(&late));
        // Nothing replaces a consumer's outcome, a close least of all.
        for by in lifeboat_core::request::ASKERS_CLOSES {
            assert!(!written(
                store.write_outcome(&op("nordic"), &id, &outcome(by)).await
            ));
        }
        assert!(!written(
            store
                .write_outcome(&op("nordic"), &id, &outcome("fallback-consumer"))
                .await
        ));
        let stored = store.get(&op("nordic"), &id).await.unwrap().unwrap();
        assert_eq!(stored.outcome.as_ref(), Some(&late));
    }
}

#[tokio::test]
async fn an_outcome_too_big_for_an_item_is_rejected_not_unavailable() {
    let (_moto, config) = moto().await;
    let store = requests_store(&config, "requests-too-big").await;
    store.put_request(&request("r-1")).await.unwrap();
    let mut outcome = Outcome::failed(
        FailureReason::Timeout,
        "",
        t(1_796_000_004),
        "real-consumer",
    );
    outcome.kind = OutcomeKind::Answered {
        body: "x".repeat(500 * 1024),
    };
    let refused = store.write_outcome(&op("nordic"), "r-1", &outcome).await;
    assert!(
        matches!(refused, Err(StoreError::Rejected(_))),
        "{refused:?}"
    );
    // The request is untouched, and a small outcome still goes in.
    assert!(
        store
            .get(&op("nordic"), "r-1")
            .await
            .unwrap()
            .unwrap()
            .outcome
            .is_none()
    );
    outcome.kind = OutcomeKind::Answered { body: "{}".into() };
    store
        .write_outcome(&op("nordic"), "r-1", &outcome)
        .await
        .unwrap();
}

#[tokio::test]
async fn an_outcome_for_a_missing_request_is_a_conflict() {
    let (_moto, config) = moto().await;
    let store = requests_store(&config, "requests-missing").await;
    let outcome = Outcome::failed(
        FailureReason::BreakerOpen,
        "breaker open",
        t(1_796_000_004),
        "fallback-consumer",
    );
    assert!(matches!(
        store.write_outcome(&op("nordic"), "nobody", &outcome).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(
        store.get(&op("nordic"), "nobody").await.unwrap(),
        None,
        "no item was created"
    );
}

/// The answered question lives beside the breaker: written and read back
/// whole, never seen by the breaker's reads or its versioned saves.
#[tokio::test]
async fn the_answered_question_is_kept_beside_the_breaker() {
    let (_moto, config) = moto().await;
    let client = breaker_table(&config, "breaker-answered").await;
    let store = DynamoBreakerStore::new(client, "breaker-answered");
    let nordic = op("nordic");
    assert_eq!(store.answered(&nordic).await.unwrap(), None);
    let question = lifeboat_core::probe::ProbeSpec::remembered(
        Operation::Search,
        &request("q").params,
        t(1_796_000_000),
    )
    .unwrap();
    store
        .remember_answered(&nordic, &question, t(1_796_000_000))
        .await
        .unwrap();
    assert_eq!(store.answered(&nordic).await.unwrap(), Some(question));
    // The breaker neither sees it nor is held up by it.
    assert_eq!(store.load(&nordic).await.unwrap(), None);
    assert!(store.list().await.unwrap().is_empty());
    let record = BreakerRecord::initial(nordic.clone(), t(1_796_000_000));
    store.save(&record, None).await.unwrap();
    assert_eq!(store.load(&nordic).await.unwrap(), Some(record));
}

#[tokio::test]
async fn breaker_saves_are_conditional_on_the_version() {
    let (_moto, config) = moto().await;
    let client = breaker_table(&config, "breaker-save").await;
    let store = DynamoBreakerStore::new(client.clone(), "breaker-save");
    let window = DynamoWindowStore::new(client, "breaker-save");

    let mut record = BreakerRecord::initial(op("nordic"), t(1_796_000_000));
    store.save(&record, None).await.unwrap();
    assert!(matches!(
        store.save(&record, None).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(
        store.load(&op("nordic")).await.unwrap(),
        Some(record.clone())
    );

    record.version = 1;
    record.state = BreakerState::Open;
    record.previous = Some(BreakerState::Closed);
    record.open_until = Some(t(1_796_000_030));
    record.reason = "failure rate 80% over 20 calls".to_owned();
    store.save(&record, Some(0)).await.unwrap();
    assert!(matches!(
        store.save(&record, Some(0)).await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store.save(&record, Some(7)).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(
        store.load(&op("nordic")).await.unwrap(),
        Some(record.clone())
    );

    // No record yet: only a first save (expected None) may write one.
    let other = BreakerRecord::initial(op("baltic"), t(1_796_000_000));
    assert!(matches!(
        store.save(&other, Some(0)).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(store.load(&op("baltic")).await.unwrap(), None);
    store.save(&other, None).await.unwrap();

    // Buckets share the table; list() returns breakers only, by operator.
    window
        .add(
            &op("nordic"),
            t(1_796_000_001),
            &CallCounts {
                calls: 1,
                successes: 1,
                ..CallCounts::default()
            },
        )
        .await
        .unwrap();
    let listed = store.list().await.unwrap();
    assert_eq!(listed, vec![other, record]);
}

#[tokio::test]
async fn every_transition_is_recorded_once_with_the_failure_windows_first_failure() {
    let (_moto, config) = moto().await;
    let table = "breaker-history";
    let client = breaker_table(&config, table).await;
    let store = Arc::new(DynamoBreakerStore::new(client.clone(), table));
    let window = DynamoWindowStore::new(client.clone(), table);
    let nordic = op("nordic");
    let start = 1_796_000_000;
    let ms = |millis: i64| t(start) + TimeDelta::milliseconds(millis);

    // What the failure window counted: healthy, then timeouts and failures
    // from +3 s; a bucket after the trip is not the first failure's business.
    for (sec, successes, failures, timeouts) in [
        (0, 10, 0, 0),
        (1, 9, 1, 0),
        (2, 10, 0, 0),
        (3, 1, 0, 3),
        (4, 0, 2, 1),
        (6, 0, 0, 4),
        (7, 0, 0, 9),
    ] {
        let counts = CallCounts {
            calls: successes + failures + timeouts,
            successes,
            failures,
            timeouts,
            slow: 0,
            refusals: 0,
        };
        window.add(&nordic, t(start + sec), &counts).await.unwrap();
    }

    // A breaker that never moved has no change to record.
    let initial = BreakerRecord::initial(nordic.clone(), t(start - 3_600));
    store.save(&initial, None).await.unwrap();
    assert_eq!(store.changes(Some(&nordic)).await.unwrap(), vec![]);

    // Twenty switches race to trip it: one transition, one change item.
    let mut open = initial.clone();
    open.version = 1;
    open.state = BreakerState::Open;
    open.previous = Some(BreakerState::Closed);
    open.since = ms(6_500);
    open.open_until = Some(ms(36_500));
    open.reason = "5 consecutive timeouts".to_owned();
    let racers = (0..20).map(|_| {
        let store = Arc::clone(&store);
        let open = open.clone();
        tokio::spawn(async move { store.save(&open, Some(0)).await })
    });
    let results: Vec<Result<(), StoreError>> = join_all(racers)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 1);
    assert!(
        results
            .iter()
            .filter_map(|r| r.as_ref().err())
            .all(|e| matches!(e, StoreError::Conflict(_))),
        "{results:?}"
    );

    // Half-open, then a failed trial reopens: no first failure looked up.
    let mut half = open.clone();
    half.version = 2;
    half.state = BreakerState::HalfOpen;
    half.previous = Some(BreakerState::Open);
    half.since = ms(36_600);
    half.open_until = None;
    half.reason = "open period over: testing recovery".to_owned();
    store.save(&half, Some(1)).await.unwrap();
    let mut reopened = half.clone();
    reopened.version = 3;
    reopened.state = BreakerState::Open;
    reopened.previous = Some(BreakerState::HalfOpen);
    reopened.since = ms(37_000);
    reopened.reason = "half-open trial failed: timeout".to_owned();
    store.save(&reopened, Some(2)).await.unwrap();
    // A lost race writes no change either.
    assert!(matches!(
        store.save(&reopened, Some(2)).await,
        Err(StoreError::Conflict(_))
    ));

    let changes = store.changes(Some(&nordic)).await.unwrap();
    type Change = (u64, Option<BreakerState>, BreakerState, DateTime<Utc>);
    let got: Vec<Change> = changes
        .iter()
        .map(|c| (c.version, c.from, c.to, c.at))
        .collect();
    assert_eq!(
        got,
        vec![
            (1, Some(BreakerState::Closed), BreakerState::Open, ms(6_500)),
            (
                2,
                Some(BreakerState::Open),
                BreakerState::HalfOpen,
                ms(36_600)
            ),
            (
                3,
                Some(BreakerState::HalfOpen),
                BreakerState::Open,
                ms(37_000)
            ),
        ]
    );
    assert_eq!(changes[0].first_failure_at, Some(t(start + 3)));
    assert_eq!(changes[0].reason, "5 consecutive timeouts");
    assert_eq!(changes[0].open_until, Some(ms(36_500)));
    assert!(changes[1..].iter().all(|c| c.first_failure_at.is_none()));

    // The item has the table design: the version key and the TTL.
    let item = client
        .get_item()
        .table_name(table)
        .key("operator", AttributeValue::S("nordic".into()))
        .key(
            "item",
            AttributeValue::S("change#00000000000000000001".into()),
        )
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    assert_eq!(
        item["expires_at"].as_n().unwrap(),
        &(start + 6 + 90 * 86_400).to_string()
    );

    // Another operator, tripped with no buckets: no first failure. Every
    // operator's changes come back oldest first; list() still sees breakers only.
    let mut baltic = BreakerRecord::initial(op("baltic"), t(start));
    baltic.version = 1;
    baltic.state = BreakerState::Open;
    baltic.previous = Some(BreakerState::Closed);
    baltic.since = ms(10_000);
    baltic.reason = "alarm lifeboat-baltic-errors in ALARM".to_owned();
    store.save(&baltic, None).await.unwrap();
    let all: Vec<(String, u64, Option<DateTime<Utc>>)> = store
        .changes(None)
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.operator.to_string(), c.version, c.first_failure_at))
        .collect();
    assert_eq!(
        all,
        vec![
            ("nordic".to_owned(), 1, Some(t(start + 3))),
            ("baltic".to_owned(), 1, None),
            ("nordic".to_owned(), 2, None),
            ("nordic".to_owned(), 3, None),
        ]
    );
    assert_eq!(store.list().await.unwrap(), vec![baltic, reopened]);

    // A breaker deleted by hand restarts at version 0; its next change
    // replaces the old change of that version instead of blocking the switch.
    client
        .delete_item()
        .table_name(table)
        .key("operator", AttributeValue::S("nordic".into()))
        .key("item", AttributeValue::S("breaker".into()))
        .send()
        .await
        .unwrap();
    let restarted = BreakerRecord::initial(nordic.clone(), t(start + 7_200));
    store.save(&restarted, None).await.unwrap();
    let mut forced = restarted.clone();
    forced.version = 1;
    forced.state = BreakerState::ForcedOpen;
    forced.previous = Some(BreakerState::Closed);
    forced.since = t(start + 7_300);
    forced.reason = "force-open: maintenance".to_owned();
    store.save(&forced, Some(0)).await.unwrap();
    let changes = store.changes(Some(&nordic)).await.unwrap();
    assert_eq!(changes.len(), 3);
    assert_eq!(changes[2].version, 1);
    assert_eq!(changes[2].to, BreakerState::ForcedOpen);
}

#[tokio::test]
async fn fifty_concurrent_claimers_get_exactly_the_trial_limit() {
    let (_moto, config) = moto().await;
    let client = breaker_table(&config, "breaker-claims").await;
    let store = Arc::new(DynamoBreakerStore::new(client, "breaker-claims"));
    store.save(&half_open("nordic", 3), None).await.unwrap();

    let claimers = (0..50).map(|_| {
        let store = Arc::clone(&store);
        tokio::spawn(async move { store.claim_trial(&op("nordic"), 3, 3).await.unwrap() })
    });
    let granted = join_all(claimers)
        .await
        .into_iter()
        .filter(|r| *r.as_ref().unwrap())
        .count();
    assert_eq!(
        granted, 3,
        "exactly `limit` trial slots across all claimers"
    );
    assert_eq!(
        store
            .load(&op("nordic"))
            .await
            .unwrap()
            .unwrap()
            .trials_claimed,
        3
    );
    assert!(!store.claim_trial(&op("nordic"), 3, 3).await.unwrap());

    // Another round's version, or a breaker that is not half-open: no slot.
    store.save(&half_open("baltic", 5), None).await.unwrap();
    assert!(!store.claim_trial(&op("baltic"), 4, 3).await.unwrap());
    let mut open = half_open("aland", 2);
    open.state = BreakerState::Open;
    store.save(&open, None).await.unwrap();
    assert!(!store.claim_trial(&op("aland"), 2, 3).await.unwrap());
    assert_eq!(
        store
            .load(&op("aland"))
            .await
            .unwrap()
            .unwrap()
            .trials_claimed,
        0
    );
    // No breaker at all: no slot, and no item made up by the ADD.
    assert!(!store.claim_trial(&op("nobody"), 0, 3).await.unwrap());
    assert_eq!(store.load(&op("nobody")).await.unwrap(), None);
}

#[tokio::test]
async fn one_probe_claim_per_gap_whoever_asks() {
    let (_moto, config) = moto().await;
    let client = breaker_table(&config, "breaker-probes").await;
    let store = Arc::new(DynamoBreakerStore::new(client, "breaker-probes"));
    let mut open = half_open("nordic", 4);
    open.state = BreakerState::Open;
    store.save(&open, None).await.unwrap();
    let at = |s: i64| t(1_796_000_000 + s);

    // A timer delivered ten times at once: one probe.
    let claimers = (0..10).map(|_| {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            store
                .claim_probe(&op("nordic"), 4, at(10), at(5))
                .await
                .unwrap()
        })
    });
    let granted = join_all(claimers)
        .await
        .into_iter()
        .filter(|r| *r.as_ref().unwrap())
        .count();
    assert_eq!(granted, 1);
    let stored = store.load(&op("nordic")).await.unwrap().unwrap();
    assert_eq!(stored.probed_at, Some(at(10)));
    // The next gap: claimed again once the last probe is old enough.
    assert!(
        !store
            .claim_probe(&op("nordic"), 4, at(14), at(9))
            .await
            .unwrap()
    );
    assert!(
        store
            .claim_probe(&op("nordic"), 4, at(20), at(15))
            .await
            .unwrap()
    );
    // Another version, a breaker not open, or none at all: no probe.
    assert!(
        !store
            .claim_probe(&op("nordic"), 3, at(40), at(35))
            .await
            .unwrap()
    );
    store.save(&half_open("baltic", 2), None).await.unwrap();
    assert!(
        !store
            .claim_probe(&op("baltic"), 2, at(40), at(35))
            .await
            .unwrap()
    );
    assert!(
        !store
            .claim_probe(&op("nobody"), 0, at(40), at(35))
            .await
            .unwrap()
    );
    assert_eq!(store.load(&op("nobody")).await.unwrap(), None);
}

#[tokio::test]
async fn trial_results_are_tallied_until_the_breaker_moves_on() {
    let (_moto, config) = moto().await;
    let client = breaker_table(&config, "breaker-trials").await;
    let store = Arc::new(DynamoBreakerStore::new(client, "breaker-trials"));
    let nordic = op("nordic");
    store.save(&half_open("nordic", 5), None).await.unwrap();

    let tally = |successes, failures, timeouts| {
        Some(TrialTally {
            successes,
            failures,
            timeouts,
        })
    };
    assert_eq!(
        store.record_trial(&nordic, 5, Trial::Passed).await.unwrap(),
        tally(1, 0, 0)
    );
    assert_eq!(
        store.record_trial(&nordic, 5, Trial::Failed).await.unwrap(),
        tally(1, 1, 0)
    );
    // A timeout is a failure, and counted as a timeout.
    assert_eq!(
        store
            .record_trial(&nordic, 5, Trial::TimedOut)
            .await
            .unwrap(),
        tally(1, 2, 1)
    );
    assert_eq!(
        store.load(&nordic).await.unwrap().unwrap().trial_timeouts,
        1
    );
    let concurrent = (0..10).map(|_| {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            store
                .record_trial(&op("nordic"), 5, Trial::Passed)
                .await
                .unwrap()
        })
    });
    let tallies: Vec<TrialTally> = join_all(concurrent)
        .await
        .into_iter()
        .map(|r| r.unwrap().unwrap())
        .collect();
    let mut seen: Vec<u32> = tallies.iter().map(|t| t.successes).collect();
    seen.sort_unstable();
    assert_eq!(
        seen,
        (2..=11).collect::<Vec<u32>>(),
        "every result counted once"
    );
    assert_eq!(
        store.record_trial(&nordic, 4, Trial::Passed).await.unwrap(),
        None,
        "an older round"
    );

    // The switch closes the breaker (version 6): late results no longer count.
    let mut closed = store.load(&nordic).await.unwrap().unwrap();
    closed.state = BreakerState::Closed;
    closed.previous = Some(BreakerState::HalfOpen);
    closed.version = 6;
    store.save(&closed, Some(5)).await.unwrap();
    assert_eq!(
        store.record_trial(&nordic, 5, Trial::Passed).await.unwrap(),
        None
    );
    assert_eq!(
        store.record_trial(&nordic, 6, Trial::Passed).await.unwrap(),
        None,
        "not half-open"
    );

    // Announcing: only the current version, never backwards.
    store.mark_announced(&nordic, 5).await.unwrap();
    assert_eq!(
        store
            .load(&nordic)
            .await
            .unwrap()
            .unwrap()
            .announced_version,
        0
    );
    store.mark_announced(&nordic, 6).await.unwrap();
    store.mark_announced(&nordic, 6).await.unwrap();
    assert_eq!(
        store
            .load(&nordic)
            .await
            .unwrap()
            .unwrap()
            .announced_version,
        6
    );
    store.mark_announced(&op("nobody"), 1).await.unwrap();
    assert_eq!(store.load(&op("nobody")).await.unwrap(), None);

    // Routing marks: the same rule, and a save keeps the mark it was given.
    store.mark_routed(&nordic, 5).await.unwrap();
    let routed = |r: Option<BreakerRecord>| r.unwrap().routed_version;
    assert_eq!(routed(store.load(&nordic).await.unwrap()), 0);
    store.mark_routed(&nordic, 6).await.unwrap();
    assert_eq!(routed(store.load(&nordic).await.unwrap()), 6);
    let many = store
        .load_many(std::slice::from_ref(&nordic))
        .await
        .unwrap();
    assert_eq!(many[0].routed_version, 6);
    let mut next = store.load(&nordic).await.unwrap().unwrap();
    next.version = 7;
    next.state = BreakerState::Open;
    next.previous = Some(BreakerState::Closed);
    store.save(&next, Some(6)).await.unwrap();
    assert_eq!(
        routed(store.load(&nordic).await.unwrap()),
        6,
        "version 7 not seen routed yet"
    );
    store.mark_routed(&op("nobody"), 1).await.unwrap();
    assert_eq!(store.load(&op("nobody")).await.unwrap(), None);
}

#[tokio::test]
async fn window_counts_from_concurrent_writers_add_up() {
    let (_moto, config) = moto().await;
    let client = breaker_table(&config, "breaker-window").await;
    let store = Arc::new(DynamoWindowStore::new(client, "breaker-window"));
    let start = t(1_796_000_000);
    let batch = CallCounts {
        calls: 5,
        successes: 2,
        failures: 1,
        timeouts: 2,
        slow: 1,
        refusals: 3,
    };

    // 20 batches land in bucket 0, 10 in bucket +1 s, 5 in bucket +2 s, all
    // at once: the first ADD of each bucket creates it while others race it.
    let writers = (0..35).map(|n| {
        let store = Arc::clone(&store);
        let bucket = start
            + TimeDelta::seconds(if n < 20 {
                0
            } else if n < 30 {
                1
            } else {
                2
            });
        tokio::spawn(async move { store.add(&op("nordic"), bucket, &batch).await.unwrap() })
    });
    for r in join_all(writers).await {
        r.unwrap();
    }
    store.add(&op("baltic"), start, &batch).await.unwrap();

    let times = |n: u32| CallCounts {
        calls: 5 * n,
        successes: 2 * n,
        failures: n,
        timeouts: 2 * n,
        slow: n,
        refusals: 3 * n,
    };
    let all = store.since(&op("nordic"), start).await.unwrap();
    assert_eq!(
        all.iter().map(|b| (b.start, b.counts)).collect::<Vec<_>>(),
        vec![
            (start, times(20)),
            (start + TimeDelta::seconds(1), times(10)),
            (start + TimeDelta::seconds(2), times(5)),
        ]
    );
    let recent = store
        .since(&op("nordic"), start + TimeDelta::seconds(1))
        .await
        .unwrap();
    assert_eq!(recent.len(), 2);
    let after_half = store
        .since(&op("nordic"), start + TimeDelta::milliseconds(1500))
        .await
        .unwrap();
    assert_eq!(
        after_half.iter().map(|b| b.start).collect::<Vec<_>>(),
        vec![start + TimeDelta::seconds(2)]
    );
    // Just after a bucket's start (by a nanosecond) excludes that bucket.
    let just_after = store
        .since(&op("nordic"), start + TimeDelta::nanoseconds(1))
        .await
        .unwrap();
    assert_eq!(just_after.len(), 2);
    assert!(
        store
            .since(&op("nordic"), start + TimeDelta::seconds(3))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.since(&op("baltic"), start).await.unwrap().len(), 1);
    assert!(store.since(&op("aland"), start).await.unwrap().is_empty());
}

/// Counts the HTTP requests a client sends.
#[derive(Debug, Default)]
struct CallCounter(AtomicUsize);

#[derive(Debug)]
struct CountCalls(Arc<CallCounter>);

impl Intercept for CountCalls {
    fn name(&self) -> &'static str {
        "CountCalls"
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.0.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

fn sample_events(count: u64) -> Vec<LifeboatEvent> {
    (0..count)
        .map(|n| match n % 3 {
            0 => LifeboatEvent::BreakerStateChanged(BreakerStateChanged {
                schema_version: SCHEMA_VERSION,
                operator: op("nordic"),
                from: BreakerState::Closed,
                to: BreakerState::Open,
                version: n,
                reason: format!("event {n}"),
                at: t(1_796_000_000),
            }),
            1 => LifeboatEvent::OperatorRequestFailed(OperatorRequestFailed {
                schema_version: SCHEMA_VERSION,
                request_id: Some(format!("r-{n}")),
                operator: Some("nordic".to_owned()),
                kind: Some(Operation::Price),
                reason: FailureReason::BreakerOpen,
                detail: format!("event {n}"),
                at: t(1_796_000_000),
            }),
            _ => LifeboatEvent::TrialsPassed(TrialsPassed {
                schema_version: SCHEMA_VERSION,
                operator: op("nordic"),
                observed_version: n,
                successes: 2,
                at: t(1_796_000_000),
            }),
        })
        .collect()
}

#[tokio::test]
async fn twenty_five_events_reach_the_bus_in_three_calls() {
    let (_moto, config) = moto().await;
    let eventbridge = aws_sdk_eventbridge::Client::new(&config);
    let sqs = aws_sdk_sqs::Client::new(&config);
    resources::create_event_bus(&eventbridge, "bus-publish")
        .await
        .unwrap();
    let target = resources::create_queue_target(
        &eventbridge,
        &sqs,
        "bus-publish",
        "all-lifeboat",
        "events-publish",
        resources::LIFEBOAT_EVENTS_PATTERN,
    )
    .await
    .unwrap();

    let counter = Arc::new(CallCounter::default());
    let counted = aws_sdk_eventbridge::Client::from_conf(
        aws_sdk_eventbridge::config::Builder::from(&config)
            .interceptor(CountCalls(Arc::clone(&counter)))
            .build(),
    );
    let publisher = EventBridgePublisher::new(counted, "bus-publish");
    let events = sample_events(25);
    publisher.publish(&events).await.unwrap();
    assert_eq!(counter.0.load(Ordering::SeqCst), 3, "10 + 10 + 5 entries");

    // The rule delivered every event to the queue; read them all back.
    let mut bodies = Vec::new();
    for _ in 0..20 {
        let received = sqs
            .receive_message()
            .queue_url(&target.queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .send()
            .await
            .unwrap();
        for message in received.messages() {
            bodies.push(message.body().unwrap_or_default().to_owned());
            sqs.delete_message()
                .queue_url(&target.queue_url)
                .receipt_handle(message.receipt_handle().unwrap_or_default())
                .send()
                .await
                .unwrap();
        }
        if bodies.len() >= 25 {
            break;
        }
    }
    assert_eq!(bodies.len(), 25);
    let mut parsed = Vec::new();
    for body in &bodies {
        let envelope: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(envelope["source"], "lifeboat");
        let detail_type = envelope["detail-type"].as_str().unwrap();
        parsed.push(LifeboatEvent::parse(detail_type, &envelope["detail"]).unwrap());
    }
    let published: HashSet<String> = events.iter().map(LifeboatEvent::detail_json).collect();
    let delivered: HashSet<String> = parsed.iter().map(LifeboatEvent::detail_json).collect();
    assert_eq!(delivered, published, "every event, once, as published");
}

#[tokio::test]
async fn the_stream_mapping_is_repointed_and_back() {
    let (_moto, config) = moto().await;
    let stack = Stack::create(&config, StackNames::prefixed("router-"))
        .await
        .unwrap();
    let lambda = aws_sdk_lambda::Client::new(&config);
    let router = LambdaStreamRouter::new(
        lambda.clone(),
        &stack.mapping_uuid,
        &stack.names.real_function,
        &stack.names.fallback_function,
    );

    assert_eq!(router.current().await.unwrap(), ConsumerTarget::Real);
    assert_eq!(
        router.point_at(ConsumerTarget::Fallback).await.unwrap(),
        Repoint::Changed
    );
    assert_eq!(
        router.point_at(ConsumerTarget::Fallback).await.unwrap(),
        Repoint::AlreadyThere
    );
    assert_eq!(router.current().await.unwrap(), ConsumerTarget::Fallback);
    let mapping = lambda
        .get_event_source_mapping()
        .uuid(&stack.mapping_uuid)
        .send()
        .await
        .unwrap();
    assert_eq!(
        mapping.function_arn(),
        Some(stack.fallback_function_arn.as_str())
    );
    assert_eq!(
        mapping.event_source_arn(),
        Some(stack.requests.stream_arn.as_str())
    );

    // The same router configured with ARNs.
    let by_arn = LambdaStreamRouter::new(
        lambda.clone(),
        &stack.mapping_uuid,
        &stack.real_function_arn,
        &stack.fallback_function_arn,
    );
    assert_eq!(by_arn.current().await.unwrap(), ConsumerTarget::Fallback);
    assert_eq!(
        by_arn.point_at(ConsumerTarget::Real).await.unwrap(),
        Repoint::Changed
    );
    assert_eq!(router.current().await.unwrap(), ConsumerTarget::Real);
    assert_eq!(
        router.point_at(ConsumerTarget::Real).await.unwrap(),
        Repoint::AlreadyThere
    );

    let missing = LambdaStreamRouter::new(lambda, "00000000-0000-0000-0000-000000000000", "a", "b");
    assert!(matches!(
        missing.current().await,
        Err(RouterError::NotFound(_))
    ));
    assert!(matches!(
        missing.point_at(ConsumerTarget::Fallback).await,
        Err(RouterError::NotFound(_))
    ));
}

/// DynamoDB calls and the items they read (returned or, for scans and
/// queries, examined), as DynamoDB would bill them.
#[derive(Debug, Default)]
struct ReadCounter {
    calls: AtomicUsize,
    items_read: AtomicUsize,
}

impl ReadCounter {
    fn take(&self) -> (usize, usize) {
        (
            self.calls.swap(0, Ordering::SeqCst),
            self.items_read.swap(0, Ordering::SeqCst),
        )
    }
}

#[derive(Debug)]
struct CountReads(Arc<ReadCounter>);

impl aws_sdk_dynamodb::config::Intercept for CountReads {
    fn name(&self) -> &'static str {
        "CountReads"
    }

    fn read_after_deserialization(
        &self,
        context: &aws_sdk_dynamodb::config::interceptors::AfterDeserializationInterceptorContextRef<
            '_,
        >,
        _runtime_components: &aws_sdk_dynamodb::config::RuntimeComponents,
        _cfg: &mut aws_sdk_dynamodb::config::ConfigBag,
    ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
        use aws_sdk_dynamodb::operation::{
            batch_get_item::BatchGetItemOutput, get_item::GetItemOutput, query::QueryOutput,
            scan::ScanOutput,
        };
        self.0.calls.fetch_add(1, Ordering::SeqCst);
        let Ok(output) = context.output_or_error() else {
            return Ok(());
        };
        let read = if let Some(o) = output.downcast_ref::<GetItemOutput>() {
            usize::from(o.item.is_some())
        } else if let Some(o) = output.downcast_ref::<BatchGetItemOutput>() {
            o.responses
                .as_ref()
                .map_or(0, |r| r.values().map(Vec::len).sum())
        } else if let Some(o) = output.downcast_ref::<QueryOutput>() {
            usize::try_from(o.scanned_count).unwrap_or(0)
        } else if let Some(o) = output.downcast_ref::<ScanOutput>() {
            usize::try_from(o.scanned_count).unwrap_or(0)
        } else {
            0
        };
        self.0.items_read.fetch_add(read, Ordering::SeqCst);
        Ok(())
    }
}

/// Bucket and change items in the Breaker table for the scale test; the
/// whole figure the marketplace claim is about is 100,000
/// (`LIFEBOAT_SCALE_ITEMS` overrides it).
fn scale_items() -> usize {
    std::env::var("LIFEBOAT_SCALE_ITEMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
}

#[tokio::test]
async fn the_switch_reads_a_few_items_per_operator_whatever_the_table_holds() {
    use circuit_switch::{CircuitSwitch, SwitchPorts};
    use lifeboat_core::ManualClock;
    use lifeboat_core::lane::Lanes;
    use lifeboat_core::memory::{MemoryEventBus, MemoryMetrics, MemoryStreamRouter};
    use lifeboat_core::settings::Settings;

    const OPERATORS: usize = 200;
    let (_moto, config) = moto().await;
    let table = "breakers-scale";
    let plain = breaker_table(&config, table).await;
    let operators: Vec<OperatorId> = (0..OPERATORS).map(|i| op(&format!("op-{i:03}"))).collect();
    let now = t(1_796_000_000);

    // Every operator's breaker, closed for the last hour.
    let store = DynamoBreakerStore::new(plain.clone(), table);
    for operator in &operators {
        store
            .save(
                &BreakerRecord::initial(operator.clone(), now - chrono::TimeDelta::hours(1)),
                None,
            )
            .await
            .unwrap();
    }
    // The bulk beside them: window buckets of the last few minutes for every
    // operator, and change items.
    let items = scale_items();
    let mut written = 0;
    let mut batch = Vec::new();
    let started = std::time::Instant::now();
    while written < items {
        let i = written;
        let operator = &operators[i % OPERATORS];
        let age = i64::try_from(i / OPERATORS).unwrap();
        let key = if i % 100 == 99 {
            lifeboat_aws::breaker::change_key(u64::try_from(1_000 + i).unwrap())
        } else {
            lifeboat_aws::window::bucket_key((now.timestamp() - age) * 1000)
        };
        let item = std::collections::HashMap::from([
            (
                "operator".to_owned(),
                AttributeValue::S(operator.to_string()),
            ),
            ("item".to_owned(), AttributeValue::S(key)),
            ("calls".to_owned(), AttributeValue::N("10".into())),
            ("successes".to_owned(), AttributeValue::N("10".into())),
            ("failures".to_owned(), AttributeValue::N("0".into())),
            ("timeouts".to_owned(), AttributeValue::N("0".into())),
            ("slow".to_owned(), AttributeValue::N("0".into())),
        ]);
        batch.push(
            aws_sdk_dynamodb::types::WriteRequest::builder()
                .put_request(
                    aws_sdk_dynamodb::types::PutRequest::builder()
                        .set_item(Some(item))
                        .build()
                        .unwrap(),
                )
                .build(),
        );
        written += 1;
        if batch.len() == 25 || written == items {
            let out = plain
                .batch_write_item()
                .request_items(table, std::mem::take(&mut batch))
                .send()
                .await
                .unwrap();
            assert!(
                out.unprocessed_items.unwrap_or_default().is_empty(),
                "moto left items unprocessed"
            );
        }
    }
    eprintln!(
        "scale: {OPERATORS} breakers and {items} bucket and change items written in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // The tripped operator timed out four calls in five of its last 20
    // seconds (beside the bulk's successes): the switch reads its window,
    // which trips on that, before it opens the breaker.
    let failing = CallCounts {
        calls: 40,
        timeouts: 40,
        ..CallCounts::default()
    };
    let windows = DynamoWindowStore::new(plain.clone(), table);
    for age in 0..20 {
        windows
            .add(
                &op("op-007"),
                now - chrono::TimeDelta::seconds(age),
                &failing,
            )
            .await
            .unwrap();
    }

    let counter = Arc::new(ReadCounter::default());
    let counted = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&config)
            .interceptor(CountReads(counter.clone()))
            .build(),
    );
    let clock = ManualClock::new(now);
    let switch = CircuitSwitch::new(
        SwitchPorts {
            breakers: Arc::new(DynamoBreakerStore::new(counted.clone(), table)),
            windows: Arc::new(DynamoWindowStore::new(counted.clone(), table)),
            events: Arc::new(MemoryEventBus::new()),
            lanes: Lanes::shared(
                "requests",
                operators.clone(),
                Arc::new(MemoryStreamRouter::new()),
            ),
            clock: Arc::new(clock.clone()),
            metrics: Arc::new(MemoryMetrics::new()),
        },
        Settings::default(),
        operators.clone(),
    )
    .with_repoint_backoff(std::time::Duration::ZERO);

    // A trip: one breaker read and written, the failure window's last two
    // minutes for its first failure, its last minute to bear the trip out,
    // every configured breaker for the stream.
    let trip = serde_json::json!({
        "detail-type": "Trip Requested", "source": "lifeboat",
        "detail": {"schema_version": 1, "operator": "op-007", "observed_version": 0,
                   "reason": {"kind": "window", "verdict": {"rule": "consecutive_timeouts", "count": 5}},
                   "at": "2026-12-01T00:00:00Z"}
    });
    let report = switch.handle(&trip).await.unwrap();
    assert!(report.decisions[0].changed);
    let (trip_calls, trip_items) = counter.take();

    // A tick after the open period: one batched read for the tick, the
    // reopened breaker read and written, one batched read to reconcile.
    clock.advance(std::time::Duration::from_secs(601));
    let report = switch
        .handle(&serde_json::json!({"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}}))
        .await
        .unwrap();
    assert_eq!(report.decisions.len(), OPERATORS);
    assert_eq!(report.decisions.iter().filter(|d| d.changed).count(), 1);
    let (tick_calls, tick_items) = counter.take();

    // What the old tick's scan of the table read, for comparison.
    let listed = DynamoBreakerStore::new(counted, table)
        .list()
        .await
        .unwrap();
    assert_eq!(listed.len(), OPERATORS);
    let (scan_calls, scan_items) = counter.take();

    eprintln!(
        "scale: {OPERATORS} operators, {items} other items: trip {trip_calls} calls / {trip_items} items read; \
         tick {tick_calls} calls / {tick_items} items read ({} per operator); \
         a scan for every breaker {scan_calls} calls / {scan_items} items",
        tick_items as f64 / OPERATORS as f64
    );
    // A few items per configured operator, whatever else the table holds.
    assert!(tick_items <= 3 * OPERATORS, "tick read {tick_items} items");
    assert!(tick_calls <= 10, "tick made {tick_calls} calls");
    // The trip: the configured breakers once or twice, and at most the
    // failure window's two minutes of one operator's buckets, and its
    // last minute again.
    assert!(
        trip_items <= 2 * OPERATORS + 121 + 61 + 2,
        "trip read {trip_items} items"
    );
    assert!(scan_items >= items, "the scan passes every item");
}

// --- the answer cache: refusals beside good answers ------------------------

fn question(from: &str) -> (OperatorId, BTreeMap<String, String>, CacheKey) {
    let params = BTreeMap::from([
        ("from".to_owned(), from.to_owned()),
        ("to".to_owned(), "TLL".to_owned()),
    ]);
    let key = CacheKey::new(&op("nordic"), Operation::Search, &params);
    (op("nordic"), params, key)
}

fn good_answer(key: &CacheKey, body: &str, as_of: DateTime<Utc>) -> CachedAnswer {
    CachedAnswer {
        key: key.clone(),
        operator: op("nordic"),
        operation: Operation::Search,
        body: body.to_owned(),
        as_of,
    }
}

fn refusal(key: &CacheKey, status: u16, at: DateTime<Utc>) -> CachedRefusal {
    CachedRefusal {
        key: key.clone(),
        operator: op("nordic"),
        operation: Operation::Search,
        status,
        detail: format!("operator answered {status}"),
        at,
    }
}

async fn cache_store(config: &SdkConfig, table: &str) -> DynamoCacheStore {
    let client = aws_sdk_dynamodb::Client::new(config);
    resources::create_cache_table(&client, table)
        .await
        .expect("cache table");
    DynamoCacheStore::new(client, table)
}

#[tokio::test]
async fn a_refusal_is_written_beside_the_good_answer_and_never_over_a_newer_one() {
    let (_moto, config) = moto().await;
    let cache = cache_store(&config, "cache-refusals").await;
    let policy = CachePolicy::default();
    let (_, _, key) = question("HEL");
    let week = |at: DateTime<Utc>| policy.expires_at(at);
    let good = good_answer(&key, r#"{"sailings":[{"id":"s-1"}]}"#, t(1_796_000_000));

    assert_eq!(
        cache.put(&good, week(good.as_of)).await.unwrap(),
        CacheWrite::Written
    );
    let newer = refusal(&key, 404, good.as_of + TimeDelta::seconds(20));
    assert_eq!(
        cache.put_refusal(&newer, week(newer.at)).await.unwrap(),
        CacheWrite::Written
    );
    // The item keeps the good answer: the refusal set its own attributes.
    let entry = cache.get(&key).await.unwrap().unwrap();
    assert_eq!(
        entry,
        CacheEntry {
            answer: Some(good.clone()),
            refusal: Some(newer.clone()),
        }
    );
    let item = aws_sdk_dynamodb::Client::new(&config)
        .get_item()
        .table_name("cache-refusals")
        .key("cache_key", AttributeValue::S(key.as_str().into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    assert_eq!(item["body"].as_s().unwrap(), &good.body);
    assert_eq!(item["refusal_status"].as_n().unwrap(), "404");
    assert_eq!(
        item["expires_at"].as_n().unwrap(),
        &week(good.as_of).timestamp().to_string(),
        "the good answer's TTL stays"
    );

    // An older refusal (and one at the same instant) never replaces it;
    // nor does one older than the good answer.
    for stale in [
        refusal(&key, 400, newer.at - TimeDelta::seconds(5)),
        refusal(&key, 400, newer.at),
        refusal(&key, 400, good.as_of - TimeDelta::seconds(1)),
    ] {
        assert_eq!(
            cache.put_refusal(&stale, week(stale.at)).await.unwrap(),
            CacheWrite::NewerKept
        );
    }
    assert_eq!(
        cache.get(&key).await.unwrap().unwrap().refusal,
        Some(newer.clone())
    );

    // A late good answer, given before the refusal: written, the refusal
    // kept beside it.
    let late = good_answer(
        &key,
        r#"{"sailings":[{"id":"s-2"}]}"#,
        good.as_of + TimeDelta::seconds(10),
    );
    assert_eq!(
        cache.put(&late, week(late.as_of)).await.unwrap(),
        CacheWrite::Written
    );
    let entry = cache.get(&key).await.unwrap().unwrap();
    assert_eq!(
        (entry.answer, entry.refusal),
        (Some(late.clone()), Some(newer.clone()))
    );
    // An older good answer is kept out as before.
    assert_eq!(
        cache.put(&good, week(good.as_of)).await.unwrap(),
        CacheWrite::NewerKept
    );

    // A good answer after the refusal clears it.
    let after = good_answer(
        &key,
        r#"{"sailings":[{"id":"s-3"}]}"#,
        newer.at + TimeDelta::seconds(1),
    );
    assert_eq!(
        cache.put(&after, week(after.as_of)).await.unwrap(),
        CacheWrite::Written
    );
    assert_eq!(
        cache.get(&key).await.unwrap().unwrap(),
        CacheEntry::answered(after.clone())
    );

    // Only a refusal: the negative cache as before, no last good answer.
    let (_, _, other) = question("TKU");
    let only = refusal(&other, 410, t(1_796_000_000));
    assert_eq!(
        cache.put_refusal(&only, week(only.at)).await.unwrap(),
        CacheWrite::Written
    );
    assert_eq!(
        cache.get(&other).await.unwrap().unwrap(),
        CacheEntry::refused(only.clone())
    );

    // An item of an earlier version (the refusal in place of the answer)
    // reads as a refusal with no good answer, and a good answer replaces it.
    let (_, _, legacy) = question("STO");
    aws_sdk_dynamodb::Client::new(&config)
        .put_item()
        .table_name("cache-refusals")
        .item("cache_key", AttributeValue::S(legacy.as_str().into()))
        .item("operator", AttributeValue::S("nordic".into()))
        .item("operation", AttributeValue::S("search".into()))
        .item("body", AttributeValue::S("operator answered 404".into()))
        .item("as_of", AttributeValue::S("2026-11-30T10:15:00Z".into()))
        .item("as_of_ms", AttributeValue::N("1796033700000".into()))
        .item("refused", AttributeValue::N("404".into()))
        .item("expires_at", AttributeValue::N("1796638500".into()))
        .send()
        .await
        .unwrap();
    let entry = cache.get(&legacy).await.unwrap().unwrap();
    assert_eq!(entry.answer, None);
    assert_eq!(entry.refusal.as_ref().map(|r| r.status), Some(404));
    let answered = good_answer(&legacy, r#"{"sailings":[]}"#, t(1_796_033_701));
    assert_eq!(
        cache.put(&answered, week(answered.as_of)).await.unwrap(),
        CacheWrite::Written
    );
    assert_eq!(
        cache.get(&legacy).await.unwrap().unwrap(),
        CacheEntry::answered(answered)
    );
}

#[tokio::test]
async fn the_last_good_answer_outlives_a_refusal_on_dynamodb() {
    let (_moto, config) = moto().await;
    let cache = Arc::new(cache_store(&config, "cache-last-good").await);
    let breakers = Arc::new(MemoryBreakerStore::new());
    let clock = Arc::new(ManualClock::new(t(1_796_000_000)));
    let mut settings = Settings::default();
    // Nobody answers the gateway here: a short budget to wait out.
    settings.default.budgets.search = Budget::with_timeout(std::time::Duration::from_millis(200));
    let mut lookup = Lookup::new(
        Arc::new(MemoryRequestStore::new()),
        cache.clone(),
        breakers.clone(),
        clock.clone(),
        settings,
    );
    lookup.polling = Polling {
        first: std::time::Duration::from_millis(20),
        max: std::time::Duration::from_millis(50),
    };
    let (operator, params, key) = question("HEL");
    let now = t(1_796_000_000);
    let good = good_answer(
        &key,
        r#"{"sailings":[{"id":"s-1"}]}"#,
        now - TimeDelta::hours(1),
    );
    cache.put(&good, now + TimeDelta::days(6)).await.unwrap();
    let refused = refusal(&key, 404, now - TimeDelta::seconds(10));
    cache
        .put_refusal(&refused, now + TimeDelta::days(7))
        .await
        .unwrap();

    // Within the negative minute: the refusal, without a request.
    let looked = lookup
        .answer(&operator, Operation::Search, &params, Mode::AskOperator)
        .await;
    assert_eq!(
        looked.result.unwrap_err().reason,
        UnavailableReason::NotFound
    );
    assert!(!looked.requested);

    // A minute on, the call fails (nobody answers in the budget): the last
    // good answer, not the refusal.
    clock.advance(std::time::Duration::from_secs(60));
    let looked = lookup
        .answer(&operator, Operation::Search, &params, Mode::AskOperator)
        .await;
    assert!(looked.requested);
    let answer = looked.result.unwrap();
    assert_eq!(
        (answer.source, answer.body.as_str()),
        (Source::LastGood, good.body.as_str())
    );

    // The breaker opens: the last good answer again, without a request.
    let mut open = BreakerRecord::initial(op("nordic"), clock.now());
    open.state = BreakerState::Open;
    open.version = 1;
    open.open_until = Some(clock.now() + TimeDelta::seconds(30));
    breakers.save(&open, None).await.unwrap();
    clock.advance(std::time::Duration::from_secs(2));
    let looked = lookup
        .answer(&operator, Operation::Search, &params, Mode::AskOperator)
        .await;
    assert!(!looked.requested);
    assert_eq!(looked.breaker, Some(BreakerState::Open));
    let answer = looked.result.unwrap();
    assert_eq!(
        (answer.source, answer.body.as_str()),
        (Source::LastGood, good.body.as_str())
    );
}
