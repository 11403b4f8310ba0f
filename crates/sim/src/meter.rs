//! Store calls counted per invocation: what a search, a consumer batch or a
//! switch invocation costs in reads, writes and items read.
//!
//! The functions get their stores through [`Metered`], which counts each
//! call of a store port into the meter of the invocation it runs in (a
//! tokio task-local set by [`metered`]); the gateway and the fleet note each
//! invocation's counts in a [`Ledger`]. Counts are port calls: on DynamoDB a
//! breaker save is one transaction of two items, and `load_many` one
//! `BatchGetItem` per 100 operators (see docs/capacity.md).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use lifeboat_core::cache::{CacheEntry, CacheKey, CachedAnswer, CachedRefusal};
use lifeboat_core::ports::{
    BreakerStore, CacheStore, CacheWrite, OutcomeWrite, Repoint, RequestStore, RouterError,
    StoreError, StoredRequest, StreamRouter, Trial, TrialTally, WindowStore,
};
use lifeboat_core::probe::ProbeSpec;
use lifeboat_core::request::{Outcome, RequestRecord};
use lifeboat_core::settings::Parallelization;
use lifeboat_core::window::{Bucket, CallCounts};
use lifeboat_core::{BreakerRecord, ConsumerTarget, OperatorId};
use serde::Serialize;

tokio::task_local! {
    static INVOCATION: Arc<Mutex<StoreCalls>>;
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Store calls of one invocation (or a sum of them).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StoreCalls {
    pub reads: u64,
    pub writes: u64,
    /// Items the reads returned.
    pub items_read: u64,
    /// Lambda control-plane calls: GetEventSourceMapping and
    /// UpdateEventSourceMapping, as the AWS router makes them (a read
    /// before every re-point, an update only when it moves the mapping).
    pub control_plane: u64,
}

impl StoreCalls {
    pub fn calls(&self) -> u64 {
        self.reads + self.writes
    }

    pub fn add(&mut self, other: &StoreCalls) {
        self.reads += other.reads;
        self.writes += other.writes;
        self.items_read += other.items_read;
        self.control_plane += other.control_plane;
    }
}

fn note_read(items: usize) {
    let _ = INVOCATION.try_with(|m| {
        let mut m = lock(m);
        m.reads += 1;
        m.items_read += items as u64;
    });
}

fn note_write() {
    let _ = INVOCATION.try_with(|m| lock(m).writes += 1);
}

fn note_control_plane(calls: u64) {
    let _ = INVOCATION.try_with(|m| lock(m).control_plane += calls);
}

/// Run `invocation` with a meter of its own; its output and its store calls.
pub async fn metered<F: Future>(invocation: F) -> (F::Output, StoreCalls) {
    let meter = Arc::new(Mutex::new(StoreCalls::default()));
    let output = INVOCATION.scope(meter.clone(), invocation).await;
    let calls = *lock(&meter);
    (output, calls)
}

/// What ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InvocationKind {
    /// The switch's schedule tick.
    Tick,
    /// Any other switch invocation (trip, alarm, timers, command).
    Switch,
    /// A stream batch of `n` records to the real consumer.
    RealBatch,
    /// A stream batch to the fallback consumer.
    FallbackBatch,
    /// A search answered from the cache.
    SearchHit,
    /// A search that asked the operator through the gateway.
    SearchMiss,
    /// Any other search answer (last good, unavailable, refused).
    SearchOther,
}

/// Every invocation's store calls, folded as they are noted: per kind, the
/// invocations, the records they handled and their calls summed, and the
/// most items one invocation read (what the reports print), not one entry
/// per invocation.
#[derive(Debug, Default)]
pub struct Ledger {
    folded: Mutex<Folded>,
}

#[derive(Debug, Default)]
struct Folded {
    by_kind: BTreeMap<InvocationKind, (u64, u64, StoreCalls)>,
    max_items_read: u64,
}

impl Ledger {
    /// Note an invocation that handled `records` records (1 for anything
    /// but a batch).
    pub fn note(&self, kind: InvocationKind, records: u64, calls: StoreCalls) {
        let mut folded = lock(&self.folded);
        folded.max_items_read = folded.max_items_read.max(calls.items_read);
        let (invocations, handled, sum) = folded.by_kind.entry(kind).or_default();
        *invocations += 1;
        *handled += records;
        sum.add(&calls);
    }

    /// Invocations of `kind`, the records they handled and their calls.
    pub fn total(&self, kinds: &[InvocationKind]) -> (u64, u64, StoreCalls) {
        let folded = lock(&self.folded);
        let mut sum = StoreCalls::default();
        let (mut invocations, mut records) = (0, 0);
        for (kind, (n, handled, calls)) in &folded.by_kind {
            if kinds.contains(kind) {
                invocations += n;
                records += handled;
                sum.add(calls);
            }
        }
        (invocations, records, sum)
    }

