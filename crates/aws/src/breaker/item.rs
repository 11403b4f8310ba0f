//! The breaker item: the [`BreakerRecord`] as the Breaker table stores it
//! (every field an attribute, the counters required), and the attribute
//! values the store's expressions are built from.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use lifeboat_core::breaker::{BreakerRecord, BreakerState};
use lifeboat_core::operator::OperatorId;
use lifeboat_core::ports::StoreError;
use serde::{Deserialize, Serialize};

use crate::item::ItemError;

/// The sort key of the breaker record.
pub const BREAKER_ITEM: &str = "breaker";

/// The sort key of the question the operator last answered.
pub const ANSWERED_ITEM: &str = "answered";

/// The breaker item, as written and read. Every counter is required on read:
/// `save` writes them all, and an item without one is corrupt, not zero.
#[derive(Serialize, Deserialize)]
pub(super) struct BreakerItem {
    operator: String,
    item: String,
    state: BreakerState,
    version: u64,
    since: DateTime<Utc>,
    reason: String,
    /// Absent for a breaker that never moved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    previous: Option<BreakerState>,
    /// Absent unless open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    open_until: Option<DateTime<Utc>>,
    failed_trials: u32,
    trials_claimed: u32,
    trial_successes: u32,
    trial_failures: u32,
    /// Absent on items written before timed-out trials were told apart.
    #[serde(default)]
    trial_timeouts: u32,
    announced_version: u64,
    /// Absent on items written before lanes were marked: not confirmed.
    #[serde(default)]
    routed_version: u64,
    /// Absent on items written before: not opened for slowness.
    #[serde(default)]
    opened_slow: bool,
    /// Epoch milliseconds (a number, so the probe claim's condition can
    /// compare it); absent unless an open period was probed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    probed_at_ms: Option<i64>,
}

impl From<&BreakerRecord> for BreakerItem {
    fn from(r: &BreakerRecord) -> Self {
        Self {
            operator: r.operator.as_str().to_owned(),
            item: BREAKER_ITEM.to_owned(),
            state: r.state,
            version: r.version,
            since: r.since,
            reason: r.reason.clone(),
            previous: r.previous,
            open_until: r.open_until,
            failed_trials: r.failed_trials,
            trials_claimed: r.trials_claimed,
            trial_successes: r.trial_successes,
            trial_failures: r.trial_failures,
            trial_timeouts: r.trial_timeouts,
            announced_version: r.announced_version,
            routed_version: r.routed_version,
            opened_slow: r.opened_slow,
            probed_at_ms: r.probed_at.map(|t| t.timestamp_millis()),
        }
    }
}

impl TryFrom<BreakerItem> for BreakerRecord {
    type Error = ItemError;

    fn try_from(i: BreakerItem) -> Result<Self, ItemError> {
        if i.item != BREAKER_ITEM {
            return Err(ItemError::Invalid {
                field: "item",
                reason: format!("{:?} is not the breaker record", i.item),
            });
        }
        let operator = OperatorId::new(i.operator).map_err(|e| ItemError::Invalid {
            field: "operator",
            reason: e.to_string(),
        })?;
        Ok(BreakerRecord {
            operator,
            state: i.state,
            version: i.version,
            since: i.since,
            reason: i.reason,
            previous: i.previous,
            open_until: i.open_until,
            failed_trials: i.failed_trials,
            trials_claimed: i.trials_claimed,
            trial_successes: i.trial_successes,
            trial_failures: i.trial_failures,
            trial_timeouts: i.trial_timeouts,
            announced_version: i.announced_version,
            routed_version: i.routed_version,
            opened_slow: i.opened_slow,
            probed_at: i.probed_at_ms.and_then(DateTime::from_timestamp_millis),
        })
    }
}

/// The counts an `ADD` to a trial counter returns (ALL_NEW).
#[derive(Deserialize)]
pub(super) struct TallyItem {
    pub(super) trial_successes: u32,
    pub(super) trial_failures: u32,
    #[serde(default)]
    pub(super) trial_timeouts: u32,
}

/// A Breaker-table item at `item = "breaker"` read as the operator's
/// breaker record (the store's `load`, `load_many` and `list`).
pub fn breaker_from_item(
    item: HashMap<String, AttributeValue>,
) -> Result<BreakerRecord, StoreError> {
    let raw: BreakerItem = serde_dynamo::from_item(item)
        .map_err(|e| StoreError::Corrupt(format!("breaker item: {}", ItemError::from(e))))?;
    BreakerRecord::try_from(raw).map_err(|e| StoreError::Corrupt(format!("breaker item: {e}")))
}

/// The item `save` writes for `record`; [`breaker_from_item`] reads it back
/// as the same record.
pub fn breaker_to_item(
    record: &BreakerRecord,
) -> Result<HashMap<String, AttributeValue>, StoreError> {
    serde_dynamo::to_item(BreakerItem::from(record))
        .map_err(|e| StoreError::Corrupt(format!("breaker of {}: {e}", record.operator)))
}

pub(super) fn n(value: impl ToString) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

pub(super) fn s(value: impl Into<String>) -> AttributeValue {
    AttributeValue::S(value.into())
}
