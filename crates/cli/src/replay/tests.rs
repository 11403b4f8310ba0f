#![allow(clippy::unwrap_used)]

use chrono::{DateTime, TimeDelta, Utc};
use lifeboat_core::{Operation, OperatorId};

use super::engine::{self, replay};
use super::named;
use crate::ops::calls::{CallOutcome, CallRecord};

fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_793_577_600, 0).unwrap()
}

/// One call a second for `minutes`, answered in 1.2 s, except from
/// `hang_from` to `hang_to` (seconds) when none is answered within 7 s.
/// `questions` questions asked in turn (0: each call a question of its own).
fn hour(minutes: i64, hang_from: i64, hang_to: i64, questions: i64) -> Vec<CallRecord> {
    (0..minutes * 60)
        .map(|s| {
            let hung = (hang_from..hang_to).contains(&s);
            CallRecord {
                at: t0() + TimeDelta::seconds(s),
                operator: OperatorId::new("nordic").unwrap(),
                operation: Operation::Search,
                duration_ms: if hung { 7_000.0 } else { 1_200.0 },
                outcome: if hung {
                    CallOutcome::Timeout
                } else {
                    CallOutcome::Answered
                },
                question: (questions > 0).then(|| format!("q{}", s % questions)),
            }
        })
        .collect()
}

#[test]
fn a_hang_opens_lifeboat_in_seconds_and_the_old_alarm_in_about_a_hundred() {
    let calls = hour(30, 600, 1_200, 0);
    assert_eq!(engine::outages(&calls).len(), 1);
    let old = replay(&calls, &named("old").unwrap());
    let lifeboat = replay(&calls, &named("lifeboat").unwrap());
    let old_detection = old.detection_s.unwrap();
    let lifeboat_detection = lifeboat.detection_s.unwrap();
    // Three 30-second periods at a 50 % error rate, counted when calls end
    // (7 s after they start).
    assert!((90.0..=130.0).contains(&old_detection), "{old_detection}");
    // Five timeouts in a row: the fifth call ends 3 s after it starts.
    assert!(lifeboat_detection <= 10.0, "{lifeboat_detection}");
    // Probes while open, one per 10 s, and their trials: not customers'.
    assert!(
        lifeboat.calls_while_open <= 2 * 600 / 10 + 10,
        "{}",
        lifeboat.calls_while_open
    );
    assert!(old.openings >= 1 && lifeboat.openings >= 1);
}

#[test]
fn the_cache_answers_repeated_questions_through_a_hang() {
    // Ten questions asked in turn.
    let calls = hour(30, 600, 1_200, 10);
    let old = replay(&calls, &named("old").unwrap());
    let lifeboat = replay(&calls, &named("lifeboat").unwrap());
    // The old system has no cache: customers got nothing while it hung.
    assert_eq!(old.customers.last_good + old.customers.fresh, 0);
    assert!(old.customers.unavailable >= 590, "{:?}", old.customers);
    // lifeboat: fresh within five minutes of an answer, last good after.
    assert_eq!(
        lifeboat.customers.unavailable, 0,
        "{:?}",
        lifeboat.customers
    );
    assert!(lifeboat.customers.fresh > 1_000, "{:?}", lifeboat.customers);
    assert!(lifeboat.customers.last_good > 0, "{:?}", lifeboat.customers);
    // Calls for the questions gone stale, probes and their trials.
    assert!(lifeboat.calls < 200, "{}", lifeboat.calls);
}

#[test]
fn budgets_cut_answers_where_the_configuration_says() {
    let mut calls = hour(5, 0, 0, 0);
    for c in &mut calls {
        c.duration_ms = 4_000.0;
        c.question = None;
    }
    let old = replay(&calls, &named("old").unwrap());
    let tuned = replay(&calls, &named("tuned").unwrap());
    assert_eq!(old.failure_rate, 0.0);
    assert_eq!(old.customers.live, 300);
    assert_eq!(old.p50_ms, 4_000.0 + engine::FALLBACK_MS);
    // Under 3 s every call times out, and the alarm opens the breaker.
    assert_eq!(tuned.failure_rate, 1.0);
    assert_eq!(tuned.customers.live, 0);
    assert!(tuned.openings >= 1);
}

#[test]
fn the_same_calls_replay_the_same() {
    let calls = hour(20, 300, 500, 7);
    for name in ["old", "tuned", "lifeboat"] {
        let config = named(name).unwrap();
        assert_eq!(replay(&calls, &config), replay(&calls, &config), "{name}");
    }
}

#[test]
fn configuration_files_name_their_errors() {
    let dir = std::env::temp_dir().join(format!("lifeboat-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("fast.json");
    std::fs::write(
        &good,
        r#"{"operator_settings": {"default": {"budgets": {"search": {"timeout": 2000, "slow_after": 1600}}}},
            "alarm": {"period_s": 10, "evaluation_periods": 2, "threshold": 5}}"#,
    )
    .unwrap();
    let config = super::config(good.to_str().unwrap()).unwrap();
    assert_eq!(config.name, "fast");
    assert!(config.fast_detector);
    let bad = dir.join("bad.json");
    std::fs::write(&bad, r#"{"alarm": {"period": 10}}"#).unwrap();
    let err = super::config(bad.to_str().unwrap()).unwrap_err();
    assert!(err.contains("bad.json") && err.contains("period"), "{err}");
    let missing = super::config("no-such-config").unwrap_err();
    assert!(missing.contains("not old, tuned or lifeboat"), "{missing}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_json_keeps_the_contracts_field_names() {
    let calls = hour(10, 120, 300, 5);
    let figures = serde_json::to_value(replay(&calls, &named("tuned").unwrap())).unwrap();
    for field in [
        "p50_ms",
        "p95_ms",
        "mean_ms",
        "outage_day_median_ms",
        "failure_rate",
        "detection_s",
        "calls_while_open",
    ] {
        assert!(figures.get(field).is_some(), "{field}: {figures}");
    }
    for field in ["live", "fresh", "last_good", "unavailable"] {
        assert!(figures["customers"].get(field).is_some(), "{field}");
    }
}

#[test]
fn probes_turned_off_end_open_periods_on_their_timer() {
    // A probe in the settings but `probe_every` 0: the switch probes
    // nothing, and the replay must not wait for a probe that never comes.
    let mut config = named("lifeboat").unwrap();
    config.settings.default.breaker.probe_every = std::time::Duration::ZERO;
    let calls = hour(10, 60, 400, 0);
    let figures = replay(&calls, &config);
    assert!(figures.openings >= 1);
    // Customers' calls are the trials once each open period ends.
    assert!(figures.calls_while_open > 0);
}
