//! The sale status's ports: the status table, the sale switch, and the
//! queue's redelivery.

use std::time::Duration;

use async_trait::async_trait;

use super::SaleRecord;
use crate::events::SaleStatus;
use crate::operator::OperatorId;
use crate::ports::StoreError;

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

/// The switch when the status table is the switch (`SALE_SWITCH=table`): the
/// conditional save of the applied status is the write, so nothing else is
/// written and nothing fails here.
#[derive(Debug, Clone, Copy, Default)]
pub struct StatusTableSwitch;

#[async_trait]
impl SaleSwitch for StatusTableSwitch {
    async fn set(&self, _: &OperatorId, _: SaleStatus, _: u64) -> Result<(), SaleSwitchError> {
        Ok(())
    }
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

/// Leaves every message to come back after the queue's own visibility
/// timeout. For queues the listener may not change visibility on: retries then
/// happen at that timeout's pace instead of the schedule's (never earlier than
/// the schedule, because the record says when the next attempt is due).
#[derive(Debug, Clone, Copy, Default)]
pub struct QueueTimeoutRedelivery;

#[async_trait]
impl Redelivery for QueueTimeoutRedelivery {
    async fn redeliver_after(&self, _: &MessageHandle, _: Duration) -> Result<(), RedeliveryError> {
        Ok(())
    }
}
