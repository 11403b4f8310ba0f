//! A function taking its endpoints and settings from the operator config
//! table instead of its environment, end to end: moto, the real function
//! binaries under `cargo lambda watch` and the simulated operator, with
//! `OPERATOR_ENDPOINTS` and `OPERATOR_SETTINGS` empty and the operator
//! config table's item holding both (`SuiteOptions::operator_config_in_table`),
//! as a stack of hundreds of operators runs. The real consumer cannot start
//! without endpoints, so a search answered by the operator is one whose
//! endpoint came from the table; the functions' log says where each
//! function's endpoints and settings came from.
//!
//! Needs the functions built where `cargo lambda watch` runs them
//! (tools/test does it first):
//! `CARGO_TARGET_DIR=target/lambda-watch cargo build --bin real-consumer --bin fallback-consumer --bin circuit-switch`.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chrono::{TimeDelta, Utc};
use lifeboat_core::operator_config::OPERATOR_CONFIG_TABLE;
use lifeboat_core::ports::RequestStore;
use lifeboat_core::request::{OutcomeKind, RequestRecord};
use lifeboat_core::{Operation, OperatorId};
use lifeboat_local::suite::{LocalSuite, REAL_CONSUMER, SuiteOptions};

/// Start-up may have to build the functions if they were not built first.
const STARTUP_LIMIT: Duration = Duration::from_secs(600);
/// From the request's write to its outcome.
const ANSWER_LIMIT: Duration = Duration::from_secs(60);
const SETTINGS: &str = r#"{"default":{"breaker":{"open_base":10000}}}"#;

fn nordic() -> OperatorId {
    OperatorId::new("nordic").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_real_consumer_calls_the_operator_at_the_endpoint_the_table_gives() {
    let mut options = SuiteOptions::new(nordic());
    options.operator_settings = SETTINGS.to_owned();
    options.operator_config_in_table = true;
    let gateway = tokio::time::timeout(STARTUP_LIMIT, LocalSuite::start(options))
        .await
        .expect(
            "the gateway starts within 10 minutes (build the functions first, see the module docs)",
        )
        .expect("the gateway starts with its endpoints in the operator config table");
    let env: BTreeMap<_, _> = gateway.function_env().iter().cloned().collect();
    assert_eq!(
        env["OPERATOR_ENDPOINTS"], "",
        "no endpoints in the environment"
    );
    assert_eq!(env["OPERATOR_SETTINGS"], "");
    assert_eq!(
        env[OPERATOR_CONFIG_TABLE],
        gateway.resources().names.operator_config_table
    );

    let now = Utc::now();
    let request = RequestRecord {
        request_id: "from-the-table".to_owned(),
        operator: nordic(),
        operation: Operation::Search,
        params: BTreeMap::from([
            ("from".to_owned(), "HEL".to_owned()),
            ("to".to_owned(), "TLL".to_owned()),
            ("date".to_owned(), "2026-12-24".to_owned()),
            ("passengers".to_owned(), "2".to_owned()),
        ]),
        created_at: now,
        deadline: now + TimeDelta::seconds(4),
    };
    let store = gateway.request_store();
    store.put_request(&request).await.unwrap();
    // Poll for the outcome (a wall-clock deadline: the functions run in
    // real time).
    let deadline = Instant::now() + ANSWER_LIMIT;
    let outcome = loop {
        let stored = store.get(&nordic(), &request.request_id).await.unwrap();
        if let Some(outcome) = stored.and_then(|s| s.outcome) {
            break outcome;
        }
        assert!(
            Instant::now() < deadline,
            "no outcome within {ANSWER_LIMIT:?}; the functions' log: {}",
            gateway.watch().log_hint()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        matches!(outcome.kind, OutcomeKind::Answered { .. }),
        "the operator answered: {outcome:?}"
    );
    assert_eq!(outcome.by, REAL_CONSUMER);
    assert!(gateway.operator_stats().await.unwrap().total >= 1);

    let log = gateway
        .watch()
        .log_path()
        .map(|p| std::fs::read_to_string(p).unwrap_or_default())
        .unwrap_or_default();
    let read: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("operator configuration read"))
        .collect();
    assert!(
        read.iter()
            .any(|l| l.contains("attribute endpoints") && l.contains("attribute settings")),
        "a function logs that its endpoints and settings came from the table: {read:?}"
    );
    gateway.stop().await;
}
