//! The failure window's buckets, in the Breaker table beside each operator's
//! breaker record.
//!
//! A bucket is the item `item = "bucket#" + <bucket start in epoch millis,
//! zero-padded to 15 digits>` (so sort-key order is time order) with counters
//! `calls`, `successes`, `failures`, `timeouts`, `slow`, `refusals` (N; a
//! bucket of an earlier version has no `refusals`: none counted) and
//! `expires_at` (N, the table's TTL: bucket start + 1 hour). Every consumer instance adds
//! its batch's counts with one `UpdateItem ADD`, which DynamoDB applies
//! atomically, so concurrent batches never lose each other's counts.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use lifeboat_core::operator::OperatorId;
use lifeboat_core::ports::{StoreError, WindowStore};
use lifeboat_core::window::{Bucket, CallCounts};
use serde::Deserialize;

use crate::error::describe;
use crate::item::ItemError;

/// The sort-key prefix of bucket items.
pub const BUCKET_PREFIX: &str = "bucket#";

pub use lifeboat_core::window::BUCKET_TTL;

/// The greatest bucket key.
const LAST_BUCKET_KEY: &str = "bucket#999999999999999";

/// The sort key of the bucket starting at `epoch_millis`.
pub fn bucket_key(epoch_millis: i64) -> String {
    format!("{BUCKET_PREFIX}{epoch_millis:015}")
}

/// A bucket item as read.
#[derive(Deserialize)]
struct BucketItem {
    item: String,
    calls: u32,
    successes: u32,
    failures: u32,
    timeouts: u32,
    slow: u32,
    #[serde(default)]
    refusals: u32,
}

impl TryFrom<BucketItem> for Bucket {
    type Error = ItemError;

    fn try_from(b: BucketItem) -> Result<Self, ItemError> {
        let invalid = || ItemError::Invalid {
            field: "item",
            reason: format!("{:?} is not a bucket key", b.item),
        };
        let millis: i64 = b
            .item
            .strip_prefix(BUCKET_PREFIX)
            .and_then(|m| m.parse().ok())
            .ok_or_else(invalid)?;
        let start = DateTime::from_timestamp_millis(millis).ok_or_else(invalid)?;
        Ok(Bucket {
            start,
            counts: CallCounts {
                calls: b.calls,
                successes: b.successes,
                failures: b.failures,
                timeouts: b.timeouts,
                slow: b.slow,
                refusals: b.refusals,
            },
        })
    }
}

/// A Breaker-table item at `item = "bucket#…"` read as the failure
/// window's bucket (the store's `buckets`).
pub fn bucket_from_item(item: HashMap<String, AttributeValue>) -> Result<Bucket, ItemError> {
    let raw: BucketItem = serde_dynamo::from_item(item)?;
    raw.try_into()
}

fn n(value: impl ToString) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

/// [`WindowStore`] on the Breaker table.
#[derive(Debug, Clone)]
pub struct DynamoWindowStore {
    client: aws_sdk_dynamodb::Client,
    table: String,
}

impl DynamoWindowStore {
    pub fn new(client: aws_sdk_dynamodb::Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }

    pub fn table(&self) -> &str {
        &self.table
    }
}

