//! The operator config table on DynamoDB: one item, `name = "operators"`,
//! holding every operator's endpoints and settings
//! ([`lifeboat_core::operator_config`] has its attributes), and what a
//! function starts with ([`load`]).
//!
//! A function reads the item with one strongly consistent `GetItem` when an
//! instance starts, never again: a changed item is in force in the instances
//! started after it was written, and `sam deploy` with a new
//! `OperatorConfigRevision` starts new ones everywhere. One `GetItem` per
//! cold start, rather than SSM `GetParametersByPath` paging through a
//! parameter per operator: SSM's default throughput (40 requests/s per
//! account) would throttle hundreds of cold starts at once, each paging
//! through 400 parameters, while a table on demand takes thousands of reads
//! a second. A write is one `PutItem` conditional on the revision read
//! (`lifeboat config put`).

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use lifeboat_core::operator_config::{
    ITEM_NAME, OPERATOR_CONFIG_REVISION, OPERATOR_CONFIG_TABLE, OperatorConfig,
    OperatorConfigError, OperatorConfigItem,
};
use lifeboat_core::ports::{OperatorConfigStore, StoreError};
use lifeboat_core::settings::OPERATOR_SETTINGS;

use crate::clients::{Clients, ConfigError, Env};
use crate::error::describe;

/// [`OperatorConfigStore`] on the operator config table.
#[derive(Debug, Clone)]
pub struct DynamoOperatorConfigStore {
    client: aws_sdk_dynamodb::Client,
    table: String,
}

impl DynamoOperatorConfigStore {
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

/// The item's attributes, each checked for its type (the store's `load`,
/// when a function starts): an error names the attribute at fault.
pub fn config_from_item(
    item: &HashMap<String, AttributeValue>,
) -> Result<OperatorConfigItem, (&'static str, String)> {
    let text = |attribute: &'static str| match item.get(attribute) {
        None | Some(AttributeValue::Null(_)) => Ok(None),
        Some(AttributeValue::S(s)) => Ok(Some(s.clone())),
        Some(other) => Err((
            attribute,
            format!("is not a string (S) but {}", type_name(other)),
        )),
    };
    let revision = match item.get("revision") {
        None => 0,
        Some(AttributeValue::N(n)) => n
            .parse::<u64>()
            .map_err(|_| ("revision", format!("{n:?} is not a whole number from 0 up")))?,
        Some(other) => {
            return Err((
                "revision",
                format!("is not a number (N) but {}", type_name(other)),
            ));
        }
    };
    let updated_at = text("updated_at")?
        .map(|at| {
            DateTime::parse_from_rfc3339(&at)
                .map(|at| at.with_timezone(&Utc))
                .map_err(|e| ("updated_at", format!("{at:?} is not RFC 3339: {e}")))
        })
        .transpose()?;
    Ok(OperatorConfigItem {
        endpoints: text("endpoints")?,
        settings: text("settings")?,
        revision,
        updated_at,
    })
}

/// The item `save` writes for `item`; [`config_from_item`] reads it back as
/// the same item.
pub fn config_to_item(item: &OperatorConfigItem) -> HashMap<String, AttributeValue> {
    let mut attributes = HashMap::from([
        ("name".to_owned(), AttributeValue::S(ITEM_NAME.to_owned())),
        (
            "revision".to_owned(),
            AttributeValue::N(item.revision.to_string()),
        ),
    ]);
    if let Some(endpoints) = &item.endpoints {
        attributes.insert("endpoints".into(), AttributeValue::S(endpoints.clone()));
    }
    if let Some(settings) = &item.settings {
        attributes.insert("settings".into(), AttributeValue::S(settings.clone()));
    }
    if let Some(at) = &item.updated_at {
        attributes.insert("updated_at".into(), AttributeValue::S(at.to_rfc3339()));
    }
    attributes
}

fn type_name(value: &AttributeValue) -> &'static str {
    match value {
        AttributeValue::B(_) => "binary (B)",
        AttributeValue::Bool(_) => "a boolean (BOOL)",
        AttributeValue::Bs(_) => "a binary set (BS)",
        AttributeValue::L(_) => "a list (L)",
        AttributeValue::M(_) => "a map (M)",
        AttributeValue::N(_) => "a number (N)",
        AttributeValue::Ns(_) => "a number set (NS)",
        AttributeValue::Null(_) => "null (NULL)",
        AttributeValue::S(_) => "a string (S)",
        AttributeValue::Ss(_) => "a string set (SS)",
        _ => "another type",
    }
}

#[async_trait]
impl OperatorConfigStore for DynamoOperatorConfigStore {
    async fn load(&self) -> Result<Option<OperatorConfigItem>, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("name", AttributeValue::S(ITEM_NAME.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| {
                StoreError::Unavailable(describe(&format!("GetItem {}", self.table), &e))
            })?;
        output
            .item
            .map(|item| {
                config_from_item(&item).map_err(|(attribute, reason)| {
                    StoreError::Corrupt(format!(
                        "item name={ITEM_NAME:?}, attribute {attribute}: {reason}"
                    ))
                })
            })
            .transpose()
    }

    async fn save(
        &self,
        item: &OperatorConfigItem,
        expected_revision: Option<u64>,
    ) -> Result<(), StoreError> {
        let attributes = config_to_item(item);
        let request = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(attributes));
        let request = crate::item::on_revision(request, "name", expected_revision);
        match request.send().await {
            Ok(_) => Ok(()),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
            {
                Err(StoreError::Conflict(format!(
                    "the operator config item in {} is not at revision {expected_revision:?}: someone else wrote it meanwhile",
                    self.table
                )))
            }
            Err(e) => {
                let text = describe(&format!("PutItem {}", self.table), &e);
                if e.as_service_error().is_some_and(|s| {
                    aws_sdk_dynamodb::error::ProvideErrorMetadata::code(s)
                        == Some("ValidationException")
                }) {
                    Err(StoreError::Rejected(text))
                } else {
                    Err(StoreError::Unavailable(text))
                }
            }
        }
    }

    fn name(&self) -> &str {
        &self.table
    }
}

