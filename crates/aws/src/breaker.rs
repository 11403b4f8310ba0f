//! The Breaker table on DynamoDB: one breaker record per operator, and one
//! state-change item per transition.
//!
//! Partition key `operator` (S), sort key `item` (S). The breaker lives at
//! `item = "breaker"` with every [`BreakerRecord`] field as an attribute
//! (`version`, the counters and `announced_version` as N, times as RFC 3339 S).
//! The failure window's buckets share the table under other sort keys (see
//! [`crate::window`]).
//!
//! Every write is one conditional DynamoDB call. In particular a half-open
//! trial slot is claimed by a single `UpdateItem` whose condition checks state,
//! version and the number of slots already claimed: DynamoDB evaluates the
//! condition and applies the `ADD` atomically, so however many Lambda
//! instances race, at most `limit` claims succeed per round.
//!
//! # State-change history
//!
//! Each transition (every save of a version above 0) also writes a
//! [`BreakerChange`] at `item = "change#" + <version, zero-padded to 20
//! digits>` in the operator's partition: from, to, when, why, the open
//! period, and for a trip from closed the start of the failing run in the
//! failure window ([`first_failure`]). `expires_at` (the table's TTL) removes
//! it after [`CHANGE_TTL`]. `lifeboat detection` reads these items
//! ([`DynamoBreakerStore::changes`]) to time each incident without relying on
//! events or logs that may be gone.
//!
//! Why here and why this way:
//!
//! * The breaker and its change item are written by one `TransactWriteItems`
//!   (two `Put`s, the breaker's conditional on the version as before). The
//!   history then holds exactly the transitions that happened: a lost race
//!   writes neither, and a retried call cannot write a second item because
//!   the version condition refuses it (and the key is the version, so it
//!   could only overwrite itself). The SDK's idempotency token makes a retry
//!   after a lost answer succeed rather than conflict. Both `Put`s need only
//!   `dynamodb:PutItem`, which the circuit switch already holds.
//! * Cost on the hot path: transitions are rare (a handful per incident) and
//!   only the circuit switch saves breakers. A transaction costs 2 write
//!   units per item (4 in all instead of 1) and a few milliseconds more than a
//!   `PutItem`. A trip from closed also reads the failure window's buckets of
//!   the last [`FIRST_FAILURE_LOOKBACK`] first (one `Query` on the same
//!   partition, about one item per second of traffic); if that read fails the
//!   change is written without the first failure, never held up.
//! * No new table, index or permission: same partition, same TTL attribute,
//!   and the buckets and the breaker never see the change items (their keys
//!   and `list`'s filter keep them apart).
//! * A transaction on the breaker item can make a consumer's concurrent
//!   `claim_trial` / `record_trial` fail with `TransactionConflict` for those
//!   few milliseconds; the consumer already treats a failed claim as no slot
//!   and a failed count as not counted, and at that moment the breaker is
//!   moving to a version where neither would count anyway.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeValue, KeysAndAttributes, Put, ReturnValue, TransactWriteItem,
};
use chrono::{DateTime, TimeDelta, Utc};
use lifeboat_core::breaker::{BreakerRecord, BreakerState};
use lifeboat_core::operator::OperatorId;
use lifeboat_core::ports::{BreakerStore, StoreError, TrialTally, WindowStore};
use lifeboat_core::window::Bucket;
use serde::{Deserialize, Serialize};

use crate::error::describe;
use crate::item::ItemError;
use crate::window::DynamoWindowStore;

/// The sort key of the breaker record.
pub const BREAKER_ITEM: &str = "breaker";

/// The sort-key prefix of state-change items.
pub const CHANGE_PREFIX: &str = "change#";

/// How long a state-change item is kept before the table's TTL removes it.
pub const CHANGE_TTL: TimeDelta = TimeDelta::days(90);

/// Keys per BatchGetItem call: DynamoDB's limit.
const BATCH_GET_KEYS: usize = 100;
/// Calls per chunk of keys before unprocessed keys are an error.
const BATCH_GET_ATTEMPTS: u32 = 5;
/// Pause before asking again for unprocessed keys, times the attempt.
const BATCH_GET_BACKOFF: std::time::Duration = std::time::Duration::from_millis(50);

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

