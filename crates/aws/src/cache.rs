//! The answer cache on DynamoDB: the Cache table.
//!
//! One item per question, keyed by `cache_key` (S), the [`CacheKey`]
//! `operator#operation#k1=v1&k2=v2`. The item keeps the newest good answer
//! and, beside it, the newest refusal:
//!
//! | attribute | type | |
//! |---|---|---|
//! | `cache_key` | S | partition key |
//! | `operator` | S | an [`OperatorId`] |
//! | `operation` | S | `"search"` or `"price"` |
//! | `body` | S | the good answer, as JSON text (absent while only a refusal is kept) |
//! | `as_of` | S | RFC 3339: when the operator gave it |
//! | `as_of_ms` | N | `as_of` in epoch milliseconds, for the write conditions |
//! | `refusal_status` | N | the newest refusal: the operator's 4xx (absent without one) |
//! | `refusal_detail` | S | what the refusal said |
//! | `refusal_at` | S | RFC 3339: when the operator refused |
//! | `refusal_at_ms` | N | `refusal_at` in epoch milliseconds, for the write conditions |
//! | `expires_at` | N | epoch seconds, the table's TTL |
//! | `refused` | N | only in items of earlier versions, which kept a refusal instead of the answer: `body` and `as_of` are then that refusal's detail and time, with this status |
//!
//! Every write is one conditional `UpdateItem`, so a write never replaces a
//! newer one however the real consumer's instances race, and a refusal never
//! touches the good answer:
//!
//! * a refusal sets only the `refusal_*` attributes (and `expires_at` if the
//!   item has none), on the condition that the item holds no refusal and no
//!   good answer as new or newer;
//! * a good answer sets `body`, `as_of`, `as_of_ms` and `expires_at` on the
//!   condition that the item holds no good answer as new or newer, and
//!   removes the refusal when it is not newer than the answer. When a newer
//!   refusal is there, a second write sets the answer and keeps it.
//!
//! A write the condition refuses is [`CacheWrite::NewerKept`]. Reads are
//! eventually consistent: a cache entry a moment old is as good as the
//! newest.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use chrono::{DateTime, Utc};
use lifeboat_core::cache::{CacheEntry, CacheKey, CachedAnswer, CachedRefusal};
use lifeboat_core::operator::{Operation, OperatorId};
use lifeboat_core::ports::{CacheStore, CacheWrite, StoreError};
use serde::Deserialize;

use crate::error::describe;
use crate::item::{ItemError, format_time, parse_time};

/// A cache item, as read: every attribute but the key and the question may
/// be missing; [`CacheEntry::try_from`] says which combinations are valid.
#[derive(Deserialize)]
struct CacheItem {
    cache_key: String,
    operator: String,
    operation: String,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    as_of: Option<String>,
    #[serde(default)]
    refusal_status: Option<u16>,
    #[serde(default)]
    refusal_detail: Option<String>,
    #[serde(default)]
    refusal_at: Option<String>,
    /// Items of earlier versions: `body` and `as_of` are a refusal.
    #[serde(default)]
    refused: Option<u16>,
}

/// The question an item answers.
struct Question {
    key: CacheKey,
    operator: OperatorId,
    operation: Operation,
}

