//! The SaleStatus table on DynamoDB: one sale record per operator, written
//! only by the off-sale listener.
//!
//! Partition key `operator` (S). The item holds every [`SaleRecord`] field:
//!
//! | attribute | type | |
//! |---|---|---|
//! | `operator` | S | partition key |
//! | `revision` | N | bumped by every save; the write condition |
//! | `applied_version` | N | the newest breaker version the switch holds (0: none) |
//! | `applied_status` | S | `on_sale` or `off_sale`: what the switch holds |
//! | `applied_at` | S | RFC 3339; absent until the first write |
//! | `pending` | M | the write still owed: `version`, `status`, `attempts`, `next_attempt_at`, `since`, `fault_published`, and `last_error`, `gave_up_at` when set; absent when nothing is owed |
//! | `lease` | M | the attempt in flight: `version`, `attempt`, `until`; absent when none is |
//! | `switch_unknown` | BOOL | `true` while an unconfirmed attempt of a replaced version may have reached the switch; absent when `false` |
//!
//! A save is one `PutItem` on the condition of
//! [`lifeboat_core::sale`]'s `attribute_not_exists(operator) OR revision =
//! :expected`, taken apart by case as in the in-memory store: a new record
//! (`expected_revision = None`) only where none is stored
//! (`attribute_not_exists(operator)`), any other only over the revision that
//! was loaded (`revision = :expected`, which no missing record meets). A load is a strongly consistent `GetItem`, so
//! the listener always plans from the newest record and the condition only
//! refuses a save when another delivery really saved in between. There is no
//! TTL: an operator's record lives as long as the operator.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use lifeboat_core::events::SaleStatus;
use lifeboat_core::operator::OperatorId;
use lifeboat_core::ports::{SaleStatusStore, StoreError};
use lifeboat_core::sale::{PendingWrite, SaleRecord, WriteLease};
use serde::{Deserialize, Serialize};

use crate::error::describe;
use crate::item::ItemError;

/// The `pending` map.
#[derive(Serialize, Deserialize)]
struct PendingItem {
    version: u64,
    status: SaleStatus,
    attempts: u32,
    next_attempt_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_error: Option<String>,
    since: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gave_up_at: Option<DateTime<Utc>>,
    fault_published: bool,
}

/// The `lease` map.
#[derive(Serialize, Deserialize)]
struct LeaseItem {
    version: u64,
    attempt: u32,
    until: DateTime<Utc>,
}

/// A sale record item, as written and read.
#[derive(Serialize, Deserialize)]
struct SaleItem {
    operator: String,
    revision: u64,
    applied_version: u64,
    applied_status: SaleStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    applied_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pending: Option<PendingItem>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lease: Option<LeaseItem>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    switch_unknown: bool,
}

impl From<&SaleRecord> for SaleItem {
    fn from(r: &SaleRecord) -> Self {
        Self {
            operator: r.operator.as_str().to_owned(),
            revision: r.revision,
            applied_version: r.applied_version,
            applied_status: r.applied_status,
            applied_at: r.applied_at,
            pending: r.pending.as_ref().map(|p| PendingItem {
                version: p.version,
                status: p.status,
                attempts: p.attempts,
                next_attempt_at: p.next_attempt_at,
                last_error: p.last_error.clone(),
                since: p.since,
                gave_up_at: p.gave_up_at,
                fault_published: p.fault_published,
            }),
            lease: r.lease.as_ref().map(|l| LeaseItem {
                version: l.version,
                attempt: l.attempt,
                until: l.until,
            }),
            switch_unknown: r.switch_unknown,
        }
    }
}

impl TryFrom<SaleItem> for SaleRecord {
    type Error = ItemError;

    fn try_from(i: SaleItem) -> Result<Self, ItemError> {
        let operator = OperatorId::new(i.operator).map_err(|e| ItemError::Invalid {
            field: "operator",
            reason: e.to_string(),
        })?;
        Ok(SaleRecord {
            operator,
            revision: i.revision,
            applied_version: i.applied_version,
            applied_status: i.applied_status,
            applied_at: i.applied_at,
            pending: i.pending.map(|p| PendingWrite {
                version: p.version,
                status: p.status,
                attempts: p.attempts,
                next_attempt_at: p.next_attempt_at,
                last_error: p.last_error,
                since: p.since,
                gave_up_at: p.gave_up_at,
                fault_published: p.fault_published,
            }),
            lease: i.lease.map(|l| WriteLease {
                version: l.version,
                attempt: l.attempt,
                until: l.until,
            }),
            switch_unknown: i.switch_unknown,
        })
    }
}

