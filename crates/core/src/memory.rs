//! In-memory adapters of every storage and side-effect port.
//!
//! These are real implementations with the same semantics as the AWS adapters
//! (conditional writes, atomic counters, one outcome per request), so the demo
//! and the tests run the handlers on them unchanged.

mod metrics;
mod operator_config;
mod orders;
mod requests;
mod sale;

pub use metrics::MemoryMetrics;
pub use operator_config::MemoryOperatorConfigStore;
pub use orders::MemoryOrderStore;
pub use requests::{MemoryRequestStore, OutcomeCondition, RequestCounts};
pub use sale::{
    MemoryQueue, MemorySaleStatusStore, MemorySaleSwitch, ReceivedMessage, SwitchOutcome,
    SwitchWrite,
};

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::breaker::{BreakerRecord, BreakerState, ConsumerTarget};
use crate::cache::{CacheEntry, CacheKey, CachedAnswer, CachedRefusal};
use crate::cart::Cart;
use crate::events::LifeboatEvent;
use crate::operator::OperatorId;
use crate::ports::{
    AlarmContributor, AlarmContributors, BreakerStore, BreakerTimers, CacheStore, CacheWrite,
    CartStore, EventPublisher, PublishError, Repoint, RouterError, StoreError, StreamRouter,
    TimerError, Trial, TrialTally, WindowStore,
};
use crate::probe::{BreakerTimer, ProbeSpec};
use crate::settings::Parallelization;
use crate::window::{BUCKET_TTL, Bucket, CallCounts};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The data behind a poisoned lock is still consistent: every critical
    // section below writes whole values.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The Breaker table in memory.
#[derive(Debug, Default)]
pub struct MemoryBreakerStore {
    records: Mutex<BTreeMap<OperatorId, BreakerRecord>>,
    answered: Mutex<BTreeMap<OperatorId, ProbeSpec>>,
}

