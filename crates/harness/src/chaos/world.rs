//! The campaign's world: the gateway with a fault plan, the off-sale desk,
//! the cart and the booking worker on faulty ports, customers asking new
//! questions, buyers confirming carts, and the loop that plays AWS and
//! samples the truth every second.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use booking_worker::BookingWorker;
use chrono::{DateTime, TimeDelta, Utc};
use lifeboat_core::events::{LifeboatEvent, SaleStatus};
use lifeboat_core::memory::{
    MemoryOrderStore, MemoryQueue, MemorySaleStatusStore, MemorySaleSwitch,
};
use lifeboat_core::order::booking::OrderSettings;
use lifeboat_core::ports::{BreakerStore, Clock, MetricsSink, StreamRouter};
use lifeboat_core::retry::RetrySchedule;
use lifeboat_core::sale::{OnSaleAt, WritePolicy};
use lifeboat_core::{BreakerState, ConsumerTarget, OperatorId};
use lifeboat_lookup::Lookup;
use lifeboat_operator::{Outage, SimConfig, SimRng, SimulatedOperator, SimulatedOperators};
use lifeboat_sim::booking::BookingSchedule;
use lifeboat_sim::fault::{FaultClass, FaultPlan, port};
use lifeboat_sim::offsale::{InTransit, deliver, rule_message};
use lifeboat_sim::{HttpFunction, MemorySuite, MemorySuiteConfig, TokioClock};
use offsale_listener::OffsaleListener;
use search::Search;
use tokio::task::JoinSet;

use super::report::{self, Samples};
use super::{ChaosReport, ChaosScript};
use crate::buyers::orders::{OrdersEnded, Seen as OrdersSeen};
use crate::buyers::{Arrivals, CartPorts, Till, buyers};
use crate::demo::Keys;
use crate::marketplace::{ROUTES, sailings_request};

/// How often the loop looks again when nothing was delivered.
const IDLE: Duration = Duration::from_millis(50);
/// How often the listener's schedule sweeps.
const SWEEP_EVERY: Duration = Duration::from_secs(300);
/// Travel dates asked: within the search's 400-day horizon.
const DAYS: u64 = 390;

pub(super) struct World {
    script: ChaosScript,
    clock: Arc<TokioClock>,
    operators: Vec<OperatorId>,
    gateway: MemorySuite,
    plan: Arc<FaultPlan>,
    listener: OffsaleListener,
    queue: Arc<MemoryQueue>,
    switch: Arc<MemorySaleSwitch>,
    search: Arc<Search>,
    /// The operators, kept to read their desks' bookings at the end.
    sims: Arc<SimulatedOperators>,
    /// The booking calls' keys, as the script's `booking_key` has them.
    keys: Keys,
    /// The cart and the search, as buyers reach them.
    till: Arc<Till>,
    /// The Orders table the cart holds orders in.
    orders: Arc<MemoryOrderStore>,
    booking: Arc<BookingWorker>,
    /// Rule messages on their way to the queue.
    in_transit: InTransit,
}

