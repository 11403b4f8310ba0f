//! The failure window kept as running sums, for a breaker that counts its
//! calls in one process: each call and each evaluation costs a few adds
//! instead of a pass over the window's buckets. It says what
//! [`WindowConfig::evaluate`] says of the same buckets (the proptest below
//! holds it to that). Instants are compared as nanoseconds since the epoch,
//! converted once per call; chrono's calendar arithmetic is left to
//! instants and settings that nanoseconds do not hold.

use std::collections::VecDeque;
use std::ops::Range;

use chrono::{DateTime, NaiveDate, NaiveTime, TimeDelta, Timelike, Utc};

use super::{Bucket, CallCounts, Tally, WindowConfig, WindowVerdict};
use crate::request::Health;

/// The buckets of one operator's calls, oldest first, with the sums the
/// rules read kept up to date as calls are counted and time moves on.
///
/// Time only moves forward: an evaluation at an instant before the latest
/// one seen is made at the latest. A call made before the newest bucket (an
/// answer that took long) goes into its own bucket, at the cost of one
/// recount.
#[derive(Debug, Clone)]
pub struct RollingWindow {
    config: WindowConfig,
    /// The config's spans in nanoseconds, where they are.
    spans: Option<Spans>,
    /// Oldest first, distinct starts; none older than the longer lookback.
    buckets: VecDeque<Bucket>,
    /// The first bucket inside the window (`length`).
    recent_first: usize,
    /// The first bucket after the newest one holding a success: the streak.
    streak_first: usize,
    /// Every call of `buckets[recent_first..]`.
    recent: CallCounts,
    /// Fast failures, and failures of any kind, in `buckets[streak_first..]`.
    streak_errors: u32,
    streak_failures: u32,
    /// Timeouts in the streak's buckets inside the window.
    streak_timeouts: u32,
    /// Calls in buckets starting at or before this are not counted.
    forgotten_through: Option<DateTime<Utc>>,
    latest: Option<DateTime<Utc>>,
    /// The oldest bucket start inside the window at `latest`, and the oldest
    /// any rule reads ([`WindowConfig::oldest_bucket`], `oldest_read`).
    oldest: DateTime<Utc>,
    oldest_read: DateTime<Utc>,
    /// `latest` in nanoseconds, where `edges_until` is set.
    latest_ns: i64,
    /// Until when (exclusive, in nanoseconds) the window's edges stay where
    /// `latest` put them: the clock can move that far without touching a
    /// bucket. `i64::MIN`: no promise.
    edges_until: i64,
    /// The instants of the newest bucket: a call in it goes in without
    /// any time arithmetic. Empty when there is none (or no promise).
    newest: Range<i64>,
    day: Midnight,
    /// The last evaluation said nothing, and every change since was a
    /// success or a neutral call in the newest bucket, which cannot make it
    /// say anything (see [`Self::count_in_newest`]).
    quiet: bool,
}

/// An instant as nanoseconds since the epoch, where it is one: `None`
/// outside i64's 584 years and for a leap second (which shares its
/// nanoseconds with the next second). Ordered as the instants are.
fn nanos(at: DateTime<Utc>) -> Option<i64> {
    if at.timestamp_subsec_nanos() >= 1_000_000_000 {
        return None;
    }
    at.timestamp_nanos_opt()
}

/// The last day an instant was converted on, and its midnight in
/// nanoseconds: an instant of that day is its midnight plus its time of
/// day, without the calendar arithmetic of [`nanos`].
#[derive(Debug, Clone, Copy)]
struct Midnight {
    date: NaiveDate,
    nanos: Option<i64>,
}

impl Midnight {
    /// [`nanos`]`(at)`.
    #[inline]
    fn nanos(&mut self, at: DateTime<Utc>) -> Option<i64> {
        let (date, time) = (at.naive_utc().date(), at.naive_utc().time());
        if time.nanosecond() >= 1_000_000_000 {
            return None;
        }
        if date != self.date {
            *self = Midnight {
                date,
                nanos: nanos(date.and_time(NaiveTime::MIN).and_utc()),
            };
        }
        let since_midnight = i64::from(time.num_seconds_from_midnight()) * 1_000_000_000
            + i64::from(time.nanosecond());
        match self.nanos {
            Some(midnight) => midnight.checked_add(since_midnight),
            None => nanos(at),
        }
    }
}

