//! The answer cache on DynamoDB: the Cache table.
//!
//! One item per question, keyed by `cache_key` (S), the [`CacheKey`]
//! `operator#operation#k1=v1&k2=v2`:
//!
//! | attribute | type | |
//! |---|---|---|
//! | `cache_key` | S | partition key |
//! | `operator` | S | an [`OperatorId`] |
//! | `operation` | S | `"search"` or `"price"` |
//! | `body` | S | the operator's answer, as JSON text |
//! | `as_of` | S | RFC 3339: when the operator gave the answer |
//! | `as_of_ms` | N | `as_of` in epoch milliseconds, for the write condition |
//! | `refused` | N | a negative answer: the operator's 4xx (absent otherwise) |
//! | `expires_at` | N | epoch seconds, the table's TTL |
//!
//! A write is one `PutItem` with the condition
//! `attribute_not_exists(cache_key) OR as_of_ms < :as_of_ms`, so an answer
//! never replaces one the operator gave later (or in the same millisecond),
//! however the real consumer's instances race. A refused write is
//! [`CacheWrite::NewerKept`]. Reads are eventually consistent: a cache entry a
//! moment old is as good as the newest.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use lifeboat_core::cache::{CacheKey, CacheStore, CacheWrite, CachedAnswer};
use lifeboat_core::operator::{Operation, OperatorId};
use lifeboat_core::ports::StoreError;
use serde::{Deserialize, Serialize};

use crate::error::describe;
use crate::item::{ItemError, format_time, parse_time};

/// A cache item, as written and read.
#[derive(Serialize, Deserialize)]
struct CacheItem {
    cache_key: String,
    operator: String,
    operation: String,
    body: String,
    as_of: String,
    as_of_ms: i64,
    expires_at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    refused: Option<u16>,
}

impl CacheItem {
    fn new(answer: &CachedAnswer, expires_at: DateTime<Utc>) -> Self {
        Self {
            cache_key: answer.key.as_str().to_owned(),
            operator: answer.operator.as_str().to_owned(),
            operation: answer.operation.as_str().to_owned(),
            body: answer.body.clone(),
            as_of: format_time(answer.as_of),
            as_of_ms: answer.as_of.timestamp_millis(),
            expires_at: expires_at.timestamp(),
            refused: answer.refused,
        }
    }
}

impl TryFrom<CacheItem> for CachedAnswer {
    type Error = ItemError;

    fn try_from(i: CacheItem) -> Result<Self, ItemError> {
        if i.cache_key.is_empty() {
            return Err(ItemError::Invalid {
                field: "cache_key",
                reason: "empty".into(),
            });
        }
        let operator = OperatorId::new(i.operator).map_err(|e| ItemError::Invalid {
            field: "operator",
            reason: e.to_string(),
        })?;
        let operation = i
            .operation
            .parse::<Operation>()
            .map_err(|e| ItemError::Invalid {
                field: "operation",
                reason: e.to_string(),
            })?;
        Ok(CachedAnswer {
            key: CacheKey::from_stored(i.cache_key),
            operator,
            operation,
            body: i.body,
            as_of: parse_time("as_of", &i.as_of)?,
            refused: i.refused,
        })
    }
}

fn answer_from_item(item: HashMap<String, AttributeValue>) -> Result<CachedAnswer, ItemError> {
    let raw: CacheItem = serde_dynamo::from_item(item)?;
    raw.try_into()
}

/// [`CacheStore`] on the Cache table.
#[derive(Debug, Clone)]
pub struct DynamoCacheStore {
    client: aws_sdk_dynamodb::Client,
    table: String,
}

