//! The demo's held orders: how many the cart held while the operator could
//! not book, and how each ended, from the Orders table; whether anything
//! was booked twice or oversold, from the simulated operator's own desk.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use lifeboat_core::memory::MemoryRequestStore;
use lifeboat_core::order::booking::parse_book_request_id;
use lifeboat_core::order::{HeldOrder, OrderState, RefundReason, StateName};
use lifeboat_core::ports::StoredRequest;
use serde::Serialize;

/// How the day's held orders ended (docs/orders.md, "The demo's orders").
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Orders {
    /// Orders the cart held (carts confirmed while the operator could not
    /// book); each is counted below by where it ended, or not at all while
    /// it is still open.
    pub held: usize,
    /// Of those, orders taken on request (past the sailing's seat cap, or
    /// with no count of seats left, docs/orders.md "No overselling"): not
    /// guaranteed, and counted below by where they ended as well.
    pub on_request: usize,
    /// Booked at the price the customer paid.
    pub booked_at_held_price: usize,
    /// Booked at another price: a rise within the tolerance absorbed, or a
    /// drop given back.
    pub booked_at_other_price: usize,
    /// Orders whose price rose past the tolerance, so the customer was
    /// asked whether to pay it, at least once: each is also counted below
    /// by where it ended (booked at the price accepted, or refunded), or
    /// not at all while it still waits.
    pub asked_customer: usize,
    pub refunded: Refunded,
    /// Orders parked for a person (the operator refused the order itself,
    /// or every attempt went unanswered).
    pub parked: usize,
    /// Bookings the operator's desk made beyond the first for one order:
    /// seats taken twice. Counted from the desk's own bookings (one per
    /// idempotency key it booked under), each key traced to its order by
    /// the booking requests that carried it; a key no request carried
    /// counts too. Calls answered with a key's booking again
    /// (`repeated_bookings`) take no seat and are not counted.
    pub duplicate_bookings: u64,
    /// Sailings on which the operator's desk could not seat an order the
    /// cart had held as guaranteed (within the seat cap): lifeboat sold
    /// seats the sailing no longer had. Orders taken on request may be
    /// sold out without overselling anything, and so may an order whose
    /// customer was asked about a new price: the operator had its seats
    /// then, and the guarantee was the held price's; the seats sell on
    /// while the customer decides.
    pub oversold_sailings: usize,
    /// Minutes from the operator's return (or the order's hold, or its
    /// customer's acceptance of a new price, if later) to the order booked:
    /// lifeboat's part, not the customer's time to reply.
    pub minutes_to_book: MinutesToBook,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Refunded {
    /// The sailing sold out while the order was held.
    pub sold_out: usize,
    /// The operator no longer sells the sailing (`not_bookable`).
    pub refused: usize,
    /// The customer declined the new price, or did not answer in time.
    pub price: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct MinutesToBook {
    pub p50: Option<f64>,
    pub p99: Option<f64>,
}

/// What the simulated operator's desk saw, and whose keys it saw.
pub(crate) struct DeskSeen<'a> {
    /// The idempotency keys the desk booked under, each once.
    pub booked_keys: &'a [String],
    /// Keys answered sold out, with their sailings.
    pub sold_out: &'a BTreeMap<String, String>,
    /// The order each key was sent for, from the booking requests that
    /// carried it.
    pub key_orders: &'a BTreeMap<String, String>,
}

/// The order each idempotency key was sent for, from the booking requests
/// in `requests` that carried it.
pub(crate) fn key_orders(requests: &MemoryRequestStore) -> BTreeMap<String, String> {
    let mut keys = BTreeMap::new();
    requests.for_each(|stored| keys.extend(key_order(stored)));
    keys
}

/// The idempotency key `stored` carried and the order it was sent for, if
/// it is a booking request.
pub(crate) fn key_order(stored: &StoredRequest) -> Option<(String, String)> {
    let request = &stored.request;
    let key = request.params.get("idempotency_key")?;
    let (order_id, _) = parse_book_request_id(&request.request_id)?;
    Some((key.clone(), order_id.to_owned()))
}

impl Orders {
    /// The figures of `orders` (every order the cart held), with what the
    /// operator's `desk` saw, for an operator back at `back`.
    pub(crate) fn of(orders: &[HeldOrder], desk: &DeskSeen<'_>, back: DateTime<Utc>) -> Self {
        let mut figures = Orders {
            held: orders.len(),
            on_request: orders.iter().filter(|o| o.on_request).count(),
            ..Orders::default()
        };
        let mut minutes = Vec::new();
        for order in orders {
            if was_asked(order) {
                figures.asked_customer += 1;
            }
            match &order.state {
                OrderState::Booked {
                    at, price_cents, ..
                } => {
                    if *price_cents == order.paid_cents {
                        figures.booked_at_held_price += 1;
                    } else {
                        figures.booked_at_other_price += 1;
                    }
                    let from = back.max(order.held_at).max(accepted_at(order));
                    minutes.push((*at - from).num_milliseconds().max(0) as f64 / 60_000.0);
                }
                OrderState::Refunded { reason, .. } => match reason {
                    RefundReason::SoldOut => figures.refunded.sold_out += 1,
                    RefundReason::NotBookable { .. } => figures.refunded.refused += 1,
                    RefundReason::PriceDeclined | RefundReason::NoAnswer => {
                        figures.refunded.price += 1;
                    }
                },
                OrderState::Parked { .. } => figures.parked += 1,
                OrderState::Held { .. }
                | OrderState::Booking { .. }
                | OrderState::AskCustomer { .. } => {}
            }
        }
        let mut seats_per_order: BTreeMap<Option<&str>, u64> = BTreeMap::new();
        for key in desk.booked_keys {
            *seats_per_order
                .entry(desk.key_orders.get(key).map(String::as_str))
                .or_default() += 1;
        }
        figures.duplicate_bookings = seats_per_order
            .iter()
            .map(|(order, seats)| match order {
                Some(_) => seats.saturating_sub(1),
                None => *seats,
            })
            .sum();
        let guaranteed: BTreeSet<&str> = orders
            .iter()
            .filter(|o| !o.on_request && !was_asked(o))
            .map(|o| o.order_id.as_str())
            .collect();
        figures.oversold_sailings = desk
            .sold_out
            .iter()
            .filter(|(key, _)| {
                desk.key_orders
                    .get(*key)
                    .is_some_and(|order| guaranteed.contains(order.as_str()))
            })
            .map(|(_, sailing)| sailing.as_str())
            .collect::<BTreeSet<_>>()
            .len();
        minutes.sort_by(f64::total_cmp);
        figures.minutes_to_book = MinutesToBook {
            p50: percentile(&minutes, 0.50),
            p99: percentile(&minutes, 0.99),
        };
        figures
    }
}

/// Whether the order's customer was ever asked about a new price.
fn was_asked(order: &HeldOrder) -> bool {
    order.history.iter().any(|e| e.to == StateName::AskCustomer)
}

/// When the order's customer last accepted a new price (a move from
/// asking the customer to held); the earliest time otherwise.
fn accepted_at(order: &HeldOrder) -> DateTime<Utc> {
    order
        .history
        .windows(2)
        .filter(|w| w[0].to == StateName::AskCustomer && w[1].to == StateName::Held)
        .map(|w| w[1].at)
        .max()
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// The nearest-rank percentile of sorted `values`, to a tenth.
fn percentile(values: &[f64], p: f64) -> Option<f64> {
    let rank = ((p * values.len() as f64).ceil() as usize).clamp(1, values.len().max(1));
    values.get(rank - 1).map(|v| (v * 10.0).round() / 10.0)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use lifeboat_core::cart::{Cart, CartPolicy, Confirmation, Sailing};
    use lifeboat_core::order::{BookingAnswer, HoldReason, OrderPolicy};

    pub(crate) fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_796_104_800 + s, 0).unwrap_or_default()
    }

    /// Cart `id`'s order for nordic on `sailing`, confirmed off sale and
    /// held `held_at` seconds into the demo's day.
    pub(crate) fn order(id: &str, sailing: &str, held_at: i64) -> HeldOrder {
        let operator = lifeboat_core::OperatorId::new("nordic").unwrap_or_else(|e| panic!("{e}"));
        let sailing = Sailing {
            sailing_id: sailing.into(),
            from: "HEL".into(),
            to: "TLL".into(),
            date: "2026-12-24".into(),
            passengers: 1,
        };
        let mut cart = Cart::open(
            id.into(),
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

    fn answered(mut order: HeldOrder, answer: BookingAnswer, at_s: i64) -> HeldOrder {
        let policy = OrderPolicy::default();
        order
            .start_booking(at(at_s - 1))
            .unwrap_or_else(|e| panic!("{e}"));
        order
            .answer(answer, &policy, at(at_s))
            .unwrap_or_else(|e| panic!("{e}"));
        order
    }

    fn booked(price_cents: i64) -> BookingAnswer {
        BookingAnswer::Booked {
            booking_ref: "B".into(),
            price_cents,
        }
    }

    #[test]
    fn each_order_is_counted_where_it_ended() {
        let orders = vec![
            answered(order("a", "s1", 0), booked(10_000), 960),
            answered(order("b", "s1", 0), booked(9_000), 1_020),
            answered(order("c", "s2", 0), BookingAnswer::SoldOut, 960),
            answered(
                order("d", "s3", 0),
                BookingAnswer::PriceChanged {
                    price_cents: 20_000,
                },
                960,
            ),
            answered(
                order("e", "s3", 0),
                BookingAnswer::Rejected {
                    status: 422,
                    detail: "no".into(),
                },
                960,
            ),
            order("f", "s4", 0),
        ];
        let sold_out = BTreeMap::from([("lb-c".to_owned(), "s2".to_owned())]);
        let booked_keys = ["lb-a".to_owned(), "lb-b".to_owned()];
        let desk = DeskSeen {
            booked_keys: &booked_keys,
            sold_out: &sold_out,
            key_orders: &keys(&["lb-a", "lb-b", "lb-c"]),
        };
        let figures = Orders::of(&orders, &desk, at(900));
        assert_eq!(figures.held, 6);
        assert_eq!(figures.oversold_sailings, 1);
        assert_eq!(
            (figures.booked_at_held_price, figures.booked_at_other_price),
            (1, 1)
        );
        assert_eq!(figures.asked_customer, 1);
        assert_eq!(figures.refunded.sold_out, 1);
        assert_eq!(figures.parked, 1);
        assert_eq!(figures.duplicate_bookings, 0);
        assert_eq!(figures.minutes_to_book.p50, Some(1.0));
        assert_eq!(figures.minutes_to_book.p99, Some(2.0));
    }

    #[test]
    fn an_order_asked_and_accepted_is_counted_asked_and_booked_from_the_acceptance() {
        let asked = answered(
            order("a", "s1", 0),
            BookingAnswer::PriceChanged {
                price_cents: 12_000,
            },
            960,
        );
        let mut accepted = asked.clone();
        accepted
            .customer_replies(true, at(3_600))
            .unwrap_or_else(|e| panic!("{e}"));
        let booked = answered(accepted, booked(12_000), 3_660);
        let mut declined = answered(
            order("b", "s1", 0),
            BookingAnswer::PriceChanged {
                price_cents: 12_000,
            },
            960,
        );
        declined
            .customer_replies(false, at(1_200))
            .unwrap_or_else(|e| panic!("{e}"));
        let waiting = answered(
            order("c", "s1", 0),
            BookingAnswer::PriceChanged {
                price_cents: 12_000,
            },
            960,
        );
        let desk = DeskSeen {
            booked_keys: &["lb-a".to_owned()],
            sold_out: &BTreeMap::new(),
            key_orders: &keys(&["lb-a", "lb-b", "lb-c"]),
        };
        let figures = Orders::of(&[booked, declined, waiting], &desk, at(900));
        assert_eq!(figures.held, 3);
        assert_eq!(figures.asked_customer, 3);
        assert_eq!(figures.booked_at_held_price, 1, "at the price accepted");
        assert_eq!(figures.refunded.price, 1);
        // One still waits: three held, two ended.
        let ended = figures.booked_at_held_price
            + figures.booked_at_other_price
            + figures.refunded.price
            + figures.parked;
        assert_eq!(ended, 2);
        // Booked a minute after the customer accepted, not 45 after the
        // operator's return.
        assert_eq!(figures.minutes_to_book.p50, Some(1.0));
    }

    /// Each order's own key, as the product sends it.
    fn keys(orders: &[&str]) -> BTreeMap<String, String> {
        orders
            .iter()
            .map(|o| ((*o).to_owned(), (*o).to_owned()))
            .collect()
    }

    #[test]
    fn a_seat_the_desk_took_twice_for_one_order_is_a_duplicate() {
        let orders = vec![
            answered(order("a", "s1", 0), booked(10_000), 960),
            order("b", "s1", 0),
        ];
        let sold_out = BTreeMap::new();
        // The product's key: one key per order, whatever its attempts.
        let once = ["lb-a".to_owned(), "lb-b".to_owned()];
        let desk = DeskSeen {
            booked_keys: &once,
            sold_out: &sold_out,
            key_orders: &keys(&["lb-a", "lb-b"]),
        };
        assert_eq!(Orders::of(&orders, &desk, at(900)).duplicate_bookings, 0);
        // A key per attempt: two seats for order a, and a key nobody sent.
        let twice = ["k1".to_owned(), "k2".to_owned(), "k3".to_owned()];
        let key_orders = BTreeMap::from([
            ("k1".to_owned(), "lb-a".to_owned()),
            ("k2".to_owned(), "lb-a".to_owned()),
        ]);
        let desk = DeskSeen {
            booked_keys: &twice,
            sold_out: &sold_out,
            key_orders: &key_orders,
        };
        assert_eq!(Orders::of(&orders, &desk, at(900)).duplicate_bookings, 2);
    }

    #[test]
    fn a_guaranteed_order_sold_out_oversold_its_sailing_one_on_request_did_not() {
        let mut on_request = order("b", "s2", 0);
        on_request.on_request = true;
        let orders = vec![
            answered(order("a", "s1", 0), BookingAnswer::SoldOut, 960),
            answered(on_request, BookingAnswer::SoldOut, 960),
        ];
        let sold_out = BTreeMap::from([
            ("lb-a".to_owned(), "s1".to_owned()),
            ("lb-b".to_owned(), "s2".to_owned()),
        ]);
        let desk = DeskSeen {
            booked_keys: &[],
            sold_out: &sold_out,
            key_orders: &keys(&["lb-a", "lb-b"]),
        };
        let figures = Orders::of(&orders, &desk, at(900));
        assert_eq!(figures.oversold_sailings, 1);
        assert_eq!(figures.refunded.sold_out, 2);
        assert_eq!(figures.on_request, 1, "b alone was taken on request");
        // Asked about a new price, accepted, and sold out while the
        // customer decided: the operator had the seats when it answered.
        let mut accepted = answered(
            order("c", "s3", 0),
            BookingAnswer::PriceChanged {
                price_cents: 12_000,
            },
            960,
        );
        accepted
            .customer_replies(true, at(7_200))
            .unwrap_or_else(|e| panic!("{e}"));
        let orders = vec![answered(accepted, BookingAnswer::SoldOut, 7_260)];
        let sold_out = BTreeMap::from([("lb-c".to_owned(), "s3".to_owned())]);
        let desk = DeskSeen {
            booked_keys: &[],
            sold_out: &sold_out,
            key_orders: &keys(&["lb-c"]),
        };
        let figures = Orders::of(&orders, &desk, at(900));
        assert_eq!(figures.oversold_sailings, 0);
        assert_eq!(figures.refunded.sold_out, 1);
        assert_eq!(figures.minutes_to_book, MinutesToBook::default());
    }
}
