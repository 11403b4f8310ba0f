//! The query strings of search: a Lambda HTTP request made plain
//! (`lifeboat_lookup::http::from_lambda`, which reads the event's parsed
//! parameters or else the URI's query) and the question it asks
//! (`search::question`: `query_map`, then each parameter's check), with
//! the operators `nordic` (ids compared in capitals) and `baltic` (in small
//! letters) and the fixtures' clock (2026-11-30T10:00:00Z). `http_params`
//! checks each parameter on its own; this target checks the query as a
//! whole.
//!
//! Input: the request's path and query (`/sailings?operator=nordic&…`),
//! as an HTTP API request's URI; every request is a `GET`.
//!
//! Invariants: no panic; the parameters read from the URI's query and those
//! an HTTP API event carries already parsed are the same, and ask the same
//! question; a question is asked only by a request to `/sailings` or
//! `/price` that gives each of that route's parameters exactly once and no
//! other, and it holds the values sent, checked (an operator on sale, two
//! different port codes, a date from yesterday to `DATE_HORIZON_DAYS` ahead
//! written `YYYY-MM-DD`, 1 to 9 passengers, a sailing id in the operator's
//! case); any other request is answered 404 (another path) or 400 naming
//! one parameter, and its reply can be built.
#![no_main]

use std::collections::{BTreeMap, BTreeSet};

use chrono::{NaiveDate, TimeDelta};
use lambda_http::aws_lambda_events::query_map::QueryMap;
use lambda_http::{Body, RequestExt};
use libfuzzer_sys::fuzz_target;
use lifeboat_core::Operation;
use lifeboat_fuzz::{Customers, customers};
use lifeboat_lookup::http::{HttpRequest, MAX_ECHO_CHARS, Problem, from_lambda, into_lambda};
use lifeboat_lookup::params::DATE_HORIZON_DAYS;
use search::{Question, question};
use serde_json::json;

/// The parameters of each route.
const SEARCH: [&str; 5] = ["operator", "from", "to", "date", "passengers"];
const PRICE: [&str; 3] = ["operator", "sailing_id", "passengers"];

/// Values and names the dictionary offers besides the fixtures' query.
#[allow(dead_code)]
const DICTIONARY: &[&str] = &[
    "/sailings?",
    "/price?",
    "/carts",
    "operator=baltic",
    "sailing_id=hel-Tll-20261224-0615",
    "date=2026-11-30",
    "date=2028-01-05",
    "passengers=02",
    "from=HEL&to=HEL",
    "%20",
    "%2B",
    "%C3%A9",
    "%ZZ",
    "+",
    "&&",
    "==",
    ";",
];

fuzz_target!(|data: &[u8]| {
    let Ok(target) = std::str::from_utf8(data) else {
        return;
    };
    let target = if target.starts_with('/') {
        target.to_owned()
    } else {
        format!("/sailings?{target}")
    };
    // What http::Request refuses never reaches a function: lambda_http
    // builds the request from the event the same way.
    let Ok(request) = lambda_http::http::Request::builder()
        .method("GET")
        .uri(target.as_str())
        .body(Body::Empty)
    else {
        return;
    };
    let raw_query = request.uri().query().unwrap_or("").to_owned();
    let from_uri = from_lambda(&request);
    // An HTTP API event: the same request, its query also parsed by lambda_http.
    let Ok(parsed) = raw_query.parse::<QueryMap>();
    let from_event = from_lambda(&request.with_query_string_parameters(parsed));
    assert_eq!(sorted(&from_uri), sorted(&from_event), "{target:?}");
    assert_eq!(from_uri.path, from_event.path);

    let w = customers();
    let asked = question(&from_uri, &w.operators, &w.settings, w.now);
    let asked_by_event = question(&from_event, &w.operators, &w.settings, w.now);
    match (&asked, &asked_by_event) {
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        (Err(a), Err(b)) => assert_eq!(a.status, b.status),
        _ => panic!("{target:?}: {asked:?} from the URI, {asked_by_event:?} from the event"),
    }
    match asked {
        Ok(q) => asked_well(&from_uri, &q, w),
        Err(problem) => refused(&from_uri, &problem),
    }
});

fn sorted(request: &HttpRequest) -> Vec<(String, String)> {
    let mut pairs = request.query.clone();
    pairs.sort();
    pairs
}

