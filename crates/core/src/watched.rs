//! Every failed call to one of lifeboat's own dependencies, counted.
//!
//! [`Watched`] wraps a port (a table, the bus, a stream mapping, the timer
//! queue) and emits `DependencyErrors` for each call that failed, with the
//! dependency's name as its `Dependency` dimension and once more without
//! dimensions for the alarm. A lost conditional write is not counted: it is
//! how the ports say "someone else wrote first". Handlers keep deciding what
//! a failure means; this only makes sure none goes unseen (docs/chaos.md).

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::breaker::{BreakerRecord, ConsumerTarget};
use crate::cache::{CacheEntry, CacheKey, CachedAnswer, CachedRefusal};
use crate::cart::Cart;
use crate::events::LifeboatEvent;
use crate::metrics::MetricSet;
use crate::operator::OperatorId;
use crate::order::HeldOrder;
use crate::ports::{
    BreakerStore, BreakerTimers, CacheStore, CacheWrite, CartStore, Clock, EventPublisher, Held,
    MetricsSink, OrderStore, OutcomeWrite, PublishError, Repoint, RequestStore, RouterError,
    SaleStatusStore, StoreError, StoredRequest, StreamRouter, TimerError, Trial, TrialTally,
    WindowStore,
};
use crate::probe::{BreakerTimer, ProbeSpec};
use crate::request::{Outcome, RequestRecord};
use crate::sale::SaleRecord;
use crate::settings::Parallelization;
use crate::window::{Bucket, CallCounts};

/// The metric counting failed dependency calls.
pub const METRIC: &str = crate::metrics::names::DEPENDENCY_ERRORS;

/// Where failed dependency calls are counted: what [`Watched`] counts with,
/// and what an adapter holds for a call it makes on its own behalf and does
/// not fail on (a best-effort read inside a write), so that one goes unseen
/// neither.
#[derive(Clone)]
pub struct FailureCounter {
    metrics: Arc<dyn MetricsSink>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for FailureCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FailureCounter").finish_non_exhaustive()
    }
}

impl FailureCounter {
    pub fn new(metrics: Arc<dyn MetricsSink>, clock: Arc<dyn Clock>) -> Self {
        Self { metrics, clock }
    }

    /// `failed` calls to `dependency`, in `DependencyErrors` with and
    /// without the `Dependency` dimension.
    pub fn count(&self, dependency: &'static str, failed: u64) {
        if failed == 0 {
            return;
        }
        self.metrics.emit(
            &[
                MetricSet::new()
                    .dimension("Dependency", dependency)
                    .count(METRIC, failed),
                MetricSet::new().count(METRIC, failed),
            ],
            self.clock.now(),
        );
    }
}

/// A port whose failures are counted.
pub struct Watched<T: ?Sized> {
    inner: Arc<T>,
    failures: FailureCounter,
}

impl<T: ?Sized> Watched<T> {
    pub fn new(inner: Arc<T>, metrics: Arc<dyn MetricsSink>, clock: Arc<dyn Clock>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            failures: FailureCounter::new(metrics, clock),
        })
    }

    fn count(&self, dependency: &'static str, failed: u64) {
        self.failures.count(dependency, failed);
    }

    fn store<R>(
        &self,
        dependency: &'static str,
        r: Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        if matches!(&r, Err(e) if !matches!(e, StoreError::Conflict(_))) {
            self.count(dependency, 1);
        }
        r
    }

    fn router<R>(
        &self,
        dependency: &'static str,
        r: Result<R, RouterError>,
    ) -> Result<R, RouterError> {
        if r.is_err() {
            self.count(dependency, 1);
        }
        r
    }
}

/// `inner`, its failures counted into `metrics`.
pub fn watch<T: ?Sized>(
    inner: Arc<T>,
    metrics: &Arc<dyn MetricsSink>,
    clock: &Arc<dyn Clock>,
) -> Arc<Watched<T>> {
    Watched::new(inner, metrics.clone(), clock.clone())
}

#[async_trait]
impl<T: RequestStore + ?Sized> RequestStore for Watched<T> {
    async fn put_request(&self, request: &RequestRecord) -> Result<(), StoreError> {
        self.store("requests.put", self.inner.put_request(request).await)
    }

    async fn get(
        &self,
        operator: &OperatorId,
        request_id: &str,
    ) -> Result<Option<StoredRequest>, StoreError> {
        self.store("requests.read", self.inner.get(operator, request_id).await)
    }

    async fn write_outcome(
        &self,
        operator: &OperatorId,
        request_id: &str,
        outcome: &Outcome,
    ) -> Result<OutcomeWrite, StoreError> {
        let written = self
            .inner
            .write_outcome(operator, request_id, outcome)
            .await;
        self.store("requests.outcome", written)
    }
}

