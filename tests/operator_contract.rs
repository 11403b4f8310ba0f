//! The operator contract (docs/operator-api.json, docs/operators.md) held to
//! the code from both sides: the gateway's own questions (the parameters
//! search and cart build) are what the document lists, the simulated
//! operator's answers to them over HTTP, through the real client, match its
//! schemas, and its examples pass the gateway's payload check while broken
//! copies of them do not. A booking likewise: the body and key the client
//! sends are the document's, and every answer the simulated operator gives
//! a booking (booked, price changed, sold out, not bookable, a 422) is one
//! it lists.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use lifeboat_core::budget::Budget;
use lifeboat_core::cart::Choices;
use lifeboat_core::order::BookingAnswer;
use lifeboat_core::ports::OperatorApi;
use lifeboat_core::request::{CallClass, OperatorCall};
use lifeboat_core::{Operation, OperatorId, SystemClock};
use lifeboat_lookup::params::{price_params_for, search_params};
use lifeboat_operator::{
    HttpOperatorApi, SeatModel, SimConfig, SimServer, SimulatedOperator, book, check_payload,
};
use serde_json::Value;

#[path = "schema.rs"]
mod schema;
use schema::{check, resolve};

fn doc() -> Value {
    serde_json::from_str(include_str!("../docs/operator-api.json"))
        .expect("docs/operator-api.json is JSON")
}

/// The path's operation in the document.
fn operation<'a>(doc: &'a Value, path: &str) -> &'a Value {
    &doc["paths"][path]["get"]
}

/// The query parameters the document lists for `path`: (name, required).
fn query_parameters(doc: &Value, path: &str) -> Vec<(String, bool)> {
    operation(doc, path)["parameters"]
        .as_array()
        .expect("parameters")
        .iter()
        .map(|p| resolve(doc, p))
        .filter(|p| p["in"] == "query")
        .map(|p| {
            (
                p["name"].as_str().unwrap_or_default().to_owned(),
                p["required"].as_bool().unwrap_or(false),
            )
        })
        .collect()
}

/// The gateway's parameters for `path` are the document's: each one
/// listed, every required one sent.
fn sent_as_documented(doc: &Value, path: &str, params: &BTreeMap<String, String>) {
    let listed = query_parameters(doc, path);
    for name in params.keys() {
        assert!(
            listed.iter().any(|(n, _)| n == name),
            "{path}: the gateway sends {name}, which the contract does not list"
        );
    }
    for (name, required) in &listed {
        assert!(
            !required || params.contains_key(name),
            "{path}: {name} is required by the contract but not sent"
        );
    }
}

fn answer_schema<'a>(doc: &'a Value, path: &str) -> &'a Value {
    &operation(doc, path)["responses"]["200"]["content"]["application/json"]["schema"]
}

fn example<'a>(doc: &'a Value, path: &str) -> &'a Value {
    &operation(doc, path)["responses"]["200"]["content"]["application/json"]["example"]
}

fn nordic() -> OperatorId {
    OperatorId::new("nordic").unwrap()
}

fn call(operation: Operation, params: BTreeMap<String, String>) -> OperatorCall {
    OperatorCall {
        request_id: "contract-1".into(),
        operator: nordic(),
        operation,
        params,
        budget: Budget::with_timeout(Duration::from_secs(5)),
    }
}

