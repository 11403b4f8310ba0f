//! The `book` call on the wire (docs/operator-api.json): `POST {base}/book`
//! with a JSON body and the `Idempotency-Key` header.
//!
//! Inside lifeboat a booking is an operator call like any other: its
//! parameters are the request's flat string map (`idempotency_key`,
//! `sailing_id`, `passengers`, `accommodation`, `extras` comma-separated,
//! `max_price_cents`, `currency`), so it travels through the Requests
//! stream, the breaker and the gateway unchanged. Here the map becomes the
//! request body and the header, and back (the simulated operator's server).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The header carrying a booking's idempotency key.
pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";

/// The longest idempotency key sent (operators' APIs take 255 characters).
pub const MAX_IDEMPOTENCY_KEY: usize = 255;

/// The body of `POST /book`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BookOrder {
    pub sailing_id: String,
    pub passengers: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accommodation: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extras: Vec<String>,
    /// The most the caller agrees to pay; over it the operator books
    /// nothing and answers `price_changed`.
    pub max_price_cents: u64,
    pub currency: String,
}

/// A booking call lifeboat will not send: the operator would be asked
/// something other than the held order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BookParamsError {
    /// Without its key a retried booking could book twice.
    #[error("a booking is never sent without its idempotency key")]
    NoKey,
    #[error(
        "the idempotency key is not 1 to {MAX_IDEMPOTENCY_KEY} visible ascii characters: it cannot be a header"
    )]
    BadKey,
    #[error("a booking needs {0}")]
    Missing(&'static str),
    #[error("a booking's {0} is not a whole number")]
    NotANumber(&'static str),
}

/// A booking's request: its idempotency key and body, from the call's
/// parameters.
pub fn request_of(
    params: &BTreeMap<String, String>,
) -> Result<(String, BookOrder), BookParamsError> {
    let key = params
        .get("idempotency_key")
        .filter(|k| !k.is_empty())
        .ok_or(BookParamsError::NoKey)?;
    if key.len() > MAX_IDEMPOTENCY_KEY || !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(BookParamsError::BadKey);
    }
    let text = |name: &'static str| {
        params
            .get(name)
            .filter(|v| !v.is_empty())
            .cloned()
            .ok_or(BookParamsError::Missing(name))
    };
    let number = |name: &'static str| {
        text(name)?
            .parse::<u64>()
            .map_err(|_| BookParamsError::NotANumber(name))
    };
    let body = BookOrder {
        sailing_id: text("sailing_id")?,
        passengers: u32::try_from(number("passengers")?)
            .map_err(|_| BookParamsError::NotANumber("passengers"))?,
        accommodation: params
            .get("accommodation")
            .filter(|a| !a.is_empty())
            .cloned(),
        extras: params
            .get("extras")
            .map(|e| {
                e.split(',')
                    .filter(|c| !c.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
        max_price_cents: number("max_price_cents")?,
        currency: text("currency")?,
    };
    Ok((key.clone(), body))
}

/// The call's parameters of a booking received as `key` and `body`: what
/// [`request_of`] reads back.
pub fn params_of(key: &str, body: &BookOrder) -> BTreeMap<String, String> {
    let mut params = BTreeMap::from([
        ("idempotency_key".to_owned(), key.to_owned()),
        ("sailing_id".to_owned(), body.sailing_id.clone()),
        ("passengers".to_owned(), body.passengers.to_string()),
        (
            "max_price_cents".to_owned(),
            body.max_price_cents.to_string(),
        ),
        ("currency".to_owned(), body.currency.clone()),
    ]);
    if let Some(accommodation) = &body.accommodation {
        params.insert("accommodation".to_owned(), accommodation.clone());
    }
    if !body.extras.is_empty() {
        params.insert("extras".to_owned(), body.extras.join(","));
    }
    params
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn order() -> BTreeMap<String, String> {
        params(&[
            ("idempotency_key", "lb-cart-1"),
            ("sailing_id", "hel-tll-20261224-0730"),
            ("passengers", "2"),
            ("accommodation", "cabin"),
            ("extras", "breakfast,wifi"),
            ("max_price_cents", "18000"),
            ("currency", "EUR"),
        ])
    }

    #[test]
    fn a_held_order_becomes_a_body_and_a_key_and_back() {
        let (key, body) = request_of(&order()).unwrap();
        assert_eq!(key, "lb-cart-1");
        assert_eq!(
            serde_json::to_value(&body).unwrap(),
            serde_json::json!({
                "sailing_id": "hel-tll-20261224-0730", "passengers": 2,
                "accommodation": "cabin", "extras": ["breakfast", "wifi"],
                "max_price_cents": 18000, "currency": "EUR"
            })
        );
        assert_eq!(params_of(&key, &body), order());
        // The defaults are left out of the body.
        let mut plain = order();
        plain.remove("accommodation");
        plain.insert("extras".into(), String::new());
        let (_, body) = request_of(&plain).unwrap();
        assert_eq!(
            serde_json::to_string(&body).unwrap(),
            r#"{"sailing_id":"hel-tll-20261224-0730","passengers":2,"max_price_cents":18000,"currency":"EUR"}"#
        );
    }

    #[test]
    fn a_booking_without_its_key_or_its_order_is_never_built() {
        let without = |name: &str| {
            let mut p = order();
            p.remove(name);
            request_of(&p).unwrap_err()
        };
        assert_eq!(without("idempotency_key"), BookParamsError::NoKey);
        assert_eq!(
            without("sailing_id"),
            BookParamsError::Missing("sailing_id")
        );
        assert_eq!(without("currency"), BookParamsError::Missing("currency"));
        assert_eq!(
            without("max_price_cents"),
            BookParamsError::Missing("max_price_cents")
        );
        for (name, value, expected) in [
            ("idempotency_key", "", BookParamsError::NoKey),
            ("idempotency_key", "a b", BookParamsError::BadKey),
            ("idempotency_key", "k\n", BookParamsError::BadKey),
            (
                "passengers",
                "two",
                BookParamsError::NotANumber("passengers"),
            ),
            (
                "max_price_cents",
                "-1",
                BookParamsError::NotANumber("max_price_cents"),
            ),
        ] {
            let mut p = order();
            p.insert(name.into(), value.into());
            assert_eq!(request_of(&p).unwrap_err(), expected, "{name}={value:?}");
        }
        let long = "k".repeat(MAX_IDEMPOTENCY_KEY + 1);
        let mut p = order();
        p.insert("idempotency_key".into(), long);
        assert_eq!(request_of(&p).unwrap_err(), BookParamsError::BadKey);
        assert_eq!(
            BookParamsError::NoKey.to_string(),
            "a booking is never sent without its idempotency key"
        );
    }
}
