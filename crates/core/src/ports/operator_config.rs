//! Where the operators' configuration item ([`crate::operator_config`]) is
//! kept.

use async_trait::async_trait;

use super::StoreError;
use crate::operator_config::OperatorConfigItem;

/// Where the one configuration item is kept.
#[async_trait]
pub trait OperatorConfigStore: Send + Sync {
    /// The item, strongly consistent; `None` when there is none. An item
    /// whose attributes are not of their types is [`StoreError::Corrupt`],
    /// naming the attribute.
    async fn load(&self) -> Result<Option<OperatorConfigItem>, StoreError>;

    /// Write `item` whole, only over the revision that was loaded
    /// (`expected_revision`; `None`: only where there is no item), else
    /// [`StoreError::Conflict`].
    async fn save(
        &self,
        item: &OperatorConfigItem,
        expected_revision: Option<u64>,
    ) -> Result<(), StoreError>;

    /// The store's name in messages: the table's name.
    fn name(&self) -> &str;
}
