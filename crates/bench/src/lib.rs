//! Shared pieces of lifeboat's benchmarks (`cargo bench -p lifeboat-bench`,
//! see docs/benchmarks.md): the call sequences every breaker is run on, and
//! lifeboat's breaker driven in one process the way the real consumer and the
//! circuit switch drive it across Lambda invocations.
//!
//! Each sequence is deterministic (a fixed xorshift seed) and spaced on a
//! virtual timeline of [`CALL_GAP`] per call, so a time-window breaker sees
//! the same seconds every run, however fast the machine.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use lifeboat_core::breaker::{Decision, Input, TrialVerdict, TripReason, decide};
use lifeboat_core::ports::Trial;
use lifeboat_core::request::Health;
use lifeboat_core::window::{RollingWindow, WindowConfig};
use lifeboat_core::{BreakerConfig, BreakerRecord, BreakerState, OperatorId};

/// Calls in one sequence.
pub const CALLS: usize = 10_000;

/// Virtual time between two calls: 100 calls a second, so a sequence spans
/// 100 s (ten failure windows, three open periods).
pub const CALL_GAP: Duration = Duration::from_millis(10);

/// What one call to the operator came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Success,
    /// A fast failure: refused, 5xx, 429.
    Failure,
    /// No answer within the budget.
    Timeout,
}

impl Outcome {
    pub fn is_ok(self) -> bool {
        self == Outcome::Success
    }

    /// What lifeboat's failure window makes of it.
    pub fn health(self) -> Health {
        match self {
            Outcome::Success => Health::Success,
            Outcome::Failure => Health::Failure,
            Outcome::Timeout => Health::Timeout,
        }
    }
}

/// A named call sequence.
#[derive(Debug, Clone)]
pub struct Sequence {
    pub name: &'static str,
    pub calls: Vec<Outcome>,
}

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d);
        (x >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The three sequences every breaker runs, [`CALLS`] calls each:
///
/// * `healthy`: 1 % fast failures and 0.5 % timeouts, spread at random;
///   no breaker should trip, so every call is admitted and recorded;
/// * `brownout`: 30 % fast failures at random;
/// * `outage`: 20 s healthy, 20 s of timeouts, 60 s healthy again.
pub fn sequences() -> Vec<Sequence> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let healthy = (0..CALLS)
        .map(|_| match rng.unit() {
            u if u < 0.010 => Outcome::Failure,
            u if u < 0.015 => Outcome::Timeout,
            _ => Outcome::Success,
        })
        .collect();
    let brownout = (0..CALLS)
        .map(|_| {
            if rng.unit() < 0.3 {
                Outcome::Failure
            } else {
                Outcome::Success
            }
        })
        .collect();
    let outage = (0..CALLS)
        .map(|i| {
            if (2_000..4_000).contains(&i) {
                Outcome::Timeout
            } else {
                Outcome::Success
            }
        })
        .collect();
    vec![
        Sequence {
            name: "healthy",
            calls: healthy,
        },
        Sequence {
            name: "brownout",
            calls: brownout,
        },
        Sequence {
            name: "outage",
            calls: outage,
        },
    ]
}

/// The virtual start of every sequence (2026-12-01T08:00:00Z).
pub fn start() -> DateTime<Utc> {
    DateTime::from_timestamp(1_796_032_800, 0).unwrap_or_default()
}

/// The virtual time of call `i`.
pub fn at(i: usize) -> DateTime<Utc> {
    let gap = TimeDelta::from_std(CALL_GAP).unwrap_or_default();
    start() + gap * i32::try_from(i).unwrap_or(i32::MAX)
}

/// What a run of a breaker over a sequence came to, to check that the
/// breakers really did different amounts of work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    pub admitted: u32,
    pub rejected: u32,
    /// State changes (lifeboat only: the peers do not tell).
    pub transitions: u32,
}

