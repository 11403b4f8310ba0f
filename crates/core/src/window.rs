//! The failure window: the breaker's fast path.
//!
//! Consumers count their calls per batch into one-second buckets (one atomic add
//! per batch, shared by every Lambda instance through the store, in the bucket
//! that holds the batch's start: calls are ordered by when they were made, so
//! a slow answer to a call made before an outage does not break the streak of
//! the failures made after it) and then read the last few seconds back. These
//! rules can ask for a trip:
//!
//! * failure rate: failures and timeouts over all counted calls, once at least
//!   `min_calls` calls were made in the window;
//! * slow calls: the share of calls slower than the budget's `slow_after`, with
//!   the same minimum;
//! * consecutive timeouts: timeouts since the last success, counted back from
//!   the newest bucket to the newest bucket that holds a success;
//! * consecutive errors: fast failures (refused, 5xx, 429, …; not timeouts)
//!   since the last success, over the same lookback as the next rule: three
//!   in a row open an operator with one call a second within about three
//!   seconds, while a healthy operator's stray 5xx (about 1 %) makes three in
//!   a row about once in a million calls;
//! * consecutive failures: failures of any kind (refused, 5xx, 429, timeouts)
//!   since the last success, counted the same way over a longer lookback
//!   (`streak_length`, a minute by default), so an operator too quiet for the
//!   rate rule's minimum still trips: five failed calls in a row within a
//!   minute, whatever its traffic.
//!
//! The defaults open a hanging operator about one budget (3 s) after the outage
//! starts and a refusing one within a few seconds, and keep normal noise (a few
//! per cent errors, the 2.3 s answer cluster) well below every threshold.

use std::time::Duration;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use crate::request::Health;

/// Calls counted in one bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallCounts {
    /// Every call that says something about the operator's health.
    pub calls: u32,
    pub successes: u32,
    /// Errors other than timeouts (connect, 5xx, bad payload).
    pub failures: u32,
    pub timeouts: u32,
    /// Successful but slow calls (also counted in `successes`).
    pub slow: u32,
}

impl CallCounts {
    pub fn record(&mut self, health: Health) {
        match health {
            Health::Success => {
                self.calls += 1;
                self.successes += 1;
            }
            Health::SlowSuccess => {
                self.calls += 1;
                self.successes += 1;
                self.slow += 1;
            }
            Health::Timeout => {
                self.calls += 1;
                self.timeouts += 1;
            }
            Health::Failure => {
                self.calls += 1;
                self.failures += 1;
            }
            Health::Neutral => {}
        }
    }

    pub fn add(&mut self, other: &CallCounts) {
        self.calls += other.calls;
        self.successes += other.successes;
        self.failures += other.failures;
        self.timeouts += other.timeouts;
        self.slow += other.slow;
    }

    pub fn is_empty(&self) -> bool {
        self.calls == 0
    }
}

/// One bucket of the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    pub start: DateTime<Utc>,
    pub counts: CallCounts,
}

/// Thresholds of the failure window. Configurable per operator.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WindowConfig {
    /// How far back the window looks.
    #[serde(with = "crate::budget::millis")]
    pub length: Duration,
    /// Bucket width. Counts are added to the bucket that holds the batch's start.
    #[serde(with = "crate::budget::millis")]
    pub bucket: Duration,
    /// No rate rule trips with fewer calls than this in the window.
    pub min_calls: u32,
    /// Trip when (failures + timeouts) / calls reaches this.
    pub failure_rate: f64,
    /// Trip when slow / calls reaches this.
    pub slow_rate: f64,
    /// Trip after this many timeouts with no success in between.
    pub consecutive_timeouts: u32,
    /// Trip after this many failures of any kind (timeouts included) with
    /// no success in between, within `streak_length`. 0 turns it off.
    pub consecutive_failures: u32,
    /// Trip after this many fast failures (not timeouts) with no success in
    /// between, within `streak_length`. 0 turns it off.
    pub consecutive_errors: u32,
    /// How far back `consecutive_failures` looks (at least `length`).
    #[serde(with = "crate::budget::millis")]
    pub streak_length: Duration,
}

