//! The campaign's buyers: customers who go straight to payment, so that
//! carts are confirmed while operators are off sale or their breakers open
//! and the booking worker has held orders to book through the faults. Each
//! asks a question the operator was asked before (so an outage answers it
//! from the cache), opens a cart on the first sailing shown and confirms
//! it, through the search and cart handlers as the HTTP API calls them.

use std::sync::Arc;
use std::time::Duration;

use cart::CartService;
use chrono::TimeDelta;
use lifeboat_core::OperatorId;
use lifeboat_lookup::http::HttpRequest;
use lifeboat_operator::SimRng;
use lifeboat_sim::HttpFunction;
use search::Search;
use serde_json::json;
use tokio::task::JoinSet;

use super::ChaosScript;
use crate::marketplace::ROUTES;

/// The questions each operator's buyers ask: a few, asked again and again,
/// so the cache holds their last good answer when the operator is down.
const QUESTIONS: u64 = 6;
/// The most times a buyer asks to confirm (a price shown for the first
/// time, or changed, is accepted; a 503 is waited out).
const CONFIRMS: usize = 6;
/// The longest a buyer waits on a 503's `retry_after_s`.
const LONGEST_WAIT: Duration = Duration::from_secs(60);

/// The handlers a buyer calls, through the HTTP API.
pub(super) struct Till {
    pub search: Arc<Search>,
    pub carts: Arc<CartService>,
    pub http: HttpFunction,
}

/// Buyers arriving at the rate that makes `script.carts` of them over the
/// traffic's length, each to an operator chosen at random.
pub(super) async fn buyers(script: ChaosScript, operators: Vec<OperatorId>, till: Arc<Till>) {
    let mut rng = SimRng::new(script.seed ^ 0xB0_7E25);
    let rate = script.carts as f64 / script.traffic_for().as_secs_f64().max(1.0);
    let mut visits = JoinSet::new();
    for _ in 0..script.carts {
        let k = usize::try_from(rng.next_u64() % operators.len().max(1) as u64).unwrap_or(0);
        let n = rng.next_u64() % QUESTIONS;
        if let Some(operator) = operators.get(k) {
            let (till, operator, script) = (till.clone(), operator.clone(), script.clone());
            visits.spawn(async move { buy(&till, &operator, &question(&script, n)).await });
        }
        let gap = -(1.0 - rng.next_f64()).ln() / rate.max(0.001);
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
        .call(till.search.handle(&HttpRequest::get(
            "/sailings",
            &[
                ("operator", operator.as_str()),
                ("from", from),
                ("to", to),
                ("date", date),
                ("passengers", passengers),
            ],
        )))
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

/// The `n`-th of an operator's buyers' questions: a few days ahead, two
/// passengers, on the first route.
fn question(script: &ChaosScript, n: u64) -> [String; 4] {
    let (from, to) = ROUTES[0];
    let day = i64::try_from(3 + n).unwrap_or(3);
    let date = script.start + TimeDelta::days(day);
    [
        from.to_owned(),
        to.to_owned(),
        date.format("%Y-%m-%d").to_string(),
        "2".to_owned(),
    ]
}
