//! The ports through which handlers reach storage, events, the stream mapping,
//! the operator, metrics and the time: every port of lifeboat-core, those of
//! one family in a submodule of their own (the cache's, the cart's, the held
//! orders', the sale status's, the operators' configuration's, metrics' and
//! the clock's), re-exported here. One small trait per capability; `lifeboat-aws`
//! implements them on AWS, [`crate::memory`] in memory (the demo runs on
//! those).

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::breaker::{BreakerRecord, ConsumerTarget};
use crate::events::LifeboatEvent;
use crate::operator::OperatorId;
use crate::probe::{BreakerTimer, ProbeSpec};
use crate::request::{CallResult, OperatorCall, Outcome, RequestRecord};
use crate::settings::Parallelization;
use crate::window::{Bucket, CallCounts};

mod cache;
mod cart;
mod clock;
mod metrics;
mod operator_config;
mod order;
mod sale;

pub use cache::{CacheStore, CacheWrite};
pub use cart::CartStore;
pub use clock::Clock;
pub use metrics::MetricsSink;
pub use operator_config::OperatorConfigStore;
pub use order::{Held, OrderStore};
pub use sale::{
    MessageHandle, Redelivery, RedeliveryError, SaleStatusStore, SaleSwitch, SaleSwitchError,
};

/// Errors of a store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A conditional write lost: someone else wrote first.
    #[error("conditional write lost: {0}")]
    Conflict(String),
    /// The store could not be reached or refused the call; worth retrying.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// An item exists but cannot be read as what it should be.
    #[error("stored item is corrupt: {0}")]
    Corrupt(String),
    /// The store refused the item itself (too large, not valid): the same
    /// write will never succeed, so it is not retried.
    #[error("store refused the item: {0}")]
    Rejected(String),
}

/// A request with its outcome, if one was written.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredRequest {
    pub request: RequestRecord,
    pub outcome: Option<Outcome>,
}

/// What happened to an outcome write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutcomeWrite {
    Written,
    /// The request already had an outcome; it was left as it was.
    AlreadyPresent,
}

/// The Requests table.
#[async_trait]
pub trait RequestStore: Send + Sync {
    /// Write a new request. Fails with `Conflict` if the id exists.
    async fn put_request(&self, request: &RequestRecord) -> Result<(), StoreError>;

    /// Read `operator`'s request and its outcome with a strongly consistent
    /// read (each operator's requests may live in a table of their own).
    async fn get(
        &self,
        operator: &OperatorId,
        request_id: &str,
    ) -> Result<Option<StoredRequest>, StoreError>;

    /// Write the one outcome of a request, unless it already has one. A write
    /// for a request id that was never stored is refused with `Conflict`.
    async fn write_outcome(
        &self,
        operator: &OperatorId,
        request_id: &str,
        outcome: &Outcome,
    ) -> Result<OutcomeWrite, StoreError>;
}

/// Counts of one half-open round, as stored after a trial result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrialTally {
    pub successes: u32,
    /// Failed trials, timed-out ones included.
    pub failures: u32,
    /// Of `failures`, those that timed out.
    pub timeouts: u32,
}

/// How one half-open trial call went, as counted in the Breaker table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trial {
    Passed,
    /// An error: refused, 5xx, a failure status, an unreadable answer.
    Failed,
    /// No answer within the budget.
    TimedOut,
}

/// The Breaker table: one record per operator.
#[async_trait]
pub trait BreakerStore: Send + Sync {
    /// Strongly consistent read of one operator's breaker.
    async fn load(&self, operator: &OperatorId) -> Result<Option<BreakerRecord>, StoreError>;

    /// Strongly consistent reads of the breakers of `operators`, by key: a
    /// few items per operator whatever else the store holds. Operators
    /// without a stored breaker are left out; the order is the store's.
    async fn load_many(&self, operators: &[OperatorId]) -> Result<Vec<BreakerRecord>, StoreError>;

    /// Every stored breaker. On DynamoDB a scan of the whole table: for an
    /// operator's command, never for a function's invocation.
    async fn list(&self) -> Result<Vec<BreakerRecord>, StoreError>;

