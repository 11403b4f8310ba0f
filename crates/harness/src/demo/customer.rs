//! Customers of the demo: each searches once and may take a sailing it found
//! through a cart to payment, calling the search and cart handlers exactly as
//! the HTTP API would. A customer whose confirm held an order follows it
//! through their cart until it ends, and answers when its price rose past
//! the tolerance.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use cart::CartService;
use lifeboat_lookup::http::{HttpRequest, Reply};
use lifeboat_operator::SimRng;
use lifeboat_sim::HttpFunction;
use search::Search;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::{Phase, Script};
use crate::marketplace::ROUTES;

pub(crate) const OPERATOR: &str = "nordic";

/// How many days ahead customers travel, from the day after the demo's day.
const DAYS_AHEAD: u32 = 14;

/// The customer model of the price shock (docs/carts.md): the share of
/// customers who leave when they are shown that the price of what they chose
/// changed, at payment and at an earlier step. Most leave at payment, as the
/// incident's team found; a change shown while still choosing is read as
/// news, and few leave.
pub(crate) const LEAVE_ON_CHANGE_AT_PAYMENT: f64 = 0.7;
pub(crate) const LEAVE_ON_CHANGE_BEFORE_PAYMENT: f64 = 0.15;

/// Whether the demo's customers answer when their order's price rose past
/// the tolerance: the product's day, unless a test breaks it on purpose to
/// see orders left open at the end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Replies {
    /// Each replies after a while (between [`REPLY_AFTER_MIN`] and
    /// [`REPLY_AFTER_MAX`]), most accepting ([`ACCEPT_NEW_PRICE`]).
    #[default]
    Answer,
    /// None replies: asked, the customer stops following the order.
    Never,
}

/// How often a customer whose order is held reads their cart to see how
/// the booking stands (as they would open the message telling them).
pub(crate) const ORDER_CHECK_EVERY: Duration = Duration::from_secs(300);
/// A customer asked about a new price replies after a delay drawn between
/// these, evenly on a log scale: half within about 20 minutes, a few after
/// hours.
pub(crate) const REPLY_AFTER_MIN: Duration = Duration::from_secs(120);
pub(crate) const REPLY_AFTER_MAX: Duration = Duration::from_secs(3 * 3600);
/// The share of replies that accept the new price; the others decline.
pub(crate) const ACCEPT_NEW_PRICE: f64 = 0.85;
/// The longest a customer follows an order: its reply's deadline (a day).
const FOLLOW_FOR: Duration = Duration::from_secs(24 * 3600);

/// One search as the customer saw it.
#[derive(Debug, Clone)]
pub(crate) struct SearchSeen {
    pub at: Duration,
    pub phase: Phase,
    pub latency: Duration,
    pub status: u16,
    pub source: Option<String>,
    pub age_s: Option<u64>,
    /// A 200 with no sailings.
    pub empty: bool,
    /// The same question was answered before the outage.
    pub seen_before_outage: bool,
    pub label: String,
}

/// One cart as the customer saw it.
#[derive(Debug, Clone)]
pub(crate) struct CartSeen {
    pub started: Duration,
    pub phase: Phase,
    /// Some answer showed the cart in its off-sale state.
    pub degraded: bool,
    pub reached_payment: Option<Duration>,
    pub on_cached_price: bool,
    /// Answers that showed a changed price (an old and a new price).
    pub price_changes: u32,
    /// The step at which a change was first shown (`confirm` is payment).
    pub first_change_at: Option<&'static str>,
    /// The customer left after being shown a changed price.
    pub left_on_price_change: bool,
    /// Payment showed a price for the cart's choices for the first time
    /// (`price_to_confirm`) that differs from the last one the customer saw
    /// (the cart's, else the search's fare).
    pub first_priced_at_payment: bool,
    /// The customer left when shown that price.
    pub left_on_first_price_at_payment: bool,
    /// The last price the customer saw, in cents.
    pub last_price_cents: Option<i64>,
    pub price_age_s: Option<u64>,
    pub stopped: Option<String>,
    pub label: String,
}

