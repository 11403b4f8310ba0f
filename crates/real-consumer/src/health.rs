//! What the batch's calls say of the operator's health: the counts go to the
//! shared failure window (which may ask for a trip, after a hang check if
//! the operator has one), and trial results to the breaker record (a failed
//! trial asks for a trip, enough successes report the trials passed).

use chrono::{DateTime, Utc};
use lifeboat_core::breaker::TripReason;
use lifeboat_core::events::{LifeboatEvent, SCHEMA_VERSION, TrialsPassed, TripRequested};
use lifeboat_core::hang::HangVerdict;
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
        let verdict = match cfg.evaluate(&buckets, now) {
            Some(verdict) => verdict,
            None => self.check_hang(operator, counts, trains).await?,
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

    /// After a batch in which calls timed out and the window let them pass,
    /// the hang check's verdict on them (lifeboat_core::hang): a hang only
    /// if the pings sent while each of them was late all went unanswered.
    /// No pings (no `hang_check` in the operator's settings): the window's.
    async fn check_hang(
        &self,
        operator: &OperatorId,
        counts: &CallCounts,
        trains: Vec<Train>,
    ) -> Option<WindowVerdict> {
        let check_timeout = trains.first()?.check_timeout;
        let mut pings = 0;
        for train in trains {
            match train.verdict().await {
                HangVerdict::Hung { pings: n } => pings += n,
                // The operator answered one of them: not a hang. The other
                // trains stop as they are dropped.
                HangVerdict::Answered | HangVerdict::Pending => {
                    tracing::info!(operator = %operator, timeouts = counts.timeouts, "hang check answered");
                    return None;
                }
            }
        }
        tracing::info!(operator = %operator, timeouts = counts.timeouts, pings, "hang check unanswered");
        Some(WindowVerdict::HangConfirmed {
            timeouts: counts.timeouts,
            check_ms: u64::try_from(check_timeout.as_millis()).unwrap_or(u64::MAX),
        })
    }

    /// Count trial results in the breaker record; report a failed round or a
    /// passed one.
    pub(super) async fn count_trials(
        &self,
        operator: &OperatorId,
        results: &[bool],
        view: Option<&BreakerRecord>,
    ) -> Vec<LifeboatEvent> {
        let Some(record) = view else {
            return Vec::new();
        };
        let needed = self
            .settings
            .for_operator(operator)
            .breaker
            .successes_to_close;
        let now = self.clock.now();
        let mut events = Vec::new();
        let mut best = None;
        for ok in results {
            match self
                .breakers
                .record_trial(operator, record.version, *ok)
                .await
            {
                Ok(Some(tally)) => best = Some(tally),
                Ok(None) => return events,
                Err(e) => {
                    tracing::warn!(operator = %operator, error = %e, "trial result not counted")
                }
            }
        }
        if results.iter().any(|ok| !ok) {
            events.push(LifeboatEvent::TripRequested(TripRequested {
                schema_version: SCHEMA_VERSION,
                operator: operator.clone(),
                observed_version: record.version,
                reason: TripReason::TrialFailed {
                    detail: "a half-open trial call failed".into(),
                },
                at: now,
            }));
        } else if let Some(tally) = best
            && tally.failures == 0
            && tally.successes >= needed
        {
            tracing::info!(operator = %operator, state = %record.state, version = record.version, successes = tally.successes, "half-open trials passed");
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
