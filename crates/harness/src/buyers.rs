//! Buyers: customers who go straight to payment, so that carts are
//! confirmed while operators are off sale or their breakers open and the
//! booking worker has held orders to book (`lifeboat chaos` and `lifeboat
//! fleet`; the demo's customers are [`crate::demo`]'s own). Each asks a
//! question its operator's buyers asked before (so an outage answers it from
//! the cache), opens a cart on the first sailing shown and confirms it,
//! through the search and cart handlers as the HTTP API calls them;
//! [`orders`] counts what became of the orders they held.

pub mod orders;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use cart::CartService;
use chrono::{DateTime, TimeDelta, Utc};
use lifeboat_core::OperatorId;
use lifeboat_core::cart::CartSettings;
use lifeboat_core::memory::{MemoryCartStore, MemoryOrderStore};
use lifeboat_core::ports::{EventPublisher, SaleStatusStore};
use lifeboat_lookup::Lookup;
use lifeboat_lookup::http::HttpRequest;
use lifeboat_operator::SimRng;
use lifeboat_sim::{HttpFunction, MemorySuite};
use search::Search;
use serde_json::json;
use tokio::task::JoinSet;

use crate::marketplace::{ROUTES, sailings_request};

/// The questions each operator's buyers ask: a few, asked again and again,
/// so the cache holds their last good answer when the operator is down.
const QUESTIONS: u64 = 6;
/// The most times a buyer asks to confirm (a price shown for the first
/// time, or changed, is accepted; a 503 is waited out).
const CONFIRMS: usize = 6;
/// The longest a buyer waits on a 503's `retry_after_s`.
const LONGEST_WAIT: Duration = Duration::from_secs(60);

/// The handlers a buyer calls, through the HTTP API.
pub(crate) struct Till {
    pub search: Arc<Search>,
    pub carts: Arc<CartService>,
    pub http: HttpFunction,
}

/// What the cart reaches beside its lookup: the SaleStatus table and the
/// bus, as the world wraps them.
pub(crate) struct CartPorts {
    pub sale: Arc<dyn SaleStatusStore>,
    pub events: Arc<dyn EventPublisher>,
}

impl Till {
    /// The search and the cart of `operators` on `gateway`, each on its own
    /// `lookup()`, the cart's orders held in `orders`: the search the
    /// customers share, and the till.
    pub(crate) fn open(
        gateway: &MemorySuite,
        lookup: impl Fn() -> Lookup,
        operators: &[OperatorId],
        ports: CartPorts,
        orders: &Arc<MemoryOrderStore>,
    ) -> (Arc<Search>, Arc<Self>) {
        let served = operators.iter().cloned().collect::<BTreeSet<_>>();
        let search = Arc::new(Search {
            lookup: lookup(),
            operators: served.clone(),
        });
        let carts = Arc::new(CartService {
            carts: gateway.charged(Arc::new(MemoryCartStore::new())),
            sale: ports.sale,
            orders: gateway.charged(orders.clone()),
            events: ports.events,
            lookup: lookup(),
            operators: served,
            settings: CartSettings::default(),
        });
        let till = Arc::new(Self {
            search: search.clone(),
            carts,
            http: gateway.http_function(),
        });
        (search, till)
    }
}

/// When buyers come, and to which operators.
#[derive(Debug, Clone)]
pub(crate) struct Arrivals {
    pub seed: u64,
    /// Buyers a second, over the whole marketplace.
    pub per_s: f64,
    /// How long they keep coming.
    pub for_: Duration,
    /// Each operator's share of the buyers, cumulative (the last 1.0);
    /// empty: every operator alike.
    pub shares: Vec<f64>,
    /// The day their dates count from.
    pub start: DateTime<Utc>,
}

/// Buyers arriving as a Poisson stream at `arrivals`' rate, each to an
/// operator drawn by its share; returns when the last one is done.
pub(crate) async fn buyers(arrivals: Arrivals, operators: Vec<OperatorId>, till: Arc<Till>) {
    if arrivals.per_s <= 0.0 || operators.is_empty() {
        return;
    }
    let mut rng = SimRng::new(arrivals.seed ^ 0xB0_7E25);
    let began = tokio::time::Instant::now();
    let mut visits = JoinSet::new();
    while began.elapsed() < arrivals.for_ {
        let u = rng.next_f64();
        let k = if arrivals.shares.is_empty() {
            usize::try_from(rng.next_u64() % operators.len() as u64).unwrap_or(0)
        } else {
            arrivals
                .shares
                .iter()
                .position(|&c| u < c)
                .unwrap_or(operators.len() - 1)
        };
        let n = rng.next_u64() % QUESTIONS;
        if let Some(operator) = operators.get(k) {
            let (till, operator) = (till.clone(), operator.clone());
            let question = question(arrivals.start, n);
            visits.spawn(async move { buy(&till, &operator, &question).await });
        }
        let gap = -(1.0 - rng.next_f64()).ln() / arrivals.per_s;
        tokio::time::sleep(Duration::from_secs_f64(gap)).await;
        while visits.try_join_next().is_some() {}
    }
    while visits.join_next().await.is_some() {}
}

/// One buyer: the search, the cart opened on its first sailing, and the
/// confirm until it is answered.
async fn buy(till: &Till, operator: &OperatorId, question: &[String; 4]) {
    let [from, to, date, passengers] = question;
    let found = till
        .http
        .call(till.search.handle(&sailings_request(operator, question)))
        .await;
    let Some(sailing) = found.body["sailings"]
        .get(0)
        .map(|s| s["sailing_id"].clone())
    else {
        return;
    };
    let new_cart = json!({
        "operator": operator.as_str(), "sailing_id": sailing,
        "from": from, "to": to, "date": date,
        "passengers": passengers.parse::<u8>().unwrap_or(1),
    });
    let opened = cart(till, "POST", "/carts", &new_cart).await;
    let Some(id) = opened.body["cart_id"].as_str().map(str::to_owned) else {
        tracing::debug!(status = opened.status, "a buyer's cart did not open");
        return;
    };
    let confirm = format!("/carts/{id}/confirm");
    for _ in 0..CONFIRMS {
        let reply = cart(till, "POST", &confirm, &json!({})).await;
        match reply.status {
            200 => return,
            // A price shown for the first time, or changed: accepted.
            409 if reply.body.get("price_changed").is_some()
                || reply.body.get("price_to_confirm").is_some() => {}
            503 => {
                let wait = reply.body["retry_after_s"].as_u64().unwrap_or(10);
                tokio::time::sleep(Duration::from_secs(wait).min(LONGEST_WAIT)).await;
            }
            status => {
                tracing::debug!(status, "a buyer's confirm was refused");
                return;
            }
        }
    }
}

async fn cart(
    till: &Till,
    method: &str,
    path: &str,
    body: &serde_json::Value,
) -> lifeboat_lookup::http::Reply {
    till.http
        .call(
            till.carts
                .handle(&HttpRequest::with_json(method, path, body)),
        )
        .await
}

/// The `n`-th of an operator's buyers' questions: a few days after
/// `start`, two passengers, on the first route.
fn question(start: DateTime<Utc>, n: u64) -> [String; 4] {
    let (from, to) = ROUTES[0];
    let day = i64::try_from(3 + n).unwrap_or(3);
    let date = start + TimeDelta::days(day);
    [
        from.to_owned(),
        to.to_owned(),
        date.format("%Y-%m-%d").to_string(),
        "2".to_owned(),
    ]
}
