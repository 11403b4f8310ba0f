//! The Carts table on DynamoDB: one item per cart.
//!
//! Partition key `cart_id` (S). Every [`Cart`] field is an attribute with its
//! serde form: `revision` (N), `operator` (S), `sailing`, `extras` and the
//! optional `accommodation`, `price`, `degraded`, `price_change` and
//! `confirmation` as maps (absent when the cart has none), `created_at` and
//! `updated_at` as RFC 3339 (S), `steps`, the step history, as a list of
//! maps (absent when empty: carts stored before it was kept read as having
//! none), and `owner` (S), the subject of the token the cart was opened
//! with (absent for a cart opened without one; carts stored before owners
//! were kept read as having none). Besides them `expires_at` (N, epoch
//! seconds, the table's TTL) is `updated_at` + [`CART_TTL`], so a cart
//! nobody touches for that long is forgotten.
//!
//! A save is one `PutItem` on the condition that the stored `revision` is the
//! one the cart was read at (`attribute_not_exists(cart_id)` for a new cart),
//! so of two requests that change the same cart at once only one lands and
//! the other gets `Conflict`. Reads are strongly consistent: a customer's next
//! step always sees their last one.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, TimeDelta, Utc};
use lifeboat_core::cart::{
    Accommodation, Cart, CartPrice, Confirmation, Degraded, Extras, PriceChange, Sailing,
    StepRecord,
};
use lifeboat_core::operator::OperatorId;
use lifeboat_core::ports::{CartStore, StoreError};
use serde::{Deserialize, Serialize};

use crate::error::describe;
use crate::item::ItemError;

/// How long after its last change a cart is kept (DynamoDB TTL).
pub const CART_TTL: TimeDelta = TimeDelta::days(30);

/// A cart item, as written and read.
#[derive(Serialize, Deserialize)]
struct CartItem {
    cart_id: String,
    revision: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owner: Option<String>,
    operator: String,
    sailing: Sailing,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    accommodation: Option<Accommodation>,
    extras: Extras,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    price: Option<CartPrice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    degraded: Option<Degraded>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    price_change: Option<PriceChange>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    confirmation: Option<Confirmation>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    steps: Vec<StepRecord>,
    /// DynamoDB's business, not the cart's: written, never read.
    #[serde(skip_deserializing)]
    expires_at: i64,
}

impl From<&Cart> for CartItem {
    fn from(c: &Cart) -> Self {
        let expires_at = c
            .updated_at
            .checked_add_signed(CART_TTL)
            .unwrap_or(DateTime::<Utc>::MAX_UTC)
            .timestamp();
        Self {
            cart_id: c.cart_id.clone(),
            revision: c.revision,
            owner: c.owner.clone(),
            operator: c.operator.as_str().to_owned(),
            sailing: c.sailing.clone(),
            accommodation: c.accommodation.clone(),
            extras: c.extras.clone(),
            price: c.price.clone(),
            degraded: c.degraded.clone(),
            price_change: c.price_change.clone(),
            confirmation: c.confirmation.clone(),
            created_at: c.created_at,
            updated_at: c.updated_at,
            steps: c.steps.clone(),
            expires_at,
        }
    }
}

impl TryFrom<CartItem> for Cart {
    type Error = ItemError;

    fn try_from(i: CartItem) -> Result<Self, ItemError> {
        if i.cart_id.is_empty() {
            return Err(ItemError::Invalid {
                field: "cart_id",
                reason: "empty".into(),
            });
        }
        let operator = OperatorId::new(i.operator).map_err(|e| ItemError::Invalid {
            field: "operator",
            reason: e.to_string(),
        })?;
        Ok(Cart {
            cart_id: i.cart_id,
            revision: i.revision,
            owner: i.owner,
            operator,
            sailing: i.sailing,
            accommodation: i.accommodation,
            extras: i.extras,
            price: i.price,
            degraded: i.degraded,
            price_change: i.price_change,
            confirmation: i.confirmation,
            created_at: i.created_at,
            updated_at: i.updated_at,
            steps: i.steps,
        })
    }
}

