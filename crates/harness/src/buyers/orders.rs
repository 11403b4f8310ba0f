//! The buyers' orders: those their carts held while their operator could
//! not book, how each ended, and what the operators' desks booked for them,
//! counted as `lifeboat demo` counts its day's ([`Orders::of`]), over many
//! operators.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use booking_worker::WorkerReport;
use chrono::{DateTime, Utc};
use lifeboat_core::OperatorId;
use lifeboat_core::order::HeldOrder;
use lifeboat_operator::SimulatedOperator;
use serde::Serialize;

use crate::demo::report::{DeskSeen, Orders};

/// How the buyers' held orders ended (`orders` of `lifeboat chaos --json`,
/// docs/chaos.md, and of `lifeboat fleet --json`, docs/fleet.md).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct OrdersEnded {
    /// Orders the cart held (carts confirmed while their operator could not
    /// book).
    pub held: usize,
    /// Of those, taken on request ([`Orders::on_request`]).
    pub on_request: usize,
    /// Booked, at the held price or another.
    pub booked: usize,
    /// Refunded: sold out, no longer bookable, or the price declined.
    pub refunded: usize,
    /// Parked for a person.
    pub parked: usize,
    /// Orders not final at the end (held, booking, or waiting for their
    /// customer), whatever their operator.
    pub open: usize,
    /// Of those, the orders of operators up at the end: lifeboat's to have
    /// finished (an operator still down keeps its orders held).
    pub open_operator_up: usize,
    /// Booking calls that reached the operators.
    pub book_calls: u64,
    /// Booking calls answered with their key's booking again (a record
    /// redelivered after its consumer was killed, a call retried): each
    /// took no seat.
    pub repeated_bookings: u64,
    /// Seats the operators' desks took beyond the first for one order
    /// ([`Orders::duplicate_bookings`]).
    pub duplicate_bookings: u64,
    /// Sailings a guaranteed order could not be seated on
    /// ([`Orders::oversold_sailings`]).
    pub oversold_sailings: usize,
    /// The booking worker's invocations, and those in which some
    /// operator's run was ended by a failed table or bus call (the next
    /// invocation carries on).
    pub worker_runs: usize,
    pub worker_runs_with_errors: usize,
}

/// What a simulation's end shows of its orders.
pub(crate) struct Seen<'a> {
    pub orders: &'a [HeldOrder],
    /// Every operator's simulator (their desks).
    pub desks: Vec<&'a SimulatedOperator>,
    /// The order each idempotency key was sent for.
    pub key_orders: &'a BTreeMap<String, String>,
    /// Operators down when the simulation ended.
    pub down_at_end: &'a BTreeSet<OperatorId>,
    pub worker_runs: &'a [WorkerReport],
    pub start: DateTime<Utc>,
}

impl OrdersEnded {
    pub(crate) fn of(seen: &Seen<'_>) -> Self {
        let (mut booked_keys, mut sold_out) = (Vec::new(), BTreeMap::new());
        let (mut book_calls, mut repeated_bookings) = (0, 0);
        for operator in &seen.desks {
            booked_keys.extend(operator.booked_keys());
            sold_out.extend(operator.sold_out());
            let stats = operator.stats();
            book_calls += stats.by_operation.book;
            repeated_bookings += stats.repeated_bookings;
        }
        let desk = DeskSeen {
            booked_keys: &booked_keys,
            sold_out: &sold_out,
            key_orders: seen.key_orders,
        };
        // The demo's counts; its minutes to book, counted from one
        // operator's return, mean nothing over many operators' outages.
        let figures = Orders::of(seen.orders, &desk, seen.start);
        let open = seen.orders.iter().filter(|o| !o.state.is_final());
        OrdersEnded {
            held: figures.held,
            on_request: figures.on_request,
            booked: figures.booked_at_held_price + figures.booked_at_other_price,
            refunded: figures.refunded.sold_out + figures.refunded.refused + figures.refunded.price,
            parked: figures.parked,
            open: open.clone().count(),
            open_operator_up: open
                .filter(|o| !seen.down_at_end.contains(&o.operator))
                .count(),
            book_calls,
            repeated_bookings,
            duplicate_bookings: figures.duplicate_bookings,
            oversold_sailings: figures.oversold_sailings,
            worker_runs: seen.worker_runs.len(),
            worker_runs_with_errors: seen
                .worker_runs
                .iter()
                .filter(|r| r.operators.iter().any(|o| !o.errors.is_empty()))
                .count(),
        }
    }

    /// The report's line.
    pub fn render(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "  orders held {} ({} on request): booked {}, refunded {}, parked {}, open {} ({} of operators back); {} booking calls, {} answered again, {} duplicate bookings, {} oversold sailings; booking worker runs {} ({} with a failed call)",
            self.held,
            self.on_request,
            self.booked,
            self.refunded,
            self.parked,
            self.open,
            self.open_operator_up,
            self.book_calls,
            self.repeated_bookings,
            self.duplicate_bookings,
            self.oversold_sailings,
            self.worker_runs,
            self.worker_runs_with_errors,
        );
    }
}

#[cfg(test)]
mod tests {
    use booking_worker::OperatorReport;
    use lifeboat_core::OperatorId;

    use super::*;
    use crate::demo::report::order_fixtures::{at, order};

    /// The figures of `orders` and the worker's `runs`, with no desk.
    fn seen_with<'a>(
        orders: &'a [HeldOrder],
        down_at_end: &'a BTreeSet<OperatorId>,
        runs: &'a [WorkerReport],
        keys: &'a BTreeMap<String, String>,
    ) -> OrdersEnded {
        OrdersEnded::of(&Seen {
            orders,
            desks: Vec::new(),
            key_orders: keys,
            down_at_end,
            worker_runs: runs,
            start: at(0),
        })
    }

    #[test]
    fn open_orders_are_split_by_whether_their_operator_is_back() {
        let orders = [order("a", "s1", 10), order("b", "s2", 20)];
        let keys = BTreeMap::new();
        let nordic = orders[0].operator.clone();
        let up = seen_with(&orders, &BTreeSet::new(), &[], &keys);
        assert_eq!((up.held, up.open, up.open_operator_up), (2, 2, 2));
        let down = seen_with(&orders, &BTreeSet::from([nordic]), &[], &keys);
        assert_eq!((down.open, down.open_operator_up), (2, 0));
    }

    #[test]
    fn a_run_with_a_failed_call_is_counted() {
        let failed = WorkerReport {
            operators: vec![OperatorReport {
                operator: "nordic".into(),
                errors: vec!["orders unavailable".into()],
                ..OperatorReport::default()
            }],
        };
        let runs = [WorkerReport::default(), failed];
        let keys = BTreeMap::new();
        let seen = seen_with(&[], &BTreeSet::new(), &runs, &keys);
        assert_eq!((seen.worker_runs, seen.worker_runs_with_errors), (2, 1));
    }
}
