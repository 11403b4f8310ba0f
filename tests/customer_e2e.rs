//! The customer half end to end: search, cart and the off-sale listener as
//! the real binaries under `cargo lambda watch`, reached over HTTP the way
//! `LifeboatHttpApi` routes them, on moto, with the gateway functions, the
//! simulated operator over HTTP and lifeboat-local's harness (stream pump,
//! trip rule, schedule, and the `OffsaleQueue` mapping fed by moto's
//! `BreakerStateChangedRule`).
//!
//! One scenario in real time:
//!
//! 1. a malformed parameter, through the real HTTP path, is a 400 problem
//!    naming it (a query parameter of search, a body field of cart, and an
//!    API Gateway HTTP API event of `tests/events/` invoked directly);
//! 2. healthy: a search answers `live`, the same search right after it
//!    `fresh` with the same `as_of`;
//! 3. the operator hangs and callers keep writing requests (another route)
//!    until the breaker opens; the sale status goes off sale within seconds;
//! 4. while the breaker is open the first route's search answers
//!    `last_good`, writes no request record and calls nobody; a cart opened
//!    on a sailing seen before is degraded (default accommodation, extras
//!    skipped, cached price with its age), reads back the same, and is
//!    confirmed on its cached price;
//! 5. the operator recovers: half-open on the schedule, back on sale,
//!    closed after passed trials.
//!
//! The settings shorten the open period (15 s) and the recent cache window
//! (3 s, so the answer cached while healthy is the last good one during the
//! outage). Measured figures go to stderr (`-- --nocapture`).
//!
//! Needs the functions built where `cargo lambda watch` runs them
//! (tools/test does it first): `CARGO_TARGET_DIR=target/lambda-watch cargo
//! build --bin real-consumer --bin fallback-consumer --bin circuit-switch
//! --bin search --bin cart --bin offsale-listener`.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::Select;
use chrono::{DateTime, TimeDelta, Utc};
use lifeboat_aws::DynamoRequestStore;
use lifeboat_core::events::SaleStatus;
use lifeboat_core::ports::{BreakerStore, RequestStore, SaleStatusStore};
use lifeboat_core::request::RequestRecord;
use lifeboat_core::sale::SaleRecord;
use lifeboat_core::{BreakerRecord, BreakerState, Operation, OperatorId};
use lifeboat_local::suite::{
    ApiReply, CustomerOptions, LocalSuite, OFFSALE_LISTENER, SEARCH, SuiteOptions,
};
use serde_json::{Value, json};
use tokio::task::JoinSet;

/// How long the breaker stays closed before the operator goes back on sale.
const ON_SALE_HOLD: Duration = Duration::from_secs(5);

/// A short open period (so the outage and its recovery fit in a minute, with
/// room for the checks made while open) and a recent-cache window of 3 s.
const SETTINGS: &str = r#"{"default":{"breaker":{"open_base":15000,"open_max":30000,"half_open_timeout":15000},"cache":{"recent":3000}}}"#;
/// Start-up may have to build the functions if they were not built first.
const STARTUP_LIMIT: Duration = Duration::from_secs(900);
/// Everything after start-up.
const SCENARIO_LIMIT: Duration = Duration::from_secs(240);
/// Open within 10 s of the outage (the design's target).
const DETECTION_TARGET: Duration = Duration::from_secs(10);
/// How long an off-sale write waits (the template's is 10 s).
const OFF_SALE_HOLD: Duration = Duration::from_secs(2);
/// Off sale within this long of the breaker opening, the hold included.
const OFF_SALE_TARGET: Duration = Duration::from_secs(7);
/// The HTTP API fixture, an API Gateway HTTP API request for `/sailings`.
const HTTP_API_SAILINGS: &str = include_str!("events/http-api-get-sailings.json");

fn nordic() -> OperatorId {
    OperatorId::new("nordic").unwrap()
}