    /// The most items any one invocation read.
    pub fn max_items_read(&self) -> u64 {
        lock(&self.folded).max_items_read
    }
}

/// A store whose calls count into the current invocation's meter.
pub struct Metered<T: ?Sized>(pub Arc<T>);

impl<T: ?Sized> Metered<T> {
    pub fn new(inner: Arc<T>) -> Arc<Self> {
        Arc::new(Self(inner))
    }
}

#[async_trait]
impl<T: RequestStore + ?Sized> RequestStore for Metered<T> {
    async fn put_request(&self, request: &RequestRecord) -> Result<(), StoreError> {
        note_write();
        self.0.put_request(request).await
    }

    async fn get(
        &self,
        operator: &OperatorId,
        request_id: &str,
    ) -> Result<Option<StoredRequest>, StoreError> {
        let found = self.0.get(operator, request_id).await;
        note_read(found.as_ref().map_or(0, |f| usize::from(f.is_some())));
        found
    }

    async fn write_outcome(
        &self,
        operator: &OperatorId,
        request_id: &str,
        outcome: &Outcome,
    ) -> Result<OutcomeWrite, StoreError> {
        note_write();
        self.0.write_outcome(operator, request_id, outcome).await
    }
}

#[async_trait]
impl<T: StreamRouter + ?Sized> StreamRouter for Metered<T> {
    async fn current(&self) -> Result<ConsumerTarget, RouterError> {
        note_control_plane(1);
        self.0.current().await
    }

    async fn point_at(&self, target: ConsumerTarget) -> Result<Repoint, RouterError> {
        let repoint = self.0.point_at(target).await;
        note_control_plane(match repoint {
            Ok(Repoint::Changed) => 2,
            _ => 1,
        });
        repoint
    }

    async fn set_parallelization(&self, factor: Parallelization) -> Result<Repoint, RouterError> {
        let set = self.0.set_parallelization(factor).await;
        note_control_plane(match set {
            Ok(Repoint::Changed) => 2,
            _ => 1,
        });
        set
    }
}

#[async_trait]
impl<T: BreakerStore + ?Sized> BreakerStore for Metered<T> {
    async fn load(&self, operator: &OperatorId) -> Result<Option<BreakerRecord>, StoreError> {
        let found = self.0.load(operator).await;
        note_read(found.as_ref().map_or(0, |f| usize::from(f.is_some())));
        found
    }

    async fn load_many(&self, operators: &[OperatorId]) -> Result<Vec<BreakerRecord>, StoreError> {
        let found = self.0.load_many(operators).await;
        note_read(found.as_ref().map_or(0, Vec::len));
        found
    }

    async fn list(&self) -> Result<Vec<BreakerRecord>, StoreError> {
        let found = self.0.list().await;
        note_read(found.as_ref().map_or(0, Vec::len));
        found
    }

    async fn save(
        &self,
        record: &BreakerRecord,
        expected_version: Option<u64>,
    ) -> Result<(), StoreError> {
        note_write();
        self.0.save(record, expected_version).await
    }

    async fn claim_trial(
        &self,
        operator: &OperatorId,
        version: u64,
        limit: u32,
    ) -> Result<bool, StoreError> {
        note_write();
        self.0.claim_trial(operator, version, limit).await
    }

    async fn claim_probe(
        &self,
        operator: &OperatorId,
        version: u64,
        at: DateTime<Utc>,
        last_before: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        note_write();
        self.0.claim_probe(operator, version, at, last_before).await
    }

    async fn record_trial(
        &self,
        operator: &OperatorId,
        version: u64,
        trial: Trial,
    ) -> Result<Option<TrialTally>, StoreError> {
        note_write();
        self.0.record_trial(operator, version, trial).await
    }

    async fn mark_announced(&self, operator: &OperatorId, version: u64) -> Result<(), StoreError> {
        note_write();
        self.0.mark_announced(operator, version).await
    }

    async fn mark_routed(&self, operator: &OperatorId, version: u64) -> Result<(), StoreError> {
        note_write();
        self.0.mark_routed(operator, version).await
    }

    async fn remember_answered(
        &self,
        operator: &OperatorId,
        question: &ProbeSpec,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        note_write();
        self.0.remember_answered(operator, question, at).await
    }

    async fn answered(&self, operator: &OperatorId) -> Result<Option<ProbeSpec>, StoreError> {
        note_read(1);
        self.0.answered(operator).await
    }
}

