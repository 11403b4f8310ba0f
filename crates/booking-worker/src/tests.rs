//! The worker on the in-memory adapters, on tokio's paused clock. The
//! gateway's part (the stream, the real consumer and the operator) is
//! played by [`Gateway`]: it answers each booking request written, as the
//! real consumer writes a request's outcome.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::{DateTime, TimeDelta, Utc};
use lifeboat_core::cart::{Cart, CartPolicy, Confirmation, Sailing};
use lifeboat_core::events::LifeboatEvent;
use lifeboat_core::memory::{
    MemoryBreakerStore, MemoryEventBus, MemoryMetrics, MemoryOrderStore, MemoryRequestStore,
};
use lifeboat_core::metrics::names;
use lifeboat_core::order::booking::OrderSettings;
use lifeboat_core::order::{
    HeldOrder, HoldReason, OrderPolicy, OrderState, RefundReason, StateName,
};
use lifeboat_core::ports::{BreakerStore, Clock, Held, OrderStore, RequestStore, StoreError};
use lifeboat_core::request::{FailureReason, Outcome, OutcomeKind, RequestRecord};
use lifeboat_core::settings::Settings;
use lifeboat_core::{BreakerRecord, BreakerState, OperatorId};
use serde_json::json;

use super::*;

/// Follows tokio's (paused) time.
#[derive(Debug, Clone, Copy)]
struct TokioClock {
    base: DateTime<Utc>,
    start: tokio::time::Instant,
}

impl Clock for TokioClock {
    fn now(&self) -> DateTime<Utc> {
        self.base + TimeDelta::from_std(self.start.elapsed()).unwrap_or(TimeDelta::MAX)
    }
}

fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_796_104_800, 0).unwrap_or_default()
}

fn ok<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
    r.unwrap_or_else(|e| panic!("{e}"))
}

fn nordic() -> OperatorId {
    ok(OperatorId::new("nordic"))
}

fn schedule() -> serde_json::Value {
    json!({"version": "0", "id": "tick", "detail-type": "Scheduled Event", "source": "aws.events",
           "time": "2026-12-01T06:00:00Z", "detail": {}})
}

struct World {
    orders: Arc<MemoryOrderStore>,
    requests: Arc<MemoryRequestStore>,
    breakers: Arc<MemoryBreakerStore>,
    bus: Arc<MemoryEventBus>,
    metrics: Arc<MemoryMetrics>,
    clock: Arc<TokioClock>,
}

impl World {
    fn new() -> Self {
        Self {
            orders: Arc::new(MemoryOrderStore::new()),
            requests: Arc::new(MemoryRequestStore::new()),
            breakers: Arc::new(MemoryBreakerStore::new()),
            bus: Arc::new(MemoryEventBus::new()),
            metrics: Arc::new(MemoryMetrics::new()),
            clock: Arc::new(TokioClock {
                base: t0(),
                start: tokio::time::Instant::now(),
            }),
        }
    }

    fn worker(&self, policy: OrderPolicy) -> BookingWorker {
        BookingWorker {
            orders: self.orders.clone(),
            requests: self.requests.clone(),
            breakers: self.breakers.clone(),
            events: self.bus.clone(),
            clock: self.clock.clone(),
            metrics: self.metrics.clone(),
            operators: BTreeSet::from([nordic()]),
            settings: Settings::default(),
            order_settings: OrderSettings {
                default: policy,
                ..OrderSettings::default()
            },
            limits: RunLimits::default(),
        }
    }