#[tokio::test]
async fn the_simulated_operator_answers_the_gateways_questions_as_documented() {
    let doc = doc();
    let server = SimServer::start(
        SimulatedOperator::new(nordic(), SimConfig::quick(), Arc::new(SystemClock)),
        0,
    )
    .await
    .unwrap();
    let api = HttpOperatorApi::parse(&format!("nordic={}", server.base_url())).unwrap();
    let date = (chrono::Utc::now() + chrono::TimeDelta::days(7))
        .format("%Y-%m-%d")
        .to_string();

    let search = search_params("HEL", "TLL", &date, 2);
    sent_as_documented(&doc, "/search", &search);
    let answered = api.call(&call(Operation::Search, search)).await;
    assert_eq!(answered.class, CallClass::Ok, "{}", answered.detail);
    let body: Value = serde_json::from_str(answered.body.as_deref().unwrap()).unwrap();
    check(&doc, answer_schema(&doc, "/search"), &body, "search").unwrap();
    let sailing = body["sailings"][0]["sailing_id"].as_str().unwrap();

    for choices in [
        Choices::default(),
        Choices {
            accommodation: Some("cabin".into()),
            extras: vec!["breakfast".into(), "wifi".into()],
        },
    ] {
        let price = price_params_for(sailing, 2, &choices);
        sent_as_documented(&doc, "/price", &price);
        let answered = api.call(&call(Operation::Price, price)).await;
        assert_eq!(answered.class, CallClass::Ok, "{}", answered.detail);
        let body: Value = serde_json::from_str(answered.body.as_deref().unwrap()).unwrap();
        check(&doc, answer_schema(&doc, "/price"), &body, "price").unwrap();
    }

    let ping = BTreeMap::new();
    sent_as_documented(&doc, "/ping", &ping);
    let answered = api.call(&call(Operation::Ping, ping)).await;
    assert_eq!(answered.class, CallClass::Ok, "{}", answered.detail);
    server.shutdown().await;
}

#[test]
fn the_documented_examples_pass_the_gateways_payload_check_and_broken_ones_do_not() {
    let doc = doc();
    for (path, operation) in [("/search", Operation::Search), ("/price", Operation::Price)] {
        let example = example(&doc, path);
        check(&doc, answer_schema(&doc, path), example, path).unwrap();
        check_payload(operation, &example.to_string())
            .unwrap_or_else(|e| panic!("{path}'s example: {e}"));
    }
    // What the schema and the gateway both refuse.
    let mut unbalanced = example(&doc, "/price").clone();
    unbalanced["price"]["amount_cents"] = 17_900.into();
    assert!(check_payload(Operation::Price, &unbalanced.to_string()).is_err());
    let mut free = example(&doc, "/price").clone();
    free["price"]["amount_cents"] = 0.into();
    free["price"]["parts"] = Value::Array(Vec::new());
    assert!(check(&doc, answer_schema(&doc, "/price"), &free, "price").is_err());
    assert!(check_payload(Operation::Price, &free.to_string()).is_err());
    let empty = serde_json::json!({"results": []});
    assert!(check(&doc, answer_schema(&doc, "/search"), &empty, "search").is_err());
    assert!(check_payload(Operation::Search, &empty.to_string()).is_err());
}

fn book_operation(doc: &Value) -> &Value {
    &doc["paths"]["/book"]["post"]
}

fn book_answer_schema(doc: &Value) -> &Value {
    &book_operation(doc)["responses"]["200"]["content"]["application/json"]["schema"]
}

