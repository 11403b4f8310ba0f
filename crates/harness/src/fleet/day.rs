//! The fleet's day: many simulated operators behind one gateway, customers
//! searching at each operator's rate, and the loop that plays AWS.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, TimeDelta, Utc};
use lifeboat_core::OperatorId;
use lifeboat_core::memory::MemoryOrderStore;
use lifeboat_core::order::booking::OrderSettings;
use lifeboat_core::ports::{Clock, OperatorApi};
use lifeboat_core::request::{CallClass, CallResult, OperatorCall};
use lifeboat_lookup::Lookup;
use lifeboat_operator::{Outage, SimConfig, SimRng, SimulatedOperator};
use lifeboat_sim::booking::BookingSchedule;
use lifeboat_sim::meter::{InvocationKind, Ledger, Metered, metered};
use lifeboat_sim::{HttpFunction, MemorySuite, MemorySuiteConfig, TokioClock};
use search::Search;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::report::{self, FleetReport, SearchTally};
use super::{FLAP, FleetScript, Incident, IncidentKind};
use crate::buyers::orders::{OrdersEnded, Seen as OrdersSeen};
use crate::buyers::{Arrivals, CartPorts, Till, buyers};
use crate::demo::report::key_order;
use crate::marketplace::{ROUTES, SaleDesk, sailings_request};

/// Days ahead customers travel: with 8 routes and 1–4 passengers, 1,920
/// questions per operator, so busy operators answer many from the cache and
/// quiet ones almost none.
const DAYS_AHEAD: u32 = 60;

/// A brownout's slow calls answer after this share of the budget: near it,
/// but under the budget's `slow_after` (0.8), so the breaker never trips and
/// the slowness stays for the whole incident.
const BROWNOUT_FACTOR: f64 = 0.78;

/// How long the Requests store keeps a request: ten minutes, far past any
/// search's budget and a stream record's retries, so that a day at the
/// priced load keeps minutes of requests, not the day's.
const REQUESTS_KEPT: Duration = Duration::from_secs(600);

/// One operator call, as the operators saw it.
#[derive(Debug, Clone)]
pub(crate) struct CallSeen {
    pub at: DateTime<Utc>,
    pub rank: usize,
    /// Made by the circuit switch's prober, not by a consumer.
    pub probe: bool,
    /// A consumer's hang-check ping, not a customer's question.
    pub ping: bool,
    /// A probe's answer, as its class and how long it took (other calls
    /// are counted, not followed).
    pub probed: Option<(&'static str, Duration)>,
}

/// One search, as its customer saw it.
#[derive(Debug, Clone)]
pub(crate) struct SearchSeen {
    pub at: DateTime<Utc>,
    pub rank: usize,
    pub latency: Duration,
    pub status: u16,
    pub source: Option<String>,
    /// from, to, date, passengers.
    pub question: [String; 4],
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Every simulated operator behind one [`OperatorApi`], noting each call
/// to an operator with an incident (the report looks at no other).
#[derive(Clone)]
struct Operators {
    by_id: Arc<HashMap<OperatorId, (usize, SimulatedOperator)>>,
    noted: Arc<BTreeSet<usize>>,
    calls: Arc<Mutex<Vec<CallSeen>>>,
    clock: Arc<dyn Clock>,
    probe: bool,
}

#[async_trait]
impl OperatorApi for Operators {
    fn knows(&self, operator: &OperatorId) -> bool {
        self.by_id.contains_key(operator)
    }

