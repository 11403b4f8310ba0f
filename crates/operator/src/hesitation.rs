//! Hesitation: how a healthy operator is sometimes slower than its
//! [`LatencyModel`](crate::LatencyModel) says, its `/ping` included.
//!
//! A real operator does not answer its health endpoint in 30 ms whatever
//! happens: under load its requests queue for a worker, and now and then it
//! has a slow moment (a garbage-collection pause, a database lock, a noisy
//! neighbour) in which everything it answers, the ping included, takes
//! longer. The hang check (docs/breaker.md) asks a ping right after a call
//! that timed out, which is exactly when such a moment is on, so a simulated
//! operator that never hesitates cannot show the check's false trips.
//!
//! Two effects, both seeded, on by default ([`Hesitation::default`]) and
//! off with `{"hesitation": {"enabled": false}}`:
//!
//! - **A load tail.** Every answer, the ping included, waits in a queue with
//!   probability `tail_share_per_call_s` × the operator's load (calls
//!   received per second over the last `load_window`), at most `tail_cap`;
//!   the wait is exponential with mean `tail_mean`. The busiest operator of
//!   `lifeboat fleet` (about 1.3 calls a second reach it) queues about 8 %
//!   of its answers for 350 ms on average; a quiet one (0.1 calls a second)
//!   fewer than 1 %. About 1 % of that busiest operator's pings wait more
//!   than a second.
//! - **Slow moments.** On the operator's own timeline (the same whatever it
//!   is asked), a moment starts on average every `moment_every` (5 min) and
//!   lasts 2–10 s; in it every answer takes `moment_factor` (1.5–2.0) times
//!   as long, and `moment_tail_share` (25 %) more of the answers queue, for
//!   the factor times the tail's mean. About 2 % of the time is in a
//!   moment; there a search's 1.3 s becomes 2–2.6 s (still in the 3 s
//!   budget), the 2.3 s cluster times out, and about 4 % of pings take more
//!   than a second.
//!
//! Calibrated so the healthy figures stay those of the incident: the median
//! search about 1.3–1.5 s, the second cluster at 2.3 s, timeouts of healthy
//! calls about 5–6 % (4–5 % without hesitation).

use std::collections::VecDeque;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::latency::{SimRng, mix64};

/// The hesitation model; durations in configuration are in milliseconds
/// (`tail_mean_ms`, …). Every field has a default, so `{}` is complete.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Hesitation {
    /// Off: the operator answers as its latency model says and pings in
    /// 30 ms, as before. Default on.
    pub enabled: bool,
    /// Share of answers that queue, per call a second of load. Default 0.06.
    pub tail_share_per_call_s: f64,
    /// The most answers that queue outside a slow moment. Default 0.3.
    pub tail_cap: f64,
    /// Mean of a queued answer's wait (exponential). Default 350 ms.
    #[serde(with = "lifeboat_core::budget::millis", rename = "tail_mean_ms")]
    pub tail_mean: Duration,
    /// The load is the calls received over this span. Default 10 s.
    #[serde(with = "lifeboat_core::budget::millis", rename = "load_window_ms")]
    pub load_window: Duration,
    /// Mean time between the starts of slow moments. Default 300 s; zero
    /// means none.
    #[serde(with = "lifeboat_core::budget::millis", rename = "moment_every_ms")]
    pub moment_every: Duration,
    /// Shortest slow moment. Default 2 s.
    #[serde(with = "lifeboat_core::budget::millis", rename = "moment_min_ms")]
    pub moment_min: Duration,
    /// Longest slow moment (at most a minute). Default 10 s.
    #[serde(with = "lifeboat_core::budget::millis", rename = "moment_max_ms")]
    pub moment_max: Duration,
    /// In a moment answers take this many times as long, drawn per moment
    /// between `moment_factor_min` and `moment_factor_max`. Default 1.5.
    pub moment_factor_min: f64,
    /// Default 2.0.
    pub moment_factor_max: f64,
    /// In a moment this share of answers queues on top of the load's.
    /// Default 0.25.
    pub moment_tail_share: f64,
}

