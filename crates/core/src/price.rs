//! What an operator's price must be before anyone confirms on it: a sane
//! amount in a known currency, and, when it is itemised, parts that add up.
//!
//! The operator client refuses a price answer that fails these checks (a bad
//! payload: an operator error, counted by the breaker and never cached), and
//! the cart checks again whatever it reads back, so no cart is confirmed on
//! an amount that is not a price.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The largest price lifeboat accepts from an operator, in cents (a billion
/// in any currency): far above any ticket, far below overflow.
pub const MAX_PRICE_CENTS: i64 = 100_000_000_000;

/// The most parts one price may have (a fare, an accommodation and extras).
pub const MAX_PRICE_PARTS: usize = 32;

/// What a part of a price is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PartKind {
    /// The sailing's fare for the passengers.
    Fare,
    /// The chosen accommodation's supplement.
    Accommodation,
    /// One chosen extra.
    Extra,
}

/// One part of an itemised price.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PricePart {
    pub kind: PartKind,
    /// The accommodation or extra code; none for the fare.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    pub amount_cents: i64,
}

/// A price that passed the checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quote {
    pub amount_cents: i64,
    pub currency: String,
    /// Empty when the operator did not itemise the price.
    pub parts: Vec<PricePart>,
}

/// Why an operator's price is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PriceError {
    #[error("{field} is not a whole number of cents from {min} to {MAX_PRICE_CENTS}")]
    NotAnAmount { field: &'static str, min: i64 },
    #[error("currency {0:?} is not an ISO 4217 currency code")]
    UnknownCurrency(String),
    #[error(
        "the price's parts are not a list of at most {MAX_PRICE_PARTS} fare, accommodation or extra amounts"
    )]
    BadParts,
    #[error("the price's parts add up to {parts} cents, not its amount of {amount} cents")]
    PartsDoNotAddUp { parts: i64, amount: i64 },
}

/// Check an operator's price object
/// (`{"amount_cents", "currency", "parts"?: [{"kind", "code"?, "amount_cents"}]}`):
/// the amount more than zero and at most [`MAX_PRICE_CENTS`], an ISO 4217
/// currency, and parts (if given) that add up to the amount exactly.
pub fn quote(price: &Value) -> Result<Quote, PriceError> {
    let amount_cents = cents(price.get("amount_cents"), "amount_cents", 1)?;
    let currency = price
        .get("currency")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !known_currency(currency) {
        return Err(PriceError::UnknownCurrency(
            currency.chars().take(16).collect(),
        ));
    }
    let parts = match price.get("parts") {
        None | Some(Value::Null) => Vec::new(),
        Some(parts) => {
            let parts: Vec<PricePart> =
                serde_json::from_value(parts.clone()).map_err(|_| PriceError::BadParts)?;
            if parts.len() > MAX_PRICE_PARTS {
                return Err(PriceError::BadParts);
            }
            let mut sum: i64 = 0;
            for part in &parts {
                if !(0..=MAX_PRICE_CENTS).contains(&part.amount_cents) {
                    return Err(PriceError::NotAnAmount {
                        field: "parts.amount_cents",
                        min: 0,
                    });
                }
                sum = sum
                    .checked_add(part.amount_cents)
                    .ok_or(PriceError::BadParts)?;
            }
            if sum != amount_cents {
                return Err(PriceError::PartsDoNotAddUp {
                    parts: sum,
                    amount: amount_cents,
                });
            }
            parts
        }
    };
    Ok(Quote {
        amount_cents,
        currency: currency.to_owned(),
        parts,
    })
}

/// A whole number of cents from `min` to [`MAX_PRICE_CENTS`].
pub fn cents(value: Option<&Value>, field: &'static str, min: i64) -> Result<i64, PriceError> {
    value
        .and_then(Value::as_i64)
        .filter(|c| (min..=MAX_PRICE_CENTS).contains(c))
        .ok_or(PriceError::NotAnAmount { field, min })
}

