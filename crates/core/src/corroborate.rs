//! What the failure window must show before a signal from outside the
//! switch opens a closed breaker.
//!
//! Two signals ask the switch to open a closed breaker: a trip request (the
//! real consumer's failure window said so) and the errors alarm in ALARM.
//! Both can be sent by others than the consumers: a direct invoke of the
//! switch with a trip- or alarm-shaped payload, or anyone with
//! `cloudwatch:PutMetricData` driving the alarm's metric. So the switch
//! asks the failure window itself, from the buckets every consumer instance
//! writes to the Breaker table:
//!
//! - a trip request opens only when the window's own rules say trip on the
//!   buckets since the breaker closed ([`trip`]); a trip by the hang check
//!   (which only the consumer that sent the pings can see) opens only when
//!   the buckets hold at least the timeouts it names. A request refused
//!   while the operator is really failing is sent again by the next batch.
//! - an ALARM opens only when the last minute's buckets since the close
//!   hold at least [`BreakerConfig::alarm_failed_calls`] failed calls and a
//!   failure rate of at least [`BreakerConfig::alarm_failure_rate`] ([`alarm`]):
//!   looser than the window's rules, so the alarm still catches a window
//!   tuned too loose or a trip request that was lost, but far above a
//!   healthy operator's background of errors.
//!
//! The pure rules live here; the switch reads the buckets
//! (`circuit-switch`'s `apply`).

use chrono::{DateTime, TimeDelta, Utc};

use crate::breaker::BreakerConfig;
use crate::window::{Bucket, CallCounts, WindowConfig, WindowVerdict};

/// How far back the alarm's evidence is counted: the alarm compares two
/// 10 s periods and reaches the switch up to about half a minute after its
/// failures were counted.
pub const ALARM_LOOKBACK: TimeDelta = TimeDelta::seconds(60);

/// Why a signal does not open the breaker: what the window showed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct NotCorroborated(pub String);

/// The oldest bucket start the switch reads to check a signal for a breaker
/// closed since `closed_since`: the window's own lookback and the alarm's,
/// and nothing from before the close (the failures that opened it last
/// time must not count again).
pub fn read_since(
    window: &WindowConfig,
    closed_since: DateTime<Utc>,
    now: DateTime<Utc>,
) -> DateTime<Utc> {
    window
        .oldest_read(now)
        .min(now - ALARM_LOOKBACK)
        .max(closed_since)
}