    /// Write `record` if the stored version is `expected_version` (`None`: no
    /// record stored yet). Otherwise `Conflict`.
    async fn save(
        &self,
        record: &BreakerRecord,
        expected_version: Option<u64>,
    ) -> Result<(), StoreError>;

    /// Atomically claim one half-open trial slot of round `version`: succeeds
    /// only while the breaker is half-open at `version` with fewer than `limit`
    /// slots claimed. `Ok(false)`: no slot for this caller.
    async fn claim_trial(
        &self,
        operator: &OperatorId,
        version: u64,
        limit: u32,
    ) -> Result<bool, StoreError>;

    /// Atomically claim the probe of open period `version` at `at`: succeeds
    /// only while the breaker is open at `version` and no probe of it was
    /// claimed after `last_before`. A duplicated timer then probes once, and
    /// its loser sets no timer of its own, so the operator sees one probe per
    /// gap however often a timer is delivered. `Ok(false)`: someone else probes.
    async fn claim_probe(
        &self,
        operator: &OperatorId,
        version: u64,
        at: DateTime<Utc>,
        last_before: DateTime<Utc>,
    ) -> Result<bool, StoreError>;

    /// Atomically count a trial result in round `version`. `Ok(None)`: the
    /// breaker has moved on and the result no longer matters.
    async fn record_trial(
        &self,
        operator: &OperatorId,
        version: u64,
        trial: Trial,
    ) -> Result<Option<TrialTally>, StoreError>;

    /// Note that the state change to `version` was published, if the breaker
    /// is still at `version`.
    async fn mark_announced(&self, operator: &OperatorId, version: u64) -> Result<(), StoreError>;

    /// Note that `operator`'s lane was seen pointing where its breakers at
    /// `version` want it, if the breaker is still at `version` (never
    /// lowering the mark). The tick then leaves the lane alone until a
    /// breaker on it moves; see [`BreakerRecord::routed_version`].
    async fn mark_routed(&self, operator: &OperatorId, version: u64) -> Result<(), StoreError>;

    /// Keep `question`, which `operator` answered at `at`, as the question
    /// its open breaker is probed with when its settings name no probe
    /// ([`ProbeSpec::remembered`]). Beside the breaker, never in it: the
    /// breaker's versioned writes and this one never meet.
    async fn remember_answered(
        &self,
        operator: &OperatorId,
        question: &ProbeSpec,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError>;

    /// The question last kept by [`BreakerStore::remember_answered`], if any.
    async fn answered(&self, operator: &OperatorId) -> Result<Option<ProbeSpec>, StoreError>;
}

/// The failure window's buckets, shared by every consumer instance.
#[async_trait]
pub trait WindowStore: Send + Sync {
    /// Atomically add `counts` to the bucket starting at `bucket_start`.
    async fn add(
        &self,
        operator: &OperatorId,
        bucket_start: DateTime<Utc>,
        counts: &CallCounts,
    ) -> Result<(), StoreError>;

    /// Buckets that start at or after `since`.
    async fn since(
        &self,
        operator: &OperatorId,
        since: DateTime<Utc>,
    ) -> Result<Vec<Bucket>, StoreError>;
}

/// Errors of the event publisher.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// Some events were not accepted even after retrying; `failed` holds their
    /// indexes in the published slice with the bus's reason.
    #[error("{} of {total} events not published: {}", failed.len(), first_reason(failed))]
    Partial {
        total: usize,
        failed: Vec<(usize, String)>,
    },
    #[error("event bus unavailable: {0}")]
    Unavailable(String),
}

fn first_reason(failed: &[(usize, String)]) -> &str {
    failed.first().map(|(_, r)| r.as_str()).unwrap_or("")
}

impl PublishError {
    /// Indexes of the events that were not published.
    pub fn failed_indexes(&self, total: usize) -> Vec<usize> {
        match self {
            PublishError::Partial { failed, .. } => failed.iter().map(|(i, _)| *i).collect(),
            PublishError::Unavailable(_) => (0..total).collect(),
        }
    }
}

