#![allow(clippy::unwrap_used)]

use chrono::{DateTime, TimeDelta, Utc};
use lifeboat_core::{Operation, OperatorId};

use super::engine::{self, ReplayConfig, replay};
use super::model::{self, IncidentModel};
use super::{calibrate, named};
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
    assert_eq!(old.p50_ms, 4_000.0 + engine::INVOCATION_MS);
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
        "failure_rate_overall",
        "invocations",
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

#[test]
fn answers_given_without_a_call_are_no_invocation_of_the_calling_lambda() {
    // Ten healthy minutes, then fifty in which the operator never answers:
    // the old alarm opens the breaker within about 100 s and the fallback
    // answers most of the hour. Those answers are no invocation of the
    // operator-calling Lambda and have no duration (the old replay counted
    // 140 ms for each, and its median was 140 ms).
    let calls = hour(60, 600, 3_600, 0);
    let old = named("old").unwrap();
    let figures = replay(&calls, &old);
    let durations = engine::durations(&calls, &old);
    assert_eq!(figures.invocations, durations.len() as u64);
    assert_eq!(figures.invocations, figures.calls, "old has no probes");
    assert!(
        figures.invocations < 1_200,
        "the fallback answered most of the hang: {}",
        figures.invocations
    );
    assert!(
        durations
            .iter()
            .all(|d| *d >= 1_200.0 + engine::INVOCATION_MS),
        "every duration is a call's"
    );
    assert_eq!(figures.p50_ms, 1_200.0 + engine::INVOCATION_MS);
    // The outage day's median: the calls made that day, not the fallback's.
    assert_eq!(
        figures.outage_day_median_ms,
        Some(1_200.0 + engine::INVOCATION_MS)
    );
}

/// `per_day` calls on each of `rates.len()` days, one every 30 s, the first
/// `rate * per_day` of each day's failing.
fn days_failing(rates: &[f64], per_day: i64) -> Vec<CallRecord> {
    let mut calls = Vec::new();
    for (day, rate) in rates.iter().enumerate() {
        let failing = (rate * per_day as f64).round() as i64;
        for k in 0..per_day {
            calls.push(CallRecord {
                at: t0() + TimeDelta::days(day as i64) + TimeDelta::seconds(30 * k),
                operator: OperatorId::new("nordic").unwrap(),
                operation: Operation::Search,
                duration_ms: 1_200.0,
                outcome: if k < failing {
                    CallOutcome::Failed
                } else {
                    CallOutcome::Answered
                },
                question: None,
            });
        }
    }
    calls
}

#[test]
fn the_failure_rate_is_the_median_daily_rate() {
    // No detector at all: every call is made, so the rates are the
    // recording's. Days failing 10 %, 20 % and 90 %: the median day fails
    // 20 %; over the three days, 40 % did (the old replay's figure).
    let mut config: ReplayConfig = named("old").unwrap();
    config.alarm = None;
    config.fast_detector = false;
    let calls = days_failing(&[0.1, 0.9, 0.2], 100);
    let figures = replay(&calls, &config);
    assert_eq!(figures.calls, 300);
    assert!((figures.failure_rate - 0.2).abs() < 1e-9, "{figures:?}");
    assert!(
        (figures.failure_rate_overall - 0.4).abs() < 1e-9,
        "{figures:?}"
    );
    // An even number of days: the mean of the middle two.
    let calls = days_failing(&[0.1, 0.9, 0.2, 0.3], 100);
    let figures = replay(&calls, &config);
    assert!((figures.failure_rate - 0.25).abs() < 1e-9, "{figures:?}");
}

#[test]
fn tuned_answers_from_the_recent_and_last_good_cache_and_old_does_not() {
    // Ten questions asked in turn, a ten-minute hang.
    let calls = hour(30, 600, 1_200, 10);
    let old = replay(&calls, &named("old").unwrap());
    let tuned = replay(&calls, &named("tuned").unwrap());
    assert_eq!(old.customers.fresh + old.customers.last_good, 0);
    // After its change the incident's system answered from a recent cache,
    // then the last good answer: nobody was given nothing.
    assert!(tuned.customers.fresh > 800, "{:?}", tuned.customers);
    assert!(tuned.customers.last_good > 0, "{:?}", tuned.customers);
    assert_eq!(tuned.customers.unavailable, 0, "{:?}", tuned.customers);
    assert!(old.customers.unavailable >= 590, "{:?}", old.customers);
    // It still had no probes and no fast detector: customers' calls were
    // its trials.
    let config = named("tuned").unwrap();
    assert!(!config.fast_detector);
    assert!(config.settings.default.probe.is_none());
}

#[test]
fn the_synthetic_weeks_keep_the_incidents_outage_facts() {
    // 17 of the last 21 days with an outage, about 18 hours in all, at
    // twice the normal hourly traffic: measured on the generated calls.
    let model = IncidentModel::calibrated();
    let nordic = OperatorId::new("nordic").unwrap();
    let calls = model.generate(&nordic, 7, t0());
    let facts = model::outage_facts(&calls, 21);
    assert_eq!(facts.outage_days, 17, "{facts:?}");
    assert_eq!(facts.outage_days_before_window, 0, "{facts:?}");
    assert!(
        (17.5..=18.5).contains(&facts.unavailable_hours),
        "{facts:?}"
    );
    assert!((1.8..=2.2).contains(&facts.outage_traffic), "{facts:?}");
}

#[test]
fn the_calibration_is_reported_on_seeds_it_was_not_fitted_on() {
    let mut model = IncidentModel::calibrated();
    model.days = 2;
    model.outage_days = 1;
    model.outage_window_days = 2;
    let nordic = OperatorId::new("nordic").unwrap();
    // The default seeds (1-5) are not the fitting ones.
    assert!(!(1..=5).any(|s| calibrate::FIT_SEEDS.contains(&s)));
    let held = super::calibration(&nordic, &model, 1, 1);
    assert_eq!(held["held_out"], true, "{held}");
    assert!(held["figures"]["mean_ms"]["model"].is_number(), "{held}");
    let fitted = super::calibration(&nordic, &model, *calibrate::FIT_SEEDS.start(), 1);
    assert_eq!(fitted["held_out"], false, "{fitted}");
}

#[test]
fn the_parameter_search_lowers_the_score_and_finds_the_same_model_twice() {
    // A small model, for speed: one day with its outage, one seed.
    let mut from = IncidentModel::search_start();
    from.days = 1;
    from.outage_days = 1;
    from.outage_window_days = 1;
    from.calls_per_s = 0.05;
    let nordic = OperatorId::new("nordic").unwrap();
    let start_score = calibrate::score(&calibrate::measure(&nordic, &from, &[9], t0(), false));
    let a = calibrate::search(&nordic, from.clone(), &[9], t0(), |_| {});
    let b = calibrate::search(&nordic, from.clone(), &[9], t0(), |_| {});
    assert!(a.score < start_score, "{} vs {start_score}", a.score);
    assert_eq!(a.model, b.model);
    assert_eq!(a.score, b.score);
    // Only the searched parameters moved: the outage facts stay.
    assert_eq!(a.model.hang_minutes, from.hang_minutes);
    assert_eq!(a.model.outage_traffic, from.outage_traffic);
    assert_eq!(a.model.outage_days, from.outage_days);
}
