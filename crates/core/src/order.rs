//! Held orders: a cart confirmed while its operator could not book, kept
//! until the trip is booked with the operator, refunded, or parked for a
//! person (docs/orders.md).
//!
//! A confirmed cart is a promise; the promise is kept when the operator has
//! the booking. While the operator is off sale (or its breaker is open, or
//! the booking call failed) the confirmation becomes a [`HeldOrder`], and
//! the order is booked through the gateway when the operator is back. Every
//! booking call carries the order's [`HeldOrder::order_id`] as its
//! idempotency key, so a redelivered or retried call books one seat, not
//! two, and the most the operator may charge
//! ([`HeldOrder::max_price_cents`]: what the customer paid, plus the rise
//! the cart's tolerance absorbs).
//!
//! The states and what moves an order between them:
//!
//! ```text
//! Held ──start_booking──▶ Booking ──Booked──────────▶ Booked
//!  ▲                        │ ├────PriceChanged─────▶ AskCustomer ──accept──▶ Held
//!  │                        │ │                           ├──decline / deadline──▶ Refunded
//!  │                        │ ├────SoldOut / NotBookable─▶ Refunded
//!  │                        │ ├────Rejected─────────▶ Parked (a person looks)
//!  └──Unavailable / lost────┘ └─Unavailable × max_attempts─▶ Parked
//! ```
//!
//! Each move is an [`OrderEvent`] on the order's history and on the bus.
//! The rules are pure: the functions that store orders and call the
//! operator come in through ports, as the cart's do. The seats an order may
//! take while its operator is off sale are [`seats`]' business.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::cart::{Cart, Sailing};
use crate::operator::OperatorId;

pub mod answer;
pub mod booking;
pub mod seats;

/// Why an order was held instead of booked at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HoldReason {
    /// The operator was off sale when the cart was confirmed.
    OffSale,
    /// Its breaker was open: no call would have been made.
    BreakerOpen,
    /// The booking call itself failed (timed out, 5xx).
    BookingFailed,
}

/// Why an order was refunded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum RefundReason {
    /// The sailing sold out while the order was held.
    SoldOut,
    /// The operator no longer sells the sailing (cancelled, departed).
    NotBookable { detail: String },
    /// The price rose past the cart's tolerance and the customer said no.
    PriceDeclined,
    /// The price rose past the cart's tolerance and the customer did not
    /// answer by the deadline.
    NoAnswer,
}

/// Where an order is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum OrderState {
    /// Waiting for the operator.
    Held { reason: HoldReason },
    /// A booking call is out (its request written to the gateway).
    Booking { since: DateTime<Utc>, attempt: u32 },
    /// The operator has the booking.
    Booked {
        at: DateTime<Utc>,
        booking_ref: String,
        /// What the operator charged.
        price_cents: i64,
        /// A rise the marketplace absorbed (within the cart's tolerance).
        absorbed_cents: i64,
        /// A drop given back to the customer.
        refunded_cents: i64,
    },
    /// The price rose past the tolerance: the customer is asked whether to
    /// pay it, by `deadline`.
    AskCustomer {
        asked_at: DateTime<Utc>,
        deadline: DateTime<Utc>,
        price_cents: i64,
    },
    /// Paid back in full.
    Refunded {
        at: DateTime<Utc>,
        #[serde(flatten)]
        reason: RefundReason,
    },
    /// The operator refused the order itself, or it could not be booked
    /// after every attempt: a person decides. Never retried by itself.
    Parked { at: DateTime<Utc>, reason: String },
}

/// The name of an [`OrderState`], as an order's history, `lifeboat orders`
/// and the metrics write it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StateName {
    Held,
    Booking,
    Booked,
    AskCustomer,
    Refunded,
    Parked,
}

impl OrderState {
    pub fn name(&self) -> StateName {
        match self {
            OrderState::Held { .. } => StateName::Held,
            OrderState::Booking { .. } => StateName::Booking,
            OrderState::Booked { .. } => StateName::Booked,
            OrderState::AskCustomer { .. } => StateName::AskCustomer,
            OrderState::Refunded { .. } => StateName::Refunded,
            OrderState::Parked { .. } => StateName::Parked,
        }
    }

