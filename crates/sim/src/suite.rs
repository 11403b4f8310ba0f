//! The whole suite wired in memory: stream, consumers, switch, bus and schedule.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use chrono::{DateTime, Utc};
use circuit_switch::{CircuitSwitch, SHARED_LANE, SwitchPorts, SwitchReport};
use fallback_consumer::FallbackConsumer;
use lifeboat_core::events::{LifeboatEvent, SOURCE};
use lifeboat_core::memory::{
    MemoryBreakerStore, MemoryCacheStore, MemoryEventBus, MemoryMetrics, MemoryRequestStore,
    MemoryStreamRouter, MemoryTimers, MemoryWindowStore,
};
use lifeboat_core::ports::{
    BreakerStore, BreakerTimers, CacheStore, Clock, MetricsSink, OperatorApi, RequestStore,
    StoredRequest, StreamRouter,
};
use lifeboat_core::probe::BreakerTimer;
use lifeboat_core::settings::Parallelization;

use crate::aws::{AwsRuntime, World};
use crate::charged::{Charged, ChargedTimers, ControlPlane};
pub use crate::config::{LaneLayout, MemorySuiteConfig};
use crate::fault::{FaultClass, FaultPlan, FaultyOperators, invocation, port};
use crate::lambda::{AwsCounts, HttpFunction, Pools, invoke_overhead};
pub use crate::lane::stream_record;
use crate::lane::{SimLane, switch_lanes};
use crate::meter::{InvocationKind, Ledger, Metered, metered};
use lifeboat_core::request::{CallResult, OperatorCall, RequestRecord};
use lifeboat_core::{BreakerState, ConsumerTarget, OperatorId};
use real_consumer::{ConsumerPorts, RealConsumer};
use serde_json::{Value, json};
use tokio::task::JoinSet;

/// The template's `BreakerTimerQueueMapping` `BatchSize`: the most timers one
/// switch invocation gets.
pub const TIMER_BATCH_SIZE: usize = 10;

/// When a timer the switch failed comes back (the timer queue's visibility
/// timeout).
const TIMER_VISIBILITY: Duration = Duration::from_secs(30);

/// A breaker transition seen by the suite.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    pub at: DateTime<Utc>,
    pub operator: OperatorId,
    pub from: BreakerState,
    pub to: BreakerState,
    pub version: u64,
    pub reason: String,
    /// Where the stream pointed after the switch handled it.
    pub stream: ConsumerTarget,
    /// Calls the operator had received when the switch made this transition,
    /// if a counter was given with [`MemorySuite::count_operator_calls_with`].
    pub operator_calls: Option<u64>,
    /// Probe calls the switch had made by then ([`MemorySuite::probe_calls`]).
    pub probe_calls: u64,
}

/// Reads how many calls the operator has received.
pub type CallCounter = Box<dyn Fn() -> u64 + Send + Sync>;

/// Shown each request the Requests store lets go
/// ([`MemorySuiteConfig::retain_requests`]).
pub type EvictionVisitor = Box<dyn FnMut(&StoredRequest) + Send>;

/// How often the suite lets old requests go, when it keeps them for a while.
const EVICT_EVERY: Duration = Duration::from_secs(10);

