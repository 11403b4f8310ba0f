//! A breaker's timings and half-open bounds ([`BreakerConfig`], set per
//! operator in `OPERATOR_SETTINGS`' `breaker` block) and what a round's
//! counted trials say ([`TrialVerdict`]): the numbers [`super::decide`]
//! reads, apart from the state machine itself.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Breaker timings and trial bounds. Configurable per operator.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BreakerConfig {
    /// First open period (W).
    #[serde(with = "crate::budget::millis")]
    pub open_base: Duration,
    /// The open period doubles after each failed half-open round, up to this.
    #[serde(with = "crate::budget::millis")]
    pub open_max: Duration,
    /// Up to this fraction is taken off each open period, so operators and
    /// rounds do not line up.
    pub jitter: f64,
    /// Trial calls admitted in one half-open round, across all instances.
    pub trial_calls: u32,
    /// Trial successes that close the breaker.
    pub successes_to_close: u32,
    /// Trial successes that close a breaker the slow-call rule opened, in
    /// a row: there a slow answer fails the round ([`Self::round`]). A
    /// brownout answers some calls quickly (the demo's, three in ten), so
    /// two quick answers in a row say little (one round in eleven) and
    /// probes every 10 s make many rounds; five say much (one in four
    /// hundred), while an operator that is well again answers them in a
    /// round or two.
    pub slow_successes_to_close: u32,
    /// Timed-out trials a half-open round bears: it fails at the next one,
    /// or at any error. A healthy operator in a slow moment times out one
    /// call in twenty; a round that failed on one such timeout kept a
    /// recovered operator open for another probe gap or two. Errors (a
    /// brownout's 5xx) still fail the round at once.
    pub trial_timeouts_allowed: u32,
    /// A half-open round without a verdict for this long counts as failed.
    #[serde(with = "crate::budget::millis")]
    pub half_open_timeout: Duration,
    /// While open, the switch probes the operator at most this often (with
    /// the operator's `probe` call; none without one). 0 turns probes off.
    #[serde(with = "crate::budget::millis")]
    pub probe_every: Duration,
    /// The errors alarm in ALARM opens a closed breaker only when the
    /// failure window's last minute holds at least this many failed calls
    /// (errors and timeouts) ([`crate::corroborate::alarm`]). 0 trusts the
    /// alarm as it comes.
    pub alarm_failed_calls: u32,
    /// ... and at least this share of its calls failed.
    pub alarm_failure_rate: f64,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            open_base: Duration::from_secs(30),
            open_max: Duration::from_secs(600),
            jitter: 0.2,
            trial_calls: 3,
            successes_to_close: 2,
            slow_successes_to_close: 5,
            trial_timeouts_allowed: 1,
            half_open_timeout: Duration::from_secs(60),
            probe_every: Duration::from_secs(10),
            alarm_failed_calls: 5,
            alarm_failure_rate: 0.1,
        }
    }
}

/// What a half-open round's counted trials say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrialVerdict {
    /// Enough successes, no error and no more timeouts than allowed: close.
    Passed,
    /// An error, more timeouts than allowed, or no slot left to pass with:
    /// reopen.
    Failed,
    /// Neither yet.
    Undecided,
}

impl BreakerConfig {
    /// The bounds of a half-open round of a breaker the slow-call rule
    /// opened (`opened_slow`) or not: after a slow-call trip the round asks
    /// `slow_successes_to_close` successes, with slots for them and the
    /// timeouts it bears; otherwise these bounds as they are.
    pub fn round(&self, opened_slow: bool) -> BreakerConfig {
        if !opened_slow {
            return *self;
        }
        let successes = self.successes_to_close.max(self.slow_successes_to_close);
        BreakerConfig {
            successes_to_close: successes,
            trial_calls: self
                .trial_calls
                .max(successes.saturating_add(self.trial_timeouts_allowed)),
            ..*self
        }
    }

    /// The verdict of a round with `successes` and `failures` counted,
    /// `timeouts` of the failures timed out.
    pub fn trial_verdict(&self, successes: u32, failures: u32, timeouts: u32) -> TrialVerdict {
        let errors = failures.saturating_sub(timeouts);
        if errors > 0 || timeouts > self.trial_timeouts_allowed {
            TrialVerdict::Failed
        } else if successes >= self.successes_to_close {
            TrialVerdict::Passed
        } else if successes.saturating_add(failures) >= self.trial_calls {
            // Every slot used and too few successes: settings whose trial
            // calls cannot hold the successes and the allowed failures.
            TrialVerdict::Failed
        } else {
            TrialVerdict::Undecided
        }
    }

    /// The open period after `failed_trials` failed rounds, with jitter drawn
    /// from `unit` (a number in `[0, 1)`).
    pub fn open_period(&self, failed_trials: u32, unit: f64) -> Duration {
        let doubled = self
            .open_base
            .checked_mul(1u32.checked_shl(failed_trials.min(31)).unwrap_or(u32::MAX))
            .unwrap_or(self.open_max);
        let capped = doubled.min(self.open_max);
        let off = self.jitter.clamp(0.0, 1.0) * unit.clamp(0.0, 1.0);
        // mul_f64 goes through seconds as an f64: past 2^53 ns it may round
        // up, over the cap.
        capped.mul_f64(1.0 - off).min(capped)
    }
}
