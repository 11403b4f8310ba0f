//! The breaker state machine: one breaker per operator, shared by every operation.
//!
//! [`decide`] is a pure function from (stored record, input, now) to either "no
//! change" (with the reason, for the log) or the next record. Every change bumps
//! the version by exactly one; stores write the next record only if the stored
//! version is still the one the decision started from, so concurrent deciders
//! and late or duplicate inputs can never move the breaker backwards.
//!
//! ```text
//!            trip (window / alarm)              open period over (tick)
//!   closed ─────────────────────────▶ open ─────────────────────────▶ half-open
//!     ▲                                ▲                                  │
//!     │ enough trial successes         │ too many trials failed / none in │
//!     └────────────────────────────────┼──────────── time ◀───────────────┘
//!                                      └── (period doubles, capped, jittered)
//!   force-open / force-closed pin the breaker; only `release` unpins it
//!   (forced-open → half-open, forced-closed → closed).
//! ```

use std::fmt;

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use crate::operator::OperatorId;
use crate::window::WindowVerdict;

mod config;

pub use config::{BreakerConfig, TrialVerdict};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    Closed,
    Open,
    HalfOpen,
    ForcedOpen,
    ForcedClosed,
}

impl BreakerState {
    pub const ALL: [BreakerState; 5] = [
        BreakerState::Closed,
        BreakerState::Open,
        BreakerState::HalfOpen,
        BreakerState::ForcedOpen,
        BreakerState::ForcedClosed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
            BreakerState::ForcedOpen => "forced_open",
            BreakerState::ForcedClosed => "forced_closed",
        }
    }

    /// The consumer the Requests stream must feed in this state.
    pub fn target(self) -> ConsumerTarget {
        match self {
            BreakerState::Open | BreakerState::ForcedOpen => ConsumerTarget::Fallback,
            BreakerState::Closed | BreakerState::HalfOpen | BreakerState::ForcedClosed => {
                ConsumerTarget::Real
            }
        }
    }

    /// True when the operator must not be called (except for half-open trials).
    pub fn is_open(self) -> bool {
        matches!(self, BreakerState::Open | BreakerState::ForcedOpen)
    }

    pub fn is_forced(self) -> bool {
        matches!(self, BreakerState::ForcedOpen | BreakerState::ForcedClosed)
    }

    /// A number per state for the breaker-state metric: 0 closed, 1 half-open,
    /// 2 open, 3 forced open, 4 forced closed.
    pub fn metric_value(self) -> u8 {
        match self {
            BreakerState::Closed => 0,
            BreakerState::HalfOpen => 1,
            BreakerState::Open => 2,
            BreakerState::ForcedOpen => 3,
            BreakerState::ForcedClosed => 4,
        }
    }
}

impl fmt::Display for BreakerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which stream consumer receives the Requests stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConsumerTarget {
    Real,
    Fallback,
}

impl fmt::Display for ConsumerTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConsumerTarget::Real => "real",
            ConsumerTarget::Fallback => "fallback",
        })
    }
}

/// The stored breaker of one operator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BreakerRecord {
    pub operator: OperatorId,
    pub state: BreakerState,
    /// Strictly increasing, one per transition.
    pub version: u64,
    /// When the breaker entered `state`.
    pub since: DateTime<Utc>,
    /// Why it entered `state`.
    pub reason: String,
    /// The state it left to enter `state` (`None` for a breaker that never moved).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<BreakerState>,
    /// Open only: when the half-open trial may start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_until: Option<DateTime<Utc>>,
    /// Half-open rounds that failed in a row; doubles the open period.
    #[serde(default)]
    pub failed_trials: u32,
    /// Half-open only: trial slots claimed, by all instances together.
    #[serde(default)]
    pub trials_claimed: u32,
    #[serde(default)]
    pub trial_successes: u32,
    /// Failed trials of the round, timed-out ones included.
    #[serde(default)]
    pub trial_failures: u32,
    /// Of `trial_failures`, those that timed out.
    #[serde(default)]
    pub trial_timeouts: u32,
    /// The newest version whose Breaker State Changed event was published.
    #[serde(default)]
    pub announced_version: u64,
    /// The newest version after which the circuit switch saw this
    /// operator's lane pointing where the lane's breakers, as read then,
    /// want it ([`crate::ports::BreakerStore::mark_routed`]): while it equals
    /// `version` on every breaker of a lane, the schedule's tick leaves that
    /// lane's mapping alone. Never stored before that: 0.
    #[serde(default)]
    pub routed_version: u64,
    /// The breaker opened because the operator's answers were too slow (the
    /// `slow_rate` rule) and has not closed since: a probe or a trial then
    /// passes only with an answer in time that is not slow, so a brownout
    /// (most answers slow, still in time) does not close it for the rule to
    /// open it again seconds later.
    #[serde(default)]
    pub opened_slow: bool,
    /// Open only: when the last probe of this open period was claimed (see
    /// [`crate::ports::BreakerStore::claim_probe`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probed_at: Option<DateTime<Utc>>,
}

