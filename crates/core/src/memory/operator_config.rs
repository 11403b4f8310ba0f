//! The operators' configuration item in memory.

use std::sync::Mutex;

use async_trait::async_trait;

use crate::operator_config::OperatorConfigItem;
use crate::ports::{OperatorConfigStore, StoreError};

/// [`OperatorConfigStore`] in memory, with the same condition.
#[derive(Debug, Default)]
pub struct MemoryOperatorConfigStore {
    name: String,
    item: Mutex<Option<OperatorConfigItem>>,
}

impl MemoryOperatorConfigStore {
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            item: Mutex::new(None),
        }
    }

    /// A store holding `item`.
    pub fn holding(name: &str, item: OperatorConfigItem) -> Self {
        Self {
            name: name.to_owned(),
            item: Mutex::new(Some(item)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<OperatorConfigItem>> {
        self.item.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait]
impl OperatorConfigStore for MemoryOperatorConfigStore {
    async fn load(&self) -> Result<Option<OperatorConfigItem>, StoreError> {
        Ok(self.lock().clone())
    }

    async fn save(
        &self,
        item: &OperatorConfigItem,
        expected_revision: Option<u64>,
    ) -> Result<(), StoreError> {
        let mut stored = self.lock();
        let current = stored.as_ref().map(|i| i.revision);
        if current != expected_revision {
            return Err(StoreError::Conflict(format!(
                "operator config item is at revision {current:?}, not {expected_revision:?}"
            )));
        }
        *stored = Some(item.clone());
        Ok(())
    }

    fn name(&self) -> &str {
        &self.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "lifeboat-operator-config";

    use crate::operator_config::test_item as item;

    #[tokio::test]
    async fn the_memory_store_writes_only_over_the_revision_it_was_given() {
        let store = MemoryOperatorConfigStore::new(TABLE);
        assert_eq!(store.load().await.ok(), Some(None));
        let first = item(Some("nordic=https://n"), None);
        assert!(store.save(&first, Some(2)).await.is_err());
        assert!(store.save(&first, None).await.is_ok());
        let second = OperatorConfigItem {
            revision: 4,
            ..first.clone()
        };
        assert!(matches!(
            store.save(&second, None).await,
            Err(StoreError::Conflict(_))
        ));
        assert!(store.save(&second, Some(3)).await.is_ok());
        assert_eq!(store.load().await.ok().flatten(), Some(second));
    }
}