impl Default for Hesitation {
    fn default() -> Self {
        Self {
            enabled: true,
            tail_share_per_call_s: 0.06,
            tail_cap: 0.3,
            tail_mean: Duration::from_millis(350),
            load_window: Duration::from_secs(10),
            moment_every: Duration::from_secs(300),
            moment_min: Duration::from_secs(2),
            moment_max: Duration::from_secs(10),
            moment_factor_min: 1.5,
            moment_factor_max: 2.0,
            moment_tail_share: 0.25,
        }
    }
}

/// Slow moments are placed slot by slot: each slot of this length holds the
/// start of at most one, so a moment is found from its own and the previous
/// slot, whatever was asked before.
const SLOT_MS: i64 = 60_000;

/// A slow moment at some instant: how many times slower answers are.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Moment {
    pub factor: f64,
}

impl Hesitation {
    /// No hesitation: answers as the latency model draws them.
    pub fn off() -> Self {
        Self {
            enabled: false,
            ..Self::default()
        }
    }

    /// The slow moment the operator seeded with `seed` is in at `now`, if any.
    pub(crate) fn moment_at(&self, seed: u64, now: DateTime<Utc>) -> Option<Moment> {
        let every = self.moment_every.as_millis() as f64;
        if !self.enabled || every <= 0.0 {
            return None;
        }
        let chance = (SLOT_MS as f64 / every).clamp(0.0, 1.0);
        let ms = now.timestamp_millis();
        let slot = ms.div_euclid(SLOT_MS);
        [slot, slot - 1].into_iter().find_map(|slot| {
            // Four draws per slot, from the seed and the slot alone.
            let mut rng = SimRng::new(mix64(
                seed ^ (slot as u64).wrapping_mul(0xA24B_AED4_963E_E407),
            ));
            if rng.next_f64() >= chance {
                return None;
            }
            let start = slot * SLOT_MS + (rng.next_f64() * SLOT_MS as f64) as i64;
            let (min, max) = (
                self.moment_min.as_millis() as f64,
                (self.moment_max.as_millis() as f64).min(SLOT_MS as f64),
            );
            let length = (min + rng.next_f64() * (max - min).max(0.0)) as i64;
            let factor = between(
                rng.next_f64(),
                self.moment_factor_min,
                self.moment_factor_max,
            );
            (start <= ms && ms < start + length).then_some(Moment { factor })
        })
    }

    /// How one answer hesitates, given the operator's `load` (calls a
    /// second) and the moment it is in: the factor its drawn time is
    /// multiplied by, and the queueing wait added (unscaled). `(1.0, 0)`
    /// when off, without a draw.
    pub(crate) fn draw(
        &self,
        load: f64,
        moment: Option<Moment>,
        rng: &mut SimRng,
    ) -> (f64, Duration) {
        if !self.enabled {
            return (1.0, Duration::ZERO);
        }
        let factor = moment.map_or(1.0, |m| finite_at_least(m.factor, 1.0));
        let mut share = (finite_at_least(self.tail_share_per_call_s, 0.0) * load)
            .min(finite_at_least(self.tail_cap, 0.0));
        if moment.is_some() {
            share += finite_at_least(self.moment_tail_share, 0.0);
        }
        if rng.next_f64() >= share.min(1.0) {
            return (factor, Duration::ZERO);
        }
        // Exponential wait: 1 - u is in (0, 1], so the logarithm is finite.
        let u = 1.0 - rng.next_f64();
        let secs = -u.ln() * self.tail_mean.as_secs_f64() * factor;
        let wait = Duration::try_from_secs_f64(secs.clamp(0.0, 3_600.0)).unwrap_or(Duration::ZERO);
        (factor, wait)
    }
}

/// `a` + `u` × (`b` − `a`), for `u` in [0, 1); `a` when the bounds are nonsense.
fn between(u: f64, a: f64, b: f64) -> f64 {
    if a.is_finite() && b.is_finite() && b >= a {
        a + u * (b - a)
    } else {
        a
    }
}