#[async_trait]
impl WindowStore for DynamoWindowStore {
    async fn add(
        &self,
        operator: &OperatorId,
        bucket_start: DateTime<Utc>,
        counts: &CallCounts,
    ) -> Result<(), StoreError> {
        let millis = bucket_start.timestamp_millis();
        if millis < 0 {
            return Err(StoreError::Corrupt(format!(
                "bucket start {bucket_start} is before 1970 and has no key"
            )));
        }
        let expires_at = (bucket_start + BUCKET_TTL).timestamp();
        self.client
            .update_item()
            .table_name(&self.table)
            .key("operator", AttributeValue::S(operator.as_str().to_owned()))
            .key("item", AttributeValue::S(bucket_key(millis)))
            .update_expression(
                "ADD #calls :c, #successes :s, #failures :f, #timeouts :t, #slow :w, #refusals :r SET #expires = :ttl",
            )
            .expression_attribute_names("#calls", "calls")
            .expression_attribute_names("#successes", "successes")
            .expression_attribute_names("#failures", "failures")
            .expression_attribute_names("#timeouts", "timeouts")
            .expression_attribute_names("#slow", "slow")
            .expression_attribute_names("#refusals", "refusals")
            .expression_attribute_names("#expires", "expires_at")
            .expression_attribute_values(":c", n(counts.calls))
            .expression_attribute_values(":s", n(counts.successes))
            .expression_attribute_values(":f", n(counts.failures))
            .expression_attribute_values(":t", n(counts.timeouts))
            .expression_attribute_values(":w", n(counts.slow))
            .expression_attribute_values(":r", n(counts.refusals))
            .expression_attribute_values(":ttl", n(expires_at))
            .send()
            .await
            .map_err(|e| StoreError::Unavailable(describe(&format!("UpdateItem {}", self.table), &e)))?;
        Ok(())
    }

    async fn since(
        &self,
        operator: &OperatorId,
        since: DateTime<Utc>,
    ) -> Result<Vec<Bucket>, StoreError> {
        // Buckets start on whole milliseconds: the first one at or after
        // `since` is at its millisecond rounded up.
        let sub_milli = !since.timestamp_subsec_nanos().is_multiple_of(1_000_000);
        let from = (since.timestamp_millis() + i64::from(sub_milli)).max(0);
        let mut buckets = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let output = self
                .client
                .query()
                .table_name(&self.table)
                .consistent_read(true)
                .key_condition_expression("#op = :op AND #item BETWEEN :from AND :to")
                .expression_attribute_names("#op", "operator")
                .expression_attribute_names("#item", "item")
                .expression_attribute_values(":op", AttributeValue::S(operator.as_str().to_owned()))
                .expression_attribute_values(":from", AttributeValue::S(bucket_key(from)))
                .expression_attribute_values(":to", AttributeValue::S(LAST_BUCKET_KEY.to_owned()))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| {
                    StoreError::Unavailable(describe(&format!("Query {}", self.table), &e))
                })?;
            for item in output.items.unwrap_or_default() {
                buckets.push(
                    bucket_from_item(item)
                        .map_err(|e| StoreError::Corrupt(format!("bucket of {operator}: {e}")))?,
                );
            }
            match output.last_evaluated_key {
                Some(key) if !key.is_empty() => start = Some(key),
                _ => break,
            }
        }
        Ok(buckets)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_keys_sort_in_time_order() {
        assert_eq!(bucket_key(1_700_000_000_000), "bucket#001700000000000");
        assert!(bucket_key(999) < bucket_key(1_000));
        assert!(bucket_key(1_700_000_000_000).as_str() < LAST_BUCKET_KEY);
    }

    #[test]
    fn bucket_items_are_read_from_their_key() {
        let item = HashMap::from([
            ("operator".to_owned(), AttributeValue::S("nordic".into())),
            (
                "item".to_owned(),
                AttributeValue::S(bucket_key(1_700_000_001_000)),
            ),
            ("calls".to_owned(), n(4)),
            ("successes".to_owned(), n(1)),
            ("failures".to_owned(), n(2)),
            ("timeouts".to_owned(), n(1)),
            ("slow".to_owned(), n(0)),
            ("expires_at".to_owned(), n(1_700_003_601)),
        ]);
        let raw: BucketItem = serde_dynamo::from_item(item).unwrap();
        let bucket = Bucket::try_from(raw).unwrap();
        assert_eq!(
            bucket.start,
            DateTime::from_timestamp(1_700_000_001, 0).unwrap()
        );
        assert_eq!(bucket.counts.calls, 4);
        assert_eq!(bucket.counts.failures, 2);
        // Written before refusals were counted: none.
        assert_eq!(bucket.counts.refusals, 0);
    }
}