impl BreakerRecord {
    /// A breaker that has never moved: closed, version 0.
    pub fn initial(operator: OperatorId, now: DateTime<Utc>) -> Self {
        Self {
            operator,
            state: BreakerState::Closed,
            version: 0,
            since: now,
            reason: "initial".to_owned(),
            previous: None,
            open_until: None,
            failed_trials: 0,
            trials_claimed: 0,
            trial_successes: 0,
            trial_failures: 0,
            trial_timeouts: 0,
            announced_version: 0,
            routed_version: 0,
            opened_slow: false,
            probed_at: None,
        }
    }

    /// Whether one more half-open trial may be claimed, judging by this copy.
    /// The store makes the claim itself atomically with the same rule.
    pub fn may_claim_trial(&self, cfg: &BreakerConfig) -> bool {
        self.state == BreakerState::HalfOpen
            && self.trials_claimed < cfg.round(self.opened_slow).trial_calls
    }
}

/// The state of a CloudWatch alarm, as alarm events carry it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AlarmState {
    Ok,
    Alarm,
    InsufficientData,
}

/// What a human can tell the breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Command {
    ForceOpen,
    ForceClosed,
    Release,
}

/// Why a trip is asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TripReason {
    /// The failure window of the real consumer.
    Window { verdict: WindowVerdict },
    /// A half-open trial call failed.
    TrialFailed { detail: String },
}

impl fmt::Display for TripReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TripReason::Window { verdict } => write!(f, "{verdict}"),
            TripReason::TrialFailed { detail } => write!(f, "half-open trial failed: {detail}"),
        }
    }
}

/// Everything that can move a breaker.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// A CloudWatch alarm changed state at `at`.
    Alarm {
        alarm: String,
        state: AlarmState,
        at: DateTime<Utc>,
    },
    /// The fast detector (or a failed trial) asks to open. `observed_version`
    /// is the breaker version the asker saw.
    Trip {
        reason: TripReason,
        observed_version: u64,
    },
    /// Enough trials succeeded, as counted in the record at `observed_version`.
    TrialsPassed { observed_version: u64 },
    /// The periodic schedule or a timer: ends open periods and stuck
    /// half-open rounds.
    Tick,
    /// The switch's own probe of an open breaker at `observed_version` was
    /// answered: the half-open round starts now.
    ProbeAnswered { observed_version: u64 },
    /// A human command, with who sent it as they stated it (a direct
    /// Lambda invoke carries no verified caller; CloudTrail's data events
    /// for the function do).
    Command {
        command: Command,
        reason: String,
        caller: Option<String>,
    },
}

/// The result of [`decide`].
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Nothing changes; the string says why, for the log.
    Unchanged(&'static str),
    /// Write this record (version + 1) conditionally, then re-point the stream
    /// to `next.state.target()` and announce the change.
    Transition(BreakerRecord),
}