    /// Its name, as `lifeboat orders` and the metrics use it.
    pub fn as_str(&self) -> &'static str {
        self.name().as_str()
    }

    /// Whether nothing more happens to the order by itself.
    pub fn is_final(&self) -> bool {
        matches!(
            self,
            OrderState::Booked { .. } | OrderState::Refunded { .. } | OrderState::Parked { .. }
        )
    }
}

/// What the operator said to a booking call ([`answer`] reads it from the
/// call or its stored outcome).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BookingAnswer {
    /// Booked, at `price_cents` (never over the call's maximum).
    Booked {
        booking_ref: String,
        price_cents: i64,
    },
    /// Not booked: the price is now `price_cents`, over the call's maximum.
    PriceChanged { price_cents: i64 },
    /// Not booked: no seats left.
    SoldOut,
    /// Not booked: the sailing cannot be booked any more.
    NotBookable { detail: String },
    /// The operator refused this order (a 4xx about the order itself: a
    /// passenger, an accommodation it does not know). Retrying would get
    /// the same answer.
    Rejected { status: u16, detail: String },
    /// No answer that says anything about the order: a timeout, a 5xx, the
    /// breaker open, the call shed. Asked again later with the same key.
    Unavailable { detail: String },
}

/// The settings of held orders, per operator in `ORDER_SETTINGS`
/// ([`booking::OrderSettings`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OrderPolicy {
    /// How long a customer has to accept a price past the tolerance.
    pub customer_deadline_s: u64,
    /// Booking attempts that come back `Unavailable` before the order is
    /// parked for a person.
    pub max_attempts: u32,
    /// A booking call with no answer after this long is taken as lost: the
    /// order is held again, and the next call (same key) is safe.
    pub booking_lost_after_s: u64,
    /// The most booking calls of one operator out at once: a recovering
    /// operator gets its backlog a few orders at a time, never all at once.
    pub in_flight: u32,
    /// After a booking that got no answer, the order waits this long before
    /// it is asked again, doubling with each attempt up to
    /// `retry_max_s`: never asked again in a tight loop.
    pub retry_first_s: u64,
    /// The longest wait between two attempts of one order.
    pub retry_max_s: u64,
}

impl Default for OrderPolicy {
    fn default() -> Self {
        Self {
            customer_deadline_s: 24 * 3600,
            max_attempts: 10,
            booking_lost_after_s: 120,
            in_flight: 4,
            retry_first_s: 10,
            retry_max_s: 120,
        }
    }
}

impl OrderPolicy {
    /// The wait after failed attempt number `attempt` (1-based) before the
    /// order is asked again: `retry_first_s`, doubling, at most
    /// `retry_max_s`.
    pub fn retry_gap(&self, attempt: u32) -> Duration {
        let factor = 1u64
            .checked_shl(attempt.saturating_sub(1))
            .unwrap_or(u64::MAX);
        Duration::from_secs(
            self.retry_first_s
                .saturating_mul(factor)
                .min(self.retry_max_s),
        )
    }

    fn retry_at(&self, attempt: u32, now: DateTime<Utc>) -> DateTime<Utc> {
        chrono::Duration::from_std(self.retry_gap(attempt))
            .ok()
            .and_then(|gap| now.checked_add_signed(gap))
            .unwrap_or(DateTime::<Utc>::MAX_UTC)
    }
}

/// One move of an order, for its history and the bus.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderEvent {
    pub at: DateTime<Utc>,
    /// The state the order moved to.
    pub to: StateName,
    pub detail: String,
}

impl StateName {
    /// The name, as the order's JSON, `lifeboat orders` and the metrics
    /// write it.
    pub fn as_str(self) -> &'static str {
        match self {
            StateName::Held => "held",
            StateName::Booking => "booking",
            StateName::Booked => "booked",
            StateName::AskCustomer => "ask_customer",
            StateName::Refunded => "refunded",
            StateName::Parked => "parked",
        }
    }

    /// The event bus's `detail-type` for a move to this state.
    pub fn detail_type(self) -> &'static str {
        match self {
            StateName::Held => "Order Held",
            StateName::Booking => "Order Booking",
            StateName::Booked => "Order Booked",
            StateName::AskCustomer => "Order Needs Customer",
            StateName::Refunded => "Order Refunded",
            StateName::Parked => "Order Parked",
        }
    }

    pub const ALL: [StateName; 6] = [
        StateName::Held,
        StateName::Booking,
        StateName::Booked,
        StateName::AskCustomer,
        StateName::Refunded,
        StateName::Parked,
    ];
}

