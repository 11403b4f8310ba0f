//! The gateway through an outage under load, on paused time: the fast path
//! alone (no alarm here) must open the breaker within 10 s, every request must
//! end with exactly one outcome, half-open must admit at most K trial calls per
//! round, and the breaker must close again after the operator recovers.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use lifeboat_core::memory::MemoryRequestStore;
use lifeboat_core::ports::{Clock, RequestStore, StreamRouter};
use lifeboat_core::request::{FailureReason, RequestRecord};
use lifeboat_core::settings::Settings;
use lifeboat_core::{BreakerState, ConsumerTarget, Operation, OperatorId};
use lifeboat_operator::{Outage, OutageMode, SimConfig, SimulatedOperator};
use lifeboat_sim::{MemorySuite, MemorySuiteConfig, TokioClock};

fn base() -> DateTime<Utc> {
    DateTime::from_timestamp(1_796_032_800, 0).unwrap()
}

fn nordic() -> OperatorId {
    OperatorId::new("nordic").unwrap()
}

/// Requests at `rate` per second until `until`, `outage_rate` inside the outage.
async fn load(
    requests: Arc<MemoryRequestStore>,
    clock: Arc<dyn Clock>,
    until: DateTime<Utc>,
    outage: (DateTime<Utc>, DateTime<Utc>),
    rate: u32,
    outage_rate: u32,
) {
    let mut n = 0u64;
    while clock.now() < until {
        let now = clock.now();
        let per_s = if now >= outage.0 && now < outage.1 {
            outage_rate
        } else {
            rate
        };
        n += 1;
        let request = RequestRecord {
            request_id: format!("r-{n}"),
            operator: nordic(),
            operation: if n.is_multiple_of(4) {
                Operation::Price
            } else {
                Operation::Search
            },
            params: BTreeMap::from([
                ("from".to_owned(), "HEL".to_owned()),
                ("to".to_owned(), "TLL".to_owned()),
                ("date".to_owned(), "2026-12-24".to_owned()),
                ("passengers".to_owned(), "2".to_owned()),
            ]),
            created_at: now,
            deadline: now + TimeDelta::seconds(10),
        };
        requests.put_request(&request).await.unwrap();
        tokio::time::sleep(Duration::from_secs(1) / per_s).await;
    }
}

/// Default settings, with the switch probing an open breaker.
fn probed() -> Settings {
    let mut settings = Settings::default();
    settings.default.probe = Some(
        serde_json::from_str(
            r#"{"operation": "search", "params": {"from": "HEL", "to": "TLL", "date": "today+7"}}"#,
        )
        .unwrap(),
    );
    settings
}

