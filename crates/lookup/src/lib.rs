//! lifeboat-lookup: how search and cart get an operator answer without waiting
//! for one that will not come.
//!
//! One question (operator, operation, parameters) is answered by the first of:
//!
//! 1. the operator's **refusal** of the question, cached within the last
//!    minute and since its last good answer: the same refusal, unasked;
//! 2. the **recent** good answer (default at most 5 minutes old, and not
//!    refused since): `fresh`;
//! 3. unless the breaker is open, a request through the **gateway**: a request
//!    record written to the Requests table, its outcome awaited with
//!    consistent reads and growing pauses, for at most the operation's budget
//!    (search 3 s, price 2.75 s): `live`;
//! 4. the **last good** answer (default at most 7 days old), whatever the
//!    operator refused since: `last_good`;
//! 5. otherwise [`Unavailable`], with how long to wait before asking again.
//!
//! The breaker is read through [`BreakerCache`], which keeps each state for at
//! most a second, so an instance under load reads the Breaker table about once
//! a second, and an answer while the breaker is open costs at most two store
//! reads (cache entry and breaker) and never a request record.

pub mod config;
pub mod http;
pub mod params;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use lifeboat_core::cache::{CacheEntry, CacheKey, CachedAnswer, age_s};
use lifeboat_core::metrics::{MetricSet, StdoutMetrics, names};
use lifeboat_core::ports::{
    BreakerStore, CacheStore, Clock, MetricsSink, RequestStore, StoreError,
};
use lifeboat_core::request::{FailureReason, Outcome, OutcomeKind, RequestRecord};
use lifeboat_core::settings::Settings;
use lifeboat_core::{BreakerRecord, BreakerState, Operation, OperatorId};
use serde::Serialize;

/// The longest a breaker state is kept by [`BreakerCache`].
pub const MAX_BREAKER_CACHE: Duration = Duration::from_secs(1);

/// Who wrote an outcome its asker closed (`Outcome::by`).
pub const CLOSED_BY: &str = lifeboat_core::request::CLOSED_BY_ASKER;

/// Tries at closing a request nobody answered.
pub const CLOSE_ATTEMPTS: u32 = 3;

pub use lifeboat_core::cache::Source;

/// An operator answer and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub source: Source,
    /// When the operator gave it.
    pub as_of: DateTime<Utc>,
    /// Whole seconds between `as_of` and the moment it was looked up.
    pub age_s: u64,
    /// The operator's answer, as JSON text.
    pub body: String,
}

/// Why there is no answer to give.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UnavailableReason {
    /// The breaker is open and nothing usable is cached.
    BreakerOpen,
    /// The operator did not answer in time and nothing usable is cached.
    Timeout,
    /// The operator failed and nothing usable is cached.
    UpstreamError,
    /// Our own stores could not be used.
    StoreUnavailable,
    /// The operator answered that there is no such sailing or route (404,
    /// 410), now or within the last minute (a negative answer).
    NotFound,
    /// The operator refused the question with another 4xx.
    Rejected,
}

impl UnavailableReason {
    /// The reason an operator's refusal with `status` gives (a 401, 403 or
    /// 407 refuses lifeboat, not the question: an upstream error).
    pub fn refused(status: u16) -> Self {
        match FailureReason::refusal(status) {
            Some(FailureReason::NotFound) => UnavailableReason::NotFound,
            Some(_) => UnavailableReason::Rejected,
            None => UnavailableReason::UpstreamError,
        }
    }

    /// Whether the operator itself said no: no last good answer stands in,
    /// and asking again soon will not change it.
    pub fn is_refusal(self) -> bool {
        matches!(
            self,
            UnavailableReason::NotFound | UnavailableReason::Rejected
        )
    }
}

/// No answer now: ask again after `retry_after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unavailable {
    pub reason: UnavailableReason,
    pub retry_after: Duration,
}