impl OrderEvent {
    /// The event bus's `detail-type` for a move to `to`.
    pub fn detail_type(&self) -> &'static str {
        self.to.detail_type()
    }
}

/// The most moves an order's history keeps; the oldest go first.
pub const MAX_ORDER_HISTORY: usize = 32;

/// A confirmed cart waiting for its operator, and everything needed to book
/// it without the cart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldOrder {
    /// The idempotency key every booking call of this order carries.
    pub order_id: String,
    pub cart_id: String,
    pub operator: OperatorId,
    pub sailing: Sailing,
    pub accommodation: Option<String>,
    pub extras: Vec<String>,
    /// What the customer paid.
    pub paid_cents: i64,
    pub currency: String,
    /// When the operator gave the price the customer paid.
    pub price_as_of: DateTime<Utc>,
    /// The most the operator may charge without asking the customer.
    pub max_price_cents: i64,
    pub held_at: DateTime<Utc>,
    /// Taken past the sailing's seat cap, or with no count of the seats
    /// left: booked if the operator still has the seats, refunded
    /// otherwise, and the customer was told it is not guaranteed
    /// ([`seats::PastTheCap::OnRequest`]). Orders written before it was
    /// kept read as `false`.
    #[serde(default)]
    pub on_request: bool,
    pub state: OrderState,
    /// Booking calls made so far.
    pub attempts: u32,
    /// A held order whose last booking call got no answer is not asked
    /// again before this ([`OrderPolicy::retry_gap`]); `None`: at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<DateTime<Utc>>,
    /// Bumped by every save; saves are conditional on the revision read.
    pub revision: u64,
    pub history: Vec<OrderEvent>,
}

/// Why a cart cannot become a held order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotHoldable {
    #[error("the cart is not confirmed")]
    NotConfirmed,
}

/// A move the order's state does not allow (a stale answer, a second
/// customer reply): the order is left as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("order {order_id} is {state}: {wanted} does not apply")]
pub struct NotNow {
    pub order_id: String,
    pub state: &'static str,
    pub wanted: &'static str,
}

/// The idempotency key of the order made from `cart_id`: one cart, one
/// order, whoever holds it and however often.
pub fn order_id(cart_id: &str) -> String {
    format!("lb-{cart_id}")
}

/// The most an operator may charge for a price of `paid_cents` the customer
/// paid, when rises of `absorb_rise_percent` are absorbed.
pub fn max_price(paid_cents: i64, absorb_rise_percent: u32) -> i64 {
    let rise = i128::from(paid_cents.max(0)) * i128::from(absorb_rise_percent) / 100;
    paid_cents.saturating_add(i64::try_from(rise).unwrap_or(i64::MAX))
}

impl HeldOrder {
    /// The held order of a confirmed `cart`, with the rises its policy
    /// absorbs.
    pub fn hold(
        cart: &Cart,
        accommodation: Option<String>,
        extras: Vec<String>,
        absorb_rise_percent: u32,
        reason: HoldReason,
        now: DateTime<Utc>,
    ) -> Result<Self, NotHoldable> {
        let confirmation = cart
            .confirmation
            .as_ref()
            .ok_or(NotHoldable::NotConfirmed)?;
        let mut order = Self {
            order_id: order_id(&cart.cart_id),
            cart_id: cart.cart_id.clone(),
            operator: cart.operator.clone(),
            sailing: cart.sailing.clone(),
            accommodation,
            extras,
            paid_cents: confirmation.amount_cents,
            currency: confirmation.currency.clone(),
            price_as_of: confirmation.price_as_of,
            max_price_cents: max_price(confirmation.amount_cents, absorb_rise_percent),
            held_at: now,
            on_request: false,
            state: OrderState::Held { reason },
            attempts: 0,
            retry_at: None,
            revision: 0,
            history: Vec::new(),
        };
        order.record(now, format!("held: {reason:?}"));
        Ok(order)
    }

