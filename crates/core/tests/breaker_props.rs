//! Property tests of the breaker: random sequences of inputs at random times.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};
use lifeboat_core::breaker::{AlarmState, Command, Decision, Input, TripReason, decide};
use lifeboat_core::memory::MemoryBreakerStore;
use lifeboat_core::ports::BreakerStore;
use lifeboat_core::window::WindowVerdict;
use lifeboat_core::{BreakerConfig, BreakerRecord, BreakerState, OperatorId};
use proptest::prelude::*;

fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_796_032_800, 0).unwrap()
}

/// An input, with version fields resolved against the current record so that
/// both current and stale versions are exercised.
#[derive(Debug, Clone)]
enum Step {
    AlarmOn {
        age_s: i64,
    },
    AlarmOk,
    WindowTrip {
        stale: bool,
    },
    TrialFailed {
        stale: bool,
    },
    TrialsPassed {
        successes: u32,
        failures: u32,
        stale: bool,
    },
    Tick,
    Cmd(Command),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0i64..120).prop_map(|age_s| Step::AlarmOn { age_s }),
        Just(Step::AlarmOk),
        any::<bool>().prop_map(|stale| Step::WindowTrip { stale }),
        any::<bool>().prop_map(|stale| Step::TrialFailed { stale }),
        (0u32..5, 0u32..2, any::<bool>()).prop_map(|(successes, failures, stale)| {
            Step::TrialsPassed {
                successes,
                failures,
                stale,
            }
        }),
        Just(Step::Tick),
        Just(Step::Tick),
        prop_oneof![
            Just(Command::ForceOpen),
            Just(Command::ForceClosed),
            Just(Command::Release)
        ]
        .prop_map(Step::Cmd),
    ]
}

fn to_input(step: &Step, record: &mut BreakerRecord, now: DateTime<Utc>) -> Input {
    let v = |stale: bool| {
        if stale {
            record.version.saturating_sub(1)
        } else {
            record.version
        }
    };
    match step {
        Step::AlarmOn { age_s } => Input::Alarm {
            alarm: "a".into(),
            state: AlarmState::Alarm,
            at: now - TimeDelta::seconds(*age_s),
        },
        Step::AlarmOk => Input::Alarm {
            alarm: "a".into(),
            state: AlarmState::Ok,
            at: now,
        },
        Step::WindowTrip { stale } => Input::Trip {
            reason: TripReason::Window {
                verdict: WindowVerdict::ConsecutiveTimeouts { count: 5 },
            },
            observed_version: v(*stale),
        },
        Step::TrialFailed { stale } => Input::Trip {
            reason: TripReason::TrialFailed { detail: "x".into() },
            observed_version: v(*stale),
        },
        Step::TrialsPassed {
            successes,
            failures,
            stale,
        } => {
            if record.state == BreakerState::HalfOpen {
                record.trial_successes = *successes;
                record.trial_failures = *failures;
            }
            Input::TrialsPassed {
                observed_version: v(*stale),
            }
        }
        Step::Tick => Input::Tick,
        Step::Cmd(command) => Input::Command {
            command: *command,
            reason: "test".into(),
            caller: None,
        },
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn transitions_keep_the_invariants(steps in prop::collection::vec((step(), 0u64..90), 1..60)) {
        let cfg = BreakerConfig::default();
        let mut now = t0();
        let mut record = BreakerRecord::initial(OperatorId::new("op").unwrap(), now);
        for (step, gap_s) in &steps {
            now += TimeDelta::seconds(*gap_s as i64);
            let input = to_input(step, &mut record, now);
            match decide(&record, &input, now, &cfg) {
                Decision::Unchanged(_) => {}
                Decision::Transition(next) => {
                    // The version moves by exactly one.
                    prop_assert_eq!(next.version, record.version + 1);
                    prop_assert_eq!(next.previous, Some(record.state));
                    prop_assert!(next.since >= record.since);
                    // Forced states are left only by a command.
                    if record.state.is_forced() {
                        prop_assert!(matches!(input, Input::Command { .. }), "left {:?} by {:?}", record.state, input);
                    }
                    // Open never goes straight to closed.
                    if record.state == BreakerState::Open {
                        prop_assert_ne!(next.state, BreakerState::Closed);
                    }
                    // Closing from half-open needs enough successes and no
                    // more failures than the round allows.
                    if next.state == BreakerState::Closed && record.state == BreakerState::HalfOpen {
                        prop_assert!(record.trial_successes >= cfg.successes_to_close);
                        prop_assert_eq!(record.trial_failures, record.trial_timeouts);
                        prop_assert!(record.trial_timeouts <= cfg.trial_timeouts_allowed);
                    }
                    // An open breaker always knows when to test again, within the cap.
                    if next.state == BreakerState::Open {
                        let until = next.open_until.unwrap();
                        prop_assert!(until > now);
                        prop_assert!(until - now <= TimeDelta::from_std(cfg.open_max).unwrap());
                    }
                    record = next;
                }
            }
        }
    }

    #[test]
    fn half_open_admits_at_most_k_trials_across_instances(
        instances in 2usize..64,
        limit in 1u32..6,
    ) {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(4).build().unwrap();
        let admitted = runtime.block_on(async move {
            let store = Arc::new(MemoryBreakerStore::new());
            let op = OperatorId::new("op").unwrap();
            let mut record = BreakerRecord::initial(op.clone(), t0());
            record.state = BreakerState::HalfOpen;
            record.version = 4;
            store.save(&record, None).await.unwrap();
            let mut tasks = Vec::new();
            for _ in 0..instances {
                let store = store.clone();
                let op = op.clone();
                // Each instance tries several times, as a warm environment
                // handling several batches would.
                tasks.push(tokio::spawn(async move {
                    let mut mine = 0u32;
                    for _ in 0..3 {
                        if store.claim_trial(&op, 4, limit).await.unwrap() {
                            mine += 1;
                        }
                        tokio::task::yield_now().await;
                    }
                    mine
                }));
            }
            let mut total = 0;
            for task in tasks {
                total += task.await.unwrap();
            }
            // A claim for an older round never counts.
            assert!(!store.claim_trial(&op, 3, limit).await.unwrap());
            total
        });
        prop_assert_eq!(admitted, limit.min(instances as u32 * 3));
    }
}
