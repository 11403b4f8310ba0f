//! The Orders table in memory, with the passengers held on each sailing
//! kept as the DynamoDB adapter keeps them: counted when an order is held,
//! given back when it reaches a final state, in the same write.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;

use crate::operator::OperatorId;
use crate::order::HeldOrder;
use crate::ports::{Held, OrderStore, StoreError};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section below writes whole values.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Debug, Default)]
struct Tables {
    orders: HashMap<String, HeldOrder>,
    /// Passengers of open orders, by operator and sailing.
    held: BTreeMap<(OperatorId, String), u32>,
}

/// The Orders table in memory.
#[derive(Debug, Default)]
pub struct MemoryOrderStore {
    tables: Mutex<Tables>,
}

impl MemoryOrderStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Every order, oldest first.
    pub fn all(&self) -> Vec<HeldOrder> {
        let mut orders: Vec<HeldOrder> = lock(&self.tables).orders.values().cloned().collect();
        orders.sort_by(|a, b| (a.held_at, &a.order_id).cmp(&(b.held_at, &b.order_id)));
        orders
    }
}

fn sailing_of(order: &HeldOrder) -> (OperatorId, String) {
    (order.operator.clone(), order.sailing.sailing_id.clone())
}

#[async_trait]
impl OrderStore for MemoryOrderStore {
    async fn get(&self, order_id: &str) -> Result<Option<HeldOrder>, StoreError> {
        Ok(lock(&self.tables).orders.get(order_id).cloned())
    }

    async fn hold(&self, order: &HeldOrder, cap: Option<u32>) -> Result<Held, StoreError> {
        let mut tables = lock(&self.tables);
        if tables.orders.contains_key(&order.order_id) {
            return Ok(Held::AlreadyHeld);
        }
        let passengers = u32::from(order.sailing.passengers);
        let held = tables.held.get(&sailing_of(order)).copied().unwrap_or(0);
        if cap.is_some_and(|cap| held.saturating_add(passengers) > cap) {
            return Ok(Held::Full { held });
        }
        tables
            .held
            .insert(sailing_of(order), held.saturating_add(passengers));
        tables.orders.insert(order.order_id.clone(), order.clone());
        Ok(Held::Held)
    }

    async fn save(&self, order: &HeldOrder, expected_revision: u64) -> Result<(), StoreError> {
        let mut tables = lock(&self.tables);
        let Some(stored) = tables.orders.get(&order.order_id) else {
            return Err(StoreError::Conflict(format!(
                "order {} is not held",
                order.order_id
            )));
        };
        if stored.revision != expected_revision {
            return Err(StoreError::Conflict(format!(
                "order {} is at revision {}, not {expected_revision}",
                order.order_id, stored.revision
            )));
        }
        if !stored.state.is_final() && order.state.is_final() {
            let passengers = u32::from(order.sailing.passengers);
            if let Some(held) = tables.held.get_mut(&sailing_of(order)) {
                *held = held.saturating_sub(passengers);
            }
        }
        tables.orders.insert(order.order_id.clone(), order.clone());
        Ok(())
    }

    async fn open_orders(
        &self,
        operator: &OperatorId,
        limit: usize,
    ) -> Result<Vec<HeldOrder>, StoreError> {
        let mut open: Vec<HeldOrder> = lock(&self.tables)
            .orders
            .values()
            .filter(|o| &o.operator == operator && !o.state.is_final())
            .cloned()
            .collect();
        open.sort_by(|a, b| (a.open_at(), &a.order_id).cmp(&(b.open_at(), &b.order_id)));
        open.truncate(limit);
        Ok(open)
    }

    async fn held_passengers(
        &self,
        operator: &OperatorId,
        sailing_id: &str,
    ) -> Result<u32, StoreError> {
        Ok(lock(&self.tables)
            .held
            .get(&(operator.clone(), sailing_id.to_owned()))
            .copied()
            .unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Utc};

    use super::*;
    use crate::order::{BookingAnswer, HoldReason, OrderPolicy, confirmed_cart};

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap_or_default()
    }

