//! The gateway wired in memory: stream, consumers, switch, bus and schedule.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use circuit_switch::CircuitSwitch;
use circuit_switch::input::AlarmMap;
use fallback_consumer::FallbackConsumer;
use lifeboat_core::events::{LifeboatEvent, SOURCE};
use lifeboat_core::memory::{
    MemoryBreakerStore, MemoryCacheStore, MemoryEventBus, MemoryRequestStore, MemoryStreamRouter,
    MemoryWindowStore,
};
use lifeboat_core::metrics::MemoryMetrics;
use lifeboat_core::ports::{OperatorApi, StreamRouter};
use lifeboat_core::request::RequestRecord;
use lifeboat_core::settings::Settings;
use lifeboat_core::{BreakerState, Clock, ConsumerTarget, OperatorId};
use real_consumer::RealConsumer;
use serde_json::{Value, json};
use tokio::task::JoinSet;

/// How the in-memory AWS behaves.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    pub settings: Settings,
    /// Records per stream batch (the mapping's BatchSize).
    pub batch_size: usize,
    /// Operator calls in flight per batch.
    pub concurrency: usize,
    /// Batches of the stream in flight at once (the mapping's
    /// ParallelizationFactor; the template sets 4).
    pub parallelization: usize,
    /// How often the stream is polled when it has nothing.
    pub poll: Duration,
    /// The schedule's period.
    pub tick_every: Duration,
    pub operators: Vec<OperatorId>,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            settings: Settings::default(),
            batch_size: 50,
            concurrency: real_consumer::DEFAULT_CONCURRENCY,
            parallelization: 4,
            poll: Duration::from_millis(100),
            tick_every: Duration::from_secs(5),
            operators: Vec::new(),
        }
    }
}

/// A breaker transition seen by the gateway.
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
    /// if a counter was given with [`Gateway::count_operator_calls_with`].
    pub operator_calls: Option<u64>,
}

/// Reads how many calls the operator has received.
pub type CallCounter = Box<dyn Fn() -> u64 + Send + Sync>;

/// The gateway in memory.
pub struct Gateway {
    pub clock: Arc<dyn Clock>,
    pub requests: Arc<MemoryRequestStore>,
    pub breakers: Arc<MemoryBreakerStore>,
    pub window: Arc<MemoryWindowStore>,
    pub bus: Arc<MemoryEventBus>,
    pub cache: Arc<MemoryCacheStore>,
    /// Every metric line the functions emitted.
    pub metrics: Arc<MemoryMetrics>,
    pub router: Arc<MemoryStreamRouter>,
    pub real: Arc<RealConsumer>,
    pub fallback: Arc<FallbackConsumer>,
    pub switch: CircuitSwitch,
    pub transitions: Vec<Transition>,
    call_counter: Option<CallCounter>,
    config: GatewayConfig,
    stream_position: usize,
    /// Records a consumer reported as failed, delivered again first.
    redeliver: Vec<RequestRecord>,
    sequence: usize,
    in_flight: JoinSet<Vec<RequestRecord>>,
    bus_position: usize,
    next_tick: DateTime<Utc>,
}

impl Gateway {
    pub fn new(
        operator: Arc<dyn OperatorApi>,
        clock: Arc<dyn Clock>,
        config: GatewayConfig,
    ) -> Self {
        let requests = Arc::new(MemoryRequestStore::new());
        let breakers = Arc::new(MemoryBreakerStore::new());
        let window = Arc::new(MemoryWindowStore::new());
        let bus = Arc::new(MemoryEventBus::new());
        let router = Arc::new(MemoryStreamRouter::new());
        let cache = Arc::new(MemoryCacheStore::new());
        let metrics = Arc::new(MemoryMetrics::new());
        let real = RealConsumer {
            requests: requests.clone(),
            breakers: breakers.clone(),
            window: window.clone(),
            events: bus.clone(),
            cache: cache.clone(),
            metrics: metrics.clone(),
            operator,
            clock: clock.clone(),
            settings: config.settings.clone(),
            concurrency: config.concurrency,
        };
        let fallback = FallbackConsumer {
            requests: requests.clone(),
            events: bus.clone(),
            clock: clock.clone(),
        };
        let switch = CircuitSwitch {
            breakers: breakers.clone(),
            events: bus.clone(),
            router: router.clone(),
            clock: clock.clone(),
            settings: config.settings.clone(),
            alarms: AlarmMap::default(),
            operators: config.operators.clone(),
            repoint_backoff: Duration::from_millis(100),
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
            router,
            real: Arc::new(real),
            fallback: Arc::new(fallback),
            switch,
            transitions: Vec::new(),
            call_counter: None,
            config,
            stream_position: 0,
            redeliver: Vec::new(),
            sequence: 0,
            in_flight: JoinSet::new(),
            bus_position: 0,
            next_tick,
        }
    }

