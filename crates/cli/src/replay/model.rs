//! Four weeks of one operator's calls, generated from a model calibrated on
//! the incident's "before" figures only (docs/replay.md): healthy answers in
//! two clusters (median 1.3 s); on 17 of the last 21 days an outage (about
//! 18 hours in all, at twice the normal hourly traffic) inside a slowed
//! stretch of the day. Calls are recorded as the old system made them
//! (search 7 s, price 5 s budgets).

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, NaiveDate, TimeDelta, Utc};
use lifeboat_core::{Operation, OperatorId};
use lifeboat_operator::{LatencyModel, SimRng};
use serde::{Deserialize, Serialize};

use crate::ops::calls::{CallOutcome, CallRecord};

/// The incident's stated facts about its outages: the operator was
/// unavailable on 17 of 21 days, about 18 hours in all, and failed at about
/// twice its normal hourly traffic.
pub const INCIDENT_OUTAGE_DAYS: u32 = 17;
pub const INCIDENT_WINDOW_DAYS: u32 = 21;
pub const INCIDENT_UNAVAILABLE_HOURS: f64 = 18.0;
pub const INCIDENT_OUTAGE_TRAFFIC: f64 = 2.0;

/// The model's parameters; [`IncidentModel::calibrated`] is the one fitted
/// to the incident's figures (`lifeboat replay --calibrate` reproduces it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IncidentModel {
    pub days: u32,
    /// Arrivals a second outside the hangs (the normal traffic).
    pub calls_per_s: f64,
    /// Share of calls that ask for a price (the rest search).
    pub price_share: f64,
    /// Distinct questions, asked with Zipf-like popularity (exponent 1).
    pub questions: u32,
    pub healthy: LatencyModel,
    /// Days with an outage, drawn among the last `outage_window_days`.
    pub outage_days: u32,
    /// The stretch at the end of the weeks the outage days fall in.
    pub outage_window_days: u32,
    /// The degraded stretch of an outage day.
    pub degraded_hours: f64,
    /// Share of calls in the degraded stretch that get no answer at all.
    pub degraded_unanswered: f64,
    /// Answers in the degraded stretch take this many times longer.
    pub degraded_factor: f64,
    /// The hard outage inside the stretch (no call answered), on average
    /// per outage day: each day's length varies, their sum is
    /// `hang_minutes * outage_days`.
    pub hang_minutes: f64,
    /// Arrivals during a hang, as a multiple of `calls_per_s`.
    pub outage_traffic: f64,
    /// The budgets the calls were recorded under.
    pub recorded_search_ms: f64,
    pub recorded_price_ms: f64,
}

impl Default for IncidentModel {
    fn default() -> Self {
        Self::calibrated()
    }
}

impl IncidentModel {
    /// The incident's stated facts, and everything the calibration does not
    /// search at a neutral value: where `lifeboat replay --calibrate`
    /// starts.
    pub fn search_start() -> Self {
        Self {
            days: 28,
            calls_per_s: 0.25,
            price_share: 0.2,
            questions: 20_000,
            healthy: LatencyModel::default(),
            outage_days: INCIDENT_OUTAGE_DAYS,
            outage_window_days: INCIDENT_WINDOW_DAYS,
            degraded_hours: 12.0,
            degraded_unanswered: 0.05,
            degraded_factor: 2.0,
            hang_minutes: INCIDENT_UNAVAILABLE_HOURS * 60.0 / f64::from(INCIDENT_OUTAGE_DAYS),
            outage_traffic: INCIDENT_OUTAGE_TRAFFIC,
            recorded_search_ms: 7_000.0,
            recorded_price_ms: 5_000.0,
        }
    }

    /// Fitted to the incident's figures (docs/replay.md) by
    /// `lifeboat replay --calibrate`: the search's start with the values it
    /// found.
    pub fn calibrated() -> Self {
        let start = Self::search_start();
        Self {
            healthy: LatencyModel {
                fast_share: 0.79,
                fast_median: Duration::from_millis(1_100),
                slow_share: 0.06,
                tail_to: Duration::from_millis(2_600),
                ..start.healthy
            },
            degraded_hours: 12.0,
            degraded_unanswered: 0.05,
            degraded_factor: 3.1,
            ..start
        }
    }

