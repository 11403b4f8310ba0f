//! The functions' ports as AWS serves them: every call waits what the AWS
//! model ([`crate::aws`]) charges for it, on tokio's (virtual) clock.
//!
//! [`Charged`] wraps a store or the bus; [`ChargedTimers`] is the timer
//! queue (SQS: whole-second delays, a poller's pick-up); [`ChargedMapping`]
//! is an event source mapping reached through Lambda's control plane (a
//! shared request rate, 429s retried as the SDK retries them, and an update
//! that takes effect seconds later); [`FunctionPool`] is a function's
//! reserved concurrency and its warm execution environments.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, TimeDelta, Utc};
use lifeboat_core::cache::{CacheEntry, CacheKey, CachedAnswer, CachedRefusal};
use lifeboat_core::cart::Cart;
use lifeboat_core::events::LifeboatEvent;
use lifeboat_core::memory::MemoryStreamRouter;
use lifeboat_core::order::HeldOrder;
use lifeboat_core::ports::{
    BreakerStore, BreakerTimers, CacheStore, CacheWrite, CartStore, Clock, EventPublisher, Held,
    OrderStore, OutcomeWrite, PublishError, Repoint, RequestStore, RouterError, SaleStatusStore,
    StoreError, StoredRequest, StreamRouter, TimerError, Trial, TrialTally, WindowStore,
};
use lifeboat_core::probe::{BreakerTimer, ProbeSpec};
use lifeboat_core::request::{Outcome, RequestRecord};
use lifeboat_core::sale::SaleRecord;
use lifeboat_core::settings::Parallelization;
use lifeboat_core::window::{Bucket, CallCounts};
use lifeboat_core::{BreakerRecord, ConsumerTarget, OperatorId};
use serde::Serialize;
use tokio::time::Instant;

use crate::aws::{AwsModel, AwsRuntime, Latency};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A port whose every call first waits what AWS charges for it (nothing
/// in the ideal world, `aws` `None`).
pub struct Charged<T: ?Sized> {
    inner: Arc<T>,
    aws: Option<Arc<AwsRuntime>>,
}

impl<T: ?Sized> Charged<T> {
    pub fn new(inner: Arc<T>, aws: &Option<Arc<AwsRuntime>>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            aws: aws.clone(),
        })
    }

    async fn charge(&self, pick: fn(&AwsModel) -> Latency) {
        if let Some(aws) = &self.aws {
            aws.charge(pick).await;
        }
    }
}

fn read(m: &AwsModel) -> Latency {
    m.dynamodb_read
}
fn write(m: &AwsModel) -> Latency {
    m.dynamodb_write
}
fn batch_read(m: &AwsModel) -> Latency {
    m.dynamodb_batch_read
}
fn transaction(m: &AwsModel) -> Latency {
    m.dynamodb_transaction
}

#[async_trait]
impl<T: RequestStore + ?Sized> RequestStore for Charged<T> {
    async fn put_request(&self, request: &RequestRecord) -> Result<(), StoreError> {
        self.charge(write).await;
        self.inner.put_request(request).await
    }

    async fn get(
        &self,
        operator: &OperatorId,
        request_id: &str,
    ) -> Result<Option<StoredRequest>, StoreError> {
        self.charge(read).await;
        self.inner.get(operator, request_id).await
    }

    async fn write_outcome(
        &self,
        operator: &OperatorId,
        request_id: &str,
        outcome: &Outcome,
    ) -> Result<OutcomeWrite, StoreError> {
        self.charge(write).await;
        self.inner
            .write_outcome(operator, request_id, outcome)
            .await
    }
}

#[async_trait]
impl<T: BreakerStore + ?Sized> BreakerStore for Charged<T> {
    async fn load(&self, operator: &OperatorId) -> Result<Option<BreakerRecord>, StoreError> {
        self.charge(read).await;
        self.inner.load(operator).await
    }

    async fn load_many(&self, operators: &[OperatorId]) -> Result<Vec<BreakerRecord>, StoreError> {
        // One BatchGetItem per 100 keys, sent one after another.
        for _ in 0..operators.len().div_ceil(100).max(1) {
            self.charge(batch_read).await;
        }
        self.inner.load_many(operators).await
    }

    async fn list(&self) -> Result<Vec<BreakerRecord>, StoreError> {
        self.charge(batch_read).await;
        self.inner.list().await
    }

    async fn save(
        &self,
        record: &BreakerRecord,
        expected_version: Option<u64>,
    ) -> Result<(), StoreError> {
        // The breaker and its change item, in one transaction.
        self.charge(transaction).await;
        self.inner.save(record, expected_version).await
    }

