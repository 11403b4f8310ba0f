//! What a replay counts, and the figures it reports from the counts.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use chrono::{DateTime, NaiveDate, TimeDelta, Utc};
use lifeboat_core::{BreakerState, OperatorId};
use serde::Serialize;

use super::outages::{Outage, quantile};

/// What customers got.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Customers {
    pub live: u64,
    pub fresh: u64,
    pub last_good: u64,
    pub unavailable: u64,
}

/// The figures of one configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConfigFigures {
    /// Durations of the operator-calling Lambda's invocations (each call it
    /// made, cut at its budget, plus [`super::engine::INVOCATION_MS`]),
    /// milliseconds. Answers given without a call (the fallback's, the
    /// cache's) are no invocation of it and count nowhere here.
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub mean_ms: f64,
    /// Median on the days with an outage; `None` when the Lambda was not
    /// invoked on any.
    pub outage_day_median_ms: Option<f64>,
    /// The median daily failure rate: per UTC day, the operator-calling
    /// Lambda's calls that failed or timed out, of its calls that day; the
    /// median over the days it was invoked (the incident's definition).
    pub failure_rate: f64,
    /// Calls that failed or timed out, of all calls made over the whole
    /// replay, probes and the switch's trials included (what `failure_rate`
    /// meant before it followed the incident's definition).
    pub failure_rate_overall: f64,
    /// Invocations of the operator-calling Lambda: the durations' count.
    pub invocations: u64,
    /// Median time from an outage's start to the breaker opening; `None`
    /// when it never opened during one.
    pub detection_s: Option<f64>,
    /// Outages during which the breaker opened, of all outages.
    pub outages_detected: usize,
    pub outages: usize,
    /// Operator calls made while the breaker was open (probes) or half-open
    /// (trials).
    pub calls_while_open: u64,
    pub calls: u64,
    pub openings: u64,
    pub customers: Customers,
}

/// The counts of a replay as it runs.
#[derive(Debug, Default)]
pub(super) struct Tally {
    pub(super) calls: u64,
    pub(super) failures: u64,
    pub(super) calls_while_open: u64,
    pub(super) customers: Customers,
    /// Per UTC day: the operator-calling Lambda's calls, and those that
    /// failed or timed out.
    pub(super) days: BTreeMap<NaiveDate, (u64, u64)>,
}

impl Tally {
    pub(super) fn finish(
        self,
        durations: &[(DateTime<Utc>, f64)],
        truth: &[Outage],
        transitions: &[(usize, DateTime<Utc>, BreakerState)],
        index: &HashMap<OperatorId, usize>,
    ) -> ConfigFigures {
        let mut all: Vec<f64> = durations.iter().map(|(_, d)| *d).collect();
        all.sort_by(f64::total_cmp);
        let outage_days: BTreeSet<_> = truth.iter().map(|o| o.start.date_naive()).collect();
        let mut on_outage_days: Vec<f64> = durations
            .iter()
            .filter(|(at, _)| outage_days.contains(&at.date_naive()))
            .map(|(_, d)| *d)
            .collect();
        on_outage_days.sort_by(f64::total_cmp);
        let mut detections: Vec<f64> = Vec::new();
        for outage in truth {
            let op = index.get(&outage.operator).copied();
            let mine = transitions.iter().filter(|(o, _, _)| Some(*o) == op);
            // Already open (or testing recovery) when the outage began: no
            // customer waited for a detection.
            let before = mine
                .clone()
                .rfind(|(_, at, _)| *at <= outage.start)
                .map_or(BreakerState::Closed, |(_, _, s)| *s);
            if before != BreakerState::Closed {
                detections.push(0.0);
                continue;
            }
            // The first opening from the outage's start to a minute after
            // its last failed call.
            let first = mine
                .filter(|(_, at, s)| {
                    *s == BreakerState::Open
                        && *at >= outage.start
                        && *at <= outage.end + TimeDelta::minutes(1)
                })
                .map(|(_, at, _)| *at)
                .min();
            if let Some(at) = first {
                detections.push((at - outage.start).num_milliseconds() as f64 / 1000.0);
            }
        }
        detections.sort_by(f64::total_cmp);
        let mut daily: Vec<f64> = self
            .days
            .values()
            .filter(|(calls, _)| *calls > 0)
            .map(|(calls, failed)| *failed as f64 / *calls as f64)
            .collect();
        daily.sort_by(f64::total_cmp);
        ConfigFigures {
            p50_ms: quantile(&all, 0.5).unwrap_or(0.0),
            p95_ms: quantile(&all, 0.95).unwrap_or(0.0),
            mean_ms: if all.is_empty() {
                0.0
            } else {
                all.iter().sum::<f64>() / all.len() as f64
            },
            outage_day_median_ms: quantile(&on_outage_days, 0.5),
            failure_rate: median(&daily).unwrap_or(0.0),
            failure_rate_overall: if self.calls == 0 {
                0.0
            } else {
                self.failures as f64 / self.calls as f64
            },
            invocations: all.len() as u64,
            detection_s: quantile(&detections, 0.5),
            outages_detected: detections.len(),
            outages: truth.len(),
            calls_while_open: self.calls_while_open,
            calls: self.calls,
            openings: transitions
                .iter()
                .filter(|(_, _, s)| *s == BreakerState::Open)
                .count() as u64,
            customers: self.customers,
        }
    }
}

/// The median of sorted `values`: the middle one, or the mean of the two
/// middle ones.
pub fn median(sorted: &[f64]) -> Option<f64> {
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => sorted.get(n / 2).copied(),
        _ => Some((sorted.get(n / 2 - 1)? + sorted.get(n / 2)?) / 2.0),
    }
}