    async fn call(&self, call: &OperatorCall) -> CallResult {
        let Some((rank, sim)) = self.by_id.get(&call.operator) else {
            // Never sent: no such operator in the fleet.
            return CallResult {
                class: CallClass::ClientError { status: 404 },
                elapsed: Duration::ZERO,
                body: None,
                detail: format!("unknown operator {}", call.operator),
            };
        };
        if !self.noted.contains(rank) {
            return sim.call(call).await;
        }
        let at = self.clock.now();
        let seen = |probed| CallSeen {
            at,
            rank: *rank,
            probe: self.probe,
            ping: call.operation == lifeboat_core::Operation::Ping,
            probed,
        };
        if !self.probe {
            lock(&self.calls).push(seen(None));
            return sim.call(call).await;
        }
        let result = sim.call(call).await;
        lock(&self.calls).push(seen(Some((result.class.name(), result.elapsed))));
        result
    }
}

/// The day's world.
pub(crate) struct Day {
    script: FleetScript,
    clock: Arc<TokioClock>,
    operators: Vec<OperatorId>,
    incidents: Vec<Incident>,
    gateway: MemorySuite,
    desk: SaleDesk,
    search: Arc<Search>,
    calls: Arc<Mutex<Vec<CallSeen>>>,
    searches: Arc<Mutex<SearchTally>>,
    /// Every operator's simulator, by rank (their desks' bookings).
    sims: Vec<SimulatedOperator>,
    /// The cart and the search, as buyers reach them.
    till: Arc<Till>,
    /// The Orders table the cart holds orders in.
    orders: Arc<MemoryOrderStore>,
    booking: Arc<booking_worker::BookingWorker>,
    /// The order each booking call's key was sent for, noted as the
    /// Requests store lets requests go, then from those it still keeps.
    keys: Arc<Mutex<BTreeMap<String, String>>>,
}

impl Day {
    pub fn new(script: &FleetScript) -> Self {
        let clock = Arc::new(TokioClock::starting_at(script.start));
        let operators: Vec<OperatorId> = script
            .operator_names()
            .into_iter()
            .filter_map(|name| OperatorId::new(name).ok())
            .collect();
        let incidents = script.incidents();
        let at = |d: Duration| script.start + TimeDelta::from_std(d).unwrap_or(TimeDelta::MAX);
        let by_id: HashMap<OperatorId, (usize, SimulatedOperator)> = operators
            .iter()
            .enumerate()
            .map(|(rank, operator)| {
                let outages = incidents
                    .iter()
                    .filter(|i| i.rank == rank)
                    .flat_map(|i| outages_of(i, at))
                    .collect();
                let sim = SimulatedOperator::new(
                    operator.clone(),
                    SimConfig {
                        seed: script.seed ^ (rank as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                        outages,
                        brownout_factor: BROWNOUT_FACTOR,
                        ..SimConfig::default()
                    },
                    clock.clone(),
                );
                (operator.clone(), (rank, sim))
            })
            .collect();
        let calls = Arc::new(Mutex::new(Vec::new()));
        let noted: Arc<BTreeSet<usize>> = Arc::new(incidents.iter().map(|i| i.rank).collect());
        let api = |probe: bool| Operators {
            by_id: Arc::new(by_id.clone()),
            noted: noted.clone(),
            calls: calls.clone(),
            clock: clock.clone(),
            probe,
        };
        // Probes counted apart from the consumers' calls.
        let mut gateway = MemorySuite::with_prober(
            Arc::new(api(false)),
            Arc::new(api(true)),
            clock.clone(),
            MemorySuiteConfig {
                operators: operators.clone(),
                settings: script.lane_settings(),
                lanes: script.lanes,
                retain_requests: Some(REQUESTS_KEPT),
                real_consumer_concurrency: script.real_consumer_concurrency(),
                parallelization: script.lane_parallelization,
                ..MemorySuiteConfig::in_world(script.world, script.seed)
            },
        );
        let searches = Arc::new(Mutex::new(SearchTally::new(script, &operators)));
        let tally = searches.clone();
        let keys = Arc::new(Mutex::new(BTreeMap::new()));
        let noted_keys = keys.clone();
        gateway.on_evicted(Box::new(move |stored| {
            lock(&tally).request(stored);
            lock(&noted_keys).extend(key_order(stored));
        }));
        gateway.requests.set_condition(script.outcome_condition);
        let desk = SaleDesk::new(&gateway, clock.clone());
        let lookup = || {
            Lookup::new(
                Metered::new(gateway.requests_port()),
                Metered::new(gateway.cache_port()),
                Metered::new(gateway.breakers_port()),
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
                sale: gateway.charged(desk.store.clone()),
                events: gateway.charged(gateway.bus.clone()),
            },
            &orders,
        );
        let booking = Arc::new(
            gateway.booking_worker(gateway.charged(orders.clone()), OrderSettings::default()),
        );
        let mut sims: Vec<(usize, SimulatedOperator)> = by_id.into_values().collect();
        sims.sort_by_key(|(rank, _)| *rank);
        Self {
            script: script.clone(),
            clock,
            operators,
            incidents,
            gateway,
            desk,
            search,
            calls,
            searches,
            sims: sims.into_iter().map(|(_, sim)| sim).collect(),
            till,
            orders,
            booking,
            keys,
        }
    }

    pub async fn run(mut self) -> FleetReport {
        let wall = std::time::Instant::now();
        let traffic = tokio::spawn(traffic(
            self.script.clone(),
            self.operators.clone(),
            (self.search.clone(), self.gateway.http_function()),
            self.clock.clone(),
            self.searches.clone(),
            self.gateway.ledger.clone(),
        ));
        let buyers = tokio::spawn(buyers(
            Arrivals {
                seed: self.script.seed,
                per_s: self.script.searches_per_s * self.script.cart_share,
                for_: self.script.duration,
                shares: self.script.cumulative_shares(),
                start: self.script.start,
            },
            self.operators.clone(),
            self.till.clone(),
        ));
        let booking = BookingSchedule::start(self.booking.clone());
        self.desk.play(&mut self.gateway, traffic, |_| {}).await;
        let worker_runs = booking.stop();
        if let Err(e) = buyers.await {
            tracing::error!(error = %e, "the fleet's buyers failed");
        }
        // The requests still kept, as the store would have let them go.
        self.gateway.requests.for_each(|stored| {
            lock(&self.searches).request(stored);
            lock(&self.keys).extend(key_order(stored));
        });
        let mut report = report::build(report::Inputs {
            script: &self.script,
            operators: &self.operators,
            incidents: &self.incidents,
            ended: self.clock.now(),
            transitions: &self.gateway.transitions,
            sale_writes: &self.desk.switch.writes(),
            calls: &lock(&self.calls),
            searches: &lock(&self.searches),
            counts: self.gateway.requests.counts(),
            ledger: &self.gateway.ledger,
            settings: &self.script.settings,
            wall: wall.elapsed(),
        });
        let end = self
            .script
            .duration
            .saturating_sub(Duration::from_millis(1));
        let down_at_end = self
            .incidents
            .iter()
            .filter(|i| i.start <= end && end < i.end)
            .filter_map(|i| self.operators.get(i.rank).cloned())
            .collect::<BTreeSet<_>>();
        report.orders = OrdersEnded::of(&OrdersSeen {
            orders: &self.orders.all(),
            desks: self.sims.iter().collect(),
            key_orders: &lock(&self.keys),
            down_at_end: &down_at_end,
            worker_runs: &worker_runs,
            start: self.script.start,
        });
        report.aws = self.gateway.aws_counts();
        report
    }
}

/// The outage windows of one incident.
fn outages_of(incident: &Incident, at: impl Fn(Duration) -> DateTime<Utc>) -> Vec<Outage> {
    let mode = incident.kind.mode();
    if incident.kind != IncidentKind::Flapping {
        return vec![Outage {
            start: at(incident.start),
            end: at(incident.end),
            mode,
        }];
    }
    let mut windows = Vec::new();
    let mut down = incident.start;
    while down < incident.end {
        let up = (down + FLAP).min(incident.end);
        windows.push(Outage {
            start: at(down),
            end: at(up),
            mode,
        });
        down = up + FLAP;
    }
    windows
}

/// Customers arriving through the day (a Poisson stream over the whole
/// marketplace, each choosing an operator by its traffic share); returns
/// when the last one is done.
async fn traffic(
    script: FleetScript,
    operators: Vec<OperatorId>,
    (search, http): (Arc<Search>, HttpFunction),
    clock: Arc<TokioClock>,
    seen: Arc<Mutex<SearchTally>>,
    ledger: Arc<Ledger>,
) {
    let mut rng = SimRng::new(script.seed);
    let cumulative = script.cumulative_shares();
    let start = Instant::now();
    let mut customers = JoinSet::new();
    while start.elapsed() < script.duration {
        let u = rng.next_f64();
        let rank = cumulative
            .iter()
            .position(|&c| u < c)
            .unwrap_or(operators.len().saturating_sub(1));
        let (from, to) = ROUTES[pick(&mut rng, ROUTES.len())];
        let question = [
            from.to_owned(),
            to.to_owned(),
            format!(
                "{}",
                (script.start + TimeDelta::days(1 + pick(&mut rng, DAYS_AHEAD as usize) as i64))
                    .format("%Y-%m-%d")
            ),
            (1 + pick(&mut rng, 4)).to_string(),
        ];
        if let Some(operator) = operators.get(rank) {
            customers.spawn(one_search(
                (search.clone(), http.clone()),
                clock.clone(),
                seen.clone(),
                ledger.clone(),
                operator.clone(),
                rank,
                question,
            ));
        }
        // Exponential gaps: a Poisson stream of customers.
        let gap = -(1.0 - rng.next_f64()).ln() / script.searches_per_s.max(0.001);
        tokio::time::sleep(Duration::from_secs_f64(gap)).await;
        while customers.try_join_next().is_some() {}
    }
    while let Some(done) = customers.join_next().await {
        if let Err(e) = done {
            tracing::error!(error = %e, "a fleet customer failed");
        }
    }
}

async fn one_search(
    (search, http): (Arc<Search>, HttpFunction),
    clock: Arc<TokioClock>,
    seen: Arc<Mutex<SearchTally>>,
    ledger: Arc<Ledger>,
    operator: OperatorId,
    rank: usize,
    question: [String; 4],
) {
    let at = clock.now();
    let began = Instant::now();
    let (reply, calls) =
        metered(http.call(search.handle(&sailings_request(&operator, &question)))).await;
    let kind = match reply.body["source"].as_str() {
        Some("fresh") => InvocationKind::SearchHit,
        Some("live") => InvocationKind::SearchMiss,
        _ => InvocationKind::SearchOther,
    };
    ledger.note(kind, 1, calls);
    lock(&seen).search(SearchSeen {
        at,
        rank,
        latency: began.elapsed(),
        status: reply.status,
        source: reply.body["source"].as_str().map(str::to_owned),
        question,
    });
}

fn pick(rng: &mut SimRng, n: usize) -> usize {
    usize::try_from(rng.next_u64() % n.max(1) as u64).unwrap_or(0)
}
