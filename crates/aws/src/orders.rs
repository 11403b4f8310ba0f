//! The Orders table on DynamoDB: held orders, and the passengers held on
//! each sailing.
//!
//! Two kinds of item share the partition key `pk` (S):
//!
//! - an order, `pk` = its `order_id` (`lb-<cart id>`): every [`HeldOrder`]
//!   field as an attribute with its serde form (`state` a map tagged by
//!   its `state`, `history` a list of maps), plus, while the order is not
//!   final, `open_operator` (S, the operator) and `open_at` (N,
//!   [`HeldOrder::open_at`] in epoch milliseconds: `held_at`, or the
//!   customer's deadline while the customer is asked), which put it in the
//!   sparse index `open-by-operator` (partition `open_operator`, sort
//!   `open_at`): an operator's open orders, oldest held first, without a
//!   scan. `expires_at`
//!   (N, the table's TTL) is `held_at` + [`ORDER_TTL`];
//! - a sailing, `pk` = `sailing#<operator>#<sailing id>`, with `held` (N),
//!   the passengers of the sailing's open orders.
//!
//! Holding an order is one `TransactWriteItems`: the order put on the
//! condition that it does not exist, and the sailing's `held` raised by its
//! passengers on the condition that it stays within the cap. Either both
//! land or neither: a retried confirm finds its order there and counts
//! nothing twice, and two confirms racing for the last seats cannot both
//! have them. An order's move to a final state gives its passengers back in
//! the same transaction as its put.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem, Update};
use chrono::{DateTime, TimeDelta, Utc};
use lifeboat_core::operator::OperatorId;
use lifeboat_core::order::HeldOrder;
use lifeboat_core::ports::{Held, OrderStore, StoreError};
use serde::{Deserialize, Serialize};

use crate::error::describe;
use crate::item::ItemError;

/// How long after it was held an order is kept (DynamoDB TTL).
pub const ORDER_TTL: TimeDelta = TimeDelta::days(90);

/// The sparse index of open orders by operator.
pub const OPEN_BY_OPERATOR: &str = "open-by-operator";

/// An order item, as written and read.
#[derive(Serialize, Deserialize)]
struct OrderItem {
    pk: String,
    #[serde(flatten)]
    order: HeldOrder,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    open_operator: Option<String>,
    /// The index's sort key: RFC 3339 text with and without fractions of a
    /// second does not sort as time does, milliseconds do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    open_at: Option<i64>,
    /// DynamoDB's business, not the order's: written, never read.
    #[serde(skip_deserializing)]
    expires_at: i64,
}

/// The item `hold` and `save` write for `order`; [`order_from_item`] reads
/// it back as the same order.
pub fn order_to_item(order: &HeldOrder) -> Result<HashMap<String, AttributeValue>, ItemError> {
    let expires_at = order
        .held_at
        .checked_add_signed(ORDER_TTL)
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
        .timestamp();
    Ok(serde_dynamo::to_item(OrderItem {
        pk: order.order_id.clone(),
        order: order.clone(),
        open_operator: (!order.state.is_final()).then(|| order.operator.as_str().to_owned()),
        open_at: (!order.state.is_final()).then(|| order.open_at().timestamp_millis()),
        expires_at,
    })?)
}

/// An Orders-table item read as an order.
pub fn order_from_item(item: HashMap<String, AttributeValue>) -> Result<HeldOrder, ItemError> {
    let raw: OrderItem = serde_dynamo::from_item(item)?;
    if raw.pk != raw.order.order_id {
        return Err(ItemError::Invalid {
            field: "order_id",
            reason: format!("{:?} under the key {:?}", raw.order.order_id, raw.pk),
        });
    }
    Ok(raw.order)
}

/// The key of the item counting the passengers held on a sailing.
pub fn sailing_key(operator: &OperatorId, sailing_id: &str) -> String {
    format!("sailing#{operator}#{sailing_id}")
}