    async fn claim_trial(
        &self,
        operator: &OperatorId,
        version: u64,
        limit: u32,
    ) -> Result<bool, StoreError> {
        self.charge(write).await;
        self.inner.claim_trial(operator, version, limit).await
    }

    async fn claim_probe(
        &self,
        operator: &OperatorId,
        version: u64,
        at: DateTime<Utc>,
        last_before: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.charge(write).await;
        self.inner
            .claim_probe(operator, version, at, last_before)
            .await
    }

    async fn record_trial(
        &self,
        operator: &OperatorId,
        version: u64,
        trial: Trial,
    ) -> Result<Option<TrialTally>, StoreError> {
        self.charge(write).await;
        self.inner.record_trial(operator, version, trial).await
    }

    async fn mark_announced(&self, operator: &OperatorId, version: u64) -> Result<(), StoreError> {
        self.charge(write).await;
        self.inner.mark_announced(operator, version).await
    }

    async fn mark_routed(&self, operator: &OperatorId, version: u64) -> Result<(), StoreError> {
        self.charge(write).await;
        self.inner.mark_routed(operator, version).await
    }

    async fn remember_answered(
        &self,
        operator: &OperatorId,
        question: &ProbeSpec,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.charge(write).await;
        self.inner.remember_answered(operator, question, at).await
    }

    async fn answered(&self, operator: &OperatorId) -> Result<Option<ProbeSpec>, StoreError> {
        self.charge(read).await;
        self.inner.answered(operator).await
    }
}

#[async_trait]
impl<T: WindowStore + ?Sized> WindowStore for Charged<T> {
    async fn add(
        &self,
        operator: &OperatorId,
        bucket_start: DateTime<Utc>,
        counts: &CallCounts,
    ) -> Result<(), StoreError> {
        self.charge(write).await;
        self.inner.add(operator, bucket_start, counts).await
    }

    async fn since(
        &self,
        operator: &OperatorId,
        since: DateTime<Utc>,
    ) -> Result<Vec<Bucket>, StoreError> {
        self.charge(read).await;
        self.inner.since(operator, since).await
    }
}

#[async_trait]
impl<T: CacheStore + ?Sized> CacheStore for Charged<T> {
    async fn get(&self, key: &CacheKey) -> Result<Option<CacheEntry>, StoreError> {
        self.charge(read).await;
        self.inner.get(key).await
    }

    async fn put(
        &self,
        answer: &CachedAnswer,
        expires_at: DateTime<Utc>,
    ) -> Result<CacheWrite, StoreError> {
        self.charge(write).await;
        self.inner.put(answer, expires_at).await
    }

    async fn put_refusal(
        &self,
        refusal: &CachedRefusal,
        expires_at: DateTime<Utc>,
    ) -> Result<CacheWrite, StoreError> {
        self.charge(write).await;
        self.inner.put_refusal(refusal, expires_at).await
    }
}

#[async_trait]
impl<T: SaleStatusStore + ?Sized> SaleStatusStore for Charged<T> {
    async fn load(&self, operator: &OperatorId) -> Result<Option<SaleRecord>, StoreError> {
        self.charge(read).await;
        self.inner.load(operator).await
    }

    async fn save(
        &self,
        record: &SaleRecord,
        expected_revision: Option<u64>,
    ) -> Result<(), StoreError> {
        self.charge(write).await;
        self.inner.save(record, expected_revision).await
    }
}

#[async_trait]
impl<T: CartStore + ?Sized> CartStore for Charged<T> {
    async fn get(&self, cart_id: &str) -> Result<Option<Cart>, StoreError> {
        self.charge(read).await;
        self.inner.get(cart_id).await
    }

    async fn save(&self, cart: &Cart, expected_revision: Option<u64>) -> Result<(), StoreError> {
        self.charge(write).await;
        self.inner.save(cart, expected_revision).await
    }
}

/// The Orders table: its writes are transactions (an order with its
/// sailing's held passengers), its open orders one query of the index.
#[async_trait]
impl<T: OrderStore + ?Sized> OrderStore for Charged<T> {
    async fn get(&self, order_id: &str) -> Result<Option<HeldOrder>, StoreError> {
        self.charge(read).await;
        self.inner.get(order_id).await
    }

    async fn hold(&self, order: &HeldOrder, cap: Option<u32>) -> Result<Held, StoreError> {
        self.charge(transaction).await;
        self.inner.hold(order, cap).await
    }

