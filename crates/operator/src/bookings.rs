//! The simulated operator's bookings: seats per sailing that other channels
//! keep selling as time passes, and bookings made by idempotency key, as
//! operators' booking APIs take them.
//!
//! Every sailing has a capacity drawn from its id, and other channels (the
//! operator's own site, agents, the port's desk) sell its seats at a steady
//! rate from the desk's start, so a sailing can sell out while lifeboat
//! cannot ask: the held orders of an outage meet real sell-outs.
//!
//! A booking names its idempotency key. The first booking under a key that
//! succeeds is the key's: asked again (a retried or redelivered call) it is
//! answered with the same booking, its seats taken once. A key that booked
//! one sailing and is sent with another order is refused (422), as a real
//! API refuses a reused key. An answer that booked nothing (sold out, the
//! price over the maximum) binds nothing: the same key may ask again.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::answers::{self, PriceDrift, hash};

/// How many seats sailings have and how fast other channels sell them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SeatModel {
    /// The smallest capacity a sailing is drawn.
    pub capacity_min: u32,
    /// The largest.
    pub capacity_max: u32,
    /// Seats other channels sell per sailing and hour, on average (each
    /// sailing's own rate is drawn from half to one and a half times it).
    pub other_channels_per_hour: f64,
}

impl Default for SeatModel {
    fn default() -> Self {
        Self {
            capacity_min: 20,
            capacity_max: 200,
            other_channels_per_hour: 30.0,
        }
    }
}

/// One booking as the operator is asked it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BookingRequest {
    pub idempotency_key: String,
    pub sailing_id: String,
    pub passengers: u32,
    /// The most the caller agrees to pay; over it nothing is booked.
    pub max_price_cents: u64,
}

/// What the desk answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeskAnswer {
    Booked {
        booking_ref: String,
        price_cents: u64,
        /// Whether the key had booked already (a repeated call).
        repeated: bool,
    },
    /// Nothing booked: the price is over the maximum.
    PriceChanged { price_cents: u64 },
    /// Nothing booked: fewer seats left than passengers.
    SoldOut { seats_left: u32 },
    /// The key booked another order.
    KeyReused,
}

#[derive(Debug, Clone)]
struct Booking {
    sailing_id: String,
    passengers: u32,
    booking_ref: String,
    price_cents: u64,
}

/// The operator's seats and bookings.
#[derive(Debug)]
pub struct BookingDesk {
    model: SeatModel,
    /// Other channels sell from here on.
    start: DateTime<Utc>,
    /// Seats booked through the desk, by sailing.
    booked: HashMap<String, u32>,
    by_key: HashMap<String, Booking>,
    /// Keys answered sold out, with their sailing: seats a seller promised
    /// that the sailing no longer had.
    sold_out: BTreeMap<String, String>,
    next_ref: u64,
}

impl BookingDesk {
    pub fn new(model: SeatModel, start: DateTime<Utc>) -> Self {
        Self {
            model,
            start,
            booked: HashMap::new(),
            by_key: HashMap::new(),
            sold_out: BTreeMap::new(),
            next_ref: 1,
        }
    }

    /// The seats `sailing_id` was put on sale with.
    pub fn capacity(&self, sailing_id: &str) -> u32 {
        let span = self
            .model
            .capacity_max
            .saturating_sub(self.model.capacity_min);
        let drawn = hash(&[sailing_id, "capacity"]) % (u64::from(span) + 1);
        self.model.capacity_min + u32::try_from(drawn).unwrap_or(0)
    }

    /// Seats other channels have sold on `sailing_id` by `now`.
    pub fn sold_elsewhere(&self, sailing_id: &str, now: DateTime<Utc>) -> u32 {
        let hours = (now - self.start).num_milliseconds().max(0) as f64 / 3_600_000.0;
        // This sailing's rate: from half to one and a half times the mean.
        let share = 0.5 + (hash(&[sailing_id, "rate"]) % 1_001) as f64 / 1_000.0;
        let sold = (self.model.other_channels_per_hour * share * hours).floor();
        if sold.is_finite() && sold > 0.0 {
            (sold as u64).min(u64::from(u32::MAX)) as u32
        } else {
            0
        }
    }

    /// Seats left on `sailing_id` at `now`.
    pub fn seats_left(&self, sailing_id: &str, now: DateTime<Utc>) -> u32 {
        self.capacity(sailing_id)
            .saturating_sub(self.sold_elsewhere(sailing_id, now))
            .saturating_sub(self.booked.get(sailing_id).copied().unwrap_or(0))
    }