fn asked_well(request: &HttpRequest, q: &Question, w: &Customers) {
    let names: &[&str] = match q.operation {
        Operation::Search => &SEARCH,
        Operation::Price => &PRICE,
        Operation::Ping => panic!("a customer asked for a ping"),
        Operation::Book => panic!("a customer's question booked"),
    };
    // Each of the route's parameters once, and no other.
    let sent: BTreeMap<&str, &str> = request
        .query
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    assert_eq!(sent.len(), request.query.len(), "a repeated parameter");
    assert!(
        sent.keys()
            .copied()
            .eq(names.iter().copied().collect::<BTreeSet<_>>())
    );
    assert!(w.operators.contains(&q.operator));
    assert_eq!(sent["operator"], q.operator.as_str());
    assert_eq!(q.echo["operator"], json!(q.operator.as_str()));
    let passengers = &q.params["passengers"];
    assert_eq!(passengers, sent["passengers"]);
    assert!(
        matches!(passengers.as_bytes(), [b'1'..=b'9']),
        "{passengers:?}"
    );
    assert_eq!(q.echo["passengers"].to_string(), *passengers);
    match q.operation {
        Operation::Search => {
            assert_eq!(request.segments(), ["sailings"]);
            assert_eq!(q.field, "sailings");
            let keys: Vec<&str> = q.params.keys().map(String::as_str).collect();
            assert_eq!(keys, ["date", "from", "passengers", "to"]);
            for port in ["from", "to"] {
                let code = &q.params[port];
                assert_eq!(code, sent[port]);
                assert!((3..=5).contains(&code.len()), "{code:?}");
                assert!(code.bytes().all(|b| b.is_ascii_uppercase()), "{code:?}");
                assert_eq!(q.echo[port], json!(code));
            }
            assert_ne!(q.params["from"], q.params["to"]);
            let date = match NaiveDate::parse_from_str(&q.params["date"], "%Y-%m-%d") {
                Ok(date) => date,
                Err(e) => panic!("date {:?} asked: {e}", q.params["date"]),
            };
            assert_eq!(date.to_string(), q.params["date"]);
            assert_eq!(
                NaiveDate::parse_from_str(sent["date"], "%Y-%m-%d").ok(),
                Some(date)
            );
            assert!(date >= (w.now - TimeDelta::days(1)).date_naive());
            assert!(date <= (w.now + TimeDelta::days(DATE_HORIZON_DAYS)).date_naive());
            assert_eq!(q.echo["date"], json!(q.params["date"]));
        }
        Operation::Price => {
            assert_eq!(request.segments(), ["price"]);
            assert_eq!(q.field, "price");
            let keys: Vec<&str> = q.params.keys().map(String::as_str).collect();
            assert_eq!(keys, ["passengers", "sailing_id"]);
            let ids = w.settings.for_operator(&q.operator).ids;
            let id = &q.params["sailing_id"];
            assert_eq!(*id, ids.normalise(sent["sailing_id"]));
            assert!(ids.same(id, sent["sailing_id"]));
            assert!((1..=64).contains(&id.len()), "{id:?}");
            assert!(
                id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'),
                "{id:?}"
            );
            assert_eq!(q.echo["sailing_id"], json!(id));
        }
        Operation::Ping | Operation::Book => {}
    }
}

fn refused(request: &HttpRequest, problem: &Problem) {
    let route = request.segments();
    match problem.status {
        404 => assert!(route != ["sailings"] && route != ["price"], "{problem:?}"),
        400 => {
            assert!(route == ["sailings"] || route == ["price"], "{problem:?}");
            assert_eq!(problem.invalid_params.len(), 1, "{problem:?}");
            let name = &problem.invalid_params[0].name;
            assert!(name.chars().count() <= MAX_ECHO_CHARS + 1);
            let known = SEARCH.contains(&name.as_str()) || PRICE.contains(&name.as_str());
            let sent = request.query.iter().any(|(n, _)| {
                n == name || name.strip_suffix('…').is_some_and(|c| n.starts_with(c))
            });
            assert!(known || sent, "{name:?} is neither a parameter nor sent");
        }
        other => panic!("a GET answered {other}: {problem:?}"),
    }
    let reply = problem.reply();
    assert_eq!(reply.status, problem.status);
    let response = into_lambda(reply);
    assert_eq!(response.status().as_u16(), problem.status);
}
