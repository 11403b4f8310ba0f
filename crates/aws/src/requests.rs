//! The Requests table on DynamoDB.
//!
//! One item per request, keyed by `request_id` (S):
//!
//! | attribute | type | |
//! |---|---|---|
//! | `request_id` | S | partition key |
//! | `record_type` | S | always `"request"` |
//! | `operator` | S | an [`OperatorId`] |
//! | `operation` | S | `"search"` or `"price"` |
//! | `params` | M of S | passed through to the operator |
//! | `created_at`, `deadline` | S | RFC 3339 |
//! | `expires_at` | N | epoch seconds, the table's TTL: deadline + 1 day |
//! | `outcome` | M | the serde form of [`Outcome`], once written |
//!
//! The table's stream (NEW_AND_OLD_IMAGES) carries each insert to a consumer;
//! [`request_from_item`] reads a stream `NewImage` the same way [`get`] reads
//! an item, so both agree on what a request is.
//!
//! [`get`]: RequestStore::get

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use async_trait::async_trait;
use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use chrono::TimeDelta;
use lifeboat_core::operator::{Operation, OperatorId};
use lifeboat_core::ports::{OutcomeWrite, RequestStore, StoreError, StoredRequest};
use lifeboat_core::request::{ASKERS_CLOSES, Outcome, RequestRecord};
use serde::{Deserialize, Serialize};

use crate::error::describe;
use crate::item::{ItemError, format_time, parse_time};

/// The `record_type` of a request item.
pub const REQUEST_RECORD_TYPE: &str = "request";

/// How long a request item outlives its deadline before DynamoDB's TTL removes it.
pub const REQUEST_TTL_AFTER_DEADLINE: TimeDelta = TimeDelta::days(1);

/// A request item as written.
#[derive(Serialize)]
struct NewRequestItem<'a> {
    request_id: &'a str,
    record_type: &'static str,
    operator: &'a str,
    operation: &'static str,
    params: &'a BTreeMap<String, String>,
    created_at: String,
    deadline: String,
    expires_at: i64,
}

impl<'a> NewRequestItem<'a> {
    fn new(request: &'a RequestRecord) -> Self {
        Self {
            request_id: &request.request_id,
            record_type: REQUEST_RECORD_TYPE,
            operator: request.operator.as_str(),
            operation: request.operation.as_str(),
            params: &request.params,
            created_at: format_time(request.created_at),
            deadline: format_time(request.deadline),
            expires_at: (request.deadline + REQUEST_TTL_AFTER_DEADLINE).timestamp(),
        }
    }
}

/// A request item as read. `expires_at` is DynamoDB's business, not part of the
/// record, so it is not read.
#[derive(Deserialize)]
struct RequestItem {
    request_id: String,
    record_type: String,
    operator: String,
    operation: String,
    /// Absent params mean no params, as in [`RequestRecord`]'s serde form.
    #[serde(default)]
    params: BTreeMap<String, String>,
    created_at: String,
    deadline: String,
    /// Taken out of the item before the rest is deserialized, and read on its
    /// own so that a bad outcome is reported as such.
    #[serde(skip)]
    outcome: Option<serde_dynamo::AttributeValue>,
}

impl TryFrom<RequestItem> for StoredRequest {
    type Error = ItemError;

    fn try_from(item: RequestItem) -> Result<Self, ItemError> {
        if item.record_type != REQUEST_RECORD_TYPE {
            return Err(ItemError::NotARequest(item.record_type));
        }
        if item.request_id.is_empty() {
            return Err(ItemError::Invalid {
                field: "request_id",
                reason: "empty".into(),
            });
        }
        let operator = OperatorId::new(item.operator).map_err(|e| ItemError::Invalid {
            field: "operator",
            reason: e.to_string(),
        })?;
        let operation = item
            .operation
            .parse::<Operation>()
            .map_err(|e| ItemError::Invalid {
                field: "operation",
                reason: e.to_string(),
            })?;
        let created_at = parse_time("created_at", &item.created_at)?;
        let deadline = parse_time("deadline", &item.deadline)?;
        let outcome = item
            .outcome
            .map(serde_dynamo::from_attribute_value::<_, Outcome>)
            .transpose()
            .map_err(|e| ItemError::Invalid {
                field: "outcome",
                reason: e.to_string(),
            })?;
        Ok(StoredRequest {
            request: RequestRecord {
                request_id: item.request_id,
                operator,
                operation,
                params: item.params,
                created_at,
                deadline,
            },
            outcome,
        })
    }
}