    /// Hold the order of cart `cart_id` of `operator`, `passengers` on
    /// `sailing_id`, paid 100.00 with rises of 5 % absorbed, held `age_s`
    /// seconds before the start.
    async fn hold(&self, operator: &str, cart_id: &str, sailing_id: &str, age_s: i64) {
        let at = t0() - TimeDelta::seconds(age_s);
        let sailing = Sailing {
            sailing_id: sailing_id.into(),
            from: "HEL".into(),
            to: "TLL".into(),
            date: "2026-12-24".into(),
            passengers: 2,
        };
        let policy = CartPolicy::default();
        let mut cart = Cart::open(
            cart_id.into(),
            ok(OperatorId::new(operator)),
            sailing,
            false,
            &policy,
            at,
        );
        cart.confirmation = Some(Confirmation {
            at,
            amount_cents: 10_000,
            currency: "EUR".into(),
            on_cached_price: true,
            price_as_of: at,
            absorbed_cents: 0,
        });
        let order = ok(HeldOrder::hold(
            &cart,
            Some("seat".into()),
            Vec::new(),
            5,
            HoldReason::OffSale,
            at,
        ));
        assert_eq!(ok(self.orders.hold(&order, None).await), Held::Held);
    }

    async fn set_breaker(&self, operator: &OperatorId, state: BreakerState) {
        let stored = ok(self.breakers.load(operator).await);
        let mut record = stored
            .clone()
            .unwrap_or_else(|| BreakerRecord::initial(operator.clone(), t0()));
        record.state = state;
        record.version += u64::from(stored.is_some());
        ok(self.breakers.save(&record, stored.map(|s| s.version)).await);
    }

    async fn order(&self, order_id: &str) -> HeldOrder {
        ok(self.orders.get(order_id).await).unwrap_or_else(|| panic!("{order_id} not held"))
    }

    fn book_requests(&self) -> Vec<RequestRecord> {
        let mut requests: Vec<RequestRecord> = self
            .requests
            .all()
            .into_iter()
            .map(|s| s.request)
            .filter(|r| r.operation == lifeboat_core::Operation::Book)
            .collect();
        requests.sort_by(|a, b| (a.created_at, &a.request_id).cmp(&(b.created_at, &b.request_id)));
        requests
    }

    fn moves(&self, to: StateName) -> usize {
        self.bus
            .events()
            .iter()
            .filter(|e| matches!(e, LifeboatEvent::OrderMoved(m) if m.to == to))
            .count()
    }
}

type Answer = Box<dyn Fn(&RequestRecord) -> Option<Outcome> + Send + Sync>;

/// Plays the gateway: each booking request is answered `delay` after it
/// was written with what `answer` says (`None`: never), and the most
/// requests out at once are counted.
struct Gateway {
    most_out: AtomicUsize,
    answered: Mutex<BTreeSet<String>>,
}