    async fn save(&self, order: &HeldOrder, expected_revision: u64) -> Result<(), StoreError> {
        self.charge(transaction).await;
        self.inner.save(order, expected_revision).await
    }

    async fn open_orders(
        &self,
        operator: &OperatorId,
        limit: usize,
    ) -> Result<Vec<HeldOrder>, StoreError> {
        self.charge(read).await;
        self.inner.open_orders(operator, limit).await
    }

    async fn held_passengers(
        &self,
        operator: &OperatorId,
        sailing_id: &str,
    ) -> Result<u32, StoreError> {
        self.charge(read).await;
        self.inner.held_passengers(operator, sailing_id).await
    }
}

#[async_trait]
impl<T: EventPublisher + ?Sized> EventPublisher for Charged<T> {
    async fn publish(&self, events: &[LifeboatEvent]) -> Result<(), PublishError> {
        // One PutEvents per 10 entries.
        for _ in 0..events.len().div_ceil(10) {
            self.charge(|m| m.put_events).await;
        }
        self.inner.publish(events).await
    }
}

/// The breaker timer queue as SQS serves it: SendMessage takes its round
/// trip, `DelaySeconds` is whole seconds (a timer due in 2.3 s is delivered
/// after 3 s), and Lambda's poller picks a visible message up a moment
/// later.
pub struct ChargedTimers<T: ?Sized> {
    inner: Arc<T>,
    aws: Option<Arc<AwsRuntime>>,
    clock: Arc<dyn Clock>,
}

impl<T: ?Sized> ChargedTimers<T> {
    pub fn new(inner: Arc<T>, aws: &Option<Arc<AwsRuntime>>, clock: Arc<dyn Clock>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            aws: aws.clone(),
            clock,
        })
    }
}

/// When a message sent at `sent` for `due` is picked up: the delay rounded
/// up to whole seconds, plus the poller's pick-up.
pub fn sqs_due(sent: DateTime<Utc>, due: DateTime<Utc>, pick_up: Duration) -> DateTime<Utc> {
    let wait_ms = (due - sent).num_milliseconds().max(0);
    let whole_s = (wait_ms + 999) / 1000;
    sent + TimeDelta::seconds(whole_s) + TimeDelta::from_std(pick_up).unwrap_or_default()
}

#[async_trait]
impl<T: BreakerTimers + ?Sized> BreakerTimers for ChargedTimers<T> {
    async fn set(&self, timer: &BreakerTimer) -> Result<(), TimerError> {
        let Some(aws) = &self.aws else {
            return self.inner.set(timer).await;
        };
        aws.charge(|m| m.sqs_send).await;
        let mut sent = timer.clone();
        let pick_up = aws.draw(aws.model.sqs_receive);
        sent.due = sqs_due(self.clock.now(), timer.due, pick_up);
        self.inner.set(&sent).await
    }
}

/// Control-plane calls made, by kind.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ControlPlaneCalls {
    /// GetEventSourceMapping calls Lambda served.
    pub gets: u64,
    /// UpdateEventSourceMapping calls Lambda served.
    pub updates: u64,
    /// Attempts answered 429 TooManyRequestsException.
    pub throttled: u64,
    /// Calls that failed after every attempt was throttled.
    pub failed: u64,
}

/// Lambda's control plane for this account: one request rate shared by
/// every Get/UpdateEventSourceMapping (a token bucket of a second's worth).
#[derive(Debug)]
pub struct ControlPlane {
    aws: Arc<AwsRuntime>,
    bucket: Mutex<(f64, Instant)>,
    calls: Mutex<ControlPlaneCalls>,
}

#[derive(Clone, Copy)]
enum Call {
    Get,
    Update,
}

impl ControlPlane {
    pub fn new(aws: &Arc<AwsRuntime>) -> Arc<Self> {
        Arc::new(Self {
            aws: aws.clone(),
            bucket: Mutex::new((f64::from(aws.model.control_plane_per_s), Instant::now())),
            calls: Mutex::new(ControlPlaneCalls::default()),
        })
    }

    pub fn calls(&self) -> ControlPlaneCalls {
        *lock(&self.calls)
    }

    /// Take a token if the rate allows one now.
    fn admit(&self) -> bool {
        let rate = f64::from(self.aws.model.control_plane_per_s);
        let mut bucket = lock(&self.bucket);
        let now = Instant::now();
        let tokens = (bucket.0 + now.duration_since(bucket.1).as_secs_f64() * rate).min(rate);
        if tokens >= 1.0 {
            *bucket = (tokens - 1.0, now);
            true
        } else {
            *bucket = (tokens, now);
            false
        }
    }

