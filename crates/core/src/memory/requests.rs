//! The Requests table in memory, with its insert stream and the counts of
//! what each outcome write found.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::operator::OperatorId;
use crate::ports::{OutcomeWrite, RequestStore, StoreError, StoredRequest};
use crate::request::{Outcome, RequestRecord};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section below writes whole values: a poisoned lock
    // still holds a consistent table.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Debug, Default)]
struct Requests {
    items: HashMap<String, StoredRequest>,
    /// Insertion order: the in-memory stream, from position `trimmed` on.
    log: VecDeque<String>,
    /// Stream positions before the log's first: requests evicted
    /// ([`MemoryRequestStore::evict`]).
    trimmed: usize,
    evicted: usize,
    evicted_with_outcome: usize,
    condition: OutcomeCondition,
    outcome_writes: u64,
    refused_outcome_writes: u64,
    closes_replaced: u64,
    duplicate_outcomes: u64,
}

/// The condition the Requests table's outcome write carries.
///
/// The product's is [`OutcomeCondition::OneOutcome`], as the DynamoDB
/// adapter writes it; the other two are that condition broken on purpose,
/// so that a test can show the counts of [`RequestCounts`] move when the
/// condition is wrong (the demo, fleet and chaos run on any of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutcomeCondition {
    /// A request takes its first outcome, and a consumer's outcome in
    /// place of its asker's close ([`Outcome::replaces`]); every other
    /// outcome write is refused.
    #[default]
    OneOutcome,
    /// Broken: the first outcome only (`attribute_not_exists(outcome)`
    /// alone), so a consumer's answer never replaces its asker's close.
    FirstOnly,
    /// Broken: no condition at all, the last write wins (a PutItem without
    /// its ConditionExpression).
    Unconditional,
}

/// The Requests table in memory, with its insert stream.
#[derive(Debug, Default)]
pub struct MemoryRequestStore {
    inner: Mutex<Requests>,
}

/// What [`MemoryRequestStore`] recorded of the outcome writes it was
/// asked for, each classed by what it found and what it did, not by the
/// condition's verdict (so a broken condition shows in these counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RequestCounts {
    /// Requests ever put, evicted ones included.
    pub total: usize,
    /// Of them, those with an outcome (an evicted request counts as it was
    /// when evicted).
    pub with_outcome: usize,
    /// Outcome writes that landed on a request without an outcome.
    pub outcome_writes: u64,
    /// Outcome writes refused because the request already had one.
    pub refused_outcome_writes: u64,
    /// Outcome writes by a consumer that landed on its asker's close (the
    /// search's expired close, written when its budget ran out): the
    /// request's stored outcome changed after its customer was answered.
    /// Not counted in `outcome_writes`.
    pub closes_replaced: u64,
    /// Every other outcome write that landed on a request that already had
    /// an outcome: a consumer's over a consumer's, anything over an answer,
    /// a close over a close. The product's condition refuses them all.
    pub duplicate_outcomes: u64,
}