    fn ok<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
        r.unwrap_or_else(|e| panic!("{e}"))
    }

    fn nordic() -> OperatorId {
        ok(OperatorId::new("nordic"))
    }

    /// The held order of cart `cart_id`: `passengers` on sailing s1.
    fn order(cart_id: &str, passengers: u8, held_at: i64) -> HeldOrder {
        let cart = confirmed_cart(cart_id, passengers, 5_000, at(held_at));
        let reason = HoldReason::OffSale;
        ok(HeldOrder::hold(
            &cart,
            None,
            Vec::new(),
            0,
            reason,
            at(held_at),
        ))
    }

    #[tokio::test]
    async fn passengers_are_held_up_to_the_cap_and_a_retried_hold_counts_once() {
        let store = MemoryOrderStore::new();
        assert_eq!(ok(store.hold(&order("a", 3, 1), Some(5)).await), Held::Held);
        assert_eq!(
            ok(store.hold(&order("a", 3, 2), Some(5)).await),
            Held::AlreadyHeld
        );
        assert_eq!(
            ok(store.hold(&order("b", 3, 3), Some(5)).await),
            Held::Full { held: 3 }
        );
        assert_eq!(
            ok(store.get("lb-b").await),
            None,
            "a full sailing writes nothing"
        );
        assert_eq!(ok(store.hold(&order("c", 2, 4), Some(5)).await), Held::Held);
        // On request: no cap, still counted.
        assert_eq!(ok(store.hold(&order("d", 4, 5), None).await), Held::Held);
        assert_eq!(ok(store.held_passengers(&nordic(), "s1").await), 9);
    }

    #[tokio::test]
    async fn a_final_order_gives_its_passengers_back_once() {
        let store = MemoryOrderStore::new();
        let mut a = order("a", 3, 1);
        ok(store.hold(&a, Some(10)).await);
        ok(store.hold(&order("b", 2, 2), Some(10)).await);
        ok(a.start_booking(at(10)));
        a.revision = 1;
        ok(store.save(&a, 0).await);
        assert_eq!(ok(store.held_passengers(&nordic(), "s1").await), 5);
        ok(a.answer(BookingAnswer::SoldOut, &OrderPolicy::default(), at(11)));
        a.revision = 2;
        ok(store.save(&a, 1).await);
        assert_eq!(ok(store.held_passengers(&nordic(), "s1").await), 2);
        // Saved again final (a later note on its history): not given twice.
        a.revision = 3;
        ok(store.save(&a, 2).await);
        assert_eq!(ok(store.held_passengers(&nordic(), "s1").await), 2);
        let open = ok(store.open_orders(&nordic(), 10).await);
        assert_eq!(
            open.iter().map(|o| o.order_id.as_str()).collect::<Vec<_>>(),
            ["lb-b"]
        );
    }

    #[tokio::test]
    async fn a_save_on_a_stale_revision_is_a_conflict() {
        let store = MemoryOrderStore::new();
        let mut a = order("a", 1, 1);
        ok(store.hold(&a, None).await);
        a.revision = 1;
        ok(store.save(&a, 0).await);
        assert!(matches!(
            store.save(&a, 0).await,
            Err(StoreError::Conflict(_))
        ));
        let never_held = order("z", 1, 1);
        assert!(matches!(
            store.save(&never_held, 0).await,
            Err(StoreError::Conflict(_))
        ));
    }

    #[tokio::test]
    async fn open_orders_come_oldest_first_up_to_the_limit() {
        let store = MemoryOrderStore::new();
        for (id, t) in [("c", 30), ("a", 10), ("b", 20)] {
            ok(store.hold(&order(id, 1, t), None).await);
        }
        let open = ok(store.open_orders(&nordic(), 2).await);
        assert_eq!(
            open.iter().map(|o| o.order_id.as_str()).collect::<Vec<_>>(),
            ["lb-a", "lb-b"]
        );
        let baltic = ok(OperatorId::new("baltic"));
        assert!(ok(store.open_orders(&baltic, 10).await).is_empty());
    }

    #[tokio::test]
    async fn orders_waiting_on_their_customer_come_after_the_held_ones() {
        let store = MemoryOrderStore::new();
        let mut asked = order("a", 1, 10);
        ok(store.hold(&asked, None).await);
        ok(store.hold(&order("b", 1, 20), None).await);
        ok(asked.start_booking(at(30)));
        ok(asked.answer(
            BookingAnswer::PriceChanged { price_cents: 9_999 },
            &OrderPolicy::default(),
            at(31),
        ));
        asked.revision = 1;
        ok(store.save(&asked, 0).await);
        let open = ok(store.open_orders(&nordic(), 10).await);
        assert_eq!(
            open.iter().map(|o| o.order_id.as_str()).collect::<Vec<_>>(),
            ["lb-b", "lb-a"]
        );
        assert_eq!(
            ok(store.open_orders(&nordic(), 1).await)[0].order_id,
            "lb-b"
        );
    }
}