impl Question {
    fn of(i: &CacheItem) -> Result<Self, ItemError> {
        if i.cache_key.is_empty() {
            return Err(ItemError::Invalid {
                field: "cache_key",
                reason: "empty".into(),
            });
        }
        let operator = OperatorId::new(i.operator.clone()).map_err(|e| ItemError::Invalid {
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
        Ok(Self {
            key: CacheKey::from_stored(i.cache_key.clone()),
            operator,
            operation,
        })
    }

    fn refusal(&self, status: u16, detail: String, at: DateTime<Utc>) -> CachedRefusal {
        CachedRefusal {
            key: self.key.clone(),
            operator: self.operator.clone(),
            operation: self.operation,
            status,
            detail,
            at,
        }
    }
}

/// A refusal's status: a 4xx, or the item is not one lifeboat wrote.
fn refusal_status(field: &'static str, status: u16) -> Result<u16, ItemError> {
    if (400..500).contains(&status) {
        Ok(status)
    } else {
        Err(ItemError::Invalid {
            field,
            reason: format!("{status} is not a 4xx status"),
        })
    }
}

impl TryFrom<CacheItem> for CacheEntry {
    type Error = ItemError;

    fn try_from(i: CacheItem) -> Result<Self, ItemError> {
        let question = Question::of(&i)?;
        let body_and_time = match (i.body, i.as_of) {
            (Some(body), Some(as_of)) => Some((body, parse_time("as_of", &as_of)?)),
            (None, None) => None,
            (Some(_), None) => return Err(missing("as_of", "body")),
            (None, Some(_)) => return Err(missing("body", "as_of")),
        };
        let refusal = match (i.refusal_status, i.refusal_detail, i.refusal_at) {
            (Some(status), Some(detail), Some(at)) => Some(question.refusal(
                refusal_status("refusal_status", status)?,
                detail,
                parse_time("refusal_at", &at)?,
            )),
            (None, None, None) => None,
            (status, detail, _) => {
                let field = match (status, detail) {
                    (None, _) => "refusal_status",
                    (_, None) => "refusal_detail",
                    _ => "refusal_at",
                };
                return Err(missing(field, "the other refusal attributes"));
            }
        };
        let entry = match (i.refused, body_and_time) {
            // An item of an earlier version that kept a refusal in place
            // of the answer: a refusal with no good answer (the newer of
            // the two refusals, if one was written beside it since).
            (Some(status), Some((detail, at))) => {
                let old = question.refusal(refusal_status("refused", status)?, detail, at);
                let newest = match refusal {
                    Some(new) if new.at > old.at => new,
                    _ => old,
                };
                CacheEntry::refused(newest)
            }
            (Some(_), None) => return Err(missing("body", "refused")),
            (None, answer) => CacheEntry {
                answer: answer.map(|(body, as_of)| CachedAnswer {
                    key: question.key.clone(),
                    operator: question.operator.clone(),
                    operation: question.operation,
                    body,
                    as_of,
                }),
                refusal,
            },
        };
        if entry.answer.is_none() && entry.refusal.is_none() {
            return Err(ItemError::Invalid {
                field: "body",
                reason: "the item holds neither an answer nor a refusal".into(),
            });
        }
        Ok(entry)
    }
}

fn missing(field: &'static str, beside: &str) -> ItemError {
    ItemError::Invalid {
        field,
        reason: format!("missing beside {beside}"),
    }
}

/// A Cache-table item read as a cache entry (the store's `get`): a good
/// answer, a refusal or both, each whole, or an error naming the attribute.
pub fn entry_from_item(item: HashMap<String, AttributeValue>) -> Result<CacheEntry, ItemError> {
    let raw: CacheItem = serde_dynamo::from_item(item)?;
    raw.try_into()
}

fn s(value: impl Into<String>) -> AttributeValue {
    AttributeValue::S(value.into())
}

fn n(value: impl ToString) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

/// The attributes a good answer sets, TTL included.
pub(crate) fn answer_values(
    answer: &CachedAnswer,
    expires_at: DateTime<Utc>,
) -> Vec<(&'static str, AttributeValue)> {
    vec![
        ("operator", s(answer.operator.as_str())),
        ("operation", s(answer.operation.as_str())),
        ("body", s(answer.body.clone())),
        ("as_of", s(format_time(answer.as_of))),
        ("as_of_ms", n(answer.as_of.timestamp_millis())),
        ("expires_at", n(expires_at.timestamp())),
    ]
}

/// The attributes a refusal sets (its TTL only where the item has none).
pub(crate) fn refusal_values(refusal: &CachedRefusal) -> Vec<(&'static str, AttributeValue)> {
    vec![
        ("operator", s(refusal.operator.as_str())),
        ("operation", s(refusal.operation.as_str())),
        ("refusal_status", n(refusal.status)),
        ("refusal_detail", s(refusal.detail.clone())),
        ("refusal_at", s(format_time(refusal.at))),
        ("refusal_at_ms", n(refusal.at.timestamp_millis())),
    ]
}

/// The refusal's attributes, which a good answer removes with it.
const REFUSAL_ATTRIBUTES: [&str; 5] = [
    "refusal_status",
    "refusal_detail",
    "refusal_at",
    "refusal_at_ms",
    "refused",
];

/// `#name = :name, …` for `values`.
fn set_clause(values: &[(&'static str, AttributeValue)]) -> String {
    values
        .iter()
        .map(|(name, _)| format!("#{name} = :{name}"))
        .collect::<Vec<_>>()
        .join(", ")
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

    /// An `UpdateItem` of `key` setting `values`, with their names and
    /// values bound.
    fn update(
        &self,
        key: &CacheKey,
        values: Vec<(&'static str, AttributeValue)>,
    ) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
        let mut update = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("cache_key", s(key.as_str()));
        for (name, value) in values {
            update = update
                .expression_attribute_names(format!("#{name}"), name)
                .expression_attribute_values(format!(":{name}"), value);
        }
        update
    }

    /// Write a good answer: with `clear` the refusals it outdates go (on
    /// the condition that no newer refusal is there), without it a newer
    /// refusal stays beside it. `Ok(None)`: the condition failed, with the
    /// old item if the service sent it back.
    async fn write_answer(
        &self,
        answer: &CachedAnswer,
        expires_at: DateTime<Utc>,
        clear: bool,
    ) -> Result<Result<(), Option<HashMap<String, AttributeValue>>>, StoreError> {
        let values = answer_values(answer, expires_at);
        let set = set_clause(&values);
        let mut update = self.update(&answer.key, values);
        let removed: Vec<&str> = if clear {
            REFUSAL_ATTRIBUTES.to_vec()
        } else {
            // An item of an earlier version keeps its refusal in `body`:
            // the answer takes its place, so its status goes too.
            vec!["refused"]
        };
        for name in &removed {
            update = update.expression_attribute_names(format!("#{name}"), *name);
        }
        let remove: Vec<String> = removed.iter().map(|name| format!("#{name}")).collect();
        let condition = if clear {
            "(attribute_not_exists(#as_of_ms) OR #as_of_ms < :as_of_ms) AND (attribute_not_exists(#refusal_at_ms) OR #refusal_at_ms <= :as_of_ms)"
        } else {
            "attribute_not_exists(#as_of_ms) OR #as_of_ms < :as_of_ms"
        };
        let result = update
            .update_expression(format!("SET {set} REMOVE {}", remove.join(", ")))
            .condition_expression(condition)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok(Ok(())),
            Err(e) => match e.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(failed)) => {
                    Ok(Err(failed.item().cloned()))
                }
                _ => Err(StoreError::Unavailable(describe(
                    &format!("UpdateItem {}", self.table),
                    &e,
                ))),
            },
        }
    }
}

/// Whether `item` (an old item a write ran into) holds something as new as
/// `as_of_ms` or newer in `as_of_ms`.
fn holds_answer_since(item: &HashMap<String, AttributeValue>, as_of_ms: i64) -> bool {
    item.get("as_of_ms")
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse::<i64>().ok())
        .is_some_and(|stored| stored >= as_of_ms)
}

