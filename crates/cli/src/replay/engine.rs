//! One configuration replayed over recorded calls: the arrivals and the
//! operator's own answer times go through the budgets, the failure window,
//! the CloudWatch alarm's periods and the breaker of `lifeboat_core`, and
//! what each customer got is counted.
//!
//! A recorded call is what the operator would have done with a question at
//! that moment: answered after `duration_ms`, failed after it, or not
//! answered within the recording's budget (a timeout: its answer time is only
//! known to be longer). Under a configuration the call is made only when the
//! breaker lets it through; its budget cuts it short; its result feeds the
//! detectors at the time it ends.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use lifeboat_core::breaker::{
    AlarmState, BreakerConfig, BreakerRecord, Decision, Input, TripReason, decide,
};
use lifeboat_core::request::Health;
use lifeboat_core::settings::Settings;
use lifeboat_core::window::{Bucket, CallCounts};
use lifeboat_core::{BreakerState, OperatorId};
use serde::{Deserialize, Serialize};

pub use super::outages::{OUTAGE_MERGE, OUTAGE_MIN_CALLS, Outage, outages, quantile};
use crate::ops::calls::{CallOutcome, CallRecord};

/// How long an invocation that calls nobody takes (the original system's
/// answer time with the breaker open), and the invocation's own time on top
/// of an operator call.
pub const FALLBACK_MS: f64 = 140.0;

/// The CloudWatch alarm on failed calls, as the replay evaluates it: `ALARM`
/// when each of the last `evaluation_periods` periods of `period_s` seconds
/// held at least `threshold` failed calls and, with `rate`, at least that
/// share of the period's calls failed (an error-rate alarm).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlarmModel {
    pub period_s: u32,
    pub evaluation_periods: u32,
    pub threshold: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
}

/// One configuration: operator settings (the `OPERATOR_SETTINGS` format),
/// the alarm, and whether lifeboat's own detector (the failure window)
/// runs.
#[derive(Debug, Clone)]
pub struct ReplayConfig {
    pub name: String,
    pub settings: Settings,
    pub alarm: Option<AlarmModel>,
    pub fast_detector: bool,
}

/// What customers got.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Customers {
    pub live: u64,
    pub fresh: u64,
    pub last_good: u64,
    pub unavailable: u64,
}

/// The figures of one configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConfigFigures {
    /// Durations of the operator-calling invocations (calls made, plus
    /// [`FALLBACK_MS`] for answers without a call), milliseconds.
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub mean_ms: f64,
    /// Median on the days with an outage.
    pub outage_day_median_ms: Option<f64>,
    /// Calls that failed or timed out, of the calls made.
    pub failure_rate: f64,
    /// Median time from an outage's start to the breaker opening; `None`
    /// when it never opened during one.
    pub detection_s: Option<f64>,
    /// Outages during which the breaker opened, of all outages.
    pub outages_detected: usize,
    pub outages: usize,
    /// Operator calls made while the breaker was open (probes) or half-open
    /// (trials).
    pub calls_while_open: u64,
    pub calls: u64,
    pub openings: u64,
    pub customers: Customers,
}

/// A call in flight: when it ends, for whom, and how.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Pending {
    done: DateTime<Utc>,
    started: DateTime<Utc>,
    operator: usize,
    /// The breaker version of the trial round it was claimed in.
    trial: Option<u64>,
    ok: bool,
    health: HealthKey,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum HealthKey {
    Success,
    Slow,
    Timeout,
    Failure,
}

impl HealthKey {
    fn health(self) -> Health {
        match self {
            HealthKey::Success => Health::Success,
            HealthKey::Slow => Health::SlowSuccess,
            HealthKey::Timeout => Health::Timeout,
            HealthKey::Failure => Health::Failure,
        }
    }
}

/// One operator's breaker, window and alarm during a replay.
struct OperatorState {
    id: OperatorId,
    record: BreakerRecord,
    buckets: BTreeMap<DateTime<Utc>, CallCounts>,
    /// Per alarm period: failed calls, calls.
    alarm_failures: BTreeMap<i64, (u32, u32)>,
    alarm_state: AlarmState,
    next_probe: Option<DateTime<Utc>>,
    /// When each question was last answered.
    answered: HashMap<String, DateTime<Utc>>,
}

/// Replay `calls` (sorted by time) under `config`.
pub fn replay(calls: &[CallRecord], config: &ReplayConfig) -> ConfigFigures {
    run(calls, config).0
}

