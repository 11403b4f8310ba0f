//! The demo's order counters can fail: each moves when what it counts is
//! broken on purpose, and stays at 0 when it is not.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::time::Duration;

use lifeboat_core::order::OrderPolicy;
use lifeboat_core::order::booking::OrderSettings;
use lifeboat_core::order::seats::{PastTheCap, SeatGuard};
use lifeboat_harness::demo::report::Orders;
use lifeboat_harness::demo::{self, BookingKey, Replies, Script};
use lifeboat_operator::SeatModel;

fn short_day() -> Script {
    Script {
        healthy: Duration::from_secs(300),
        outage: Duration::from_secs(180),
        recovery: Duration::from_secs(420),
        seed: 2,
        ..Script::default()
    }
}

/// Booking calls taken as lost a second after they leave, so every order
/// is asked at least twice: the second call meets the first's booking.
fn impatient() -> OrderSettings {
    OrderSettings {
        default: OrderPolicy {
            booking_lost_after_s: 1,
            ..OrderPolicy::default()
        },
        ..OrderSettings::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_key_per_attempt_books_twice_and_the_order_key_never_does() {
    let script = Script {
        order_settings: impatient(),
        ..short_day()
    };
    let honest = demo::run(&script).await.orders;
    let booked = honest.booked_at_held_price + honest.booked_at_other_price;
    assert!(booked > 10, "{honest:?}");
    assert_eq!(honest.duplicate_bookings, 0, "{honest:?}");

    let broken = demo::run(&Script {
        booking_key: BookingKey::Attempt,
        ..script
    })
    .await
    .orders;
    assert!(broken.duplicate_bookings > 0, "{broken:?}");
}

/// Small sailings that other channels sell fast: many sell out between the
/// last search answer and the operator's return.
fn selling_fast() -> SeatModel {
    SeatModel {
        capacity_min: 20,
        capacity_max: 40,
        other_channels_per_hour: 120.0,
    }
}

/// The orders of a short day on sailings that sell fast, the cart's seats
/// guarded by `seat_guard` (orders past its cap taken on request).
async fn selling_fast_with(seat_guard: SeatGuard) -> Orders {
    let script = Script {
        seat_model: selling_fast(),
        seat_guard,
        ..short_day()
    };
    demo::run(&script).await.orders
}

/// A guard trusting a count for `trusted_s` (then fading to nothing at
/// twice that), keeping back `per_hour` for the count's age and `for_s`.
fn guard(per_hour: u32, for_s: u64, trusted_s: u64) -> SeatGuard {
    SeatGuard {
        sold_elsewhere_per_hour: per_hour,
        guaranteed_for_s: for_s,
        trusted_s,
        gone_s: (2 * trusted_s).max(1),
        past_the_cap: PastTheCap::OnRequest,
    }
}

#[tokio::test(start_paused = true)]
async fn trusting_an_old_seat_count_oversells_and_keeping_back_or_trusting_none_does_not() {
    let trusting = selling_fast_with(guard(0, 0, 86_400)).await;
    assert!(trusting.refunded.sold_out > 0, "{trusting:?}");
    assert!(trusting.oversold_sailings > 0, "{trusting:?}");

    // The same count trusted for a day, but what other channels may sell
    // until the order is booked kept back at their fastest (one and a half
    // times their mean rate), for the count's age and the ten minutes the
    // operator may yet stay away (the outage is three, its orders booked
    // within two of its end): orders are still booked, none is oversold.
    let keeping_back = selling_fast_with(guard(180, 600, 86_400)).await;
    assert!(
        keeping_back.booked_at_held_price + keeping_back.booked_at_other_price > 0,
        "{keeping_back:?}"
    );
    assert_eq!(keeping_back.oversold_sailings, 0, "{keeping_back:?}");
    // What keeping back costs: more orders taken on request.
    assert!(
        keeping_back.on_request > trusting.on_request,
        "{keeping_back:?} {trusting:?}"
    );

    // No count trusted: every order is taken on request, and a sold-out
    // sailing promised nothing it did not have.
    let wary = selling_fast_with(guard(0, 0, 0)).await;
    assert!(wary.refunded.sold_out > 0, "{wary:?}");
    assert_eq!(wary.oversold_sailings, 0, "{wary:?}");
    assert_eq!(wary.on_request, wary.held, "{wary:?}");
}

/// The orders that ended: booked, refunded or parked.
fn ended(orders: &Orders) -> usize {
    orders.booked_at_held_price
        + orders.booked_at_other_price
        + orders.refunded.sold_out
        + orders.refunded.refused
        + orders.refunded.price
        + orders.parked
}

#[tokio::test(start_paused = true)]
async fn customers_who_never_answer_leave_their_orders_open_and_the_count_shows_it() {
    let answering = demo::run(&short_day()).await.orders;
    assert!(answering.asked_customer > 0, "{answering:?}");
    assert_eq!(ended(&answering), answering.held, "{answering:?}");

    let silent = demo::run(&Script {
        replies: Replies::Never,
        ..short_day()
    })
    .await
    .orders;
    assert!(silent.asked_customer > 0, "{silent:?}");
    // Every order asked still waits: counted as asked, and nowhere it ends.
    let open = silent.held - ended(&silent);
    assert_eq!(open, silent.asked_customer, "{silent:?}");
    assert_eq!(silent.refunded.price, 0, "{silent:?}");
}
