//! The alarm's evaluation: its metric's datapoints summed per period, and
//! the state (with CloudWatch's reason and reason data) from the last periods.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use lifeboat_core::metrics::Datapoint;
use serde_json::json;

use super::{AlarmRule, AlarmState, AlarmTransition, StateRecord, cw_time, reason_time};

/// The alarm's evaluation on its metric's datapoints.
#[derive(Debug, Clone)]
pub struct AlarmEvaluator {
    rule: AlarmRule,
    /// Per period start (ms): sum and sample count.
    periods: BTreeMap<i64, (f64, f64)>,
    state: StateRecord,
}

impl AlarmEvaluator {
    /// A new alarm is INSUFFICIENT_DATA until its first evaluation.
    pub fn new(rule: AlarmRule, now: DateTime<Utc>) -> Self {
        Self {
            rule,
            periods: BTreeMap::new(),
            state: StateRecord {
                value: AlarmState::InsufficientData,
                reason: "Unchecked: Initial alarm creation".to_owned(),
                reason_data: json!({}),
                timestamp: now,
            },
        }
    }

    pub fn rule(&self) -> &AlarmRule {
        &self.rule
    }

    pub fn state(&self) -> &StateRecord {
        &self.state
    }

    /// Count `point` if it is the alarm's metric; true if it was.
    pub fn observe(&mut self, point: &Datapoint) -> bool {
        if !self.rule.counts(point) {
            return false;
        }
        let period = self.rule.period_ms();
        let start = point.timestamp_ms.div_euclid(period) * period;
        let entry = self.periods.entry(start).or_insert((0.0, 0.0));
        entry.0 += point.value;
        entry.1 += point.count as f64;
        true
    }

    /// Evaluate the last `evaluation_periods` periods that ended at least
    /// `grace` before `now`. Returns the transition if the state changed.
    pub fn evaluate(&mut self, now: DateTime<Utc>, grace: Duration) -> Option<AlarmTransition> {
        let period = self.rule.period_ms();
        let grace_ms = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
        let end = now
            .timestamp_millis()
            .saturating_sub(grace_ms)
            .div_euclid(period)
            * period;
        let n = i64::try_from(self.rule.evaluation_periods.max(1)).unwrap_or(1);
        let first = end - n * period;
        // Older periods can no longer be evaluated.
        self.periods = self.periods.split_off(&first);
        let window: Vec<(i64, Option<(f64, f64)>)> = (0..n)
            .map(|i| first + i * period)
            .map(|start| (start, self.periods.get(&start).copied()))
            .collect();
        let breaching = window
            .iter()
            .filter(|(_, v)| v.is_some_and(|(sum, _)| sum >= self.rule.threshold))
            .count();
        let value = if breaching >= self.rule.datapoints_to_alarm {
            AlarmState::Alarm
        } else {
            AlarmState::Ok
        };
        if value == self.state.value {
            return None;
        }
        let current = self.record(value, &window, breaching, now);
        let previous = std::mem::replace(&mut self.state, current.clone());
        Some(AlarmTransition { previous, current })
    }

    /// Set the state by hand (`SetAlarmState`); the next evaluation computes
    /// it from the data again.
    pub fn force(
        &mut self,
        value: AlarmState,
        reason: &str,
        now: DateTime<Utc>,
    ) -> AlarmTransition {
        let transition = AlarmTransition::forced(self.state.clone(), value, reason, now);
        self.state = transition.current.clone();
        transition
    }

    /// The reason and reason data CloudWatch writes for `value`.
    fn record(
        &self,
        value: AlarmState,
        window: &[(i64, Option<(f64, f64)>)],
        breaching: usize,
        now: DateTime<Utc>,
    ) -> StateRecord {
        let rule = &self.rule;
        let n = window.len();
        let at = |ms: i64| DateTime::from_timestamp_millis(ms).unwrap_or(now);
        let present: Vec<(DateTime<Utc>, f64, f64)> = window
            .iter()
            .filter_map(|(start, v)| v.map(|(sum, count)| (at(*start), sum, count)))
            .collect();
        let reason = if present.is_empty() {
            format!(
                "Threshold Crossed: no datapoints were received for {n} periods and {n} missing datapoints were treated as [NonBreaching]."
            )
        } else {
            let listed = present
                .iter()
                .rev()
                .map(|(t, sum, _)| format!("{sum:.1} ({})", reason_time(*t)))
                .collect::<Vec<_>>()
                .join(", ");
            let (verb, change) = match value {
                AlarmState::Alarm => ("were", format!("{} -> ALARM", self.state.value)),
                _ => ("were not", format!("{} -> OK", self.state.value)),
            };
            let counted = match value {
                AlarmState::Alarm => breaching,
                _ => n - breaching,
            };
            format!(
                "Threshold Crossed: {counted} out of the last {n} datapoints [{listed}] {verb} greater than or equal to the threshold ({:.1}) (minimum {} datapoints for {change} transition).",
                rule.threshold, rule.datapoints_to_alarm
            )
        };
        let mut data = json!({
            "version": "1.0",
            "queryDate": cw_time(now),
            "statistic": "Sum",
            "period": rule.period.as_secs(),
            "recentDatapoints": present.iter().map(|(_, sum, _)| *sum).collect::<Vec<_>>(),
            "threshold": rule.threshold,
        });
        if let Some((start, _)) = window.first() {
            data["startDate"] = json!(cw_time(at(*start)));
        }
        if !present.is_empty() {
            data["evaluatedDatapoints"] = present
                .iter()
                .map(|(t, sum, count)| json!({"timestamp": cw_time(*t), "sampleCount": count, "value": sum}))
                .collect();
        }
        StateRecord {
            value,
            reason,
            reason_data: data,
            timestamp: now,
        }
    }
}
