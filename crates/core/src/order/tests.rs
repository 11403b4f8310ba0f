use chrono::{DateTime, Utc};

use super::{
    BookingAnswer, HeldOrder, HoldReason, MAX_ORDER_HISTORY, NotHoldable, OrderPolicy, OrderState,
    RefundReason, confirmed_cart, max_price, order_id,
};
use crate::cart::Cart;

fn at(s: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap_or_default()
}

fn ok<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
    r.unwrap_or_else(|e| panic!("{e}"))
}

fn confirmed(cart_id: &str, paid_cents: i64) -> Cart {
    confirmed_cart(cart_id, 2, paid_cents, at(10))
}

/// An order of 100.00 paid, rises up to 5 % absorbed.
fn held() -> HeldOrder {
    ok(HeldOrder::hold(
        &confirmed("c1", 10_000),
        Some("seat".into()),
        Vec::new(),
        5,
        HoldReason::OffSale,
        at(10),
    ))
}

fn booking() -> HeldOrder {
    let mut order = held();
    ok(order.start_booking(at(100)));
    order
}

fn booked(ref_: &str, price_cents: i64) -> BookingAnswer {
    BookingAnswer::Booked {
        booking_ref: ref_.into(),
        price_cents,
    }
}

fn policy() -> OrderPolicy {
    OrderPolicy {
        customer_deadline_s: 3600,
        max_attempts: 3,
        booking_lost_after_s: 120,
        ..OrderPolicy::default()
    }
}

#[test]
fn a_confirmed_cart_is_held_with_its_key_price_and_maximum() {
    let order = held();
    assert_eq!(order.order_id, "lb-c1");
    assert_eq!(order.order_id, order_id("c1"));
    assert_eq!(order.paid_cents, 10_000);
    assert_eq!(order.max_price_cents, 10_500);
    assert_eq!(order.price_as_of, at(-590));
    assert_eq!(
        order.state,
        OrderState::Held {
            reason: HoldReason::OffSale
        }
    );
    assert_eq!(order.history.len(), 1);
    assert_eq!(
        order.last_event().map(|e| e.detail_type()),
        Some("Order Held")
    );
    let open = Cart {
        confirmation: None,
        ..confirmed("c2", 1)
    };
    assert_eq!(
        HeldOrder::hold(&open, None, Vec::new(), 0, HoldReason::OffSale, at(0)),
        Err(NotHoldable::NotConfirmed)
    );
}

#[test]
fn the_maximum_is_the_price_paid_plus_the_rise_absorbed() {
    assert_eq!(max_price(10_000, 0), 10_000);
    assert_eq!(max_price(999, 10), 1_098);
    assert_eq!(max_price(i64::MAX, 20), i64::MAX);
    assert_eq!(max_price(-5, 20), -5);
}

#[test]
fn booked_at_the_price_paid_at_less_or_within_the_tolerance() {
    for (price, absorbed, refunded) in [(10_000, 0, 0), (9_000, 0, 1_000), (10_500, 500, 0)] {
        let mut order = booking();
        let event = ok(order.answer(booked("B1", price), &policy(), at(101)));
        assert_eq!(event.detail_type(), "Order Booked");
        assert_eq!(
            order.state,
            OrderState::Booked {
                at: at(101),
                booking_ref: "B1".into(),
                price_cents: price,
                absorbed_cents: absorbed,
                refunded_cents: refunded,
            }
        );
        assert!(order.state.is_final());
    }
}

#[test]
fn an_operator_booking_over_the_maximum_parks_the_order() {
    let mut order = booking();
    ok(order.answer(booked("B1", 10_501), &policy(), at(101)));
    assert!(
        matches!(order.state, OrderState::Parked { .. }),
        "{:?}",
        order.state
    );
}

