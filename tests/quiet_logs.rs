//! Nothing secret reaches the functions' logs, at the most verbose level a
//! function can be given.
//!
//! The real binaries under `cargo lambda watch` on moto, with the customer
//! half, run at `AWS_LAMBDA_LOG_LEVEL=TRACE`: past what the template offers
//! (DEBUG), so that the libraries' cap is what is tested, not the template's
//! list. The operator wants a credential: it is an SSM SecureString in moto
//! under `OPERATOR_CREDENTIALS_PATH`, and the simulated operator answers 401
//! without it. A customer searches and opens carts with an `authorization`
//! header and a cookie, and sends a cart body that carries a marker in a
//! field the cart does not know. Afterwards every line the functions wrote
//! is read back: none holds the operator's credential, the customer's token,
//! the cookie or the body's marker, while lifeboat's own DEBUG lines are
//! there (the level took effect).
//!
//! Without the libraries' cap (`lifeboat_aws::logs::LIBRARY_CEILING`), the
//! Lambda runtime writes every raw event at TRACE, headers and body
//! included, and this test fails.
//!
//! Needs the functions built where `cargo lambda watch` runs them
//! (tools/test does it first).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::time::Duration;

use chrono::{TimeDelta, Utc};
use lifeboat_core::OperatorId;
use lifeboat_local::suite::{CustomerOptions, LocalSuite, OperatorCredential, SuiteOptions};
use serde_json::json;

const STARTUP_LIMIT: Duration = Duration::from_secs(900);
const OPERATOR_SECRET: &str = "op-secret-5b1e0c7d9a";
const CUSTOMER_TOKEN: &str = "customer-token-8f3a2c61e4";
const COOKIE: &str = "cookie-value-2d94b7a0c3";
const BODY_MARKER: &str = "body-marker-7c05e91fd2";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_credential_token_cookie_or_body_reaches_the_logs_at_trace() {
    let nordic = OperatorId::new("nordic").unwrap();
    let mut options = SuiteOptions::new(nordic.clone());
    options.log_level = "TRACE".to_owned();
    options.customer = Some(CustomerOptions::default());
    options.operator_credential = Some(OperatorCredential {
        path: "/lifeboat/e2e/operators".to_owned(),
        header: "x-api-key".to_owned(),
        value: OPERATOR_SECRET.to_owned(),
    });
    let gateway = tokio::time::timeout(STARTUP_LIMIT, LocalSuite::start(options))
        .await
        .expect("the suite starts within 15 minutes (build the functions first)")
        .expect("the suite starts");

    let caller = [
        ("authorization", &*format!("Bearer {CUSTOMER_TOKEN}")),
        ("cookie", &*format!("session={COOKIE}")),
    ];
    let date = (Utc::now() + TimeDelta::days(7))
        .format("%Y-%m-%d")
        .to_string();
    let path = format!("/sailings?operator=nordic&from=HEL&to=TLL&date={date}&passengers=2");
    let live = gateway
        .api_with_headers("GET", &path, None, &caller)
        .await
        .unwrap();
    assert_eq!(live.status, 200, "{}", live.body);
    assert_eq!(live.body["source"], "live", "{}", live.body);
    // The operator answers only calls that carry the credential.
    let calls = gateway.operator_stats().await.unwrap().total;
    assert!(calls >= 1, "the operator was called with its credential");

    let sailing = &live.body["sailings"][0];
    let cart = json!({
        "operator": "nordic",
        "sailing_id": sailing["sailing_id"],
        "from": "HEL",
        "to": "TLL",
        "date": date,
        "passengers": 2,
    });
    let opened = gateway
        .api_with_headers("POST", "/carts", Some(&cart), &caller)
        .await
        .unwrap();
    assert_eq!(opened.status, 201, "{}", opened.body);
    let cart_id = opened.body["cart_id"].as_str().unwrap().to_owned();
    let priced = gateway
        .api_with_headers("POST", &format!("/carts/{cart_id}/price"), None, &caller)
        .await
        .unwrap();
    assert!(priced.status < 500, "{}", priced.body);
    let mut marked = cart.clone();
    marked["note"] = json!(BODY_MARKER);
    let refused = gateway
        .api_with_headers("POST", "/carts", Some(&marked), &caller)
        .await
        .unwrap();
    assert_eq!(refused.status, 400, "{}", refused.body);

    let log_path = gateway.watch().log_path().unwrap().to_path_buf();
    let log = std::fs::read_to_string(&log_path).unwrap();
    gateway.stop().await;
    // Text or JSON lines, with or without colour: the level's name is there.
    let debug_lines = log.lines().filter(|line| line.contains("DEBUG")).count();
    assert!(
        debug_lines > 0,
        "the functions wrote at DEBUG or more verbose ({})",
        log_path.display()
    );
    for (what, secret) in [
        ("the operator's credential", OPERATOR_SECRET),
        ("the customer's token", CUSTOMER_TOKEN),
        ("the cookie", COOKIE),
        ("the cart body's marker", BODY_MARKER),
    ] {
        let line = log.lines().find(|line| line.contains(secret));
        assert!(
            line.is_none(),
            "{what} is in the functions' log {}: {}",
            log_path.display(),
            line.unwrap_or_default()
        );
    }
    eprintln!(
        "quiet logs: {} lines at TRACE, {debug_lines} of them DEBUG, none with a secret",
        log.lines().count()
    );
}
