//! Customers of the local suite: searches at a steady rate over HTTP (the
//! routes `LifeboatHttpApi` serves), some of which go on through a cart to
//! payment, so an outage has someone to hurt and the breaker has calls to
//! judge. A cart confirmed while the operator cannot book (off sale, or its
//! price not asked live) holds an order, which the booking worker books
//! once the operator is back.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lifeboat_local::suite::{ApiReply, LocalSuite};
use lifeboat_operator::SimRng;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use crate::marketplace::ROUTES;

/// Travel dates: from tomorrow, this many days. With 8 routes and 1 or 2
/// passengers that is 48 questions, so most are asked again while their
/// last answer is still cached, as on a busy marketplace.
const DAYS_AHEAD: i64 = 3;

#[derive(Debug, Clone)]
pub struct TrafficConfig {
    pub operator: String,
    /// Searches per second.
    pub rate: f64,
    /// Share of answered searches that open a cart.
    pub cart_share: f64,
    /// Customers in flight at most; beyond it a search is skipped (and
    /// counted), so a hanging suite is not buried under queued requests.
    pub max_in_flight: usize,
    pub seed: u64,
}

/// What the customers saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrafficCounts {
    pub searches: u64,
    pub fresh: u64,
    pub live: u64,
    pub last_good: u64,
    /// 503: nothing to show yet for this question.
    pub unavailable: u64,
    /// Any other status, or no reply.
    pub errors: u64,
    pub skipped: u64,
    pub carts: u64,
    pub carts_degraded: u64,
    pub carts_paid: u64,
    pub carts_on_cached_price: u64,
    pub carts_stopped: u64,
    /// Confirms whose answer held an order (`booking` held or on request).
    pub carts_held: u64,
}

impl TrafficCounts {
    /// One line: `searches 40 (fresh 22, live 10, last_good 6, unavailable 2)…`.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "searches {} (fresh {}, live {}, last_good {}, unavailable {}",
            self.searches, self.fresh, self.live, self.last_good, self.unavailable
        );
        if self.errors > 0 {
            s.push_str(&format!(", errors {}", self.errors));
        }
        if self.skipped > 0 {
            s.push_str(&format!(", skipped {}", self.skipped));
        }
        s.push_str(&format!(
            "); carts {} (degraded {}, paid {}, on cached price {}",
            self.carts, self.carts_degraded, self.carts_paid, self.carts_on_cached_price
        ));
        if self.carts_stopped > 0 {
            s.push_str(&format!(", stopped {}", self.carts_stopped));
        }
        if self.carts_held > 0 {
            s.push_str(&format!(", order held {}", self.carts_held));
        }
        s.push(')');
        s
    }

    /// The counts since `earlier`.
    pub fn since(&self, earlier: &TrafficCounts) -> TrafficCounts {
        TrafficCounts {
            searches: self.searches - earlier.searches,
            fresh: self.fresh - earlier.fresh,
            live: self.live - earlier.live,
            last_good: self.last_good - earlier.last_good,
            unavailable: self.unavailable - earlier.unavailable,
            errors: self.errors - earlier.errors,
            skipped: self.skipped - earlier.skipped,
            carts: self.carts - earlier.carts,
            carts_degraded: self.carts_degraded - earlier.carts_degraded,
            carts_paid: self.carts_paid - earlier.carts_paid,
            carts_on_cached_price: self.carts_on_cached_price - earlier.carts_on_cached_price,
            carts_stopped: self.carts_stopped - earlier.carts_stopped,
            carts_held: self.carts_held - earlier.carts_held,
        }
    }
}

/// One search: when it was asked and how long its answer took over HTTP
/// (any answer, or none: a search with no reply counts until it failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SearchTime {
    pub asked: Instant,
    pub took: Duration,
}