/// The bucket width and the two lookbacks in nanoseconds, as
/// [`WindowConfig`]'s arithmetic reads them, for a width of at least a
/// nanosecond: its instants, found without the calendar.
#[derive(Debug, Clone, Copy)]
struct Spans {
    bucket: i64,
    length: i64,
    lookback: i64,
}

impl Spans {
    fn of(config: &WindowConfig) -> Option<Self> {
        let span = |length| {
            TimeDelta::from_std(length)
                .unwrap_or(TimeDelta::seconds(10))
                .num_nanoseconds()
        };
        Some(Self {
            bucket: TimeDelta::from_std(config.bucket)
                .ok()?
                .num_nanoseconds()
                .filter(|&width| width > 0)?,
            length: span(config.length)?,
            lookback: span(config.length.max(config.streak_length))?,
        })
    }

    /// [`WindowConfig::bucket_start`].
    fn bucket_start(&self, at: i64) -> i64 {
        at - at.rem_euclid(self.bucket)
    }

    /// The start of the bucket after the one that holds `now - length`.
    fn oldest_within(&self, length: i64, now: i64) -> Option<i64> {
        self.bucket_start(now.checked_sub(length)?)
            .checked_add(self.bucket)
    }
}

impl RollingWindow {
    pub fn new(config: WindowConfig) -> Self {
        Self {
            config,
            spans: Spans::of(&config),
            buckets: VecDeque::new(),
            recent_first: 0,
            streak_first: 0,
            recent: CallCounts::default(),
            streak_errors: 0,
            streak_failures: 0,
            streak_timeouts: 0,
            forgotten_through: None,
            latest: None,
            oldest: DateTime::<Utc>::MIN_UTC,
            oldest_read: DateTime::<Utc>::MIN_UTC,
            latest_ns: i64::MIN,
            edges_until: i64::MIN,
            newest: 0..0,
            day: Midnight {
                date: NaiveDate::MIN,
                nanos: None,
            },
            quiet: false,
        }
    }

    /// Count a call made at `at`.
    #[inline]
    pub fn record(&mut self, health: Health, at: DateTime<Utc>) {
        let ns = self.day.nanos(at);
        // The common case: a call in the newest bucket, the edges unmoved.
        if let Some(ns) = ns
            && ns < self.edges_until
            && self.newest.contains(&ns)
        {
            self.tick(at, ns);
            self.count_in_newest(health);
            return;
        }
        self.record_elsewhere(health, at, ns);
    }

    /// [`Self::record`] off the fast path: time arithmetic, maybe a new
    /// bucket or a recount.
    fn record_elsewhere(&mut self, health: Health, at: DateTime<Utc>, ns: Option<i64>) {
        self.quiet = false;
        self.advance(at, ns);
        if ns.is_some_and(|ns| self.newest.contains(&ns)) {
            self.count_in_newest(health);
            return;
        }
        let start = self.config.bucket_start(at);
        if self.forgotten_through.is_some_and(|t| start <= t) {
            return;
        }
        if start < self.oldest_read {
            return;
        }
        match self.buckets.back() {
            Some(newest) if newest.start == start => {}
            Some(newest) if newest.start > start => {
                let index = self.buckets.partition_point(|b| b.start < start);
                if self.buckets[index].start != start {
                    self.buckets.insert(
                        index,
                        Bucket {
                            start,
                            counts: CallCounts::default(),
                        },
                    );
                }
                self.buckets[index].counts.record(health);
                self.recount();
                return;
            }
            _ => {
                self.buckets.push_back(Bucket {
                    start,
                    counts: CallCounts::default(),
                });
                self.find_newest();
                self.leave_window();
            }
        }
        self.count_in_newest(health);
    }

    /// What the rules say at `now` (or at the latest instant seen, if later).
    #[inline]
    pub fn evaluate(&mut self, now: DateTime<Utc>) -> Option<WindowVerdict> {
        match self.day.nanos(now) {
            Some(ns) if ns < self.edges_until => self.tick(now, ns),
            ns => self.advance(now, ns),
        }
        if self.quiet {
            return None;
        }
        let verdict = self.config.verdict(&Tally {
            timeouts_in_a_row: self.streak_timeouts,
            errors_in_a_row: self.streak_errors,
            failures_in_a_row: self.streak_failures,
            recent: self.recent,
        });
        self.quiet = verdict.is_none();
        verdict
    }

