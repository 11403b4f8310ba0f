//! What the batch's calls say of the operator's health: the counts go to the
//! shared failure window (which may ask for a trip, after a hang check if
//! the operator has one), and trial results to the breaker record (a failed
//! trial asks for a trip, enough successes report the trials passed).

use chrono::{DateTime, Utc};
use lifeboat_core::breaker::TripReason;
use lifeboat_core::events::{LifeboatEvent, SCHEMA_VERSION, TrialsPassed, TripRequested};
use lifeboat_core::request::CallClass;
use lifeboat_core::window::{CallCounts, WindowVerdict};
use lifeboat_core::{BreakerRecord, BreakerState, OperatorId};

use super::RealConsumer;

impl RealConsumer {
    /// Add the batch's counts to the window; ask for a trip if it says so.
    pub(super) async fn update_window(
        &self,
        operator: &OperatorId,
        counts: &CallCounts,
        started: DateTime<Utc>,
        view: Option<&BreakerRecord>,
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
            None => self.check_hang(operator, counts).await?,
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

    /// After a batch with a timed-out call that the window let pass, ask the
    /// operator's hang check (if its settings have one): no answer in time,
    /// or a failure, confirms a hang (lifeboat_core::settings::HangCheck).
    async fn check_hang(
        &self,
        operator: &OperatorId,
        counts: &CallCounts,
    ) -> Option<WindowVerdict> {
        let settings = self.settings.for_operator(operator);
        let check = settings
            .hang_check
            .as_ref()
            .filter(|_| counts.timeouts > 0)?;
        let result = self
            .operator
            .call(&check.call(operator, self.clock.now()))
            .await;
        // Only "nothing answers" confirms a hang: no answer in time, no
        // connection, a 5xx. A 4xx (a gateway without the route, a rate
        // limit) or an unreadable body says the API is there.
        let hung = matches!(
            result.class,
            CallClass::Timeout | CallClass::Connect | CallClass::ServerError { .. }
        );
        tracing::info!(operator = %operator, timeouts = counts.timeouts, duration_ms = u64::try_from(result.elapsed.as_millis()).unwrap_or(u64::MAX), class = ?result.class, "hang check");
        hung.then(|| WindowVerdict::HangConfirmed {
            timeouts: counts.timeouts,
            check_ms: u64::try_from(check.timeout.as_millis()).unwrap_or(u64::MAX),
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
