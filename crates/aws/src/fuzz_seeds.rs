//! The seeds of the `dynamo_item` fuzz target (`fuzz/seeds/dynamo_item/`):
//! one item of each kind the stores read, in DynamoDB's JSON form, as the
//! stores write them today. The test below reads every seed with its
//! decoder, so a changed table design that would leave the fuzzer starting
//! from items nothing reads any more fails here; run it with
//! `LIFEBOAT_WRITE_FUZZ_SEEDS=1` to write the seeds again from these
//! records (docs/fuzzing.md).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, TimeDelta, Utc};
use lifeboat_core::breaker::{BreakerRecord, BreakerState};
use lifeboat_core::cache::{CacheKey, CachedAnswer, CachedRefusal, Source};
use lifeboat_core::cart::{Cart, CartPolicy, CartPrice, Sailing, StepKind, StepRecord};
use lifeboat_core::events::SaleStatus;
use lifeboat_core::operator::{Operation, OperatorId};
use lifeboat_core::operator_config::OperatorConfigItem;
use lifeboat_core::request::{FailureReason, Outcome, RequestRecord};
use lifeboat_core::sale::{PendingWrite, SaleRecord, WriteLease};

use crate::breaker::{BreakerChange, breaker_to_item, change_to_item};
use crate::cache::{answer_values, refusal_values};
use crate::window::bucket_key;

fn at(s: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_796_032_800 + s, 0).unwrap() // 2026-11-30T10:00:00Z
}

fn nordic() -> OperatorId {
    OperatorId::new("nordic").unwrap()
}

fn breaker() -> BreakerRecord {
    let mut r = BreakerRecord::initial(nordic(), at(0));
    r.state = BreakerState::Open;
    r.previous = Some(BreakerState::Closed);
    r.version = 3;
    r.reason = "5 consecutive timeouts".into();
    r.open_until = Some(at(30));
    r.announced_version = 2;
    r.routed_version = 3;
    r.probed_at = Some(at(12) + TimeDelta::milliseconds(250));
    r
}

fn cart() -> Cart {
    let mut c = Cart::open(
        "8f0c6f0e-1d5b-4a43-9f0e-6b1f1c1d2e3f".into(),
        nordic(),
        Sailing {
            sailing_id: "HEL-TLL-20261224-0615".into(),
            from: "HEL".into(),
            to: "TLL".into(),
            date: "2026-12-24".into(),
            passengers: 2,
        },
        true,
        &CartPolicy::default(),
        at(0),
    );
    c.set_price(
        CartPrice {
            amount_cents: 9_900,
            currency: "EUR".into(),
            source: Source::LastGood,
            as_of: at(-3600),
            parts: Vec::new(),
            covers: Default::default(),
            absorbed_cents: 0,
        },
        &CartPolicy::default(),
        at(5),
    )
    .unwrap();
    c.record_step(StepRecord {
        step: StepKind::Open,
        at: at(0),
        status: 201,
        price_change_shown: false,
    });
    c.revision = 2;
    c
}

fn sale() -> SaleRecord {
    let mut r = SaleRecord::new(nordic());
    r.revision = 4;
    r.applied_version = 3;
    r.applied_status = SaleStatus::OffSale;
    r.applied_at = Some(at(0));
    r.pending = Some(PendingWrite {
        version: 5,
        status: SaleStatus::OnSale,
        attempts: 2,
        next_attempt_at: at(15),
        last_error: Some("sale switch answered 503 Service Unavailable".into()),
        since: at(1),
        gave_up_at: None,
        fault_published: false,
    });
    r.lease = Some(WriteLease {
        version: 5,
        attempt: 2,
        until: at(5) + TimeDelta::milliseconds(250),
    });
    r
}

fn cache() -> HashMap<String, AttributeValue> {
    let params = BTreeMap::from([("from".to_owned(), "HEL".to_owned())]);
    let key = CacheKey::new(&nordic(), Operation::Search, &params);
    let answer = CachedAnswer {
        key: key.clone(),
        operator: nordic(),
        operation: Operation::Search,
        body: r#"{"sailings":[]}"#.into(),
        as_of: at(0) + TimeDelta::milliseconds(250),
    };
    let refusal = CachedRefusal {
        key: key.clone(),
        operator: nordic(),
        operation: Operation::Search,
        status: 404,
        detail: "operator answered 404".into(),
        at: at(60),
    };
    let mut item = HashMap::from([(
        "cache_key".to_owned(),
        AttributeValue::S(key.as_str().to_owned()),
    )]);
    for (name, value) in answer_values(&answer, at(604_800))
        .into_iter()
        .chain(refusal_values(&refusal))
    {
        item.insert(name.to_owned(), value);
    }
    item
}

