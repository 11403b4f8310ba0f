//! The operator commands' AWS wiring: adapters from flags and environment,
//! on clients from the default configuration chain (which honours
//! `AWS_ENDPOINT_URL`, so the commands work against moto too).

use lifeboat_aws::{
    Clients, DynamoBreakerStore, DynamoSaleStatusStore, Env, LambdaStreamRouter, RequestTables,
};
use lifeboat_core::lane::Lanes;
use lifeboat_core::ports::SaleStatusStore;

use crate::ops::config::{
    BREAKER_TABLE, FALLBACK_CONSUMER_FUNCTION, MissingSetting, REAL_CONSUMER_FUNCTION,
    REQUESTS_MAPPING_UUID, REQUESTS_TABLE_PREFIX, SALE_STATUS_TABLE,
};
use crate::ops::stack::Stack;
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

impl StatusFlags {
    /// Whether flags and `env` leave a name `status` reads unnamed, so
    /// that the stack is read.
    pub fn leave_unnamed(&self, env: &Env) -> bool {
        let lanes = REQUESTS_TABLE_PREFIX.is_given(self.requests_table_prefix.as_deref(), env)
            || REQUESTS_MAPPING_UUID.is_given(self.requests_mapping_uuid.as_deref(), env);
        !(lanes
            && BREAKER_TABLE.is_given(self.breaker_table.as_deref(), env)
            && SALE_STATUS_TABLE.is_given(self.sale_status_table.as_deref(), env)
            && REAL_CONSUMER_FUNCTION.is_given(self.real_consumer_function.as_deref(), env)
            && FALLBACK_CONSUMER_FUNCTION.is_given(self.fallback_consumer_function.as_deref(), env))
    }
}