/// Decide what `input` does to the breaker `current` at `now`.
pub fn decide(
    current: &BreakerRecord,
    input: &Input,
    now: DateTime<Utc>,
    cfg: &BreakerConfig,
) -> Decision {
    use BreakerState::*;
    match (current.state, input) {
        (
            _,
            Input::Command {
                command,
                reason,
                caller,
            },
        ) => command_decision(current, *command, reason, caller.as_deref(), now, cfg),
        (ForcedOpen | ForcedClosed, _) => Decision::Unchanged("forced: only a command moves it"),

        (
            Closed,
            Input::Alarm {
                state: AlarmState::Alarm,
                alarm,
                at,
            },
        ) => {
            if *at < current.since {
                Decision::Unchanged("alarm older than the current state")
            } else {
                open(current, 0, format!("alarm {alarm} in ALARM"), now, cfg)
            }
        }
        (
            _,
            Input::Alarm {
                state: AlarmState::Alarm,
                ..
            },
        ) => Decision::Unchanged("alarm only opens a closed breaker"),
        (_, Input::Alarm { .. }) => {
            Decision::Unchanged("alarm back to OK: recovery goes through half-open")
        }

        (
            _,
            Input::Trip {
                observed_version, ..
            },
        ) if *observed_version != current.version => {
            Decision::Unchanged("trip request for an older version")
        }
        (
            Closed,
            Input::Trip {
                reason: reason @ TripReason::Window { verdict },
                ..
            },
        ) => match open(current, 0, reason.to_string(), now, cfg) {
            Decision::Transition(mut next) => {
                next.opened_slow = matches!(verdict, WindowVerdict::SlowCalls { .. });
                Decision::Transition(next)
            }
            unchanged => unchanged,
        },
        (
            HalfOpen,
            Input::Trip {
                reason: reason @ TripReason::TrialFailed { .. },
                ..
            },
        ) => open(
            current,
            current.failed_trials.saturating_add(1),
            reason.to_string(),
            now,
            cfg,
        ),
        (HalfOpen, Input::Trip { .. }) => Decision::Unchanged("half-open: the trials decide"),
        (Closed, Input::Trip { .. }) => Decision::Unchanged("trial result while closed"),
        (Open, Input::Trip { .. }) => Decision::Unchanged("already open"),

        (HalfOpen, Input::TrialsPassed { observed_version }) => {
            if *observed_version != current.version {
                Decision::Unchanged("trial result for an older half-open round")
            } else {
                match cfg.round(current.opened_slow).trial_verdict(
                    current.trial_successes,
                    current.trial_failures,
                    current.trial_timeouts,
                ) {
                    TrialVerdict::Failed => Decision::Unchanged("this round's trials failed"),
                    TrialVerdict::Undecided => {
                        Decision::Unchanged("not enough trial successes yet")
                    }
                    TrialVerdict::Passed => {
                        let mut next = successor(current, Closed, now);
                        next.reason =
                            format!("{} half-open trials succeeded", current.trial_successes);
                        Decision::Transition(next)
                    }
                }
            }
        }
        (_, Input::TrialsPassed { .. }) => Decision::Unchanged("not half-open"),

        (Open, Input::ProbeAnswered { observed_version }) => {
            if *observed_version != current.version {
                Decision::Unchanged("probe of an older open period")
            } else {
                let mut next = successor(current, HalfOpen, now);
                next.failed_trials = current.failed_trials;
                next.reason = "probe answered: testing recovery".to_owned();
                Decision::Transition(next)
            }
        }
        (_, Input::ProbeAnswered { .. }) => Decision::Unchanged("not open"),

        (Open, Input::Tick) => match current.open_until {
            Some(until) if now < until => Decision::Unchanged("open period not over"),
            _ => {
                let mut next = successor(current, HalfOpen, now);
                next.failed_trials = current.failed_trials;
                next.reason = "open period over: testing recovery".to_owned();
                Decision::Transition(next)
            }
        },
        (HalfOpen, Input::Tick) => {
            let limit = TimeDelta::from_std(cfg.half_open_timeout).unwrap_or(TimeDelta::MAX);
            if now - current.since >= limit {
                open(
                    current,
                    current.failed_trials.saturating_add(1),
                    format!(
                        "no trial verdict within {} s",
                        cfg.half_open_timeout.as_secs()
                    ),
                    now,
                    cfg,
                )
            } else {
                Decision::Unchanged("half-open round still running")
            }
        }
        (Closed, Input::Tick) => Decision::Unchanged("closed"),
    }
}

