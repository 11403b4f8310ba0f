//! The Breaker table on DynamoDB: one breaker record per operator.
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

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use chrono::{DateTime, Utc};
use lifeboat_core::breaker::{BreakerRecord, BreakerState};
use lifeboat_core::operator::OperatorId;
use lifeboat_core::ports::{BreakerStore, StoreError, TrialTally};
use serde::{Deserialize, Serialize};

use crate::error::describe;
use crate::item::ItemError;

/// The sort key of the breaker record.
pub const BREAKER_ITEM: &str = "breaker";

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

    async fn list(&self) -> Result<Vec<BreakerRecord>, StoreError> {
        // One breaker item per operator beside its buckets: a filtered scan is
        // small. Paginated all the same.
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
        let request = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .expression_attribute_names("#op", "operator");
        let request = match expected_version {
            None => request.condition_expression("attribute_not_exists(#op)"),
            Some(v) => request
                .condition_expression("attribute_exists(#op) AND #version = :expected")
                .expression_attribute_names("#version", "version")
                .expression_attribute_values(":expected", n(v)),
        };
        match request.send().await {
            Ok(_) => Ok(()),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
            {
                Err(StoreError::Conflict(format!(
                    "breaker {} is not at version {expected_version:?}",
                    record.operator
                )))
            }
            Err(e) => Err(self.unavailable("PutItem", &e)),
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
}