#[async_trait]
impl<T: WindowStore + ?Sized> WindowStore for Metered<T> {
    async fn add(
        &self,
        operator: &OperatorId,
        bucket_start: DateTime<Utc>,
        counts: &CallCounts,
    ) -> Result<(), StoreError> {
        note_write();
        self.0.add(operator, bucket_start, counts).await
    }

    async fn since(
        &self,
        operator: &OperatorId,
        since: DateTime<Utc>,
    ) -> Result<Vec<Bucket>, StoreError> {
        let found = self.0.since(operator, since).await;
        note_read(found.as_ref().map_or(0, Vec::len));
        found
    }
}

#[async_trait]
impl<T: CacheStore + ?Sized> CacheStore for Metered<T> {
    async fn get(&self, key: &CacheKey) -> Result<Option<CacheEntry>, StoreError> {
        let found = self.0.get(key).await;
        note_read(found.as_ref().map_or(0, |f| usize::from(f.is_some())));
        found
    }

    async fn put(
        &self,
        answer: &CachedAnswer,
        expires_at: DateTime<Utc>,
    ) -> Result<CacheWrite, StoreError> {
        note_write();
        self.0.put(answer, expires_at).await
    }

    async fn put_refusal(
        &self,
        refusal: &CachedRefusal,
        expires_at: DateTime<Utc>,
    ) -> Result<CacheWrite, StoreError> {
        note_write();
        self.0.put_refusal(refusal, expires_at).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lifeboat_core::memory::MemoryBreakerStore;

    #[tokio::test]
    async fn calls_count_into_the_invocation_they_run_in() {
        let store = Metered::new(Arc::new(MemoryBreakerStore::new()));
        let nordic = OperatorId::new("nordic").unwrap_or_else(|e| panic!("{e}"));
        let record = BreakerRecord::initial(nordic.clone(), DateTime::UNIX_EPOCH);
        let ((), calls) = metered(async {
            let _ = store.save(&record, None).await;
            let _ = store.load(&nordic).await;
            let _ = store.load_many(std::slice::from_ref(&nordic)).await;
        })
        .await;
        assert_eq!(
            calls,
            StoreCalls {
                reads: 2,
                writes: 1,
                items_read: 2,
                control_plane: 0
            }
        );
        // Outside any invocation nothing is counted, and nothing fails.
        assert!(store.load(&nordic).await.is_ok());
        let ledger = Ledger::default();
        ledger.note(InvocationKind::Tick, 1, calls);
        ledger.note(InvocationKind::RealBatch, 50, calls);
        assert_eq!(ledger.total(&[InvocationKind::RealBatch]).1, 50);
        assert_eq!(ledger.max_items_read(), 2);
    }

    #[tokio::test]
    async fn a_mapping_counts_a_read_per_re_point_and_an_update_when_it_moves() {
        let router = Metered::new(Arc::new(lifeboat_core::memory::MemoryStreamRouter::new()));
        let ((), calls) = metered(async {
            let _ = router.point_at(ConsumerTarget::Real).await;
            let _ = router.point_at(ConsumerTarget::Fallback).await;
            let _ = router.current().await;
        })
        .await;
        assert_eq!(calls.control_plane, 4);
        assert_eq!(calls.calls(), 0, "no store call");
    }

    #[test]
    fn the_folded_ledger_gives_the_totals_of_every_entry() {
        use InvocationKind::*;
        let calls = |reads, writes, items_read| StoreCalls {
            reads,
            writes,
            items_read,
            control_plane: 0,
        };
        let entries = [
            (SearchHit, 1, calls(2, 0, 1)),
            (RealBatch, 7, calls(4, 9, 12)),
            (SearchHit, 1, calls(3, 1, 2)),
            (Tick, 1, calls(1, 0, 50)),
            (RealBatch, 3, calls(4, 5, 6)),
        ];
        let ledger = Ledger::default();
        for (kind, records, c) in entries {
            ledger.note(kind, records, c);
        }
        for kinds in [&[SearchHit][..], &[RealBatch, Tick], &[SearchMiss], &[]] {
            let mut sum = StoreCalls::default();
            let (mut invocations, mut records) = (0, 0);
            for (_, n, c) in entries.iter().filter(|(k, ..)| kinds.contains(k)) {
                invocations += 1;
                records += n;
                sum.add(c);
            }
            assert_eq!(
                ledger.total(kinds),
                (invocations, records, sum),
                "{kinds:?}"
            );
        }
        assert_eq!(ledger.max_items_read(), 50);
        assert_eq!(Ledger::default().max_items_read(), 0);
    }
}
