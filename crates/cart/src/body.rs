//! The JSON bodies customers send the cart, read and checked as the handler
//! reads them: a new cart (`POST /carts`), an accommodation (`PUT
//! /carts/{cart_id}/accommodation`), extras (`PUT
//! /carts/{cart_id}/extras`) and the reply to a new price of the cart's
//! order (`POST /carts/{cart_id}/order`). Each refusal is a problem naming
//! the field at fault, or 413 for a body over [`MAX_BODY_BYTES`].

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use lifeboat_core::OperatorId;
use lifeboat_core::cart::Sailing;
use lifeboat_core::settings::Settings;
use lifeboat_lookup::http::Problem;
use lifeboat_lookup::params;
use serde::Deserialize;

/// The largest cart body read, in bytes. Every cart body is a few fields
/// (a new cart is about 150 bytes); anything longer is refused before it is
/// parsed, so a 6 MB body costs a length check, not a parse in a 128 MB
/// function.
pub const MAX_BODY_BYTES: usize = 4096;

/// The most extras one cart may hold.
pub const MAX_EXTRAS: usize = 10;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewCart {
    operator: String,
    sailing_id: String,
    from: String,
    to: String,
    date: String,
    passengers: u8,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AccommodationBody {
    code: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExtrasBody {
    codes: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OrderReplyBody {
    accept: bool,
    price_cents: i64,
}

/// The customer's reply to the new price of their order: whether they
/// accept it, and the price they were shown, which the reply answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderReply {
    pub accept: bool,
    pub price_cents: i64,
}

/// A new cart's body: an operator of `operators`, two different ports, 1 to
/// 9 passengers, a sailing id put in the operator's case (`ids` of its
/// `settings`) and a travel date from yesterday to the horizon at `now`.
pub fn new_cart(
    body: &[u8],
    operators: &BTreeSet<OperatorId>,
    settings: &Settings,
    now: DateTime<Utc>,
) -> Result<(OperatorId, Sailing), Problem> {
    let body: NewCart = json_body(body)?;
    let operator = params::operator("operator", &body.operator, operators)?;
    let from = params::port("from", &body.from)?;
    let to = params::port("to", &body.to)?;
    if from == to {
        return Err(Problem::invalid("to", "must differ from from"));
    }
    if !(1..=9).contains(&body.passengers) {
        return Err(Problem::invalid(
            "passengers",
            "must be a whole number from 1 to 9",
        ));
    }
    // In the operator's case: the cart asks, caches and shows one spelling.
    let ids = settings.for_operator(&operator).ids;
    let sailing = Sailing {
        sailing_id: params::id("sailing_id", &body.sailing_id, ids)?,
        from,
        to,
        date: params::date("date", &body.date, now)?.to_string(),
        passengers: body.passengers,
    };
    Ok((operator, sailing))
}

/// An accommodation step's body: the accommodation's code, as sent.
pub fn accommodation(body: &[u8]) -> Result<String, Problem> {
    let body: AccommodationBody = json_body(body)?;
    params::code("code", &body.code)
}

/// An extras step's body: at most [`MAX_EXTRAS`] codes, each at most once,
/// in the order sent.
pub fn extras(body: &[u8]) -> Result<Vec<String>, Problem> {
    let body: ExtrasBody = json_body(body)?;
    if body.codes.len() > MAX_EXTRAS {
        return Err(Problem::invalid(
            "codes",
            &format!("at most {MAX_EXTRAS} extras"),
        ));
    }
    let mut codes = Vec::with_capacity(body.codes.len());
    for code in &body.codes {
        let code = params::code("codes", code)?;
        if codes.contains(&code) {
            return Err(Problem::invalid("codes", "each extra at most once"));
        }
        codes.push(code);
    }
    Ok(codes)
}

/// An order reply's body: `accept`, and the `price_cents` the customer was
/// shown (a whole number of cents above 0).
pub fn order_reply(body: &[u8]) -> Result<OrderReply, Problem> {
    let body: OrderReplyBody = json_body(body)?;
    if body.price_cents < 1 {
        return Err(Problem::invalid(
            "price_cents",
            "must be the price shown, a whole number of cents above 0",
        ));
    }
    Ok(OrderReply {
        accept: body.accept,
        price_cents: body.price_cents,
    })
}

fn json_body<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, Problem> {
    if body.len() > MAX_BODY_BYTES {
        return Err(Problem::new(
            413,
            "body too large",
            format!("{} bytes, at most {MAX_BODY_BYTES}", body.len()),
        ));
    }
    serde_json::from_slice(body).map_err(|e| {
        // serde's message names the field and says what was wrong with it;
        // it does not echo internals.
        let reason = e.to_string();
        let field = reason
            .split('`')
            .nth(1)
            .filter(|f| f.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
            .unwrap_or("body");
        Problem::invalid(field, &reason)
    })
}
