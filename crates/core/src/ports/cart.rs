//! The cart's port: where [`crate::cart`]'s carts are kept.

use async_trait::async_trait;

use super::StoreError;
use crate::cart::Cart;

/// The Carts table.
#[async_trait]
pub trait CartStore: Send + Sync {
    /// Strongly consistent read of one cart.
    async fn get(&self, cart_id: &str) -> Result<Option<Cart>, StoreError>;

    /// Write `cart` if the stored revision is `expected_revision` (`None`: a
    /// new cart). Otherwise `Conflict`.
    async fn save(&self, cart: &Cart, expected_revision: Option<u64>) -> Result<(), StoreError>;
}
