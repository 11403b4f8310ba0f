//! The state-change history: one item per breaker transition (see the
//! module docs of [`crate::breaker`]), its key and encoding, the first
//! failure of a trip, and the store's reads of it.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, TimeDelta, Utc};
use lifeboat_core::breaker::{BreakerRecord, BreakerState};
use lifeboat_core::operator::OperatorId;
use lifeboat_core::ports::{StoreError, WindowStore};
use lifeboat_core::window::Bucket;
use serde::{Deserialize, Serialize};

use super::DynamoBreakerStore;
use super::item::s;
use crate::item::ItemError;
use crate::window::DynamoWindowStore;

/// The sort-key prefix of state-change items.
pub const CHANGE_PREFIX: &str = "change#";

/// How long a state-change item is kept before the table's TTL removes it.
pub const CHANGE_TTL: TimeDelta = TimeDelta::days(90);

/// How far before a trip the failure window's buckets are read for the first
/// failure. Covers the failure window (10 s by default) and the errors
/// alarm's detection (roughly 25-40 s) with room to spare.
pub const FIRST_FAILURE_LOOKBACK: TimeDelta = TimeDelta::minutes(2);

/// A stretch without any counted call longer than this ends the failing run
/// [`first_failure`] walks back through.
pub const FIRST_FAILURE_MAX_GAP: TimeDelta = TimeDelta::seconds(15);

/// The sort key of the state-change item of `version`: zero-padded, so
/// sort-key order is version order.
pub fn change_key(version: u64) -> String {
    format!("{CHANGE_PREFIX}{version:020}")
}

/// One recorded breaker transition, as `lifeboat detection` reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BreakerChange {
    pub operator: OperatorId,
    /// The version the transition produced.
    pub version: u64,
    /// The state it left (`None` only for a record saved without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<BreakerState>,
    pub to: BreakerState,
    /// When it entered `to` (the record's `since`).
    pub at: DateTime<Utc>,
    /// Why, as the breaker records it ("alarm … in ALARM", "5 consecutive
    /// timeouts", "force-open: …").
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_until: Option<DateTime<Utc>>,
    /// Trips from closed only: the start of the first bucket of the failing
    /// run the failure window saw before the trip ([`first_failure`]), when
    /// that could be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_failure_at: Option<DateTime<Utc>>,
}

impl BreakerChange {
    /// The change that produced `record`.
    pub fn of(record: &BreakerRecord, first_failure_at: Option<DateTime<Utc>>) -> Self {
        Self {
            operator: record.operator.clone(),
            version: record.version,
            from: record.previous,
            to: record.state,
            at: record.since,
            reason: record.reason.clone(),
            open_until: record.open_until,
            first_failure_at,
        }
    }

    /// A trip from closed to open: the failure window's or an alarm's. The
    /// only change a first failure is looked up for.
    pub fn is_trip(&self) -> bool {
        is_trip(self.from, self.to)
    }
}

pub(super) fn is_trip(from: Option<BreakerState>, to: BreakerState) -> bool {
    from == Some(BreakerState::Closed) && to == BreakerState::Open
}

/// When the failing run that led to a trip at `at` began: the start of its
/// oldest bucket.
///
/// Walks back from the newest bucket that starts at or before `at` (and not
/// before `at - FIRST_FAILURE_LOOKBACK`): success-only buckets before the
/// first failing one are skipped; after it the run goes on through buckets
/// with failures or timeouts and through buckets with neither (neutral
/// calls), and ends at a bucket with successes and no failure, or at a gap of
/// more than [`FIRST_FAILURE_MAX_GAP`] between failing buckets. `None`: no
/// failing bucket (a trip on slow calls, or the buckets have expired).
///
/// Buckets are counted when a batch ends, so this is when the first failed
/// call was counted (a timeout one budget after the call began), to within
/// one bucket (1 s by default).
pub fn first_failure(buckets: &[Bucket], at: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let oldest = at - FIRST_FAILURE_LOOKBACK;
    let mut recent: Vec<&Bucket> = buckets
        .iter()
        .filter(|b| b.start <= at && b.start >= oldest)
        .collect();
    recent.sort_by_key(|b| std::cmp::Reverse(b.start));
    let mut earliest: Option<DateTime<Utc>> = None;
    for bucket in recent {
        let failed = bucket.counts.failures > 0 || bucket.counts.timeouts > 0;
        match (failed, earliest) {
            (true, Some(newer)) if newer - bucket.start > FIRST_FAILURE_MAX_GAP => break,
            (true, _) => earliest = Some(bucket.start),
            (false, Some(_)) if bucket.counts.successes > 0 => break,
            (false, _) => {}
        }
    }
    earliest
}

/// The state-change item, as written and read.
#[derive(Serialize, Deserialize)]
pub(super) struct ChangeItem {
    operator: String,
    item: String,
    version: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    from: Option<BreakerState>,
    to: BreakerState,
    at: DateTime<Utc>,
    reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    open_until: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    first_failure_at: Option<DateTime<Utc>>,
    /// The table's TTL: `at` + [`CHANGE_TTL`], epoch seconds.
    expires_at: i64,
}