impl MemoryRequestStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// A store whose outcome writes carry `condition`.
    pub fn with_condition(condition: OutcomeCondition) -> Self {
        let store = Self::new();
        store.set_condition(condition);
        store
    }

    /// From now on, outcome writes carry `condition`.
    pub fn set_condition(&self, condition: OutcomeCondition) {
        lock(&self.inner).condition = condition;
    }

    /// Up to `max` requests at or after stream position `from` that `keep`
    /// accepts, each with its position, and where the next read starts: after
    /// the last request taken, or at the end when fewer than `max` matched
    /// (one lane's view of the stream).
    pub fn read_stream_where(
        &self,
        from: usize,
        max: usize,
        keep: impl Fn(&RequestRecord) -> bool,
    ) -> (Vec<(usize, RequestRecord)>, usize) {
        let inner = lock(&self.inner);
        let end = inner.trimmed + inner.log.len();
        let from = from.max(inner.trimmed);
        let mut taken = Vec::new();
        for (offset, id) in inner.log.iter().enumerate().skip(from - inner.trimmed) {
            let position = inner.trimmed + offset;
            if taken.len() >= max {
                return (taken, position);
            }
            if let Some(stored) = inner.items.get(id)
                && keep(&stored.request)
            {
                taken.push((position, stored.request.clone()));
            }
        }
        (taken, end.max(from))
    }

    /// Remove the requests at stream positions before `below` created
    /// before `created_before`, oldest first, showing each to `visit` as it
    /// goes (as the table's TTL removes items, but sooner: a long simulated
    /// day cannot keep every request). Stops at the first request too new
    /// or too far along the stream; returns how many went.
    pub fn evict(
        &self,
        created_before: DateTime<Utc>,
        below: usize,
        mut visit: impl FnMut(&StoredRequest),
    ) -> usize {
        let mut inner = lock(&self.inner);
        let mut gone = 0;
        while inner.trimmed < below {
            let Some(id) = inner.log.front() else {
                break;
            };
            if inner
                .items
                .get(id)
                .is_some_and(|s| s.request.created_at >= created_before)
            {
                break;
            }
            let Some(id) = inner.log.pop_front() else {
                break;
            };
            inner.trimmed += 1;
            if let Some(stored) = inner.items.remove(&id) {
                inner.evicted += 1;
                inner.evicted_with_outcome += usize::from(stored.outcome.is_some());
                visit(&stored);
                gone += 1;
            }
        }
        gone
    }

    /// The stream position the next request put takes.
    pub fn stream_end(&self) -> usize {
        let inner = lock(&self.inner);
        inner.trimmed + inner.log.len()
    }

    pub fn counts(&self) -> RequestCounts {
        let inner = lock(&self.inner);
        RequestCounts {
            total: inner.items.len() + inner.evicted,
            with_outcome: inner.items.values().filter(|s| s.outcome.is_some()).count()
                + inner.evicted_with_outcome,
            outcome_writes: inner.outcome_writes,
            refused_outcome_writes: inner.refused_outcome_writes,
            closes_replaced: inner.closes_replaced,
            duplicate_outcomes: inner.duplicate_outcomes,
        }
    }

    /// Visit every request still kept in stream order, without copying the
    /// table (a day's requests are too many to clone for a report).
    pub fn for_each(&self, mut visit: impl FnMut(&StoredRequest)) {
        let inner = lock(&self.inner);
        for stored in inner.log.iter().filter_map(|id| inner.items.get(id)) {
            visit(stored);
        }
    }

    pub fn all(&self) -> Vec<StoredRequest> {
        let inner = lock(&self.inner);
        inner
            .log
            .iter()
            .filter_map(|id| inner.items.get(id).cloned())
            .collect()
    }
}

#[async_trait]
impl RequestStore for MemoryRequestStore {
    async fn put_request(&self, request: &RequestRecord) -> Result<(), StoreError> {
        let mut inner = lock(&self.inner);
        if inner.items.contains_key(&request.request_id) {
            return Err(StoreError::Conflict(format!(
                "request {} exists",
                request.request_id
            )));
        }
        inner.items.insert(
            request.request_id.clone(),
            StoredRequest {
                request: request.clone(),
                outcome: None,
            },
        );
        inner.log.push_back(request.request_id.clone());
        Ok(())
    }

    async fn get(
        &self,
        operator: &OperatorId,
        request_id: &str,
    ) -> Result<Option<StoredRequest>, StoreError> {
        Ok(lock(&self.inner)
            .items
            .get(request_id)
            .filter(|s| &s.request.operator == operator)
            .cloned())
    }

    async fn write_outcome(
        &self,
        operator: &OperatorId,
        request_id: &str,
        outcome: &Outcome,
    ) -> Result<OutcomeWrite, StoreError> {
        let mut inner = lock(&self.inner);
        let condition = inner.condition;
        let Some(stored) = inner
            .items
            .get_mut(request_id)
            .filter(|s| &s.request.operator == operator)
        else {
            return Err(StoreError::Conflict(format!("no request {request_id}")));
        };
        let allowed = match (&stored.outcome, condition) {
            (None, _) | (Some(_), OutcomeCondition::Unconditional) => true,
            (Some(existing), OutcomeCondition::OneOutcome) => outcome.replaces(existing),
            (Some(_), OutcomeCondition::FirstOnly) => false,
        };
        if !allowed {
            inner.refused_outcome_writes += 1;
            return Ok(OutcomeWrite::AlreadyPresent);
        }
        // Classed by what was there and who writes, not by the condition.
        let found = stored.outcome.replace(outcome.clone());
        let counter = match found {
            None => &mut inner.outcome_writes,
            Some(existing) if outcome.replaces(&existing) => &mut inner.closes_replaced,
            Some(_) => &mut inner.duplicate_outcomes,
        };
        *counter += 1;
        Ok(OutcomeWrite::Written)
    }
}
