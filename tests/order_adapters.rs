#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

//! lifeboat-aws's Orders table against moto_server: held orders and the
//! passengers held on each sailing, with the guarantees of the in-memory
//! twin (`lifeboat_core::memory::MemoryOrderStore`) now from DynamoDB
//! transactions and condition expressions. Every test starts its own moto.

use aws_config::SdkConfig;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, ScalarAttributeType,
};
use chrono::{DateTime, Utc};
use futures::future::join_all;
use lifeboat_aws::DynamoOrderStore;
use lifeboat_aws::orders::OPEN_BY_OPERATOR;
use lifeboat_core::cart::{Cart, CartPolicy, Confirmation, Sailing};
use lifeboat_core::operator::OperatorId;
use lifeboat_core::order::{BookingAnswer, HeldOrder, HoldReason, OrderPolicy};
use lifeboat_core::ports::{Held, OrderStore, StoreError};
use lifeboat_local::moto::MotoServer;

const TABLE: &str = "lifeboat-orders";

fn at(s: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_796_000_000 + s, 0).unwrap()
}

fn nordic() -> OperatorId {
    OperatorId::new("nordic").unwrap()
}

fn key(name: &str, kind: KeyType) -> KeySchemaElement {
    KeySchemaElement::builder()
        .attribute_name(name)
        .key_type(kind)
        .build()
        .unwrap()
}

fn attribute(name: &str, kind: ScalarAttributeType) -> AttributeDefinition {
    AttributeDefinition::builder()
        .attribute_name(name)
        .attribute_type(kind)
        .build()
        .unwrap()
}