fn is_trip(from: Option<BreakerState>, to: BreakerState) -> bool {
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
struct ChangeItem {
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

fn change_from_item(item: HashMap<String, AttributeValue>) -> Result<BreakerChange, StoreError> {
    let key = match item.get("item") {
        Some(AttributeValue::S(key)) => key.clone(),
        _ => "(no item key)".to_owned(),
    };
    let raw: ChangeItem = serde_dynamo::from_item(item)
        .map_err(|e| StoreError::Corrupt(format!("state change {key}: {}", ItemError::from(e))))?;
    BreakerChange::try_from(raw)
        .map_err(|e| StoreError::Corrupt(format!("state change {key}: {e}")))
}

/// The breaker item, as written and read. Every counter is required on read:
/// `save` writes them all, and an item without one is corrupt, not zero.
#[derive(Serialize, Deserialize)]
struct BreakerItem {
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
    announced_version: u64,
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
            announced_version: r.announced_version,
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
            announced_version: i.announced_version,
            probed_at: i.probed_at_ms.and_then(DateTime::from_timestamp_millis),
        })
    }
}

/// The counts an `ADD` to a trial counter returns (ALL_NEW).
#[derive(Deserialize)]
struct TallyItem {
    trial_successes: u32,
    trial_failures: u32,
}

fn breaker_from_item(item: HashMap<String, AttributeValue>) -> Result<BreakerRecord, StoreError> {
    let raw: BreakerItem = serde_dynamo::from_item(item)
        .map_err(|e| StoreError::Corrupt(format!("breaker item: {}", ItemError::from(e))))?;
    BreakerRecord::try_from(raw).map_err(|e| StoreError::Corrupt(format!("breaker item: {e}")))
}

fn n(value: impl ToString) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

fn s(value: impl Into<String>) -> AttributeValue {
    AttributeValue::S(value.into())
}

/// [`BreakerStore`] on the Breaker table.
#[derive(Debug, Clone)]
pub struct DynamoBreakerStore {
    client: aws_sdk_dynamodb::Client,
    table: String,
}