/// The invocation durations (ms) of a replay, in call order.
pub fn durations(calls: &[CallRecord], config: &ReplayConfig) -> Vec<f64> {
    run(calls, config).1.into_iter().map(|(_, d)| d).collect()
}

fn run(calls: &[CallRecord], config: &ReplayConfig) -> (ConfigFigures, Vec<(DateTime<Utc>, f64)>) {
    let truth = outages(calls);
    let mut operators: Vec<OperatorState> = Vec::new();
    let mut index: HashMap<OperatorId, usize> = HashMap::new();
    let mut pending: BinaryHeap<Reverse<Pending>> = BinaryHeap::new();
    let mut durations: Vec<(DateTime<Utc>, f64)> = Vec::with_capacity(calls.len());
    let mut tally = Tally::default();
    let mut opened: Vec<(usize, DateTime<Utc>, BreakerState)> = Vec::new();
    let mut alarm_clock = None::<i64>;

    for (n, call) in calls.iter().enumerate() {
        let op = *index.entry(call.operator.clone()).or_insert_with(|| {
            operators.push(OperatorState {
                id: call.operator.clone(),
                record: BreakerRecord::initial(call.operator.clone(), call.at),
                buckets: BTreeMap::new(),
                alarm_failures: BTreeMap::new(),
                alarm_state: AlarmState::Ok,
                next_probe: None,
                answered: HashMap::new(),
            });
            operators.len() - 1
        });
        advance(
            call.at,
            config,
            &mut operators,
            &mut pending,
            &mut alarm_clock,
            &mut opened,
            &mut tally,
            &calls[n..],
        );
        let settings = config.settings.for_operator(&call.operator);
        let state = &mut operators[op];
        let key = call.question_key();
        let last = state.answered.get(&key).copied();
        let age = |limit: Duration| {
            last.is_some_and(|at| (call.at - at).to_std().is_ok_and(|a| a <= limit))
        };
        if age(settings.cache.recent) && !settings.cache.recent.is_zero() {
            tally.customers.fresh += 1;
            continue;
        }
        let trial = match state.record.state {
            BreakerState::Closed | BreakerState::ForcedClosed => Some(None),
            BreakerState::HalfOpen if state.record.may_claim_trial(&settings.breaker) => {
                state.record.trials_claimed += 1;
                Some(Some(state.record.version))
            }
            _ => None,
        };
        let Some(trial) = trial else {
            durations.push((call.at, FALLBACK_MS));
            if age(settings.cache.last_good) && !settings.cache.last_good.is_zero() {
                tally.customers.last_good += 1;
            } else {
                tally.customers.unavailable += 1;
            }
            continue;
        };
        let budget = settings.budgets.for_operation(call.operation);
        let (took_ms, health) = outcome(call, budget.timeout, budget.slow_after);
        tally.calls += 1;
        if trial.is_some() {
            tally.calls_while_open += 1;
        }
        durations.push((call.at, took_ms + FALLBACK_MS));
        let ok = matches!(health, HealthKey::Success | HealthKey::Slow);
        if ok {
            tally.customers.live += 1;
            state.answered.insert(key, call.at);
        } else {
            tally.failures += 1;
            if age(settings.cache.last_good) && !settings.cache.last_good.is_zero() {
                tally.customers.last_good += 1;
            } else {
                tally.customers.unavailable += 1;
            }
        }
        pending.push(Reverse(Pending {
            done: call.at + ms(took_ms),
            started: call.at,
            operator: op,
            trial,
            ok,
            health,
        }));
    }
    if let Some(last) = calls.last() {
        advance(
            last.at + TimeDelta::seconds(10),
            config,
            &mut operators,
            &mut pending,
            &mut alarm_clock,
            &mut opened,
            &mut tally,
            &[],
        );
    }
    let figures = tally.finish(&durations, &truth, &opened, &index);
    (figures, durations)
}

/// The call's duration under a budget, and what the window makes of it.
fn outcome(call: &CallRecord, timeout: Duration, slow_after: Duration) -> (f64, HealthKey) {
    let budget_ms = timeout.as_secs_f64() * 1000.0;
    let slow_ms = slow_after.as_secs_f64() * 1000.0;
    match call.outcome {
        CallOutcome::Answered if call.duration_ms <= budget_ms => {
            let health = if call.duration_ms > slow_ms {
                HealthKey::Slow
            } else {
                HealthKey::Success
            };
            (call.duration_ms, health)
        }
        CallOutcome::Failed if call.duration_ms <= budget_ms => {
            (call.duration_ms, HealthKey::Failure)
        }
        // Not answered within the recording's budget, or not within this one.
        _ => (budget_ms, HealthKey::Timeout),
    }
}

