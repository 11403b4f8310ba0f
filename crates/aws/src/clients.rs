//! SDK clients, built once per process, and the environment that names the
//! resources they work on.
//!
//! A function's `main` does, once:
//!
//! ```no_run
//! # async fn init() -> Result<(), lifeboat_aws::ConfigError> {
//! use lifeboat_aws::{Clients, Env};
//! let env = Env::from_process();
//! let clients = Clients::load().await;
//! let requests = clients.request_store(&env)?;
//! let window = clients.window_store(&env)?;
//! # Ok(()) }
//! ```
//!
//! and lends the adapters to every invocation. The default configuration chain
//! honours `AWS_ENDPOINT_URL` and `AWS_ENDPOINT_URL_<SERVICE>`, so the same
//! binaries talk to moto when those point at it.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::sync::{Arc, OnceLock};

use aws_config::{BehaviorVersion, SdkConfig};
use lifeboat_core::ports::{SecretStore, SecretsAt};
use lifeboat_core::watched::FailureCounter;

use crate::{
    DynamoBreakerStore, DynamoCacheStore, DynamoCartStore, DynamoOrderStore, DynamoRequestStore,
    DynamoSaleStatusStore, DynamoWindowStore, EventBridgePublisher, LambdaStreamRouter,
    RequestTables, SqsRedelivery,
};

/// The Requests table's name.
pub const REQUESTS_TABLE: &str = "REQUESTS_TABLE";
/// With a lane per operator: operator `o`'s requests are in `{prefix}{o}`.
pub const REQUESTS_TABLE_PREFIX: &str = "REQUESTS_TABLE_PREFIX";
/// The Breaker table's name (breakers and failure-window buckets).
pub const BREAKER_TABLE: &str = "BREAKER_TABLE";
/// The SSM path holding one SecureString per operator: the credential its
/// API wants (docs/configuration.md, "Operator credentials").
pub const OPERATOR_CREDENTIALS_PATH: &str = "OPERATOR_CREDENTIALS_PATH";
/// The Cache table's name (the operators' answers).
pub const CACHE_TABLE: &str = "CACHE_TABLE";
/// The Carts table's name.
pub const CARTS_TABLE: &str = "CARTS_TABLE";
/// The Orders table's name (held orders and the passengers held on each
/// sailing, docs/orders.md).
pub const ORDERS_TABLE: &str = "ORDERS_TABLE";
/// The SaleStatus table's name (one sale record per operator).
pub const SALE_STATUS_TABLE: &str = "SALE_STATUS_TABLE";
/// The off-sale listener's SQS queue URL, for `ChangeMessageVisibility`.
pub const OFFSALE_QUEUE_URL: &str = "OFFSALE_QUEUE_URL";
/// The EventBridge bus's name or ARN.
pub const EVENT_BUS_NAME: &str = "EVENT_BUS_NAME";
/// The UUID of the Requests stream's event source mapping.
pub const REQUESTS_MAPPING_UUID: &str = "REQUESTS_MAPPING_UUID";
/// The real consumer's function name or ARN.
pub const REAL_CONSUMER_FUNCTION: &str = "REAL_CONSUMER_FUNCTION";
/// The fallback consumer's function name or ARN.
pub const FALLBACK_CONSUMER_FUNCTION: &str = "FALLBACK_CONSUMER_FUNCTION";

