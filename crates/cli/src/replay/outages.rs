//! The truth a replay is measured against: the outages in the recorded
//! calls, and the quantiles of its figures.

use std::collections::HashMap;

use chrono::{DateTime, TimeDelta, Utc};
use lifeboat_core::OperatorId;

use crate::ops::calls::{CallOutcome, CallRecord};

/// A stretch of an operator's calls that all failed or timed out, at least
/// [`OUTAGE_MIN_CALLS`] long (stretches less than [`OUTAGE_MERGE`] apart
/// joined), as recorded: the truth every configuration is measured
/// against.
#[derive(Debug, Clone, PartialEq)]
pub struct Outage {
    pub operator: OperatorId,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
}

pub const OUTAGE_MIN_CALLS: usize = 10;
/// Runs of failed calls closer than this are one outage.
pub const OUTAGE_MERGE: TimeDelta = TimeDelta::minutes(2);

/// The outages in `calls` (sorted by time).
pub fn outages(calls: &[CallRecord]) -> Vec<Outage> {
    let mut found = Vec::new();
    let mut runs: HashMap<&OperatorId, (DateTime<Utc>, DateTime<Utc>, usize)> = HashMap::new();
    let mut close = |operator: &OperatorId, run: (DateTime<Utc>, DateTime<Utc>, usize)| {
        if run.2 >= OUTAGE_MIN_CALLS {
            found.push(Outage {
                operator: operator.clone(),
                start: run.0,
                end: run.1,
            });
        }
    };
    for call in calls {
        if call.outcome == CallOutcome::Answered {
            if let Some(run) = runs.remove(&call.operator) {
                close(&call.operator, run);
            }
        } else {
            let run = runs.entry(&call.operator).or_insert((call.at, call.at, 0));
            run.1 = call.at;
            run.2 += 1;
        }
    }
    for (operator, run) in runs {
        close(operator, run);
    }
    found.sort_by_key(|o| (o.operator.clone(), o.start));
    let mut merged: Vec<Outage> = Vec::with_capacity(found.len());
    for outage in found {
        match merged.last_mut() {
            Some(last)
                if last.operator == outage.operator && outage.start - last.end < OUTAGE_MERGE =>
            {
                last.end = last.end.max(outage.end);
            }
            _ => merged.push(outage),
        }
    }
    merged.sort_by_key(|o| o.start);
    merged
}

/// The `q` quantile of sorted `values` (nearest rank).
pub fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted.get(rank - 1).copied()
}