fn ms(ms: f64) -> TimeDelta {
    TimeDelta::microseconds((ms * 1000.0) as i64)
}

#[derive(Debug, Default)]
struct Tally {
    calls: u64,
    failures: u64,
    calls_while_open: u64,
    customers: Customers,
}

/// Run everything due up to `to`, in time order: calls ending (window,
/// alarm counts, trials), alarm evaluations, probes, open periods and stuck
/// rounds ending.
#[allow(clippy::too_many_arguments)]
fn advance(
    to: DateTime<Utc>,
    config: &ReplayConfig,
    operators: &mut [OperatorState],
    pending: &mut BinaryHeap<Reverse<Pending>>,
    alarm_clock: &mut Option<i64>,
    opened: &mut Vec<(usize, DateTime<Utc>, BreakerState)>,
    tally: &mut Tally,
    ahead: &[CallRecord],
) {
    loop {
        let call_due = pending.peek().map(|Reverse(p)| p.done).filter(|d| *d <= to);
        let timer_due = operators
            .iter()
            .enumerate()
            .filter_map(|(op, state)| next_timer(state, config).map(|at| (at, op)))
            .filter(|(at, _)| *at <= to)
            .min();
        match (call_due, timer_due) {
            (Some(done), timer) if timer.is_none_or(|(at, _)| done <= at) => {
                let Some(Reverse(call)) = pending.pop() else {
                    break;
                };
                evaluate_alarm(done, config, operators, alarm_clock, opened);
                end_call(&call, config, operators, opened);
            }
            (_, Some((at, op))) => {
                evaluate_alarm(at, config, operators, alarm_clock, opened);
                let Some(state) = operators.get_mut(op) else {
                    break;
                };
                let before = (state.record.version, state.next_probe);
                fire_timer(state, op, at, config, opened, tally, ahead);
                if (state.record.version, state.next_probe) == before {
                    // A timer that moves nothing would come due again at
                    // once: the breaker's own rules said not yet.
                    break;
                }
            }
            (_, None) => break,
        }
    }
    evaluate_alarm(to, config, operators, alarm_clock, opened);
}

/// When the operator's breaker next wakes the switch: a probe (open, with
/// a probe and a probe period), the end of its open period, or the end of a
/// half-open round.
fn next_timer(state: &OperatorState, config: &ReplayConfig) -> Option<DateTime<Utc>> {
    let settings = config.settings.for_operator(&state.id);
    let cfg = &settings.breaker;
    match state.record.state {
        BreakerState::Open => {
            let probe = state
                .next_probe
                .filter(|_| settings.probe.is_some() && !cfg.probe_every.is_zero());
            match (probe, state.record.open_until) {
                (Some(p), Some(u)) => Some(p.min(u)),
                (p, u) => p.or(u),
            }
        }
        BreakerState::HalfOpen => Some(state.record.since + to_delta(cfg.half_open_timeout)),
        _ => None,
    }
}

