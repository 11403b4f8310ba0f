//! The order of a cart confirmed while its operator could not book, as its
//! customer sees it and answers it (docs/orders.md, "The customer's
//! reply").
//!
//! A read of the cart (`GET /carts/{cart_id}`) shows its order beside it,
//! `order`: held, booking, booked, waiting on the customer (with the new
//! price and the deadline), refunded or parked. When the operator's price
//! rose past the cart's tolerance the order waits on its customer, who
//! answers with `POST /carts/{cart_id}/order`, `{"accept": true|false,
//! "price_cents": N}`: the price named must be the one the order asks, so
//! a reply to a price the customer was not shown changes nothing (409).
//! Accepted, the order is held again at that price and the booking worker
//! books it; declined, it is refunded
//! ([`HeldOrder::customer_replies`]).
//!
//! The reply is saved on the revision read, as the booking worker saves,
//! so a reply that races the worker (or another reply) moves the order
//! once; the move goes on the bus as its `Order …` event and counts in
//! `OrdersMoved`. It is not a step of the cart: the cart, its revision and
//! its step history stay as they were.

use chrono::{DateTime, Utc};
use lifeboat_core::cart::Cart;
use lifeboat_core::events::{LifeboatEvent, OrderMoved};
use lifeboat_core::metrics::{MetricSet, names};
use lifeboat_core::order::{HeldOrder, OrderState, RefundReason, order_id};
use lifeboat_core::ports::StoreError;
use lifeboat_lookup::http::{HttpRequest, Problem, Reply};
use serde_json::{Value, json};

use crate::{CartService, body, log_ref};

impl CartService {
    /// The order held for `cart`: only a cart confirmed on a cached price
    /// has one. An Orders table that cannot be read is a 503, never "no
    /// order".
    pub(crate) async fn order_of(&self, cart: &Cart) -> Result<Option<HeldOrder>, Problem> {
        if !cart
            .confirmation
            .as_ref()
            .is_some_and(|c| c.on_cached_price)
        {
            return Ok(None);
        }
        self.orders
            .get(&order_id(&cart.cart_id))
            .await
            .map_err(|e| orders_unavailable(cart, &e))
    }

    /// `POST /carts/{cart_id}/order`: the customer's reply to the new price
    /// of the cart's order.
    pub(crate) async fn reply(&self, id: &str, request: &HttpRequest) -> Result<Reply, Problem> {
        let cart = self.load(id, &request.caller).await?;
        let reply = body::order_reply(&request.body)?;
        let Some(mut order) = self.order_of(&cart).await? else {
            return Err(Problem::not_found(format!(
                "cart {id:?} has no order: only a cart confirmed while its operator could not book has one"
            )));
        };
        let now = self.lookup.clock.now();
        let OrderState::AskCustomer {
            deadline,
            price_cents,
            ..
        } = order.state
        else {
            return Err(not_waiting(
                &order,
                "not_asked",
                format!(
                    "the order is {}: it is not waiting for your reply",
                    order.state.as_str()
                ),
                now,
            ));
        };
        if now > deadline {
            return Err(not_waiting(
                &order,
                "deadline_passed",
                format!(
                    "the reply was due by {}: the order is refunded",
                    deadline.to_rfc3339()
                ),
                now,
            ));
        }
        if reply.price_cents != price_cents {
            return Err(not_waiting(
                &order,
                "not_the_price_asked",
                format!(
                    "the order asks about {price_cents} {}, not {}: read the cart and answer the price it shows",
                    order.currency, reply.price_cents
                ),
                now,
            ));
        }
        if let Err(e) = order.customer_replies(reply.accept, now) {
            // The checks above are the rule's own: this is not reached.
            tracing::error!(cart = %log_ref(&cart.cart_id), error = %e, "reply refused by the order");
            return Err(not_waiting(&order, "not_asked", e.to_string(), now));
        }
        let expected = order.revision;
        order.revision = expected + 1;
        match self.orders.save(&order, expected).await {
            Ok(()) => {}
            Err(StoreError::Conflict(why)) => {
                tracing::info!(cart = %log_ref(&cart.cart_id), operator = %cart.operator, why = %why, "order moved meanwhile: reply not saved");
                return Err(Problem::new(
                    409,
                    "order changed meanwhile",
                    "the order was changed while the reply was made: read the cart again",
                )
                .with("reason", json!("order_changed")));
            }
            Err(e) => return Err(orders_unavailable(&cart, &e)),
        }
        self.publish_move(&order).await;
        tracing::info!(cart = %log_ref(&cart.cart_id), operator = %cart.operator, accept = reply.accept, to = order.state.as_str(), "order reply");
        let on_sale = self.on_sale(&cart.operator).await.unwrap_or(false);
        let mut view = self.view(&cart, on_sale);
        view["order"] = order_view(&order, now);
        Ok(Reply::ok(view))
    }

