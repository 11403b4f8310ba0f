//! The cart handler on the in-memory gateway (real consumers, simulated
//! operator), an in-memory sale status and paused time.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use lifeboat_core::Operation;
use lifeboat_core::memory::{MemoryCartStore, MemoryOrderStore, MemorySaleStatusStore};
use lifeboat_core::ports::Clock;
use lifeboat_core::sale::SaleRecord;
use lifeboat_core::settings::{IdCase, Settings};
use lifeboat_operator::{PriceDrift, SimConfig, SimulatedOperator};
use lifeboat_sim::{MemorySuite, MemorySuiteConfig, TokioClock};

use super::*;

fn base() -> DateTime<Utc> {
    DateTime::from_timestamp(1_796_032_800, 0).unwrap() // 2026-12-01T08:00:00Z
}

fn nordic() -> OperatorId {
    OperatorId::new("nordic").unwrap()
}

struct World {
    gateway: MemorySuite,
    carts: CartService,
    sale: Arc<MemorySaleStatusStore>,
    orders: Arc<MemoryOrderStore>,
    clock: Arc<TokioClock>,
    /// The bus's events from this position on are the ones a test looks
    /// at (`moves_to`, `moves_since_setup`).
    events_from: usize,
}

fn world(sim: SimConfig, settings: CartSettings) -> World {
    world_with(sim, settings, Settings::default())
}

/// Settings with nordic's ids compared as `case`.
fn ids(case: IdCase) -> Settings {
    let mut settings = Settings::default();
    settings.default.ids = case;
    settings
}

fn world_with(sim: SimConfig, settings: CartSettings, operators: Settings) -> World {
    world_on(sim, settings, operators, None)
}

/// How an operator that is not the simulator answers a price call with
/// choices: the base fare as if asked without them, or a status.
#[derive(Debug, Clone, Copy)]
enum OnChoices {
    IgnoresThem,
    Refuses(u16),
}

/// The simulated operator, answering price calls with choices as `on` says.
struct Unlike {
    sim: SimulatedOperator,
    on: OnChoices,
}

#[async_trait::async_trait]
impl lifeboat_core::ports::OperatorApi for Unlike {
    fn knows(&self, operator: &OperatorId) -> bool {
        self.sim.knows(operator)
    }

    async fn call(
        &self,
        call: &lifeboat_core::request::OperatorCall,
    ) -> lifeboat_core::request::CallResult {
        use lifeboat_core::request::{CallClass, CallResult};
        let with_choices = ["accommodation", "extras"]
            .iter()
            .any(|k| call.params.contains_key(*k));
        if call.operation != Operation::Price || !with_choices {
            return self.sim.call(call).await;
        }
        match self.on {
            OnChoices::IgnoresThem => {
                let mut bare = call.clone();
                bare.params.remove("accommodation");
                bare.params.remove("extras");
                self.sim.call(&bare).await
            }
            OnChoices::Refuses(status) => CallResult {
                class: CallClass::ClientError { status },
                elapsed: Duration::from_millis(50),
                body: None,
                detail: format!("operator answered {status}"),
            },
        }
    }
}

fn world_on(
    sim: SimConfig,
    settings: CartSettings,
    operators: Settings,
    on_choices: Option<OnChoices>,
) -> World {
    let clock = Arc::new(TokioClock::starting_at(base()));
    let sim = SimulatedOperator::new(nordic(), sim, clock.clone());
    let api: Arc<dyn lifeboat_core::ports::OperatorApi> = match on_choices {
        None => Arc::new(sim),
        Some(on) => Arc::new(Unlike { sim, on }),
    };
    let gateway = MemorySuite::new(
        api,
        clock.clone(),
        MemorySuiteConfig {
            operators: vec![nordic()],
            ..MemorySuiteConfig::default()
        },
    );
    let sale = Arc::new(MemorySaleStatusStore::new());
    let orders = Arc::new(MemoryOrderStore::new());
    let carts = CartService {
        carts: Arc::new(MemoryCartStore::new()),
        sale: sale.clone(),
        orders: orders.clone(),
        events: gateway.bus.clone(),
        lookup: Lookup::new(
            gateway.requests.clone(),
            gateway.cache.clone(),
            gateway.breakers.clone(),
            clock.clone(),
            operators,
        )
        .with_metrics(gateway.metrics.clone()),
        operators: BTreeSet::from([nordic()]),
        settings,
    };
    World {
        gateway,
        carts,
        sale,
        orders,
        clock,
        events_from: 0,
    }
}

async fn call(w: &mut World, request: HttpRequest) -> Reply {
    let until = w.clock.now() + TimeDelta::seconds(4);
    let (reply, ()) = tokio::join!(w.carts.handle(&request), w.gateway.run_until(until));
    reply
}

/// Open a cart on `new_cart()`.
async fn open(w: &mut World) -> Reply {
    call(w, HttpRequest::with_json("POST", "/carts", &new_cart())).await
}

/// Take a `POST` step (`price`, `confirm`) on `cart`.
async fn post(w: &mut World, cart: &Reply, step: &str) -> Reply {
    call(
        w,
        HttpRequest::with_json("POST", &path(cart, step), &json!({})),
    )
    .await
}

async fn set_sale(w: &World, status: SaleStatus, version: u64) {
    let stored = w.sale.load(&nordic()).await.unwrap();
    let mut record = stored.clone().unwrap_or_else(|| SaleRecord::new(nordic()));
    record.applied_status = status;
    record.applied_version = version;
    record.revision += 1;
    w.sale
        .save(&record, stored.map(|r| r.revision))
        .await
        .unwrap();
}

const SAILING: &str = "HEL-TLL-20261224-0615";

fn new_cart() -> Value {
    json!({"operator": "nordic", "sailing_id": SAILING, "from": "HEL", "to": "TLL",
           "date": "2026-12-24", "passengers": 2})
}

fn path(cart: &Reply, step: &str) -> String {
    let id = cart.body["cart_id"].as_str().unwrap();
    if step.is_empty() {
        format!("/carts/{id}")
    } else {
        format!("/carts/{id}/{step}")
    }
}

/// The stored state of a cart view, without the ages that grow with time.
fn state(view: &Value) -> Value {
    let mut v = view.clone();
    if let Some(price) = v.get_mut("price").and_then(Value::as_object_mut) {
        price.remove("age_s");
    }
    v
}

#[tokio::test(start_paused = true)]
async fn a_cart_opened_off_sale_keeps_its_degraded_state_and_reaches_payment() {
    let mut w = world(SimConfig::default(), CartSettings::default());
    // A price seen before the outage.
    let warm = open(&mut w).await;
    assert_eq!(warm.status, 201, "{}", warm.body);
    let priced = post(&mut w, &warm, "price").await;
    assert_eq!(priced.body["price"]["source"], "live", "{}", priced.body);

    tokio::time::advance(Duration::from_secs(1800)).await;
    set_sale(&w, SaleStatus::OffSale, 2).await;
    let requests = w.gateway.requests.counts().total;

    let cart = open(&mut w).await;
    assert_eq!(cart.status, 201, "{}", cart.body);
    assert_eq!(cart.body["off_sale"], true);
    assert_eq!(cart.body["accommodation"]["code"], "seat");
    assert_eq!(
        cart.body["accommodation"]["chosen_by"],
        "default_while_off_sale"
    );
    assert_eq!(cart.body["extras"]["step"], "skipped_while_off_sale");
    assert_eq!(cart.body["price"]["source"], "last_good");
    assert_eq!(
        cart.body["price"]["amount_cents"],
        priced.body["price"]["amount_cents"]
    );
    assert!(cart.body["price"]["age_s"].as_u64().unwrap() >= 1800);
    assert!(cart.body["degraded"].is_object());

    // Refresh, saved link, back button: the same cart, however often.
    let first = call(&mut w, HttpRequest::get(&path(&cart, ""), &[])).await;
    tokio::time::advance(Duration::from_secs(60)).await;
    let second = call(&mut w, HttpRequest::get(&path(&cart, ""), &[])).await;
    assert_eq!(first.status, 200);
    assert_eq!(state(&first.body), state(&cart.body));
    assert_eq!(state(&second.body), state(&cart.body));

    // Steps that need the operator are refused and change nothing.
    let upgrade = call(
        &mut w,
        HttpRequest::with_json(
            "PUT",
            &path(&cart, "accommodation"),
            &json!({"code": "cabin"}),
        ),
    )
    .await;
    assert_eq!(
        (upgrade.status, upgrade.body["reason"].as_str()),
        (409, Some("off_sale"))
    );
    let after = call(&mut w, HttpRequest::get(&path(&cart, ""), &[])).await;
    assert_eq!(state(&after.body), state(&cart.body));

    let confirmed = post(&mut w, &cart, "confirm").await;
    assert_eq!(confirmed.status, 200, "{}", confirmed.body);
    assert_eq!(confirmed.body["status"], "confirmed");
    assert_eq!(confirmed.body["confirmation"]["on_cached_price"], true);
    assert_eq!(
        w.gateway.requests.counts().total,
        requests,
        "the operator was never asked"
    );

    // A confirmed cart stays as it is, and asks nobody.
    let again = post(&mut w, &cart, "confirm").await;
    assert_eq!(
        (again.status, again.body["reason"].as_str()),
        (409, Some("already_confirmed"))
    );
    assert_eq!(w.gateway.requests.counts().total, requests);
}

