//! The six functions wired in memory, and the loop that plays AWS between
//! them: the stream mapping, the rules, the schedule and the SQS mapping.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cart::CartService;
use chrono::TimeDelta;
use lifeboat_core::OperatorId;
use lifeboat_core::cart::{CartPolicy, CartSettings};
use lifeboat_core::events::{LifeboatEvent, SaleStatus};
use lifeboat_core::memory::{
    MemoryCartStore, MemoryQueue, MemorySaleStatusStore, MemorySaleSwitch, SwitchOutcome,
};
use lifeboat_core::ports::Clock;
use lifeboat_core::request::OutcomeKind;
use lifeboat_core::retry::RetrySchedule;
use lifeboat_core::sale::{OnSaleAt, WritePolicy};
use lifeboat_lookup::Lookup;
use lifeboat_operator::{Outage, PriceDrift, SimConfig, SimulatedOperator};
use lifeboat_sim::offsale::{InTransit, deliver, rule_message};
use lifeboat_sim::{MemorySuite, MemorySuiteConfig, TokioClock};
use offsale_listener::OffsaleListener;
use search::Search;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::customer::{OPERATOR, Observed, Shop, customer};
use super::report::{self, Report};
use super::{Phase, Script};

/// How often the loop looks again when nothing was delivered.
const IDLE: Duration = Duration::from_millis(50);
/// How long the stream and queue keep running after the last customer.
const DRAIN: Duration = Duration::from_secs(20);

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

pub(crate) struct Suite {
    script: Script,
    clock: Arc<TokioClock>,
    sim: SimulatedOperator,
    gateway: MemorySuite,
    shop: Arc<Shop>,
    /// The Carts table the cart function writes.
    carts: Arc<MemoryCartStore>,
    desk: SaleDesk,
    /// The legacy switch refuses the first write after the first off-sale
    /// write (to show the retry schedule); set once.
    switch_failure_armed: bool,
}

impl Suite {
    pub fn new(script: &Script) -> Self {
        let clock = Arc::new(TokioClock::starting_at(script.start));
        let operator = OperatorId::new(OPERATOR).unwrap_or_else(|e| unreachable!("{e}"));
        let start = script.start;
        let at = |d: Duration| start + TimeDelta::from_std(d).unwrap_or(TimeDelta::MAX);
        let sim = SimulatedOperator::new(
            operator.clone(),
            SimConfig {
                seed: script.seed,
                outages: vec![Outage {
                    start: at(script.outage_start()),
                    end: at(script.outage_end()),
                    mode: script.mode,
                }],
                price_drift: Some(PriceDrift {
                    start,
                    every: Duration::from_secs(240),
                    percent: 1.0,
                }),
                ..SimConfig::default()
            },
            clock.clone(),
        );
        let gateway = MemorySuite::new(
            Arc::new(sim.clone()),
            clock.clone(),
            MemorySuiteConfig {
                operators: vec![operator.clone()],
                settings: script.settings.clone(),
                ..MemorySuiteConfig::in_world(script.world, script.seed)
            },
        );
        gateway.requests.set_condition(script.outcome_condition);
        let lookup = || {
            Lookup::new(
                gateway.requests_port(),
                gateway.cache_port(),
                gateway.breakers_port(),
                clock.clone(),
                script.settings.clone(),
            )
            .with_metrics(gateway.metrics.clone())
        };
        let operators = BTreeSet::from([operator]);
        let desk = SaleDesk::new(&gateway, clock.clone());
        let carts = Arc::new(MemoryCartStore::new());
        let shop = Arc::new(Shop {
            search: Arc::new(Search {
                lookup: lookup(),
                operators: operators.clone(),
            }),
            carts: Arc::new(CartService {
                carts: gateway.charged(carts.clone()),
                sale: gateway.charged(desk.store.clone()),
                lookup: lookup(),
                operators,
                settings: CartSettings {
                    default: CartPolicy {
                        absorb_rise_percent: script.absorb_rise_percent,
                        ..CartPolicy::default()
                    },
                    ..CartSettings::default()
                },
            }),
            observed: Mutex::new(Observed::default()),
            script: script.clone(),
            start: Instant::now(),
            http: gateway.http_function(),
        });
        Self {
            script: script.clone(),
            clock,
            sim,
            gateway,
            shop,
            carts,
            desk,
            switch_failure_armed: false,
        }
    }

    pub async fn run(mut self) -> Report {
        let traffic = tokio::spawn(traffic(self.shop.clone(), self.script.clone()));
        let mut armed = self.switch_failure_armed;
        self.desk
            .play(&mut self.gateway, traffic, |desk| {
                // The legacy switch refuses the first write after the first
                // off-sale write.
                if !armed {
                    let off = desk.switch.writes().iter().any(|w| {
                        w.status == SaleStatus::OffSale && w.outcome == SwitchOutcome::Accepted
                    });
                    if off {
                        desk.switch.fail_next(1);
                        armed = true;
                    }
                }
            })
            .await;
        self.switch_failure_armed = armed;
        let mut report = report::build(report::Inputs {
            script: &self.script,
            start: self.script.start,
            ended: self.clock.now(),
            transitions: &self.gateway.transitions,
            switch_writes: &self.desk.switch.writes(),
            requests: self.gateway.requests.counts(),
            discarded: self.gateway.discarded.len(),
            operator_calls: self.sim.stats().total,
            probe_calls: self.gateway.probe_calls(),
            answered_too_late: self.answered_too_late(),
            events: &self.gateway.bus.events(),
            observed: &self.shop.observed(),
            carts: &self.carts.all(),
        });
        report.aws = self.gateway.aws_counts();
        report
    }

    /// Requests per phase answered within the budget after their deadline.
    fn answered_too_late(&self) -> BTreeMap<Phase, usize> {
        let settings = &self.script.settings;
        let mut late = BTreeMap::new();
        for stored in self.gateway.requests.all() {
            let Some(outcome) = &stored.outcome else {
                continue;
            };
            let request = &stored.request;
            let budget = settings
                .for_operator(&request.operator)
                .budgets
                .for_operation(request.operation)
                .timeout;
            let in_budget = outcome
                .call_ms
                .is_some_and(|ms| u128::from(ms) <= budget.as_millis());
            if matches!(outcome.kind, OutcomeKind::Answered { .. })
                && in_budget
                && outcome.at > request.deadline
            {
                let since = (request.created_at - self.script.start)
                    .to_std()
                    .unwrap_or_default();
                *late.entry(Phase::at(&self.script, since)).or_insert(0) += 1;
            }
        }
        late
    }
}

/// Customers arriving through the day, at the script's rates; returns when
/// the last one is done.
async fn traffic(shop: Arc<Shop>, script: Script) {
    let mut customers = JoinSet::new();
    let mut n: u64 = 0;
    loop {
        let t = shop.start.elapsed();
        if t >= script.end() {
            break;
        }
        let rate = match super::Phase::at(&script, t) {
            super::Phase::Outage => script.searches_per_s * script.outage_traffic,
            _ => script.searches_per_s,
        };
        n += 1;
        customers.spawn(customer(
            shop.clone(),
            script.seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15),
        ));
        tokio::time::sleep(Duration::from_secs_f64(1.0 / rate.max(0.01))).await;
    }
    while let Some(done) = customers.join_next().await {
        if let Err(e) = done {
            tracing::error!(error = %e, "a demo customer failed");
        }
    }
}
