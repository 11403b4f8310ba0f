//! In-memory adapters of the sale status's ports: the status table, the
//! legacy sale switch (outages included) and the listener's SQS queue.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::events::SaleStatus;
use crate::operator::OperatorId;
use crate::ports::{
    Clock, MessageHandle, Redelivery, RedeliveryError, SaleStatusStore, SaleSwitch,
    SaleSwitchError, StoreError,
};
use crate::sale::{SaleRecord, after};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section below writes whole values: a poisoned lock still
    // guards consistent data.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The sale status table in memory.
#[derive(Debug, Default)]
pub struct MemorySaleStatusStore {
    records: Mutex<BTreeMap<OperatorId, SaleRecord>>,
}

impl MemorySaleStatusStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Every stored record.
    pub fn all(&self) -> Vec<SaleRecord> {
        lock(&self.records).values().cloned().collect()
    }
}

#[async_trait]
impl SaleStatusStore for MemorySaleStatusStore {
    async fn load(&self, operator: &OperatorId) -> Result<Option<SaleRecord>, StoreError> {
        Ok(lock(&self.records).get(operator).cloned())
    }

    async fn save(
        &self,
        record: &SaleRecord,
        expected_revision: Option<u64>,
    ) -> Result<(), StoreError> {
        let mut records = lock(&self.records);
        let stored = records.get(&record.operator).map(|r| r.revision);
        if stored != expected_revision {
            return Err(StoreError::Conflict(format!(
                "sale status of {} is at revision {stored:?}, expected {expected_revision:?}",
                record.operator
            )));
        }
        records.insert(record.operator.clone(), record.clone());
        Ok(())
    }
}

/// What became of one write to a [`MemorySaleSwitch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SwitchOutcome {
    Accepted,
    Failed(String),
    /// The write never answered.
    Hung,
}

/// One write to a [`MemorySaleSwitch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwitchWrite {
    pub operator: OperatorId,
    pub status: SaleStatus,
    pub version: u64,
    pub at: DateTime<Utc>,
    pub outcome: SwitchOutcome,
}

#[derive(Debug, Default)]
struct SwitchState {
    statuses: BTreeMap<OperatorId, SaleStatus>,
    failing: u32,
    hanging: u32,
    log: Vec<SwitchWrite>,
}

/// The legacy booking system's off-sale switch in memory: the last write
/// wins, whatever its version, as in the legacy system. An outage is modelled
/// by failing ([`fail_next`](Self::fail_next)) or hanging
/// ([`hang_next`](Self::hang_next)) the next writes.
pub struct MemorySaleSwitch {
    clock: Arc<dyn Clock>,
    state: Mutex<SwitchState>,
}

impl std::fmt::Debug for MemorySaleSwitch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemorySaleSwitch")
            .field("state", &*lock(&self.state))
            .finish_non_exhaustive()
    }
}

impl MemorySaleSwitch {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            state: Mutex::default(),
        }
    }

    /// Fail the next `n` writes with `503 Service Unavailable`.
    pub fn fail_next(&self, n: u32) {
        lock(&self.state).failing = n;
    }

    /// Leave the next `n` writes without an answer, forever.
    pub fn hang_next(&self, n: u32) {
        lock(&self.state).hanging = n;
    }

    /// The status of `operator`: on sale until written otherwise.
    pub fn status(&self, operator: &OperatorId) -> SaleStatus {
        lock(&self.state)
            .statuses
            .get(operator)
            .copied()
            .unwrap_or(SaleStatus::OnSale)
    }

    /// Every write so far, in order.
    pub fn writes(&self) -> Vec<SwitchWrite> {
        lock(&self.state).log.clone()
    }
}

#[async_trait]
impl SaleSwitch for MemorySaleSwitch {
    async fn set(
        &self,
        operator: &OperatorId,
        status: SaleStatus,
        version: u64,
    ) -> Result<(), SaleSwitchError> {
        let outcome = {
            let mut state = lock(&self.state);
            let outcome = if state.hanging > 0 {
                state.hanging -= 1;
                SwitchOutcome::Hung
            } else if state.failing > 0 {
                state.failing -= 1;
                SwitchOutcome::Failed("503 Service Unavailable".into())
            } else {
                state.statuses.insert(operator.clone(), status);
                SwitchOutcome::Accepted
            };
            state.log.push(SwitchWrite {
                operator: operator.clone(),
                status,
                version,
                at: self.clock.now(),
                outcome: outcome.clone(),
            });
            outcome
        };
        match outcome {
            SwitchOutcome::Accepted => Ok(()),
            SwitchOutcome::Failed(_) => Err(SaleSwitchError::Rejected {
                status: 503,
                reason: "Service Unavailable".into(),
            }),
            SwitchOutcome::Hung => std::future::pending().await,
        }
    }
}

