//! The sale status of each operator: the off-sale listener's record, its
//! rules, its ports and their in-memory adapters.
//!
//! # The record
//!
//! One [`SaleRecord`] per operator says what the sale switch holds
//! (`applied_version`, `applied_status`) and what the listener still wants to
//! write there (`pending`: version, status, attempts, when the next attempt is
//! due, the last error). A change is *wanted* only if its version is newer than
//! both the applied and the pending version, so:
//!
//! * a duplicate of the applied version, or anything older, is ignored;
//! * a newer change replaces the pending one (its attempts start again at 0),
//!   and the replaced version is never written, not even by a retry that was
//!   already scheduled;
//! * a change that used up every attempt stays pending as *given up* (with the
//!   `Sale Switch Write Failed` fault published once), so a late duplicate of
//!   it does not start the retries again; the next newer change replaces it.
//!
//! Only one write per operator is in flight at a time: an attempt is claimed
//! by saving a [`WriteLease`] with the claim, and another delivery that finds a
//! live lease waits. So a slow write of an old version can never land after a
//! newer version was written (while the lease holds; the lease outlives the
//! attempt timeout by [`LEASE_MARGIN`]). A listener that stops mid-write loses
//! nothing either: its lease expires, the attempt counts as made, and the next
//! delivery carries on.
//!
//! # Conditional writes
//!
//! Every rule is a pure function of the stored record ([`SaleRecord::plan`],
//! [`SaleRecord::after_attempt`], [`SaleRecord::fault_published`]); the store
//! only has to load a record and save it on the condition that nobody saved it
//! in between ([`SaleStatusStore::save`] with the `revision` it loaded). On
//! DynamoDB that is a consistent `GetItem` and a `PutItem` with
//! `attribute_not_exists(operator) OR revision = :expected`, and the rules are
//! the same on every adapter because they are not in the adapters.
//!
//! # The sale switch
//!
//! [`SaleSwitch`] is where the status finally goes. With the default target the
//! status table *is* the switch ([`StatusTableSwitch`]: the conditional save of
//! `applied_status` is the write, and the cart reads [`SaleRecord::status`]);
//! the legacy booking system's HTTP switch lives in the `offsale-listener`
//! crate; [`MemorySaleSwitch`] models the legacy system, outages included.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use crate::breaker::BreakerState;
use crate::clock::Clock;
use crate::events::{BreakerStateChanged, SCHEMA_VERSION, SaleStatus, SaleSwitchWriteFailed};
use crate::operator::OperatorId;
use crate::ports::StoreError;
use crate::retry::RetrySchedule;

/// How much longer than one attempt's timeout its lease lasts.
pub const LEASE_MARGIN: Duration = Duration::from_secs(10);
/// How soon a change that found another write in flight looks again.
pub const BUSY_RECHECK: Duration = Duration::from_secs(1);

/// `"on_sale"` or `"off_sale"`, as in the events and the switch's body.
pub fn status_str(status: SaleStatus) -> &'static str {
    match status {
        SaleStatus::OnSale => "on_sale",
        SaleStatus::OffSale => "off_sale",
    }
}

fn after(at: DateTime<Utc>, gap: Duration) -> DateTime<Utc> {
    TimeDelta::from_std(gap)
        .ok()
        .and_then(|gap| at.checked_add_signed(gap))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// The wait from `now` until `at` (zero if `at` has passed).
pub fn until(now: DateTime<Utc>, at: DateTime<Utc>) -> Duration {
    (at - now).to_std().unwrap_or(Duration::ZERO)
}

/// When an operator goes back on sale after an incident.
///
/// * [`OnSaleAt::Closed`] (the default): only once the breaker closes. A
///   half-open round keeps the operator off sale, so a long outage costs one
///   off-sale and one on-sale write however many rounds fail, and customers
///   are not sold what the next failed round takes away seconds later.
/// * [`OnSaleAt::HalfOpen`]: as soon as the breaker tests recovery; each
///   failed round takes it off sale again (two writes per round).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnSaleAt {
    #[default]
    Closed,
    HalfOpen,
}

impl OnSaleAt {
    /// `closed` or `half_open`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "closed" => Some(Self::Closed),
            "half_open" => Some(Self::HalfOpen),
            _ => None,
        }
    }

    /// The sale status the breaker state `state` asks for.
    pub fn status(self, state: BreakerState) -> SaleStatus {
        match (self, state) {
            (OnSaleAt::Closed, BreakerState::HalfOpen) => SaleStatus::OffSale,
            _ => SaleStatus::for_breaker(state),
        }
    }
}

/// A breaker change, as the sale switch sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaleChange {
    pub operator: OperatorId,
    /// The breaker version: the newest wins.
    pub version: u64,
    pub status: SaleStatus,
    /// The breaker state that asked for `status`, for logs.
    pub breaker: BreakerState,
}

impl SaleChange {
    /// The change `e` asks for when operators go back on sale at `on_sale_at`.
    pub fn of(e: &BreakerStateChanged, on_sale_at: OnSaleAt) -> Self {
        Self {
            operator: e.operator.clone(),
            version: e.version,
            status: on_sale_at.status(e.to),
            breaker: e.to,
        }
    }
}

/// A write the listener still owes the switch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingWrite {
    pub version: u64,
    pub status: SaleStatus,
    /// Attempts made (claimed) so far.
    pub attempts: u32,
    /// No attempt before this time.
    pub next_attempt_at: DateTime<Utc>,
    #[serde(default)]
    pub last_error: Option<String>,
    /// When this version was first wanted.
    pub since: DateTime<Utc>,
    /// Set when the last attempt failed: no more attempts for this version.
    #[serde(default)]
    pub gave_up_at: Option<DateTime<Utc>>,
    /// The `Sale Switch Write Failed` fault of this version was published.
    #[serde(default)]
    pub fault_published: bool,
}

/// One claimed attempt in flight.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteLease {
    pub version: u64,
    pub attempt: u32,
    /// After this the attempt is presumed lost (its listener stopped).
    pub until: DateTime<Utc>,
}

