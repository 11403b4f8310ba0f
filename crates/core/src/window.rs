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
//!   `min_calls` calls were made in the window; while the operator refuses
//!   more than `refusal_rate` of at least `refusal_min_calls` calls in the
//!   window (neutral 4xx: 404, 400, 403, …), its refusals count here as
//!   failures too (see [`WindowConfig::judged`]);
//! * slow calls: the share of calls slower than the budget's `slow_after`, with
//!   the same minimum;
//! * consecutive timeouts: timeouts since the last success, counted back from
//!   the newest bucket to the newest bucket that holds a success;
//! * consecutive errors: fast failures (refused, 5xx, 429, …; not timeouts)
//!   since the last success, over the same lookback as the next rule: four
//!   in a row open an operator with one call a second within about three
//!   seconds. Four, not three: a healthy operator's stray 5xx (about 1 %)
//!   makes three in a row about once in a million calls, and "in a row"
//!   counts the newest calls before their slower siblings' successes land,
//!   so a marketplace making a thousand calls a second would see three in a
//!   row a few times an hour; four, about once a month;
//! * consecutive failures: failures of any kind (refused, 5xx, 429, timeouts)
//!   since the last success, counted the same way over a longer lookback
//!   (`streak_length`, a minute by default), so an operator too quiet for the
//!   rate rule's minimum still trips: five failed calls in a row within a
//!   minute, whatever its traffic.
//!
//! For an operator with a hang check (the default), timeouts are the check's
//! to judge ([`WindowConfig::evaluate_checked`]): the rules above trip at
//! once only on what they see without the timeouts, and timeouts the check
//! did not confirm trip only when the failure rate holds over the last
//! `sustained_length` and in each of its thirds, longer than a slow moment.
//!
//! The defaults open a hanging operator about one budget (3 s) after the outage
//! starts and a refusing one within a few seconds, and keep normal noise (a few
//! per cent errors, the 2.3 s answer cluster) well below every threshold.

use std::time::Duration;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use crate::request::Health;

mod rolling;
pub use rolling::RollingWindow;

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
    /// Neutral calls: 4xx answers the operator's settings do not count as
    /// failures (a refusal of the question). Not in `calls`: one refusal
    /// says nothing of the operator's health; a window mostly made of them
    /// does ([`WindowConfig::judged`]).
    #[serde(default)]
    pub refusals: u32,
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
            Health::Neutral => self.refusals += 1,
        }
    }

    pub fn add(&mut self, other: &CallCounts) {
        self.calls += other.calls;
        self.successes += other.successes;
        self.failures += other.failures;
        self.timeouts += other.timeouts;
        self.slow += other.slow;
        self.refusals += other.refusals;
    }

    /// The same calls with the timeouts left out, as if never made.
    pub fn without_timeouts(&self) -> CallCounts {
        CallCounts {
            calls: self.calls.saturating_sub(self.timeouts),
            timeouts: 0,
            ..*self
        }
    }

    /// No call at all, neutral ones included.
    pub fn is_empty(&self) -> bool {
        self.calls == 0 && self.refusals == 0
    }
}

/// How long a bucket outlives its start before the store removes it (the
/// Breaker table's TTL): far longer than any window or streak looks back.
pub const BUCKET_TTL: TimeDelta = TimeDelta::hours(1);

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
    /// Refusals (neutral 4xx) count as failures while they are more than
    /// this share of the window's calls, refusals included: an operator
    /// that suddenly refuses most questions (a broken deploy, a revoked
    /// contract) is failing, not answering. 1 turns it off.
    pub refusal_rate: f64,
    /// Refusals count as failures only once the window holds at least this
    /// many calls, refusals included: a few 404s of a quiet operator say
    /// nothing.
    pub refusal_min_calls: u32,
    /// For an operator with a hang check ([`Self::evaluate_checked`]): how
    /// far back the failure-rate rule counts timeouts the check did not
    /// confirm, the rate held in each third. Three times as long as a slow
    /// moment of a few seconds lasts, so that only an operator timing out
    /// for good trips this way. Read between `length` and `streak_length`.
    #[serde(with = "crate::budget::millis")]
    pub sustained_length: Duration,
}