impl DynamoCacheStore {
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
impl CacheStore for DynamoCacheStore {
    async fn get(&self, key: &CacheKey) -> Result<Option<CachedAnswer>, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("cache_key", AttributeValue::S(key.as_str().to_owned()))
            .send()
            .await
            .map_err(|e| {
                StoreError::Unavailable(describe(&format!("GetItem {}", self.table), &e))
            })?;
        output
            .item
            .map(|item| {
                answer_from_item(item).map_err(|e| {
                    StoreError::Corrupt(format!("cache entry {key} in table {}: {e}", self.table))
                })
            })
            .transpose()
    }

    async fn put(
        &self,
        answer: &CachedAnswer,
        expires_at: DateTime<Utc>,
    ) -> Result<CacheWrite, StoreError> {
        let item = CacheItem::new(answer, expires_at);
        let as_of_ms = item.as_of_ms;
        let item: HashMap<String, AttributeValue> = serde_dynamo::to_item(item)
            .map_err(|e| StoreError::Corrupt(format!("cache entry {}: {e}", answer.key)))?;
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(#key) OR #as_of_ms < :as_of_ms")
            .expression_attribute_names("#key", "cache_key")
            .expression_attribute_names("#as_of_ms", "as_of_ms")
            .expression_attribute_values(":as_of_ms", AttributeValue::N(as_of_ms.to_string()))
            .send()
            .await;
        match result {
            Ok(_) => Ok(CacheWrite::Written),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
            {
                Ok(CacheWrite::NewerKept)
            }
            Err(e) => Err(StoreError::Unavailable(describe(
                &format!("PutItem {}", self.table),
                &e,
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer() -> CachedAnswer {
        let operator = OperatorId::new("nordic").unwrap();
        let params = std::collections::BTreeMap::from([("from".to_owned(), "HEL".to_owned())]);
        CachedAnswer {
            key: CacheKey::new(&operator, Operation::Search, &params),
            operator,
            operation: Operation::Search,
            body: r#"{"sailings":[]}"#.into(),
            as_of: DateTime::from_timestamp(1_700_000_000, 250_000_000).unwrap(),
            refused: None,
        }
    }

    #[test]
    fn cache_items_have_the_table_design_and_round_trip() {
        let expires = DateTime::from_timestamp(1_700_604_800, 0).unwrap();
        let item: HashMap<String, AttributeValue> =
            serde_dynamo::to_item(CacheItem::new(&answer(), expires)).unwrap();
        let s = |v: &str| Some(AttributeValue::S(v.into()));
        let n = |v: i64| Some(AttributeValue::N(v.to_string()));
        assert_eq!(item.get("cache_key").cloned(), s("nordic#search#from=HEL"));
        assert_eq!(item.get("operator").cloned(), s("nordic"));
        assert_eq!(item.get("operation").cloned(), s("search"));
        assert_eq!(item.get("as_of").cloned(), s("2023-11-14T22:13:20.250Z"));
        assert_eq!(item.get("as_of_ms").cloned(), n(1_700_000_000_250));
        assert_eq!(item.get("expires_at").cloned(), n(1_700_604_800));
        assert_eq!(answer_from_item(item).unwrap(), answer());
    }

    #[test]
    fn bad_cache_items_are_refused_with_a_reason() {
        let item: HashMap<String, AttributeValue> = serde_dynamo::to_item(CacheItem::new(
            &answer(),
            DateTime::from_timestamp(0, 0).unwrap(),
        ))
        .unwrap();
        let with = |name: &str, value: Option<AttributeValue>| {
            let mut item = item.clone();
            match value {
                Some(v) => item.insert(name.to_owned(), v),
                None => item.remove(name),
            };
            answer_from_item(item)
        };
        assert!(matches!(with("body", None), Err(ItemError::Schema(m)) if m.contains("body")));
        assert!(matches!(
            with("operation", Some(AttributeValue::S("book".into()))),
            Err(ItemError::Invalid {
                field: "operation",
                ..
            })
        ));
        assert!(matches!(
            with("as_of", Some(AttributeValue::S("yesterday".into()))),
            Err(ItemError::Invalid { field: "as_of", .. })
        ));
    }
}
