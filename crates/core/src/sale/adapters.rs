//! The sale status's adapters that need no I/O: the status table as the
//! switch, and leaving redelivery to the queue.

use std::time::Duration;

use async_trait::async_trait;

use crate::events::SaleStatus;
use crate::operator::OperatorId;
use crate::ports::{MessageHandle, Redelivery, RedeliveryError, SaleSwitch, SaleSwitchError};

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
