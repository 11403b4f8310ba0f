//! The sale sweep: the sale status converges to the breakers even when a
//! change never arrives or its writes were given up.
//!
//! A schedule (`SaleSweepRule`, every 5 minutes) invokes the listener with
//! EventBridge's `Scheduled Event`. For every operator in `OPERATORS` it
//! reads the breaker and the sale record, and where the switch does not hold
//! what the breaker's current version asks for, it settles that version as if
//! its `Breaker State Changed` had just arrived:
//!
//! * a change that never reached the listener (an event lost beyond the
//!   rule's retries and dead-letter queue) is applied;
//! * a write given up after its attempts starts a new round of attempts (a
//!   new `Sale Switch Write Failed` if that round fails too), so a sale
//!   switch that was down for an hour is written once it is back, on a slow
//!   schedule: one attempt per sweep, not a retry loop;
//! * a write still in its retries, or an on-sale write in its hold, is
//!   attempted when due, as its own message would (the sale record's lease
//!   keeps the two from writing at once).

use lifeboat_core::OperatorId;
use lifeboat_core::metrics::{MetricSet, names};
use lifeboat_core::sale::{SaleChange, Settled};

use serde_json::Value;

use crate::OffsaleListener;
use crate::settle::Progress;

/// How a sweep reports a round of attempts that failed again (a fault).
const GAVE_UP_AGAIN: &str = "gave up again";

/// What one sweep did.
#[derive(Debug, Default)]
pub struct SweepReport {
    /// Operators looked at.
    pub checked: usize,
    /// Operators whose sale status already matched their breaker.
    pub in_step: usize,
    /// Changes settled now: `(operator, version, how)`.
    pub settled: Vec<(OperatorId, u64, String)>,
    /// Changes started again or applied that must wait (a failed attempt,
    /// the on-sale hold): the next sweep carries on.
    pub waiting: Vec<(OperatorId, u64)>,
    /// Operators the stores could not be read or written for.
    pub failed: Vec<(OperatorId, String)>,
    /// Why nothing was swept, if so.
    pub skipped: Option<String>,
}

impl SweepReport {
    /// The report as the invocation's JSON result.
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "checked": self.checked,
            "in_step": self.in_step,
            "settled": self.settled.iter().map(|(o, v, how)| serde_json::json!({"operator": o, "version": v, "how": how})).collect::<Vec<_>>(),
            "waiting": self.waiting.iter().map(|(o, v)| serde_json::json!({"operator": o, "version": v})).collect::<Vec<_>>(),
            "failed": self.failed.iter().map(|(o, e)| serde_json::json!({"operator": o, "error": e})).collect::<Vec<_>>(),
            "skipped": self.skipped,
        })
    }
}

/// Whether `payload` is EventBridge's scheduled event (the sweep's trigger).
pub use lifeboat_core::invocation::is_schedule;

impl OffsaleListener {
    /// Bring every served operator's sale status in step with its breaker.
    pub async fn sweep(&self) -> SweepReport {
        let mut report = SweepReport::default();
        let (Some(operators), Some(breakers)) = (&self.trust.operators, &self.trust.breakers)
        else {
            report.skipped = Some("the sweep needs OPERATORS and BREAKER_TABLE".into());
            tracing::warn!("sale sweep skipped: OPERATORS or BREAKER_TABLE not set");
            return report;
        };
        for operator in operators {
            report.checked += 1;
            let breaker = match breakers.load(operator).await {
                Ok(Some(b)) => b,
                // Never moved: on sale, nothing to do.
                Ok(None) => {
                    report.in_step += 1;
                    continue;
                }
                Err(e) => {
                    report.failed.push((operator.clone(), e.to_string()));
                    continue;
                }
            };
            let change = SaleChange {
                operator: operator.clone(),
                version: breaker.version,
                status: self.on_sale_at.status(breaker.state),
                breaker: breaker.state,
            };
            let record = match self.load(operator).await {
                Ok((record, _)) => record,
                Err(e) => {
                    report.failed.push((operator.clone(), e.to_string()));
                    continue;
                }
            };
            let held = record.applied_version >= change.version
                || (record.status() == change.status && record.pending.is_none());
            if held {
                report.in_step += 1;
                continue;
            }
            if self.suspect_self(&change).await.is_some() {
                // Most operators open at once: the off-sale write waits for
                // that to pass (see selffault).
                report.waiting.push((operator.clone(), change.version));
                continue;
            }
            let given_up = record
                .pending
                .as_ref()
                .filter(|p| p.version == change.version)
                .map(|p| p.gave_up_at.is_some());
            match given_up {
                // Still in its retries or its hold: settled here if due (the
                // lease keeps this and its own message from writing twice),
                // or left waiting; either way nothing is lost if its message
                // was.
                Some(false) => {}
                Some(true) => {
                    let now = self.clock.now();
                    let version = change.version;
                    if let Err(e) = self
                        .update(operator, |r| r.restart_given_up(version, now))
                        .await
                    {
                        report.failed.push((operator.clone(), e.to_string()));
                        continue;
                    }
                    tracing::warn!(operator = %operator, version, "sale sweep: writing a given-up change again");
                }
                None => {
                    tracing::warn!(operator = %operator, version = change.version, status = lifeboat_core::sale::status_str(change.status), "sale sweep: a change the listener never settled");
                }
            }
            let mut attempts = Vec::new();
            match self.settle(&change, &mut attempts).await {
                Ok(Progress::Settled(settled)) => {
                    let how = match &settled {
                        Settled::GaveUp { .. } => GAVE_UP_AGAIN.to_owned(),
                        other => format!("{other:?}"),
                    };
                    report.settled.push((operator.clone(), change.version, how));
                }
                Ok(Progress::Wait { .. }) => {
                    report.waiting.push((operator.clone(), change.version))
                }
                Err(e) => report.failed.push((operator.clone(), e.to_string())),
            }
        }
        let gave_up: Vec<&OperatorId> = report
            .settled
            .iter()
            .filter(|(_, _, how)| how == GAVE_UP_AGAIN)
            .map(|(o, _, _)| o)
            .collect();
        let mut sets: Vec<MetricSet> = gave_up
            .iter()
            .map(|o| {
                MetricSet::new()
                    .dimension("Operator", o.to_string())
                    .count(names::FAULTS, 1)
            })
            .collect();
        sets.extend(crate::batch::fault_total(gave_up.len() as u64));
        self.metrics.emit(&sets, self.clock.now());
        tracing::info!(
            checked = report.checked,
            in_step = report.in_step,
            settled = report.settled.len(),
            waiting = report.waiting.len(),
            failed = report.failed.len(),
            "sale sweep done"
        );
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedules_tick_is_a_sweep_and_a_batch_is_not() {
        let fixture = |name: &str| -> Value {
            let path = format!("{}/../../tests/events/{name}", env!("CARGO_MANIFEST_DIR"));
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
        };
        assert!(is_schedule(&fixture("schedule-tick.json")));
        assert!(!is_schedule(&fixture("sqs-breaker-state-changed.json")));
        assert!(!is_schedule(
            &serde_json::json!({"source": "lifeboat", "detail-type": "Scheduled Event"})
        ));
    }
}