/// The customers, running; see the module docs.
#[derive(Debug)]
pub struct Traffic {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    counts: Arc<Mutex<TrafficCounts>>,
    times: Arc<Mutex<Vec<SearchTime>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Counters and times pushed whole: a poisoned lock still holds good data.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Traffic {
    pub fn start(gateway: Arc<LocalSuite>, config: TrafficConfig) -> Self {
        let counts = Arc::new(Mutex::new(TrafficCounts::default()));
        let times = Arc::new(Mutex::new(Vec::new()));
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(run(
            gateway,
            config,
            Arc::clone(&counts),
            Arc::clone(&times),
            stopped,
        ));
        Self {
            stop,
            task,
            counts,
            times,
        }
    }

    pub fn counts(&self) -> TrafficCounts {
        lock(&self.counts).clone()
    }

    /// Stop sending, give the customers in flight up to 10 s, and return
    /// the counts and every search's answer time.
    pub async fn stop(self) -> (TrafficCounts, Vec<SearchTime>) {
        self.stop.send_replace(true);
        let mut task = self.task;
        if tokio::time::timeout(Duration::from_secs(15), &mut task)
            .await
            .is_err()
        {
            task.abort();
        }
        let times = std::mem::take(&mut *lock(&self.times));
        (lock(&self.counts).clone(), times)
    }
}

async fn run(
    gateway: Arc<LocalSuite>,
    config: TrafficConfig,
    counts: Arc<Mutex<TrafficCounts>>,
    times: Arc<Mutex<Vec<SearchTime>>>,
    mut stopped: watch::Receiver<bool>,
) {
    let mut rng = SimRng::new(config.seed);
    let slots = Arc::new(Semaphore::new(config.max_in_flight.max(1)));
    let every = Duration::from_secs_f64(1.0 / config.rate.max(0.01));
    let mut interval = tokio::time::interval(every);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut customers = JoinSet::new();
    loop {
        tokio::select! {
            _ = stopped.wait_for(|s| *s) => break,
            _ = interval.tick() => {}
        }
        while customers.try_join_next().is_some() {}
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            lock(&counts).skipped += 1;
            continue;
        };
        let seed = rng.next_u64();
        let wants_cart = rng.next_f64() < config.cart_share;
        let (gateway, counts, times, operator) = (
            Arc::clone(&gateway),
            Arc::clone(&counts),
            Arc::clone(&times),
            config.operator.clone(),
        );
        customers.spawn(async move {
            customer(&gateway, &operator, seed, wants_cart, &counts, &times).await;
            drop(slot);
        });
    }
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        while customers.join_next().await.is_some() {}
    })
    .await;
}

fn pick(rng: &mut SimRng, n: usize) -> usize {
    usize::try_from(rng.next_u64() % n.max(1) as u64).unwrap_or(0)
}

async fn customer(
    gateway: &LocalSuite,
    operator: &str,
    seed: u64,
    wants_cart: bool,
    counts: &Mutex<TrafficCounts>,
    times: &Mutex<Vec<SearchTime>>,
) {
    let mut rng = SimRng::new(seed);
    let (from, to) = ROUTES[pick(&mut rng, ROUTES.len())];
    let days = 1 + i64::try_from(pick(&mut rng, DAYS_AHEAD as usize)).unwrap_or(0);
    let date = (chrono::Utc::now().date_naive() + chrono::Days::new(days.unsigned_abs()))
        .format("%Y-%m-%d")
        .to_string();
    let passengers = 1 + pick(&mut rng, 2);
    let path = format!(
        "/sailings?operator={operator}&from={from}&to={to}&date={date}&passengers={passengers}"
    );
    let asked = Instant::now();
    let reply = gateway.api("GET", &path, None).await;
    lock(times).push(SearchTime {
        asked,
        took: asked.elapsed(),
    });
    let sailings = {
        let mut c = lock(counts);
        c.searches += 1;
        match &reply {
            Ok(r) if r.status == 200 => match r.body["source"].as_str() {
                Some("fresh") => c.fresh += 1,
                Some("live") => c.live += 1,
                Some("last_good") => c.last_good += 1,
                _ => c.errors += 1,
            },
            Ok(r) if r.status == 503 => c.unavailable += 1,
            Ok(r) => {
                tracing::warn!(status = r.status, body = %r.body, "search answered with an error");
                c.errors += 1;
            }
            Err(e) => {
                tracing::warn!(error = %e, "search not answered");
                c.errors += 1;
            }
        }
        reply
            .ok()
            .filter(|r| r.status == 200)
            .and_then(|r| r.body["sailings"].as_array().cloned())
            .unwrap_or_default()
    };
    if !wants_cart || sailings.is_empty() {
        return;
    }
    let sailing = &sailings[pick(&mut rng, sailings.len())];
    let new_cart = json!({
        "operator": operator, "sailing_id": sailing["sailing_id"],
        "from": from, "to": to, "date": date, "passengers": passengers,
    });
    let outcome = cart(gateway, &new_cart).await;
    let mut c = lock(counts);
    c.carts += 1;
    c.carts_degraded += u64::from(outcome.degraded);
    match outcome.paid {
        Some(on_cached_price) => {
            c.carts_paid += 1;
            c.carts_on_cached_price += u64::from(on_cached_price);
        }
        None => c.carts_stopped += 1,
    }
    c.carts_held += u64::from(outcome.held);
}