    fn record(&mut self, at: DateTime<Utc>, detail: String) {
        self.history.push(OrderEvent {
            at,
            to: self.state.name(),
            detail,
        });
        if self.history.len() > MAX_ORDER_HISTORY {
            let excess = self.history.len() - MAX_ORDER_HISTORY;
            self.history.drain(..excess);
        }
    }

    fn not_now(&self, wanted: &'static str) -> NotNow {
        NotNow {
            order_id: self.order_id.clone(),
            state: self.state.as_str(),
            wanted,
        }
    }

    /// The newest move (what to publish after a change).
    pub fn last_event(&self) -> Option<&OrderEvent> {
        self.history.last()
    }

    /// A booking call goes out for a held order.
    pub fn start_booking(&mut self, now: DateTime<Utc>) -> Result<&OrderEvent, NotNow> {
        if !matches!(self.state, OrderState::Held { .. }) {
            return Err(self.not_now("start_booking"));
        }
        self.attempts += 1;
        self.retry_at = None;
        self.state = OrderState::Booking {
            since: now,
            attempt: self.attempts,
        };
        self.record(now, format!("attempt {}", self.attempts));
        Ok(self.history.last().expect("just recorded"))
    }

    /// The operator's answer to the booking call out.
    pub fn answer(
        &mut self,
        answer: BookingAnswer,
        policy: &OrderPolicy,
        now: DateTime<Utc>,
    ) -> Result<&OrderEvent, NotNow> {
        if !matches!(self.state, OrderState::Booking { .. }) {
            return Err(self.not_now("answer"));
        }
        let detail = match answer {
            BookingAnswer::Booked {
                booking_ref,
                price_cents,
            } if price_cents <= self.max_price_cents => {
                let detail = format!("{booking_ref} at {price_cents} (paid {})", self.paid_cents);
                self.state = OrderState::Booked {
                    at: now,
                    booking_ref,
                    price_cents,
                    absorbed_cents: (price_cents - self.paid_cents).max(0),
                    refunded_cents: (self.paid_cents - price_cents).max(0),
                };
                detail
            }
            // An operator that books over the maximum it was sent broke
            // the contract: a person looks at it.
            BookingAnswer::Booked {
                booking_ref,
                price_cents,
            } => {
                let reason = format!(
                    "booked {booking_ref} at {price_cents}, over the maximum {}",
                    self.max_price_cents
                );
                self.state = OrderState::Parked {
                    at: now,
                    reason: reason.clone(),
                };
                reason
            }
            BookingAnswer::PriceChanged { price_cents } => {
                let deadline = now
                    + chrono::Duration::from_std(Duration::from_secs(policy.customer_deadline_s))
                        .unwrap_or(chrono::Duration::MAX);
                self.state = OrderState::AskCustomer {
                    asked_at: now,
                    deadline,
                    price_cents,
                };
                format!("price now {price_cents}, paid {}", self.paid_cents)
            }
            BookingAnswer::SoldOut => {
                self.state = OrderState::Refunded {
                    at: now,
                    reason: RefundReason::SoldOut,
                };
                "sold out".to_owned()
            }
            BookingAnswer::NotBookable { detail } => {
                let text = format!("not bookable: {detail}");
                self.state = OrderState::Refunded {
                    at: now,
                    reason: RefundReason::NotBookable { detail },
                };
                text
            }
            BookingAnswer::Rejected { status, detail } => {
                let reason = format!("the operator refused the order ({status}): {detail}");
                self.state = OrderState::Parked {
                    at: now,
                    reason: reason.clone(),
                };
                reason
            }
            BookingAnswer::Unavailable { detail } if self.attempts >= policy.max_attempts => {
                let reason = format!("{} attempts unanswered, the last: {detail}", self.attempts);
                self.state = OrderState::Parked {
                    at: now,
                    reason: reason.clone(),
                };
                reason
            }
            BookingAnswer::Unavailable { detail } => {
                self.state = OrderState::Held {
                    reason: HoldReason::BookingFailed,
                };
                self.retry_at = Some(policy.retry_at(self.attempts, now));
                detail
            }
        };
        self.record(now, detail);
        Ok(self.history.last().expect("just recorded"))
    }