    /// Book `request` at `price_cents`, the sailing's price for its
    /// passengers now.
    pub fn book(
        &mut self,
        request: &BookingRequest,
        price_cents: u64,
        now: DateTime<Utc>,
    ) -> DeskAnswer {
        if let Some(done) = self.by_key.get(&request.idempotency_key) {
            return if done.sailing_id == request.sailing_id && done.passengers == request.passengers
            {
                DeskAnswer::Booked {
                    booking_ref: done.booking_ref.clone(),
                    price_cents: done.price_cents,
                    repeated: true,
                }
            } else {
                DeskAnswer::KeyReused
            };
        }
        let seats_left = self.seats_left(&request.sailing_id, now);
        if seats_left < request.passengers {
            self.sold_out
                .insert(request.idempotency_key.clone(), request.sailing_id.clone());
            return DeskAnswer::SoldOut { seats_left };
        }
        if price_cents > request.max_price_cents {
            return DeskAnswer::PriceChanged { price_cents };
        }
        let booking_ref = format!("BK{:06}", self.next_ref);
        self.next_ref += 1;
        *self.booked.entry(request.sailing_id.clone()).or_default() += request.passengers;
        self.by_key.insert(
            request.idempotency_key.clone(),
            Booking {
                sailing_id: request.sailing_id.clone(),
                passengers: request.passengers,
                booking_ref: booking_ref.clone(),
                price_cents,
            },
        );
        DeskAnswer::Booked {
            booking_ref,
            price_cents,
            repeated: false,
        }
    }

    /// Bookings made, repeated calls not counted.
    pub fn bookings(&self) -> usize {
        self.by_key.len()
    }

    /// Every idempotency key a booking was made under (each took its seats
    /// once), in no particular order.
    pub fn booked_keys(&self) -> impl Iterator<Item = &str> {
        self.by_key.keys().map(String::as_str)
    }

    /// Every idempotency key answered sold out, with its sailing, by key.
    pub fn sold_out(&self) -> &BTreeMap<String, String> {
        &self.sold_out
    }
}

/// What a booking call did to the desk, for the simulated operator's
/// counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Effect {
    /// A new booking: seats taken.
    Booked,
    /// The key's booking again: nothing taken.
    Repeated,
    /// Nothing booked (sold out, the price over the maximum, departed).
    Nothing,
}