/// Whether the operator may be asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Fresh, then the gateway, then last good.
    AskOperator,
    /// The gateway, then last good: a recent answer is not enough (the cart
    /// re-pricing at confirm), only one the operator gave within the
    /// operator's `cache.reprice` (10 s), which stands for its live answer
    /// (`live`, with its age). A refusal within `cache.negative` is
    /// honoured as in [`Mode::AskOperator`].
    Reprice,
    /// Only what is cached (the cart while the operator is off sale).
    CachedOnly,
}

/// What one lookup did, for logs, tests and the demo.
#[derive(Debug, Clone, PartialEq)]
pub struct Looked {
    pub result: Result<Answer, Unavailable>,
    /// The breaker state that was read, if it was read.
    pub breaker: Option<BreakerState>,
    /// Whether a request record was written (not when the question joined
    /// an identical one in flight).
    pub requested: bool,
    /// Whether the question joined an identical one already in flight.
    pub joined: bool,
    /// Reads of the cache and breaker stores (cached breaker reads not counted).
    pub store_reads: u32,
}

/// How the outcome of a request is awaited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Polling {
    /// The first pause after the request is written.
    pub first: Duration,
    /// Pauses double up to this.
    pub max: Duration,
}

impl Default for Polling {
    fn default() -> Self {
        Self {
            first: Duration::from_millis(50),
            max: Duration::from_millis(250),
        }
    }
}

/// How long a caller is told to wait when nothing can be shown.
pub const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(10);

/// When each operator's breaker was read, and what was read.
type BreakerReads = HashMap<OperatorId, (DateTime<Utc>, Option<BreakerRecord>)>;

/// The breaker state per operator, each kept for at most `max_age`.
pub struct BreakerCache {
    store: Arc<dyn BreakerStore>,
    clock: Arc<dyn Clock>,
    max_age: Duration,
    states: Mutex<BreakerReads>,
}

impl BreakerCache {
    /// `max_age` is capped at [`MAX_BREAKER_CACHE`].
    pub fn new(store: Arc<dyn BreakerStore>, clock: Arc<dyn Clock>, max_age: Duration) -> Self {
        Self {
            store,
            clock,
            max_age: max_age.min(MAX_BREAKER_CACHE),
            states: Mutex::new(HashMap::new()),
        }
    }

