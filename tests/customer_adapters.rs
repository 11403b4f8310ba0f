#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

//! lifeboat-aws's adapters of the customer-facing half against moto_server:
//! the answer cache, the carts, the sale records and the off-sale queue's
//! redelivery, each with the guarantee its in-memory twin gives, now from
//! DynamoDB condition expressions and SQS; and the off-sale listener built by
//! `from_env` on them.
//!
//! Every test starts its own moto and names its own resources, as in
//! `aws_adapters.rs`. The adapters are built the way the functions build them:
//! [`Clients`] and an [`Env`] naming the resources.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use aws_config::SdkConfig;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_sqs::types::MessageSystemAttributeName;
use chrono::{DateTime, TimeDelta, Utc};
use futures::future::join_all;
use lifeboat_aws::clients::{CACHE_TABLE, CARTS_TABLE, OFFSALE_QUEUE_URL, SALE_STATUS_TABLE};
use lifeboat_aws::{Clients, Env};
use lifeboat_core::breaker::BreakerState;
use lifeboat_core::cache::Source;
use lifeboat_core::cache::{CacheKey, CachePolicy, CachedAnswer};
use lifeboat_core::cart::{Cart, CartPolicy, CartPrice, Sailing};
use lifeboat_core::events::{BreakerStateChanged, SCHEMA_VERSION, SaleStatus};
use lifeboat_core::operator::{Operation, OperatorId};
use lifeboat_core::ports::{
    CacheStore, CacheWrite, CartStore, MessageHandle, Redelivery, RedeliveryError, SaleStatusStore,
    StoreError,
};
use lifeboat_core::sale::{OnSaleAt, SaleChange, SaleRecord, Step, WritePolicy};
use lifeboat_local::moto::MotoServer;
use lifeboat_local::moto::resources;
use offsale_listener::{Disposition, OffsaleListener};
use serde_json::{Value, json};

async fn moto() -> (MotoServer, SdkConfig) {
    let moto = MotoServer::start().await.expect("moto_server starts");
    let config = moto.sdk_config().await;
    (moto, config)
}

