//! The operator commands' AWS wiring: adapters from flags and environment,
//! on clients from the default configuration chain (which honours
//! `AWS_ENDPOINT_URL`, so the commands work against moto too).

use lifeboat_aws::{Clients, DynamoBreakerStore, DynamoSaleStatusStore, Env, LambdaStreamRouter};
use lifeboat_core::ports::StreamRouter;
use lifeboat_core::sale::SaleStatusStore;

use crate::ops::config::{
    BREAKER_TABLE, FALLBACK_CONSUMER_FUNCTION, MissingSetting, REAL_CONSUMER_FUNCTION,
    REQUESTS_MAPPING_UUID, SALE_STATUS_TABLE,
};
use crate::ops::status::Sources;

/// Resource names given as flags; `None` falls back to the environment.
#[derive(Debug, Clone, Default)]
pub struct StatusFlags {
    pub breaker_table: Option<String>,
    pub sale_status_table: Option<String>,
    pub requests_mapping_uuid: Option<String>,
    pub real_consumer_function: Option<String>,
    pub fallback_consumer_function: Option<String>,
}

/// The resource names `lifeboat status` reads. Only the breaker table is
/// required; the others hold why they are not configured.
#[derive(Debug, Clone)]
pub struct StatusConfig {
    pub breaker_table: String,
    pub sale_status_table: Result<String, MissingSetting>,
    pub mapping: Result<MappingConfig, MissingSetting>,
}

/// The Requests stream's mapping and the two functions it may deliver to.
#[derive(Debug, Clone)]
pub struct MappingConfig {
    pub uuid: String,
    pub real_consumer: String,
    pub fallback_consumer: String,
}

impl StatusConfig {
    /// Names from `flags`, else from `env`; fails only without a breaker table.
    pub fn resolve(flags: &StatusFlags, env: &Env) -> Result<Self, MissingSetting> {
        let breaker_table = BREAKER_TABLE.resolve(flags.breaker_table.as_deref(), env)?;
        let sale_status_table = SALE_STATUS_TABLE.resolve(flags.sale_status_table.as_deref(), env);
        let mapping = (|| {
            Ok(MappingConfig {
                uuid: REQUESTS_MAPPING_UUID.resolve(flags.requests_mapping_uuid.as_deref(), env)?,
                real_consumer: REAL_CONSUMER_FUNCTION
                    .resolve(flags.real_consumer_function.as_deref(), env)?,
                fallback_consumer: FALLBACK_CONSUMER_FUNCTION
                    .resolve(flags.fallback_consumer_function.as_deref(), env)?,
            })
        })();
        Ok(Self {
            breaker_table,
            sale_status_table,
            mapping,
        })
    }

    /// The adapters on `clients`.
    pub fn adapters(&self, clients: &Clients) -> StatusAdapters {
        StatusAdapters {
            breakers: DynamoBreakerStore::new(clients.dynamodb.clone(), &self.breaker_table),
            sales: self
                .sale_status_table
                .as_ref()
                .map(|table| DynamoSaleStatusStore::new(clients.dynamodb.clone(), table))
                .map_err(Clone::clone),
            router: self
                .mapping
                .as_ref()
                .map(|m| {
                    LambdaStreamRouter::new(
                        clients.lambda.clone(),
                        &m.uuid,
                        &m.real_consumer,
                        &m.fallback_consumer,
                    )
                })
                .map_err(Clone::clone),
        }
    }
}

/// The adapters `lifeboat status` reads.
pub struct StatusAdapters {
    pub breakers: DynamoBreakerStore,
    pub sales: Result<DynamoSaleStatusStore, MissingSetting>,
    pub router: Result<LambdaStreamRouter, MissingSetting>,
}

impl StatusAdapters {
    pub fn sources(&self) -> Sources<'_> {
        Sources {
            breakers: &self.breakers,
            sales: self
                .sales
                .as_ref()
                .map(|s| s as &dyn SaleStatusStore)
                .map_err(ToString::to_string),
            router: self
                .router
                .as_ref()
                .map(|r| r as &dyn StreamRouter)
                .map_err(ToString::to_string),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_breaker_table_is_required() {
        let env = Env::from_pairs([
            ("BREAKER_TABLE", "Breakers"),
            ("REQUESTS_MAPPING_UUID", "u-1"),
        ]);
        let config = StatusConfig::resolve(&StatusFlags::default(), &env).unwrap();
        assert_eq!(config.breaker_table, "Breakers");
        assert!(
            config
                .sale_status_table
                .unwrap_err()
                .to_string()
                .contains("SALE_STATUS_TABLE")
        );
        assert!(
            config
                .mapping
                .unwrap_err()
                .to_string()
                .contains("REAL_CONSUMER_FUNCTION")
        );

        let err = StatusConfig::resolve(&StatusFlags::default(), &Env::default()).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("no breaker table: pass --breaker-table"),
            "{err}"
        );
        let flags = StatusFlags {
            breaker_table: Some("FromFlag".into()),
            ..StatusFlags::default()
        };
        assert_eq!(
            StatusConfig::resolve(&flags, &Env::default())
                .unwrap()
                .breaker_table,
            "FromFlag"
        );
    }
}