    /// The operator's breaker, and whether the store was read for it. A
    /// store that cannot be read counts as "not known" (`None`): the caller
    /// then tries the gateway, whose consumer reads the breaker again.
    pub async fn get(&self, operator: &OperatorId) -> (Option<BreakerRecord>, bool) {
        let now = self.clock.now();
        let max_age = TimeDelta::from_std(self.max_age).unwrap_or(TimeDelta::zero());
        if let Some((read_at, record)) = self.lock().get(operator)
            && now - *read_at < max_age
            && *read_at <= now
        {
            return (record.clone(), false);
        }
        match self.store.load(operator).await {
            Ok(record) => {
                self.lock().insert(operator.clone(), (now, record.clone()));
                (record, true)
            }
            Err(e) => {
                tracing::warn!(operator = %operator, error = %e, "breaker state not read");
                (None, true)
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BreakerReads> {
        // Each entry is written whole: a poisoned lock still holds valid data.
        self.states.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Looks up answers for one function instance. Built once, shared by every
/// invocation.
pub struct Lookup {
    pub requests: Arc<dyn RequestStore>,
    pub cache: Arc<dyn CacheStore>,
    pub breakers: BreakerCache,
    pub clock: Arc<dyn Clock>,
    pub settings: Settings,
    pub polling: Polling,
    /// Answers by source, as EMF lines.
    pub metrics: Arc<dyn MetricsSink>,
}

impl Lookup {
    /// A lookup on these stores with the default polling, a breaker cache of
    /// [`MAX_BREAKER_CACHE`] and metrics on stdout.
    pub fn new(
        requests: Arc<dyn RequestStore>,
        cache: Arc<dyn CacheStore>,
        breakers: Arc<dyn BreakerStore>,
        clock: Arc<dyn Clock>,
        settings: Settings,
    ) -> Self {
        Self {
            requests,
            cache,
            breakers: BreakerCache::new(breakers, clock.clone(), MAX_BREAKER_CACHE),
            clock,
            settings,
            polling: Polling::default(),
            metrics: Arc::new(StdoutMetrics::from_env()),
        }
    }

    /// The same lookup with its metrics going to `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<dyn MetricsSink>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Answer one question, and count the answer by source.
    pub async fn answer(
        &self,
        operator: &OperatorId,
        operation: Operation,
        params: &BTreeMap<String, String>,
        mode: Mode,
    ) -> Looked {
        let looked = self.look(operator, operation, params, mode).await;
        let source = match &looked.result {
            Ok(answer) => answer.source.as_str(),
            Err(_) => "unavailable",
        };
        self.metrics.emit(
            &[MetricSet::new()
                .dimension("Operator", operator.as_str())
                .dimension("Operation", operation.as_str())
                .dimension("Source", source)
                .count(names::ANSWERS, 1)],
            self.clock.now(),
        );
        looked
    }

    async fn look(
        &self,
        operator: &OperatorId,
        operation: Operation,
        params: &BTreeMap<String, String>,
        mode: Mode,
    ) -> Looked {
        let policy = self.settings.for_operator(operator).cache;
        let key = CacheKey::new(operator, operation, params);
        let now = self.clock.now();
        let mut looked = Looked {
            result: Err(Unavailable {
                reason: UnavailableReason::StoreUnavailable,
                retry_after: RETRY_AFTER_FAILURE,
            }),
            breaker: None,
            requested: false,
            joined: false,
            store_reads: 1,
        };
        let cached = match self.cache.get(&key).await {
            Ok(cached) => cached.unwrap_or_default(),
            Err(e) => {
                tracing::warn!(operator = %operator, operation = %operation, error = %e, "answer cache not read");
                CacheEntry::default()
            }
        };
        // A refusal of the operator's within the last minute (and since its
        // last good answer): the same answer, without asking again, at
        // payment too (asking again in a loop would not change it).
        if let Some(refusal) = cached.negative(&policy, now) {
            looked.result = Err(Unavailable {
                reason: UnavailableReason::refused(refusal.status),
                retry_after: policy.negative,
            });
            return looked;
        }
        if let Some(entry) = cached.fresh(&policy, now)
            && mode != Mode::Reprice
        {
            looked.result = Ok(answer(Source::Fresh, entry, now));
            return looked;
        }
        if mode == Mode::Reprice
            && let Some(entry) = cached.repriced(&policy, now)
        {
            looked.result = Ok(answer(Source::Live, entry, now));
            return looked;
        }
        // The last good answer stays whatever the operator refused since:
        // a refusal is kept beside it, never instead of it.
        let last_good = cached.last_good(&policy, now).cloned();

        let failure = match mode {
            Mode::CachedOnly => Unavailable {
                reason: UnavailableReason::BreakerOpen,
                retry_after: RETRY_AFTER_FAILURE,
            },
            Mode::AskOperator | Mode::Reprice => {
                let (breaker, read) = self.breakers.get(operator).await;
                looked.store_reads += u32::from(read);
                looked.breaker = breaker.as_ref().map(|b| b.state);
                match breaker.filter(|b| b.state.is_open()) {
                    Some(open) => Unavailable {
                        reason: UnavailableReason::BreakerOpen,
                        retry_after: retry_after_open(&open, self.clock.now()),
                    },
                    None => {
                        let (asked, written) = self.ask_gateway(operator, operation, params).await;
                        looked.requested = written;
                        looked.joined =
                            !written && asked != Err(UnavailableReason::StoreUnavailable);
                        match asked {
                            Ok(live) => {
                                looked.result = Ok(live);
                                return looked;
                            }
                            Err(reason) if reason.is_refusal() => {
                                looked.result = Err(Unavailable {
                                    reason,
                                    retry_after: policy.negative,
                                });
                                return looked;
                            }
                            Err(reason) => Unavailable {
                                reason,
                                retry_after: RETRY_AFTER_FAILURE,
                            },
                        }
                    }
                }
            }
        };
        looked.result = match last_good {
            Some(entry) => Ok(answer(Source::LastGood, &entry, self.clock.now())),
            None => Err(failure),
        };
        looked
    }

    /// Write `request`'s outcome as expired unless it has one: up to
    /// [`CLOSE_ATTEMPTS`] tries, at once (the customer is waiting for the
    /// reply, and the write is conditional, so a retry is harmless).
    async fn close(&self, request: &RequestRecord) {
        let outcome = Outcome::failed(
            FailureReason::Expired,
            "no outcome within the asker's budget",
            self.clock.now(),
            CLOSED_BY,
        );
        for attempt in 1..=CLOSE_ATTEMPTS {
            match self
                .requests
                .write_outcome(&request.operator, &request.request_id, &outcome)
                .await
            {
                Ok(_) => return,
                Err(e) => {
                    tracing::warn!(operator = %request.operator, request_id = %request.request_id, attempt, error = %e, "expired request not closed");
                }
            }
        }
    }

    /// Write a request record, or join the identical question already in
    /// flight, and wait for its outcome within the budget. The flag says
    /// whether a record was written.
    async fn ask_gateway(
        &self,
        operator: &OperatorId,
        operation: Operation,
        params: &BTreeMap<String, String>,
    ) -> (Result<Answer, UnavailableReason>, bool) {
        let budget = self
            .settings
            .for_operator(operator)
            .budgets
            .for_operation(operation);
        let created_at = self.clock.now();
        let wait = TimeDelta::from_std(budget.asker_wait()).unwrap_or(TimeDelta::zero());
        let deadline = created_at + wait;
        let mut request = RequestRecord {
            request_id: merged_request_id(&CacheKey::new(operator, operation, params), created_at),
            operator: operator.clone(),
            operation,
            params: params.clone(),
            created_at,
            deadline,
        };
        let written = match self.requests.put_request(&request).await {
            Ok(()) => true,
            // The same question asked within the merge window: wait for
            // that request's outcome instead of asking the operator again,
            // unless the id is another question's (a hash collision).
            Err(StoreError::Conflict(_)) => {
                match self.requests.get(operator, &request.request_id).await {
                    Ok(Some(stored))
                        if stored.request.operation == operation
                            && stored.request.params == *params =>
                    {
                        false
                    }
                    _ => {
                        request.request_id = uuid::Uuid::new_v4().to_string();
                        if let Err(e) = self.requests.put_request(&request).await {
                            tracing::warn!(operator = %operator, operation = %operation, error = %e, "request not written");
                            return (Err(UnavailableReason::StoreUnavailable), false);
                        }
                        true
                    }
                }
            }
            Err(e) => {
                tracing::warn!(operator = %operator, operation = %operation, error = %e, "request not written");
                return (Err(UnavailableReason::StoreUnavailable), false);
            }
        };
        let close = written.then_some(&request);
        (
            self.await_outcome(&request, budget.asker_wait(), close)
                .await,
            written,
        )
    }

    /// Poll `request`'s outcome until its asker's budget (`timeout` from its
    /// creation) runs out. The asker who wrote the request (`close`) then
    /// writes its outcome as expired if nothing has: a record the stream
    /// lost or gave up on (its retries spent on faults of our own) still
    /// ends with an outcome. A consumer that meets it later skips it, as it
    /// skips any request past its deadline; one whose call was already
    /// under way writes its answer in the close's place (`Outcome::replaces`).
    async fn await_outcome(
        &self,
        request: &RequestRecord,
        timeout: Duration,
        close: Option<&RequestRecord>,
    ) -> Result<Answer, UnavailableReason> {
        let (operator, operation, deadline) =
            (&request.operator, request.operation, request.deadline);
        let mut pause = self.polling.first;
        // The deadline is read from the clock and the pauses from tokio's
        // timer; both follow the same time in every runtime lifeboat uses,
        // and the bound on polls ends the loop even if they did not.
        let max_polls = timeout.as_millis() / self.polling.first.as_millis().max(1) + 2;
        for _ in 0..max_polls {
            let now = self.clock.now();
            if now >= deadline {
                tracing::info!(
                    operator = %operator, operation = %operation, request_id = %request.request_id,
                    "no outcome within the budget"
                );
                if let Some(request) = close {
                    self.close(request).await;
                }
                return Err(UnavailableReason::Timeout);
            }
            let left = (deadline - now).to_std().unwrap_or(Duration::ZERO);
            tokio::time::sleep(pause.min(left)).await;
            pause = (pause * 2).min(self.polling.max);
            match self
                .requests
                .get(&request.operator, &request.request_id)
                .await
            {
                Ok(Some(stored)) => match stored.outcome.map(|o| (o.kind, o.at)) {
                    Some((OutcomeKind::Answered { body }, at)) => {
                        return Ok(Answer {
                            source: Source::Live,
                            as_of: at,
                            age_s: age_s(at, self.clock.now()),
                            body,
                        });
                    }
                    Some((OutcomeKind::Failed { reason, detail }, _)) => {
                        tracing::info!(
                            operator = %operator, operation = %operation, request_id = %request.request_id,
                            reason = reason.as_str(), detail = %detail, "gateway answered with a failure"
                        );
                        return Err(match reason {
                            FailureReason::BreakerOpen => UnavailableReason::BreakerOpen,
                            // Held back by the operator's limit until the
                            // deadline: for the customer, no answer in time.
                            FailureReason::Timeout
                            | FailureReason::Expired
                            | FailureReason::Shed => UnavailableReason::Timeout,
                            FailureReason::UpstreamError | FailureReason::Malformed => {
                                UnavailableReason::UpstreamError
                            }
                            FailureReason::NotFound => UnavailableReason::NotFound,
                            FailureReason::Rejected => UnavailableReason::Rejected,
                        });
                    }
                    None => {}
                },
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(request_id = %request.request_id, error = %e, "outcome not read");
                }
            }
        }
        Err(UnavailableReason::Timeout)
    }
}

/// How long identical questions share one request: a question asked again
/// within the same window joins the request in flight (or reads its
/// outcome) instead of writing another and calling the operator again.
pub const MERGE_WINDOW: Duration = Duration::from_secs(2);

/// The request id of question `key` asked at `at`: the same for every asker
/// within one [`MERGE_WINDOW`], so the conditional put of a second asker
/// fails and it joins the first.
fn merged_request_id(key: &CacheKey, at: DateTime<Utc>) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    key.as_str().hash(&mut hasher);
    let window = i64::try_from(MERGE_WINDOW.as_millis()).unwrap_or(1).max(1);
    format!(
        "q{:016x}-{}",
        hasher.finish(),
        at.timestamp_millis().div_euclid(window)
    )
}

fn answer(source: Source, entry: &CachedAnswer, now: DateTime<Utc>) -> Answer {
    Answer {
        source,
        as_of: entry.as_of,
        age_s: age_s(entry.as_of, now),
        body: entry.body.clone(),
    }
}

/// The longest Retry-After lifeboat gives.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(600);

/// Until the open period ends: at least a second (also when it has just
/// ended and the schedule has not moved the breaker on yet), at most
/// [`MAX_RETRY_AFTER`]; a breaker forced open has no end, so the usual pause.
fn retry_after_open(breaker: &BreakerRecord, now: DateTime<Utc>) -> Duration {
    match breaker.open_until {
        Some(until) => (until - now).to_std().unwrap_or(Duration::ZERO),
        None => RETRY_AFTER_FAILURE,
    }
    .clamp(Duration::from_secs(1), MAX_RETRY_AFTER)
}

#[cfg(test)]
mod tests;
