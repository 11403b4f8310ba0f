//! What a booking call says about the order: the operator's answer to
//! `POST /book` (docs/operator-api.json), or the call's failure, read into a
//! [`BookingAnswer`].
//!
//! A 200 answer is the operator's word on the order (booked, the price
//! moved, sold out, not bookable): the operator is healthy, whatever it
//! says. A 4xx about the order itself is a refusal to hand to a person. A
//! call that got no word on the order (a timeout, a 5xx, no connection, the
//! breaker open, the call shed, a 408 or 429 of an operator under load, a
//! 401, 403 or 407 refusing lifeboat's credentials rather than the order)
//! is `Unavailable`: asked again later, with the same idempotency key.

use serde::Deserialize;

use super::BookingAnswer;
use crate::price::{MAX_PRICE_CENTS, known_currency};
use crate::request::{CallClass, CallResult, FailureReason, FailureStatuses, Outcome, OutcomeKind};

/// A 200 answer to `POST /book`, as the operator sends it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum BookBody {
    Booked {
        booking_ref: String,
        price_cents: i64,
        currency: String,
    },
    PriceChanged {
        price_cents: i64,
        currency: String,
    },
    SoldOut {
        #[serde(default)]
        seats_left: Option<u32>,
    },
    NotBookable {
        detail: String,
    },
}

/// Why a 200 answer to a booking is not one the contract allows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BookBodyError {
    #[error("book answer is not json: {0}")]
    NotJson(String),
    #[error(
        "book answer is not a json object with a status of booked, price_changed, sold_out or not_bookable and its fields: {0}"
    )]
    WrongShape(String),
    #[error("book answer has no booking reference (1 to 128 characters)")]
    NoReference,
    #[error("book answer's price_cents is not a whole number of cents from 1 to {MAX_PRICE_CENTS}")]
    NotAnAmount,
    #[error("book answer's currency {0:?} is not an ISO 4217 code")]
    UnknownCurrency(String),
}

/// The longest booking reference kept.
pub const MAX_BOOKING_REF: usize = 128;

impl BookBody {
    /// Read and check a 200 answer to a booking: one of the four statuses
    /// with its fields, a price from 1 cent to [`MAX_PRICE_CENTS`] in a known
    /// currency, a booking reference of 1 to [`MAX_BOOKING_REF`] characters.
    pub fn parse(text: &str) -> Result<Self, BookBodyError> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| BookBodyError::NotJson(e.to_string()))?;
        let body: BookBody =
            serde_json::from_value(value).map_err(|e| BookBodyError::WrongShape(e.to_string()))?;
        let price = |cents: i64, currency: &str| {
            if !(1..=MAX_PRICE_CENTS).contains(&cents) {
                Err(BookBodyError::NotAnAmount)
            } else if !known_currency(currency) {
                Err(BookBodyError::UnknownCurrency(
                    currency.chars().take(8).collect(),
                ))
            } else {
                Ok(())
            }
        };
        match &body {
            BookBody::Booked {
                booking_ref,
                price_cents,
                currency,
            } => {
                if booking_ref.trim().is_empty() || booking_ref.chars().count() > MAX_BOOKING_REF {
                    return Err(BookBodyError::NoReference);
                }
                price(*price_cents, currency)?;
            }
            BookBody::PriceChanged {
                price_cents,
                currency,
            } => price(*price_cents, currency)?,
            BookBody::SoldOut { .. } | BookBody::NotBookable { .. } => {}
        }
        Ok(body)
    }
}

impl From<BookBody> for BookingAnswer {
    fn from(body: BookBody) -> Self {
        match body {
            BookBody::Booked {
                booking_ref,
                price_cents,
                ..
            } => BookingAnswer::Booked {
                booking_ref,
                price_cents,
            },
            BookBody::PriceChanged { price_cents, .. } => {
                BookingAnswer::PriceChanged { price_cents }
            }
            BookBody::SoldOut { .. } => BookingAnswer::SoldOut,
            BookBody::NotBookable { detail } => BookingAnswer::NotBookable { detail },
        }
    }
}

