//! What every simulated marketplace has, whichever command plays it: the
//! routes its customers search ([`ROUTES`]: `demo`, `fleet`, `chaos` and
//! `lifeboat local`) and, in memory, its sale desk ([`SaleDesk`]: `demo`
//! and `fleet`), the off-sale listener with its queue, status table and
//! legacy switch, and the loop that plays AWS between the functions.

use std::sync::Arc;
use std::time::Duration;

use lifeboat_core::OperatorId;
use lifeboat_core::events::LifeboatEvent;
use lifeboat_core::memory::{MemoryQueue, MemorySaleStatusStore, MemorySaleSwitch};
use lifeboat_core::ports::Clock;
use lifeboat_core::retry::RetrySchedule;
use lifeboat_core::sale::{OnSaleAt, WritePolicy};
use lifeboat_lookup::http::HttpRequest;
use lifeboat_sim::offsale::{InTransit, deliver, rule_message};
use lifeboat_sim::{MemorySuite, TokioClock};
use offsale_listener::OffsaleListener;
use tokio::time::Instant;

/// The routes customers search: the demo's, the fleet's, the chaos
/// campaign's and `lifeboat local`'s.
pub(crate) const ROUTES: [(&str, &str); 8] = [
    ("HEL", "TLL"),
    ("TLL", "HEL"),
    ("HEL", "STO"),
    ("STO", "HEL"),
    ("TKU", "STO"),
    ("STO", "RIX"),
    ("RIX", "STO"),
    ("HEL", "MHQ"),
];

/// How often the loop looks again when nothing was delivered.
const IDLE: Duration = Duration::from_millis(50);
/// How long the stream and queue keep running after the last customer.
const DRAIN: Duration = Duration::from_secs(20);

/// `GET /sailings` of `operator` for `question` (from, to, date,
/// passengers), as the HTTP API hands it to the search function.
pub(crate) fn sailings_request(operator: &OperatorId, question: &[String; 4]) -> HttpRequest {
    let [from, to, date, passengers] = question;
    HttpRequest::get(
        "/sailings",
        &[
            ("operator", operator.as_str()),
            ("from", from),
            ("to", to),
            ("date", date),
            ("passengers", passengers),
        ],
    )
}

/// The off-sale side: the listener, its queue, the status table and the
/// legacy switch, in memory.
pub(crate) struct SaleDesk {
    pub listener: OffsaleListener,
    pub queue: Arc<MemoryQueue>,
    pub switch: Arc<MemorySaleSwitch>,
    pub store: Arc<MemorySaleStatusStore>,
    /// Rule messages on their way to the queue.
    in_transit: InTransit,
    clock: Arc<TokioClock>,
}

impl SaleDesk {
    pub fn new(gateway: &MemorySuite, clock: Arc<TokioClock>) -> Self {
        let store = Arc::new(MemorySaleStatusStore::new());
        let switch = Arc::new(MemorySaleSwitch::new(clock.clone()));
        let queue = Arc::new(MemoryQueue::new(clock.clone(), Duration::from_secs(90)));
        let listener = OffsaleListener {
            store: gateway.charged(store.clone()),
            switch: switch.clone(),
            redelivery: queue.clone(),
            events: gateway.charged(gateway.bus.clone()),
            clock: clock.clone(),
            policy: WritePolicy::new(RetrySchedule::default(), Duration::from_secs(2)),
            on_sale_at: OnSaleAt::default(),
            metrics: gateway.metrics.clone(),
            // As deployed: the served operators, confirmed by the breakers.
            trust: offsale_listener::trust::Trust {
                operators: Some(gateway.switch.operators().iter().cloned().collect()),
                breakers: Some(gateway.breakers_port()),
            },
            self_fault: offsale_listener::selffault::SelfFaultRule::default(),
        };
        Self {
            listener,
            queue,
            switch,
            store,
            in_transit: InTransit::new(gateway.aws()),
            clock,
        }
    }

    /// The `Breaker State Changed` rule: every state change on the bus from
    /// `cursor` on to the queue; returns the next cursor.
    pub fn forward_state_changes(&self, gateway: &MemorySuite, cursor: usize) -> usize {
        let (events, next) = gateway.bus.read_from(cursor);
        let now = self.clock.now();
        for event in events {
            if let LifeboatEvent::BreakerStateChanged(change) = event {
                self.in_transit
                    .send(&self.queue, rule_message(&change), now);
            }
        }
        self.in_transit.arrive(&self.queue, now);
        next
    }

    /// The SQS mapping: one batch of visible messages to the listener.
    pub async fn deliver(&self) {
        if let Err(e) = deliver(&self.listener, &self.queue, 10).await {
            tracing::error!(error = %e, "off-sale listener failed the batch");
        }
    }

    /// Play AWS around the functions until the customers of `traffic` are
    /// done and the streams and queue have run [`DRAIN`] longer: the
    /// gateway's stream, rules, schedule and timers, the state-change rule
    /// and the listener's queue. `after_delivery` runs after every round.
    pub async fn play(
        &self,
        gateway: &mut MemorySuite,
        traffic: tokio::task::JoinHandle<()>,
        mut after_delivery: impl FnMut(&SaleDesk),
    ) {
        let mut cursor = 0;
        let mut drained_at: Option<Instant> = None;
        loop {
            let delivered = gateway.step().await;
            cursor = self.forward_state_changes(gateway, cursor);
            self.deliver().await;
            after_delivery(self);
            if traffic.is_finished() {
                let since = *drained_at.get_or_insert_with(Instant::now);
                if since.elapsed() >= DRAIN {
                    break;
                }
            }
            if !delivered {
                tokio::time::sleep(IDLE).await;
            }
        }
        if let Err(e) = traffic.await {
            tracing::error!(error = %e, "customers' task failed");
        }
        gateway.drain().await;
    }
}
