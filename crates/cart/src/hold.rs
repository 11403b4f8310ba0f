//! Holding the order of a cart confirmed while its operator cannot book
//! (docs/orders.md): off sale, or on sale with no live price (its breaker
//! open, or its price call failed), so the cart was confirmed on a cached
//! price. The confirmation becomes a [`HeldOrder`], written through the
//! [`OrderStore`](lifeboat_core::ports::OrderStore) port before the cart is
//! stored as confirmed, so no confirmation ever names an order that was not
//! written.
//!
//! The seats the sailing's held orders may take are capped by the seats
//! left in the operator's last search answer for the cart's route, date and
//! passengers (the cached answer keeps the operator's body, `seats_left`
//! included, with its time), trusted less the older that answer is
//! ([`SeatGuard`](lifeboat_core::order::seats::SeatGuard)). Past the cap, or with no count, the operator's
//! `seats.past_the_cap` says: the order is taken on request, or the confirm
//! is refused (409, `reason: past_the_cap`) and the cart stays open.
//!
//! A retried confirm holds nothing twice: the order's id is `lb-<cart id>`,
//! and the store writes an order only if it is new.

use lifeboat_core::cart::{Cart, CartPolicy};
use lifeboat_core::order::seats::{PastTheCap, SeatsLeft};
use lifeboat_core::order::{HeldOrder, HoldReason};
use lifeboat_core::ports::{Held, StoreError};
use lifeboat_lookup::http::Problem;
use serde_json::{Value, json};

use crate::{CartService, log_ref};

impl CartService {
    /// Hold the order of `cart`, just confirmed on a cached price: the
    /// `booking` member of the confirmation's answer, or the problem that
    /// answers the confirm instead (the cart is then not confirmed). A new
    /// hold is published as `Order Held` (a retried confirm's, found held
    /// before, is not published again).
    pub(crate) async fn hold_order(
        &self,
        cart: &Cart,
        on_sale: bool,
        policy: &CartPolicy,
    ) -> Result<Value, Problem> {
        let now = self.lookup.clock.now();
        let reason = if on_sale {
            HoldReason::BreakerOpen
        } else {
            HoldReason::OffSale
        };
        let mut order = HeldOrder::hold(
            cart,
            cart.accommodation.as_ref().map(|a| a.code.clone()),
            cart.choices(policy).extras,
            policy.absorb_rise_percent,
            reason,
            now,
        )
        .map_err(|e| {
            tracing::error!(cart = %log_ref(&cart.cart_id), error = %e, "no order to hold");
            not_held()
        })?;
        let left = self.seats_left(cart).await;
        if let Some(left) = left {
            let cap = policy.seats.cap(left, now);
            match self.orders.hold(&order, Some(cap)).await {
                Ok(Held::Held) => {
                    self.publish_move(&order).await;
                    return Ok(self.held(cart, &order));
                }
                Ok(Held::AlreadyHeld) => return self.already_held(cart, &order).await,
                Ok(Held::Full { held }) => {
                    tracing::info!(cart = %log_ref(&cart.cart_id), operator = %cart.operator, held, cap, passengers = order.sailing.passengers, "the sailing's held orders are at its seat cap");
                }
                Err(e) => return Err(store_failed(cart, &e)),
            }
        }
        match policy.seats.past_the_cap {
            PastTheCap::NotOffered => {
                // A confirm whose order was held before its cart was
                // stored (the cart's write lost) still finds its order.
                match self.orders.get(&order.order_id).await {
                    Ok(Some(stored)) => Ok(self.held(cart, &stored)),
                    Ok(None) => Err(past_the_cap(cart, left.is_some())),
                    Err(e) => Err(store_failed(cart, &e)),
                }
            }
            PastTheCap::OnRequest => {
                order.on_request = true;
                match self.orders.hold(&order, None).await {
                    Ok(Held::Held) => {
                        self.publish_move(&order).await;
                        Ok(self.held(cart, &order))
                    }
                    Ok(Held::AlreadyHeld) => self.already_held(cart, &order).await,
                    Ok(Held::Full { held }) => {
                        tracing::error!(cart = %log_ref(&cart.cart_id), held, "the store refused an order without a cap as full");
                        Err(not_held())
                    }
                    Err(e) => Err(store_failed(cart, &e)),
                }
            }
        }
    }

    /// The order held for `cart` before (a retried confirm): the stored
    /// one is what the customer is told about.
    async fn already_held(&self, cart: &Cart, order: &HeldOrder) -> Result<Value, Problem> {
        match self.orders.get(&order.order_id).await {
            Ok(Some(stored)) => Ok(self.held(cart, &stored)),
            Ok(None) => {
                tracing::error!(cart = %log_ref(&cart.cart_id), "the store said the order was held but has none");
                Err(not_held())
            }
            Err(e) => Err(store_failed(cart, &e)),
        }
    }

    fn held(&self, cart: &Cart, order: &HeldOrder) -> Value {
        tracing::info!(cart = %log_ref(&cart.cart_id), operator = %cart.operator, on_request = order.on_request, passengers = order.sailing.passengers, "order held");
        booking(order)
    }

    /// The seats the operator's last search answer said the cart's sailing
    /// had left, and when it said so; `None` when no cached answer carries
    /// a count for it.
    async fn seats_left(&self, cart: &Cart) -> Option<SeatsLeft> {
        let (answer, sailing) = self.cached_sailing(cart).await?;
        let seats = sailing.get("seats_left")?.as_u64()?;
        Some(SeatsLeft {
            seats: u32::try_from(seats).unwrap_or(u32::MAX),
            as_of: answer.as_of,
        })
    }
}

/// The confirmation's `booking` member: the order held and how the
/// customer will hear of it.
pub(crate) fn booking(order: &HeldOrder) -> Value {
    let (status, message) = if order.on_request {
        (
            "on_request",
            "The operator cannot take bookings right now and this sailing may be full: your order is taken on request, not guaranteed. We book it as soon as the operator is back and tell you when it is booked, or refund you in full if the seats are gone.",
        )
    } else {
        (
            "held",
            "The operator cannot take bookings right now: your booking is held and made as soon as the operator is back. We tell you when it is booked, or refund you in full if it cannot be.",
        )
    };
    json!({
        "status": status,
        "order_id": order.order_id,
        "guaranteed": !order.on_request,
        "held_at": order.held_at,
        "message": message,
    })
}

/// Past the cap (or with no count), and the operator's policy refuses
/// orders there.
fn past_the_cap(cart: &Cart, counted: bool) -> Problem {
    let why = if counted {
        "its seats left may already be taken"
    } else {
        "lifeboat has no count of its seats left"
    };
    Problem::new(
        409,
        "no seats to promise",
        format!(
            "{} cannot take bookings right now and {why}: sailing {} cannot be confirmed until the operator is back",
            cart.operator, cart.sailing.sailing_id
        ),
    )
    .with("reason", json!("past_the_cap"))
}

fn store_failed(cart: &Cart, e: &StoreError) -> Problem {
    tracing::error!(cart = %log_ref(&cart.cart_id), operator = %cart.operator, error = %e, "order store failed; the cart is not confirmed");
    not_held()
}

fn not_held() -> Problem {
    Problem::unavailable(
        "your booking could not be held right now, so the cart is not confirmed: try again shortly",
        lifeboat_lookup::RETRY_AFTER_FAILURE,
    )
}
