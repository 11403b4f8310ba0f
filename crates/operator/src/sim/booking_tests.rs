//! The simulated operator's bookings, in-process: made at the desk when
//! the call arrives, once per idempotency key, in the modes that answer.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use lifeboat_core::budget::Budget;
use lifeboat_core::order::BookingAnswer;
use lifeboat_core::ports::OperatorApi;
use lifeboat_core::request::{CallClass, OperatorCall};
use lifeboat_core::{ManualClock, Operation, OperatorId};

use super::{OutageMode, SimConfig, SimulatedOperator};
use crate::latency::LatencyModel;

fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2025-06-01T08:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

fn sim() -> SimulatedOperator {
    let config = SimConfig {
        latency: LatencyModel {
            error_rate: 0.0,
            ..LatencyModel::default()
        },
        ..SimConfig::default()
    };
    let clock = ManualClock::new(t0());
    SimulatedOperator::new(OperatorId::new("nordic").unwrap(), config, Arc::new(clock))
}

const SAILING: &str = "hel-tll-20250602-0730";

fn book(key: &str) -> OperatorCall {
    OperatorCall {
        request_id: format!("book-{key}"),
        operator: OperatorId::new("nordic").unwrap(),
        operation: Operation::Book,
        params: [
            ("idempotency_key", key),
            ("sailing_id", SAILING),
            ("passengers", "2"),
            ("max_price_cents", "100000"),
            ("currency", "EUR"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect(),
        budget: Budget::with_timeout(Duration::from_secs(8)),
    }
}

fn booked(answer: &BookingAnswer) -> &str {
    match answer {
        BookingAnswer::Booked { booking_ref, .. } => booking_ref,
        other => panic!("not booked: {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_key_books_once_and_its_retries_get_the_same_booking() {
    let sim = sim();
    let before = sim.seats_left(SAILING);
    let first = BookingAnswer::from_call(&sim.call(&book("lb-c1")).await);
    let again = BookingAnswer::from_call(&sim.call(&book("lb-c1")).await);
    assert_eq!(booked(&first), booked(&again));
    assert_eq!(first, again, "the same price too");
    let other = BookingAnswer::from_call(&sim.call(&book("lb-c2")).await);
    assert_ne!(booked(&other), booked(&first));
    assert_eq!(sim.seats_left(SAILING), before - 4);
    let stats = sim.stats();
    assert_eq!((stats.bookings, stats.repeated_bookings), (2, 1));
    assert_eq!(stats.by_operation.book, 3);
    assert_eq!(stats.questions(), 0, "a booking is no customer's question");
}

#[tokio::test(start_paused = true)]
async fn a_hanging_or_failing_operator_books_nothing() {
    let sim = sim();
    for (mode, class) in [
        (OutageMode::Hang, CallClass::Timeout),
        (OutageMode::Refuse, CallClass::Connect),
        (
            OutageMode::ServerError,
            CallClass::ServerError { status: 503 },
        ),
        (
            OutageMode::RateLimited,
            CallClass::ClientError { status: 429 },
        ),
    ] {
        sim.set_mode(Some(mode));
        let result = sim.call(&book("lb-c1")).await;
        assert_eq!(result.class, class, "{mode}");
        assert!(
            matches!(
                BookingAnswer::from_call(&result),
                BookingAnswer::Unavailable { .. }
            ),
            "{mode}"
        );
    }
    let stats = sim.stats();
    assert_eq!((stats.bookings, stats.by_mode.hang), (0, 1));
}

/// A slow operator books, then answers after the caller gave up: the
/// retry with the same key is answered with that booking, nothing booked
/// twice.
#[tokio::test(start_paused = true)]
async fn a_booking_lost_on_the_way_back_is_found_by_its_retry() {
    let sim = sim();
    sim.set_mode(Some(OutageMode::Slow));
    let lost = sim.call(&book("lb-c1")).await;
    assert_eq!(lost.class, CallClass::Timeout);
    assert_eq!(sim.stats().bookings, 1, "booked all the same");
    sim.set_mode(None);
    let retried = BookingAnswer::from_call(&sim.call(&book("lb-c1")).await);
    assert!(booked(&retried).starts_with("BK"));
    let stats = sim.stats();
    assert_eq!((stats.bookings, stats.repeated_bookings), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn searches_carry_the_seats_left_that_bookings_take() {
    let sim = sim();
    let search = OperatorCall {
        operation: Operation::Search,
        params: [("from", "HEL"), ("to", "TLL"), ("date", "2025-06-02")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        ..book("x")
    };
    let seats = |body: &str| -> Vec<(String, u64)> {
        let found: serde_json::Value = serde_json::from_str(body).unwrap();
        found["sailings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["sailing_id"].as_str().unwrap().to_owned(),
                    s["seats_left"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    let before = seats(&sim.call(&search).await.body.unwrap());
    let (id, left) = before[1].clone();
    let mut order = book("lb-c1");
    order.params.insert("sailing_id".into(), id.clone());
    booked(&BookingAnswer::from_call(&sim.call(&order).await));
    let after = seats(&sim.call(&search).await.body.unwrap());
    assert_eq!(after[1], (id.clone(), left - 2));
    assert_eq!(u64::from(sim.seats_left(&id)), left - 2);
    assert_eq!(after[0], before[0], "other sailings keep theirs");
}
