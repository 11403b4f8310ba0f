//! Faults in lifeboat's own dependencies, injected on purpose.
//!
//! A [`FaultPlan`] says how often each class of dependency call fails (a
//! DynamoDB throttle or 5xx after the SDK's own retries, a PutEvents entry
//! refused, a mapping update refused as busy, an egress failure on the way
//! to every operator) and how often an invocation dies half-way. [`Faulty`]
//! wraps a port and fails its calls as the plan says; [`invocation`] runs a
//! function invocation that may stop for good after its k-th dependency
//! call, as a Lambda killed or timed out there does. Draws come from one
//! seeded generator, so a paused-clock run is the same run every time.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use lifeboat_core::breaker::ConsumerTarget;
use lifeboat_core::cache::{CacheEntry, CacheKey, CachedAnswer, CachedRefusal};
use lifeboat_core::events::LifeboatEvent;
use lifeboat_core::ports::{
    BreakerStore, BreakerTimers, CacheStore, CacheWrite, Clock, EventPublisher, MetricsSink,
    OperatorApi, OutcomeWrite, PublishError, Repoint, RequestStore, RouterError, SaleStatusStore,
    StoreError, StoredRequest, StreamRouter, TimerError, Trial, TrialTally, WindowStore,
};
use lifeboat_core::probe::{BreakerTimer, ProbeSpec};
use lifeboat_core::request::{CallClass, CallResult, OperatorCall, Outcome, RequestRecord};
use lifeboat_core::sale::SaleRecord;
use lifeboat_core::settings::Parallelization;
use lifeboat_core::watched::{Watched, watch};
use lifeboat_core::window::{Bucket, CallCounts};
use lifeboat_core::{BreakerRecord, OperatorId};
use lifeboat_operator::SimRng;
use serde::Serialize;

/// What can go wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultClass {
    RequestPut,
    RequestRead,
    OutcomeWrite,
    WindowAdd,
    WindowRead,
    BreakerRead,
    BreakerWrite,
    TrialClaim,
    CacheRead,
    CachePut,
    SaleRead,
    SaleWrite,
    /// One PutEvents entry refused (the others of the call accepted).
    PutEvents,
    /// An UpdateEventSourceMapping refused (busy, or a 5xx).
    MappingUpdate,
    TimerSet,
    /// A consumer invocation killed after some of its calls.
    ConsumerKill,
    /// A switch invocation timed out half-way.
    SwitchTimeout,
    /// Every operator unreachable from lifeboat (DNS, NAT, TLS roots).
    Egress,
    /// A message or timer delivered once more (SQS is at least once).
    Redelivery,
    /// An event delivered twice by its rule.
    Duplicate,
    /// An event delivered after the one that followed it.
    Reorder,
}

