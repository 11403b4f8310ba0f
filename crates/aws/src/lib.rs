//! lifeboat-aws: the AWS adapters of lifeboat-core's ports.
//!
//! | port | adapter | AWS API |
//! |---|---|---|
//! | [`RequestStore`](lifeboat_core::ports::RequestStore) | [`DynamoRequestStore`] | DynamoDB, Requests table |
//! | [`BreakerStore`](lifeboat_core::ports::BreakerStore) | [`DynamoBreakerStore`] | DynamoDB, Breaker table |
//! | [`WindowStore`](lifeboat_core::ports::WindowStore) | [`DynamoWindowStore`] | DynamoDB, Breaker table (bucket items) |
//! | [`CacheStore`](lifeboat_core::ports::CacheStore) | [`DynamoCacheStore`] | DynamoDB, Cache table |
//! | [`CartStore`](lifeboat_core::ports::CartStore) | [`DynamoCartStore`] | DynamoDB, Carts table |
//! | [`OrderStore`](lifeboat_core::ports::OrderStore) | [`DynamoOrderStore`] | DynamoDB, Orders table (orders and sailings' held passengers) |
//! | [`SaleStatusStore`](lifeboat_core::ports::SaleStatusStore) | [`DynamoSaleStatusStore`] | DynamoDB, SaleStatus table |
//! | [`Redelivery`](lifeboat_core::ports::Redelivery) | [`SqsRedelivery`] | SQS `ChangeMessageVisibility`, off-sale queue |
//! | [`EventPublisher`](lifeboat_core::ports::EventPublisher) | [`EventBridgePublisher`] | EventBridge `PutEvents` |
//! | [`StreamRouter`](lifeboat_core::ports::StreamRouter) | [`LambdaStreamRouter`] | Lambda event source mappings |
//! | [`SecretStore`](lifeboat_core::ports::SecretStore) | [`secrets::SsmSecretStore`] | SSM `GetParametersByPath`, operator credentials |
//! | [`AlarmContributors`](lifeboat_core::ports::AlarmContributors) | [`CloudWatchAlarmContributors`] | CloudWatch `DescribeAlarmContributors`, `OperatorsErrorsAlarm` |
//! | [`OperatorConfigStore`](lifeboat_core::ports::OperatorConfigStore) | [`DynamoOperatorConfigStore`] | DynamoDB, operator config table (one item) |
//!
//! Every adapter has the semantics of its in-memory twin in
//! [`lifeboat_core::memory`]: conditions that the memory adapters check under a
//! lock are DynamoDB condition expressions here, and every counter is a single
//! atomic `ADD`, never a read followed by a write.
//!
//! Clients are built once per process ([`Clients::load_in_function`] in a
//! function, [`Clients::load`] in the operators' command) from AWS
//! configuration that honours `AWS_ENDPOINT_URL` and
//! `AWS_ENDPOINT_URL_<SERVICE>`, so the same binaries talk to moto locally.
//! [`logs::init`] sets up a function's log lines; [`tls`] its one TLS stack.

pub mod alarms;
pub mod breaker;
pub mod cache;
pub mod carts;
pub mod clients;
mod error;
pub mod events;
#[cfg(test)]
mod fuzz_seeds;
pub mod item;
pub mod logs;
pub mod operator_config;
pub mod orders;
pub mod requests;
pub mod router;
pub mod sale;
pub mod secrets;
pub mod sqs;
pub mod tls;
pub mod window;

pub use alarms::CloudWatchAlarmContributors;
pub use breaker::DynamoBreakerStore;
pub use cache::DynamoCacheStore;
pub use carts::DynamoCartStore;
pub use clients::{Clients, ConfigError, Env, REQUESTS_TABLE_PREFIX};
pub use events::EventBridgePublisher;
pub use item::ItemError;
pub use operator_config::DynamoOperatorConfigStore;
pub use orders::DynamoOrderStore;
pub use requests::{
    DynamoRequestStore, RequestHints, RequestTables, request_from_item, request_hints,
    request_to_item,
};
pub use router::{
    LambdaStreamRouter, LaneDiscoveryError, discover_lanes, find_lanes, table_of_stream,
};
pub use sale::DynamoSaleStatusStore;
pub use sqs::{SqsBreakerTimers, SqsRedelivery};
pub use window::DynamoWindowStore;