/// Whether a 4xx to a booking refuses the order itself (a person looks),
/// rather than saying the operator is loaded (the default
/// [`FailureStatuses`], 408 and 429) or refusing lifeboat's credentials
/// (what [`FailureReason::refusal`] does not take for a refusal of the
/// question): those are asked again.
fn refuses_the_order(status: u16) -> bool {
    !FailureStatuses::default().contains(status) && FailureReason::refusal(status).is_some()
}

impl BookingAnswer {
    /// What the operator said to a booking call, from the call's result.
    pub fn from_call(result: &CallResult) -> Self {
        match (&result.class, &result.body) {
            (CallClass::Ok | CallClass::Slow, Some(body)) => Self::from_body(body),
            (CallClass::ClientError { status }, _) if refuses_the_order(*status) => {
                BookingAnswer::Rejected {
                    status: *status,
                    detail: result.detail.clone(),
                }
            }
            _ => BookingAnswer::Unavailable {
                detail: format!("{}: {}", result.class.name(), result.detail),
            },
        }
    }

    /// What the operator said to a booking call, from the request's stored
    /// outcome (the gateway's answer to a booking request). A refusal's
    /// status is read from its detail ("operator answered 422 …"), 400 if
    /// it names none.
    pub fn from_outcome(outcome: &Outcome) -> Self {
        match &outcome.kind {
            OutcomeKind::Answered { body } => Self::from_body(body),
            OutcomeKind::Failed {
                reason: FailureReason::Rejected | FailureReason::NotFound,
                detail,
            } => BookingAnswer::Rejected {
                status: status_in(detail).unwrap_or(400),
                detail: detail.clone(),
            },
            OutcomeKind::Failed { reason, detail } => BookingAnswer::Unavailable {
                detail: format!("{}: {detail}", reason.as_str()),
            },
        }
    }

    /// A 200 answer's body; one the contract does not allow is
    /// `Unavailable` (the gateway checks every answer, so only a stored
    /// answer gone bad gets here).
    pub fn from_body(body: &str) -> Self {
        match BookBody::parse(body) {
            Ok(body) => body.into(),
            Err(e) => BookingAnswer::Unavailable {
                detail: e.to_string(),
            },
        }
    }
}