    /// Forget the calls in buckets starting at or before `since`, now and
    /// later: the real consumer reads only buckets that start after the
    /// breaker last closed.
    pub fn forget_through(&mut self, since: DateTime<Utc>) {
        // Never less than before: what was forgotten stays forgotten.
        let since = self.forgotten_through.map_or(since, |t| t.max(since));
        self.forgotten_through = Some(since);
        self.buckets.retain(|b| b.start > since);
        if self.latest.is_some() {
            self.recount();
        }
    }

    /// The buckets held, oldest first.
    pub fn buckets(&self) -> impl Iterator<Item = &Bucket> {
        self.buckets.iter()
    }

    /// Move the clock to `now` (`ns` in nanoseconds), before `edges_until`.
    #[inline]
    fn tick(&mut self, now: DateTime<Utc>, ns: i64) {
        if ns > self.latest_ns {
            self.latest_ns = ns;
            self.latest = Some(now);
        }
    }

    /// Move the clock to `now` (`ns`: [`nanos`]`(now)`; never back) and
    /// drop what it leaves behind.
    fn advance(&mut self, now: DateTime<Utc>, ns: Option<i64>) {
        if let Some(ns) = ns
            && ns < self.edges_until
        {
            return self.tick(now, ns);
        }
        if self.latest.is_some_and(|latest| latest >= now) {
            return;
        }
        self.latest = Some(now);
        self.quiet = false;
        self.move_edges(now, ns);
        self.leave_window();
        while self
            .buckets
            .front()
            .is_some_and(|b| b.start < self.oldest_read)
        {
            let Some(gone) = self.buckets.pop_front() else {
                break;
            };
            if self.streak_first == 0 {
                self.streak_errors = self.streak_errors.saturating_sub(gone.counts.failures);
                self.streak_failures = self
                    .streak_failures
                    .saturating_sub(gone.counts.failures + gone.counts.timeouts);
                if self.recent_first == 0 {
                    self.streak_timeouts =
                        self.streak_timeouts.saturating_sub(gone.counts.timeouts);
                }
            }
            if self.recent_first == 0 {
                remove(&mut self.recent, &gone.counts);
            }
            self.streak_first = self.streak_first.saturating_sub(1);
            self.recent_first = self.recent_first.saturating_sub(1);
        }
        if self.buckets.is_empty() {
            self.newest = 0..0;
        }
    }

    /// The window's edges at `now` (`ns` in nanoseconds), and until when
    /// they hold: [`WindowConfig::oldest_bucket`], `oldest_read` and
    /// `oldest_stable_until`, in nanoseconds where they are.
    fn move_edges(&mut self, now: DateTime<Utc>, ns: Option<i64>) {
        let in_nanos = self.spans.zip(ns).and_then(|(spans, now)| {
            let oldest = spans.oldest_within(spans.length, now)?;
            let oldest_read = spans.oldest_within(spans.lookback, now)?;
            let until = oldest
                .checked_add(spans.length)?
                .min(oldest_read.checked_add(spans.lookback)?);
            Some((oldest, oldest_read, until))
        });
        if let (Some(now), Some((oldest, oldest_read, until))) = (ns, in_nanos) {
            self.oldest = DateTime::from_timestamp_nanos(oldest);
            self.oldest_read = DateTime::from_timestamp_nanos(oldest_read);
            (self.latest_ns, self.edges_until) = (now, until);
            return;
        }
        self.oldest = self.config.oldest_bucket(now);
        self.oldest_read = self.config.oldest_read(now);
        let until = self.config.oldest_stable_until(now).and_then(nanos);
        (self.latest_ns, self.edges_until) = match (ns, until) {
            (Some(now), Some(until)) => (now, until),
            _ => (i64::MIN, i64::MIN),
        };
    }

    /// The instants of the newest bucket, from its start (empty where they
    /// are not nanoseconds).
    fn find_newest(&mut self) {
        self.newest = self
            .buckets
            .back()
            .and_then(|b| {
                let start = nanos(b.start)?;
                let end = match self.spans {
                    Some(spans) => spans.bucket_start(start).checked_add(spans.bucket)?,
                    None => nanos(self.config.next_bucket_after(b.start)?)?,
                };
                Some(start..end)
            })
            .unwrap_or(0..0);
    }

