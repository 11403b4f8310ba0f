//! The off-sale listener: takes an operator off sale when its breaker opens
//! and puts it back on sale when the breaker goes half-open or closes, so the
//! cart stops selling what the operator cannot confirm.
//!
//! * this file: [`OffsaleListener`], its errors, and what it reports;
//! * `read`: one SQS record, a `Breaker State Changed` or poison
//!   ([`read_message`]);
//! * `batch`: the handler, one SQS batch: its changes grouped per operator,
//!   checked and settled newest first;
//! * `settle`: one change written on its sale record and the sale switch;
//! * [`sweep`]: the schedule's sweep, the sale status brought to the breakers;
//! * [`trust`]: which state changes the listener believes;
//! * [`selffault`]: changes held back when every operator fails at once;
//! * [`http`]: the legacy booking system's off-sale switch over HTTP;
//! * [`config`] and `startup`: the settings, and the listener built from
//!   them once per Lambda instance;
//! * `main.rs`: the Lambda function; `tests.rs`: the listener end to end on
//!   the in-memory adapters.
//!
//! Why it works this way: docs/offsale.md.

pub mod config;
pub mod http;
pub mod selffault;
pub mod sweep;
pub mod trust;

mod batch;
mod read;
mod settle;
mod startup;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::sqs::SqsBatchResponse;
use lambda_runtime::Diagnostic;
use lifeboat_core::invocation::NotABatch;
use lifeboat_core::ports::{
    Clock, EventPublisher, MetricsSink, Redelivery, SaleStatusStore, SaleSwitch,
};
use lifeboat_core::sale::{OnSaleAt, SaleChange, Settled, Wait, WritePolicy};

use crate::http::HttpSwitchError;

pub use crate::read::read_message;

/// Why a whole invocation failed (messages never fail the invocation).
#[derive(Debug, thiserror::Error)]
pub enum ListenerError {
    #[error("payload is not an SQS batch: {0}")]
    NotABatch(#[from] NotABatch),
    /// The batch response could not be written: the whole batch comes back.
    #[error("batch response not serialisable: {0}")]
    Response(String),
}

impl From<ListenerError> for Diagnostic {
    fn from(e: ListenerError) -> Self {
        let error_type = match e {
            ListenerError::NotABatch(_) => NotABatch::ERROR_TYPE,
            ListenerError::Response(_) => "Response",
        };
        Diagnostic {
            error_type: error_type.into(),
            error_message: e.to_string(),
        }
    }
}

/// The function refuses to start, with the reason.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error(transparent)]
    Aws(#[from] lifeboat_aws::ConfigError),
    #[error(transparent)]
    Http(#[from] HttpSwitchError),
    /// The secret named by `SALE_SWITCH_AUTH_PARAMETER` could not be read
    /// (the message names the parameter, never a value).
    #[error("{0}")]
    Secret(String),
}

/// Everything the listener needs, built once per Lambda instance.
pub struct OffsaleListener {
    pub store: Arc<dyn SaleStatusStore>,
    pub switch: Arc<dyn SaleSwitch>,
    pub redelivery: Arc<dyn Redelivery>,
    pub events: Arc<dyn EventPublisher>,
    pub clock: Arc<dyn Clock>,
    pub policy: WritePolicy,
    /// When an operator goes back on sale (`SALE_ON_SALE_AT`).
    pub on_sale_at: OnSaleAt,
    /// Sale changes and faults, as EMF lines.
    pub metrics: Arc<dyn MetricsSink>,
    /// Which changes are believed (see [`trust`]).
    pub trust: trust::Trust,
    /// When open operators are too many to be theirs (see [`selffault`]).
    pub self_fault: selffault::SelfFaultRule,
}

/// Why a message comes back.
#[derive(Debug, Clone, PartialEq)]
pub enum RetryReason {
    /// Its next attempt is not due, or another write is in flight.
    Wait(Wait),
    /// The store or the bus failed; tried again after the first gap.
    Failed(String),
}

/// What became of one message.
#[derive(Debug, Clone, PartialEq)]
pub enum Disposition {
    /// Nothing more to do: acknowledged (deleted from the queue).
    Settled(Settled),
    /// Reported as a batch item failure; back after `delay`.
    Retry { delay: Duration, why: RetryReason },
    /// Unreadable or not for this listener: reported once, acknowledged.
    Poison { reason: String },
    /// An off-sale change held back: most operators are open at once, more
    /// likely a fault of lifeboat's own than theirs (see [`selffault`]).
    /// Acknowledged; the sale sweep looks again every 5 minutes.
    HeldOnSale { open: usize, of: usize },
}

/// One message of a batch.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageReport {
    pub message_id: Option<String>,
    pub change: Option<SaleChange>,
    /// Writes made for it in this invocation: attempt number and error.
    pub attempts: Vec<(u32, Option<String>)>,
    pub disposition: Disposition,
}

/// What one batch did.
#[derive(Debug, Default)]
pub struct ListenerReport {
    pub response: SqsBatchResponse,
    pub messages: Vec<MessageReport>,
    /// Poison reports the bus did not take (the messages are dropped anyway).
    pub poison_not_reported: usize,
}