/// The timer due at `at`: a probe (the operator's answer is that of its
/// next recorded call; the switch's trials those of the calls after it,
/// stopping at the first failure), or a tick.
fn fire_timer(
    state: &mut OperatorState,
    op: usize,
    at: DateTime<Utc>,
    config: &ReplayConfig,
    opened: &mut Vec<(usize, DateTime<Utc>, BreakerState)>,
    tally: &mut Tally,
    ahead: &[CallRecord],
) {
    let settings = config.settings.for_operator(&state.id);
    let cfg = &settings.breaker;
    let probing = state.record.state == BreakerState::Open
        && !cfg.probe_every.is_zero()
        && state.next_probe.is_some_and(|p| p <= at);
    let Some(probe) = settings.probe.as_ref().filter(|_| probing) else {
        apply(state, op, &Input::Tick, at, cfg, opened);
        return;
    };
    state.next_probe = Some(at + to_delta(cfg.probe_every));
    let budget = settings.budgets.for_operation(probe.operation);
    let answered = |c: &CallRecord| {
        matches!(
            outcome(c, budget.timeout, budget.slow_after).1,
            HealthKey::Success | HealthKey::Slow
        )
    };
    let mut next = ahead
        .iter()
        .filter(|c| c.operator == state.id && c.at >= at);
    tally.calls_while_open += 1;
    tally.calls += 1;
    if !next.next().is_some_and(answered) {
        tally.failures += 1;
        return;
    }
    let answered_probe = Input::ProbeAnswered {
        observed_version: state.record.version,
    };
    if !matches!(
        decide(&state.record, &answered_probe, at, cfg),
        Decision::Transition(_)
    ) {
        return;
    }
    // The switch's trials: one after another, until one fails or enough
    // have passed.
    let mut passed = 0;
    let mut failed = false;
    for call in next.take(cfg.successes_to_close as usize) {
        tally.calls_while_open += 1;
        tally.calls += 1;
        if answered(call) {
            passed += 1;
        } else {
            tally.failures += 1;
            failed = true;
            break;
        }
    }
    apply(state, op, &answered_probe, at, cfg, opened);
    let version = state.record.version;
    state.record.trials_claimed += passed + u32::from(failed);
    state.record.trial_successes += passed;
    let input = if failed || passed < cfg.successes_to_close {
        state.record.trial_failures += 1;
        Input::Trip {
            reason: TripReason::TrialFailed {
                detail: "replayed probe trial failed".to_owned(),
            },
            observed_version: version,
        }
    } else {
        Input::TrialsPassed {
            observed_version: version,
        }
    };
    apply(state, op, &input, at, cfg, opened);
}

fn to_delta(d: Duration) -> TimeDelta {
    TimeDelta::from_std(d).unwrap_or(TimeDelta::MAX)
}

/// A call has ended: count it where the detectors look, settle its trial.
fn end_call(
    done: &Pending,
    config: &ReplayConfig,
    operators: &mut [OperatorState],
    opened: &mut Vec<(usize, DateTime<Utc>, BreakerState)>,
) {
    let state = &mut operators[done.operator];
    let settings = config.settings.for_operator(&state.id);
    let cfg = &settings.breaker;
    if let Some(alarm) = &config.alarm {
        let period = done
            .done
            .timestamp()
            .div_euclid(i64::from(alarm.period_s.max(1)));
        let counts = state.alarm_failures.entry(period).or_default();
        counts.1 += 1;
        if !done.ok {
            counts.0 += 1;
        }
    }
    if let Some(version) = done.trial {
        if version != state.record.version || state.record.state != BreakerState::HalfOpen {
            return;
        }
        if done.ok {
            state.record.trial_successes += 1;
            let input = Input::TrialsPassed {
                observed_version: version,
            };
            apply(state, done.operator, &input, done.done, cfg, opened);
        } else {
            state.record.trial_failures += 1;
            let input = Input::Trip {
                reason: TripReason::TrialFailed {
                    detail: "replayed trial failed".to_owned(),
                },
                observed_version: version,
            };
            apply(state, done.operator, &input, done.done, cfg, opened);
        }
        return;
    }
    if !config.fast_detector {
        return;
    }
    let window = &settings.window;
    let start = window.bucket_start(done.started);
    let mut counts = CallCounts::default();
    counts.record(done.health.health());
    state.buckets.entry(start).or_default().add(&counts);
    let oldest = window.oldest_read(done.done);
    state.buckets = state.buckets.split_off(&oldest);
    if state.record.state != BreakerState::Closed {
        return;
    }
    let since = state.record.since;
    let buckets: Vec<Bucket> = state
        .buckets
        .range(since..)
        .filter(|(s, _)| **s > since)
        .map(|(s, c)| Bucket {
            start: *s,
            counts: *c,
        })
        .collect();
    if let Some(verdict) = window.evaluate(&buckets, done.done) {
        let input = Input::Trip {
            reason: TripReason::Window { verdict },
            observed_version: state.record.version,
        };
        apply(state, done.operator, &input, done.done, cfg, opened);
    }
}