#[test]
fn a_price_past_the_tolerance_asks_the_customer_who_may_accept_it() {
    let mut order = booking();
    let event = ok(order.answer(
        BookingAnswer::PriceChanged {
            price_cents: 12_000,
        },
        &policy(),
        at(101),
    ));
    assert_eq!(event.detail_type(), "Order Needs Customer");
    assert_eq!(
        order.state,
        OrderState::AskCustomer {
            asked_at: at(101),
            deadline: at(3701),
            price_cents: 12_000
        }
    );
    ok(order.customer_replies(true, at(200)));
    assert!(matches!(order.state, OrderState::Held { .. }));
    assert_eq!((order.paid_cents, order.max_price_cents), (12_000, 12_000));
    // Booked again with the same key, at the price accepted.
    ok(order.start_booking(at(300)));
    ok(order.answer(booked("B2", 12_000), &policy(), at(301)));
    assert!(matches!(
        order.state,
        OrderState::Booked {
            absorbed_cents: 0,
            ..
        }
    ));
    assert_eq!(order.order_id, "lb-c1");
    assert_eq!(order.attempts, 2);
}

#[test]
fn a_customer_who_declines_or_does_not_answer_is_refunded() {
    let rise = BookingAnswer::PriceChanged {
        price_cents: 12_000,
    };
    let mut declined = booking();
    ok(declined.answer(rise.clone(), &policy(), at(101)));
    ok(declined.customer_replies(false, at(200)));
    assert!(matches!(
        declined.state,
        OrderState::Refunded {
            reason: RefundReason::PriceDeclined,
            ..
        }
    ));

    let mut silent = booking();
    ok(silent.answer(rise, &policy(), at(101)));
    assert_eq!(silent.expire(&policy(), at(3701)), None, "at the deadline");
    assert!(silent.expire(&policy(), at(3702)).is_some());
    assert!(matches!(
        silent.state,
        OrderState::Refunded {
            reason: RefundReason::NoAnswer,
            ..
        }
    ));
    // A reply after the deadline changes nothing.
    let before = silent.clone();
    assert!(silent.customer_replies(true, at(3800)).is_err());
    assert_eq!(silent, before);
}

#[test]
fn a_reply_past_the_deadline_is_refused_even_before_the_expiry_ran() {
    let mut order = booking();
    ok(order.answer(
        BookingAnswer::PriceChanged {
            price_cents: 12_000,
        },
        &policy(),
        at(101),
    ));
    let before = order.clone();
    assert!(order.customer_replies(true, at(3702)).is_err());
    assert_eq!(order, before);
}

#[test]
fn sold_out_and_unbookable_sailings_are_refunded_with_the_reason() {
    let mut sold_out = booking();
    ok(sold_out.answer(BookingAnswer::SoldOut, &policy(), at(101)));
    assert!(matches!(
        sold_out.state,
        OrderState::Refunded {
            reason: RefundReason::SoldOut,
            ..
        }
    ));
    let mut gone = booking();
    ok(gone.answer(
        BookingAnswer::NotBookable {
            detail: "cancelled".into(),
        },
        &policy(),
        at(101),
    ));
    assert_eq!(
        gone.state,
        OrderState::Refunded {
            at: at(101),
            reason: RefundReason::NotBookable {
                detail: "cancelled".into()
            }
        }
    );
    assert_eq!(
        gone.last_event().map(|e| e.detail_type()),
        Some("Order Refunded")
    );
}

#[test]
fn an_order_the_operator_refuses_is_parked_and_never_retried() {
    let mut order = booking();
    let event = ok(order.answer(
        BookingAnswer::Rejected {
            status: 422,
            detail: "unknown accommodation".into(),
        },
        &policy(),
        at(101),
    ));
    assert_eq!(event.detail_type(), "Order Parked");
    assert!(event.detail.contains("422"), "{}", event.detail);
    assert!(order.start_booking(at(200)).is_err());
    assert_eq!(order.expire(&policy(), at(100_000)), None);
    assert_eq!(order.attempts, 1);
}

