//! What the batch's calls say of the operator's health: the counts go to the
//! shared failure window (which may ask for a trip; if the operator has a
//! hang check, timeouts trip at once only when its pings went unanswered),
//! and trial results to the breaker record (a failed trial asks for a trip,
//! enough successes report the trials passed).

use chrono::{DateTime, Utc};
use lifeboat_core::breaker::{TrialVerdict, TripReason};
use lifeboat_core::events::{LifeboatEvent, SCHEMA_VERSION, TrialsPassed, TripRequested};
use lifeboat_core::hang::HangVerdict;
use lifeboat_core::ports::{Trial, TrialTally};
use lifeboat_core::window::{CallCounts, WindowVerdict};
use lifeboat_core::{BreakerRecord, BreakerState, OperatorId};

use super::RealConsumer;
use super::train::Train;

impl RealConsumer {
    /// Add the batch's counts to the window; ask for a trip if it says so.
    pub(super) async fn update_window(
        &self,
        operator: &OperatorId,
        counts: &CallCounts,
        started: DateTime<Utc>,
        view: Option<&BreakerRecord>,
        trains: Vec<Train>,
    ) -> Option<LifeboatEvent> {
        let cfg = self.settings.for_operator(operator).window;
        let now = self.clock.now();
        if let Err(e) = self
            .window
            .add(operator, cfg.bucket_start(started), counts)
            .await
        {
            tracing::warn!(operator = %operator, error = %e, "window counts not written");
        }
        let record = view?;
        if record.state != BreakerState::Closed {
            return None;
        }
        // Only calls made since the breaker closed: the failures that opened
        // it last time must not trip it again (the streak rule looks back a
        // minute, and a probe can close the breaker within seconds).
        let since = cfg.oldest_read(now).max(record.since);
        let buckets: Vec<lifeboat_core::window::Bucket> =
            match self.window.since(operator, since).await {
                // A bucket that starts at or before the close may hold calls
                // made before it.
                Ok(b) => b.into_iter().filter(|b| b.start > record.since).collect(),
                Err(e) => {
                    tracing::warn!(operator = %operator, error = %e, "window unreadable");
                    return None;
                }
            };
        let verdict = if self.settings.for_operator(operator).hang_check.is_none() {
            cfg.evaluate(&buckets, now)?
        } else if let Some(verdict) = cfg.evaluate_checked(&buckets, now) {
            // Fast failures, or timeouts for longer than a slow moment.
            verdict
        } else {
            // Timeouts are the hang check's to judge.
            match self.check_hang(operator, counts, trains).await {
                Checked::Hung(verdict) => verdict,
                Checked::Answered => return None,
                Checked::Unusable => cfg.evaluate(&buckets, now)?,
            }
        };
        tracing::warn!(operator = %operator, state = %record.state, version = record.version, verdict = %verdict, "failure window asks for a trip");
        Some(LifeboatEvent::TripRequested(TripRequested {
            schema_version: SCHEMA_VERSION,
            operator: operator.clone(),
            observed_version: record.version,
            reason: TripReason::Window { verdict },
            at: self.clock.now(),
        }))
    }

    /// After a batch in which calls timed out, the hang check's verdict on
    /// them (lifeboat_core::hang): a hang only if the pings sent while each
    /// of them was late all went unanswered. No pings (no call of the batch
    /// was watched and late): answered, the next batch's check decides.
    async fn check_hang(
        &self,
        operator: &OperatorId,
        counts: &CallCounts,
        trains: Vec<Train>,
    ) -> Checked {
        let Some(check_timeout) = trains.first().map(|t| t.check_timeout) else {
            return Checked::Answered;
        };
        let mut pings = 0;
        for train in trains {
            match train.verdict().await {
                HangVerdict::Hung { pings: n } => pings += n,
                // The operator answered one of them: not a hang. The other
                // trains stop as they are dropped.
                HangVerdict::Answered | HangVerdict::Pending => {
                    tracing::info!(operator = %operator, timeouts = counts.timeouts, "hang check answered");
                    return Checked::Answered;
                }
                HangVerdict::Unusable { status } => {
                    tracing::warn!(operator = %operator, status, "the hang check is not a call the operator answers: its timeouts are judged by the window alone; set its hang_check to a call it answers quickly (docs/configuration.md), or to null");
                    return Checked::Unusable;
                }
            }
        }
        tracing::info!(operator = %operator, timeouts = counts.timeouts, pings, "hang check unanswered");
        Checked::Hung(WindowVerdict::HangConfirmed {
            timeouts: counts.timeouts,
            check_ms: u64::try_from(check_timeout.as_millis()).unwrap_or(u64::MAX),
        })
    }

    /// Count trial results in the breaker record; report a failed round or a
    /// passed one.
    pub(super) async fn count_trials(
        &self,
        operator: &OperatorId,
        results: &[Trial],
        view: Option<&BreakerRecord>,
    ) -> Vec<LifeboatEvent> {
        let Some(record) = view else {
            return Vec::new();
        };
        let breaker = self
            .settings
            .for_operator(operator)
            .breaker
            .round(record.opened_slow);
        let now = self.clock.now();
        let mut events = Vec::new();
        let mut best: Option<TrialTally> = None;
        let mut uncounted_failure = false;
        for trial in results {
            match self
                .breakers
                .record_trial(operator, record.version, *trial)
                .await
            {
                Ok(Some(tally)) => best = Some(tally),
                Ok(None) => return events,
                Err(e) => {
                    uncounted_failure |= *trial != Trial::Passed;
                    tracing::warn!(operator = %operator, error = %e, "trial result not counted")
                }
            }
        }
        let verdict = match best {
            Some(tally) => breaker.trial_verdict(tally.successes, tally.failures, tally.timeouts),
            None => TrialVerdict::Undecided,
        };
        // A failure the table would not count still fails the round: the
        // breaker must not close on results it never saw.
        if verdict == TrialVerdict::Failed || uncounted_failure {
            let failures = best.map_or(1, |t| t.failures.max(1));
            events.push(LifeboatEvent::TripRequested(TripRequested {
                schema_version: SCHEMA_VERSION,
                operator: operator.clone(),
                observed_version: record.version,
                reason: TripReason::TrialFailed {
                    detail: format!(
                        "{failures} half-open trial call{} failed",
                        if failures == 1 { "" } else { "s" }
                    ),
                },
                at: now,
            }));
        } else if let (TrialVerdict::Passed, Some(tally)) = (verdict, best) {
            tracing::info!(operator = %operator, state = %record.state, version = record.version, successes = tally.successes, failures = tally.failures, "half-open trials passed");
            events.push(LifeboatEvent::TrialsPassed(TrialsPassed {
                schema_version: SCHEMA_VERSION,
                operator: operator.clone(),
                observed_version: record.version,
                successes: tally.successes,
                at: now,
            }));
        }
        events
    }
}

/// What the hang check says of a batch's timeouts.
enum Checked {
    /// Every ping unanswered: trip.
    Hung(WindowVerdict),
    /// The operator answered (or nothing was watched): no trip.
    Answered,
    /// The check cannot see a hang: the window's rules, as without one.
    Unusable,
}