/// A travel date a month ahead (dates before yesterday are refused).
fn travel_date() -> String {
    (Utc::now() + TimeDelta::days(30))
        .date_naive()
        .format("%Y-%m-%d")
        .to_string()
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn between(from: DateTime<Utc>, to: DateTime<Utc>) -> String {
    format!("{:.2} s", (to - from).num_milliseconds() as f64 / 1000.0)
}

fn ms(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

/// Poll `probe` every 100 ms until it gives a value; fail after `limit`.
async fn until<T>(what: &str, limit: Duration, mut probe: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Callers writing search requests for one route straight into the Requests
/// table (what search does on a miss), at a rate that can change.
struct Load {
    rate: Arc<AtomicU32>,
    stop: Arc<AtomicBool>,
    written: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Load {
    fn start(store: DynamoRequestStore, rate: u32, params: BTreeMap<String, String>) -> Self {
        let rate = Arc::new(AtomicU32::new(rate));
        let stop = Arc::new(AtomicBool::new(false));
        let written = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let (r, s, w, f) = (
            Arc::clone(&rate),
            Arc::clone(&stop),
            Arc::clone(&written),
            Arc::clone(&failed),
        );
        let store = Arc::new(store);
        let prefix = uuid_like();
        let task = tokio::spawn(async move {
            let mut writes = JoinSet::new();
            let mut n: u64 = 0;
            while !s.load(Ordering::SeqCst) {
                n += 1;
                let now = Utc::now();
                let request = RequestRecord {
                    request_id: format!("load-{prefix}-{n:05}"),
                    operator: nordic(),
                    operation: Operation::Search,
                    params: params.clone(),
                    created_at: now,
                    deadline: now + TimeDelta::seconds(3),
                };
                let (store, w, f) = (Arc::clone(&store), Arc::clone(&w), Arc::clone(&f));
                writes.spawn(async move {
                    match store.put_request(&request).await {
                        Ok(()) => w.fetch_add(1, Ordering::SeqCst),
                        Err(e) => {
                            eprintln!("request {} not written: {e}", request.request_id);
                            f.fetch_add(1, Ordering::SeqCst)
                        }
                    };
                });
                while writes.try_join_next().is_some() {}
                let per_s = r.load(Ordering::SeqCst).max(1);
                tokio::time::sleep(Duration::from_secs(1) / per_s).await;
            }
            let _ = tokio::time::timeout(Duration::from_secs(20), async {
                while writes.join_next().await.is_some() {}
            })
            .await;
        });
        Self {
            rate,
            stop,
            written,
            failed,
            task,
        }
    }

    /// Stop and wait for the writes in flight; (written, not written).
    async fn stop(self) -> (u64, u64) {
        self.stop.store(true, Ordering::SeqCst);
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("the load stops")
            .expect("the load task ran");
        (
            self.written.load(Ordering::SeqCst),
            self.failed.load(Ordering::SeqCst),
        )
    }
}

/// Distinct request ids for each load started in one run.
fn uuid_like() -> String {
    format!("{:x}", Utc::now().timestamp_micros())
}

async fn breaker(gateway: &LocalSuite) -> Option<BreakerRecord> {
    gateway.breaker_store().load(&nordic()).await.unwrap()
}

async fn sale_record(gateway: &LocalSuite) -> Option<SaleRecord> {
    gateway
        .sale_status_store()
        .unwrap()
        .load(&nordic())
        .await
        .unwrap()
}

/// Items in the Requests table, by a consistent `Select: COUNT` scan.
async fn count_requests(gateway: &LocalSuite) -> i64 {
    let client = aws_sdk_dynamodb::Client::new(gateway.sdk_config());
    let table = &gateway.resources().lane().requests_table;
    let mut count = 0_i64;
    let mut start = None;
    loop {
        let page = client
            .scan()
            .table_name(table)
            .consistent_read(true)
            .select(Select::Count)
            .set_exclusive_start_key(start)
            .send()
            .await
            .unwrap();
        count += i64::from(page.count);
        start = page.last_evaluated_key;
        if start.is_none() {
            return count;
        }
    }
}

/// Requests in the table that have no outcome yet (consistent scan).
async fn requests_without_outcome(gateway: &LocalSuite) -> usize {
    let client = aws_sdk_dynamodb::Client::new(gateway.sdk_config());
    let table = &gateway.resources().lane().requests_table;
    let mut open = 0;
    let mut start = None;
    loop {
        let page = client
            .scan()
            .table_name(table)
            .consistent_read(true)
            .set_exclusive_start_key(start)
            .send()
            .await
            .unwrap();
        for item in page.items() {
            let stored = lifeboat_aws::request_from_item(item.clone()).unwrap();
            if stored.outcome.is_none() {
                open += 1;
            }
        }
        start = page.last_evaluated_key;
        if start.is_none() {
            return open;
        }
    }
}

async fn operator_calls(gateway: &LocalSuite) -> u64 {
    gateway.operator_stats().await.unwrap().total
}

async fn get(gateway: &LocalSuite, path: &str) -> ApiReply {
    gateway.api("GET", path, None).await.unwrap()
}

fn sailings_path(from: &str, to: &str, date: &str) -> String {
    format!("/sailings?operator=nordic&from={from}&to={to}&date={date}&passengers=2")
}

/// A 400 problem naming `name`, as RFC 9457 `application/problem+json`.
fn assert_names(reply_status: u16, content_type: Option<&str>, body: &Value, name: &str) {
    assert_eq!(reply_status, 400, "{body}");
    assert_eq!(content_type, Some("application/problem+json"), "{body}");
    assert_eq!(body["status"], 400, "{body}");
    assert_eq!(body["title"], "invalid request", "{body}");
    assert_eq!(body["invalid_params"][0]["name"], name, "{body}");
    assert!(
        body["detail"].as_str().unwrap().starts_with(name),
        "the detail names {name}: {body}"
    );
}

/// The API Gateway HTTP API fixture reads as the request it stands for.
#[test]
fn the_http_api_fixture_is_a_sailings_request() {
    let request = lambda_http::request::from_str(HTTP_API_SAILINGS).unwrap();
    let plain = lifeboat_lookup::http::from_lambda(&request);
    assert_eq!(plain.method, "GET");
    assert_eq!(plain.path, "/sailings");
    let mut query = plain.query.clone();
    query.sort();
    assert_eq!(
        query,
        [
            ("date", "2026-12-24"),
            ("from", "HEL"),
            ("operator", "nordic"),
            ("passengers", "2"),
            ("to", "TLL"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
    );
    let event: Value = serde_json::from_str(HTTP_API_SAILINGS).unwrap();
    assert_eq!(event["routeKey"], "GET /sailings");
    assert_eq!(
        lifeboat_local::suite::api_function(event["rawPath"].as_str().unwrap()),
        Some(SEARCH)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn customers_keep_searching_and_buying_through_an_outage_on_the_wired_suite() {
    let test_started = Instant::now();
    let mut options = SuiteOptions::new(nordic());
    options.operator_settings = SETTINGS.to_owned();
    options.tick_every = Duration::from_secs(1);
    // A short on-sale hold (the template's is a minute), so recovery fits the
    // test's limits; the hold itself is checked below.
    options.customer = Some(CustomerOptions {
        sale_on_sale_hold_s: ON_SALE_HOLD.as_secs() as u32,
        sale_off_sale_hold_s: OFF_SALE_HOLD.as_secs() as u32,
        ..CustomerOptions::default()
    });
    let gateway = tokio::time::timeout(STARTUP_LIMIT, LocalSuite::start(options))
        .await
        .expect(
            "the suite starts within 15 minutes (build the functions first, see the module docs)",
        )
        .expect("the suite starts");
    let startup = gateway.startup_times();
    eprintln!(
        "start-up: moto and resources {}, cargo lambda watch {}, warm-up of six functions {}, total {}",
        secs(startup.moto_and_resources),
        secs(startup.watch),
        secs(startup.warm_up),
        secs(startup.total)
    );
    tokio::time::timeout(SCENARIO_LIMIT, scenario(&gateway))
        .await
        .expect("the scenario finishes within 4 minutes");
    gateway.stop().await;
    eprintln!(
        "customer e2e: whole test {} (start-up included)",
        secs(test_started.elapsed())
    );
}

async fn scenario(gateway: &LocalSuite) {
    let scenario_started = Instant::now();
    let date = travel_date();

    // 1. Malformed parameters through the real HTTP path.
    let bad_date = get(
        gateway,
        "/sailings?operator=nordic&from=HEL&to=TLL&date=2026-02-30&passengers=2",
    )
    .await;
    assert_names(
        bad_date.status,
        bad_date.header("content-type"),
        &bad_date.body,
        "date",
    );
    let bad_cart = gateway
        .api(
            "POST",
            "/carts",
            Some(
                &json!({"operator": "nordic", "sailing_id": "HEL-TLL-1", "from": "HEL",
                         "to": "TLL", "date": date, "passengers": 0}),
            ),
        )
        .await
        .unwrap();
    assert_names(
        bad_cart.status,
        bad_cart.header("content-type"),
        &bad_cart.body,
        "passengers",
    );
    // The API Gateway HTTP API event itself, with a bad passengers count.
    let mut event: Value = serde_json::from_str(HTTP_API_SAILINGS).unwrap();
    event["rawQueryString"] = json!(format!(
        "operator=nordic&from=HEL&to=TLL&date={date}&passengers=0"
    ));
    event["queryStringParameters"]["date"] = json!(date);
    event["queryStringParameters"]["passengers"] = json!("0");
    let answer = gateway.watch().invoke(SEARCH, &event).await.unwrap();
    let body: Value = serde_json::from_str(answer["body"].as_str().unwrap()).unwrap();
    assert_names(
        u16::try_from(answer["statusCode"].as_u64().unwrap()).unwrap(),
        answer["headers"]["content-type"].as_str(),
        &body,
        "passengers",
    );
    assert_eq!(count_requests(gateway).await, 0, "no request for bad input");
    eprintln!(
        "bad input: GET /sailings date=2026-02-30 -> {} naming {} ({}); POST /carts passengers 0 -> {} naming {}; HTTP API event passengers=0 -> {} naming {}",
        bad_date.status,
        bad_date.body["invalid_params"][0]["name"],
        ms(bad_date.elapsed),
        bad_cart.status,
        bad_cart.body["invalid_params"][0]["name"],
        answer["statusCode"],
        body["invalid_params"][0]["name"]
    );

    // 2. Healthy: live, then fresh with the same as_of.
    let route = sailings_path("HEL", "TLL", &date);
    let live = get(gateway, &route).await;
    assert_eq!(live.status, 200, "{}", live.body);
    assert_eq!(live.body["source"], "live", "{}", live.body);
    let sailings = live.body["sailings"].as_array().unwrap().clone();
    assert!(!sailings.is_empty(), "{}", live.body);
    let fresh = get(gateway, &route).await;
    assert_eq!(fresh.status, 200, "{}", fresh.body);
    assert_eq!(fresh.body["source"], "fresh", "{}", fresh.body);
    assert_eq!(fresh.body["as_of"], live.body["as_of"], "the cached answer");
    assert_eq!(fresh.body["sailings"], live.body["sailings"]);
    let as_of: DateTime<Utc> = live.body["as_of"].as_str().unwrap().parse().unwrap();
    eprintln!(
        "healthy search: live in {} (as_of {as_of}), then fresh in {} with the same as_of; {} sailings",
        ms(live.elapsed),
        ms(fresh.elapsed),
        sailings.len()
    );

    // 3. The operator hangs while callers keep asking about another route.
    let load_params: BTreeMap<String, String> = [
        ("from", "STO"),
        ("to", "TKU"),
        ("date", date.as_str()),
        ("passengers", "1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let load = Load::start(gateway.request_store(), 10, load_params.clone());
    until(
        "healthy load to be answered",
        Duration::from_secs(20),
        async || (operator_calls(gateway).await >= 15).then_some(()),
    )
    .await;
    load.rate.store(20, Ordering::SeqCst);
    let outage_wall = Utc::now();
    let outage = Instant::now();
    assert_eq!(
        gateway.set_operator_mode(Some("hang")).await.unwrap(),
        Value::from("hang")
    );
    let opened = until("the breaker to open", Duration::from_secs(30), async || {
        breaker(gateway)
            .await
            .filter(|b| b.state == BreakerState::Open)
    })
    .await;
    let detection = outage.elapsed();
    let (written, not_written) = load.stop().await;
    assert_eq!(not_written, 0, "every load request was written");
    eprintln!(
        "detection: outage -> breaker open {} (seen by polling; the switch wrote it at +{}), version {}, reason {:?}; {written} load requests",
        secs(detection),
        between(outage_wall, opened.since),
        opened.version,
        opened.reason
    );
    assert!(
        detection <= DETECTION_TARGET,
        "open within {DETECTION_TARGET:?} of the outage, took {detection:?}"
    );
    let open_until = opened.open_until.expect("an open breaker has an end");

    // Off sale within seconds of the open.
    let seen_open = Instant::now();
    let off_sale = until(
        "the operator to go off sale",
        Duration::from_secs(15),
        async || {
            sale_record(gateway)
                .await
                .filter(|r| r.applied_status == SaleStatus::OffSale)
        },
    )
    .await;
    let off_sale_at = off_sale.applied_at.expect("an applied status has a time");
    let open_to_off_sale = (off_sale_at - opened.since).to_std().unwrap_or_default();
    eprintln!(
        "off sale: breaker open -> SaleStatus off_sale {} (applied_at - breaker since), seen {} after the open was seen; outage -> off sale {}; applied version {}",
        secs(open_to_off_sale),
        secs(seen_open.elapsed()),
        between(outage_wall, off_sale_at),
        off_sale.applied_version
    );
    assert_eq!(off_sale.applied_version, opened.version);
    assert!(
        open_to_off_sale >= OFF_SALE_HOLD,
        "the off-sale write waits its hold, took {open_to_off_sale:?}"
    );
    assert!(
        open_to_off_sale <= OFF_SALE_TARGET,
        "off sale within {OFF_SALE_TARGET:?} of the open, took {open_to_off_sale:?}"
    );

    // Let the requests already written get their outcomes, so nothing is in
    // flight towards the operator.
    let drained = Instant::now();
    until(
        "every request to have an outcome",
        Duration::from_secs(20),
        async || (requests_without_outcome(gateway).await == 0).then_some(()),
    )
    .await;
    eprintln!(
        "drain: every request answered {} after the load stopped",
        secs(drained.elapsed())
    );

    // 4. While open: the last good answer, no request record, no call.
    let requests_before = count_requests(gateway).await;
    let calls_before = operator_calls(gateway).await;
    let last_good = get(gateway, &route).await;
    let requests_after = count_requests(gateway).await;
    let calls_after = operator_calls(gateway).await;
    assert_eq!(last_good.status, 200, "{}", last_good.body);
    assert_eq!(last_good.body["source"], "last_good", "{}", last_good.body);
    assert_eq!(last_good.body["as_of"], live.body["as_of"]);
    assert_eq!(last_good.body["sailings"], live.body["sailings"]);
    let age_s = last_good.body["age_s"].as_u64().unwrap();
    assert!(age_s >= 3, "older than the recent window: {age_s} s");
    assert_eq!(
        requests_after, requests_before,
        "no request record while the breaker is open"
    );
    assert_eq!(calls_after, calls_before, "no operator call");
    eprintln!(
        "while open: search -> last_good in {} (age_s {age_s}, same as_of); Requests table {requests_before} -> {requests_after} items; operator calls {calls_before} -> {calls_after}",
        ms(last_good.elapsed)
    );

    // A cart on a sailing seen before, opened off sale.
    let sailing = &sailings[0];
    let new_cart = json!({
        "operator": "nordic",
        "sailing_id": sailing["sailing_id"],
        "from": "HEL",
        "to": "TLL",
        "date": date,
        "passengers": 2,
    });
    let opened_cart = gateway
        .api("POST", "/carts", Some(&new_cart))
        .await
        .unwrap();
    assert_eq!(opened_cart.status, 201, "{}", opened_cart.body);
    let cart = &opened_cart.body;
    assert_eq!(cart["off_sale"], true, "{cart}");
    assert_eq!(cart["status"], "open", "{cart}");
    assert_eq!(cart["degraded"]["reason"], "operator_off_sale", "{cart}");
    assert_eq!(
        cart["accommodation"],
        json!({"code": "seat", "chosen_by": "default_while_off_sale"}),
        "the default accommodation"
    );
    assert_eq!(
        cart["extras"],
        json!({"step": "skipped_while_off_sale"}),
        "extras skipped"
    );
    let price = &cart["price"];
    assert_eq!(price["amount_cents"], sailing["price_cents"], "{cart}");
    assert_eq!(price["currency"], sailing["currency"], "{cart}");
    assert_eq!(
        price["as_of"], live.body["as_of"],
        "the cached search's fare"
    );
    assert!(
        ["last_good", "fresh"].contains(&price["source"].as_str().unwrap()),
        "a cached price: {price}"
    );
    assert!(price["age_s"].as_u64().is_some(), "with its age: {price}");
    let cart_id = cart["cart_id"].as_str().unwrap().to_owned();
    let read = get(gateway, &format!("/carts/{cart_id}")).await;
    assert_eq!(read.status, 200, "{}", read.body);
    let without_age = |view: &Value| {
        let mut view = view.clone();
        view["price"]["age_s"] = Value::Null;
        view
    };
    assert_eq!(
        without_age(&read.body),
        without_age(cart),
        "GET shows the cart as stored"
    );
    let confirmed = gateway
        .api("POST", &format!("/carts/{cart_id}/confirm"), None)
        .await
        .unwrap();
    assert_eq!(confirmed.status, 200, "{}", confirmed.body);
    assert_eq!(confirmed.body["status"], "confirmed", "{}", confirmed.body);
    let confirmation = &confirmed.body["confirmation"];
    assert_eq!(confirmation["on_cached_price"], true, "{confirmation}");
    assert_eq!(confirmation["amount_cents"], price["amount_cents"]);
    // Its order held in the Orders table (DynamoOrderStore on moto).
    assert_eq!(
        confirmed.body["booking"]["order_id"],
        format!("lb-{cart_id}"),
        "{}",
        confirmed.body
    );
    assert!(
        ["held", "on_request"]
            .contains(&confirmed.body["booking"]["status"].as_str().unwrap_or("")),
        "{}",
        confirmed.body
    );
    assert_eq!(
        count_requests(gateway).await,
        requests_after,
        "the off-sale cart wrote no request record"
    );
    assert_eq!(operator_calls(gateway).await, calls_after);
    let still = breaker(gateway).await.unwrap();
    assert_eq!(
        (still.state, still.version),
        (BreakerState::Open, opened.version),
        "the checks ran while the same breaker was open (open until {open_until})"
    );
    eprintln!(
        "cart while off sale: POST /carts -> 201 degraded in {} (accommodation {}, extras {}, price {} {} {} age_s {}); GET -> same in {}; confirm -> {} {} on_cached_price {} in {}; {} left of the open period",
        ms(opened_cart.elapsed),
        cart["accommodation"]["code"],
        cart["extras"]["step"],
        price["amount_cents"],
        price["currency"],
        price["source"],
        price["age_s"],
        ms(read.elapsed),
        confirmed.status,
        confirmed.body["status"],
        confirmation["on_cached_price"],
        ms(confirmed.elapsed),
        between(Utc::now(), open_until)
    );

    // 5. The operator recovers; callers keep asking so trials can pass.
    let recovered_wall = Utc::now();
    let recovered = Instant::now();
    assert_eq!(gateway.set_operator_mode(None).await.unwrap(), Value::Null);
    let load = Load::start(gateway.request_store(), 10, load_params);
    let mut half_open: Option<BreakerRecord> = None;
    let on_sale = until(
        "the operator to go back on sale",
        Duration::from_secs(60),
        async || {
            if half_open.is_none() {
                half_open = breaker(gateway)
                    .await
                    .filter(|b| b.version > opened.version && b.state == BreakerState::HalfOpen);
            }
            sale_record(gateway).await.filter(|r| {
                r.applied_status == SaleStatus::OnSale && r.applied_version > opened.version
            })
        },
    )
    .await;
    let on_sale_seen = recovered.elapsed();
    let closed = until(
        "the breaker to close",
        Duration::from_secs(60),
        async || {
            breaker(gateway)
                .await
                .filter(|b| b.state == BreakerState::Closed && b.version > opened.version)
        },
    )
    .await;
    let (_, not_written) = load.stop().await;
    assert_eq!(not_written, 0);
    let on_sale_at = on_sale.applied_at.expect("an applied status has a time");
    let half_open_since = half_open
        .as_ref()
        .map_or(closed.since, |b| b.since)
        .min(on_sale_at);
    eprintln!(
        "recovery: operator back -> SaleStatus on_sale {} (seen by polling; applied at +{} of the recovery, version {}); open -> half-open {}{}; half-open -> on sale {}; breaker closed at +{} of the recovery (version {}, reason {:?})",
        secs(on_sale_seen),
        between(recovered_wall, on_sale_at),
        on_sale.applied_version,
        half_open
            .as_ref()
            .map_or("not seen".to_owned(), |b| between(opened.since, b.since)),
        if half_open.is_some() {
            ""
        } else {
            " (half-open too short to see)"
        },
        between(half_open_since, on_sale_at),
        between(recovered_wall, closed.since),
        closed.version,
        closed.reason
    );
    assert_eq!(closed.previous, Some(BreakerState::HalfOpen));
    // Back on sale only once the breaker stayed closed for the hold.
    assert!(
        on_sale_at >= closed.since + ON_SALE_HOLD,
        "on sale at {on_sale_at}, closed at {}",
        closed.since
    );
    let final_sale = until(
        "the sale record to hold the closed version",
        Duration::from_secs(15),
        async || {
            sale_record(gateway)
                .await
                .filter(|r| r.applied_version >= closed.version)
        },
    )
    .await;
    assert_eq!(final_sale.applied_status, SaleStatus::OnSale);

    // Every message the listener took is deleted from the queue.
    let queue = until(
        "the off-sale queue pump to delete what the listener took",
        Duration::from_secs(10),
        async || {
            let stats = gateway.offsale_stats();
            (stats.deleted + stats.reported_failures >= stats.received).then_some(stats)
        },
    )
    .await;
    eprintln!(
        "offsale queue -> {OFFSALE_LISTENER}: {} messages received in {} invocations, by detail-type {:?}, {} deleted, {} reported failures, {} failed invocations, {} errors ({:?})",
        queue.received,
        queue.invocations,
        queue.by_detail_type,
        queue.deleted,
        queue.reported_failures,
        queue.failed_invocations,
        queue.errors,
        queue.last_error
    );
    assert_eq!(
        (queue.failed_invocations, queue.invalid_reports),
        (0, 0),
        "{queue:?}"
    );
    assert!(
        queue
            .by_detail_type
            .get("Breaker State Changed")
            .copied()
            .unwrap_or(0)
            >= 3,
        "open, half-open and closed reached the listener: {queue:?}"
    );
    let drain = gateway.drain_stats();
    let pump = gateway.pump_stats();
    eprintln!(
        "gateway: pump delivered {:?}; bus drain invoked {:?}; ticker {} ticks",
        pump.delivered,
        drain.invoked,
        gateway.ticker_stats().ticks
    );
    assert!(gateway.harness_running(), "the harness kept running");
    eprintln!("scenario {}", secs(scenario_started.elapsed()));
}
