//! lifeboat's AWS resources, created through the SDK with the schemas of
//! `template.yaml`: the Requests table (stream NEW_AND_OLD_IMAGES, TTL
//! `expires_at`), the Breaker table (`operator` + `item`, TTL `expires_at`),
//! the Cache table (`cache_key`, TTL `expires_at`), the Carts table
//! (`cart_id`, TTL `expires_at`), the SaleStatus table (`operator`, no TTL),
//! SQS queues, the event bus with an SQS queue catching its events, and the
//! two stream consumers with the event source mapping between them.
//!
//! Meant for moto (see the module above), where nothing but the API exists:
//! the functions have no code that runs and the queue needs no policy. What
//! already exists under a name is used as it is: tables, bus, role,
//! functions, queues and rules ([`create_stream_mapping`] always adds a
//! mapping). The adapter tests build on [`stack::Stack::create`] or the
//! single steps; the local suite runs template.yaml itself
//! ([`crate::suite::SuiteResources`]) and only adds its queues here.

use aws_sdk_dynamodb::error::DisplayErrorContext;

mod functions;
mod messaging;
pub mod stack;
mod tables;

pub use functions::{create_lambda_role, create_stream_mapping, create_stub_function};
pub use messaging::{
    Queue, QueueTarget, create_event_bus, create_queue, create_queue_target, create_queue_with,
    create_rule_to_queue,
};
pub use tables::{
    RequestsTable, create_breaker_table, create_cache_table, create_carts_table,
    create_operator_config_table, create_orders_table, create_requests_table,
    create_sale_status_table,
};

/// The TTL attribute of every table that has one.
pub const TTL_ATTRIBUTE: &str = "expires_at";

/// The event pattern of every lifeboat event.
pub const LIFEBOAT_EVENTS_PATTERN: &str = r#"{"source": ["lifeboat"]}"#;

/// The filter the template puts on the stream mapping: new request items only.
pub const REQUESTS_FILTER_PATTERN: &str =
    r#"{"eventName": ["INSERT"], "dynamodb": {"NewImage": {"record_type": {"S": ["request"]}}}}"#;

/// A call that set up a resource failed.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {message}")]
pub struct ResourceError {
    pub what: String,
    pub message: String,
}

impl ResourceError {
    fn new(what: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            what: what.into(),
            message: message.into(),
        }
    }

    fn from_sdk(what: impl Into<String>, e: impl std::error::Error) -> Self {
        Self::new(what, DisplayErrorContext(e).to_string())
    }
}