/// Whether the buckets agree with a trip request's `claim` for a breaker
/// closed since `closed_since`.
pub fn trip(
    claim: &WindowVerdict,
    window: &WindowConfig,
    buckets: &[Bucket],
    closed_since: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<(), NotCorroborated> {
    let since_close: Vec<Bucket> = buckets
        .iter()
        .filter(|b| b.start > closed_since)
        .copied()
        .collect();
    if let WindowVerdict::HangConfirmed { timeouts, .. } = claim {
        let newest = window.oldest_read(now);
        let seen: u32 = since_close
            .iter()
            .filter(|b| b.start >= newest && b.start <= now)
            .map(|b| b.counts.timeouts)
            .sum();
        return if *timeouts > 0 && seen >= *timeouts {
            Ok(())
        } else {
            Err(NotCorroborated(format!(
                "trip request ({claim}) not borne out: the failure window holds {seen} timeouts since the breaker closed"
            )))
        };
    }
    match window.evaluate(&since_close, now) {
        Some(_) => Ok(()),
        None => Err(NotCorroborated(format!(
            "trip request ({claim}) not borne out: the failure window does not trip on {}",
            shown(&total(&since_close, window.oldest_read(now), now))
        ))),
    }
}

/// Whether the buckets agree with the errors alarm in ALARM for a breaker
/// closed since `closed_since`.
pub fn alarm(
    breaker: &BreakerConfig,
    buckets: &[Bucket],
    closed_since: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<(), NotCorroborated> {
    if breaker.alarm_failed_calls == 0 {
        return Ok(());
    }
    let seen = total(
        &buckets
            .iter()
            .filter(|b| b.start > closed_since)
            .copied()
            .collect::<Vec<_>>(),
        now - ALARM_LOOKBACK,
        now,
    );
    let failed = seen.failures.saturating_add(seen.timeouts);
    let rate = if seen.calls == 0 {
        0.0
    } else {
        f64::from(failed) / f64::from(seen.calls)
    };
    if failed >= breaker.alarm_failed_calls && rate >= breaker.alarm_failure_rate {
        Ok(())
    } else {
        Err(NotCorroborated(format!(
            "alarm not borne out: the failure window's last minute holds {} (needs {} failed calls and a rate of {:.0} %)",
            shown(&seen),
            breaker.alarm_failed_calls,
            breaker.alarm_failure_rate * 100.0
        )))
    }
}

/// The counts of the buckets starting in `[oldest, now]`.
fn total(buckets: &[Bucket], oldest: DateTime<Utc>, now: DateTime<Utc>) -> CallCounts {
    let mut sum = CallCounts::default();
    for bucket in buckets
        .iter()
        .filter(|b| b.start >= oldest && b.start <= now)
    {
        sum.add(&bucket.counts);
    }
    sum
}

fn shown(c: &CallCounts) -> String {
    format!(
        "{} calls, {} failures, {} timeouts, {} slow, {} refusals",
        c.calls, c.failures, c.timeouts, c.slow, c.refusals
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Health;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + s, 0).unwrap()
    }

    /// `n` calls of `health` in the bucket of second `s`.
    fn bucket(s: i64, calls: &[(Health, u32)]) -> Bucket {
        let mut counts = CallCounts::default();
        for (health, n) in calls {
            for _ in 0..*n {
                counts.record(*health);
            }
        }
        Bucket {
            start: t(s),
            counts,
        }
    }

    fn healthy(from: i64, to: i64) -> Vec<Bucket> {
        (from..to)
            .map(|s| {
                let failures = u32::from(s % 10 == 0);
                bucket(s, &[(Health::Success, 9), (Health::Failure, failures)])
            })
            .collect()
    }

    #[test]
    fn a_trip_opens_only_when_the_window_trips_on_its_own_buckets() {
        let w = WindowConfig::default();
        let claim = WindowVerdict::ConsecutiveErrors { count: 4 };
        // A healthy operator: 1 failure in 90 calls a second apart.
        let calm = healthy(0, 60);
        let refused = trip(&claim, &w, &calm, t(-100), t(60)).unwrap_err();
        assert!(refused.0.contains("not borne out"), "{refused}");
        assert!(refused.0.contains("failures"), "{refused}");

        // The operator fails every call for 5 s: the window trips.
        let mut failing = healthy(0, 55);
        failing.extend((55..60).map(|s| bucket(s, &[(Health::Failure, 10)])));
        assert_eq!(trip(&claim, &w, &failing, t(-100), t(60)), Ok(()));

        // The same failures from before the breaker closed do not count.
        assert!(trip(&claim, &w, &failing, t(59), t(60)).is_err());
    }

    #[test]
    fn a_hang_trip_needs_the_timeouts_it_names() {
        let w = WindowConfig::default();
        let claim = WindowVerdict::HangConfirmed {
            timeouts: 2,
            check_ms: 1000,
        };
        let mut buckets = healthy(0, 59);
        buckets.push(bucket(59, &[(Health::Timeout, 1)]));
        assert!(trip(&claim, &w, &buckets, t(-100), t(60)).is_err());
        buckets.push(bucket(60, &[(Health::Timeout, 1)]));
        assert_eq!(trip(&claim, &w, &buckets, t(-100), t(60)), Ok(()));
        let none = WindowVerdict::HangConfirmed {
            timeouts: 0,
            check_ms: 1000,
        };
        assert!(trip(&none, &w, &buckets, t(-100), t(60)).is_err());
    }

    #[test]
    fn an_alarm_opens_only_on_a_minute_of_failures_above_the_background() {
        let b = BreakerConfig::default();
        // Ten calls a second, one failure in ten seconds: 6 failed calls
        // in the last minute, past the count but far under the rate.
        let calm = healthy(0, 60);
        let refused = alarm(&b, &calm, t(-100), t(60)).unwrap_err();
        assert!(refused.0.contains("needs 5 failed calls"), "{refused}");

        let mut failing = healthy(0, 50);
        failing.extend((50..60).map(|s| bucket(s, &[(Health::Timeout, 10)])));
        assert_eq!(alarm(&b, &failing, t(-100), t(60)), Ok(()));
        // Failures older than the lookback, or than the close, do not count.
        assert!(alarm(&b, &failing, t(-100), t(130)).is_err());
        assert!(alarm(&b, &failing, t(60), t(60)).is_err());
        // A quiet operator: four failed calls out of four are too few.
        let quiet = vec![bucket(55, &[(Health::Failure, 4)])];
        assert!(alarm(&b, &quiet, t(-100), t(60)).is_err());

        let trusting = BreakerConfig {
            alarm_failed_calls: 0,
            ..b
        };
        assert_eq!(alarm(&trusting, &calm, t(-100), t(60)), Ok(()));
    }

    #[test]
    fn the_read_covers_both_lookbacks_and_stops_at_the_close() {
        let w = WindowConfig::default();
        assert_eq!(read_since(&w, t(-1000), t(100)), t(40));
        assert_eq!(read_since(&w, t(90), t(100)), t(90));
        let long = WindowConfig {
            streak_length: std::time::Duration::from_secs(120),
            ..w
        };
        assert_eq!(read_since(&long, t(-1000), t(100)), t(-19));
    }
}