#[test]
fn an_unanswered_booking_is_held_again_until_the_attempts_run_out() {
    let mut order = held();
    let unavailable = || BookingAnswer::Unavailable {
        detail: "timed out".into(),
    };
    for attempt in 1..=2 {
        ok(order.start_booking(at(100 * attempt)));
        ok(order.answer(unavailable(), &policy(), at(100 * attempt + 3)));
        assert_eq!(
            order.state,
            OrderState::Held {
                reason: HoldReason::BookingFailed
            }
        );
    }
    ok(order.start_booking(at(300)));
    ok(order.answer(unavailable(), &policy(), at(303)));
    assert!(
        matches!(order.state, OrderState::Parked { .. }),
        "{:?}",
        order.state
    );
    assert_eq!(order.attempts, 3);
}

#[test]
fn a_lost_booking_call_is_held_again_and_asked_with_the_same_key() {
    let mut order = booking();
    assert_eq!(order.expire(&policy(), at(219)), None);
    assert!(order.expire(&policy(), at(220)).is_some());
    assert!(matches!(order.state, OrderState::Held { .. }));
    ok(order.start_booking(at(230)));
    assert_eq!(order.order_id, "lb-c1");
}

#[test]
fn an_answer_the_state_does_not_expect_leaves_the_order_as_it_is() {
    let mut order = held();
    let before = order.clone();
    let refused = order.answer(booked("B1", 10_000), &policy(), at(101));
    assert!(refused.is_err());
    assert_eq!(order, before);
    // A second answer to a booked order (a redelivered call's) too.
    let mut order = booking();
    ok(order.answer(booked("B1", 10_000), &policy(), at(101)));
    let before = order.clone();
    assert!(
        order
            .answer(BookingAnswer::SoldOut, &policy(), at(102))
            .is_err()
    );
    assert!(order.customer_replies(false, at(103)).is_err());
    assert_eq!(order, before);
}

#[test]
fn the_oldest_held_order_goes_first() {
    let mut a = held();
    a.order_id = "lb-a".into();
    a.held_at = at(50);
    let mut b = held();
    b.order_id = "lb-b".into();
    b.held_at = at(20);
    let mut c = booking();
    c.held_at = at(0);
    let orders = [a, b, c];
    assert_eq!(
        HeldOrder::oldest_held(&orders).map(|o| o.order_id.as_str()),
        Some("lb-b")
    );
    assert_eq!(HeldOrder::oldest_held(&orders[2..]), None);
}

#[test]
fn the_history_keeps_the_newest_moves() {
    let mut order = held();
    let policy = OrderPolicy {
        max_attempts: u32::MAX,
        ..policy()
    };
    for i in 0..40 {
        ok(order.start_booking(at(100 + 2 * i)));
        ok(order.answer(
            BookingAnswer::Unavailable {
                detail: format!("try {i}"),
            },
            &policy,
            at(101 + 2 * i),
        ));
    }
    assert_eq!(order.history.len(), MAX_ORDER_HISTORY);
    assert_eq!(
        order.last_event().map(|e| e.detail.as_str()),
        Some("try 39")
    );
}

#[test]
fn every_state_reads_back_as_written() {
    let mut states = vec![held(), booking()];
    let mut asked = booking();
    ok(asked.answer(
        BookingAnswer::PriceChanged { price_cents: 1 },
        &policy(),
        at(101),
    ));
    states.push(asked);
    let mut gone = booking();
    ok(gone.answer(
        BookingAnswer::NotBookable { detail: "x".into() },
        &policy(),
        at(101),
    ));
    states.push(gone);
    let mut done = booking();
    ok(done.answer(booked("B", 1), &policy(), at(101)));
    states.push(done);
    for order in states {
        let text = ok(serde_json::to_string(&order));
        let back: HeldOrder = ok(serde_json::from_str(&text));
        assert_eq!(back, order, "{text}");
    }
}
