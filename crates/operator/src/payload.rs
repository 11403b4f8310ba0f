//! What an operator answer must look like, and how an answer is classified.
//!
//! The HTTP client and the in-process simulator share this, so both classify
//! the same answer the same way.

use std::time::Duration;

use lifeboat_core::Operation;
use lifeboat_core::budget::Budget;
use lifeboat_core::order::answer::{BookBody, BookBodyError};
use lifeboat_core::request::{CallClass, CallResult};
use serde_json::Value;

/// Why a 2xx answer is not what the operator's API promises.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    /// The body is not UTF-8 text.
    #[error("{operation} answer is not utf-8 text")]
    NotText { operation: Operation },
    /// The body is not JSON at all.
    #[error("{operation} answer is not json: {reason}")]
    NotJson {
        operation: Operation,
        reason: String,
    },
    /// The body is JSON of the wrong shape.
    #[error("{operation} answer is not a json object with {expected}")]
    WrongShape {
        operation: Operation,
        expected: &'static str,
    },
    /// A price that is not a sane amount in a known currency, or whose parts
    /// do not add up: an operator error, never something to confirm on.
    #[error("price answer is not a price: {0}")]
    NotAPrice(#[from] lifeboat_core::price::PriceError),
    /// A booking answer that is not one of the contract's four (booked,
    /// price changed, sold out, not bookable) with its fields: never read
    /// as booked or not.
    #[error("{0}")]
    NotABooking(BookBodyError),
}

/// Check that `body` is the JSON an operation promises: a search answer is an
/// object with a `sailings` array, a price answer an object with a `price`
/// object that is a price ([`lifeboat_core::price::quote`]: an amount above
/// zero and within range, an ISO 4217 currency, parts that add up), a
/// booking answer one of the four of [`BookBody`]. A ping's answer is not
/// read.
pub fn check_payload(operation: Operation, body: &str) -> Result<(), PayloadError> {
    if operation == Operation::Ping {
        // Any 2xx answers a ping, whatever it says.
        return Ok(());
    }
    if operation == Operation::Book {
        return match BookBody::parse(body) {
            Ok(_) => Ok(()),
            Err(BookBodyError::NotJson(reason)) => Err(PayloadError::NotJson { operation, reason }),
            Err(e) => Err(PayloadError::NotABooking(e)),
        };
    }
    let value: Value = serde_json::from_str(body).map_err(|e| PayloadError::NotJson {
        operation,
        reason: e.to_string(),
    })?;
    let (field, expected, fits): (&str, &'static str, fn(&Value) -> bool) = match operation {
        Operation::Search => ("sailings", "a sailings array", Value::is_array),
        Operation::Price => ("price", "a price object", Value::is_object),
        Operation::Ping | Operation::Book => return Ok(()),
    };
    if value.get(field).is_some_and(fits) {
        if operation == Operation::Price {
            lifeboat_core::price::quote(&value[field])?;
        }
        Ok(())
    } else {
        Err(PayloadError::WrongShape {
            operation,
            expected,
        })
    }
}

/// Classify an answer with HTTP `status` and `body` that arrived after
/// `elapsed`, within the budget.
pub(crate) fn classify_answer(
    operation: Operation,
    status: u16,
    body: Vec<u8>,
    elapsed: Duration,
    budget: &Budget,
) -> CallResult {
    let ms = millis(elapsed);
    let (class, body, detail) = match status {
        200..=299 => match String::from_utf8(body) {
            Err(_) => (
                CallClass::BadPayload,
                None,
                PayloadError::NotText { operation }.to_string(),
            ),
            Ok(text) => match check_payload(operation, &text) {
                Ok(()) => (
                    CallClass::answered(elapsed, budget),
                    Some(text),
                    format!("answered {status} in {ms} ms"),
                ),
                Err(e) => (CallClass::BadPayload, None, e.to_string()),
            },
        },
        400..=499 => (
            CallClass::ClientError { status },
            None,
            match refusal_reason(operation, &body) {
                Some(reason) => format!("operator answered {status} in {ms} ms: {reason}"),
                None => format!("operator answered {status} in {ms} ms"),
            },
        ),
        500..=599 => (
            CallClass::ServerError { status },
            None,
            format!("operator answered {status} in {ms} ms"),
        ),
        _ => (
            CallClass::BadPayload,
            None,
            format!("operator answered unexpected status {status}"),
        ),
    };
    CallResult {
        class,
        elapsed,
        body,
        detail,
    }
}

