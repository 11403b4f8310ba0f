//! Fake but plausible operator answers, derived deterministically from the
//! request's parameters, so the same search always finds the same sailings.
//!
//! Parameters (all optional, passed through from the request):
//! `from` and `to` (port names, default `HEL` and `TLL`), `date`
//! (`YYYY-MM-DD`, default the simulator's current date), `passengers`
//! (1 to 9, default 1), and for a price `sailing_id` (default the first
//! sailing of the day for `from`, `to` and `date`), `accommodation` (one of
//! [`ACCOMMODATIONS`], default `seat`) and `extras` (codes of [`EXTRAS`],
//! comma-separated). A value that is present but malformed or unknown is
//! answered with a 400, as a real operator would. A price is itemised: the
//! fare (the search's figure), the accommodation's supplement and each
//! extra, which add up to the amount.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, NaiveDate, NaiveTime, SecondsFormat, TimeDelta, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::latency::mix64;

/// Prices that change as (possibly virtual) time passes, so a price asked
/// for later can differ from the one a search showed.
///
/// From `start` on, every `every` the price of every sailing is multiplied by
/// `1 + percent / 100` (`percent` may be negative), until `until` if set,
/// when prices stay where they are.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PriceDrift {
    /// Prices are as generated until this instant.
    pub start: DateTime<Utc>,
    /// How often the price moves, in milliseconds in configuration.
    #[serde(with = "lifeboat_core::budget::millis", rename = "every_ms")]
    pub every: Duration,
    /// How much it moves each time, in percent.
    pub percent: f64,
    /// Prices stop moving at this instant; `None`: they never do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<DateTime<Utc>>,
}

impl PriceDrift {
    /// The factor prices are multiplied by at `now`.
    pub fn factor_at(&self, now: DateTime<Utc>) -> f64 {
        let now = self.until.map_or(now, |until| now.min(until));
        let every = i64::try_from(self.every.as_millis()).unwrap_or(i64::MAX);
        if every == 0 || !self.percent.is_finite() {
            return 1.0;
        }
        let steps = ((now - self.start).num_milliseconds() / every).clamp(0, 10_000);
        let factor = (1.0 + self.percent / 100.0).powi(i32::try_from(steps).unwrap_or(0));
        if factor.is_finite() && factor > 0.0 {
            factor
        } else {
            1.0
        }
    }
}

/// The accommodations the simulated operator sells, with the supplement per
/// booking in cents (the seat is in the fare).
pub const ACCOMMODATIONS: [(&str, u64); 5] = [
    ("seat", 0),
    ("deck", 0),
    ("recliner", 900),
    ("cabin", 4_500),
    ("suite", 12_000),
];

/// The extras the simulated operator sells, with the price per passenger in
/// cents.
pub const EXTRAS: [(&str, u64); 6] = [
    ("breakfast", 1_200),
    ("meal", 2_400),
    ("wifi", 500),
    ("lounge", 1_500),
    ("bike", 1_000),
    ("pet", 2_500),
];

/// A parameter the simulated operator refuses, with the message of its 400.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BadRequest(pub String);

/// The answer to a search.
pub(crate) fn search(
    params: &BTreeMap<String, String>,
    now: DateTime<Utc>,
    drift: Option<&PriceDrift>,
) -> Result<Value, BadRequest> {
    let route = Route::from_params(params, now)?;
    let passengers = passengers(params)?;
    let factor = drift.map_or(1.0, |d| d.factor_at(now));
    let sailings: Vec<Value> = route
        .sailings()
        .into_iter()
        .map(|s| {
            json!({
                "sailing_id": s.id,
                "departs": s.departs,
                "arrives": s.arrives,
                "from": route.from,
                "to": route.to,
                "price_cents": price_cents(&s.id, passengers, factor),
                "currency": "EUR",
            })
        })
        .collect();
    Ok(json!({ "sailings": sailings }))
}

/// The answer to a price request.
pub(crate) fn price(
    params: &BTreeMap<String, String>,
    now: DateTime<Utc>,
    drift: Option<&PriceDrift>,
) -> Result<Value, BadRequest> {
    let passengers = passengers(params)?;
    let sailing_id = match params.get("sailing_id") {
        Some(id) => {
            if !valid_sailing_id(id) {
                return Err(BadRequest(
                    "sailing_id must be 1 to 64 letters, digits or '-'".into(),
                ));
            }
            id.clone()
        }
        None => Route::from_params(params, now)?
            .sailings()
            .into_iter()
            .next()
            .map(|s| s.id)
            .ok_or_else(|| BadRequest("no sailing on that date".into()))?,
    };
    let (amount, parts) = priced(&sailing_id, passengers, params, now, drift)?;
    Ok(json!({
        "price": {
            "amount_cents": amount,
            "currency": "EUR",
            "sailing_id": sailing_id,
            "passengers": passengers,
            "parts": parts,
        }
    }))
}

