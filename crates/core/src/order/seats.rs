//! No overselling while the operator is off sale: how many passengers the
//! held orders of one sailing may take, from the seats left at the
//! operator's last answer and that answer's age.
//!
//! Seats sell through other channels while lifeboat cannot ask, so the
//! last answer's count is trusted less the older it is: in full for
//! `trusted_s`, then less and less, and not at all from `gone_s` on. Past
//! the cap a sailing is offered "on request" (the order is taken, and the
//! customer told it is not guaranteed) or not at all, as the policy says.

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
    /// A count this young is trusted whole.
    pub trusted_s: u64,
    /// A count this old is not trusted at all; between the two the cap
    /// falls in a straight line.
    pub gone_s: u64,
    /// Past the cap, or when the operator's answers carry no count.
    pub past_the_cap: PastTheCap,
}

impl Default for SeatGuard {
    fn default() -> Self {
        Self {
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
        if age <= self.trusted_s {
            return left.seats;
        }
        if age >= self.gone_s || self.gone_s <= self.trusted_s {
            return 0;
        }
        let remaining = u128::from(self.gone_s - age);
        let span = u128::from(self.gone_s - self.trusted_s);
        // Rounded down: a fraction of a seat is not a seat.
        u32::try_from(u128::from(left.seats) * remaining / span).unwrap_or(u32::MAX)
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
    fn the_cap_only_falls_as_the_count_ages() {
        let left = SeatsLeft {
            seats: 7,
            as_of: at(0),
        };
        let caps: Vec<u32> = (0..=4000)
            .step_by(50)
            .map(|s| guard().cap(left, at(s)))
            .collect();
        assert!(caps.windows(2).all(|w| w[1] <= w[0]), "{caps:?}");
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
