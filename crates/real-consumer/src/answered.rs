//! The question each operator last answered, kept beside its breaker so that
//! the circuit switch can probe an open breaker with it when the operator's
//! settings name no probe ([`lifeboat_core::probe::ProbeSpec::remembered`]).
//!
//! One write per operator per [`REMEMBER_EVERY`] at most from each warm
//! instance: a few writes a minute per operator however busy it is, and a
//! question never older than a minute or two when the breaker trips.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use lifeboat_core::OperatorId;
use lifeboat_core::probe::ProbeSpec;

use super::RealConsumer;

/// How often one instance writes an operator's answered question.
pub const REMEMBER_EVERY: Duration = Duration::from_secs(60);

/// When this instance last wrote each operator's answered question.
#[derive(Debug, Default)]
pub struct Remembered {
    last: Mutex<HashMap<OperatorId, DateTime<Utc>>>,
}

impl Remembered {
    /// Whether `operator`'s question is due at `now`, and if so, note it as
    /// written (a failed write waits for the next interval too: it is a
    /// convenience for the probe, never worth a retry storm).
    fn due(&self, operator: &OperatorId, now: DateTime<Utc>) -> bool {
        let every = TimeDelta::from_std(REMEMBER_EVERY).unwrap_or(TimeDelta::MAX);
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        match last.get(operator) {
            Some(at) if now.signed_duration_since(*at) < every => false,
            _ => {
                last.insert(operator.clone(), now);
                true
            }
        }
    }
}

impl RealConsumer {
    /// Keep the batch's answered questions that are due, one per operator.
    pub(super) async fn remember_answered(&self, answered: HashMap<OperatorId, ProbeSpec>) {
        let now = self.clock.now();
        for (operator, question) in answered {
            if !self.remembered.due(&operator, now) {
                continue;
            }
            if let Err(e) = self
                .breakers
                .remember_answered(&operator, &question, now)
                .await
            {
                tracing::warn!(operator = %operator, error = %e, "answered question not kept; the next one will be");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_write_per_operator_per_interval() {
        let remembered = Remembered::default();
        let (nordic, baltic) = (
            OperatorId::new("nordic").unwrap(),
            OperatorId::new("baltic").unwrap(),
        );
        let t0 = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        assert!(remembered.due(&nordic, t0));
        assert!(!remembered.due(&nordic, t0 + TimeDelta::seconds(59)));
        assert!(remembered.due(&baltic, t0 + TimeDelta::seconds(59)));
        assert!(remembered.due(&nordic, t0 + TimeDelta::seconds(60)));
    }
}