    /// The outage days (day numbers from 0) for `seed`: `outage_days`
    /// distinct days of the last `outage_window_days`, in order.
    fn outage_days(&self, rng: &mut SimRng) -> Vec<u32> {
        let window = self.outage_window_days.min(self.days);
        let first = self.days - window;
        let mut days: Vec<u32> = (first..self.days).collect();
        let n = (self.outage_days as usize).min(days.len());
        // A partial Fisher-Yates shuffle: the first `n` are the draw.
        for i in 0..n {
            let rest = days.len() - i;
            let j = i + ((rng.next_f64() * rest as f64) as usize).min(rest - 1);
            days.swap(i, j);
        }
        days.truncate(n);
        days.sort_unstable();
        days
    }

    /// The degraded stretch and the hang of each outage day, in seconds
    /// from the start: `(from, to, hang_from, hang_to)`.
    fn stretches(&self, rng: &mut SimRng) -> Vec<(f64, f64, f64, f64)> {
        let days = self.outage_days(rng);
        // Each day's hang: between half and one and a half times the mean,
        // scaled so that they add up to `hang_minutes` per day.
        let weights: Vec<f64> = days.iter().map(|_| 0.5 + rng.next_f64()).collect();
        let total: f64 = weights.iter().sum();
        let all_hangs = self.hang_minutes * 60.0 * days.len() as f64;
        days.iter()
            .zip(&weights)
            .map(|(day, w)| {
                let day_start = f64::from(*day) * 86_400.0;
                let hang = (all_hangs * w / total.max(f64::MIN_POSITIVE)).min(86_400.0);
                let length = (self.degraded_hours * 3_600.0).clamp(hang, 86_400.0);
                let from = day_start + rng.next_f64() * (86_400.0 - length);
                let hang_from = from + rng.next_f64() * (length - hang);
                (from, from + length, hang_from, hang_from + hang)
            })
            .collect()
    }

    /// The calls, sorted by time, from `start`. Deterministic per seed.
    pub fn generate(
        &self,
        operator: &OperatorId,
        seed: u64,
        start: DateTime<Utc>,
    ) -> Vec<CallRecord> {
        let mut rng = SimRng::new(seed);
        let stretches = self.stretches(&mut rng);
        let zipf = Zipf::new(self.questions);
        let end_s = f64::from(self.days) * 86_400.0;
        // Arrivals at the highest rate, thinned to the rate of the moment
        // (a non-homogeneous Poisson process).
        let peak = self.calls_per_s * self.outage_traffic.max(1.0);
        let mut calls = Vec::with_capacity((end_s * self.calls_per_s * 1.1) as usize);
        let mut t = 0.0;
        loop {
            t += -(1.0 - rng.next_f64()).ln() / peak;
            if t >= end_s {
                break;
            }
            let stretch = stretches.iter().find(|s| t >= s.0 && t < s.1);
            let hung = stretch.is_some_and(|s| t >= s.2 && t < s.3);
            let rate = if hung {
                self.calls_per_s * self.outage_traffic
            } else {
                self.calls_per_s
            };
            if rng.next_f64() * peak >= rate {
                continue;
            }
            let operation = if rng.next_f64() < self.price_share {
                Operation::Price
            } else {
                Operation::Search
            };
            let budget_ms = match operation {
                Operation::Price => self.recorded_price_ms,
                _ => self.recorded_search_ms,
            };
            let question = format!("q{}", zipf.sample(&mut rng));
            let answer_ms = self.healthy.sample(&mut rng).as_secs_f64() * 1000.0;
            let (duration_ms, outcome) = match stretch {
                Some(_) if hung => (budget_ms, CallOutcome::Timeout),
                Some(_) if rng.next_f64() < self.degraded_unanswered => {
                    (budget_ms, CallOutcome::Timeout)
                }
                Some(_) => {
                    let slowed = answer_ms * self.degraded_factor;
                    if slowed > budget_ms {
                        (budget_ms, CallOutcome::Timeout)
                    } else {
                        (slowed, CallOutcome::Answered)
                    }
                }
                None if rng.next_f64() < self.healthy.error_rate => {
                    ((answer_ms * 0.2).min(budget_ms), CallOutcome::Failed)
                }
                None if answer_ms > budget_ms => (budget_ms, CallOutcome::Timeout),
                None => (answer_ms, CallOutcome::Answered),
            };
            calls.push(CallRecord {
                at: start + TimeDelta::milliseconds((t * 1000.0) as i64),
                operator: operator.clone(),
                operation,
                duration_ms: duration_ms.round(),
                outcome,
                question: Some(question),
            });
        }
        calls
    }
}

