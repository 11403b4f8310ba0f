//! The Breaker table on DynamoDB: one breaker record per operator, and one
//! state-change item per transition.
//!
//! Partition key `operator` (S), sort key `item` (S). The breaker lives at
//! `item = "breaker"` with every [`BreakerRecord`] field as an attribute
//! (`version`, the counters and `announced_version` as N, times as RFC 3339 S).
//! The failure window's buckets share the table under other sort keys (see
//! [`crate::window`]), and so does the question the operator last answered
//! (`item = "answered"`: `operation`, `params`, `answered_at`), which its
//! open breaker is probed with when its settings name no probe: one `PutItem`
//! now and then from the real consumer, one `GetItem` per probe.
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
use chrono::{DateTime, Utc};
use lifeboat_core::breaker::{BreakerRecord, BreakerState};
use lifeboat_core::operator::OperatorId;
use lifeboat_core::ports::{BreakerStore, StoreError, Trial, TrialTally};
use lifeboat_core::probe::ProbeSpec;
use lifeboat_core::watched::FailureCounter;

use crate::error::describe;

mod change;
mod item;
#[cfg(test)]
mod tests;

use change::is_trip;
pub use change::{
    BreakerChange, CHANGE_PREFIX, CHANGE_TTL, FIRST_FAILURE_LOOKBACK, FIRST_FAILURE_MAX_GAP,
    change_key, first_failure,
};
pub use change::{change_from_item, change_to_item};
pub use item::{ANSWERED_ITEM, BREAKER_ITEM, breaker_from_item, breaker_to_item};
use item::{TallyItem, n, s};

/// Keys per BatchGetItem call: DynamoDB's limit.
const BATCH_GET_KEYS: usize = 100;
/// Calls per chunk of keys before unprocessed keys are an error.
const BATCH_GET_ATTEMPTS: u32 = 5;
/// Pause before asking again for unprocessed keys, times the attempt.
const BATCH_GET_BACKOFF: std::time::Duration = std::time::Duration::from_millis(50);

/// [`BreakerStore`] on the Breaker table.
#[derive(Debug, Clone)]
pub struct DynamoBreakerStore {
    client: aws_sdk_dynamodb::Client,
    table: String,
    /// Where a failed read of the failure window inside a trip's write is
    /// counted (the write goes on without it).
    failures: Option<FailureCounter>,
}

impl DynamoBreakerStore {
    pub fn new(client: aws_sdk_dynamodb::Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
            failures: None,
        }
    }

    /// Count the reads this store makes on its own behalf and goes on
    /// without (the trip's first failure) in `DependencyErrors`, as
    /// `window.read`: the calls a [`lifeboat_core::watched::Watched`]
    /// wrapper cannot see.
    pub fn counting_failures(mut self, failures: FailureCounter) -> Self {
        self.failures = Some(failures);
        self
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

    /// Set the mark `attribute` (announced or routed) to `version` while the
    /// breaker is at `version`, never lowering it, as the in-memory store's
    /// max() does; a breaker that moved since is left unmarked.
    async fn mark(
        &self,
        attribute: &'static str,
        operator: &OperatorId,
        version: u64,
    ) -> Result<(), StoreError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(operator)))
            .update_expression("SET #mark = :v")
            .condition_expression("#version = :v AND (attribute_not_exists(#mark) OR #mark < :v)")
            .expression_attribute_names("#mark", attribute)
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

    fn not_at(&self, record: &BreakerRecord, expected_version: Option<u64>) -> StoreError {
        StoreError::Conflict(format!(
            "breaker {} is not at version {expected_version:?}",
            record.operator
        ))
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
        let item = breaker_to_item(record)?;
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
        let change_item = change_to_item(&change)?;
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
        trial: Trial,
    ) -> Result<Option<TrialTally>, StoreError> {
        // A timed-out trial is a failure, and counted as a timeout too.
        let (update, counter) = match trial {
            Trial::Passed => ("ADD #counter :one", "trial_successes"),
            Trial::Failed => ("ADD #counter :one", "trial_failures"),
            Trial::TimedOut => ("ADD #counter :one, trial_timeouts :one", "trial_failures"),
        };
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(operator)))
            .update_expression(update)
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
                    timeouts: tally.trial_timeouts,
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
        self.mark("announced_version", operator, version).await
    }

    async fn mark_routed(&self, operator: &OperatorId, version: u64) -> Result<(), StoreError> {
        self.mark("routed_version", operator, version).await
    }

    async fn remember_answered(
        &self,
        operator: &OperatorId,
        question: &ProbeSpec,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let mut item: HashMap<String, AttributeValue> = serde_dynamo::to_item(question)
            .map_err(|e| StoreError::Corrupt(format!("question of {operator}: {e}")))?;
        item.insert("operator".to_owned(), s(operator.as_str()));
        item.insert("item".to_owned(), s(ANSWERED_ITEM));
        item.insert("answered_at".to_owned(), s(at.to_rfc3339()));
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .send()
            .await
            .map_err(|e| self.unavailable("PutItem", &e))?;
        Ok(())
    }

    async fn answered(&self, operator: &OperatorId) -> Result<Option<ProbeSpec>, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("operator", s(operator.as_str()))
            .key("item", s(ANSWERED_ITEM))
            .send()
            .await
            .map_err(|e| self.unavailable("GetItem", &e))?;
        let Some(mut item) = output.item else {
            return Ok(None);
        };
        for key in ["operator", "item", "answered_at"] {
            item.remove(key);
        }
        serde_dynamo::from_item(item)
            .map(Some)
            .map_err(|e| StoreError::Corrupt(format!("answered question of {operator}: {e}")))
    }
}