/// The price of `sailing_id` for `passengers` at `now`, with the
/// `accommodation` and `extras` of `params`: the amount and its parts. A
/// price answer and a booking at the same instant are priced alike.
pub(crate) fn priced(
    sailing_id: &str,
    passengers: u32,
    params: &BTreeMap<String, String>,
    now: DateTime<Utc>,
    drift: Option<&PriceDrift>,
) -> Result<(u64, Vec<Value>), BadRequest> {
    let factor = drift.map_or(1.0, |d| d.factor_at(now));
    let fare = price_cents(sailing_id, passengers, factor);
    let mut parts = vec![json!({"kind": "fare", "amount_cents": fare})];
    let mut amount = fare;
    let accommodation = params.get("accommodation").map_or("seat", String::as_str);
    let supplement = listed(&ACCOMMODATIONS, accommodation, "accommodation")?;
    let supplement = scaled(supplement, factor);
    parts.push(json!({"kind": "accommodation", "code": accommodation, "amount_cents": supplement}));
    amount += supplement;
    let extras = params.get("extras").map_or("", String::as_str);
    for code in extras.split(',').filter(|c| !c.is_empty()) {
        let each = listed(&EXTRAS, code, "extra")?;
        let cents = scaled(each * u64::from(passengers), factor);
        parts.push(json!({"kind": "extra", "code": code, "amount_cents": cents}));
        amount += cents;
    }
    Ok((amount, parts))
}

/// Whether `id` is a sailing id the simulated operator takes: 1 to 64
/// letters, digits or '-'.
pub(crate) fn valid_sailing_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// When the sailing `id` departs, if the id says (`…-YYYYMMDD-HHMM`, as
/// the simulated operator's searches name sailings).
pub(crate) fn departure(id: &str) -> Option<DateTime<Utc>> {
    let mut parts = id.rsplitn(3, '-');
    let time = parts.next()?;
    let day = parts.next()?;
    chrono::NaiveDateTime::parse_from_str(&format!("{day}{time}"), "%Y%m%d%H%M")
        .ok()
        .map(|t| t.and_utc())
}

/// The listed price of `code`, or a 400 naming what is sold.
fn listed(list: &[(&str, u64)], code: &str, what: &str) -> Result<u64, BadRequest> {
    list.iter()
        .find(|(c, _)| *c == code)
        .map(|(_, cents)| *cents)
        .ok_or_else(|| {
            let sold: Vec<&str> = list.iter().map(|(c, _)| *c).collect();
            BadRequest(format!(
                "unknown {what} {:?}: this operator sells {}",
                code.chars().take(64).collect::<String>(),
                sold.join(", ")
            ))
        })
}

/// `cents` moved by the drift's factor, rounded (kept within the price range).
fn scaled(cents: u64, factor: f64) -> u64 {
    let amount = cents as f64 * factor;
    if amount.is_finite() {
        (amount.round() as u64).min(100_000_000)
    } else {
        cents
    }
}

struct Route {
    from: String,
    to: String,
    date: NaiveDate,
}

struct Sailing {
    id: String,
    departs: String,
    arrives: String,
}

impl Route {
    fn from_params(
        params: &BTreeMap<String, String>,
        now: DateTime<Utc>,
    ) -> Result<Self, BadRequest> {
        let date = match params.get("date") {
            Some(d) => NaiveDate::parse_from_str(d, "%Y-%m-%d")
                .map_err(|_| BadRequest("date must be YYYY-MM-DD".into()))?,
            None => now.date_naive(),
        };
        Ok(Self {
            from: port(params, "from", "HEL")?,
            to: port(params, "to", "TLL")?,
            date,
        })
    }

