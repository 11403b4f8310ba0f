//! The DynamoDB item decoders of lifeboat-aws, as the stores read what
//! `GetItem`, `Query` and `Scan` return: breaker records and state changes
//! (`breaker_from_item`, `change_from_item`), the failure window's buckets
//! (`bucket_from_item`), carts (`cart_from_item`), sale records
//! (`record_from_item`), cache entries (`entry_from_item`), the operator
//! config item (`config_from_item`) and requests (`request_from_item`).
//!
//! Input: an item in DynamoDB's JSON form (`{"operator": {"S": "nordic"},
//! …}`), as it is; any other bytes generate an item whose attribute names,
//! types and values come mostly from the items' own vocabulary. Every
//! decoder reads the same item.
//!
//! Invariants: no panic; an item read as a breaker record, a state change,
//! a cart, a sale record or the operator config item is written back
//! (`*_to_item`, as the stores' saves write them) as an item that reads as
//! the same; a bucket's start written as its key (`bucket_key`) reads as
//! the same start; a cache entry holds an answer or a refusal, each for the
//! item's key, operator and operation, a refusal with a 4xx status; a
//! request has an id, and the item of a new request made from it reads as
//! the same request without an outcome.
#![no_main]

use std::collections::HashMap;

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use lifeboat_aws::breaker::{
    BREAKER_ITEM, breaker_from_item, breaker_to_item, change_from_item, change_key, change_to_item,
};
use lifeboat_aws::cache::entry_from_item;
use lifeboat_aws::carts::{cart_from_item, cart_to_item};
use lifeboat_aws::operator_config::{config_from_item, config_to_item};
use lifeboat_aws::sale::{record_from_item, record_to_item};
use lifeboat_aws::window::{bucket_from_item, bucket_key};
use lifeboat_aws::{request_from_item, request_to_item};
use lifeboat_core::cache::CacheKey;
use serde_dynamo::{AttributeValue, Item};

/// Attribute names of every item the stores read.
const NAMES: &[&str] = &[
    "operator",
    "item",
    "state",
    "version",
    "since",
    "reason",
    "previous",
    "open_until",
    "failed_trials",
    "trials_claimed",
    "trial_successes",
    "trial_failures",
    "announced_version",
    "routed_version",
    "opened_slow",
    "probed_at_ms",
    "from",
    "to",
    "at",
    "first_failure_at",
    "expires_at",
    "calls",
    "successes",
    "failures",
    "timeouts",
    "slow",
    "refusals",
    "cart_id",
    "revision",
    "sailing",
    "sailing_id",
    "date",
    "passengers",
    "accommodation",
    "extras",
    "price",
    "degraded",
    "price_change",
    "confirmation",
    "created_at",
    "updated_at",
    "steps",
    "step",
    "status",
    "price_change_shown",
    "applied_version",
    "applied_status",
    "applied_at",
    "pending",
    "attempts",
    "next_attempt_at",
    "last_error",
    "gave_up_at",
    "fault_published",
    "lease",
    "attempt",
    "until",
    "cache_key",
    "operation",
    "body",
    "as_of",
    "refusal_status",
    "refusal_detail",
    "refusal_at",
    "refused",
    "name",
    "endpoints",
    "settings",
    "request_id",
    "record_type",
    "params",
    "deadline",
    "outcome",
    "kind",
    "by",
];

/// String values the items hold.
const STRINGS: &[&str] = &[
    "nordic",
    "BAD OP",
    "",
    "breaker",
    "change#00000000000000000003",
    "bucket#001796032800000",
    "bucket#-00000000000001",
    "bucket#+5",
    "closed",
    "open",
    "half_open",
    "forced_open",
    "forced_closed",
    "on_sale",
    "off_sale",
    "search",
    "price",
    "ping",
    "request",
    "operators",
    "nordic#search#from=HEL",
    "2026-12-01T08:00:00Z",
    "2026-12-01T08:00:00.250+02:00",
    "+262142-12-31T23:59:59Z",
    "-262143-01-01T00:00:00Z",
    "2026-13-01T00:00:00Z",
    "HEL",
    "TLL",
    "2026-12-24",
    "{\"sailings\":[]}",
];

/// Numbers as DynamoDB writes them, and some it never would.
const NUMBERS: &[&str] = &[
    "0",
    "1",
    "3",
    "404",
    "200",
    "-1",
    "18446744073709551615",
    "18446744073709551616",
    "9223372036854775807",
    "-9223372036854775808",
    "1796032800000",
    "8210298412800000",
    "1e3",
    "1.5",
    "",
];

/// The deepest map or list the generator builds.
const MAX_DEPTH: u32 = 3;

fuzz_target!(|data: &[u8]| {
    let item = match serde_json::from_slice::<Item>(data) {
        Ok(item) => item,
        Err(_) => generated(data),
    };
    decode(&item);
});

fn generated(data: &[u8]) -> Item {
    let mut u = Unstructured::new(data);
    let mut item = HashMap::new();
    // Unstructured keeps answering once its bytes are spent (with the
    // smallest choice), so the item ends with them.
    while !u.is_empty() && item.len() < 64 {
        let (Ok(name), Ok(value)) = (name(&mut u), value(&mut u, 0)) else {
            break;
        };
        item.insert(name, value);
    }
    Item::from(item)
}