/// Read a Requests table item — from `GetItem` or a stream record's
/// `NewImage` — as a request and its outcome.
///
/// Foreign items (no `record_type`), other record types, and request items
/// with a missing attribute, a bad operator id, an unknown operation or a bad
/// timestamp are refused with an [`ItemError`] that says which. Use
/// [`request_hints`] to learn what can still be read of a refused item.
pub fn request_from_item(item: impl Into<serde_dynamo::Item>) -> Result<StoredRequest, ItemError> {
    let item: serde_dynamo::Item = item.into();
    match item.get("record_type") {
        None => return Err(ItemError::NoRecordType),
        Some(serde_dynamo::AttributeValue::S(t)) if t == REQUEST_RECORD_TYPE => {}
        Some(serde_dynamo::AttributeValue::S(t)) => return Err(ItemError::NotARequest(t.clone())),
        Some(_) => {
            return Err(ItemError::Invalid {
                field: "record_type",
                reason: "not a string".into(),
            });
        }
    }
    let mut item = item;
    let outcome = item.remove("outcome");
    let mut raw: RequestItem = serde_dynamo::from_item(item)?;
    raw.outcome = outcome;
    raw.try_into()
}

/// The Requests table item of a new request, without an outcome.
pub fn request_to_item(request: &RequestRecord) -> Result<serde_dynamo::Item, ItemError> {
    Ok(serde_dynamo::to_item(NewRequestItem::new(request))?)
}

/// What can be read of an item that may not be a valid request, for the
/// failure event of a quarantined stream record.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestHints {
    pub request_id: Option<String>,
    /// As written, not validated.
    pub operator: Option<String>,
    pub operation: Option<Operation>,
    /// The item says `record_type = "request"`: it is one of ours, so a
    /// `malformed` outcome may be written to it.
    pub ours: bool,
}

/// Read the identifying attributes of an item without judging the rest.
pub fn request_hints(item: &serde_dynamo::Item) -> RequestHints {
    let string = |name: &str| match item.get(name) {
        Some(serde_dynamo::AttributeValue::S(s)) => Some(s.clone()),
        _ => None,
    };
    RequestHints {
        request_id: string("request_id"),
        operator: string("operator"),
        operation: string("operation").and_then(|o| o.parse().ok()),
        ours: string("record_type").as_deref() == Some(REQUEST_RECORD_TYPE),
    }
}

/// Where requests are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestTables {
    /// Every operator's requests in this table, on one stream (a shared lane).
    One(String),
    /// Operator `o`'s requests in the table `{prefix}{o}`, each on its own
    /// stream and mapping (a lane per operator).
    PerOperator { prefix: String },
}

impl RequestTables {
    /// The table holding `operator`'s requests.
    pub fn table_for(&self, operator: &OperatorId) -> Cow<'_, str> {
        match self {
            RequestTables::One(table) => Cow::Borrowed(table),
            RequestTables::PerOperator { prefix } => Cow::Owned(format!("{prefix}{operator}")),
        }
    }

    /// The operator whose own table `table` is, in a per-operator layout.
    pub fn operator_of(&self, table: &str) -> Option<OperatorId> {
        match self {
            RequestTables::One(_) => None,
            RequestTables::PerOperator { prefix } => table
                .strip_prefix(prefix.as_str())
                .and_then(|o| OperatorId::new(o).ok()),
        }
    }
}

/// [`RequestStore`] on DynamoDB tables with the design above.
#[derive(Debug, Clone)]
pub struct DynamoRequestStore {
    client: aws_sdk_dynamodb::Client,
    tables: RequestTables,
}

impl DynamoRequestStore {
    /// Every operator's requests in `table`.
    pub fn new(client: aws_sdk_dynamodb::Client, table: impl Into<String>) -> Self {
        Self::with_tables(client, RequestTables::One(table.into()))
    }

    pub fn with_tables(client: aws_sdk_dynamodb::Client, tables: RequestTables) -> Self {
        Self { client, tables }
    }

    pub fn tables(&self) -> &RequestTables {
        &self.tables
    }

    fn key(request_id: &str) -> (String, AttributeValue) {
        (
            "request_id".to_owned(),
            AttributeValue::S(request_id.to_owned()),
        )
    }

