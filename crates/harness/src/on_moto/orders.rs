//! The orders the cart held during a run, read from moto's Orders table,
//! and what the simulated operator's desk booked for them: the observer's
//! lines while the run goes on, and the report's `orders` at its end,
//! counted as `lifeboat demo` counts its day's (`Orders::of`).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use lifeboat_core::order::{HeldOrder, OrderState, StateName};
use lifeboat_local::suite::{LocalSuite, SuiteError};

use crate::demo::report::{DeskSeen, Orders};

/// The run's orders as read at its end, with the operator's desk.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunOrders {
    /// Every order held since the run began (an attached moto may keep
    /// older runs' orders: those are left out).
    pub orders: Vec<HeldOrder>,
    /// The idempotency keys the operator's desk booked under, each once.
    pub booked_keys: Vec<String>,
    /// Keys the desk answered sold out, with their sailings.
    pub sold_out: BTreeMap<String, String>,
    /// The order each key was sent for, from the booking requests.
    pub key_orders: BTreeMap<String, String>,
    /// Booking calls that reached the operator.
    pub book_calls: u64,
    /// Booking calls answered with their key's booking again.
    pub repeated_bookings: u64,
    /// When the operator came back (the outage's end; the run's start
    /// without an outage): `minutes_to_book` counts from here.
    pub back: DateTime<Utc>,
}

impl RunOrders {
    /// The demo's figures of these orders.
    pub fn figures(&self) -> Orders {
        Orders::of(
            &self.orders,
            &DeskSeen {
                booked_keys: &self.booked_keys,
                sold_out: &self.sold_out,
                key_orders: &self.key_orders,
            },
            self.back,
        )
    }

    /// Orders booked, at any price.
    pub fn booked(&self) -> usize {
        self.orders
            .iter()
            .filter(|o| matches!(o.state, OrderState::Booked { .. }))
            .count()
    }

    /// Orders not final at the end: held, booking, or waiting for their
    /// customer.
    pub fn open(&self) -> usize {
        self.orders.iter().filter(|o| !o.state.is_final()).count()
    }
}

/// The orders held since `since`.
pub(super) async fn held_since(
    gateway: &LocalSuite,
    since: DateTime<Utc>,
) -> Result<Vec<HeldOrder>, SuiteError> {
    let mut orders = gateway.orders().await?;
    orders.retain(|o| o.held_at >= since);
    orders.sort_by_key(|o| o.held_at);
    Ok(orders)
}

/// The run's orders and the operator's desk, at the end of the run.
pub(super) async fn read(
    gateway: &LocalSuite,
    since: DateTime<Utc>,
    back: DateTime<Utc>,
) -> Result<RunOrders, SuiteError> {
    let orders = held_since(gateway, since).await?;
    let key_orders = gateway.booking_keys().await?;
    let stats = gateway.operator_stats().await?;
    let sim = gateway.operator().operator();
    Ok(RunOrders {
        orders,
        booked_keys: sim.booked_keys(),
        sold_out: sim.sold_out(),
        key_orders,
        book_calls: stats.by_operation.book,
        repeated_bookings: stats.repeated_bookings,
        back,
    })
}

/// Orders still waiting for a booking call's answer, or for one to start:
/// held or booking.
pub(super) fn waiting(orders: &[HeldOrder]) -> usize {
    orders
        .iter()
        .filter(|o| {
            matches!(
                o.state,
                OrderState::Held { .. } | OrderState::Booking { .. }
            )
        })
        .count()
}

/// `3 held` / `1 booking, 2 booked`: the orders by state, in the states'
/// order; empty without orders.
pub(super) fn by_state(orders: &[HeldOrder]) -> String {
    StateName::ALL
        .iter()
        .filter_map(|state| {
            let n = orders.iter().filter(|o| o.state.name() == *state).count();
            (n > 0).then(|| format!("{n} {}", state.as_str()))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use lifeboat_core::cart::{Cart, CartPolicy, Confirmation, Sailing};
    use lifeboat_core::order::{BookingAnswer, HoldReason, OrderPolicy};

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_796_104_800 + s, 0).unwrap_or_default()
    }

    fn held(cart_id: &str, held_at: i64) -> HeldOrder {
        let operator = lifeboat_core::OperatorId::new("nordic").unwrap_or_else(|e| panic!("{e}"));
        let sailing = Sailing {
            sailing_id: "HEL-TLL-20261224-0615".into(),
            from: "HEL".into(),
            to: "TLL".into(),
            date: "2026-12-24".into(),
            passengers: 1,
        };
        let mut cart = Cart::open(
            cart_id.into(),
            operator,
            sailing,
            false,
            &CartPolicy::default(),
            at(held_at),
        );
        cart.confirmation = Some(Confirmation {
            at: at(held_at),
            amount_cents: 10_000,
            currency: "EUR".into(),
            on_cached_price: true,
            price_as_of: at(held_at),
            absorbed_cents: 0,
        });
        HeldOrder::hold(&cart, None, Vec::new(), 0, HoldReason::OffSale, at(held_at))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn booked(mut order: HeldOrder, at_s: i64) -> HeldOrder {
        let policy = OrderPolicy::default();
        order
            .start_booking(at(at_s - 2))
            .unwrap_or_else(|e| panic!("{e}"));
        let answer = BookingAnswer::Booked {
            booking_ref: "BK000001".into(),
            price_cents: 10_000,
        };
        order
            .answer(answer, &policy, at(at_s))
            .unwrap_or_else(|e| panic!("{e}"));
        order
    }

    #[test]
    fn the_run_orders_are_counted_as_the_demo_counts_its_days() {
        let orders = RunOrders {
            orders: vec![booked(held("a", 10), 70), held("b", 20)],
            booked_keys: vec!["lb-a".to_owned()],
            key_orders: BTreeMap::from([("lb-a".to_owned(), "lb-a".to_owned())]),
            book_calls: 1,
            back: at(40),
            ..RunOrders::default()
        };
        assert_eq!((orders.booked(), orders.open()), (1, 1));
        assert_eq!(waiting(&orders.orders), 1);
        assert_eq!(by_state(&orders.orders), "1 held, 1 booked");
        assert_eq!(by_state(&[]), "");
        let figures = orders.figures();
        assert_eq!(figures.held, 2);
        assert_eq!(figures.booked_at_held_price, 1);
        assert_eq!(figures.duplicate_bookings, 0);
        // Half a minute from the operator's return to the booking.
        assert_eq!(figures.minutes_to_book.p50, Some(0.5));
    }
}
