//! The fault campaign's smaller run on moto (docs/chaos.md, "On moto"): the
//! real function binaries under `cargo lambda watch`, two operators on lanes
//! of their own, search, the off-sale listener and the circuit switch, with
//! every AWS call of the functions passing a fault proxy
//! (`lifeboat_local::faults`) that fails a share of their table, bus,
//! mapping and timer-queue calls (`AWS_MAX_ATTEMPTS=1`: each fault reaches
//! lifeboat's code). While the faults run, nordic hangs and comes back.
//!
//! Promises checked: every request the searches wrote gets an outcome; the
//! breakers, nordic's stream mapping and both sale statuses reach the truth
//! within [`CONVERGENCE`] of the faults stopping; every class of injected
//! fault shows in the functions' `DependencyErrors` metric lines, each
//! counted exactly once (but PutEvents entries, which the publisher sends
//! again: only an entry refused three times is a failed call).
//!
//! Build the function binaries first (see `tests/lib.rs`). Prints its
//! figures; `cargo test -p lifeboat-e2e --test chaos_moto -- --nocapture`.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{TimeDelta, Utc};
use lifeboat_core::events::SaleStatus;
use lifeboat_core::ports::{BreakerStore, SaleStatusStore};
use lifeboat_core::{BreakerState, OperatorId};
use lifeboat_local::alarm::datapoints;
use lifeboat_local::suite::{CustomerOptions, LocalSuite, SuiteOptions};
use tokio::task::JoinSet;

/// Probes and a hang check, short open periods, a tick a second.
const SETTINGS: &str = concat!(
    r#"{"default":{"breaker":{"open_base":10000,"open_max":20000,"half_open_timeout":15000},"#,
    r#""probe":{"operation":"search","params":{"from":"HEL","to":"TLL","date":"today+7","passengers":"1"}},"#,
    r#""hang_check":{}}}"#
);
const STARTUP_LIMIT: Duration = Duration::from_secs(900);
/// The share of the functions' own AWS calls the proxy fails.
const FAULT_RATE: f64 = 0.1;
/// Faults from the start; nordic hangs from HANG_AT to BACK_AT; the faults
/// stop at FAULTS_END.
const HANG_AT: Duration = Duration::from_secs(10);
const BACK_AT: Duration = Duration::from_secs(35);
const FAULTS_END: Duration = Duration::from_secs(45);
/// The bound: everything at the truth this long after the faults stop.
const CONVERGENCE: Duration = Duration::from_secs(120);
/// Searches a second per operator, each a new question.
const RATE: u32 = 2;

fn op(name: &str) -> OperatorId {
    OperatorId::new(name).unwrap()
}

/// The n-th question for `operator`: a new date (and party) each time, so
/// each search misses the cache and writes a request.
fn question(operator: &OperatorId, n: u32) -> String {
    let date = (Utc::now() + TimeDelta::days(i64::from(n % 300) + 1)).format("%Y-%m-%d");
    let passengers = 1 + (n / 300) % 9;
    format!("/sailings?operator={operator}&from=HEL&to=TLL&date={date}&passengers={passengers}")
}

/// Where each operator stands: breaker state, nordic's mapping target, sale.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Truth {
    breakers: Vec<BreakerState>,
    mapping_on_real: bool,
    on_sale: Vec<bool>,
}

async fn observe(gateway: &LocalSuite, operators: &[OperatorId]) -> Truth {
    let breakers = gateway.breaker_store();
    let sale = gateway.sale_status_store().unwrap();
    let mut truth = Truth {
        breakers: Vec::new(),
        mapping_on_real: false,
        on_sale: Vec::new(),
    };
    for operator in operators {
        let state = breakers
            .load(operator)
            .await
            .ok()
            .flatten()
            .map_or(BreakerState::Closed, |r| r.state);
        truth.breakers.push(state);
        let on_sale = sale
            .load(operator)
            .await
            .ok()
            .flatten()
            .is_none_or(|r| r.applied_status == SaleStatus::OnSale);
        truth.on_sale.push(on_sale);
    }
    truth.mapping_on_real = gateway
        .mapping_function()
        .await
        .is_ok_and(|f| f.contains("real-consumer"));
    truth
}