impl World {
    pub fn new(script: &ChaosScript) -> Self {
        let clock = Arc::new(TokioClock::starting_at(script.start));
        let operators: Vec<OperatorId> = (0..script.operators)
            .filter_map(|k| OperatorId::new(format!("op{:02}", k + 1)).ok())
            .collect();
        let at = |d: Duration| script.start + TimeDelta::from_std(d).unwrap_or(TimeDelta::MAX);
        let outages = script.outages();
        let sims = operators
            .iter()
            .enumerate()
            .map(|(k, operator)| {
                let config = SimConfig {
                    seed: script.seed ^ (k as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                    outages: outages
                        .iter()
                        .filter(|o| o.0 == k)
                        .map(|&(_, mode, start, end)| Outage {
                            start: at(start),
                            end: at(end),
                            mode,
                        })
                        .collect(),
                    ..SimConfig::default()
                };
                SimulatedOperator::new(operator.clone(), config, clock.clone())
            })
            .collect::<SimulatedOperators>();
        let sims = Arc::new(sims);
        let (keys, reached) = Keys::new(script.booking_key, sims.clone());
        let plan = Arc::new(FaultPlan::new(script.seed));
        let gateway = MemorySuite::new(
            reached,
            clock.clone(),
            MemorySuiteConfig {
                operators: operators.clone(),
                settings: script.settings.clone(),
                faults: Some(plan.clone()),
                ..MemorySuiteConfig::in_world(script.world, script.seed)
            },
        );
        gateway.requests.set_condition(script.outcome_condition);
        let gateway_aws = gateway.aws();
        let sink: Arc<dyn MetricsSink> = gateway.metrics.clone();
        let dyn_clock: Arc<dyn Clock> = clock.clone();
        let wrap_clock = &dyn_clock;
        let switch = Arc::new(MemorySaleSwitch::new(clock.clone()));
        let queue = Arc::new(MemoryQueue::new(clock.clone(), Duration::from_secs(90)));
        // The SaleStatus table: the listener writes it, the cart reads it.
        let sale = gateway.charged(Arc::new(MemorySaleStatusStore::new()));
        let listener = OffsaleListener {
            store: port(sale.clone(), &plan, &sink, wrap_clock),
            switch: switch.clone(),
            redelivery: queue.clone(),
            events: port(
                gateway.charged(gateway.bus.clone()),
                &plan,
                &sink,
                wrap_clock,
            ),
            clock: clock.clone(),
            policy: WritePolicy::new(RetrySchedule::default(), Duration::from_secs(2))
                .with_off_sale_hold(script.off_sale_hold),
            on_sale_at: OnSaleAt::default(),
            metrics: gateway.metrics.clone(),
            trust: offsale_listener::trust::Trust {
                operators: Some(operators.iter().cloned().collect()),
                breakers: Some(port(gateway.breakers_port(), &plan, &sink, wrap_clock)),
            },
            self_fault: offsale_listener::selffault::SelfFaultRule::default(),
        };
        // The search's and the cart's view of the gateway, as each function
        // is deployed: every table call watched, failing as the plan says.
        let lookup = || {
            Lookup::new(
                port(gateway.requests_port(), &plan, &sink, wrap_clock),
                port(gateway.cache_port(), &plan, &sink, wrap_clock),
                port(gateway.breakers_port(), &plan, &sink, wrap_clock),
                clock.clone(),
                script.settings.clone(),
            )
            .with_metrics(gateway.metrics.clone())
        };
        let orders = Arc::new(MemoryOrderStore::new());
        let (search, till) = Till::open(
            &gateway,
            lookup,
            &operators,
            CartPorts {
                sale: port(sale, &plan, &sink, wrap_clock),
                events: port(
                    gateway.charged(gateway.bus.clone()),
                    &plan,
                    &sink,
                    wrap_clock,
                ),
            },
            &orders,
        );
        let mut booking =
            gateway.booking_worker(gateway.charged(orders.clone()), OrderSettings::default());
        booking.requests = port(booking.requests, &plan, &sink, wrap_clock);
        booking.breakers = port(booking.breakers, &plan, &sink, wrap_clock);
        booking.events = port(booking.events, &plan, &sink, wrap_clock);
        booking.requests = keys.worker_requests(booking.requests);
        Self {
            script: script.clone(),
            clock,
            operators,
            gateway,
            plan,
            listener,
            queue,
            switch,
            search,
            sims,
            keys,
            till,
            orders,
            booking: Arc::new(booking),
            in_transit: InTransit::new(gateway_aws),
        }
    }

    fn at(&self, offset: Duration) -> DateTime<Utc> {
        self.script.start + TimeDelta::from_std(offset).unwrap_or(TimeDelta::MAX)
    }

    pub async fn run(mut self) -> ChaosReport {
        let wall = std::time::Instant::now();
        let outages = self.script.outages();
        let traffic = tokio::spawn(customers(
            self.script.clone(),
            self.operators.clone(),
            self.search.clone(),
            self.gateway.http_function(),
        ));
        let traffic_for = self.script.traffic_for();
        let buyers = tokio::spawn(buyers(
            Arrivals {
                seed: self.script.seed,
                per_s: self.script.carts as f64 / traffic_for.as_secs_f64().max(1.0),
                for_: traffic_for,
                shares: Vec::new(),
                start: self.script.start,
            },
            self.operators.clone(),
            self.till.clone(),
        ));
        let booking = BookingSchedule::start(self.booking.clone());
        let phases = self.script.phases();
        let end = self.at(self.script.duration());
        let mut cursor = 0;
        let mut held: Vec<String> = Vec::new();
        let mut next_sweep =
            self.clock.now() + TimeDelta::from_std(SWEEP_EVERY).unwrap_or_default();
        let mut next_sample = self.clock.now();
        let mut samples = Samples::default();
        while self.clock.now() < end {
            let offset = (self.clock.now() - self.script.start)
                .to_std()
                .unwrap_or_default();
            let rates = phases
                .iter()
                .find(|p| p.start <= offset && offset < p.end)
                .map(|p| p.rates.clone())
                .unwrap_or_default();
            self.plan.set_rates(&rates);
            let delivered = self.gateway.step().await;
            cursor = self.forward_state_changes(cursor, &mut held);
            if let Err(e) = deliver(&self.listener, &self.queue, 10).await {
                tracing::error!(error = %e, "off-sale listener failed the batch");
            }
            if self.clock.now() >= next_sweep {
                next_sweep += TimeDelta::from_std(SWEEP_EVERY).unwrap_or_default();
                let _ = self.listener.sweep().await;
            }
            // Sampled on the second, whatever the loop's own steps.
            while self.clock.now() >= next_sample {
                let second = (next_sample - self.script.start)
                    .to_std()
                    .unwrap_or_default();
                samples.push(second, self.sample().await);
                next_sample += TimeDelta::seconds(1);
            }
            if !delivered {
                tokio::time::sleep(IDLE).await;
            }
        }
        self.plan.set_rates(&[]);
        for (task, who) in [(traffic, "customers"), (buyers, "buyers")] {
            if let Err(e) = task.await {
                tracing::error!(error = %e, "{who}' task failed");
            }
        }
        let worker_runs = booking.stop();
        self.gateway.drain().await;
        let bus_events = self.gateway.bus.read_from(0).0;
        let mut report = report::build(report::Inputs {
            script: &self.script,
            counts: self.gateway.requests.counts(),
            given_up: self.gateway.discarded.len(),
            injected: self.plan.injected(),
            metrics: &self.gateway.metrics,
            lambda_errors: [&self.gateway.consumer_errors, &self.gateway.switch_errors]
                .map(|n| n.load(std::sync::atomic::Ordering::Relaxed)),
            samples: &samples,
            self_fault_events: bus_events
                .iter()
                .filter(|e| matches!(e, LifeboatEvent::SelfFaultSuspected(_)))
                .count(),
            wall: wall.elapsed(),
        });
        let down_at_end = self
            .operators
            .iter()
            .enumerate()
            .filter(|(k, _)| {
                let last = self
                    .script
                    .duration()
                    .saturating_sub(Duration::from_millis(1));
                report::down(&outages, *k, last)
            })
            .map(|(_, operator)| operator.clone())
            .collect::<BTreeSet<_>>();
        let keys = self.keys.key_orders(&self.gateway.requests);
        report.orders = OrdersEnded::of(&OrdersSeen {
            orders: &self.orders.all(),
            desks: self
                .operators
                .iter()
                .filter_map(|id| self.sims.get(id))
                .collect(),
            key_orders: &keys,
            down_at_end: &down_at_end,
            worker_runs: &worker_runs,
            start: self.script.start,
        });
        report.aws = self.gateway.aws_counts();
        report
    }

    /// The `Breaker State Changed` rule to the off-sale queue, at least
    /// once and in any order: a change may be delivered twice, redelivered
    /// after it was handled, or after the change that followed it.
    fn forward_state_changes(&self, cursor: usize, held: &mut Vec<String>) -> usize {
        let (events, next) = self.gateway.bus.read_from(cursor);
        let now = self.clock.now();
        let late = std::mem::take(held);
        for event in events {
            let LifeboatEvent::BreakerStateChanged(change) = event else {
                continue;
            };
            let body = rule_message(&change);
            if self.plan.strike(FaultClass::Reorder) {
                held.push(body);
                continue;
            }
            if self.plan.strike(FaultClass::Duplicate) {
                self.in_transit.send(&self.queue, body.clone(), now);
            }
            if self.plan.strike(FaultClass::Redelivery) {
                held.push(body.clone());
            }
            self.in_transit.send(&self.queue, body, now);
        }
        for body in late {
            self.in_transit.send(&self.queue, body, now);
        }
        self.in_transit.arrive(&self.queue, now);
        next
    }

    /// Each operator's breaker, stream target and sale status now.
    async fn sample(&self) -> Vec<report::Seen> {
        let mut seen = Vec::new();
        for (k, operator) in self.operators.iter().enumerate() {
            let state = match BreakerStore::load(self.gateway.breakers.as_ref(), operator).await {
                Ok(Some(record)) => record.state,
                _ => BreakerState::Closed,
            };
            let target = match self.gateway.router_of(operator) {
                Some(router) => router.current().await.unwrap_or(ConsumerTarget::Real),
                None => ConsumerTarget::Real,
            };
            seen.push(report::Seen {
                index: k,
                state,
                target,
                on_sale: self.switch.status(operator) == SaleStatus::OnSale,
            });
        }
        seen
    }
}

/// Customers asking new questions (never the same one twice, so each asks
/// the gateway) at the rate that makes `records` questions over the
/// traffic's length, each to an operator chosen at random.
async fn customers(
    script: ChaosScript,
    operators: Vec<OperatorId>,
    search: Arc<Search>,
    http: HttpFunction,
) {
    let mut rng = SimRng::new(script.seed ^ 0xC057);
    let rate = script.records as f64 / script.traffic_for().as_secs_f64().max(1.0);
    let mut asked: Vec<u64> = vec![0; operators.len()];
    let mut searches = JoinSet::new();
    for _ in 0..script.records {
        let k = usize::try_from(rng.next_u64() % operators.len().max(1) as u64).unwrap_or(0);
        let (Some(operator), Some(n)) = (operators.get(k), asked.get_mut(k)) else {
            continue;
        };
        let question = question(&script, *n);
        *n += 1;
        let (search, http) = (search.clone(), http.clone());
        let operator = operator.clone();
        searches.spawn(async move {
            let _ = http
                .call(search.handle(&sailings_request(&operator, &question)))
                .await;
        });
        let gap = -(1.0 - rng.next_f64()).ln() / rate.max(0.001);
        tokio::time::sleep(Duration::from_secs_f64(gap)).await;
        while searches.try_join_next().is_some() {}
    }
    while searches.join_next().await.is_some() {}
}

/// The `n`-th question to one operator: passengers, then date, then route,
/// so no two are alike for 8 × 390 × 9 questions.
fn question(script: &ChaosScript, n: u64) -> [String; 4] {
    let passengers = 1 + n % 9;
    let day = 1 + (n / 9) % DAYS;
    let route = usize::try_from((n / (9 * DAYS)) % ROUTES.len() as u64).unwrap_or(0);
    let (from, to) = ROUTES[route];
    let date = script.start + TimeDelta::days(i64::try_from(day).unwrap_or(1));
    [
        from.to_owned(),
        to.to_owned(),
        date.format("%Y-%m-%d").to_string(),
        passengers.to_string(),
    ]
}