/// The sale status of one operator, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SaleRecord {
    pub operator: OperatorId,
    /// Bumped by every save; a save is conditional on the revision loaded.
    pub revision: u64,
    /// The newest breaker version whose status the switch accepted (0: none).
    pub applied_version: u64,
    /// What the switch holds. An operator never written is on sale.
    pub applied_status: SaleStatus,
    #[serde(default)]
    pub applied_at: Option<DateTime<Utc>>,
    /// A newer version not written yet; always newer than `applied_version`.
    #[serde(default)]
    pub pending: Option<PendingWrite>,
    #[serde(default)]
    pub lease: Option<WriteLease>,
}

/// How writes are retried and how long an attempt may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WritePolicy {
    pub schedule: RetrySchedule,
    /// The longest one write to the switch may take before it counts as failed.
    pub attempt_timeout: Duration,
    /// How long a claimed attempt keeps other writes of the operator waiting:
    /// longer than `attempt_timeout`, so a write that was given up on has
    /// ended before anyone else writes.
    pub lease: Duration,
    /// How long a breaker must stay closed before its operator goes back on
    /// sale: the on-sale write of a change waits this long, and a new trip
    /// meanwhile replaces it without any write. An operator that flaps
    /// (down, back for a few seconds, down again) then costs one off-sale and
    /// one on-sale write, not two per flap. [`DEFAULT_ON_SALE_HOLD`] unless set.
    pub on_sale_hold: Duration,
    /// How long an off-sale write waits before its first attempt. When
    /// lifeboat's own egress fails, every breaker opens within seconds of
    /// the first; the wait lets the listener see most of them open and hold
    /// the write (its self-fault rule) instead of taking the first few
    /// operators off sale. [`DEFAULT_OFF_SALE_HOLD`] unless set.
    pub off_sale_hold: Duration,
}

/// How long an off-sale write waits, unless the listener's
/// `SALE_OFF_SALE_HOLD_S` says otherwise: searches already answer without
/// the operator; only the sale status waits.
pub const DEFAULT_OFF_SALE_HOLD: Duration = Duration::from_secs(10);

/// How long a breaker stays closed before its operator goes back on sale,
/// unless the listener's `SALE_ON_SALE_HOLD_S` says otherwise.
pub const DEFAULT_ON_SALE_HOLD: Duration = Duration::from_secs(60);

impl Default for WritePolicy {
    fn default() -> Self {
        Self::new(RetrySchedule::default(), Duration::from_secs(5))
    }
}

impl WritePolicy {
    /// `schedule`, with a lease of `attempt_timeout` plus [`LEASE_MARGIN`].
    pub fn new(schedule: RetrySchedule, attempt_timeout: Duration) -> Self {
        Self {
            schedule,
            attempt_timeout,
            lease: attempt_timeout.saturating_add(LEASE_MARGIN),
            on_sale_hold: DEFAULT_ON_SALE_HOLD,
            off_sale_hold: DEFAULT_OFF_SALE_HOLD,
        }
    }

    /// The same policy, holding off-sale writes for `hold` instead.
    pub fn with_off_sale_hold(mut self, hold: Duration) -> Self {
        self.off_sale_hold = hold;
        self
    }

    /// The same policy, holding on-sale writes for `hold` instead.
    pub fn with_on_sale_hold(mut self, hold: Duration) -> Self {
        self.on_sale_hold = hold;
        self
    }

    /// Attempts per version, at least one.
    pub fn max_attempts(&self) -> u32 {
        self.schedule.max_attempts.max(1)
    }
}

/// Why a change needs nothing more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// The switch holds this version's status.
    Applied,
    /// The switch already held this version's status: recorded as applied
    /// without a write.
    AlreadyHeld,
    /// Older than the applied version: ignored.
    Outdated { applied: u64 },
    /// A newer version is wanted: this one is never written.
    Superseded { by: u64 },
    /// Every attempt failed and the fault was published.
    GaveUp { attempts: u32, last_error: String },
}

/// Why a change must come back later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wait {
    /// The last attempt failed; the schedule says when the next is due.
    NotDue {
        attempts: u32,
        last_error: Option<String>,
    },
    /// Another attempt for this operator is in flight.
    WriteInFlight { version: u64, attempt: u32 },
}

/// What to do next for a change.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Done(Settled),
    /// Deliver the change again at `retry_at`.
    Wait {
        retry_at: DateTime<Utc>,
        why: Wait,
    },
    /// Write the change's status to the switch: attempt number `attempt`.
    Attempt {
        attempt: u32,
    },
    /// Publish the fault, then save [`SaleRecord::fault_published`].
    Fault(SaleSwitchWriteFailed),
}

/// The next step, and the record to save (conditionally) before taking it.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub save: Option<SaleRecord>,
    pub step: Step,
}

impl Plan {
    fn done(settled: Settled) -> Self {
        Self {
            save: None,
            step: Step::Done(settled),
        }
    }
}

impl SaleRecord {
    /// An operator nothing was written for: on sale, revision 0 (not stored).
    pub fn new(operator: OperatorId) -> Self {
        Self {
            operator,
            revision: 0,
            applied_version: 0,
            applied_status: SaleStatus::OnSale,
            applied_at: None,
            pending: None,
            lease: None,
        }
    }

    /// The operator's sale status: what the switch holds.
    pub fn status(&self) -> SaleStatus {
        self.applied_status
    }

    /// The newest version seen: pending or applied.
    pub fn wanted_version(&self) -> u64 {
        self.pending.as_ref().map_or(self.applied_version, |p| {
            p.version.max(self.applied_version)
        })
    }

    fn bumped(mut self) -> Self {
        self.revision += 1;
        self
    }