/// The suite in memory (the product's gateway, its functions and the AWS parts around them).
pub struct MemorySuite {
    pub clock: Arc<dyn Clock>,
    pub requests: Arc<MemoryRequestStore>,
    pub breakers: Arc<MemoryBreakerStore>,
    pub window: Arc<MemoryWindowStore>,
    pub bus: Arc<MemoryEventBus>,
    pub cache: Arc<MemoryCacheStore>,
    /// The functions' metrics, folded into a sum per metric and dimension
    /// set as they are emitted (what the reports read), not kept line by
    /// line: a long day's lines would fill the memory.
    pub metrics: Arc<MemoryMetrics>,
    /// The streams, each with its mapping and the batches in flight.
    lanes: Vec<SimLane>,
    /// The breaker timer queue: due timers go to the switch.
    pub timers: Arc<MemoryTimers>,
    pub real: Arc<RealConsumer>,
    pub fallback: Arc<FallbackConsumer>,
    pub switch: Arc<CircuitSwitch>,
    pub transitions: Vec<Transition>,
    /// Every invocation's store calls.
    pub ledger: Arc<Ledger>,
    /// Switch invocations in flight, with the timers of a timer batch.
    switch_calls: JoinSet<(Vec<BreakerTimer>, Result<SwitchReport, String>)>,
    /// Calls the switch made to probe open breakers (its own half-open
    /// trials included), counted as they are made.
    probes: Arc<AtomicU64>,
    call_counter: Option<CallCounter>,
    /// Sees each request before it is evicted, and when the next eviction runs.
    on_evicted: Option<EvictionVisitor>,
    next_eviction: DateTime<Utc>,
    config: MemorySuiteConfig,
    /// Records given up on after `max_retries` failed deliveries (the
    /// mapping's OnFailure destination).
    pub discarded: Vec<RequestRecord>,
    /// The faults injected (a plan at rate 0 unless the config gave one).
    pub faults: Arc<FaultPlan>,
    /// Consumer invocations that died or timed out, as Lambda's `Errors`
    /// metric counts them.
    pub consumer_errors: Arc<AtomicU64>,
    /// Switch invocations that timed out, likewise.
    pub switch_errors: Arc<AtomicU64>,
    /// Bus events held back to arrive after the next ones.
    held_events: Vec<Value>,
    /// Bus events on their way to the switch (EventBridge's delivery), with
    /// when they arrive.
    in_transit: Vec<(DateTime<Utc>, Value)>,
    bus_position: usize,
    next_tick: DateTime<Utc>,
    /// The AWS world's runtime (`None`: the ideal world).
    aws: Option<Arc<AwsRuntime>>,
    pools: Pools,
    control_plane: Option<Arc<ControlPlane>>,
}

impl MemorySuite {
    /// The suite calling `operator`, whose open breakers the switch probes
    /// on the same operator.
    pub fn new(
        operator: Arc<dyn OperatorApi>,
        clock: Arc<dyn Clock>,
        config: MemorySuiteConfig,
    ) -> Self {
        Self::build(operator, None, clock, config)
    }

    /// The suite calling `operator`, whose switch probes with `prober`
    /// instead (to count probes apart from customers' calls), without the
    /// fault plan's operator faults.
    pub fn with_prober(
        operator: Arc<dyn OperatorApi>,
        prober: Arc<dyn OperatorApi>,
        clock: Arc<dyn Clock>,
        config: MemorySuiteConfig,
    ) -> Self {
        Self::build(operator, Some(prober), clock, config)
    }

