//! The operator config table on moto: the DynamoDB store, `lifeboat config
//! put` and `show` as operators run them (the binary, its files, its exit
//! code), and a function starting from the item rather than its
//! environment (the circuit switch's `from_env`, through the DynamoDB
//! store). Each test starts its own moto_server on a free loopback port
//! and stops it.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::HashMap;
use std::path::Path;
use std::process::Output;

use aws_sdk_dynamodb::types::AttributeValue;
use circuit_switch::CircuitSwitch;
use lifeboat_aws::{Clients, DynamoOperatorConfigStore, Env};
use lifeboat_core::operator_config::OperatorConfigItem;
use lifeboat_core::ports::{OperatorConfigStore, StoreError};
use lifeboat_local::moto::MotoServer;
use lifeboat_local::moto::resources::create_operator_config_table;

mod support;

const TABLE: &str = "lifeboat-operator-config";

async fn moto_with_table() -> (MotoServer, Clients) {
    let moto = MotoServer::start().await.expect("moto_server starts");
    let clients = Clients::new(&moto.sdk_config().await);
    create_operator_config_table(clients.dynamodb(), TABLE)
        .await
        .unwrap();
    (moto, clients)
}

/// `lifeboat config …` against moto, as an operator's shell runs it.
async fn lifeboat(moto: &MotoServer, args: &[&str]) -> Output {
    support::lifeboat(moto, None, args).await
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[tokio::test]
async fn the_store_reads_writes_on_the_revision_and_names_a_bad_attribute() {
    let (moto, clients) = moto_with_table().await;
    let store = DynamoOperatorConfigStore::new(clients.dynamodb().clone(), TABLE);
    assert_eq!(store.load().await.unwrap(), None);
    let item = OperatorConfigItem {
        endpoints: Some("nordic=https://api.nordic.example".into()),
        settings: Some(r#"{"default": {}}"#.into()),
        revision: 1,
        updated_at: Some("2026-12-05T10:00:00Z".parse().unwrap()),
    };
    store.save(&item, None).await.unwrap();
    assert_eq!(store.load().await.unwrap(), Some(item.clone()));
    // A second writer that read no item, or an older revision, loses.
    assert!(matches!(
        store.save(&item, None).await,
        Err(StoreError::Conflict(_))
    ));
    let next = OperatorConfigItem {
        revision: 2,
        settings: None,
        ..item.clone()
    };
    assert!(matches!(
        store.save(&next, Some(5)).await,
        Err(StoreError::Conflict(_))
    ));
    store.save(&next, Some(1)).await.unwrap();
    assert_eq!(store.load().await.unwrap(), Some(next));

    // An item written by hand with settings as a map: a clear error.
    clients
        .dynamodb()
        .put_item()
        .table_name(TABLE)
        .set_item(Some(HashMap::from([
            ("name".to_owned(), AttributeValue::S("operators".into())),
            ("revision".to_owned(), AttributeValue::N("3".into())),
            ("settings".to_owned(), AttributeValue::M(HashMap::new())),
        ])))
        .send()
        .await
        .unwrap();
    let err = store.load().await.unwrap_err().to_string();
    assert!(
        err.contains("attribute settings") && err.contains("map"),
        "{err}"
    );
    let env = Env::from_pairs([("OPERATOR_CONFIG_TABLE", TABLE)]);
    let err = lifeboat_aws::operator_config::load(&env, &clients)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(TABLE) && err.contains("attribute settings"),
        "{err}"
    );
    moto.stop().await;
}

#[tokio::test]
async fn config_put_checks_before_it_writes_and_show_prints_the_item() {
    let (moto, clients) = moto_with_table().await;
    let dir = std::env::temp_dir().join(format!("lifeboat-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let endpoints = write(
        &dir,
        "endpoints.txt",
        "nordic=https://api.nordic.example\nbaltic=https://api.baltic.example\n",
    );
    let settings = write(
        &dir,
        "settings.json",
        r#"{"operators": {"nordic": {"hang_check": {}}}}"#,
    );
    let put = lifeboat(
        &moto,
        &[
            "config",
            "put",
            "--table",
            TABLE,
            "--endpoints-file",
            &endpoints,
            "--settings-file",
            &settings,
        ],
    )
    .await;
    let stdout = String::from_utf8_lossy(&put.stdout);
    assert!(
        put.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&put.stderr)
    );
    assert!(stdout.contains("revision 1 written"), "{stdout}");
    assert!(stdout.contains("OperatorConfigRevision=1"), "{stdout}");

    // Settings the functions would refuse: nothing is written.
    let typo = write(&dir, "typo.json", r#"{"operatorz": {}}"#);
    let refused = lifeboat(
        &moto,
        &["config", "put", "--table", TABLE, "--settings-file", &typo],
    )
    .await;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        stderr.contains("typo.json") && stderr.contains("operatorz"),
        "{stderr}"
    );
    let plain = write(&dir, "plain.txt", "nordic=http://api.nordic.example\n");
    let refused = lifeboat(
        &moto,
        &[
            "config",
            "put",
            "--table",
            TABLE,
            "--endpoints-file",
            &plain,
        ],
    )
    .await;
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("https"));

    // Only the settings: the endpoints stay, the revision moves on.
    let more = write(&dir, "more.json", r#"{"default": {"hang_check": {}}}"#);
    let put = lifeboat(
        &moto,
        &["config", "put", "--table", TABLE, "--settings-file", &more],
    )
    .await;
    assert!(put.status.success());
    let show = lifeboat(&moto, &["config", "show", "--table", TABLE, "--json"]).await;
    assert!(show.status.success());
    let shown: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(shown["revision"], 2);
    assert_eq!(
        shown["endpoints"],
        "nordic=https://api.nordic.example,baltic=https://api.baltic.example"
    );
    assert_eq!(
        shown["settings"]["default"]["hang_check"],
        serde_json::json!({})
    );
    let text = lifeboat(&moto, &["config", "show", "--table", TABLE]).await;
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("revision 2") && text.contains("  baltic=https://api.baltic.example"),
        "{text}"
    );

    // Lanes sized with no stack to read: written, and the put says the
    // reservation was left to the circuit switch's tick to check.
    let lanes = write(
        &dir,
        "lanes.json",
        r#"{"default": {"hang_check": {}}, "operators": {"nordic": {"lane": {"parallelization": 10}}}}"#,
    );
    let put = support::lifeboat(
        &moto,
        Some(&dir),
        &["config", "put", "--table", TABLE, "--settings-file", &lanes],
    )
    .await;
    let stderr = String::from_utf8_lossy(&put.stderr);
    assert!(put.status.success(), "{stderr}");
    assert!(
        stderr.contains("was not checked against RealConsumerConcurrency"),
        "{stderr}"
    );

    // No table named anywhere: a clear error.
    let unnamed = lifeboat(&moto, &["config", "show"]).await;
    assert!(!unnamed.status.success());
    assert!(String::from_utf8_lossy(&unnamed.stderr).contains("OPERATOR_CONFIG_TABLE"));

    let store = DynamoOperatorConfigStore::new(clients.dynamodb().clone(), TABLE);
    assert_eq!(store.load().await.unwrap().map(|i| i.revision), Some(3));
    let _ = std::fs::remove_dir_all(&dir);
    moto.stop().await;
}

