//! Booking held orders with the operator: the request each booking call
//! is, and how many of an operator's orders are asked at once.
//!
//! A booking is a request like any other to the gateway (operation `book`,
//! through the operator's stream, breaker and call limit), its parameters
//! the order's and its idempotency key the order's id. Each attempt is a
//! request of its own (`book-<order id>-<attempt>`), so the outcome read
//! is always the current attempt's; every attempt carries the same key, so
//! the operator books the order once however many attempts reach it.
//!
//! The booking worker asks an operator's held orders oldest first, at most
//! [`OrderPolicy::in_flight`] at once, and an order whose call got no
//! answer only after its retry gap ([`HeldOrder::is_due`]).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{HeldOrder, OrderPolicy, OrderState};
use crate::budget::Budget;
use crate::operator::{Operation, OperatorId};
use crate::request::RequestRecord;

/// Environment variable: the held orders' settings per operator (JSON).
pub const ORDER_SETTINGS: &str = "ORDER_SETTINGS";

/// Held orders' settings of every operator (`ORDER_SETTINGS`), for example
/// `{"default": {"in_flight": 2}, "operators": {"nordic": {"max_attempts": 5}}}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OrderSettings {
    pub default: OrderPolicy,
    pub operators: BTreeMap<OperatorId, OrderPolicy>,
}

#[derive(Debug, thiserror::Error)]
pub enum OrderSettingsError {
    #[error("ORDER_SETTINGS is not valid order settings JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("ORDER_SETTINGS: {field} of {operator} must be at least 1")]
    Zero {
        operator: String,
        field: &'static str,
    },
    #[error("ORDER_SETTINGS: retry_max_s of {operator} is less than its retry_first_s")]
    RetryOrder { operator: String },
}

impl OrderSettings {
    /// Parse settings JSON; an empty string means all defaults. A policy
    /// that could book nothing (no call in flight, no attempt) or retry in
    /// a tight loop (no gap) is refused.
    pub fn from_json(json: &str) -> Result<Self, OrderSettingsError> {
        if json.trim().is_empty() {
            return Ok(Self::default());
        }
        let settings: Self = serde_json::from_str(json)?;
        let policies = std::iter::once(("default".to_owned(), &settings.default)).chain(
            settings
                .operators
                .iter()
                .map(|(operator, policy)| (operator.to_string(), policy)),
        );
        for (operator, policy) in policies {
            let zero = [
                ("in_flight", u64::from(policy.in_flight)),
                ("max_attempts", u64::from(policy.max_attempts)),
                ("retry_first_s", policy.retry_first_s),
                ("booking_lost_after_s", policy.booking_lost_after_s),
            ]
            .into_iter()
            .find(|(_, value)| *value == 0);
            if let Some((field, _)) = zero {
                return Err(OrderSettingsError::Zero { operator, field });
            }
            if policy.retry_max_s < policy.retry_first_s {
                return Err(OrderSettingsError::RetryOrder { operator });
            }
        }
        Ok(settings)
    }

    pub fn for_operator(&self, operator: &OperatorId) -> &OrderPolicy {
        self.operators.get(operator).unwrap_or(&self.default)
    }
}

/// The prefix of every booking request's id.
pub const BOOK_REQUEST_PREFIX: &str = "book-";

/// The request id of attempt `attempt` of order `order_id`.
pub fn book_request_id(order_id: &str, attempt: u32) -> String {
    format!("{BOOK_REQUEST_PREFIX}{order_id}-{attempt}")
}

/// The order and attempt of a booking request's id, if it is one
/// ([`book_request_id`] read back).
pub fn parse_book_request_id(request_id: &str) -> Option<(&str, u32)> {
    let rest = request_id.strip_prefix(BOOK_REQUEST_PREFIX)?;
    let (order_id, attempt) = rest.rsplit_once('-')?;
    Some((order_id, attempt.parse().ok()?))
}