    /// One call as the SDK makes it: throttled attempts retried with
    /// exponential backoff and full jitter, the error after the last.
    async fn call(&self, kind: Call) -> Result<(), RouterError> {
        let model = &self.aws.model;
        for attempt in 0..model.sdk_attempts.max(1) {
            if self.admit() {
                self.aws.charge(|m| m.control_plane_call).await;
                let mut calls = lock(&self.calls);
                match kind {
                    Call::Get => calls.gets += 1,
                    Call::Update => calls.updates += 1,
                }
                return Ok(());
            }
            lock(&self.calls).throttled += 1;
            if attempt + 1 < model.sdk_attempts {
                let cap = model
                    .sdk_backoff_base
                    .saturating_mul(1 << attempt.min(16))
                    .min(model.sdk_backoff_max);
                tokio::time::sleep(cap.mul_f64(self.aws.uniform())).await;
            }
        }
        lock(&self.calls).failed += 1;
        Err(RouterError::Throttled(
            "TooManyRequestsException: Rate exceeded".to_owned(),
        ))
    }
}

/// What a lane's pollers invoke: the mapping's function, or the one before
/// it until an update has taken effect.
#[derive(Debug, Default)]
pub struct MappingLag {
    state: Mutex<Serving>,
}

/// The function the pollers invoke, and the update on its way.
#[derive(Debug, Clone, Copy)]
struct Serving {
    now: ConsumerTarget,
    /// The function an accepted update names, and when the pollers follow.
    next: Option<(ConsumerTarget, DateTime<Utc>)>,
}

impl Default for Serving {
    fn default() -> Self {
        Self {
            now: ConsumerTarget::Real,
            next: None,
        }
    }
}

impl MappingLag {
    /// The function the pollers invoke at `now`.
    pub fn serving(&self, now: DateTime<Utc>) -> ConsumerTarget {
        let mut state = lock(&self.state);
        if let Some((target, at)) = state.next
            && now >= at
        {
            *state = Serving {
                now: target,
                next: None,
            };
        }
        state.now
    }

    fn updated(&self, target: ConsumerTarget, effective: DateTime<Utc>) {
        lock(&self.state).next = Some((target, effective));
    }
}

/// A lane's event source mapping reached through Lambda's control plane.
pub struct ChargedMapping {
    inner: Arc<MemoryStreamRouter>,
    plane: Arc<ControlPlane>,
    lag: Arc<MappingLag>,
    clock: Arc<dyn Clock>,
}

impl ChargedMapping {
    pub fn new(
        inner: Arc<MemoryStreamRouter>,
        plane: Arc<ControlPlane>,
        lag: Arc<MappingLag>,
        clock: Arc<dyn Clock>,
    ) -> Arc<Self> {
        Arc::new(Self {
            inner,
            plane,
            lag,
            clock,
        })
    }
}

#[async_trait]
impl StreamRouter for ChargedMapping {
    async fn current(&self) -> Result<ConsumerTarget, RouterError> {
        self.plane.call(Call::Get).await?;
        self.inner.current().await
    }

    /// As the DynamoDB adapter does it (lifeboat_aws's router): a
    /// GetEventSourceMapping, and an UpdateEventSourceMapping only when the
    /// mapping names the other function.
    async fn point_at(&self, target: ConsumerTarget) -> Result<Repoint, RouterError> {
        self.plane.call(Call::Get).await?;
        if self.inner.current().await? == target {
            return Ok(Repoint::AlreadyThere);
        }
        self.plane.call(Call::Update).await?;
        let repoint = self.inner.point_at(target).await?;
        if repoint == Repoint::Changed {
            let lag = self.plane.aws.draw(self.plane.aws.model.mapping_update);
            let effective = self.clock.now() + TimeDelta::from_std(lag).unwrap_or_default();
            self.lag.updated(target, effective);
        }
        Ok(repoint)
    }

    /// A GetEventSourceMapping, and an UpdateEventSourceMapping only when
    /// the factor differs. Lambda's pollers take a new factor at once here;
    /// the lag models where a mapping delivers, not how many batches.
    async fn set_parallelization(&self, factor: Parallelization) -> Result<Repoint, RouterError> {
        self.plane.call(Call::Get).await?;
        if self.inner.parallelization() == Some(factor) {
            return Ok(Repoint::AlreadyThere);
        }
        self.plane.call(Call::Update).await?;
        self.inner.set_parallelization(factor).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::AWS;
    use crate::clock::TokioClock;
    use lifeboat_core::memory::MemoryTimers;

    fn t0() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap_or_default()
    }