    /// Three to five sailings spread over the day, with a fixed crossing time
    /// per route.
    fn sailings(&self) -> Vec<Sailing> {
        let day = hash(&[&self.from, &self.to, &self.date.to_string()]);
        let crossing = TimeDelta::minutes(
            90 + i64::try_from(hash(&[&self.from, &self.to]) % 28).unwrap_or(0) * 15,
        );
        let count = 3 + day % 3;
        let midnight = self.date.and_time(NaiveTime::MIN);
        (0..count)
            .filter_map(|i| {
                let jitter = mix64(day.wrapping_add(i)) % 12 * 5;
                let minute = 6 * 60 + i * (16 * 60 / count) + jitter;
                let departs =
                    midnight.checked_add_signed(TimeDelta::minutes(i64::try_from(minute).ok()?))?;
                let arrives = departs.checked_add_signed(crossing)?;
                let id = format!(
                    "{}-{}-{}",
                    slug(&self.from),
                    slug(&self.to),
                    departs.format("%Y%m%d-%H%M")
                );
                Some(Sailing {
                    id,
                    departs: departs.and_utc().to_rfc3339_opts(SecondsFormat::Secs, true),
                    arrives: arrives.and_utc().to_rfc3339_opts(SecondsFormat::Secs, true),
                })
            })
            .collect()
    }
}

fn port(params: &BTreeMap<String, String>, key: &str, default: &str) -> Result<String, BadRequest> {
    let Some(value) = params.get(key) else {
        return Ok(default.to_owned());
    };
    let valid = !value.trim().is_empty()
        && value.len() <= 32
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == ' ' || c == '-');
    if valid {
        Ok(value.trim().to_ascii_uppercase())
    } else {
        Err(BadRequest(format!(
            "{key} must be 1 to 32 letters, digits, spaces or '-'"
        )))
    }
}

pub(crate) fn passengers(params: &BTreeMap<String, String>) -> Result<u32, BadRequest> {
    match params.get("passengers") {
        None => Ok(1),
        Some(p) => p
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=9).contains(n))
            .ok_or_else(|| BadRequest("passengers must be a number from 1 to 9".into())),
    }
}

/// Base fare per passenger of a sailing: 19 to 89 euros, in whole euros.
fn price_cents(sailing_id: &str, passengers: u32, factor: f64) -> u64 {
    let base = 1_900 + hash(&[sailing_id]) % 71 * 100;
    let amount = (base * u64::from(passengers)) as f64 * factor;
    if amount.is_finite() {
        // Float to int casts saturate; the clamp keeps prices plausible.
        (amount.round() as u64).clamp(100, 100_000_000)
    } else {
        base
    }
}

fn slug(port: &str) -> String {
    port.to_ascii_lowercase().replace(' ', "-")
}