/// The status in a call's detail: "operator answered 422 in 12 ms".
fn status_in(detail: &str) -> Option<u16> {
    let rest = detail.strip_prefix("operator answered ")?;
    rest.split(' ')
        .next()?
        .parse()
        .ok()
        .filter(|s| (400..500).contains(s))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use chrono::DateTime;

    use super::*;

    fn result(class: CallClass, body: Option<&str>, detail: &str) -> CallResult {
        CallResult {
            class,
            elapsed: Duration::from_millis(40),
            body: body.map(str::to_owned),
            detail: detail.to_owned(),
        }
    }

    const BOOKED: &str = r#"{"status": "booked", "booking_ref": "BK000001", "price_cents": 11600, "currency": "EUR"}"#;

    #[test]
    fn the_four_answers_of_a_healthy_operator_are_read() {
        let cases = [
            (
                BOOKED,
                BookingAnswer::Booked {
                    booking_ref: "BK000001".into(),
                    price_cents: 11_600,
                },
            ),
            (
                r#"{"status": "price_changed", "price_cents": 12900, "currency": "EUR"}"#,
                BookingAnswer::PriceChanged {
                    price_cents: 12_900,
                },
            ),
            (
                r#"{"status": "sold_out", "seats_left": 1}"#,
                BookingAnswer::SoldOut,
            ),
            (r#"{"status": "sold_out"}"#, BookingAnswer::SoldOut),
            (
                r#"{"status": "not_bookable", "detail": "departed"}"#,
                BookingAnswer::NotBookable {
                    detail: "departed".into(),
                },
            ),
        ];
        for (body, expected) in cases {
            for class in [CallClass::Ok, CallClass::Slow] {
                let read = BookingAnswer::from_call(&result(class, Some(body), "answered 200"));
                assert_eq!(read, expected, "{body}");
            }
            let outcome = result(CallClass::Ok, Some(body), "answered 200")
                .into_outcome(DateTime::UNIX_EPOCH, "real-consumer");
            assert_eq!(BookingAnswer::from_outcome(&outcome), expected, "{body}");
        }
    }

    #[test]
    fn answers_the_contract_does_not_allow_are_refused_with_a_reason() {
        for (body, expected) in [
            ("<html>", "not json"),
            (r#"{"status": "maybe"}"#, "status of booked"),
            (
                r#"{"status": "booked", "price_cents": 1, "currency": "EUR"}"#,
                "status of booked",
            ),
            (
                r#"{"status": "booked", "booking_ref": " ", "price_cents": 1, "currency": "EUR"}"#,
                "no booking reference",
            ),
            (
                r#"{"status": "booked", "booking_ref": "B", "price_cents": 0, "currency": "EUR"}"#,
                "whole number of cents",
            ),
            (
                r#"{"status": "price_changed", "price_cents": 10, "currency": "EURO"}"#,
                "not an ISO 4217 code",
            ),
        ] {
            let e = BookBody::parse(body).unwrap_err().to_string();
            assert!(e.starts_with("book answer"), "{body}: {e}");
            assert!(e.contains(expected), "{body}: {e}");
            assert!(matches!(
                BookingAnswer::from_body(body),
                BookingAnswer::Unavailable { .. }
            ));
        }
    }

    #[test]
    fn a_refusal_of_the_order_is_rejected_and_everything_else_unavailable() {
        for status in [400, 404, 409, 410, 422] {
            let detail = format!("operator answered {status} in 12 ms");
            assert_eq!(
                BookingAnswer::from_call(&result(CallClass::ClientError { status }, None, &detail)),
                BookingAnswer::Rejected {
                    status,
                    detail: detail.clone()
                }
            );
        }
        for class in [
            CallClass::Timeout,
            CallClass::Connect,
            CallClass::ServerError { status: 503 },
            CallClass::BadPayload,
            CallClass::ClientError { status: 429 },
            CallClass::ClientError { status: 408 },
            CallClass::ClientError { status: 401 },
            CallClass::ClientError { status: 403 },
            // An answer without its body says nothing about the order.
            CallClass::Ok,
        ] {
            let name = class.name();
            let read = BookingAnswer::from_call(&result(class, None, "no answer within 8000 ms"));
            let BookingAnswer::Unavailable { detail } = read else {
                panic!("{name}: {read:?}");
            };
            assert!(detail.starts_with(name), "{detail}");
        }
    }

    #[test]
    fn a_stored_outcome_reads_as_the_call_did() {
        let at = DateTime::UNIX_EPOCH;
        let refused = Outcome::failed(
            FailureReason::Rejected,
            "operator answered 422 in 30 ms",
            at,
            "real-consumer",
        );
        assert_eq!(
            BookingAnswer::from_outcome(&refused),
            BookingAnswer::Rejected {
                status: 422,
                detail: "operator answered 422 in 30 ms".into()
            }
        );
        let unnamed = Outcome::failed(FailureReason::NotFound, "gone", at, "real-consumer");
        assert!(matches!(
            BookingAnswer::from_outcome(&unnamed),
            BookingAnswer::Rejected { status: 400, .. }
        ));
        for reason in [
            FailureReason::BreakerOpen,
            FailureReason::Timeout,
            FailureReason::UpstreamError,
            FailureReason::Expired,
            FailureReason::Shed,
            FailureReason::Malformed,
        ] {
            let outcome = Outcome::failed(reason, "x", at, "fallback-consumer");
            assert_eq!(
                BookingAnswer::from_outcome(&outcome),
                BookingAnswer::Unavailable {
                    detail: format!("{}: x", reason.as_str())
                }
            );
        }
        assert_eq!(status_in("operator answered 503 in 3 ms"), None);
        assert_eq!(status_in("operator answered 409 in 3 ms"), Some(409));
    }
}