    fn fault(&self, p: &PendingWrite, now: DateTime<Utc>) -> SaleSwitchWriteFailed {
        SaleSwitchWriteFailed {
            schema_version: SCHEMA_VERSION,
            operator: self.operator.clone(),
            wanted: p.status,
            version: p.version,
            attempts: p.attempts,
            last_error: p
                .last_error
                .clone()
                .unwrap_or_else(|| "no attempt reported an error".into()),
            at: now,
        }
    }

    /// What to do with `change`, delivered at `now`.
    pub fn plan(&self, change: &SaleChange, now: DateTime<Utc>, policy: &WritePolicy) -> Plan {
        if change.version <= self.applied_version {
            return Plan::done(if change.version == self.applied_version {
                Settled::Applied
            } else {
                Settled::Outdated {
                    applied: self.applied_version,
                }
            });
        }
        let mut next = self.clone();
        let mut pending = match &self.pending {
            Some(p) if p.version > change.version => {
                return Plan::done(Settled::Superseded { by: p.version });
            }
            Some(p) if p.version == change.version => p.clone(),
            // Nothing pending, or an older version: this one replaces it.
            _ => PendingWrite {
                version: change.version,
                status: change.status,
                attempts: 0,
                next_attempt_at: match change.status {
                    SaleStatus::OnSale => after(now, policy.on_sale_hold),
                    SaleStatus::OffSale => after(now, policy.off_sale_hold),
                },
                last_error: None,
                since: now,
                gave_up_at: None,
                fault_published: false,
            },
        };
        let begun = self.pending.as_ref() != Some(&pending);
        next.pending = Some(pending.clone());

        // The switch already holds what this version wants (we wrote it
        // there) and no write is in flight that could change it: the version
        // is applied without a write (a half-open round while the operator
        // stays off sale, a release to closed while on sale).
        let write_in_flight = self.lease.as_ref().is_some_and(|l| l.until > now);
        // An attempt of the write this one replaces may have reached the
        // switch without our hearing of it (a timeout, a crash): then what
        // the switch holds is unknown, and this version is written.
        let unconfirmed_attempt = self
            .pending
            .as_ref()
            .is_some_and(|p| p.version != pending.version && p.attempts > 0);
        if pending.status == self.applied_status
            && !unconfirmed_attempt
            && self.applied_at.is_some()
            && pending.gave_up_at.is_none()
            && !write_in_flight
        {
            next.pending = None;
            next.lease = None;
            next.applied_version = pending.version;
            return Plan {
                save: Some(next.bumped()),
                step: Step::Done(Settled::AlreadyHeld),
            };
        }

        if pending.gave_up_at.is_some() {
            return if pending.fault_published {
                Plan::done(Settled::GaveUp {
                    attempts: pending.attempts,
                    last_error: pending.last_error.clone().unwrap_or_default(),
                })
            } else {
                Plan {
                    save: None,
                    step: Step::Fault(self.fault(&pending, now)),
                }
            };
        }
        if let Some(lease) = self.lease.as_ref().filter(|l| l.until > now) {
            return Plan {
                save: begun.then(|| next.bumped()),
                step: Step::Wait {
                    retry_at: lease.until.min(after(now, BUSY_RECHECK)),
                    why: Wait::WriteInFlight {
                        version: lease.version,
                        attempt: lease.attempt,
                    },
                },
            };
        }
        // A lease that ran out: its attempt never reported back.
        if let Some(lost) = self
            .lease
            .as_ref()
            .filter(|l| l.version == pending.version && l.attempt == pending.attempts)
        {
            pending.last_error = Some(format!(
                "attempt {} did not finish: the listener stopped or ran out of time mid-write",
                lost.attempt
            ));
        }
        next.lease = None;
        if pending.attempts >= policy.max_attempts() {
            pending.gave_up_at = Some(now);
            let fault = self.fault(&pending, now);
            next.pending = Some(pending);
            return Plan {
                save: Some(next.bumped()),
                step: Step::Fault(fault),
            };
        }
        if pending.next_attempt_at > now {
            return Plan {
                save: begun.then(|| next.bumped()),
                step: Step::Wait {
                    retry_at: pending.next_attempt_at,
                    why: Wait::NotDue {
                        attempts: pending.attempts,
                        last_error: pending.last_error.clone(),
                    },
                },
            };
        }
        pending.attempts += 1;
        let attempt = pending.attempts;
        next.lease = Some(WriteLease {
            version: pending.version,
            attempt,
            until: after(now, policy.lease),
        });
        next.pending = Some(pending);
        Plan {
            save: Some(next.bumped()),
            step: Step::Attempt { attempt },
        }
    }

    /// The record after attempt `attempt` at `change` ended with `result`, or
    /// `None` if that changes nothing (the change was superseded meanwhile and
    /// the lease is someone else's).
    pub fn after_attempt(
        &self,
        change: &SaleChange,
        attempt: u32,
        result: Result<(), String>,
        now: DateTime<Utc>,
        policy: &WritePolicy,
    ) -> Option<SaleRecord> {
        let mut next = self.clone();
        if self
            .lease
            .as_ref()
            .is_some_and(|l| l.version == change.version && l.attempt == attempt)
        {
            next.lease = None;
        }
        match result {
            Ok(()) => {
                if change.version > next.applied_version {
                    next.applied_version = change.version;
                    next.applied_status = change.status;
                    next.applied_at = Some(now);
                }
                if next
                    .pending
                    .as_ref()
                    .is_some_and(|p| p.version <= change.version)
                {
                    next.pending = None;
                }
            }
            Err(error) => {
                if let Some(p) = next.pending.as_mut()
                    && p.version == change.version
                    && p.attempts == attempt
                    && p.gave_up_at.is_none()
                {
                    p.last_error = Some(error);
                    match policy.schedule.gap_after(attempt) {
                        Some(gap) if attempt < policy.max_attempts() => {
                            p.next_attempt_at = after(now, gap);
                        }
                        _ => p.gave_up_at = Some(now),
                    }
                }
            }
        }
        (next != *self).then(|| next.bumped())
    }

