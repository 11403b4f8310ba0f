//! The customer API's contract (docs/api.json) held to the code: its routes
//! are the template's `HttpApi` events, one for one; and every answer the
//! search and cart handlers give along a customer's way (healthy, cached,
//! an open breaker, off sale, bad input, choices the operator does not
//! sell, a token without a subject, an unknown cart) has a status the document lists for
//! its route, that status's content type, and a body its schema accepts.
//! The handlers run in process on the in-memory suite and the simulated
//! operator, as the demo runs them; infra's `check-operator-api` holds the
//! document to OpenAPI itself.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use cart::CartService;
use chrono::{DateTime, TimeDelta, Utc};
use lifeboat_core::cart::CartSettings;
use lifeboat_core::events::SaleStatus;
use lifeboat_core::memory::{MemoryCartStore, MemoryOrderStore, MemorySaleStatusStore};
use lifeboat_core::order::{BookingAnswer, OrderPolicy};
use lifeboat_core::ports::{BreakerStore, Clock, OrderStore, SaleStatusStore};
use lifeboat_core::sale::SaleRecord;
use lifeboat_core::settings::Settings;
use lifeboat_core::{BreakerRecord, BreakerState, OperatorId};
use lifeboat_lookup::Lookup;
use lifeboat_lookup::http::{Caller, HttpRequest, Reply};
use lifeboat_operator::{SimConfig, SimulatedOperator};
use lifeboat_sim::{MemorySuite, MemorySuiteConfig, TokioClock};
use search::Search;
use serde_json::{Value, json};

#[path = "schema.rs"]
mod schema;

fn doc() -> Value {
    serde_json::from_str(include_str!("../docs/api.json")).expect("docs/api.json is JSON")
}

/// The template's `HttpApi` events: (method, path).
fn template_routes() -> BTreeSet<(String, String)> {
    let template = include_str!("../template.yaml");
    let lines: Vec<&str> = template.lines().map(str::trim).collect();
    let mut routes = BTreeSet::new();
    for (i, line) in lines.iter().enumerate() {
        if *line != "Type: HttpApi" {
            continue;
        }
        let field = |name: &str| {
            lines[i + 1..]
                .iter()
                .take(6)
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_owned())
                .unwrap_or_else(|| panic!("an HttpApi event without {name} at line {i}"))
        };
        routes.insert((field("Method:").to_ascii_lowercase(), field("Path:")));
    }
    routes
}

fn documented_routes(doc: &Value) -> BTreeSet<(String, String)> {
    doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .unwrap()
                .keys()
                .map(move |method| (method.clone(), path.clone()))
        })
        .collect()
}

#[test]
fn the_documented_routes_are_the_templates() {
    let routes = template_routes();
    assert_eq!(routes.len(), 9, "{routes:?}");
    assert_eq!(documented_routes(&doc()), routes);
}

fn nordic() -> OperatorId {
    OperatorId::new("nordic").unwrap()
}

fn base() -> DateTime<Utc> {
    DateTime::from_timestamp(1_796_032_800, 0).unwrap() // 2026-12-01T08:00:00Z
}

struct World {
    gateway: MemorySuite,
    search: Search,
    carts: CartService,
    sale: Arc<MemorySaleStatusStore>,
    orders: Arc<MemoryOrderStore>,
    clock: Arc<TokioClock>,
    doc: Value,
    /// Statuses answered, by (method, route).
    seen: BTreeMap<(String, String), BTreeSet<u16>>,
}

