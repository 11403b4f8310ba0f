//! No overselling while the operator is off sale: how many passengers the
//! held orders of one sailing may take, from the seats left at the
//! operator's last answer and that answer's age.
//!
//! Seats sell through other channels while lifeboat cannot ask, so the
//! last answer's count is trusted less the older it is, two ways at once:
//!
//! * what other channels may sell before the order is booked is kept
//!   back: up to `sold_elsewhere_per_hour` seats for every hour of the
//!   count's age, and of the `guaranteed_for_s` the operator may yet stay
//!   away (a guarantee is a seat still there when the operator is back,
//!   not only when the order is held);
//! * the count itself fades: trusted up to `trusted_s`, then less and
//!   less, and not at all from `gone_s` on.
//!
//! The cap is the smaller of the two. Past it a sailing is offered "on
//! request" (the order is taken, and the customer told it is not
//! guaranteed) or not at all, as the policy says.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The seats the operator said were left, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeatsLeft {
    pub seats: u32,
    pub as_of: DateTime<Utc>,
}

/// What happens to a sailing past its cap, or with no count at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PastTheCap {
    /// Taken as an order on request: booked if the operator still has the
    /// seats, refunded otherwise, and the customer is told so.
    OnRequest,
    /// Not offered until the operator is back.
    NotOffered,
}

/// How far a count of seats left is trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SeatGuard {
    /// The most seats of one sailing the operator's other channels (its
    /// own site, agents, the port's desk) may sell in an hour: kept back
    /// for every hour of the count's age and of `guaranteed_for_s`. Set
    /// it to what the operator's fastest-selling sailings sell; 0 keeps
    /// nothing back.
    pub sold_elsewhere_per_hour: u32,
    /// How long after a hold the operator may stay away with the order's
    /// seat still there: what other channels sell in that time is kept
    /// back too. An outage that outlasts it can leave a guaranteed order
    /// without a seat.
    pub guaranteed_for_s: u64,
    /// Up to this age the count fades only by what is kept back.
    pub trusted_s: u64,
    /// A count this old is not trusted at all; between `trusted_s` and
    /// `gone_s` it falls in a straight line as well.
    pub gone_s: u64,
    /// Past the cap, or when the operator's answers carry no count.
    pub past_the_cap: PastTheCap,
}

impl Default for SeatGuard {
    fn default() -> Self {
        Self {
            sold_elsewhere_per_hour: 60,
            guaranteed_for_s: 30 * 60,
            trusted_s: 15 * 60,
            gone_s: 6 * 3600,
            past_the_cap: PastTheCap::OnRequest,
        }
    }
}

/// What a cart confirmed while off sale may do with its sailing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SeatVerdict {
    /// Within the cap: held, and booked when the operator is back.
    Hold,
    OnRequest,
    NotOffered,
}

impl SeatGuard {
    /// The passengers held orders may take on a sailing whose last count
    /// was `left`, at `now`.
    pub fn cap(&self, left: SeatsLeft, now: DateTime<Utc>) -> u32 {
        let age = u64::try_from((now - left.as_of).num_seconds()).unwrap_or(0);
        let until_booked = u128::from(age) + u128::from(self.guaranteed_for_s);
        // Rounded up: a seat that may have sold is not offered.
        let sold_elsewhere =
            (u128::from(self.sold_elsewhere_per_hour) * until_booked).div_ceil(3600);
        let kept = u128::from(left.seats).saturating_sub(sold_elsewhere);
        let faded = if age <= self.trusted_s {
            u128::from(left.seats)
        } else if age >= self.gone_s || self.gone_s <= self.trusted_s {
            0
        } else {
            let remaining = u128::from(self.gone_s - age);
            let span = u128::from(self.gone_s - self.trusted_s);
            // Rounded down: a fraction of a seat is not a seat.
            u128::from(left.seats) * remaining / span
        };
        u32::try_from(kept.min(faded)).unwrap_or(u32::MAX)
    }

