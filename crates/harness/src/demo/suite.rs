//! The seven functions wired in memory for the demo's day, its customers and
//! its operator; the marketplace's sale desk plays AWS between them (the
//! stream mapping, the rules, the schedule and the SQS mapping), and the
//! booking worker's schedule invokes it every minute.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cart::CartService;
use chrono::TimeDelta;
use lifeboat_core::OperatorId;
use lifeboat_core::cart::{CartPolicy, CartSettings};
use lifeboat_core::events::SaleStatus;
use lifeboat_core::memory::{MemoryCartStore, MemoryOrderStore, SwitchOutcome};
use lifeboat_core::ports::Clock;
use lifeboat_core::request::OutcomeKind;
use lifeboat_lookup::Lookup;
use lifeboat_operator::{Outage, PriceDrift, SimConfig, SimulatedOperator};
use lifeboat_sim::booking::BookingSchedule;
use lifeboat_sim::{MemorySuite, MemorySuiteConfig, TokioClock};
use search::Search;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::customer::{OPERATOR, Observed, Shop, customer};
use super::keys::Keys;
use super::report::{self, DeskSeen, Report};
use super::{Phase, Script};
use crate::marketplace::SaleDesk;

pub(crate) struct Suite {
    script: Script,
    clock: Arc<TokioClock>,
    sim: SimulatedOperator,
    gateway: MemorySuite,
    shop: Arc<Shop>,
    /// The Carts table the cart function writes.
    carts: Arc<MemoryCartStore>,
    /// The Orders table the cart holds orders in and the booking worker
    /// books them from.
    orders: Arc<MemoryOrderStore>,
    booking: Arc<booking_worker::BookingWorker>,
    /// The booking calls' keys, as the script's `booking_key` has them.
    keys: Keys,
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
                    // Prices move through the customers' day and stay from
                    // its end, while the last replies come in.
                    until: Some(at(script.end())),
                }),
                seats: script.seat_model,
                ..SimConfig::default()
            },
            clock.clone(),
        );
        let (keys, reached) = Keys::new(script.booking_key, Arc::new(sim.clone()));
        let gateway = MemorySuite::new(
            reached,
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
        let orders = Arc::new(MemoryOrderStore::new());
        let mut booking = gateway.booking_worker(
            gateway.charged(orders.clone()),
            script.order_settings.clone(),
        );
        booking.requests = keys.worker_requests(booking.requests);
        let shop = Arc::new(Shop {
            search: Arc::new(Search {
                lookup: lookup(),
                operators: operators.clone(),
            }),
            carts: Arc::new(CartService {
                carts: gateway.charged(carts.clone()),
                sale: gateway.charged(desk.store.clone()),
                orders: gateway.charged(orders.clone()),
                events: gateway.charged(gateway.bus.clone()),
                lookup: lookup(),
                operators,
                settings: CartSettings {
                    default: CartPolicy {
                        absorb_rise_percent: script.absorb_rise_percent,
                        seats: script.seat_guard,
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
            orders,
            booking: Arc::new(booking),
            keys,
            desk,
            switch_failure_armed: false,
        }
    }

    pub async fn run(mut self) -> Report {
        let traffic = tokio::spawn(traffic(self.shop.clone(), self.script.clone()));
        let booking = BookingSchedule::start(self.booking.clone());
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
        booking.stop();
        let stats = self.sim.stats();
        let sold_out = self.sim.sold_out();
        let booked_keys = self.sim.booked_keys();
        let key_orders = self.keys.key_orders(&self.gateway.requests);
        let mut report = report::build(report::Inputs {
            script: &self.script,
            start: self.script.start,
            ended: self.clock.now(),
            transitions: &self.gateway.transitions,
            switch_writes: &self.desk.switch.writes(),
            requests: self.gateway.requests.counts(),
            discarded: self.gateway.discarded.len(),
            operator_calls: stats.total,
            probe_calls: self.gateway.probe_calls(),
            answered_too_late: self.answered_too_late(),
            events: &self.gateway.bus.events(),
            observed: &self.shop.observed(),
            carts: &self.carts.all(),
            orders: &self.orders.all(),
            desk: DeskSeen {
                booked_keys: &booked_keys,
                sold_out: &sold_out,
                key_orders: &key_orders,
            },
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
