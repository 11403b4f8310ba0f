//! lifeboat's breaker against failsafe and recloser, side by side in one
//! process, on the same call sequences: for each call, admit (may the call
//! go?) and, if admitted, record its outcome. One iteration is a whole
//! sequence of 10,000 calls on a new breaker; compare the ratios, not the
//! absolute times (docs/benchmarks.md).
//!
//! * `lifeboat/per_call`: lifeboat's time-window semantics with the window
//!   evaluated after every call, as the peers decide on every outcome;
//! * `lifeboat/per_batch_10`: evaluated once per 10 calls, as the real
//!   consumer does after each stream batch (its default batch size);
//! * `failsafe/time_window`: failsafe's success rate over a 10 s window
//!   (at least 50 % successes over at least 10 calls: lifeboat's rule
//!   before its rate rules looked back 20 s at 40 % of 20 calls),
//!   backoff 30 s doubling to 10 min; on failsafe's own mock clock,
//!   advanced 10 ms per call, the same timeline as lifeboat's;
//! * `failsafe/consecutive`: 5 failures in a row, same backoff and clock;
//! * `recloser/default`: recloser's default ring buffer (50 % of the last
//!   100 calls, open 30 s, half-open over 10 calls); it reads the real
//!   clock, so in a run of a millisecond its open period never ends.
//!
//! `decide` measures lifeboat's pure decision alone, one input at a time.

use std::hint::black_box;
use std::time::Duration;

use chrono::{DateTime, Utc};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use failsafe::{StateMachine, backoff, failure_policy};
use lifeboat_bench::{
    CALL_GAP, CALLS, Outcome, Sequence, Tally, at, instants, run_lifeboat_at, sequences,
};
use lifeboat_core::breaker::{Decision, Input, TripReason, decide};
use lifeboat_core::window::WindowVerdict;
use lifeboat_core::{BreakerConfig, BreakerRecord, BreakerState, OperatorId};
use recloser::Recloser;

fn lifeboat_backoff() -> backoff::Exponential {
    backoff::exponential(Duration::from_secs(30), Duration::from_secs(600))
}

/// Admit and record each call on a failsafe state machine, on failsafe's
/// mock clock moved [`CALL_GAP`] per call.
fn run_failsafe<P: failsafe::FailurePolicy>(
    calls: &[Outcome],
    policy: impl FnOnce() -> P,
) -> Tally {
    failsafe::clock::freeze(|clock| {
        let breaker = StateMachine::new(policy(), ());
        let mut tally = Tally::default();
        for outcome in calls {
            if breaker.is_call_permitted() {
                tally.admitted += 1;
                if outcome.is_ok() {
                    breaker.on_success();
                } else {
                    breaker.on_error();
                }
            } else {
                tally.rejected += 1;
            }
            clock.advance(CALL_GAP);
        }
        tally
    })
}

fn failsafe_time_window(calls: &[Outcome]) -> Tally {
    run_failsafe(calls, || {
        failure_policy::success_rate_over_time_window(
            0.5,
            10,
            Duration::from_secs(10),
            lifeboat_backoff(),
        )
    })
}

fn failsafe_consecutive(calls: &[Outcome]) -> Tally {
    run_failsafe(calls, || {
        failure_policy::consecutive_failures(5, lifeboat_backoff())
    })
}

/// recloser admits and records in one `call`.
fn run_recloser(calls: &[Outcome]) -> Tally {
    let breaker = Recloser::custom().build();
    let mut tally = Tally::default();
    for outcome in calls {
        let result = breaker.call(|| if outcome.is_ok() { Ok(()) } else { Err(()) });
        match result {
            Err(recloser::Error::Rejected) => tally.rejected += 1,
            _ => tally.admitted += 1,
        }
    }
    tally
}

/// A breaker run over a sequence's calls; the calls' instants are given
/// for the breakers that take them as data (lifeboat), computed outside the
/// measured loop. failsafe moves its own mock clock, recloser reads the
/// real one.
type Runner = fn(&[Outcome], &[DateTime<Utc>]) -> Tally;

fn runners() -> [(&'static str, Runner); 5] {
    [
        ("lifeboat/per_call", |c, t| run_lifeboat_at(c, t, 1)),
        ("lifeboat/per_batch_10", |c, t| run_lifeboat_at(c, t, 10)),
        ("failsafe/time_window", |c, _| failsafe_time_window(c)),
        ("failsafe/consecutive", |c, _| failsafe_consecutive(c)),
        ("recloser/default", |c, _| run_recloser(c)),
    ]
}

fn admit_record(c: &mut Criterion) {
    let seqs: Vec<Sequence> = sequences();
    let times = instants(CALLS);
    // What each breaker did with each sequence, once, so the report can
    // say how much of each run was rejected cheaply: a line
    // `lifeboat-bench: {json}` each, which tools/figures reads.
    for seq in &seqs {
        for (name, run) in runners() {
            let tally = run(&seq.calls, &times);
            let line = serde_json::json!({
                "bench": "admit_record",
                "sequence": seq.name,
                "breaker": name,
                "calls": seq.calls.len(),
                "admitted": tally.admitted,
                "rejected": tally.rejected,
                "transitions": tally.transitions,
            });
            eprintln!("lifeboat-bench: {line}");
        }
    }
    for seq in &seqs {
        let mut group = c.benchmark_group(format!("admit_record/{}", seq.name));
        group.throughput(Throughput::Elements(CALLS as u64));
        for (name, run) in runners() {
            group.bench_with_input(BenchmarkId::from_parameter(name), &seq.calls, |b, calls| {
                b.iter(|| run(black_box(calls), black_box(&times)));
            });
        }
        group.finish();
    }
}

fn decisions(c: &mut Criterion) {
    let cfg = BreakerConfig::default();
    let now = at(0);
    let operator = OperatorId::new("nordic").expect("a valid operator id");
    let closed = BreakerRecord::initial(operator, now);
    let trip = Input::Trip {
        reason: TripReason::Window {
            verdict: WindowVerdict::ConsecutiveTimeouts { count: 5 },
        },
        observed_version: 0,
    };
    let Decision::Transition(open) = decide(&closed, &trip, now, &cfg) else {
        panic!("a closed breaker opens on a window trip");
    };
    let later = at(CALLS);
    let mut half_open = open.clone();
    half_open.state = BreakerState::HalfOpen;
    half_open.trial_successes = 2;
    let passed = Input::TrialsPassed {
        observed_version: half_open.version,
    };

    let mut group = c.benchmark_group("decide");
    group.bench_function("closed_tick_unchanged", |b| {
        b.iter(|| decide(black_box(&closed), &Input::Tick, now, &cfg));
    });
    group.bench_function("closed_trip_opens", |b| {
        b.iter(|| decide(black_box(&closed), &trip, now, &cfg));
    });
    group.bench_function("open_tick_half_opens", |b| {
        b.iter(|| decide(black_box(&open), &Input::Tick, later, &cfg));
    });
    group.bench_function("half_open_trials_passed_closes", |b| {
        b.iter(|| decide(black_box(&half_open), &passed, later, &cfg));
    });
    group.finish();
}

criterion_group!(benches, admit_record, decisions);
criterion_main!(benches);