    /// Whether `passengers` more may be held on a sailing whose held orders
    /// already take `held` passengers, with `left` its last count (`None`:
    /// the operator's answers carry none).
    pub fn verdict(
        &self,
        left: Option<SeatsLeft>,
        held: u32,
        passengers: u32,
        now: DateTime<Utc>,
    ) -> SeatVerdict {
        let within = left.is_some_and(|left| {
            held.checked_add(passengers)
                .is_some_and(|wanted| wanted <= self.cap(left, now))
        });
        match (within, self.past_the_cap) {
            (true, _) => SeatVerdict::Hold,
            (false, PastTheCap::OnRequest) => SeatVerdict::OnRequest,
            (false, PastTheCap::NotOffered) => SeatVerdict::NotOffered,
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn at(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_796_000_000 + s, 0)
            .single()
            .expect("a time")
    }

    fn guard() -> SeatGuard {
        SeatGuard {
            sold_elsewhere_per_hour: 0,
            guaranteed_for_s: 0,
            trusted_s: 600,
            gone_s: 3600,
            past_the_cap: PastTheCap::NotOffered,
        }
    }

    #[test]
    fn a_young_count_is_trusted_whole_and_an_old_one_not_at_all() {
        let left = SeatsLeft {
            seats: 30,
            as_of: at(0),
        };
        assert_eq!(guard().cap(left, at(0)), 30);
        assert_eq!(guard().cap(left, at(600)), 30);
        // Half-way between 600 s and 3600 s: half the seats.
        assert_eq!(guard().cap(left, at(2100)), 15);
        assert_eq!(guard().cap(left, at(3599)), 0);
        assert_eq!(guard().cap(left, at(3600)), 0);
        assert_eq!(guard().cap(left, at(90_000)), 0);
    }

    #[test]
    fn what_other_channels_may_sell_before_the_booking_is_kept_back() {
        let g = SeatGuard {
            sold_elsewhere_per_hour: 60,
            ..guard()
        };
        let left = SeatsLeft {
            seats: 30,
            as_of: at(0),
        };
        assert_eq!(g.cap(left, at(0)), 30);
        // A second old: a seat may have gone.
        assert_eq!(g.cap(left, at(1)), 29);
        assert_eq!(g.cap(left, at(60)), 29);
        assert_eq!(g.cap(left, at(61)), 28);
        // Ten minutes: ten seats, the count still trusted otherwise.
        assert_eq!(g.cap(left, at(600)), 20);
        // Past `trusted_s` the fading count is the smaller: half-way to
        // `gone_s` half the seats (15), while 35 minutes kept back 35.
        assert_eq!(g.cap(left, at(2100)), 0);
        // Twenty minutes the operator may yet stay away: twenty more.
        let guaranteed = SeatGuard {
            guaranteed_for_s: 1200,
            ..g
        };
        assert_eq!(guaranteed.cap(left, at(0)), 10);
        assert_eq!(guaranteed.cap(left, at(1)), 9);
        assert_eq!(guaranteed.cap(left, at(600)), 0);
        let slow = SeatGuard {
            sold_elsewhere_per_hour: 6,
            ..g
        };
        assert_eq!(slow.cap(left, at(2100)), 15);
        // Twenty minutes: 2 kept back (28), faded to 24.
        assert_eq!(slow.cap(left, at(1200)), 24);
    }

    #[test]
    fn the_cap_only_falls_as_the_count_ages() {
        let left = SeatsLeft {
            seats: 7,
            as_of: at(0),
        };
        for per_hour in [0, 7, 60, u32::MAX] {
            let g = SeatGuard {
                sold_elsewhere_per_hour: per_hour,
                ..guard()
            };
            let caps: Vec<u32> = (0..=4000).step_by(50).map(|s| g.cap(left, at(s))).collect();
            assert!(
                caps.windows(2).all(|w| w[1] <= w[0]),
                "{per_hour}: {caps:?}"
            );
        }
    }

    #[test]
    fn a_count_from_the_future_is_taken_as_new() {
        let left = SeatsLeft {
            seats: 4,
            as_of: at(100),
        };
        assert_eq!(guard().cap(left, at(0)), 4);
    }

    #[test]
    fn held_passengers_count_against_the_cap() {
        let left = Some(SeatsLeft {
            seats: 10,
            as_of: at(0),
        });
        let g = guard();
        assert_eq!(g.verdict(left, 6, 4, at(0)), SeatVerdict::Hold);
        assert_eq!(g.verdict(left, 7, 4, at(0)), SeatVerdict::NotOffered);
        assert_eq!(g.verdict(left, u32::MAX, 1, at(0)), SeatVerdict::NotOffered);
        let on_request = SeatGuard {
            past_the_cap: PastTheCap::OnRequest,
            ..g
        };
        assert_eq!(
            on_request.verdict(left, 7, 4, at(0)),
            SeatVerdict::OnRequest
        );
        // No count at all: never held as if the seats were there.
        assert_eq!(
            on_request.verdict(None, 0, 1, at(0)),
            SeatVerdict::OnRequest
        );
        assert_eq!(g.verdict(None, 0, 1, at(0)), SeatVerdict::NotOffered);
    }
}
