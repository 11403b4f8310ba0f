//! The operator commands' AWS wiring: adapters from flags and environment,
//! on clients from the default configuration chain (which honours
//! `AWS_ENDPOINT_URL`, so the commands work against moto too).

use lifeboat_aws::{
    Clients, DynamoBreakerStore, DynamoSaleStatusStore, Env, LambdaStreamRouter, RequestTables,
};
use lifeboat_core::lane::Lanes;
use lifeboat_core::sale::SaleStatusStore;

use crate::ops::config::{
    BREAKER_TABLE, FALLBACK_CONSUMER_FUNCTION, MissingSetting, REAL_CONSUMER_FUNCTION,
    REQUESTS_MAPPING_UUID, REQUESTS_TABLE_PREFIX, SALE_STATUS_TABLE,
};
use crate::ops::status::{Sources, StreamSource};

/// Resource names given as flags; `None` falls back to the environment.
#[derive(Debug, Clone, Default)]
pub struct StatusFlags {
    pub breaker_table: Option<String>,
    pub sale_status_table: Option<String>,
    pub requests_table_prefix: Option<String>,
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

/// Where the Requests streams are and the two functions they may deliver to.
#[derive(Debug, Clone)]
pub struct MappingConfig {
    pub lanes: LaneConfig,
    pub real_consumer: String,
    pub fallback_consumer: String,
}

/// How requests flow: a lane per operator (the template's layout) or one
/// shared mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LaneConfig {
    /// Tables `{prefix}{operator}`, each with its own mapping, found among
    /// the consumers' mappings.
    PerOperator { prefix: String },
    /// One mapping for every operator.
    Shared { uuid: String },
}

impl StatusConfig {
    /// Names from `flags`, else from `env`; fails only without a breaker table.
    pub fn resolve(flags: &StatusFlags, env: &Env) -> Result<Self, MissingSetting> {
        let breaker_table = BREAKER_TABLE.resolve(flags.breaker_table.as_deref(), env)?;
        let sale_status_table = SALE_STATUS_TABLE.resolve(flags.sale_status_table.as_deref(), env);
        let mapping = (|| {
            let lanes =
                match REQUESTS_TABLE_PREFIX.resolve(flags.requests_table_prefix.as_deref(), env) {
                    Ok(prefix) => LaneConfig::PerOperator { prefix },
                    Err(no_prefix) => LaneConfig::Shared {
                        uuid: REQUESTS_MAPPING_UUID
                            .resolve(flags.requests_mapping_uuid.as_deref(), env)
                            .map_err(|_| no_prefix)?,
                    },
                };
            Ok(MappingConfig {
                lanes,
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

    /// The adapters on `clients`; with a lane per operator, the lanes are
    /// found among the consumers' mappings.
    pub async fn adapters(&self, clients: &Clients) -> StatusAdapters {
        let streams = match &self.mapping {
            Err(e) => Err(e.to_string()),
            Ok(m) => match &m.lanes {
                LaneConfig::Shared { uuid } => Ok(Streams::Shared(LambdaStreamRouter::new(
                    clients.lambda().clone(),
                    uuid,
                    &m.real_consumer,
                    &m.fallback_consumer,
                ))),
                LaneConfig::PerOperator { prefix } => lifeboat_aws::find_lanes(
                    clients.lambda(),
                    &RequestTables::PerOperator {
                        prefix: prefix.clone(),
                    },
                    &m.real_consumer,
                    &m.fallback_consumer,
                )
                .await
                .map(|lanes| Streams::PerOperator(Lanes::from_found(lanes)))
                .map_err(|e| e.to_string()),
            },
        };
        StatusAdapters {
            breakers: DynamoBreakerStore::new(clients.dynamodb().clone(), &self.breaker_table),
            sales: self
                .sale_status_table
                .as_ref()
                .map(|table| DynamoSaleStatusStore::new(clients.dynamodb().clone(), table))
                .map_err(Clone::clone),
            streams,
        }
    }
}

/// The Requests streams as found.
pub enum Streams {
    Shared(LambdaStreamRouter),
    PerOperator(Lanes),
}

/// The adapters `lifeboat status` reads.
pub struct StatusAdapters {
    pub breakers: DynamoBreakerStore,
    pub sales: Result<DynamoSaleStatusStore, MissingSetting>,
    pub streams: Result<Streams, String>,
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
            streams: match &self.streams {
                Ok(Streams::Shared(router)) => Ok(StreamSource::Shared(router)),
                Ok(Streams::PerOperator(lanes)) => Ok(StreamSource::PerOperator(lanes)),
                Err(why) => Err(why.clone()),
            },
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
        let lanes = Env::from_pairs([
            ("BREAKER_TABLE", "Breakers"),
            ("REQUESTS_TABLE_PREFIX", "lifeboat-requests-"),
            ("REQUESTS_MAPPING_UUID", "u-1"),
            ("REAL_CONSUMER_FUNCTION", "real"),
            ("FALLBACK_CONSUMER_FUNCTION", "fallback"),
        ]);
        let config = StatusConfig::resolve(&StatusFlags::default(), &lanes).unwrap();
        assert_eq!(
            config.mapping.unwrap().lanes,
            LaneConfig::PerOperator {
                prefix: "lifeboat-requests-".into()
            },
            "the template's lanes win over a shared mapping"
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