impl Default for WindowConfig {
    fn default() -> Self {
        Self {
            length: Duration::from_secs(10),
            bucket: Duration::from_secs(1),
            min_calls: 10,
            failure_rate: 0.5,
            slow_rate: 0.8,
            consecutive_timeouts: 5,
            consecutive_failures: 5,
            consecutive_errors: 3,
            streak_length: Duration::from_secs(60),
        }
    }
}

/// Why the window asks for a trip.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "rule", rename_all = "snake_case")]
pub enum WindowVerdict {
    FailureRate {
        rate: f64,
        calls: u32,
    },
    SlowCalls {
        rate: f64,
        calls: u32,
    },
    ConsecutiveTimeouts {
        count: u32,
    },
    ConsecutiveFailures {
        count: u32,
    },
    ConsecutiveErrors {
        count: u32,
    },
    /// A call timed out and the operator's hang check had no answer either
    /// ([`crate::settings::HangCheck`]).
    HangConfirmed {
        timeouts: u32,
        check_ms: u64,
    },
}

impl std::fmt::Display for WindowVerdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WindowVerdict::FailureRate { rate, calls } => {
                write!(f, "failure rate {:.0}% over {calls} calls", rate * 100.0)
            }
            WindowVerdict::SlowCalls { rate, calls } => {
                write!(f, "slow calls {:.0}% over {calls} calls", rate * 100.0)
            }
            WindowVerdict::ConsecutiveTimeouts { count } => {
                write!(f, "{count} consecutive timeouts")
            }
            WindowVerdict::ConsecutiveFailures { count } => {
                write!(f, "{count} consecutive failed calls")
            }
            WindowVerdict::ConsecutiveErrors { count } => {
                write!(f, "{count} consecutive errors (refused, 5xx, 429, …)")
            }
            WindowVerdict::HangConfirmed { timeouts, check_ms } => write!(
                f,
                "{timeouts} timed-out call(s) and no answer to the hang check in {check_ms} ms"
            ),
        }
    }
}

impl WindowConfig {
    /// The start of the bucket that holds `at`.
    pub fn bucket_start(&self, at: DateTime<Utc>) -> DateTime<Utc> {
        let width = TimeDelta::from_std(self.bucket).unwrap_or(TimeDelta::seconds(1));
        at.duration_trunc(width).unwrap_or(at)
    }

    /// The oldest bucket start still inside the window at `now`.
    pub fn oldest_bucket(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        self.oldest_within(self.length, now)
    }

    /// The oldest bucket start any rule reads at `now`: the buckets to load.
    pub fn oldest_read(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        self.oldest_within(self.length.max(self.streak_length), now)
    }

    fn oldest_within(&self, length: Duration, now: DateTime<Utc>) -> DateTime<Utc> {
        let length = TimeDelta::from_std(length).unwrap_or(TimeDelta::seconds(10));
        self.bucket_start(now - length) + TimeDelta::from_std(self.bucket).unwrap_or_default()
    }

    /// Failures of any kind since the newest bucket that holds a success,
    /// newest first, in buckets from `oldest` (sorted newest first).
    fn streak(
        buckets: &[&Bucket],
        oldest: DateTime<Utc>,
        count: impl Fn(&CallCounts) -> u32,
    ) -> u32 {
        let mut streak = 0u32;
        for bucket in buckets.iter().take_while(|b| b.start >= oldest) {
            if bucket.counts.successes > 0 {
                break;
            }
            streak = streak.saturating_add(count(&bucket.counts));
        }
        streak
    }

    /// Decide from the buckets (any order, any age) whether to ask for a trip.
    pub fn evaluate(&self, buckets: &[Bucket], now: DateTime<Utc>) -> Option<WindowVerdict> {
        let oldest = self.oldest_bucket(now);
        let oldest_read = self.oldest_read(now);
        let mut read: Vec<&Bucket> = buckets
            .iter()
            .filter(|b| b.start >= oldest_read && b.start <= now)
            .collect();
        read.sort_by_key(|b| std::cmp::Reverse(b.start));

        // Consecutive timeouts: newest first, until a bucket holds a success.
        let streak = Self::streak(&read, oldest, |c| c.timeouts);
        if self.consecutive_timeouts > 0 && streak >= self.consecutive_timeouts {
            return Some(WindowVerdict::ConsecutiveTimeouts { count: streak });
        }
        // Consecutive fast failures: the quickest sign of an operator that
        // refuses or errors, whatever its traffic.
        let errors = Self::streak(&read, oldest_read, |c| c.failures);
        if self.consecutive_errors > 0 && errors >= self.consecutive_errors {
            return Some(WindowVerdict::ConsecutiveErrors { count: errors });
        }
        if let Some(verdict) = self.rates(&read, oldest) {
            return Some(verdict);
        }
        // Consecutive failures of any kind, over the longer lookback: the
        // rule a quiet operator trips on.
        let streak = Self::streak(&read, oldest_read, |c| c.failures + c.timeouts);
        if self.consecutive_failures > 0 && streak >= self.consecutive_failures {
            return Some(WindowVerdict::ConsecutiveFailures { count: streak });
        }
        None
    }