/// Evaluate the alarm at every period end up to `to`.
fn evaluate_alarm(
    to: DateTime<Utc>,
    config: &ReplayConfig,
    operators: &mut [OperatorState],
    clock: &mut Option<i64>,
    opened: &mut Vec<(usize, DateTime<Utc>, BreakerState)>,
) {
    let Some(alarm) = &config.alarm else {
        return;
    };
    let period = i64::from(alarm.period_s.max(1));
    let current = to.timestamp().div_euclid(period);
    let from = clock.unwrap_or(current);
    // Period `p` is evaluated when it ends, at the start of `p + 1`.
    for ended in from..current {
        let at = DateTime::from_timestamp((ended + 1) * period, 0).unwrap_or(to);
        for (op, state) in operators.iter_mut().enumerate() {
            let breaching = (0..i64::from(alarm.evaluation_periods)).all(|back| {
                state
                    .alarm_failures
                    .get(&(ended - back))
                    .is_some_and(|(failed, calls)| {
                        *failed >= alarm.threshold
                            && alarm
                                .rate
                                .is_none_or(|r| f64::from(*failed) >= r * f64::from(*calls))
                    })
            });
            let next = if breaching {
                AlarmState::Alarm
            } else {
                AlarmState::Ok
            };
            if next != state.alarm_state {
                state.alarm_state = next;
                let input = Input::Alarm {
                    alarm: "replay".to_owned(),
                    state: next,
                    at,
                };
                let cfg = config.settings.for_operator(&state.id).breaker;
                apply(state, op, &input, at, &cfg, opened);
            }
            let keep = ended - i64::from(alarm.evaluation_periods);
            state.alarm_failures = state.alarm_failures.split_off(&keep);
        }
    }
    *clock = Some(current);
}

fn apply(
    state: &mut OperatorState,
    op: usize,
    input: &Input,
    at: DateTime<Utc>,
    cfg: &BreakerConfig,
    opened: &mut Vec<(usize, DateTime<Utc>, BreakerState)>,
) {
    if let Decision::Transition(mut next) = decide(&state.record, input, at, cfg) {
        if next.state == BreakerState::Open {
            state.next_probe = Some(at + to_delta(cfg.probe_every));
        }
        opened.push((op, at, next.state));
        next.announced_version = next.version;
        state.record = next;
    }
}

impl Tally {
    fn finish(
        self,
        durations: &[(DateTime<Utc>, f64)],
        truth: &[Outage],
        transitions: &[(usize, DateTime<Utc>, BreakerState)],
        index: &HashMap<OperatorId, usize>,
    ) -> ConfigFigures {
        let mut all: Vec<f64> = durations.iter().map(|(_, d)| *d).collect();
        all.sort_by(f64::total_cmp);
        let outage_days: std::collections::BTreeSet<_> =
            truth.iter().map(|o| o.start.date_naive()).collect();
        let mut on_outage_days: Vec<f64> = durations
            .iter()
            .filter(|(at, _)| outage_days.contains(&at.date_naive()))
            .map(|(_, d)| *d)
            .collect();
        on_outage_days.sort_by(f64::total_cmp);
        let mut detections: Vec<f64> = Vec::new();
        for outage in truth {
            let op = index.get(&outage.operator).copied();
            let mine = transitions.iter().filter(|(o, _, _)| Some(*o) == op);
            // Already open (or testing recovery) when the outage began: no
            // customer waited for a detection.
            let before = mine
                .clone()
                .rfind(|(_, at, _)| *at <= outage.start)
                .map_or(BreakerState::Closed, |(_, _, s)| *s);
            if before != BreakerState::Closed {
                detections.push(0.0);
                continue;
            }
            // The first opening from the outage's start to a minute after
            // its last failed call.
            let first = mine
                .filter(|(_, at, s)| {
                    *s == BreakerState::Open
                        && *at >= outage.start
                        && *at <= outage.end + TimeDelta::minutes(1)
                })
                .map(|(_, at, _)| *at)
                .min();
            if let Some(at) = first {
                detections.push((at - outage.start).num_milliseconds() as f64 / 1000.0);
            }
        }
        detections.sort_by(f64::total_cmp);
        ConfigFigures {
            p50_ms: quantile(&all, 0.5).unwrap_or(0.0),
            p95_ms: quantile(&all, 0.95).unwrap_or(0.0),
            mean_ms: if all.is_empty() {
                0.0
            } else {
                all.iter().sum::<f64>() / all.len() as f64
            },
            outage_day_median_ms: quantile(&on_outage_days, 0.5),
            failure_rate: if self.calls == 0 {
                0.0
            } else {
                self.failures as f64 / self.calls as f64
            },
            detection_s: quantile(&detections, 0.5),
            outages_detected: detections.len(),
            outages: truth.len(),
            calls_while_open: self.calls_while_open,
            calls: self.calls,
            openings: transitions
                .iter()
                .filter(|(_, _, s)| *s == BreakerState::Open)
                .count() as u64,
            customers: self.customers,
        }
    }
}