#[derive(Debug, Default)]
pub(crate) struct Observed {
    pub searches: Vec<SearchSeen>,
    pub carts: Vec<CartSeen>,
    answered_before_outage: HashSet<String>,
}

/// What customers share: the handlers and the notebook.
pub(crate) struct Shop {
    pub search: Arc<Search>,
    pub carts: Arc<CartService>,
    pub observed: Mutex<Observed>,
    pub script: Script,
    pub start: Instant,
    /// What the HTTP API and Lambda charge each call.
    pub http: HttpFunction,
}

impl Shop {
    /// A search through the HTTP API.
    pub async fn search(&self, request: &HttpRequest) -> Reply {
        self.http.call(self.search.handle(request)).await
    }

    /// A cart step through the HTTP API.
    pub async fn cart(&self, request: &HttpRequest) -> Reply {
        self.http.call(self.carts.handle(request)).await
    }

    pub fn observed(&self) -> MutexGuard<'_, Observed> {
        // Entries are pushed whole: a poisoned lock still holds good data.
        self.observed.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now(&self) -> Duration {
        self.start.elapsed()
    }
}

/// One customer, from search to payment.
pub(crate) async fn customer(shop: Arc<Shop>, seed: u64) {
    let mut rng = SimRng::new(seed);
    let (from, to) = ROUTES[pick(&mut rng, ROUTES.len())];
    let day = 2 + pick(&mut rng, DAYS_AHEAD as usize);
    let date = format!("2026-12-{day:02}");
    let passengers = (1 + pick(&mut rng, 4)).to_string();
    let key = format!("{from}-{to} {date} x{passengers}");

    let started = shop.now();
    let phase = Phase::at(&shop.script, started);
    let began = Instant::now();
    let reply = shop
        .search(&HttpRequest::get(
            "/sailings",
            &[
                ("operator", OPERATOR),
                ("from", from),
                ("to", to),
                ("date", &date),
                ("passengers", &passengers),
            ],
        ))
        .await;
    let latency = began.elapsed();
    let sailings: Vec<Value> = reply.body["sailings"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    {
        let mut observed = shop.observed();
        let seen_before_outage = observed.answered_before_outage.contains(&key);
        if phase == Phase::Healthy && reply.status == 200 {
            observed.answered_before_outage.insert(key.clone());
        }
        observed.searches.push(SearchSeen {
            at: started,
            phase,
            latency,
            status: reply.status,
            source: reply.body["source"].as_str().map(str::to_owned),
            age_s: reply.body["age_s"].as_u64(),
            empty: reply.status == 200 && sailings.is_empty(),
            seen_before_outage,
            label: key.clone(),
        });
    }
    if reply.status != 200 || sailings.is_empty() || rng.next_f64() >= shop.script.cart_share {
        return;
    }
    let sailing = &sailings[pick(&mut rng, sailings.len())];
    let new_cart = json!({
        "operator": OPERATOR,
        "sailing_id": sailing["sailing_id"],
        "from": from, "to": to, "date": date,
        "passengers": passengers.parse::<u8>().unwrap_or(1),
    });
    let mut seen = CartSeen {
        started,
        phase,
        degraded: false,
        reached_payment: None,
        on_cached_price: false,
        price_changes: 0,
        first_change_at: None,
        left_on_price_change: false,
        first_priced_at_payment: false,
        left_on_first_price_at_payment: false,
        last_price_cents: sailing["price_cents"].as_i64(),
        price_age_s: None,
        stopped: None,
        label: format!(
            "{} x{passengers}",
            sailing["sailing_id"].as_str().unwrap_or("?")
        ),
    };
    // Whether the customer leaves on a price change is drawn from a stream of
    // its own, so the model changes no other choice of the day.
    let mut mood = SimRng::new(seed ^ 0x5EED_0F5C_0C4E_D00D);
    let held = run_cart(&shop, &mut rng, &mut mood, &new_cart, &mut seen).await;
    shop.observed().carts.push(seen);
    if let Some(id) = held {
        // The replies too: no other choice of the day moves with them.
        let mut answers = SimRng::new(seed ^ 0x0DE2_5EED_A5C0_FFEE);
        follow_order(&shop, &id, &mut answers).await;
    }
}

/// A customer whose order was held follows it through their cart until it
/// ends (booked, refunded or parked). Asked about a new price, they reply
/// after a while, accepting it or not; a reply that finds the order moved
/// meanwhile (409) is followed by another read. With [`Replies::Never`]
/// the customer stops at the question and the order waits.
async fn follow_order(shop: &Shop, id: &str, answers: &mut SimRng) {
    let cart = format!("/carts/{id}");
    let since = Instant::now();
    while since.elapsed() < FOLLOW_FOR {
        tokio::time::sleep(ORDER_CHECK_EVERY).await;
        let read = shop.cart(&HttpRequest::get(&cart, &[])).await;
        let order = &read.body["order"];
        match order["state"].as_str() {
            Some("booked" | "refunded" | "parked") => return,
            Some("ask_customer") => {
                if shop.script.replies == Replies::Never {
                    return;
                }
                let Some(price) = order["price_cents"].as_i64() else {
                    continue;
                };
                tokio::time::sleep(reply_after(answers)).await;
                let accept = answers.next_f64() < ACCEPT_NEW_PRICE;
                let replied = shop
                    .cart(&HttpRequest::with_json(
                        "POST",
                        &format!("{cart}/order"),
                        &json!({"accept": accept, "price_cents": price}),
                    ))
                    .await;
                if replied.status != 200 {
                    tracing::debug!(status = replied.status, reason = ?replied.body["reason"].as_str(), "a reply changed nothing: the order is read again");
                }
            }
            // Held, booking, or a read that failed: look again later.
            _ => {}
        }
    }
}

/// How long a customer takes to reply: between [`REPLY_AFTER_MIN`] and
/// [`REPLY_AFTER_MAX`], evenly on a log scale.
fn reply_after(answers: &mut SimRng) -> Duration {
    let (min, max) = (REPLY_AFTER_MIN.as_secs_f64(), REPLY_AFTER_MAX.as_secs_f64());
    Duration::from_secs_f64(min * (max / min).powf(answers.next_f64()))
}

/// A cart through its steps to payment, as far as the customer goes: the
/// cart's id if its confirm held an order.
async fn run_cart(
    shop: &Shop,
    rng: &mut SimRng,
    mood: &mut SimRng,
    new_cart: &Value,
    seen: &mut CartSeen,
) -> Option<String> {
    let opened = shop
        .cart(&HttpRequest::with_json("POST", "/carts", new_cart))
        .await;
    note(seen, &opened);
    if opened.status != 201 {
        seen.stopped = Some(format!("cart not opened: {}", opened.status));
        return None;
    }
    let Some(id) = opened.body["cart_id"].as_str().map(str::to_owned) else {
        seen.stopped = Some("cart without id".into());
        return None;
    };
    think(rng, 10, 40).await;
    let steps = [
        ("PUT", "accommodation", json!({"code": "cabin"})),
        ("PUT", "extras", json!({"codes": ["breakfast"]})),
        ("POST", "price", json!({})),
    ];
    for (method, step, body) in steps {
        let reply = shop
            .cart(&HttpRequest::with_json(
                method,
                &format!("/carts/{id}/{step}"),
                &body,
            ))
            .await;
        let left = shown_change(seen, mood, &reply, step);
        note(seen, &reply);
        if left {
            return None;
        }
        // 409 off sale: the step was decided for the customer; go on.
        // 503 on price: confirm will try again.
    }
    think(rng, 20, 90).await;
    for _ in 0..6 {
        let reply = shop
            .cart(&HttpRequest::with_json(
                "POST",
                &format!("/carts/{id}/confirm"),
                &json!({}),
            ))
            .await;
        let left =
            shown_change(seen, mood, &reply, "confirm") || shown_first_price(seen, mood, &reply);
        note(seen, &reply);
        if left {
            return None;
        }
        match reply.status {
            200 => {
                seen.reached_payment = Some(shop.now());
                seen.on_cached_price = reply.body["confirmation"]["on_cached_price"] == true;
                seen.price_age_s = reply.body["price"]["age_s"].as_u64();
                return reply.body.get("booking").map(|_| id.clone());
            }
            409 if reply.body.get("price_changed").is_some() => {
                // Shown the old and new price, and stayed: confirm again.
            }
            409 if reply.body.get("price_to_confirm").is_some() => {
                // Shown a price for the first time; the customer accepts.
            }
            503 => {
                let wait = reply.body["retry_after_s"].as_u64().unwrap_or(10).min(60);
                tokio::time::sleep(Duration::from_secs(wait)).await;
            }
            status => {
                seen.stopped = Some(format!(
                    "confirm answered {status}: {}",
                    reply.body["detail"].as_str().unwrap_or("")
                ));
                return None;
            }
        }
    }
    seen.stopped = Some("gave up confirming".into());
    None
}

fn note(seen: &mut CartSeen, reply: &Reply) {
    // A 409 that shows a price carries the cart as its `cart` member.
    let cart = reply.body.get("cart").unwrap_or(&reply.body);
    if cart.get("degraded").is_some_and(|d| !d.is_null()) {
        seen.degraded = true;
    }
    if let Some(cents) = cart["price"]["amount_cents"].as_i64() {
        seen.last_price_cents = Some(cents);
    }
}

/// Whether `reply` showed the customer a changed price at `step` and the
/// customer left over it (the model's shares above). A drop is news nobody
/// leaves over, and one shown with a confirmation is already paid.
fn shown_change(seen: &mut CartSeen, mood: &mut SimRng, reply: &Reply, step: &'static str) -> bool {
    let Some(change) = reply.body.get("price_changed") else {
        return false;
    };
    seen.price_changes += 1;
    if reply.status == 200 && step == "confirm" || change["difference_cents"].as_i64() < Some(0) {
        return false;
    }
    seen.first_change_at.get_or_insert(step);
    if leaves(mood, step) {
        seen.left_on_price_change = true;
        seen.stopped = Some(format!("left when shown a changed price at {step}"));
        return true;
    }
    false
}

/// Whether payment showed a price for the cart's choices for the first time
/// that is not the last one the customer saw (a choice step could not price
/// them), and the customer left over it, as over a change at payment.
fn shown_first_price(seen: &mut CartSeen, mood: &mut SimRng, reply: &Reply) -> bool {
    let Some(cents) = reply.body["price_to_confirm"]["amount_cents"].as_i64() else {
        return false;
    };
    if seen.last_price_cents == Some(cents) {
        return false;
    }
    seen.first_priced_at_payment = true;
    if leaves(mood, "confirm") {
        seen.left_on_first_price_at_payment = true;
        seen.stopped = Some("left when first shown the price at payment".into());
        return true;
    }
    false
}

/// The customer model's draw: whether a customer shown a change at `step`
/// leaves.
fn leaves(mood: &mut SimRng, step: &'static str) -> bool {
    let leave = if step == "confirm" {
        LEAVE_ON_CHANGE_AT_PAYMENT
    } else {
        LEAVE_ON_CHANGE_BEFORE_PAYMENT
    };
    mood.next_f64() < leave
}

async fn think(rng: &mut SimRng, min_s: u64, max_s: u64) {
    let span = max_s.saturating_sub(min_s) as f64;
    let secs = min_s as f64 + rng.next_f64() * span;
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
}

fn pick(rng: &mut SimRng, n: usize) -> usize {
    usize::try_from(rng.next_u64() % n.max(1) as u64).unwrap_or(0)
}