impl Gateway {
    fn spawn(
        world: &World,
        delay: TimeDelta,
        answer: Answer,
    ) -> (Arc<Self>, tokio::task::JoinHandle<()>) {
        let gateway = Arc::new(Self {
            most_out: AtomicUsize::new(0),
            answered: Mutex::new(BTreeSet::new()),
        });
        let (requests, clock, g) = (world.requests.clone(), world.clock.clone(), gateway.clone());
        let task = tokio::spawn(async move {
            loop {
                let now = clock.now();
                let open: Vec<RequestRecord> = requests
                    .all()
                    .into_iter()
                    .filter(|s| s.outcome.is_none())
                    .map(|s| s.request)
                    .filter(|r| {
                        !g.answered
                            .lock()
                            .map(|a| a.contains(&r.request_id))
                            .unwrap_or(true)
                    })
                    .collect();
                g.most_out.fetch_max(open.len(), Ordering::Relaxed);
                for request in open.iter().filter(|r| r.created_at + delay <= now) {
                    if let Ok(mut answered) = g.answered.lock() {
                        answered.insert(request.request_id.clone());
                    }
                    if let Some(outcome) = answer(request) {
                        ok(requests
                            .write_outcome(&request.operator, &request.request_id, &outcome)
                            .await);
                    }
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        });
        (gateway, task)
    }
}

fn answered(body: serde_json::Value) -> Outcome {
    Outcome {
        kind: OutcomeKind::Answered {
            body: body.to_string(),
        },
        at: t0(),
        by: "real-consumer".into(),
        call_ms: Some(900),
    }
}

fn booked(request: &RequestRecord) -> Option<Outcome> {
    let key = request
        .params
        .get("idempotency_key")
        .cloned()
        .unwrap_or_default();
    Some(answered(
        json!({"status": "booked", "booking_ref": format!("BK-{key}"),
                         "price_cents": 10_000, "currency": "EUR"}),
    ))
}

#[tokio::test(start_paused = true)]
async fn held_orders_are_booked_oldest_first_a_few_at_a_time() {
    let w = World::new();
    for (cart, age) in [
        ("c", 30),
        ("a", 50),
        ("e", 10),
        ("b", 40),
        ("d", 20),
        ("f", 5),
    ] {
        w.hold("nordic", cart, &format!("s-{cart}"), age).await;
    }
    let (gateway, task) = Gateway::spawn(&w, TimeDelta::seconds(2), Box::new(booked));
    let policy = OrderPolicy {
        in_flight: 2,
        ..OrderPolicy::default()
    };
    let report = ok(w.worker(policy).handle(&schedule()).await);
    task.abort();
    let keys: Vec<String> = w
        .book_requests()
        .iter()
        .filter_map(|r| r.params.get("idempotency_key").cloned())
        .collect();
    assert_eq!(keys, ["lb-a", "lb-b", "lb-c", "lb-d", "lb-e", "lb-f"]);
    assert_eq!(gateway.most_out.load(Ordering::Relaxed), 2, "in flight");
    for id in ["lb-a", "lb-b", "lb-c", "lb-d", "lb-e", "lb-f"] {
        let order = w.order(id).await;
        assert!(
            matches!(&order.state, OrderState::Booked { booking_ref, .. } if *booking_ref == format!("BK-{id}")),
            "{id}: {:?}",
            order.state
        );
        let lines: Vec<StateName> = order.history.iter().map(|e| e.to).collect();
        assert_eq!(
            lines,
            [StateName::Held, StateName::Booking, StateName::Booked]
        );
    }
    assert_eq!(
        (w.moves(StateName::Booking), w.moves(StateName::Booked)),
        (6, 6)
    );
    let nordic_report = &report.operators[0];
    assert_eq!(nordic_report.started, 6);
    assert_eq!(nordic_report.open, 0);
    assert!(
        nordic_report.errors.is_empty(),
        "{:?}",
        nordic_report.errors
    );
    let moved = w.metrics.sum(
        names::ORDERS_MOVED,
        &[("Operator", "nordic"), ("State", "booked")],
    );
    assert_eq!(moved, 6.0);
    // Each booked order's time from its hold to its booking, once.
    let mut expected = Vec::new();
    for id in ["lb-a", "lb-b", "lb-c", "lb-d", "lb-e", "lb-f"] {
        let order = w.order(id).await;
        let OrderState::Booked { at, .. } = order.state else {
            panic!("{id}: {:?}", order.state)
        };
        expected.push((at - order.held_at).num_milliseconds() as f64 / 1000.0);
    }
    let mut seen: Vec<f64> = w
        .metrics
        .lines()
        .iter()
        .filter(|l| l["Operator"] == "nordic")
        .filter_map(|l| l.get(names::ORDER_TIME_TO_BOOK))
        .flat_map(|v| v.as_array().cloned().unwrap_or_default())
        .filter_map(|v| v.as_f64())
        .collect();
    seen.sort_by(f64::total_cmp);
    expected.sort_by(f64::total_cmp);
    assert_eq!(seen, expected);
    assert!(
        seen.iter().all(|s| *s >= 5.0),
        "held 5 s ago at least: {seen:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn nothing_is_booked_while_the_breaker_is_not_closed() {
    let w = World::new();
    w.hold("nordic", "a", "s1", 60).await;
    for state in [
        BreakerState::Open,
        BreakerState::HalfOpen,
        BreakerState::ForcedOpen,
    ] {
        w.set_breaker(&nordic(), state).await;
        let report = ok(w.worker(OrderPolicy::default()).handle(&schedule()).await);
        assert!(w.book_requests().is_empty(), "{state:?}");
        // Orders read once for what time does to them; then only the
        // breaker is watched.
        assert_eq!(report.operators[0].rounds, 1, "{state:?}");
    }
    w.set_breaker(&nordic(), BreakerState::ForcedClosed).await;
    let (_, task) = Gateway::spawn(&w, TimeDelta::seconds(1), Box::new(booked));
    let report = w.worker(OrderPolicy::default()).run().await;
    task.abort();
    assert!(report.operators[0].errors.is_empty(), "{report:?}");
    assert!(matches!(
        w.order("lb-a").await.state,
        OrderState::Booked { .. }
    ));
}

#[tokio::test(start_paused = true)]
async fn the_operator_coming_back_mid_run_is_seen_within_seconds() {
    let w = World::new();
    w.hold("nordic", "a", "s1", 60).await;
    w.set_breaker(&nordic(), BreakerState::Open).await;
    let (_, task) = Gateway::spawn(&w, TimeDelta::seconds(1), Box::new(booked));
    let worker = w.worker(OrderPolicy::default());
    let closer = async {
        tokio::time::sleep(std::time::Duration::from_secs(20)).await;
        w.set_breaker(&nordic(), BreakerState::Closed).await;
    };
    let (report, ()) = tokio::join!(worker.run(), closer);
    task.abort();
    let first = &w.book_requests()[0];
    let after = (first.created_at - t0()).num_milliseconds();
    assert!((20_000..=22_500).contains(&after), "booked {after} ms in");
    assert!(matches!(
        w.order("lb-a").await.state,
        OrderState::Booked { .. }
    ));
    assert_eq!(report.operators[0].open, 0);
}

#[tokio::test(start_paused = true)]
async fn every_answer_has_its_next_step() {
    let w = World::new();
    let cases = [
        ("moved", 60),
        ("gone", 50),
        ("sailed", 40),
        ("refused", 30),
        ("down", 20),
    ];
    for (cart, age) in cases {
        w.hold("nordic", cart, cart, age).await;
    }
    let answer: Answer = Box::new(|request: &RequestRecord| {
        let sailing = request.params.get("sailing_id").map(String::as_str);
        Some(match sailing {
            Some("moved") => answered(
                json!({"status": "price_changed", "price_cents": 12_000, "currency": "EUR"}),
            ),
            Some("gone") => answered(json!({"status": "sold_out", "seats_left": 1})),
            Some("sailed") => answered(json!({"status": "not_bookable", "detail": "departed"})),
            Some("refused") => Outcome::failed(
                FailureReason::Rejected,
                "operator answered 422 in 40 ms",
                t0(),
                "real-consumer",
            ),
            _ => Outcome::failed(
                FailureReason::UpstreamError,
                "operator answered 503 in 40 ms",
                t0(),
                "real-consumer",
            ),
        })
    });
    let (_, task) = Gateway::spawn(&w, TimeDelta::seconds(1), answer);
    let report = ok(w.worker(OrderPolicy::default()).handle(&schedule()).await);
    task.abort();
    assert!(matches!(
        w.order("lb-moved").await.state,
        OrderState::AskCustomer {
            price_cents: 12_000,
            ..
        }
    ));
    assert!(matches!(
        w.order("lb-gone").await.state,
        OrderState::Refunded {
            reason: RefundReason::SoldOut,
            ..
        }
    ));
    assert!(matches!(
        w.order("lb-sailed").await.state,
        OrderState::Refunded {
            reason: RefundReason::NotBookable { .. },
            ..
        }
    ));
    let refused = w.order("lb-refused").await;
    assert!(
        matches!(&refused.state, OrderState::Parked { reason, .. } if reason.contains("422")),
        "{:?}",
        refused.state
    );
    assert_eq!(refused.attempts, 1, "a refused order is never asked again");
    // The operator down: asked again after 10 s, 20 s, 40 s, never in a
    // loop, every time under the same key.
    let down = w.order("lb-down").await;
    assert!(
        matches!(down.state, OrderState::Held { .. }),
        "{:?}",
        down.state
    );
    let attempts: Vec<RequestRecord> = w
        .book_requests()
        .into_iter()
        .filter(|r| r.params.get("sailing_id").map(String::as_str) == Some("down"))
        .collect();
    assert_eq!(attempts.len(), 3, "in 50 s: {attempts:#?}");
    assert_eq!(down.attempts, 3);
    let gaps: Vec<i64> = attempts
        .windows(2)
        .map(|w| (w[1].created_at - w[0].created_at).num_seconds())
        .collect();
    assert!(gaps[0] >= 11 && gaps[1] >= 21, "{gaps:?}");
    assert!(
        attempts
            .iter()
            .all(|r| r.params.get("idempotency_key").map(String::as_str) == Some("lb-down"))
    );
    assert_eq!(w.moves(StateName::Parked), 1);
    assert_eq!(w.moves(StateName::AskCustomer), 1);
    assert_eq!(w.moves(StateName::Refunded), 2);
    assert_eq!(
        w.metrics.sum(names::FAULTS, &[]),
        1.0,
        "a parked order is a fault"
    );
    assert_eq!(report.operators[0].open, 2, "asked customer and held");
}

#[tokio::test(start_paused = true)]
async fn a_lost_call_is_asked_again_with_the_same_key_and_gets_its_booking() {
    let w = World::new();
    w.hold("nordic", "a", "s1", 60).await;
    // The first call's answer never comes; the second is answered.
    let answer: Answer = Box::new(|request: &RequestRecord| {
        request
            .request_id
            .ends_with("-2")
            .then(|| booked(request))
            .flatten()
    });
    let (_, task) = Gateway::spawn(&w, TimeDelta::seconds(1), answer);
    let policy = OrderPolicy::default();
    let worker = w.worker(policy.clone());
    ok(worker.handle(&schedule()).await);
    assert!(matches!(
        w.order("lb-a").await.state,
        OrderState::Booking { attempt: 1, .. }
    ));
    // The next minute's run: still unanswered, then lost at 120 s.
    tokio::time::sleep(std::time::Duration::from_secs(10)).await;
    ok(worker.handle(&schedule()).await);
    tokio::time::sleep(std::time::Duration::from_secs(10)).await;
    ok(worker.handle(&schedule()).await);
    task.abort();
    let order = w.order("lb-a").await;
    assert!(
        matches!(order.state, OrderState::Booked { .. }),
        "{:?}",
        order.state
    );
    let requests = w.book_requests();
    let ids: Vec<&str> = requests.iter().map(|r| r.request_id.as_str()).collect();
    assert_eq!(ids, ["book-lb-a-1", "book-lb-a-2"]);
    let lost = (requests[1].created_at - requests[0].created_at).num_seconds();
    assert!(lost >= 120 + 10, "asked again {lost} s later");
    // The lost call's request is closed by the worker: every request ends
    // with an outcome, and a consumer's answer may still take its place.
    let closed = ok(w.requests.get(&nordic(), "book-lb-a-1").await).and_then(|r| r.outcome);
    assert!(
        closed.as_ref().is_some_and(|o| o.by == "booking-worker"
            && matches!(
                o.kind,
                OutcomeKind::Failed {
                    reason: FailureReason::Expired,
                    ..
                }
            )),
        "{closed:?}"
    );
    assert!(
        order
            .history
            .iter()
            .any(|e| e.detail == "the booking call went unanswered")
    );
}

#[tokio::test(start_paused = true)]
async fn only_the_served_operators_orders_are_read() {
    let w = World::new();
    w.hold("baltic", "a", "s1", 60).await;
    let (_, task) = Gateway::spawn(&w, TimeDelta::seconds(1), Box::new(booked));
    let report = ok(w.worker(OrderPolicy::default()).handle(&schedule()).await);
    task.abort();
    assert!(w.book_requests().is_empty());
    assert!(matches!(
        w.order("lb-a").await.state,
        OrderState::Held { .. }
    ));
    assert_eq!(report.operators.len(), 1);
    assert_eq!(report.operators[0].operator, "nordic");
}

#[tokio::test(start_paused = true)]
async fn a_payload_that_is_not_the_schedule_is_refused() {
    let w = World::new();
    w.hold("nordic", "a", "s1", 60).await;
    for payload in [json!({"Records": []}), json!("tick"), json!(null)] {
        let e = w
            .worker(OrderPolicy::default())
            .handle(&payload)
            .await
            .map(|_| ())
            .unwrap_err();
        assert!(
            e.to_string().contains("not EventBridge's scheduled event"),
            "{e}"
        );
    }
    assert!(w.book_requests().is_empty());
}

/// An Orders table that cannot be reached, and one whose saves always
/// lose to another writer.
struct Troubled {
    inner: Arc<MemoryOrderStore>,
    reads_fail: bool,
}

#[async_trait]
impl OrderStore for Troubled {
    async fn get(&self, order_id: &str) -> Result<Option<HeldOrder>, StoreError> {
        self.inner.get(order_id).await
    }
    async fn hold(&self, order: &HeldOrder, cap: Option<u32>) -> Result<Held, StoreError> {
        self.inner.hold(order, cap).await
    }
    async fn save(&self, order: &HeldOrder, _expected: u64) -> Result<(), StoreError> {
        Err(StoreError::Conflict(format!(
            "{} moved meanwhile",
            order.order_id
        )))
    }
    async fn open_orders(
        &self,
        operator: &OperatorId,
        limit: usize,
    ) -> Result<Vec<HeldOrder>, StoreError> {
        if self.reads_fail {
            return Err(StoreError::Unavailable("throttled".into()));
        }
        self.inner.open_orders(operator, limit).await
    }
    async fn held_passengers(
        &self,
        operator: &OperatorId,
        sailing_id: &str,
    ) -> Result<u32, StoreError> {
        self.inner.held_passengers(operator, sailing_id).await
    }
}

#[tokio::test(start_paused = true)]
async fn store_trouble_is_reported_and_never_books_or_loops() {
    let w = World::new();
    w.hold("nordic", "a", "s1", 60).await;
    for reads_fail in [true, false] {
        let mut worker = w.worker(OrderPolicy::default());
        worker.orders = Arc::new(Troubled {
            inner: w.orders.clone(),
            reads_fail,
        });
        let started = tokio::time::Instant::now();
        let report = ok(worker.handle(&schedule()).await);
        let nordic_report = &report.operators[0];
        assert!(w.book_requests().is_empty(), "no call for an unsaved order");
        if reads_fail {
            assert_eq!(nordic_report.rounds, 1);
            assert!(
                nordic_report.errors[0].contains("throttled"),
                "{:?}",
                nordic_report.errors
            );
            assert!(started.elapsed() < std::time::Duration::from_secs(1));
        } else {
            // Lost saves: looked at again each round, at the poll's pace.
            assert!(nordic_report.conflicts >= 1);
            assert!(nordic_report.rounds <= 101, "{}", nordic_report.rounds);
        }
    }
    assert!(matches!(
        w.order("lb-a").await.state,
        OrderState::Held { .. }
    ));
    assert_eq!(
        w.moves(StateName::Booking),
        0,
        "no event for a move not saved"
    );
}