/// A Carts-table item read as a cart: every attribute the design requires
/// there and valid (the store's `get` and `all` read items with it).
pub fn cart_from_item(item: HashMap<String, AttributeValue>) -> Result<Cart, ItemError> {
    let raw: CartItem = serde_dynamo::from_item(item)?;
    raw.try_into()
}

/// The item `save` writes for `cart`, its TTL included; [`cart_from_item`]
/// reads it back as the same cart.
pub fn cart_to_item(cart: &Cart) -> Result<HashMap<String, AttributeValue>, ItemError> {
    Ok(serde_dynamo::to_item(CartItem::from(cart))?)
}

/// [`CartStore`] on the Carts table.
#[derive(Debug, Clone)]
pub struct DynamoCartStore {
    client: aws_sdk_dynamodb::Client,
    table: String,
}

impl DynamoCartStore {
    pub fn new(client: aws_sdk_dynamodb::Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    /// Every cart in the table (a `Scan`: for an operator's command, never
    /// for a function's invocation), with a note for each item that is not
    /// a readable cart.
    pub async fn all(&self) -> Result<(Vec<Cart>, Vec<String>), StoreError> {
        let mut carts = Vec::new();
        let mut unreadable = Vec::new();
        for item in crate::item::scan_all(&self.client, &self.table).await? {
            let id = match item.get("cart_id") {
                Some(AttributeValue::S(id)) => id.clone(),
                _ => "(no cart_id)".to_owned(),
            };
            match cart_from_item(item) {
                Ok(cart) => carts.push(cart),
                Err(e) => unreadable.push(format!("cart {id} in table {}: {e}", self.table)),
            }
        }
        Ok((carts, unreadable))
    }
}

#[async_trait]
impl CartStore for DynamoCartStore {
    async fn get(&self, cart_id: &str) -> Result<Option<Cart>, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("cart_id", AttributeValue::S(cart_id.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| {
                StoreError::Unavailable(describe(&format!("GetItem {}", self.table), &e))
            })?;
        output
            .item
            .map(|item| {
                cart_from_item(item).map_err(|e| {
                    StoreError::Corrupt(format!("cart {cart_id} in table {}: {e}", self.table))
                })
            })
            .transpose()
    }