    /// The record with the given-up write of `version` started again (its
    /// attempts from 0, due at `now`, a new fault if this round fails too),
    /// or `None` if `version` is not a given-up write.
    pub fn restart_given_up(&self, version: u64, now: DateTime<Utc>) -> Option<SaleRecord> {
        let mut next = self.clone();
        match next.pending.as_mut() {
            Some(p) if p.version == version && p.gave_up_at.is_some() => {
                p.attempts = 0;
                p.gave_up_at = None;
                p.fault_published = false;
                p.next_attempt_at = now;
                next.lease = None;
                Some(next.bumped())
            }
            _ => None,
        }
    }

    /// The record once the fault of `version` is published, or `None` if
    /// there is nothing to mark.
    pub fn fault_published(&self, version: u64) -> Option<SaleRecord> {
        let mut next = self.clone();
        match next.pending.as_mut() {
            Some(p) if p.version == version && p.gave_up_at.is_some() && !p.fault_published => {
                p.fault_published = true;
                Some(next.bumped())
            }
            _ => None,
        }
    }
}

/// The sale status table: one [`SaleRecord`] per operator.
#[async_trait]
pub trait SaleStatusStore: Send + Sync {
    /// Strongly consistent read of one operator's record.
    async fn load(&self, operator: &OperatorId) -> Result<Option<SaleRecord>, StoreError>;

    /// Write `record` if the stored revision is `expected_revision` (`None`:
    /// nothing stored yet). Otherwise `Conflict`.
    async fn save(
        &self,
        record: &SaleRecord,
        expected_revision: Option<u64>,
    ) -> Result<(), StoreError>;
}

/// Why the sale switch did not take a write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SaleSwitchError {
    /// It answered, but not with success.
    #[error("sale switch answered {status} {reason}")]
    Rejected { status: u16, reason: String },
    /// It could not be reached, or the exchange broke.
    #[error("sale switch unreachable: {0}")]
    Unreachable(String),
    #[error("sale switch did not answer within {} ms", .0.as_millis())]
    Timeout(Duration),
}

/// Where an operator is put on or off sale: the legacy booking system's
/// off-sale switch, or our own status table.
#[async_trait]
pub trait SaleSwitch: Send + Sync {
    /// Put `operator` on or off sale, as asked by breaker version `version`.
    /// Idempotent: the same write twice leaves the same status.
    async fn set(
        &self,
        operator: &OperatorId,
        status: SaleStatus,
        version: u64,
    ) -> Result<(), SaleSwitchError>;
}

/// The switch when the status table is the switch (`SALE_SWITCH=table`): the
/// conditional save of the applied status is the write, so nothing else is
/// written and nothing fails here.
#[derive(Debug, Clone, Copy, Default)]
pub struct StatusTableSwitch;

#[async_trait]
impl SaleSwitch for StatusTableSwitch {
    async fn set(&self, _: &OperatorId, _: SaleStatus, _: u64) -> Result<(), SaleSwitchError> {
        Ok(())
    }
}

/// A message of the listener's queue, as needed to have it delivered again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageHandle {
    /// The queue's ARN (the SQS record's `eventSourceARN`), when known.
    pub queue_arn: Option<String>,
    pub message_id: String,
    pub receipt_handle: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedeliveryError {
    /// The message was deleted, or its receipt handle expired.
    #[error("message {0} is no longer in flight")]
    NotInFlight(String),
    #[error("queue unavailable: {0}")]
    Unavailable(String),
}

/// Sets when a message reported as failed comes back (SQS
/// `ChangeMessageVisibility`).
#[async_trait]
pub trait Redelivery: Send + Sync {
    /// Deliver `message` again after `delay`, counted from now. Adapters that
    /// count in whole seconds round up, so a message never comes back early.
    async fn redeliver_after(
        &self,
        message: &MessageHandle,
        delay: Duration,
    ) -> Result<(), RedeliveryError>;
}

/// Leaves every message to come back after the queue's own visibility
/// timeout. For queues the listener may not change visibility on: retries then
/// happen at that timeout's pace instead of the schedule's (never earlier than
/// the schedule, because the record says when the next attempt is due).
#[derive(Debug, Clone, Copy, Default)]
pub struct QueueTimeoutRedelivery;

#[async_trait]
impl Redelivery for QueueTimeoutRedelivery {
    async fn redeliver_after(&self, _: &MessageHandle, _: Duration) -> Result<(), RedeliveryError> {
        Ok(())
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section below writes whole values: a poisoned lock still
    // guards consistent data.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The sale status table in memory.
#[derive(Debug, Default)]
pub struct MemorySaleStatusStore {
    records: Mutex<BTreeMap<OperatorId, SaleRecord>>,
}

impl MemorySaleStatusStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Every stored record.
    pub fn all(&self) -> Vec<SaleRecord> {
        lock(&self.records).values().cloned().collect()
    }
}

#[async_trait]
impl SaleStatusStore for MemorySaleStatusStore {
    async fn load(&self, operator: &OperatorId) -> Result<Option<SaleRecord>, StoreError> {
        Ok(lock(&self.records).get(operator).cloned())
    }

    async fn save(
        &self,
        record: &SaleRecord,
        expected_revision: Option<u64>,
    ) -> Result<(), StoreError> {
        let mut records = lock(&self.records);
        let stored = records.get(&record.operator).map(|r| r.revision);
        if stored != expected_revision {
            return Err(StoreError::Conflict(format!(
                "sale status of {} is at revision {stored:?}, expected {expected_revision:?}",
                record.operator
            )));
        }
        records.insert(record.operator.clone(), record.clone());
        Ok(())
    }
}

/// What became of one write to a [`MemorySaleSwitch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SwitchOutcome {
    Accepted,
    Failed(String),
    /// The write never answered.
    Hung,
}

/// One write to a [`MemorySaleSwitch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwitchWrite {
    pub operator: OperatorId,
    pub status: SaleStatus,
    pub version: u64,
    pub at: DateTime<Utc>,
    pub outcome: SwitchOutcome,
}