/// FNV-1a over the parts (with a separator), then mixed: stable across
/// machines and releases, unlike `std`'s hasher.
pub(crate) fn hash(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for part in parts {
        for b in part.bytes().chain([0xff]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01B3);
        }
    }
    mix64(h)
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

    fn at(rfc3339: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(rfc3339)
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn searches_are_plausible_and_repeatable() {
        let p = params(&[
            ("from", "hel"),
            ("to", "TLL"),
            ("date", "2025-06-01"),
            ("passengers", "2"),
        ]);
        let now = at("2025-05-20T10:00:00Z");
        let answer = search(&p, now, None).unwrap();
        assert_eq!(answer, search(&p, now, None).unwrap());
        let sailings = answer["sailings"].as_array().unwrap();
        assert!((3..=5).contains(&sailings.len()));
        for s in sailings {
            assert_eq!(s["from"], "HEL");
            assert_eq!(s["to"], "TLL");
            assert_eq!(s["currency"], "EUR");
            assert!(s["departs"].as_str().unwrap().starts_with("2025-06-01T"));
            assert!(
                s["sailing_id"]
                    .as_str()
                    .unwrap()
                    .starts_with("hel-tll-20250601-")
            );
            assert!(s["arrives"].as_str().unwrap() > s["departs"].as_str().unwrap());
            let cents = s["price_cents"].as_u64().unwrap();
            assert!((3_800..=17_800).contains(&cents), "{cents}");
        }
        let other = search(&params(&[("from", "HEL"), ("to", "STO")]), now, None).unwrap();
        assert_ne!(other["sailings"], answer["sailings"]);
        assert!(
            other["sailings"][0]["departs"]
                .as_str()
                .unwrap()
                .starts_with("2025-05-20")
        );
    }

    #[test]
    fn a_price_matches_the_search_that_found_the_sailing() {
        let now = at("2025-05-20T10:00:00Z");
        let found = search(
            &params(&[("date", "2025-06-01"), ("passengers", "3")]),
            now,
            None,
        )
        .unwrap();
        let sailing = &found["sailings"][1];
        let id = sailing["sailing_id"].as_str().unwrap();
        let priced = price(
            &params(&[("sailing_id", id), ("passengers", "3")]),
            now,
            None,
        )
        .unwrap();
        assert_eq!(priced["price"]["amount_cents"], sailing["price_cents"]);
        assert_eq!(priced["price"]["sailing_id"], id);
        assert_eq!(priced["price"]["passengers"], 3);
        let first = price(
            &params(&[("date", "2025-06-01"), ("passengers", "3")]),
            now,
            None,
        )
        .unwrap();
        assert_eq!(
            first["price"]["sailing_id"],
            found["sailings"][0]["sailing_id"]
        );
    }

    #[test]
    fn a_price_covers_the_chosen_accommodation_and_extras_and_adds_up() {
        let now = at("2025-05-20T10:00:00Z");
        let base = |extra: &[(&str, &str)]| {
            let mut p = params(&[("sailing_id", "hel-tll-1"), ("passengers", "2")]);
            p.extend(params(extra));
            price(&p, now, None)
        };
        let fare = base(&[]).unwrap()["price"]["amount_cents"]
            .as_u64()
            .unwrap();
        let chosen = base(&[("accommodation", "cabin"), ("extras", "breakfast,wifi")]).unwrap();
        let amount = chosen["price"]["amount_cents"].as_u64().unwrap();
        assert_eq!(amount, fare + 4_500 + 2 * 1_200 + 2 * 500);
        let parts = chosen["price"]["parts"].as_array().unwrap();
        let sum: u64 = parts
            .iter()
            .map(|p| p["amount_cents"].as_u64().unwrap())
            .sum();
        assert_eq!(sum, amount);
        assert_eq!(parts[1]["code"], "cabin");
        let checked = lifeboat_core::price::quote(&chosen["price"]).unwrap();
        assert_eq!(checked.parts.len(), 4);
        assert!(base(&[("accommodation", "hammock")]).is_err());
        assert!(base(&[("extras", "breakfast,caviar")]).is_err());
    }

    #[test]
    fn a_sailing_id_says_when_it_departs() {
        assert_eq!(
            departure("hel-tll-20250601-0730"),
            Some(at("2025-06-01T07:30:00Z"))
        );
        assert_eq!(
            departure("saint-petersburg-hel-20250601-2355"),
            Some(at("2025-06-01T23:55:00Z"))
        );
        for none in ["hel-tll-1", "x", "", "hel-tll-20251301-0730", "-"] {
            assert_eq!(departure(none), None, "{none}");
        }
    }

    #[test]
    fn prices_drift_in_steps() {
        let drift = PriceDrift {
            start: at("2025-05-20T10:00:00Z"),
            every: Duration::from_secs(3_600),
            percent: 10.0,
            until: None,
        };
        let p = params(&[("sailing_id", "hel-tll-20250601-0730")]);
        let cents = |now| {
            price(&p, at(now), Some(&drift)).unwrap()["price"]["amount_cents"]
                .as_u64()
                .unwrap()
        };
        let before = cents("2025-05-20T09:00:00Z");
        assert_eq!(cents("2025-05-20T10:59:59Z"), before);
        let after = cents("2025-05-20T11:00:00Z");
        assert_eq!(after, (before as f64 * 1.1).round() as u64);
        assert!(cents("2025-05-20T13:00:00Z") > after);
        let still = PriceDrift {
            every: Duration::ZERO,
            ..drift
        };
        assert_eq!(still.factor_at(at("2030-01-01T00:00:00Z")), 1.0);
        // Stopped: the prices stay where the last step left them.
        let stopped = PriceDrift {
            until: Some(at("2025-05-20T12:30:00Z")),
            ..drift
        };
        let last = stopped.factor_at(at("2025-05-20T12:30:00Z"));
        assert!(last > 1.2, "{last}");
        assert_eq!(stopped.factor_at(at("2030-01-01T00:00:00Z")), last);
    }

    #[test]
    fn malformed_parameters_are_refused() {
        let now = at("2025-05-20T10:00:00Z");
        for bad in [
            params(&[("date", "01.06.2025")]),
            params(&[("passengers", "0")]),
            params(&[("passengers", "ten")]),
            params(&[("from", "")]),
            params(&[("to", "x/../y")]),
        ] {
            assert!(search(&bad, now, None).is_err(), "{bad:?}");
        }
        assert!(price(&params(&[("sailing_id", "a b")]), now, None).is_err());
        assert!(search(&params(&[("to", "Saint Petersburg")]), now, None).is_ok());
    }
}