#[async_trait]
impl CacheStore for DynamoCacheStore {
    async fn get(&self, key: &CacheKey) -> Result<Option<CacheEntry>, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("cache_key", s(key.as_str()))
            .send()
            .await
            .map_err(|e| {
                StoreError::Unavailable(describe(&format!("GetItem {}", self.table), &e))
            })?;
        output
            .item
            .map(|item| {
                entry_from_item(item).map_err(|e| {
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
        match self.write_answer(answer, expires_at, true).await? {
            Ok(()) => return Ok(CacheWrite::Written),
            // A good answer as new or newer: nothing to write.
            Err(Some(old)) if holds_answer_since(&old, answer.as_of.timestamp_millis()) => {
                return Ok(CacheWrite::NewerKept);
            }
            // A newer refusal (or no old item to tell): the answer beside it.
            Err(_) => {}
        }
        match self.write_answer(answer, expires_at, false).await? {
            Ok(()) => Ok(CacheWrite::Written),
            Err(_) => Ok(CacheWrite::NewerKept),
        }
    }

    async fn put_refusal(
        &self,
        refusal: &CachedRefusal,
        expires_at: DateTime<Utc>,
    ) -> Result<CacheWrite, StoreError> {
        let values = refusal_values(refusal);
        let set = set_clause(&values);
        let result = self
            .update(&refusal.key, values)
            .update_expression(format!(
                "SET {set}, #expires_at = if_not_exists(#expires_at, :expires_at)"
            ))
            .condition_expression(
                "(attribute_not_exists(#refusal_at_ms) OR #refusal_at_ms < :refusal_at_ms) AND (attribute_not_exists(#as_of_ms) OR #as_of_ms < :refusal_at_ms)",
            )
            .expression_attribute_names("#expires_at", "expires_at")
            .expression_attribute_names("#as_of_ms", "as_of_ms")
            .expression_attribute_values(":expires_at", n(expires_at.timestamp()))
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
                &format!("UpdateItem {}", self.table),
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
        }
    }

    fn refusal() -> CachedRefusal {
        let answer = answer();
        CachedRefusal {
            key: answer.key,
            operator: answer.operator,
            operation: answer.operation,
            status: 404,
            detail: "operator answered 404".into(),
            at: DateTime::from_timestamp(1_700_000_060, 0).unwrap(),
        }
    }

    /// The item the writes make: the key and what each of them sets.
    fn item(
        answer: Option<&CachedAnswer>,
        refusal: Option<&CachedRefusal>,
    ) -> HashMap<String, AttributeValue> {
        let expires = DateTime::from_timestamp(1_700_604_800, 0).unwrap();
        let mut item = HashMap::from([(
            "cache_key".to_owned(),
            s("nordic#search#from=HEL".to_owned()),
        )]);
        let answer = answer
            .map(|a| answer_values(a, expires))
            .unwrap_or_default();
        let refusal = refusal.map(refusal_values).unwrap_or_default();
        for (name, value) in answer.into_iter().chain(refusal) {
            item.insert(name.to_owned(), value);
        }
        item.entry("expires_at".to_owned())
            .or_insert(n(expires.timestamp()));
        item
    }

    #[test]
    fn cache_items_have_the_table_design_and_round_trip() {
        let both = item(Some(&answer()), Some(&refusal()));
        let s = |v: &str| Some(AttributeValue::S(v.into()));
        let n = |v: i64| Some(AttributeValue::N(v.to_string()));
        assert_eq!(both.get("cache_key").cloned(), s("nordic#search#from=HEL"));
        assert_eq!(both.get("operator").cloned(), s("nordic"));
        assert_eq!(both.get("operation").cloned(), s("search"));
        assert_eq!(both.get("as_of").cloned(), s("2023-11-14T22:13:20.250Z"));
        assert_eq!(both.get("as_of_ms").cloned(), n(1_700_000_000_250));
        assert_eq!(both.get("refusal_status").cloned(), n(404));
        assert_eq!(both.get("refusal_at").cloned(), s("2023-11-14T22:14:20Z"));
        assert_eq!(both.get("refusal_at_ms").cloned(), n(1_700_000_060_000));
        assert_eq!(both.get("expires_at").cloned(), n(1_700_604_800));
        assert_eq!(
            entry_from_item(both).unwrap(),
            CacheEntry {
                answer: Some(answer()),
                refusal: Some(refusal()),
            }
        );
        assert_eq!(
            entry_from_item(item(Some(&answer()), None)).unwrap(),
            CacheEntry::answered(answer())
        );
        assert_eq!(
            entry_from_item(item(None, Some(&refusal()))).unwrap(),
            CacheEntry::refused(refusal())
        );
    }

    #[test]
    fn an_item_of_an_earlier_version_is_a_refusal_without_a_good_answer() {
        // Earlier versions wrote a refusal in place of the answer.
        let mut old = item(Some(&answer()), None);
        old.insert("body".into(), s("operator answered 404"));
        old.insert("refused".into(), n(404));
        let entry = entry_from_item(old.clone()).unwrap();
        assert_eq!(entry.answer, None);
        let expected = CachedRefusal {
            detail: "operator answered 404".into(),
            at: answer().as_of,
            ..refusal()
        };
        assert_eq!(entry.refusal, Some(expected.clone()));
        // A refusal written beside it since: the newer of the two.
        let mut beside = old.clone();
        for (name, value) in refusal_values(&refusal()) {
            beside.insert(name.to_owned(), value);
        }
        assert_eq!(entry_from_item(beside).unwrap().refusal, Some(refusal()));
        let older = CachedRefusal {
            at: answer().as_of - chrono::TimeDelta::seconds(1),
            ..refusal()
        };
        for (name, value) in refusal_values(&older) {
            old.insert(name.to_owned(), value);
        }
        assert_eq!(entry_from_item(old).unwrap().refusal, Some(expected));
    }

    #[test]
    fn bad_cache_items_are_refused_with_a_reason() {
        let item = item(Some(&answer()), Some(&refusal()));
        let with = |name: &str, value: Option<AttributeValue>| {
            let mut item = item.clone();
            match value {
                Some(v) => item.insert(name.to_owned(), v),
                None => item.remove(name),
            };
            entry_from_item(item)
        };
        assert!(matches!(
            with("body", None),
            Err(ItemError::Invalid { field: "body", .. })
        ));
        assert!(matches!(
            with("as_of", None),
            Err(ItemError::Invalid { field: "as_of", .. })
        ));
        assert!(matches!(
            with("refusal_detail", None),
            Err(ItemError::Invalid {
                field: "refusal_detail",
                ..
            })
        ));
        assert!(matches!(
            with("refusal_status", Some(n(200))),
            Err(ItemError::Invalid {
                field: "refusal_status",
                ..
            })
        ));
        assert!(matches!(
            with("refusal_status", Some(s("404"))),
            Err(ItemError::Schema(_))
        ));
        assert!(matches!(
            with("operation", Some(s("refund"))),
            Err(ItemError::Invalid {
                field: "operation",
                ..
            })
        ));
        assert!(matches!(
            with("as_of", Some(s("yesterday"))),
            Err(ItemError::Invalid { field: "as_of", .. })
        ));
        assert!(matches!(
            with("refusal_at", Some(s("yesterday"))),
            Err(ItemError::Invalid {
                field: "refusal_at",
                ..
            })
        ));
        assert!(matches!(
            with("operator", None),
            Err(ItemError::Schema(m)) if m.contains("operator")
        ));
        // Neither an answer nor a refusal.
        let mut empty = item.clone();
        for name in [
            "body",
            "as_of",
            "refusal_status",
            "refusal_detail",
            "refusal_at",
        ] {
            empty.remove(name);
        }
        assert!(matches!(
            entry_from_item(empty),
            Err(ItemError::Invalid { field: "body", .. })
        ));
    }

    #[test]
    fn the_update_sets_each_attribute_by_its_name() {
        let values = refusal_values(&refusal());
        assert_eq!(
            set_clause(&values),
            "#operator = :operator, #operation = :operation, #refusal_status = :refusal_status, #refusal_detail = :refusal_detail, #refusal_at = :refusal_at, #refusal_at_ms = :refusal_at_ms"
        );
    }
}