impl HeldOrder {
    /// The booking call's parameters (docs/orders.md, "The booking call"):
    /// the order's idempotency key, sailing, passengers, accommodation,
    /// extras (comma-separated), the most the operator may charge and the
    /// currency.
    pub fn book_params(&self) -> BTreeMap<String, String> {
        let mut params = BTreeMap::from([
            ("idempotency_key".to_owned(), self.order_id.clone()),
            ("sailing_id".to_owned(), self.sailing.sailing_id.clone()),
            ("passengers".to_owned(), self.sailing.passengers.to_string()),
            (
                "max_price_cents".to_owned(),
                self.max_price_cents.to_string(),
            ),
            ("currency".to_owned(), self.currency.clone()),
        ]);
        if let Some(accommodation) = self.accommodation.as_ref().filter(|a| !a.is_empty()) {
            params.insert("accommodation".to_owned(), accommodation.clone());
        }
        if !self.extras.is_empty() {
            params.insert("extras".to_owned(), self.extras.join(","));
        }
        params
    }

    /// The request id of the booking call out, while the order is booking.
    pub fn booking_request_id(&self) -> Option<String> {
        match self.state {
            OrderState::Booking { attempt, .. } => Some(book_request_id(&self.order_id, attempt)),
            _ => None,
        }
    }

    /// The request record of the booking call out (after
    /// [`HeldOrder::start_booking`]), created at `now` and waited for as
    /// long as `budget` says an asker waits: past that deadline the
    /// consumer writes it expired without calling.
    pub fn book_request(&self, budget: &Budget, now: DateTime<Utc>) -> Option<RequestRecord> {
        let wait = chrono::Duration::from_std(budget.asker_wait()).unwrap_or(chrono::Duration::MAX);
        Some(RequestRecord {
            request_id: self.booking_request_id()?,
            operator: self.operator.clone(),
            operation: Operation::Book,
            params: self.book_params(),
            created_at: now,
            deadline: now
                .checked_add_signed(wait)
                .unwrap_or(DateTime::<Utc>::MAX_UTC),
        })
    }
}

