//! What an operator answer must look like: `check_payload` of
//! lifeboat-operator, which the HTTP client and the simulator call on every
//! 2xx answer (after checking the body is UTF-8, as here).
//!
//! Invariants: no panic; a search answer is accepted exactly when it is a
//! JSON object with a `sailings` array, a price answer exactly when it is a
//! JSON object with a `price` object that `lifeboat_core::price::quote`
//! accepts (a sane amount in a known currency, parts that add up), and is
//! refused as not a price otherwise; a body that is not JSON is reported as
//! such; every refusal has a message naming the operation; a ping's answer
//! is never read, so any body answers it; a booking answer is accepted
//! exactly when `lifeboat_core::order::answer::BookBody::parse` reads it,
//! and then reads as the operator's word on the order (never unavailable).
#![no_main]

use libfuzzer_sys::fuzz_target;
use lifeboat_core::Operation;
use lifeboat_core::order::BookingAnswer;
use lifeboat_core::order::answer::BookBody;
use lifeboat_operator::{PayloadError, check_payload};
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(body) = std::str::from_utf8(data) else {
        return;
    };
    assert!(check_payload(Operation::Ping, body).is_ok());
    let booking = check_payload(Operation::Book, body);
    assert_eq!(booking.is_ok(), BookBody::parse(body).is_ok(), "{body:?}");
    match booking {
        Ok(()) => assert!(!matches!(
            BookingAnswer::from_body(body),
            BookingAnswer::Unavailable { .. } | BookingAnswer::Rejected { .. }
        )),
        Err(e) => assert!(e.to_string().starts_with("book answer"), "{e}"),
    }
    let parsed = serde_json::from_str::<Value>(body).ok();
    for (operation, field, fits) in [
        (
            Operation::Search,
            "sailings",
            Value::is_array as fn(&Value) -> bool,
        ),
        (Operation::Price, "price", Value::is_object),
    ] {
        let result = check_payload(operation, body);
        match &parsed {
            None => assert!(matches!(result, Err(PayloadError::NotJson { .. }))),
            Some(value) => {
                let expected = value
                    .as_object()
                    .and_then(|o| o.get(field))
                    .is_some_and(fits);
                if !expected {
                    assert!(matches!(result, Err(PayloadError::WrongShape { .. })));
                } else if operation == Operation::Price {
                    let quote = lifeboat_core::price::quote(&value[field]);
                    assert_eq!(result.is_ok(), quote.is_ok(), "{body:?}");
                    if quote.is_err() {
                        assert!(matches!(result, Err(PayloadError::NotAPrice(_))));
                    }
                } else {
                    assert!(result.is_ok(), "{operation}: {body:?}");
                }
            }
        }
        if let Err(e) = result {
            assert!(e.to_string().starts_with(operation.as_str()), "{e}");
        }
    }
});