    /// What a conditional outcome write that failed ran into, judged by the
    /// item as it was: it has an outcome already, or it does not exist.
    fn judge_refused_outcome(
        request_id: &str,
        item: Option<&HashMap<String, AttributeValue>>,
    ) -> Result<OutcomeWrite, StoreError> {
        match item {
            Some(item) if item.contains_key("outcome") => Ok(OutcomeWrite::AlreadyPresent),
            Some(_) => Err(StoreError::Unavailable(format!(
                "outcome write for request {request_id} was refused although it has no outcome; try again"
            ))),
            None => Err(StoreError::Conflict(format!("no request {request_id}"))),
        }
    }

    async fn get_item(
        &self,
        table: &str,
        request_id: &str,
    ) -> Result<Option<HashMap<String, AttributeValue>>, StoreError> {
        let (k, v) = Self::key(request_id);
        let output = self
            .client
            .get_item()
            .table_name(table)
            .key(k, v)
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| StoreError::Unavailable(describe(&format!("GetItem {table}"), &e)))?;
        Ok(output.item)
    }
}

#[async_trait]
impl RequestStore for DynamoRequestStore {
    async fn put_request(&self, request: &RequestRecord) -> Result<(), StoreError> {
        let item = request_to_item(request).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let table = self.tables.table_for(&request.operator);
        let result = self
            .client
            .put_item()
            .table_name(table.as_ref())
            .set_item(Some(item.into()))
            .condition_expression("attribute_not_exists(#id)")
            .expression_attribute_names("#id", "request_id")
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
            {
                Err(StoreError::Conflict(format!(
                    "request {} exists",
                    request.request_id
                )))
            }
            Err(e) => Err(StoreError::Unavailable(describe(
                &format!("PutItem {table}"),
                &e,
            ))),
        }
    }

    async fn get(
        &self,
        operator: &OperatorId,
        request_id: &str,
    ) -> Result<Option<StoredRequest>, StoreError> {
        let table = self.tables.table_for(operator);
        self.get_item(&table, request_id)
            .await?
            .map(|item| {
                request_from_item(item).map_err(|e| {
                    StoreError::Corrupt(format!("request {request_id} in table {table}: {e}"))
                })
            })
            .transpose()
    }

    async fn write_outcome(
        &self,
        operator: &OperatorId,
        request_id: &str,
        outcome: &Outcome,
    ) -> Result<OutcomeWrite, StoreError> {
        let value: AttributeValue = serde_dynamo::to_attribute_value(outcome)
            .map_err(|e| StoreError::Corrupt(format!("outcome of request {request_id}: {e}")))?;
        let table = self.tables.table_for(operator);
        let (k, v) = Self::key(request_id);
        // One outcome per request; a consumer's may take the place of the
        // asker's close (Outcome::replaces).
        let mut update = self
            .client
            .update_item()
            .table_name(table.as_ref())
            .key(k, v)
            .update_expression("SET #outcome = :outcome")
            .expression_attribute_names("#id", "request_id")
            .expression_attribute_names("#outcome", "outcome")
            .expression_attribute_values(":outcome", value);
        update = if outcome.is_askers_close() {
            update.condition_expression("attribute_exists(#id) AND attribute_not_exists(#outcome)")
        } else {
            let [search, worker] = ASKERS_CLOSES;
            update
                .condition_expression(
                    "attribute_exists(#id) AND (attribute_not_exists(#outcome) OR #outcome.#by IN (:search, :worker))",
                )
                .expression_attribute_names("#by", "by")
                .expression_attribute_values(":search", AttributeValue::S(search.into()))
                .expression_attribute_values(":worker", AttributeValue::S(worker.into()))
        };
        let result = update
            // The refused write says what it ran into: no second read needed.
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok(OutcomeWrite::Written),
            Err(e) => match e.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(failed)) => {
                    match failed.item() {
                        Some(item) => Self::judge_refused_outcome(request_id, Some(item)),
                        // No old item came back: the request does not exist, or the
                        // service ignored ReturnValuesOnConditionCheckFailure. A
                        // consistent read tells which.
                        None => {
                            let item = self.get_item(&table, request_id).await?;
                            Self::judge_refused_outcome(request_id, item.as_ref())
                        }
                    }
                }
                // An item too large (or otherwise invalid) is refused
                // whatever happens next: retrying would only call the
                // operator again.
                Some(service) if service.code() == Some("ValidationException") => Err(
                    StoreError::Rejected(describe(&format!("UpdateItem {table}"), &e)),
                ),
                _ => Err(StoreError::Unavailable(describe(
                    &format!("UpdateItem {table}"),
                    &e,
                ))),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_tables_name_each_operator_s_table() {
        let nordic = OperatorId::new("nordic").unwrap();
        let one = RequestTables::One("Requests".into());
        assert_eq!(one.table_for(&nordic), "Requests");
        assert_eq!(one.operator_of("Requests"), None);
        let per = RequestTables::PerOperator {
            prefix: "lifeboat.requests.".into(),
        };
        assert_eq!(per.table_for(&nordic), "lifeboat.requests.nordic");
        assert_eq!(per.operator_of("lifeboat.requests.nordic"), Some(nordic));
        assert_eq!(per.operator_of("lifeboat.requests."), None);
        assert_eq!(per.operator_of("other-requests-nordic"), None);
        // Another stack's lane, whose name begins with this stack's: stack
        // names have no '.', so it cannot share the prefix.
        assert_eq!(per.operator_of("lifeboat-requests-x.requests.nordic"), None);
        assert_eq!(per.operator_of("lifeboat.requests.Not_An_Id"), None);
    }
    use chrono::{DateTime, Utc};
    use lifeboat_core::request::FailureReason;
    use serde_dynamo::AttributeValue as Av;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(s, 0).unwrap()
    }

    fn request() -> RequestRecord {
        RequestRecord {
            request_id: "r-1".into(),
            operator: OperatorId::new("nordic").unwrap(),
            operation: Operation::Price,
            params: BTreeMap::from([
                ("from".to_owned(), "HEL".to_owned()),
                ("to".to_owned(), "TLL".to_owned()),
            ]),
            created_at: at(1_700_000_000),
            deadline: DateTime::from_timestamp(1_700_000_003, 250_000_000).unwrap(),
        }
    }

    #[test]
    fn request_items_have_the_table_design() {
        let item = request_to_item(&request()).unwrap();
        assert_eq!(item.get("request_id"), Some(&Av::S("r-1".into())));
        assert_eq!(item.get("record_type"), Some(&Av::S("request".into())));
        assert_eq!(item.get("operator"), Some(&Av::S("nordic".into())));
        assert_eq!(item.get("operation"), Some(&Av::S("price".into())));
        assert_eq!(
            item.get("created_at"),
            Some(&Av::S("2023-11-14T22:13:20Z".into()))
        );
        assert_eq!(
            item.get("deadline"),
            Some(&Av::S("2023-11-14T22:13:23.250Z".into()))
        );
        assert_eq!(
            item.get("expires_at"),
            Some(&Av::N((1_700_000_003 + 86_400).to_string()))
        );
        match item.get("params") {
            Some(Av::M(m)) => assert_eq!(m.get("from"), Some(&Av::S("HEL".into()))),
            other => panic!("params: {other:?}"),
        }
        assert!(!item.contains_key("outcome"));
    }

    #[test]
    fn request_items_round_trip_with_their_outcome() {
        let mut item = request_to_item(&request()).unwrap();
        let back = request_from_item(item.clone()).unwrap();
        assert_eq!(back.request, request());
        assert_eq!(back.outcome, None);

        let mut outcome = Outcome::failed(
            FailureReason::Timeout,
            "no answer in 3 s",
            at(1_700_000_004),
            "real-consumer",
        );
        outcome.call_ms = Some(3000);
        item.insert(
            "outcome".into(),
            serde_dynamo::to_attribute_value(&outcome).unwrap(),
        );
        let back = request_from_item(item).unwrap();
        assert_eq!(back.outcome, Some(outcome));
    }

    #[test]
    fn the_stream_consumers_serde_form_reads_our_items() {
        // lifeboat-stream reads NewImages with serde_dynamo into RequestRecord.
        let item = request_to_item(&request()).unwrap();
        let read: RequestRecord = serde_dynamo::from_item(item).unwrap();
        assert_eq!(read, request());
    }

    #[test]
    fn foreign_and_malformed_items_are_refused_with_a_reason() {
        let good = request_to_item(&request()).unwrap();
        let with = |name: &str, value: Option<Av>| {
            let mut item = good.clone();
            match value {
                Some(v) => item.insert(name.to_owned(), v),
                None => item.remove(name),
            };
            request_from_item(item)
        };
        assert_eq!(with("record_type", None), Err(ItemError::NoRecordType));
        assert_eq!(
            with("record_type", Some(Av::S("counter".into()))),
            Err(ItemError::NotARequest("counter".into()))
        );
        assert!(matches!(
            with("record_type", Some(Av::N("1".into()))),
            Err(ItemError::Invalid {
                field: "record_type",
                ..
            })
        ));
        assert!(matches!(
            with("operator", Some(Av::S("BAD OP".into()))),
            Err(ItemError::Invalid {
                field: "operator",
                ..
            })
        ));
        assert!(matches!(
            with("operation", Some(Av::S("refund".into()))),
            Err(ItemError::Invalid {
                field: "operation",
                ..
            })
        ));
        assert!(matches!(
            with("deadline", Some(Av::S("tomorrow".into()))),
            Err(ItemError::Invalid {
                field: "deadline",
                ..
            })
        ));
        assert!(matches!(
            with("created_at", Some(Av::N("1700000000".into()))),
            Err(ItemError::Schema(_))
        ));
        assert!(
            matches!(with("operator", None), Err(ItemError::Schema(m)) if m.contains("operator"))
        );
        assert!(matches!(
            with(
                "outcome",
                Some(Av::M(HashMap::from([(
                    "status".into(),
                    Av::S("maybe".into())
                )])))
            ),
            Err(ItemError::Invalid {
                field: "outcome",
                ..
            })
        ));
        // Absent params are no params, as in the record's serde form.
        assert_eq!(
            with("params", None).unwrap().request.params,
            BTreeMap::new()
        );
    }

    #[test]
    fn hints_read_what_they_can() {
        let mut item = request_to_item(&request()).unwrap();
        item.insert("operator".into(), Av::S("BAD OP".into()));
        item.remove("deadline");
        assert_eq!(
            request_hints(&item),
            RequestHints {
                request_id: Some("r-1".into()),
                operator: Some("BAD OP".into()),
                operation: Some(Operation::Price),
                ours: true,
            }
        );
        let foreign =
            serde_dynamo::Item::from(HashMap::from([("Id".to_owned(), Av::N("101".into()))]));
        assert_eq!(request_hints(&foreign), RequestHints::default());
    }

    #[test]
    fn refused_outcome_writes_are_judged_by_the_old_item() {
        let with_outcome = HashMap::from([
            ("request_id".to_owned(), AttributeValue::S("r-1".into())),
            ("outcome".to_owned(), AttributeValue::M(HashMap::new())),
        ]);
        assert_eq!(
            DynamoRequestStore::judge_refused_outcome("r-1", Some(&with_outcome)).unwrap(),
            OutcomeWrite::AlreadyPresent
        );
        assert!(matches!(
            DynamoRequestStore::judge_refused_outcome("r-1", None),
            Err(StoreError::Conflict(_))
        ));
    }

    fn refused(item: Option<HashMap<String, AttributeValue>>) -> UpdateItemError {
        let mut failed = aws_sdk_dynamodb::types::error::ConditionalCheckFailedException::builder()
            .message("The conditional request failed");
        for (k, v) in item.unwrap_or_default() {
            failed = failed.item(k, v);
        }
        UpdateItemError::ConditionalCheckFailedException(failed.build())
    }

    #[tokio::test]
    async fn a_refused_write_with_the_old_item_needs_no_second_read() {
        use aws_sdk_dynamodb::Client;
        use aws_smithy_mocks::{RuleMode, mock, mock_client};
        let update = mock!(Client::update_item).then_error(|| {
            refused(Some(HashMap::from([
                ("request_id".to_owned(), AttributeValue::S("r-1".into())),
                ("outcome".to_owned(), AttributeValue::M(HashMap::new())),
            ])))
        });
        // No GetItem rule: a second read would fail the test.
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&update]);
        let store = DynamoRequestStore::new(client, "Requests");
        let outcome = Outcome::failed(FailureReason::Timeout, "t", at(1), "real-consumer");
        assert_eq!(
            store
                .write_outcome(&OperatorId::new("nordic").unwrap(), "r-1", &outcome)
                .await
                .unwrap(),
            OutcomeWrite::AlreadyPresent
        );
    }

    #[tokio::test]
    async fn a_refused_write_without_the_old_item_reads_to_tell_why() {
        use aws_sdk_dynamodb::Client;
        use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
        use aws_smithy_mocks::{RuleMode, mock, mock_client};
        let update = mock!(Client::update_item).then_error(|| refused(None));
        let missing = mock!(Client::get_item)
            .match_requests(|r| r.consistent_read() == Some(true))
            .then_output(|| GetItemOutput::builder().build());
        let client = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, [&update, &missing]);
        let store = DynamoRequestStore::new(client, "Requests");
        let outcome = Outcome::failed(FailureReason::Timeout, "t", at(1), "real-consumer");
        assert!(matches!(
            store
                .write_outcome(&OperatorId::new("nordic").unwrap(), "r-1", &outcome)
                .await,
            Err(StoreError::Conflict(_))
        ));
        assert_eq!(missing.num_calls(), 1);
    }
}