/// The circuit switch started from its environment on moto: no endpoints
/// there, the operator config table's item has them, so it probes.
#[tokio::test]
async fn a_function_takes_its_endpoints_from_the_table_not_the_environment() {
    let (moto, clients) = moto_with_table().await;
    let env = |with_table: bool| {
        let mut pairs = vec![
            ("OPERATORS", "nordic,baltic"),
            ("BREAKER_TABLE", "breakers"),
            ("EVENT_BUS_NAME", "bus"),
            ("REQUESTS_MAPPING_UUID", "uuid"),
            ("REAL_CONSUMER_FUNCTION", "real"),
            ("FALLBACK_CONSUMER_FUNCTION", "fallback"),
            ("OPERATOR_ENDPOINTS", ""),
            ("OPERATOR_SETTINGS", ""),
        ];
        if with_table {
            pairs.push(("OPERATOR_CONFIG_TABLE", TABLE));
        }
        Env::from_pairs(pairs)
    };
    // The table is empty: the environment's (no endpoints, no probes).
    let switch = CircuitSwitch::from_env(&env(true), &clients).await.unwrap();
    assert!(!switch.has_prober());

    let store = DynamoOperatorConfigStore::new(clients.dynamodb().clone(), TABLE);
    lifeboat_cli::ops::operator_config::put(
        &store,
        Some("nordic=https://api.nordic.example,baltic=https://api.baltic.example".into()),
        Some(r#"{"default": {"breaker": {"open_base": 20000}}}"#.into()),
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    let switch = CircuitSwitch::from_env(&env(true), &clients).await.unwrap();
    assert!(switch.has_prober(), "endpoints from the table");
    assert_eq!(
        switch.settings().default.breaker.open_base,
        std::time::Duration::from_secs(20)
    );
    // Without OPERATOR_CONFIG_TABLE the item is not read.
    let switch = CircuitSwitch::from_env(&env(false), &clients)
        .await
        .unwrap();
    assert!(!switch.has_prober());
    moto.stop().await;
}