fn name(u: &mut Unstructured) -> Result<String> {
    if u.ratio(15, 16)? {
        Ok((*u.choose(NAMES)?).to_owned())
    } else {
        u.arbitrary()
    }
}

fn string(u: &mut Unstructured, vocabulary: &[&str]) -> Result<String> {
    if u.ratio(3, 4)? {
        Ok((*u.choose(vocabulary)?).to_owned())
    } else {
        u.arbitrary()
    }
}

fn value(u: &mut Unstructured, depth: u32) -> Result<AttributeValue> {
    let kinds = if depth >= MAX_DEPTH { 7 } else { 9 };
    Ok(match u.choose_index(kinds)? {
        0 | 1 => AttributeValue::S(string(u, STRINGS)?),
        2 | 3 => AttributeValue::N(string(u, NUMBERS)?),
        4 => AttributeValue::Bool(u.arbitrary()?),
        5 => AttributeValue::Null(true),
        6 => AttributeValue::Ss(vec![string(u, STRINGS)?]),
        7 => {
            let mut map = HashMap::new();
            for _ in 0..u.int_in_range(0..=6)? {
                map.insert(name(u)?, value(u, depth + 1)?);
            }
            AttributeValue::M(map)
        }
        _ => {
            let mut list = Vec::new();
            for _ in 0..u.int_in_range(0..=3)? {
                list.push(value(u, depth + 1)?);
            }
            AttributeValue::L(list)
        }
    })
}

fn s(item: &Item, name: &str) -> Option<String> {
    match item.get(name) {
        Some(AttributeValue::S(s)) => Some(s.clone()),
        _ => None,
    }
}

fn decode(item: &Item) {
    let sdk = || HashMap::from(item.clone());

    if let Ok(record) = breaker_from_item(sdk()) {
        assert_eq!(s(item, "item").as_deref(), Some(BREAKER_ITEM));
        match breaker_to_item(&record).map(breaker_from_item) {
            Ok(Ok(back)) => assert_eq!(back, record),
            other => panic!("breaker {record:?} written back reads as {other:?}"),
        }
    }

    if let Ok(change) = change_from_item(sdk()) {
        assert_eq!(s(item, "item"), Some(change_key(change.version)));
        match change_to_item(&change).map(change_from_item) {
            Ok(Ok(back)) => assert_eq!(back, change),
            other => panic!("change {change:?} written back reads as {other:?}"),
        }
    }

    if let Ok(bucket) = bucket_from_item(sdk()) {
        let mut again = item.clone();
        again.insert(
            "item".to_owned(),
            AttributeValue::S(bucket_key(bucket.start.timestamp_millis())),
        );
        match bucket_from_item(HashMap::from(again)) {
            Ok(back) => assert_eq!(back, bucket),
            Err(e) => panic!("bucket {bucket:?} under its own key: {e}"),
        }
    }

    if let Ok(cart) = cart_from_item(sdk()) {
        assert!(!cart.cart_id.is_empty());
        match cart_to_item(&cart).map(cart_from_item) {
            Ok(Ok(back)) => assert_eq!(back, cart),
            other => panic!("cart {cart:?} written back reads as {other:?}"),
        }
    }

    if let Ok(record) = record_from_item(sdk()) {
        match record_to_item(&record).map(record_from_item) {
            Ok(Ok(back)) => assert_eq!(back, record),
            other => panic!("sale record {record:?} written back reads as {other:?}"),
        }
    }

    if let Ok(entry) = entry_from_item(sdk()) {
        assert!(entry.answer.is_some() || entry.refusal.is_some());
        let key = s(item, "cache_key").map(CacheKey::from_stored);
        let operator = s(item, "operator");
        let operation = s(item, "operation");
        if let Some(answer) = &entry.answer {
            assert_eq!(Some(&answer.key), key.as_ref());
            assert_eq!(Some(answer.operator.as_str()), operator.as_deref());
            assert_eq!(Some(answer.operation.as_str()), operation.as_deref());
        }
        if let Some(refusal) = &entry.refusal {
            assert!((400..500).contains(&refusal.status), "{refusal:?}");
            assert_eq!(Some(&refusal.key), key.as_ref());
            assert_eq!(Some(refusal.operator.as_str()), operator.as_deref());
            assert_eq!(Some(refusal.operation.as_str()), operation.as_deref());
        }
    }

    if let Ok(config) = config_from_item(&sdk()) {
        match config_from_item(&config_to_item(&config)) {
            Ok(back) => assert_eq!(back, config),
            Err(e) => panic!("config item {config:?} written back: {e:?}"),
        }
    }

    if let Ok(stored) = request_from_item(item.clone()) {
        let request = &stored.request;
        assert!(!request.request_id.is_empty());
        assert_eq!(s(item, "record_type").as_deref(), Some("request"));
        match request_to_item(request).map(request_from_item) {
            Ok(Ok(back)) => {
                assert_eq!(&back.request, request);
                assert!(back.outcome.is_none());
            }
            other => panic!("request {request:?} written as new reads as {other:?}"),
        }
    }
}