struct CartOutcome {
    degraded: bool,
    /// Paid, and whether on a cached price.
    paid: Option<bool>,
    /// The confirm held an order for the booking worker.
    held: bool,
}

/// Whether a confirm's answer says an order was held
/// (docs/orders.md, "Holding an order").
fn held_order(reply: &ApiReply) -> bool {
    matches!(
        reply.body["booking"]["status"].as_str(),
        Some("held" | "on_request")
    )
}

fn degraded(reply: &ApiReply) -> bool {
    reply.body.get("degraded").is_some_and(|d| !d.is_null())
}

/// Open a cart, choose, price and confirm, accepting shown prices; off sale
/// the cart decides for the customer and they go on.
async fn cart(gateway: &LocalSuite, new_cart: &Value) -> CartOutcome {
    let mut outcome = CartOutcome {
        degraded: false,
        paid: None,
        held: false,
    };
    let Ok(opened) = gateway.api("POST", "/carts", Some(new_cart)).await else {
        return outcome;
    };
    outcome.degraded |= degraded(&opened);
    let Some(id) = opened.body["cart_id"]
        .as_str()
        .filter(|_| opened.status == 201)
    else {
        tracing::warn!(status = opened.status, body = %opened.body, "cart not opened");
        return outcome;
    };
    for (method, step, body) in [
        ("PUT", "accommodation", json!({"code": "cabin"})),
        ("PUT", "extras", json!({"codes": ["breakfast"]})),
        ("POST", "price", json!({})),
    ] {
        if let Ok(reply) = gateway
            .api(method, &format!("/carts/{id}/{step}"), Some(&body))
            .await
        {
            outcome.degraded |= degraded(&reply);
        }
    }
    for _ in 0..4 {
        let Ok(reply) = gateway
            .api("POST", &format!("/carts/{id}/confirm"), Some(&json!({})))
            .await
        else {
            return outcome;
        };
        outcome.degraded |= degraded(&reply);
        match reply.status {
            200 => {
                outcome.paid = Some(reply.body["confirmation"]["on_cached_price"] == true);
                outcome.held = held_order(&reply);
                return outcome;
            }
            // A changed or first-seen price: the customer accepts it.
            409 => {}
            503 => {
                let wait = reply.body["retry_after_s"].as_u64().unwrap_or(5).min(5);
                tokio::time::sleep(Duration::from_secs(wait)).await;
            }
            status => {
                tracing::warn!(status, body = %reply.body, "cart confirm refused");
                return outcome;
            }
        }
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_subtract_and_summarise() {
        let later = TrafficCounts {
            searches: 10,
            fresh: 4,
            live: 3,
            last_good: 2,
            unavailable: 1,
            carts: 2,
            carts_paid: 1,
            carts_stopped: 1,
            carts_held: 1,
            ..TrafficCounts::default()
        };
        let earlier = TrafficCounts {
            searches: 4,
            fresh: 4,
            ..TrafficCounts::default()
        };
        let d = later.since(&earlier);
        assert_eq!((d.searches, d.fresh, d.live), (6, 0, 3));
        assert_eq!(
            d.summary(),
            "searches 6 (fresh 0, live 3, last_good 2, unavailable 1); carts 2 (degraded 0, paid 1, on cached price 0, stopped 1, order held 1)"
        );
        assert_eq!(
            TrafficCounts::default().summary(),
            "searches 0 (fresh 0, live 0, last_good 0, unavailable 0); carts 0 (degraded 0, paid 0, on cached price 0)",
            "no held order, no mention"
        );
    }
}