    /// Move the window's first bucket past those older than it.
    fn leave_window(&mut self) {
        while let Some(bucket) = self.buckets.get(self.recent_first) {
            if bucket.start >= self.oldest {
                break;
            }
            remove(&mut self.recent, &bucket.counts);
            if self.recent_first >= self.streak_first {
                self.streak_timeouts = self.streak_timeouts.saturating_sub(bucket.counts.timeouts);
            }
            self.recent_first += 1;
        }
    }

    /// Count a call in the newest bucket.
    ///
    /// A success cannot make the rules say anything they did not: it ends
    /// every streak, and lowers both rates once the window holds enough
    /// calls for the rate rules to read it (a smaller quotient rounds to no
    /// more), unless the window holds refusals (it can bring them to
    /// `refusal_min_calls`). A neutral call changes nothing but the share
    /// of refusals, so it keeps the window quiet only outside it.
    #[inline]
    fn count_in_newest(&mut self, health: Health) {
        let newest = self.buckets.len() - 1;
        let in_streak = newest >= self.streak_first;
        let recent = newest >= self.recent_first;
        self.quiet &= match health {
            Health::Success => {
                !recent
                    || (self.recent.calls >= self.config.min_calls.max(1)
                        && self.recent.refusals == 0)
            }
            Health::Neutral => !recent,
            Health::SlowSuccess | Health::Failure | Health::Timeout => false,
        };
        self.buckets[newest].counts.record(health);
        if recent {
            self.recent.record(health);
        }
        if !in_streak {
            return;
        }
        match health {
            Health::Success | Health::SlowSuccess => {
                self.streak_first = self.buckets.len();
                self.streak_errors = 0;
                self.streak_failures = 0;
                self.streak_timeouts = 0;
            }
            Health::Failure => {
                self.streak_errors = self.streak_errors.saturating_add(1);
                self.streak_failures = self.streak_failures.saturating_add(1);
            }
            Health::Timeout => {
                self.streak_failures = self.streak_failures.saturating_add(1);
                if recent {
                    self.streak_timeouts = self.streak_timeouts.saturating_add(1);
                }
            }
            Health::Neutral => {}
        }
    }

    /// Every sum again from the buckets, at `latest`.
    fn recount(&mut self) {
        self.quiet = false;
        let oldest_read = self.oldest_read;
        self.buckets.retain(|b| b.start >= oldest_read);
        self.recent_first = self.buckets.partition_point(|b| b.start < self.oldest);
        self.streak_first = self
            .buckets
            .iter()
            .rposition(|b| b.counts.successes > 0)
            .map_or(0, |i| i + 1);
        self.find_newest();
        self.recent = CallCounts::default();
        self.streak_errors = 0;
        self.streak_failures = 0;
        self.streak_timeouts = 0;
        for (i, bucket) in self.buckets.iter().enumerate() {
            let c = &bucket.counts;
            if i >= self.recent_first {
                self.recent.add(c);
            }
            if i >= self.streak_first {
                self.streak_errors = self.streak_errors.saturating_add(c.failures);
                self.streak_failures = self.streak_failures.saturating_add(c.failures + c.timeouts);
                if i >= self.recent_first {
                    self.streak_timeouts = self.streak_timeouts.saturating_add(c.timeouts);
                }
            }
        }
    }
}