/// [`OrderStore`] on the Orders table.
#[derive(Debug, Clone)]
pub struct DynamoOrderStore {
    client: aws_sdk_dynamodb::Client,
    table: String,
}

fn not_built(e: impl std::fmt::Display) -> StoreError {
    StoreError::Rejected(format!("a DynamoDB request could not be built: {e}"))
}

/// The codes of a cancelled transaction, one per item (`None` where the
/// item was not the reason).
fn cancellation_codes(
    cancelled: &aws_sdk_dynamodb::types::error::TransactionCanceledException,
) -> Vec<Option<String>> {
    cancelled
        .cancellation_reasons()
        .iter()
        .map(|r| r.code().filter(|c| *c != "None").map(str::to_owned))
        .collect()
}

impl DynamoOrderStore {
    pub fn new(client: aws_sdk_dynamodb::Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    /// Every order in the table (a paginated `Scan`; the sailings' items
    /// are passed over), for `lifeboat orders`. Items that are not readable
    /// orders are named in the second list, not dropped silently.
    pub async fn all(&self) -> Result<(Vec<HeldOrder>, Vec<String>), StoreError> {
        let mut orders = Vec::new();
        let mut unreadable = Vec::new();
        for item in crate::item::scan_all(&self.client, &self.table).await? {
            let pk = match item.get("pk") {
                Some(AttributeValue::S(pk)) => pk.clone(),
                _ => "(no pk)".to_owned(),
            };
            if pk.starts_with("sailing#") {
                continue;
            }
            match order_from_item(item) {
                Ok(order) => orders.push(order),
                Err(e) => unreadable.push(format!("order {pk} in table {}: {e}", self.table)),
            }
        }
        Ok((orders, unreadable))
    }

    fn item(order: &HeldOrder) -> Result<HashMap<String, AttributeValue>, StoreError> {
        order_to_item(order)
            .map_err(|e| StoreError::Corrupt(format!("order {}: {e}", order.order_id)))
    }

    fn unavailable<E, R>(
        &self,
        what: &str,
        e: &aws_sdk_dynamodb::error::SdkError<E, R>,
    ) -> StoreError
    where
        E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug,
    {
        StoreError::Unavailable(describe(&format!("{what} {}", self.table), e))
    }

    /// The sailing's `held` changed by `by` passengers, on `condition`.
    fn sailing_update(
        &self,
        order: &HeldOrder,
        by: i64,
        cap_left: Option<u32>,
    ) -> Result<TransactWriteItem, StoreError> {
        let update = Update::builder()
            .table_name(&self.table)
            .key(
                "pk",
                AttributeValue::S(sailing_key(&order.operator, &order.sailing.sailing_id)),
            )
            .update_expression("ADD #held :by")
            .expression_attribute_names("#held", "held")
            .expression_attribute_values(":by", AttributeValue::N(by.to_string()));
        let update = match cap_left {
            None => update,
            Some(left) => update
                .condition_expression("attribute_not_exists(#held) OR #held <= :left")
                .expression_attribute_values(":left", AttributeValue::N(left.to_string())),
        };
        Ok(TransactWriteItem::builder()
            .update(update.build().map_err(not_built)?)
            .build())
    }

    /// A put of `order` on the stored revision `expected`, and, when
    /// `give_back`, only if the stored order is still open, giving its
    /// passengers back in the same transaction.
    async fn put_at(
        &self,
        order: &HeldOrder,
        expected: u64,
        give_back: bool,
    ) -> Result<bool, StoreError> {
        let condition = if give_back {
            "#revision = :expected AND attribute_exists(#open)"
        } else {
            "#revision = :expected"
        };
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(Self::item(order)?))
            .condition_expression(condition)
            .expression_attribute_names("#revision", "revision")
            .expression_attribute_values(":expected", AttributeValue::N(expected.to_string()));
        let put = if give_back {
            put.expression_attribute_names("#open", "open_operator")
        } else {
            put
        };
        let mut request = self.client.transact_write_items().transact_items(
            TransactWriteItem::builder()
                .put(put.build().map_err(not_built)?)
                .build(),
        );
        if give_back {
            let passengers = i64::from(order.sailing.passengers);
            request = request.transact_items(self.sailing_update(order, -passengers, None)?);
        }
        match request.send().await {
            Ok(_) => Ok(true),
            Err(e) => match e.as_service_error() {
                Some(TransactWriteItemsError::TransactionCanceledException(cancelled))
                    if cancellation_codes(cancelled)
                        .first()
                        .is_some_and(|c| c.as_deref() == Some("ConditionalCheckFailed")) =>
                {
                    Ok(false)
                }
                _ => Err(self.unavailable("TransactWriteItems", &e)),
            },
        }
    }
}

