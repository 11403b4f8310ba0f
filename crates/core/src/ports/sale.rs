//! The sale status's ports: the status table, the sale switch, and the
//! queue's redelivery. The record and its rules: [`crate::sale`].

use std::time::Duration;

use async_trait::async_trait;

use super::StoreError;
use crate::events::SaleStatus;
use crate::operator::OperatorId;
use crate::sale::SaleRecord;

/// The sale status table: one [`SaleRecord`] per operator.
#[async_trait]
pub trait SaleStatusStore: Send + Sync {
    /// Strongly consistent read of one operator's record.
    async fn load(&self, operator: &OperatorId) -> Result<Option<SaleRecord>, StoreError>;

    /// Write `record` if the stored revision is `expected_revision` (`None`:
    /// nothing stored yet). Otherwise `Conflict`.
    async fn save(
        &self,
        record: &SaleRecord,
        expected_revision: Option<u64>,
    ) -> Result<(), StoreError>;
}

/// Why the sale switch did not take a write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SaleSwitchError {
    /// It answered, but not with success.
    #[error("sale switch answered {status} {reason}")]
    Rejected { status: u16, reason: String },
    /// It could not be reached, or the exchange broke.
    #[error("sale switch unreachable: {0}")]
    Unreachable(String),
    #[error("sale switch did not answer within {} ms", .0.as_millis())]
    Timeout(Duration),
}

/// Where an operator is put on or off sale: the legacy booking system's
/// off-sale switch, or our own status table.
#[async_trait]
pub trait SaleSwitch: Send + Sync {
    /// Put `operator` on or off sale, as asked by breaker version `version`.
    /// Idempotent: the same write twice leaves the same status.
    async fn set(
        &self,
        operator: &OperatorId,
        status: SaleStatus,
        version: u64,
    ) -> Result<(), SaleSwitchError>;
}

/// A message of the listener's queue, as needed to have it delivered again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageHandle {
    /// The queue's ARN (the SQS record's `eventSourceARN`), when known.
    pub queue_arn: Option<String>,
    pub message_id: String,
    pub receipt_handle: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedeliveryError {
    /// The message was deleted, or its receipt handle expired.
    #[error("message {0} is no longer in flight")]
    NotInFlight(String),
    #[error("queue unavailable: {0}")]
    Unavailable(String),
}

/// Sets when a message reported as failed comes back (SQS
/// `ChangeMessageVisibility`).
#[async_trait]
pub trait Redelivery: Send + Sync {
    /// Deliver `message` again after `delay`, counted from now. Adapters that
    /// count in whole seconds round up, so a message never comes back early.
    async fn redeliver_after(
        &self,
        message: &MessageHandle,
        delay: Duration,
    ) -> Result<(), RedeliveryError>;
}