    /// The failure-rate and slow-call rules over the buckets from `oldest`.
    fn rates(&self, read: &[&Bucket], oldest: DateTime<Utc>) -> Option<WindowVerdict> {
        let recent: Vec<&&Bucket> = read.iter().filter(|b| b.start >= oldest).collect();

        let mut total = CallCounts::default();
        for bucket in &recent {
            total.add(&bucket.counts);
        }
        if total.calls == 0 || total.calls < self.min_calls {
            return None;
        }
        let calls = f64::from(total.calls);
        let failure_rate = f64::from(total.failures + total.timeouts) / calls;
        if failure_rate >= self.failure_rate {
            return Some(WindowVerdict::FailureRate {
                rate: failure_rate,
                calls: total.calls,
            });
        }
        let slow_rate = f64::from(total.slow) / calls;
        if slow_rate >= self.slow_rate {
            return Some(WindowVerdict::SlowCalls {
                rate: slow_rate,
                calls: total.calls,
            });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_700_000_000_000 + ms).unwrap()
    }

    fn bucket(sec: i64, f: impl FnOnce(&mut CallCounts)) -> Bucket {
        let mut counts = CallCounts::default();
        f(&mut counts);
        Bucket {
            start: at(sec * 1000),
            counts,
        }
    }

    fn many(counts: &mut CallCounts, health: Health, n: u32) {
        for _ in 0..n {
            counts.record(health);
        }
    }

    #[test]
    fn healthy_noise_does_not_trip() {
        let cfg = WindowConfig::default();
        let buckets: Vec<Bucket> = (0..10)
            .map(|s| {
                bucket(s, |c| {
                    many(c, Health::Success, 18);
                    many(c, Health::SlowSuccess, 5);
                    many(c, Health::Failure, 1);
                })
            })
            .collect();
        assert_eq!(cfg.evaluate(&buckets, at(9_500)), None);
    }

    #[test]
    fn failure_rate_needs_the_minimum_number_of_calls() {
        // (Failures in a row alone would trip on the streak rules.)
        let cfg = WindowConfig {
            consecutive_failures: 0,
            consecutive_errors: 0,
            ..WindowConfig::default()
        };
        let few = [bucket(0, |c| many(c, Health::Failure, 9))];
        assert_eq!(cfg.evaluate(&few, at(500)), None);
        let enough = [bucket(0, |c| many(c, Health::Failure, 10))];
        assert!(matches!(
            cfg.evaluate(&enough, at(500)),
            Some(WindowVerdict::FailureRate { calls: 10, .. })
        ));
    }

    #[test]
    fn consecutive_timeouts_stop_at_the_last_success() {
        let cfg = WindowConfig::default();
        let buckets = [
            bucket(0, |c| many(c, Health::Timeout, 4)),
            bucket(1, |c| many(c, Health::Success, 1)),
            bucket(2, |c| many(c, Health::Timeout, 4)),
        ];
        assert_eq!(cfg.evaluate(&buckets, at(2_500)), None);
        let buckets = [
            bucket(1, |c| many(c, Health::Success, 1)),
            bucket(2, |c| many(c, Health::Timeout, 3)),
            bucket(3, |c| many(c, Health::Timeout, 2)),
        ];
        assert_eq!(
            cfg.evaluate(&buckets, at(3_500)),
            Some(WindowVerdict::ConsecutiveTimeouts { count: 5 })
        );
    }