    async fn save(&self, cart: &Cart, expected_revision: Option<u64>) -> Result<(), StoreError> {
        let item = cart_to_item(cart)
            .map_err(|e| StoreError::Corrupt(format!("cart {}: {e}", cart.cart_id)))?;
        let request = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .expression_attribute_names("#id", "cart_id");
        let request = match expected_revision {
            None => request.condition_expression("attribute_not_exists(#id)"),
            Some(r) => request
                .condition_expression("attribute_exists(#id) AND #revision = :expected")
                .expression_attribute_names("#revision", "revision")
                .expression_attribute_values(":expected", AttributeValue::N(r.to_string())),
        };
        match request.send().await {
            Ok(_) => Ok(()),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
            {
                Err(StoreError::Conflict(match expected_revision {
                    None => format!("cart {} exists", cart.cart_id),
                    Some(r) => format!("cart {} is not at revision {r}", cart.cart_id),
                }))
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
    use lifeboat_core::cache::Source;
    use lifeboat_core::cart::{CartPolicy, ChosenBy, StepKind};

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    fn cart(off_sale: bool) -> Cart {
        let mut c = Cart::open(
            "c-1".into(),
            OperatorId::new("nordic").unwrap(),
            Sailing {
                sailing_id: "s-1".into(),
                from: "HEL".into(),
                to: "TLL".into(),
                date: "2026-12-24".into(),
                passengers: 2,
            },
            off_sale,
            &CartPolicy::default(),
            at(0),
        );
        c.revision = 1;
        c
    }

    fn to_item(c: &Cart) -> HashMap<String, AttributeValue> {
        serde_dynamo::to_item(CartItem::from(c)).unwrap()
    }

    #[test]
    fn a_new_cart_has_the_table_design() {
        let item = to_item(&cart(false));
        assert_eq!(item.get("cart_id"), Some(&AttributeValue::S("c-1".into())));
        assert_eq!(item.get("revision"), Some(&AttributeValue::N("1".into())));
        assert_eq!(
            item.get("expires_at"),
            Some(&AttributeValue::N(
                (1_800_000_000 + 30 * 86_400).to_string()
            ))
        );
        assert_eq!(
            item.get("created_at"),
            Some(&AttributeValue::S("2027-01-15T08:00:00Z".into()))
        );
        for absent in [
            "accommodation",
            "price",
            "degraded",
            "price_change",
            "confirmation",
            "steps",
            "owner",
        ] {
            assert!(!item.contains_key(absent), "{absent} is written as absent");
        }
        assert_eq!(cart_from_item(item).unwrap(), cart(false));
    }

    #[test]
    fn every_step_round_trips() {
        let mut c = cart(true);
        c.set_price(
            CartPrice {
                amount_cents: 9_900,
                currency: "EUR".into(),
                source: Source::LastGood,
                as_of: at(-3600),
                parts: Vec::new(),
                covers: Default::default(),
                absorbed_cents: 0,
            },
            &CartPolicy::default(),
            at(5),
        )
        .unwrap();
        c.confirm_cached(None, &CartPolicy::default(), at(6))
            .unwrap();
        c.record_step(StepRecord {
            step: StepKind::Confirm,
            at: at(6),
            status: 409,
            price_change_shown: true,
        });
        c.record_step(StepRecord {
            step: StepKind::Confirm,
            at: at(7),
            status: 200,
            price_change_shown: false,
        });
        c.revision = 7;
        assert_eq!(
            c.accommodation.as_ref().map(|a| a.chosen_by),
            Some(ChosenBy::DefaultWhileOffSale)
        );
        let item = to_item(&c);
        assert_eq!(
            item.get("expires_at"),
            Some(&AttributeValue::N(
                (1_800_000_006 + 30 * 86_400).to_string()
            ))
        );
        let Some(AttributeValue::L(steps)) = item.get("steps") else {
            panic!("steps are a list: {item:?}")
        };
        assert_eq!(steps.len(), 2);
        let AttributeValue::M(first) = &steps[0] else {
            panic!("a step is a map")
        };
        assert_eq!(
            first.get("step"),
            Some(&AttributeValue::S("confirm".into()))
        );
        assert_eq!(
            first.get("price_change_shown"),
            Some(&AttributeValue::Bool(true))
        );
        let AttributeValue::M(second) = &steps[1] else {
            panic!("a step is a map")
        };
        assert!(!second.contains_key("price_change_shown"));
        assert_eq!(cart_from_item(item).unwrap(), c);

        let mut chosen = cart(false);
        chosen.choose_extras(vec![], true, at(1)).unwrap();
        assert_eq!(cart_from_item(to_item(&chosen)).unwrap(), chosen);
        chosen
            .choose_extras(vec!["meal".into(), "wifi".into()], true, at(2))
            .unwrap();
        assert_eq!(cart_from_item(to_item(&chosen)).unwrap(), chosen);
    }

    #[test]
    fn a_carts_owner_is_kept_in_its_item() {
        let mut owned = cart(false);
        owned.owner = Some("customer-7f3a".into());
        let item = to_item(&owned);
        assert_eq!(
            item.get("owner"),
            Some(&AttributeValue::S("customer-7f3a".into()))
        );
        assert_eq!(cart_from_item(item).unwrap(), owned);
        // An item written before carts had owners reads as a cart without one.
        let mut old = to_item(&owned);
        old.remove("owner");
        assert_eq!(cart_from_item(old).unwrap().owner, None);
    }

    #[test]
    fn bad_cart_items_are_refused_with_a_reason() {
        let mut item = to_item(&cart(false));
        item.insert("operator".into(), AttributeValue::S("BAD OP".into()));
        assert!(matches!(
            cart_from_item(item),
            Err(ItemError::Invalid {
                field: "operator",
                ..
            })
        ));
        let mut item = to_item(&cart(false));
        item.remove("revision");
        assert!(
            matches!(cart_from_item(item), Err(ItemError::Schema(m)) if m.contains("revision"))
        );
        let mut item = to_item(&cart(false));
        item.insert(
            "extras".into(),
            AttributeValue::M(HashMap::from([(
                "step".to_owned(),
                AttributeValue::S("lost".into()),
            )])),
        );
        assert!(matches!(cart_from_item(item), Err(ItemError::Schema(_))));
    }
}