    fn build(
        operator: Arc<dyn OperatorApi>,
        prober: Option<Arc<dyn OperatorApi>>,
        clock: Arc<dyn Clock>,
        config: MemorySuiteConfig,
    ) -> Self {
        let requests = Arc::new(MemoryRequestStore::new());
        let breakers = Arc::new(MemoryBreakerStore::new());
        let window = Arc::new(MemoryWindowStore::new());
        let bus = Arc::new(MemoryEventBus::new());
        let mut config = config;
        let mut seen = std::collections::HashSet::new();
        config.operators.retain(|o| seen.insert(o.clone()));
        let charged = config.aws.is_some();
        let lanes: Vec<SimLane> = match config.lanes {
            LaneLayout::Shared => {
                vec![SimLane::new(SHARED_LANE, config.operators.clone(), charged)]
            }
            LaneLayout::PerOperator => config
                .operators
                .iter()
                .map(|o| SimLane::new(o.as_str(), vec![o.clone()], charged))
                .collect(),
        };
        let timers = Arc::new(MemoryTimers::new());
        let probes = Arc::new(AtomicU64::new(0));
        let cache = Arc::new(MemoryCacheStore::new());
        let aws = config
            .aws
            .clone()
            .map(|model| AwsRuntime::new(model, config.aws_seed));
        let pools = Pools::new(aws.is_some(), config.real_consumer_concurrency);
        let control_plane = aws.as_ref().map(ControlPlane::new);
        let metrics = Arc::new(MemoryMetrics::folded());
        let faults = config
            .faults
            .clone()
            .unwrap_or_else(|| Arc::new(FaultPlan::new(0)));
        // The functions' ports as deployed: failures counted (Watched), here
        // also injected (Faulty) and each call metered per invocation.
        let sink: Arc<dyn MetricsSink> = metrics.clone();
        let ledger = Arc::new(Ledger::default());
        // Under them, each call charged what AWS charges (nothing in the
        // ideal world).
        let metered_requests = port(
            Metered::new(Charged::new(requests.clone(), &aws)),
            &faults,
            &sink,
            &clock,
        );
        let metered_breakers = port(
            Metered::new(Charged::new(breakers.clone(), &aws)),
            &faults,
            &sink,
            &clock,
        );
        let events = port(Charged::new(bus.clone(), &aws), &faults, &sink, &clock);
        let operator: Arc<dyn OperatorApi> = Arc::new(FaultyOperators {
            inner: operator,
            plan: faults.clone(),
        });
        let real = RealConsumer::new(
            ConsumerPorts {
                requests: metered_requests.clone(),
                breakers: metered_breakers.clone(),
                window: port(
                    Metered::new(Charged::new(window.clone(), &aws)),
                    &faults,
                    &sink,
                    &clock,
                ),
                events: events.clone(),
                cache: port(
                    Metered::new(Charged::new(cache.clone(), &aws)),
                    &faults,
                    &sink,
                    &clock,
                ),
                metrics: metrics.clone(),
                operator: operator.clone(),
                clock: clock.clone(),
            },
            config.settings.clone(),
            config.concurrency,
        )
        // One consumer serves every batch of a lane here, where Lambda
        // runs up to `parallelization` instances with a limit each: the
        // limit tops out at all of theirs, and a cut is shared.
        .with_limits(real_consumer::limit::Limits::for_concurrency_of(
            config.concurrency * config.parallelization.max(1),
            config.settings.operators.iter().filter_map(|(o, own)| {
                own.lane
                    .parallelization
                    .map(|p| (o.clone(), config.concurrency * usize::from(p.get())))
            }),
        ));
        let fallback = FallbackConsumer {
            requests: metered_requests,
            events: events.clone(),
            clock: clock.clone(),
            metrics: metrics.clone(),
        };
        // What the lanes may run at, as the template tells the switch; the
        // reservation caps the real consumer in the AWS world only.
        let lane_capacity = Parallelization::new(config.parallelization as u64)
            .ok()
            .map(|default| circuit_switch::LaneCapacity {
                default,
                reserved: config
                    .aws
                    .is_some()
                    .then_some(config.real_consumer_concurrency),
            });
        let switch = CircuitSwitch::new(
            SwitchPorts {
                breakers: metered_breakers,
                windows: port(
                    Metered::new(Charged::new(window.clone(), &aws)),
                    &faults,
                    &sink,
                    &clock,
                ),
                events,
                lanes: switch_lanes(
                    config.lanes,
                    &lanes,
                    &faults,
                    control_plane.as_ref(),
                    &clock,
                )
                .watched(&sink, &clock),
                clock: clock.clone(),
                metrics: metrics.clone(),
            },
            config.settings.clone(),
            config.operators.clone(),
        )
        .with_repoint_backoff(Duration::from_millis(100))
        .with_timers(port(
            ChargedTimers::new(timers.clone(), &aws, clock.clone()),
            &faults,
            &sink,
            &clock,
        ))
        .with_prober(Arc::new(CountedProber {
            inner: prober.unwrap_or(operator),
            calls: probes.clone(),
        }));
        let switch = match lane_capacity {
            Some(capacity) => switch.with_lane_capacity(capacity),
            None => switch,
        };
        let next_tick = clock.now();
        Self {
            clock,
            requests,
            breakers,
            window,
            bus,
            cache,
            metrics,
            lanes,
            timers,
            real: Arc::new(real),
            fallback: Arc::new(fallback),
            switch: Arc::new(switch),
            transitions: Vec::new(),
            switch_calls: JoinSet::new(),
            ledger,
            probes,
            call_counter: None,
            on_evicted: None,
            next_eviction: next_tick,
            config,
            discarded: Vec::new(),
            faults,
            consumer_errors: Arc::new(AtomicU64::new(0)),
            switch_errors: Arc::new(AtomicU64::new(0)),
            held_events: Vec::new(),
            in_transit: Vec::new(),
            bus_position: 0,
            next_tick,
            aws,
            pools,
            control_plane,
        }
    }

    /// What the suite was built with (its operators and settings).
    pub fn config(&self) -> &MemorySuiteConfig {
        &self.config
    }

    /// The world this suite runs in.
    pub fn world(&self) -> World {
        self.config.world()
    }

