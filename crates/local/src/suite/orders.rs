//! The held orders of a run, read back from moto for the harness's report:
//! every order in the Orders table, and the order each booking call's
//! idempotency key was sent for, from the `book` requests in the Requests
//! tables. Whole-table scans: the suite's tables hold one run's items.

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::types::AttributeValue;
use lifeboat_aws::orders::DynamoOrderStore;
use lifeboat_core::order::HeldOrder;
use lifeboat_core::order::booking::{BOOK_REQUEST_PREFIX, parse_book_request_id};

use super::{LocalSuite, SuiteError};

type Item = HashMap<String, AttributeValue>;

fn text<'a>(item: &'a Item, name: &str) -> Option<&'a str> {
    item.get(name)
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
}

impl LocalSuite {
    /// Every order in the Orders table (its sailing items passed over), as
    /// `lifeboat orders` reads it (`DynamoOrderStore::all`). An item that
    /// does not read as an order is an error naming it.
    pub async fn orders(&self) -> Result<Vec<HeldOrder>, SuiteError> {
        self.customer_half()?;
        let table = &self.resources.names.orders_table;
        let store = DynamoOrderStore::new(aws_sdk_dynamodb::Client::new(&self.sdk), table);
        let read = |detail: String| SuiteError::Read {
            what: format!("the orders in {table}"),
            detail,
        };
        let (orders, unreadable) = store.all().await.map_err(|e| read(e.to_string()))?;
        if !unreadable.is_empty() {
            return Err(read(unreadable.join("; ")));
        }
        Ok(orders)
    }

    /// The order each idempotency key was sent for: the `book` requests of
    /// every lane, each key to the order its request id names.
    pub async fn booking_keys(&self) -> Result<BTreeMap<String, String>, SuiteError> {
        let tables = self
            .resources
            .lanes
            .iter()
            .map(|l| l.requests_table.clone());
        let mut keys = BTreeMap::new();
        for table in tables {
            for item in self.scan(&table, Some(BOOK_REQUEST_PREFIX)).await? {
                let order = text(&item, "request_id")
                    .and_then(parse_book_request_id)
                    .map(|(order, _)| order.to_owned());
                let key = item
                    .get("params")
                    .and_then(|p| p.as_m().ok())
                    .and_then(|p| p.get("idempotency_key"))
                    .and_then(|k| k.as_s().ok());
                if let (Some(order), Some(key)) = (order, key) {
                    keys.insert(key.clone(), order);
                }
            }
        }
        Ok(keys)
    }

    /// Every item of `table`, or only those whose `request_id` begins with
    /// `request_prefix`.
    async fn scan(
        &self,
        table: &str,
        request_prefix: Option<&str>,
    ) -> Result<Vec<Item>, SuiteError> {
        let client = aws_sdk_dynamodb::Client::new(&self.sdk);
        let mut items = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let mut scan = client
                .scan()
                .table_name(table)
                .set_exclusive_start_key(start.take());
            if let Some(prefix) = request_prefix {
                scan = scan
                    .filter_expression("begins_with(request_id, :prefix)")
                    .expression_attribute_values(":prefix", AttributeValue::S(prefix.to_owned()));
            }
            let page = scan.send().await.map_err(|e| SuiteError::Read {
                what: format!("Scan of {table}"),
                detail: DisplayErrorContext(e).to_string(),
            })?;
            items.extend(page.items.unwrap_or_default());
            match page.last_evaluated_key {
                Some(key) if !key.is_empty() => start = Some(key),
                _ => return Ok(items),
            }
        }
    }
}