    /// The customer's reply to a price past the tolerance: accepted, the
    /// order is held again with the new price as its maximum (the customer
    /// pays the difference); declined, it is refunded.
    pub fn customer_replies(
        &mut self,
        accept: bool,
        now: DateTime<Utc>,
    ) -> Result<&OrderEvent, NotNow> {
        let OrderState::AskCustomer {
            deadline,
            price_cents,
            ..
        } = self.state
        else {
            return Err(self.not_now("customer_replies"));
        };
        if now > deadline {
            return Err(self.not_now("customer_replies"));
        }
        let detail = if accept {
            self.paid_cents = price_cents;
            self.max_price_cents = price_cents;
            self.state = OrderState::Held {
                reason: HoldReason::BookingFailed,
            };
            format!("the customer accepted {price_cents}")
        } else {
            self.state = OrderState::Refunded {
                at: now,
                reason: RefundReason::PriceDeclined,
            };
            format!("the customer declined {price_cents}")
        };
        self.record(now, detail);
        Ok(self.history.last().expect("just recorded"))
    }

    /// What time alone does to the order at `now`: a customer who did not
    /// answer by the deadline is refunded; a booking call unanswered for
    /// `booking_lost_after_s` is taken as lost and the order held again.
    /// `None`: nothing changed.
    pub fn expire(&mut self, policy: &OrderPolicy, now: DateTime<Utc>) -> Option<&OrderEvent> {
        let detail = match self.state {
            OrderState::AskCustomer { deadline, .. } if now > deadline => {
                self.state = OrderState::Refunded {
                    at: now,
                    reason: RefundReason::NoAnswer,
                };
                "no answer from the customer by the deadline".to_owned()
            }
            OrderState::Booking { since, .. }
                if (now - since).num_seconds()
                    >= i64::try_from(policy.booking_lost_after_s).unwrap_or(i64::MAX) =>
            {
                self.state = OrderState::Held {
                    reason: HoldReason::BookingFailed,
                };
                self.retry_at = Some(policy.retry_at(self.attempts, now));
                "the booking call went unanswered".to_owned()
            }
            _ => return None,
        };
        self.record(now, detail);
        self.history.last()
    }

    /// The next order to book among `orders`: the oldest held one.
    pub fn oldest_held<'a>(orders: impl IntoIterator<Item = &'a HeldOrder>) -> Option<&'a Self> {
        orders
            .into_iter()
            .filter(|o| matches!(o.state, OrderState::Held { .. }))
            .min_by_key(|o| (o.held_at, o.order_id.as_str()))
    }

    /// Where the order stands among its operator's open orders: when it
    /// was held, or, while its customer is asked, the reply's deadline, the
    /// moment it next needs the booking worker. Open orders are read in
    /// this order ([`crate::ports::OrderStore::open_orders`]), so orders
    /// waiting on their customers for a day never stand before the held
    /// ones.
    pub fn open_at(&self) -> DateTime<Utc> {
        match self.state {
            OrderState::AskCustomer { deadline, .. } => deadline,
            _ => self.held_at,
        }
    }

    /// Whether the order may be booked at `now`: held, and not waiting
    /// after a booking call that got no answer.
    pub fn is_due(&self, now: DateTime<Utc>) -> bool {
        matches!(self.state, OrderState::Held { .. }) && self.retry_at.is_none_or(|at| at <= now)
    }
}

/// A cart of `passengers` on nordic's sailing `s1`, confirmed at `at` for
/// `paid_cents` on a price ten minutes old: the tests' order-to-be.
#[cfg(test)]
pub(crate) fn confirmed_cart(
    cart_id: &str,
    passengers: u8,
    paid_cents: i64,
    at: DateTime<Utc>,
) -> Cart {
    let operator = OperatorId::new("nordic").unwrap_or_else(|e| panic!("{e}"));
    let sailing = Sailing {
        sailing_id: "s1".into(),
        from: "HEL".into(),
        to: "TLL".into(),
        date: "2026-12-24".into(),
        passengers,
    };
    let policy = crate::cart::CartPolicy::default();
    let mut cart = Cart::open(cart_id.into(), operator, sailing, true, &policy, at);
    cart.confirmation = Some(crate::cart::Confirmation {
        at,
        amount_cents: paid_cents,
        currency: "EUR".into(),
        on_cached_price: true,
        price_as_of: at - chrono::Duration::minutes(10),
        absorbed_cents: 0,
    });
    cart
}

#[cfg(test)]
mod tests;