    /// The AWS world's runtime (`None`: the ideal world).
    pub fn aws(&self) -> Option<Arc<AwsRuntime>> {
        self.aws.clone()
    }

    /// The Requests tables as a search or cart function reaches them (each
    /// call charged as the world charges it).
    pub fn requests_port(&self) -> Arc<dyn RequestStore> {
        Charged::new(self.requests.clone(), &self.aws)
    }

    /// The cache table, likewise.
    pub fn cache_port(&self) -> Arc<dyn CacheStore> {
        Charged::new(self.cache.clone(), &self.aws)
    }

    /// The Breaker table, likewise.
    pub fn breakers_port(&self) -> Arc<dyn BreakerStore> {
        Charged::new(self.breakers.clone(), &self.aws)
    }

    /// Any other table a function reaches (carts, sale status), likewise.
    pub fn charged<T: ?Sized>(&self, table: Arc<T>) -> Arc<Charged<T>> {
        Charged::new(table, &self.aws)
    }

    /// Search and cart invocations through the HTTP API.
    pub fn http_function(&self) -> HttpFunction {
        HttpFunction {
            aws: self.aws.clone(),
            pool: self.pools.http.clone(),
        }
    }

    /// What the AWS world charged so far beside store calls.
    pub fn aws_counts(&self) -> AwsCounts {
        AwsCounts {
            lambda: self.pools.counts(),
            control_plane: self
                .control_plane
                .as_ref()
                .map(|p| p.calls())
                .unwrap_or_default(),
        }
    }

    /// Note the operator's call count at every transition (for example from
    /// the simulated operator's own statistics).
    pub fn count_operator_calls_with(&mut self, counter: CallCounter) {
        self.call_counter = Some(counter);
    }

    /// Show `visit` each request the store lets go when it keeps them only
    /// for [`MemorySuiteConfig::retain_requests`] (the store's counts keep
    /// counting them; [`MemoryRequestStore::for_each`] no longer sees them).
    pub fn on_evicted(&mut self, visit: EvictionVisitor) {
        self.on_evicted = Some(visit);
    }

    /// Let the requests older than the retention go, none a lane may still
    /// deliver.
    fn evict_requests(&mut self) {
        let Some(retain) = self.config.retain_requests else {
            return;
        };
        let now = self.clock.now();
        if now < self.next_eviction {
            return;
        }
        self.next_eviction = now + chrono::TimeDelta::from_std(EVICT_EVERY).unwrap_or_default();
        let below = self
            .lanes
            .iter()
            .map(SimLane::oldest_needed)
            .fold(self.requests.stream_end(), usize::min);
        let before = now - chrono::TimeDelta::from_std(retain).unwrap_or_default();
        match &mut self.on_evicted {
            Some(visit) => self.requests.evict(before, below, visit),
            None => self.requests.evict(before, below, |_| {}),
        };
    }

    /// Run the gateway's side of AWS until the clock reaches `until`.
    pub async fn run_until(&mut self, until: DateTime<Utc>) {
        while self.clock.now() < until {
            let delivered = self.step().await;
            if !delivered {
                tokio::time::sleep(self.config.poll).await;
            }
        }
    }

    /// One round: finished switch invocations noted, due tick, timers and
    /// events handed to the switch, one batch per lane. Returns whether a
    /// batch was delivered.
    pub async fn step(&mut self) -> bool {
        if self.clock.now() >= self.next_tick {
            self.next_tick = self.clock.now()
                + chrono::TimeDelta::from_std(self.config.tick_every).unwrap_or_default();
            self.invoke_switch(
                json!({
                    "version": "0", "id": "tick", "detail-type": "Scheduled Event", "source": "aws.events",
                    "time": self.clock.now().to_rfc3339(), "detail": {}
                }),
                Vec::new(),
                InvocationKind::Tick,
            );
        }
        self.evict_requests();
        self.deliver_timers();
        self.deliver_bus_events();
        // Let the switch run: an invocation that does not wait on the
        // operator finishes now, before the next batch is delivered, as its
        // few store calls take no time on Lambda either.
        tokio::task::yield_now().await;
        while let Some(done) = self.switch_calls.try_join_next() {
            self.settle_switch(done).await;
        }
        self.deliver_batch().await
    }

