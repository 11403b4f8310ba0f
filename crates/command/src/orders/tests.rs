use chrono::{DateTime, TimeDelta, Utc};
use lifeboat_core::OperatorId;
use lifeboat_core::cart::{Cart, CartPolicy, Confirmation, Sailing};
use lifeboat_core::order::{BookingAnswer, HeldOrder, HoldReason, OrderPolicy};

use super::{OperatorNow, OrderMinute, render, report};
use crate::carts::{MinutesError, MinutesQuery};

/// 2026-12-03 10:00:00 UTC, plus `s` seconds.
fn t(s: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_796_292_000 + s, 0).unwrap()
}

fn op(name: &str) -> OperatorId {
    OperatorId::new(name).unwrap()
}

/// An order of `operator`'s, held at `at`.
fn held(operator: &str, cart_id: &str, at: DateTime<Utc>) -> HeldOrder {
    let sailing = Sailing {
        sailing_id: "s1".into(),
        from: "HEL".into(),
        to: "TLL".into(),
        date: "2026-12-24".into(),
        passengers: 2,
    };
    let mut cart = Cart::open(
        cart_id.into(),
        op(operator),
        sailing,
        true,
        &CartPolicy::default(),
        at,
    );
    cart.confirmation = Some(Confirmation {
        at,
        amount_cents: 10_000,
        currency: "EUR".into(),
        on_cached_price: true,
        price_as_of: at - TimeDelta::minutes(10),
        absorbed_cents: 0,
    });
    HeldOrder::hold(&cart, None, Vec::new(), 5, HoldReason::OffSale, at).unwrap()
}

fn answered(mut order: HeldOrder, call: DateTime<Utc>, answer: BookingAnswer) -> HeldOrder {
    order.start_booking(call).unwrap();
    order
        .answer(
            answer,
            &OrderPolicy::default(),
            call + TimeDelta::seconds(2),
        )
        .unwrap();
    order
}

fn booked() -> BookingAnswer {
    BookingAnswer::Booked {
        booking_ref: "BK1".into(),
        price_cents: 10_000,
    }
}

fn query(since: i64, until: i64, operator: Option<&str>) -> MinutesQuery {
    MinutesQuery {
        since: t(since),
        until: t(until),
        judged_at: t(until),
        operator: operator.map(op),
    }
}

/// The orders of the tests: nordic's a (held 10:00:10, booked 10:03),
/// b (held 10:01, its call unanswered 10:02: held again), c (held and
/// booked the day before: out of the range, done), d (held the day before,
/// still open); baltic's e (held 10:00:30, sold out 10:04).
fn orders() -> Vec<HeldOrder> {
    vec![
        answered(held("nordic", "a", t(10)), t(180), booked()),
        answered(
            held("nordic", "b", t(60)),
            t(120),
            BookingAnswer::Unavailable {
                detail: "timeout".into(),
            },
        ),
        answered(held("nordic", "c", t(-86_400)), t(-86_000), booked()),
        held("nordic", "d", t(-86_400)),
        answered(held("baltic", "e", t(30)), t(240), BookingAnswer::SoldOut),
    ]
}

fn row<'a>(rows: &'a [OrderMinute], minute: i64, operator: &str) -> &'a OrderMinute {
    rows.iter()
        .find(|r| r.minute == t(minute * 60) && r.operator.as_str() == operator)
        .unwrap()
}

#[test]
fn every_order_held_in_the_range_or_still_open_is_counted_once_by_its_state() {
    let report = report(&orders(), &query(0, 600, None)).unwrap();
    assert_eq!(
        report.now,
        vec![
            OperatorNow {
                refunded: 1,
                ..OperatorNow::empty(op("baltic"))
            },
            OperatorNow {
                // b held again, d held the day before and still open
                held: 2,
                booked: 1,
                oldest_open_held_at: Some(t(-86_400)),
                ..OperatorNow::empty(op("nordic"))
            },
        ],
        "c, booked the day before, is neither in the range nor open"
    );
    assert_eq!(report.now[1].open(), 2);
}