#[derive(Debug, Default)]
struct SwitchState {
    statuses: BTreeMap<OperatorId, SaleStatus>,
    failing: u32,
    hanging: u32,
    log: Vec<SwitchWrite>,
}

/// The legacy booking system's off-sale switch in memory: the last write
/// wins, whatever its version, as in the legacy system. An outage is modelled
/// by failing ([`fail_next`](Self::fail_next)) or hanging
/// ([`hang_next`](Self::hang_next)) the next writes.
pub struct MemorySaleSwitch {
    clock: Arc<dyn Clock>,
    state: Mutex<SwitchState>,
}

impl std::fmt::Debug for MemorySaleSwitch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemorySaleSwitch")
            .field("state", &*lock(&self.state))
            .finish_non_exhaustive()
    }
}

impl MemorySaleSwitch {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            state: Mutex::default(),
        }
    }

    /// Fail the next `n` writes with `503 Service Unavailable`.
    pub fn fail_next(&self, n: u32) {
        lock(&self.state).failing = n;
    }

    /// Leave the next `n` writes without an answer, forever.
    pub fn hang_next(&self, n: u32) {
        lock(&self.state).hanging = n;
    }

    /// The status of `operator`: on sale until written otherwise.
    pub fn status(&self, operator: &OperatorId) -> SaleStatus {
        lock(&self.state)
            .statuses
            .get(operator)
            .copied()
            .unwrap_or(SaleStatus::OnSale)
    }

    /// Every write so far, in order.
    pub fn writes(&self) -> Vec<SwitchWrite> {
        lock(&self.state).log.clone()
    }
}

#[async_trait]
impl SaleSwitch for MemorySaleSwitch {
    async fn set(
        &self,
        operator: &OperatorId,
        status: SaleStatus,
        version: u64,
    ) -> Result<(), SaleSwitchError> {
        let outcome = {
            let mut state = lock(&self.state);
            let outcome = if state.hanging > 0 {
                state.hanging -= 1;
                SwitchOutcome::Hung
            } else if state.failing > 0 {
                state.failing -= 1;
                SwitchOutcome::Failed("503 Service Unavailable".into())
            } else {
                state.statuses.insert(operator.clone(), status);
                SwitchOutcome::Accepted
            };
            state.log.push(SwitchWrite {
                operator: operator.clone(),
                status,
                version,
                at: self.clock.now(),
                outcome: outcome.clone(),
            });
            outcome
        };
        match outcome {
            SwitchOutcome::Accepted => Ok(()),
            SwitchOutcome::Failed(_) => Err(SaleSwitchError::Rejected {
                status: 503,
                reason: "Service Unavailable".into(),
            }),
            SwitchOutcome::Hung => std::future::pending().await,
        }
    }
}

/// A message received from a [`MemoryQueue`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedMessage {
    pub message_id: String,
    pub receipt_handle: String,
    pub body: String,
    /// How many times it was received, this time included.
    pub receive_count: u32,
    pub sent_at: DateTime<Utc>,
}

#[derive(Debug)]
struct Queued {
    message_id: String,
    body: String,
    sent_at: DateTime<Utc>,
    visible_at: DateTime<Utc>,
    receive_count: u32,
    receipt: Option<String>,
}

#[derive(Debug, Default)]
struct QueueState {
    sent: u64,
    messages: BTreeMap<u64, Queued>,
}

/// The listener's SQS queue in memory: a received message is hidden for the
/// visibility timeout and comes back unless deleted; its visibility can be
/// changed while it is in flight ([`Redelivery`]).
pub struct MemoryQueue {
    clock: Arc<dyn Clock>,
    visibility_timeout: Duration,
    state: Mutex<QueueState>,
}

impl std::fmt::Debug for MemoryQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryQueue")
            .field("visibility_timeout", &self.visibility_timeout)
            .field("state", &*lock(&self.state))
            .finish_non_exhaustive()
    }
}

impl MemoryQueue {
    /// The ARN the queue's messages say they come from.
    pub const ARN: &str = "arn:aws:sqs:us-east-1:123456789012:lifeboat-offsale-memory";

    pub fn new(clock: Arc<dyn Clock>, visibility_timeout: Duration) -> Self {
        Self {
            clock,
            visibility_timeout,
            state: Mutex::default(),
        }
    }

    /// Enqueue `body`, visible at once; its message id.
    pub fn send(&self, body: impl Into<String>) -> String {
        let now = self.clock.now();
        let mut state = lock(&self.state);
        state.sent += 1;
        let message_id = format!("msg-{}", state.sent);
        let key = state.sent;
        state.messages.insert(
            key,
            Queued {
                message_id: message_id.clone(),
                body: body.into(),
                sent_at: now,
                visible_at: now,
                receive_count: 0,
                receipt: None,
            },
        );
        message_id
    }

    /// Up to `max` visible messages, oldest first, each hidden for the
    /// visibility timeout.
    pub fn receive(&self, max: usize) -> Vec<ReceivedMessage> {
        let now = self.clock.now();
        let hidden_until = after(now, self.visibility_timeout);
        let mut state = lock(&self.state);
        state
            .messages
            .values_mut()
            .filter(|m| m.visible_at <= now)
            .take(max)
            .map(|m| {
                m.receive_count += 1;
                m.visible_at = hidden_until;
                let receipt = format!("{}#{}", m.message_id, m.receive_count);
                m.receipt = Some(receipt.clone());
                ReceivedMessage {
                    message_id: m.message_id.clone(),
                    receipt_handle: receipt,
                    body: m.body.clone(),
                    receive_count: m.receive_count,
                    sent_at: m.sent_at,
                }
            })
            .collect()
    }

    /// Delete the message received with `receipt_handle`; false if it is gone
    /// or was received again since.
    pub fn delete(&self, receipt_handle: &str) -> bool {
        let mut state = lock(&self.state);
        let key = state
            .messages
            .iter()
            .find(|(_, m)| m.receipt.as_deref() == Some(receipt_handle))
            .map(|(k, _)| *k);
        key.is_some_and(|k| state.messages.remove(&k).is_some())
    }

