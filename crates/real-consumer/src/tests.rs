//! The consumer's tests: batches on in-memory stores against the simulated
//! operator.

use super::*;
use chrono::{TimeDelta, Utc};
use lifeboat_core::BreakerState;
use lifeboat_core::breaker::TripReason;
use lifeboat_core::cache::CacheKey;
use lifeboat_core::events::LifeboatEvent;
use lifeboat_core::memory::{
    MemoryBreakerStore, MemoryCacheStore, MemoryEventBus, MemoryMetrics, MemoryRequestStore,
    MemoryWindowStore,
};
use lifeboat_core::metrics::names;
use lifeboat_core::request::{FailureReason, OutcomeKind, RequestRecord};
use lifeboat_core::window::WindowVerdict;
use lifeboat_operator::{OutageMode, SimConfig, SimulatedOperator};
use lifeboat_sim::TokioClock;
use lifeboat_sim::suite::stream_record;
use lifeboat_stream::{StreamItem, classify, records};
use serde_json::json;

/// 2026-11-30T10:15:00Z, the time of the fixtures.
fn base() -> DateTime<Utc> {
    DateTime::from_timestamp(1_796_033_700, 0).unwrap()
}

struct World {
    consumer: RealConsumer,
    requests: Arc<MemoryRequestStore>,
    breakers: Arc<MemoryBreakerStore>,
    bus: Arc<MemoryEventBus>,
    cache: Arc<MemoryCacheStore>,
    window: Arc<MemoryWindowStore>,
    metrics: Arc<MemoryMetrics>,
    sim: SimulatedOperator,
    clock: Arc<TokioClock>,
}

fn world() -> World {
    let clock = Arc::new(TokioClock::starting_at(base()));
    let requests = Arc::new(MemoryRequestStore::new());
    let breakers = Arc::new(MemoryBreakerStore::new());
    let bus = Arc::new(MemoryEventBus::new());
    let cache = Arc::new(MemoryCacheStore::new());
    let window = Arc::new(MemoryWindowStore::new());
    let metrics = Arc::new(MemoryMetrics::new());
    let sim = SimulatedOperator::new(
        OperatorId::new("nordic").unwrap(),
        SimConfig::default(),
        clock.clone(),
    );
    let consumer = RealConsumer::new(
        ConsumerPorts {
            requests: requests.clone(),
            breakers: breakers.clone(),
            window: window.clone(),
            events: bus.clone(),
            cache: cache.clone(),
            metrics: metrics.clone(),
            operator: Arc::new(sim.clone()),
            clock: clock.clone(),
        },
        Settings::default(),
        DEFAULT_CONCURRENCY,
    );
    World {
        consumer,
        requests,
        breakers,
        bus,
        cache,
        window,
        metrics,
        sim,
        clock,
    }
}