/// lifeboat's breaker in one process: the breaker record and
/// [`decide`], the failure window as a [`RollingWindow`] (the window's
/// buckets with the sums its rules read kept up to date, saying what
/// [`WindowConfig::evaluate`] says of the same buckets), with the trial
/// slots and their tally kept on the record as the Breaker table keeps them.
///
/// The decisions are the production code's; the bookkeeping around them
/// (the rolling window, trial counters) stands in for the stores.
///
/// * admit: a closed breaker admits; an open one whose open period is over
///   takes a tick first (the switch's timer) and goes half-open; a half-open
///   one admits while a trial slot is free.
/// * record: the call's health goes into the bucket of the time it was made;
///   every `evaluate_every` calls of a closed breaker the window is
///   evaluated and a verdict trips it. A trial's result is tallied; a failed
///   trial re-opens the breaker, enough successes close it.
pub struct InProcessBreaker {
    pub record: BreakerRecord,
    pub window: RollingWindow,
    pub breaker: BreakerConfig,
    /// Calls recorded since the last evaluation.
    since_evaluation: usize,
    evaluate_every: usize,
    /// Whether the call admitted last was a half-open trial.
    trial: bool,
    pub tally: Tally,
}

impl InProcessBreaker {
    /// A closed breaker whose window is evaluated after every
    /// `evaluate_every` calls (1: after each call; the real consumer
    /// evaluates once per stream batch).
    pub fn new(evaluate_every: usize, now: DateTime<Utc>) -> Self {
        let operator = OperatorId::new("nordic").expect("a valid operator id");
        let record = BreakerRecord::initial(operator, now);
        let mut window = RollingWindow::new(WindowConfig::default());
        window.forget_through(record.since);
        Self {
            record,
            window,
            breaker: BreakerConfig::default(),
            since_evaluation: 0,
            evaluate_every: evaluate_every.max(1),
            trial: false,
            tally: Tally::default(),
        }
    }

    fn apply(&mut self, decision: Decision) {
        if let Decision::Transition(next) = decision {
            self.record = next;
            self.tally.transitions += 1;
            // The real consumer reads only buckets that start after the
            // breaker last closed.
            self.window.forget_through(self.record.since);
        }
    }

    /// Whether a call made at `now` may go to the operator.
    #[inline]
    pub fn admit(&mut self, now: DateTime<Utc>) -> bool {
        // The cheap check first: a closed breaker admits, whatever the time.
        let admitted = match self.record.state {
            BreakerState::Closed | BreakerState::ForcedClosed => {
                self.trial = false;
                true
            }
            _ => self.admit_unless_closed(now),
        };
        if admitted {
            self.tally.admitted += 1;
        } else {
            self.tally.rejected += 1;
        }
        admitted
    }

    /// [`Self::admit`] for a breaker that is not closed: an open one whose
    /// open period is over takes a tick first.
    fn admit_unless_closed(&mut self, now: DateTime<Utc>) -> bool {
        if self.record.state == BreakerState::Open
            && self.record.open_until.is_some_and(|until| now >= until)
        {
            let decision = decide(&self.record, &Input::Tick, now, &self.breaker);
            self.apply(decision);
        }
        match self.record.state {
            BreakerState::Closed | BreakerState::ForcedClosed => {
                self.trial = false;
                true
            }
            BreakerState::HalfOpen if self.record.may_claim_trial(&self.breaker) => {
                self.record.trials_claimed += 1;
                self.trial = true;
                true
            }
            BreakerState::HalfOpen | BreakerState::Open | BreakerState::ForcedOpen => false,
        }
    }

    /// Record the outcome of the call admitted last, made at `started`.
    pub fn record(&mut self, health: Health, started: DateTime<Utc>) {
        if self.trial {
            self.record_trial(health, started);
            return;
        }
        if self.record.state != BreakerState::Closed {
            return;
        }
        self.window.record(health, started);
        self.since_evaluation += 1;
        if self.since_evaluation >= self.evaluate_every {
            self.since_evaluation = 0;
            self.evaluate(started);
        }
    }

    /// The real consumer's check after a batch.
    fn evaluate(&mut self, now: DateTime<Utc>) {
        if let Some(verdict) = self.window.evaluate(now) {
            let input = Input::Trip {
                reason: TripReason::Window { verdict },
                observed_version: self.record.version,
            };
            let decision = decide(&self.record, &input, now, &self.breaker);
            self.apply(decision);
        }
    }