/// Every request item of `table`: (has an outcome, id).
async fn requests(gateway: &LocalSuite, table: &str) -> Vec<(bool, String)> {
    let client = aws_sdk_dynamodb::Client::new(gateway.sdk_config());
    let mut items = Vec::new();
    let mut start = None;
    loop {
        let page = client
            .scan()
            .table_name(table)
            .set_exclusive_start_key(start)
            .send()
            .await
            .unwrap();
        for item in page.items() {
            let id = item
                .get("request_id")
                .and_then(|v| v.as_s().ok())
                .cloned()
                .unwrap_or_default();
            items.push((item.contains_key("outcome"), id));
        }
        start = page.last_evaluated_key().cloned();
        if start.is_none() {
            return items;
        }
    }
}

/// `DependencyErrors` in the watch log from byte `from` on: by `Dependency`,
/// and the dimensionless total.
fn dependency_errors(log: &std::path::Path, from: usize) -> (BTreeMap<String, f64>, f64) {
    let text = std::fs::read(log).unwrap();
    let text = String::from_utf8_lossy(text.get(from..).unwrap_or_default());
    let (mut by, mut total) = (BTreeMap::new(), 0.0);
    for line in text.lines() {
        for point in datapoints(line) {
            if point.name != "DependencyErrors" {
                continue;
            }
            match point.dimensions.iter().find(|(k, _)| k == "Dependency") {
                Some((_, dependency)) => *by.entry(dependency.clone()).or_default() += point.value,
                None if point.dimensions.is_empty() => total += point.value,
                None => {}
            }
        }
    }
    (by, total)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fault_campaign_on_moto_keeps_every_promise() {
    let (nordic, alpha) = (op("nordic"), op("alpha"));
    let operators = [nordic.clone(), alpha.clone()];
    let mut options = SuiteOptions::new(nordic.clone());
    options.operator_settings = SETTINGS.to_owned();
    options.tick_every = Duration::from_secs(1);
    options.neighbours = vec![alpha.clone()];
    options.concurrency = 6;
    options.customer = Some(CustomerOptions {
        sale_on_sale_hold_s: 2,
        sale_off_sale_hold_s: 2,
        ..CustomerOptions::default()
    });
    options.aws_faults = Some(11);
    let gateway = Arc::new(
        tokio::time::timeout(STARTUP_LIMIT, LocalSuite::start(options))
            .await
            .expect("the suite starts within 15 minutes")
            .expect("the suite starts"),
    );
    let log = gateway.watch().log_path().unwrap().to_owned();
    let log_from = std::fs::metadata(&log).map_or(0, |m| m.len() as usize);
    let proxy = |rate: f64| gateway.fault_proxy().unwrap().set_rate(rate);
    proxy(FAULT_RATE);

    let started = Instant::now();
    let (mut hung, mut back, mut faults_stopped) = (false, false, None);
    let mut searches = JoinSet::new();
    let mut n = 0u32;
    let mut converged_after = None;
    let truth = Truth {
        breakers: vec![BreakerState::Closed; 2],
        mapping_on_real: true,
        on_sale: vec![true; 2],
    };
    let mut seen_open = false;
    loop {
        let t = started.elapsed();
        if !hung && t >= HANG_AT {
            gateway.set_operator_mode(Some("hang")).await.unwrap();
            hung = true;
        }
        if !back && t >= BACK_AT {
            gateway.set_operator_mode(None).await.unwrap();
            back = true;
        }
        if faults_stopped.is_none() && t >= FAULTS_END {
            proxy(0.0);
            faults_stopped = Some(Instant::now());
        }
        // Traffic: RATE searches a second per operator while the faults
        // run, then one a second per operator.
        let per_second = if faults_stopped.is_some() { 1 } else { RATE };
        for operator in &operators {
            let gateway = Arc::clone(&gateway);
            let path = question(operator, n);
            searches.spawn(async move { gateway.api("GET", &path, None).await.map(|r| r.status) });
        }
        n += 1;
        if n.is_multiple_of(per_second) {
            let now = observe(&gateway, &operators).await;
            seen_open |= now.breakers[0] != BreakerState::Closed;
            if let Some(stopped) = faults_stopped {
                if now == truth && back {
                    converged_after = Some(stopped.elapsed());
                    break;
                }
                if stopped.elapsed() > CONVERGENCE {
                    println!("not at the truth {CONVERGENCE:?} after the faults stopped: {now:?}");
                    break;
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(1) / per_second).await;
    }
    let mut statuses: BTreeMap<String, usize> = BTreeMap::new();
    while let Some(done) = searches.join_next().await {
        let status = match done.unwrap() {
            Ok(status) => status.to_string(),
            Err(e) => format!("error: {e}"),
        };
        *statuses.entry(status).or_default() += 1;
    }

    // Every request written gets its outcome (the consumers', or the
    // search's expired close).
    let tables = [
        gateway.resources().lane().requests_table.clone(),
        gateway.neighbours()[0].requests_table.clone(),
    ];
    let limit = Instant::now() + Duration::from_secs(60);
    let (total, without) = loop {
        let mut all = Vec::new();
        for table in &tables {
            all.extend(requests(&gateway, table).await);
        }
        let without: Vec<String> = all
            .iter()
            .filter(|(done, _)| !done)
            .map(|(_, id)| id.clone())
            .collect();
        if without.is_empty() || Instant::now() > limit {
            break (all.len(), without);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };

    // A function writes a failure's two lines (by dependency, then the
    // total) when its call gives up, which can be after the last outcome:
    // read the log until two reads 2 s apart agree (a read between the two
    // lines counted one more by dependency than in the total).
    let (seen, seen_total) = {
        let limit = Instant::now() + Duration::from_secs(30);
        let mut last = dependency_errors(&log, log_from);
        loop {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let now = dependency_errors(&log, log_from);
            if now == last || Instant::now() > limit {
                break now;
            }
            last = now;
        }
    };
    let injected = gateway.fault_proxy().unwrap().stats();
    println!("searches: {} ({statuses:?})", 2 * n);
    println!("requests: {total}, without an outcome: {}", without.len());
    println!(
        "faults injected: {} {:?}; forwarded calls: {}",
        injected.injected_total(),
        injected.injected,
        injected.forwarded
    );
    println!("DependencyErrors: total {seen_total}, by dependency {seen:?}");
    println!(
        "nordic opened during the hang: {seen_open}; at the truth {converged_after:?} after the faults stopped"
    );
    let names = gateway.resources().names.clone();
    Arc::try_unwrap(gateway)
        .expect("every search is done")
        .stop()
        .await;

    assert!(total > 0, "the searches wrote no requests");
    assert!(
        without.is_empty(),
        "requests without an outcome: {without:?}"
    );
    assert!(seen_open, "nordic's breaker never opened while it hung");
    let converged = converged_after.expect("breakers, mapping and sale status reach the truth");
    assert!(converged <= CONVERGENCE);
    assert!(injected.injected_total() > 0, "the proxy injected nothing");
    // Each class of fault shows in the metric, under its dependencies.
    for class in injected.injected.keys() {
        let families: &[&str] = match class.strip_prefix("table:") {
            Some(table) if table.starts_with(&names.requests_table_prefix) => &["requests."],
            Some(table) if table == names.breaker_table => &["breaker.", "window."],
            Some(table) if table == names.cache_table => &["cache."],
            Some(table) if table == names.sale_status_table => &["sale."],
            Some(table) if table == names.carts_table => &["carts."],
            Some(table) if table == names.orders_table => &["orders."],
            // Read once, when a function instance starts: a fault there
            // fails that instance's start (Lambda's init error; the stream
            // batch or the invocation is retried), before any metric is
            // emitted. The campaign's other promises (every request an
            // outcome, the truth reached) hold through it.
            Some(table) if table == names.operator_config_table => continue,
            Some(other) => panic!("a fault on a table the campaign does not know: {other}"),
            None => match class.as_str() {
                // The publisher sends a refused entry again (three attempts):
                // only an entry refused every time is a failed call.
                "events.put" => continue,
                "sqs.send" => &["timers.set"],
                "mapping.update" => &["mapping.update"],
                other => panic!("unknown fault class {other}"),
            },
        };
        let shown: f64 = seen
            .iter()
            .filter(|(d, _)| families.iter().any(|f| d.starts_with(f)))
            .map(|(_, v)| v)
            .sum();
        assert!(
            shown > 0.0,
            "{class}: {} faults, none in DependencyErrors",
            injected.injected[class]
        );
    }
    // One failed call is one count: every fault but the PutEvents entries
    // (sent again) and the operator config table's (read when an instance
    // starts, before any metric: see above) counted exactly once, in the
    // total too.
    let entries_injected = injected.injected.get("events.put").copied().unwrap_or(0);
    let entries_seen = seen.get("events.put").copied().unwrap_or(0.0);
    assert!(entries_seen <= entries_injected as f64);
    let at_start = injected
        .injected
        .get(&format!("table:{}", names.operator_config_table))
        .copied()
        .unwrap_or(0);
    assert_eq!(
        seen_total - entries_seen,
        (injected.injected_total() - entries_injected - at_start) as f64,
        "faults other than PutEvents entries and instance starts: injected vs counted"
    );
    assert_eq!(seen.values().sum::<f64>(), seen_total);
}
