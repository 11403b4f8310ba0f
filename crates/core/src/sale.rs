//! The sale status of each operator: the off-sale listener's record and its
//! rules, each a pure function of the stored record; the ports in
//! [`crate::ports`], their in-memory adapters in [`crate::memory`]. The
//! record, the conditional writes and the sale switch: docs/offsale.md.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use crate::breaker::BreakerState;
use crate::events::{BreakerStateChanged, SCHEMA_VERSION, SaleStatus, SaleSwitchWriteFailed};
use crate::operator::OperatorId;
use crate::retry::RetrySchedule;

mod adapters;
#[cfg(test)]
mod tests;

pub use adapters::{QueueTimeoutRedelivery, StatusTableSwitch};

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

/// When a write of `status` first wanted at `now` may be made.
fn hold_end(status: SaleStatus, now: DateTime<Utc>, policy: &WritePolicy) -> DateTime<Utc> {
    match status {
        SaleStatus::OnSale => after(now, policy.on_sale_hold),
        SaleStatus::OffSale => after(now, policy.off_sale_hold),
    }
}

pub(crate) fn after(at: DateTime<Utc>, gap: Duration) -> DateTime<Utc> {
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
    /// An attempt of a version that was then replaced may have reached the
    /// switch without the listener hearing of it (a timeout, a crash, a
    /// save that failed after the write): what the switch holds is unknown
    /// until the next write it confirms, so no version is taken as already
    /// held meanwhile.
    #[serde(default)]
    pub switch_unknown: bool,
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
            switch_unknown: false,
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
            // An older version wanting the same status: this one takes its
            // place but keeps its hold, so a breaker that moves on faster
            // than the hold (open, half-open, open again) is still written
            // when the first hold ends.
            Some(p) if p.status == change.status && p.gave_up_at.is_none() => PendingWrite {
                version: change.version,
                status: change.status,
                attempts: 0,
                next_attempt_at: p.next_attempt_at.min(hold_end(change.status, now, policy)),
                last_error: None,
                since: p.since,
                gave_up_at: None,
                fault_published: false,
            },
            // Nothing pending, or an older version: this one replaces it.
            _ => PendingWrite {
                version: change.version,
                status: change.status,
                attempts: 0,
                next_attempt_at: hold_end(change.status, now, policy),
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
        // Remembered on the record: the version replacing this one starts
        // its attempts from 0, and a later change must still know.
        let unconfirmed_attempt = self.switch_unknown
            || self
                .pending
                .as_ref()
                .is_some_and(|p| p.version != pending.version && p.attempts > 0);
        next.switch_unknown = unconfirmed_attempt;
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
                    next.switch_unknown = false;
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
