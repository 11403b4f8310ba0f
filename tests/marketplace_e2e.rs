//! Three operators on the wired gateway, each on a lane of its own as the
//! template deploys them: moto for the AWS APIs, the real function binaries
//! under `cargo lambda watch`, three simulated operators over HTTP.
//!
//! nordic hangs for 15 s while alpha and bravo stay healthy: nordic's breaker
//! opens and its lane moves to the fallback consumer; every request of alpha
//! and bravo is still answered by the operator before its deadline; nordic
//! closes again within the recovery target (30 s) after it is back, probed
//! by the switch.
//!
//! Needs the functions built where `cargo lambda watch` runs them (tools/test
//! does it first).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{TimeDelta, Utc};
use lifeboat_core::ports::{BreakerStore, RequestStore};
use lifeboat_core::request::{OutcomeKind, RequestRecord};
use lifeboat_core::{BreakerState, Operation, OperatorId};
use lifeboat_local::suite::{LocalSuite, SuiteOptions};
use tokio::task::JoinSet;

/// Open periods of 10 s, the switch probing an open operator with a
/// search (one call per 10 s), so it closes seconds after the operator is
/// back, and the real consumer confirming a timeout with a ping.
const SETTINGS: &str = concat!(
    r#"{"default":{"breaker":{"open_base":10000,"open_max":20000,"half_open_timeout":15000},"#,
    r#""probe":{"operation":"search","params":{"from":"HEL","to":"TLL","date":"today+7","passengers":"1"}},"#,
    r#""hang_check":{}}}"#
);
const STARTUP_LIMIT: Duration = Duration::from_secs(600);
const RECOVERY_TARGET: Duration = Duration::from_secs(30);
const DEADLINE: TimeDelta = TimeDelta::seconds(4);
const PER_OPERATOR_RATE: u32 = 4;

fn op(name: &str) -> OperatorId {
    OperatorId::new(name).unwrap()
}

fn request(n: u64, operator: &OperatorId) -> RequestRecord {
    let now = Utc::now();
    RequestRecord {
        request_id: format!("{operator}-{n:05}"),
        operator: operator.clone(),
        operation: Operation::Search,
        params: BTreeMap::from([
            ("from".to_owned(), "HEL".to_owned()),
            ("to".to_owned(), "TLL".to_owned()),
            ("date".to_owned(), "2026-12-24".to_owned()),
            ("passengers".to_owned(), "2".to_owned()),
        ]),
        created_at: now,
        deadline: now + DEADLINE,
    }
}

