//! Reading DynamoDB items back into core types.
//!
//! Items are (de)serialized with serde_dynamo through private item structs that
//! mirror the table design exactly. Reading is a `TryFrom` from the item struct:
//! every attribute the design requires must be there and valid, and nothing
//! missing is filled in with a zero.

use aws_sdk_dynamodb::operation::put_item::builders::PutItemFluentBuilder;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};

/// Why a DynamoDB item is not what it should be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ItemError {
    /// The item has no `record_type`: it was not written by lifeboat.
    #[error("foreign item: no record_type attribute")]
    NoRecordType,
    /// The item is some other kind of record.
    #[error("item is a {0:?} record, not a request")]
    NotARequest(String),
    /// An attribute is missing or has the wrong DynamoDB type.
    #[error("item does not match its schema: {0}")]
    Schema(String),
    /// An attribute is present but its value is not valid.
    #[error("item has an invalid {field}: {reason}")]
    Invalid { field: &'static str, reason: String },
}

impl From<serde_dynamo::Error> for ItemError {
    fn from(e: serde_dynamo::Error) -> Self {
        ItemError::Schema(e.to_string())
    }
}

/// An RFC 3339 timestamp attribute.
pub(crate) fn parse_time(field: &'static str, value: &str) -> Result<DateTime<Utc>, ItemError> {
    DateTime::parse_from_rfc3339(value)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| ItemError::Invalid {
            field,
            reason: format!("{value:?} is not an RFC 3339 timestamp ({e})"),
        })
}

/// How timestamps are written: RFC 3339 in UTC, as chrono's serde form, so
/// anything that reads the item with serde (the stream consumers) agrees.
pub(crate) fn format_time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

/// A put that lands only on the revision its writer read: a new item (no
/// `key` attribute yet) when `expected` is `None`, else the item whose
/// `revision` is still `expected`.
pub(crate) fn on_revision(
    request: PutItemFluentBuilder,
    key: &str,
    expected: Option<u64>,
) -> PutItemFluentBuilder {
    match expected {
        None => request
            .condition_expression("attribute_not_exists(#key)")
            .expression_attribute_names("#key", key),
        Some(r) => request
            .condition_expression("#revision = :expected")
            .expression_attribute_names("#revision", "revision")
            .expression_attribute_values(":expected", AttributeValue::N(r.to_string())),
    }
}

/// Every item of `table`, page after page (a `Scan` followed to its last
/// key), for the operators' commands that read a whole table.
pub(crate) async fn scan_all(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<Vec<std::collections::HashMap<String, AttributeValue>>, lifeboat_core::ports::StoreError>
{
    let mut items = Vec::new();
    let mut start = None;
    loop {
        let output = client
            .scan()
            .table_name(table)
            .set_exclusive_start_key(start.take())
            .send()
            .await
            .map_err(|e| {
                lifeboat_core::ports::StoreError::Unavailable(crate::error::describe(
                    &format!("Scan {table}"),
                    &e,
                ))
            })?;
        items.extend(output.items.unwrap_or_default());
        match output.last_evaluated_key {
            Some(key) if !key.is_empty() => start = Some(key),
            _ => return Ok(items),
        }
    }
}
