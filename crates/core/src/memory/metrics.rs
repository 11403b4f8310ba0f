//! Metric lines kept in memory: every line, or only their sums.
//!
//! The demo and the tests read the lines back; a long simulation (the
//! fleet's day, a chaos campaign) asks only for sums, so its sink folds each
//! line into one running total per metric and dimension set as it is
//! emitted, and its memory stays the size of the set of metrics, not of the
//! day.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::metrics::MetricSet;
use crate::ports::MetricsSink;

/// Lines kept in memory, or folded into sums as they come.
#[derive(Debug, Default)]
pub struct MemoryMetrics {
    inner: Mutex<Kept>,
}

#[derive(Debug)]
enum Kept {
    /// Every line, in order.
    Lines(Vec<Value>),
    /// Per metric name and dimension set (sorted by name), the sum of its
    /// values so far.
    Sums(BTreeMap<(String, Vec<(String, String)>), f64>),
}

impl Default for Kept {
    fn default() -> Self {
        Kept::Lines(Vec::new())
    }
}

/// The value of a metric in a line: a number, or the sum of an array.
fn line_value(value: &Value) -> f64 {
    match value {
        Value::Array(values) => values.iter().filter_map(Value::as_f64).sum(),
        other => other.as_f64().unwrap_or(0.0),
    }
}

impl MemoryMetrics {
    /// A sink that keeps every line.
    pub fn new() -> Self {
        Self::default()
    }

    /// A sink that keeps only the sums [`MemoryMetrics::sum`] reads: no
    /// lines ([`MemoryMetrics::lines`] is empty), one total per metric and
    /// dimension set.
    pub fn folded() -> Self {
        Self {
            inner: Mutex::new(Kept::Sums(BTreeMap::new())),
        }
    }

    /// The lines kept (none when folded).
    pub fn lines(&self) -> Vec<Value> {
        match &*self.lock() {
            Kept::Lines(lines) => lines.clone(),
            Kept::Sums(_) => Vec::new(),
        }
    }

    /// The sum of metric `name` over every line whose dimensions include all
    /// of `dimensions`.
    pub fn sum(&self, name: &str, dimensions: &[(&str, &str)]) -> f64 {
        match &*self.lock() {
            Kept::Lines(lines) => lines
                .iter()
                .filter(|l| {
                    dimensions
                        .iter()
                        .all(|(k, v)| l.get(*k).and_then(Value::as_str) == Some(*v))
                })
                .filter_map(|l| l.get(name))
                .map(line_value)
                .sum(),
            Kept::Sums(sums) => sums
                .iter()
                .filter(|((metric, set), _)| {
                    metric == name
                        && dimensions
                            .iter()
                            .all(|(k, v)| set.iter().any(|(sk, sv)| sk == k && sv == v))
                })
                .map(|(_, total)| total)
                .sum(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Kept> {
        // Lines and sums are written whole: a poisoned lock still holds
        // good data.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Lines read back from elsewhere (a log, or lines a test has changed).
impl From<Vec<Value>> for MemoryMetrics {
    fn from(lines: Vec<Value>) -> Self {
        Self {
            inner: Mutex::new(Kept::Lines(lines)),
        }
    }
}

impl MetricsSink for MemoryMetrics {
    fn emit(&self, sets: &[MetricSet], at: DateTime<Utc>) {
        let mut kept = self.lock();
        let sets = sets.iter().filter(|s| !s.is_empty());
        match &mut *kept {
            Kept::Lines(lines) => lines.extend(sets.map(|s| s.to_emf(at))),
            Kept::Sums(sums) => {
                for set in sets {
                    let mut dimensions: Vec<(String, String)> = set
                        .dimensions
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), v.clone()))
                        .collect();
                    dimensions.sort();
                    for (name, _, value) in &set.metrics {
                        *sums
                            .entry(((*name).to_owned(), dimensions.clone()))
                            .or_default() += line_value(value);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::DateTime;

    use super::MemoryMetrics;
    use crate::metrics::{MetricSet, Unit, names};
    use crate::ports::MetricsSink;

    #[test]
    fn folded_sums_are_the_sums_of_the_lines() {
        let at = DateTime::from_timestamp(1_796_104_800, 0).unwrap_or_default();
        let (lines, folded) = (MemoryMetrics::new(), MemoryMetrics::folded());
        let sets = [
            MetricSet::new()
                .dimension("Operator", "nordic")
                .dimension("Dependency", "requests")
                .count(names::DEPENDENCY_ERRORS, 2),
            MetricSet::new()
                .dimension("Dependency", "requests")
                .dimension("Operator", "baltic")
                .count(names::DEPENDENCY_ERRORS, 3),
            MetricSet::new().count(names::DEPENDENCY_ERRORS, 5),
            MetricSet::new().dimension("Operator", "nordic").values(
                names::CALL_DURATION,
                Unit::Milliseconds,
                &[120.0, 80.0],
            ),
            MetricSet::new().dimension("Operator", "empty"),
        ];
        for sink in [&lines, &folded] {
            sink.emit(&sets, at);
            sink.emit(&sets[..2], at);
        }
        for (name, dimensions) in [
            (names::DEPENDENCY_ERRORS, vec![]),
            (names::DEPENDENCY_ERRORS, vec![("Dependency", "requests")]),
            (names::DEPENDENCY_ERRORS, vec![("Operator", "nordic")]),
            (
                names::DEPENDENCY_ERRORS,
                vec![("Operator", "baltic"), ("Dependency", "requests")],
            ),
            (names::DEPENDENCY_ERRORS, vec![("Operator", "empty")]),
            (names::CALL_DURATION, vec![("Operator", "nordic")]),
            (names::CALL_DURATION, vec![]),
            (names::FAILED_CALLS, vec![]),
        ] {
            assert_eq!(
                folded.sum(name, &dimensions),
                lines.sum(name, &dimensions),
                "{name} {dimensions:?}"
            );
        }
        assert_eq!(lines.sum(names::DEPENDENCY_ERRORS, &[]), 15.0);
        assert_eq!(lines.lines().len(), 6);
        assert!(folded.lines().is_empty());
    }
}