/// The orders to book now among `open` (an operator's open orders): the
/// oldest due ones, as many as `policy.in_flight` leaves room for beside
/// those already booking.
pub fn to_start<'a>(
    open: &'a [HeldOrder],
    policy: &OrderPolicy,
    now: DateTime<Utc>,
) -> Vec<&'a HeldOrder> {
    let booking = open
        .iter()
        .filter(|o| matches!(o.state, OrderState::Booking { .. }))
        .count();
    let room = usize::try_from(policy.in_flight)
        .unwrap_or(usize::MAX)
        .saturating_sub(booking);
    let mut due: Vec<&HeldOrder> = open.iter().filter(|o| o.is_due(now)).collect();
    due.sort_by(|a, b| (a.held_at, &a.order_id).cmp(&(b.held_at, &b.order_id)));
    due.truncate(room);
    due
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::order::{BookingAnswer, HoldReason, confirmed_cart};

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap_or_default()
    }

    fn ok<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
        r.unwrap_or_else(|e| panic!("{e}"))
    }

    fn order(cart_id: &str, held_at: i64) -> HeldOrder {
        let cart = confirmed_cart(cart_id, 2, 10_000, at(held_at));
        ok(HeldOrder::hold(
            &cart,
            Some("cabin".into()),
            vec!["breakfast".into(), "wifi".into()],
            5,
            HoldReason::OffSale,
            at(held_at),
        ))
    }

    #[test]
    fn a_booking_request_carries_the_order_and_its_key() {
        let mut o = order("c1", 0);
        let budget = Budget::with_timeout(Duration::from_secs(8));
        assert_eq!(o.book_request(&budget, at(5)), None, "not booking yet");
        ok(o.start_booking(at(5)));
        let Some(request) = o.book_request(&budget, at(5)) else {
            panic!("no request while booking");
        };
        assert_eq!(request.request_id, "book-lb-c1-1");
        assert_eq!(parse_book_request_id("book-lb-c1-1"), Some(("lb-c1", 1)));
        assert_eq!(parse_book_request_id("q0123-7"), None);
        assert_eq!(parse_book_request_id("book-lb-c1-x"), None);
        assert_eq!(request.operation, Operation::Book);
        assert_eq!(
            request.deadline,
            at(14),
            "the budget and the queue's second"
        );
        let params: Vec<(&str, &str)> = request
            .params
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            params,
            [
                ("accommodation", "cabin"),
                ("currency", "EUR"),
                ("extras", "breakfast,wifi"),
                ("idempotency_key", "lb-c1"),
                ("max_price_cents", "10500"),
                ("passengers", "2"),
                ("sailing_id", "s1"),
            ]
        );
        // The next attempt is another request with the same key.
        let policy = OrderPolicy::default();
        ok(o.answer(
            BookingAnswer::Unavailable {
                detail: "timeout".into(),
            },
            &policy,
            at(20),
        ));
        ok(o.start_booking(at(40)));
        let again = o.book_request(&budget, at(40));
        assert_eq!(
            again.as_ref().map(|r| r.request_id.as_str()),
            Some("book-lb-c1-2")
        );
        assert_eq!(
            again.as_ref().and_then(|r| r.params.get("idempotency_key")),
            Some(&"lb-c1".to_owned())
        );
    }

    #[test]
    fn an_unanswered_order_waits_longer_each_time_before_it_is_asked_again() {
        let policy = OrderPolicy::default();
        let gaps: Vec<u64> = (1..=6).map(|a| policy.retry_gap(a).as_secs()).collect();
        assert_eq!(gaps, [10, 20, 40, 80, 120, 120]);
        assert_eq!(policy.retry_gap(u32::MAX).as_secs(), 120);
        let mut o = order("c1", 0);
        ok(o.start_booking(at(100)));
        ok(o.answer(
            BookingAnswer::Unavailable {
                detail: "503".into(),
            },
            &policy,
            at(101),
        ));
        assert_eq!(o.retry_at, Some(at(111)));
        assert!(!o.is_due(at(110)));
        assert!(o.is_due(at(111)));
        ok(o.start_booking(at(111)));
        assert_eq!(o.retry_at, None);
        // A lost call waits too.
        assert!(o.expire(&policy, at(231)).is_some());
        assert_eq!(o.retry_at, Some(at(251)));
    }

    #[test]
    fn the_oldest_due_orders_are_started_within_the_limit() {
        let policy = OrderPolicy {
            in_flight: 3,
            ..OrderPolicy::default()
        };
        let mut orders: Vec<HeldOrder> = [("d", 40), ("a", 10), ("c", 30), ("b", 20), ("e", 50)]
            .into_iter()
            .map(|(id, t)| order(id, t))
            .collect();
        let now = at(100);
        let ids = |started: Vec<&HeldOrder>| -> Vec<String> {
            started.iter().map(|o| o.order_id.clone()).collect()
        };
        assert_eq!(
            ids(to_start(&orders, &policy, now)),
            ["lb-a", "lb-b", "lb-c"]
        );
        // One already booking leaves room for two; one waiting its gap is
        // passed over.
        ok(orders[1].start_booking(now));
        orders[3].retry_at = Some(at(200));
        assert_eq!(ids(to_start(&orders, &policy, now)), ["lb-c", "lb-d"]);
        for o in orders.iter_mut().filter(|o| o.is_due(now)) {
            ok(o.start_booking(now));
        }
        assert!(to_start(&orders, &policy, now).is_empty(), "all in flight");
    }

    #[test]
    fn settings_are_read_per_operator_and_a_policy_that_loops_is_refused() {
        let s = ok(OrderSettings::from_json(
            r#"{"default": {"in_flight": 2}, "operators": {"nordic": {"max_attempts": 5}}}"#,
        ));
        let nordic = ok(OperatorId::new("nordic"));
        let baltic = ok(OperatorId::new("baltic"));
        assert_eq!(s.for_operator(&baltic).in_flight, 2);
        assert_eq!(s.for_operator(&nordic).max_attempts, 5);
        assert_eq!(s.for_operator(&nordic).in_flight, 4, "a policy is whole");
        assert_eq!(ok(OrderSettings::from_json(" ")), OrderSettings::default());
        for (json, expected) in [
            (r#"{"default": {"in_flight": 0}}"#, "in_flight of default"),
            (
                r#"{"operators": {"nordic": {"retry_first_s": 0}}}"#,
                "retry_first_s of nordic",
            ),
            (
                r#"{"default": {"retry_first_s": 60, "retry_max_s": 30}}"#,
                "retry_max_s of default",
            ),
            (r#"{"default": {"inflight": 2}}"#, "not valid"),
        ] {
            let e = OrderSettings::from_json(json).map(|_| ()).unwrap_err();
            assert!(e.to_string().contains(expected), "{json}: {e}");
        }
    }
}