#[async_trait]
impl OrderStore for DynamoOrderStore {
    async fn get(&self, order_id: &str) -> Result<Option<HeldOrder>, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(order_id.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.unavailable("GetItem", &e))?;
        output
            .item
            .map(|item| {
                order_from_item(item).map_err(|e| {
                    StoreError::Corrupt(format!("order {order_id} in table {}: {e}", self.table))
                })
            })
            .transpose()
    }

    async fn hold(&self, order: &HeldOrder, cap: Option<u32>) -> Result<Held, StoreError> {
        let passengers = u32::from(order.sailing.passengers);
        let cap_left = match cap.map(|cap| cap.checked_sub(passengers)) {
            // More passengers than the whole cap: nothing to try.
            Some(None) => {
                let held = self
                    .held_passengers(&order.operator, &order.sailing.sailing_id)
                    .await?;
                return Ok(Held::Full { held });
            }
            Some(Some(left)) => Some(left),
            None => None,
        };
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(Self::item(order)?))
            .condition_expression("attribute_not_exists(pk)");
        let result = self
            .client
            .transact_write_items()
            .transact_items(
                TransactWriteItem::builder()
                    .put(put.build().map_err(not_built)?)
                    .build(),
            )
            .transact_items(self.sailing_update(order, i64::from(passengers), cap_left)?)
            .send()
            .await;
        match result {
            Ok(_) => Ok(Held::Held),
            Err(e) => match e.as_service_error() {
                Some(TransactWriteItemsError::TransactionCanceledException(cancelled)) => {
                    let codes = cancellation_codes(cancelled);
                    let failed = |i: usize| {
                        codes.get(i).and_then(Option::as_deref) == Some("ConditionalCheckFailed")
                    };
                    if failed(0) {
                        Ok(Held::AlreadyHeld)
                    } else if failed(1) {
                        let held = self
                            .held_passengers(&order.operator, &order.sailing.sailing_id)
                            .await?;
                        Ok(Held::Full { held })
                    } else {
                        Err(self.unavailable("TransactWriteItems", &e))
                    }
                }
                _ => Err(self.unavailable("TransactWriteItems", &e)),
            },
        }
    }

    async fn save(&self, order: &HeldOrder, expected_revision: u64) -> Result<(), StoreError> {
        // A final order gives its passengers back if the stored one was
        // still open; if it was final already, a plain conditional put.
        if order.state.is_final() && self.put_at(order, expected_revision, true).await? {
            return Ok(());
        }
        if self.put_at(order, expected_revision, false).await? {
            return Ok(());
        }
        Err(StoreError::Conflict(format!(
            "order {} is not at revision {expected_revision}",
            order.order_id
        )))
    }

    async fn open_orders(
        &self,
        operator: &OperatorId,
        limit: usize,
    ) -> Result<Vec<HeldOrder>, StoreError> {
        let mut orders = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        while orders.len() < limit {
            let page = i32::try_from(limit - orders.len()).unwrap_or(i32::MAX);
            let output = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(OPEN_BY_OPERATOR)
                .key_condition_expression("#open = :operator")
                .expression_attribute_names("#open", "open_operator")
                .expression_attribute_values(":operator", AttributeValue::S(operator.to_string()))
                .scan_index_forward(true)
                .limit(page)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| self.unavailable("Query", &e))?;
            for item in output.items.unwrap_or_default() {
                let order = order_from_item(item).map_err(|e| {
                    StoreError::Corrupt(format!("an order of {operator} in {}: {e}", self.table))
                })?;
                orders.push(order);
            }
            match output.last_evaluated_key {
                Some(key) if !key.is_empty() => start = Some(key),
                _ => break,
            }
        }
        orders.truncate(limit);
        Ok(orders)
    }

    async fn held_passengers(
        &self,
        operator: &OperatorId,
        sailing_id: &str,
    ) -> Result<u32, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(sailing_key(operator, sailing_id)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.unavailable("GetItem", &e))?;
        match output.item.as_ref().and_then(|item| item.get("held")) {
            None => Ok(0),
            Some(AttributeValue::N(n)) => n.parse::<i64>().map_or_else(
                |e| {
                    Err(StoreError::Corrupt(format!(
                        "held passengers of {operator} {sailing_id}: {e}"
                    )))
                },
                |n| Ok(u32::try_from(n.max(0)).unwrap_or(u32::MAX)),
            ),
            Some(other) => Err(StoreError::Corrupt(format!(
                "held passengers of {operator} {sailing_id}: {other:?}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use lifeboat_core::cart::{Cart, CartPolicy, Confirmation, Sailing};
    use lifeboat_core::order::{BookingAnswer, HoldReason, OrderPolicy};

    use super::*;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap_or_default()
    }

    fn ok<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
        r.unwrap_or_else(|e| panic!("{e}"))
    }

    fn order() -> HeldOrder {
        let mut cart = Cart::open(
            "c-1".into(),
            ok(OperatorId::new("nordic")),
            Sailing {
                sailing_id: "s-1".into(),
                from: "HEL".into(),
                to: "TLL".into(),
                date: "2026-12-24".into(),
                passengers: 2,
            },
            true,
            &CartPolicy::default(),
            at(0),
        );
        cart.confirmation = Some(Confirmation {
            at: at(5),
            amount_cents: 9_900,
            currency: "EUR".into(),
            on_cached_price: true,
            price_as_of: at(-60),
            absorbed_cents: 0,
        });
        ok(HeldOrder::hold(
            &cart,
            Some("deck".into()),
            vec!["meal".into()],
            5,
            HoldReason::OffSale,
            at(5),
        ))
    }

    #[test]
    fn an_open_order_is_in_the_operators_index_and_a_final_one_is_not() {
        let mut o = order();
        let item = ok(order_to_item(&o));
        assert_eq!(item.get("pk"), Some(&AttributeValue::S("lb-c-1".into())));
        assert_eq!(
            item.get("open_operator"),
            Some(&AttributeValue::S("nordic".into()))
        );
        assert_eq!(
            item.get("open_at"),
            Some(&AttributeValue::N("1800000005000".into()))
        );
        assert_eq!(
            item.get("expires_at"),
            Some(&AttributeValue::N(
                (1_800_000_005 + 90 * 86_400).to_string()
            ))
        );
        assert_eq!(ok(order_from_item(item)), o);
        ok(o.start_booking(at(10)));
        ok(o.answer(BookingAnswer::SoldOut, &OrderPolicy::default(), at(11)));
        let item = ok(order_to_item(&o));
        assert!(!item.contains_key("open_operator"));
        assert!(!item.contains_key("open_at"));
        assert_eq!(ok(order_from_item(item)), o);
    }

    #[test]
    fn an_order_under_another_key_is_not_read() {
        let mut item = ok(order_to_item(&order()));
        item.insert("pk".into(), AttributeValue::S("lb-other".into()));
        assert!(order_from_item(item).is_err());
    }
}
