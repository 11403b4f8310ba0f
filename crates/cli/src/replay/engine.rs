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

use super::figures::Tally;
pub use super::figures::{ConfigFigures, Customers};
pub use super::outages::{OUTAGE_MERGE, OUTAGE_MIN_CALLS, Outage, outages, quantile};
use crate::ops::calls::{CallOutcome, CallRecord};

/// The operator-calling invocation's own time on top of its operator call:
/// the original system's answer time with the breaker open (0.14 s, an
/// invocation that waits on nobody), the only figure the incident gives of
/// an invocation without the operator's wait. An answer given without a
/// call (the breaker open, or the cache) is no invocation of that Lambda and
/// has no duration.
pub const INVOCATION_MS: f64 = 140.0;

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

/// The durations (ms) of the operator-calling invocations of a replay, in
/// call order.
pub fn durations(calls: &[CallRecord], config: &ReplayConfig) -> Vec<f64> {
    run(calls, config).1.into_iter().map(|(_, d)| d).collect()
}

fn run(calls: &[CallRecord], config: &ReplayConfig) -> (ConfigFigures, Vec<(DateTime<Utc>, f64)>) {
    let truth = outages(calls);
    let mut operators: Vec<OperatorState> = Vec::new();
    let mut index: HashMap<OperatorId, usize> = HashMap::new();
    let mut durations: Vec<(DateTime<Utc>, f64)> = Vec::with_capacity(calls.len());
    let mut clockwork = Clockwork {
        pending: BinaryHeap::new(),
        alarm_clock: None,
        transitions: Vec::new(),
        tally: Tally::default(),
    };

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
        advance(call.at, config, &mut operators, &mut clockwork, &calls[n..]);
        let tally = &mut clockwork.tally;
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
        // No live answer: the last good one if the cache holds it.
        let fall_back = |customers: &mut Customers| {
            if age(settings.cache.last_good) && !settings.cache.last_good.is_zero() {
                customers.last_good += 1;
            } else {
                customers.unavailable += 1;
            }
        };
        let Some(trial) = trial else {
            // The fallback answers: the operator-calling Lambda is not
            // invoked.
            fall_back(&mut tally.customers);
            continue;
        };
        let budget = settings.budgets.for_operation(call.operation);
        let (took_ms, health) = outcome(call, budget.timeout, budget.slow_after);
        tally.calls += 1;
        if trial.is_some() {
            tally.calls_while_open += 1;
        }
        durations.push((call.at, took_ms + INVOCATION_MS));
        let ok = matches!(health, HealthKey::Success | HealthKey::Slow);
        let day = tally.days.entry(call.at.date_naive()).or_default();
        day.0 += 1;
        day.1 += u64::from(!ok);
        if ok {
            tally.customers.live += 1;
            state.answered.insert(key, call.at);
        } else {
            tally.failures += 1;
            fall_back(&mut tally.customers);
        }
        clockwork.pending.push(Reverse(Pending {
            done: call.at + ms(took_ms),
            started: call.at,
            operator: op,
            trial,
            ok,
            health,
        }));
    }
    if let Some(last) = calls.last() {
        let to = last.at + TimeDelta::seconds(10);
        advance(to, config, &mut operators, &mut clockwork, &[]);
    }
    let Clockwork {
        tally, transitions, ..
    } = clockwork;
    let figures = tally.finish(&durations, &truth, &transitions, &index);
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

/// What moves while a replay runs: the calls in flight, the alarm's clock,
/// every breaker transition, and the counts.
struct Clockwork {
    pending: BinaryHeap<Reverse<Pending>>,
    alarm_clock: Option<i64>,
    transitions: Vec<(usize, DateTime<Utc>, BreakerState)>,
    tally: Tally,
}

/// Run everything due up to `to`, in time order: calls ending (window,
/// alarm counts, trials), alarm evaluations, probes, open periods and stuck
/// rounds ending.
fn advance(
    to: DateTime<Utc>,
    config: &ReplayConfig,
    operators: &mut [OperatorState],
    clockwork: &mut Clockwork,
    ahead: &[CallRecord],
) {
    let Clockwork {
        pending,
        alarm_clock,
        transitions: opened,
        tally,
    } = clockwork;
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