impl StatusConfig {
    /// Names from `flags`, else from `env`, else from `stack`; fails only
    /// without a breaker table. A shared mapping named by a flag or the
    /// environment wins over the stack's lanes, as any name they give does.
    pub fn resolve(flags: &StatusFlags, env: &Env, stack: &Stack) -> Result<Self, MissingSetting> {
        let breaker_table = BREAKER_TABLE.resolve_in(flags.breaker_table.as_deref(), env, stack)?;
        let sale_status_table =
            SALE_STATUS_TABLE.resolve_in(flags.sale_status_table.as_deref(), env, stack);
        let mapping = (|| {
            let prefix = flags.requests_table_prefix.as_deref();
            let uuid = flags.requests_mapping_uuid.as_deref();
            let lanes = match REQUESTS_TABLE_PREFIX.resolve(prefix, env) {
                Ok(prefix) => LaneConfig::PerOperator { prefix },
                Err(_) if REQUESTS_MAPPING_UUID.is_given(uuid, env) => LaneConfig::Shared {
                    uuid: REQUESTS_MAPPING_UUID.resolve(uuid, env)?,
                },
                Err(_) => LaneConfig::PerOperator {
                    prefix: REQUESTS_TABLE_PREFIX.resolve_in(prefix, env, stack)?,
                },
            };
            Ok(MappingConfig {
                lanes,
                real_consumer: REAL_CONSUMER_FUNCTION.resolve_in(
                    flags.real_consumer_function.as_deref(),
                    env,
                    stack,
                )?,
                fallback_consumer: FALLBACK_CONSUMER_FUNCTION.resolve_in(
                    flags.fallback_consumer_function.as_deref(),
                    env,
                    stack,
                )?,
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
    use crate::ops::stack::StackDescription;

    fn unnamed() -> Stack {
        Stack::Unnamed {
            why: "no --stack given and no samconfig.toml in the current directory".into(),
        }
    }

    #[test]
    fn only_the_breaker_table_is_required() {
        let env = Env::from_pairs([
            ("BREAKER_TABLE", "Breakers"),
            ("REQUESTS_MAPPING_UUID", "u-1"),
        ]);
        let config = StatusConfig::resolve(&StatusFlags::default(), &env, &unnamed()).unwrap();
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
            ("REQUESTS_TABLE_PREFIX", "lifeboat.requests."),
            ("REQUESTS_MAPPING_UUID", "u-1"),
            ("REAL_CONSUMER_FUNCTION", "real"),
            ("FALLBACK_CONSUMER_FUNCTION", "fallback"),
        ]);
        let config = StatusConfig::resolve(&StatusFlags::default(), &lanes, &unnamed()).unwrap();
        assert_eq!(
            config.mapping.unwrap().lanes,
            LaneConfig::PerOperator {
                prefix: "lifeboat.requests.".into()
            },
            "the template's lanes win over a shared mapping"
        );

        let err = StatusConfig::resolve(&StatusFlags::default(), &Env::default(), &unnamed())
            .unwrap_err();
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
            StatusConfig::resolve(&flags, &Env::default(), &unnamed())
                .unwrap()
                .breaker_table,
            "FromFlag"
        );
    }

    const REAL_ALIAS: &str =
        "arn:aws:lambda:us-east-1:123456789012:function:lifeboat-RealConsumerFunction-1:live";
    const FALLBACK_ALIAS: &str =
        "arn:aws:lambda:us-east-1:123456789012:function:lifeboat-FallbackConsumerFunction-1:live";

    /// The stack of the template: its tables, the consumers' aliases and
    /// the lanes' prefix.
    fn deployed() -> Stack {
        Stack::Read(StackDescription {
            name: "lifeboat".into(),
            status: "UPDATE_COMPLETE".into(),
            resources: [
                ("BreakerTable", "lifeboat-BreakerTable-1"),
                ("SaleStatusTable", "lifeboat-SaleStatusTable-1"),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .into(),
            outputs: [
                ("RequestsTablePrefix", "lifeboat.requests."),
                ("RealConsumerAlias", REAL_ALIAS),
                ("FallbackConsumerAlias", FALLBACK_ALIAS),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .into(),
            parameters: Default::default(),
        })
    }

    #[test]
    fn the_stack_names_what_flags_and_variables_leave_unnamed() {
        let flags = StatusFlags::default();
        assert!(flags.leave_unnamed(&Env::default()));
        let config = StatusConfig::resolve(&flags, &Env::default(), &deployed()).unwrap();
        assert_eq!(config.breaker_table, "lifeboat-BreakerTable-1");
        assert_eq!(
            config.sale_status_table.unwrap(),
            "lifeboat-SaleStatusTable-1"
        );
        let mapping = config.mapping.unwrap();
        assert_eq!(
            mapping.lanes,
            LaneConfig::PerOperator {
                prefix: "lifeboat.requests.".into()
            }
        );
        assert_eq!(mapping.real_consumer, REAL_ALIAS);
        assert_eq!(mapping.fallback_consumer, FALLBACK_ALIAS);

        // A flag, then a variable, wins over the stack, name by name.
        let flags = StatusFlags {
            breaker_table: Some("FromFlag".into()),
            ..StatusFlags::default()
        };
        let env = Env::from_pairs([
            ("BREAKER_TABLE", "FromEnv"),
            ("SALE_STATUS_TABLE", "SaleFromEnv"),
        ]);
        let config = StatusConfig::resolve(&flags, &env, &deployed()).unwrap();
        assert_eq!(config.breaker_table, "FromFlag");
        assert_eq!(config.sale_status_table.unwrap(), "SaleFromEnv");
        assert_eq!(config.mapping.unwrap().real_consumer, REAL_ALIAS);

        // A shared mapping the environment names wins over the stack's lanes.
        let env = Env::from_pairs([("REQUESTS_MAPPING_UUID", "u-1")]);
        let config = StatusConfig::resolve(&StatusFlags::default(), &env, &deployed()).unwrap();
        assert_eq!(
            config.mapping.unwrap().lanes,
            LaneConfig::Shared { uuid: "u-1".into() }
        );

        // Everything named: the stack is not needed.
        let env = Env::from_pairs([
            ("BREAKER_TABLE", "b"),
            ("SALE_STATUS_TABLE", "s"),
            ("REQUESTS_TABLE_PREFIX", "p-"),
            ("REAL_CONSUMER_FUNCTION", "r"),
            ("FALLBACK_CONSUMER_FUNCTION", "f"),
        ]);
        assert!(!StatusFlags::default().leave_unnamed(&env));

        // Without a stack, a missing breaker table says how to name one.
        let err = StatusConfig::resolve(&StatusFlags::default(), &Env::default(), &unnamed())
            .unwrap_err()
            .to_string();
        assert!(err.contains("or name the stack with --stack"), "{err}");
    }
}