impl Default for WindowConfig {
    fn default() -> Self {
        Self {
            length: Duration::from_secs(20),
            bucket: Duration::from_secs(1),
            min_calls: 20,
            failure_rate: 0.4,
            slow_rate: 0.8,
            consecutive_timeouts: 5,
            consecutive_failures: 5,
            consecutive_errors: 4,
            streak_length: Duration::from_secs(60),
            refusal_rate: 0.5,
            refusal_min_calls: 20,
            sustained_length: Duration::from_secs(30),
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
        /// Refusals counted as failures (in `rate` and `calls`), because
        /// the operator refused more than `refusal_rate` of the calls.
        #[serde(default, skip_serializing_if = "is_zero")]
        refused: u32,
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

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl std::fmt::Display for WindowVerdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WindowVerdict::FailureRate {
                rate,
                calls,
                refused: 0,
            } => {
                write!(f, "failure rate {:.0}% over {calls} calls", rate * 100.0)
            }
            WindowVerdict::FailureRate {
                rate,
                calls,
                refused,
            } => write!(
                f,
                "failure rate {:.0}% over {calls} calls, {refused} of them refused (4xx)",
                rate * 100.0
            ),
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
    /// The start of the bucket that holds `at`: in whole nanoseconds since
    /// the epoch where they fit (every instant lifeboat meets), else by
    /// chrono's truncation; the same instant either way.
    pub fn bucket_start(&self, at: DateTime<Utc>) -> DateTime<Utc> {
        let width = TimeDelta::from_std(self.bucket).unwrap_or(TimeDelta::seconds(1));
        match (width.num_nanoseconds(), at.timestamp_nanos_opt()) {
            (Some(span), Some(stamp)) if span > 0 => {
                DateTime::from_timestamp_nanos(stamp - stamp.rem_euclid(span))
            }
            _ => at.duration_trunc(width).unwrap_or(at),
        }
    }

    /// The oldest bucket start still inside the window at `now`.
    pub fn oldest_bucket(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        self.oldest_within(self.length, now)
    }

    /// The oldest bucket start any rule reads at `now`: the buckets to load.
    pub fn oldest_read(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        self.oldest_within(self.length.max(self.streak_length), now)
    }

    /// The start of the bucket after the one that holds `now - length`; the
    /// calendar's start for a window (or a bucket) reaching beyond it, as
    /// `OPERATOR_SETTINGS` may ask for (any length up to `u64::MAX` ms).
    fn oldest_within(&self, length: Duration, now: DateTime<Utc>) -> DateTime<Utc> {
        let length = TimeDelta::from_std(length).unwrap_or(TimeDelta::seconds(10));
        let width = TimeDelta::from_std(self.bucket).unwrap_or_default();
        now.checked_sub_signed(length)
            .and_then(|start| self.bucket_start(start).checked_add_signed(width))
            .unwrap_or(DateTime::<Utc>::MIN_UTC)
    }

    /// The start of the bucket after the one that holds `at`, where bucket
    /// starts are whole nanoseconds (see [`Self::bucket_start`]); `None`
    /// where they are not, or past the calendar's end.
    fn next_bucket_after(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let width = TimeDelta::from_std(self.bucket).unwrap_or(TimeDelta::seconds(1));
        match (width.num_nanoseconds(), at.timestamp_nanos_opt()) {
            (Some(span), Some(_)) if span > 0 => self.bucket_start(at).checked_add_signed(width),
            _ => None,
        }
    }

    /// Until when [`Self::oldest_bucket`] and [`Self::oldest_read`] stay
    /// what they are at `now` (exclusive); `None`: no promise.
    fn oldest_stable_until(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let until = |length: Duration| {
            let length = TimeDelta::from_std(length).unwrap_or(TimeDelta::seconds(10));
            self.next_bucket_after(now.checked_sub_signed(length)?)?
                .checked_add_signed(length)
        };
        Some(until(self.length)?.min(until(self.length.max(self.streak_length))?))
    }

    /// Decide from the buckets (any order, any age) whether to ask for a trip.
    ///
    /// One pass, newest first, without a copy when the buckets come oldest
    /// first with distinct starts (as the stores return them); any other
    /// order is sorted first.
    pub fn evaluate(&self, buckets: &[Bucket], now: DateTime<Utc>) -> Option<WindowVerdict> {
        let oldest = self.oldest_bucket(now);
        let oldest_read = self.oldest_read(now);
        let read = |b: &&Bucket| b.start >= oldest_read && b.start <= now;
        let tally = if buckets.windows(2).all(|w| w[0].start < w[1].start) {
            Tally::of(buckets.iter().rev().filter(read), oldest)
        } else {
            let mut sorted: Vec<&Bucket> = buckets.iter().filter(read).collect();
            sorted.sort_by_key(|b| std::cmp::Reverse(b.start));
            Tally::of(sorted.into_iter(), oldest)
        };
        self.verdict(&tally)
    }

    /// [`Self::evaluate`] for an operator whose timeouts a hang check
    /// judges (`hang_check` in its settings).
    ///
    /// A timeout alone does not tell a hang from a slow moment: in a few
    /// seconds of a healthy operator answering twice as slowly, its slower
    /// answers time out, often several in a row and at a busy operator
    /// enough to fill the failure-rate rule. The hang check tells them
    /// apart (a hanging operator does not answer its pings, a slow one
    /// does), so here the rules trip on timeouts only over
    /// `sustained_length`: at once on fast failures, as [`Self::evaluate`]
    /// does, and on timeouts only when the failure rate holds for longer
    /// than a slow moment lasts. `None`: the hang check decides.
    pub fn evaluate_checked(
        &self,
        buckets: &[Bucket],
        now: DateTime<Utc>,
    ) -> Option<WindowVerdict> {
        self.evaluate(buckets, now)?;
        let without_timeouts: Vec<Bucket> = buckets
            .iter()
            .map(|b| Bucket {
                start: b.start,
                counts: b.counts.without_timeouts(),
            })
            .collect();
        self.evaluate(&without_timeouts, now)
            .or_else(|| self.sustained(buckets, now))
    }

    /// The failure-rate rule, timeouts included, over `sustained_length`,
    /// held in each of its thirds: a slow moment, or two back to back,
    /// shorter than two thirds of the lookback leaves one third to the
    /// operator's ordinary answers, however many calls the moment drew (a
    /// timed-out question is not cached, so it is asked again while the
    /// moment lasts).
    fn sustained(&self, buckets: &[Bucket], now: DateTime<Utc>) -> Option<WindowVerdict> {
        const PARTS: u32 = 3;
        let lookback = self
            .sustained_length
            .clamp(self.length, self.length.max(self.streak_length));
        let oldest = self.oldest_within(lookback, now);
        // Part k (newest first) holds the buckets from the start of the
        // last (k + 1) thirds on.
        let starts: Vec<DateTime<Utc>> = (1..PARTS)
            .map(|k| self.oldest_within(lookback * k / PARTS, now))
            .collect();
        let mut parts = [CallCounts::default(); PARTS as usize];
        for bucket in buckets
            .iter()
            .filter(|b| b.start >= oldest && b.start <= now)
        {
            let part = starts
                .iter()
                .position(|start| bucket.start >= *start)
                .unwrap_or(starts.len());
            parts[part].add(&bucket.counts);
        }
        let failing = |part: &CallCounts| {
            let (judged, _) = self.judged(part);
            judged.calls > 0
                && f64::from(judged.failures.saturating_add(judged.timeouts))
                    >= self.failure_rate * f64::from(judged.calls)
        };
        if !parts.iter().all(failing) {
            return None;
        }
        let mut total = CallCounts::default();
        for part in &parts {
            total.add(part);
        }
        self.failure_rate_of(&total)
    }

    /// The failure-rate rule over `total`: failures and timeouts (and
    /// refusals, in a surge of them) over at least `min_calls` calls.
    fn failure_rate_of(&self, total: &CallCounts) -> Option<WindowVerdict> {
        let (judged, refused) = self.judged(total);
        if judged.calls == 0 || judged.calls < self.min_calls {
            return None;
        }
        let failed = judged.failures.saturating_add(judged.timeouts);
        let rate = f64::from(failed) / f64::from(judged.calls);
        (rate >= self.failure_rate).then_some(WindowVerdict::FailureRate {
            rate,
            calls: judged.calls,
            refused,
        })
    }

    /// The rules, in the order they are asked.
    fn verdict(&self, tally: &Tally) -> Option<WindowVerdict> {
        // Consecutive timeouts: newest first, until a bucket holds a success.
        if self.consecutive_timeouts > 0 && tally.timeouts_in_a_row >= self.consecutive_timeouts {
            return Some(WindowVerdict::ConsecutiveTimeouts {
                count: tally.timeouts_in_a_row,
            });
        }
        // Consecutive fast failures: the quickest sign of an operator that
        // refuses or errors, whatever its traffic.
        if self.consecutive_errors > 0 && tally.errors_in_a_row >= self.consecutive_errors {
            return Some(WindowVerdict::ConsecutiveErrors {
                count: tally.errors_in_a_row,
            });
        }
        if let Some(verdict) = self.rates(&tally.recent) {
            return Some(verdict);
        }
        // Consecutive failures of any kind, over the longer lookback: the
        // rule a quiet operator trips on.
        if self.consecutive_failures > 0 && tally.failures_in_a_row >= self.consecutive_failures {
            return Some(WindowVerdict::ConsecutiveFailures {
                count: tally.failures_in_a_row,
            });
        }
        None
    }

    /// The failure-rate and slow-call rules over the calls of the window.
    fn rates(&self, total: &CallCounts) -> Option<WindowVerdict> {
        if let Some(verdict) = self.failure_rate_of(total) {
            return Some(verdict);
        }
        if total.calls == 0 || total.calls < self.min_calls {
            return None;
        }
        let slow_rate = f64::from(total.slow) / f64::from(total.calls);
        if slow_rate >= self.slow_rate {
            return Some(WindowVerdict::SlowCalls {
                rate: slow_rate,
                calls: total.calls,
            });
        }
        None
    }

    /// The window's calls as the failure-rate rule judges them, and how
    /// many refusals it counts as failures.
    ///
    /// A refusal (a neutral 4xx) says our question was wrong, so it
    /// normally counts for nothing. But an operator that refuses more than
    /// `refusal_rate` of at least `refusal_min_calls` calls (refusals
    /// included) is not telling a few askers about sailings that do not
    /// exist: it is refusing everyone, and then every refusal in the window
    /// counts as a failed call, so the failure-rate rule can open its
    /// breaker and customers get the last good answers instead of a
    /// refusal each.
    pub fn judged(&self, total: &CallCounts) -> (CallCounts, u32) {
        let all = total.calls.saturating_add(total.refusals);
        let surge = total.refusals > 0
            && all >= self.refusal_min_calls
            && f64::from(total.refusals) > self.refusal_rate * f64::from(all);
        if !surge {
            return (*total, 0);
        }
        let judged = CallCounts {
            calls: all,
            failures: total.failures.saturating_add(total.refusals),
            refusals: 0,
            ..*total
        };
        (judged, total.refusals)
    }
}

/// What the rules read of the buckets, counted in one pass.
#[derive(Debug, Default)]
struct Tally {
    /// Timeouts since the newest bucket holding a success, within the window.
    timeouts_in_a_row: u32,
    /// Fast failures since then, within the longer lookback.
    errors_in_a_row: u32,
    /// Failures of any kind since then, within the longer lookback.
    failures_in_a_row: u32,
    /// Every call of the buckets from `oldest` (the window).
    recent: CallCounts,
}

impl Tally {
    /// `buckets` newest first, none older than the longer lookback.
    fn of<'a>(buckets: impl Iterator<Item = &'a Bucket>, oldest: DateTime<Utc>) -> Self {
        let mut tally = Tally::default();
        let mut streak = true;
        for bucket in buckets {
            let counts = &bucket.counts;
            let recent = bucket.start >= oldest;
            if recent {
                tally.recent.add(counts);
            }
            if streak && counts.successes > 0 {
                streak = false;
            } else if streak {
                if recent {
                    tally.timeouts_in_a_row =
                        tally.timeouts_in_a_row.saturating_add(counts.timeouts);
                }
                tally.errors_in_a_row = tally.errors_in_a_row.saturating_add(counts.failures);
                tally.failures_in_a_row = tally
                    .failures_in_a_row
                    .saturating_add(counts.failures + counts.timeouts);
            }
        }
        tally
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rules' mechanics on a 10-second window of at least 10 calls
    /// tripping at 50 % (the defaults before the rate rule looked back 20
    /// seconds): the numbers these tests were written with.
    fn ten_seconds() -> WindowConfig {
        WindowConfig {
            length: Duration::from_secs(10),
            min_calls: 10,
            failure_rate: 0.5,
            ..WindowConfig::default()
        }
    }
    use proptest::prelude::*;

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
    fn a_window_longer_than_the_calendar_reaches_back_to_its_start() {
        // OPERATOR_SETTINGS may give any length up to u64::MAX milliseconds;
        // found by the settings_json fuzz target (docs/fuzzing.md).
        for (length, width) in [
            (
                Duration::from_millis(10_000_000_000_000_000),
                Duration::from_secs(1),
            ),
            (
                Duration::from_secs(10),
                Duration::from_millis(9_000_000_000_000_000),
            ),
        ] {
            let cfg = WindowConfig {
                length,
                bucket: width,
                ..WindowConfig::default()
            };
            assert_eq!(cfg.oldest_bucket(at(0)), DateTime::<Utc>::MIN_UTC);
            assert_eq!(cfg.oldest_read(at(0)), DateTime::<Utc>::MIN_UTC);
            assert_eq!(cfg.evaluate(&[], at(0)), None);
            let timeouts = bucket(0, |c| many(c, Health::Timeout, 20));
            let _ = cfg.evaluate(&[timeouts], at(500));
        }
    }

    #[test]
    fn healthy_noise_does_not_trip() {
        let cfg = ten_seconds();
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
            ..ten_seconds()
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
        let cfg = ten_seconds();
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
            ..ten_seconds()
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
    fn four_errors_in_a_row_trip_and_timeouts_between_them_do_not_reset_the_count() {
        let cfg = ten_seconds();
        // One call a second: refused, a timeout, refused three times.
        let buckets = [
            bucket(0, |c| many(c, Health::Success, 1)),
            bucket(1, |c| many(c, Health::Failure, 1)),
            bucket(2, |c| many(c, Health::Timeout, 1)),
            bucket(3, |c| many(c, Health::Failure, 1)),
            bucket(4, |c| many(c, Health::Failure, 1)),
        ];
        assert_eq!(cfg.evaluate(&buckets, at(4_500)), None);
        let mut fourth = buckets.to_vec();
        fourth.push(bucket(5, |c| many(c, Health::Failure, 1)));
        assert_eq!(
            cfg.evaluate(&fourth, at(5_500)),
            Some(WindowVerdict::ConsecutiveErrors { count: 4 })
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
        // Off when set to 0 (and the five failures of any kind, the
        // timeout among them, left to the rule of their own).
        let off = WindowConfig {
            consecutive_errors: 0,
            consecutive_failures: 0,
            ..cfg
        };
        assert_eq!(off.evaluate(&fourth, at(5_500)), None);
    }

    /// A busy operator's slow moment: 8 s in which half its calls time
    /// out, the last 8 in a row, after 20 s of healthy calls.
    fn slow_moment() -> Vec<Bucket> {
        (0..28)
            .map(|s| {
                bucket(s, |c| match s {
                    20..=25 => {
                        many(c, Health::Success, 3);
                        many(c, Health::Timeout, 3);
                    }
                    26..=27 => many(c, Health::Timeout, 4),
                    _ => {
                        many(c, Health::Success, 5);
                        if s % 7 == 0 {
                            many(c, Health::Timeout, 1);
                        }
                    }
                })
            })
            .collect()
    }

    #[test]
    fn a_hang_check_judges_the_timeouts_of_a_slow_moment() {
        let cfg = WindowConfig::default();
        let moment = slow_moment();
        let now = at(27_500);
        // Without a hang check the window trips on it: 8 timeouts in a row.
        assert_eq!(
            cfg.evaluate(&moment, now),
            Some(WindowVerdict::ConsecutiveTimeouts { count: 8 })
        );
        // With one, the check decides.
        assert_eq!(cfg.evaluate_checked(&moment, now), None);
    }

    #[test]
    fn a_slow_moment_that_draws_many_calls_is_not_sustained() {
        // A quiet operator (a call a second) in two slow moments back to
        // back, 20 s in which its timed-out questions are asked again:
        // five calls a second, three of them timing out, and none cached.
        // 55 % of the last 30 s's calls failed, none in its oldest third.
        let cfg = WindowConfig::default();
        let buckets: Vec<Bucket> = (0..30)
            .map(|s| {
                bucket(s, |c| {
                    if s < 10 {
                        many(c, Health::Success, 1);
                    } else {
                        many(c, Health::Success, 2);
                        many(c, Health::Timeout, 3);
                    }
                })
            })
            .collect();
        let now = at(29_500);
        assert!(cfg.evaluate(&buckets, now).is_some());
        assert_eq!(cfg.evaluate_checked(&buckets, now), None);
    }

    #[test]
    fn with_a_hang_check_fast_failures_still_trip_at_once() {
        let cfg = WindowConfig::default();
        let mut buckets = slow_moment();
        buckets.push(bucket(28, |c| many(c, Health::Failure, 4)));
        assert_eq!(
            cfg.evaluate_checked(&buckets, at(28_500)),
            Some(WindowVerdict::ConsecutiveErrors { count: 4 })
        );
    }

    #[test]
    fn with_a_hang_check_timeouts_that_last_trip_on_the_sustained_rate() {
        let cfg = WindowConfig::default();
        // Half the calls time out, for good: from the 20th second on.
        let buckets: Vec<Bucket> = (0..60)
            .map(|s| {
                bucket(s, |c| {
                    many(c, Health::Success, 2);
                    if s >= 20 {
                        many(c, Health::Timeout, 2);
                    }
                })
            })
            .collect();
        let checked_at =
            |sec: i64| cfg.evaluate_checked(&buckets[..=sec as usize], at(sec * 1000 + 500));
        // Fourteen seconds in, the 20 s window trips on them; over the 30 s
        // lookback they are 31 %: the hang check's call.
        assert!(matches!(
            cfg.evaluate(&buckets[..=33], at(33_500)),
            Some(WindowVerdict::FailureRate { .. })
        ));
        assert_eq!(checked_at(33), None);
        // Twenty-six seconds in, the oldest third of the last 30 s holds
        // 40 % too.
        assert_eq!(checked_at(45), None);
        match checked_at(46) {
            Some(WindowVerdict::FailureRate { rate, calls, .. }) => {
                assert!((rate - 54.0 / 114.0).abs() < 1e-9, "{rate}");
                assert_eq!(calls, 114);
            }
            other => panic!("expected the sustained rate, got {other:?}"),
        }
    }

    #[test]
    fn without_timeouts_the_calls_are_as_if_never_made() {
        let mut c = CallCounts::default();
        many(&mut c, Health::Success, 2);
        many(&mut c, Health::Timeout, 3);
        many(&mut c, Health::Failure, 1);
        many(&mut c, Health::Neutral, 1);
        let left = c.without_timeouts();
        assert_eq!(
            (
                left.calls,
                left.timeouts,
                left.failures,
                left.successes,
                left.refusals
            ),
            (3, 0, 1, 2, 1)
        );
    }

    #[test]
    fn old_buckets_fall_out_of_the_window() {
        let cfg = WindowConfig {
            consecutive_errors: 0,
            ..ten_seconds()
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
        let cfg = ten_seconds();
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
    fn neutral_calls_are_counted_apart() {
        let mut c = CallCounts::default();
        c.record(Health::Neutral);
        assert_eq!(c.calls, 0);
        assert_eq!(c.refusals, 1);
        assert!(!c.is_empty());
    }

    #[test]
    fn an_operator_refusing_most_calls_trips_on_the_failure_rate() {
        // Streak rules off: the rate rule alone.
        let cfg = WindowConfig {
            consecutive_failures: 0,
            consecutive_errors: 0,
            ..ten_seconds()
        };
        // A normal share of 404s (a third) beside successes: nothing.
        let normal: Vec<Bucket> = (0..10)
            .map(|s| {
                bucket(s, |c| {
                    many(c, Health::Success, 4);
                    many(c, Health::Neutral, 2);
                })
            })
            .collect();
        assert_eq!(cfg.evaluate(&normal, at(9_500)), None);
        // Everything refused, but fewer than 20 calls in the window: nothing.
        let few = [bucket(0, |c| many(c, Health::Neutral, 19))];
        assert_eq!(cfg.evaluate(&few, at(500)), None);
        // 20 refused: they are failures now.
        let all = [bucket(0, |c| many(c, Health::Neutral, 20))];
        assert_eq!(
            cfg.evaluate(&all, at(500)),
            Some(WindowVerdict::FailureRate {
                rate: 1.0,
                calls: 20,
                refused: 20,
            })
        );
        // More than half refused beside successes: the refusals count, so
        // the failure rate is their share.
        let most = [bucket(0, |c| {
            many(c, Health::Success, 9);
            many(c, Health::Neutral, 11);
        })];
        let verdict = cfg.evaluate(&most, at(500));
        assert_eq!(
            verdict,
            Some(WindowVerdict::FailureRate {
                rate: 0.55,
                calls: 20,
                refused: 11,
            })
        );
        assert_eq!(
            verdict.map(|v| v.to_string()).as_deref(),
            Some("failure rate 55% over 20 calls, 11 of them refused (4xx)")
        );
        // Exactly half is not more than half.
        let half = [bucket(0, |c| {
            many(c, Health::Success, 10);
            many(c, Health::Neutral, 10);
        })];
        assert_eq!(cfg.evaluate(&half, at(500)), None);
        // Off at 1: a refusal is never more than every call.
        let off = WindowConfig {
            refusal_rate: 1.0,
            ..cfg
        };
        assert_eq!(off.evaluate(&all, at(500)), None);
        // The refusals leave the window with their bucket.
        assert_eq!(cfg.evaluate(&all, at(10_000)), None);
    }

    #[test]
    fn refusals_in_the_settings_and_in_the_verdict() {
        let cfg: WindowConfig =
            serde_json::from_str(r#"{"refusal_rate": 0.8, "refusal_min_calls": 50}"#).unwrap();
        assert_eq!((cfg.refusal_rate, cfg.refusal_min_calls), (0.8, 50));
        assert_eq!(cfg.min_calls, WindowConfig::default().min_calls);
        // A verdict without refusals reads as before; one with says how many.
        let plain = WindowVerdict::FailureRate {
            rate: 0.75,
            calls: 20,
            refused: 0,
        };
        let json = serde_json::to_value(&plain).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"rule": "failure_rate", "rate": 0.75, "calls": 20})
        );
        assert_eq!(
            serde_json::from_value::<WindowVerdict>(json).unwrap(),
            plain
        );
        let refused = WindowVerdict::FailureRate {
            rate: 1.0,
            calls: 25,
            refused: 25,
        };
        assert_eq!(
            serde_json::to_value(&refused).unwrap()["refused"],
            serde_json::json!(25)
        );
        // Buckets written before refusals were counted read as none.
        let old: CallCounts =
            serde_json::from_str(r#"{"calls":1,"successes":1,"failures":0,"timeouts":0,"slow":0}"#)
                .unwrap();
        assert_eq!(old.refusals, 0);
    }

    #[test]
    fn buckets_are_aligned() {
        let cfg = ten_seconds();
        assert_eq!(cfg.bucket_start(at(1_999)), at(1_000));
        assert_eq!(cfg.oldest_bucket(at(10_500)), at(1_000));
    }

    /// The window as it was first written (filter, copy, sort, a pass per
    /// rule; chrono's calendar arithmetic): what `evaluate` must still say.
    mod reference {
        use super::*;

        pub fn bucket_start(cfg: &WindowConfig, at: DateTime<Utc>) -> DateTime<Utc> {
            let width = TimeDelta::from_std(cfg.bucket).unwrap_or(TimeDelta::seconds(1));
            at.duration_trunc(width).unwrap_or(at)
        }

        pub fn oldest_within(
            cfg: &WindowConfig,
            length: Duration,
            now: DateTime<Utc>,
        ) -> DateTime<Utc> {
            let length = TimeDelta::from_std(length).unwrap_or(TimeDelta::seconds(10));
            bucket_start(cfg, now - length) + TimeDelta::from_std(cfg.bucket).unwrap_or_default()
        }

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

        pub fn evaluate(
            cfg: &WindowConfig,
            buckets: &[Bucket],
            now: DateTime<Utc>,
        ) -> Option<WindowVerdict> {
            let oldest = oldest_within(cfg, cfg.length, now);
            let oldest_read = oldest_within(cfg, cfg.length.max(cfg.streak_length), now);
            let mut read: Vec<&Bucket> = buckets
                .iter()
                .filter(|b| b.start >= oldest_read && b.start <= now)
                .collect();
            read.sort_by_key(|b| std::cmp::Reverse(b.start));
            let streak_t = streak(&read, oldest, |c| c.timeouts);
            if cfg.consecutive_timeouts > 0 && streak_t >= cfg.consecutive_timeouts {
                return Some(WindowVerdict::ConsecutiveTimeouts { count: streak_t });
            }
            let errors = streak(&read, oldest_read, |c| c.failures);
            if cfg.consecutive_errors > 0 && errors >= cfg.consecutive_errors {
                return Some(WindowVerdict::ConsecutiveErrors { count: errors });
            }
            let mut total = CallCounts::default();
            for bucket in read.iter().filter(|b| b.start >= oldest) {
                total.add(&bucket.counts);
            }
            if let Some(verdict) = cfg.rates(&total) {
                return Some(verdict);
            }
            let all = streak(&read, oldest_read, |c| c.failures + c.timeouts);
            if cfg.consecutive_failures > 0 && all >= cfg.consecutive_failures {
                return Some(WindowVerdict::ConsecutiveFailures { count: all });
            }
            None
        }
    }

    fn any_counts() -> impl Strategy<Value = CallCounts> {
        (0u32..4, 0u32..4, 0u32..4, 0u32..3, 0u32..5).prop_map(
            |(successes, failures, timeouts, slow, refusals)| CallCounts {
                calls: successes + failures + timeouts,
                successes,
                failures,
                timeouts,
                slow: slow.min(successes),
                refusals,
            },
        )
    }

    /// Window settings of every shape, odd bucket widths and lookbacks
    /// shorter than a bucket among them (also used by `rolling`'s tests).
    pub(super) fn any_config() -> impl Strategy<Value = WindowConfig> {
        (
            prop_oneof![Just(1_000u64), Just(250), Just(3_000), Just(0), 1u64..5_000],
            1u64..30_000,
            0u64..90_000,
            0u32..12,
            0u32..6,
            (
                prop_oneof![Just(0.5), Just(0.0), Just(1.0), 0.0f64..1.0],
                0u32..25,
            ),
        )
            .prop_map(
                |(bucket_ms, length_ms, streak_ms, min_calls, in_a_row, refusals)| WindowConfig {
                    bucket: Duration::from_millis(bucket_ms),
                    length: Duration::from_millis(length_ms),
                    streak_length: Duration::from_millis(streak_ms),
                    min_calls,
                    consecutive_timeouts: in_a_row,
                    consecutive_errors: in_a_row / 2,
                    consecutive_failures: in_a_row + 1,
                    refusal_rate: refusals.0,
                    refusal_min_calls: refusals.1,
                    ..ten_seconds()
                },
            )
    }

    proptest! {
        /// The one-pass window says what the first one said, for buckets in
        /// the stores' order and in any other, and the nanosecond
        /// arithmetic lands on chrono's instants.
        #[test]
        fn one_pass_evaluation_says_what_the_reference_says(
            cfg in any_config(),
            now_ms in -5_000_000i64..5_000_000,
            offsets in proptest::collection::vec((-120_000i64..2_000, any_counts()), 0..40),
            shuffle in any::<bool>(),
        ) {
            let now = at(now_ms);
            prop_assert_eq!(cfg.bucket_start(now), reference::bucket_start(&cfg, now));
            prop_assert_eq!(cfg.oldest_bucket(now), reference::oldest_within(&cfg, cfg.length, now));
            prop_assert_eq!(
                cfg.oldest_read(now),
                reference::oldest_within(&cfg, cfg.length.max(cfg.streak_length), now)
            );
            let mut buckets: Vec<Bucket> = Vec::new();
            for (offset, counts) in offsets {
                let start = cfg.bucket_start(at(now_ms + offset));
                if !buckets.iter().any(|b| b.start == start) {
                    buckets.push(Bucket { start, counts });
                }
            }
            buckets.sort_by_key(|b| b.start);
            if shuffle {
                buckets.reverse();
                let third = buckets.len() / 3;
                buckets.rotate_left(third);
            }
            prop_assert_eq!(cfg.evaluate(&buckets, now), reference::evaluate(&cfg, &buckets, now));
        }

        /// Instants far from the epoch and widths past what nanoseconds
        /// hold take chrono's arithmetic, to the same instant.
        #[test]
        fn far_instants_truncate_as_chrono_does(
            secs in -60_000_000_000i64..60_000_000_000,
            bucket_s in prop_oneof![Just(1u64), Just(60), Just(10_000_000_000), Just(0)],
        ) {
            let cfg = WindowConfig { bucket: Duration::from_secs(bucket_s), ..ten_seconds() };
            let now = DateTime::from_timestamp(secs, 0).unwrap();
            prop_assert_eq!(cfg.bucket_start(now), reference::bucket_start(&cfg, now));
        }
    }
}