impl FaultClass {
    /// The dependency faults: each one a failed call that lifeboat must show
    /// in `DependencyErrors`, under this name.
    pub const DEPENDENCIES: [(FaultClass, &'static str); 15] = [
        (FaultClass::RequestPut, "requests.put"),
        (FaultClass::RequestRead, "requests.read"),
        (FaultClass::OutcomeWrite, "requests.outcome"),
        (FaultClass::WindowAdd, "window.add"),
        (FaultClass::WindowRead, "window.read"),
        (FaultClass::BreakerRead, "breaker.read"),
        (FaultClass::BreakerWrite, "breaker.write"),
        (FaultClass::TrialClaim, "breaker.trial"),
        (FaultClass::CacheRead, "cache.read"),
        (FaultClass::CachePut, "cache.put"),
        (FaultClass::SaleRead, "sale.read"),
        (FaultClass::SaleWrite, "sale.write"),
        (FaultClass::PutEvents, "events.put"),
        (FaultClass::MappingUpdate, "mapping.update"),
        (FaultClass::TimerSet, "timers.set"),
    ];

    /// Invocations that die: Lambda counts them in its `Errors` metric.
    pub const DEATHS: [FaultClass; 2] = [FaultClass::ConsumerKill, FaultClass::SwitchTimeout];

    /// How events and messages arrive: at least once, in any order.
    pub const DELIVERIES: [FaultClass; 3] = [
        FaultClass::Redelivery,
        FaultClass::Duplicate,
        FaultClass::Reorder,
    ];
}

#[derive(Debug)]
struct PlanState {
    rates: BTreeMap<FaultClass, f64>,
    rng: SimRng,
    injected: BTreeMap<FaultClass, u64>,
}

/// How often each fault happens now, and how many have been injected.
#[derive(Debug)]
pub struct FaultPlan {
    state: Mutex<PlanState>,
}

impl FaultPlan {
    /// A plan injecting nothing until rates are set.
    pub fn new(seed: u64) -> Self {
        Self {
            state: Mutex::new(PlanState {
                rates: BTreeMap::new(),
                rng: SimRng::new(seed),
                injected: BTreeMap::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, PlanState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// From now on, these rates (per call, delivery or invocation); every
    /// other class at 0.
    pub fn set_rates(&self, rates: &[(FaultClass, f64)]) {
        self.lock().rates = rates.iter().copied().collect();
    }

    /// Whether a `class` fault strikes this call, counted if it does.
    pub fn strike(&self, class: FaultClass) -> bool {
        let struck = self.roll(class);
        if struck {
            self.count(class);
        }
        struck
    }

    fn roll(&self, class: FaultClass) -> bool {
        let mut state = self.lock();
        let rate = state.rates.get(&class).copied().unwrap_or(0.0);
        rate > 0.0 && state.rng.next_f64() < rate
    }

    fn count(&self, class: FaultClass) {
        *self.lock().injected.entry(class).or_default() += 1;
    }

    /// Whether the invocation about to start dies (a `class` fault), and
    /// after which of its first `calls` dependency calls. Counted only if
    /// it does die: an invocation that makes fewer calls ends normally.
    pub fn death(self: &Arc<Self>, class: FaultClass, calls: u32) -> Option<Death> {
        self.roll(class).then(|| Death {
            class,
            plan: self.clone(),
            left: AtomicU32::new(self.pick(calls)),
        })
    }

    /// A number from 1 to `n`, from the plan's generator.
    pub fn pick(&self, n: u32) -> u32 {
        1 + u32::try_from(self.lock().rng.next_u64() % u64::from(n.max(1))).unwrap_or(0)
    }

    /// Faults injected so far, per class.
    pub fn injected(&self) -> BTreeMap<FaultClass, u64> {
        self.lock().injected.clone()
    }

    fn store_error(&self, class: FaultClass) -> Option<StoreError> {
        self.strike(class).then(|| {
            StoreError::Unavailable(if self.pick(2) == 1 {
                "ThrottlingException: rate of requests exceeds the allowed throughput (injected)"
                    .into()
            } else {
                "InternalServerError (injected)".into()
            })
        })
    }
}

/// How an invocation will die: at the start of its k-th dependency call.
#[derive(Debug)]
pub struct Death {
    class: FaultClass,
    plan: Arc<FaultPlan>,
    /// Dependency calls it may still start.
    left: AtomicU32,
}

tokio::task_local! {
    static LIFE: Option<Arc<Death>>;
}

/// Run one function invocation that, given a [`Death`], stops for good when
/// it starts its k-th dependency call (operator calls included): whatever it
/// wrote before stays written, nothing after happens. The caller bounds it
/// with the function's timeout, as Lambda does.
pub async fn invocation<F: Future>(death: Option<Death>, body: F) -> F::Output {
    LIFE.scope(death.map(Arc::new), body).await
}

/// Where an invocation may die: before each dependency call.
async fn checkpoint() {
    let dying = LIFE
        .try_with(|life| {
            life.as_ref()
                .filter(|d| d.left.fetch_sub(1, Ordering::Relaxed) == 1)
                .map(|d| d.plan.count(d.class))
                .is_some()
        })
        .unwrap_or(false);
    if dying {
        std::future::pending::<()>().await;
    }
}

/// `port` as a function sees it here: its failures counted in
/// `DependencyErrors` as deployed ([`Watched`]), injected as `plan` says.
pub fn port<T: ?Sized>(
    port: Arc<T>,
    plan: &Arc<FaultPlan>,
    metrics: &Arc<dyn MetricsSink>,
    clock: &Arc<dyn Clock>,
) -> Arc<Watched<Faulty<T>>> {
    watch(Faulty::new(port, plan), metrics, clock)
}

/// A port whose calls fail as the plan says.
pub struct Faulty<T: ?Sized> {
    inner: Arc<T>,
    plan: Arc<FaultPlan>,
}

impl<T: ?Sized> Faulty<T> {
    pub fn new(inner: Arc<T>, plan: &Arc<FaultPlan>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            plan: plan.clone(),
        })
    }

    async fn gate(&self, class: FaultClass) -> Result<(), StoreError> {
        checkpoint().await;
        match self.plan.store_error(class) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

#[async_trait]
impl<T: RequestStore + ?Sized> RequestStore for Faulty<T> {
    async fn put_request(&self, request: &RequestRecord) -> Result<(), StoreError> {
        self.gate(FaultClass::RequestPut).await?;
        self.inner.put_request(request).await
    }

    async fn get(
        &self,
        operator: &OperatorId,
        request_id: &str,
    ) -> Result<Option<StoredRequest>, StoreError> {
        self.gate(FaultClass::RequestRead).await?;
        self.inner.get(operator, request_id).await
    }

    async fn write_outcome(
        &self,
        operator: &OperatorId,
        request_id: &str,
        outcome: &Outcome,
    ) -> Result<OutcomeWrite, StoreError> {
        self.gate(FaultClass::OutcomeWrite).await?;
        self.inner
            .write_outcome(operator, request_id, outcome)
            .await
    }
}

#[async_trait]
impl<T: BreakerStore + ?Sized> BreakerStore for Faulty<T> {
    async fn load(&self, operator: &OperatorId) -> Result<Option<BreakerRecord>, StoreError> {
        self.gate(FaultClass::BreakerRead).await?;
        self.inner.load(operator).await
    }

    async fn load_many(&self, operators: &[OperatorId]) -> Result<Vec<BreakerRecord>, StoreError> {
        self.gate(FaultClass::BreakerRead).await?;
        self.inner.load_many(operators).await
    }

    async fn list(&self) -> Result<Vec<BreakerRecord>, StoreError> {
        self.gate(FaultClass::BreakerRead).await?;
        self.inner.list().await
    }

    async fn save(
        &self,
        record: &BreakerRecord,
        expected_version: Option<u64>,
    ) -> Result<(), StoreError> {
        self.gate(FaultClass::BreakerWrite).await?;
        self.inner.save(record, expected_version).await
    }

    async fn claim_trial(
        &self,
        operator: &OperatorId,
        version: u64,
        limit: u32,
    ) -> Result<bool, StoreError> {
        self.gate(FaultClass::TrialClaim).await?;
        self.inner.claim_trial(operator, version, limit).await
    }

    async fn claim_probe(
        &self,
        operator: &OperatorId,
        version: u64,
        at: DateTime<Utc>,
        last_before: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.gate(FaultClass::TrialClaim).await?;
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
        self.gate(FaultClass::TrialClaim).await?;
        self.inner.record_trial(operator, version, trial).await
    }

    async fn mark_announced(&self, operator: &OperatorId, version: u64) -> Result<(), StoreError> {
        self.gate(FaultClass::BreakerWrite).await?;
        self.inner.mark_announced(operator, version).await
    }

    async fn mark_routed(&self, operator: &OperatorId, version: u64) -> Result<(), StoreError> {
        self.gate(FaultClass::BreakerWrite).await?;
        self.inner.mark_routed(operator, version).await
    }

    async fn remember_answered(
        &self,
        operator: &OperatorId,
        question: &ProbeSpec,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.gate(FaultClass::BreakerWrite).await?;
        self.inner.remember_answered(operator, question, at).await
    }

    async fn answered(&self, operator: &OperatorId) -> Result<Option<ProbeSpec>, StoreError> {
        self.gate(FaultClass::BreakerRead).await?;
        self.inner.answered(operator).await
    }
}

#[async_trait]
impl<T: WindowStore + ?Sized> WindowStore for Faulty<T> {
    async fn add(
        &self,
        operator: &OperatorId,
        bucket_start: DateTime<Utc>,
        counts: &CallCounts,
    ) -> Result<(), StoreError> {
        self.gate(FaultClass::WindowAdd).await?;
        self.inner.add(operator, bucket_start, counts).await
    }

    async fn since(
        &self,
        operator: &OperatorId,
        since: DateTime<Utc>,
    ) -> Result<Vec<Bucket>, StoreError> {
        self.gate(FaultClass::WindowRead).await?;
        self.inner.since(operator, since).await
    }
}

#[async_trait]
impl<T: CacheStore + ?Sized> CacheStore for Faulty<T> {
    async fn get(&self, key: &CacheKey) -> Result<Option<CacheEntry>, StoreError> {
        self.gate(FaultClass::CacheRead).await?;
        self.inner.get(key).await
    }

    async fn put(
        &self,
        answer: &CachedAnswer,
        expires_at: DateTime<Utc>,
    ) -> Result<CacheWrite, StoreError> {
        self.gate(FaultClass::CachePut).await?;
        self.inner.put(answer, expires_at).await
    }

    async fn put_refusal(
        &self,
        refusal: &CachedRefusal,
        expires_at: DateTime<Utc>,
    ) -> Result<CacheWrite, StoreError> {
        self.gate(FaultClass::CachePut).await?;
        self.inner.put_refusal(refusal, expires_at).await
    }
}

#[async_trait]
impl<T: SaleStatusStore + ?Sized> SaleStatusStore for Faulty<T> {
    async fn load(&self, operator: &OperatorId) -> Result<Option<SaleRecord>, StoreError> {
        self.gate(FaultClass::SaleRead).await?;
        self.inner.load(operator).await
    }

    async fn save(
        &self,
        record: &SaleRecord,
        expected_revision: Option<u64>,
    ) -> Result<(), StoreError> {
        self.gate(FaultClass::SaleWrite).await?;
        self.inner.save(record, expected_revision).await
    }
}

#[async_trait]
impl<T: EventPublisher + ?Sized> EventPublisher for Faulty<T> {
    /// Each entry refused on its own, as PutEvents answers with
    /// `FailedEntryCount`; the accepted ones are published.
    async fn publish(&self, events: &[LifeboatEvent]) -> Result<(), PublishError> {
        checkpoint().await;
        let mut accepted = Vec::new();
        let mut failed = Vec::new();
        for (i, event) in events.iter().enumerate() {
            if self.plan.strike(FaultClass::PutEvents) {
                failed.push((i, "ThrottlingException (injected)".to_owned()));
            } else {
                accepted.push(event.clone());
            }
        }
        self.inner.publish(&accepted).await?;
        if failed.is_empty() {
            Ok(())
        } else {
            Err(PublishError::Partial {
                total: events.len(),
                failed,
            })
        }
    }
}

#[async_trait]
impl<T: StreamRouter + ?Sized> StreamRouter for Faulty<T> {
    async fn current(&self) -> Result<ConsumerTarget, RouterError> {
        checkpoint().await;
        self.inner.current().await
    }

    async fn point_at(&self, target: ConsumerTarget) -> Result<Repoint, RouterError> {
        checkpoint().await;
        if self.plan.strike(FaultClass::MappingUpdate) {
            return Err(if self.plan.pick(2) == 1 {
                RouterError::Busy("ResourceInUseException (injected)".into())
            } else {
                RouterError::Unavailable("ServiceException (injected)".into())
            });
        }
        self.inner.point_at(target).await
    }

    async fn set_parallelization(&self, factor: Parallelization) -> Result<Repoint, RouterError> {
        checkpoint().await;
        if self.plan.strike(FaultClass::MappingUpdate) {
            return Err(RouterError::Busy(
                "ResourceInUseException (injected)".into(),
            ));
        }
        self.inner.set_parallelization(factor).await
    }
}

#[async_trait]
impl<T: BreakerTimers + ?Sized> BreakerTimers for Faulty<T> {
    async fn set(&self, timer: &BreakerTimer) -> Result<(), TimerError> {
        checkpoint().await;
        if self.plan.strike(FaultClass::TimerSet) {
            return Err(TimerError(
                "SendMessage: ServiceUnavailable (injected)".into(),
            ));
        }
        self.inner.set(timer).await
    }
}

/// The operators as lifeboat reaches them: during an egress fault no call
/// leaves (a connect failure at once, as a DNS or TLS failure is).
pub struct FaultyOperators {
    pub inner: Arc<dyn OperatorApi>,
    pub plan: Arc<FaultPlan>,
}

#[async_trait]
impl OperatorApi for FaultyOperators {
    fn knows(&self, operator: &OperatorId) -> bool {
        self.inner.knows(operator)
    }

    async fn call(&self, call: &OperatorCall) -> CallResult {
        checkpoint().await;
        if self.plan.strike(FaultClass::Egress) {
            return CallResult {
                class: CallClass::Connect,
                elapsed: Duration::from_millis(5),
                body: None,
                detail: "dns error: failed to lookup address information (injected)".into(),
            };
        }
        self.inner.call(call).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lifeboat_core::memory::MemoryWindowStore;

    #[tokio::test(start_paused = true)]
    async fn a_plan_fails_calls_at_its_rate_and_counts_them() {
        let plan = Arc::new(FaultPlan::new(7));
        let window = Faulty::new(Arc::new(MemoryWindowStore::new()), &plan);
        let nordic = OperatorId::new("nordic").unwrap_or_else(|e| panic!("{e}"));
        let counts = CallCounts::default();
        let add = || window.add(&nordic, DateTime::UNIX_EPOCH, &counts);
        assert!(add().await.is_ok(), "no rate, no fault");
        plan.set_rates(&[(FaultClass::WindowAdd, 0.5)]);
        let mut failed = 0;
        for _ in 0..1000 {
            failed += u64::from(add().await.is_err());
        }
        assert!((400..600).contains(&failed), "{failed}");
        assert_eq!(plan.injected().get(&FaultClass::WindowAdd), Some(&failed));
    }

    #[tokio::test(start_paused = true)]
    async fn an_invocation_dies_at_its_kth_call_and_keeps_what_it_wrote() {
        let plan = Arc::new(FaultPlan::new(1));
        let window = Faulty::new(Arc::new(MemoryWindowStore::new()), &plan);
        let nordic = OperatorId::new("nordic").unwrap_or_else(|e| panic!("{e}"));
        let written = Arc::new(AtomicU32::new(0));
        let body = async {
            for _ in 0..5 {
                let _ = window
                    .add(&nordic, DateTime::UNIX_EPOCH, &CallCounts::default())
                    .await;
                written.fetch_add(1, Ordering::Relaxed);
            }
        };
        plan.set_rates(&[(FaultClass::ConsumerKill, 1.0)]);
        let mut death = plan.death(FaultClass::ConsumerKill, 5);
        if let Some(d) = death.as_mut() {
            d.left = AtomicU32::new(3);
        }
        let run = tokio::time::timeout(Duration::from_secs(15), invocation(death, body)).await;
        assert!(run.is_err(), "the invocation never finished");
        assert_eq!(written.load(Ordering::Relaxed), 2);
        assert_eq!(plan.injected().get(&FaultClass::ConsumerKill), Some(&1));
    }
}