impl From<&BreakerChange> for ChangeItem {
    fn from(c: &BreakerChange) -> Self {
        Self {
            operator: c.operator.as_str().to_owned(),
            item: change_key(c.version),
            version: c.version,
            from: c.from,
            to: c.to,
            at: c.at,
            reason: c.reason.clone(),
            open_until: c.open_until,
            first_failure_at: c.first_failure_at,
            expires_at: (c.at + CHANGE_TTL).timestamp(),
        }
    }
}

impl TryFrom<ChangeItem> for BreakerChange {
    type Error = ItemError;

    fn try_from(i: ChangeItem) -> Result<Self, ItemError> {
        if i.item != change_key(i.version) {
            return Err(ItemError::Invalid {
                field: "item",
                reason: format!(
                    "{:?} is not the change key of version {}",
                    i.item, i.version
                ),
            });
        }
        let operator = OperatorId::new(i.operator).map_err(|e| ItemError::Invalid {
            field: "operator",
            reason: e.to_string(),
        })?;
        Ok(BreakerChange {
            operator,
            version: i.version,
            from: i.from,
            to: i.to,
            at: i.at,
            reason: i.reason,
            open_until: i.open_until,
            first_failure_at: i.first_failure_at,
        })
    }
}

/// A Breaker-table item at `item = "change#…"` read as the transition it
/// records (the store's `changes`).
pub fn change_from_item(
    item: HashMap<String, AttributeValue>,
) -> Result<BreakerChange, StoreError> {
    let key = match item.get("item") {
        Some(AttributeValue::S(key)) => key.clone(),
        _ => "(no item key)".to_owned(),
    };
    let raw: ChangeItem = serde_dynamo::from_item(item)
        .map_err(|e| StoreError::Corrupt(format!("state change {key}: {}", ItemError::from(e))))?;
    BreakerChange::try_from(raw)
        .map_err(|e| StoreError::Corrupt(format!("state change {key}: {e}")))
}

/// The item a transition's save writes for `change`, its TTL included;
/// [`change_from_item`] reads it back as the same change.
pub fn change_to_item(
    change: &BreakerChange,
) -> Result<HashMap<String, AttributeValue>, StoreError> {
    serde_dynamo::to_item(ChangeItem::from(change)).map_err(|e| {
        StoreError::Corrupt(format!(
            "state change {} of {}: {e}",
            change.version, change.operator
        ))
    })
}

impl DynamoBreakerStore {
    /// [`first_failure`] from the failure window's buckets before `at`. A
    /// failed read is logged, counted (when the store counts failures) and
    /// gives `None`: the transition must not wait on it.
    pub(super) async fn first_failure_before(
        &self,
        operator: &OperatorId,
        at: DateTime<Utc>,
    ) -> Option<DateTime<Utc>> {
        let window = DynamoWindowStore::new(self.client.clone(), &self.table);
        match window.since(operator, at - FIRST_FAILURE_LOOKBACK).await {
            Ok(buckets) => first_failure(&buckets, at),
            Err(e) => {
                tracing::warn!(operator = %operator, error = %e, "failure window not read: the state change is recorded without its first failure");
                if let Some(failures) = &self.failures {
                    failures.count("window.read", 1);
                }
                None
            }
        }
    }

    /// Every recorded state change, oldest first: of `operator` (a `Query`
    /// on its partition) or of every operator (a `Scan` of the table filtered
    /// on the `change#` prefix, which reads the breakers and buckets too:
    /// fine for an operator's command, not for a function's hot path).
    pub async fn changes(
        &self,
        operator: Option<&OperatorId>,
    ) -> Result<Vec<BreakerChange>, StoreError> {
        let mut changes = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let (items, last) = match operator {
                Some(operator) => {
                    let output = self
                        .client
                        .query()
                        .table_name(&self.table)
                        .consistent_read(true)
                        .key_condition_expression("#op = :op AND begins_with(#item, :prefix)")
                        .expression_attribute_names("#op", "operator")
                        .expression_attribute_names("#item", "item")
                        .expression_attribute_values(":op", s(operator.as_str()))
                        .expression_attribute_values(":prefix", s(CHANGE_PREFIX))
                        .set_exclusive_start_key(start.take())
                        .send()
                        .await
                        .map_err(|e| self.unavailable("Query", &e))?;
                    (output.items, output.last_evaluated_key)
                }
                None => {
                    let output = self
                        .client
                        .scan()
                        .table_name(&self.table)
                        .consistent_read(true)
                        .filter_expression("begins_with(#item, :prefix)")
                        .expression_attribute_names("#item", "item")
                        .expression_attribute_values(":prefix", s(CHANGE_PREFIX))
                        .set_exclusive_start_key(start.take())
                        .send()
                        .await
                        .map_err(|e| self.unavailable("Scan", &e))?;
                    (output.items, output.last_evaluated_key)
                }
            };
            for item in items.unwrap_or_default() {
                changes.push(change_from_item(item)?);
            }
            match last {
                Some(key) if !key.is_empty() => start = Some(key),
                _ => break,
            }
        }
        changes.sort_by(|a, b| (a.at, &a.operator, a.version).cmp(&(b.at, &b.operator, b.version)));
        Ok(changes)
    }
}