/// The event bus.
#[async_trait]
pub trait EventPublisher: Send + Sync {
    /// Publish all events (in as many calls as the bus needs), retrying entries
    /// the bus refused, and report those that still failed.
    async fn publish(&self, events: &[LifeboatEvent]) -> Result<(), PublishError>;
}

/// A timer could not be set.
#[derive(Debug, thiserror::Error)]
#[error("breaker timer not set: {0}")]
pub struct TimerError(pub String);

/// Wake-ups of the circuit switch at a given time ([`crate::probe`]).
#[async_trait]
pub trait BreakerTimers: Send + Sync {
    /// Deliver `timer` to the switch when `timer.due` has come (at once if
    /// it has). At least once: a timer may arrive twice.
    async fn set(&self, timer: &BreakerTimer) -> Result<(), TimerError>;
}

/// Errors of the stream router.
#[derive(Debug, thiserror::Error)]
pub enum RouterError {
    #[error("event source mapping {0} not found")]
    NotFound(String),
    #[error("event source mapping busy, try again: {0}")]
    Busy(String),
    /// Lambda's control plane refused the call for its request rate
    /// (`TooManyRequestsException`) after the SDK's own retries.
    #[error("Lambda control plane throttled the call, try again: {0}")]
    Throttled(String),
    #[error("event source mapping unavailable: {0}")]
    Unavailable(String),
}

/// Whether a re-point changed anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repoint {
    Changed,
    AlreadyThere,
}

/// Where the Requests stream is delivered.
#[async_trait]
pub trait StreamRouter: Send + Sync {
    async fn current(&self) -> Result<ConsumerTarget, RouterError>;

    /// Point the stream at `target`, keeping its position. Idempotent.
    async fn point_at(&self, target: ConsumerTarget) -> Result<Repoint, RouterError>;

    /// Run `factor` batches of the stream at once (the mapping's
    /// `ParallelizationFactor`), keeping its target and position.
    /// Idempotent. A router that cannot says so.
    async fn set_parallelization(&self, factor: Parallelization) -> Result<Repoint, RouterError> {
        Err(RouterError::Unavailable(format!(
            "this stream's parallelization cannot be set (asked for {factor})"
        )))
    }
}

/// Who a contributor alarm has in ALARM: a CloudWatch Metrics Insights
/// alarm grouped by a dimension (lifeboat's `OperatorsErrorsAlarm`, by
/// `Operator`) whose time series are its contributors.
#[async_trait]
pub trait AlarmContributors: Send + Sync {
    /// Each contributor of `alarm` in ALARM now; empty when none is.
    async fn in_alarm(&self, alarm: &str) -> Result<Vec<AlarmContributor>, StoreError>;
}

/// A contributor of a contributor alarm, in ALARM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlarmContributor {
    /// What names it (for lifeboat's alarm, `{"Operator": "nordic"}`).
    pub attributes: BTreeMap<String, String>,
    /// When it entered ALARM, if CloudWatch says.
    pub since: Option<DateTime<Utc>>,
}

/// Where the secrets lifeboat sends to operators are kept (SSM SecureString
/// parameters on AWS), read by path so that one call serves many operators.
#[async_trait]
pub trait SecretStore: Send + Sync {
    /// Every secret directly under `path` (not below it), by the last segment
    /// of its name, decrypted. An empty map: nothing kept there.
    async fn secrets_under(&self, path: &str) -> Result<BTreeMap<String, String>, StoreError>;
}

/// A path of a [`SecretStore`], and the store: where a set of secrets is kept.
pub type SecretsAt<'a> = (&'a str, std::sync::Arc<dyn SecretStore>);

/// The operator's API. Implementations bound every call by `call.budget` and
/// classify what happened; they never fail in any other way.
#[async_trait]
pub trait OperatorApi: Send + Sync {
    /// Whether this adapter knows how to reach `operator` at all. A request for
    /// an operator it does not know is quarantined, never called.
    fn knows(&self, operator: &OperatorId) -> bool;

    async fn call(&self, call: &OperatorCall) -> CallResult;
}