#[async_trait]
impl<T: BreakerStore + ?Sized> BreakerStore for Watched<T> {
    async fn load(&self, operator: &OperatorId) -> Result<Option<BreakerRecord>, StoreError> {
        self.store("breaker.read", self.inner.load(operator).await)
    }

    async fn load_many(&self, operators: &[OperatorId]) -> Result<Vec<BreakerRecord>, StoreError> {
        self.store("breaker.read", self.inner.load_many(operators).await)
    }

    async fn list(&self) -> Result<Vec<BreakerRecord>, StoreError> {
        self.store("breaker.read", self.inner.list().await)
    }

    async fn save(
        &self,
        record: &BreakerRecord,
        expected_version: Option<u64>,
    ) -> Result<(), StoreError> {
        self.store(
            "breaker.write",
            self.inner.save(record, expected_version).await,
        )
    }

    async fn claim_trial(
        &self,
        operator: &OperatorId,
        version: u64,
        limit: u32,
    ) -> Result<bool, StoreError> {
        let claimed = self.inner.claim_trial(operator, version, limit).await;
        self.store("breaker.trial", claimed)
    }

    async fn claim_probe(
        &self,
        operator: &OperatorId,
        version: u64,
        at: DateTime<Utc>,
        last_before: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let claimed = self
            .inner
            .claim_probe(operator, version, at, last_before)
            .await;
        self.store("breaker.trial", claimed)
    }

    async fn record_trial(
        &self,
        operator: &OperatorId,
        version: u64,
        trial: Trial,
    ) -> Result<Option<TrialTally>, StoreError> {
        let tally = self.inner.record_trial(operator, version, trial).await;
        self.store("breaker.trial", tally)
    }

    async fn mark_announced(&self, operator: &OperatorId, version: u64) -> Result<(), StoreError> {
        let marked = self.inner.mark_announced(operator, version).await;
        self.store("breaker.write", marked)
    }

    async fn mark_routed(&self, operator: &OperatorId, version: u64) -> Result<(), StoreError> {
        let marked = self.inner.mark_routed(operator, version).await;
        self.store("breaker.write", marked)
    }

    async fn remember_answered(
        &self,
        operator: &OperatorId,
        question: &ProbeSpec,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let kept = self.inner.remember_answered(operator, question, at).await;
        self.store("breaker.write", kept)
    }

    async fn answered(&self, operator: &OperatorId) -> Result<Option<ProbeSpec>, StoreError> {
        self.store("breaker.read", self.inner.answered(operator).await)
    }
}

#[async_trait]
impl<T: WindowStore + ?Sized> WindowStore for Watched<T> {
    async fn add(
        &self,
        operator: &OperatorId,
        bucket_start: DateTime<Utc>,
        counts: &CallCounts,
    ) -> Result<(), StoreError> {
        let added = self.inner.add(operator, bucket_start, counts).await;
        self.store("window.add", added)
    }

    async fn since(
        &self,
        operator: &OperatorId,
        since: DateTime<Utc>,
    ) -> Result<Vec<Bucket>, StoreError> {
        self.store("window.read", self.inner.since(operator, since).await)
    }
}

#[async_trait]
impl<T: CacheStore + ?Sized> CacheStore for Watched<T> {
    async fn get(&self, key: &CacheKey) -> Result<Option<CacheEntry>, StoreError> {
        self.store("cache.read", self.inner.get(key).await)
    }

    async fn put(
        &self,
        answer: &CachedAnswer,
        expires_at: DateTime<Utc>,
    ) -> Result<CacheWrite, StoreError> {
        self.store("cache.put", self.inner.put(answer, expires_at).await)
    }

    async fn put_refusal(
        &self,
        refusal: &CachedRefusal,
        expires_at: DateTime<Utc>,
    ) -> Result<CacheWrite, StoreError> {
        self.store(
            "cache.put",
            self.inner.put_refusal(refusal, expires_at).await,
        )
    }
}

#[async_trait]
impl<T: SaleStatusStore + ?Sized> SaleStatusStore for Watched<T> {
    async fn load(&self, operator: &OperatorId) -> Result<Option<SaleRecord>, StoreError> {
        self.store("sale.read", self.inner.load(operator).await)
    }

    async fn save(
        &self,
        record: &SaleRecord,
        expected_revision: Option<u64>,
    ) -> Result<(), StoreError> {
        let saved = self.inner.save(record, expected_revision).await;
        self.store("sale.write", saved)
    }
}

#[async_trait]
impl<T: CartStore + ?Sized> CartStore for Watched<T> {
    async fn get(&self, cart_id: &str) -> Result<Option<Cart>, StoreError> {
        self.store("carts.read", self.inner.get(cart_id).await)
    }