impl Clients {
    /// The operator config table named by `OPERATOR_CONFIG_TABLE`, if set.
    pub fn operator_config_store(
        &self,
        env: &Env,
    ) -> Result<Option<DynamoOperatorConfigStore>, ConfigError> {
        Ok(env
            .optional(OPERATOR_CONFIG_TABLE)?
            .map(|table| DynamoOperatorConfigStore::new(self.dynamodb().clone(), table)))
    }
}

fn environment(e: ConfigError) -> OperatorConfigError {
    OperatorConfigError::Environment(e.to_string())
}

/// What a function starts with: the operator config table's item
/// (`OPERATOR_CONFIG_TABLE`) where it has endpoints or settings, the
/// environment's `OPERATOR_ENDPOINTS` and `OPERATOR_SETTINGS` otherwise.
/// Logs where each came from and `OPERATOR_CONFIG_REVISION`, and warns
/// (once: this runs once per instance) when the item replaces a value the
/// environment also has.
pub async fn load(env: &Env, clients: &Clients) -> Result<OperatorConfig, OperatorConfigError> {
    let store = clients.operator_config_store(env).map_err(environment)?;
    load_from(
        env,
        store
            .as_ref()
            .map(|store| store as &dyn OperatorConfigStore),
    )
    .await
}

/// [`load`] from `store` (`None`: no table, the environment alone).
pub async fn load_from(
    env: &Env,
    store: Option<&dyn OperatorConfigStore>,
) -> Result<OperatorConfig, OperatorConfigError> {
    let endpoints = env
        .optional(lifeboat_core::operator_config::OPERATOR_ENDPOINTS)
        .map_err(environment)?;
    let settings = env.optional(OPERATOR_SETTINGS).map_err(environment)?;
    let deployed = env
        .optional(OPERATOR_CONFIG_REVISION)
        .map_err(environment)?;
    let config = match store {
        None => OperatorConfig::from_environment(endpoints, settings),
        Some(store) => {
            let item = store
                .load()
                .await
                .map_err(|source| OperatorConfigError::Unreadable {
                    table: store.name().to_owned(),
                    source,
                })?;
            OperatorConfig::resolve(endpoints, settings, store.name(), item)
        }
    };
    for var in &config.overridden {
        tracing::warn!(
            variable = var,
            table = config.table.as_deref().unwrap_or(""),
            "{var} has a value but the operator config table's item has one too: the item's is used"
        );
    }
    tracing::info!(
        table = config.table.as_deref().unwrap_or(""),
        item_revision = config.revision,
        deployed_revision = deployed.unwrap_or(""),
        endpoints_from = %config.endpoints_from,
        settings_from = %config.settings_from,
        "operator configuration read"
    );
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lifeboat_core::memory::MemoryOperatorConfigStore;
    use lifeboat_core::operator_config::Source;

    #[test]
    fn attributes_of_the_wrong_type_are_named() {
        let good = HashMap::from([
            ("name".to_owned(), AttributeValue::S(ITEM_NAME.into())),
            (
                "endpoints".to_owned(),
                AttributeValue::S("a=https://a".into()),
            ),
            ("revision".to_owned(), AttributeValue::N("7".into())),
            (
                "updated_at".to_owned(),
                AttributeValue::S("2026-12-05T10:00:00Z".into()),
            ),
        ]);
        let item = config_from_item(&good).ok();
        assert_eq!(item.as_ref().map(|i| i.revision), Some(7));
        assert_eq!(item.and_then(|i| i.settings), None);
        for (attribute, value) in [
            ("settings", AttributeValue::M(HashMap::new())),
            ("endpoints", AttributeValue::N("1".into())),
            ("revision", AttributeValue::S("1".into())),
            ("revision", AttributeValue::N("-1".into())),
            ("updated_at", AttributeValue::S("yesterday".into())),
        ] {
            let mut bad = good.clone();
            bad.insert(attribute.to_owned(), value);
            assert_eq!(
                config_from_item(&bad).err().map(|(a, _)| a),
                Some(attribute)
            );
        }
    }

    #[tokio::test]
    async fn the_item_is_read_when_the_table_is_named() {
        let env = Env::from_pairs([
            ("OPERATOR_ENDPOINTS", "nordic=https://n"),
            ("OPERATOR_SETTINGS", "{}"),
        ]);
        let store = MemoryOperatorConfigStore::holding(
            "config",
            OperatorConfigItem {
                endpoints: Some("baltic=https://b".into()),
                settings: None,
                revision: 2,
                updated_at: None,
            },
        );
        let config = load_from(&env, Some(&store)).await.ok();
        let config = config.as_ref();
        assert_eq!(
            config.and_then(|c| c.endpoints.as_deref()),
            Some("baltic=https://b")
        );
        assert_eq!(
            config.map(|c| &c.settings_from),
            Some(&Source::Environment(OPERATOR_SETTINGS))
        );
        assert_eq!(
            config.map(|c| c.overridden.clone()),
            Some(vec!["OPERATOR_ENDPOINTS"])
        );
        let alone = load_from(&env, None).await.ok();
        assert_eq!(
            alone.and_then(|c| c.endpoints),
            Some("nordic=https://n".to_owned())
        );
    }
}