fn remove(sum: &mut CallCounts, gone: &CallCounts) {
    sum.calls = sum.calls.saturating_sub(gone.calls);
    sum.successes = sum.successes.saturating_sub(gone.successes);
    sum.failures = sum.failures.saturating_sub(gone.failures);
    sum.timeouts = sum.timeouts.saturating_sub(gone.timeouts);
    sum.slow = sum.slow.saturating_sub(gone.slow);
    sum.refusals = sum.refusals.saturating_sub(gone.refusals);
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The rules' mechanics on a 10-second window of at least 10 calls
    /// tripping at 50 % (the defaults before the rate rule looked back 20
    /// seconds): the numbers these tests were written with.
    fn ten_seconds() -> WindowConfig {
        WindowConfig {
            length: std::time::Duration::from_secs(10),
            min_calls: 10,
            failure_rate: 0.5,
            ..WindowConfig::default()
        }
    }
    use crate::window::tests::any_config;

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_700_000_000_000 + ms).unwrap()
    }

    /// What one step of a run does.
    #[derive(Debug, Clone)]
    enum Step {
        /// A call `ago` ms before the clock (0: now), after the clock moved on.
        Call { gap: i64, ago: i64, health: Health },
        /// At `back` ms before the clock (earlier than the latest instant
        /// seen: evaluated at that latest).
        Evaluate { gap: i64, back: i64 },
        /// Through `back` ms before the clock.
        Forget { gap: i64, back: i64 },
    }

    fn any_health() -> impl Strategy<Value = Health> {
        prop_oneof![
            4 => Just(Health::Success),
            1 => Just(Health::SlowSuccess),
            3 => Just(Health::Failure),
            3 => Just(Health::Timeout),
            1 => Just(Health::Neutral),
        ]
    }

    fn any_step() -> impl Strategy<Value = Step> {
        let gap = prop_oneof![4 => 0i64..400, 1 => 0i64..20_000];
        prop_oneof![
            8 => (gap.clone(), prop_oneof![6 => Just(0i64), 1 => 0i64..70_000], any_health())
                .prop_map(|(gap, ago, health)| Step::Call { gap, ago, health }),
            3 => (gap.clone(), prop_oneof![3 => Just(0i64), 1 => 0i64..5_000])
                .prop_map(|(gap, back)| Step::Evaluate { gap, back }),
            1 => (gap, prop_oneof![1 => Just(0i64), 1 => 0i64..30_000])
                .prop_map(|(gap, back)| Step::Forget { gap, back }),
        ]
    }

    proptest! {
        /// After any run of calls (in order and late), evaluations and
        /// forgets, the running sums say what `evaluate` says of every
        /// bucket counted after the last forget.
        #[test]
        fn running_sums_say_what_evaluate_says(
            cfg in any_config(),
            steps in proptest::collection::vec(any_step(), 0..150),
        ) {
            let mut rolling = RollingWindow::new(cfg);
            let mut all: Vec<Bucket> = Vec::new();
            let mut forgotten: Option<DateTime<Utc>> = None;
            let mut clock = 0i64;
            let mut latest: Option<DateTime<Utc>> = None;
            for step in steps {
                match step {
                    Step::Call { gap, ago, health } => {
                        clock += gap;
                        let when = at(clock - ago);
                        rolling.record(health, when);
                        latest = latest.max(Some(when));
                        let start = cfg.bucket_start(when);
                        if forgotten.is_some_and(|f| start <= f) {
                            continue;
                        }
                        match all.iter_mut().find(|b| b.start == start) {
                            Some(b) => b.counts.record(health),
                            None => {
                                let mut counts = CallCounts::default();
                                counts.record(health);
                                all.push(Bucket { start, counts });
                            }
                        }
                    }
                    Step::Evaluate { gap, back } => {
                        clock += gap;
                        let asked = at(clock - back);
                        let now = latest.map_or(asked, |l| l.max(asked));
                        latest = Some(now);
                        all.sort_by_key(|b| b.start);
                        let kept: Vec<Bucket> = all
                            .iter()
                            .filter(|b| forgotten.is_none_or(|f| b.start > f))
                            .copied()
                            .collect();
                        prop_assert_eq!(rolling.evaluate(asked), cfg.evaluate(&kept, now));
                    }
                    Step::Forget { gap, back } => {
                        clock += gap;
                        rolling.forget_through(at(clock - back));
                        forgotten = forgotten.max(Some(at(clock - back)));
                    }
                }
            }
        }
    }

    #[test]
    fn five_timeouts_in_a_row_trip_and_a_success_resets_them() {
        let mut w = RollingWindow::new(ten_seconds());
        for i in 0..4 {
            w.record(Health::Timeout, at(i * 100));
        }
        assert_eq!(w.evaluate(at(400)), None);
        w.record(Health::Success, at(450));
        w.record(Health::Timeout, at(1_100));
        assert_eq!(w.evaluate(at(1_100)), None);
        for i in 0..4 {
            w.record(Health::Timeout, at(1_200 + i * 100));
        }
        assert_eq!(
            w.evaluate(at(1_600)),
            Some(WindowVerdict::ConsecutiveTimeouts { count: 5 })
        );
        // Ten seconds on, the timeouts are out of the window but still
        // failures in a row within the minute's lookback; a minute on, gone.
        assert_eq!(
            w.evaluate(at(12_000)),
            Some(WindowVerdict::ConsecutiveFailures { count: 5 })
        );
        assert_eq!(w.evaluate(at(70_000)), None);
        assert_eq!(w.buckets().count(), 0);
    }
}