impl MemoryBreakerStore {
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl BreakerStore for MemoryBreakerStore {
    async fn load(&self, operator: &OperatorId) -> Result<Option<BreakerRecord>, StoreError> {
        Ok(lock(&self.records).get(operator).cloned())
    }

    async fn load_many(&self, operators: &[OperatorId]) -> Result<Vec<BreakerRecord>, StoreError> {
        let records = lock(&self.records);
        Ok(operators
            .iter()
            .filter_map(|o| records.get(o).cloned())
            .collect())
    }

    async fn list(&self) -> Result<Vec<BreakerRecord>, StoreError> {
        Ok(lock(&self.records).values().cloned().collect())
    }

    async fn save(
        &self,
        record: &BreakerRecord,
        expected_version: Option<u64>,
    ) -> Result<(), StoreError> {
        let mut records = lock(&self.records);
        let stored = records.get(&record.operator).map(|r| r.version);
        if stored != expected_version {
            return Err(StoreError::Conflict(format!(
                "breaker {} is at version {stored:?}, expected {expected_version:?}",
                record.operator
            )));
        }
        records.insert(record.operator.clone(), record.clone());
        Ok(())
    }

    async fn claim_trial(
        &self,
        operator: &OperatorId,
        version: u64,
        limit: u32,
    ) -> Result<bool, StoreError> {
        let mut records = lock(&self.records);
        match records.get_mut(operator) {
            Some(r)
                if r.state == BreakerState::HalfOpen
                    && r.version == version
                    && r.trials_claimed < limit =>
            {
                r.trials_claimed += 1;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn claim_probe(
        &self,
        operator: &OperatorId,
        version: u64,
        at: DateTime<Utc>,
        last_before: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let mut records = lock(&self.records);
        match records.get_mut(operator) {
            Some(r)
                if r.state == BreakerState::Open
                    && r.version == version
                    && r.probed_at.is_none_or(|p| p <= last_before) =>
            {
                r.probed_at = Some(at);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn record_trial(
        &self,
        operator: &OperatorId,
        version: u64,
        trial: Trial,
    ) -> Result<Option<TrialTally>, StoreError> {
        let mut records = lock(&self.records);
        match records.get_mut(operator) {
            Some(r) if r.state == BreakerState::HalfOpen && r.version == version => {
                match trial {
                    Trial::Passed => r.trial_successes += 1,
                    Trial::Failed => r.trial_failures += 1,
                    Trial::TimedOut => {
                        r.trial_failures += 1;
                        r.trial_timeouts += 1;
                    }
                }
                Ok(Some(TrialTally {
                    successes: r.trial_successes,
                    failures: r.trial_failures,
                    timeouts: r.trial_timeouts,
                }))
            }
            _ => Ok(None),
        }
    }

    async fn mark_announced(&self, operator: &OperatorId, version: u64) -> Result<(), StoreError> {
        let mut records = lock(&self.records);
        if let Some(r) = records.get_mut(operator)
            && r.version == version
        {
            r.announced_version = r.announced_version.max(version);
        }
        Ok(())
    }

    async fn mark_routed(&self, operator: &OperatorId, version: u64) -> Result<(), StoreError> {
        let mut records = lock(&self.records);
        if let Some(r) = records.get_mut(operator)
            && r.version == version
        {
            r.routed_version = r.routed_version.max(version);
        }
        Ok(())
    }

    async fn remember_answered(
        &self,
        operator: &OperatorId,
        question: &ProbeSpec,
        _at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        lock(&self.answered).insert(operator.clone(), question.clone());
        Ok(())
    }

    async fn answered(&self, operator: &OperatorId) -> Result<Option<ProbeSpec>, StoreError> {
        Ok(lock(&self.answered).get(operator).cloned())
    }
}

/// The failure window's buckets in memory.
#[derive(Debug, Default)]
pub struct MemoryWindowStore {
    buckets: Mutex<HashMap<OperatorId, BTreeMap<DateTime<Utc>, CallCounts>>>,
}

impl MemoryWindowStore {
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl WindowStore for MemoryWindowStore {
    async fn add(
        &self,
        operator: &OperatorId,
        bucket_start: DateTime<Utc>,
        counts: &CallCounts,
    ) -> Result<(), StoreError> {
        let mut buckets = lock(&self.buckets);
        let operator = buckets.entry(operator.clone()).or_default();
        operator.entry(bucket_start).or_default().add(counts);
        // The table's TTL: a bucket an hour older than the newest is gone.
        let newest = operator.last_key_value().map(|(start, _)| *start);
        while let (Some(oldest), Some(newest)) = (operator.first_entry(), newest)
            && *oldest.key() < newest - BUCKET_TTL
        {
            oldest.remove();
        }
        Ok(())
    }

    async fn since(
        &self,
        operator: &OperatorId,
        since: DateTime<Utc>,
    ) -> Result<Vec<Bucket>, StoreError> {
        let buckets = lock(&self.buckets);
        Ok(buckets
            .get(operator)
            .map(|b| {
                b.range(since..)
                    .map(|(start, counts)| Bucket {
                        start: *start,
                        counts: *counts,
                    })
                    .collect()
            })
            .unwrap_or_default())
    }
}

/// An event bus in memory: keeps every published event in order.
#[derive(Debug, Default)]
pub struct MemoryEventBus {
    events: Mutex<Vec<LifeboatEvent>>,
}

impl MemoryEventBus {
    pub fn new() -> Self {
        Self::default()
    }

    /// Every event published so far.
    pub fn events(&self) -> Vec<LifeboatEvent> {
        lock(&self.events).clone()
    }

    /// Events published at or after position `from`, and the next position.
    pub fn read_from(&self, from: usize) -> (Vec<LifeboatEvent>, usize) {
        let events = lock(&self.events);
        (events.iter().skip(from).cloned().collect(), events.len())
    }
}

#[async_trait]
impl EventPublisher for MemoryEventBus {
    async fn publish(&self, events: &[LifeboatEvent]) -> Result<(), PublishError> {
        lock(&self.events).extend_from_slice(events);
        Ok(())
    }
}

/// Where the in-memory stream goes.
#[derive(Debug)]
pub struct MemoryStreamRouter {
    target: Mutex<ConsumerTarget>,
    changes: Mutex<u64>,
    /// The mapping's `ParallelizationFactor` once set; `None`: the
    /// template's, whatever the deployment gives.
    parallelization: Mutex<Option<Parallelization>>,
}

impl Default for MemoryStreamRouter {
    fn default() -> Self {
        Self {
            target: Mutex::new(ConsumerTarget::Real),
            changes: Mutex::new(0),
            parallelization: Mutex::new(None),
        }
    }
}

impl MemoryStreamRouter {
    pub fn new() -> Self {
        Self::default()
    }

    /// How many times the target actually changed.
    pub fn changes(&self) -> u64 {
        *lock(&self.changes)
    }

    /// The parallelization set on the mapping, if one was.
    pub fn parallelization(&self) -> Option<Parallelization> {
        *lock(&self.parallelization)
    }
}

#[async_trait]
impl StreamRouter for MemoryStreamRouter {
    async fn current(&self) -> Result<ConsumerTarget, RouterError> {
        Ok(*lock(&self.target))
    }

    async fn point_at(&self, target: ConsumerTarget) -> Result<Repoint, RouterError> {
        let mut current = lock(&self.target);
        if *current == target {
            return Ok(Repoint::AlreadyThere);
        }
        *current = target;
        *lock(&self.changes) += 1;
        Ok(Repoint::Changed)
    }

    async fn set_parallelization(&self, factor: Parallelization) -> Result<Repoint, RouterError> {
        let mut current = lock(&self.parallelization);
        if *current == Some(factor) {
            return Ok(Repoint::AlreadyThere);
        }
        *current = Some(factor);
        Ok(Repoint::Changed)
    }
}

/// Breaker timers in memory: set by the switch, taken when due by whoever
/// plays the queue (the simulation's gateway).
#[derive(Debug, Default)]
pub struct MemoryTimers {
    pending: Mutex<Vec<BreakerTimer>>,
}

impl MemoryTimers {
    pub fn new() -> Self {
        Self::default()
    }

    /// Take every timer due at `now`, earliest first.
    pub fn take_due(&self, now: DateTime<Utc>) -> Vec<BreakerTimer> {
        let mut pending = lock(&self.pending);
        let (mut due, later): (Vec<_>, Vec<_>) = pending.drain(..).partition(|t| t.due <= now);
        *pending = later;
        due.sort_by_key(|t| t.due);
        due
    }

    /// When the next timer is due, if any is set.
    pub fn next_due(&self) -> Option<DateTime<Utc>> {
        lock(&self.pending).iter().map(|t| t.due).min()
    }
}

#[async_trait]
impl BreakerTimers for MemoryTimers {
    async fn set(&self, timer: &BreakerTimer) -> Result<(), TimerError> {
        lock(&self.pending).push(timer.clone());
        Ok(())
    }
}

/// Contributor alarms in memory: each alarm's contributors in ALARM, set by
/// whoever plays CloudWatch (the switch's tests).
#[derive(Debug, Default)]
pub struct MemoryAlarmContributors {
    in_alarm: Mutex<BTreeMap<String, Vec<AlarmContributor>>>,
    /// The next reads fail (CloudWatch unreachable), while set.
    failing: Mutex<bool>,
}

impl MemoryAlarmContributors {
    pub fn new() -> Self {
        Self::default()
    }

    /// `alarm`'s contributors in ALARM are now those of `operators`
    /// (`{"Operator": operator}` each), each in ALARM since `since`.
    pub fn set_operators(
        &self,
        alarm: &str,
        operators: &[&OperatorId],
        since: Option<DateTime<Utc>>,
    ) {
        let contributors = operators
            .iter()
            .map(|o| AlarmContributor {
                attributes: BTreeMap::from([(
                    crate::metrics::names::OPERATOR.to_owned(),
                    o.as_str().to_owned(),
                )]),
                since,
            })
            .collect();
        lock(&self.in_alarm).insert(alarm.to_owned(), contributors);
    }

    /// `alarm`'s contributors in ALARM, as given.
    pub fn set(&self, alarm: &str, contributors: Vec<AlarmContributor>) {
        lock(&self.in_alarm).insert(alarm.to_owned(), contributors);
    }

    /// Reads fail while `failing`.
    pub fn fail(&self, failing: bool) {
        *lock(&self.failing) = failing;
    }
}

#[async_trait]
impl AlarmContributors for MemoryAlarmContributors {
    async fn in_alarm(&self, alarm: &str) -> Result<Vec<AlarmContributor>, StoreError> {
        if *lock(&self.failing) {
            return Err(StoreError::Unavailable(format!(
                "alarm {alarm}'s contributors could not be read"
            )));
        }
        Ok(lock(&self.in_alarm).get(alarm).cloned().unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::Operation;
    use crate::ports::{OutcomeWrite, RequestStore};
    use crate::request::FailureReason;
    use crate::request::{CLOSED_BY_ASKER, Outcome, RequestRecord};

    fn t() -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000, 0).unwrap()
    }

    #[tokio::test]
    async fn a_refusal_never_erases_the_cached_good_answer() {
        use crate::cache::CachePolicy;
        let cache = MemoryCacheStore::new();
        let operator = OperatorId::new("op").unwrap();
        let key = CacheKey::new(&operator, Operation::Search, &BTreeMap::new());
        let at = |s: i64| t() + chrono::TimeDelta::seconds(s);
        let answer = CachedAnswer {
            key: key.clone(),
            operator: operator.clone(),
            operation: Operation::Search,
            body: r#"{"sailings":["s-1"]}"#.into(),
            as_of: at(0),
        };
        let refusal = |status: u16, s: i64| CachedRefusal {
            key: key.clone(),
            operator: operator.clone(),
            operation: Operation::Search,
            status,
            detail: format!("operator answered {status}"),
            at: at(s),
        };
        let week = at(7 * 86_400);
        assert_eq!(cache.put(&answer, week).await.unwrap(), CacheWrite::Written);
        assert_eq!(
            cache.put_refusal(&refusal(404, 10), week).await.unwrap(),
            CacheWrite::Written
        );
        let entry = cache.get(&key).await.unwrap().unwrap();
        assert_eq!(
            entry.answer.as_ref(),
            Some(&answer),
            "the refusal erased it"
        );
        let policy = CachePolicy::default();
        assert_eq!(entry.negative(&policy, at(30)).map(|r| r.status), Some(404));
        assert_eq!(entry.last_good(&policy, at(3_600)), Some(&answer));
        // An older refusal does not replace the newer one.
        assert_eq!(
            cache.put_refusal(&refusal(400, 5), week).await.unwrap(),
            CacheWrite::NewerKept
        );
        let entry = cache.get(&key).await.unwrap().unwrap();
        assert_eq!(entry.refusal, Some(refusal(404, 10)));
        // A newer good answer clears the refusal.
        let newer = CachedAnswer {
            as_of: at(20),
            ..answer.clone()
        };
        assert_eq!(cache.put(&newer, week).await.unwrap(), CacheWrite::Written);
        let entry = cache.get(&key).await.unwrap().unwrap();
        assert_eq!((entry.answer, entry.refusal), (Some(newer), None));
        assert_eq!(cache.len(), 1);
    }

    fn request(id: &str) -> RequestRecord {
        RequestRecord {
            request_id: id.into(),
            operator: OperatorId::new("op").unwrap(),
            operation: Operation::Search,
            params: BTreeMap::new(),
            created_at: t(),
            deadline: t(),
        }
    }

    /// Old requests go oldest first, each shown once, counted as they
    /// were; none a lane may still deliver (at or after `below`) nor any
    /// newer than the cutoff; the stream's positions keep their numbers.
    #[tokio::test]
    async fn eviction_lets_old_requests_go_and_keeps_counting_them() {
        let store = MemoryRequestStore::new();
        let at = |s: i64| t() + chrono::TimeDelta::seconds(s);
        for (i, s) in [0, 1, 2, 3, 10].into_iter().enumerate() {
            let mut r = request(&format!("r{i}"));
            r.created_at = at(s);
            store.put_request(&r).await.unwrap();
        }
        let op = request("r0").operator;
        let answer = Outcome::failed(FailureReason::Timeout, "t", t(), "real-consumer");
        store.write_outcome(&op, "r0", &answer).await.unwrap();
        let mut seen = Vec::new();
        // r3 is still to be delivered: it and what follows stay.
        let gone = store.evict(at(5), 3, |s| seen.push(s.request.request_id.clone()));
        assert_eq!(
            (gone, seen.as_slice()),
            (3, ["r0", "r1", "r2"].map(String::from).as_slice())
        );
        let gone = store.evict(at(5), 100, |s| seen.push(s.request.request_id.clone()));
        assert_eq!((gone, seen.last().map(String::as_str)), (1, Some("r3")));
        assert!(store.get(&op, "r1").await.unwrap().is_none());
        assert!(store.get(&op, "r4").await.unwrap().is_some());
        let counts = store.counts();
        assert_eq!((counts.total, counts.with_outcome), (5, 1));
        // A reader behind the trim starts at the first request kept, at
        // its own position.
        let (read, next) = store.read_stream_where(1, 10, |_| true);
        let positions: Vec<usize> = read.iter().map(|(p, _)| *p).collect();
        assert_eq!((positions, next, store.stream_end()), (vec![4], 5, 5));
    }

    /// As the table's TTL: a bucket an hour older than the operator's
    /// newest is gone, younger ones stay.
    #[tokio::test]
    async fn window_buckets_older_than_their_ttl_go() {
        let window = MemoryWindowStore::new();
        let op = OperatorId::new("op").unwrap();
        let at = |s: i64| t() + chrono::TimeDelta::seconds(s);
        let one = CallCounts {
            calls: 1,
            ..CallCounts::default()
        };
        for s in [0, 1, 3_601] {
            window.add(&op, at(s), &one).await.unwrap();
        }
        let kept: Vec<DateTime<Utc>> = window
            .since(&op, at(-10))
            .await
            .unwrap()
            .iter()
            .map(|b| b.start)
            .collect();
        assert_eq!(kept, vec![at(1), at(3_601)]);
    }

    #[tokio::test]
    async fn one_outcome_per_request() {
        let store = MemoryRequestStore::new();
        store.put_request(&request("a")).await.unwrap();
        assert!(matches!(
            store.put_request(&request("a")).await,
            Err(StoreError::Conflict(_))
        ));
        let first = Outcome::failed(FailureReason::Timeout, "t", t(), "real-consumer");
        let second = Outcome::failed(FailureReason::BreakerOpen, "b", t(), "fallback-consumer");
        let op = request("a").operator;
        assert_eq!(
            store.write_outcome(&op, "a", &first).await.unwrap(),
            OutcomeWrite::Written
        );
        assert_eq!(
            store.write_outcome(&op, "a", &second).await.unwrap(),
            OutcomeWrite::AlreadyPresent
        );
        assert_eq!(
            store.get(&op, "a").await.unwrap().unwrap().outcome,
            Some(first)
        );
        assert!(store.write_outcome(&op, "missing", &second).await.is_err());
        let other = OperatorId::new("someone-else").unwrap();
        assert!(store.get(&other, "a").await.unwrap().is_none());
        let counts = store.counts();
        assert_eq!(
            (
                counts.total,
                counts.with_outcome,
                counts.refused_outcome_writes
            ),
            (1, 1, 1)
        );
    }

    /// An asker's close (by `closer`), a consumer's answer after it, a
    /// second consumer's outcome, and a close after all that, on a store
    /// with `condition`.
    async fn writes_after_a_close_by(closer: &str, condition: OutcomeCondition) -> RequestCounts {
        let store = MemoryRequestStore::with_condition(condition);
        store.put_request(&request("a")).await.unwrap();
        let op = request("a").operator;
        let close = Outcome::failed(FailureReason::Timeout, "expired", t(), closer);
        let answer = Outcome::failed(FailureReason::Timeout, "t", t(), "real-consumer");
        let again = Outcome::failed(FailureReason::BreakerOpen, "b", t(), "fallback-consumer");
        for outcome in [&close, &answer, &again, &close] {
            store.write_outcome(&op, "a", outcome).await.unwrap();
        }
        store.counts()
    }

    async fn writes_after_a_close(condition: OutcomeCondition) -> RequestCounts {
        writes_after_a_close_by(CLOSED_BY_ASKER, condition).await
    }

    #[tokio::test]
    async fn outcome_writes_are_counted_by_what_they_found() {
        // The search's close and the booking worker's alike.
        for closer in crate::request::ASKERS_CLOSES {
            let counts = writes_after_a_close_by(closer, OutcomeCondition::OneOutcome).await;
            assert_eq!(counts.outcome_writes, 1, "{closer}: {counts:?}");
            assert_eq!(counts.closes_replaced, 1, "{closer}: {counts:?}");
            assert_eq!(counts.refused_outcome_writes, 2, "{closer}: {counts:?}");
            assert_eq!(counts.duplicate_outcomes, 0, "{closer}: {counts:?}");
        }
    }

    #[tokio::test]
    async fn a_broken_outcome_condition_shows_in_the_counts() {
        // No condition: the second consumer's outcome and the late close
        // land over the answer.
        let counts = writes_after_a_close(OutcomeCondition::Unconditional).await;
        assert_eq!(counts.closes_replaced, 1, "{counts:?}");
        assert_eq!(counts.duplicate_outcomes, 2, "{counts:?}");
        assert_eq!(counts.refused_outcome_writes, 0, "{counts:?}");
        // The first outcome only: the close is never replaced.
        let counts = writes_after_a_close(OutcomeCondition::FirstOnly).await;
        assert_eq!(counts.closes_replaced, 0, "{counts:?}");
        assert_eq!(counts.duplicate_outcomes, 0, "{counts:?}");
        assert_eq!(counts.refused_outcome_writes, 3, "{counts:?}");
    }

    #[tokio::test]
    async fn breaker_writes_are_conditional_on_version() {
        let store = MemoryBreakerStore::new();
        let mut record = BreakerRecord::initial(OperatorId::new("op").unwrap(), t());
        store.save(&record, None).await.unwrap();
        assert!(store.save(&record, None).await.is_err());
        record.version = 1;
        store.save(&record, Some(0)).await.unwrap();
        assert!(store.save(&record, Some(0)).await.is_err());
    }
}

/// The answer cache in memory: per question, the good answer and the
/// refusal side by side, as the Cache table keeps them.
#[derive(Debug, Default)]
pub struct MemoryCacheStore {
    entries: Mutex<HashMap<CacheKey, CacheEntry>>,
}

impl MemoryCacheStore {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        lock(&self.entries).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Write what `change` makes of the entry for `key` (an empty one if
    /// there is none); `None` keeps the stored entry.
    fn write(
        &self,
        key: &CacheKey,
        change: impl FnOnce(&CacheEntry) -> Option<CacheEntry>,
    ) -> CacheWrite {
        let mut entries = lock(&self.entries);
        let stored = entries.get(key).cloned().unwrap_or_default();
        match change(&stored) {
            Some(entry) => {
                entries.insert(key.clone(), entry);
                CacheWrite::Written
            }
            None => CacheWrite::NewerKept,
        }
    }
}

#[async_trait]
impl CacheStore for MemoryCacheStore {
    async fn get(&self, key: &CacheKey) -> Result<Option<CacheEntry>, StoreError> {
        Ok(lock(&self.entries).get(key).cloned())
    }

    async fn put(
        &self,
        answer: &CachedAnswer,
        _expires_at: DateTime<Utc>,
    ) -> Result<CacheWrite, StoreError> {
        Ok(self.write(&answer.key, |stored| stored.with_answer(answer)))
    }

    async fn put_refusal(
        &self,
        refusal: &CachedRefusal,
        _expires_at: DateTime<Utc>,
    ) -> Result<CacheWrite, StoreError> {
        Ok(self.write(&refusal.key, |stored| stored.with_refusal(refusal)))
    }
}

/// The Carts table in memory.
#[derive(Debug, Default)]
pub struct MemoryCartStore {
    carts: Mutex<HashMap<String, Cart>>,
}

impl MemoryCartStore {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn all(&self) -> Vec<Cart> {
        let mut carts: Vec<Cart> = lock(&self.carts).values().cloned().collect();
        carts.sort_by_key(|c| c.created_at);
        carts
    }
}

#[async_trait]
impl CartStore for MemoryCartStore {
    async fn get(&self, cart_id: &str) -> Result<Option<Cart>, StoreError> {
        Ok(lock(&self.carts).get(cart_id).cloned())
    }

    async fn save(&self, cart: &Cart, expected_revision: Option<u64>) -> Result<(), StoreError> {
        let mut carts = lock(&self.carts);
        let stored = carts.get(&cart.cart_id).map(|c| c.revision);
        if stored != expected_revision {
            return Err(StoreError::Conflict(format!(
                "cart {} is at revision {stored:?}, not {expected_revision:?}",
                cart.cart_id
            )));
        }
        carts.insert(cart.cart_id.clone(), cart.clone());
        Ok(())
    }
}

/// Secrets in memory, by full name (`/path/name`), as an SSM path holds them.
#[derive(Debug, Default)]
pub struct MemorySecretStore {
    secrets: Mutex<BTreeMap<String, String>>,
}

impl MemorySecretStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Keep (or replace, as a rotation does) the secret `name`.
    pub fn put(&self, name: &str, value: &str) {
        lock(&self.secrets).insert(name.to_owned(), value.to_owned());
    }
}

#[async_trait]
impl crate::ports::SecretStore for MemorySecretStore {
    async fn secrets_under(&self, path: &str) -> Result<BTreeMap<String, String>, StoreError> {
        let prefix = format!("{}/", path.trim_end_matches('/'));
        Ok(lock(&self.secrets)
            .iter()
            .filter_map(|(name, value)| {
                let last = name.strip_prefix(&prefix)?;
                (!last.is_empty() && !last.contains('/')).then(|| (last.to_owned(), value.clone()))
            })
            .collect())
    }
}