    /// Due breaker timers to the switch, as the timer queue's mapping
    /// delivers them (one SQS batch).
    fn deliver_timers(&mut self) {
        let mut due = self.timers.take_due(self.clock.now());
        if due.is_empty() {
            return;
        }
        // At least once: a timer may arrive twice in one batch.
        let again: Vec<BreakerTimer> = due
            .iter()
            .filter(|_| self.faults.strike(FaultClass::Redelivery))
            .cloned()
            .collect();
        due.extend(again);
        for batch in due.chunks(TIMER_BATCH_SIZE) {
            let records: Vec<SqsMessage> = batch
                .iter()
                .enumerate()
                .map(|(i, timer)| {
                    let mut message = SqsMessage::default();
                    message.message_id = Some(format!("timer-{i}"));
                    message.event_source = Some("aws:sqs".to_owned());
                    message.body = serde_json::to_string(timer).ok();
                    message
                })
                .collect();
            let mut event = SqsEvent::default();
            event.records = records;
            let payload = serde_json::to_value(&event).unwrap_or(Value::Null);
            self.invoke_switch(payload, batch.to_vec(), InvocationKind::Switch);
        }
    }

    fn deliver_bus_events(&mut self) {
        let (events, next) = self.bus.read_from(self.bus_position);
        self.bus_position = next;
        // Events held back last round arrive after this round's.
        let mut payloads = Vec::new();
        let held = std::mem::take(&mut self.held_events);
        for event in events {
            // The rules on the bus send these two to the switch.
            if matches!(
                event,
                LifeboatEvent::TripRequested(_) | LifeboatEvent::TrialsPassed(_)
            ) {
                let detail: Value =
                    serde_json::from_str(&event.detail_json()).unwrap_or(Value::Null);
                let payload = json!({
                    "version": "0", "id": "bus", "detail-type": event.detail_type(), "source": SOURCE,
                    "time": self.clock.now().to_rfc3339(), "detail": detail
                });
                if self.faults.strike(FaultClass::Reorder) {
                    self.held_events.push(payload);
                    continue;
                }
                if self.faults.strike(FaultClass::Duplicate) {
                    payloads.push(payload.clone());
                }
                payloads.push(payload);
            }
        }
        let now = self.clock.now();
        for payload in payloads.into_iter().chain(held) {
            match &self.aws {
                // EventBridge takes its time to invoke the rule's target.
                Some(aws) => {
                    let delivery = aws.draw(aws.model.eventbridge_delivery);
                    let at = now + chrono::TimeDelta::from_std(delivery).unwrap_or_default();
                    self.in_transit.push((at, payload));
                }
                None => self.invoke_switch(payload, Vec::new(), InvocationKind::Switch),
            }
        }
        let (arrived, still): (Vec<_>, Vec<_>) = std::mem::take(&mut self.in_transit)
            .into_iter()
            .partition(|(at, _)| *at <= now);
        self.in_transit = still;
        for (_, payload) in arrived {
            self.invoke_switch(payload, Vec::new(), InvocationKind::Switch);
        }
    }

    /// Hand `payload` to the switch in an invocation of its own, running
    /// beside the others and the consumers as on Lambda (a probe of a
    /// hanging operator holds only its own invocation). `timers` are those
    /// of a timer batch.
    fn invoke_switch(&mut self, payload: Value, timers: Vec<BreakerTimer>, kind: InvocationKind) {
        let switch = self.switch.clone();
        let ledger = self.ledger.clone();
        let dies_after = self.faults.death(FaultClass::SwitchTimeout, 6);
        let (timeout, errors) = (self.config.function_timeout, self.switch_errors.clone());
        let (aws, pool) = (self.aws.clone(), self.pools.switch.clone());
        self.switch_calls.spawn(async move {
            // Within the switch's reserved concurrency: a throttled event
            // or timer invoke is retried by its service until it runs.
            let _environment = match &aws {
                Some(aws) => {
                    let environment = pool.start().await;
                    invoke_overhead(aws, &environment).await;
                    Some(environment)
                }
                None => None,
            };
            let run = invocation(dies_after, metered(switch.handle(&payload)));
            match tokio::time::timeout(timeout, run).await {
                Ok((report, calls)) => {
                    ledger.note(kind, 1, calls);
                    (timers, report.map_err(|e| e.to_string()))
                }
                Err(_) => {
                    errors.fetch_add(1, Ordering::Relaxed);
                    (timers, Err("the invocation timed out".to_owned()))
                }
            }
        });
    }