    fn record_trial(&mut self, health: Health, now: DateTime<Utc>) {
        self.trial = false;
        if self.record.state != BreakerState::HalfOpen {
            return;
        }
        match health.trial(self.record.opened_slow) {
            Some(Trial::Passed) => self.record.trial_successes += 1,
            Some(Trial::Failed) => self.record.trial_failures += 1,
            Some(Trial::TimedOut) => {
                self.record.trial_failures += 1;
                self.record.trial_timeouts += 1;
            }
            None => return,
        }
        let verdict = self.breaker.round(self.record.opened_slow).trial_verdict(
            self.record.trial_successes,
            self.record.trial_failures,
            self.record.trial_timeouts,
        );
        let input = match verdict {
            TrialVerdict::Passed => Input::TrialsPassed {
                observed_version: self.record.version,
            },
            TrialVerdict::Failed => Input::Trip {
                reason: TripReason::TrialFailed {
                    detail: "trial calls failed".to_owned(),
                },
                observed_version: self.record.version,
            },
            TrialVerdict::Undecided => return,
        };
        let decision = decide(&self.record, &input, now, &self.breaker);
        self.apply(decision);
    }
}

/// The instant of each of `n` calls: [`at`]`(i)` for call `i`.
pub fn instants(n: usize) -> Vec<DateTime<Utc>> {
    let gap = TimeDelta::from_std(CALL_GAP).unwrap_or_default();
    std::iter::successors(Some(start()), |t| Some(*t + gap))
        .take(n)
        .collect()
}

/// Run lifeboat's breaker over `calls`, evaluating every `evaluate_every`.
pub fn run_lifeboat(calls: &[Outcome], evaluate_every: usize) -> Tally {
    run_lifeboat_at(calls, &instants(calls.len()), evaluate_every)
}

/// [`run_lifeboat`] with the calls' instants given, as a consumer reads each
/// call's start from its request record: the benches compute them with the
/// sequence, outside the measured loop.
pub fn run_lifeboat_at(
    calls: &[Outcome],
    instants: &[DateTime<Utc>],
    evaluate_every: usize,
) -> Tally {
    assert_eq!(calls.len(), instants.len(), "an instant for every call");
    let mut breaker = InProcessBreaker::new(evaluate_every, start());
    for (outcome, &now) in calls.iter().zip(instants) {
        if breaker.admit(now) {
            breaker.record(outcome.health(), now);
        }
    }
    breaker.tally
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_instants_are_the_calls_times() {
        let all = instants(CALLS);
        assert_eq!(all.len(), CALLS);
        for i in [0, 1, 99, CALLS - 1] {
            assert_eq!(all[i], at(i));
        }
    }

    #[test]
    fn the_sequences_are_what_they_say() {
        let seqs = sequences();
        assert_eq!(seqs.len(), 3);
        for s in &seqs {
            assert_eq!(s.calls.len(), CALLS);
        }
        let failed = |s: &Sequence| s.calls.iter().filter(|o| !o.is_ok()).count();
        assert!(
            (100..=200).contains(&failed(&seqs[0])),
            "{}",
            failed(&seqs[0])
        );
        assert!(
            (2_800..=3_200).contains(&failed(&seqs[1])),
            "{}",
            failed(&seqs[1])
        );
        assert_eq!(failed(&seqs[2]), 2_000);
    }

    /// What each sequence comes to (docs/benchmarks.md's admitted /
    /// rejected columns).
    #[test]
    fn each_sequence_comes_to_the_documented_admissions() {
        let seqs = sequences();
        let got: Vec<(u32, u32)> = seqs
            .iter()
            .flat_map(|s| [1, 10].map(|every| run_lifeboat(&s.calls, every)))
            .map(|t| (t.admitted, t.rejected))
            .collect();
        assert_eq!(
            got,
            [
                (10_000, 0),
                (10_000, 0),
                (223, 9_777),
                (10_000, 0),
                (7_300, 2_700),
                (7_300, 2_700)
            ]
        );
    }

    #[test]
    fn lifeboat_stays_closed_when_healthy_and_opens_in_the_outage() {
        let seqs = sequences();
        for every in [1, 10] {
            let healthy = run_lifeboat(&seqs[0].calls, every);
            assert_eq!(healthy.transitions, 0, "every {every}");
            assert_eq!(healthy.admitted as usize, CALLS);
            let outage = run_lifeboat(&seqs[2].calls, every);
            assert!(outage.transitions >= 3, "{outage:?}");
            assert!(outage.rejected > 2_000, "{outage:?}");
            // Closed again after the outage: the last calls are admitted.
            let mut breaker = InProcessBreaker::new(every, start());
            for (i, o) in seqs[2].calls.iter().enumerate() {
                if breaker.admit(at(i)) {
                    breaker.record(o.health(), at(i));
                }
            }
            assert_eq!(breaker.record.state, BreakerState::Closed, "every {every}");
        }
    }
}