    #[test]
    fn a_quiet_operators_failures_in_a_row_trip_within_the_streak() {
        // One fast failure every 12 s: never ten calls in the window, never
        // two in one bucket; the fifth in a row within a minute trips (the
        // errors rule, tested on its own, off here).
        let cfg = WindowConfig {
            consecutive_errors: 0,
            ..WindowConfig::default()
        };
        let buckets: Vec<Bucket> = (0..5)
            .map(|i| bucket(i * 12, |c| many(c, Health::Failure, 1)))
            .collect();
        assert_eq!(cfg.evaluate(&buckets[..4], at(36_500)), None);
        assert_eq!(
            cfg.evaluate(&buckets, at(48_500)),
            Some(WindowVerdict::ConsecutiveFailures { count: 5 })
        );
        // A success in between starts the count again.
        let mut with_success = buckets.clone();
        with_success.push(bucket(30, |c| many(c, Health::Success, 1)));
        assert_eq!(cfg.evaluate(&with_success, at(48_500)), None);
        // Failures older than the streak's minute do not count.
        assert_eq!(cfg.evaluate(&buckets, at(60_500)), None);
        // Off when set to 0.
        let off = WindowConfig {
            consecutive_failures: 0,
            ..cfg
        };
        assert_eq!(off.evaluate(&buckets, at(48_500)), None);
        // The buckets to read reach back the whole streak.
        assert_eq!(cfg.oldest_read(at(60_500)), at(1_000));
    }

    #[test]
    fn three_errors_in_a_row_trip_and_timeouts_between_them_do_not_reset_the_count() {
        let cfg = WindowConfig::default();
        // One call a second: refused, a timeout, refused, refused.
        let buckets = [
            bucket(0, |c| many(c, Health::Success, 1)),
            bucket(1, |c| many(c, Health::Failure, 1)),
            bucket(2, |c| many(c, Health::Timeout, 1)),
            bucket(3, |c| many(c, Health::Failure, 1)),
        ];
        assert_eq!(cfg.evaluate(&buckets, at(3_500)), None);
        let mut third = buckets.to_vec();
        third.push(bucket(4, |c| many(c, Health::Failure, 1)));
        assert_eq!(
            cfg.evaluate(&third, at(4_500)),
            Some(WindowVerdict::ConsecutiveErrors { count: 3 })
        );
        // A busy operator's stray errors sit beside successes: no streak.
        let busy: Vec<Bucket> = (0..10)
            .map(|s| {
                bucket(s, |c| {
                    many(c, Health::Success, 9);
                    many(c, Health::Failure, 1);
                })
            })
            .collect();
        assert_eq!(cfg.evaluate(&busy, at(9_500)), None);
        let off = WindowConfig {
            consecutive_errors: 0,
            ..cfg
        };
        assert_eq!(off.evaluate(&third, at(4_500)), None);
    }

    #[test]
    fn old_buckets_fall_out_of_the_window() {
        let cfg = WindowConfig {
            consecutive_errors: 0,
            ..WindowConfig::default()
        };
        let buckets = [bucket(0, |c| many(c, Health::Failure, 50))];
        assert!(matches!(
            cfg.evaluate(&buckets, at(9_999)),
            Some(WindowVerdict::FailureRate { .. })
        ));
        // Out of the rate's 10 s; still failures in a row for a minute.
        assert_eq!(
            cfg.evaluate(&buckets, at(10_000)),
            Some(WindowVerdict::ConsecutiveFailures { count: 50 })
        );
        assert_eq!(cfg.evaluate(&buckets, at(60_000)), None);
    }

    #[test]
    fn mostly_slow_calls_trip() {
        let cfg = WindowConfig::default();
        let buckets = [bucket(0, |c| {
            many(c, Health::SlowSuccess, 9);
            many(c, Health::Success, 1);
        })];
        assert!(matches!(
            cfg.evaluate(&buckets, at(100)),
            Some(WindowVerdict::SlowCalls { .. })
        ));
    }

    #[test]
    fn neutral_calls_are_not_counted() {
        let mut c = CallCounts::default();
        c.record(Health::Neutral);
        assert!(c.is_empty());
    }

    #[test]
    fn buckets_are_aligned() {
        let cfg = WindowConfig::default();
        assert_eq!(cfg.bucket_start(at(1_999)), at(1_000));
        assert_eq!(cfg.oldest_bucket(at(10_500)), at(1_000));
    }
}