fn world() -> World {
    let clock = Arc::new(TokioClock::starting_at(base()));
    let sim = SimulatedOperator::new(nordic(), SimConfig::default(), clock.clone());
    let gateway = MemorySuite::new(
        Arc::new(sim),
        clock.clone(),
        MemorySuiteConfig {
            operators: vec![nordic()],
            ..MemorySuiteConfig::default()
        },
    );
    let lookup = || {
        Lookup::new(
            gateway.requests.clone(),
            gateway.cache.clone(),
            gateway.breakers.clone(),
            clock.clone(),
            // nordic's routes are known: another is refused unasked.
            Settings::from_json(r#"{"operators": {"nordic": {"routes": ["HEL-TLL", "HEL-STO"]}}}"#)
                .expect("settings"),
        )
        .with_metrics(gateway.metrics.clone())
    };
    let sale = Arc::new(MemorySaleStatusStore::new());
    let orders = Arc::new(MemoryOrderStore::new());
    World {
        search: Search {
            lookup: lookup(),
            operators: BTreeSet::from([nordic()]),
        },
        carts: CartService {
            carts: Arc::new(MemoryCartStore::new()),
            sale: sale.clone(),
            orders: orders.clone(),
            events: gateway.bus.clone(),
            lookup: lookup(),
            operators: BTreeSet::from([nordic()]),
            settings: CartSettings::default(),
        },
        gateway,
        sale,
        orders,
        clock,
        doc: doc(),
        seen: BTreeMap::new(),
    }
}

/// The documented route `path` is an instance of.
fn route_of(doc: &Value, path: &str) -> String {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    doc["paths"]
        .as_object()
        .unwrap()
        .keys()
        .find(|route| {
            let pattern: Vec<&str> = route.trim_start_matches('/').split('/').collect();
            pattern.len() == segments.len()
                && pattern
                    .iter()
                    .zip(&segments)
                    .all(|(p, s)| p == s || p.starts_with('{'))
        })
        .unwrap_or_else(|| panic!("{path}: no documented route"))
        .clone()
}

impl World {
    /// `request` answered (the gateway's stream and consumers running
    /// meanwhile) and held to the document.
    async fn ask(&mut self, request: HttpRequest) -> Reply {
        let until = self.clock.now() + TimeDelta::seconds(4);
        let route = route_of(&self.doc, &request.path);
        let reply = {
            let handler = async {
                if route.starts_with("/carts") {
                    self.carts.handle(&request).await
                } else {
                    self.search.handle(&request).await
                }
            };
            let (reply, ()) = tokio::join!(handler, self.gateway.run_until(until));
            reply
        };
        let method = request.method.to_ascii_lowercase();
        let what = format!("{} {} -> {}", request.method, request.path, reply.status);
        let operation = &self.doc["paths"][&route][&method];
        assert!(
            operation.is_object(),
            "{what}: {method} {route} is not documented"
        );
        let response =
            schema::resolve(&self.doc, &operation["responses"][reply.status.to_string()]);
        assert!(
            response.is_object(),
            "{what}: status not documented for {method} {route}: {}",
            reply.body
        );
        let content_type = reply.header("content-type").unwrap_or_default().to_owned();
        let content = &response["content"][&content_type];
        assert!(
            content.is_object(),
            "{what}: {content_type} is not the documented content type ({})",
            response["content"]
        );
        if let Err(e) = schema::check(&self.doc, &content["schema"], &reply.body, &what) {
            panic!("{e}\n{}", reply.body);
        }
        for (name, header) in response["headers"].as_object().into_iter().flatten() {
            if header["required"] == true {
                assert!(reply.header(name).is_some(), "{what}: no {name} header");
            }
        }
        self.seen
            .entry((method, route))
            .or_default()
            .insert(reply.status);
        reply
    }

    async fn get(&mut self, path: &str, query: &[(&str, &str)]) -> Reply {
        self.ask(HttpRequest::get(path, query)).await
    }

    async fn send(&mut self, method: &str, path: &str, body: Value) -> Reply {
        self.ask(HttpRequest::with_json(method, path, &body)).await
    }

    async fn set_sale(&self, status: SaleStatus) {
        let stored = self.sale.load(&nordic()).await.unwrap();
        let mut record = stored.clone().unwrap_or_else(|| SaleRecord::new(nordic()));
        record.applied_status = status;
        record.applied_version += 1;
        record.revision += 1;
        self.sale
            .save(&record, stored.map(|r| r.revision))
            .await
            .unwrap();
    }
}

const SAILINGS: [(&str, &str); 5] = [
    ("operator", "nordic"),
    ("from", "HEL"),
    ("to", "TLL"),
    ("date", "2026-12-24"),
    ("passengers", "2"),
];

fn new_cart(sailing_id: &str) -> Value {
    json!({"operator": "nordic", "sailing_id": sailing_id, "from": "HEL", "to": "TLL",
           "date": "2026-12-24", "passengers": 2})
}

fn cart_path(cart: &Reply, step: &str) -> String {
    let id = cart.body["cart_id"].as_str().unwrap();
    if step.is_empty() {
        format!("/carts/{id}")
    } else {
        format!("/carts/{id}/{step}")
    }
}

#[tokio::test(start_paused = true)]
async fn every_answer_along_a_customers_way_is_as_documented() {
    let mut w = world();

    // Search: live, then fresh; bad and unknown parameters; the operator's
    // own no; a price.
    let live = w.get("/sailings", &SAILINGS).await;
    assert_eq!(
        (live.status, live.body["source"].as_str()),
        (200, Some("live"))
    );
    let fresh = w.get("/sailings", &SAILINGS).await;
    assert_eq!(fresh.body["source"], "fresh");
    let sailing_id = live.body["sailings"][0]["sailing_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(w.get("/sailings", &SAILINGS[..4]).await.status, 400);
    let mut unknown = SAILINGS;
    unknown[0] = ("operator", "nobody");
    assert_eq!(w.get("/sailings", &unknown).await.status, 400);
    let mut extra = SAILINGS.to_vec();
    extra.push(("page", "2"));
    assert_eq!(w.get("/sailings", &extra).await.status, 400);
    let mut not_sailed = SAILINGS;
    not_sailed[1] = ("from", "TLL");
    not_sailed[2] = ("to", "STO");
    let not_sailed = w.get("/sailings", &not_sailed).await;
    assert_eq!(not_sailed.status, 404, "{}", not_sailed.body);
    assert_eq!(not_sailed.body["reason"], "unknown_route");
    let price = [
        ("operator", "nordic"),
        ("sailing_id", sailing_id.as_str()),
        ("passengers", "2"),
    ];
    assert_eq!(w.get("/price", &price).await.status, 200);
    let lower = [
        ("operator", "nordic"),
        ("sailing_id", "hel tll"),
        ("passengers", "2"),
    ];
    assert_eq!(w.get("/price", &lower).await.status, 400);

    // A cart on sale, through every step.
    let cart = w.send("POST", "/carts", new_cart(&sailing_id)).await;
    assert_eq!(cart.status, 201, "{}", cart.body);
    assert_eq!(w.get(&cart_path(&cart, ""), &[]).await.status, 200);
    let stepped = w
        .send(
            "PUT",
            &cart_path(&cart, "accommodation"),
            json!({"code": "cabin"}),
        )
        .await;
    assert_eq!(stepped.status, 200, "{}", stepped.body);
    let stepped = w
        .send(
            "PUT",
            &cart_path(&cart, "extras"),
            json!({"codes": ["meal", "wifi"]}),
        )
        .await;
    assert_eq!(stepped.status, 200, "{}", stepped.body);
    let unsold = w
        .send(
            "PUT",
            &cart_path(&cart, "extras"),
            json!({"codes": ["spa"]}),
        )
        .await;
    assert_eq!(unsold.status, 422, "{}", unsold.body);
    assert_eq!(
        w.send(
            "PUT",
            &cart_path(&cart, "extras"),
            json!({"codes": ["meal", "meal"]})
        )
        .await
        .status,
        400
    );
    let priced = w.send("POST", &cart_path(&cart, "price"), json!({})).await;
    assert_eq!(priced.status, 200, "{}", priced.body);
    let mut confirmed = w
        .send("POST", &cart_path(&cart, "confirm"), json!({}))
        .await;
    if confirmed.status == 409 {
        // A price to accept first: confirm again.
        confirmed = w
            .send("POST", &cart_path(&cart, "confirm"), json!({}))
            .await;
    }
    assert_eq!(confirmed.status, 200, "{}", confirmed.body);
    assert_eq!(confirmed.body["status"], "confirmed");
    let again = w
        .send("POST", &cart_path(&cart, "confirm"), json!({}))
        .await;
    assert_eq!(
        (again.status, again.body["reason"].as_str()),
        (409, Some("already_confirmed"))
    );

    // Bad bodies, an unknown cart, a token without a subject.
    assert_eq!(
        w.send("POST", "/carts", json!({"operator": "nordic"}))
            .await
            .status,
        400
    );
    let mut unknown_field = new_cart(&sailing_id);
    unknown_field["coupon"] = json!("FREE");
    assert_eq!(w.send("POST", "/carts", unknown_field).await.status, 400);
    let mut huge = new_cart(&sailing_id);
    huge["sailing_id"] = json!("x".repeat(5_000));
    assert_eq!(w.send("POST", "/carts", huge).await.status, 413);
    let nobody = "/carts/00000000-0000-4000-8000-000000000000";
    assert_eq!(w.get(nobody, &[]).await.status, 404);
    // A cart id that came as nothing (a newline URL parsing removed): no
    // cart, not another route.
    assert_eq!(w.send("POST", "/carts//price", json!({})).await.status, 404);
    let anonymous_token = HttpRequest::with_json("POST", "/carts", &new_cart(&sailing_id))
        .from_caller(Caller::Token { subject: None });
    assert_eq!(w.ask(anonymous_token).await.status, 403);

    // Off sale: a degraded cart, and a step that needs the operator refused.
    w.set_sale(SaleStatus::OffSale).await;
    let degraded = w.send("POST", "/carts", new_cart(&sailing_id)).await;
    assert_eq!(degraded.status, 201, "{}", degraded.body);
    assert!(degraded.body["degraded"].is_object(), "{}", degraded.body);
    let refused = w
        .send(
            "PUT",
            &cart_path(&degraded, "accommodation"),
            json!({"code": "cabin"}),
        )
        .await;
    assert_eq!(
        (refused.status, refused.body["reason"].as_str()),
        (409, Some("off_sale"))
    );
    // Confirmed off sale: the order is held, and the answer says so.
    let mut held = w
        .send("POST", &cart_path(&degraded, "confirm"), json!({}))
        .await;
    if held.status == 409 {
        // The cached price, to accept first.
        held = w
            .send("POST", &cart_path(&degraded, "confirm"), json!({}))
            .await;
    }
    assert_eq!(held.status, 200, "{}", held.body);
    assert!(
        held.body["booking"]["order_id"].is_string(),
        "{}",
        held.body
    );
    // The order as a read of the cart shows it; then its operator asks a
    // price past the tolerance, and the customer answers it.
    let read = w.get(&cart_path(&degraded, ""), &[]).await;
    assert_eq!(read.body["order"]["state"], "held", "{}", read.body);
    let order_id = held.body["booking"]["order_id"].as_str().unwrap();
    let mut order = w.orders.get(order_id).await.unwrap().unwrap();
    let now = w.clock.now();
    order.start_booking(now).unwrap();
    let price = order.paid_cents + 1_000;
    order
        .answer(
            BookingAnswer::PriceChanged { price_cents: price },
            &OrderPolicy::default(),
            now,
        )
        .unwrap();
    order.revision += 1;
    w.orders.save(&order, order.revision - 1).await.unwrap();
    let asked = w.get(&cart_path(&degraded, ""), &[]).await;
    assert_eq!(
        asked.body["order"]["state"], "ask_customer",
        "{}",
        asked.body
    );
    let reply = cart_path(&degraded, "order");
    let not_shown = w
        .send(
            "POST",
            &reply,
            json!({"accept": true, "price_cents": price + 1}),
        )
        .await;
    assert_eq!(
        (not_shown.status, not_shown.body["reason"].as_str()),
        (409, Some("not_the_price_asked"))
    );
    assert_eq!(
        w.send("POST", &reply, json!({"accept": true})).await.status,
        400
    );
    let accepted = w
        .send(
            "POST",
            &reply,
            json!({"accept": true, "price_cents": price}),
        )
        .await;
    assert_eq!(accepted.status, 200, "{}", accepted.body);
    assert_eq!(accepted.body["order"]["state"], "held");
    let again = w
        .send(
            "POST",
            &reply,
            json!({"accept": false, "price_cents": price}),
        )
        .await;
    assert_eq!(
        (again.status, again.body["reason"].as_str()),
        (409, Some("not_asked"))
    );
    assert_eq!(
        w.send(
            "POST",
            &cart_path(&cart, "order"),
            json!({"accept": true, "price_cents": price})
        )
        .await
        .status,
        404,
        "a cart paid on a live price has no order"
    );
    w.set_sale(SaleStatus::OnSale).await;

    // The breaker open: the last good answer where there is one, 503 with
    // Retry-After where there is none.
    tokio::time::advance(std::time::Duration::from_secs(900)).await;
    let mut open = BreakerRecord::initial(nordic(), w.clock.now());
    open.state = BreakerState::Open;
    open.version = 1;
    open.open_until = Some(w.clock.now() + TimeDelta::seconds(30));
    w.gateway.breakers.save(&open, None).await.unwrap();
    let last_good = w.get("/sailings", &SAILINGS).await;
    assert_eq!(last_good.body["source"], "last_good");
    let mut never_asked = SAILINGS;
    never_asked[2] = ("to", "STO");
    let unavailable = w.get("/sailings", &never_asked).await;
    assert_eq!(unavailable.status, 503, "{}", unavailable.body);

    // Every route answered its success at least once.
    for (method, route) in documented_routes(&w.doc) {
        let seen = w.seen.get(&(method.clone(), route.clone()));
        assert!(
            seen.is_some_and(|s| s.iter().any(|status| (200..300).contains(status))),
            "{method} {route}: no success seen ({seen:?})"
        );
    }
}

#[test]
fn a_body_off_the_document_is_refused() {
    let doc = doc();
    let cart = schema::resolve(&doc, &json!({"$ref": "#/components/schemas/Cart"})).clone();
    let answer = json!({"operator": "nordic", "from": "HEL", "to": "TLL", "date": "2026-12-24",
        "passengers": 2, "source": "stale", "as_of": "2026-12-01T08:00:00Z", "age_s": 1, "sailings": []});
    let sailings = json!({"$ref": "#/components/schemas/Sailings"});
    assert!(
        schema::check(&doc, &sailings, &answer, "sailings").is_err(),
        "an unknown source"
    );
    assert!(schema::check(&doc, &cart, &json!({"cart_id": "x"}), "cart").is_err());
}