    #[test]
    fn sqs_delays_are_whole_seconds() {
        let due = |ms: i64| sqs_due(t0(), t0() + TimeDelta::milliseconds(ms), Duration::ZERO);
        assert_eq!(due(0), t0());
        assert_eq!(due(1), t0() + TimeDelta::seconds(1));
        assert_eq!(due(2_300), t0() + TimeDelta::seconds(3));
        assert_eq!(due(10_000), t0() + TimeDelta::seconds(10));
        assert_eq!(due(-500), t0(), "an overdue timer is sent without delay");
        let late = sqs_due(t0(), t0(), Duration::from_millis(120));
        assert_eq!(late, t0() + TimeDelta::milliseconds(120));
    }

    #[tokio::test(start_paused = true)]
    async fn a_timer_arrives_on_a_whole_second_and_a_pick_up_later() {
        let aws = AwsRuntime::new(AWS, 1);
        let clock: Arc<dyn Clock> = Arc::new(TokioClock::starting_at(t0()));
        let queue = Arc::new(MemoryTimers::new());
        let timers = ChargedTimers::new(queue.clone(), &Some(aws), clock.clone());
        let nordic = OperatorId::new("nordic").unwrap_or_else(|e| panic!("{e}"));
        let timer = BreakerTimer {
            operator: nordic,
            version: 3,
            due: t0() + TimeDelta::milliseconds(2_300),
        };
        timers.set(&timer).await.unwrap_or_else(|e| panic!("{e}"));
        let sent_at = clock.now();
        assert!(sent_at > t0(), "SendMessage takes time");
        let due = queue.next_due().unwrap_or_default();
        assert!(due >= sent_at + TimeDelta::seconds(2), "{due}");
        assert!(
            due < sent_at + TimeDelta::seconds(2) + TimeDelta::seconds(4),
            "{due}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_control_plane_throttles_past_its_rate_and_the_sdk_retries() {
        let aws = AwsRuntime::new(AWS, 2);
        let clock: Arc<dyn Clock> = Arc::new(TokioClock::starting_at(t0()));
        let plane = ControlPlane::new(&aws);
        let lag = Arc::new(MappingLag::default());
        let mapping = ChargedMapping::new(
            Arc::new(MemoryStreamRouter::new()),
            plane.clone(),
            lag,
            clock,
        );
        // 200 lanes' reads at once, as a tick that reads every mapping
        // in parallel would make them.
        let mut reads = tokio::task::JoinSet::new();
        for _ in 0..200 {
            let mapping = mapping.clone();
            reads.spawn(async move { mapping.current().await });
        }
        let results = reads.join_all().await;
        let calls = plane.calls();
        let ok = results.iter().filter(|r| r.is_ok()).count() as u64;
        assert_eq!(calls.gets, ok);
        assert!(calls.throttled > 0, "{calls:?}");
        assert!(
            calls.failed > 0,
            "200 calls at 15/s with 3 attempts: {calls:?}"
        );
        assert_eq!(ok + calls.failed, 200);
        let throttled = results
            .iter()
            .find_map(|r| r.as_ref().err())
            .map(ToString::to_string)
            .unwrap_or_default();
        assert!(
            throttled.contains("TooManyRequestsException"),
            "{throttled}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_repoint_takes_effect_seconds_later() {
        let aws = AwsRuntime::new(AWS, 3);
        let clock: Arc<dyn Clock> = Arc::new(TokioClock::starting_at(t0()));
        let lag = Arc::new(MappingLag::default());
        let plane = ControlPlane::new(&aws);
        let mapping = ChargedMapping::new(
            Arc::new(MemoryStreamRouter::new()),
            plane.clone(),
            lag.clone(),
            clock.clone(),
        );
        let changed = mapping.point_at(ConsumerTarget::Fallback).await;
        assert!(matches!(changed, Ok(Repoint::Changed)));
        let again = mapping.point_at(ConsumerTarget::Fallback).await;
        assert!(matches!(again, Ok(Repoint::AlreadyThere)));
        assert_eq!(mapping.current().await.ok(), Some(ConsumerTarget::Fallback));
        assert_eq!(
            lag.serving(clock.now()),
            ConsumerTarget::Real,
            "still updating"
        );
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(lag.serving(clock.now()), ConsumerTarget::Fallback);
    }
}
