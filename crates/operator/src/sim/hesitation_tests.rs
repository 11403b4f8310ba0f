//! A hesitating operator over a simulated day: its answer times and its
//! pings' keep the healthy figures, and its load tail grows with the load.

use std::time::Duration;

use lifeboat_core::ManualClock;

use super::*;
use crate::hesitation::Hesitation;

fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2025-06-01T08:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

/// `calls_per_s` searches a second for `hours`, each followed at once by
/// a ping when it would time out (as the hang check asks one): the
/// searches' times, and the pings' times.
fn day(config: SimConfig, calls_per_s: f64, hours: u64) -> (Vec<Duration>, Vec<Duration>) {
    let clock = ManualClock::new(t0());
    let sim = SimulatedOperator::new(
        OperatorId::new("nordic").unwrap(),
        config,
        Arc::new(clock.clone()),
    );
    let params: BTreeMap<String, String> = [("from", "HEL"), ("to", "TLL"), ("date", "2025-06-02")]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let budget = Budget::with_timeout(Duration::from_secs(3));
    let step = Duration::from_secs_f64(1.0 / calls_per_s);
    let (mut searches, mut pings) = (Vec::new(), Vec::new());
    let mut at = Duration::ZERO;
    while at < Duration::from_secs(hours * 3_600) {
        let plan = sim.plan(Operation::Search, &params, &budget, None);
        searches.push(plan.delay);
        if plan.delay >= budget.timeout {
            clock.advance(budget.timeout);
            let ping = sim.plan(Operation::Ping, &params, &budget, None);
            pings.push(ping.delay);
            clock.advance(step.saturating_sub(budget.timeout));
        } else {
            clock.advance(step);
        }
        at += step.max(budget.timeout);
    }
    (searches, pings)
}

fn share(times: &[Duration], from_ms: u64, to_ms: u64) -> f64 {
    let hits = times
        .iter()
        .filter(|d| (from_ms..to_ms).contains(&(d.as_millis() as u64)))
        .count();
    hits as f64 / times.len() as f64
}

fn over_a_second(pings: &[Duration]) -> usize {
    pings
        .iter()
        .filter(|d| **d >= Duration::from_secs(1))
        .count()
}

#[test]
fn a_hesitating_operator_keeps_the_healthy_figures() {
    let (mut searches, pings) = day(SimConfig::default(), 1.3, 12);
    searches.sort();
    let median = searches[searches.len() / 2];
    assert!(
        (Duration::from_millis(1_300)..Duration::from_millis(1_700)).contains(&median),
        "median {median:?}"
    );
    let fast = share(&searches, 550, 2_050);
    let second = share(&searches, 1_850, 2_750);
    let timeouts = share(&searches, 3_000, u64::MAX);
    assert!((0.60..0.68).contains(&fast), "fast share {fast}");
    assert!((0.28..0.35).contains(&second), "second cluster {second}");
    assert!((0.045..0.065).contains(&timeouts), "timeouts {timeouts}");
    // Right after a timed-out search, a ping now and then takes more
    // than a second (under 3 % of them), and some take more than two.
    let slow = over_a_second(&pings);
    assert!(
        slow > 0 && (slow as f64) < 0.03 * pings.len() as f64,
        "{slow} of {} pings over a second",
        pings.len()
    );
    assert!(pings.iter().all(|d| *d < Duration::from_secs(10)));
}

#[test]
fn without_hesitation_pings_answer_at_once() {
    let config = SimConfig {
        hesitation: Hesitation::off(),
        ..SimConfig::default()
    };
    let (mut searches, pings) = day(config, 1.3, 12);
    assert!(!pings.is_empty());
    assert!(pings.iter().all(|d| *d == Duration::from_millis(30)));
    searches.sort();
    let timeouts = share(&searches, 3_000, u64::MAX);
    assert!((0.035..0.05).contains(&timeouts), "timeouts {timeouts}");
}

#[test]
fn the_load_tail_grows_with_the_load() {
    // Slow moments off: only the load's tail.
    let tail_only = SimConfig {
        hesitation: Hesitation {
            moment_every: Duration::ZERO,
            ..Hesitation::default()
        },
        ..SimConfig::default()
    };
    let (_, quiet) = day(tail_only.clone(), 0.2, 48);
    let (_, busy) = day(tail_only, 3.0, 12);
    let queued = |pings: &[Duration]| {
        pings
            .iter()
            .filter(|d| **d > Duration::from_millis(30))
            .count() as f64
            / pings.len() as f64
    };
    let (q, b) = (queued(&quiet), queued(&busy));
    assert!(q < 0.03, "quiet: {q} of pings queued");
    assert!((0.08..0.25).contains(&b), "busy: {b} of pings queued");
}