/// A required setting is missing or unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("environment variable {0} is not set")]
    Missing(&'static str),
    #[error("environment variable {0} is empty")]
    Empty(&'static str),
    #[error("environment variable {0} is not valid UTF-8")]
    NotUnicode(&'static str),
}

/// A snapshot of the environment variables that configure lifeboat's adapters.
///
/// Its `Debug` lists the variables' names only: the environment holds the
/// session token and the sale switch's auth value, and a `{:?}` in a log line
/// must not print them.
#[derive(Clone, Default)]
pub struct Env {
    vars: BTreeMap<String, OsString>,
}

impl std::fmt::Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Env")
            .field("names", &self.vars.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Env {
    /// The process's environment, read once.
    pub fn from_process() -> Self {
        Self {
            vars: std::env::vars_os()
                .filter_map(|(k, v)| k.into_string().ok().map(|k| (k, v)))
                .collect(),
        }
    }

    /// An environment of the given variables only (tests, the local harness).
    pub fn from_pairs<K: Into<String>, V: Into<OsString>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        Self {
            vars: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }

    /// A variable that must be set, non-empty, to valid UTF-8.
    pub fn required(&self, name: &'static str) -> Result<&str, ConfigError> {
        let value = self.vars.get(name).ok_or(ConfigError::Missing(name))?;
        let value = value.to_str().ok_or(ConfigError::NotUnicode(name))?;
        if value.trim().is_empty() {
            return Err(ConfigError::Empty(name));
        }
        Ok(value)
    }

    /// A variable that may be unset: `None` when it is missing or empty.
    pub fn optional(&self, name: &'static str) -> Result<Option<&str>, ConfigError> {
        match self.required(name) {
            Ok(v) => Ok(Some(v.trim())),
            Err(ConfigError::Missing(_) | ConfigError::Empty(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub fn requests_table(&self) -> Result<&str, ConfigError> {
        self.required(REQUESTS_TABLE)
    }

    /// `REQUESTS_TABLE_PREFIX` (a table per operator) if set, else
    /// `REQUESTS_TABLE` (one table).
    pub fn request_tables(&self) -> Result<RequestTables, ConfigError> {
        match self.optional(REQUESTS_TABLE_PREFIX)? {
            Some(prefix) => Ok(RequestTables::PerOperator {
                prefix: prefix.to_owned(),
            }),
            None => Ok(RequestTables::One(self.requests_table()?.to_owned())),
        }
    }

    pub fn breaker_table(&self) -> Result<&str, ConfigError> {
        self.required(BREAKER_TABLE)
    }

    pub fn cache_table(&self) -> Result<&str, ConfigError> {
        self.required(CACHE_TABLE)
    }

    pub fn carts_table(&self) -> Result<&str, ConfigError> {
        self.required(CARTS_TABLE)
    }

    pub fn orders_table(&self) -> Result<&str, ConfigError> {
        self.required(ORDERS_TABLE)
    }

    pub fn sale_status_table(&self) -> Result<&str, ConfigError> {
        self.required(SALE_STATUS_TABLE)
    }

    pub fn offsale_queue_url(&self) -> Result<&str, ConfigError> {
        self.required(OFFSALE_QUEUE_URL)
    }

    pub fn event_bus_name(&self) -> Result<&str, ConfigError> {
        self.required(EVENT_BUS_NAME)
    }

    pub fn requests_mapping_uuid(&self) -> Result<&str, ConfigError> {
        self.required(REQUESTS_MAPPING_UUID)
    }

    pub fn real_consumer_function(&self) -> Result<&str, ConfigError> {
        self.required(REAL_CONSUMER_FUNCTION)
    }

    pub fn fallback_consumer_function(&self) -> Result<&str, ConfigError> {
        self.required(FALLBACK_CONSUMER_FUNCTION)
    }
}

/// The default AWS configuration: region, credentials and endpoints from the
/// environment, the Lambda execution role, or the shared config files.
/// For the operators' command, whose credentials may come from SSO, a
/// profile's role or `credential_process`.
pub async fn load_sdk_config() -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .http_client(crate::tls::https_client())
        .load()
        .await
}

/// A Lambda function's AWS configuration: credentials from
/// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN`, the
/// region from `AWS_REGION` (or `AWS_DEFAULT_REGION`), as the Lambda service
/// sets them for the execution role; endpoints, retries and timeouts from
/// the environment as [`load_sdk_config`] reads them. The function binaries
/// leave out the rest of the default chain (assume-role and web-identity
/// through STS, instance metadata, SSO): code they would never run on Lambda
/// (docs/binaries.md).
pub async fn load_function_config() -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .credentials_provider(
            aws_config::environment::EnvironmentVariableCredentialsProvider::new(),
        )
        .region(aws_config::environment::EnvironmentVariableRegionProvider::new())
        .http_client(crate::tls::https_client())
        .load()
        .await
}

/// The SDK clients lifeboat's adapters use, each built the first time an
/// adapter asks for it: a function's cold start builds only the clients it
/// calls (the consumers, search and cart never build the Lambda and SQS
/// clients). Cheap to clone: clones share the clients and their connection
/// pools.
#[derive(Debug, Clone)]
pub struct Clients(Arc<Lazy>);

#[derive(Debug)]
struct Lazy {
    config: SdkConfig,
    cloudwatch: OnceLock<aws_sdk_cloudwatch::Client>,
    dynamodb: OnceLock<aws_sdk_dynamodb::Client>,
    eventbridge: OnceLock<aws_sdk_eventbridge::Client>,
    lambda: OnceLock<aws_sdk_lambda::Client>,
    sqs: OnceLock<aws_sdk_sqs::Client>,
    ssm: OnceLock<aws_sdk_ssm::Client>,
}

impl Clients {
    /// Clients from the default configuration chain ([`load_sdk_config`]).
    pub async fn load() -> Self {
        Self::new(&load_sdk_config().await)
    }

    /// A Lambda function's clients ([`load_function_config`]).
    pub async fn load_in_function() -> Self {
        Self::new(&load_function_config().await)
    }

    pub fn new(config: &SdkConfig) -> Self {
        Self(Arc::new(Lazy {
            config: config.clone(),
            cloudwatch: OnceLock::new(),
            dynamodb: OnceLock::new(),
            eventbridge: OnceLock::new(),
            lambda: OnceLock::new(),
            sqs: OnceLock::new(),
            ssm: OnceLock::new(),
        }))
    }

    pub fn cloudwatch(&self) -> &aws_sdk_cloudwatch::Client {
        self.0
            .cloudwatch
            .get_or_init(|| aws_sdk_cloudwatch::Client::new(&self.0.config))
    }

    /// Who CloudWatch's contributor alarms have in ALARM.
    pub fn alarm_contributors(&self) -> crate::alarms::CloudWatchAlarmContributors {
        crate::alarms::CloudWatchAlarmContributors::new(self.cloudwatch().clone())
    }

    pub fn dynamodb(&self) -> &aws_sdk_dynamodb::Client {
        self.0
            .dynamodb
            .get_or_init(|| aws_sdk_dynamodb::Client::new(&self.0.config))
    }

    pub fn eventbridge(&self) -> &aws_sdk_eventbridge::Client {
        self.0
            .eventbridge
            .get_or_init(|| aws_sdk_eventbridge::Client::new(&self.0.config))
    }

    pub fn lambda(&self) -> &aws_sdk_lambda::Client {
        self.0
            .lambda
            .get_or_init(|| aws_sdk_lambda::Client::new(&self.0.config))
    }

    pub fn sqs(&self) -> &aws_sdk_sqs::Client {
        self.0
            .sqs
            .get_or_init(|| aws_sdk_sqs::Client::new(&self.0.config))
    }

    pub fn ssm(&self) -> &aws_sdk_ssm::Client {
        self.0
            .ssm
            .get_or_init(|| aws_sdk_ssm::Client::new(&self.0.config))
    }

    /// The secrets kept in SSM Parameter Store (operator credentials).
    pub fn secret_store(&self) -> crate::secrets::SsmSecretStore {
        crate::secrets::SsmSecretStore::new(self.ssm().clone())
    }

    /// Where the operators' credentials are kept, if anywhere: the SSM path
    /// named by `OPERATOR_CREDENTIALS_PATH`, and the store to read it from.
    pub fn operator_credentials<'a>(
        &self,
        env: &'a Env,
    ) -> Result<Option<SecretsAt<'a>>, ConfigError> {
        Ok(env.optional(OPERATOR_CREDENTIALS_PATH)?.map(|path| {
            let store: Arc<dyn SecretStore> = Arc::new(self.secret_store());
            (path, store)
        }))
    }

    /// The Requests tables: one per operator, `{REQUESTS_TABLE_PREFIX}{operator}`,
    /// when that variable is set, else the one named by `REQUESTS_TABLE`.
    pub fn request_store(&self, env: &Env) -> Result<DynamoRequestStore, ConfigError> {
        Ok(DynamoRequestStore::with_tables(
            self.dynamodb().clone(),
            env.request_tables()?,
        ))
    }

    /// The breakers in the table named by `BREAKER_TABLE`, the reads it
    /// makes on its own behalf counted in `failures`.
    pub fn breaker_store(
        &self,
        env: &Env,
        failures: FailureCounter,
    ) -> Result<DynamoBreakerStore, ConfigError> {
        Ok(
            DynamoBreakerStore::new(self.dynamodb().clone(), env.breaker_table()?)
                .counting_failures(failures),
        )
    }

    /// The failure-window buckets in the table named by `BREAKER_TABLE`.
    pub fn window_store(&self, env: &Env) -> Result<DynamoWindowStore, ConfigError> {
        Ok(DynamoWindowStore::new(
            self.dynamodb().clone(),
            env.breaker_table()?,
        ))
    }

    /// The answer cache in the table named by `CACHE_TABLE`.
    pub fn cache_store(&self, env: &Env) -> Result<DynamoCacheStore, ConfigError> {
        Ok(DynamoCacheStore::new(
            self.dynamodb().clone(),
            env.cache_table()?,
        ))
    }

    /// The carts in the table named by `CARTS_TABLE`.
    pub fn cart_store(&self, env: &Env) -> Result<DynamoCartStore, ConfigError> {
        Ok(DynamoCartStore::new(
            self.dynamodb().clone(),
            env.carts_table()?,
        ))
    }

    /// The held orders in the table named by `ORDERS_TABLE`.
    pub fn order_store(&self, env: &Env) -> Result<DynamoOrderStore, ConfigError> {
        Ok(DynamoOrderStore::new(
            self.dynamodb().clone(),
            env.orders_table()?,
        ))
    }

    /// The sale records in the table named by `SALE_STATUS_TABLE`.
    pub fn sale_status_store(&self, env: &Env) -> Result<DynamoSaleStatusStore, ConfigError> {
        Ok(DynamoSaleStatusStore::new(
            self.dynamodb().clone(),
            env.sale_status_table()?,
        ))
    }

    /// Redelivery of the off-sale queue's messages, the queue at
    /// `OFFSALE_QUEUE_URL`.
    pub fn sqs_redelivery(&self, env: &Env) -> Result<SqsRedelivery, ConfigError> {
        Ok(SqsRedelivery::new(
            self.sqs().clone(),
            env.offsale_queue_url()?,
        ))
    }

    /// The bus named by `EVENT_BUS_NAME`.
    /// The circuit switch's timers on the queue at `queue_url`.
    pub fn breaker_timers(&self, queue_url: &str) -> crate::sqs::SqsBreakerTimers {
        crate::sqs::SqsBreakerTimers::new(
            self.sqs().clone(),
            queue_url,
            Arc::new(lifeboat_core::SystemClock),
        )
    }

    pub fn publisher(&self, env: &Env) -> Result<EventBridgePublisher, ConfigError> {
        Ok(EventBridgePublisher::new(
            self.eventbridge().clone(),
            env.event_bus_name()?,
        ))
    }

    /// The mapping `REQUESTS_MAPPING_UUID` between `REAL_CONSUMER_FUNCTION`
    /// and `FALLBACK_CONSUMER_FUNCTION`.
    pub fn stream_router(&self, env: &Env) -> Result<LambdaStreamRouter, ConfigError> {
        Ok(LambdaStreamRouter::new(
            self.lambda().clone(),
            env.requests_mapping_uuid()?,
            env.real_consumer_function()?,
            env.fallback_consumer_function()?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_prints_names_not_values() {
        let env = Env::from_pairs([
            ("AWS_SESSION_TOKEN", "IQoJb3JpZ2luX2Vj"),
            ("SALE_SWITCH_AUTH_VALUE", "Bearer s3cret"),
        ]);
        let printed = format!("{env:?}");
        assert!(printed.contains("AWS_SESSION_TOKEN"), "{printed}");
        assert!(
            !printed.contains("IQoJ") && !printed.contains("s3cret"),
            "{printed}"
        );
    }

    #[test]
    fn required_variables_say_which_is_wrong() {
        let env = Env::from_pairs([(REQUESTS_TABLE, "Requests"), (BREAKER_TABLE, " ")]);
        assert_eq!(env.requests_table(), Ok("Requests"));
        assert_eq!(env.breaker_table(), Err(ConfigError::Empty(BREAKER_TABLE)));
        assert_eq!(
            env.event_bus_name(),
            Err(ConfigError::Missing(EVENT_BUS_NAME))
        );
        assert_eq!(
            ConfigError::Missing(EVENT_BUS_NAME).to_string(),
            "environment variable EVENT_BUS_NAME is not set"
        );
    }

    #[cfg(unix)]
    #[test]
    fn non_unicode_values_are_refused() {
        use std::os::unix::ffi::OsStringExt;
        let env = Env::from_pairs([(EVENT_BUS_NAME, OsString::from_vec(vec![0xff, 0xfe]))]);
        assert_eq!(
            env.event_bus_name(),
            Err(ConfigError::NotUnicode(EVENT_BUS_NAME))
        );
    }
}