fn fixture(name: &str) -> Value {
    let path = format!("{}/../../tests/events/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `n` fresh requests for `operator`, stored, and their stream batch.
async fn batch(w: &World, operator: &str, n: usize, deadline_s: i64) -> Value {
    let now = w.clock.now();
    let mut records = Vec::new();
    for i in 0..n {
        let request = RequestRecord {
            request_id: format!("{operator}-{}-{i}", now.timestamp_millis()),
            operator: OperatorId::new(operator).unwrap(),
            operation: lifeboat_core::Operation::Search,
            params: [
                ("from".to_owned(), "HEL".to_owned()),
                ("to".to_owned(), "TLL".to_owned()),
            ]
            .into(),
            created_at: now,
            deadline: now + TimeDelta::seconds(deadline_s),
        };
        w.requests.put_request(&request).await.unwrap();
        records.push(stream_record(&request, i));
    }
    json!({ "Records": records })
}

fn events_of(bus: &MemoryEventBus, detail_type: &str) -> usize {
    bus.events()
        .iter()
        .filter(|e| e.detail_type() == detail_type)
        .count()
}

/// A breaker in `state` since a minute ago.
async fn put_breaker(w: &World, state: BreakerState, version: u64) {
    let since = w.clock.now() - chrono::TimeDelta::seconds(60);
    let mut record = BreakerRecord::initial(OperatorId::new("nordic").unwrap(), since);
    record.state = state;
    record.version = version;
    w.breakers.save(&record, None).await.unwrap();
}

#[test]
fn the_default_concurrency_is_the_templates() {
    let template = include_str!("../../../template.yaml");
    let block = template.split("\n  CallConcurrency:\n").nth(1).unwrap();
    let default = block
        .lines()
        .find_map(|l| l.trim().strip_prefix("Default: "))
        .unwrap();
    assert_eq!(default.parse::<usize>().unwrap(), DEFAULT_CONCURRENCY);
}

#[test]
fn the_call_log_samples_a_share_of_requests_always_the_same() {
    let ids: Vec<String> = (0..100_000).map(|i| format!("req-{i}")).collect();
    let logged = |share: f64| ids.iter().filter(|id| sampled(id, share)).count();
    assert_eq!(logged(0.0), 0);
    assert_eq!(logged(1.0), ids.len());
    assert!((800..1_200).contains(&logged(0.01)), "{}", logged(0.01));
    assert_eq!(sampled("req-7", 0.5), sampled("req-7", 0.5));
}

/// A booking goes through the gateway like a question: called, its
/// answer written as the request's outcome, and never cached, nor is the
/// operator's refusal of one.
#[tokio::test(start_paused = true)]
async fn a_booking_is_answered_and_never_cached() {
    let w = world();
    let now = w.clock.now();
    let booking = |key: &str, passengers: &str, i: u64| RequestRecord {
        request_id: format!("book-{key}-{i}"),
        operator: OperatorId::new("nordic").unwrap(),
        operation: lifeboat_core::Operation::Book,
        params: [
            ("idempotency_key", key),
            ("sailing_id", "hel-tll-20261224-0730"),
            ("passengers", passengers),
            ("max_price_cents", "100000"),
            ("currency", "EUR"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect(),
        created_at: now,
        deadline: now + TimeDelta::seconds(30),
    };
    // The first books; the second reuses its key for another order (422).
    let requests = [booking("lb-c1", "2", 0), booking("lb-c1", "3", 1)];
    let mut records = Vec::new();
    for (i, request) in requests.iter().enumerate() {
        w.requests.put_request(request).await.unwrap();
        records.push(stream_record(request, i));
    }
    // One at a time: the refusal must meet the booking already made.
    for record in records {
        w.consumer
            .handle(&json!({ "Records": [record] }))
            .await
            .unwrap();
    }
    let outcome = |id: &str| {
        w.requests
            .all()
            .into_iter()
            .find(|s| s.request.request_id == id)
            .and_then(|s| s.outcome)
            .unwrap()
    };
    let booked = lifeboat_core::order::BookingAnswer::from_outcome(&outcome("book-lb-c1-0"));
    assert!(
        matches!(booked, lifeboat_core::order::BookingAnswer::Booked { .. }),
        "{booked:?}"
    );
    assert_eq!(
        outcome("book-lb-c1-1").failure_reason(),
        Some(FailureReason::Rejected)
    );
    assert_eq!(w.sim.stats().bookings, 1);
    assert_eq!(w.cache.len(), 0, "nothing of a booking is cached");
}

#[tokio::test(start_paused = true)]
async fn healthy_requests_are_answered_once() {
    let w = world();
    let payload = batch(&w, "nordic", 20, 10).await;
    let report = w.consumer.handle(&payload).await.unwrap();
    assert_eq!(
        (report.requests, report.calls, report.outcomes_written),
        (20, 20, 20)
    );
    assert!(report.response.batch_item_failures.is_empty());
    assert_eq!(report.trips_requested, 0);
    let answered = w
        .requests
        .all()
        .iter()
        .filter(|s| {
            matches!(
                s.outcome.as_ref().map(|o| &o.kind),
                Some(OutcomeKind::Answered { .. })
            )
        })
        .count();
    assert!(answered >= 17, "{answered} of 20 answered");

    // The one question of the batch is cached with the newest answer.
    let key = CacheKey::new(
        &OperatorId::new("nordic").unwrap(),
        lifeboat_core::Operation::Search,
        &[
            ("from".to_owned(), "HEL".to_owned()),
            ("to".to_owned(), "TLL".to_owned()),
        ]
        .into(),
    );
    let cached = w.cache.get(&key).await.unwrap().unwrap().answer.unwrap();
    let newest = w
        .requests
        .all()
        .iter()
        .filter_map(|s| s.outcome.as_ref())
        .filter(|o| matches!(o.kind, OutcomeKind::Answered { .. }))
        .map(|o| o.at)
        .max()
        .unwrap();
    assert_eq!((w.cache.len(), cached.as_of), (1, newest));
    assert!(cached.body.contains("sailings"));

    // The batch's metrics: 20 calls by class, 20 durations, the failed ones.
    let calls = w
        .metrics
        .sum(names::OPERATOR_CALLS, &[("Operator", "nordic")]);
    assert_eq!(calls, 20.0);
    let durations: usize = w
        .metrics
        .lines()
        .iter()
        .filter_map(|l| l[names::CALL_DURATION].as_array().map(Vec::len))
        .sum();
    assert_eq!(durations, 20);
    let failed = w
        .metrics
        .sum(names::FAILED_CALLS, &[("Operator", "nordic")]);
    assert_eq!(failed, (20 - answered) as f64);
    assert_eq!(w.metrics.sum(names::CALLS_WHILE_OPEN, &[]), 0.0);

    // The same batch again (Lambda retrying it) calls nobody.
    let again = w.consumer.handle(&payload).await.unwrap();
    assert_eq!((again.calls, again.already_answered), (0, 20));
    assert_eq!(w.sim.stats().questions(), 20);
}

#[tokio::test(start_paused = true)]
async fn an_answered_search_is_kept_to_probe_with_once_a_minute() {
    let w = world();
    let nordic = OperatorId::new("nordic").unwrap();
    // Refused: nothing answered, nothing kept.
    w.sim.set_mode(Some(OutageMode::Refuse));
    let payload = batch(&w, "nordic", 3, 10).await;
    w.consumer.handle(&payload).await.unwrap();
    assert_eq!(w.breakers.answered(&nordic).await.unwrap(), None);
    // Answered: the question is kept as asked.
    w.sim.set_mode(None);
    tokio::time::advance(std::time::Duration::from_secs(1)).await;
    let payload = batch(&w, "nordic", 3, 10).await;
    w.consumer.handle(&payload).await.unwrap();
    let kept = w.breakers.answered(&nordic).await.unwrap().unwrap();
    assert_eq!(kept.operation, lifeboat_core::Operation::Search);
    assert_eq!(kept.params["from"], "HEL");
    // Not again within the minute (a store call saved per batch).
    let other = lifeboat_core::probe::ProbeSpec {
        operation: lifeboat_core::Operation::Search,
        params: [("from".to_owned(), "XXX".to_owned())].into(),
    };
    w.breakers
        .remember_answered(&nordic, &other, w.clock.now())
        .await
        .unwrap();
    tokio::time::advance(std::time::Duration::from_secs(1)).await;
    let payload = batch(&w, "nordic", 3, 10).await;
    w.consumer.handle(&payload).await.unwrap();
    assert_eq!(w.breakers.answered(&nordic).await.unwrap(), Some(other));
    tokio::time::advance(REMEMBER_EVERY).await;
    let payload = batch(&w, "nordic", 3, 10).await;
    w.consumer.handle(&payload).await.unwrap();
    assert_eq!(w.breakers.answered(&nordic).await.unwrap(), Some(kept));
}

#[tokio::test(start_paused = true)]
async fn the_fixture_batch_is_processed() {
    let w = world();
    let payload = fixture("dynamodb-insert-requests.json");
    for record in records(&payload).unwrap() {
        if let StreamItem::Request { request, .. } = classify(record) {
            w.requests.put_request(&request).await.unwrap();
        }
    }
    let report = w.consumer.handle(&payload).await.unwrap();
    assert_eq!(report.requests, 3);
    assert_eq!(report.outcomes_written, 3);
}

#[tokio::test(start_paused = true)]
async fn foreign_and_malformed_records_neither_crash_nor_fail_the_batch() {
    let w = world();
    let payload = fixture("dynamodb-foreign-and-malformed.json");
    for record in records(&payload).unwrap() {
        if let StreamItem::Request { request, .. } = classify(record) {
            w.requests.put_request(&request).await.unwrap();
        }
    }
    let report = w.consumer.handle(&payload).await.unwrap();
    assert!(report.response.batch_item_failures.is_empty(), "{report:?}");
    assert_eq!(report.skipped, 2, "the MODIFY and the REMOVE");
    assert!(report.quarantined >= 3, "{report:?}");
    assert_eq!(
        events_of(&w.bus, "Operator Request Failed"),
        report.quarantined
    );
    assert!(
        w.consumer
            .handle(&json!({"Records": "nope"}))
            .await
            .is_err()
    );
}

#[tokio::test(start_paused = true)]
async fn unknown_operators_and_expired_requests_are_not_called() {
    let w = world();
    let unknown = batch(&w, "atlantis", 2, 10).await;
    let report = w.consumer.handle(&unknown).await.unwrap();
    assert_eq!((report.calls, report.outcomes_written), (0, 2));
    let expired = batch(&w, "nordic", 3, 1).await;
    tokio::time::advance(std::time::Duration::from_secs(2)).await;
    let report = w.consumer.handle(&expired).await.unwrap();
    assert_eq!((report.calls, report.outcomes_written), (0, 3));
    let reasons: Vec<_> = w
        .requests
        .all()
        .iter()
        .filter_map(|s| s.outcome.as_ref()?.failure_reason())
        .collect();
    assert_eq!(
        reasons
            .iter()
            .filter(|r| **r == FailureReason::Malformed)
            .count(),
        2
    );
    assert_eq!(
        reasons
            .iter()
            .filter(|r| **r == FailureReason::Expired)
            .count(),
        3
    );
    assert_eq!(w.sim.stats().total, 0);
}

#[tokio::test(start_paused = true)]
async fn an_open_breaker_means_no_calls() {
    let w = world();
    put_breaker(&w, BreakerState::Open, 3).await;
    let report = handled(&w, 10).await;
    assert_eq!((report.calls, report.outcomes_written), (0, 10));
    assert_eq!(w.sim.stats().total, 0);
    assert_eq!(events_of(&w.bus, "Operator Request Failed"), 10);
}

#[tokio::test(start_paused = true)]
async fn an_answer_too_big_to_keep_is_a_failed_outcome_not_a_retry() {
    let w = world();
    w.sim.set_mode(Some(OutageMode::Oversized));
    let report = handled(&w, 3).await;
    // Called once each, answered failed, and nothing comes back.
    assert_eq!((report.calls, report.outcomes_written), (3, 3));
    assert!(report.response.batch_item_failures.is_empty());
    assert_eq!(w.sim.stats().questions(), 3);
    for stored in w.requests.all() {
        match stored.outcome.map(|o| o.kind) {
            Some(OutcomeKind::Failed { reason, detail }) => {
                assert_eq!(reason, FailureReason::UpstreamError);
                assert!(detail.contains("larger than the 262144"), "{detail}");
            }
            other => panic!("expected a failed outcome, got {other:?}"),
        }
    }
    assert_eq!(events_of(&w.bus, "Operator Request Failed"), 3);
}

#[tokio::test(start_paused = true)]
async fn a_hanging_operator_asks_for_a_trip() {
    let w = world();
    put_breaker(&w, BreakerState::Closed, 2).await;
    w.sim.set_mode(Some(OutageMode::Hang));
    let report = handled(&w, 12).await;
    assert_eq!(report.calls, 12);
    assert_eq!(report.trips_requested, 1);
    let trip = w.bus.events().into_iter().find_map(|e| match e {
        LifeboatEvent::TripRequested(t) => Some(t),
        _ => None,
    });
    assert_eq!(trip.unwrap().observed_version, 2);
    assert_eq!(events_of(&w.bus, "Operator Request Failed"), 12);
}

/// nordic's settings with no hang check (`"hang_check": null`): the
/// window's rules alone.
fn without_hang_check(w: &mut World) {
    w.consumer.settings.default.hang_check = None;
}

/// nordic's settings with a ping hang check (the default, made explicit).
fn with_hang_check(w: &mut World) {
    let check = lifeboat_core::settings::HangCheck::default();
    w.consumer.settings.default.hang_check = Some(check);
}

#[tokio::test(start_paused = true)]
async fn one_timeout_confirmed_by_the_hang_check_trips_at_once() {
    let mut w = world();
    with_hang_check(&mut w);
    put_breaker(&w, BreakerState::Closed, 2).await;
    w.sim.set_mode(Some(OutageMode::Hang));
    let started = w.clock.now();
    let report = handled(&w, 1).await;
    assert_eq!(report.trips_requested, 1);
    let trip = w.bus.events().into_iter().find_map(|e| match e {
        LifeboatEvent::TripRequested(t) => Some(t),
        _ => None,
    });
    let trip = trip.unwrap();
    assert_eq!(
        trip.reason,
        TripReason::Window {
            verdict: WindowVerdict::HangConfirmed {
                timeouts: 1,
                check_ms: 1_000
            }
        }
    );
    // The search's 3 s, then the check's 1 s: its pings went out from 2 s
    // into the call, every half second, none answered.
    assert_eq!(trip.at - started, TimeDelta::seconds(4));
    assert_eq!(w.sim.stats().by_operation.ping, 4);
}

/// An operator whose searches hang and whose pings answer after the delays
/// of `pings`, in turn (the last one for the rest): one that hesitates.
struct Hesitant {
    sim: SimulatedOperator,
    pings: std::sync::Mutex<std::collections::VecDeque<std::time::Duration>>,
    sent: std::sync::Mutex<Vec<DateTime<Utc>>>,
    clock: Arc<TokioClock>,
    /// What a ping answered in time answers.
    answer: lifeboat_core::request::CallClass,
    /// Searches answered after these delays, in turn, before the
    /// simulated operator (hanging) takes the rest.
    searches: std::sync::Mutex<std::collections::VecDeque<std::time::Duration>>,
}

// The trait's `async fn`, written out (async_trait's shape) to keep the
// crate's dependencies as they are.
impl OperatorApi for Hesitant {
    fn knows(&self, operator: &OperatorId) -> bool {
        self.sim.knows(operator)
    }

    fn call<'a, 'b, 'f>(
        &'a self,
        call: &'b lifeboat_core::request::OperatorCall,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = lifeboat_core::request::CallResult> + Send + 'f>,
    >
    where
        'a: 'f,
        'b: 'f,
        Self: 'f,
    {
        Box::pin(self.answer(call))
    }
}

impl Hesitant {
    async fn answer(
        &self,
        call: &lifeboat_core::request::OperatorCall,
    ) -> lifeboat_core::request::CallResult {
        if call.operation != lifeboat_core::Operation::Ping {
            let scripted = self.searches.lock().unwrap().pop_front();
            let Some(delay) = scripted else {
                return self.sim.call(call).await;
            };
            let timeout = call.budget.timeout;
            tokio::time::sleep(delay.min(timeout)).await;
            return lifeboat_core::request::CallResult {
                class: if delay < timeout {
                    lifeboat_core::request::CallClass::Ok
                } else {
                    lifeboat_core::request::CallClass::Timeout
                },
                elapsed: delay.min(timeout),
                body: Some("{\"sailings\":[]}".into()),
                detail: String::new(),
            };
        }
        self.sent.lock().unwrap().push(self.clock.now());
        let delay = {
            let mut pings = self.pings.lock().unwrap();
            if pings.len() > 1 {
                pings.pop_front().unwrap()
            } else {
                pings[0]
            }
        };
        let timeout = call.budget.timeout;
        tokio::time::sleep(delay.min(timeout)).await;
        lifeboat_core::request::CallResult {
            class: if delay < timeout {
                self.answer.clone()
            } else {
                lifeboat_core::request::CallClass::Timeout
            },
            elapsed: delay.min(timeout),
            body: Some("{\"ok\":true}".into()),
            detail: String::new(),
        }
    }
}

/// nordic, hanging, behind pings that answer after `pings` in turn; a
/// ping hang check.
fn hesitant_world(pings: &[u64]) -> (World, Arc<Hesitant>) {
    let mut w = world();
    with_hang_check(&mut w);
    w.sim.set_mode(Some(OutageMode::Hang));
    let api = Arc::new(Hesitant {
        sim: w.sim.clone(),
        pings: std::sync::Mutex::new(
            pings
                .iter()
                .map(|ms| std::time::Duration::from_millis(*ms))
                .collect(),
        ),
        sent: std::sync::Mutex::new(Vec::new()),
        clock: w.clock.clone(),
        answer: lifeboat_core::request::CallClass::Ok,
        searches: std::sync::Mutex::new(std::collections::VecDeque::new()),
    });
    w.consumer.operator = api.clone();
    (w, api)
}

#[tokio::test(start_paused = true)]
async fn timeouts_in_a_row_whose_pings_answer_are_the_hang_checks_to_judge() {
    // Six calls time out in one batch: without a check, six timeouts in a
    // row trip (a_breaker_never_stored_counts_every_batch_of_the_window).
    // Its pings answer in 100 ms: a slow moment, not a hang.
    let (w, api) = hesitant_world(&[100]);
    put_breaker(&w, BreakerState::Closed, 2).await;
    assert_eq!(trips(&w, 6).await, 0);
    assert_eq!(api.sent.lock().unwrap().len(), 1);
    // Pings that do not answer confirm it at once.
    let (w, _) = hesitant_world(&[5_000]);
    put_breaker(&w, BreakerState::Closed, 2).await;
    assert_eq!(trips(&w, 6).await, 1);
}

#[tokio::test(start_paused = true)]
async fn a_hang_check_the_operator_has_no_route_for_leaves_timeouts_to_the_window() {
    let (mut w, _) = hesitant_world(&[100]);
    let api = Arc::new(Hesitant {
        sim: w.sim.clone(),
        pings: std::sync::Mutex::new([std::time::Duration::from_millis(20)].into()),
        sent: std::sync::Mutex::new(Vec::new()),
        clock: w.clock.clone(),
        answer: lifeboat_core::request::CallClass::ClientError { status: 404 },
        searches: std::sync::Mutex::new(std::collections::VecDeque::new()),
    });
    w.consumer.operator = api.clone();
    put_breaker(&w, BreakerState::Closed, 2).await;
    // One timeout: the window's rules do not trip, and the check cannot.
    assert_eq!(trips(&w, 1).await, 0);
    // Six in a row trip as they would without a check.
    assert_eq!(trips(&w, 5).await, 1);
    assert_eq!(api.sent.lock().unwrap().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn one_slow_ping_after_a_timeout_is_not_a_hang() {
    // The search times out at 3 s. The one ping the old check sent then
    // would have taken 1.2 s, over its 1 s: a trip. The ping sent at 2 s,
    // while the search was late, answers at 3.5 s: the operator is there.
    let (w, api) = hesitant_world(&[1_500, 1_200]);
    put_breaker(&w, BreakerState::Closed, 2).await;
    let started = w.clock.now();
    let report = handled(&w, 1).await;
    assert_eq!(report.calls, 1);
    assert_eq!(report.trips_requested, 0);
    let sent: Vec<i64> = api
        .sent
        .lock()
        .unwrap()
        .iter()
        .map(|at| (*at - started).num_milliseconds())
        .collect();
    // 2 s, 2.5 s and 3 s; the answer at 3.5 s stops the fourth.
    assert_eq!(sent, vec![2_000, 2_500, 3_000]);
}

#[tokio::test(start_paused = true)]
async fn pings_that_never_answer_confirm_the_hang_in_time() {
    // The same operator with pings slower than any of their timeouts.
    let (w, api) = hesitant_world(&[5_000]);
    put_breaker(&w, BreakerState::Closed, 2).await;
    let started = w.clock.now();
    assert_eq!(trips(&w, 1).await, 1);
    let trip = w.bus.events().into_iter().find_map(|e| match e {
        LifeboatEvent::TripRequested(t) => Some(t),
        _ => None,
    });
    // Budget + the check's timeout, within budget + 2 s.
    assert_eq!(trip.unwrap().at - started, TimeDelta::seconds(4));
    assert_eq!(api.sent.lock().unwrap().len(), 4);
}

/// A busy operator in a slow moment: the batch's watched search times out
/// and none of its pings answers (they queue), but another search of the
/// batch is answered while the watched one is late. The operator is there:
/// no trip. An answer that came before the watched call was late (before
/// the first ping) says nothing, and the hang is confirmed as before.
#[tokio::test(start_paused = true)]
async fn another_call_answered_while_the_watched_one_is_late_is_not_a_hang() {
    for (second_ms, trips_asked) in [(2_500, 0), (1_500, 1)] {
        let (w, api) = hesitant_world(&[5_000]);
        api.searches.lock().unwrap().extend([
            std::time::Duration::from_millis(5_000),
            std::time::Duration::from_millis(second_ms),
        ]);
        put_breaker(&w, BreakerState::Closed, 2).await;
        let report = handled(&w, 2).await;
        assert_eq!(report.calls, 2);
        assert_eq!(
            report.trips_requested, trips_asked,
            "second search answered after {second_ms} ms"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_hang_that_begins_inside_a_batch_is_watched_from_its_first_call() {
    // One call at a time: the first is answered (and was the watched one),
    // the second hangs and its pings go unanswered. The second is watched
    // once the first ended, so the batch asks for the trip; watching only
    // the batch's first call left it to the next batch.
    let (mut w, api) = hesitant_world(&[5_000]);
    w.consumer.concurrency = 1;
    api.searches.lock().unwrap().extend([
        std::time::Duration::from_millis(100),
        std::time::Duration::from_millis(5_000),
    ]);
    put_breaker(&w, BreakerState::Closed, 2).await;
    let report = handled(&w, 2).await;
    assert_eq!(report.calls, 2);
    assert_eq!(report.trips_requested, 1);
    assert!(
        !api.sent.lock().unwrap().is_empty(),
        "the hanging call was pinged"
    );
}

#[tokio::test(start_paused = true)]
async fn a_slow_operator_that_answers_the_hang_check_is_left_to_the_window() {
    let mut w = world();
    with_hang_check(&mut w);
    put_breaker(&w, BreakerState::Closed, 2).await;
    // Answers after the budget, but the ping sent 2 s into the call is
    // answered at once: no more pings.
    w.sim.set_mode(Some(OutageMode::Slow));
    assert_eq!(trips(&w, 1).await, 0);
    assert_eq!(w.sim.stats().by_operation.ping, 1);
    // A call answered before 2 s sends none.
    w.sim.set_mode(Some(OutageMode::ServerError));
    assert_eq!(trips(&w, 1).await, 0);
    assert_eq!(w.sim.stats().by_operation.ping, 1);
}

#[tokio::test(start_paused = true)]
async fn without_a_hang_check_one_timeout_does_not_trip() {
    let mut w = world();
    without_hang_check(&mut w);
    put_breaker(&w, BreakerState::Closed, 2).await;
    w.sim.set_mode(Some(OutageMode::Hang));
    assert_eq!(trips(&w, 1).await, 0);
    assert_eq!(w.sim.stats().by_operation.ping, 0);
}

/// What the consumer reports of one batch of `n` requests for nordic.
async fn handled(w: &World, n: usize) -> crate::BatchReport {
    let payload = batch(w, "nordic", n, 10).await;
    w.consumer.handle(&payload).await.unwrap()
}

/// The trips one batch of `n` requests for nordic asks for.
async fn trips(w: &World, n: usize) -> usize {
    handled(w, n).await.trips_requested
}

#[tokio::test(start_paused = true)]
async fn a_breaker_never_stored_counts_every_batch_of_the_window() {
    // Closed since forever: timeouts of earlier batches count too.
    let mut w = world();
    without_hang_check(&mut w);
    w.sim.set_mode(Some(OutageMode::Hang));
    assert_eq!(trips(&w, 3).await, 0);
    assert_eq!(trips(&w, 3).await, 1);
}

#[tokio::test(start_paused = true)]
async fn failures_from_before_the_breaker_closed_do_not_count() {
    let mut w = world();
    without_hang_check(&mut w);
    put_breaker(&w, BreakerState::Closed, 2).await;
    w.sim.set_mode(Some(OutageMode::Hang));
    assert_eq!(trips(&w, 3).await, 0);
    // The breaker opened and closed again since (a probe found the
    // operator back within seconds): three more timeouts make six in a
    // row in the window, but only three since the close.
    let mut closed = BreakerRecord::initial(OperatorId::new("nordic").unwrap(), w.clock.now());
    closed.version = 4;
    w.breakers.save(&closed, Some(2)).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert_eq!(trips(&w, 3).await, 0);
    // Two more after the close make five: that trips.
    assert_eq!(trips(&w, 2).await, 1);
}

#[tokio::test(start_paused = true)]
async fn half_open_calls_at_most_k_and_reports_the_round() {
    let w = world();
    put_breaker(&w, BreakerState::HalfOpen, 5).await;
    let report = handled(&w, 30).await;
    let k = Settings::default().default.breaker.trial_calls as usize;
    assert_eq!(report.calls, k);
    assert_eq!(w.sim.stats().questions() as usize, k);
    assert_eq!(report.outcomes_written, 30);
    let record = w
        .breakers
        .load(&OperatorId::new("nordic").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.trials_claimed as usize, k);
    // The simulated operator is healthy: the round passes (or, on a rare
    // background error, fails) and says so.
    assert_eq!(report.trials_passed + report.trips_requested, 1);
    // A second batch in the same round gets no slot.
    let second = handled(&w, 5).await;
    assert_eq!(second.calls, 0);
}

#[tokio::test(start_paused = true)]
async fn a_half_open_round_bears_one_timed_out_trial_but_no_error() {
    let mut w = world();
    without_hang_check(&mut w);
    put_breaker(&w, BreakerState::HalfOpen, 5).await;
    // One trial times out (a healthy operator's slow moment): no verdict.
    w.sim.set_mode(Some(OutageMode::Hang));
    let first = trial_batch(&w, 1).await;
    assert_eq!((first.trips_requested, first.trials_passed), (0, 0));
    // Two answered: the round passes with its one timeout.
    w.sim.set_mode(None);
    let second = trial_batch(&w, 2).await;
    assert_eq!((second.trips_requested, second.trials_passed), (0, 1));

    // A new round: one refused trial fails it at once.
    let nordic = OperatorId::new("nordic").unwrap();
    let mut next = BreakerRecord::initial(nordic.clone(), w.clock.now());
    next.state = BreakerState::HalfOpen;
    next.version = 7;
    w.breakers.save(&next, Some(5)).await.unwrap();
    w.sim.set_mode(Some(OutageMode::ServerError));
    assert_eq!(trial_batch(&w, 1).await.trips_requested, 1);

    // And another: a second timeout fails it.
    next.version = 9;
    w.breakers.save(&next, Some(7)).await.unwrap();
    w.sim.set_mode(Some(OutageMode::Hang));
    assert_eq!(trial_batch(&w, 1).await.trips_requested, 0);
    assert_eq!(trial_batch(&w, 1).await.trips_requested, 1);
}

async fn trial_batch(w: &World, n: usize) -> crate::BatchReport {
    let payload = batch(w, "nordic", n, 10).await;
    w.consumer.handle(&payload).await.unwrap()
}

#[tokio::test(start_paused = true)]
async fn the_pings_stop_once_the_breaker_has_opened() {
    // A batch already running when the switch opened the breaker (a trip
    // the batch before asked for): one ping, then the train reads the
    // breaker, finds it open and sends no more; no second trip is asked.
    let (w, api) = hesitant_world(&[5_000]);
    put_breaker(&w, BreakerState::Closed, 2).await;
    let breakers = w.breakers.clone();
    let opener = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(2_200)).await;
        let nordic = OperatorId::new("nordic").unwrap();
        let mut record = breakers.load(&nordic).await.unwrap().unwrap();
        record.state = BreakerState::Open;
        record.version = 3;
        breakers.save(&record, Some(2)).await.unwrap();
    });
    assert_eq!(trips(&w, 2).await, 0);
    opener.await.unwrap();
    // One watched call per operator and batch: one train, one ping.
    assert_eq!(api.sent.lock().unwrap().len(), 1);
}

/// An operator that answers every call with the same 4xx, at once: a
/// broken deploy that refuses everything.
struct Refusing {
    status: u16,
}

// The trait's `async fn`, written out as for `Hesitant`.
impl OperatorApi for Refusing {
    fn knows(&self, operator: &OperatorId) -> bool {
        operator.as_str() == "nordic"
    }

    fn call<'a, 'b, 'f>(
        &'a self,
        _call: &'b lifeboat_core::request::OperatorCall,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = lifeboat_core::request::CallResult> + Send + 'f>,
    >
    where
        'a: 'f,
        'b: 'f,
        Self: 'f,
    {
        let status = self.status;
        Box::pin(async move {
            lifeboat_core::request::CallResult {
                class: lifeboat_core::request::CallClass::ClientError { status },
                elapsed: std::time::Duration::from_millis(20),
                body: Some(r#"{"error":"no such route"}"#.into()),
                detail: format!("operator answered {status}"),
            }
        })
    }
}

/// The cache key of the question `batch` asks.
fn batch_key() -> CacheKey {
    CacheKey::new(
        &OperatorId::new("nordic").unwrap(),
        lifeboat_core::Operation::Search,
        &[
            ("from".to_owned(), "HEL".to_owned()),
            ("to".to_owned(), "TLL".to_owned()),
        ]
        .into(),
    )
}

#[tokio::test(start_paused = true)]
async fn a_refusal_is_cached_beside_the_good_answer_not_instead_of_it() {
    let mut w = world();
    put_breaker(&w, BreakerState::Closed, 2).await;
    w.consumer
        .handle(&batch(&w, "nordic", 5, 10).await)
        .await
        .unwrap();
    let good = w.cache.get(&batch_key()).await.unwrap().unwrap().answer;
    let good = good.expect("a good answer is cached");

    // The operator now refuses the same question.
    tokio::time::advance(std::time::Duration::from_secs(30)).await;
    w.consumer.operator = Arc::new(Refusing { status: 404 });
    let report = handled(&w, 1).await;
    assert_eq!((report.calls, report.trips_requested), (1, 0));
    let entry = w.cache.get(&batch_key()).await.unwrap().unwrap();
    // The good answer is still there, unchanged: had the refusal replaced
    // it, there would be no last good answer to show.
    assert_eq!(entry.answer.as_ref(), Some(&good));
    let refusal = entry.refusal.as_ref().expect("the refusal is cached");
    assert_eq!(refusal.status, 404);
    assert!(refusal.at > good.as_of && refusal.at <= w.clock.now());
    let policy = Settings::default().default.cache;
    assert!(entry.negative(&policy, w.clock.now()).is_some());
    assert_eq!(entry.last_good(&policy, w.clock.now()), Some(&good));
}

#[tokio::test(start_paused = true)]
async fn an_operator_that_refuses_everything_trips_once_most_calls_are_refused() {
    let mut w = world();
    put_breaker(&w, BreakerState::Closed, 2).await;
    // A broken deploy: 404 to every question. The streak rules never see
    // a neutral 4xx; only the share of refusals can tell.
    w.consumer.operator = Arc::new(Refusing { status: 404 });
    let nordic = OperatorId::new("nordic").unwrap();
    let settings = Settings::default().default.window;
    let window_since = |w: &World| {
        let window = w.window.clone();
        let nordic = nordic.clone();
        async move {
            let mut total = lifeboat_core::window::CallCounts::default();
            for bucket in window
                .since(&nordic, DateTime::<Utc>::MIN_UTC)
                .await
                .unwrap()
            {
                total.add(&bucket.counts);
            }
            total
        }
    };

    // Below the minimum of calls: counted as refusals, not failures.
    assert_eq!(trips(&w, 19).await, 0);
    let counted = window_since(&w).await;
    assert_eq!((counted.calls, counted.refusals), (0, 19));
    assert_eq!(settings.judged(&counted).1, 0);

    // The twentieth refusal in the window: every refusal is a failure now,
    // and the failure-rate rule asks for a trip.
    tokio::time::advance(std::time::Duration::from_millis(500)).await;
    assert_eq!(trips(&w, 1).await, 1);
    let counted = window_since(&w).await;
    let (judged, refused) = settings.judged(&counted);
    assert_eq!((judged.calls, judged.failures, refused), (20, 20, 20));
    let trip = w.bus.events().into_iter().find_map(|e| match e {
        LifeboatEvent::TripRequested(t) => Some(t),
        _ => None,
    });
    assert_eq!(
        trip.unwrap().reason,
        TripReason::Window {
            verdict: WindowVerdict::FailureRate {
                rate: 1.0,
                calls: 20,
                refused: 20,
            }
        }
    );
}

#[tokio::test(start_paused = true)]
async fn a_normal_share_of_refusals_does_not_trip() {
    let mut w = world();
    put_breaker(&w, BreakerState::Closed, 2).await;
    // Half the questions answered, half refused, over and over: never more
    // than half refused, never a trip.
    for _ in 0..4 {
        w.consumer.operator = Arc::new(w.sim.clone());
        let answered = trips(&w, 10).await;
        w.consumer.operator = Arc::new(Refusing { status: 404 });
        let refused = trips(&w, 5).await;
        assert_eq!((answered, refused), (0, 0));
        tokio::time::advance(std::time::Duration::from_millis(500)).await;
    }
}

/// A healthy operator that answers 429 to any call beyond `most` in flight
/// at once (as operators that limit a caller's concurrency do), and every
/// other call after 200 ms.
struct Crowded {
    most: u32,
    in_flight: std::sync::atomic::AtomicU32,
    refused: std::sync::atomic::AtomicU32,
    answered: std::sync::atomic::AtomicU32,
}

impl OperatorApi for Crowded {
    fn knows(&self, operator: &OperatorId) -> bool {
        operator.as_str() == "nordic"
    }

    fn call<'a, 'b, 'f>(
        &'a self,
        _call: &'b lifeboat_core::request::OperatorCall,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = lifeboat_core::request::CallResult> + Send + 'f>,
    >
    where
        'a: 'f,
        'b: 'f,
        Self: 'f,
    {
        use std::sync::atomic::Ordering::SeqCst;
        Box::pin(async move {
            let now = self.in_flight.fetch_add(1, SeqCst) + 1;
            let result = if now > self.most {
                self.refused.fetch_add(1, SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                lifeboat_core::request::CallResult {
                    class: lifeboat_core::request::CallClass::ClientError { status: 429 },
                    elapsed: std::time::Duration::from_millis(20),
                    body: None,
                    detail: "429 Too Many Requests".into(),
                }
            } else {
                self.answered.fetch_add(1, SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                lifeboat_core::request::CallResult {
                    class: lifeboat_core::request::CallClass::Ok,
                    elapsed: std::time::Duration::from_millis(200),
                    body: Some("{\"sailings\":[]}".into()),
                    detail: String::new(),
                }
            };
            self.in_flight.fetch_sub(1, SeqCst);
            result
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_healthy_operator_answering_429_to_our_burst_slows_us_down_and_never_trips() {
    use std::sync::atomic::Ordering::SeqCst;
    let mut w = world();
    let crowded = Arc::new(Crowded {
        most: 5,
        in_flight: Default::default(),
        refused: Default::default(),
        answered: Default::default(),
    });
    w.consumer.operator = crowded.clone();
    put_breaker(&w, BreakerState::Closed, 2).await;
    // Batches of 50 at once, one after another, for two minutes: far more
    // than the failure window needs to trip on 429s it counted.
    let mut trips = 0;
    let mut shed = 0;
    for _ in 0..40 {
        let payload = batch(&w, "nordic", 50, 3).await;
        trips += w.consumer.handle(&payload).await.unwrap().trips_requested;
        tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    }
    w.requests.for_each(|r| {
        if r.outcome.as_ref().and_then(|o| o.failure_reason()) == Some(FailureReason::Shed) {
            shed += 1;
        }
    });
    assert_eq!(trips, 0, "lifeboat's own burst tripped a healthy operator");
    let (refused, answered) = (crowded.refused.load(SeqCst), crowded.answered.load(SeqCst));
    // The first burst draws 429s; the limit then stays near the 5, probing
    // one above it now and then (the additive increase's sawtooth).
    println!("429 burst: {answered} answered, {refused} refused with 429, {shed} shed");
    assert!(
        refused > 0,
        "the burst was never refused: the test proves nothing"
    );
    assert!(
        f64::from(refused) < 0.15 * f64::from(answered),
        "{refused} 429s for {answered} answers: the limit never learned"
    );
    assert!(answered > 1_000, "{answered} answered, {shed} shed");
    let limit = w
        .consumer
        .limits
        .of(&OperatorId::new("nordic").unwrap())
        .limit();
    assert!((1..=8).contains(&limit), "limit {limit}");
}

#[tokio::test(start_paused = true)]
async fn an_operator_refusing_even_a_lone_call_with_429_still_trips() {
    let mut w = world();
    w.consumer.operator = Arc::new(Crowded {
        most: 0,
        in_flight: Default::default(),
        refused: Default::default(),
        answered: Default::default(),
    });
    put_breaker(&w, BreakerState::Closed, 2).await;
    let mut trips = 0;
    for _ in 0..20 {
        let payload = batch(&w, "nordic", 20, 3).await;
        trips += w.consumer.handle(&payload).await.unwrap().trips_requested;
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
    assert!(trips > 0, "an operator that refuses everything must trip");
}

/// The consumer's start-up with its settings and endpoints in the operator
/// config table (in memory), and with neither there nor in the environment.
#[tokio::test]
async fn the_consumer_starts_with_the_operator_config_tables_settings() {
    use lifeboat_core::memory::MemoryOperatorConfigStore;
    use lifeboat_core::operator_config::OperatorConfigItem;
    let env = lifeboat_aws::Env::from_pairs([
        ("REQUESTS_TABLE_PREFIX", "lifeboat.requests."),
        ("BREAKER_TABLE", "breakers"),
        ("EVENT_BUS_NAME", "bus"),
        ("CACHE_TABLE", "cache"),
        (
            "OPERATOR_SETTINGS",
            r#"{"default": {"breaker": {"open_base": 5000}}}"#,
        ),
    ]);
    let clients = lifeboat_aws::Clients::load_in_function().await;
    let empty = MemoryOperatorConfigStore::new("operator-config");
    let config = lifeboat_aws::operator_config::load_from(&env, Some(&empty))
        .await
        .unwrap();
    let err = RealConsumer::from_config(&env, &clients, &config)
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("no operator endpoints") && err.contains("operator-config"),
        "{err}"
    );

    let store = MemoryOperatorConfigStore::holding(
        "operator-config",
        OperatorConfigItem {
            endpoints: Some("nordic=https://api.nordic.example".into()),
            settings: Some(r#"{"operators": {"nordic": {"hang_check": {}}}}"#.into()),
            revision: 2,
            updated_at: None,
        },
    );
    let config = lifeboat_aws::operator_config::load_from(&env, Some(&store))
        .await
        .unwrap();
    let consumer = RealConsumer::from_config(&env, &clients, &config)
        .await
        .unwrap();
    let nordic = OperatorId::new("nordic").unwrap();
    assert!(consumer.operator.knows(&nordic));
    assert!(!consumer.operator.knows(&OperatorId::new("baltic").unwrap()));
    assert!(consumer.settings.for_operator(&nordic).hang_check.is_some());
    assert_eq!(
        consumer.settings.default.breaker.open_base,
        lifeboat_core::BreakerConfig::default().open_base,
        "the item's settings, not the environment's"
    );

    // Settings that are not settings JSON stop the start, naming the table.
    let broken = MemoryOperatorConfigStore::holding(
        "operator-config",
        OperatorConfigItem {
            endpoints: Some("nordic=https://api.nordic.example".into()),
            settings: Some(r#"{"operatorz": {"nordic": {}}}"#.into()),
            revision: 3,
            updated_at: None,
        },
    );
    let config = lifeboat_aws::operator_config::load_from(&env, Some(&broken))
        .await
        .unwrap();
    let err = RealConsumer::from_config(&env, &clients, &config)
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("operator config table operator-config") && err.contains("attribute settings"),
        "{err}"
    );
}