fn finite_at_least(x: f64, floor: f64) -> f64 {
    if x.is_finite() { x.max(floor) } else { floor }
}

/// The calls an operator received lately: its load, in calls a second.
#[derive(Debug, Default)]
pub(crate) struct Load {
    arrivals: VecDeque<DateTime<Utc>>,
}

impl Load {
    /// Count a call received at `now`; the load it found (calls a second
    /// over `window` before it, itself excluded).
    pub fn arrive(&mut self, now: DateTime<Utc>, window: Duration) -> f64 {
        let span = chrono::TimeDelta::from_std(window).unwrap_or(chrono::TimeDelta::seconds(10));
        while self.arrivals.front().is_some_and(|t| *t <= now - span) {
            self.arrivals.pop_front();
        }
        let load = self.arrivals.len() as f64 / window.as_secs_f64().max(0.001);
        self.arrivals.push_back(now);
        load
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> DateTime<Utc> {
        DateTime::from_timestamp(1_796_033_700, 0).unwrap_or_default()
    }

    /// The moments of `seed` over `hours`, second by second, in tenths.
    fn moments(h: &Hesitation, seed: u64, hours: i64) -> Vec<Option<Moment>> {
        (0..hours * 36_000)
            .map(|tenth| h.moment_at(seed, t0() + chrono::TimeDelta::milliseconds(tenth * 100)))
            .collect()
    }

    #[test]
    fn slow_moments_take_about_two_per_cent_of_the_time() {
        let h = Hesitation::default();
        let day = moments(&h, 7, 24);
        let share = day.iter().filter(|m| m.is_some()).count() as f64 / day.len() as f64;
        assert!(
            (0.012..0.03).contains(&share),
            "{share} of the day in a moment"
        );
        assert!(day.iter().flatten().all(|m| (1.5..2.0).contains(&m.factor)));
        // Each moment lasts 2–10 s: count the runs.
        let mut runs = Vec::new();
        let mut run = 0;
        for m in &day {
            match m {
                Some(_) => run += 1,
                None if run > 0 => {
                    runs.push(run);
                    run = 0;
                }
                None => {}
            }
        }
        assert!(runs.len() > 150, "{} moments a day", runs.len());
        // Two moments may touch; none is shorter than 2 s.
        assert!(runs.iter().all(|r| *r >= 20), "{runs:?}");
    }

    #[test]
    fn moments_follow_the_seed_not_the_calls() {
        let h = Hesitation::default();
        assert_eq!(moments(&h, 7, 2), moments(&h, 7, 2));
        assert_ne!(moments(&h, 7, 2), moments(&h, 8, 2));
        assert!(
            moments(&Hesitation::off(), 7, 2)
                .iter()
                .all(Option::is_none)
        );
        let never = Hesitation {
            moment_every: Duration::ZERO,
            ..Hesitation::default()
        };
        assert!(moments(&never, 7, 2).iter().all(Option::is_none));
    }

    #[test]
    fn off_draws_nothing() {
        let mut rng = SimRng::new(3);
        let before = rng.clone();
        let moment = Some(Moment { factor: 2.0 });
        assert_eq!(
            Hesitation::off().draw(5.0, moment, &mut rng),
            (1.0, Duration::ZERO)
        );
        assert_eq!(rng, before);
    }

    #[test]
    fn the_load_counts_the_calls_of_the_window() {
        let mut load = Load::default();
        let window = Duration::from_secs(10);
        assert_eq!(load.arrive(t0(), window), 0.0);
        for s in 1..=9 {
            load.arrive(t0() + chrono::TimeDelta::seconds(s), window);
        }
        // Ten calls in the last 10 s (the one at t0 drops out at +10 s).
        assert_eq!(
            load.arrive(t0() + chrono::TimeDelta::seconds(10), window),
            0.9
        );
        assert_eq!(
            load.arrive(t0() + chrono::TimeDelta::seconds(60), window),
            0.0
        );
    }
}
