//! The batch's metrics: operator calls by class, call durations, and per
//! operator the failed calls, calls while open and requests failed fast.

use std::collections::BTreeMap;

use lifeboat_core::metrics::{MetricSet, Unit, names};
use lifeboat_core::request::Health;
use lifeboat_core::{Operation, OperatorId};

use super::Processed;

/// What one batch did, per metric family.
#[derive(Default)]
pub(super) struct BatchMetrics {
    calls: BTreeMap<(OperatorId, Operation, &'static str), u64>,
    durations: BTreeMap<(OperatorId, Operation), Vec<f64>>,
    /// Per operator: failed calls, calls while open, requests failed fast.
    per_operator: BTreeMap<OperatorId, (u64, u64, u64)>,
}

impl BatchMetrics {
    pub(super) fn record(&mut self, p: &Processed) {
        if p.call.is_none() && !p.failed_fast {
            return;
        }
        let tally = self.per_operator.entry(p.operator.clone()).or_default();
        if p.failed_fast {
            tally.2 += 1;
        }
        if let Some(call) = &p.call {
            if matches!(p.called, Some(Health::Failure | Health::Timeout)) {
                tally.0 += 1;
            }
            if call.while_open {
                tally.1 += 1;
            }
            *self
                .calls
                .entry((p.operator.clone(), call.operation, call.class))
                .or_default() += 1;
            self.durations
                .entry((p.operator.clone(), call.operation))
                .or_default()
                .push(call.elapsed_ms);
        }
    }

    pub(super) fn sets(&self) -> Vec<MetricSet> {
        let mut sets = Vec::new();
        for (operator, (failed, while_open, failed_fast)) in &self.per_operator {
            sets.push(
                MetricSet::new()
                    .dimension(names::OPERATOR, operator.as_str())
                    .count(names::FAILED_CALLS, *failed)
                    .count(names::CALLS_WHILE_OPEN, *while_open)
                    .count(names::FAILED_FAST, *failed_fast),
            );
        }
        for ((operator, operation, class), n) in &self.calls {
            sets.push(
                MetricSet::new()
                    .dimension("Operator", operator.as_str())
                    .dimension("Operation", operation.as_str())
                    .dimension("Class", *class)
                    .count(names::OPERATOR_CALLS, *n),
            );
        }
        for ((operator, operation), durations) in &self.durations {
            sets.extend(MetricSet::series(
                &[
                    ("Operator", operator.as_str().to_owned()),
                    ("Operation", operation.as_str().to_owned()),
                ],
                names::CALL_DURATION,
                Unit::Milliseconds,
                durations,
            ));
        }
        sets
    }
}
