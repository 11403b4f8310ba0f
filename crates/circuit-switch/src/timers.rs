//! Timers and probes: how an open breaker reaches half-open, and a half-open
//! round its verdict, without waiting for customers.

use chrono::DateTime;
use lifeboat_core::breaker::{Input, TrialVerdict, TripReason};
use lifeboat_core::ports::Trial;
use lifeboat_core::probe::{BreakerTimer, ProbeSpec, next_wake};
use lifeboat_core::request::Health;
use lifeboat_core::{BreakerRecord, BreakerState, OperatorId};

use crate::{CircuitSwitch, SwitchError, SwitchReport};

impl CircuitSwitch {
    /// A timer came due for `timer.operator` at `timer.version`: end the open
    /// period if it is over, otherwise probe (or wait again); end a half-open
    /// round that ran out of time.
    pub(crate) async fn on_timer(
        &self,
        timer: &BreakerTimer,
        report: &mut SwitchReport,
    ) -> Result<(), SwitchError> {
        let operator = &timer.operator;
        let Some(record) = self.breakers.load(operator).await? else {
            return Ok(());
        };
        if record.version != timer.version {
            tracing::debug!(operator = %operator, version = record.version, timer = timer.version, "timer of an older version dropped");
            return Ok(());
        }
        let now = self.clock.now();
        match record.state {
            BreakerState::Open if record.open_until.is_none_or(|until| now >= until) => {
                let decision = self
                    .apply(operator, &Input::Tick, Some(Some(record)))
                    .await?;
                report.decisions.push(decision);
            }
            BreakerState::Open if self.probes(operator) => {
                if !self.claim_probe(&record, now).await {
                    return Ok(());
                }
                let (health, detail) = self.probe(operator, report).await;
                if health.trial(record.opened_slow) == Some(Trial::Passed) {
                    tracing::info!(operator = %operator, state = %record.state, version = record.version, detail, "probe answered");
                    let input = Input::ProbeAnswered {
                        observed_version: record.version,
                    };
                    let decision = self.apply(operator, &input, None).await?;
                    report.decisions.push(decision);
                } else {
                    tracing::info!(operator = %operator, state = %record.state, version = record.version, detail, "probe failed or answered slowly; still open");
                    self.arm(&record).await;
                }
            }
            // Early (a duplicate, or probes turned off since): wait again.
            BreakerState::Open => self.arm(&record).await,
            BreakerState::HalfOpen => {
                let decision = self
                    .apply(operator, &Input::Tick, Some(Some(record)))
                    .await?;
                report.decisions.push(decision);
            }
            _ => {}
        }
        Ok(())
    }

    /// For every transition of this invocation (and those it leads to): set
    /// the timer of an open or half-open breaker, and run the half-open
    /// round's trials with the probe where the operator has one.
    /// An operator whose follow-up fails is reported and the others still
    /// followed up; its timer is then the tick's to set again.
    pub(crate) async fn follow_up(&self, report: &mut SwitchReport) {
        let mut next = 0;
        while next < report.decisions.len() {
            let decision = report.decisions[next].clone();
            next += 1;
            if !decision.changed {
                continue;
            }
            let followed = match decision.to {
                BreakerState::HalfOpen if self.probes(&decision.operator) => {
                    self.run_trials(&decision.operator, decision.version, report)
                        .await
                }
                BreakerState::Open | BreakerState::HalfOpen => {
                    match self.breakers.load(&decision.operator).await {
                        Ok(Some(record)) if record.version == decision.version => {
                            self.arm(&record).await;
                            Ok(())
                        }
                        Ok(_) => Ok(()),
                        Err(e) => Err(e.into()),
                    }
                }
                _ => Ok(()),
            };
            if let Err(e) = followed {
                report.skip(&decision.operator, &e);
            }
        }
    }