/// The incident's outage facts as measured on calls (sorted by time): the
/// outages found in them (docs/replay.md's definition), not the model's
/// parameters.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutageFacts {
    /// Days with an outage, of the last `window_days` days of the calls.
    pub outage_days: usize,
    pub window_days: u32,
    /// Days with an outage before the window.
    pub outage_days_before_window: usize,
    /// The outages' lengths added up.
    pub unavailable_hours: f64,
    /// Calls an hour during the outages, over calls an hour outside them.
    pub outage_traffic: f64,
}

pub fn outage_facts(calls: &[CallRecord], window_days: u32) -> OutageFacts {
    let outages = super::engine::outages(calls);
    let (Some(first), Some(last)) = (calls.first(), calls.last()) else {
        return OutageFacts {
            outage_days: 0,
            window_days,
            outage_days_before_window: 0,
            unavailable_hours: 0.0,
            outage_traffic: 0.0,
        };
    };
    let window_from: NaiveDate =
        last.at.date_naive() - TimeDelta::days(i64::from(window_days.max(1)) - 1);
    let days: BTreeSet<NaiveDate> = outages.iter().map(|o| o.start.date_naive()).collect();
    let inside = days.iter().filter(|d| **d >= window_from).count();
    let down_s: f64 = outages
        .iter()
        .map(|o| (o.end - o.start).num_milliseconds() as f64 / 1000.0)
        .sum();
    let during = calls
        .iter()
        .filter(|c| outages.iter().any(|o| c.at >= o.start && c.at <= o.end))
        .count() as f64;
    let all_s = (last.at - first.at).num_milliseconds() as f64 / 1000.0;
    let outside_rate = (calls.len() as f64 - during) / (all_s - down_s).max(1.0);
    let during_rate = during / down_s.max(1.0);
    OutageFacts {
        outage_days: inside,
        window_days,
        outage_days_before_window: days.len() - inside,
        unavailable_hours: down_s / 3_600.0,
        outage_traffic: if outside_rate > 0.0 {
            during_rate / outside_rate
        } else {
            0.0
        },
    }
}

/// Question popularity: rank `k` (from 1) asked in proportion to `1 / k`.
struct Zipf {
    cumulative: Vec<f64>,
}

impl Zipf {
    fn new(n: u32) -> Self {
        let mut total = 0.0;
        let cumulative = (1..=n.max(1))
            .map(|k| {
                total += 1.0 / f64::from(k);
                total
            })
            .collect();
        Self { cumulative }
    }

    fn sample(&self, rng: &mut SimRng) -> usize {
        let total = self.cumulative.last().copied().unwrap_or(1.0);
        let x = rng.next_f64() * total;
        self.cumulative.partition_point(|c| *c < x) + 1
    }
}

/// The median answer time of healthy searches: answered, on days without
/// an outage (the incident's "healthy operator search: median 1.3 s").
pub fn healthy_search_median_ms(calls: &[CallRecord], outage_days: &[chrono::NaiveDate]) -> f64 {
    let mut answered: Vec<f64> = calls
        .iter()
        .filter(|c| {
            c.operation == Operation::Search
                && c.outcome == CallOutcome::Answered
                && !outage_days.contains(&c.at.date_naive())
        })
        .map(|c| c.duration_ms)
        .collect();
    answered.sort_by(f64::total_cmp);
    super::engine::quantile(&answered, 0.5).unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_weeks() {
        let mut model = IncidentModel::calibrated();
        model.days = 4;
        model.outage_days = 1;
        let start = DateTime::UNIX_EPOCH;
        let nordic = OperatorId::new("nordic").unwrap();
        let a = model.generate(&nordic, 3, start);
        assert_eq!(a, model.generate(&nordic, 3, start));
        assert_ne!(a, model.generate(&nordic, 4, start));
        // About 0.25 calls a second.
        let expected = 4.0 * 86_400.0 * 0.25;
        assert!(
            (a.len() as f64 - expected).abs() < expected * 0.05,
            "{}",
            a.len()
        );
        let timeouts = a
            .iter()
            .filter(|c| c.outcome == CallOutcome::Timeout)
            .count();
        assert!(timeouts > 1_000, "the outage day times out: {timeouts}");
    }

    #[test]
    fn popular_questions_come_back() {
        let zipf = Zipf::new(1_000);
        let mut rng = SimRng::new(1);
        let ones = (0..10_000).filter(|_| zipf.sample(&mut rng) == 1).count();
        // 1 / H(1000) ≈ 13 % of questions are the most popular one.
        assert!((1_100..1_500).contains(&ones), "{ones}");
    }
}
