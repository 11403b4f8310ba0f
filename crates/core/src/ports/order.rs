//! The held orders' port: where [`crate::order`]'s orders are kept, with
//! the passengers held on each sailing.

use async_trait::async_trait;

use super::StoreError;
use crate::operator::OperatorId;
use crate::order::HeldOrder;

/// What [`OrderStore::hold`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// The order is written and its passengers counted on its sailing.
    Held,
    /// The cart's order is already held (a retried confirm): nothing
    /// written, nothing counted twice.
    AlreadyHeld,
    /// Its passengers would take the sailing past the cap: nothing written.
    Full { held: u32 },
}

/// The Orders table.
#[async_trait]
pub trait OrderStore: Send + Sync {
    /// Strongly consistent read of one order.
    async fn get(&self, order_id: &str) -> Result<Option<HeldOrder>, StoreError>;

    /// Write the new `order` and add its passengers to its sailing's held
    /// passengers, both or neither, if they then number at most `cap`
    /// (`None`: no cap, an order on request).
    async fn hold(&self, order: &HeldOrder, cap: Option<u32>) -> Result<Held, StoreError>;

    /// Write `order` if the stored revision is `expected_revision`, else
    /// `Conflict`. An order that reaches a final state gives its
    /// passengers back to its sailing in the same write.
    async fn save(&self, order: &HeldOrder, expected_revision: u64) -> Result<(), StoreError>;

    /// `operator`'s orders not yet final, by [`HeldOrder::open_at`]
    /// (oldest held first, those waiting on their customer by deadline),
    /// at most `limit`.
    async fn open_orders(
        &self,
        operator: &OperatorId,
        limit: usize,
    ) -> Result<Vec<HeldOrder>, StoreError>;

    /// The passengers of `operator`'s open orders on `sailing_id`.
    async fn held_passengers(
        &self,
        operator: &OperatorId,
        sailing_id: &str,
    ) -> Result<u32, StoreError>;
}
