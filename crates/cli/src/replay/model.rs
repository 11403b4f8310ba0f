//! Four weeks of one operator's calls, generated from a model calibrated on
//! the incident's "before" figures only (docs/replay.md): healthy answers in
//! two clusters (median 1.3 s), and on a few days a degraded stretch (many
//! calls unanswered, the rest slowed) with a hard outage inside it. Calls are
//! recorded as the old system made them (search 7 s, price 5 s budgets).

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use lifeboat_core::{Operation, OperatorId};
use lifeboat_operator::{LatencyModel, SimRng};
use serde::{Deserialize, Serialize};

use crate::ops::calls::{CallOutcome, CallRecord};

/// The model's parameters; [`IncidentModel::calibrated`] is the one fitted
/// to the incident's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IncidentModel {
    pub days: u32,
    pub calls_per_s: f64,
    /// Share of calls that ask for a price (the rest search).
    pub price_share: f64,
    /// Distinct questions, asked with Zipf-like popularity (exponent 1).
    pub questions: u32,
    pub healthy: LatencyModel,
    /// Days with an outage, spread over the period.
    pub outage_days: u32,
    /// The degraded stretch of an outage day.
    pub degraded_hours: f64,
    /// Share of calls in the degraded stretch that get no answer at all.
    pub degraded_unanswered: f64,
    /// Answers in the degraded stretch take this many times longer.
    pub degraded_factor: f64,
    /// The hard outage inside the stretch: no call answered.
    pub hang_minutes: f64,
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
    /// Fitted to the incident's figures (docs/replay.md) by a search over
    /// the parameters, replaying each candidate under the old settings.
    pub fn calibrated() -> Self {
        Self {
            days: 28,
            calls_per_s: 0.25,
            price_share: 0.2,
            questions: 20_000,
            // Most answers in the first cluster; 6 % in a tail that runs far
            // past any budget (the old settings' p95 sits at their 7 s).
            healthy: LatencyModel {
                fast_share: 0.843,
                fast_median: Duration::from_millis(1_190),
                slow_share: 0.097,
                tail_to: Duration::from_millis(42_500),
                ..LatencyModel::default()
            },
            outage_days: 3,
            degraded_hours: 21.7,
            degraded_unanswered: 0.03,
            degraded_factor: 3.33,
            hang_minutes: 29.0,
            recorded_search_ms: 7_000.0,
            recorded_price_ms: 5_000.0,
        }
    }

    /// The outage days (day numbers from 0) for `seed`: spread evenly, each
    /// shifted by up to two days.
    fn outage_days(&self, rng: &mut SimRng) -> Vec<u32> {
        let n = self.outage_days.min(self.days);
        (0..n)
            .map(|i| {
                let slot = self.days / n.max(1);
                let base = i * slot;
                base + ((rng.next_f64() * f64::from(slot.min(3))) as u32)
                    .min(slot.saturating_sub(1))
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
        let outage_days = self.outage_days(&mut rng);
        let zipf = Zipf::new(self.questions);
        let end_s = f64::from(self.days) * 86_400.0;
        let mut calls = Vec::with_capacity((end_s * self.calls_per_s * 1.1) as usize);
        // The degraded stretch and the hang of each outage day, in seconds
        // from `start`.
        let stretches: Vec<(f64, f64, f64, f64)> = outage_days
            .iter()
            .map(|day| {
                let day_start = f64::from(*day) * 86_400.0;
                let length = self.degraded_hours * 3_600.0;
                let from = day_start + rng.next_f64() * (86_400.0 - length).max(0.0);
                let hang = self.hang_minutes * 60.0;
                let hang_from = from + rng.next_f64() * (length - hang).max(0.0);
                (from, from + length, hang_from, hang_from + hang)
            })
            .collect();
        let mut t = 0.0;
        loop {
            // Poisson arrivals: exponential gaps.
            t += -(1.0 - rng.next_f64()).ln() / self.calls_per_s;
            if t >= end_s {
                break;
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
            let stretch = stretches.iter().find(|s| t >= s.0 && t < s.1);
            let answer_ms = self.healthy.sample(&mut rng).as_secs_f64() * 1000.0;
            let (duration_ms, outcome) = match stretch {
                Some(s) if t >= s.2 && t < s.3 => (budget_ms, CallOutcome::Timeout),
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