async fn state(gateway: &LocalSuite, operator: &OperatorId) -> BreakerState {
    gateway
        .breaker_store()
        .load(operator)
        .await
        .unwrap()
        .map_or(BreakerState::Closed, |r| r.state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_operator_hangs_and_the_other_two_keep_answering_live() {
    let (nordic, alpha, bravo) = (op("nordic"), op("alpha"), op("bravo"));
    let mut options = SuiteOptions::new(nordic.clone());
    options.operator_settings = SETTINGS.to_owned();
    options.tick_every = Duration::from_secs(1);
    options.neighbours = vec![alpha.clone(), bravo.clone()];
    // Instances enough for every lane: one per function would serialise
    // the lanes in the harness, which Lambda does not.
    options.concurrency = 8;
    let gateway = Arc::new(
        tokio::time::timeout(STARTUP_LIMIT, LocalSuite::start(options))
            .await
            .expect("the gateway starts within 10 minutes")
            .expect("the gateway starts"),
    );
    assert_eq!(gateway.neighbours().len(), 2);

    // Requests for all three at PER_OPERATOR_RATE each: 8 s healthy, 15 s
    // of nordic hanging, then until nordic is closed again.
    let store = Arc::new(gateway.request_store());
    let operators = [nordic.clone(), alpha.clone(), bravo.clone()];
    let mut written: Vec<RequestRecord> = Vec::new();
    let mut writes = JoinSet::new();
    let started = Instant::now();
    let (mut outage_start, mut opened_at) = (None, None);
    let (mut back, mut back_at, mut closed_after) = (None, None, None);
    let mut n: u64 = 0;
    loop {
        let t = started.elapsed();
        if outage_start.is_none() && t >= Duration::from_secs(8) {
            gateway.set_operator_mode(Some("hang")).await.unwrap();
            outage_start = Some(Utc::now());
        }
        if back.is_none() && t >= Duration::from_secs(23) {
            gateway.set_operator_mode(None).await.unwrap();
            back = Some(Instant::now());
            back_at = Some(Utc::now());
        }
        if let Some(back) = back
            && (closed_after.is_some() || back.elapsed() > RECOVERY_TARGET + Duration::from_secs(5))
        {
            break;
        }
        n += 1;
        for operator in &operators {
            let request = request(n, operator);
            written.push(request.clone());
            let store = Arc::clone(&store);
            writes.spawn(async move { store.put_request(&request).await });
        }
        if n.is_multiple_of(u64::from(PER_OPERATOR_RATE)) {
            let nordic_state = state(&gateway, &nordic).await;
            if outage_start.is_some() && opened_at.is_none() && nordic_state == BreakerState::Open {
                opened_at = Some(Utc::now());
            }
            if let Some(back) = back
                && nordic_state == BreakerState::Closed
            {
                closed_after = Some(back.elapsed());
            }
        }
        while writes.try_join_next().is_some() {}
        tokio::time::sleep(Duration::from_secs(1) / PER_OPERATOR_RATE).await;
    }
    while let Some(done) = writes.join_next().await {
        done.unwrap().unwrap();
    }

    // Every request gets its outcome.
    let outcome_limit = Instant::now() + Duration::from_secs(60);
    let mut by_operator: BTreeMap<String, (usize, usize, usize, Vec<i64>)> = BTreeMap::new();
    let mut failures: BTreeMap<(String, String), usize> = BTreeMap::new();
    for request in &written {
        let stored = loop {
            let stored = store
                .get(&request.operator, &request.request_id)
                .await
                .unwrap()
                .unwrap();
            if stored.outcome.is_some() || Instant::now() > outcome_limit {
                break stored;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let outcome = stored
            .outcome
            .unwrap_or_else(|| panic!("no outcome for {}", request.request_id));
        let entry = by_operator.entry(request.operator.to_string()).or_default();
        entry.0 += 1;
        if let OutcomeKind::Failed { reason, .. } = &outcome.kind {
            *failures
                .entry((request.operator.to_string(), reason.as_str().to_owned()))
                .or_default() += 1;
        }
        if matches!(outcome.kind, OutcomeKind::Answered { .. }) {
            entry.1 += 1;
            if outcome.at <= request.deadline {
                entry.2 += 1;
            }
            entry
                .3
                .push((outcome.at - request.created_at).num_milliseconds());
        }
    }
    for (operator, (total, answered, in_time, latencies)) in &mut by_operator {
        latencies.sort_unstable();
        let p95 = latencies
            .get((latencies.len() * 95 / 100).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0);
        println!(
            "{operator}: {total} requests, {answered} answered, {in_time} before their deadline, answer p95 {p95} ms"
        );
    }
    let opened = opened_at
        .zip(outage_start)
        .map(|(at, start)| (at - start).num_milliseconds() as f64 / 1000.0);
    println!(
        "nordic: opened {opened:?} s after it hung; closed {:?} s after it was back at {back_at:?}",
        closed_after.map(|d| d.as_secs_f64())
    );

    println!("failed requests by operator and reason: {failures:?}");
    assert!(opened.is_some(), "nordic's breaker never opened");
    for neighbour in ["alpha", "bravo"] {
        let (total, answered, in_time, _) = &by_operator[neighbour];
        // Only the simulated operator's own background errors (1 % of
        // healthy calls answer 500): nothing of nordic's hang reaches them.
        for ((operator, reason), count) in &failures {
            if operator == neighbour {
                assert_eq!(
                    reason, "upstream_error",
                    "{neighbour}: {count} requests failed with {reason}"
                );
            }
        }
        assert!(
            *answered as f64 >= 0.95 * *total as f64,
            "{neighbour}: {answered} of {total} answered"
        );
        assert_eq!(
            in_time, answered,
            "{neighbour}: every answer before its deadline"
        );
        assert_eq!(
            state(&gateway, &op(neighbour)).await,
            BreakerState::Closed,
            "{neighbour} never tripped"
        );
    }
    let closed = closed_after.expect("nordic closes again");
    assert!(
        closed <= RECOVERY_TARGET,
        "closed {closed:?} after it was back"
    );
    // Each lane points where its own breaker says.
    for neighbour in gateway.neighbours() {
        let mapping = aws_sdk_lambda::Client::new(gateway.sdk_config())
            .get_event_source_mapping()
            .uuid(&neighbour.mapping_uuid)
            .send()
            .await
            .unwrap();
        let function =
            lifeboat_local::pump::function_name(mapping.function_arn().unwrap_or_default());
        assert_eq!(
            gateway
                .resources()
                .binaries
                .get(function)
                .map(String::as_str),
            Some(lifeboat_local::suite::REAL_CONSUMER),
            "{}'s lane stayed on the real consumer",
            neighbour.operator
        );
    }
}
