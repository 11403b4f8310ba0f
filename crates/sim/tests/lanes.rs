//! A lane runs as many batches at once as its mapping's parallelization:
//! the template's, or the one its operator's settings ask, which the
//! circuit switch's tick sets on the mapping.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use lifeboat_core::ports::{Clock, RequestStore};
use lifeboat_core::request::RequestRecord;
use lifeboat_core::settings::{Parallelization, Settings};
use lifeboat_core::{Operation, OperatorId};
use lifeboat_operator::{Outage, OutageMode, SimConfig, SimulatedOperator};
use lifeboat_sim::{MemorySuite, MemorySuiteConfig, TokioClock};

fn base() -> DateTime<Utc> {
    DateTime::from_timestamp(1_796_032_800, 0).unwrap()
}

fn nordic() -> OperatorId {
    OperatorId::new("nordic").unwrap()
}

/// The most batches in flight at once over a minute of 300 searches/s to
/// an operator browning out (most calls take most of the budget), and the
/// parallelization the lane's mapping was given.
async fn busiest(settings: Settings) -> (usize, Option<Parallelization>) {
    let clock: Arc<TokioClock> = Arc::new(TokioClock::starting_at(base()));
    let config = SimConfig {
        outages: vec![Outage {
            start: base(),
            end: base() + TimeDelta::seconds(120),
            mode: OutageMode::Brownout,
        }],
        ..SimConfig::default()
    };
    let sim = SimulatedOperator::new(nordic(), config, clock.clone());
    let mut gateway = MemorySuite::new(
        Arc::new(sim),
        clock.clone(),
        MemorySuiteConfig {
            operators: vec![nordic()],
            settings,
            ..MemorySuiteConfig::default()
        },
    );
    let requests = gateway.requests.clone();
    let load_clock = clock.clone();
    let until = base() + TimeDelta::seconds(60);
    let load = tokio::spawn(async move {
        let mut n = 0u64;
        while load_clock.now() < until {
            n += 1;
            let now = load_clock.now();
            let request = RequestRecord {
                request_id: format!("r-{n}"),
                operator: nordic(),
                operation: Operation::Search,
                params: BTreeMap::from([
                    ("from".to_owned(), "HEL".to_owned()),
                    ("to".to_owned(), "TLL".to_owned()),
                    ("date".to_owned(), format!("2026-12-{:02}", 1 + n % 28)),
                    ("passengers".to_owned(), "2".to_owned()),
                ]),
                created_at: now,
                deadline: now + TimeDelta::seconds(10),
            };
            requests.put_request(&request).await.unwrap();
            tokio::time::sleep(Duration::from_secs(1) / 300).await;
        }
    });
    let mut most = 0;
    while clock.now() < until {
        if !gateway.step().await {
            tokio::time::sleep(gateway.config().poll).await;
        }
        most = most.max(gateway.batches_in_flight());
    }
    load.await.unwrap();
    let set = gateway.router_of(&nordic()).unwrap().parallelization();
    (most, set)
}

#[tokio::test(start_paused = true)]
async fn a_lane_runs_at_the_template_parallelization_or_its_own() {
    let (template, set) = busiest(Settings::default()).await;
    println!("template: at most {template} batches at once");
    assert_eq!(set, None);
    assert_eq!(template, MemorySuiteConfig::default().parallelization);

    let mut settings = Settings::default();
    settings.default.lane.parallelization = Parallelization::new(10).ok();
    let (own, set) = busiest(settings).await;
    println!("lane.parallelization 10: at most {own} batches at once");
    assert_eq!(set, Parallelization::new(10).ok());
    assert_eq!(own, 10);
}