/// A message received from a [`MemoryQueue`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedMessage {
    pub message_id: String,
    pub receipt_handle: String,
    pub body: String,
    /// How many times it was received, this time included.
    pub receive_count: u32,
    pub sent_at: DateTime<Utc>,
}

#[derive(Debug)]
struct Queued {
    message_id: String,
    body: String,
    sent_at: DateTime<Utc>,
    visible_at: DateTime<Utc>,
    receive_count: u32,
    receipt: Option<String>,
}

#[derive(Debug, Default)]
struct QueueState {
    sent: u64,
    messages: BTreeMap<u64, Queued>,
}

/// The listener's SQS queue in memory: a received message is hidden for the
/// visibility timeout and comes back unless deleted; its visibility can be
/// changed while it is in flight ([`Redelivery`]).
pub struct MemoryQueue {
    clock: Arc<dyn Clock>,
    visibility_timeout: Duration,
    state: Mutex<QueueState>,
}

impl std::fmt::Debug for MemoryQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryQueue")
            .field("visibility_timeout", &self.visibility_timeout)
            .field("state", &*lock(&self.state))
            .finish_non_exhaustive()
    }
}

impl MemoryQueue {
    /// The ARN the queue's messages say they come from.
    pub const ARN: &str = "arn:aws:sqs:us-east-1:123456789012:lifeboat-offsale-memory";

    pub fn new(clock: Arc<dyn Clock>, visibility_timeout: Duration) -> Self {
        Self {
            clock,
            visibility_timeout,
            state: Mutex::default(),
        }
    }

    /// Enqueue `body`, visible at once; its message id.
    pub fn send(&self, body: impl Into<String>) -> String {
        let now = self.clock.now();
        let mut state = lock(&self.state);
        state.sent += 1;
        let message_id = format!("msg-{}", state.sent);
        let key = state.sent;
        state.messages.insert(
            key,
            Queued {
                message_id: message_id.clone(),
                body: body.into(),
                sent_at: now,
                visible_at: now,
                receive_count: 0,
                receipt: None,
            },
        );
        message_id
    }

    /// Up to `max` visible messages, oldest first, each hidden for the
    /// visibility timeout.
    pub fn receive(&self, max: usize) -> Vec<ReceivedMessage> {
        let now = self.clock.now();
        let hidden_until = after(now, self.visibility_timeout);
        let mut state = lock(&self.state);
        state
            .messages
            .values_mut()
            .filter(|m| m.visible_at <= now)
            .take(max)
            .map(|m| {
                m.receive_count += 1;
                m.visible_at = hidden_until;
                let receipt = format!("{}#{}", m.message_id, m.receive_count);
                m.receipt = Some(receipt.clone());
                ReceivedMessage {
                    message_id: m.message_id.clone(),
                    receipt_handle: receipt,
                    body: m.body.clone(),
                    receive_count: m.receive_count,
                    sent_at: m.sent_at,
                }
            })
            .collect()
    }

    /// Delete the message received with `receipt_handle`; false if it is gone
    /// or was received again since.
    pub fn delete(&self, receipt_handle: &str) -> bool {
        let mut state = lock(&self.state);
        let key = state
            .messages
            .iter()
            .find(|(_, m)| m.receipt.as_deref() == Some(receipt_handle))
            .map(|(k, _)| *k);
        key.is_some_and(|k| state.messages.remove(&k).is_some())
    }

    /// When the next message becomes visible, if any is queued.
    pub fn next_visible_at(&self) -> Option<DateTime<Utc>> {
        lock(&self.state)
            .messages
            .values()
            .map(|m| m.visible_at)
            .min()
    }

    /// Messages queued, visible or not.
    pub fn len(&self) -> usize {
        lock(&self.state).messages.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[async_trait]
impl Redelivery for MemoryQueue {
    async fn redeliver_after(
        &self,
        message: &MessageHandle,
        delay: Duration,
    ) -> Result<(), RedeliveryError> {
        let visible_at = after(self.clock.now(), delay);
        let mut state = lock(&self.state);
        match state
            .messages
            .values_mut()
            .find(|m| m.receipt.as_deref() == Some(message.receipt_handle.as_str()))
        {
            Some(m) => {
                m.visible_at = visible_at;
                Ok(())
            }
            None => Err(RedeliveryError::NotInFlight(message.message_id.clone())),
        }
    }
}