fn env(pairs: &[(&'static str, &str)]) -> Env {
    Env::from_pairs(pairs.iter().map(|(k, v)| (*k, *v)))
}

fn t(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_796_000_000 + secs, 0).unwrap()
}

fn op(name: &str) -> OperatorId {
    OperatorId::new(name).unwrap()
}

async fn raw_item(
    config: &SdkConfig,
    table: &str,
    key: &str,
    value: &str,
) -> HashMap<String, AttributeValue> {
    aws_sdk_dynamodb::Client::new(config)
        .get_item()
        .table_name(table)
        .key(key, AttributeValue::S(value.into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .expect("the item exists")
}

fn n(value: i64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

// --- the answer cache ------------------------------------------------------

fn answer(body: &str, as_of: DateTime<Utc>) -> CachedAnswer {
    let operator = op("nordic");
    let params = BTreeMap::from([
        ("from".to_owned(), "HEL".to_owned()),
        ("to".to_owned(), "TLL".to_owned()),
    ]);
    CachedAnswer {
        key: CacheKey::new(&operator, Operation::Search, &params),
        operator,
        operation: Operation::Search,
        body: body.to_owned(),
        as_of,
    }
}

#[tokio::test]
async fn cached_answers_round_trip_and_an_older_answer_never_replaces_a_newer_one() {
    let (_moto, config) = moto().await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&config);
    resources::create_cache_table(&dynamodb, "cache-order")
        .await
        .unwrap();
    let cache = Clients::new(&config)
        .cache_store(&env(&[(CACHE_TABLE, "cache-order")]))
        .unwrap();
    let policy = CachePolicy::default();

    let newer = answer(
        r#"{"sailings":[{"id":"s-2"}]}"#,
        t(60) + TimeDelta::milliseconds(250),
    );
    assert_eq!(cache.get(&newer.key).await.unwrap(), None);
    assert_eq!(
        cache
            .put(&newer, policy.expires_at(newer.as_of))
            .await
            .unwrap(),
        CacheWrite::Written
    );
    assert_eq!(
        cache.get(&newer.key).await.unwrap().and_then(|e| e.answer),
        Some(newer.clone())
    );

    // The item has the table design, TTL included.
    let item = raw_item(&config, "cache-order", "cache_key", newer.key.as_str()).await;
    assert_eq!(
        item.get("cache_key"),
        Some(&AttributeValue::S("nordic#search#from=HEL&to=TLL".into()))
    );
    assert_eq!(
        item.get("as_of_ms"),
        Some(&n(newer.as_of.timestamp_millis()))
    );
    assert_eq!(
        item.get("expires_at"),
        Some(&n(newer.as_of.timestamp() + 7 * 86_400))
    );

    // A late answer given earlier, and the same instant again, are refused.
    let older = answer(r#"{"sailings":[]}"#, t(0));
    let same_instant = answer(r#"{"sailings":["duplicate"]}"#, newer.as_of);
    for stale in [&older, &same_instant] {
        assert_eq!(
            cache
                .put(stale, policy.expires_at(stale.as_of))
                .await
                .unwrap(),
            CacheWrite::NewerKept
        );
    }
    assert_eq!(
        cache.get(&newer.key).await.unwrap().and_then(|e| e.answer),
        Some(newer.clone())
    );

    // Racing writers: the newest answer stays, whatever the order.
    let racers: Vec<CachedAnswer> = (0..10)
        .map(|i| answer(&format!(r#"{{"n":{i}}}"#), t(100 + i)))
        .collect();
    let writes = join_all(
        racers
            .iter()
            .rev()
            .map(|a| cache.put(a, policy.expires_at(a.as_of))),
    )
    .await;
    assert!(writes.iter().all(Result::is_ok));
    assert_eq!(
        cache
            .get(&newer.key)
            .await
            .unwrap()
            .and_then(|e| e.answer)
            .map(|a| a.as_of),
        Some(t(109))
    );
}

// --- the carts -------------------------------------------------------------

fn new_cart(id: &str) -> Cart {
    let mut cart = Cart::open(
        id.to_owned(),
        op("nordic"),
        Sailing {
            sailing_id: "s-1".into(),
            from: "HEL".into(),
            to: "TLL".into(),
            date: "2026-12-24".into(),
            passengers: 2,
        },
        true,
        &CartPolicy::default(),
        t(0),
    );
    cart.revision = 1;
    cart
}

#[tokio::test]
async fn carts_are_saved_only_on_the_revision_they_were_read_at() {
    let (_moto, config) = moto().await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&config);
    resources::create_carts_table(&dynamodb, "carts-revision")
        .await
        .unwrap();
    let carts = Clients::new(&config)
        .cart_store(&env(&[(CARTS_TABLE, "carts-revision")]))
        .unwrap();

    // A new cart, once.
    let cart = new_cart("c-1");
    carts.save(&cart, None).await.unwrap();
    assert!(matches!(
        carts.save(&cart, None).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(carts.get("c-1").await.unwrap(), Some(cart.clone()));
    assert_eq!(carts.get("c-2").await.unwrap(), None);

    // The right revision: the next step lands, every field with it.
    let mut priced = cart.clone();
    priced
        .set_price(
            CartPrice {
                amount_cents: 12_900,
                currency: "EUR".into(),
                source: Source::LastGood,
                as_of: t(-3600),
                parts: Vec::new(),
                covers: Default::default(),
                absorbed_cents: 0,
            },
            &CartPolicy::default(),
            t(30),
        )
        .unwrap();
    priced
        .confirm_cached(None, &CartPolicy::default(), t(31))
        .unwrap();
    priced.revision = 2;
    carts.save(&priced, Some(1)).await.unwrap();
    assert_eq!(carts.get("c-1").await.unwrap(), Some(priced.clone()));
    let item = raw_item(&config, "carts-revision", "cart_id", "c-1").await;
    assert_eq!(item.get("revision"), Some(&n(2)));
    assert_eq!(
        item.get("expires_at"),
        Some(&n(t(31).timestamp() + 30 * 86_400))
    );

    // A stale revision, and a revision of a cart that does not exist.
    let mut stale = cart.clone();
    stale.revision = 2;
    assert!(matches!(
        carts.save(&stale, Some(1)).await,
        Err(StoreError::Conflict(_))
    ));
    let mut ghost = new_cart("c-3");
    ghost.revision = 2;
    assert!(matches!(
        carts.save(&ghost, Some(1)).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(carts.get("c-1").await.unwrap(), Some(priced.clone()));
    assert_eq!(carts.get("c-3").await.unwrap(), None);

    // Ten steps read at revision 2 race: exactly one lands.
    let racers: Vec<Cart> = (0..10)
        .map(|i| {
            let mut c = priced.clone();
            c.revision = 3;
            c.updated_at = t(40 + i);
            c
        })
        .collect();
    let saves = join_all(racers.iter().map(|c| carts.save(c, Some(2)))).await;
    assert_eq!(saves.iter().filter(|r| r.is_ok()).count(), 1);
    assert!(
        saves
            .iter()
            .all(|r| matches!(r, Ok(()) | Err(StoreError::Conflict(_))))
    );
    assert_eq!(carts.get("c-1").await.unwrap().unwrap().revision, 3);
}

#[tokio::test]
async fn a_carts_owner_is_kept_in_the_carts_table() {
    let (_moto, config) = moto().await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&config);
    resources::create_carts_table(&dynamodb, "carts-owner")
        .await
        .unwrap();
    let carts = Clients::new(&config)
        .cart_store(&env(&[(CARTS_TABLE, "carts-owner")]))
        .unwrap();

    let mut owned = new_cart("c-owned");
    owned.owner = Some("customer-7f3a".into());
    carts.save(&owned, None).await.unwrap();
    assert_eq!(carts.get("c-owned").await.unwrap(), Some(owned.clone()));
    let item = raw_item(&config, "carts-owner", "cart_id", "c-owned").await;
    assert_eq!(
        item.get("owner"),
        Some(&AttributeValue::S("customer-7f3a".into()))
    );
    // A step keeps it.
    let mut stepped = owned.clone();
    stepped.revision = 2;
    stepped.updated_at = t(5);
    carts.save(&stepped, Some(1)).await.unwrap();
    assert_eq!(
        carts
            .get("c-owned")
            .await
            .unwrap()
            .unwrap()
            .owner
            .as_deref(),
        Some("customer-7f3a")
    );

    // A cart opened without a token has no owner attribute, and an item
    // written before carts had owners reads the same.
    let unowned = new_cart("c-unowned");
    carts.save(&unowned, None).await.unwrap();
    let item = raw_item(&config, "carts-owner", "cart_id", "c-unowned").await;
    assert!(!item.contains_key("owner"), "{item:?}");
    assert_eq!(carts.get("c-unowned").await.unwrap(), Some(unowned));
}

// --- the sale records ------------------------------------------------------

fn breaker_change(version: u64, to: BreakerState) -> BreakerStateChanged {
    BreakerStateChanged {
        schema_version: SCHEMA_VERSION,
        operator: op("nordic"),
        from: BreakerState::Closed,
        to,
        version,
        reason: "failure window".into(),
        at: t(0),
    }
}

#[tokio::test]
async fn sale_records_are_saved_on_their_revision_with_pending_writes_and_leases() {
    let (_moto, config) = moto().await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&config);
    resources::create_sale_status_table(&dynamodb, "sale-revision")
        .await
        .unwrap();
    let store = Clients::new(&config)
        .sale_status_store(&env(&[(SALE_STATUS_TABLE, "sale-revision")]))
        .unwrap();
    let nordic = op("nordic");
    assert_eq!(store.load(&nordic).await.unwrap(), None);

    // The listener's first step at a change: a pending write and its lease.
    let policy = WritePolicy::default().with_off_sale_hold(Duration::ZERO);
    let change = SaleChange::of(&breaker_change(3, BreakerState::Open), OnSaleAt::default());
    let plan = SaleRecord::new(nordic.clone()).plan(&change, t(0), &policy);
    assert_eq!(plan.step, Step::Attempt { attempt: 1 });
    let claimed = plan.save.unwrap();
    assert!(claimed.pending.is_some() && claimed.lease.is_some());
    store.save(&claimed, None).await.unwrap();
    assert!(matches!(
        store.save(&claimed, None).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(store.load(&nordic).await.unwrap(), Some(claimed.clone()));

    // The attempt failed: the record keeps the error and when to try again.
    let failed = claimed
        .after_attempt(
            &change,
            1,
            Err("sale switch answered 503 Service Unavailable".into()),
            t(1),
            &policy,
        )
        .unwrap();
    store.save(&failed, Some(claimed.revision)).await.unwrap();
    let loaded = store.load(&nordic).await.unwrap().unwrap();
    assert_eq!(loaded, failed);
    let pending = loaded.pending.unwrap();
    assert_eq!(
        (pending.attempts, pending.next_attempt_at),
        (1, t(1) + TimeDelta::seconds(5))
    );
    assert_eq!(loaded.lease, None);

    // A save planned from the older revision is refused.
    assert!(matches!(
        store.save(&failed, Some(claimed.revision)).await,
        Err(StoreError::Conflict(_))
    ));
    // As in the in-memory store, a revision of a record never stored is too.
    let mut ghost = SaleRecord::new(op("baltic"));
    ghost.revision = 2;
    assert!(matches!(
        store.save(&ghost, Some(1)).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(store.load(&op("baltic")).await.unwrap(), None);

    // Deliveries racing on the same revision: one claims the attempt.
    let retry = failed.plan(&change, t(6), &policy).save.unwrap();
    let saves = join_all((0..8).map(|_| store.save(&retry, Some(failed.revision)))).await;
    assert_eq!(saves.iter().filter(|r| r.is_ok()).count(), 1);
    let stored = store.load(&nordic).await.unwrap().unwrap();
    assert_eq!(stored.lease.map(|l| l.attempt), Some(2));

    let item = raw_item(&config, "sale-revision", "operator", "nordic").await;
    assert_eq!(item.get("revision"), Some(&n(3)));
    assert_eq!(
        item.get("applied_status"),
        Some(&AttributeValue::S("on_sale".into()))
    );
    assert!(matches!(item.get("pending"), Some(AttributeValue::M(_))));
}

// --- the off-sale queue ----------------------------------------------------

/// Receive up to ten visible messages now (no long polling).
async fn receive(sqs: &aws_sdk_sqs::Client, url: &str) -> Vec<aws_sdk_sqs::types::Message> {
    sqs.receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .wait_time_seconds(0)
        .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default()
}

/// Receive until a message is visible, for at most `limit`; with the time it
/// took.
async fn receive_within(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
    limit: Duration,
) -> (Vec<aws_sdk_sqs::types::Message>, Duration) {
    let started = tokio::time::Instant::now();
    loop {
        let messages = receive(sqs, url).await;
        if !messages.is_empty() || started.elapsed() >= limit {
            return (messages, started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn receive_count(message: &aws_sdk_sqs::types::Message) -> Option<&str> {
    message
        .attributes()
        .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
        .map(String::as_str)
}

fn handle_of(message: &aws_sdk_sqs::types::Message) -> MessageHandle {
    MessageHandle {
        queue_arn: None,
        message_id: message.message_id().unwrap().to_owned(),
        receipt_handle: message.receipt_handle().unwrap().to_owned(),
    }
}

#[tokio::test]
async fn a_received_message_comes_back_after_the_delay_rounded_up() {
    let (_moto, config) = moto().await;
    let sqs = aws_sdk_sqs::Client::new(&config);
    let queue = resources::create_queue(&sqs, "offsale-visibility", Some(60))
        .await
        .unwrap();
    let redelivery = Clients::new(&config)
        .sqs_redelivery(&env(&[(OFFSALE_QUEUE_URL, &queue.url)]))
        .unwrap();
    sqs.send_message()
        .queue_url(&queue.url)
        .message_body("hello")
        .send()
        .await
        .unwrap();
    let first = receive(&sqs, &queue.url).await;
    assert_eq!(first.len(), 1);

    // 1.2 s is set as 2 s: hidden now, back after two seconds rather than
    // the queue's sixty.
    redelivery
        .redeliver_after(&handle_of(&first[0]), Duration::from_millis(1_200))
        .await
        .unwrap();
    assert!(receive(&sqs, &queue.url).await.is_empty());
    let (again, waited) = receive_within(&sqs, &queue.url, Duration::from_secs(10)).await;
    assert_eq!(again.len(), 1, "back within 10 s");
    assert!(
        waited >= Duration::from_millis(1_500),
        "back after {waited:?}"
    );
    assert_eq!(again[0].message_id(), first[0].message_id());
    assert_eq!(receive_count(&again[0]), Some("2"));

    // A delay of zero makes it visible at once.
    redelivery
        .redeliver_after(&handle_of(&again[0]), Duration::ZERO)
        .await
        .unwrap();
    // The message is visible now, so no longer in flight: SQS answers
    // MessageNotInflight (NotInFlight, see the mocked unit tests in
    // lifeboat-aws), but moto 5.2.1 accepts the call and changes nothing.
    assert_eq!(
        redelivery
            .redeliver_after(&handle_of(&again[0]), Duration::ZERO)
            .await,
        Ok(())
    );
    assert_eq!(receive(&sqs, &queue.url).await.len(), 1);
}

#[tokio::test]
async fn a_receipt_handle_of_no_message_in_flight_is_not_in_flight() {
    let (_moto, config) = moto().await;
    let sqs = aws_sdk_sqs::Client::new(&config);
    let queue = resources::create_queue(&sqs, "offsale-gone", Some(60))
        .await
        .unwrap();
    let redelivery = Clients::new(&config)
        .sqs_redelivery(&env(&[(OFFSALE_QUEUE_URL, &queue.url)]))
        .unwrap();

    // moto 5.2.1 answers ChangeMessageVisibility with a receipt handle that
    // names no message with ReceiptHandleIsInvalid, as SQS does.
    let bogus = MessageHandle {
        queue_arn: None,
        message_id: "m-bogus".into(),
        receipt_handle: "not-a-receipt-handle".into(),
    };
    assert_eq!(
        redelivery
            .redeliver_after(&bogus, Duration::from_secs(5))
            .await,
        Err(RedeliveryError::NotInFlight("m-bogus".into()))
    );

    // A deleted message's receipt handle.
    sqs.send_message()
        .queue_url(&queue.url)
        .message_body("hello")
        .send()
        .await
        .unwrap();
    let received = receive(&sqs, &queue.url).await;
    let handle = handle_of(&received[0]);
    sqs.delete_message()
        .queue_url(&queue.url)
        .receipt_handle(&handle.receipt_handle)
        .send()
        .await
        .unwrap();
    assert_eq!(
        redelivery
            .redeliver_after(&handle, Duration::from_secs(5))
            .await,
        Err(RedeliveryError::NotInFlight(handle.message_id.clone()))
    );

    // A queue that does not exist is not a message that is gone.
    let nowhere = Clients::new(&config)
        .sqs_redelivery(&env(&[(
            OFFSALE_QUEUE_URL,
            &queue.url.replace("offsale-gone", "no-such-queue"),
        )]))
        .unwrap();
    assert!(matches!(
        nowhere
            .redeliver_after(&bogus, Duration::from_secs(5))
            .await,
        Err(RedeliveryError::Unavailable(_))
    ));
}

// --- the off-sale listener on them ------------------------------------------

/// The batch the SQS event source mapping would deliver for `messages`.
fn sqs_event(messages: &[aws_sdk_sqs::types::Message], queue_arn: &str) -> Value {
    let records: Vec<Value> = messages
        .iter()
        .map(|m| {
            json!({
                "messageId": m.message_id(),
                "receiptHandle": m.receipt_handle(),
                "body": m.body(),
                "attributes": {"ApproximateReceiveCount": receive_count(m).unwrap_or("1")},
                "messageAttributes": {},
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": "us-east-1",
            })
        })
        .collect();
    json!({ "Records": records })
}

/// A loopback URL nothing listens on.
fn refusing_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}/operators/{{operator}}/sale-status")
}

#[tokio::test]
async fn the_listener_keeps_its_records_in_dynamodb_and_times_retries_with_the_queue() {
    let (_moto, config) = moto().await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&config);
    let sqs = aws_sdk_sqs::Client::new(&config);
    resources::create_sale_status_table(&dynamodb, "SaleStatus")
        .await
        .unwrap();
    resources::create_event_bus(&aws_sdk_eventbridge::Client::new(&config), "lifeboat")
        .await
        .unwrap();
    let queue = resources::create_queue(&sqs, "offsale", Some(60))
        .await
        .unwrap();
    let clients = Clients::new(&config);
    let ssm = aws_sdk_ssm::Client::new(&config);
    let switch_url = refusing_url();
    // The write mechanics: off-sale writes without their hold.
    let base = [
        (SALE_STATUS_TABLE, "SaleStatus"),
        (OFFSALE_QUEUE_URL, queue.url.as_str()),
        ("EVENT_BUS_NAME", "lifeboat"),
        ("SALE_OFF_SALE_HOLD_S", "0"),
    ];

    // The legacy switch is down: the write fails and is retried in 5 s, set
    // on the message itself, not at the queue's 60 s.
    let down = OffsaleListener::from_env(
        &env(&[
            base[0],
            base[1],
            base[2],
            base[3],
            ("SALE_SWITCH", "http"),
            ("SALE_SWITCH_URL", &switch_url),
            ("SALE_SWITCH_TIMEOUT_MS", "500"),
        ]),
        &clients,
        &ssm,
    )
    .await
    .unwrap();
    let body = lifeboat_sim::offsale::rule_message(&breaker_change(7, BreakerState::Open));
    sqs.send_message()
        .queue_url(&queue.url)
        .message_body(body)
        .send()
        .await
        .unwrap();
    let received = receive(&sqs, &queue.url).await;
    let report = down
        .handle(&sqs_event(&received, &queue.arn))
        .await
        .unwrap();
    assert_eq!(report.response.batch_item_failures.len(), 1);
    // The schedule's first gap, counted from the failed attempt.
    let disposition = &report.messages[0].disposition;
    assert!(
        matches!(disposition, Disposition::Retry { delay, .. }
            if *delay > Duration::from_secs(4) && *delay <= Duration::from_secs(5)),
        "{disposition:?}"
    );
    let store = clients
        .sale_status_store(&env(&[(SALE_STATUS_TABLE, "SaleStatus")]))
        .unwrap();
    let record = store.load(&op("nordic")).await.unwrap().unwrap();
    let pending = record.pending.clone().unwrap();
    assert_eq!((pending.version, pending.attempts), (7, 1));
    assert!(
        pending
            .last_error
            .as_deref()
            .unwrap()
            .contains("unreachable")
    );
    assert_eq!(record.status(), SaleStatus::OnSale);

    // Back after the schedule's gap, to another instance (the table is the
    // switch now): the record it loads says where the retries stand.
    let (again, waited) = receive_within(&sqs, &queue.url, Duration::from_secs(15)).await;
    assert_eq!(again.len(), 1, "the message is back within 15 s");
    assert!(waited >= Duration::from_secs(3), "back after {waited:?}");
    let table = OffsaleListener::from_env(&env(&base), &clients, &ssm)
        .await
        .unwrap();
    let report = table.handle(&sqs_event(&again, &queue.arn)).await.unwrap();
    assert!(report.response.batch_item_failures.is_empty());
    let record = store.load(&op("nordic")).await.unwrap().unwrap();
    assert_eq!(
        (record.applied_version, record.status(), record.pending),
        (7, SaleStatus::OffSale, None)
    );
}

#[tokio::test]
async fn the_sale_switch_auth_value_comes_from_an_ssm_secure_string() {
    let (_moto, config) = moto().await;
    let ssm = aws_sdk_ssm::Client::new(&config);
    ssm.put_parameter()
        .name("/lifeboat/sale-switch-auth")
        .value("Bearer s3cret")
        .r#type(aws_sdk_ssm::types::ParameterType::SecureString)
        .send()
        .await
        .unwrap();
    // A switch that answers 204 and keeps what it was sent.
    let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "http://{}/operators/{{operator}}/sale-status",
        server.local_addr().unwrap()
    );
    let seen = tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut socket, _) = server.accept().await.unwrap();
        let mut request = Vec::new();
        let mut buf = [0u8; 4096];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = socket.read(&mut buf).await.unwrap();
            request.extend_from_slice(&buf[..n]);
        }
        socket
            .write_all(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
            .await
            .unwrap();
        String::from_utf8_lossy(&request).to_lowercase()
    });
    let clients = Clients::new(&config);
    let settings = |parameter: &str| {
        env(&[
            ("SALE_STATUS_STORE", "memory"),
            ("EVENT_BUS_NAME", "lifeboat"),
            ("SALE_SWITCH", "http"),
            ("SALE_SWITCH_URL", &url),
            ("SALE_SWITCH_AUTH_HEADER", "x-api-key"),
            ("SALE_SWITCH_AUTH_PARAMETER", parameter),
            ("SALE_OFF_SALE_HOLD_S", "0"),
        ])
    };
    // A parameter that is not there stops the start, naming it.
    let missing = OffsaleListener::from_env(&settings("/lifeboat/nope"), &clients, &ssm)
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(missing.contains("/lifeboat/nope"), "{missing}");
    let listener =
        OffsaleListener::from_env(&settings("/lifeboat/sale-switch-auth"), &clients, &ssm)
            .await
            .unwrap();
    let body = lifeboat_sim::offsale::rule_message(&breaker_change(3, BreakerState::Open));
    let event = json!({"Records": [{
        "messageId": "m-1", "receiptHandle": "r-1", "body": body,
        "eventSource": "aws:sqs", "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:offsale",
        "awsRegion": "us-east-1",
    }]});
    let report = listener.handle(&event).await.unwrap();
    assert!(
        report.response.batch_item_failures.is_empty(),
        "{:?}",
        report.messages
    );
    let request = seen.await.unwrap();
    assert!(request.contains("x-api-key: bearer s3cret"), "{request}");
}