fn command_decision(
    current: &BreakerRecord,
    command: Command,
    reason: &str,
    caller: Option<&str>,
    now: DateTime<Utc>,
    _cfg: &BreakerConfig,
) -> Decision {
    use BreakerState::*;
    let to = match (command, current.state) {
        (Command::ForceOpen, ForcedOpen) => return Decision::Unchanged("already forced open"),
        (Command::ForceClosed, ForcedClosed) => {
            return Decision::Unchanged("already forced closed");
        }
        (Command::ForceOpen, _) => ForcedOpen,
        (Command::ForceClosed, _) => ForcedClosed,
        // Leaving a forced-open breaker tests the operator before trusting it.
        (Command::Release, ForcedOpen) => HalfOpen,
        (Command::Release, ForcedClosed) => Closed,
        (Command::Release, _) => return Decision::Unchanged("not forced: nothing to release"),
    };
    let mut next = successor(current, to, now);
    next.reason = match caller {
        Some(caller) => format!("{} by {caller}: {reason}", command_name(command)),
        None => format!("{}: {reason}", command_name(command)),
    };
    Decision::Transition(next)
}

fn command_name(command: Command) -> &'static str {
    match command {
        Command::ForceOpen => "force-open",
        Command::ForceClosed => "force-closed",
        Command::Release => "release",
    }
}

/// The next record: version + 1, counters of the old state cleared.
fn successor(current: &BreakerRecord, state: BreakerState, now: DateTime<Utc>) -> BreakerRecord {
    BreakerRecord {
        operator: current.operator.clone(),
        state,
        version: current.version + 1,
        since: now,
        reason: String::new(),
        previous: Some(current.state),
        open_until: None,
        failed_trials: 0,
        trials_claimed: 0,
        trial_successes: 0,
        trial_failures: 0,
        trial_timeouts: 0,
        announced_version: current.announced_version,
        routed_version: current.routed_version,
        opened_slow: current.opened_slow
            && !matches!(state, BreakerState::Closed | BreakerState::ForcedClosed),
        probed_at: None,
    }
}

fn open(
    current: &BreakerRecord,
    failed_trials: u32,
    reason: String,
    now: DateTime<Utc>,
    cfg: &BreakerConfig,
) -> Decision {
    let mut next = successor(current, BreakerState::Open, now);
    let period = cfg.open_period(failed_trials, jitter_unit(&current.operator, next.version));
    next.open_until = Some(now + TimeDelta::from_std(period).unwrap_or(TimeDelta::MAX));
    next.failed_trials = failed_trials;
    next.reason = reason;
    Decision::Transition(next)
}