#[test]
fn each_minute_counts_the_holds_and_the_moves_made_in_it() {
    let report = report(&orders(), &query(0, 600, None)).unwrap();
    // Ten minutes of each operator with an order moving in the range.
    assert_eq!(report.minutes.len(), 20);
    let first = row(&report.minutes, 0, "nordic");
    assert_eq!((first.held, first.booking, first.booked), (1, 0, 0));
    assert_eq!(row(&report.minutes, 1, "nordic").held, 1);
    let second = row(&report.minutes, 2, "nordic");
    assert_eq!(
        (second.held, second.booking, second.held_again),
        (0, 1, 1),
        "b's call and its unanswered end, in the same minute"
    );
    let third = row(&report.minutes, 3, "nordic");
    assert_eq!((third.booking, third.booked), (1, 1));
    assert_eq!(row(&report.minutes, 0, "baltic").held, 1);
    let sold_out = row(&report.minutes, 4, "baltic");
    assert_eq!((sold_out.booking, sold_out.refunded), (1, 1));
    let total = |f: fn(&OrderMinute) -> u32| report.minutes.iter().map(f).sum::<u32>();
    assert_eq!(
        total(|r| r.held),
        3,
        "a, b and e; d was held the day before"
    );
    assert_eq!(total(|r| r.booked), 1);
    assert_eq!(total(|r| r.parked) + total(|r| r.needs_customer), 0);
}

#[test]
fn one_operator_and_a_range_holding_no_move() {
    let nordic = report(&orders(), &query(0, 600, Some("nordic"))).unwrap();
    assert!(nordic.now.iter().all(|n| n.operator.as_str() == "nordic"));
    assert!(
        nordic
            .minutes
            .iter()
            .all(|r| r.operator.as_str() == "nordic")
    );
    assert_eq!(nordic.minutes.len(), 10);

    // An hour later: nothing moved, but d is still open.
    let later = report(&orders(), &query(3600, 4200, None)).unwrap();
    assert!(later.minutes.is_empty());
    assert_eq!(later.now.len(), 1);
    assert_eq!((later.now[0].held, later.now[0].open()), (2, 2));
}

#[test]
fn a_bad_range_is_refused() {
    assert!(matches!(
        report(&orders(), &query(600, 0, None)),
        Err(MinutesError::EmptyRange { .. })
    ));
    assert!(matches!(
        report(&orders(), &query(0, 32 * 86_400, None)),
        Err(MinutesError::TooLong { .. })
    ));
}

#[test]
fn the_table_shows_where_orders_stand_and_folds_quiet_minutes() {
    let report = report(&orders(), &query(0, 600, None)).unwrap();
    let text = render(&report, t(600));
    assert!(
        text.contains("held orders from 2026-12-03 10:00 UTC to 2026-12-03 10:10 UTC"),
        "{text}"
    );
    let nordic = text
        .lines()
        .find(|l| l.trim_start().starts_with("nordic "))
        .unwrap();
    assert_eq!(
        nordic.split_whitespace().collect::<Vec<_>>(),
        [
            "nordic", "2", "0", "1", "0", "0", "0", "held", "1450", "min", "ago"
        ],
        "d, held a day and 10 minutes before: {text}"
    );
    assert!(
        text.contains("(5 quiet minutes, to 10:09)"),
        "nordic's 10:05 to 10:09: {text}"
    );
    let total = text
        .lines()
        .filter(|l| l.trim_start().starts_with("total"))
        .collect::<Vec<_>>();
    assert_eq!(total.len(), 2, "{text}");
    assert_eq!(
        total[1].split_whitespace().collect::<Vec<_>>(),
        ["total", "2", "2", "1", "0", "0", "0", "1"],
        "nordic's: {text}"
    );

    let none = super::report(&[], &query(0, 600, None)).unwrap();
    assert!(
        render(&none, t(600)).contains("no orders: none held in the range, none open"),
        "{}",
        render(&none, t(600))
    );
}