    /// The half-open round at `version`, with the probe as its trial calls:
    /// slots claimed like a consumer's, results counted in the store, and the
    /// verdict decided here.
    pub(crate) async fn run_trials(
        &self,
        operator: &OperatorId,
        version: u64,
        report: &mut SwitchReport,
    ) -> Result<(), SwitchError> {
        let opened_slow = match self.breakers.load(operator).await? {
            Some(record) if record.version == version => record.opened_slow,
            _ => return Ok(()),
        };
        let cfg = self
            .settings
            .for_operator(operator)
            .breaker
            .round(opened_slow);
        for _ in 0..cfg.trial_calls {
            match self
                .breakers
                .claim_trial(operator, version, cfg.trial_calls)
                .await
            {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    tracing::warn!(operator = %operator, version, error = %e, "trial slot not claimed");
                    break;
                }
            }
            let (health, detail) = self.probe(operator, report).await;
            let trial = match health.trial(opened_slow) {
                Some(trial) => trial,
                // Says nothing, and another try would say the same: leave
                // the round's other slots to customers' calls.
                None => {
                    tracing::warn!(operator = %operator, version, detail, "probe answered neither yes nor no: check the probe in OPERATOR_SETTINGS");
                    break;
                }
            };
            let tally = match self.breakers.record_trial(operator, version, trial).await {
                Ok(Some(tally)) => tally,
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(operator = %operator, version, error = %e, "trial result not counted");
                    break;
                }
            };
            let input = match cfg.trial_verdict(tally.successes, tally.failures, tally.timeouts) {
                TrialVerdict::Failed => Input::Trip {
                    reason: TripReason::TrialFailed { detail },
                    observed_version: version,
                },
                TrialVerdict::Passed => Input::TrialsPassed {
                    observed_version: version,
                },
                TrialVerdict::Undecided => continue,
            };
            let decision = self.apply(operator, &input, None).await?;
            report.decisions.push(decision);
            return Ok(());
        }
        // No verdict from our own trials (slots taken by customers' calls,
        // or neutral answers): the round's timer ends it if nobody does.
        if let Some(record) = self.breakers.load(operator).await?
            && record.version == version
        {
            self.arm(&record).await;
        }
        Ok(())
    }

    /// Whether the tick leaves `record` to its timer: an open breaker that is
    /// probed on timers, unless its timer is overdue by a whole probe gap
    /// (lost), so the operator still sees one call per gap.
    pub(crate) fn timer_owns(&self, record: &BreakerRecord) -> bool {
        if record.state != BreakerState::Open
            || self.timers.is_none()
            || !self.probes(&record.operator)
        {
            return false;
        }
        let gap = self
            .settings
            .for_operator(&record.operator)
            .breaker
            .probe_every;
        let overdue = record
            .open_until
            .and_then(|until| until.checked_add_signed(chrono::TimeDelta::from_std(gap).ok()?));
        overdue.is_some_and(|overdue| self.clock.now() < overdue)
    }

    /// Whether the probe of `record` (open, probed on timers) is overdue by
    /// two gaps: no probe claimed for two gaps since the last one (or since
    /// it opened), so its timer was lost. A second timer set then collapses
    /// into one chain: the loser of a probe claim sets no timer.
    pub(crate) fn probe_overdue(&self, record: &BreakerRecord) -> bool {
        let gap = self
            .settings
            .for_operator(&record.operator)
            .breaker
            .probe_every;
        let last = record.probed_at.unwrap_or(record.since);
        chrono::TimeDelta::from_std(gap.saturating_mul(2))
            .ok()
            .and_then(|two_gaps| last.checked_add_signed(two_gaps))
            .is_some_and(|overdue| self.clock.now() > overdue)
    }

    /// Claim the probe of `record`'s open period at `now`, so a duplicated
    /// timer probes once. `false`: another invocation probed within the last
    /// half gap (this timer is its duplicate, and sets no timer of its own).
    /// A store that cannot say is not a claim either: the timer is set again
    /// and the next one probes.
    async fn claim_probe(&self, record: &BreakerRecord, now: DateTime<chrono::Utc>) -> bool {
        let gap = self
            .settings
            .for_operator(&record.operator)
            .breaker
            .probe_every;
        let last_before = chrono::TimeDelta::from_std(gap / 2)
            .ok()
            .and_then(|half| now.checked_sub_signed(half))
            .unwrap_or(now);
        match self
            .breakers
            .claim_probe(&record.operator, record.version, now, last_before)
            .await
        {
            Ok(true) => true,
            Ok(false) => {
                tracing::info!(operator = %record.operator, version = record.version, "probe already made for this gap: duplicate timer dropped");
                false
            }
            Err(e) => {
                tracing::warn!(operator = %record.operator, version = record.version, error = %e, "probe not claimed; trying at the next timer");
                self.arm(record).await;
                false
            }
        }
    }

    /// Whether `operator` may be probed: a prober that knows it, and probes
    /// not turned off (`probe_every` 0). What it is probed with is
    /// [`CircuitSwitch::probe_spec`]'s answer, which may still be none.
    pub(crate) fn probes(&self, operator: &OperatorId) -> bool {
        let settings = self.settings.for_operator(operator);
        self.prober.as_ref().is_some_and(|p| p.knows(operator))
            && !settings.breaker.probe_every.is_zero()
    }

    /// The call `operator` is probed with: the probe in its settings, else
    /// the question it last answered, kept by the real consumer
    /// ([`lifeboat_core::probe::ProbeSpec::remembered`]), so that a stack
    /// deployed with empty `OperatorSettings` probes every operator too.
    /// `None`: not probed, or nothing answered yet (or not readable now);
    /// the open period then ends on its timer.
    pub(crate) async fn probe_spec(&self, operator: &OperatorId) -> Option<ProbeSpec> {
        if !self.probes(operator) {
            return None;
        }
        if let Some(spec) = &self.settings.for_operator(operator).probe {
            return Some(spec.clone());
        }
        match self.breakers.answered(operator).await {
            Ok(answered) => answered,
            Err(e) => {
                tracing::warn!(operator = %operator, error = %e, "answered question unreadable: not probed this time");
                None
            }
        }
    }

    /// One probe call, with what it says of the operator's health.
    pub(crate) async fn probe(
        &self,
        operator: &OperatorId,
        report: &mut SwitchReport,
    ) -> (Health, String) {
        let settings = self.settings.for_operator(operator);
        let (Some(prober), Some(spec)) = (&self.prober, self.probe_spec(operator).await) else {
            return (
                Health::Neutral,
                "no probe: none configured and no answered question kept".to_owned(),
            );
        };
        let budget = settings.budgets.for_operation(spec.operation);
        let call = spec.call(operator, self.clock.now(), budget);
        let result = prober.call(&call).await;
        report.probe_calls += 1;
        (
            result.class.health(&settings.failure_statuses),
            result.detail,
        )
    }

    /// Set the timer that wakes the switch for `record`, if it waits for one.
    /// A timer not set is logged: the tick still ends the period, later.
    pub(crate) async fn arm(&self, record: &BreakerRecord) {
        let Some(timers) = &self.timers else {
            return;
        };
        let cfg = self.settings.for_operator(&record.operator).breaker;
        let probing =
            record.state == BreakerState::Open && self.probe_spec(&record.operator).await.is_some();
        let Some(due) = next_wake(record, &cfg, probing, self.clock.now()) else {
            return;
        };
        let timer = BreakerTimer {
            operator: record.operator.clone(),
            version: record.version,
            due,
        };
        match timers.set(&timer).await {
            Ok(()) => {
                tracing::debug!(operator = %record.operator, state = %record.state, version = record.version, due = %due, "timer set")
            }
            Err(e) => {
                tracing::warn!(operator = %record.operator, state = %record.state, version = record.version, error = %e, "timer not set: the tick ends the period")
            }
        }
    }
}