/// How much of a booking's refusal is read.
pub(crate) const MAX_REFUSAL_BYTES: usize = 1024;

/// The reason an operator gave for refusing a booking: the `error` or
/// `detail` string of its JSON body, visible characters only, at most 200.
/// `None` for every other operation (their refusals are not read) and for
/// a body that gives none.
fn refusal_reason(operation: Operation, body: &[u8]) -> Option<String> {
    if operation != Operation::Book {
        return None;
    }
    let value: Value = serde_json::from_slice(body).ok()?;
    let reason = ["error", "detail"]
        .iter()
        .find_map(|field| value.get(field).and_then(Value::as_str))?;
    let shown: String = reason
        .chars()
        .filter(|c| !c.is_control())
        .take(200)
        .collect();
    (!shown.trim().is_empty()).then_some(shown)
}

/// A call that got no answer within `budget`.
pub(crate) fn timed_out(elapsed: Duration, budget: &Budget) -> CallResult {
    CallResult {
        class: CallClass::Timeout,
        elapsed,
        body: None,
        detail: format!("no answer within {} ms", millis(budget.timeout)),
    }
}

/// A call whose connection could not be made or broke.
pub(crate) fn connect_failed(elapsed: Duration, detail: impl Into<String>) -> CallResult {
    CallResult {
        class: CallClass::Connect,
        elapsed,
        body: None,
        detail: detail.into(),
    }
}

/// A call that was never sent because the request itself was wrong.
pub(crate) fn not_sent(status: u16, detail: impl Into<String>) -> CallResult {
    CallResult {
        class: CallClass::ClientError { status },
        elapsed: Duration::ZERO,
        body: None,
        detail: detail.into(),
    }
}

pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget() -> Budget {
        Budget::with_timeout(Duration::from_secs(3))
    }

    fn classify(operation: Operation, status: u16, body: &str, ms: u64) -> CallResult {
        classify_answer(
            operation,
            status,
            body.as_bytes().to_vec(),
            Duration::from_millis(ms),
            &budget(),
        )
    }

    #[test]
    fn payload_shapes_are_checked_per_operation() {
        assert!(check_payload(Operation::Search, r#"{"sailings":[]}"#).is_ok());
        assert!(
            check_payload(
                Operation::Price,
                r#"{"price":{"amount_cents":1,"currency":"EUR"}}"#
            )
            .is_ok()
        );
        for insane in [
            r#"{"price":{"amount_cents":1}}"#,
            r#"{"price":{"amount_cents":0,"currency":"EUR"}}"#,
            r#"{"price":{"amount_cents":-100,"currency":"EUR"}}"#,
            r#"{"price":{"amount_cents":100,"currency":"EUROS"}}"#,
            r#"{"price":{"amount_cents":100,"currency":"EUR","parts":[{"kind":"fare","amount_cents":99}]}}"#,
        ] {
            assert!(
                matches!(
                    check_payload(Operation::Price, insane),
                    Err(PayloadError::NotAPrice(_))
                ),
                "{insane}"
            );
        }
        assert!(matches!(
            check_payload(Operation::Search, r#"{"price":{}}"#),
            Err(PayloadError::WrongShape { .. })
        ));
        for (operation, wrong) in [
            (Operation::Search, r#"{"sailings":{}}"#),
            (Operation::Search, r#"{"sailings":null}"#),
            (Operation::Search, r#"[{"sailings":[]}]"#),
            (Operation::Price, r#"{"price":12}"#),
            (Operation::Price, r#"[{"price":{}}]"#),
        ] {
            assert!(
                matches!(
                    check_payload(operation, wrong),
                    Err(PayloadError::WrongShape { .. })
                ),
                "{wrong}"
            );
        }
        // Whatever else the answer holds is skipped, sailings' fields too.
        assert!(
            check_payload(
                Operation::Search,
                r#"{"notes":"x","sailings":[{"sailing_id":"A","extra":[1,{"b":null}]},2]}"#
            )
            .is_ok()
        );
        for cut in [
            r#"{"sailings":[{"sailing_id":"A""#,
            r#"{"sailings":[]} trailing"#,
        ] {
            assert!(
                matches!(
                    check_payload(Operation::Search, cut),
                    Err(PayloadError::NotJson { .. })
                ),
                "{cut}"
            );
        }
        let err = check_payload(Operation::Search, "<html>down</html>").unwrap_err();
        assert!(matches!(err, PayloadError::NotJson { .. }));
        assert!(
            err.to_string().starts_with("search answer is not json"),
            "{err}"
        );
    }

    #[test]
    fn a_booking_answer_is_one_of_the_four_with_its_fields() {
        for good in [
            r#"{"status":"booked","booking_ref":"BK1","price_cents":11600,"currency":"EUR"}"#,
            r#"{"status":"price_changed","price_cents":12900,"currency":"EUR"}"#,
            r#"{"status":"sold_out","seats_left":0}"#,
            r#"{"status":"not_bookable","detail":"departed"}"#,
        ] {
            assert_eq!(check_payload(Operation::Book, good), Ok(()), "{good}");
        }
        let not_json = check_payload(Operation::Book, "<html>").unwrap_err();
        assert!(matches!(not_json, PayloadError::NotJson { .. }));
        assert!(not_json.to_string().starts_with("book answer is not json"));
        for bad in [
            r#"{"sailings":[]}"#,
            r#"{"status":"booked","price_cents":100,"currency":"EUR"}"#,
            r#"{"status":"booked","booking_ref":"B","price_cents":-1,"currency":"EUR"}"#,
            r#"{"status":"price_changed","price_cents":100}"#,
        ] {
            let e = check_payload(Operation::Book, bad).unwrap_err();
            assert!(matches!(e, PayloadError::NotABooking(_)), "{bad}: {e}");
            assert!(e.to_string().starts_with("book answer"), "{e}");
        }
        let booked = classify(
            Operation::Book,
            200,
            r#"{"status":"sold_out","seats_left":1}"#,
            10,
        );
        assert_eq!(booked.class, CallClass::Ok);
        assert_eq!(
            classify(Operation::Book, 200, r#"{"status":"?"}"#, 10).class,
            CallClass::BadPayload
        );
        // A booking's refusal says why; other refusals are not read.
        let refused = classify(Operation::Book, 422, r#"{"error":"key\nreused"}"#, 10);
        assert_eq!(refused.class, CallClass::ClientError { status: 422 });
        assert_eq!(refused.detail, "operator answered 422 in 10 ms: keyreused");
        let long = format!(r#"{{"detail":"{}"}}"#, "x".repeat(500));
        assert_eq!(
            classify(Operation::Book, 409, &long, 10).detail.len(),
            "operator answered 409 in 10 ms: ".len() + 200
        );
        for (operation, body) in [
            (Operation::Book, "<html>"),
            (Operation::Book, r#"{"error":" "}"#),
            (Operation::Price, r#"{"error":"no"}"#),
        ] {
            assert_eq!(
                classify(operation, 422, body, 10).detail,
                "operator answered 422 in 10 ms"
            );
        }
    }

    #[test]
    fn answers_are_classified_by_status_payload_and_time() {
        let ok = classify(Operation::Search, 200, r#"{"sailings":[]}"#, 1300);
        assert_eq!(ok.class, CallClass::Ok);
        assert_eq!(ok.body.as_deref(), Some(r#"{"sailings":[]}"#));
        assert_eq!(ok.detail, "answered 200 in 1300 ms");
        let slow = classify(Operation::Search, 200, r#"{"sailings":[]}"#, 2500);
        assert_eq!(slow.class, CallClass::Slow);
        assert_eq!(
            classify(Operation::Price, 200, "{}", 10).class,
            CallClass::BadPayload
        );
        assert_eq!(
            classify(Operation::Price, 503, "", 10).class,
            CallClass::ServerError { status: 503 }
        );
        assert_eq!(
            classify(Operation::Price, 429, "", 10).class,
            CallClass::ClientError { status: 429 }
        );
        assert_eq!(
            classify(Operation::Price, 304, "", 10).class,
            CallClass::BadPayload
        );
        let bytes = classify_answer(
            Operation::Search,
            200,
            vec![0xff, 0xfe],
            Duration::ZERO,
            &budget(),
        );
        assert_eq!(bytes.class, CallClass::BadPayload);
        assert_eq!(bytes.detail, "search answer is not utf-8 text");
    }
}