fn bucket() -> HashMap<String, AttributeValue> {
    let n = |v: u32| AttributeValue::N(v.to_string());
    HashMap::from([
        ("operator".to_owned(), AttributeValue::S("nordic".into())),
        (
            "item".to_owned(),
            AttributeValue::S(bucket_key(at(0).timestamp_millis())),
        ),
        ("calls".to_owned(), n(12)),
        ("successes".to_owned(), n(7)),
        ("failures".to_owned(), n(2)),
        ("timeouts".to_owned(), n(3)),
        ("slow".to_owned(), n(1)),
        ("refusals".to_owned(), n(0)),
        (
            "expires_at".to_owned(),
            AttributeValue::N(at(3600).timestamp().to_string()),
        ),
    ])
}

fn request() -> serde_dynamo::Item {
    let record = RequestRecord {
        request_id: "r-1".into(),
        operator: nordic(),
        operation: Operation::Search,
        params: BTreeMap::from([
            ("from".to_owned(), "HEL".to_owned()),
            ("to".to_owned(), "TLL".to_owned()),
            ("date".to_owned(), "2026-12-24".to_owned()),
            ("passengers".to_owned(), "2".to_owned()),
        ]),
        created_at: at(0),
        deadline: at(3),
    };
    let mut item = crate::request_to_item(&record).unwrap();
    let outcome = Outcome::failed(
        FailureReason::Timeout,
        "no answer in 3 s",
        at(3),
        "real-consumer",
    );
    item.insert(
        "outcome".into(),
        serde_dynamo::to_attribute_value(&outcome).unwrap(),
    );
    item
}

/// Every seed: its file name and its item.
fn seeds() -> Vec<(&'static str, serde_dynamo::Item)> {
    let mut closed = BreakerRecord::initial(nordic(), at(0));
    closed.reason = "created".into();
    let config = OperatorConfigItem {
        endpoints: Some("nordic=https://api.nordic.example,baltic=http://127.0.0.1:8080".into()),
        settings: Some(r#"{"operators": {"nordic": {"ids": "upper"}}}"#.into()),
        revision: 7,
        updated_at: Some(at(0)),
    };
    let item = |m: HashMap<String, AttributeValue>| serde_dynamo::Item::from(m);
    vec![
        (
            "breaker-open.json",
            item(breaker_to_item(&breaker()).unwrap()),
        ),
        (
            "breaker-closed.json",
            item(breaker_to_item(&closed).unwrap()),
        ),
        (
            "change-trip.json",
            item(change_to_item(&BreakerChange::of(&breaker(), Some(at(-6)))).unwrap()),
        ),
        ("bucket.json", item(bucket())),
        (
            "cart-off-sale.json",
            item(crate::carts::cart_to_item(&cart()).unwrap()),
        ),
        (
            "sale-pending.json",
            item(crate::sale::record_to_item(&sale()).unwrap()),
        ),
        ("cache-answer-and-refusal.json", item(cache())),
        (
            "operator-config.json",
            item(crate::operator_config::config_to_item(&config)),
        ),
        ("request-timed-out.json", request()),
    ]
}

/// `value` with every object's keys in order, so a seed written again
/// differs only where the item does.
fn sorted(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let ordered: BTreeMap<String, Value> =
                map.into_iter().map(|(k, v)| (k, sorted(v))).collect();
            Value::Object(ordered.into_iter().collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/dynamo_item")
}

#[test]
fn the_fuzz_seeds_are_items_the_stores_read() {
    if std::env::var_os("LIFEBOAT_WRITE_FUZZ_SEEDS").is_some() {
        std::fs::create_dir_all(dir()).unwrap();
        for (name, item) in seeds() {
            let json = serde_json::to_string_pretty(&sorted(serde_json::to_value(&item).unwrap()))
                .unwrap();
            std::fs::write(dir().join(name), json + "\n").unwrap();
        }
    }
    for (name, written) in seeds() {
        let text = std::fs::read_to_string(dir().join(name))
            .unwrap_or_else(|e| panic!("seed {name}: {e}; write the seeds again"));
        let item: serde_dynamo::Item = serde_json::from_str(&text).unwrap();
        assert_eq!(
            item, written,
            "seed {name} is not what the stores write today"
        );
        let sdk = || HashMap::<String, AttributeValue>::from(item.clone());
        let read = match name.split('-').next() {
            Some("breaker") => crate::breaker::breaker_from_item(sdk())
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Some("change") => crate::breaker::change_from_item(sdk())
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Some("bucket.json") => crate::window::bucket_from_item(sdk())
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Some("cart") => crate::carts::cart_from_item(sdk())
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Some("sale") => crate::sale::record_from_item(sdk())
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Some("cache") => crate::cache::entry_from_item(sdk())
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Some("operator") => crate::operator_config::config_from_item(&sdk())
                .map(|_| ())
                .map_err(|e| format!("{e:?}")),
            Some("request") => crate::request_from_item(item.clone())
                .map(|_| ())
                .map_err(|e| e.to_string()),
            _ => Err(format!("no decoder for seed {name}")),
        };
        assert_eq!(read, Ok(()), "seed {name}");
    }
}