impl DynamoBreakerStore {
    pub fn new(client: aws_sdk_dynamodb::Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    fn key(operator: &OperatorId) -> HashMap<String, AttributeValue> {
        HashMap::from([
            ("operator".to_owned(), s(operator.as_str())),
            ("item".to_owned(), s(BREAKER_ITEM)),
        ])
    }

    fn unavailable<E, R>(&self, op: &str, e: &aws_sdk_dynamodb::error::SdkError<E, R>) -> StoreError
    where
        E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug,
    {
        StoreError::Unavailable(describe(&format!("{op} {}", self.table), e))
    }

    /// A conditional claim's answer: made, lost to its condition, or failed.
    fn claimed<O, R: std::fmt::Debug>(
        &self,
        result: Result<O, aws_sdk_dynamodb::error::SdkError<UpdateItemError, R>>,
    ) -> Result<bool, StoreError> {
        match result {
            Ok(_) => Ok(true),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
            {
                Ok(false)
            }
            Err(e) => Err(self.unavailable("UpdateItem", &e)),
        }
    }

    fn not_at(&self, record: &BreakerRecord, expected_version: Option<u64>) -> StoreError {
        StoreError::Conflict(format!(
            "breaker {} is not at version {expected_version:?}",
            record.operator
        ))
    }

    /// [`first_failure`] from the failure window's buckets before `at`. A
    /// failed read is logged and gives `None`: the transition must not wait
    /// on it.
    async fn first_failure_before(
        &self,
        operator: &OperatorId,
        at: DateTime<Utc>,
    ) -> Option<DateTime<Utc>> {
        let window = DynamoWindowStore::new(self.client.clone(), &self.table);
        match window.since(operator, at - FIRST_FAILURE_LOOKBACK).await {
            Ok(buckets) => first_failure(&buckets, at),
            Err(e) => {
                tracing::warn!(operator = %operator, error = %e, "failure window not read: the state change is recorded without its first failure");
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

/// Whether a cancelled transaction lost to another writer: the breaker's
/// version condition failed, or another write to the item was in progress.
fn lost_race(cancelled: &aws_sdk_dynamodb::types::error::TransactionCanceledException) -> bool {
    const LOST: [&str; 2] = ["ConditionalCheckFailed", "TransactionConflict"];
    let reasons = cancelled.cancellation_reasons();
    if reasons.is_empty() {
        // Without reasons, the message still lists them.
        return cancelled
            .message()
            .is_some_and(|m| LOST.iter().any(|code| m.contains(code)));
    }
    reasons
        .iter()
        .filter_map(|r| r.code())
        .any(|code| LOST.contains(&code))
}

#[async_trait]
impl BreakerStore for DynamoBreakerStore {
    async fn load(&self, operator: &OperatorId) -> Result<Option<BreakerRecord>, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(operator)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.unavailable("GetItem", &e))?;
        output.item.map(breaker_from_item).transpose()
    }

    async fn load_many(&self, operators: &[OperatorId]) -> Result<Vec<BreakerRecord>, StoreError> {
        // BatchGetItem by key: the buckets and change items beside the
        // breakers are never read, however many there are. DynamoDB takes up
        // to 100 keys per call, refuses a repeated key, and may hand back
        // keys it did not get to (UnprocessedKeys): those are asked again.
        let mut unique: Vec<&OperatorId> = operators.iter().collect();
        unique.sort();
        unique.dedup();
        let mut records = Vec::with_capacity(unique.len());
        for chunk in unique.chunks(BATCH_GET_KEYS) {
            let mut keys: Vec<HashMap<String, AttributeValue>> =
                chunk.iter().map(|o| Self::key(o)).collect();
            let mut attempt = 0;
            while !keys.is_empty() {
                attempt += 1;
                if attempt > BATCH_GET_ATTEMPTS {
                    return Err(StoreError::Unavailable(format!(
                        "BatchGetItem {}: {} breakers still unprocessed after {BATCH_GET_ATTEMPTS} attempts",
                        self.table,
                        keys.len()
                    )));
                }
                if attempt > 1 {
                    tokio::time::sleep(BATCH_GET_BACKOFF * (attempt - 1)).await;
                }
                let request = KeysAndAttributes::builder()
                    .set_keys(Some(std::mem::take(&mut keys)))
                    .consistent_read(true)
                    .build()
                    .map_err(|e| {
                        StoreError::Corrupt(format!(
                            "breaker read of {} not built: {e}",
                            self.table
                        ))
                    })?;
                let output = self
                    .client
                    .batch_get_item()
                    .request_items(&self.table, request)
                    .send()
                    .await
                    .map_err(|e| self.unavailable("BatchGetItem", &e))?;
                let mut responses = output.responses.unwrap_or_default();
                for item in responses.remove(&self.table).unwrap_or_default() {
                    records.push(breaker_from_item(item)?);
                }
                keys = output
                    .unprocessed_keys
                    .unwrap_or_default()
                    .remove(&self.table)
                    .map(|k| k.keys)
                    .unwrap_or_default();
            }
        }
        records.sort_by(|a, b| a.operator.cmp(&b.operator));
        Ok(records)
    }

    async fn list(&self) -> Result<Vec<BreakerRecord>, StoreError> {
        // A scan that passes every bucket and change item of the table: for
        // `lifeboat status` without --operator, never on a function's path.
        let mut records = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let output = self
                .client
                .scan()
                .table_name(&self.table)
                .filter_expression("#item = :breaker")
                .expression_attribute_names("#item", "item")
                .expression_attribute_values(":breaker", s(BREAKER_ITEM))
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| self.unavailable("Scan", &e))?;
            for item in output.items.unwrap_or_default() {
                records.push(breaker_from_item(item)?);
            }
            match output.last_evaluated_key {
                Some(key) if !key.is_empty() => start = Some(key),
                _ => break,
            }
        }
        records.sort_by(|a, b| a.operator.cmp(&b.operator));
        Ok(records)
    }

    async fn save(
        &self,
        record: &BreakerRecord,
        expected_version: Option<u64>,
    ) -> Result<(), StoreError> {
        let item: HashMap<String, AttributeValue> =
            serde_dynamo::to_item(BreakerItem::from(record))
                .map_err(|e| StoreError::Corrupt(format!("breaker of {}: {e}", record.operator)))?;
        let (condition, version_value) = match expected_version {
            None => ("attribute_not_exists(#op)", None),
            Some(v) => ("attribute_exists(#op) AND #version = :expected", Some(n(v))),
        };
        if record.version == 0 {
            // A breaker that never moved: nothing to record in the history.
            let request = self
                .client
                .put_item()
                .table_name(&self.table)
                .set_item(Some(item))
                .condition_expression(condition)
                .expression_attribute_names("#op", "operator");
            let request = match version_value {
                None => request,
                Some(v) => request
                    .expression_attribute_names("#version", "version")
                    .expression_attribute_values(":expected", v),
            };
            return match request.send().await {
                Ok(_) => Ok(()),
                Err(e)
                    if e.as_service_error()
                        .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
                {
                    Err(self.not_at(record, expected_version))
                }
                Err(e) => Err(self.unavailable("PutItem", &e)),
            };
        }

        let first_failure_at = if is_trip(record.previous, record.state) {
            self.first_failure_before(&record.operator, record.since)
                .await
        } else {
            None
        };
        let change = BreakerChange::of(record, first_failure_at);
        let change_item: HashMap<String, AttributeValue> =
            serde_dynamo::to_item(ChangeItem::from(&change)).map_err(|e| {
                StoreError::Corrupt(format!(
                    "state change {} of {}: {e}",
                    change.version, record.operator
                ))
            })?;
        let not_built = |e: aws_sdk_dynamodb::error::BuildError| {
            StoreError::Corrupt(format!(
                "breaker write of {} not built: {e}",
                record.operator
            ))
        };
        let breaker_put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(condition)
            .expression_attribute_names("#op", "operator");
        let breaker_put = match version_value {
            None => breaker_put,
            Some(v) => breaker_put
                .expression_attribute_names("#version", "version")
                .expression_attribute_values(":expected", v),
        };
        // The change item's key is its version, and the breaker's condition
        // admits one write per version: no condition needed on it. (A breaker
        // deleted by hand restarts at version 0; its new changes then replace
        // the old ones of the same versions instead of blocking the switch.)
        let change_put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(change_item));
        let result = self
            .client
            .transact_write_items()
            .transact_items(
                TransactWriteItem::builder()
                    .put(breaker_put.build().map_err(not_built)?)
                    .build(),
            )
            .transact_items(
                TransactWriteItem::builder()
                    .put(change_put.build().map_err(not_built)?)
                    .build(),
            )
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) => match e.as_service_error() {
                Some(TransactWriteItemsError::TransactionCanceledException(cancelled))
                    if lost_race(cancelled) =>
                {
                    Err(self.not_at(record, expected_version))
                }
                _ => Err(self.unavailable("TransactWriteItems", &e)),
            },
        }
    }

    async fn claim_trial(
        &self,
        operator: &OperatorId,
        version: u64,
        limit: u32,
    ) -> Result<bool, StoreError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(operator)))
            .update_expression("ADD #claimed :one")
            .condition_expression("#state = :half_open AND #version = :v AND #claimed < :limit")
            .expression_attribute_names("#claimed", "trials_claimed")
            .expression_attribute_names("#state", "state")
            .expression_attribute_names("#version", "version")
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":half_open", s(BreakerState::HalfOpen.as_str()))
            .expression_attribute_values(":v", n(version))
            .expression_attribute_values(":limit", n(limit))
            .send()
            .await;
        self.claimed(result)
    }

    async fn claim_probe(
        &self,
        operator: &OperatorId,
        version: u64,
        at: DateTime<Utc>,
        last_before: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(operator)))
            .update_expression("SET #probed = :at")
            .condition_expression(
                "#state = :open AND #version = :v AND (attribute_not_exists(#probed) OR #probed <= :before)",
            )
            .expression_attribute_names("#probed", "probed_at_ms")
            .expression_attribute_names("#state", "state")
            .expression_attribute_names("#version", "version")
            .expression_attribute_values(":at", n(at.timestamp_millis()))
            .expression_attribute_values(":open", s(BreakerState::Open.as_str()))
            .expression_attribute_values(":v", n(version))
            .expression_attribute_values(":before", n(last_before.timestamp_millis()))
            .send()
            .await;
        self.claimed(result)
    }

    async fn record_trial(
        &self,
        operator: &OperatorId,
        version: u64,
        success: bool,
    ) -> Result<Option<TrialTally>, StoreError> {
        let counter = if success {
            "trial_successes"
        } else {
            "trial_failures"
        };
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(operator)))
            .update_expression("ADD #counter :one")
            .condition_expression("#state = :half_open AND #version = :v")
            .expression_attribute_names("#counter", counter)
            .expression_attribute_names("#state", "state")
            .expression_attribute_names("#version", "version")
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":half_open", s(BreakerState::HalfOpen.as_str()))
            .expression_attribute_values(":v", n(version))
            .return_values(ReturnValue::AllNew)
            .send()
            .await;
        match result {
            Ok(output) => {
                let tally: TallyItem = serde_dynamo::from_item(
                    output.attributes.unwrap_or_default(),
                )
                .map_err(|e| StoreError::Corrupt(format!("trial counts of {operator}: {e}")))?;
                Ok(Some(TrialTally {
                    successes: tally.trial_successes,
                    failures: tally.trial_failures,
                }))
            }
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
            {
                Ok(None)
            }
            Err(e) => Err(self.unavailable("UpdateItem", &e)),
        }
    }

    async fn mark_announced(&self, operator: &OperatorId, version: u64) -> Result<(), StoreError> {
        // Never lowers announced_version, like the in-memory store's max().
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(operator)))
            .update_expression("SET #announced = :v")
            .condition_expression(
                "#version = :v AND (attribute_not_exists(#announced) OR #announced < :v)",
            )
            .expression_attribute_names("#announced", "announced_version")
            .expression_attribute_names("#version", "version")
            .expression_attribute_values(":v", n(version))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
            {
                Ok(())
            }
            Err(e) => Err(self.unavailable("UpdateItem", &e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> BreakerRecord {
        let mut r = BreakerRecord::initial(
            OperatorId::new("nordic").unwrap(),
            DateTime::from_timestamp(1_700_000_000, 0).unwrap(),
        );
        r.state = BreakerState::Open;
        r.previous = Some(BreakerState::HalfOpen);
        r.version = 4;
        r.open_until = DateTime::from_timestamp(1_700_000_030, 0);
        r.failed_trials = 1;
        r.announced_version = 3;
        r
    }

    #[test]
    fn breaker_items_round_trip() {
        let item: HashMap<String, AttributeValue> =
            serde_dynamo::to_item(BreakerItem::from(&record())).unwrap();
        assert_eq!(item.get("item"), Some(&s("breaker")));
        assert_eq!(item.get("state"), Some(&s("open")));
        assert_eq!(item.get("version"), Some(&n(4)));
        assert_eq!(breaker_from_item(item).unwrap(), record());

        let mut closed = record();
        closed.open_until = None;
        closed.previous = None;
        let item: HashMap<String, AttributeValue> =
            serde_dynamo::to_item(BreakerItem::from(&closed)).unwrap();
        assert!(!item.contains_key("open_until"));
        assert_eq!(breaker_from_item(item).unwrap(), closed);
    }

    #[test]
    fn missing_counters_are_corrupt_not_zero() {
        let mut item: HashMap<String, AttributeValue> =
            serde_dynamo::to_item(BreakerItem::from(&record())).unwrap();
        item.remove("trials_claimed");
        assert!(
            matches!(breaker_from_item(item), Err(StoreError::Corrupt(m)) if m.contains("trials_claimed"))
        );

        let mut item: HashMap<String, AttributeValue> =
            serde_dynamo::to_item(BreakerItem::from(&record())).unwrap();
        item.insert("state".into(), s("ajar"));
        assert!(matches!(
            breaker_from_item(item),
            Err(StoreError::Corrupt(_))
        ));
    }

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + secs, 0).unwrap()
    }

    fn bucket(secs: i64, successes: u32, failures: u32, timeouts: u32) -> Bucket {
        Bucket {
            start: at(secs),
            counts: lifeboat_core::window::CallCounts {
                calls: successes + failures + timeouts,
                successes,
                failures,
                timeouts,
                slow: 0,
            },
        }
    }

    #[test]
    fn change_items_round_trip_under_their_version_key() {
        let change = BreakerChange::of(&record(), Some(at(-6)));
        let item: HashMap<String, AttributeValue> =
            serde_dynamo::to_item(ChangeItem::from(&change)).unwrap();
        assert_eq!(item.get("item"), Some(&s("change#00000000000000000004")));
        assert_eq!(item.get("from"), Some(&s("half_open")));
        assert_eq!(item.get("to"), Some(&s("open")));
        assert_eq!(
            item.get("expires_at"),
            Some(&n(1_700_000_000 + 90 * 86_400))
        );
        assert_eq!(change_from_item(item).unwrap(), change);
        assert!(change_key(9) < change_key(10));
        assert!(!change.is_trip(), "a reopen from half-open is not a trip");

        let mut item: HashMap<String, AttributeValue> =
            serde_dynamo::to_item(ChangeItem::from(&change)).unwrap();
        item.insert("item".into(), s("change#7"));
        let err = change_from_item(item).unwrap_err();
        assert!(
            matches!(&err, StoreError::Corrupt(m) if m.contains("change#7") && m.contains("version 4")),
            "{err}"
        );
        let mut item: HashMap<String, AttributeValue> =
            serde_dynamo::to_item(ChangeItem::from(&change)).unwrap();
        item.remove("at");
        assert!(
            matches!(change_from_item(item), Err(StoreError::Corrupt(m)) if m.contains("change#00000000000000000004"))
        );
    }

    #[test]
    fn the_first_failure_is_the_start_of_the_failing_run_before_the_trip() {
        // Healthy, then failing from +3 s, tripped at +8.5 s; a bucket after
        // the trip is not looked at.
        let buckets = [
            bucket(0, 10, 0, 0),
            bucket(1, 9, 1, 0),
            bucket(2, 10, 0, 0),
            bucket(3, 2, 0, 3),
            bucket(5, 0, 0, 4),
            bucket(6, 0, 0, 0),
            bucket(8, 0, 2, 5),
            bucket(9, 0, 0, 9),
        ];
        let trip = at(8) + TimeDelta::milliseconds(500);
        assert_eq!(first_failure(&buckets, trip), Some(at(3)));
        // In any order.
        let mut reversed = buckets;
        reversed.reverse();
        assert_eq!(first_failure(&reversed, trip), Some(at(3)));
        // Success-only buckets after the run are skipped (an alarm trip a
        // little later), a long quiet gap ends the run.
        let buckets = [
            bucket(0, 0, 1, 0),
            bucket(30, 0, 0, 5),
            bucket(31, 0, 3, 0),
            bucket(35, 4, 0, 0),
        ];
        assert_eq!(first_failure(&buckets, at(40)), Some(at(30)));
        // Nothing failing, or only before the lookback: none.
        assert_eq!(first_failure(&[bucket(0, 5, 0, 0)], at(1)), None);
        assert_eq!(first_failure(&[bucket(0, 0, 5, 0)], at(121)), None);
        assert_eq!(first_failure(&[bucket(0, 0, 5, 0)], at(120)), Some(at(0)));
        assert_eq!(first_failure(&[], at(0)), None);
    }

    #[test]
    fn a_cancelled_transaction_is_a_lost_race_only_for_its_condition_or_a_conflict() {
        use aws_sdk_dynamodb::types::CancellationReason;
        use aws_sdk_dynamodb::types::error::TransactionCanceledException;
        let cancelled = |codes: &[&str]| {
            let mut b = TransactionCanceledException::builder();
            for code in codes {
                b = b.cancellation_reasons(CancellationReason::builder().code(*code).build());
            }
            b.build()
        };
        assert!(lost_race(&cancelled(&["ConditionalCheckFailed", "None"])));
        assert!(lost_race(&cancelled(&["None", "TransactionConflict"])));
        assert!(!lost_race(&cancelled(&["None", "ValidationError"])));
        let bare = TransactionCanceledException::builder()
            .message("Transaction cancelled, please refer cancellation reasons for specific reasons [ConditionalCheckFailed, None]")
            .build();
        assert!(lost_race(&bare));
        assert!(!lost_race(&TransactionCanceledException::builder().build()));
    }
}