/// A number in `[0, 1)` that is fixed for (operator, version): jitter without a
/// random source, so decisions stay pure and replayable.
pub fn jitter_unit(operator: &OperatorId, version: u64) -> f64 {
    // FNV-1a over the operator, then splitmix64 with the version.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in operator.as_str().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let mut z = h ^ version.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::window::WindowVerdict;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + s, 0).unwrap()
    }

    fn closed() -> BreakerRecord {
        BreakerRecord::initial(OperatorId::new("op").unwrap(), t(0))
    }

    fn window_trip(v: u64) -> Input {
        Input::Trip {
            reason: TripReason::Window {
                verdict: WindowVerdict::ConsecutiveTimeouts { count: 5 },
            },
            observed_version: v,
        }
    }

    fn apply(record: &BreakerRecord, input: &Input, now: DateTime<Utc>) -> BreakerRecord {
        match decide(record, input, now, &BreakerConfig::default()) {
            Decision::Transition(next) => next,
            Decision::Unchanged(why) => panic!("expected a transition, got unchanged: {why}"),
        }
    }

    #[test]
    fn a_full_cycle_goes_through_half_open() {
        let cfg = BreakerConfig::default();
        let open = apply(&closed(), &window_trip(0), t(10));
        assert_eq!((open.state, open.version), (BreakerState::Open, 1));
        let until = open.open_until.unwrap();
        assert!(until > t(10) && until <= t(40));
        assert_eq!(
            decide(&open, &Input::Tick, t(11), &cfg),
            Decision::Unchanged("open period not over")
        );
        let half = apply(&open, &Input::Tick, t(41));
        assert_eq!((half.state, half.version), (BreakerState::HalfOpen, 2));
        let mut counted = half.clone();
        counted.trials_claimed = 2;
        counted.trial_successes = 2;
        let closed = apply(
            &counted,
            &Input::TrialsPassed {
                observed_version: 2,
            },
            t(42),
        );
        assert_eq!((closed.state, closed.version), (BreakerState::Closed, 3));
        assert_eq!(closed.failed_trials, 0);
    }

    #[test]
    fn a_slow_call_trip_is_remembered_until_the_breaker_closes() {
        let slow = Input::Trip {
            reason: TripReason::Window {
                verdict: WindowVerdict::SlowCalls {
                    rate: 0.9,
                    calls: 20,
                },
            },
            observed_version: 0,
        };
        let open = apply(&closed(), &slow, t(10));
        assert!(open.opened_slow);
        let half = apply(&open, &Input::Tick, t(41));
        assert!(half.opened_slow, "carried into the round");
        let again = apply(
            &half,
            &Input::Trip {
                reason: TripReason::TrialFailed {
                    detail: "slow".into(),
                },
                observed_version: 2,
            },
            t(42),
        );
        assert!(again.opened_slow, "and the next open period");
        let mut counted = apply(&again, &Input::Tick, t(200));
        // Its round closes on five quick answers, not two.
        counted.trial_successes = 5;
        let closed = apply(
            &counted,
            &Input::TrialsPassed {
                observed_version: counted.version,
            },
            t(201),
        );
        assert!(!closed.opened_slow, "forgotten once closed");
        assert!(!apply(&closed, &window_trip(closed.version), t(300)).opened_slow);
    }

    #[test]
    fn an_answered_probe_starts_the_round_before_the_open_period_ends() {
        let cfg = BreakerConfig::default();
        let open = apply(&closed(), &window_trip(0), t(10));
        let half = apply(
            &open,
            &Input::ProbeAnswered {
                observed_version: 1,
            },
            t(20),
        );
        assert_eq!((half.state, half.version), (BreakerState::HalfOpen, 2));
        assert_eq!(half.reason, "probe answered: testing recovery");
        // A probe of an older period, or of a breaker no longer open, is ignored.
        assert_eq!(
            decide(
                &open,
                &Input::ProbeAnswered {
                    observed_version: 0
                },
                t(20),
                &cfg
            ),
            Decision::Unchanged("probe of an older open period")
        );
        assert_eq!(
            decide(
                &half,
                &Input::ProbeAnswered {
                    observed_version: 2
                },
                t(21),
                &cfg
            ),
            Decision::Unchanged("not open")
        );
    }

    #[test]
    fn failed_trials_double_the_open_period_up_to_the_cap() {
        let cfg = BreakerConfig {
            jitter: 0.0,
            ..BreakerConfig::default()
        };
        assert_eq!(cfg.open_period(0, 0.5), Duration::from_secs(30));
        assert_eq!(cfg.open_period(1, 0.5), Duration::from_secs(60));
        assert_eq!(cfg.open_period(3, 0.5), Duration::from_secs(240));
        assert_eq!(cfg.open_period(10, 0.5), Duration::from_secs(600));
        assert_eq!(cfg.open_period(40, 0.5), Duration::from_secs(600));
        let jittered = BreakerConfig::default().open_period(0, 0.99);
        assert!(jittered >= Duration::from_secs(24) && jittered <= Duration::from_secs(30));
        // OPERATOR_SETTINGS may give any cap up to u64::MAX ms; found by the
        // settings_json fuzz target (docs/fuzzing.md).
        let longest = Duration::from_millis(u64::MAX);
        let cfg = BreakerConfig {
            open_base: longest,
            open_max: longest,
            ..BreakerConfig::default()
        };
        assert_eq!(cfg.open_period(0, 0.0), longest);
    }

    #[test]
    fn a_failed_trial_reopens_for_longer() {
        let open = apply(&closed(), &window_trip(0), t(0));
        let half = apply(&open, &Input::Tick, t(100));
        let reopened = apply(
            &half,
            &Input::Trip {
                reason: TripReason::TrialFailed {
                    detail: "timeout".into(),
                },
                observed_version: half.version,
            },
            t(101),
        );
        assert_eq!(reopened.state, BreakerState::Open);
        assert_eq!(reopened.failed_trials, 1);
        assert!(reopened.open_until.unwrap() - t(101) > TimeDelta::seconds(47));
    }

    #[test]
    fn duplicates_and_stale_inputs_change_nothing() {
        let cfg = BreakerConfig::default();
        let open = apply(&closed(), &window_trip(0), t(10));
        assert!(matches!(
            decide(&open, &window_trip(0), t(11), &cfg),
            Decision::Unchanged(_)
        ));
        let half = apply(&open, &Input::Tick, t(100));
        let mut passed = half.clone();
        passed.trial_successes = 2;
        let closed_again = apply(
            &passed,
            &Input::TrialsPassed {
                observed_version: half.version,
            },
            t(101),
        );
        // A late alarm from before the recovery does not reopen it.
        let late_alarm = Input::Alarm {
            alarm: "op-errors".into(),
            state: AlarmState::Alarm,
            at: t(50),
        };
        assert!(matches!(
            decide(&closed_again, &late_alarm, t(102), &cfg),
            Decision::Unchanged(_)
        ));
        // A late trial result for the old round does not either.
        assert!(matches!(
            decide(
                &closed_again,
                &Input::TrialsPassed {
                    observed_version: half.version
                },
                t(102),
                &cfg
            ),
            Decision::Unchanged(_)
        ));
    }

    #[test]
    fn ok_alarm_never_closes_an_open_breaker() {
        let cfg = BreakerConfig::default();
        let open = apply(&closed(), &window_trip(0), t(10));
        let ok = Input::Alarm {
            alarm: "op-errors".into(),
            state: AlarmState::Ok,
            at: t(20),
        };
        assert!(matches!(
            decide(&open, &ok, t(20), &cfg),
            Decision::Unchanged(_)
        ));
    }

    #[test]
    fn trials_need_enough_successes_no_error_and_at_most_the_allowed_timeouts() {
        let cfg = BreakerConfig::default();
        let open = apply(&closed(), &window_trip(0), t(0));
        let mut half = apply(&open, &Input::Tick, t(100));
        half.trial_successes = 1;
        let passed = Input::TrialsPassed {
            observed_version: half.version,
        };
        assert!(matches!(
            decide(&half, &passed, t(101), &cfg),
            Decision::Unchanged(_)
        ));
        // One timeout among the trials (a slow moment): still closes.
        half.trial_successes = 2;
        half.trial_failures = 1;
        half.trial_timeouts = 1;
        assert!(matches!(
            decide(&half, &passed, t(101), &cfg),
            Decision::Transition(BreakerRecord {
                state: BreakerState::Closed,
                ..
            })
        ));
        // An error: does not.
        half.trial_timeouts = 0;
        assert!(matches!(
            decide(&half, &passed, t(101), &cfg),
            Decision::Unchanged(_)
        ));
        let strict = BreakerConfig {
            trial_timeouts_allowed: 0,
            ..cfg
        };
        half.trial_timeouts = 1;
        assert!(matches!(
            decide(&half, &passed, t(101), &strict),
            Decision::Unchanged(_)
        ));
    }

    /// After a slow-call trip a slow answer fails the round, and the round
    /// closes only on `slow_successes_to_close` quick answers, with slots
    /// for them: a brownout's few quick answers do not close it.
    #[test]
    fn a_breaker_opened_for_slowness_closes_only_on_quick_answers_in_a_row() {
        use crate::ports::Trial;
        use crate::request::Health;
        let cfg = BreakerConfig::default();
        assert_eq!(cfg.round(false), cfg);
        let slow = cfg.round(true);
        assert_eq!((slow.successes_to_close, slow.trial_calls), (5, 6));
        assert_eq!(Health::SlowSuccess.trial(false), Some(Trial::Passed));
        assert_eq!(Health::SlowSuccess.trial(true), Some(Trial::Failed));
        assert_eq!(Health::Success.trial(true), Some(Trial::Passed));
        // Two quick answers close an ordinary round, not a slow one.
        assert_eq!(cfg.trial_verdict(2, 0, 0), TrialVerdict::Passed);
        assert_eq!(slow.trial_verdict(2, 0, 0), TrialVerdict::Undecided);
        assert_eq!(slow.trial_verdict(4, 1, 0), TrialVerdict::Failed);
        assert_eq!(slow.trial_verdict(5, 1, 1), TrialVerdict::Passed);
        // decide judges the round by the record's own shape.
        let mut half = BreakerRecord::initial(OperatorId::new("nordic").unwrap(), t(0));
        half.state = BreakerState::HalfOpen;
        half.version = 3;
        half.trial_successes = 2;
        half.opened_slow = true;
        let passed = Input::TrialsPassed {
            observed_version: 3,
        };
        assert!(matches!(
            decide(&half, &passed, t(1), &cfg),
            Decision::Unchanged(_)
        ));
        half.trials_claimed = 3;
        assert!(half.may_claim_trial(&cfg), "a slow round has six slots");
        half.trial_successes = 5;
        assert!(matches!(
            decide(&half, &passed, t(1), &cfg),
            Decision::Transition(_)
        ));
    }

    #[test]
    fn a_round_fails_at_an_error_past_its_timeouts_or_out_of_slots() {
        let cfg = BreakerConfig::default();
        assert_eq!(cfg.trial_verdict(0, 0, 0), TrialVerdict::Undecided);
        assert_eq!(cfg.trial_verdict(1, 1, 1), TrialVerdict::Undecided);
        assert_eq!(cfg.trial_verdict(2, 1, 1), TrialVerdict::Passed);
        assert_eq!(cfg.trial_verdict(2, 0, 0), TrialVerdict::Passed);
        assert_eq!(cfg.trial_verdict(0, 1, 0), TrialVerdict::Failed);
        assert_eq!(cfg.trial_verdict(2, 1, 0), TrialVerdict::Failed);
        assert_eq!(cfg.trial_verdict(0, 2, 2), TrialVerdict::Failed);
        // Two slots cannot hold two successes and a timeout.
        let tight = BreakerConfig {
            trial_calls: 2,
            ..cfg
        };
        assert_eq!(tight.trial_verdict(1, 1, 1), TrialVerdict::Failed);
        let strict = BreakerConfig {
            trial_timeouts_allowed: 0,
            ..cfg
        };
        assert_eq!(strict.trial_verdict(1, 1, 1), TrialVerdict::Failed);
    }

    #[test]
    fn a_stuck_half_open_round_reopens() {
        let open = apply(&closed(), &window_trip(0), t(0));
        let half = apply(&open, &Input::Tick, t(100));
        let cfg = BreakerConfig::default();
        assert!(matches!(
            decide(&half, &Input::Tick, t(120), &cfg),
            Decision::Unchanged(_)
        ));
        let reopened = apply(&half, &Input::Tick, t(160));
        assert_eq!(
            (reopened.state, reopened.failed_trials),
            (BreakerState::Open, 1)
        );
    }

    #[test]
    fn forced_states_are_left_only_by_release() {
        let cfg = BreakerConfig::default();
        let cmd = |command| Input::Command {
            command,
            reason: "maintenance".into(),
            caller: None,
        };
        let forced = apply(&closed(), &cmd(Command::ForceOpen), t(0));
        assert_eq!(forced.state, BreakerState::ForcedOpen);
        assert_eq!(forced.state.target(), ConsumerTarget::Fallback);
        assert_eq!(forced.reason, "force-open: maintenance");
        let signed = Input::Command {
            command: Command::ForceOpen,
            reason: "maintenance".into(),
            caller: Some("arn:aws:iam::123456789012:user/alice".into()),
        };
        assert_eq!(
            apply(&closed(), &signed, t(0)).reason,
            "force-open by arn:aws:iam::123456789012:user/alice: maintenance"
        );
        for input in [
            Input::Tick,
            window_trip(forced.version),
            Input::TrialsPassed {
                observed_version: 1,
            },
        ] {
            assert!(matches!(
                decide(&forced, &input, t(10_000), &cfg),
                Decision::Unchanged(_)
            ));
        }
        let released = apply(&forced, &cmd(Command::Release), t(1));
        assert_eq!(released.state, BreakerState::HalfOpen);
        let pinned = apply(&released, &cmd(Command::ForceClosed), t(2));
        assert_eq!(
            apply(&pinned, &cmd(Command::Release), t(3)).state,
            BreakerState::Closed
        );
        assert!(matches!(
            decide(&closed(), &cmd(Command::Release), t(4), &cfg),
            Decision::Unchanged(_)
        ));
    }

    #[test]
    fn jitter_is_stable_and_in_range() {
        let op = OperatorId::new("op").unwrap();
        for v in 0..1000 {
            let u = jitter_unit(&op, v);
            assert!((0.0..1.0).contains(&u));
            assert_eq!(u, jitter_unit(&op, v));
        }
    }
}