/// moto with the Orders table as the adapter's design has it.
async fn orders() -> (MotoServer, DynamoOrderStore) {
    let moto = MotoServer::start().await.expect("moto_server starts");
    let config: SdkConfig = moto.sdk_config().await;
    let client = aws_sdk_dynamodb::Client::new(&config);
    client
        .create_table()
        .table_name(TABLE)
        .billing_mode(BillingMode::PayPerRequest)
        .key_schema(key("pk", KeyType::Hash))
        .attribute_definitions(attribute("pk", ScalarAttributeType::S))
        .attribute_definitions(attribute("open_operator", ScalarAttributeType::S))
        .attribute_definitions(attribute("open_at", ScalarAttributeType::N))
        .global_secondary_indexes(
            GlobalSecondaryIndex::builder()
                .index_name(OPEN_BY_OPERATOR)
                .key_schema(key("open_operator", KeyType::Hash))
                .key_schema(key("open_at", KeyType::Range))
                .projection(
                    Projection::builder()
                        .projection_type(ProjectionType::All)
                        .build(),
                )
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    (moto, DynamoOrderStore::new(client, TABLE))
}

/// The held order of cart `cart_id`: `passengers` on sailing s1, held at
/// `held_at` (milliseconds apart where asked).
fn order(cart_id: &str, passengers: u8, held_at: DateTime<Utc>) -> HeldOrder {
    let mut cart = Cart::open(
        cart_id.into(),
        nordic(),
        Sailing {
            sailing_id: "s1".into(),
            from: "HEL".into(),
            to: "TLL".into(),
            date: "2026-12-24".into(),
            passengers,
        },
        true,
        &CartPolicy::default(),
        at(0),
    );
    cart.confirmation = Some(Confirmation {
        at: held_at,
        amount_cents: 5_000,
        currency: "EUR".into(),
        on_cached_price: true,
        price_as_of: at(0),
        absorbed_cents: 0,
    });
    HeldOrder::hold(&cart, None, Vec::new(), 0, HoldReason::OffSale, held_at).unwrap()
}

#[tokio::test]
async fn passengers_are_held_up_to_the_cap_and_a_retried_hold_counts_once() {
    let (moto, store) = orders().await;
    assert_eq!(
        store.hold(&order("a", 3, at(1)), Some(5)).await.unwrap(),
        Held::Held
    );
    assert_eq!(
        store.hold(&order("a", 3, at(2)), Some(5)).await.unwrap(),
        Held::AlreadyHeld
    );
    assert_eq!(
        store.hold(&order("b", 3, at(3)), Some(5)).await.unwrap(),
        Held::Full { held: 3 }
    );
    assert_eq!(
        store.get("lb-b").await.unwrap(),
        None,
        "a full sailing writes nothing"
    );
    assert_eq!(
        store.hold(&order("big", 9, at(3)), Some(5)).await.unwrap(),
        Held::Full { held: 3 }
    );
    assert_eq!(
        store.hold(&order("c", 2, at(4)), Some(5)).await.unwrap(),
        Held::Held
    );
    assert_eq!(
        store.hold(&order("d", 4, at(5)), None).await.unwrap(),
        Held::Held
    );
    assert_eq!(store.held_passengers(&nordic(), "s1").await.unwrap(), 9);
    assert_eq!(store.get("lb-a").await.unwrap(), Some(order("a", 3, at(1))));
    moto.stop().await;
}

#[tokio::test]
async fn twenty_confirms_racing_for_ten_seats_hold_exactly_ten() {
    let (moto, store) = orders().await;
    // A transaction that collides with another may be cancelled
    // (TransactionConflict): an unavailable store to the caller, who asks
    // again, as the cart function's retries do.
    let holds = (0..20).map(|i| {
        let store = store.clone();
        async move {
            let order = order(&format!("c{i}"), 2, at(i));
            let mut retried = 0;
            loop {
                match store.hold(&order, Some(10)).await {
                    Err(StoreError::Unavailable(e)) if retried < 20 => {
                        retried += 1;
                        assert!(e.contains("TransactionConflict"), "{e}");
                    }
                    other => return (other.unwrap(), retried),
                }
            }
        }
    });
    let results = join_all(holds).await;
    let held = results.iter().filter(|(r, _)| *r == Held::Held).count();
    let full = results
        .iter()
        .filter(|(r, _)| matches!(r, Held::Full { .. }))
        .count();
    let retried: u32 = results.iter().map(|(_, n)| n).sum();
    println!(
        "20 confirms of 2 passengers for 10 seats: {held} held, {full} full, {retried} retries"
    );
    assert_eq!((held, full), (5, 15));
    assert_eq!(store.held_passengers(&nordic(), "s1").await.unwrap(), 10);
    moto.stop().await;
}

#[tokio::test]
async fn a_final_order_gives_its_passengers_back_once_and_leaves_the_open_list() {
    let (moto, store) = orders().await;
    let mut a = order("a", 3, at(1));
    store.hold(&a, Some(10)).await.unwrap();
    store.hold(&order("b", 2, at(2)), Some(10)).await.unwrap();
    a.start_booking(at(10)).unwrap();
    a.revision = 1;
    store.save(&a, 0).await.unwrap();
    assert_eq!(store.held_passengers(&nordic(), "s1").await.unwrap(), 5);
    a.answer(BookingAnswer::SoldOut, &OrderPolicy::default(), at(11))
        .unwrap();
    a.revision = 2;
    store.save(&a, 1).await.unwrap();
    assert_eq!(store.held_passengers(&nordic(), "s1").await.unwrap(), 2);
    // Saved again, still final: nothing given back twice.
    a.revision = 3;
    store.save(&a, 2).await.unwrap();
    assert_eq!(store.held_passengers(&nordic(), "s1").await.unwrap(), 2);
    assert_eq!(store.get("lb-a").await.unwrap(), Some(a.clone()));
    let open = store.open_orders(&nordic(), 10).await.unwrap();
    assert_eq!(
        open.iter().map(|o| o.order_id.as_str()).collect::<Vec<_>>(),
        ["lb-b"]
    );
    // A save on a stale revision is a conflict, final or not.
    assert!(matches!(
        store.save(&a, 0).await,
        Err(StoreError::Conflict(_))
    ));
    moto.stop().await;
}

#[tokio::test]
async fn open_orders_come_oldest_first_to_the_millisecond_up_to_the_limit() {
    let (moto, store) = orders().await;
    let ms = |m: i64| at(100) + chrono::Duration::milliseconds(m);
    for (id, when) in [("c", ms(900)), ("a", ms(0)), ("b", ms(5)), ("d", ms(1_000))] {
        store.hold(&order(id, 1, when), None).await.unwrap();
    }
    let open = store.open_orders(&nordic(), 3).await.unwrap();
    assert_eq!(
        open.iter().map(|o| o.order_id.as_str()).collect::<Vec<_>>(),
        ["lb-a", "lb-b", "lb-c"]
    );
    let baltic = OperatorId::new("baltic").unwrap();
    assert!(store.open_orders(&baltic, 10).await.unwrap().is_empty());
    moto.stop().await;
}

#[tokio::test]
async fn every_order_is_read_back_and_a_bad_item_is_named() {
    let (moto, store) = orders().await;
    // Thirty orders on one sailing: the sailing's own item (its held
    // passengers) is in the same table and is passed over.
    for i in 0..30 {
        let held = order(&format!("c{i:02}"), 1, at(i));
        assert_eq!(store.hold(&held, Some(100)).await.unwrap(), Held::Held);
    }
    let config: SdkConfig = moto.sdk_config().await;
    let client = aws_sdk_dynamodb::Client::new(&config);
    client
        .put_item()
        .table_name(TABLE)
        .item(
            "pk",
            aws_sdk_dynamodb::types::AttributeValue::S("lb-broken".into()),
        )
        .item(
            "state",
            aws_sdk_dynamodb::types::AttributeValue::S("held".into()),
        )
        .send()
        .await
        .unwrap();
    let (all, unreadable) = store.all().await.unwrap();
    assert_eq!(all.len(), 30, "every order, and no sailing item");
    let mut ids: Vec<&str> = all.iter().map(|o| o.order_id.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(ids[0], "lb-c00");
    assert_eq!(ids[29], "lb-c29");
    assert_eq!(unreadable.len(), 1, "{unreadable:?}");
    assert!(
        unreadable[0].starts_with("order lb-broken in table lifeboat-orders:"),
        "{unreadable:?}"
    );
    moto.stop().await;
}