/// The simulated operator's answer to a booking call with `params` (as
/// [`crate::book::params_of`] writes them) at `now`: the 200 answer of
/// docs/operator-api.json and what it did, or the status and message of
/// a refusal: 400 for a malformed booking, 422 for one the operator
/// refuses itself (an accommodation or extra it does not sell, a currency
/// it does not sell in, a key that booked another order). Priced as a
/// price answer at `now` is ([`answers::priced`]).
pub(crate) fn answer(
    desk: &mut BookingDesk,
    params: &BTreeMap<String, String>,
    now: DateTime<Utc>,
    drift: Option<&PriceDrift>,
) -> Result<(Value, Effect), (u16, String)> {
    let bad = |message: &str| (400, message.to_owned());
    let key = params
        .get("idempotency_key")
        .filter(|k| !k.is_empty() && k.len() <= crate::book::MAX_IDEMPOTENCY_KEY)
        .ok_or_else(|| bad("Idempotency-Key is required (1 to 255 characters)"))?;
    let sailing_id = params
        .get("sailing_id")
        .filter(|id| answers::valid_sailing_id(id))
        .ok_or_else(|| bad("sailing_id must be 1 to 64 letters, digits or '-'"))?;
    if !params.contains_key("passengers") {
        return Err(bad("passengers is required"));
    }
    let passengers = answers::passengers(params).map_err(|e| (400, e.0))?;
    let max_price_cents = params
        .get("max_price_cents")
        .and_then(|m| m.parse::<u64>().ok())
        .ok_or_else(|| bad("max_price_cents must be a whole number of cents"))?;
    if params.get("currency").map(String::as_str) != Some("EUR") {
        return Err((422, "this operator books in EUR only".to_owned()));
    }
    let (price_cents, _) =
        answers::priced(sailing_id, passengers, params, now, drift).map_err(|e| (422, e.0))?;
    if let Some(departs) = answers::departure(sailing_id)
        && departs <= now
    {
        let detail = format!(
            "sailing {sailing_id} departed at {}",
            departs.to_rfc3339_opts(SecondsFormat::Secs, true)
        );
        return Ok((
            json!({"status": "not_bookable", "detail": detail}),
            Effect::Nothing,
        ));
    }
    let request = BookingRequest {
        idempotency_key: key.clone(),
        sailing_id: sailing_id.clone(),
        passengers,
        max_price_cents,
    };
    Ok(match desk.book(&request, price_cents, now) {
        DeskAnswer::Booked {
            booking_ref,
            price_cents,
            repeated,
        } => (
            json!({"status": "booked", "booking_ref": booking_ref, "price_cents": price_cents, "currency": "EUR"}),
            if repeated {
                Effect::Repeated
            } else {
                Effect::Booked
            },
        ),
        DeskAnswer::PriceChanged { price_cents } => (
            json!({"status": "price_changed", "price_cents": price_cents, "currency": "EUR"}),
            Effect::Nothing,
        ),
        DeskAnswer::SoldOut { seats_left } => (
            json!({"status": "sold_out", "seats_left": seats_left}),
            Effect::Nothing,
        ),
        DeskAnswer::KeyReused => {
            return Err((
                422,
                format!(
                    "idempotency key {:?} was used for another order",
                    key.chars().take(64).collect::<String>()
                ),
            ));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap_or_default()
    }

    fn desk() -> BookingDesk {
        BookingDesk::new(SeatModel::default(), at(0))
    }

    fn request(key: &str, sailing: &str, passengers: u32, max: u64) -> BookingRequest {
        BookingRequest {
            idempotency_key: key.into(),
            sailing_id: sailing.into(),
            passengers,
            max_price_cents: max,
        }
    }

    #[test]
    fn capacities_are_drawn_within_the_model_and_stable() {
        let desk = desk();
        let caps: Vec<u32> = (0..200).map(|i| desk.capacity(&format!("s{i}"))).collect();
        assert!(caps.iter().all(|c| (20..=200).contains(c)), "{caps:?}");
        assert!(caps.iter().any(|c| *c < 60) && caps.iter().any(|c| *c > 160));
        assert_eq!(
            desk.capacity("s7"),
            BookingDesk::new(SeatModel::default(), at(99)).capacity("s7")
        );
    }

    #[test]
    fn other_channels_sell_seats_as_time_passes_until_none_are_left() {
        let desk = desk();
        let left: Vec<u32> = (0..=48)
            .map(|h| desk.seats_left("s1", at(h * 3600)))
            .collect();
        assert_eq!(left[0], desk.capacity("s1"));
        assert!(left.windows(2).all(|w| w[1] <= w[0]), "{left:?}");
        assert_eq!(left[48], 0, "{left:?}");
    }

    #[test]
    fn a_key_books_once_however_often_it_is_asked() {
        let mut desk = desk();
        let before = desk.seats_left("s1", at(0));
        let first = desk.book(&request("k1", "s1", 2, 10_000), 9_000, at(0));
        let DeskAnswer::Booked {
            booking_ref,
            repeated: false,
            ..
        } = first
        else {
            panic!("{first:?}");
        };
        for _ in 0..3 {
            assert_eq!(
                desk.book(&request("k1", "s1", 2, 10_000), 9_500, at(1)),
                DeskAnswer::Booked {
                    booking_ref: booking_ref.clone(),
                    price_cents: 9_000,
                    repeated: true
                }
            );
        }
        assert_eq!(desk.seats_left("s1", at(0)), before - 2);
        assert_eq!(desk.bookings(), 1);
        assert_eq!(desk.booked_keys().collect::<Vec<_>>(), ["k1"]);
        // The same key for another order is refused.
        assert_eq!(
            desk.book(&request("k1", "s2", 2, 10_000), 9_000, at(1)),
            DeskAnswer::KeyReused
        );
        assert_eq!(
            desk.book(&request("k1", "s1", 3, 10_000), 9_000, at(1)),
            DeskAnswer::KeyReused
        );
    }

    #[test]
    fn over_the_maximum_or_past_the_seats_nothing_is_booked_and_the_key_stays_free() {
        let mut desk = desk();
        assert_eq!(
            desk.book(&request("k1", "s1", 1, 8_000), 9_000, at(0)),
            DeskAnswer::PriceChanged { price_cents: 9_000 }
        );
        // The customer accepted the new price: the same key books now.
        assert!(matches!(
            desk.book(&request("k1", "s1", 1, 9_000), 9_000, at(0)),
            DeskAnswer::Booked {
                repeated: false,
                ..
            }
        ));
        let late = at(48 * 3600);
        assert_eq!(
            desk.book(&request("k2", "s1", 1, 9_000), 9_000, late),
            DeskAnswer::SoldOut { seats_left: 0 }
        );
        assert_eq!(desk.bookings(), 1);
        assert_eq!(
            desk.sold_out().iter().collect::<Vec<_>>(),
            [(&"k2".to_owned(), &"s1".to_owned())],
            "the desk remembers whom it could not seat"
        );
    }

    fn booking(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        let mut params: BTreeMap<String, String> = [
            ("idempotency_key", "lb-c1"),
            ("sailing_id", "hel-tll-20301224-0730"),
            ("passengers", "2"),
            ("max_price_cents", "100000"),
            ("currency", "EUR"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        for (k, v) in pairs {
            if v.is_empty() {
                params.remove(*k);
            } else {
                params.insert((*k).to_owned(), (*v).to_owned());
            }
        }
        params
    }

    #[test]
    fn a_booking_is_priced_as_a_price_answer_at_the_same_instant() {
        let drift = PriceDrift {
            start: at(0),
            every: std::time::Duration::from_secs(600),
            percent: 5.0,
            until: None,
        };
        let now = at(3_600);
        let params = booking(&[("accommodation", "cabin"), ("extras", "breakfast,wifi")]);
        let quoted = answers::price(&params, now, Some(&drift)).unwrap();
        let (booked, effect) = answer(&mut desk(), &params, now, Some(&drift)).unwrap();
        assert_eq!(effect, Effect::Booked);
        assert_eq!(booked["status"], "booked");
        assert_eq!(booked["price_cents"], quoted["price"]["amount_cents"]);
        assert_eq!(booked["currency"], "EUR");
        assert!(
            lifeboat_core::order::answer::BookBody::parse(&booked.to_string()).is_ok(),
            "{booked}"
        );
    }

    #[test]
    fn every_answer_of_the_desk_has_its_wire_form() {
        let mut desk = desk();
        let now = at(60);
        let (first, _) = answer(&mut desk, &booking(&[]), now, None).unwrap();
        let (again, effect) = answer(&mut desk, &booking(&[]), now, None).unwrap();
        assert_eq!((again.clone(), effect), (first.clone(), Effect::Repeated));
        let (moved, effect) = answer(
            &mut desk,
            &booking(&[("idempotency_key", "lb-c2"), ("max_price_cents", "1")]),
            now,
            None,
        )
        .unwrap();
        assert_eq!(effect, Effect::Nothing);
        assert_eq!(moved["status"], "price_changed");
        assert_eq!(moved["price_cents"], first["price_cents"]);
        let (gone, _) = answer(
            &mut desk,
            &booking(&[("idempotency_key", "lb-c3")]),
            at(48 * 3600),
            None,
        )
        .unwrap();
        assert_eq!(gone["status"], "sold_out");
        assert_eq!(gone["seats_left"], 0);
        let departed = booking(&[
            ("idempotency_key", "lb-c4"),
            ("sailing_id", "hel-tll-19700101-0730"),
        ]);
        let (late, _) = answer(&mut desk, &departed, now, None).unwrap();
        assert_eq!(late["status"], "not_bookable");
        assert_eq!(
            late["detail"],
            "sailing hel-tll-19700101-0730 departed at 1970-01-01T07:30:00Z"
        );
        let reused = answer(&mut desk, &booking(&[("passengers", "3")]), now, None);
        assert_eq!(reused.unwrap_err().0, 422);
        for (pairs, status) in [
            (&[("idempotency_key", "")][..], 400),
            (&[("sailing_id", "a b")][..], 400),
            (&[("passengers", "")][..], 400),
            (&[("passengers", "10")][..], 400),
            (&[("max_price_cents", "lots")][..], 400),
            (&[("currency", "SEK")][..], 422),
            (&[("accommodation", "hammock")][..], 422),
            (&[("extras", "caviar")][..], 422),
        ] {
            let mut p = booking(pairs);
            p.insert("idempotency_key".into(), "lb-bad".into());
            if pairs[0].0 == "idempotency_key" {
                p.remove("idempotency_key");
            }
            let refused = answer(&mut desk, &p, now, None).unwrap_err();
            assert_eq!(refused.0, status, "{pairs:?}: {}", refused.1);
        }
        assert_eq!(desk.bookings(), 1);
    }

    #[test]
    fn the_last_seats_go_to_the_first_booking_only() {
        let model = SeatModel {
            capacity_min: 3,
            capacity_max: 3,
            other_channels_per_hour: 0.0,
        };
        let mut desk = BookingDesk::new(model, at(0));
        assert!(matches!(
            desk.book(&request("a", "s1", 2, 1), 1, at(0)),
            DeskAnswer::Booked { .. }
        ));
        assert_eq!(
            desk.book(&request("b", "s1", 2, 1), 1, at(0)),
            DeskAnswer::SoldOut { seats_left: 1 }
        );
    }
}
