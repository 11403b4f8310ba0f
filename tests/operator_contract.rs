//! The operator contract (docs/operator-api.json, docs/operators.md) held to
//! the code from both sides: the gateway's own questions (the parameters
//! search and cart build) are what the document lists, the simulated
//! operator's answers to them over HTTP, through the real client, match its
//! schemas, and its examples pass the gateway's payload check while broken
//! copies of them do not.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use lifeboat_core::budget::Budget;
use lifeboat_core::cart::Choices;
use lifeboat_core::ports::OperatorApi;
use lifeboat_core::request::{CallClass, OperatorCall};
use lifeboat_core::{Operation, OperatorId, SystemClock};
use lifeboat_lookup::params::{price_params_for, search_params};
use lifeboat_operator::{HttpOperatorApi, SimConfig, SimServer, SimulatedOperator, check_payload};
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