async fn run_outage(mode: OutageMode) {
    let clock: Arc<TokioClock> = Arc::new(TokioClock::starting_at(base()));
    let outage_start = base() + TimeDelta::seconds(60);
    let outage_end = base() + TimeDelta::seconds(240);
    let config = SimConfig {
        outages: vec![Outage {
            start: outage_start,
            end: outage_end,
            mode,
        }],
        ..SimConfig::default()
    };
    let sim = SimulatedOperator::new(nordic(), config, clock.clone());
    let mut gateway = MemorySuite::new(
        Arc::new(sim.clone()),
        clock.clone(),
        MemorySuiteConfig {
            operators: vec![nordic()],
            settings: probed(),
            ..MemorySuiteConfig::default()
        },
    );
    let counted = sim.clone();
    gateway.count_operator_calls_with(Box::new(move || counted.stats().questions()));
    let load_until = base() + TimeDelta::seconds(420);
    let load_task = tokio::spawn(load(
        gateway.requests.clone(),
        clock.clone(),
        load_until,
        (outage_start, outage_end),
        10,
        20,
    ));
    // Run past the end of the load so every record is delivered.
    gateway.run_until(load_until + TimeDelta::seconds(30)).await;
    load_task.await.unwrap();

    // Detection by the fast path alone.
    let opened = gateway
        .transitions
        .iter()
        .find(|t| t.to == BreakerState::Open)
        .expect("the breaker opened");
    let detection = (opened.at - outage_start).num_milliseconds() as f64 / 1000.0;
    println!("{mode}: detection {detection:.1} s ({})", opened.reason);
    assert!(
        opened.at >= outage_start,
        "no false trip before the outage: {opened:?}"
    );
    assert!(
        detection <= 10.0,
        "opened {detection} s after the outage started"
    );
    assert_eq!(opened.stream, ConsumerTarget::Fallback);

    // Every request exactly one outcome.
    let counts = gateway.requests.counts();
    println!(
        "{mode}: requests {} with outcome {} refused second outcomes {}",
        counts.total, counts.with_outcome, counts.refused_outcome_writes
    );
    assert!(counts.total > 3000);
    assert_eq!(counts.with_outcome, counts.total);
    assert_eq!(counts.outcome_writes as usize, counts.total);

    // Half-open rounds admit at most K trial calls, by the operator's own count.
    let k = MemorySuiteConfig::default()
        .settings
        .default
        .breaker
        .trial_calls as u64;
    let mut rounds = 0;
    for pair in gateway.transitions.windows(2) {
        if pair[0].to != BreakerState::HalfOpen {
            continue;
        }
        rounds += 1;
        let calls = pair[1].operator_calls.unwrap() - pair[0].operator_calls.unwrap();
        println!(
            "{mode}: half-open round at +{} s: {calls} operator calls, then {}",
            (pair[0].at - base()).num_seconds(),
            pair[1].to
        );
        assert!(
            calls <= k,
            "half-open round admitted {calls} calls, more than {k}"
        );
    }
    // While open, nobody but the switch's probes called the operator, at
    // most one per 10 s; besides them, at most a round's trial calls that a
    // consumer batch, running beside the switch, had claimed before the
    // round failed.
    let round = u64::from(
        MemorySuiteConfig::default()
            .settings
            .default
            .breaker
            .trial_calls,
    );
    for pair in gateway.transitions.windows(2) {
        if pair[0].to == BreakerState::Open {
            let calls = pair[1].operator_calls.unwrap() - pair[0].operator_calls.unwrap();
            let probes = pair[1].probe_calls - pair[0].probe_calls;
            assert!(
                calls >= probes && calls - probes <= round,
                "operator called while open: {calls} calls, {probes} probes: {pair:#?}"
            );
            let open_s = (pair[1].at - pair[0].at).num_seconds().unsigned_abs();
            // One probe per 10 s, plus the calls of the half-open round
            // that ends the period (counted in the same switch invocation
            // as the transition that starts it): the probe or trial that
            // opens it and at most the round's trial calls.
            assert!(
                probes <= open_s / 10 + 1 + round,
                "{probes} probes in {open_s} s"
            );
        }
    }
    assert!(rounds >= 1);

    // While open nobody called the operator: requests failed fast.
    let fast_failures = gateway
        .requests
        .all()
        .iter()
        .filter_map(|s| s.outcome.as_ref())
        .filter(|o| o.failure_reason() == Some(FailureReason::BreakerOpen))
        .count();
    assert!(fast_failures > 100);

    // Closed again after recovery, and the stream points back.
    let last = gateway.transitions.last().unwrap();
    assert_eq!(last.to, BreakerState::Closed, "{:#?}", gateway.transitions);
    assert!(last.at >= outage_end);
    assert_eq!(
        gateway
            .router_of(&last.operator)
            .unwrap()
            .current()
            .await
            .unwrap(),
        ConsumerTarget::Real
    );
    let recovery = (last.at - outage_end).num_milliseconds() as f64 / 1000.0;
    println!("{mode}: closed {recovery:.1} s after the operator recovered; transitions:");
    for t in &gateway.transitions {
        println!(
            "  +{:>6.1} s  {} → {} v{} ({}) stream → {}",
            (t.at - base()).num_milliseconds() as f64 / 1000.0,
            t.from,
            t.to,
            t.version,
            t.reason,
            t.stream
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_hanging_operator_opens_fast_and_recovers() {
    run_outage(OutageMode::Hang).await;
}

#[tokio::test(start_paused = true)]
async fn a_refusing_operator_opens_fast_and_recovers() {
    run_outage(OutageMode::Refuse).await;
}

#[tokio::test(start_paused = true)]
async fn a_failing_operator_opens_fast_and_recovers() {
    run_outage(OutageMode::ServerError).await;
}