#[tokio::test(start_paused = true)]
async fn a_refused_step_still_stores_the_off_sale_choices() {
    let mut w = world(SimConfig::default(), CartSettings::default());
    let cart = open(&mut w).await;
    assert!(
        cart.body["accommodation"].is_null(),
        "on sale: nothing chosen yet"
    );
    set_sale(&w, SaleStatus::OffSale, 2).await;
    let refused = call(
        &mut w,
        HttpRequest::with_json(
            "PUT",
            &path(&cart, "accommodation"),
            &json!({"code": "cabin"}),
        ),
    )
    .await;
    assert_eq!(refused.status, 409);
    let first = call(&mut w, HttpRequest::get(&path(&cart, ""), &[])).await;
    assert_eq!(
        first.body["accommodation"]["chosen_by"],
        "default_while_off_sale"
    );
    assert_eq!(first.body["extras"]["step"], "skipped_while_off_sale");
    let since = first.body["degraded"]["since"].clone();
    tokio::time::advance(Duration::from_secs(30)).await;
    call(
        &mut w,
        HttpRequest::with_json("PUT", &path(&cart, "extras"), &json!({"codes": []})),
    )
    .await;
    let second = call(&mut w, HttpRequest::get(&path(&cart, ""), &[])).await;
    assert_eq!(second.body["degraded"]["since"], since, "decided once");
    assert_eq!(state(&second.body), state(&first.body));
}

#[tokio::test(start_paused = true)]
async fn a_cart_never_priced_shows_its_price_before_confirming() {
    let mut w = world(SimConfig::default(), CartSettings::default());
    let cart = open(&mut w).await;
    let confirm = HttpRequest::with_json("POST", &path(&cart, "confirm"), &json!({}));
    let shown = call(&mut w, confirm.clone()).await;
    assert_eq!(shown.status, 409, "{}", shown.body);
    assert!(shown.body["price_to_confirm"]["amount_cents"].is_i64());
    assert_eq!(
        shown.header("content-type"),
        Some("application/problem+json")
    );
    assert_eq!(shown.body["status"], 409);
    assert_eq!(shown.body["cart"]["status"], "open");
    let confirmed = call(&mut w, confirm).await;
    assert_eq!(confirmed.status, 200, "{}", confirmed.body);
    assert_eq!(
        confirmed.body["confirmation"]["amount_cents"],
        shown.body["price_to_confirm"]["amount_cents"]
    );
}

