//! The bodies customers send the cart: `cart::body::new_cart` (`POST
//! /carts`), `accommodation` and `extras` (`PUT /carts/{cart_id}/…`), as the
//! cart function reads them, with the operators `nordic` (ids compared in
//! capitals) and `baltic` (in small letters) on sale and the fixtures'
//! clock (2026-11-30T10:00:00Z).
//!
//! Input: the body as sent, given to all three readers; when it is not
//! JSON, also a JSON tree generated from it with the bodies' field names.
//!
//! Invariants: no panic; a body over `MAX_BODY_BYTES` is refused with 413
//! and no other is; any other refusal is a 400 naming one field (or
//! `body`); what is
//! accepted is what the body says, checked: a new cart for an operator on
//! sale between two different ports, 1 to 9 passengers, a sailing id in the
//! operator's case and a date from yesterday to `DATE_HORIZON_DAYS` ahead;
//! an accommodation code, or at most `MAX_EXTRAS` distinct extra codes, of
//! 1 to 64 letters, digits or '-'. Each accepted body, written again from
//! what was accepted, is accepted as the same. (A body may also be a JSON
//! array of the fields in order, `["cabin"]`: serde reads a struct from a
//! sequence too. Harmless: the values go through the same checks.)
#![no_main]

use std::collections::BTreeSet;

use cart::body::{MAX_BODY_BYTES, MAX_EXTRAS, accommodation, extras, new_cart};
use chrono::{NaiveDate, TimeDelta};
use libfuzzer_sys::fuzz_target;
use lifeboat_core::OperatorId;
use lifeboat_core::cart::Sailing;
use lifeboat_fuzz::{Vocabulary, customers, generated};
use lifeboat_lookup::http::{MAX_ECHO_CHARS, Problem};
use lifeboat_lookup::params::DATE_HORIZON_DAYS;
use serde_json::{Value, json};

const VOCABULARY: Vocabulary = Vocabulary {
    keys: &[
        "operator",
        "sailing_id",
        "from",
        "to",
        "date",
        "passengers",
        "code",
        "codes",
    ],
    strings: &[
        "nordic",
        "baltic",
        "viking",
        "HEL",
        "TLL",
        "hel",
        "HEL-TLL-20261224-0615",
        "hel-tll-20261224-0615",
        "2026-12-24",
        "2026-11-30",
        "2028-01-05",
        "+2026-12-1",
        "cabin",
        "seat",
        "meal",
        "wifi",
        "a b",
        "",
    ],
};

fuzz_target!(|data: &[u8]| {
    check(data);
    if serde_json::from_slice::<Value>(data).is_err() {
        check(generated(data, &VOCABULARY).to_string().as_bytes());
    }
});

fn check(body: &[u8]) {
    let w = customers();
    let sent: Option<Value> = serde_json::from_slice(body).ok();
    // A field as sent: by name, or by its place in the body's struct when
    // the body is an array (serde reads a struct from a sequence too).
    let field = |name: &str, place: usize| match &sent {
        Some(Value::Object(fields)) => fields.get(name).cloned(),
        Some(Value::Array(values)) => values.get(place).cloned(),
        _ => None,
    };

    match new_cart(body, &w.operators, &w.settings, w.now) {
        Ok((operator, sailing)) => {
            assert!(body.len() <= MAX_BODY_BYTES);
            assert!(w.operators.contains(&operator));
            assert_eq!(field("operator", 0), Some(json!(operator.as_str())));
            assert_eq!(field("from", 2), Some(json!(sailing.from)));
            assert_eq!(field("to", 3), Some(json!(sailing.to)));
            assert_eq!(field("passengers", 5), Some(json!(sailing.passengers)));
            assert!(port(&sailing.from) && port(&sailing.to));
            assert_ne!(sailing.from, sailing.to);
            assert!((1..=9).contains(&sailing.passengers));
            let ids = w.settings.for_operator(&operator).ids;
            let sent_id = field("sailing_id", 1).unwrap_or_default();
            assert_eq!(
                Some(sailing.sailing_id.as_str()),
                sent_id.as_str().map(|id| ids.normalise(id)).as_deref()
            );
            assert!(code(&sailing.sailing_id));
            let date = match NaiveDate::parse_from_str(&sailing.date, "%Y-%m-%d") {
                Ok(date) => date,
                Err(e) => panic!("date {:?} kept: {e}", sailing.date),
            };
            assert_eq!(date.to_string(), sailing.date);
            assert!(date >= (w.now - TimeDelta::days(1)).date_naive());
            assert!(date <= (w.now + TimeDelta::days(DATE_HORIZON_DAYS)).date_naive());
            let again = json!({
                "operator": operator.as_str(), "sailing_id": sailing.sailing_id,
                "from": sailing.from, "to": sailing.to, "date": sailing.date,
                "passengers": sailing.passengers,
            });
            let read: Result<(OperatorId, Sailing), Problem> = new_cart(
                again.to_string().as_bytes(),
                &w.operators,
                &w.settings,
                w.now,
            );
            assert_eq!(read.ok(), Some((operator, sailing)), "{again}");
        }
        Err(problem) => refusal(body, &problem),
    }

    match accommodation(body) {
        Ok(chosen) => {
            assert!(code(&chosen));
            assert_eq!(field("code", 0), Some(json!(chosen)));
            let again = json!({ "code": chosen }).to_string();
            assert_eq!(accommodation(again.as_bytes()).ok(), Some(chosen));
        }
        Err(problem) => refusal(body, &problem),
    }

    match extras(body) {
        Ok(chosen) => {
            assert!(chosen.len() <= MAX_EXTRAS);
            assert!(chosen.iter().all(|c| code(c)));
            let distinct: BTreeSet<&String> = chosen.iter().collect();
            assert_eq!(distinct.len(), chosen.len());
            assert_eq!(field("codes", 0), Some(json!(chosen)));
            let again = json!({ "codes": chosen }).to_string();
            assert_eq!(extras(again.as_bytes()).ok(), Some(chosen));
        }
        Err(problem) => refusal(body, &problem),
    }
}

fn refusal(body: &[u8], problem: &Problem) {
    if body.len() > MAX_BODY_BYTES {
        assert_eq!(problem.status, 413);
        return;
    }
    assert_eq!(problem.status, 400, "{problem:?}");
    assert_eq!(problem.invalid_params.len(), 1, "{problem:?}");
    let name = &problem.invalid_params[0].name;
    assert!(
        name.chars().count() <= MAX_ECHO_CHARS + 1,
        "{} characters",
        name.chars().count()
    );
    // A field's name, or `body`; an unknown field's name as sent, cut.
    assert!(
        name.trim_end_matches('…')
            .chars()
            .all(|c| c.is_ascii_lowercase() || c == '_'),
        "{name:?}"
    );
    let reply = problem.reply();
    assert_eq!(reply.status, 400);
    assert_eq!(reply.body["invalid_params"][0]["name"], json!(name));
}

/// A port code: 3 to 5 capital letters.
fn port(p: &str) -> bool {
    (3..=5).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_uppercase())
}

/// An identifier: 1 to 64 letters, digits or '-'.
fn code(c: &str) -> bool {
    (1..=64).contains(&c.len()) && c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}