    /// Note the operator's call count at every transition (for example from
    /// the simulated operator's own statistics).
    pub fn count_operator_calls_with(&mut self, counter: CallCounter) {
        self.call_counter = Some(counter);
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

    /// One round: due tick, events for the switch, one stream batch.
    /// Returns whether a batch was delivered.
    pub async fn step(&mut self) -> bool {
        if self.clock.now() >= self.next_tick {
            self.next_tick = self.clock.now()
                + chrono::TimeDelta::from_std(self.config.tick_every).unwrap_or_default();
            self.invoke_switch(&json!({
                "version": "0", "id": "tick", "detail-type": "Scheduled Event", "source": "aws.events",
                "time": self.clock.now().to_rfc3339(), "detail": {}
            }))
            .await;
        }
        self.deliver_bus_events().await;
        self.deliver_batch().await
    }

    async fn deliver_bus_events(&mut self) {
        let (events, next) = self.bus.read_from(self.bus_position);
        self.bus_position = next;
        for event in events {
            // The rules on the bus send these two to the switch.
            if matches!(
                event,
                LifeboatEvent::TripRequested(_) | LifeboatEvent::TrialsPassed(_)
            ) {
                let detail: Value =
                    serde_json::from_str(&event.detail_json()).unwrap_or(Value::Null);
                self.invoke_switch(&json!({
                    "version": "0", "id": "bus", "detail-type": event.detail_type(), "source": SOURCE,
                    "time": self.clock.now().to_rfc3339(), "detail": detail
                }))
                .await;
            }
        }
    }

    async fn invoke_switch(&mut self, payload: &Value) {
        match self.switch.handle(payload).await {
            Ok(report) => {
                let stream = report.stream_target.unwrap_or(ConsumerTarget::Real);
                let operator_calls = self.call_counter.as_ref().map(|count| count());
                for d in report.decisions.into_iter().filter(|d| d.changed) {
                    self.transitions.push(Transition {
                        at: self.clock.now(),
                        operator: d.operator,
                        from: d.from,
                        to: d.to,
                        version: d.version,
                        reason: d.reason,
                        stream,
                        operator_calls,
                    });
                }
            }
            Err(e) => tracing::error!(error = %e, "circuit switch failed"),
        }
    }

    /// Batches still being handled by a consumer.
    pub fn batches_in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Deliver the next batch of the stream to the consumer the mapping
    /// points at, if fewer than `parallelization` batches are in flight.
    /// Records reported as failed come back before new ones.
    async fn deliver_batch(&mut self) -> bool {
        while let Some(done) = self.in_flight.try_join_next() {
            match done {
                Ok(failed) => self.redeliver.extend(failed),
                Err(e) => tracing::error!(error = %e, "a stream batch task failed"),
            }
        }
        if self.in_flight.len() >= self.config.parallelization.max(1) {
            return false;
        }
        let mut batch: Vec<RequestRecord> = std::mem::take(&mut self.redeliver);
        if batch.len() > self.config.batch_size {
            self.redeliver = batch.split_off(self.config.batch_size);
        }
        let room = self.config.batch_size.saturating_sub(batch.len());
        if room > 0 {
            let (records, _) = self.requests.read_stream(self.stream_position);
            let fresh: Vec<RequestRecord> = records.into_iter().take(room).collect();
            self.stream_position += fresh.len();
            batch.extend(fresh);
        }
        if batch.is_empty() {
            return false;
        }
        // Every delivery gets fresh sequence numbers; a failure names one,
        // which maps back to its place in this batch.
        let first = self.sequence;
        self.sequence += batch.len();
        let payload = json!({
            "Records": batch.iter().enumerate().map(|(i, r)| stream_record(r, first + i)).collect::<Vec<_>>()
        });
        let target = self.router.current().await.unwrap_or(ConsumerTarget::Real);
        let (real, fallback) = (self.real.clone(), self.fallback.clone());
        self.in_flight.spawn(async move {
            let failures = match target {
                ConsumerTarget::Real => real
                    .handle(&payload)
                    .await
                    .map(|r| r.response.batch_item_failures)
                    .map_err(|e| e.to_string()),
                ConsumerTarget::Fallback => fallback
                    .handle(&payload)
                    .await
                    .map(|r| r.response.batch_item_failures)
                    .map_err(|e| e.to_string()),
            };
            match failures {
                Ok(failures) => {
                    // Lambda delivers again from the first failed record on.
                    let first_failed = failures
                        .iter()
                        .filter_map(|f| f.item_identifier.as_deref()?.parse::<usize>().ok())
                        .min();
                    match first_failed {
                        Some(position) => {
                            batch.split_off(position.saturating_sub(first).min(batch.len()))
                        }
                        None => Vec::new(),
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "consumer failed the batch");
                    batch
                }
            }
        });
        true
    }
}

/// A Requests-stream record of `request` as Lambda delivers it.
pub fn stream_record(request: &RequestRecord, position: usize) -> Value {
    // The item exactly as the DynamoDB adapter writes it.
    let image: Value = lifeboat_aws::request_to_item(request)
        .ok()
        .and_then(|item| serde_json::to_value(item).ok())
        .unwrap_or(Value::Null);
    json!({
        "eventID": format!("{position}"),
        "eventName": "INSERT",
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": {
            "ApproximateCreationDateTime": request.created_at.timestamp(),
            "Keys": {"request_id": {"S": request.request_id}},
            "NewImage": image,
            "SequenceNumber": format!("{position}"),
            "SizeBytes": 256,
            "StreamViewType": "NEW_AND_OLD_IMAGES"
        },
        "eventSourceARN": "arn:aws:dynamodb:us-east-1:000000000000:table/Requests/stream/local"
    })
}