    /// Note a finished switch invocation's transitions; timers it reported
    /// failed (all of them if it failed) come back after the queue's
    /// visibility timeout.
    async fn settle_switch(
        &mut self,
        done: Result<(Vec<BreakerTimer>, Result<SwitchReport, String>), tokio::task::JoinError>,
    ) {
        let (timers, report) = match done {
            Ok(done) => done,
            Err(e) => {
                tracing::error!(error = %e, "a circuit switch invocation died");
                return;
            }
        };
        let failed: Vec<usize> = match &report {
            Ok(report) => report
                .response
                .batch_item_failures
                .iter()
                .filter_map(|f| f.item_identifier.strip_prefix("timer-")?.parse().ok())
                .collect(),
            Err(e) => {
                tracing::error!(error = %e, "circuit switch failed");
                (0..timers.len()).collect()
            }
        };
        for timer in failed.into_iter().filter_map(|i| timers.get(i)) {
            let mut again = timer.clone();
            again.due = self.clock.now()
                + chrono::TimeDelta::from_std(TIMER_VISIBILITY).unwrap_or_default();
            let _ = self.timers.set(&again).await;
        }
        let Ok(report) = report else {
            return;
        };
        let operator_calls = self.call_counter.as_ref().map(|count| count());
        let probe_calls = self.probe_calls();
        for d in report.decisions.iter().filter(|d| d.changed).cloned() {
            let lane = self
                .lanes
                .iter()
                .find(|l| l.operators.contains(&d.operator));
            let reported = lane.and_then(|l| report.target_of(&l.name));
            let stream = match (reported, lane) {
                (Some(target), _) => target,
                (None, Some(lane)) => lane.router.current().await.unwrap_or(ConsumerTarget::Real),
                (None, None) => ConsumerTarget::Real,
            };
            self.transitions.push(Transition {
                at: self.clock.now(),
                operator: d.operator,
                from: d.from,
                to: d.to,
                version: d.version,
                reason: d.reason,
                stream,
                operator_calls,
                probe_calls,
            });
        }
    }

    /// Calls the switch has made to probe open breakers so far (its own
    /// half-open trials included).
    pub fn probe_calls(&self) -> u64 {
        self.probes.load(Ordering::Relaxed)
    }

    /// Batches still being handled by a consumer.
    pub fn batches_in_flight(&self) -> usize {
        self.lanes.iter().map(|l| l.in_flight.len()).sum()
    }

    /// The mapping of the lane carrying `operator`'s requests.
    pub fn router_of(&self, operator: &OperatorId) -> Option<Arc<MemoryStreamRouter>> {
        self.lanes
            .iter()
            .find(|l| l.operators.contains(operator))
            .map(|l| l.router.clone())
    }

    /// Wait until every switch invocation and every batch in flight is done
    /// (its failures queued for redelivery).
    pub async fn drain(&mut self) {
        while let Some(done) = self.switch_calls.join_next().await {
            self.settle_switch(done).await;
        }
        let max_retries = self.config.max_retries;
        for lane in &mut self.lanes {
            while let Some(done) = lane.in_flight.join_next_with_id().await {
                lane.settle(done, max_retries, &mut self.discarded);
            }
        }
    }

    /// Deliver the next batch of every lane's stream to the consumer its
    /// mapping points at, where fewer than `parallelization` batches are in
    /// flight. Returns whether any batch was delivered.
    async fn deliver_batch(&mut self) -> bool {
        let mut delivered = false;
        for lane in &mut self.lanes {
            delivered |= lane
                .deliver(
                    &self.config,
                    (&self.faults, &self.consumer_errors),
                    &self.requests,
                    (&self.real, &self.fallback),
                    (&self.aws, &self.pools, &self.clock),
                    &self.ledger,
                    &mut self.discarded,
                )
                .await;
        }
        delivered
    }
}

/// The switch's prober, counting the calls it makes.
struct CountedProber {
    inner: Arc<dyn OperatorApi>,
    calls: Arc<AtomicU64>,
}

#[async_trait::async_trait]
impl OperatorApi for CountedProber {
    fn knows(&self, operator: &OperatorId) -> bool {
        self.inner.knows(operator)
    }

    async fn call(&self, call: &OperatorCall) -> CallResult {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.call(call).await
    }
}