    async fn save(&self, cart: &Cart, expected_revision: Option<u64>) -> Result<(), StoreError> {
        let saved = self.inner.save(cart, expected_revision).await;
        self.store("carts.write", saved)
    }
}

#[async_trait]
impl<T: OrderStore + ?Sized> OrderStore for Watched<T> {
    async fn get(&self, order_id: &str) -> Result<Option<HeldOrder>, StoreError> {
        self.store("orders.read", self.inner.get(order_id).await)
    }

    async fn hold(&self, order: &HeldOrder, cap: Option<u32>) -> Result<Held, StoreError> {
        let held = self.inner.hold(order, cap).await;
        self.store("orders.write", held)
    }

    async fn save(&self, order: &HeldOrder, expected_revision: u64) -> Result<(), StoreError> {
        let saved = self.inner.save(order, expected_revision).await;
        self.store("orders.write", saved)
    }

    async fn open_orders(
        &self,
        operator: &OperatorId,
        limit: usize,
    ) -> Result<Vec<HeldOrder>, StoreError> {
        let open = self.inner.open_orders(operator, limit).await;
        self.store("orders.read", open)
    }

    async fn held_passengers(
        &self,
        operator: &OperatorId,
        sailing_id: &str,
    ) -> Result<u32, StoreError> {
        let held = self.inner.held_passengers(operator, sailing_id).await;
        self.store("orders.read", held)
    }
}

#[async_trait]
impl<T: EventPublisher + ?Sized> EventPublisher for Watched<T> {
    async fn publish(&self, events: &[LifeboatEvent]) -> Result<(), PublishError> {
        let published = self.inner.publish(events).await;
        if let Err(e) = &published {
            self.count("events.put", e.failed_indexes(events.len()).len() as u64);
        }
        published
    }
}

#[async_trait]
impl<T: StreamRouter + ?Sized> StreamRouter for Watched<T> {
    async fn current(&self) -> Result<ConsumerTarget, RouterError> {
        self.router("mapping.read", self.inner.current().await)
    }

    async fn point_at(&self, target: ConsumerTarget) -> Result<Repoint, RouterError> {
        self.router("mapping.update", self.inner.point_at(target).await)
    }

    async fn set_parallelization(&self, factor: Parallelization) -> Result<Repoint, RouterError> {
        self.router(
            "mapping.update",
            self.inner.set_parallelization(factor).await,
        )
    }
}

#[async_trait]
impl<T: BreakerTimers + ?Sized> BreakerTimers for Watched<T> {
    async fn set(&self, timer: &BreakerTimer) -> Result<(), TimerError> {
        let set = self.inner.set(timer).await;
        if set.is_err() {
            self.count("timers.set", 1);
        }
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::memory::{MemoryBreakerStore, MemoryMetrics};

    /// A mapping that is always being updated by someone else.
    struct Busy;

    #[async_trait]
    impl StreamRouter for Busy {
        async fn current(&self) -> Result<ConsumerTarget, RouterError> {
            Ok(ConsumerTarget::Real)
        }

        async fn point_at(&self, _: ConsumerTarget) -> Result<Repoint, RouterError> {
            Err(RouterError::Busy("ResourceInUseException".into()))
        }
    }

    fn nordic() -> OperatorId {
        OperatorId::new("nordic").unwrap_or_else(|e| panic!("{e}"))
    }

    #[tokio::test]
    async fn failures_count_but_lost_conditional_writes_do_not() {
        let metrics = Arc::new(MemoryMetrics::new());
        let clock = Arc::new(ManualClock::new(DateTime::UNIX_EPOCH));
        let breakers = Watched::new(
            Arc::new(MemoryBreakerStore::new()),
            metrics.clone(),
            clock.clone(),
        );
        let record = BreakerRecord::initial(nordic(), DateTime::UNIX_EPOCH);
        assert!(breakers.save(&record, None).await.is_ok());
        // The same first save again loses its condition: not a fault.
        assert!(matches!(
            breakers.save(&record, None).await,
            Err(StoreError::Conflict(_))
        ));
        assert_eq!(metrics.sum(METRIC, &[]), 0.0);

        let router = Watched::new(Arc::new(Busy), metrics.clone(), clock);
        assert!(router.current().await.is_ok());
        assert!(router.point_at(ConsumerTarget::Fallback).await.is_err());
        assert_eq!(
            metrics.sum(METRIC, &[("Dependency", "mapping.update")]),
            1.0
        );
        // Once per dependency line and once in the dimensionless total.
        assert_eq!(metrics.sum(METRIC, &[]), 2.0);
    }
}