/// Whether `code` is an active ISO 4217 currency code.
pub fn known_currency(code: &str) -> bool {
    code.len() == 3 && CURRENCIES.split(' ').any(|c| c == code)
}

/// The active ISO 4217 currency codes.
const CURRENCIES: &str = "AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BHD BIF BMD \
BND BOB BRL BSD BTN BWP BYN BZD CAD CDF CHF CLP CNY COP CRC CUP CVE CZK DJF DKK DOP DZD EGP ERN \
ETB EUR FJD FKP GBP GEL GHS GIP GMD GNF GTQ GYD HKD HNL HTG HUF IDR ILS INR IQD IRR ISK JMD JOD \
JPY KES KGS KHR KMF KPW KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD MAD MDL MGA MKD MMK MNT MOP MRU \
MUR MVR MWK MXN MYR MZN NAD NGN NIO NOK NPR NZD OMR PAB PEN PGK PHP PKR PLN PYG QAR RON RSD RUB \
RWF SAR SBD SCR SDG SEK SGD SHP SLE SOS SRD SSP STN SVC SYP SZL THB TJS TMT TND TOP TRY TTD TWD \
TZS UAH UGX USD UYU UZS VES VND VUV WST XAF XCD XCG XOF XPF YER ZAR ZMW ZWG";

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_sane_itemised_price_passes() {
        let q = quote(
            &json!({"amount_cents": 12_300, "currency": "EUR", "parts": [
                {"kind": "fare", "amount_cents": 7_800},
                {"kind": "accommodation", "code": "cabin", "amount_cents": 4_500},
            ]}),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((q.amount_cents, q.parts.len()), (12_300, 2));
        assert!(quote(&json!({"amount_cents": 1, "currency": "SEK"})).is_ok());
    }

    #[test]
    fn insane_amounts_and_unknown_currencies_are_refused() {
        for bad in [
            json!({"amount_cents": 0, "currency": "EUR"}),
            json!({"amount_cents": -5, "currency": "EUR"}),
            json!({"amount_cents": 12.5, "currency": "EUR"}),
            json!({"amount_cents": "100", "currency": "EUR"}),
            json!({"amount_cents": MAX_PRICE_CENTS + 1, "currency": "EUR"}),
            json!({"amount_cents": i64::MAX, "currency": "EUR"}),
            json!({"currency": "EUR"}),
        ] {
            assert!(
                matches!(quote(&bad), Err(PriceError::NotAnAmount { .. })),
                "{bad}"
            );
        }
        for currency in [
            json!("eur"),
            json!("EURO"),
            json!("XXX"),
            json!(""),
            json!(7),
        ] {
            assert!(matches!(
                quote(&json!({"amount_cents": 100, "currency": currency})),
                Err(PriceError::UnknownCurrency(_))
            ));
        }
    }

    #[test]
    fn parts_must_add_up_exactly_without_overflow() {
        let sum =
            |parts: Value| quote(&json!({"amount_cents": 100, "currency": "EUR", "parts": parts}));
        assert_eq!(
            sum(
                json!([{"kind": "fare", "amount_cents": 60}, {"kind": "extra", "code": "meal", "amount_cents": 30}])
            ),
            Err(PriceError::PartsDoNotAddUp {
                parts: 90,
                amount: 100
            })
        );
        let huge = json!({"kind": "fare", "amount_cents": MAX_PRICE_CENTS});
        assert!(sum(json!(vec![huge; MAX_PRICE_PARTS])).is_err());
        assert_eq!(
            sum(json!([{"kind": "tip", "amount_cents": 100}])),
            Err(PriceError::BadParts)
        );
        assert_eq!(sum(json!({"kind": "fare"})), Err(PriceError::BadParts));
        assert!(matches!(
            sum(
                json!([{"kind": "fare", "amount_cents": -1}, {"kind": "fare", "amount_cents": 101}])
            ),
            Err(PriceError::NotAnAmount { .. })
        ));
        assert_eq!(
            sum(json!([])),
            Err(PriceError::PartsDoNotAddUp {
                parts: 0,
                amount: 100
            })
        );
    }
}