/// A SaleStatus-table item read as a sale record (the store's `load`).
pub fn record_from_item(item: HashMap<String, AttributeValue>) -> Result<SaleRecord, ItemError> {
    let raw: SaleItem = serde_dynamo::from_item(item)?;
    raw.try_into()
}

/// The item `save` writes for `record`; [`record_from_item`] reads it back
/// as the same record.
pub fn record_to_item(record: &SaleRecord) -> Result<HashMap<String, AttributeValue>, ItemError> {
    Ok(serde_dynamo::to_item(SaleItem::from(record))?)
}

/// [`SaleStatusStore`] on the SaleStatus table.
#[derive(Debug, Clone)]
pub struct DynamoSaleStatusStore {
    client: aws_sdk_dynamodb::Client,
    table: String,
}

impl DynamoSaleStatusStore {
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
impl SaleStatusStore for DynamoSaleStatusStore {
    async fn load(&self, operator: &OperatorId) -> Result<Option<SaleRecord>, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("operator", AttributeValue::S(operator.as_str().to_owned()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| {
                StoreError::Unavailable(describe(&format!("GetItem {}", self.table), &e))
            })?;
        output
            .item
            .map(|item| {
                record_from_item(item).map_err(|e| {
                    StoreError::Corrupt(format!(
                        "sale record of {operator} in table {}: {e}",
                        self.table
                    ))
                })
            })
            .transpose()
    }

    async fn save(
        &self,
        record: &SaleRecord,
        expected_revision: Option<u64>,
    ) -> Result<(), StoreError> {
        let item = record_to_item(record)
            .map_err(|e| StoreError::Corrupt(format!("sale record of {}: {e}", record.operator)))?;
        let request = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item));
        let request = crate::item::on_revision(request, "operator", expected_revision);
        match request.send().await {
            Ok(_) => Ok(()),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
            {
                Err(StoreError::Conflict(format!(
                    "sale record of {} is not at revision {expected_revision:?}",
                    record.operator
                )))
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
    use chrono::TimeDelta;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_796_032_800 + s, 0).unwrap()
    }

    fn busy() -> SaleRecord {
        let mut r = SaleRecord::new(OperatorId::new("nordic").unwrap());
        r.revision = 4;
        r.applied_version = 3;
        r.applied_status = SaleStatus::OffSale;
        r.applied_at = Some(at(0));
        r.pending = Some(PendingWrite {
            version: 5,
            status: SaleStatus::OnSale,
            attempts: 2,
            next_attempt_at: at(15),
            last_error: Some("sale switch answered 503 Service Unavailable".into()),
            since: at(1),
            gave_up_at: None,
            fault_published: false,
        });
        r.lease = Some(WriteLease {
            version: 5,
            attempt: 2,
            until: at(5) + TimeDelta::milliseconds(250),
        });
        r.switch_unknown = true;
        r
    }

    fn to_item(r: &SaleRecord) -> HashMap<String, AttributeValue> {
        serde_dynamo::to_item(SaleItem::from(r)).unwrap()
    }

    #[test]
    fn sale_records_have_the_table_design_and_round_trip() {
        let item = to_item(&busy());
        assert_eq!(item.get("revision"), Some(&AttributeValue::N("4".into())));
        assert_eq!(
            item.get("applied_status"),
            Some(&AttributeValue::S("off_sale".into()))
        );
        let Some(AttributeValue::M(pending)) = item.get("pending") else {
            panic!("pending is a map: {item:?}");
        };
        assert_eq!(
            pending.get("status"),
            Some(&AttributeValue::S("on_sale".into()))
        );
        assert!(!pending.contains_key("gave_up_at"));
        assert_eq!(
            item.get("switch_unknown"),
            Some(&AttributeValue::Bool(true))
        );
        assert_eq!(record_from_item(item).unwrap(), busy());

        let idle = SaleRecord::new(OperatorId::new("baltic").unwrap());
        let item = to_item(&idle);
        for absent in ["applied_at", "pending", "lease", "switch_unknown"] {
            assert!(!item.contains_key(absent), "{absent} is written as absent");
        }
        assert_eq!(record_from_item(item).unwrap(), idle);
    }

    #[test]
    fn bad_sale_items_are_refused_with_a_reason() {
        let mut item = to_item(&busy());
        item.insert("applied_status".into(), AttributeValue::S("maybe".into()));
        assert!(matches!(record_from_item(item), Err(ItemError::Schema(_))));
        let mut item = to_item(&busy());
        item.remove("revision");
        assert!(
            matches!(record_from_item(item), Err(ItemError::Schema(m)) if m.contains("revision"))
        );
        let mut item = to_item(&busy());
        item.insert("operator".into(), AttributeValue::S("".into()));
        assert!(matches!(
            record_from_item(item),
            Err(ItemError::Invalid {
                field: "operator",
                ..
            })
        ));
    }
}