/// A booking as the gateway asks it: the held order's parameters.
fn booking(key: &str, sailing_id: &str, max_price_cents: u64) -> BTreeMap<String, String> {
    [
        ("idempotency_key", key),
        ("sailing_id", sailing_id),
        ("passengers", "2"),
        ("accommodation", "cabin"),
        ("extras", "breakfast,wifi"),
        ("max_price_cents", &max_price_cents.to_string()),
        ("currency", "EUR"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

#[tokio::test]
async fn the_simulated_operator_answers_bookings_as_documented() {
    let doc = doc();
    let operation = book_operation(&doc);
    // What the client sends: the documented body, and the key in the
    // documented header.
    let params = booking("lb-contract-1", "HEL-TLL-20991224-0730", 1_000_000);
    let (key, body) = book::request_of(&params).unwrap();
    let request_schema = &operation["requestBody"]["content"]["application/json"]["schema"];
    check(
        &doc,
        request_schema,
        &serde_json::to_value(&body).unwrap(),
        "book",
    )
    .unwrap();
    let header = operation["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| resolve(&doc, p))
        .find(|p| p["in"] == "header" && p["name"] != "x-request-id")
        .unwrap();
    assert!(
        header["name"]
            .as_str()
            .unwrap()
            .eq_ignore_ascii_case(lifeboat_operator::IDEMPOTENCY_KEY_HEADER)
    );
    assert_eq!(header["required"], true);
    check(&doc, &header["schema"], &Value::String(key), "key").unwrap();

    // Seats for one passenger on every sailing, so two sell out.
    let config = SimConfig {
        seats: SeatModel {
            capacity_min: 1,
            capacity_max: 1,
            other_channels_per_hour: 0.0,
        },
        ..SimConfig::quick()
    };
    let roomy = SimServer::start(
        SimulatedOperator::new(nordic(), SimConfig::quick(), Arc::new(SystemClock)),
        0,
    )
    .await
    .unwrap();
    let full = SimServer::start(
        SimulatedOperator::new(nordic(), config, Arc::new(SystemClock)),
        0,
    )
    .await
    .unwrap();
    let api = |server: &SimServer| {
        HttpOperatorApi::parse(&format!("nordic={}", server.base_url())).unwrap()
    };
    let cases = [
        (
            &roomy,
            booking("lb-1", "HEL-TLL-20991224-0730", 1_000_000),
            "booked",
        ),
        (
            &roomy,
            booking("lb-2", "HEL-TLL-20991224-0730", 1),
            "price_changed",
        ),
        (
            &full,
            booking("lb-3", "HEL-TLL-20991224-0730", 1_000_000),
            "sold_out",
        ),
        (
            &roomy,
            booking("lb-4", "HEL-TLL-20200101-0730", 1_000_000),
            "not_bookable",
        ),
    ];
    for (server, params, status) in cases {
        let answered = api(server).call(&call(Operation::Book, params)).await;
        assert_eq!(
            answered.class,
            CallClass::Ok,
            "{status}: {}",
            answered.detail
        );
        let body: Value = serde_json::from_str(answered.body.as_deref().unwrap()).unwrap();
        check(&doc, book_answer_schema(&doc), &body, status).unwrap();
        assert_eq!(body["status"], status, "{body}");
        let read = BookingAnswer::from_call(&answered);
        assert!(
            !matches!(
                read,
                BookingAnswer::Unavailable { .. } | BookingAnswer::Rejected { .. }
            ),
            "{status}: {read:?}"
        );
    }
    // The same key for another order: the documented 422.
    let mut reused = booking("lb-1", "HEL-TLL-20991224-0730", 1_000_000);
    reused.insert("passengers".into(), "3".into());
    let refused = api(&roomy).call(&call(Operation::Book, reused)).await;
    assert_eq!(refused.class, CallClass::ClientError { status: 422 });
    assert!(operation["responses"]["422"].is_object());
    let stats = roomy.operator().stats();
    assert_eq!((stats.bookings, stats.repeated_bookings), (1, 0));
    roomy.shutdown().await;
    full.shutdown().await;
}

#[test]
fn the_documented_booking_examples_pass_the_gateways_payload_check_and_broken_ones_do_not() {
    let doc = doc();
    let operation = book_operation(&doc);
    let examples = operation["responses"]["200"]["content"]["application/json"]["examples"]
        .as_object()
        .unwrap();
    assert_eq!(examples.len(), 4, "one example per answer");
    for (name, example) in examples {
        let value = &example["value"];
        check(&doc, book_answer_schema(&doc), value, name).unwrap();
        check_payload(Operation::Book, &value.to_string())
            .unwrap_or_else(|e| panic!("{name}'s example: {e}"));
        assert_eq!(value["status"], name.as_str());
    }
    let request = &operation["requestBody"]["content"]["application/json"]["example"];
    let order: book::BookOrder = serde_json::from_value(request.clone()).unwrap();
    let params = book::params_of("lb-1", &order);
    assert_eq!(
        serde_json::to_value(book::request_of(&params).unwrap().1).unwrap(),
        *request,
        "the client sends the documented example as it is"
    );
    // What the schema and the gateway both refuse.
    let mut unreferenced = examples["booked"]["value"].clone();
    unreferenced.as_object_mut().unwrap().remove("booking_ref");
    let mut unknown = examples["booked"]["value"].clone();
    unknown["status"] = "pending".into();
    let mut free = examples["price_changed"]["value"].clone();
    free["price_cents"] = 0.into();
    for broken in [unreferenced, unknown, free] {
        assert!(
            check(&doc, book_answer_schema(&doc), &broken, "book").is_err(),
            "{broken}"
        );
        assert!(
            check_payload(Operation::Book, &broken.to_string()).is_err(),
            "{broken}"
        );
    }
}