    /// The order's newest move on the bus, and counted in `OrdersMoved`. A
    /// move the bus does not take is in the order's history all the same.
    pub(crate) async fn publish_move(&self, order: &HeldOrder) {
        let Some(moved) = OrderMoved::of(order) else {
            return;
        };
        let now = self.lookup.clock.now();
        self.lookup.metrics.emit(
            &[MetricSet::new()
                .dimension(names::OPERATOR, order.operator.as_str())
                .dimension("State", moved.to.as_str())
                .count(names::ORDERS_MOVED, 1)],
            now,
        );
        let events = [LifeboatEvent::OrderMoved(Box::new(moved))];
        if let Err(e) = self.events.publish(&events).await {
            tracing::warn!(operator = %order.operator, error = %e, "order move not published");
        }
    }
}

/// The cart's `order` member: where the order stands, for its customer.
pub(crate) fn order_view(order: &HeldOrder, now: DateTime<Utc>) -> Value {
    let mut view = json!({
        "order_id": order.order_id,
        "state": order.state.as_str(),
        "guaranteed": !order.on_request,
        "held_at": order.held_at,
        "paid_cents": order.paid_cents,
        "currency": order.currency,
    });
    let message = match &order.state {
        OrderState::Held { .. } | OrderState::Booking { .. } => {
            "Your booking is held and made with the operator as soon as it can take it: we tell you when it is booked, or refund you in full if it cannot be."
        }
        OrderState::Booked {
            at,
            booking_ref,
            refunded_cents,
            ..
        } => {
            view["booked_at"] = json!(at);
            view["booking_ref"] = json!(booking_ref);
            view["refunded_cents"] = json!(refunded_cents);
            "Your booking is made."
        }
        OrderState::AskCustomer {
            asked_at,
            deadline,
            price_cents,
        } => {
            view["price_cents"] = json!(price_cents);
            view["asked_at"] = json!(asked_at);
            view["deadline"] = json!(deadline);
            if now > *deadline {
                "The price of your trip rose and no reply came by the deadline: you are refunded in full."
            } else {
                "The price of your trip rose past what we could cover: reply by the deadline whether to book it at the new price; declined or unanswered, you are refunded in full."
            }
        }
        OrderState::Refunded { at, reason } => {
            view["refunded_at"] = json!(at);
            view["refund_reason"] = json!(match reason {
                RefundReason::SoldOut => "sold_out",
                RefundReason::NotBookable { .. } => "not_bookable",
                RefundReason::PriceDeclined => "price_declined",
                RefundReason::NoAnswer => "no_answer",
            });
            "Your booking could not be made: you are refunded in full."
        }
        OrderState::Parked { at, .. } => {
            // The reason is the operator's answer, for the person who
            // looks at it; the customer is told someone does.
            view["parked_at"] = json!(at);
            "Your booking needs a look from our team: we will contact you."
        }
    };
    view["message"] = json!(message);
    view
}

/// 409: the order does not wait on this reply; the problem carries the
/// order as it stands.
fn not_waiting(order: &HeldOrder, reason: &str, detail: String, now: DateTime<Utc>) -> Problem {
    Problem::new(409, "order not waiting for this reply", detail)
        .with("reason", json!(reason))
        .with("order", order_view(order, now))
}

fn orders_unavailable(cart: &Cart, e: &StoreError) -> Problem {
    tracing::error!(cart = %log_ref(&cart.cart_id), operator = %cart.operator, error = %e, "order store failed");
    Problem::unavailable(
        "your booking cannot be read right now: try again shortly",
        lifeboat_lookup::RETRY_AFTER_FAILURE,
    )
}