#[tokio::test(start_paused = true)]
async fn back_on_sale_the_customer_may_upgrade() {
    let mut w = world(SimConfig::default(), CartSettings::default());
    set_sale(&w, SaleStatus::OffSale, 2).await;
    let cart = open(&mut w).await;
    assert_eq!(cart.body["upgrade_available"], false);
    assert!(cart.body["price"].is_null(), "nothing was ever cached");
    let no_price = post(&mut w, &cart, "confirm").await;
    assert_eq!(no_price.status, 503);
    assert!(no_price.header("retry-after").is_some());

    set_sale(&w, SaleStatus::OnSale, 3).await;
    let view = call(&mut w, HttpRequest::get(&path(&cart, ""), &[])).await;
    assert_eq!(view.body["upgrade_available"], true);
    assert_eq!(
        view.body["accommodation"]["chosen_by"], "default_while_off_sale",
        "unchanged"
    );
    let cabin = call(
        &mut w,
        HttpRequest::with_json(
            "PUT",
            &path(&cart, "accommodation"),
            &json!({"code": "cabin"}),
        ),
    )
    .await;
    assert_eq!(cabin.status, 200, "{}", cabin.body);
    let extras = call(
        &mut w,
        HttpRequest::with_json("PUT", &path(&cart, "extras"), &json!({"codes": ["meal"]})),
    )
    .await;
    assert_eq!(extras.body["degraded"], Value::Null);
    assert_eq!(extras.body["upgrade_available"], false);
    // Each choice on sale is priced at once: the cabin and the meals, part
    // by part, adding up.
    let price = &extras.body["price"];
    assert_eq!(price["source"], "live", "{}", extras.body);
    assert_eq!(
        price["covers"],
        json!({"accommodation": "cabin", "extras": ["meal"]})
    );
    let parts = price["parts"].as_array().unwrap();
    let kinds: Vec<&str> = parts.iter().map(|p| p["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["fare", "accommodation", "extra"]);
    let sum: i64 = parts
        .iter()
        .map(|p| p["amount_cents"].as_i64().unwrap())
        .sum();
    assert_eq!(price["amount_cents"], sum);
    assert!(
        extras.body.get("price_changed").is_none(),
        "new choices are no change"
    );
    // The price shown is the price paid: no second look at payment.
    let confirm = HttpRequest::with_json("POST", &path(&cart, "confirm"), &json!({}));
    let confirmed = call(&mut w, confirm).await;
    assert_eq!(confirmed.status, 200, "{}", confirmed.body);
    assert_eq!(confirmed.body["confirmation"]["on_cached_price"], false);
    assert_eq!(confirmed.body["confirmation"]["amount_cents"], sum);
}

#[tokio::test(start_paused = true)]
async fn a_changed_price_is_shown_old_new_and_difference() {
    let drift = PriceDrift {
        start: base(),
        every: Duration::from_secs(600),
        percent: 10.0,
        until: None,
    };
    let sim = SimConfig {
        price_drift: Some(drift),
        ..SimConfig::default()
    };
    let mut w = world(sim, CartSettings::default());
    let cart = open(&mut w).await;
    let priced = post(&mut w, &cart, "price").await;
    let old = priced.body["price"]["amount_cents"].as_i64().unwrap();

    tokio::time::advance(Duration::from_secs(700)).await;
    let changed = post(&mut w, &cart, "confirm").await;
    assert_eq!(changed.status, 409, "{}", changed.body);
    let change = &changed.body["price_changed"];
    let new = change["new_cents"].as_i64().unwrap();
    assert_eq!(change["old_cents"].as_i64(), Some(old));
    assert_eq!(change["difference_cents"].as_i64(), Some(new - old));
    assert!(new > old);
    assert_eq!(changed.body["title"], "price changed");
    assert_eq!(changed.body["cart"]["status"], "open");

    let accepted = post(&mut w, &cart, "confirm").await;
    assert_eq!(accepted.status, 200, "{}", accepted.body);
    assert_eq!(
        accepted.body["confirmation"]["amount_cents"].as_i64(),
        Some(new)
    );
}

fn drifting(every_s: u64, percent: f64) -> SimConfig {
    SimConfig {
        price_drift: Some(PriceDrift {
            start: base(),
            every: Duration::from_secs(every_s),
            percent,
            until: None,
        }),
        ..SimConfig::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_price_change_is_shown_at_the_step_the_customer_is_on() {
    let mut w = world(drifting(600, 10.0), CartSettings::default());
    let cart = open(&mut w).await;
    let price = HttpRequest::with_json("POST", &path(&cart, "price"), &json!({}));
    let first = call(&mut w, price.clone()).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert!(first.body.get("price_changed").is_none());
    let old = first.body["price"]["amount_cents"].as_i64().unwrap();

    tokio::time::advance(Duration::from_secs(700)).await;
    let again = call(&mut w, price).await;
    assert_eq!(
        again.status, 200,
        "a change before payment is news, not a refusal"
    );
    let change = &again.body["price_changed"];
    let new = again.body["price"]["amount_cents"].as_i64().unwrap();
    assert_eq!(change["old_cents"].as_i64(), Some(old));
    assert_eq!(change["difference_cents"].as_i64(), Some(new - old));
    assert!(new > old);
    assert_eq!(again.body["price_change"], *change);
    let (_, steps) = history(&w, &cart).await;
    assert_eq!(steps.last(), Some(&(StepKind::Price, 200, true)));

    // Shown already: payment is on that price, at once.
    let paid = post(&mut w, &cart, "confirm").await;
    assert_eq!(paid.status, 200, "{}", paid.body);
    assert_eq!(
        paid.body["confirmation"]["amount_cents"].as_i64(),
        Some(new)
    );
}

#[tokio::test(start_paused = true)]
async fn a_rise_within_the_operators_tolerance_is_absorbed_at_payment() {
    let tolerant =
        CartSettings::from_json(r#"{"operators": {"nordic": {"absorb_rise_percent": 2}}}"#)
            .unwrap();
    let mut w = world(drifting(600, 1.0), tolerant);
    let cart = open(&mut w).await;
    let priced = post(&mut w, &cart, "price").await;
    let shown = priced.body["price"]["amount_cents"].as_i64().unwrap();
    tokio::time::advance(Duration::from_secs(700)).await;
    let paid = post(&mut w, &cart, "confirm").await;
    assert_eq!(paid.status, 200, "{}", paid.body);
    let confirmation = &paid.body["confirmation"];
    assert_eq!(confirmation["amount_cents"].as_i64(), Some(shown));
    let absorbed = confirmation["absorbed_cents"].as_i64().unwrap();
    assert!(
        absorbed > 0 && absorbed * 100 <= shown * 2,
        "{absorbed} of {shown}"
    );

    // Without a tolerance the same rise is shown first.
    let mut w = world(drifting(600, 1.0), CartSettings::default());
    let cart = open(&mut w).await;
    post(&mut w, &cart, "price").await;
    tokio::time::advance(Duration::from_secs(700)).await;
    let shown = post(&mut w, &cart, "confirm").await;
    assert_eq!(shown.status, 409, "{}", shown.body);
}

#[tokio::test(start_paused = true)]
async fn choices_the_operator_does_not_sell_are_refused_and_undone() {
    let mut w = world(SimConfig::default(), CartSettings::default());
    let cart = open(&mut w).await;
    assert_eq!(cart.status, 201, "{}", cart.body);
    let before = call(&mut w, HttpRequest::get(&path(&cart, ""), &[])).await;
    let hammock = call(
        &mut w,
        HttpRequest::with_json(
            "PUT",
            &path(&cart, "accommodation"),
            &json!({"code": "hammock"}),
        ),
    )
    .await;
    assert_eq!(hammock.status, 422, "{}", hammock.body);
    let after = call(&mut w, HttpRequest::get(&path(&cart, ""), &[])).await;
    assert_eq!(state(&after.body), state(&before.body));
    // What it sells is priced, the fare and the supplement apart.
    let cabin = call(
        &mut w,
        HttpRequest::with_json(
            "PUT",
            &path(&cart, "accommodation"),
            &json!({"code": "cabin"}),
        ),
    )
    .await;
    assert_eq!(cabin.status, 200, "{}", cabin.body);
    assert_eq!(cabin.body["price"]["parts"][1]["code"], "cabin");
    assert_eq!(cabin.body["price"]["parts"][1]["amount_cents"], 4_500);
}

/// Choose the cabin on `cart`.
async fn cabin(w: &mut World, cart: &Reply) -> Reply {
    let request = HttpRequest::with_json(
        "PUT",
        &path(cart, "accommodation"),
        &json!({"code": "cabin"}),
    );
    call(w, request).await
}

#[tokio::test(start_paused = true)]
async fn a_price_that_ignored_the_choices_is_never_the_carts() {
    let mut w = world_on(
        SimConfig::default(),
        CartSettings::default(),
        Settings::default(),
        Some(OnChoices::IgnoresThem),
    );
    let cart = open(&mut w).await;
    let base = post(&mut w, &cart, "price").await;
    assert_eq!(base.status, 200, "{}", base.body);
    // The operator answers the base fare to a question about a cabin.
    let chosen = cabin(&mut w, &cart).await;
    assert_eq!(chosen.status, 200, "{}", chosen.body);
    assert_eq!(chosen.body["price"], Value::Null, "{}", chosen.body);
    let priced = post(&mut w, &cart, "price").await;
    assert_eq!(priced.status, 503, "{}", priced.body);
    let paid = post(&mut w, &cart, "confirm").await;
    assert_eq!(
        paid.status, 503,
        "never the base fare under a cabin: {}",
        paid.body
    );
}

#[tokio::test(start_paused = true)]
async fn a_refusal_of_lifeboat_is_not_a_choice_not_sold() {
    for (status, expected) in [(404, 422), (400, 422), (403, 200), (401, 200)] {
        let mut w = world_on(
            SimConfig::default(),
            CartSettings::default(),
            Settings::default(),
            Some(OnChoices::Refuses(status)),
        );
        let cart = open(&mut w).await;
        let chosen = cabin(&mut w, &cart).await;
        assert_eq!(chosen.status, expected, "{status}: {}", chosen.body);
        if expected == 200 {
            // The choice stands without a price; payment waits for one.
            assert_eq!(chosen.body["price"], Value::Null);
            assert_eq!(chosen.body["accommodation"]["code"], "cabin");
            let paid = post(&mut w, &cart, "confirm").await;
            assert_eq!(paid.status, 503, "{status}: {}", paid.body);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn choices_never_priced_give_way_to_the_defaults_off_sale() {
    // The cabin is chosen as the operator stops pricing it, then it goes
    // off sale: the cart must still reach payment.
    let mut w = world_on(
        SimConfig::default(),
        CartSettings::default(),
        Settings::default(),
        Some(OnChoices::Refuses(403)),
    );
    let cart = open(&mut w).await;
    let base = post(&mut w, &cart, "price").await;
    assert_eq!(base.status, 200, "{}", base.body);
    let chosen = cabin(&mut w, &cart).await;
    assert_eq!(chosen.body["price"], Value::Null, "{}", chosen.body);
    set_sale(&w, SaleStatus::OffSale, 2).await;
    let shown = post(&mut w, &cart, "confirm").await;
    assert_eq!(shown.status, 409, "{}", shown.body);
    assert_eq!(
        shown.body["price_to_confirm"]["amount_cents"],
        base.body["price"]["amount_cents"]
    );
    let view = &shown.body["cart"];
    assert_eq!(view["accommodation"]["code"], "seat", "{view}");
    assert_eq!(view["accommodation"]["chosen_by"], "default_while_off_sale");
    let paid = post(&mut w, &cart, "confirm").await;
    assert_eq!(paid.status, 200, "{}", paid.body);
    assert_eq!(paid.body["confirmation"]["on_cached_price"], true);
    // Read again, the cart says the same, with its order as it stands
    // where the confirm's answer had the booking.
    let mut again = call(&mut w, HttpRequest::get(&path(&cart, ""), &[])).await;
    let order = again.body.as_object_mut().unwrap().remove("order").unwrap();
    assert_eq!(order["state"], "held", "{order}");
    assert_eq!(order["order_id"], paid.body["booking"]["order_id"]);
    let mut paid_cart = paid.body.clone();
    assert!(
        paid_cart
            .as_object_mut()
            .unwrap()
            .remove("booking")
            .is_some()
    );
    assert_eq!(state(&again.body), state(&paid_cart));
}

#[tokio::test(start_paused = true)]
async fn a_fare_that_moved_is_shown_when_the_choices_change_too() {
    let mut w = world(drifting(600, 10.0), CartSettings::default());
    let cart = open(&mut w).await;
    let base = post(&mut w, &cart, "price").await;
    let fare = base.body["price"]["parts"][0]["amount_cents"]
        .as_i64()
        .unwrap();
    tokio::time::advance(Duration::from_secs(700)).await;
    let chosen = cabin(&mut w, &cart).await;
    assert_eq!(chosen.status, 200, "{}", chosen.body);
    let change = &chosen.body["price_changed"];
    assert_eq!(change["scope"], "shared_parts", "{}", chosen.body);
    assert_eq!(change["old_cents"].as_i64(), Some(fare));
    let new_fare = chosen.body["price"]["parts"][0]["amount_cents"].as_i64();
    assert_eq!(change["new_cents"].as_i64(), new_fare);
    assert!(new_fare > Some(fare));
}

#[tokio::test(start_paused = true)]
async fn a_rise_within_the_tolerance_is_absorbed_at_the_step_it_is_found() {
    let tolerant =
        CartSettings::from_json(r#"{"operators": {"nordic": {"absorb_rise_percent": 2}}}"#)
            .unwrap();
    let mut w = world(drifting(600, 1.0), tolerant);
    let cart = open(&mut w).await;
    let base = post(&mut w, &cart, "price").await;
    let fare = base.body["price"]["amount_cents"].as_i64().unwrap();
    tokio::time::advance(Duration::from_secs(700)).await;
    // The fare rose 1 %: the cabin is shown at the fare the customer saw.
    let chosen = cabin(&mut w, &cart).await;
    assert_eq!(chosen.status, 200, "{}", chosen.body);
    assert!(
        chosen.body.get("price_changed").is_none(),
        "{}",
        chosen.body
    );
    let price = &chosen.body["price"];
    let parts: i64 = price["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["amount_cents"].as_i64().unwrap())
        .sum();
    let absorbed = price["absorbed_cents"].as_i64().unwrap();
    let supplement = price["parts"][1]["amount_cents"].as_i64().unwrap();
    assert!(absorbed > 0, "{price}");
    assert_eq!(price["amount_cents"].as_i64(), Some(parts - absorbed));
    assert_eq!(parts - absorbed - supplement, fare, "the fare as shown");
    // Paid as shown.
    let paid = post(&mut w, &cart, "confirm").await;
    assert_eq!(paid.status, 200, "{}", paid.body);
    assert_eq!(
        paid.body["confirmation"]["amount_cents"],
        price["amount_cents"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_drop_at_payment_is_confirmed_and_shown() {
    // A negative drift: every price falls 10 % every 10 minutes.
    let mut w = world(drifting(600, -10.0), CartSettings::default());
    let cart = open(&mut w).await;
    let priced = post(&mut w, &cart, "price").await;
    let shown = priced.body["price"]["amount_cents"].as_i64().unwrap();
    tokio::time::advance(Duration::from_secs(700)).await;
    let paid = post(&mut w, &cart, "confirm").await;
    assert_eq!(paid.status, 200, "{}", paid.body);
    let paid_cents = paid.body["confirmation"]["amount_cents"].as_i64().unwrap();
    assert!(paid_cents < shown);
    assert_eq!(
        paid.body["price_changed"]["old_cents"].as_i64(),
        Some(shown)
    );
    assert_eq!(
        paid.body["price_changed"]["new_cents"].as_i64(),
        Some(paid_cents)
    );
}

/// The cart's step history as stored: (step, status, price change shown).
async fn history(w: &World, cart: &Reply) -> (u64, Vec<(StepKind, u16, bool)>) {
    let id = cart.body["cart_id"].as_str().unwrap();
    let stored = w.carts.carts.get(id).await.unwrap().unwrap();
    let steps = stored
        .steps
        .iter()
        .map(|s| (s.step, s.status, s.price_change_shown))
        .collect();
    (stored.revision, steps)
}

#[tokio::test(start_paused = true)]
async fn every_step_is_recorded_with_its_answer() {
    let sim = SimConfig {
        price_drift: Some(PriceDrift {
            start: base(),
            every: Duration::from_secs(600),
            percent: 10.0,
            until: None,
        }),
        ..SimConfig::default()
    };
    let mut w = world(sim, CartSettings::default());
    let cart = open(&mut w).await;
    post(&mut w, &cart, "price").await;
    tokio::time::advance(Duration::from_secs(700)).await;
    for _ in 0..2 {
        post(&mut w, &cart, "confirm").await;
    }
    let (_, steps) = history(&w, &cart).await;
    assert_eq!(
        steps,
        vec![
            (StepKind::Open, 201, false),
            (StepKind::Price, 200, false),
            (StepKind::Confirm, 409, true),
            (StepKind::Confirm, 200, false),
        ]
    );
    // A confirmed cart takes no more steps, and none are recorded.
    let again = post(&mut w, &cart, "confirm").await;
    assert_eq!(again.status, 409);
    assert_eq!(history(&w, &cart).await.1.len(), 4);
}

#[tokio::test(start_paused = true)]
async fn a_refused_step_is_recorded_without_a_new_revision() {
    let mut w = world(SimConfig::default(), CartSettings::default());
    set_sale(&w, SaleStatus::OffSale, 2).await;
    let cart = open(&mut w).await;
    let (revision, _) = history(&w, &cart).await;
    let refused = call(
        &mut w,
        HttpRequest::with_json(
            "PUT",
            &path(&cart, "accommodation"),
            &json!({"code": "cabin"}),
        ),
    )
    .await;
    assert_eq!(refused.status, 409);
    let bad = call(
        &mut w,
        HttpRequest::with_json("PUT", &path(&cart, "extras"), &json!({"codes": 3})),
    )
    .await;
    assert_eq!(bad.status, 400);
    let after = call(&mut w, HttpRequest::get(&path(&cart, ""), &[])).await;
    assert_eq!(
        state(&after.body),
        state(&cart.body),
        "the customer's cart reads the same"
    );
    assert_eq!(
        history(&w, &cart).await,
        (
            revision,
            vec![
                (StepKind::Open, 201, false),
                (StepKind::Accommodation, 409, false),
                (StepKind::Extras, 400, false),
            ]
        )
    );
}

#[tokio::test(start_paused = true)]
async fn confirming_on_a_cached_price_can_be_switched_off() {
    let settings = CartSettings::from_json(
        r#"{"operators": {"nordic": {"default_accommodation": "deck", "confirm_on_cached_price": false}}}"#,
    )
    .unwrap();
    let mut w = world(SimConfig::default(), settings);
    let warm = open(&mut w).await;
    post(&mut w, &warm, "price").await;
    set_sale(&w, SaleStatus::OffSale, 2).await;
    let cart = open(&mut w).await;
    assert_eq!(cart.body["accommodation"]["code"], "deck");
    let refused = post(&mut w, &cart, "confirm").await;
    assert_eq!(refused.status, 409);
    assert_eq!(refused.body["reason"], "cached_price_not_allowed");
}

#[tokio::test(start_paused = true)]
async fn bad_requests_name_what_is_wrong() {
    let mut w = world(SimConfig::default(), CartSettings::default());
    let mut body = new_cart();
    body["passengers"] = json!(12);
    let reply = call(&mut w, HttpRequest::with_json("POST", "/carts", &body)).await;
    assert_eq!(
        (
            reply.status,
            reply.body["invalid_params"][0]["name"].as_str()
        ),
        (400, Some("passengers"))
    );
    body = new_cart();
    body["operator"] = json!("baltic");
    let reply = call(&mut w, HttpRequest::with_json("POST", "/carts", &body)).await;
    assert_eq!(reply.body["invalid_params"][0]["name"], "operator");
    body = new_cart();
    body.as_object_mut().unwrap().remove("date");
    let reply = call(&mut w, HttpRequest::with_json("POST", "/carts", &body)).await;
    assert_eq!(
        (
            reply.status,
            reply.body["invalid_params"][0]["name"].as_str()
        ),
        (400, Some("date"))
    );
    let reply = call(
        &mut w,
        HttpRequest {
            method: "POST".into(),
            path: "/carts".into(),
            query: vec![],
            body: b"{not json".to_vec(),
            caller: Caller::Unnamed,
        },
    )
    .await;
    assert_eq!(reply.status, 400);
    // Refused by its length, before it is parsed: an unknown field of 3 MB
    // would otherwise be parsed, and echoed by serde's message.
    let mut huge = new_cart();
    huge["note"] = json!("x".repeat(3 * 1024 * 1024));
    let reply = call(&mut w, HttpRequest::with_json("POST", "/carts", &huge)).await;
    assert_eq!(reply.status, 413, "{}", reply.body);
    assert!(reply.body.to_string().len() < 1024, "the reply stays small");
    let mut long_field = new_cart();
    long_field[&"x".repeat(3000)] = json!(1);
    let reply = call(
        &mut w,
        HttpRequest::with_json("POST", "/carts", &long_field),
    )
    .await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert!(
        reply.body.to_string().len() < 2 * 1024,
        "an unknown field is echoed cut: {} bytes",
        reply.body.to_string().len()
    );
    assert_eq!(
        call(&mut w, HttpRequest::get("/carts/not-a-cart", &[]))
            .await
            .status,
        404
    );
    assert_eq!(
        call(&mut w, HttpRequest::get("/carts", &[])).await.status,
        405
    );
}

#[tokio::test(start_paused = true)]
async fn off_sale_a_sailing_never_priced_takes_its_fare_from_the_cached_search() {
    // With `lower` ids the cart asks in small letters, and still finds its
    // sailing among the operator's capitals.
    for case in [IdCase::Exact, IdCase::Lower] {
        let mut w = world_with(SimConfig::default(), CartSettings::default(), ids(case));
        let search = lifeboat_lookup::params::search_params("HEL", "TLL", "2026-12-24", 2);
        let operator = nordic();
        let (looked, ()) = tokio::join!(
            w.carts
                .lookup
                .answer(&operator, Operation::Search, &search, Mode::AskOperator),
            w.gateway.run_until(w.clock.now() + TimeDelta::seconds(4))
        );
        let body: Value = serde_json::from_str(&looked.result.unwrap().body).unwrap();
        let sailing = &body["sailings"][1];
        set_sale(&w, SaleStatus::OffSale, 2).await;
        let mut new = new_cart();
        new["sailing_id"] = sailing["sailing_id"].clone();
        let cart = call(&mut w, HttpRequest::with_json("POST", "/carts", &new)).await;
        assert_eq!(
            cart.body["price"]["amount_cents"], sailing["price_cents"],
            "{}",
            cart.body
        );
        assert_eq!(cart.body["price"]["source"], "fresh");
        let confirmed = post(&mut w, &cart, "confirm").await;
        assert_eq!(confirmed.body["status"], "confirmed");
        let id = sailing["sailing_id"].as_str().unwrap();
        assert_eq!(cart.body["sailing"]["sailing_id"], case.normalise(id));
    }
}

#[tokio::test(start_paused = true)]
async fn a_case_variant_of_the_sailing_id_finds_the_same_cached_price() {
    let mut w = world_with(
        SimConfig::default(),
        CartSettings::default(),
        ids(IdCase::Upper),
    );
    let warm = open(&mut w).await;
    let priced = post(&mut w, &warm, "price").await;
    assert_eq!(priced.body["price"]["source"], "live", "{}", priced.body);
    let requests = w.gateway.requests.counts().total;

    let mut variant = new_cart();
    variant["sailing_id"] = json!("hel-Tll-20261224-0615");
    let cart = call(&mut w, HttpRequest::with_json("POST", "/carts", &variant)).await;
    assert_eq!(cart.status, 201, "{}", cart.body);
    assert_eq!(
        cart.body["sailing"]["sailing_id"], SAILING,
        "stored as asked"
    );
    // Opened with the other spelling's cached price (the price step itself
    // asks the operator: it is the last price before payment).
    assert_eq!(cart.body["price"]["source"], "fresh", "{}", cart.body);
    assert_eq!(
        cart.body["price"]["amount_cents"],
        priced.body["price"]["amount_cents"]
    );

    // Off sale, the cached price of the other spelling is the cart's.
    set_sale(&w, SaleStatus::OffSale, 2).await;
    variant["sailing_id"] = json!("HEL-tll-20261224-0615");
    let off = call(&mut w, HttpRequest::with_json("POST", "/carts", &variant)).await;
    assert_eq!(off.status, 201, "{}", off.body);
    assert_eq!(
        off.body["price"]["amount_cents"],
        priced.body["price"]["amount_cents"]
    );
    assert_eq!(
        w.gateway.requests.counts().total,
        requests,
        "no spelling asked the operator again"
    );
}

#[test]
fn only_amounts_that_are_prices_are_read() {
    let fare = |cents: Value, currency: &str| {
        fare_of(&json!({"price_cents": cents, "currency": currency})).map(|q| q.amount_cents)
    };
    assert_eq!(fare(json!(9_900), "EUR"), Some(9_900));
    let max = lifeboat_core::price::MAX_PRICE_CENTS;
    assert_eq!(fare(json!(max), "EUR"), Some(max));
    for bad in [
        json!(0),
        json!(-1),
        json!(i64::MIN),
        json!(max + 1),
        json!(i64::MAX),
        json!(99.5),
        json!("9900"),
    ] {
        assert_eq!(fare(bad.clone(), "EUR"), None, "{bad}");
    }
    assert_eq!(fare(json!(9_900), "EURO"), None);
    assert!(quote_in(r#"{"price": {"amount_cents": 100, "currency": "EUR", "parts": [{"kind": "fare", "amount_cents": 90}]}}"#).is_err());
    assert!(quote_in(r#"{"price": {"amount_cents": 100, "currency": "EUR"}}"#).is_ok());
}

#[test]
fn logs_name_a_cart_by_a_fingerprint() {
    let id = "c-4f9a1b2c3d4e5f60718293a4b5c6d7e8";
    let named = log_ref(id);
    assert_eq!(named, log_ref(id), "stable across lines");
    assert_eq!(named.len(), 12);
    assert!(!id.contains(&named) && !named.contains(&id[2..10]));
    assert_ne!(named, log_ref("c-4f9a1b2c3d4e5f60718293a4b5c6d7e9"));
}

/// A request as the HTTP API delivers it through the JWT authorizer
/// (`ApiAuth=jwt`): tests/events/http-api-get-sailings.json with this route
/// and body, and the authorizer's claims in `requestContext.authorizer.jwt`
/// (`sub` only when `subject` names one), read by lambda_http and
/// `from_lambda` as the function reads every event.
fn through_jwt(method: &str, path: &str, body: &Value, subject: Option<&str>) -> HttpRequest {
    let fixture = format!(
        "{}/../../tests/events/http-api-get-sailings.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut event: Value =
        serde_json::from_str(&std::fs::read_to_string(&fixture).unwrap()).unwrap();
    event["routeKey"] = json!(format!("{method} {path}"));
    event["rawPath"] = json!(path);
    event["rawQueryString"] = json!("");
    event
        .as_object_mut()
        .unwrap()
        .remove("queryStringParameters");
    event["headers"]["content-type"] = json!("application/json");
    event["headers"]["authorization"] = json!("Bearer (the token the authorizer checked)");
    event["requestContext"]["http"]["method"] = json!(method);
    event["requestContext"]["http"]["path"] = json!(path);
    event["requestContext"]["routeKey"] = event["routeKey"].clone();
    let mut claims = json!({
        "iss": "https://id.marketplace.example/",
        "aud": "lifeboat",
        "exp": "1796036400",
        "iat": "1796032800",
    });
    if let Some(subject) = subject {
        claims["sub"] = json!(subject);
    }
    event["requestContext"]["authorizer"] = json!({"jwt": {"claims": claims, "scopes": null}});
    event["body"] = json!(body.to_string());
    let request = lambda_http::request::from_str(&event.to_string()).unwrap();
    lifeboat_lookup::http::from_lambda(&request)
}

#[tokio::test(start_paused = true)]
async fn with_jwt_a_cart_is_its_subjects_alone() {
    let mut w = world(SimConfig::default(), CartSettings::default());
    let none = json!({});
    let cart = call(
        &mut w,
        through_jwt("POST", "/carts", &new_cart(), Some("customer-a")),
    )
    .await;
    assert_eq!(cart.status, 201, "{}", cart.body);
    let id = cart.body["cart_id"].as_str().unwrap().to_owned();
    assert!(
        cart.body.get("owner").is_none(),
        "the view shows no subject"
    );
    let stored = w.carts.carts.get(&id).await.unwrap().unwrap();
    assert_eq!(stored.owner.as_deref(), Some("customer-a"));

    // Another subject, a token without one and a request without a token
    // all get exactly the 404 of a cart that does not exist, on every route.
    let unknown = uuid::Uuid::new_v4().to_string();
    let absent = call(
        &mut w,
        through_jwt(
            "GET",
            &format!("/carts/{unknown}"),
            &none,
            Some("customer-b"),
        ),
    )
    .await;
    assert_eq!(absent.status, 404);
    let as_absent = |reply: &Reply| {
        (
            reply.status,
            reply.headers.clone(),
            reply.body.to_string().replace(&id, &unknown),
        )
    };
    let foreign = [
        through_jwt("GET", &path(&cart, ""), &none, Some("customer-b")),
        through_jwt(
            "PUT",
            &path(&cart, "accommodation"),
            &json!({"code": "cabin"}),
            Some("customer-b"),
        ),
        through_jwt(
            "PUT",
            &path(&cart, "extras"),
            &json!({"codes": ["meal"]}),
            Some("customer-b"),
        ),
        through_jwt("POST", &path(&cart, "price"), &none, Some("customer-b")),
        through_jwt("POST", &path(&cart, "confirm"), &none, Some("customer-b")),
        through_jwt(
            "POST",
            &path(&cart, "order"),
            &json!({"accept": true, "price_cents": 12_400}),
            Some("customer-b"),
        ),
        through_jwt("GET", &path(&cart, ""), &none, Some("Customer-A")),
        HttpRequest::get(&path(&cart, ""), &[]),
        HttpRequest::with_json("POST", &path(&cart, "confirm"), &none),
    ];
    for request in foreign {
        let reply = call(&mut w, request.clone()).await;
        assert_eq!(
            as_absent(&reply),
            as_absent(&absent),
            "{} {} from {:?}",
            request.method,
            request.path,
            request.caller
        );
    }
    let anonymous = call(&mut w, through_jwt("GET", &path(&cart, ""), &none, None)).await;
    assert_eq!(anonymous.status, 403, "{}", anonymous.body);
    let opened = call(&mut w, through_jwt("POST", "/carts", &new_cart(), None)).await;
    assert_eq!(
        opened.status, 403,
        "a token without a subject opens no cart"
    );
    assert_eq!(
        w.carts.carts.get(&id).await.unwrap().unwrap(),
        stored,
        "nothing above touched the cart, not even its step history"
    );

    // Its owner reads it and takes it to payment.
    let read = call(
        &mut w,
        through_jwt("GET", &path(&cart, ""), &none, Some("customer-a")),
    )
    .await;
    assert_eq!(read.status, 200, "{}", read.body);
    assert_eq!(state(&read.body), state(&cart.body));
    let cabin = call(
        &mut w,
        through_jwt(
            "PUT",
            &path(&cart, "accommodation"),
            &json!({"code": "cabin"}),
            Some("customer-a"),
        ),
    )
    .await;
    assert_eq!(cabin.status, 200, "{}", cabin.body);
    let confirmed = call(
        &mut w,
        through_jwt("POST", &path(&cart, "confirm"), &none, Some("customer-a")),
    )
    .await;
    assert_eq!(confirmed.status, 200, "{}", confirmed.body);
    assert_eq!(confirmed.body["status"], "confirmed");
    assert_eq!(
        w.carts
            .carts
            .get(&id)
            .await
            .unwrap()
            .unwrap()
            .owner
            .as_deref(),
        Some("customer-a"),
        "kept through every step"
    );
}

#[tokio::test(start_paused = true)]
async fn carts_opened_without_a_token_are_reached_by_their_id_as_before() {
    let mut w = world(SimConfig::default(), CartSettings::default());
    let cart = open(&mut w).await;
    assert_eq!(cart.status, 201, "{}", cart.body);
    let id = cart.body["cart_id"].as_str().unwrap();
    assert_eq!(w.carts.carts.get(id).await.unwrap().unwrap().owner, None);
    for caller in [Caller::Unnamed, Caller::subject("customer-b")] {
        let request = HttpRequest::get(&path(&cart, ""), &[]).from_caller(caller.clone());
        let read = call(&mut w, request).await;
        assert_eq!(read.status, 200, "{caller:?}: {}", read.body);
        assert_eq!(state(&read.body), state(&cart.body));
    }
}

// Held orders: a cart confirmed while its operator cannot book
// (docs/orders.md).

/// The simulated operator with `seats` seats on every sailing, none sold
/// through other channels.
fn seats(seats: u32) -> SimConfig {
    SimConfig {
        seats: lifeboat_operator::SeatModel {
            capacity_min: seats,
            capacity_max: seats,
            other_channels_per_hour: 0.0,
        },
        ..SimConfig::default()
    }
}

/// The cart's settings for an operator whose other channels sell nothing
/// (as `seats(n)`'s): its counts of seats left lose nothing as they age but
/// their fading.
fn nothing_sold_elsewhere() -> CartSettings {
    CartSettings::from_json(r#"{"default": {"seats": {"sold_elsewhere_per_hour": 0}}}"#).unwrap()
}

/// The operator's search for `new_cart()`'s route, asked so its answer
/// (each sailing with its `seats_left`) is cached: its first sailing.
async fn searched(w: &mut World) -> Value {
    let search = lifeboat_lookup::params::search_params("HEL", "TLL", "2026-12-24", 2);
    let operator = nordic();
    let (looked, ()) = tokio::join!(
        w.carts
            .lookup
            .answer(&operator, Operation::Search, &search, Mode::AskOperator),
        w.gateway.run_until(w.clock.now() + TimeDelta::seconds(4))
    );
    let body: Value = serde_json::from_str(&looked.result.unwrap().body).unwrap();
    body["sailings"][0].clone()
}

/// A cart on `sailing`, priced by the operator while on sale.
async fn priced_cart(w: &mut World, sailing: &Value) -> Reply {
    let mut new = new_cart();
    new["sailing_id"] = sailing["sailing_id"].clone();
    let cart = call(w, HttpRequest::with_json("POST", "/carts", &new)).await;
    assert_eq!(cart.status, 201, "{}", cart.body);
    let priced = post(w, &cart, "price").await;
    assert_eq!(priced.body["price"]["source"], "live", "{}", priced.body);
    cart
}

fn order_id_of(cart: &Reply) -> String {
    format!("lb-{}", cart.body["cart_id"].as_str().unwrap())
}

async fn held_on(w: &World, sailing: &Value) -> u32 {
    w.orders
        .held_passengers(&nordic(), sailing["sailing_id"].as_str().unwrap())
        .await
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn an_off_sale_confirm_holds_the_order_with_everything_a_booking_needs() {
    let mut w = world(seats(40), nothing_sold_elsewhere());
    let sailing = searched(&mut w).await;
    assert_eq!(sailing["seats_left"], 40, "{sailing}");
    let cart = priced_cart(&mut w, &sailing).await;
    tokio::time::advance(Duration::from_secs(600)).await;
    set_sale(&w, SaleStatus::OffSale, 2).await;

    let confirmed = post(&mut w, &cart, "confirm").await;
    assert_eq!(confirmed.status, 200, "{}", confirmed.body);
    // The confirmation as before, and the booking beside it.
    assert_eq!(confirmed.body["status"], "confirmed");
    assert_eq!(confirmed.body["confirmation"]["on_cached_price"], true);
    let booking = &confirmed.body["booking"];
    assert_eq!(booking["status"], "held", "{booking}");
    assert_eq!(booking["order_id"], order_id_of(&cart));
    assert_eq!(booking["guaranteed"], true);
    assert!(booking["message"].as_str().unwrap().contains("held"));

    let order = w.orders.get(&order_id_of(&cart)).await.unwrap().unwrap();
    let confirmation = &confirmed.body["confirmation"];
    assert_eq!(order.cart_id, cart.body["cart_id"].as_str().unwrap());
    assert_eq!(order.operator, nordic());
    assert_eq!(
        order.sailing.sailing_id,
        sailing["sailing_id"].as_str().unwrap()
    );
    assert_eq!(order.sailing.passengers, 2);
    assert_eq!(order.accommodation.as_deref(), Some("seat"));
    assert!(order.extras.is_empty());
    assert_eq!(
        Some(order.paid_cents),
        confirmation["amount_cents"].as_i64()
    );
    assert_eq!(order.max_price_cents, order.paid_cents, "nothing absorbed");
    assert_eq!(
        Some(order.currency.as_str()),
        confirmation["currency"].as_str()
    );
    assert_eq!(json!(order.price_as_of), confirmation["price_as_of"]);
    assert_eq!(json!(order.held_at), confirmation["at"]);
    assert_eq!(booking["held_at"], confirmation["at"]);
    assert!(!order.on_request);
    assert_eq!(
        order.state,
        lifeboat_core::order::OrderState::Held {
            reason: lifeboat_core::order::HoldReason::OffSale
        }
    );
    assert_eq!(held_on(&w, &sailing).await, 2);
    // A read shows the confirmed cart, as before.
    let read = call(&mut w, HttpRequest::get(&path(&cart, ""), &[])).await;
    assert_eq!(read.body["status"], "confirmed");
}

#[tokio::test(start_paused = true)]
async fn a_retried_confirm_holds_the_order_once() {
    let mut w = world(seats(40), nothing_sold_elsewhere());
    let sailing = searched(&mut w).await;
    let cart = priced_cart(&mut w, &sailing).await;
    set_sale(&w, SaleStatus::OffSale, 2).await;
    let id = cart.body["cart_id"].as_str().unwrap().to_owned();
    let unconfirmed = w.carts.carts.get(&id).await.unwrap().unwrap();

    let first = post(&mut w, &cart, "confirm").await;
    assert_eq!(first.body["booking"]["status"], "held", "{}", first.body);
    // The order was held but the customer never heard: the cart's write is
    // lost (put back as it was), and the customer confirms again.
    let stored = w.carts.carts.get(&id).await.unwrap().unwrap();
    let lost = Cart {
        revision: stored.revision + 1,
        ..unconfirmed
    };
    w.carts
        .carts
        .save(&lost, Some(stored.revision))
        .await
        .unwrap();
    let again = post(&mut w, &cart, "confirm").await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.body["booking"], first.body["booking"]);
    assert_eq!(held_on(&w, &sailing).await, 2, "counted once");
    let held = moves_to(&w, StateName::Held);
    assert_eq!(held.len(), 1, "published once: {held:?}");
    assert_eq!(held[0].order_id, format!("lb-{id}"));
    let open = w.orders.open_orders(&nordic(), 10).await.unwrap();
    assert_eq!(open.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn past_the_seats_left_an_order_is_taken_on_request() {
    // Three seats: the first cart's two passengers fit, the second's do not.
    let mut w = world(seats(3), nothing_sold_elsewhere());
    let sailing = searched(&mut w).await;
    let first = priced_cart(&mut w, &sailing).await;
    let second = priced_cart(&mut w, &sailing).await;
    set_sale(&w, SaleStatus::OffSale, 2).await;

    let held = post(&mut w, &first, "confirm").await;
    assert_eq!(held.body["booking"]["status"], "held", "{}", held.body);
    let on_request = post(&mut w, &second, "confirm").await;
    assert_eq!(on_request.status, 200, "{}", on_request.body);
    let booking = &on_request.body["booking"];
    assert_eq!(booking["status"], "on_request", "{booking}");
    assert_eq!(booking["guaranteed"], false);
    assert!(
        booking["message"]
            .as_str()
            .unwrap()
            .contains("not guaranteed")
    );
    let order = w.orders.get(&order_id_of(&second)).await.unwrap().unwrap();
    assert!(order.on_request);
    assert!(
        !w.orders
            .get(&order_id_of(&first))
            .await
            .unwrap()
            .unwrap()
            .on_request
    );
}

#[tokio::test(start_paused = true)]
async fn what_other_channels_may_have_sold_since_the_count_is_kept_back() {
    // Four seats counted ten minutes before the confirms. By default other
    // channels may sell forty before the orders are booked (60 an hour,
    // for the count's ten minutes and the half hour the operator may yet
    // stay away): nothing is left to guarantee. An operator whose other
    // channels sell nothing (`sold_elsewhere_per_hour: 0`) has both carts'
    // four passengers held.
    let confirms = |settings: CartSettings| async move {
        let mut w = world(seats(4), settings);
        let sailing = searched(&mut w).await;
        let first = priced_cart(&mut w, &sailing).await;
        let second = priced_cart(&mut w, &sailing).await;
        tokio::time::advance(Duration::from_secs(600)).await;
        set_sale(&w, SaleStatus::OffSale, 2).await;
        let mut statuses = Vec::new();
        for cart in [&first, &second] {
            let confirmed = post(&mut w, cart, "confirm").await;
            assert_eq!(confirmed.status, 200, "{}", confirmed.body);
            statuses.push(confirmed.body["booking"]["status"].clone());
        }
        statuses
    };
    assert_eq!(
        confirms(CartSettings::default()).await,
        [json!("on_request"), json!("on_request")]
    );
    let nothing_elsewhere =
        CartSettings::from_json(r#"{"default": {"seats": {"sold_elsewhere_per_hour": 0}}}"#)
            .unwrap();
    assert_eq!(
        confirms(nothing_elsewhere).await,
        [json!("held"), json!("held")]
    );
}

#[tokio::test(start_paused = true)]
async fn an_old_count_of_seats_is_not_trusted() {
    // Forty seats, but counted seven hours ago: past `gone_s` nothing of
    // that count is trusted, and the order is taken on request.
    let mut w = world(seats(40), nothing_sold_elsewhere());
    let sailing = searched(&mut w).await;
    let cart = priced_cart(&mut w, &sailing).await;
    tokio::time::advance(Duration::from_secs(7 * 3600)).await;
    set_sale(&w, SaleStatus::OffSale, 2).await;
    let confirmed = post(&mut w, &cart, "confirm").await;
    assert_eq!(
        confirmed.body["booking"]["status"], "on_request",
        "{}",
        confirmed.body
    );
}

#[tokio::test(start_paused = true)]
async fn past_the_cap_a_confirm_is_refused_when_the_policy_says_so() {
    let settings = CartSettings::from_json(
        r#"{"default": {"seats": {"past_the_cap": "not_offered", "sold_elsewhere_per_hour": 0}}}"#,
    )
    .unwrap();
    let mut w = world(seats(3), settings);
    let sailing = searched(&mut w).await;
    let first = priced_cart(&mut w, &sailing).await;
    let second = priced_cart(&mut w, &sailing).await;
    set_sale(&w, SaleStatus::OffSale, 2).await;

    let held = post(&mut w, &first, "confirm").await;
    assert_eq!(held.body["booking"]["status"], "held", "{}", held.body);
    let refused = post(&mut w, &second, "confirm").await;
    assert_eq!(
        (refused.status, refused.body["reason"].as_str()),
        (409, Some("past_the_cap")),
        "{}",
        refused.body
    );
    assert_eq!(
        refused.header("content-type"),
        Some("application/problem+json")
    );
    assert!(refused.body.get("booking").is_none());
    assert!(w.orders.get(&order_id_of(&second)).await.unwrap().is_none());
    assert_eq!(held_on(&w, &sailing).await, 2);
    let read = call(&mut w, HttpRequest::get(&path(&second, ""), &[])).await;
    assert_eq!(read.body["status"], "open", "{}", read.body);
    assert!(read.body["confirmation"].is_null());
}

/// An Orders table that cannot be reached.
struct Unreachable;

#[async_trait::async_trait]
impl OrderStore for Unreachable {
    async fn get(&self, _: &str) -> Result<Option<lifeboat_core::order::HeldOrder>, StoreError> {
        Err(StoreError::Unavailable("no route to the table".into()))
    }
    async fn hold(
        &self,
        _: &lifeboat_core::order::HeldOrder,
        _: Option<u32>,
    ) -> Result<lifeboat_core::ports::Held, StoreError> {
        Err(StoreError::Unavailable("no route to the table".into()))
    }
    async fn save(&self, _: &lifeboat_core::order::HeldOrder, _: u64) -> Result<(), StoreError> {
        Err(StoreError::Unavailable("no route to the table".into()))
    }
    async fn open_orders(
        &self,
        _: &OperatorId,
        _: usize,
    ) -> Result<Vec<lifeboat_core::order::HeldOrder>, StoreError> {
        Err(StoreError::Unavailable("no route to the table".into()))
    }
    async fn held_passengers(&self, _: &OperatorId, _: &str) -> Result<u32, StoreError> {
        Err(StoreError::Unavailable("no route to the table".into()))
    }
}

#[tokio::test(start_paused = true)]
async fn an_order_that_cannot_be_held_is_a_503_and_the_cart_stays_open() {
    let mut w = world(seats(40), nothing_sold_elsewhere());
    let sailing = searched(&mut w).await;
    let cart = priced_cart(&mut w, &sailing).await;
    set_sale(&w, SaleStatus::OffSale, 2).await;
    w.carts.orders = Arc::new(Unreachable);

    let failed = post(&mut w, &cart, "confirm").await;
    assert_eq!(failed.status, 503, "{}", failed.body);
    assert!(failed.header("retry-after").is_some());
    assert!(failed.body.get("booking").is_none());
    assert!(failed.body.get("confirmation").is_none());
    let read = call(&mut w, HttpRequest::get(&path(&cart, ""), &[])).await;
    assert_eq!(read.body["status"], "open", "{}", read.body);
    assert!(read.body["confirmation"].is_null());

    // The table back: the same confirm holds it.
    w.carts.orders = w.orders.clone();
    let confirmed = post(&mut w, &cart, "confirm").await;
    assert_eq!(confirmed.status, 200, "{}", confirmed.body);
    assert_eq!(confirmed.body["booking"]["status"], "held");
}

#[tokio::test(start_paused = true)]
async fn an_on_sale_confirm_on_a_live_price_holds_nothing() {
    let mut w = world(seats(40), nothing_sold_elsewhere());
    let sailing = searched(&mut w).await;
    let cart = priced_cart(&mut w, &sailing).await;
    let confirmed = post(&mut w, &cart, "confirm").await;
    assert_eq!(confirmed.status, 200, "{}", confirmed.body);
    assert_eq!(confirmed.body["confirmation"]["on_cached_price"], false);
    assert!(
        confirmed.body.get("booking").is_none(),
        "{}",
        confirmed.body
    );
    assert!(w.orders.get(&order_id_of(&cart)).await.unwrap().is_none());
    assert_eq!(held_on(&w, &sailing).await, 0);
}

// The customer's reply to a new price (docs/orders.md, "The customer's
// reply").

/// A cart confirmed off sale on `sailing`, its order then answered by the
/// operator with a price past the tolerance, `rise_cents` over what was
/// paid, as the booking worker would have saved it: the cart and the price
/// asked.
async fn asked(w: &mut World, sailing: &Value, rise_cents: i64) -> (Reply, i64) {
    let cart = priced_cart(w, sailing).await;
    set_sale(w, SaleStatus::OffSale, 2).await;
    let confirmed = post(w, &cart, "confirm").await;
    assert_eq!(
        confirmed.body["booking"]["status"], "held",
        "{}",
        confirmed.body
    );
    let mut order = w.orders.get(&order_id_of(&cart)).await.unwrap().unwrap();
    let now = w.clock.now();
    order.start_booking(now).unwrap();
    let price = order.paid_cents + rise_cents;
    order
        .answer(
            lifeboat_core::order::BookingAnswer::PriceChanged { price_cents: price },
            &lifeboat_core::order::OrderPolicy::default(),
            now,
        )
        .unwrap();
    let read = order.revision;
    order.revision += 1;
    w.orders.save(&order, read).await.unwrap();
    // The hold itself was published once, as Order Held; what the tests
    // look at from here is what the reply does.
    let held = moves_to(w, StateName::Held);
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0].order_id, order_id_of(&cart));
    w.events_from = w.gateway.bus.events().len();
    (cart, price)
}

/// The order moves the bus took since the test's setup.
fn moves_since_setup(w: &World) -> Vec<lifeboat_core::events::OrderMoved> {
    w.gateway
        .bus
        .read_from(w.events_from)
        .0
        .into_iter()
        .filter_map(|e| match e {
            lifeboat_core::events::LifeboatEvent::OrderMoved(m) => Some(*m),
            _ => None,
        })
        .collect()
}

async fn reply(w: &mut World, cart: &Reply, body: Value) -> Reply {
    call(
        w,
        HttpRequest::with_json("POST", &path(cart, "order"), &body),
    )
    .await
}

fn moves_to(w: &World, state: StateName) -> Vec<lifeboat_core::events::OrderMoved> {
    moves_since_setup(w)
        .into_iter()
        .filter(|m| m.to == state)
        .collect()
}

use lifeboat_core::order::{OrderState, StateName};

#[tokio::test(start_paused = true)]
async fn a_read_shows_the_order_waiting_and_an_accepted_price_holds_it_again() {
    let mut w = world(seats(40), nothing_sold_elsewhere());
    let sailing = searched(&mut w).await;
    let (cart, price) = asked(&mut w, &sailing, 900).await;

    let read = call(&mut w, HttpRequest::get(&path(&cart, ""), &[])).await;
    assert_eq!(read.status, 200, "{}", read.body);
    let order = &read.body["order"];
    assert_eq!(order["state"], "ask_customer", "{order}");
    assert_eq!(order["price_cents"], price);
    assert_eq!(order["paid_cents"], price - 900);
    assert!(order["deadline"].is_string(), "{order}");
    assert!(order["message"].as_str().unwrap().contains("deadline"));

    // A price the customer was not shown is no answer to the question.
    let wrong = reply(
        &mut w,
        &cart,
        json!({"accept": true, "price_cents": price - 1}),
    )
    .await;
    assert_eq!(
        (wrong.status, wrong.body["reason"].as_str()),
        (409, Some("not_the_price_asked")),
        "{}",
        wrong.body
    );
    assert_eq!(
        wrong.header("content-type"),
        Some("application/problem+json")
    );
    assert_eq!(wrong.body["order"]["state"], "ask_customer");
    let stored = w.orders.get(&order_id_of(&cart)).await.unwrap().unwrap();
    assert_eq!(stored.state.name(), StateName::AskCustomer, "nothing moved");

    let accepted = reply(&mut w, &cart, json!({"accept": true, "price_cents": price})).await;
    assert_eq!(accepted.status, 200, "{}", accepted.body);
    assert_eq!(accepted.body["order"]["state"], "held", "{}", accepted.body);
    let read_at = stored.revision;
    assert_eq!(accepted.body["order"]["paid_cents"], price);
    assert_eq!(accepted.body["cart_id"], cart.body["cart_id"]);
    let stored = w.orders.get(&order_id_of(&cart)).await.unwrap().unwrap();
    assert!(
        matches!(stored.state, OrderState::Held { .. }),
        "{stored:?}"
    );
    assert_eq!(
        stored.max_price_cents, price,
        "booked at the price accepted"
    );
    assert_eq!(
        stored.revision,
        read_at + 1,
        "saved once, on the revision read"
    );
    let held = moves_to(&w, StateName::Held);
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0].order_id, order_id_of(&cart));
    assert_eq!(
        w.gateway.metrics.sum(
            lifeboat_core::metrics::names::ORDERS_MOVED,
            &[("Operator", "nordic"), ("State", "held")]
        ),
        2.0,
        "the hold at the confirm, and the acceptance"
    );
    assert_eq!(held_on(&w, &sailing).await, 2, "its seats still held");

    // Answered once: a second reply finds nothing to answer.
    let again = reply(
        &mut w,
        &cart,
        json!({"accept": false, "price_cents": price}),
    )
    .await;
    assert_eq!(
        (again.status, again.body["reason"].as_str()),
        (409, Some("not_asked")),
        "{}",
        again.body
    );
    assert_eq!(again.body["order"]["state"], "held");
    assert_eq!(moves_to(&w, StateName::Refunded).len(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_declined_price_refunds_the_order_and_gives_its_seats_back() {
    let mut w = world(seats(40), nothing_sold_elsewhere());
    let sailing = searched(&mut w).await;
    let (cart, price) = asked(&mut w, &sailing, 900).await;
    assert_eq!(held_on(&w, &sailing).await, 2);

    let declined = reply(
        &mut w,
        &cart,
        json!({"accept": false, "price_cents": price}),
    )
    .await;
    assert_eq!(declined.status, 200, "{}", declined.body);
    let order = &declined.body["order"];
    assert_eq!(order["state"], "refunded", "{order}");
    assert_eq!(order["refund_reason"], "price_declined");
    let stored = w.orders.get(&order_id_of(&cart)).await.unwrap().unwrap();
    assert_eq!(stored.state.name(), StateName::Refunded);
    assert_eq!(moves_to(&w, StateName::Refunded).len(), 1);
    assert_eq!(held_on(&w, &sailing).await, 0, "the seats given back");
    let read = call(&mut w, HttpRequest::get(&path(&cart, ""), &[])).await;
    assert_eq!(read.body["order"], declined.body["order"]);
}

#[tokio::test(start_paused = true)]
async fn a_reply_after_the_deadline_changes_nothing() {
    let mut w = world(seats(40), nothing_sold_elsewhere());
    let sailing = searched(&mut w).await;
    let (cart, price) = asked(&mut w, &sailing, 900).await;
    tokio::time::advance(Duration::from_secs(24 * 3600 + 1)).await;
    let late = reply(&mut w, &cart, json!({"accept": true, "price_cents": price})).await;
    assert_eq!(
        (late.status, late.body["reason"].as_str()),
        (409, Some("deadline_passed")),
        "{}",
        late.body
    );
    assert_eq!(late.body["order"]["state"], "ask_customer");
    let stored = w.orders.get(&order_id_of(&cart)).await.unwrap().unwrap();
    assert_eq!(stored.state.name(), StateName::AskCustomer);
    assert!(moves_since_setup(&w).is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_reply_needs_an_order_waiting_and_a_well_formed_body() {
    let mut w = world(seats(40), nothing_sold_elsewhere());
    let sailing = searched(&mut w).await;
    // Held, not asked: nothing to answer yet.
    let cart = priced_cart(&mut w, &sailing).await;
    set_sale(&w, SaleStatus::OffSale, 2).await;
    let confirmed = post(&mut w, &cart, "confirm").await;
    assert_eq!(confirmed.status, 200, "{}", confirmed.body);
    let early = reply(&mut w, &cart, json!({"accept": true, "price_cents": 100})).await;
    assert_eq!(
        (early.status, early.body["reason"].as_str()),
        (409, Some("not_asked")),
        "{}",
        early.body
    );
    assert_eq!(early.body["order"]["state"], "held");

    for (body, field) in [
        (json!({"accept": true}), "price_cents"),
        (json!({"price_cents": 100}), "accept"),
        (json!({"accept": "yes", "price_cents": 100}), "body"),
        (json!({"accept": true, "price_cents": 0}), "price_cents"),
        (
            json!({"accept": true, "price_cents": 100, "coupon": "X"}),
            "coupon",
        ),
    ] {
        let bad = reply(&mut w, &cart, body.clone()).await;
        assert_eq!(bad.status, 400, "{body}: {}", bad.body);
        assert_eq!(bad.header("content-type"), Some("application/problem+json"));
        if field != "body" {
            assert_eq!(
                bad.body["invalid_params"][0]["name"], field,
                "{body}: {}",
                bad.body
            );
        }
    }
    let get = call(&mut w, HttpRequest::get(&path(&cart, "order"), &[])).await;
    assert_eq!(get.status, 405, "{}", get.body);

    // No order: an open cart, a cart paid on a live price, no cart.
    set_sale(&w, SaleStatus::OnSale, 3).await;
    let open_cart = priced_cart(&mut w, &sailing).await;
    let none = reply(
        &mut w,
        &open_cart,
        json!({"accept": true, "price_cents": 100}),
    )
    .await;
    assert_eq!(none.status, 404, "{}", none.body);
    let live = post(&mut w, &open_cart, "confirm").await;
    assert_eq!(
        live.body["confirmation"]["on_cached_price"], false,
        "{}",
        live.body
    );
    let read = call(&mut w, HttpRequest::get(&path(&open_cart, ""), &[])).await;
    assert!(read.body.get("order").is_none(), "{}", read.body);
    let none = reply(
        &mut w,
        &open_cart,
        json!({"accept": true, "price_cents": 100}),
    )
    .await;
    assert_eq!(none.status, 404, "{}", none.body);
    let nobody = call(
        &mut w,
        HttpRequest::with_json(
            "POST",
            "/carts/00000000-0000-4000-8000-000000000000/order",
            &json!({"accept": true, "price_cents": 100}),
        ),
    )
    .await;
    assert_eq!(nobody.status, 404, "{}", nobody.body);
}

/// The Orders table, where every save loses to another writer.
struct Raced(Arc<MemoryOrderStore>);

#[async_trait::async_trait]
impl OrderStore for Raced {
    async fn get(&self, id: &str) -> Result<Option<lifeboat_core::order::HeldOrder>, StoreError> {
        self.0.get(id).await
    }
    async fn hold(
        &self,
        order: &lifeboat_core::order::HeldOrder,
        cap: Option<u32>,
    ) -> Result<lifeboat_core::ports::Held, StoreError> {
        self.0.hold(order, cap).await
    }
    async fn save(&self, _: &lifeboat_core::order::HeldOrder, _: u64) -> Result<(), StoreError> {
        Err(StoreError::Conflict("moved by the booking worker".into()))
    }
    async fn open_orders(
        &self,
        operator: &OperatorId,
        limit: usize,
    ) -> Result<Vec<lifeboat_core::order::HeldOrder>, StoreError> {
        self.0.open_orders(operator, limit).await
    }
    async fn held_passengers(
        &self,
        operator: &OperatorId,
        sailing: &str,
    ) -> Result<u32, StoreError> {
        self.0.held_passengers(operator, sailing).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_reply_that_loses_a_race_or_meets_an_unreachable_table_moves_nothing() {
    let mut w = world(seats(40), nothing_sold_elsewhere());
    let sailing = searched(&mut w).await;
    let (cart, price) = asked(&mut w, &sailing, 900).await;
    let answer = json!({"accept": true, "price_cents": price});

    w.carts.orders = Arc::new(Raced(w.orders.clone()));
    let raced = reply(&mut w, &cart, answer.clone()).await;
    assert_eq!(
        (raced.status, raced.body["reason"].as_str()),
        (409, Some("order_changed")),
        "{}",
        raced.body
    );
    w.carts.orders = Arc::new(Unreachable);
    let failed = reply(&mut w, &cart, answer.clone()).await;
    assert_eq!(failed.status, 503, "{}", failed.body);
    assert!(failed.header("retry-after").is_some());
    let read = call(&mut w, HttpRequest::get(&path(&cart, ""), &[])).await;
    assert_eq!(
        read.status, 503,
        "no order is never shown as none: {}",
        read.body
    );
    assert!(moves_to(&w, StateName::Held).is_empty());

    w.carts.orders = w.orders.clone();
    let accepted = reply(&mut w, &cart, answer).await;
    assert_eq!(accepted.status, 200, "{}", accepted.body);
}
