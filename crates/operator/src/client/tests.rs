//! The client against the simulated operator over HTTP: each answer and
//! failure classified, bookings posted with their key, credentials sent.

use std::sync::Arc;

use lifeboat_core::SystemClock;

use super::*;
use crate::server::SimServer;
use crate::sim::{OutageMode, SimConfig, SimulatedOperator};

fn nordic() -> OperatorId {
    OperatorId::new("nordic").unwrap()
}

/// A simulated operator over HTTP answering in tens of milliseconds.
async fn server() -> SimServer {
    let sim = SimulatedOperator::new(nordic(), SimConfig::quick(), Arc::new(SystemClock));
    SimServer::start(sim, 0).await.unwrap()
}

fn api(base: &str) -> HttpOperatorApi {
    HttpOperatorApi::parse(&format!("nordic={base}")).unwrap()
}

fn call(operation: Operation, timeout_ms: u64) -> OperatorCall {
    OperatorCall {
        request_id: "req-42".into(),
        operator: nordic(),
        operation,
        params: [
            ("from", "HEL"),
            ("to", "Saint Petersburg"),
            ("date", "2025-06-01"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect(),
        budget: Budget::with_timeout(Duration::from_millis(timeout_ms)),
    }
}

#[tokio::test]
async fn each_operator_gets_its_own_credential_and_a_rotation_is_followed() {
    use lifeboat_core::memory::MemorySecretStore;
    let server = server().await;
    server.require_header("x-api-key", "one");
    let store = Arc::new(MemorySecretStore::new());
    store.put(
        "/lifeboat/operators/nordic",
        r#"{"header": "x-api-key", "value": "one"}"#,
    );
    // Read again at every call: the rotation below is seen at once.
    let credentials =
        crate::Credentials::load(store.clone(), "/lifeboat/operators", Duration::ZERO)
            .await
            .unwrap();
    let bare = api(&server.base_url());
    let keyed = bare.clone().with_credentials(Arc::new(credentials));
    let refused = bare.call(&call(Operation::Search, 2_000)).await;
    assert_eq!(
        refused.class,
        CallClass::ClientError { status: 401 },
        "{}",
        refused.detail
    );
    let answered = keyed.call(&call(Operation::Search, 2_000)).await;
    assert_eq!(answered.class, CallClass::Ok, "{}", answered.detail);
    // The operator rotates its key; lifeboat follows once it is kept.
    server.require_header("x-api-key", "two");
    let stale = keyed.call(&call(Operation::Search, 2_000)).await;
    assert_eq!(stale.class, CallClass::ClientError { status: 401 });
    store.put(
        "/lifeboat/operators/nordic",
        r#"{"header": "x-api-key", "value": "two"}"#,
    );
    let rotated = keyed.call(&call(Operation::Search, 2_000)).await;
    assert_eq!(rotated.class, CallClass::Ok, "{}", rotated.detail);
    assert!(!format!("{keyed:?}").contains("two\""));
}

#[test]
fn endpoints_append_the_operation_and_the_params() {
    let params: BTreeMap<String, String> = [
        ("from".to_owned(), "HEL".to_owned()),
        ("to".to_owned(), "St P&x".to_owned()),
    ]
    .into();
    for base in ["http://h.example/api", "http://h.example/api/"] {
        let url = HttpOperatorApi::endpoint(&Url::parse(base).unwrap(), Operation::Search, &params);
        assert_eq!(
            url.as_str(),
            "http://h.example/api/search?from=HEL&to=St+P%26x"
        );
    }
    let keyed = Url::parse("https://h.example?key=k").unwrap();
    let url = HttpOperatorApi::endpoint(&keyed, Operation::Price, &BTreeMap::new());
    assert_eq!(url.as_str(), "https://h.example/price?key=k");
}

#[tokio::test]
async fn a_healthy_answer_is_ok_and_carries_the_request() {
    let server = server().await;
    let api = api(&server.base_url());
    assert!(api.knows(&nordic()));
    let result = api.call(&call(Operation::Search, 2_000)).await;
    assert_eq!(result.class, CallClass::Ok, "{}", result.detail);
    let body: serde_json::Value = serde_json::from_str(result.body.as_deref().unwrap()).unwrap();
    let first = &body["sailings"][0];
    assert_eq!(first["to"], "SAINT PETERSBURG");
    assert!(first["departs"].as_str().unwrap().starts_with("2025-06-01"));
    assert!(
        result.detail.starts_with("answered 200 in "),
        "{}",
        result.detail
    );
    assert_eq!(
        server.operator().last_request_id().as_deref(),
        Some("req-42")
    );

    let price = api.call(&call(Operation::Price, 2_000)).await;
    assert_eq!(price.class, CallClass::Ok, "{}", price.detail);
    assert!(price.body.unwrap().contains("amount_cents"));
    let ping = api.call(&call(Operation::Ping, 1_000)).await;
    assert_eq!(ping.class, CallClass::Ok, "{}", ping.detail);
    let stats = server.operator().stats();
    assert_eq!(
        (
            stats.total,
            stats.by_operation.search,
            stats.by_operation.price,
            stats.by_operation.ping
        ),
        (3, 1, 1, 1)
    );
}

#[tokio::test]
async fn an_answer_after_slow_after_is_slow() {
    let server = server().await;
    let mut slow = call(Operation::Search, 2_000);
    slow.budget.slow_after = Duration::from_millis(1);
    let result = api(&server.base_url()).call(&slow).await;
    assert_eq!(result.class, CallClass::Slow, "{}", result.detail);
    assert!(result.body.is_some());
}

#[tokio::test]
async fn a_hanging_operator_times_out_within_the_budget() {
    let server = server().await;
    server.operator().set_mode(Some(OutageMode::Hang));
    let result = api(&server.base_url())
        .call(&call(Operation::Search, 200))
        .await;
    assert_eq!(result.class, CallClass::Timeout, "{}", result.detail);
    assert!(result.elapsed >= Duration::from_millis(200));
    assert!(
        result.elapsed < Duration::from_millis(1_000),
        "{:?}",
        result.elapsed
    );
    assert_eq!(result.detail, "no answer within 200 ms");
    assert_eq!(server.operator().stats().by_mode.hang, 1);
}

#[tokio::test]
async fn a_slow_outage_over_http_times_out() {
    let config = SimConfig {
        budgets: lifeboat_core::budget::Budgets {
            search: Budget::with_timeout(Duration::from_millis(150)),
            price: Budget::with_timeout(Duration::from_millis(150)),
            ..Default::default()
        },
        ..SimConfig::default()
    };
    let sim = SimulatedOperator::new(nordic(), config, Arc::new(SystemClock));
    sim.set_mode(Some(OutageMode::Slow));
    let server = SimServer::start(sim, 0).await.unwrap();
    let result = api(&server.base_url())
        .call(&call(Operation::Price, 200))
        .await;
    assert_eq!(result.class, CallClass::Timeout, "{}", result.detail);
}

#[tokio::test]
async fn a_refusing_operator_is_a_connect_failure() {
    let server = server().await;
    server.operator().set_mode(Some(OutageMode::Refuse));
    let api = api(&server.base_url());
    let result = api.call(&call(Operation::Search, 2_000)).await;
    assert_eq!(result.class, CallClass::Connect, "{}", result.detail);
    assert_eq!(
        result.detail,
        "no answer: connection closed without an answer"
    );
    assert!(result.elapsed < Duration::from_millis(1_000));
    // It comes back up: the client recovers on a fresh connection.
    server.operator().set_mode(None);
    assert_eq!(
        api.call(&call(Operation::Search, 2_000)).await.class,
        CallClass::Ok
    );
}

#[tokio::test]
async fn a_closed_port_is_a_connect_failure() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let result = api(&format!("http://{addr}"))
        .call(&call(Operation::Search, 2_000))
        .await;
    assert_eq!(result.class, CallClass::Connect, "{}", result.detail);
    assert_eq!(result.detail, "cannot connect: connection refused");
}

#[tokio::test]
async fn error_statuses_and_bad_payloads_are_classified() {
    let server = server().await;
    let api = api(&server.base_url());

    server.operator().set_mode(Some(OutageMode::ServerError));
    let down = api.call(&call(Operation::Search, 2_000)).await;
    assert_eq!(down.class, CallClass::ServerError { status: 503 });
    assert!(
        down.detail.starts_with("operator answered 503"),
        "{}",
        down.detail
    );

    server.operator().set_mode(Some(OutageMode::Garbage));
    let garbage = api.call(&call(Operation::Search, 2_000)).await;
    assert_eq!(garbage.class, CallClass::BadPayload);
    assert!(
        garbage.detail.starts_with("search answer is not json"),
        "{}",
        garbage.detail
    );

    server.operator().set_mode(None);
    let mut bad = call(Operation::Price, 2_000);
    bad.params.insert("passengers".into(), "0".into());
    assert_eq!(
        api.call(&bad).await.class,
        CallClass::ClientError { status: 400 }
    );

    let wrong_path = HttpOperatorApi::parse(&format!("nordic={}/v2", server.base_url())).unwrap();
    let missing = wrong_path.call(&call(Operation::Search, 2_000)).await;
    assert_eq!(missing.class, CallClass::ClientError { status: 404 });

    let small = api.clone().with_max_body_bytes(10);
    let large = small.call(&call(Operation::Search, 2_000)).await;
    assert_eq!(large.class, CallClass::BadPayload);
    assert_eq!(large.detail, "answer larger than 10 bytes");
}

fn booking(key: Option<&str>, timeout_ms: u64) -> OperatorCall {
    let mut call = call(Operation::Book, timeout_ms);
    call.params = [
        ("sailing_id", "hel-tll-20991224-0730"),
        ("passengers", "2"),
        ("accommodation", "cabin"),
        ("extras", "breakfast"),
        ("max_price_cents", "100000"),
        ("currency", "EUR"),
    ]
    .into_iter()
    .chain(key.map(|k| ("idempotency_key", k)))
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    call
}

#[tokio::test]
async fn a_booking_is_posted_with_its_key_and_read_as_the_operator_meant_it() {
    use lifeboat_core::order::BookingAnswer;
    let server = server().await;
    let api = api(&server.base_url());
    let result = api.call(&booking(Some("lb-cart-1"), 2_000)).await;
    assert_eq!(result.class, CallClass::Ok, "{}", result.detail);
    let BookingAnswer::Booked { price_cents, .. } = BookingAnswer::from_call(&result) else {
        panic!("{result:?}");
    };
    // Priced as the price answer of the same order.
    let mut price = call(Operation::Price, 2_000);
    price.params = booking(None, 0).params;
    let quoted = api.call(&price).await;
    let quoted: serde_json::Value = serde_json::from_str(&quoted.body.unwrap()).unwrap();
    assert_eq!(quoted["price"]["amount_cents"], price_cents);
    // The same key for another order: the operator refuses it itself.
    let mut reused = booking(Some("lb-cart-1"), 2_000);
    reused.params.insert("passengers".into(), "3".into());
    let refused = BookingAnswer::from_call(&api.call(&reused).await);
    let BookingAnswer::Rejected {
        status: 422,
        detail,
    } = refused
    else {
        panic!("{refused:?}");
    };
    assert!(
        detail.ends_with(r#": idempotency key "lb-cart-1" was used for another order"#),
        "{detail}"
    );
    let stats = server.operator().stats();
    assert_eq!((stats.bookings, stats.by_operation.book), (1, 2));
    assert_eq!(
        server.operator().last_request_id().as_deref(),
        Some("req-42")
    );
}

#[tokio::test]
async fn a_booking_without_its_key_is_never_sent() {
    let server = server().await;
    let api = api(&server.base_url());
    let result = api.call(&booking(None, 2_000)).await;
    assert_eq!(result.class, CallClass::ClientError { status: 400 });
    assert_eq!(
        result.detail,
        "a booking is never sent without its idempotency key"
    );
    let result = api.call(&booking(Some("two words"), 2_000)).await;
    assert_eq!(result.class, CallClass::ClientError { status: 400 });
    assert_eq!(server.operator().stats().total, 0, "nothing sent");
}

/// The operator books, then answers too late; the gateway's retry with
/// the same key gets that booking back: one booking, one repeated call.
#[tokio::test]
async fn a_retried_booking_books_once() {
    use lifeboat_core::order::BookingAnswer;
    let server = server().await;
    let api = api(&server.base_url());
    server.operator().set_mode(Some(OutageMode::Slow));
    let lost = api.call(&booking(Some("lb-cart-7"), 300)).await;
    assert_eq!(lost.class, CallClass::Timeout, "{}", lost.detail);
    assert!(matches!(
        BookingAnswer::from_call(&lost),
        BookingAnswer::Unavailable { .. }
    ));
    server.operator().set_mode(None);
    let retried = api.call(&booking(Some("lb-cart-7"), 2_000)).await;
    assert!(
        matches!(
            BookingAnswer::from_call(&retried),
            BookingAnswer::Booked { .. }
        ),
        "{retried:?}"
    );
    let stats = server.operator().stats();
    assert_eq!((stats.bookings, stats.repeated_bookings), (1, 1));
}

#[tokio::test]
async fn unknown_operators_and_bad_request_ids_are_not_sent() {
    let api = api("http://127.0.0.1:9");
    let mut stranger = call(Operation::Search, 2_000);
    stranger.operator = OperatorId::new("baltic").unwrap();
    assert!(!api.knows(&stranger.operator));
    let result = api.call(&stranger).await;
    assert_eq!(result.class, CallClass::ClientError { status: 404 });
    assert_eq!(result.detail, "unknown operator baltic");

    let mut bad_id = call(Operation::Search, 2_000);
    bad_id.request_id = "line\nbreak".into();
    assert_eq!(
        api.call(&bad_id).await.class,
        CallClass::ClientError { status: 400 }
    );
}