    /// When the next message becomes visible, if any is queued.
    pub fn next_visible_at(&self) -> Option<DateTime<Utc>> {
        lock(&self.state)
            .messages
            .values()
            .map(|m| m.visible_at)
            .min()
    }

    /// Messages queued, visible or not.
    pub fn len(&self) -> usize {
        lock(&self.state).messages.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[async_trait]
impl Redelivery for MemoryQueue {
    async fn redeliver_after(
        &self,
        message: &MessageHandle,
        delay: Duration,
    ) -> Result<(), RedeliveryError> {
        let visible_at = after(self.clock.now(), delay);
        let mut state = lock(&self.state);
        match state
            .messages
            .values_mut()
            .find(|m| m.receipt.as_deref() == Some(message.receipt_handle.as_str()))
        {
            Some(m) => {
                m.visible_at = visible_at;
                Ok(())
            }
            None => Err(RedeliveryError::NotInFlight(message.message_id.clone())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn t0() -> DateTime<Utc> {
        DateTime::from_timestamp(1_796_032_800, 0).unwrap()
    }

    fn secs(s: i64) -> DateTime<Utc> {
        t0() + TimeDelta::seconds(s)
    }

    fn nordic() -> OperatorId {
        OperatorId::new("nordic").unwrap()
    }

    fn change(version: u64, breaker: BreakerState) -> SaleChange {
        SaleChange {
            operator: nordic(),
            version,
            status: SaleStatus::for_breaker(breaker),
            breaker,
        }
    }

    fn policy(max_attempts: u32) -> WritePolicy {
        WritePolicy::new(
            RetrySchedule {
                max_attempts,
                ..RetrySchedule::default()
            },
            Duration::from_secs(5),
        )
        // The write mechanics, without the holds (tested on their own).
        .with_on_sale_hold(Duration::ZERO)
        .with_off_sale_hold(Duration::ZERO)
    }

    /// Plan, save what the plan says, and return the step.
    fn step(
        record: &mut SaleRecord,
        change: &SaleChange,
        now: DateTime<Utc>,
        p: &WritePolicy,
    ) -> Step {
        let plan = record.plan(change, now, p);
        if let Some(next) = plan.save {
            assert_eq!(next.revision, record.revision + 1);
            *record = next;
        }
        plan.step
    }

    fn finish(
        record: &mut SaleRecord,
        change: &SaleChange,
        attempt: u32,
        ok: bool,
        now: DateTime<Utc>,
        p: &WritePolicy,
    ) {
        let result = if ok { Ok(()) } else { Err("503".to_owned()) };
        if let Some(next) = record.after_attempt(change, attempt, result, now, p) {
            *record = next;
        }
    }

    #[test]
    fn the_newest_version_wins_and_older_ones_are_ignored() {
        let p = policy(8);
        let mut r = SaleRecord::new(nordic());
        let v3 = change(3, BreakerState::Open);
        assert_eq!(step(&mut r, &v3, t0(), &p), Step::Attempt { attempt: 1 });
        finish(&mut r, &v3, 1, true, t0(), &p);
        assert_eq!((r.applied_version, r.status()), (3, SaleStatus::OffSale));
        assert_eq!((r.pending.clone(), r.lease.clone()), (None, None));

        let v5 = change(5, BreakerState::Closed);
        assert_eq!(step(&mut r, &v5, t0(), &p), Step::Attempt { attempt: 1 });
        finish(&mut r, &v5, 1, true, t0(), &p);
        for late in [change(4, BreakerState::HalfOpen), v3] {
            assert_eq!(
                step(&mut r, &late, t0(), &p),
                Step::Done(Settled::Outdated { applied: 5 })
            );
        }
        assert_eq!(step(&mut r, &v5, t0(), &p), Step::Done(Settled::Applied));
        assert_eq!((r.applied_version, r.status()), (5, SaleStatus::OnSale));
    }

    #[test]
    fn a_status_already_held_is_applied_without_a_write_unless_an_attempt_may_have_landed() {
        let p = policy(8);
        let mut r = SaleRecord::new(nordic());
        let v1 = change(1, BreakerState::Open);
        step(&mut r, &v1, t0(), &p);
        finish(&mut r, &v1, 1, true, t0(), &p);
        // Off sale already: a newer open (a reopened round) needs no write.
        let v3 = change(3, BreakerState::Open);
        assert_eq!(
            step(&mut r, &v3, t0(), &p),
            Step::Done(Settled::AlreadyHeld)
        );
        assert_eq!((r.applied_version, r.status()), (3, SaleStatus::OffSale));
        // An on-sale write whose attempt failed (it may still have reached
        // the switch), then a newer open: written, not assumed.
        let v4 = change(4, BreakerState::Closed);
        assert_eq!(step(&mut r, &v4, t0(), &p), Step::Attempt { attempt: 1 });
        finish(&mut r, &v4, 1, false, t0(), &p);
        let v5 = change(5, BreakerState::Open);
        assert_eq!(step(&mut r, &v5, t0(), &p), Step::Attempt { attempt: 1 });
    }

    #[test]
    fn failed_attempts_follow_the_schedule_then_give_up_once() {
        let p = policy(3);
        let mut r = SaleRecord::new(nordic());
        let v1 = change(1, BreakerState::Open);
        assert_eq!(step(&mut r, &v1, t0(), &p), Step::Attempt { attempt: 1 });
        finish(&mut r, &v1, 1, false, t0(), &p);
        assert!(matches!(
            step(&mut r, &v1, secs(4), &p),
            Step::Wait { retry_at, why: Wait::NotDue { attempts: 1, .. } } if retry_at == secs(5)
        ));
        assert_eq!(step(&mut r, &v1, secs(5), &p), Step::Attempt { attempt: 2 });
        finish(&mut r, &v1, 2, false, secs(5), &p);
        assert!(matches!(
            step(&mut r, &v1, secs(5), &p),
            Step::Wait { retry_at, .. } if retry_at == secs(15)
        ));
        assert_eq!(
            step(&mut r, &v1, secs(15), &p),
            Step::Attempt { attempt: 3 }
        );
        finish(&mut r, &v1, 3, false, secs(15), &p);
        let Step::Fault(fault) = step(&mut r, &v1, secs(15), &p) else {
            panic!("expected the fault");
        };
        assert_eq!(
            (fault.version, fault.attempts, fault.wanted),
            (1, 3, SaleStatus::OffSale)
        );
        assert_eq!(fault.last_error, "503");
        r = r.fault_published(1).unwrap();
        assert!(r.fault_published(1).is_none());
        assert!(matches!(
            step(&mut r, &v1, secs(100), &p),
            Step::Done(Settled::GaveUp { attempts: 3, .. })
        ));
        // The operator stays as it was; a newer change starts afresh.
        assert_eq!(r.status(), SaleStatus::OnSale);
        let v2 = change(2, BreakerState::HalfOpen);
        assert_eq!(
            step(&mut r, &v2, secs(100), &p),
            Step::Attempt { attempt: 1 }
        );
    }

    #[test]
    fn a_given_up_write_starts_again_when_asked() {
        let p = policy(1);
        let mut record = SaleRecord::new(nordic());
        let v2 = change(2, BreakerState::Open);
        assert_eq!(
            step(&mut record, &v2, secs(0), &p),
            Step::Attempt { attempt: 1 }
        );
        finish(&mut record, &v2, 1, false, secs(0), &p);
        assert!(matches!(
            step(&mut record, &v2, secs(10), &p),
            Step::Fault(_)
        ));
        assert!(
            record.restart_given_up(3, secs(300)).is_none(),
            "not that version"
        );
        record = record.restart_given_up(2, secs(300)).unwrap();
        assert_eq!(
            step(&mut record, &v2, secs(300), &p),
            Step::Attempt { attempt: 1 }
        );
        finish(&mut record, &v2, 1, true, secs(300), &p);
        assert_eq!(
            (record.applied_version, record.status()),
            (2, SaleStatus::OffSale)
        );
        assert!(
            record.restart_given_up(2, secs(600)).is_none(),
            "nothing given up"
        );
    }

    #[test]
    fn a_newer_change_supersedes_a_pending_retry() {
        let p = policy(8);
        let mut r = SaleRecord::new(nordic());
        let v5 = change(5, BreakerState::Open);
        let v6 = change(6, BreakerState::HalfOpen);
        step(&mut r, &v5, t0(), &p);
        finish(&mut r, &v5, 1, false, t0(), &p);
        assert_eq!(step(&mut r, &v6, secs(1), &p), Step::Attempt { attempt: 1 });
        assert_eq!(
            step(&mut r, &v5, secs(5), &p),
            Step::Done(Settled::Superseded { by: 6 })
        );
        finish(&mut r, &v6, 1, true, secs(1), &p);
        assert_eq!(
            step(&mut r, &v5, secs(5), &p),
            Step::Done(Settled::Outdated { applied: 6 })
        );
        assert_eq!((r.status(), r.wanted_version()), (SaleStatus::OnSale, 6));
    }

    #[test]
    fn off_sale_waits_for_its_hold_and_a_recovery_meanwhile_writes_nothing() {
        let p = policy(8).with_off_sale_hold(Duration::from_secs(10));
        let mut record = SaleRecord::new(nordic());
        let v1 = change(1, BreakerState::Open);
        assert!(matches!(
            step(&mut record, &v1, secs(0), &p),
            Step::Wait { retry_at, why: Wait::NotDue { attempts: 0, .. } } if retry_at == secs(10)
        ));
        assert_eq!(
            step(&mut record, &v1, secs(10), &p),
            Step::Attempt { attempt: 1 }
        );
        finish(&mut record, &v1, 1, true, secs(10), &p);
        assert_eq!(record.status(), SaleStatus::OffSale);

        // Back on sale (no on-sale hold here), then a trip that heals
        // within the off-sale hold: nothing is written for it.
        let p = p.with_on_sale_hold(Duration::ZERO);
        let v3 = change(3, BreakerState::Closed);
        assert_eq!(
            step(&mut record, &v3, secs(20), &p),
            Step::Attempt { attempt: 1 }
        );
        finish(&mut record, &v3, 1, true, secs(20), &p);
        let v4 = change(4, BreakerState::Open);
        assert!(matches!(
            step(&mut record, &v4, secs(30), &p),
            Step::Wait { .. }
        ));
        let v6 = change(6, BreakerState::Closed);
        assert_eq!(
            step(&mut record, &v6, secs(35), &p),
            Step::Done(Settled::AlreadyHeld)
        );
        assert_eq!(record.status(), SaleStatus::OnSale);
    }

    #[test]
    fn on_sale_waits_for_the_hold_and_a_new_trip_meanwhile_writes_nothing() {
        let p = policy(8).with_on_sale_hold(Duration::from_secs(60));
        let mut record = SaleRecord::new(nordic());
        // Off sale at once.
        let v1 = change(1, BreakerState::Open);
        assert_eq!(
            step(&mut record, &v1, secs(0), &p),
            Step::Attempt { attempt: 1 }
        );
        finish(&mut record, &v1, 1, true, secs(0), &p);
        assert_eq!(record.status(), SaleStatus::OffSale);
        // Closed at 30 s: the on-sale write waits until 90 s.
        let v3 = change(3, BreakerState::Closed);
        assert!(matches!(
            step(&mut record, &v3, secs(30), &p),
            Step::Wait { retry_at, why: Wait::NotDue { attempts: 0, .. } } if retry_at == secs(90)
        ));
        // Tripped again at 50 s: replaces the held write, and the switch
        // already holds off sale, so nothing is written.
        let v4 = change(4, BreakerState::Open);
        assert_eq!(
            step(&mut record, &v4, secs(50), &p),
            Step::Done(Settled::AlreadyHeld)
        );
        // The held change comes back at 90 s: outdated.
        assert!(matches!(
            step(&mut record, &v3, secs(90), &p),
            Step::Done(Settled::Outdated { applied: 4 })
        ));
        // Closed at 100 s and for good: written at 160 s, once.
        let v6 = change(6, BreakerState::Closed);
        assert!(matches!(
            step(&mut record, &v6, secs(100), &p),
            Step::Wait { .. }
        ));
        assert!(matches!(
            step(&mut record, &v6, secs(159), &p),
            Step::Wait { .. }
        ));
        assert_eq!(
            step(&mut record, &v6, secs(160), &p),
            Step::Attempt { attempt: 1 }
        );
        finish(&mut record, &v6, 1, true, secs(160), &p);
        assert_eq!(record.status(), SaleStatus::OnSale);
        assert_eq!(record.applied_version, 6);
    }

    #[test]
    fn one_write_in_flight_per_operator() {
        let p = policy(8);
        let mut r = SaleRecord::new(nordic());
        let v5 = change(5, BreakerState::Open);
        let v6 = change(6, BreakerState::Closed);
        assert_eq!(step(&mut r, &v5, t0(), &p), Step::Attempt { attempt: 1 });
        // v6 is wanted at once but waits for v5's write to end.
        assert!(matches!(
            step(&mut r, &v6, t0(), &p),
            Step::Wait { retry_at, why: Wait::WriteInFlight { version: 5, attempt: 1 } }
                if retry_at == secs(1)
        ));
        assert_eq!(r.pending.as_ref().unwrap().version, 6);
        // v5 landed: the switch holds it, v6 is still owed.
        finish(&mut r, &v5, 1, true, t0(), &p);
        assert_eq!((r.applied_version, r.wanted_version()), (5, 6));
        assert_eq!(step(&mut r, &v6, secs(1), &p), Step::Attempt { attempt: 1 });
        finish(&mut r, &v6, 1, true, secs(1), &p);
        assert_eq!((r.applied_version, r.status()), (6, SaleStatus::OnSale));
    }

    #[test]
    fn a_lost_attempt_counts_and_the_next_one_follows_its_lease() {
        let p = policy(2);
        let mut r = SaleRecord::new(nordic());
        let v1 = change(1, BreakerState::Open);
        assert_eq!(step(&mut r, &v1, t0(), &p), Step::Attempt { attempt: 1 });
        // The listener stopped; until the lease runs out nobody writes.
        assert!(matches!(step(&mut r, &v1, secs(14), &p), Step::Wait { .. }));
        assert_eq!(
            step(&mut r, &v1, secs(15), &p),
            Step::Attempt { attempt: 2 }
        );
        assert!(
            r.pending
                .as_ref()
                .unwrap()
                .last_error
                .as_deref()
                .unwrap()
                .contains("attempt 1 did not finish")
        );
        // The last attempt is lost too: give up once its lease runs out.
        let Step::Fault(fault) = step(&mut r, &v1, secs(30), &p) else {
            panic!("expected the fault");
        };
        assert_eq!(fault.attempts, 2);
        assert!(fault.last_error.contains("attempt 2 did not finish"));
    }

    #[test]
    fn records_round_trip_through_serde() {
        let p = policy(8);
        let mut r = SaleRecord::new(nordic());
        let v1 = change(1, BreakerState::ForcedOpen);
        step(&mut r, &v1, t0(), &p);
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["pending"]["status"], "off_sale");
        assert_eq!(serde_json::from_value::<SaleRecord>(json).unwrap(), r);
    }

    #[tokio::test]
    async fn the_store_saves_only_on_the_revision_it_was_read_at() {
        let store = MemorySaleStatusStore::new();
        let mut r = SaleRecord::new(nordic());
        r.revision = 1;
        store.save(&r, None).await.unwrap();
        assert!(matches!(
            store.save(&r, None).await,
            Err(StoreError::Conflict(_))
        ));
        r.revision = 2;
        store.save(&r, Some(1)).await.unwrap();
        assert!(store.save(&r, Some(1)).await.is_err());
        assert_eq!(store.load(&nordic()).await.unwrap().unwrap().revision, 2);
        assert_eq!(store.all().len(), 1);
    }

    #[tokio::test]
    async fn the_memory_switch_fails_then_recovers() {
        let clock = Arc::new(ManualClock::new(t0()));
        let switch = MemorySaleSwitch::new(clock);
        switch.fail_next(1);
        let err = switch
            .set(&nordic(), SaleStatus::OffSale, 1)
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "sale switch answered 503 Service Unavailable"
        );
        assert_eq!(switch.status(&nordic()), SaleStatus::OnSale);
        switch.set(&nordic(), SaleStatus::OffSale, 1).await.unwrap();
        assert_eq!(switch.status(&nordic()), SaleStatus::OffSale);
        assert_eq!(switch.writes().len(), 2);
    }

    #[tokio::test]
    async fn the_memory_queue_hides_redelivers_and_deletes() {
        let clock = ManualClock::new(t0());
        let queue = MemoryQueue::new(Arc::new(clock.clone()), Duration::from_secs(30));
        let id = queue.send("hello");
        let first = queue.receive(10);
        assert_eq!(first.len(), 1);
        assert!(queue.receive(10).is_empty());
        let handle = MessageHandle {
            queue_arn: None,
            message_id: id.clone(),
            receipt_handle: first[0].receipt_handle.clone(),
        };
        queue
            .redeliver_after(&handle, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(queue.next_visible_at(), Some(secs(5)));
        clock.advance(Duration::from_secs(5));
        let second = queue.receive(10);
        assert_eq!(second[0].receive_count, 2);
        // The old receipt no longer works.
        assert!(!queue.delete(&first[0].receipt_handle));
        assert!(
            queue
                .redeliver_after(&handle, Duration::ZERO)
                .await
                .is_err()
        );
        assert!(queue.delete(&second[0].receipt_handle));
        assert!(queue.is_empty());
    }
}
